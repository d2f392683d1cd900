//! The decisions about a request's stages, as pure functions of its timestamps: named after
//! btt's (blktrace) events, Q (queued: `block_bio_queue`, or the request's entry,
//! `block_io_start`), D (dispatched to the driver: `block_rq_issue`, block/blk-mq.c
//! blk_mq_start_request) and C (completed: `block_rq_complete`, block/blk-mq.c
//! blk_update_request; `block_bio_complete` for a bio of a bio-based disk, block/bio.c
//! bio_endio). The stages are [`Stage::Queue`] (Q2D), [`Stage::Device`] (D2C) and
//! [`Stage::Total`] (Q2C).
//!
//! Every timestamp is `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, ns), 0 meaning "not seen" (as in
//! [`crate::maps::Inflight`]). The eBPF programs call these at each event (so every function is
//! `#[inline(always)]`, takes plain integers and cannot panic: wrapping arithmetic, no
//! indexing); the daemon calls [`latency`] for the slow requests it reports.

use crate::Stage;

/// A completed request's stages (ns): queue (Q2D), device (D2C), total (Q2C). A stage the
/// request did not go through is 0 (see [`recorded`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    /// Entry → first dispatch (btt Q2D), ns.
    pub queue: u64,
    /// First dispatch → completion (btt D2C), ns.
    pub device: u64,
    /// Entry → completion (btt Q2C), ns.
    pub total: u64,
}

/// Whether the timestamps of a request completing at `now` are out of order: dispatched
/// (`dispatch_ns` ≠ 0) before it entered or after `now`, or entered after `now` (all ns). Such
/// a request is counted (requests, bytes) but no latency is taken from it
/// (`blkobs_clock_anomalies_total`). `bpf_ktime_get_ns` reads each CPU's clock
/// (kernel/bpf/helpers.c, ktime_get_mono_fast_ns), and a request's events run on different
/// CPUs: an unsynchronised TSC can make a later event read an earlier time.
#[inline(always)]
pub const fn clock_anomaly(enter_ns: u64, dispatch_ns: u64, now: u64) -> bool {
    (dispatch_ns != 0 && (dispatch_ns < enter_ns || now < dispatch_ns)) || now < enter_ns
}

/// The stages of a request that entered at `enter_ns` (0: the internal flush request,
/// block/blk-flush.c, which never enters), was first dispatched at `dispatch_ns` (0: never
/// dispatched itself: a data-less PREFLUSH write, completed by the flush machinery, or a bio
/// of a bio-based disk) and completed at `now` (all ns). The first dispatch counts: a requeued
/// request's device stage includes the requeue ([`redispatch`]). The timestamps must be in
/// order ([`clock_anomaly`] false); else the differences wrap.
#[inline(always)]
pub const fn latency(enter_ns: u64, dispatch_ns: u64, now: u64) -> Latency {
    if enter_ns == 0 {
        // The flush request: no entry point, total = device.
        let device = now.wrapping_sub(dispatch_ns);
        Latency {
            queue: 0,
            device,
            total: device,
        }
    } else if dispatch_ns == 0 {
        // Never dispatched itself: all of it was waiting, so queue = total.
        let total = now.wrapping_sub(enter_ns);
        Latency {
            queue: total,
            device: 0,
            total,
        }
    } else {
        Latency {
            queue: dispatch_ns.wrapping_sub(enter_ns),
            device: now.wrapping_sub(dispatch_ns),
            total: now.wrapping_sub(enter_ns),
        }
    }
}

/// Whether a completed request (timestamps as in [`latency`], ns) is added to `stage`'s
/// histogram: queue if it entered, device if it was dispatched or is the flush request (its
/// dispatch is its start), total always.
#[inline(always)]
pub const fn recorded(stage: Stage, enter_ns: u64, dispatch_ns: u64) -> bool {
    match stage {
        Stage::Queue => enter_ns != 0,
        Stage::Device => enter_ns == 0 || dispatch_ns != 0,
        Stage::Total => true,
    }
}

/// Whether a `block_rq_complete(rq, error, nr_bytes)` is the request's final completion (its
/// latency is then taken): `nr_bytes` (B) covers the `data_len` (B, `request::__data_len`,
/// the bytes left: block/blk-mq.c blk_update_request completes the request when no byte
/// remains), and the request is not inside a flush sequence (`in_flush_seq`: RQF_FLUSH_SEQ,
/// block/blk-flush.c): such a data request completes once with its bytes, then again with 0
/// bytes when the post-flush is done, which is final since the flag is cleared by then. The
/// flush request itself carries RQF_FLUSH_SEQ and completes once (its entry's `enter_ns` = 0
/// makes its completion final, outside this rule).
#[inline(always)]
pub const fn data_final(in_flush_seq: bool, nr_bytes: u64, data_len: u32) -> bool {
    !in_flush_seq && nr_bytes >= data_len as u64
}

/// Whether a completed request with stages `lat` (ns) is slow: any stage over its threshold
/// (`slow_ns`, ns, indexed by [`Stage`]: a row of [`crate::maps::Settings::slow_ns`], the
/// request's op). A threshold of 0 disables its stage; a stage the request did not go through
/// is 0 in `lat`, never over.
#[inline(always)]
pub const fn slow(lat: &Latency, slow_ns: &[u64; Stage::COUNT]) -> bool {
    let [queue, device, total] = *slow_ns;
    over(lat.queue, queue) || over(lat.device, device) || over(lat.total, total)
}

/// `v` over the threshold `th` (both ns; `th` = 0: never).
#[inline(always)]
const fn over(v: u64, th: u64) -> bool {
    th != 0 && v > th
}

/// Whether a device that went from `start_ns` to `now` (ns) without a dispatch (requests
/// queued) or a completion (requests at the device) had a stall episode: longer than
/// `stall_ns` (ns, [`crate::maps::Settings::stall_ns`]; 0 disables). `start_ns` = 0 (nothing
/// seen yet) and a clock going backwards (`now` ≤ `start_ns`) never make one.
#[inline(always)]
pub const fn stall(stall_ns: u64, start_ns: u64, now: u64) -> bool {
    stall_ns != 0 && start_ns != 0 && now > start_ns && now - start_ns > stall_ns
}

/// What a `block_rq_issue` (block/blk-mq.c blk_mq_start_request) means for a request that
/// already has a live entry ([`redispatch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    /// Its first dispatch (D): `dispatch_ns` is set now, its size and bios are final.
    First,
    /// A dispatch again after a requeue (`block_rq_requeue`, block/blk-mq.c
    /// __blk_mq_requeue_request): the first dispatch time stays (the device stage includes the
    /// requeue), the requeue was counted, only the requeued mark is cleared.
    AfterRequeue,
    /// Dispatched twice without a requeue or a completion: the `struct request` was reused after
    /// a completion that was not seen (typically the shared flush request). The old request is
    /// counted lost (no latency) and the dispatch is handled as a new request's.
    Stale,
}

/// The meaning of a dispatch of a request whose live entry has `dispatch_ns` (ns, 0: not
/// dispatched yet) and `requeued` (1 between a requeue and the next dispatch).
#[inline(always)]
pub const fn redispatch(dispatch_ns: u64, requeued: u8) -> Dispatch {
    if dispatch_ns == 0 {
        Dispatch::First
    } else if requeued != 0 {
        Dispatch::AfterRequeue
    } else {
        Dispatch::Stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn clock_in_order_is_no_anomaly() {
        assert!(!clock_anomaly(100, 150, 200));
        // Equal times (one clock tick) are in order.
        assert!(!clock_anomaly(100, 100, 100));
        // Never dispatched (bio-based, data-less PREFLUSH): only entry vs now.
        assert!(!clock_anomaly(100, 0, 200));
        // The flush request: no entry, dispatched then completed.
        assert!(!clock_anomaly(0, 150, 200));
    }

    #[test]
    fn clock_going_backwards_is_an_anomaly() {
        // Dispatched before it entered.
        assert!(clock_anomaly(150, 100, 200));
        // Completed before its dispatch.
        assert!(clock_anomaly(100, 200, 150));
        // Completed before it entered, never dispatched.
        assert!(clock_anomaly(200, 0, 100));
        // The flush request completing before its dispatch.
        assert!(clock_anomaly(0, 200, 100));
    }

    #[test]
    fn latency_of_a_dispatched_request() {
        let l = latency(1_000, 3_000, 10_000);
        assert_eq!(
            l,
            Latency {
                queue: 2_000,
                device: 7_000,
                total: 9_000
            }
        );
        assert_eq!(l.queue + l.device, l.total);
    }

    #[test]
    fn latency_of_a_requeued_request_keeps_its_first_dispatch() {
        // Entered at 1 ms, first dispatched at 2 ms, requeued, dispatched again at 5 ms
        // (redispatch keeps 2 ms), completed at 6 ms: device = 4 ms, requeue included.
        let l = latency(MS, 2 * MS, 6 * MS);
        assert_eq!((l.queue, l.device, l.total), (MS, 4 * MS, 5 * MS));
    }

    #[test]
    fn latency_without_a_dispatch_is_all_queue() {
        // Missing D timestamp: a data-less PREFLUSH write, or a bio of a bio-based disk.
        let l = latency(1_000, 0, 4_000);
        assert_eq!(
            l,
            Latency {
                queue: 3_000,
                device: 0,
                total: 3_000
            }
        );
        assert!(recorded(Stage::Queue, 1_000, 0));
        assert!(!recorded(Stage::Device, 1_000, 0));
        assert!(recorded(Stage::Total, 1_000, 0));
    }

    #[test]
    fn latency_of_the_flush_request_is_all_device() {
        let l = latency(0, 5_000, 8_000);
        assert_eq!(
            l,
            Latency {
                queue: 0,
                device: 3_000,
                total: 3_000
            }
        );
        assert!(!recorded(Stage::Queue, 0, 5_000));
        assert!(recorded(Stage::Device, 0, 5_000));
        assert!(recorded(Stage::Total, 0, 5_000));
    }

    #[test]
    fn a_dispatched_request_records_every_stage() {
        for st in Stage::ALL {
            assert!(recorded(st, 1_000, 2_000), "{st:?}");
        }
    }

    #[test]
    fn final_completion() {
        // All 4 KiB completed at once.
        assert!(data_final(false, 4096, 4096));
        // A partial completion: 1 KiB of 4 KiB left.
        assert!(!data_final(false, 3072, 4096));
        // More than left (a driver completing the whole request in one call).
        assert!(data_final(false, 8192, 4096));
        // Inside a flush sequence: its data part completes, but the post-flush is pending.
        assert!(!data_final(true, 4096, 4096));
        // After the post-flush: 0 bytes of 0 left, flag cleared.
        assert!(data_final(false, 0, 0));
        // A data-less request inside a flush sequence is not final either.
        assert!(!data_final(true, 0, 0));
    }

    #[test]
    fn slow_when_any_stage_is_over_its_threshold() {
        let lat = Latency {
            queue: 2 * MS,
            device: 30 * MS,
            total: 32 * MS,
        };
        assert!(slow(&lat, &[0, 20 * MS, 0]));
        assert!(slow(&lat, &[MS, 0, 0]));
        assert!(slow(&lat, &[0, 0, 31 * MS]));
        assert!(!slow(&lat, &[3 * MS, 40 * MS, 40 * MS]));
        // At the threshold is not over it.
        assert!(!slow(&lat, &[2 * MS, 30 * MS, 32 * MS]));
        // Every threshold 0: disabled.
        assert!(!slow(&lat, &[0, 0, 0]));
        // A stage not gone through (0) is never over, however low its threshold.
        let flush = latency(0, 5 * MS, 6 * MS);
        assert!(!slow(&flush, &[1, 2 * MS, 2 * MS]));
    }

    #[test]
    fn stall_only_past_the_threshold() {
        let t = 100 * MS;
        assert!(stall(t, MS, MS + t + 1));
        assert!(!stall(t, MS, MS + t));
        assert!(!stall(t, MS, 2 * MS));
        // Disabled.
        assert!(!stall(0, MS, 10_000 * MS));
        // Nothing seen yet.
        assert!(!stall(t, 0, 10_000 * MS));
        // Clock going backwards: no stall (and no wrapped difference).
        assert!(!stall(t, 10_000 * MS, MS));
        assert!(!stall(t, MS, MS));
    }

    #[test]
    fn redispatch_after_requeue() {
        assert_eq!(redispatch(0, 0), Dispatch::First);
        // Requeued before its first dispatch was seen: still its first.
        assert_eq!(redispatch(0, 1), Dispatch::First);
        assert_eq!(redispatch(5_000, 1), Dispatch::AfterRequeue);
        assert_eq!(redispatch(5_000, 0), Dispatch::Stale);
    }
}
