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

use std::sync::Arc;

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use observer_common::maps::{dev_major, dev_minor};
use serde::Serialize;

use super::params::NoParams;
use crate::{
    bpf::devslots::{SlotTable, Tracking},
    disks::{Inventory, Partition},
    fslog::{Discovery, LogKind, LogStatus, Range},
    state::AppState,
};

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
    /// `M:m`: the number its series are counted under. A hidden disk (an NVMe multipath path
    /// `nvmeXcYnZ`) has no sysfs `dev`: its /proc/diskstats number, or `0:N` from its name
    /// where that is 0:0 (5.10; [`crate::disks::disk_number`]).
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
    /// The disks (or partitions) this one sits on, by kernel name (`slaves/`: md0 → loop0,
    /// loop1; dm-0 → md0), sorted. An NVMe multipath head lists its path disks here too
    /// (`multipath/`, drivers/nvme/host/multipath.c: nvme0n1 → nvme0c0n1, nvme0c1n1).
    pub slaves: Vec<String>,
    /// The disks that sit on this one (`holders/`: loop0 → md0), sorted.
    pub holders: Vec<String>,
    /// A hidden disk (`hidden` = 1: an NVMe multipath path disk, which has no /dev node; its
    /// I/O is counted as its own).
    pub hidden: bool,
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

/// Builds the body from a scan of the disks (`inv`), a discovery and the per-device slots.
/// Disks without media (size 0) are left out unless they have log ranges.
pub fn body(inv: &Inventory, d: Discovery, slots: &SlotTable) -> DevicesBody {
    let mut devices = Vec::new();
    for disk in &inv.disks {
        if disk.sectors == 0 && !d.ranges.contains_key(&disk.name) {
            continue; // unattached loop devices, empty drives
        }
        devices.push(Device {
            tracking: disk.dev.map_or(Tracking::Pending, |n| slots.tracking(n)),
            dev: disk.dev.map_or(String::new(), |n| {
                format!("{}:{}", dev_major(n), dev_minor(n))
            }),
            sectors: disk.sectors,
            write_cache: disk.write_cache.clone(),
            bio_based: disk.bio_based,
            dm_name: disk.dm_name.clone(),
            slaves: disk.slaves.clone(),
            holders: disk.holders.clone(),
            hidden: disk.hidden,
            partitions: disk.partitions.clone(),
            filesystems: filesystems_on(&disk.name, &d),
            log_ranges: d.ranges.get(&disk.name).cloned().unwrap_or_default(),
            device: disk.name.clone(),
        });
    }
    DevicesBody {
        devices,
        discovery: d,
    }
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

/// The handler: the body from a scan of the disks made now, the last discovery and the slots;
/// 500 if that task fails.
pub async fn get_devices(State(st): State<Arc<AppState>>, _: NoParams) -> impl IntoResponse {
    let d = st.fslog.get();
    let slots = st
        .maps
        .dev_slots
        .lock()
        .expect("dev slots lock")
        .table()
        .clone();
    match tokio::task::spawn_blocking(move || body(&Inventory::scan(), d, &slots)).await {
        Ok(b) => Json(b).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("/devices failed: {e}\n"),
        )
            .into_response(),
    }
}
