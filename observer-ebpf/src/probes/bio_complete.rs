//! `block_bio_complete(struct request_queue *q, struct bio *bio)` (include/trace/events/block.h;
//! the queue first on every kernel, so the bio is argument 1 in both pairs; older kernels pass
//! more after it, unused here): a bio ended (block/bio.c, bio_endio; only for bios that
//! passed `block_bio_queue`, BIO_TRACE_COMPLETION). On a bio-based disk (dm, md, NVMe
//! multipath heads: `q->mq_ops` NULL) this is the end of one of its I/Os, counted like a
//! request's final completion with a total stage only (btt Q2C: nothing is dispatched on such
//! a disk), here ([`bio_completed`], [`bio_ended`]); on a request-based disk the bio's queued
//! entry (queued.rs) or remapped entry (bio_remap.rs) is ended. Two programs per layout
//! (nested.rs): `bio_complete` and `bio_complete_nested`.
use core::ptr::addr_of_mut;

use aya_ebpf::{helpers::bpf_ktime_get_ns, EbpfContext};
use observer_common::{
    class::classify,
    layout::KernelLayout,
    maps::{Counter, Inflight},
    stage::Latency,
};
use observer_ebpf::{arg, kernel::bio_dev, layout, programs, read, store::add};

use super::bio_remap::ended_unrequested;
use crate::{
    bio_end::bio_counted,
    chain::{entered_at, saw_traced_end, unlink},
    inflight::{is_piece_of_discard, piece_of, take_bio},
    maps::{count, emit_slow, error_seen, slow, stats},
    nested::{self, Pair},
    queued::forget,
    stall,
};

/// Argument `i` is the bio, `i - 1` the queue. On a bio-based disk (`q->mq_ops` NULL) the bio's
/// I/O is aggregated; else its entry is forgotten. The first program of a nested.rs pair.
#[inline(always)]
fn on_bio_complete(c: &impl EbpfContext, i: usize) {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    nested::ran(Pair::BioComplete, nested::bio_key(arg(c, i)), now);
    bio_end(c, i);
}

/// `block_bio_complete` again, attached after [`on_bio_complete`]'s program: an end the kernel
/// skipped that program for (it was running on this CPU: nested.rs) is handled here.
#[inline(always)]
fn on_bio_complete_nested(c: &impl EbpfContext, i: usize) {
    if nested::skipped(Pair::BioComplete, nested::bio_key(arg(c, i))) {
        count(Counter::NestedEnds);
        bio_end(c, i);
    }
}

/// What either program does for one end.
#[inline(always)]
fn bio_end(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let q = arg(c, i - 1);
    let l = layout();
    if q != 0 && read::<u64>(q, l.q_mq_ops) == 0 {
        // A mark of a bio ending here was taken when it entered (inherit.rs); no map
        // operation more here: 5.10's raw_tp variant is at the 512-byte stack limit.
        bio_completed(bio, &l);
        return;
    }
    let status: u8 = read(bio, l.bio_status);
    if !ended_unrequested(bio, status as u64) {
        forget(bio);
    }
}

/// The end of a bio of a bio-based disk (dm, md, NVMe multipath heads; `block_bio_complete`).
/// A bio not seen entering is either a piece split from a tracked bio below its
/// `block_bio_queue` (its `bi_private` is the parent: drivers/md split at chunk or
/// `max_sectors` boundaries and account each piece as an I/O of the upper disk, and so do
/// block/blk-merge.c's splits), counted as an I/O of its own with the parent's entry time and
/// class, or one queued before the programs were attached, counted as untracked, with its error
/// if any. Its bytes are its `bi_size` now (a split parent has given its first part to the
/// piece), or its size at entry if that is 0.
#[inline(always)]
pub fn bio_completed(bio: u64, l: &KernelLayout) {
    // Every read of the bio first, before its address is used as a map key (chain.rs, `link`).
    let status: u8 = read(bio, l.bio_status);
    let now_size: u32 = read(bio, l.bio_size);
    let e = match take_bio(bio) {
        Some(e) => {
            unlink(bio, Some(&e), l);
            e
        }
        // A piece: a chained bio whose end this kernel traces.
        None => match piece_of(bio, None, l) {
            Some(e) => {
                saw_traced_end();
                unlink(bio, None, l);
                e
            }
            // A piece of a tracked discard: part of its parent's one I/O.
            None if is_piece_of_discard(bio, l) => {
                saw_traced_end();
                return;
            }
            // A chained bio folded into the next one (chain.rs) whose end this kernel traces
            // after all, too far up the chain to find the bio it is counted with: it stays
            // counted there.
            None if entered_at(bio, l).is_some() => {
                saw_traced_end();
                unlink(bio, None, l);
                return;
            }
            None => {
                let dev = bio_dev(bio, l);
                if let Some(s) = stats(dev, classify(read(bio, l.bio_opf), l)) {
                    // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry
                    // (maps.rs `stats`: a non-null lookup of a per-CPU hash, so no other CPU writes
                    // it), valid while the program runs.
                    unsafe { add(addr_of_mut!((*s).untracked), 1) };
                }
                if status != 0 {
                    error_seen(dev, 0, status as u64);
                }
                return;
            }
        },
    };
    // Pieces of it ended unseen (counted with it): all of its size at entry is done.
    let bytes = if e.bios == 0 && now_size != 0 && now_size <= e.size {
        now_size
    } else {
        e.size
    };
    // With the bytes of the bios chained to it and folded in (`e.bytes`, chain.rs).
    bio_ended(bio, e, bytes as u64 + e.bytes, status as u64);
}

/// Counts the end of an I/O of a bio-based disk (taken out of `INFLIGHT`) like a request's
/// final completion: `bytes` (B), `status` as its error, and only the total stage (entry →
/// now, btt Q2C): nothing is dispatched on such a disk. Its disk's device-stall state counts
/// it as at the device from its entry; a slow one is reported with the file of `bio`'s data
/// (observer_ebpf::file, read only then). Returns now (ns).
#[inline(always)]
pub fn bio_ended(bio: u64, mut e: Inflight, bytes: u64, status: u64) -> u64 {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    e.bytes = bytes;
    let Some((s, total)) = bio_counted(&e, status, now) else {
        return now;
    };
    stall::completed(e.dev, e.dev_slot, e.class, e.enter_ns, now);
    let lat = Latency {
        queue: 0,
        device: 0,
        total,
    };
    if slow(e.class, &lat) {
        // SAFETY: `s` is this CPU's CLASS_STATS value of the I/O's (dev, class) (bio_end.rs
        // `bio_counted`), valid while the program runs.
        unsafe { add(addr_of_mut!((*s).slow), 1) };
        emit_slow(&e, now, 0, status as u32, bio, &layout());
    }
    now
}

programs!(on_bio_complete => "block_bio_complete", bio_complete, bio_complete_raw, 1);
programs!(on_bio_complete => "block_bio_complete", bio_complete_q, bio_complete_q_raw, 1);
programs!(on_bio_complete_nested => "block_bio_complete", bio_complete_nested, bio_complete_nested_raw, 1);
programs!(on_bio_complete_nested => "block_bio_complete", bio_complete_nested_q, bio_complete_nested_q_raw, 1);
