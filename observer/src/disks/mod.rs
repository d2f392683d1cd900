//! The block devices, as one view: [`Inventory`], one scan of `/sys/block` (and
//! /proc/diskstats for hidden disks) per tick of the daemon ([`crate::daemon`], every second),
//! read by every consumer of that tick: the per-device slots (`bpf::devslots`), the disks
//! gone for `forget_after` (`collect::gone`) and the names `device=` accepts
//! ([`KnownDisks`]); the per-device slots also take a scan of their own when a mount changes
//! the log ranges (a disk made for the mount gets its per-device slot at once), and
//! `GET /devices` shows a scan made when asked.

mod known;
mod sysfs;

pub use known::{KnownDisks, UnknownDisk, CAPACITY};
pub use sysfs::{
    disk_number, parse_dev, BlockDisk, Inventory, Partition, PROC_DISKSTATS, SYS_BLOCK,
};
