//! `block_bio_remap(struct bio *bio, dev_t dev, sector_t from)` (before 5.11: `(q, bio, dev,
//! from)`): a bio-based driver sends a bio down the stack (drivers/md: raid0/1/10/5 legs;
//! drivers/md/dm.c clones; drivers/nvme/host/multipath.c: the head's bio to a path). `bio` is
//! already on its new disk; `dev`/`from` are where it came from.
//!
//! Most drivers remap a clone, and the upper disk's bio later ends on the upper disk
//! (`block_bio_complete`, bio_complete.rs). Some remap the very bio the upper disk was given
//! (NVMe multipath heads; md raid0 on kernels without md_account_bio's clones, or with iostats
//! off), or a piece split from it below its `block_bio_queue` (md raid0 chunks: block/bio.c
//! bio_split + bio_chain, which sets the piece's `bi_private` to its parent). Such a bio, once on
//! a request-based disk, gets no `block_bio_complete` at all (block/blk-mq.c,
//! blk_update_request clears BIO_TRACE_COMPLETION: "Completion has already been traced"), so
//! its entry is marked [`END_REMAPPED`] here and ended by the request that carries it. A bio
//! whose parent is tracked but which covers what the parent still covers is a clone sent in
//! its place, not a piece (inflight.rs, `covers`: md raid5's aligned reads), and is left alone:
//!
//! `block_rq_complete(struct request *rq, blk_status_t error, unsigned int nr_bytes)`
//! (`rq_complete_remapped`, not attached: `rq_complete_nested` tail-calls it through
//! [`RQ_COMPLETE_TAIL`] while any remapped entry is live, [`walk_remapped`], so a machine
//! without such bios pays no attachment for it): the bios the
//! completion covers (`rq->bio` → `bi_next`, in order, each `bi_size` bytes) are looked up and
//! their entries ended as I/Os of the upper disk (total stage only, like every bio-based I/O).
//! Inside a flush sequence (block/blk-flush.c) the data request's bios end at its last
//! completion (0 bytes, after the post-flush), which the walk then covers.
use aya_ebpf::{
    bindings::BPF_ANY,
    macros::map,
    maps::{Array, PerCpuArray, ProgramArray},
    EbpfContext,
};
use observer_common::{
    maps::{Counter, Inflight, END_CHAINED, END_REMAPPED},
    stage::data_final,
};
use observer_ebpf::{
    arg,
    kernel::{bio_disk, disk_dev, in_flush_seq},
    layout, programs, read,
    store::add,
};

use super::bio_complete::bio_ended;
use crate::{
    bio_end::bio_counted,
    chain::unlink,
    inflight::{keep_ended_parent, piece_of, split_done},
    inherit::mark,
    maps::{count, INFLIGHT},
};

/// Live `remapped` entries (one u64, changed atomically): while 0, `rq_complete_nested` does not
/// tail-call `rq_complete_remapped`. It only gates work, never decides an outcome. Only an
/// entry ended here is taken off it: one counted lost (its address reused, a ninth remapped bio
/// of one request, a walk the kernel skipped) stays in it, so after such a loss every
/// completion pays the walk until the daemon restarts (as when the walk had a program of its
/// own, attached to every completion).
#[map]
static REMAPPED_LIVE: Array<u64> = Array::with_max_entries(1, 0);

/// Element 0: `rq_complete_remapped` (in the variant of `rq_complete_nested`'s argument layout
/// and attach mode), set by the daemon after loading, before anything is attached
/// (observer/src/bpf/loader.rs). A tail call replaces the calling program: the kernel counts
/// its time in the caller's bpf_stats, and it runs no recursion check of its own.
#[map]
static RQ_COMPLETE_TAIL: ProgramArray = ProgramArray::with_max_entries(1, 0);

/// The last thing `rq_complete_nested` does: while a remapped entry is live, continues as
/// `rq_complete_remapped` on the same completion (same context). Returns only when there is
/// none, or the tail call failed (an empty slot: nothing to end then either).
#[inline(always)]
pub fn walk_remapped(c: &impl EbpfContext) {
    match REMAPPED_LIVE.get(0) {
        Some(n) if *n != 0 => {}
        _ => return,
    }
    // SAFETY: `c` is this program's own context, handed on unchanged to the program the daemon
    // put in the array: the same tracepoint, argument layout and attach mode as this one (the
    // loader picks its variant by this program's name: observer/src/bpf/loader.rs
    // `tail_steps`). The kernel checks only part of that (kernel/bpf/core.c
    // `bpf_prog_map_compatible`: the type on 5.10, the attach prototype of tracing programs
    // later; not a raw_tp program's tracepoint).
    unsafe { RQ_COMPLETE_TAIL.tail_call(c, 0) };
}

/// Bios walked per completion, at most.
const MAX_WALK: usize = 128;
/// Remapped bios ended per completion, at most (a power of two) (a request of more merged remapped pieces
/// leaves the rest live: counted lost when their address is reused).
const MAX_ENDED: usize = 8;
/// The remapped bios one completion covers, between the walk and their ends.
#[repr(C)]
struct Ended {
    n: u64,
    bios: [u64; MAX_ENDED],
}
/// Per CPU: [`Ended`].
#[map]
static ENDED: PerCpuArray<Ended> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn live_add(n: u64) {
    if let Some(p) = REMAPPED_LIVE.get_ptr_mut(0) {
        // SAFETY: `p` is REMAPPED_LIVE element 0 (a non-null lookup): a u64, valid and 8-aligned
        // for the map's life.
        unsafe { add(p, n) };
    }
}

#[inline(always)]
fn on_bio_remap(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    let disk = bio_disk(bio, &l);
    let q: u64 = read(disk, l.disk_queue);
    let bio_based = read::<u64>(q, l.q_mq_ops) == 0;
    // From the upper disk's log region: the bio's request or entry below is a log I/O too (a
    // bio-based disk below carries the region on: inherit.rs).
    let below = bio_based.then(|| (disk_dev(disk, &l), read::<u64>(bio, l.bio_sector)));
    mark(bio, arg(c, i + 1) as u32, arg(c, i + 2), below);
    if bio_based {
        // Onto another bio-based disk: its end is traced there (bio_complete.rs).
        return;
    }
    if let Some(p) = INFLIGHT.get_ptr_mut(&bio) {
        // SAFETY: `p` is `bio`'s INFLIGHT element (a non-null lookup), valid while the program
        // runs; its remap comes between its entry and its end, never at once with another event of
        // it, so no other reference is live.
        let e = unsafe { &mut *p };
        if e.is_live() && e.end_by != END_REMAPPED {
            if e.end_by == END_CHAINED {
                // Its end comes with the request now, not with a chain's.
                unlink(bio, Some(e), &l);
            }
            e.end_by = END_REMAPPED;
            live_add(1);
        }
        return;
    }
    // Not the upper disk's bio itself: a piece split from it (bi_private = the parent).
    let Some(mut e) = piece_of(bio, Some((arg(c, i + 1) as u32, arg(c, i + 2))), &l) else {
        split_done(bio);
        return;
    };
    e.end_by = END_REMAPPED;
    if INFLIGHT.insert(&bio, &e, BPF_ANY as u64).is_err() {
        count(Counter::InflightFull);
        return;
    }
    live_add(1);
}

/// Argument `i` is the request, then the error and the bytes completed. Two passes keep the
/// verifier's work small: the walk only finds the remapped bios the completion covers (up to
/// [`MAX_ENDED`], listed in `ENDED`), then each found entry is ended.
#[inline(always)]
fn on_rq_complete(c: &impl EbpfContext, i: usize) {
    match REMAPPED_LIVE.get(0) {
        Some(n) if *n != 0 => {}
        _ => return,
    }
    let rq = arg(c, i);
    let error = arg(c, i + 1) as u32 as u64;
    let nr_bytes = arg(c, i + 2) as u32 as u64;
    let l = layout();
    // Only a completion of all the request's bytes ends its bios (a partial one, rare, leaves
    // them to the last; one inside a flush sequence leaves them to the sequence's end, whose
    // completion carries 0 bytes of 0 left).
    if !data_final(in_flush_seq(rq, &l), nr_bytes, read(rq, l.rq_data_len)) {
        return;
    }
    let Some(found) = ENDED.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: `found` is this CPU's ENDED element (a non-null lookup of a per-CPU array: no other
    // CPU writes it), valid while the program runs. Only a completion nesting on this CPU (5.10
    // nests programs) could write it meanwhile: then some bios are ended by the wrong walk, but
    // every index is masked below MAX_ENDED, so nothing is written out of bounds.
    let found = unsafe { &mut *found };
    // The count lives in the map, not in a register: the paths through the walk then meet in
    // one verifier state per step, and every way out of it reaches what follows in one state
    // (else each is verified on its own: too many for the raw_tp variant).
    // SAFETY: `found.n` is a u64 field of the valid `found`: one volatile store.
    unsafe { core::ptr::write_volatile(&mut found.n, 0) };
    let mut bio: u64 = read(rq, l.rq_bio);
    for _ in 0..MAX_WALK {
        if bio == 0 {
            break;
        }
        // SAFETY: HashMap::get, two fields read at once (aya's caveat: an element removed and
        // reused meanwhile reads as another key's value, integers only, never a fault: hash
        // elements are preallocated and stay mapped while the program runs, under RCU).
        if let Some(e) = unsafe { INFLIGHT.get(&bio) } {
            if e.end_by == END_REMAPPED && e.is_live() {
                // SAFETY: `found.n` is a u64 field of the valid `found`: one volatile load.
                let k = unsafe { core::ptr::read_volatile(&found.n) } as usize;
                if k >= MAX_ENDED {
                    break;
                }
                found.bios[k & (MAX_ENDED - 1)] = bio;
                // SAFETY: `found.n` is a u64 field of the valid `found`: one volatile store.
                unsafe { core::ptr::write_volatile(&mut found.n, k as u64 + 1) };
            }
        }
        bio = read(bio, l.bio_next);
    }
    end_found(found, error);
}

/// Ends the entries `found` lists: the first in full; the others (ended at the same instant by
/// the same request) counted and timed, their disk's stall state and any slow record left to
/// the first (the verifier would not take MAX_ENDED full copies).
#[inline(always)]
fn end_found(found: &Ended, error: u64) {
    // SAFETY: `found.n` is a u64 field of the valid `found` (this CPU's ENDED element): one
    // volatile load.
    let n = unsafe { core::ptr::read_volatile(&found.n) } as usize;
    if n == 0 {
        return;
    }
    if let Some(e) = take(found.bios[0]) {
        // With the bytes of bios chained to it and folded in (chain.rs).
        bio_ended(found.bios[0], e, e.size as u64 + e.bytes, error);
    }
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    for k in 1..MAX_ENDED {
        if k >= n {
            break;
        }
        if let Some(mut e) = take(found.bios[k]) {
            e.bytes += e.size as u64;
            let _ = bio_counted(&e, error, now);
        }
    }
}

/// Takes a live remapped entry out of `INFLIGHT`.
#[inline(always)]
fn take(bio: u64) -> Option<Inflight> {
    // SAFETY: HashMap::get, copied at once (before the checks and the remove) (aya's caveat: an
    // element removed and reused meanwhile reads as another key's value, integers only, never a
    // fault: hash elements are preallocated and stay mapped while the program runs, under RCU).
    let e = *unsafe { INFLIGHT.get(&bio) }?;
    if e.end_by != END_REMAPPED || !e.is_live() {
        return None;
    }
    let _ = INFLIGHT.remove(&bio);
    live_add(u64::MAX);
    keep_ended_parent(bio, &e);
    Some(e)
}

/// Ends a remapped entry whose bio ended before any request carried it (`block_bio_complete`
/// on a request-based disk: e.g. failed there at submission). Whether `bio` had one.
#[inline(always)]
pub fn ended_unrequested(bio: u64, status: u64) -> bool {
    let Some(e) = take(bio) else {
        return false;
    };
    bio_ended(bio, e, e.size as u64 + e.bytes, status);
    true
}

programs!(on_bio_remap => "block_bio_remap", bio_remap, bio_remap_raw, 0);
programs!(on_bio_remap => "block_bio_remap", bio_remap_q, bio_remap_q_raw, 1);
programs!(on_rq_complete => "block_rq_complete", rq_complete_remapped, rq_complete_remapped_raw, 0);
programs!(on_rq_complete => "block_rq_complete", rq_complete_remapped_q, rq_complete_remapped_q_raw, 1);
