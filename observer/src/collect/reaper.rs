//! Finds tracked requests whose completion the programs never saw, and retires them.
//!
//! A request the programs believe is at the device stays in `INFLIGHT` until its completion is
//! seen. If that completion was missed (see BENCHMARKS.md, "Lost completions"), the entry would
//! stay until its `struct request` is reused (the programs then count it as completed with its
//! latency lost). The reaper shortens that, but only on the kernel's own word: it asks the
//! kernel for the state of that very request ([`RequestProbe`]) and retires the entry only if
//! the request is neither in flight (`MQ_RQ_IN_FLIGHT`) nor inside a flush sequence (a FUA
//! write waiting for its post-flush is `MQ_RQ_COMPLETE`) on two passes in a row, with the entry
//! unchanged, more than [`MIN_AGE_NS`] after its dispatch. A request that a driver, a device or
//! a frozen filesystem below a loop device holds for minutes stays in flight, and stays in
//! `/inflight` and `/stalls` — whatever `queue/iostats` says, for the internal flush request
//! and for passthrough requests too (none of which `/sys/block/*/inflight` counts). Queued
//! entries are never reaped: a scheduler may hold requests for long, and a queued request's
//! state (idle) is the same as a freed one's.

use std::{
    collections::{BTreeMap, HashMap as StdHashMap},
    sync::Mutex,
};

use observer_common::{dispatch::DispatchHist, maps::ClassKey};

use crate::{
    bpf::{
        batch::{read_hash, InflightMaps},
        reqstate::{RequestProbe, RequestState},
    },
    time::monotonic_ns,
};

/// Only entries dispatched longer ago than this (ns) are candidates.
pub const MIN_AGE_NS: u64 = 1_000_000_000;

/// Requests retired by the reaper, per (device, class) key: they count as completed requests
/// with their latency lost (`blkobs_lost_completions_total`).
#[derive(Default)]
pub struct Reaped(pub Mutex<BTreeMap<ClassKey, ReapedCounts>>);

/// What the reaper retired for one (device, class).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReapedCounts {
    /// Requests retired.
    pub requests: u64,
    /// Their bytes (B, `Inflight::lost_bytes`).
    pub bytes: u64,
    /// Their size, bios and missed merges at their first dispatch (all were dispatched).
    pub dispatch: DispatchHist,
}

/// The reaper's state between passes.
pub struct Reaper {
    probe: Option<std::sync::Arc<RequestProbe>>,
    /// Entries found not in flight on the last pass: request pointer → (enter_ns, dispatch_ns)
    /// of the entry then.
    suspects: StdHashMap<u64, (u64, u64)>,
    /// Whether a failed probe was logged already.
    warned: bool,
}

impl Reaper {
    /// A reaper asking `probe`; without one it retires nothing (entries then wait for their
    /// struct's reuse). The probe is shared: the scrape reads its program's run counters
    /// without waiting for a reaper pass.
    pub fn new(probe: Option<std::sync::Arc<RequestProbe>>) -> Reaper {
        Reaper {
            probe,
            suspects: StdHashMap::new(),
            warned: false,
        }
    }

    /// One pass: retires entries the kernel says are not in flight (twice in a row), and
    /// deletes free entries (kept by the programs for reuse) of the `INFLIGHT` hash map when it
    /// is more than half full (`capacity`), so request structs of devices that went away
    /// cannot fill it (slots of `INFLIGHT_SLOTS` stay their struct's, see
    /// observer_common::maps::Slot). Returns how many requests were retired.
    pub fn reap(&mut self, inflight: &mut InflightMaps, capacity: u32, reaped: &Reaped) -> usize {
        let now = monotonic_ns();
        let mut free = Vec::new();
        let mut suspects = StdHashMap::new();
        let mut retire = Vec::new();
        let hash = read_hash(&inflight.hash);
        let total = hash.len() as u32;
        for (rq, e) in inflight.view.read().into_iter().chain(hash) {
            if !e.is_live() {
                free.push(rq);
                continue;
            }
            if !e.at_device() || now.saturating_sub(e.dispatch_ns) <= MIN_AGE_NS {
                continue;
            }
            let Some(probe) = &self.probe else { continue };
            match probe.state(rq) {
                Ok(RequestState::InFlight | RequestState::InFlushSequence) => {}
                Ok(RequestState::NotInFlight | RequestState::Unreadable) => {
                    let seen = (e.enter_ns, e.dispatch_ns);
                    if self.suspects.get(&rq) == Some(&seen) {
                        retire.push((rq, e));
                    } else {
                        suspects.insert(rq, seen);
                    }
                }
                Err(err) if !self.warned => {
                    self.warned = true;
                    tracing::warn!(error = %err, "asking the kernel for a request's state failed; \
                        requests whose completion was not seen stay tracked until reused");
                }
                Err(_) => {}
            }
        }
        self.suspects = suspects;
        if total > capacity / 2 {
            for rq in free {
                // Only hash entries (slots stay their struct's), and only if still free: the
                // programs may have reused it meanwhile.
                if inflight.hash.get(&rq, 0).is_ok_and(|e| !e.is_live()) {
                    let _ = inflight.hash.remove(&rq);
                }
            }
        }
        let mut n = 0;
        for (rq, e) in retire {
            // Still the same request? (The struct may have been reused meanwhile.)
            let place = match inflight.get(rq) {
                Some((p, cur))
                    if cur.enter_ns == e.enter_ns && cur.dispatch_ns == e.dispatch_ns =>
                {
                    p
                }
                _ => continue,
            };
            if inflight.retire(rq, place, &e).is_ok() {
                let mut reaped = reaped.0.lock().expect("reaper lock");
                let r = reaped
                    .entry(ClassKey {
                        dev: e.dev,
                        class: e.class,
                        _pad: 0,
                    })
                    .or_default();
                r.requests += 1;
                r.bytes += e.lost_bytes();
                r.dispatch.record(e.size, e.bios, e.missed);
                n += 1;
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
}
