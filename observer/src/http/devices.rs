//! `GET /devices`: the block devices, the filesystems mounted on them and their log ranges.
//!
//! ```json
//! {"devices": [{"device": "loop3", "dev": "7:3", "sectors": 1433600, "write_cache": "write back",
//!               "tracking": "full",
//!               "partitions": [{"name": "loop3p1", "dev": "259:0", "start": 2048, "sectors": 65536}],
//!               "filesystems": [{"fstype": "xfs", "mountpoint": "/mnt", "device": "loop3p1", "role": "data+log",
//!                                "log_status": "found"}],
//!               "log_ranges": [{"start": 34816, "end": 55296, "sectors": 20480}]}],
//!  "filesystems": [ ...fslog::Filesystem... ],
//!  "warnings": ["..."], "updated_unix": 1700000000}
//! ```
//! Sectors are 512 bytes; `log_ranges` are on the whole disk (what requests carry), `end`
//! exclusive. Every disk in /sys/block with media (size > 0) is listed, with or without
//! filesystems. `tracking` says whether the disk has a per-device slot (`full`: filesystem log
//! classification and stall detection), not yet (`pending`: it appeared less than a second
//! ago) or none because there are more disks than slots (`degraded`), see
//! [`crate::bpf::devslots`].

use std::{path::Path, sync::Arc};

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use serde::Serialize;

use super::params::NoParams;
use crate::{
    bpf::devslots::{parse_dev, SlotTable, Tracking, SYS_BLOCK},
    fslog::{Discovery, LogKind, LogStatus, Range},
    state::AppState,
};

/// A partition of a disk.
#[derive(Serialize)]
pub struct Partition {
    /// Kernel name.
    pub name: String,
    /// `M:m`.
    pub dev: String,
    /// Start on the disk (512-byte sectors).
    pub start: u64,
    /// Size (512-byte sectors).
    pub sectors: u64,
}

/// A filesystem that uses a disk, seen from that disk.
#[derive(Serialize)]
pub struct FsRef {
    /// Filesystem type.
    pub fstype: String,
    /// First mount point.
    pub mountpoint: String,
    /// The device (disk or partition) of the filesystem's data.
    pub device: String,
    /// `data`, `log` (an external log device) or `data+log`.
    pub role: &'static str,
    /// Outcome of the filesystem's log discovery (`found`, `unreadable`, ...).
    pub log_status: LogStatus,
    /// Why the log is unknown and what to grant or check, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// One disk.
#[derive(Serialize)]
pub struct Device {
    /// Kernel name.
    pub device: String,
    /// `M:m`.
    pub dev: String,
    /// Size (512-byte sectors).
    pub sectors: u64,
    /// `queue/write_cache`: `write back` or `write through`.
    pub write_cache: String,
    /// Bio-based (device-mapper, md, ...: no `mq/` directory, see
    /// [`crate::labels::bio_based`]): its bios are tracked from entry to completion, total
    /// stage only.
    pub bio_based: bool,
    /// A device-mapper disk's name (`dm/name`, e.g. `vg0-data`); null for other disks.
    pub dm_name: Option<String>,
    /// Whether the disk has a per-device slot: `full` (log classification and stall
    /// detection), `pending` (not indexed yet) or `degraded` (more disks than slots).
    pub tracking: Tracking,
    /// Partitions.
    pub partitions: Vec<Partition>,
    /// Filesystems with data or log on this disk.
    pub filesystems: Vec<FsRef>,
    /// Merged log ranges on this disk (what `LOG_RANGES` holds).
    pub log_ranges: Vec<Range>,
}

/// The response body: the disks, then the discovery's `filesystems`, `log_ranges`,
/// `warnings` and `updated_unix` flattened in.
#[derive(Serialize)]
pub struct DevicesBody {
    /// Disks.
    pub devices: Vec<Device>,
    /// The last discovery: filesystems, ranges, warnings.
    #[serde(flatten)]
    pub discovery: Discovery,
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Builds the body from sysfs (`sys_block`, normally `/sys/block`: `size`, `dev`,
/// `queue/write_cache`, partitions' `start`/`size`), a discovery and the per-device slots.
/// Disks without media (size 0) are left out unless they have log ranges.
pub fn body(sys_block: &Path, d: Discovery, slots: &SlotTable) -> DevicesBody {
    let mut devices = Vec::new();
    let mut names: Vec<String> = std::fs::read_dir(sys_block)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    for name in names {
        let dir = sys_block.join(&name);
        let sectors: u64 = read(&dir.join("size")).parse().unwrap_or(0);
        if sectors == 0 && !d.ranges.contains_key(&name) {
            continue; // unattached loop devices, empty drives
        }
        let dev = read(&dir.join("dev"));
        devices.push(Device {
            tracking: parse_dev(&dev).map_or(Tracking::Pending, |d| slots.tracking(d)),
            dev,
            sectors,
            write_cache: read(&dir.join("queue/write_cache")),
            bio_based: !dir.join("mq").exists(),
            dm_name: std::fs::read_to_string(dir.join("dm/name"))
                .ok()
                .map(|n| n.trim_end().to_string()),
            partitions: partitions(&dir),
            filesystems: filesystems_on(&name, &d),
            log_ranges: d.ranges.get(&name).cloned().unwrap_or_default(),
            device: name,
        });
    }
    DevicesBody {
        devices,
        discovery: d,
    }
}

/// The partitions of the disk at sysfs directory `dir` (subdirectories with a `partition`
/// file), by start sector.
fn partitions(dir: &Path) -> Vec<Partition> {
    let mut partitions = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.join("partition").exists() {
            partitions.push(Partition {
                name: e.file_name().to_string_lossy().into_owned(),
                dev: read(&p.join("dev")),
                start: read(&p.join("start")).parse().unwrap_or(0),
                sectors: read(&p.join("size")).parse().unwrap_or(0),
            });
        }
    }
    partitions.sort_by_key(|p| p.start);
    partitions
}

/// The filesystems with data or log on disk `name`, and the role the disk plays for each.
fn filesystems_on(name: &str, d: &Discovery) -> Vec<FsRef> {
    let mut refs = Vec::new();
    for fs in &d.filesystems {
        let data = fs.device.disk == name;
        let log = fs.log.iter().any(|e| e.disk == name);
        if !(data || log) {
            continue;
        }
        let internal_log = log
            && fs
                .log
                .iter()
                .any(|e| e.disk == name && e.kind == LogKind::Internal);
        refs.push(FsRef {
            fstype: fs.fstype.clone(),
            mountpoint: fs.mountpoints[0].clone(),
            device: fs.device.name.clone(),
            role: match (data, internal_log) {
                (true, true) => "data+log",
                (true, false) => "data",
                _ => "log",
            },
            log_status: fs.log_status,
            warning: fs.warning.clone(),
        });
    }
    refs
}

/// The handler: the body from `/sys/block`, the last discovery and the slots; 500 if that task
/// fails.
pub async fn get_devices(State(st): State<Arc<AppState>>, _: NoParams) -> impl IntoResponse {
    let d = st.fslog.get();
    let slots = st
        .maps
        .dev_slots
        .lock()
        .expect("dev slots lock")
        .table()
        .clone();
    match tokio::task::spawn_blocking(move || body(Path::new(SYS_BLOCK), d, &slots)).await {
        Ok(b) => Json(b).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("/devices failed: {e}\n"),
        )
            .into_response(),
    }
}
