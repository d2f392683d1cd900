//! Exposition of the last discovery, appended to `/metrics`. Declares `blkobs_fs_log_sectors`,
//! `blkobs_fs_log_status` and `blkobs_fs_log_warnings`.

use prometheus::proto::MetricType;

use super::{discovery::Discovery, LogKind};
use crate::exposition::{encode, MetricDesc};

/// One series per log range: joins `log="true"` series (by `device`) to their filesystem.
pub const FS_LOG_SECTORS: MetricDesc = MetricDesc {
    name: "blkobs_fs_log_sectors",
    help: "Size of a mounted filesystem's log range (512-byte sectors); device is the whole disk, start the first sector on it. Requests starting inside get log=\"true\".",
    kind: MetricType::GAUGE,
    labels: &["device", "fs_device", "fstype", "mountpoint", "kind", "start"],
};

/// One series per filesystem, value 1, `status` = [`super::LogStatus::as_str`].
pub const FS_LOG_STATUS: MetricDesc = MetricDesc {
    name: "blkobs_fs_log_status",
    help: "One series per mounted XFS/ext2/3/4 filesystem, value 1, status = outcome of its log discovery: found, no_journal, unreadable (grant read access to the device, see GET /devices), no_device_node, invalid, external_log_missing, io_error.",
    kind: MetricType::GAUGE,
    labels: &["device", "fs_device", "fstype", "mountpoint", "status"],
};

/// Number of warnings of the last discovery.
pub const FS_LOG_WARNINGS: MetricDesc = MetricDesc {
    name: "blkobs_fs_log_warnings",
    help: "Filesystems (or log ranges) skipped by the last log discovery; details in GET /devices and the log.",
    kind: MetricType::GAUGE,
    labels: &[],
};

/// The three families in the text exposition format (sectors and status only when there are
/// filesystems).
pub fn render_metrics(d: &Discovery) -> String {
    let mut sectors = Vec::new();
    let mut status = Vec::new();
    for fs in &d.filesystems {
        let (fs_device, fstype, mountpoint) = (
            fs.device.name.as_str(),
            fs.fstype.as_str(),
            fs.mountpoints[0].as_str(),
        );
        for e in &fs.log {
            let kind = if e.kind == LogKind::Internal {
                "internal"
            } else {
                "external"
            };
            let values = [
                e.disk.as_str(),
                fs_device,
                fstype,
                mountpoint,
                kind,
                &e.start.to_string(),
            ];
            sectors.push(FS_LOG_SECTORS.gauge(&values, e.sectors as f64));
        }
        let values = [
            fs.device.disk.as_str(),
            fs_device,
            fstype,
            mountpoint,
            fs.log_status.as_str(),
        ];
        status.push(FS_LOG_STATUS.gauge(&values, 1.0));
    }
    encode(vec![
        FS_LOG_SECTORS.family(sectors),
        FS_LOG_STATUS.family(status),
        FS_LOG_WARNINGS.family(vec![FS_LOG_WARNINGS.gauge(&[], d.warnings.len() as f64)]),
    ])
}
