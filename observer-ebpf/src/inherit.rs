//! What a bio sent down a disk stack keeps of the upper disk: where it came from, and the
//! [`LOG`] class. `block_bio_remap(bio, dev, from)` says where a bio came from; [`mark`] keeps
//! that (`REMAPS`), and the request it starts on the leg, or the entry it gets on a bio-based
//! disk below, takes it ([`take`]):
//! - **the upper I/O**: the entry is linked ([`link`], `UPPER`) to the upper disk and sector it
//!   serves, so the daemon can show, for a stuck md or dm bio, the leg requests that hold it
//!   (`/stalls`, `held_by`);
//! - **the log class**: a filesystem's log lives in sectors of the disk it was made on (md0,
//!   dm-0, an NVMe multipath head), and the daemon gives only that disk its log ranges
//!   (`LOG_RANGES`); the legs under it see sectors of their own. A bio remapped from inside the
//!   upper disk's log region (or one whose own entry there is a log bio: the same bio sent on,
//!   as dm clones and md raid0 do) is a log I/O on the leg too. So "log writes on md0" are log
//!   writes on each raid1 leg too, and the leg's latency of exactly those writes is visible
//!   (the seeds' question: which mirror leg makes the barrier slow).
//!
//! Marks are taken or removed on the ways out of a bio: its request or entry below, a merge,
//! its end on a request-based disk. Not at the end of a remapped bio that failed before any
//! request carried it (bio_remap.rs `ended_unrequested`: rare; 5.10's raw_tp
//! `block_bio_complete` program has no stack left for it): such a mark stays until the LRU
//! drops it or the address is remapped again. Nothing is marked on a kernel that does not
//! trace the remap (drivers/md/dm-crypt.c on 5.10 submits its write clones with no
//! `block_bio_remap`). A second level (LVM on md: md raid1's leg clones carry an `r1bio`, not
//! the dm bio, in `bi_private`) is followed by sector: a bio-based disk below a log region
//! carries that region, moved by the remap's offset (`LOG_BELOW`), learned from the first
//! remap out of it (so linear maps only: LVM linear, dm-crypt). The upper I/O is followed
//! through every level (each level links to the one above).
use aya_ebpf::{
    bindings::BPF_ANY,
    macros::map,
    maps::{Array, LruHashMap},
};
use observer_common::{
    class::LOG,
    maps::{Remap, SectorRange, Upper, REMAP_ENTRIES, UPPER_ENTRIES},
};
use observer_ebpf::store::put;

use crate::maps::{indexed_slot, log_range, INFLIGHT};

/// Bio remapped from an indexed disk → where from, until it starts a request, gets an entry,
/// merges or ends (observer_common::maps::REMAPS).
#[map]
static REMAPS: LruHashMap<u64, Remap> = LruHashMap::with_max_entries(REMAP_ENTRIES, 0);

/// Entry key → the upper I/O it serves (observer_common::maps::UPPER).
#[map]
static UPPER: LruHashMap<u64, Upper> = LruHashMap::with_max_entries(UPPER_ENTRIES, 0);

/// 1 once any bio was marked: until then (every machine without a stacked disk) [`take`] and [`forget`] cost one array read.
#[map]
static MARKED: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
fn marked() -> bool {
    MARKED.get(0).is_some_and(|v| *v != 0)
}

/// Bio-based disk → the log range it carries for the disk above ([`mark`]): that disk's log
/// range moved by the offset of a remap from inside it (LVM linear, dm-crypt: one offset per
/// target). Never written by the daemon; an entry of a disk that went stays until the LRU
/// drops it.
#[map]
static LOG_BELOW: LruHashMap<u32, SectorRange> = LruHashMap::with_max_entries(LOG_BELOW_ENTRIES, 0);
/// Bio-based disks with a log range of a disk above, at most.
const LOG_BELOW_ENTRIES: u32 = 64;

/// `bio` was remapped from sector `from` (512 B) of disk `from_dev` (`MKDEV`): marked with
/// both, and as a log bio if that sector is in the disk's log region (its own, or one carried
/// for a disk above: `LOG_BELOW`) or the bio's own live entry on that disk is a log bio. When
/// the sector is in such a region and `bio` went to a bio-based disk (`below`: its `MKDEV`),
/// that disk carries the region from now on, moved by the remap's offset (`to`, the bio's
/// sector there): so a second level of new bios (md raid1 under LVM: the leg bios carry an
/// `r1bio`, not the dm bio) is labelled by sector, as the first is. A remap from a disk
/// without a slot leaves the mark as it is: a partition (block/blk-core.c blk_partition_remap
/// traces every bio sent to one, after md or dm remapped it onto the partition: md raid1 on
/// sda1 and sdb1), or a disk the daemon has not indexed yet.
#[inline(always)]
pub fn mark(bio: u64, from_dev: u32, from: u64, below: Option<(u32, u64)>) {
    let Some(slot) = indexed_slot(from_dev) else {
        return;
    };
    let range = log_range(from_dev, slot, from).or_else(|| {
        // SAFETY: LruHashMap::get, copied at once: an evicted and reused element reads as another
        // disk's range (integers only, never a fault), checked against `from` below.
        unsafe { LOG_BELOW.get(&from_dev) }
            .copied()
            .filter(|r| r.contains(from))
    });
    if let (Some(r), Some((dev, to))) = (range, below) {
        if let Some(m) = r.moved(from, to) {
            let _ = LOG_BELOW.insert(&dev, &m, BPF_ANY as u64);
        }
    }
    let log = range.is_some()
        // SAFETY: HashMap::get, three fields read at once (aya's caveat: an element removed and
        // reused meanwhile reads as another key's value, integers only, never a fault: hash
        // elements are preallocated and stay mapped while the program runs, under RCU).
        || unsafe { INFLIGHT.get(&bio) }
            .is_some_and(|e| e.is_live() && e.dev == from_dev && e.class & LOG != 0);
    let r = Remap {
        sector: from,
        dev: from_dev,
        log: log as u32,
    };
    let _ = REMAPS.insert(&bio, &r, BPF_ANY as u64);
    if !marked() {
        if let Some(p) = MARKED.get_ptr_mut(0) {
            // SAFETY: `p` is MARKED element 0 (a non-null lookup): a u64 valid for the map's life;
            // every writer stores the same 1.
            unsafe { put(p, 1) };
        }
    }
}

/// `piece` was split off `parent` (`block_split` on a request-based disk: block/blk-merge.c
/// bio_split_to_limits sends the front piece on as the request's bio and resubmits the rest,
/// `parent`): a marked parent's piece is marked the same.
#[inline(always)]
pub fn split(piece: u64, parent: u64) {
    if parent == 0 || !marked() {
        return;
    }
    // SAFETY: LruHashMap::get, copied at once: an evicted and reused element reads as another bio's
    // mark (integers only), never a fault.
    if let Some(r) = unsafe { REMAPS.get(&parent) } {
        let r = *r;
        let _ = REMAPS.insert(&piece, &r, BPF_ANY as u64);
    }
}

/// The mark of `bio` (removed), or an empty [`Remap`] (`dev` 0).
#[inline(always)]
pub fn take(bio: u64) -> Remap {
    if bio == 0 || !marked() {
        return Remap::default();
    }
    // SAFETY: LruHashMap::get, copied at once: an evicted and reused element reads as another bio's
    // mark (integers only), never a fault.
    match unsafe { REMAPS.get(&bio) } {
        Some(r) => {
            let r = *r;
            let _ = REMAPS.remove(&bio);
            r
        }
        None => Remap::default(),
    }
}

/// [`LOG`] if `bio` was marked a log bio, else 0; the mark is removed (no [`Remap`] is
/// returned: for a program with no stack to spare).
#[inline(always)]
pub fn take_class(bio: u64) -> u16 {
    if bio == 0 || !marked() {
        return 0;
    }
    // SAFETY: LruHashMap::get, one field read at once: an evicted and reused element reads as
    // another bio's mark, never a fault.
    let log = unsafe { REMAPS.get(&bio) }.is_some_and(|r| r.log != 0);
    let _ = REMAPS.remove(&bio);
    if log {
        LOG
    } else {
        0
    }
}

/// The class a mark adds: [`LOG`] for a log bio, else 0.
#[inline(always)]
pub fn class_of(r: &Remap) -> u16 {
    if r.log != 0 {
        LOG
    } else {
        0
    }
}

/// Links the entry of `key` (made at `enter_ns`, ns) to the upper I/O of its mark `r`, if any.
#[inline(always)]
pub fn link(key: u64, enter_ns: u64, r: &Remap) {
    if r.dev == 0 {
        return;
    }
    let u = Upper {
        enter_ns,
        sector: r.sector,
        dev: r.dev,
        _pad: 0,
    };
    let _ = UPPER.insert(&key, &u, BPF_ANY as u64);
}

/// Removes the mark of a bio that merged into a request or ended.
#[inline(always)]
pub fn forget(bio: u64) {
    if bio != 0 && marked() {
        let _ = REMAPS.remove(&bio);
    }
}
