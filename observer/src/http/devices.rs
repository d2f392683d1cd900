//! `GET /devices`: the block devices, the filesystems mounted on them and their log ranges.
//!
//! ```json
//! {"devices": [{"device": "loop3", "dev": "7:3", "sectors": 1433600, "write_cache": "write back",
//!               "identity": {"model": "QEMU NVMe Ctrl", "serial": "blkobs0", "wwid": "nvme.1b36-...",
//!                            "revision": "7.2.22", "rotational": false, "logical_block_size": 512,
//!                            "physical_block_size": 512, "scheduler": "none", "fua": true},
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
//! ago) or none because there are more disks than per-device slots (`degraded`), see
//! [`crate::bpf::devslots`].

use std::sync::Arc;

use axum::{extract::State, http::StatusCode, response::IntoResponse, Json};
use serde::Serialize;

use super::params::NoParams;
use crate::{
    bpf::devslots::{DevSlotTable, Tracking},
    disks::{BlockDisk, Inventory},
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

/// One disk: its [`BlockDisk`] fields (`device`, `dev`, `sectors`, `write_cache`, `bio_based`,
/// `dm_name`, `slaves`, `holders`, `hidden`, `partitions`, `identity`) flattened in, then its per-device
/// slot and what the last discovery found on it.
#[derive(Serialize)]
pub struct Device {
    /// The disk as the scan saw it (sizes in 512-byte sectors; `dev` as `M:m`).
    #[serde(flatten)]
    pub disk: BlockDisk,
    /// Whether the disk has a per-device slot: `full` (log classification and stall
    /// detection), `pending` (not indexed yet) or `degraded` (more disks than slots).
    pub tracking: Tracking,
    /// Filesystems with data or log on this disk.
    pub filesystems: Vec<FsRef>,
    /// Merged log ranges on this disk (what `LOG_RANGES` holds; 512-byte sectors, `end`
    /// exclusive).
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
pub fn body(inv: &Inventory, d: Discovery, dev_slots: &DevSlotTable) -> DevicesBody {
    let mut devices = Vec::new();
    for disk in &inv.disks {
        if disk.sectors == 0 && !d.ranges.contains_key(&disk.name) {
            continue; // unattached loop devices, empty drives
        }
        devices.push(Device {
            tracking: disk
                .dev
                .map_or(Tracking::Pending, |n| dev_slots.tracking(n)),
            filesystems: filesystems_on(&disk.name, &d),
            log_ranges: d.ranges.get(&disk.name).cloned().unwrap_or_default(),
            disk: disk.clone(),
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

/// The handler: the body from a scan of the disks made now (which becomes the daemon's view of
/// the disks, [`crate::disks::DiskView::rescan`]), the last discovery and the per-device
/// slots; 500 if that task fails.
pub async fn get_devices(State(st): State<Arc<AppState>>, _: NoParams) -> impl IntoResponse {
    let d = st.fslog.get();
    let dev_slots = st
        .maps
        .dev_slots
        .lock()
        .expect("dev slots lock")
        .table()
        .clone();
    match tokio::task::spawn_blocking(move || body(&st.disks.rescan(), d, &dev_slots)).await {
        Ok(b) => Json(b).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("/devices failed: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use observer_common::maps::mkdev;
    use serde_json::json;

    use super::*;
    use crate::disks::{Identity, Partition};

    /// The JSON of two disks (one with a per-device slot, partitions and a log range; one hidden,
    /// without a number, slaves and holders) and a disk without media, left out.
    #[test]
    fn body_json() {
        let sda = mkdev(8, 0);
        let inv = Inventory {
            disks: vec![
                BlockDisk {
                    name: "sda".into(),
                    dev: Some(sda),
                    hidden: false,
                    sectors: 1_433_600,
                    write_cache: "write back".into(),
                    bio_based: false,
                    dm_name: None,
                    dm_uuid: String::new(),
                    slaves: vec![],
                    holders: vec!["dm-0".into()],
                    partitions: vec![Partition {
                        name: "sda1".into(),
                        dev: "8:1".into(),
                        start: 2048,
                        sectors: 65536,
                    }],
                    identity: Identity {
                        model: "QEMU HARDDISK".into(),
                        serial: "blkobs-sd".into(),
                        rotational: true,
                        logical_block_size: 512,
                        physical_block_size: 4096,
                        scheduler: "mq-deadline".into(),
                        zoned: "none".into(),
                        ..Identity::default()
                    },
                },
                BlockDisk {
                    name: "dm-0".into(),
                    dev: None,
                    hidden: true,
                    sectors: 8,
                    write_cache: "write through".into(),
                    bio_based: true,
                    dm_name: Some("vg0-data".into()),
                    dm_uuid: String::new(),
                    slaves: vec!["sda".into()],
                    holders: vec![],
                    partitions: vec![],
                    identity: Identity::default(),
                },
                BlockDisk {
                    name: "loop7".into(),
                    dev: Some(mkdev(7, 7)),
                    hidden: false,
                    sectors: 0,
                    write_cache: String::new(),
                    bio_based: false,
                    dm_name: None,
                    dm_uuid: String::new(),
                    slaves: vec![],
                    holders: vec![],
                    partitions: vec![],
                    identity: Identity::default(),
                },
            ],
        };
        let mut d = Discovery::default();
        d.ranges.insert(
            "sda".into(),
            vec![Range {
                start: 34816,
                end: 55296,
                sectors: 20480,
            }],
        );
        d.updated_unix = 1_700_000_000;
        let mut dev_slots = DevSlotTable::new(4);
        dev_slots.update(&BTreeSet::from([sda]));
        let got = serde_json::to_value(body(&inv, d, &dev_slots)).unwrap();
        let want = json!({
            "devices": [
                {"device": "sda", "dev": "8:0", "sectors": 1433600, "write_cache": "write back",
                 "bio_based": false, "dm_name": null, "slaves": [], "holders": ["dm-0"],
                 "hidden": false, "tracking": "full",
                 "identity": {"model": "QEMU HARDDISK", "serial": "blkobs-sd", "wwid": "",
                              "revision": "", "rotational": true, "logical_block_size": 512,
                              "physical_block_size": 4096, "scheduler": "mq-deadline",
                              "fua": false, "zoned": "none", "zone_size_bytes": 0,
                              "max_open_zones": 0, "max_active_zones": 0},
                 "partitions": [{"name": "sda1", "dev": "8:1", "start": 2048, "sectors": 65536}],
                 "filesystems": [],
                 "log_ranges": [{"start": 34816, "end": 55296, "sectors": 20480}]},
                {"device": "dm-0", "dev": "", "sectors": 8, "write_cache": "write through",
                 "bio_based": true, "dm_name": "vg0-data", "slaves": ["sda"], "holders": [],
                 "hidden": true, "tracking": "pending", "partitions": [], "filesystems": [],
                 "identity": {"model": "", "serial": "", "wwid": "", "revision": "",
                              "rotational": false, "logical_block_size": 0,
                              "physical_block_size": 0, "scheduler": "", "fua": false,
                              "zoned": "", "zone_size_bytes": 0, "max_open_zones": 0,
                              "max_active_zones": 0},
                 "log_ranges": []}
            ],
            "filesystems": [],
            "ranges": {"sda": [{"start": 34816, "end": 55296, "sectors": 20480}]},
            "warnings": [],
            "updated_unix": 1700000000
        });
        assert_eq!(got, want);
    }
}
