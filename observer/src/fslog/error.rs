//! Why a filesystem's log was not found: [`FsLogError`] (logged, shown in `/devices`) and
//! the [`LogStatus`] it gives the filesystem (`log_status`, label `status` of
//! `blkobs_fs_log_status`).

use std::io;

use serde::Serialize;

/// Errors of discovery. Each one skips a single filesystem; the message says what to check.
#[derive(Debug, thiserror::Error)]
pub enum FsLogError {
    /// The device node exists but the daemon may not open it read-only (EACCES/EPERM).
    #[error("cannot open {path} read-only: {source}; the daemon needs read access to block devices: \
             under packaging/observer.service SupplementaryGroups=disk and DeviceAllow=block-* r (and the node owned \
             by group disk, as udev makes it), in Kubernetes the host /dev under --host-root and a device cgroup that \
             allows reading it, or run as root (docs/operations.md, \"Filesystem log discovery\")")]
    Denied {
        /// The device node.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// A file or device could not be read.
    #[error("cannot read {path}: {source}; check that it exists and is readable by the daemon (docs/operations.md)")]
    Io {
        /// What was read.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// No block device node found for a device number.
    #[error("no device node for block device {dev} under {dev_root} (looked at /sys/dev/block/{dev}/uevent DEVNAME and {dev_root}/block/{dev}): \
             is /dev populated (devtmpfs), not hidden (systemd PrivateDevices=yes), and in a container the host's /dev mounted at <--host-root>/dev?")]
    NoNode {
        /// `M:m`.
        dev: String,
        /// Where nodes were looked for.
        dev_root: String,
    },
    /// The superblock is not of the expected filesystem.
    #[error("{device}: no {fstype} superblock (magic {magic:#x}); filesystem skipped: check the device with {check}")]
    Magic {
        /// Device path.
        device: String,
        /// Expected type.
        fstype: &'static str,
        /// Magic found.
        magic: u32,
        /// A command to inspect it.
        check: String,
    },
    /// The superblock has the right magic but inconsistent fields.
    #[error("{device}: {fstype} superblock is corrupt or unsupported ({what}); filesystem skipped: check it with {check}")]
    Corrupt {
        /// Device path.
        device: String,
        /// Filesystem type.
        fstype: &'static str,
        /// What is wrong.
        what: String,
        /// A command to inspect it.
        check: String,
    },
    /// An external log device could not be identified.
    #[error("{mountpoint}: external log device not found ({what}); its log writes are not classified: check the mount options (logdev=) / `dumpe2fs -h`")]
    ExternalLog {
        /// The filesystem.
        mountpoint: String,
        /// Details.
        what: String,
    },
}

/// Outcome of log discovery for one filesystem (`log_status` in `/devices`, `status` label of
/// `blkobs_fs_log_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStatus {
    /// Log ranges found: its log writes are `log="true"`.
    Found,
    /// The filesystem has no journal (ext2): nothing to find.
    NoJournal,
    /// The device node exists but may not be opened read-only (EACCES/EPERM): grant read access.
    Unreadable,
    /// No device node for the filesystem's device under the device root.
    NoDeviceNode,
    /// The superblock or journal inode does not make sense.
    Invalid,
    /// An external log device could not be identified.
    ExternalLogMissing,
    /// Another I/O error.
    IoError,
}

impl LogStatus {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStatus::Found => "found",
            LogStatus::NoJournal => "no_journal",
            LogStatus::Unreadable => "unreadable",
            LogStatus::NoDeviceNode => "no_device_node",
            LogStatus::Invalid => "invalid",
            LogStatus::ExternalLogMissing => "external_log_missing",
            LogStatus::IoError => "io_error",
        }
    }
}

impl FsLogError {
    /// The status this error gives a filesystem.
    pub fn status(&self) -> LogStatus {
        match self {
            FsLogError::Denied { .. } => LogStatus::Unreadable,
            FsLogError::Io { source, .. }
                if matches!(source.raw_os_error(), Some(libc::EACCES | libc::EPERM)) =>
            {
                LogStatus::Unreadable
            }
            FsLogError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                LogStatus::NoDeviceNode
            }
            FsLogError::Io { .. } => LogStatus::IoError,
            FsLogError::NoNode { .. } => LogStatus::NoDeviceNode,
            FsLogError::Magic { .. } | FsLogError::Corrupt { .. } => LogStatus::Invalid,
            FsLogError::ExternalLog { .. } => LogStatus::ExternalLogMissing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_status() {
        let io = |e: i32| FsLogError::Io {
            path: "x".into(),
            source: io::Error::from_raw_os_error(e),
        };
        assert_eq!(io(libc::EACCES).status(), LogStatus::Unreadable);
        assert_eq!(io(libc::EPERM).status(), LogStatus::Unreadable);
        assert_eq!(io(libc::ENOENT).status(), LogStatus::NoDeviceNode);
        assert_eq!(io(libc::EIO).status(), LogStatus::IoError);
        let denied = FsLogError::Denied {
            path: "/dev/sda".into(),
            source: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(denied.status(), LogStatus::Unreadable);
        assert!(
            denied.to_string().contains("SupplementaryGroups=disk"),
            "{denied}"
        );
        assert_eq!(
            FsLogError::NoNode {
                dev: "7:0".into(),
                dev_root: "/dev".into()
            }
            .status(),
            LogStatus::NoDeviceNode
        );
        assert_eq!(
            LogStatus::ExternalLogMissing.as_str(),
            "external_log_missing"
        );
    }
}
