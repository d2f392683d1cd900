//! Finds tracked requests whose completion the programs never saw, and retires them.
//!
//! On this kernel (6.18) a small fraction of `block_rq_complete` events (about 1 in 10^4 under
//! fio on XFS over loop, in bursts of a queue depth) reach ftrace but not the BPF programs
//! attached to the same tracepoint, while `recursion_misses` stays 0. Such a request stays in
//! `INFLIGHT` until its `struct request` is reused (the programs then count it as completed
//! with the latency lost) or until this reaper sees that the kernel has nothing in flight on
//! the device (`/sys/dev/block/M:m/inflight` reads 0 0) while the entry is older than
//! [`MIN_AGE_NS`]. Queued entries and the internal flush request are never reaped here: a
//! scheduler may hold requests for long, and the kernel does not count flushes in `inflight`.

use std::{collections::BTreeMap, sync::Mutex};

use aya::maps::{HashMap, MapData};
use observer_common::maps::{dev_major, dev_minor, ClassKey, Inflight};

use crate::{bpf::batch::read_inflight, time::monotonic_ns};

/// Only entries dispatched longer ago than this (ns) are candidates.
pub const MIN_AGE_NS: u64 = 1_000_000_000;

/// Requests retired by the reaper, per (device, class) key: they count as completed requests
/// with their latency lost (`blkobs_lost_completions_total`).
#[derive(Default)]
pub struct Reaped(pub Mutex<BTreeMap<ClassKey, u64>>);

/// Requests the kernel has in flight on a disk (reads + writes), or `None` if unreadable.
fn kernel_inflight(dev: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!(
        "/sys/dev/block/{}:{}/inflight",
        dev_major(dev),
        dev_minor(dev)
    ))
    .ok()?;
    text.split_whitespace().map(|v| v.parse::<u64>().ok()).sum()
}

/// One pass: retires candidates on devices where the kernel has nothing in flight.
///
/// Also deletes free entries (kept by the programs for reuse) when the map is more than half
/// full, so request structs of devices that went away cannot fill it.
pub fn reap(
    inflight: &mut HashMap<MapData, u64, Inflight>,
    capacity: u32,
    reaped: &Reaped,
) -> usize {
    let now = monotonic_ns();
    let mut candidates: BTreeMap<u32, Vec<(u64, Inflight)>> = BTreeMap::new();
    let mut free = Vec::new();
    let mut total = 0u32;
    for (rq, e) in read_inflight(inflight) {
        total += 1;
        if !e.is_live() {
            free.push(rq);
            continue;
        }
        let dispatched = e.at_device() && e.enter_ns != 0;
        if dispatched && now.saturating_sub(e.dispatch_ns) > MIN_AGE_NS {
            candidates.entry(e.dev).or_default().push((rq, e));
        }
    }
    if total > capacity / 2 {
        for rq in free {
            // Only if still free: the programs may have reused it meanwhile.
            if inflight.get(&rq, 0).is_ok_and(|e| !e.is_live()) {
                let _ = inflight.remove(&rq);
            }
        }
    }
    let mut n = 0;
    for (dev, entries) in candidates {
        if kernel_inflight(dev) != Some(0) {
            continue;
        }
        for (rq, e) in entries {
            // Still the same request? (The struct may have been reused meanwhile.)
            match inflight.get(&rq, 0) {
                Ok(cur) if cur.enter_ns == e.enter_ns && cur.dispatch_ns == e.dispatch_ns => {}
                _ => continue,
            }
            if inflight.remove(&rq).is_ok() {
                *reaped
                    .0
                    .lock()
                    .expect("reaper lock")
                    .entry(ClassKey {
                        dev,
                        class: e.class,
                        _pad: 0,
                    })
                    .or_default() += 1;
                n += 1;
            }
        }
    }
    if n > 0 {
        tracing::debug!(
            retired = n,
            "retired requests whose completion was not seen"
        );
    }
    n
}
