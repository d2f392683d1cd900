//! Bios of bio-based disks submitted chained to a bio that is not submitted yet: block/blk-lib.c
//! blk_next_bio chains each bio of a discard or a zero-out (`blkdev_issue_zeroout` without
//! WRITE_ZEROES support writes ZERO_PAGE bios of up to 1 MiB: md raid1/raid10, dm-crypt; e.g.
//! mkfs.xfs zeroing the log) to the next one (block/bio.c bio_chain: `bi_private` = the next,
//! `bi_end_io` = bio_chain_endio) before submitting it. Only the last bio of such a chain has
//! an end of its own; the end of each other one is implied by the end of the next
//! (bio_remaining_done).
//!
//! Whether the kernel traces the end of the others depends on it: since 5.11 bio_endio traces
//! `block_bio_complete` before it hands a chained bio to its parent; 5.10's hands it over
//! first, and never traces it. Nothing is decided by version: the running kernel shows it the
//! first time the end of a chained bio is traced (a piece split off a tracked bio, which
//! bio_chain chains to it: bio_complete.rs, `bio_completed`; [`saw_traced_end`]). From then on
//! nothing is linked or folded: every chained bio ends as itself. Until then, a bio entering
//! chained to a bio
//! not tracked is linked to it ([`link`]: `CHAINED`, marked [`END_CHAINED`]). When that next
//! bio enters, the chained one is folded into it ([`fold`]): its entry goes, and it is counted
//! with the next bio, as a piece split off it is (bio_end.rs, [`bio_counted`]): its I/O in
//! `bios`, its bytes in `bytes`. If its own end is traced after all, it is a piece ending on
//! its own (inflight.rs, `piece_of`: taken back out of the next bio's counts), timed from its
//! own entry ([`entered_at`]). So a chain is counted bio by bio on every kernel, and no entry
//! whose end the kernel hides is left behind.
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_ANY,
    macros::map,
    maps::{Array, LruHashMap},
};
use observer_common::{
    class::Op,
    layout::KernelLayout,
    maps::{ChainLink, Inflight, CHAINED_ENTRIES, END_CHAINED},
};
use observer_ebpf::{read, store::put};

use crate::{bio_end::bio_counted, maps::INFLIGHT};

/// Bio not yet seen entering → the tracked bio chained to it (observer_common::maps::CHAINED).
#[map]
static CHAINED: LruHashMap<u64, ChainLink> = LruHashMap::with_max_entries(CHAINED_ENTRIES, 0);

/// 1 once the end of a chained bio was traced on this kernel ([`saw_traced_end`]), else 0.
#[map]
static ENDS_TRACED: Array<u64> = Array::with_max_entries(1, 0);

/// Whether this kernel has shown that it traces the end of a chained bio.
#[inline(always)]
pub(crate) fn ends_traced() -> bool {
    ENDS_TRACED.get(0).is_some_and(|v| *v != 0)
}

/// The end of a chained bio (a piece split off a tracked bio) was traced: this kernel traces
/// them (block/bio.c bio_endio, since 5.11), so chains need no folding.
#[inline(always)]
pub fn saw_traced_end() {
    if let Some(p) = ENDS_TRACED.get_ptr_mut(0) {
        // SAFETY: `p` is ENDS_TRACED element 0 (a non-null lookup): a u64 valid for the map's life;
        // every writer stores the same 1.
        unsafe { put(p, 1) };
    }
}

/// `e`, the new entry of `bio` (entered a bio-based disk), takes in the bio chained to it, if
/// one is linked to it and still in flight ([`fold`]); then, if `bio` is chained to a bio not
/// tracked (`parent`, its `bi_private`, read by the caller before `bio` was used as a map key:
/// 6.1's verifier forgets that a key's stack copy is a `struct bio *`, and refuses a direct
/// load through it in tp_btf; a non-bio there is harmless: no bio enters at that address while
/// `bio` lives), it is linked to it and marked [`END_CHAINED`]. Pieces of tracked bios are not
/// linked (their parent is tracked: inflight.rs, `tracked_parent`).
#[inline(always)]
pub fn link(bio: u64, parent: u64, e: &mut Inflight) {
    if ends_traced() {
        return;
    }
    fold(bio, e);
    // SAFETY: HashMap::get, read at once (`is_live`) (aya's caveat: an element removed and reused
    // meanwhile reads as another key's value, integers only, never a fault: hash elements are
    // preallocated and stay mapped while the program runs, under RCU).
    if parent == 0 || unsafe { INFLIGHT.get(&parent) }.is_some_and(|p| p.is_live()) {
        return;
    }
    let v = ChainLink {
        child: bio,
        enter_ns: e.enter_ns,
    };
    if CHAINED.insert(&parent, &v, BPF_ANY as u64).is_ok() {
        e.end_by = END_CHAINED;
    }
}

/// The bio linked to `bio` (chained to it), if its entry is still live: removed, and counted in
/// `e` (`bios` + 1 + its own, `bytes` + its size + its own). The link stays until either
/// ends, for [`entered_at`].
#[inline(always)]
fn fold(bio: u64, e: &mut Inflight) {
    // SAFETY: LruHashMap::get, copied at once: an element evicted and reused meanwhile reads as
    // another link (integers only, never a fault: the LRU's elements are preallocated), which the
    // checks below reject unless its child is live and matches.
    let Some(v) = (unsafe { CHAINED.get(&bio) }).copied() else {
        return;
    };
    // SAFETY: HashMap::get, copied at once (aya's caveat: an element removed and reused meanwhile
    // reads as another key's value, integers only, never a fault: hash elements are preallocated
    // and stay mapped while the program runs, under RCU).
    let Some(c) = (unsafe { INFLIGHT.get(&v.child) }).copied() else {
        return;
    };
    // The same disk and op: a chain is one discard or one zero-out (a bio whose `bi_private`
    // merely points at what became another bio is no chain).
    if !(c.is_live()
        && c.end_by == END_CHAINED
        && c.enter_ns == v.enter_ns
        && c.dev == e.dev
        && Op::from_code(c.class) == Op::from_code(e.class))
    {
        return;
    }
    // Whoever deletes the child's entry owns its end: its own end, traced on another CPU at
    // once (6.x, before [`saw_traced_end`]), takes it too (inflight.rs, `take_bio`). Counted
    // here first, so that an end that finds the entry gone finds it in `e` (and takes it back
    // out: inflight.rs, `piece_of`); undone if the end deleted it first. Before, both could
    // count it: one I/O more than the disk's bio ends.
    // Volatile stores: the compiler may not move them past the delete (`e` is a `&mut`, which
    // it would otherwise assume the helper cannot see). Any failed delete undoes the fold: the
    // entry was taken (-ENOENT), or it is still there (-EBUSY) and its own end counts it.
    let (bios, bytes) = (e.bios, e.bytes);
    // SAFETY: `e` is the entering bio's INFLIGHT element (the caller's `&mut`): its `bios` and
    // `bytes` fields are valid, aligned and written only through it here.
    unsafe {
        put(
            addr_of_mut!(e.bios),
            bios.saturating_add(1).saturating_add(c.bios),
        );
        put(addr_of_mut!(e.bytes), bytes + c.size as u64 + c.bytes);
        if INFLIGHT.remove(&v.child).is_err() {
            put(addr_of_mut!(e.bios), bios);
            put(addr_of_mut!(e.bytes), bytes);
        }
    }
}

/// Whether the chained bio `child` was folded into `bio` ([`fold`]: `bio`'s entry holds its
/// counts, and those of pieces split off it). The link stays until either ends.
#[inline(always)]
pub fn folded_into(child: u64, bio: u64) -> bool {
    // SAFETY: LruHashMap::get, one u64 compared at once: an evicted and reused element reads as
    // another link (then no match), never a fault.
    unsafe { CHAINED.get(&bio) }.is_some_and(|v| v.child == child)
}

/// `bio` ended, traced (its entry `e`, or `None` for a piece): the link of the bio chained to
/// it and its own link to the bio it is chained to go.
#[inline(always)]
pub fn unlink(bio: u64, e: Option<&Inflight>, l: &KernelLayout) {
    // Once this kernel traces chained ends nothing is linked or folded: a bio not chained has
    // nothing to undo (a link left from before goes with the LRU), and the hot path no map op.
    let chained = e.is_none_or(|e| e.end_by == END_CHAINED);
    if !chained && ends_traced() {
        return;
    }
    // Read first: see [`link`].
    let parent: u64 = read(bio, l.bio_private);
    let _ = CHAINED.remove(&bio);
    if !chained {
        return;
    }
    // SAFETY: LruHashMap::get, one u64 compared at once: an evicted and reused element reads as
    // another link (then no match), never a fault.
    if unsafe { CHAINED.get(&parent) }.is_some_and(|v| v.child == bio) {
        let _ = CHAINED.remove(&parent);
    }
}

/// When `bio`, folded into the bio it is chained to ([`fold`]), entered (ns), if its link is
/// still there.
#[inline(always)]
pub fn entered_at(bio: u64, l: &KernelLayout) -> Option<u64> {
    let parent: u64 = read(bio, l.bio_private);
    // SAFETY: LruHashMap::get; `v` is read right away (two u64): an evicted and reused element
    // reads as another link, rejected unless its child is `bio`; never a fault.
    let v = unsafe { CHAINED.get(&parent) }?;
    (v.child == bio).then_some(v.enter_ns)
}

/// Counts an [`END_CHAINED`] entry whose end was not traced and whose struct a new bio reuses
/// before the bio it is chained to entered (inflight.rs, `enter_bio`), as ended at `now` (ns):
/// like any bio-based I/O, with its size as bytes; its disk's stall state is left alone (the
/// time is a bound, not an event).
#[inline(always)]
pub fn hidden_end(mut e: Inflight, now: u64) {
    e.bytes += e.size as u64;
    let _ = bio_counted(&e, 0, now);
}
