//! Exposition of the last filesystem log discovery (crate::fslog), appended to `/metrics`. Declares `blkobs_fs_log_sectors`,
//! `blkobs_fs_log_status` and `blkobs_fs_log_warnings`.

use prometheus::proto::MetricType;

use super::{MetricDesc, MetricWriter};
use crate::fslog::{Discovery, LogKind};

/// One series per log range: joins `log="true"` series (by `device`) to their filesystem.
pub const FS_LOG_SECTORS: MetricDesc = MetricDesc {
    name: "blkobs_fs_log_sectors",
    help: "Size of a mounted filesystem's log range (512-byte sectors); device is the whole disk, start the first sector on it. Requests starting inside get log=\"true\".",
    kind: MetricType::GAUGE,
    labels: &["device", "fs_device", "fstype", "mountpoint", "kind", "start"],
};

/// One series per filesystem, value 1, `status` = [`crate::fslog::LogStatus::as_str`].
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
/// filesystems), appended to `w`.
pub fn render_metrics(w: &mut dyn MetricWriter, d: &Discovery) {
    let mut f = w.family(&FS_LOG_SECTORS);
    for fs in &d.filesystems {
        for e in &fs.log {
            let kind = if e.kind == LogKind::Internal {
                "internal"
            } else {
                "external"
            };
            f.gauge(
                &[
                    e.disk.as_str(),
                    fs.device.name.as_str(),
                    fs.fstype.as_str(),
                    fs.mountpoints[0].as_str(),
                    kind,
                    &e.start.to_string(),
                ],
                e.sectors as f64,
            );
        }
    }
    let mut f = w.family(&FS_LOG_STATUS);
    for fs in &d.filesystems {
        f.gauge(
            &[
                fs.device.disk.as_str(),
                fs.device.name.as_str(),
                fs.fstype.as_str(),
                fs.mountpoints[0].as_str(),
                fs.log_status.as_str(),
            ],
            1.0,
        );
    }
    w.family(&FS_LOG_WARNINGS)
        .gauge(&[], d.warnings.len() as f64);
}
