//! Exemplars of the latency histograms: per (device, class, stage, exported bucket), the latest
//! slow request counted in that bucket, kept from the slow-request records of the `EVENTS`
//! ring buffer ([`super::events::History`] feeds it) so that `/metrics` in OpenMetrics can name
//! it (`# {request_id="…"}` on the bucket's line) and `/stalls?id=` can show it.
//!
//! **Which stages**: every stage a slow record has a sample in, as the programs add it to the
//! histograms ([`observer_common::stage::recorded`]): queue if it entered, device if it was
//! dispatched (or is the flush request), total always. So a write slow at the device also marks
//! the low queue bucket it waited in: which stage made it slow is visible from its exemplars.
//! A bio-based disk (dm, md) has no queue or device series; exemplars kept for them are never
//! written (only buckets of exported series carry exemplars).
//!
//! **Memory bound**: at most [`MAX_EXEMPLARS`] entries (a 12-byte key and a 24-byte value, and
//! the key again in the eviction index: about 100 bytes an entry with the `BTreeMap`s' nodes,
//! so at most about 400 KiB); when a new
//! (device, class, stage, bucket) arrives with the store full, the entry updated longest ago
//! is forgotten. Only slow requests leave the kernel, so only buckets a slow request landed in
//! have an exemplar.

use std::collections::BTreeMap;

use observer_common::{
    hist::bucket_index,
    maps::SlowEvent,
    stage::{latency, recorded},
    Stage,
};

/// At most this many exemplars are kept (see the module documentation for the memory).
pub const MAX_EXEMPLARS: usize = 4096;

/// Where an exemplar belongs: device number (`mkdev`), class bits, stage (`Stage as u8`),
/// exported bucket index (`bounds.len()` = the +Inf bucket).
pub type ExemplarKey = (u32, u16, u8, u16);

/// The latest slow request of one bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeptExemplar {
    /// Its sequence number ([`super::events::History`]: the request id's second part).
    pub seq: u64,
    /// Its latency in the stage (ns).
    pub value_ns: u64,
    /// When it completed: Unix time in milliseconds, fixed when the record arrived (so every
    /// scrape writes the same timestamp and Prometheus stores it once).
    pub unix_ms: u64,
}

/// The store: bounded, latest per key.
#[derive(Debug, Default)]
pub struct Exemplars {
    by_key: BTreeMap<ExemplarKey, KeptExemplar>,
    /// (seq, stage) → key of the entry it is the latest of: the eviction order.
    by_seq: BTreeMap<(u64, u8), ExemplarKey>,
    /// For each kernel bucket ([`observer_common::hist`]) the exported bucket it is counted in
    /// (as `exposition::BucketMap` folds it); empty: nothing is kept.
    targets: Vec<usize>,
}

impl Exemplars {
    /// Sets how kernel buckets fold into the exported ones (`[histogram] buckets`, read at
    /// start and at every reload: `targets[k]` = the exported bucket of kernel bucket `k`);
    /// a different set forgets every exemplar (their buckets no longer exist).
    pub fn set_targets(&mut self, targets: &[usize]) {
        if self.targets != targets {
            self.targets = targets.to_vec();
            self.by_key.clear();
            self.by_seq.clear();
        }
    }

    /// Whether [`Exemplars::record`] keeps anything (the buckets are set).
    pub fn wants_records(&self) -> bool {
        !self.targets.is_empty()
    }

    /// Records slow request `seq` (`ev`) as the latest of each bucket it landed in, one per
    /// stage it has a sample in; `unix_ms` is its completion time (Unix ms).
    pub fn record(&mut self, seq: u64, ev: &SlowEvent, unix_ms: u64) {
        if self.targets.is_empty() {
            return;
        }
        let e = &ev.req;
        if observer_common::stage::clock_anomaly(e.enter_ns, e.dispatch_ns, ev.complete_ns) {
            return; // no latency was taken from it (blkobs_clock_anomalies_total)
        }
        let lat = latency(e.enter_ns, e.dispatch_ns, ev.complete_ns);
        for (stage, ns) in [
            (Stage::Queue, lat.queue),
            (Stage::Device, lat.device),
            (Stage::Total, lat.total),
        ] {
            if !recorded(stage, e.enter_ns, e.dispatch_ns) {
                continue;
            }
            let Some(&bucket) = self.targets.get(bucket_index(ns)) else {
                continue;
            };
            let key = (ev.dev, e.class, stage as u8, bucket as u16);
            let new = KeptExemplar {
                seq,
                value_ns: ns,
                unix_ms,
            };
            if let Some(old) = self.by_key.insert(key, new) {
                self.by_seq.remove(&(old.seq, key.2));
            } else if self.by_key.len() > MAX_EXEMPLARS {
                if let Some((_, oldest)) = self.by_seq.pop_first() {
                    self.by_key.remove(&oldest);
                }
            }
            self.by_seq.insert((seq, key.2), key);
        }
    }

    /// Every exemplar kept, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&ExemplarKey, &KeptExemplar)> {
        self.by_key.iter()
    }

    /// How many are kept (≤ [`MAX_EXEMPLARS`]).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True if none is kept.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::{hist::NBUCKETS, maps::EVENT_SLOW};

    fn slow(dev: u32, class: u16, enter: u64, dispatch: u64, complete: u64) -> SlowEvent {
        // SAFETY: SlowEvent is repr(C) plain data; all-zero is a valid value.
        let mut ev: SlowEvent = unsafe { std::mem::zeroed() };
        ev.kind = EVENT_SLOW;
        ev.dev = dev;
        ev.req.class = class;
        ev.req.enter_ns = enter;
        ev.req.dispatch_ns = dispatch;
        ev.complete_ns = complete;
        ev
    }

    /// Each kernel bucket to itself: exported bucket = kernel bucket.
    fn identity() -> Vec<usize> {
        (0..NBUCKETS).collect()
    }

    #[test]
    fn one_per_stage_latest_wins() {
        let mut x = Exemplars::default();
        x.set_targets(&identity());
        // queue 1 µs, device 200 ms, total 200.001 ms
        x.record(1, &slow(7, 1, 1_000, 2_000, 200_002_000), 5);
        assert_eq!(x.len(), 3);
        let stages: Vec<u8> = x.iter().map(|(k, _)| k.2).collect();
        assert_eq!(
            stages,
            [Stage::Queue as u8, Stage::Device as u8, Stage::Total as u8]
        );
        let device = x.iter().find(|(k, _)| k.2 == Stage::Device as u8).unwrap();
        assert_eq!(device.1.value_ns, 200_000_000);
        assert_eq!(device.0 .3 as usize, bucket_index(200_000_000));
        // The same buckets again: replaced, not added.
        x.record(2, &slow(7, 1, 1_000, 2_000, 200_002_100), 6);
        assert_eq!(x.len(), 3);
        assert!(x.iter().all(|(_, e)| e.seq == 2 && e.unix_ms == 6));
        // The flush request (never entered): device and total only.
        x.record(3, &slow(7, 2, 0, 1_000, 60_001_000), 7);
        assert_eq!(x.iter().filter(|(_, e)| e.seq == 3).count(), 2);
        // Never dispatched (a data-less PREFLUSH write): queue and total.
        x.record(4, &slow(7, 3, 1_000, 0, 60_001_000), 8);
        let s4: Vec<u8> = x
            .iter()
            .filter(|(_, e)| e.seq == 4)
            .map(|(k, _)| k.2)
            .collect();
        assert_eq!(s4, [Stage::Queue as u8, Stage::Total as u8]);
        // Out of order clocks: nothing.
        x.record(5, &slow(7, 4, 5_000, 1_000, 60_001_000), 9);
        assert!(x.iter().all(|(_, e)| e.seq != 5));
    }

    #[test]
    fn bounded_and_the_oldest_goes() {
        let mut x = Exemplars::default();
        x.set_targets(&identity());
        let n = MAX_EXEMPLARS as u64 + 100;
        for seq in 1..=n {
            // A new device each time: 3 new keys per record.
            x.record(seq, &slow(seq as u32, 1, 1_000, 2_000, 300_000_000), seq);
            assert!(x.len() <= MAX_EXEMPLARS);
        }
        assert_eq!(x.len(), MAX_EXEMPLARS);
        assert_eq!(x.by_seq.len(), x.len());
        // The newest are all there, the oldest gone.
        assert!(x.iter().any(|(k, _)| k.0 == n as u32));
        assert!(x.iter().all(|(k, _)| k.0 != 1));
        let min_seq = x.iter().map(|(_, e)| e.seq).min().unwrap();
        assert!(min_seq > n - MAX_EXEMPLARS as u64 / 3 - 1, "{min_seq}");
    }

    #[test]
    fn new_buckets_forget_and_none_without_targets() {
        let mut x = Exemplars::default();
        x.record(1, &slow(7, 1, 1_000, 2_000, 200_002_000), 5);
        assert!(x.is_empty());
        x.set_targets(&identity());
        x.record(1, &slow(7, 1, 1_000, 2_000, 200_002_000), 5);
        assert_eq!(x.len(), 3);
        x.set_targets(&identity());
        assert_eq!(x.len(), 3, "the same buckets keep them");
        x.set_targets(&vec![0; NBUCKETS]);
        assert!(x.is_empty());
    }
}
