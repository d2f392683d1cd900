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
//! | `CGROUP_LATENCY` | per-CPU hash, [`CGROUP_LATENCY_ENTRIES`] (1 while `[cgroups] latency` is off at load) | [`OwnerKey`] (class = op code only) | [`CgroupLatency`] (only while [`Settings::cgroup_latency`] is 1) |
//! | `ZERO_CGROUP_LATENCY` | per-CPU array, 1 entry | 0 | [`CgroupLatency`] (always zero; template for inserts) |
//!
//! **Per-device slots.** The daemon gives every disk it sees (with media, in `/sys/block`) its
//! own slot of the per-device arrays and publishes it in `DEV_INDEX`: no two disks ever share
//! one, whatever their device numbers, up to [`DEV_SLOT_LIMIT`] disks. The programs look the
//! slot up once per request, when it enters (or, for the flush request, at its dispatch), and
//! keep it in [`Inflight::dev_slot`]; dispatch and completion index the arrays with it directly.
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

// The sizes the daemon relies on, each the sum of its fields' sizes: no implicit padding in a
// type it reads or writes as bytes (the `aya::Pod` impls below, the `EVENTS` records, the
// mmap'ed slot arrays whose stride it computes: observer/src/bpf/batch.rs), and the same size
// on both sides of the map.
const _: () = assert!(core::mem::size_of::<LogRanges>() == 4 + 4 + LOG_RANGES_MAX * 16);
const _: () = assert!(core::mem::size_of::<SectorRange>() == 8 + 8);
// enter, dispatch, bytes; dev, class, requeues, requeued; sector; size, pid; cgroup; comm;
// slot, bios, missed, end_by; owner_cgroup.
const _: () = assert!(core::mem::size_of::<Inflight>() == 3 * 8 + 8 + 8 + 8 + 8 + 16 + 8 + 8);
const _: () = assert!(core::mem::size_of::<Upper>() == 8 + 8 + 4 + 4);
const _: () = assert!(core::mem::size_of::<BioQueued>() == 8 + 8 + 4 + 4 + 4 + 2 + 2);
const _: () = assert!(core::mem::size_of::<ClassKey>() == 4 + 2 + 2);
const _: () = assert!(core::mem::size_of::<StageHist>() == 8 + crate::hist::NBUCKETS * 8);
const _: () = assert!(
    core::mem::size_of::<crate::dispatch::DispatchHist>()
        == (crate::dispatch::SIZE_BUCKETS + 1 + crate::dispatch::MERGED_BUCKETS + 2) * 8
);
const _: () = assert!(
    core::mem::size_of::<ClassStats>()
        == crate::Stage::COUNT * core::mem::size_of::<StageHist>()
            + 8 * 8
            + core::mem::size_of::<crate::dispatch::DispatchHist>()
);
const _: () = assert!(core::mem::size_of::<ErrorKey>() == 4 + 2 + 1 + 1);
const _: () = assert!(
    core::mem::size_of::<Settings>()
        == crate::class::Op::ALL.len() * crate::Stage::COUNT * 8 + 4 * 8
);
const _: () =
    assert!(core::mem::size_of::<DevState>() == 4 + 4 + 8 + 8 + 4 + 2 + 2 + 64 + 4 + 4 + 8 + 80);
// The two sides of a DevState never share a 64-byte line (its docs).
const _: () = assert!(
    core::mem::offset_of!(DevState, complete_dev) - core::mem::offset_of!(DevState, _gap) >= 64
        && core::mem::size_of::<DevState>() - core::mem::offset_of!(DevState, _tail) >= 64
);
const _: () = assert!(core::mem::size_of::<MissedMerge>() == 4 + 2 + 2 + 8 + 8 + 4 + 4 + 8 + 8);
const _: () = assert!(core::mem::size_of::<OwnerKey>() == 4 + 2 + 2 + 8);
const _: () = assert!(core::mem::size_of::<OwnerStats>() == 8 + 8);
const _: () = assert!(
    core::mem::size_of::<CgroupLatency>()
        == crate::Stage::COUNT * core::mem::size_of::<StageHist>()
);
const _: () = assert!(core::mem::size_of::<Slot<Inflight>>() == 8 + 8 + 88);
const _: () = assert!(core::mem::size_of::<Slot<BioQueued>>() == 8 + 8 + 32);
const _: () = assert!(core::mem::size_of::<SlowEvent>() == 4 + 4 + 88 + 8 + 4 + 4 + 24);
const _: () = assert!(core::mem::size_of::<StallEvent>() == 4 * 4 + 8 + 8);
const _: () = assert!(core::mem::size_of::<FileRef>() == 8 + 8 + 4 + 4);
const _: () =
    assert!(core::mem::size_of::<FileInfo>() == 24 + 4 + 4 + FILE_PATH_DEPTH * FILE_NAME_BYTES);

/// `aya::Pod` (aya/src/lib.rs): the daemon copies these values to and from the kernel as
/// bytes, so each must have no padding (bytes that would be read uninitialized) and take any
/// bit pattern. Every type here is `#[repr(C)]` with integer (and integer-array) fields only,
/// so any bytes are a valid value; its size is asserted above to be the sum of its fields'.
#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), u32 count and dev then 8 SectorRange (two u64): 136 bytes, no padding
    // (asserted above); integers only.
    unsafe impl aya::Pod for super::LogRanges {}
    // SAFETY: repr(C), integers and a [u8; 16], fields ordered so that none needs padding:
    // 88 bytes (asserted above, and field offsets in `inflight_layout`).
    unsafe impl aya::Pod for super::Inflight {}
    // SAFETY: repr(C), two u64 then two u32 (`_pad` explicit): 24 bytes, asserted above.
    unsafe impl aya::Pod for super::Upper {}
    // SAFETY: repr(C), two u64, three u32, two u16 (`_pad` explicit): 32 bytes, asserted above.
    unsafe impl aya::Pod for super::BioQueued {}
    // SAFETY: repr(C), u32 then two u16 (`_pad` explicit): 8 bytes, asserted above.
    unsafe impl aya::Pod for super::ClassKey {}
    // SAFETY: repr(C), arrays of u64 and u64 fields only (StageHist, DispatchHist likewise):
    // nothing to pad, the size asserted above.
    unsafe impl aya::Pod for super::ClassStats {}
    // SAFETY: repr(C), u32, u16, u8 and `_pad` u8: 8 bytes, asserted above.
    unsafe impl aya::Pod for super::ErrorKey {}
    // SAFETY: repr(C), a [[u64; 3]; 6] and four u64: 176 bytes, asserted above.
    unsafe impl aya::Pod for super::Settings {}
    // SAFETY: repr(C), u32 pairs, u64s and u32 + two u16 (the `_pad`s explicit): 40 bytes,
    // asserted above.
    unsafe impl aya::Pod for super::DevState {}
    // SAFETY: repr(C), u32 + two u16, u64s, two u32: 48 bytes, asserted above.
    unsafe impl aya::Pod for super::MissedMerge {}
    // SAFETY: repr(C), a FileRef (two u64, two u32), two u32 and a byte array: no padding,
    // the size asserted above.
    unsafe impl aya::Pod for super::FileInfo {}
    // SAFETY: repr(C), u32 + two u16 (`_pad` explicit) then u64: 16 bytes, asserted above.
    unsafe impl aya::Pod for super::OwnerKey {}
    // SAFETY: repr(C), two u64: 16 bytes, asserted above.
    unsafe impl aya::Pod for super::OwnerStats {}
    // SAFETY: repr(C), StageHists (u64 and [u64; NBUCKETS]) only: no padding, size asserted
    // above.
    unsafe impl aya::Pod for super::CgroupLatency {}
    // SAFETY: repr(C), two u64 then a Pod value whose size is a multiple of 8 and alignment at
    // most 8 (asserted below): no padding. Only for the two slot values: a generic impl would
    // cover values that get tail padding.
    unsafe impl aya::Pod for super::Slot<super::Inflight> {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Slot<super::BioQueued> {}
    const _: () = {
        use super::{BioQueued, Inflight, Slot};
        use core::mem::{align_of, size_of};
        assert!(size_of::<Inflight>().is_multiple_of(8) && align_of::<Inflight>() <= 8);
        assert!(size_of::<Slot<Inflight>>() == 16 + size_of::<Inflight>());
        assert!(size_of::<BioQueued>().is_multiple_of(8) && align_of::<BioQueued>() <= 8);
        assert!(size_of::<Slot<BioQueued>>() == 16 + size_of::<BioQueued>());
    };
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
        assert_eq!(core::mem::offset_of!(Inflight, dev_slot), 72);
        assert_eq!(core::mem::size_of::<SlowEvent>(), 136);
        assert_eq!(core::mem::size_of::<OwnerKey>(), 16);
        assert_eq!(core::mem::offset_of!(Inflight, bios), 76);
        assert_eq!(core::mem::size_of::<MissedMerge>(), 48);
        assert_eq!(core::mem::size_of::<DevState>(), 192);
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
