//! Filesystem log awareness: finds where the logs (journals) of mounted XFS and ext4
//! filesystems are on disk and hands those ranges to the eBPF programs (`LOG_RANGES`), which
//! then classify requests starting inside a range as [`observer_common::class::LOG`].
//!
//! Discovery, from scratch on every change of the mount table (`/proc/self/mountinfo`, or the
//! host's `<host_root>/proc/1/mountinfo` in a container, see [`Sources::for_host_root`]) and
//! every [`FORCE_REFRESH`] in any case:
//! 1. mountinfo → filesystems of type `xfs`, `ext4`, `ext3`, `ext2` and their device numbers;
//! 2. `/sys/dev/block/M:m` → the device's whole disk, and for a partition its start
//!    (`/sys/dev/block/M:m/start`, 512-byte sectors);
//! 3. the superblock, read read-only (`O_RDONLY | O_DIRECT`) from the device node:
//!    - XFS (fs/xfs/libxfs/xfs_format.h, `struct xfs_dsb`, big endian): the internal log is
//!      `sb_logblocks` filesystem blocks from `sb_logstart` (an AG-encoded block number:
//!      AG `logstart >> sb_agblklog`, block `logstart & (2^agblklog - 1)`, i.e. what
//!      `xfs_db -c "convert fsb <logstart> daddr"` computes). `sb_logstart == 0` means an external
//!      log: the `logdev=` mount option names the device, which is log in its entirety.
//!    - ext4 (fs/ext4/ext4.h, little endian): the journal is inode `s_journal_inum` (8); its
//!      blocks come from the inode's extent tree (or ext3-style block map) read through the group
//!      descriptor's inode table. An external journal (`s_journal_dev`, verified against
//!      `s_journal_uuid`) is log in its entirety.
//! 4. Ranges are converted to 512-byte sectors on the whole disk, merged per disk, and written
//!    to `LOG_RANGES` at the disk's per-device slot (entries of disks that no longer have a log are
//!    emptied; see [`crate::bpf::devslots`] for the per-device slots).
//!
//! A superblock that cannot be read or does not make sense is skipped with a warning (logged
//! and shown in `/devices` with a [`LogStatus`], and in `blkobs_fs_log_status`), never fatal. Stacked devices (device-mapper, md) are not mapped to
//! their underlying disks: their filesystems are listed without ranges.

mod blockdev;
mod discovery;
mod error;
mod ext4;
mod mountinfo;
mod ranges;
mod sources;
mod watch;
mod xfs;

use std::time::Duration;

pub use blockdev::{block_dev, BlockDev, ReadAt};
pub use discovery::{discover, Discovery, Filesystem, LogExtent, LogKind};
pub use error::{FsLogError, LogStatus};
pub use ext4::Ext4Super;
pub use mountinfo::{parse_mountinfo, MountEntry};
pub use ranges::Range;
pub use sources::Sources;
pub use watch::{spawn, FsLogState};
pub use xfs::XfsSuper;

/// How often mountinfo is checked when no change is signalled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Discovery runs at least this often even when mountinfo did not change (a device reformatted
/// and remounted at the same place can leave mountinfo byte-identical).
pub const FORCE_REFRESH: Duration = Duration::from_secs(30);

/// Filesystem types whose logs are found.
pub const SUPPORTED: [&str; 4] = ["xfs", "ext4", "ext3", "ext2"];
