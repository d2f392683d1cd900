//! The block devices, as one view: [`Inventory`], one scan of `/sys/block` (and
//! /proc/diskstats for hidden disks) per tick of the daemon ([`crate::daemon`], every second),
//! kept as the [`DiskView`] and read by every consumer: the per-device slots
//! (`bpf::devslots`), the disks gone for `forget_after` (`collect::gone`), the names `device=`
//! accepts ([`KnownDisks`]), and the device names, bio-based flags and device-mapper names of
//! the snapshots, reports and metrics, and each disk's identity ([`Identity`]: `blkobs_disk_info`). A scan made between ticks replaces the view: when a
//! mount changes the log ranges (a disk made for the mount gets its per-device slot at once),
//! for `GET /devices`, and once for a number or name the view does not have (a disk made since
//! the tick).

mod known;
mod sysfs;
mod view;

pub use known::{KnownDisks, UnknownDisk, CAPACITY};
pub use sysfs::{
    disk_number, parse_dev, BlockDisk, Identity, Inventory, Partition, PROC_DISKSTATS, SYS_BLOCK,
};
pub use view::{DiskView, FULL_SCAN_TICKS};
