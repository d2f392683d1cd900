//! `block_rq_issue(struct request *rq)`: dispatch to the driver (blk_mq_start_request). At a
//! request's first dispatch its size and bios are final (observer_common::dispatch): they are
//! kept in its entry, and it is checked for a missed adjacent merge (missed_merge.rs).
use aya_ebpf::{helpers::bpf_ktime_get_ns, EbpfContext};
use observer_common::{
    class::Op,
    layout::KernelLayout,
    maps::{Counter, Inflight},
    stage::{self, Dispatch},
};
use observer_ebpf::{
    arg,
    kernel::{bio_count, is_flush, rq_dev},
    layout, programs, read,
    store::fill,
};

use crate::{
    inflight::{count_lost, enter, entry, live, mark_free},
    maps::{count, dev_slot},
    stall::dispatched,
};

#[inline(always)]
fn on_issue(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    let l = layout();
    if let Some(e) = live(rq) {
        if redispatch(e, rq, &l, now) {
            return;
        }
    }
    if is_flush(rq, &l) {
        // The shared per-hctx flush request (block/blk-flush.c): never "enters"; device stage
        // only. No data: it ends any run of adjacent dispatches.
        let Some(e) = entry(rq, true) else { return };
        let dev = rq_dev(rq, &l);
        let disk_slot = dev_slot(dev);
        // SAFETY: `e` is the flush request's entry from `entry` (its own INFLIGHT_SLOTS slot or
        // INFLIGHT element, non-null), valid while the program runs; no reference to it is live
        // here.
        unsafe { fill(e, 0, now, dev, disk_slot, Op::Flush as u16, 0, 0) };
        dispatched(dev, disk_slot, Op::Flush as u16, 0, now, 0, 0);
    } else if l.enter_fallback != 0 {
        // Directly issued without insert on a kernel without block_io_start: queue time is 0.
        enter(rq, now, now, false, true, &l);
        if let Some(e) = live(rq) {
            first_dispatch(e, rq, &l, now);
        }
    }
}

/// The first dispatch of a tracked request: its size (`__data_len`) and bios now go into its
/// entry, and the device's dispatch state (stalls, missed merges) is updated.
#[inline(always)]
fn first_dispatch(e: &mut Inflight, rq: u64, l: &KernelLayout, now: u64) {
    let bytes: u32 = read(rq, l.rq_data_len);
    let sector: u64 = read(rq, l.rq_sector);
    e.size = bytes;
    e.bios = bio_count(rq, l);
    let missed = dispatched(
        e.dev,
        e.dev_slot,
        e.class,
        e.enter_ns,
        now,
        sector,
        bytes >> 9,
    );
    e.missed = missed as u8;
}

/// Dispatch of a tracked request; false if the entry was stale and freed (then the request is
/// handled as a new one).
#[inline(always)]
fn redispatch(e: &mut Inflight, rq: u64, l: &KernelLayout, now: u64) -> bool {
    match stage::redispatch(e.dispatch_ns, e.requeued) {
        Dispatch::First => {
            e.dispatch_ns = now;
            first_dispatch(e, rq, l, now);
            true
        }
        Dispatch::AfterRequeue => {
            // The first dispatch stays (device time includes the requeue), the requeue was
            // counted; so do its size, bios and merge check.
            e.requeued = 0;
            true
        }
        Dispatch::Stale => {
            // The struct was reused after a completion we missed (typically the shared flush
            // request). Count that request as completed with its latency lost; never let the
            // stale timestamps produce a latency.
            count(Counter::StaleEntries);
            count_lost(e);
            mark_free(e);
            false
        }
    }
}

programs!(on_issue => "block_rq_issue", rq_issue, rq_issue_raw, 0);
programs!(on_issue => "block_rq_issue", rq_issue_q, rq_issue_q_raw, 1);
