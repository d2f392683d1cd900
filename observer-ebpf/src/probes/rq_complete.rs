//! `block_rq_complete(struct request *rq, blk_status_t error, unsigned int nr_bytes)`: a
//! (partial) completion (blk_update_request). Aggregates a request's final completion into its
//! per-CPU histograms and reports it if slow. It has taken the request first since 4.13 at the
//! latest (4.10: `(q, rq, nr_bytes)`), older than any kernel with BTF: the `_q` pair is
//! declared like every handler's but never chosen.
use aya_ebpf::{helpers::bpf_ktime_get_ns, EbpfContext};
use observer_common::{
    class::{classify, Op, OP_MASK},
    layout::KernelLayout,
    maps::{ClassStats, Counter, Inflight, SlowEvent, EVENT_SLOW},
    Stage,
};
use observer_ebpf::{
    arg,
    kernel::{bio_dev, bio_merges, in_flush_seq, is_flush, original_flags, rq_dev},
    layout, programs, read,
    store::observe,
};

use crate::{
    bio_end::bio_counted,
    chain::{entered_at, saw_traced_end, unlink},
    inflight::{enter, is_piece_of_discard, live, mark_free, piece_of, take_bio},
    maps::{count, emit, error_seen, owner_count, stats, SETTINGS},
    nested::{self, Pair},
    stall,
};

/// Argument `i` is the request, then the error and the bytes completed. The first program of a
/// nested.rs pair.
#[inline(always)]
fn on_complete(c: &impl EbpfContext, i: usize) {
    nested::ran(Pair::RqComplete, nested::rq_key(arg(c, i), &layout()));
    complete_args(c, i);
}

/// `block_rq_complete` again, attached after [`on_complete`]'s program: a completion the kernel
/// skipped that program for (it was running on this CPU: nested.rs) is handled here.
#[inline(always)]
fn on_complete_nested(c: &impl EbpfContext, i: usize) {
    if nested::skipped(Pair::RqComplete, nested::rq_key(arg(c, i), &layout())) {
        count(Counter::NestedEnds);
        complete_args(c, i);
    }
}

#[inline(always)]
fn complete_args(c: &impl EbpfContext, i: usize) {
    complete(
        arg(c, i),
        arg(c, i + 1) as u32 as u64,
        arg(c, i + 2) as u32 as u64,
    );
}

/// A request's stages, in ns.
struct Latency {
    queue: u64,
    device: u64,
    total: u64,
}

#[inline(always)]
fn complete(rq: u64, error: u64, nr_bytes: u64) {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    let l = layout();
    let data_len: u32 = read(rq, l.rq_data_len);
    // The flush request completes once (it carries RQF_FLUSH_SEQ itself). A data request is
    // final unless more bytes remain, or it is inside a flush sequence (its data part completes
    // once with RQF_FLUSH_SEQ set, then again with 0 bytes when the post-flush is done).
    let data_final = !in_flush_seq(rq, &l) && nr_bytes >= data_len as u64;
    let Some(e) = entry_or_untracked(rq, now, data_final, error, &l) else {
        return;
    };
    e.bytes += nr_bytes;
    if !(data_final || e.enter_ns == 0) {
        return;
    }
    let copy = *e;
    mark_free(e);
    let e = copy;
    if error != 0 {
        error_seen(e.dev, e.class, error);
    }
    let Some(s) = stats(e.dev, e.class) else {
        return;
    };
    // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs `stats`: a
    // non-null lookup of a per-CPU hash, so no other CPU writes it), valid while the program runs;
    // a program nesting on this CPU may count into it too (integer counts, nothing invalid).
    let s = unsafe { &mut *s };
    s.requests += 1;
    s.bytes += e.bytes;
    s.requeues += e.requeues as u64;
    s.dispatch.record(e.size, e.bios, e.missed);
    owner_count(e.dev, e.class, e.owner_cgroup, e.bytes);
    if (e.dispatch_ns != 0 && (e.dispatch_ns < e.enter_ns || now < e.dispatch_ns))
        || now < e.enter_ns
    {
        count(Counter::ClockAnomalies);
        return;
    }
    s.last_complete_ns = now;
    if e.dispatch_ns != 0 {
        stall::completed(e.dev, e.slot, e.class, e.dispatch_ns, now);
    }
    let lat = latency(&e, now);
    record(s, &e, &lat);
    if slow(e.class, &lat) {
        s.slow += 1;
        let merges = bio_merges(rq, &l);
        emit(&SlowEvent {
            kind: EVENT_SLOW,
            dev: e.dev,
            req: e,
            complete_ns: now,
            merges,
            status: error as u32,
        });
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
                    // it), valid while the program runs; a program nesting on this CPU may count
                    // into it too (integer counts, nothing invalid).
                    unsafe { (*s).untracked += 1 };
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
    bio_ended(e, bytes as u64 + e.bytes, status as u64);
}

/// Counts the end of an I/O of a bio-based disk (taken out of `INFLIGHT`) like a request's
/// final completion: `bytes` (B), `status` as its error, and only the total stage (entry →
/// now, btt Q2C): nothing is dispatched on such a disk. Its disk's device-stall state counts
/// it as at the device from its entry; a slow one is reported. Returns now (ns).
#[inline(always)]
pub fn bio_ended(mut e: Inflight, bytes: u64, status: u64) -> u64 {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    e.bytes = bytes;
    let Some((s, total)) = bio_counted(&e, status, now) else {
        return now;
    };
    stall::completed(e.dev, e.slot, e.class, e.enter_ns, now);
    let lat = Latency {
        queue: 0,
        device: 0,
        total,
    };
    if slow(e.class, &lat) {
        s.slow += 1;
        emit(&SlowEvent {
            kind: EVENT_SLOW,
            dev: e.dev,
            req: e,
            complete_ns: now,
            merges: 0,
            status: status as u32,
        });
    }
    now
}

/// The live entry of a completing request. Without one, a final completion (or the flush
/// request's) is counted as untracked, with its error if any.
#[inline(always)]
fn entry_or_untracked(
    rq: u64,
    now: u64,
    data_final: bool,
    error: u64,
    l: &KernelLayout,
) -> Option<&'static mut Inflight> {
    if let Some(e) = live(rq) {
        return Some(e);
    }
    if let Some(e) = never_dispatched(rq, now, data_final, l) {
        return Some(e);
    }
    let flush = is_flush(rq, l);
    if data_final || flush {
        let dev = rq_dev(rq, l);
        let class = if flush {
            Op::Flush as u16
        } else {
            classify(original_flags(rq, l), l)
        };
        if let Some(s) = stats(dev, class) {
            // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs
            // `stats`: a non-null lookup of a per-CPU hash, so no other CPU writes it), valid while
            // the program runs; a program nesting on this CPU may count into it too (integer
            // counts, nothing invalid).
            unsafe { (*s).untracked += 1 };
        }
        if error != 0 {
            error_seen(dev, 0, error);
        }
    }
    None
}

/// On kernels without `block_io_start` (before 6.5), a request that is neither inserted nor
/// dispatched (a data-less PREFLUSH write, completed by the flush machinery) is first seen at
/// its final completion: tracked from its `start_time_ns` if that is after the programs were
/// loaded.
#[inline(always)]
fn never_dispatched(
    rq: u64,
    now: u64,
    data_final: bool,
    l: &KernelLayout,
) -> Option<&'static mut Inflight> {
    if l.enter_fallback == 0 || !data_final {
        return None;
    }
    let start: u64 = read(rq, l.rq_start_time_ns);
    if start == 0 || start < l.loaded_ns || is_flush(rq, l) {
        return None;
    }
    enter(rq, now, 0, true, false, l);
    live(rq)
}

/// The stages of a completed request (timestamps already checked to be in order).
#[inline(always)]
fn latency(e: &Inflight, now: u64) -> Latency {
    if e.enter_ns == 0 {
        // Internal flush request: no entry point, total = device.
        let device = now - e.dispatch_ns;
        Latency {
            queue: 0,
            device,
            total: device,
        }
    } else if e.dispatch_ns == 0 {
        // Never dispatched itself (a data-less PREFLUSH write, completed by the flush
        // machinery): all of it was waiting, so queue = total.
        let total = now - e.enter_ns;
        Latency {
            queue: total,
            device: 0,
            total,
        }
    } else {
        Latency {
            queue: e.dispatch_ns - e.enter_ns,
            device: now - e.dispatch_ns,
            total: now - e.enter_ns,
        }
    }
}

/// Adds a request to its stage histograms: queue if it entered, device if it was dispatched
/// (or is the flush request), total always.
#[inline(always)]
fn record(s: &mut ClassStats, e: &Inflight, lat: &Latency) {
    if e.enter_ns != 0 {
        observe(&mut s.stages[Stage::Queue as usize], lat.queue);
    }
    if e.enter_ns == 0 || e.dispatch_ns != 0 {
        observe(&mut s.stages[Stage::Device as usize], lat.device);
    }
    observe(&mut s.stages[Stage::Total as usize], lat.total);
}

/// Whether any stage is over its slow threshold for the request's op.
#[inline(always)]
fn slow(class: u16, lat: &Latency) -> bool {
    let Some(set) = SETTINGS.get(0) else {
        return false;
    };
    let mut op = (class & OP_MASK) as usize;
    if op >= 6 {
        op = 5;
    }
    let t = &set.slow_ns[op];
    let over = |v: u64, th: u64| th != 0 && v > th;
    over(lat.queue, t[Stage::Queue as usize])
        || over(lat.device, t[Stage::Device as usize])
        || over(lat.total, t[Stage::Total as usize])
}

programs!(on_complete => "block_rq_complete", rq_complete, rq_complete_raw, 0);
programs!(on_complete => "block_rq_complete", rq_complete_q, rq_complete_q_raw, 1);
programs!(on_complete_nested => "block_rq_complete", rq_complete_nested, rq_complete_nested_raw, 0);
programs!(on_complete_nested => "block_rq_complete", rq_complete_nested_q, rq_complete_nested_q_raw, 1);
