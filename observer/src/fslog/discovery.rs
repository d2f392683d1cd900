//! One discovery pass: mounted filesystems → their devices → their log extents, merged per
//! disk (see the module docs of [`crate::fslog`] for the steps).

use std::{collections::BTreeMap, time::SystemTime};

use observer_common::maps::SectorRange;
use serde::Serialize;

use super::{
    blockdev::{block_dev, BlockDev},
    error::LogStatus,
    ext4::ext4_logs,
    mountinfo::parse_mountinfo,
    ranges::{merge_per_disk, Range},
    sources::Sources,
    xfs::xfs_logs,
    SUPPORTED,
};

/// Internal log or a whole external log device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogKind {
    /// Inside the filesystem's own device.
    Internal,
    /// A separate device that is log in its entirety.
    External,
}

/// One range of a filesystem's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogExtent {
    /// Internal or external.
    pub kind: LogKind,
    /// The device (disk or partition) holding it.
    pub device: String,
    /// Its whole disk.
    pub disk: String,
    /// Start on the device (512-byte sectors).
    pub device_start: u64,
    /// Start on the whole disk (512-byte sectors): what requests carry.
    pub start: u64,
    /// End on the whole disk, exclusive (512-byte sectors).
    pub end: u64,
    /// `end - start`.
    pub sectors: u64,
    #[serde(skip)]
    pub(super) disk_key: u32,
}

impl LogExtent {
    pub(super) fn new(kind: LogKind, bd: &BlockDev, device_start: u64, sectors: u64) -> Self {
        LogExtent {
            kind,
            device: bd.name.clone(),
            disk: bd.disk.clone(),
            device_start,
            start: bd.start + device_start,
            end: bd.start + device_start + sectors,
            sectors,
            disk_key: bd.disk_key,
        }
    }
}

/// A mounted filesystem and its log.
#[derive(Clone, Debug, Serialize)]
pub struct Filesystem {
    /// Filesystem type (mountinfo).
    pub fstype: String,
    /// Mount source.
    pub source: String,
    /// Mount points of this filesystem (bind mounts included), first one first.
    pub mountpoints: Vec<String>,
    /// The filesystem's (data) device.
    pub device: BlockDev,
    /// Where its log is; empty when it has none (ext2) or it could not be found.
    pub log: Vec<LogExtent>,
    /// Log block size: XFS `sb_logsectsize` / ext4 block size (bytes), for reference.
    pub log_unit: u32,
    /// Outcome of log discovery for this filesystem.
    pub log_status: LogStatus,
    /// Why the log is unknown, if it is (what to check or grant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// The result of one discovery.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Discovery {
    /// Supported filesystems found mounted.
    pub filesystems: Vec<Filesystem>,
    /// Merged ranges per whole disk (kernel name → ranges), as written to `LOG_RANGES`.
    pub ranges: BTreeMap<String, Vec<Range>>,
    /// Problems found (each also logged once).
    pub warnings: Vec<String>,
    /// Seconds since the epoch of this discovery.
    pub updated_unix: u64,
    #[serde(skip)]
    pub(super) keys: BTreeMap<u32, (String, Vec<SectorRange>)>,
}

/// Runs discovery once on the given mountinfo text.
pub fn discover(mountinfo: &str, sources: &Sources) -> Discovery {
    let mut d = Discovery {
        updated_unix: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|t| t.as_secs())
            .unwrap_or(0),
        ..Default::default()
    };
    let mut by_dev: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for m in parse_mountinfo(mountinfo) {
        if !SUPPORTED.contains(&m.fstype.as_str()) {
            continue;
        }
        if let Some(&i) = by_dev.get(&m.dev) {
            d.filesystems[i].mountpoints.push(m.mountpoint.clone());
            continue;
        }
        let bd = match block_dev(&sources.sys_dev_block, &sources.dev_root, m.dev.0, m.dev.1) {
            Ok(bd) => bd,
            Err(e) => {
                d.warnings
                    .push(format!("{} ({}): {e}", m.mountpoint, m.fstype));
                continue;
            }
        };
        let result = if m.fstype == "xfs" {
            xfs_logs(&m, &bd, sources)
        } else {
            ext4_logs(&m, &bd, sources)
        };
        let (log, log_unit, log_status, warning) = match result {
            Ok((log, unit)) => {
                let st = if log.is_empty() {
                    LogStatus::NoJournal
                } else {
                    LogStatus::Found
                };
                (log, unit, st, None)
            }
            Err(e) => {
                let w = format!("{} ({} on {}): {e}", m.mountpoint, m.fstype, bd.name);
                d.warnings.push(w.clone());
                (Vec::new(), 0, e.status(), Some(w))
            }
        };
        by_dev.insert(m.dev, d.filesystems.len());
        d.filesystems.push(Filesystem {
            fstype: m.fstype.clone(),
            source: m.source.clone(),
            mountpoints: vec![m.mountpoint.clone()],
            device: bd,
            log,
            log_unit,
            log_status,
            warning,
        });
    }
    let (ranges, keys, warnings) = merge_per_disk(&d.filesystems);
    d.ranges = ranges;
    d.keys = keys;
    d.warnings.extend(warnings);
    d
}
