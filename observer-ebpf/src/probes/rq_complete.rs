//! `block_rq_complete(struct request *rq, blk_status_t error, unsigned int nr_bytes)`: a
//! (partial) completion (blk_update_request). Aggregates a request's final completion into its
//! per-CPU histograms and reports it if slow. It has taken the request first since 4.13 at the
//! latest (4.10: `(q, rq, nr_bytes)`), older than any kernel with BTF: the `_q` pair is
//! declared like every handler's but never chosen.
use core::ptr::addr_of_mut;

use aya_ebpf::{helpers::bpf_ktime_get_ns, EbpfContext};
use observer_common::{
    class::{classify, with_ioprio, Op},
    layout::KernelLayout,
    maps::{Counter, Inflight},
    stage::{self, clock_anomaly, latency},
};
use observer_ebpf::{
    arg,
    kernel::{bio_merges, in_flush_seq, is_flush, original_flags, rq_dev, rq_ioprio},
    layout, programs, read,
    store::{add, observe_stages, put},
};

use super::bio_remap::walk_remapped;
use crate::{
    inflight::{enter, live, mark_free},
    maps::{
        cgroup_latency, count, count_dispatch, emit_slow, error_seen, owner_count, slow, stats,
    },
    nested::{self, Pair},
    stall,
};

/// Argument `i` is the request, then the error and the bytes completed. The first program of a
/// nested.rs pair.
#[inline(always)]
fn on_complete(c: &impl EbpfContext, i: usize) {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    nested::ran(Pair::RqComplete, nested::rq_key(arg(c, i), &layout()), now);
    complete_args(c, i, now);
}

/// `block_rq_complete` again, attached after [`on_complete`]'s program: a completion the kernel
/// skipped that program for (it was running on this CPU: nested.rs) is handled here. Then,
/// while remapped bios are live, it continues as `rq_complete_remapped` (bio_remap.rs).
#[inline(always)]
fn on_complete_nested(c: &impl EbpfContext, i: usize) {
    if nested::skipped(Pair::RqComplete, nested::rq_key(arg(c, i), &layout())) {
        count(Counter::NestedEnds);
        // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
        complete_args(c, i, unsafe { bpf_ktime_get_ns() });
    }
    walk_remapped(c);
}

#[inline(always)]
fn complete_args(c: &impl EbpfContext, i: usize, now: u64) {
    complete(
        arg(c, i),
        arg(c, i + 1) as u32 as u64,
        arg(c, i + 2) as u32 as u64,
        now,
    );
}

/// The completion of `nr_bytes` of `rq` with `error`, at `now` (`bpf_ktime_get_ns`, ns).
#[inline(always)]
fn complete(rq: u64, error: u64, nr_bytes: u64, now: u64) {
    let l = layout();
    let data_len: u32 = read(rq, l.rq_data_len);
    // The flush request completes once (it carries RQF_FLUSH_SEQ itself). A data request is
    // final unless more bytes remain, or it is inside a flush sequence (its data part completes
    // once with RQF_FLUSH_SEQ set, then again with 0 bytes when the post-flush is done).
    let data_final = stage::data_final(in_flush_seq(rq, &l), nr_bytes, data_len);
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
    // SAFETY (every use of `s` below): `s` is this CPU's value of the (dev, class) CLASS_STATS
    // entry (maps.rs `stats`: a non-null lookup of a per-CPU hash, so no other CPU writes it),
    // valid while the program runs; a program nesting on this CPU counts into it with atomic
    // adds too (store.rs `add`).
    unsafe {
        add(addr_of_mut!((*s).requests), 1);
        add(addr_of_mut!((*s).bytes), e.bytes);
        if e.requeues != 0 {
            add(addr_of_mut!((*s).requeues), e.requeues as u64);
        }
        count_dispatch(s, &e);
    }
    owner_count(e.dev, e.class, e.owner_cgroup, e.bytes);
    if clock_anomaly(e.enter_ns, e.dispatch_ns, now) {
        count(Counter::ClockAnomalies);
        return;
    }
    // SAFETY: as above; a plain store (the latest of any writer is right).
    unsafe { put(addr_of_mut!((*s).last_complete_ns), now) };
    if e.dispatch_ns != 0 {
        stall::completed(e.dev, e.dev_slot, e.class, e.dispatch_ns, now);
    }
    let lat = latency(e.enter_ns, e.dispatch_ns, now);
    // SAFETY: as above.
    unsafe { observe_stages(addr_of_mut!((*s).stages), e.enter_ns, e.dispatch_ns, &lat) };
    cgroup_latency(&e, &lat);
    if slow(e.class, &lat) {
        // SAFETY: as above.
        unsafe { add(addr_of_mut!((*s).slow), 1) };
        // The first bio is still the request's here (blk_update_request traces before it
        // ends any bio): its file is read only for a slow request.
        let merges = bio_merges(rq, &l);
        emit_slow(&e, now, merges, error as u32, read(rq, l.rq_bio), &l);
    }
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
        // Its priority class as a tracked request gets it at entry (inflight.rs `enter`).
        let class = with_ioprio(class, rq_ioprio(rq, read(rq, l.rq_bio), l));
        if let Some(s) = stats(dev, class) {
            // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs
            // `stats`: a non-null lookup of a per-CPU hash, so no other CPU writes it), valid while
            // the program runs.
            unsafe { add(addr_of_mut!((*s).untracked), 1) };
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

programs!(on_complete => "block_rq_complete", rq_complete, rq_complete_raw, 0);
programs!(on_complete => "block_rq_complete", rq_complete_q, rq_complete_q_raw, 1);
programs!(on_complete_nested => "block_rq_complete", rq_complete_nested, rq_complete_nested_raw, 0);
programs!(on_complete_nested => "block_rq_complete", rq_complete_nested_q, rq_complete_nested_q_raw, 1);
