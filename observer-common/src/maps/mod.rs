//! Layouts of the BPF maps shared by the programs and the daemon.
//!
//! | map | type | key | value |
//! |---|---|---|---|
//! | `INFLIGHT_SLOTS` | array of [`SLOTS`], index [`slot_index`]`(rq)` | [`Slot`]`<`[`Inflight`]`>` (key: `struct request *`) |
//! | `INFLIGHT` | hash | `struct request *` as u64 | [`Inflight`] (requests whose slot another struct owns; and, keyed by `struct bio *`, the bios of bio-based disks — dm, md, zram — from `block_bio_queue` to `block_bio_complete`, never dispatched) |
//! | `BIO_SLOTS` | array of [`SLOTS`], index [`slot_index`]`(bio)` | [`Slot`]`<`[`BioQueued`]`>` (key: `struct bio *`) |
//! | `BIO_QUEUED` | hash | `struct bio *` as u64 | [`BioQueued`] (bios whose leased slot another bio holds) |
//! | `CLASS_STATS` | per-CPU hash | [`ClassKey`] | [`ClassStats`] |
//! | `ERRORS` | per-CPU hash | [`ErrorKey`] | u64 count |
//! | `COUNTERS` | per-CPU array | [`Counter`] as u32 | u64 |
//! | `ZERO` | per-CPU array, 1 entry | 0 | [`ClassStats`] (always zero; template for inserts) |
//! | `DEV_INDEX` | hash, [`DEV_SLOTS`] entries | disk as [`mkdev`] (u32) | its slot (u32, 1 ≤ slot < [`DEV_SLOTS`]; written by the daemon only) |
//! | `DEVSTATE` | array of [`DEV_SLOTS`], index = slot | [`DevState`] (`dev` written by the daemon) |
//! | `LOG_RANGES` | array of [`DEV_SLOTS`], index = slot | [`LogRanges`] (written by the daemon only) |
//! | `MERGE_PAIRS` | per-CPU array of [`MERGE_PAIRS_PER_CPU`], index = cursor mod size | [`MissedMerge`]: each CPU's latest missed adjacent merges |
//! | `MERGE_CURSOR` | per-CPU array, 1 entry | u64: pairs written to `MERGE_PAIRS` on that CPU, ever |
//! | `REMAPS` | LRU hash, [`REMAP_ENTRIES`] | `struct bio *` as u64 | [`Remap`] (bios remapped from an indexed disk, until their request or entry below) |
//! | `UPPER` | LRU hash, [`UPPER_ENTRIES`] | `INFLIGHT` key | [`Upper`] (the upper disk's I/O an entry below serves) |
//! | `OWNER_STATS` | per-CPU hash, [`OWNER_STATS_ENTRIES`] | [`OwnerKey`] | [`OwnerStats`] (only while [`Settings::owner_stats`] is 1) |
//!
//! **Per-device slots.** The daemon gives every disk it sees (with media, in `/sys/block`) its
//! own slot of the per-device arrays and publishes it in `DEV_INDEX`: no two disks ever share
//! one, whatever their device numbers, up to [`DEV_SLOT_LIMIT`] disks. The programs look the
//! slot up once per request, when it enters (or, for the flush request, at its dispatch), and
//! keep it in [`Inflight::slot`]; dispatch and completion index the arrays with it directly.
//! The lookup goes through a small per-CPU cache (`SLOT_CACHE`, validated against
//! `LOG_RANGES[slot].dev`), so most requests find their slot with array lookups only.

mod device;
mod events;
mod request;
mod stats;

pub use device::*;
pub use events::*;
pub use request::*;
pub use stats::*;

/// `SETTINGS`: array of one [`Settings`], written by the daemon.
pub const SETTINGS: &str = "SETTINGS";
/// `DEVSTATE`: array of [`DEV_SLOTS`] [`DevState`], indexed by a disk's slot (`DEV_INDEX`).
pub const DEVSTATE: &str = "DEVSTATE";
/// `EVENTS`: ring buffer of [`SlowEvent`] and [`StallEvent`].
pub const EVENTS: &str = "EVENTS";
/// Default size of `EVENTS` (bytes, a power of two).
pub const EVENTS_BYTES: u32 = 1 << 20;

/// Map names, as the programs declare them.
pub const INFLIGHT: &str = "INFLIGHT";
/// See module docs.
pub const CLASS_STATS: &str = "CLASS_STATS";
/// See module docs.
pub const ERRORS: &str = "ERRORS";
/// See module docs.
pub const COUNTERS: &str = "COUNTERS";

/// See module docs.
pub const LOG_RANGES: &str = "LOG_RANGES";
/// See module docs: disk ([`mkdev`]) → slot.
pub const DEV_INDEX: &str = "DEV_INDEX";
/// Ranges per disk in [`LogRanges`]; more are dropped by the daemon with a warning.
pub const LOG_RANGES_MAX: usize = 8;

/// Default capacity of `INFLIGHT` (requests tracked at once, all devices).
pub const INFLIGHT_DEFAULT_ENTRIES: u32 = 16384;

#[cfg(feature = "user")]
mod pod {
    unsafe impl aya::Pod for super::LogRanges {}
    unsafe impl aya::Pod for super::Inflight {}
    unsafe impl aya::Pod for super::Upper {}
    unsafe impl aya::Pod for super::BioQueued {}
    unsafe impl aya::Pod for super::ClassKey {}
    unsafe impl aya::Pod for super::ClassStats {}
    unsafe impl aya::Pod for super::ErrorKey {}
    unsafe impl aya::Pod for super::Settings {}
    unsafe impl aya::Pod for super::DevState {}
    unsafe impl aya::Pod for super::MissedMerge {}
    unsafe impl aya::Pod for super::OwnerKey {}
    unsafe impl aya::Pod for super::OwnerStats {}
    // Two u64 then the value: no padding for values whose size is a multiple of 8, as every
    // slot value's is (`slot_values_have_no_padding`).
    unsafe impl<V: aya::Pod> aya::Pod for super::Slot<V> {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The programs' hash of a kernel `disk_name` (garbage after the NUL, as nvme leaves it)
    /// equals the daemon's of the `/sys/block` name; distinct path names get distinct numbers.
    #[test]
    fn nameless_dev_ignores_bytes_after_the_nul() {
        let words = |b: &[u8; DISK_NAME_LEN]| {
            let mut w = [0u64; 4];
            for (x, c) in w.iter_mut().zip(b.chunks_exact(8)) {
                *x = u64::from_le_bytes(c.try_into().unwrap());
            }
            w
        };
        for name in [
            "nvme1c1n1",
            "nvme1c2n1",
            "nvme10c11n12",
            "a",
            "",
            "nvme0c0n1abcdefghijklmnopqrst",
        ] {
            let mut raw = [0xa5u8; DISK_NAME_LEN];
            raw[..name.len()].copy_from_slice(name.as_bytes());
            raw[name.len()] = 0;
            let mut clean = [0u8; DISK_NAME_LEN];
            clean[..name.len()].copy_from_slice(name.as_bytes());
            let want = nameless_dev_of(name.as_bytes());
            assert_eq!(nameless_dev(disk_name_hash(words(&raw))), want, "{name}");
            assert_eq!(nameless_dev(disk_name_hash(words(&clean))), want, "{name}");
            assert_eq!(dev_major(want), 0);
            assert!(dev_minor(want) >= 0x80000);
        }
        assert_ne!(nameless_dev_of(b"nvme1c1n1"), nameless_dev_of(b"nvme1c2n1"));
    }

    /// `Inflight` is read by the daemon (INFLIGHT, inside `SlowEvent`): no implicit padding,
    /// 8-byte aligned size.
    #[test]
    fn inflight_layout() {
        assert_eq!(core::mem::size_of::<Inflight>(), 88);
        assert_eq!(core::mem::offset_of!(Inflight, owner_cgroup), 80);
        assert_eq!(core::mem::offset_of!(Inflight, slot), 72);
        assert_eq!(core::mem::size_of::<SlowEvent>(), 112);
        assert_eq!(core::mem::size_of::<OwnerKey>(), 16);
        assert_eq!(core::mem::offset_of!(Inflight, bios), 76);
        assert_eq!(core::mem::size_of::<MissedMerge>(), 48);
        assert_eq!(core::mem::size_of::<DevState>(), 40);
    }

    #[test]
    fn slot_values_have_no_padding() {
        assert_eq!(core::mem::size_of::<Slot<Inflight>>(), 16 + 88);
        assert_eq!(core::mem::size_of::<Slot<BioQueued>>(), 16 + 32);
    }

    /// Request structs (tag-set pages, a few hundred bytes apart) spread over the slots: 4096
    /// structs 384 B apart take at least 3/4 of their own slots.
    #[test]
    fn slot_index_spreads_request_structs() {
        let base = 0xffff_8881_0a00_0000u64;
        let mut seen = std::collections::HashSet::new();
        for k in 0..4096u64 {
            let i = slot_index(base + k * 384);
            assert!(i < SLOTS);
            seen.insert(i);
        }
        assert!(seen.len() > 3072, "{} distinct slots", seen.len());
    }

    #[test]
    fn user_dev_t_decoding() {
        assert_eq!(decode_user_dev(0x0703), (7, 3));
        assert_eq!(
            decode_user_dev((259 << 8) | 0x05 | (0x100 << 12)),
            (259, 0x105)
        );
        assert_eq!(
            (dev_major(mkdev(259, 0x105)), dev_minor(mkdev(259, 0x105))),
            (259, 0x105)
        );
    }
}
