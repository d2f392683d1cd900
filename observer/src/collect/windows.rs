//! Histogram snapshots kept for a bounded time, so `/histograms?since=5m` can answer "what
//! were the latencies over the last five minutes" from cumulative kernel counters.

use std::collections::VecDeque;

use observer_common::{
    class::Class,
    hist::{bucket_lower_seconds, bucket_upper_seconds, NBUCKETS},
    Stage,
};
use serde::Serialize;

use super::snapshot::Snapshot;
use crate::labels::ClassInfo;

/// Snapshot interval (ns).
pub const INTERVAL_NS: u64 = 10_000_000_000;
/// How far back `since` may reach (ns): 15 minutes.
pub const KEEP_NS: u64 = 15 * 60 * 1_000_000_000;
/// Snapshots younger than this (ns) are all kept (10 s resolution); older ones are thinned to
/// one per [`COARSE_NS`], so the windows hold 12 + 13 snapshots instead of 90 (each a few tens
/// of KB with a few busy disks, [`Packed`]).
pub const FINE_NS: u64 = 2 * 60 * 1_000_000_000;
/// Spacing (ns) of the snapshots older than [`FINE_NS`]: 1 minute.
pub const COARSE_NS: u64 = 60 * 1_000_000_000;

/// One snapshot of every (device, class, stage)'s cumulative histogram, packed into four
/// vectors and one name per device (not a map node, a key string and a bucket vector per
/// entry): the windows keep up to 27 of them for 15 minutes, and thousands of small long-lived
/// allocations interleaved with each scrape's short-lived ones kept glibc's arenas from
/// shrinking. Size: 24 B per (device, class, stage) + 10 B per non-empty bucket.
#[derive(Debug, Default)]
struct Packed {
    /// Device names, sorted.
    devices: Vec<String>,
    /// One per non-empty (device, class, stage), sorted by that key.
    entries: Vec<Entry>,
    /// Bucket indexes of every entry's non-empty buckets, entry after entry.
    bucket_index: Vec<u16>,
    /// Their cumulative counts (requests), parallel to `bucket_index`.
    bucket_count: Vec<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Index into `devices`.
    device: u32,
    class: u16,
    stage: u8,
    /// Cumulative latency sum (ns).
    sum_ns: u64,
    /// First of this entry's buckets in `bucket_index` / `bucket_count`.
    first: u32,
    /// Number of non-empty buckets.
    len: u16,
}

impl Packed {
    fn of(s: &Snapshot) -> Packed {
        const _: () = assert!(NBUCKETS <= 1 << 16, "bucket indexes are stored as u16");
        let mut p = Packed::default();
        for ((dev, class), t) in &s.classes {
            // `classes` is sorted by device name: a new name is the next index.
            if p.devices.last() != Some(dev) {
                p.devices.push(dev.clone());
            }
            for stage in Stage::ALL {
                let st = &t.stages[stage as usize];
                let first = p.bucket_index.len();
                for (i, c) in st.buckets.iter().enumerate().filter(|(_, c)| **c > 0) {
                    p.bucket_index.push(i as u16);
                    p.bucket_count.push(*c);
                }
                if p.bucket_index.len() > first {
                    p.entries.push(Entry {
                        device: (p.devices.len() - 1) as u32,
                        class: class.0,
                        stage: stage as u8,
                        sum_ns: st.sum_ns,
                        first: first as u32,
                        len: (p.bucket_index.len() - first) as u16,
                    });
                }
            }
        }
        p.devices.shrink_to_fit();
        p.entries.shrink_to_fit();
        p.bucket_index.shrink_to_fit();
        p.bucket_count.shrink_to_fit();
        p
    }

    /// The cumulative sum (ns) and (bucket, count) pairs of one (device, class, stage).
    fn get(
        &self,
        dev: &str,
        class: u16,
        stage: u8,
    ) -> Option<(u64, impl Iterator<Item = (usize, u64)> + '_)> {
        let d = self
            .devices
            .binary_search_by(|x| x.as_str().cmp(dev))
            .ok()? as u32;
        let e = self
            .entries
            .binary_search_by(|e| (e.device, e.class, e.stage).cmp(&(d, class, stage)))
            .ok()
            .map(|i| self.entries[i])?;
        let r = e.first as usize..e.first as usize + e.len as usize;
        Some((
            e.sum_ns,
            self.bucket_index[r.clone()]
                .iter()
                .map(|i| *i as usize)
                .zip(self.bucket_count[r].iter().copied()),
        ))
    }

    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Packed histogram snapshots of every (device, class, stage), oldest first, each at a
/// monotonic time (ns): the bases that `/histograms?since=` subtracts from the current totals.
#[derive(Default)]
pub struct HistogramWindows {
    snaps: VecDeque<(u64, Packed)>,
}

/// Latency summary of one (device, class, stage) over a window.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// `queue`, `device` or `total`.
    pub stage: &'static str,
    /// Samples in the window.
    pub count: u64,
    /// Sum of latencies (s).
    pub sum_seconds: f64,
    /// Percentiles (s), interpolated inside log-linear buckets (≤ 12.5 % wide).
    pub p50: f64,
    /// 90th percentile (s).
    pub p90: f64,
    /// 99th percentile (s).
    pub p99: f64,
    /// 99.9th percentile (s).
    pub p999: f64,
    /// Upper edge of the highest non-empty bucket (s): the maximum, rounded up by < 12.5 %;
    /// null when it is the overflow bucket (> 134 s).
    pub max: Option<f64>,
    /// Counts per bucket: [lower edge s, upper edge s, count] for non-empty buckets.
    pub buckets: Vec<(f64, Option<f64>, u64)>,
}

/// Percentile `q` (0..1) from dense bucket counts, linear inside the bucket.
pub fn percentile(counts: &[u64], q: f64) -> f64 {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let rank = q * total as f64;
    let mut acc = 0.0;
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 && acc + c as f64 >= rank {
            let lo = bucket_lower_seconds(i);
            let hi = bucket_upper_seconds(i);
            let hi = if hi.is_finite() { hi } else { lo };
            return lo + (hi - lo) * ((rank - acc) / c as f64).clamp(0.0, 1.0);
        }
        acc += c as f64;
    }
    bucket_lower_seconds(NBUCKETS - 1)
}

impl HistogramWindows {
    /// Records `snap` taken at `now_ns` if the last one is older than [`INTERVAL_NS`], thins
    /// those older than [`FINE_NS`] to one per [`COARSE_NS`], and drops snapshots older than
    /// [`KEEP_NS`] (keeping one just beyond, to answer `since=15m`).
    pub fn record(&mut self, now_ns: u64, snap: &Snapshot) {
        if self
            .snaps
            .back()
            .is_some_and(|(t, _)| now_ns - t < INTERVAL_NS)
        {
            return;
        }
        self.snaps.push_back((now_ns, Packed::of(snap)));
        while self.snaps.len() > 2 && now_ns - self.snaps[1].0 > KEEP_NS {
            self.snaps.pop_front();
        }
        // Keep an old snapshot only if it is at least COARSE_NS after the previous one kept.
        let mut last_kept: Option<u64> = None;
        self.snaps.retain(|(t, _)| {
            let keep = now_ns - t <= FINE_NS || last_kept.is_none_or(|k| t - k >= COARSE_NS);
            if keep {
                last_kept = Some(*t);
            }
            keep
        });
    }

    /// Snapshots kept, and (device, class, stage) entries in them all.
    pub fn len(&self) -> (usize, usize) {
        (
            self.snaps.len(),
            self.snaps.iter().map(|(_, p)| p.len()).sum(),
        )
    }

    /// Oldest time (ns) a window can start at.
    pub fn oldest(&self) -> Option<u64> {
        self.snaps.front().map(|(t, _)| *t)
    }

    /// Summaries of `current` minus the newest snapshot taken at or before `since_ns` (all
    /// since start when `since_ns` is None; the oldest snapshot kept when `since_ns` reaches
    /// further back than [`KEEP_NS`]). Returns the window start actually used.
    pub fn summarize(
        &self,
        current: &Snapshot,
        since_ns: Option<u64>,
        device: Option<&str>,
    ) -> (Option<u64>, Vec<Summary>) {
        let base = since_ns.and_then(|s| {
            self.snaps
                .iter()
                .rev()
                .find(|(t, _)| *t <= s)
                .or(self.snaps.front())
        });
        let (start, base_map) = match base {
            Some((t, m)) => (Some(*t), Some(m)),
            None => (None, None),
        };
        let mut out = Vec::new();
        for ((dev, class), t) in &current.classes {
            if device.is_some_and(|d| d != dev) {
                continue;
            }
            for stage in Stage::ALL {
                let st = &t.stages[stage as usize];
                let mut counts = st.buckets.clone();
                let mut sum_ns = st.sum_ns;
                if let Some((base_sum, buckets)) =
                    base_map.and_then(|m| m.get(dev, class.0, stage as u8))
                {
                    for (i, c) in buckets {
                        counts[i] = counts[i].saturating_sub(c);
                    }
                    sum_ns = sum_ns.saturating_sub(base_sum);
                }
                let count: u64 = counts.iter().sum();
                if count == 0 {
                    continue;
                }
                let top = counts.iter().rposition(|c| *c > 0).unwrap_or(0);
                out.push(Summary {
                    device: dev.clone(),
                    class: ClassInfo::of(Class(class.0).0),
                    stage: stage.name(),
                    count,
                    sum_seconds: sum_ns as f64 * 1e-9,
                    p50: percentile(&counts, 0.5),
                    p90: percentile(&counts, 0.9),
                    p99: percentile(&counts, 0.99),
                    p999: percentile(&counts, 0.999),
                    max: Some(bucket_upper_seconds(top)).filter(|v| v.is_finite()),
                    buckets: counts
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| **c > 0)
                        .map(|(i, c)| {
                            (
                                bucket_lower_seconds(i),
                                Some(bucket_upper_seconds(i)).filter(|v| v.is_finite()),
                                *c,
                            )
                        })
                        .collect(),
                });
            }
        }
        (start, out)
    }
}

#[cfg(test)]
mod tests {
    use observer_common::hist::{
        bucket_index, bucket_lower_seconds, bucket_upper_seconds, NBUCKETS,
    };

    use super::{percentile, HistogramWindows, COARSE_NS, FINE_NS, INTERVAL_NS, KEEP_NS};
    use crate::collect::snapshot::Snapshot;

    /// A window subtracts the base snapshot of the same (device, class, stage) from the
    /// current totals, bucket by bucket, for every device, including one absent from the base.
    #[test]
    fn window_is_current_minus_base_per_device_class_and_stage() {
        use crate::collect::snapshot::ClassTotals;
        use observer_common::{class::Class, Stage};
        let mut snap = Snapshot::default();
        let add = |s: &mut Snapshot, dev: &str, class: u16, stage: Stage, ns: u64, n: u64| {
            let t = s
                .classes
                .entry((dev.to_string(), Class(class)))
                .or_insert_with(ClassTotals::new);
            let st = &mut t.stages[stage as usize];
            st.buckets[bucket_index(ns)] += n;
            st.sum_ns += ns * n;
        };
        add(&mut snap, "loop0", 1, Stage::Device, 100_000, 5);
        add(&mut snap, "loop0", 2, Stage::Device, 100_000, 7);
        add(&mut snap, "sda", 1, Stage::Device, 1_000_000, 3);
        let mut w = HistogramWindows::default();
        w.record(INTERVAL_NS, &snap);
        add(&mut snap, "loop0", 1, Stage::Device, 100_000, 2);
        add(&mut snap, "loop0", 1, Stage::Device, 8_000_000, 1);
        add(&mut snap, "sda", 1, Stage::Queue, 50_000, 4);
        add(&mut snap, "vdb", 1, Stage::Device, 2_000_000, 6);
        let (start, sums) = w.summarize(&snap, Some(2 * INTERVAL_NS), None);
        assert_eq!(start, Some(INTERVAL_NS));
        let got: Vec<(String, &str, u64, u64)> = sums
            .iter()
            .map(|s| {
                (
                    s.device.clone(),
                    s.stage,
                    s.count,
                    (s.sum_seconds * 1e9).round() as u64,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("loop0".into(), "device", 3, 8_200_000),
                ("sda".into(), "queue", 4, 200_000),
                ("vdb".into(), "device", 6, 12_000_000),
            ]
        );
        let loop0 = &sums[0];
        assert_eq!(
            loop0.buckets.iter().map(|b| b.2).collect::<Vec<_>>(),
            vec![2, 1],
            "{loop0:?}"
        );
        // No base: everything since start.
        let (start, all) = w.summarize(&snap, None, Some("loop0"));
        assert_eq!(start, None);
        assert_eq!(all.iter().map(|s| s.count).sum::<u64>(), 5 + 7 + 3);
    }

    /// 20 minutes of 10 s snapshots: all of the last 2 minutes kept, older ones at least 1
    /// minute apart, the oldest still reaching back 15 minutes, at most 12 + 13 + 2 kept.
    #[test]
    fn old_snapshots_are_thinned_to_one_a_minute() {
        let mut w = HistogramWindows::default();
        let snap = Snapshot::default();
        let start = 1_000 * INTERVAL_NS;
        let mut now = start;
        while now < start + 20 * 60 * 1_000_000_000 {
            w.record(now, &snap);
            now += INTERVAL_NS;
        }
        let now = now - INTERVAL_NS;
        let times: Vec<u64> = w.snaps.iter().map(|(t, _)| *t).collect();
        assert!(times.len() <= 27, "{} snapshots kept", times.len());
        let fine = times.iter().filter(|t| now - **t <= FINE_NS).count() as u64;
        assert_eq!(
            fine,
            FINE_NS / INTERVAL_NS + 1,
            "every snapshot of the last 2 minutes"
        );
        let old: Vec<u64> = times
            .iter()
            .copied()
            .filter(|t| now - t > FINE_NS)
            .collect();
        assert!(old.windows(2).all(|p| p[1] - p[0] >= COARSE_NS), "{old:?}");
        assert!(now - times[0] >= KEEP_NS, "since=15m still answerable");
    }

    /// Latencies spread log-uniformly over 1 µs … 1 s (a fixed LCG, so the run is repeatable).
    fn samples(n: usize) -> Vec<u64> {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 11) as f64 / (1u64 << 53) as f64;
                (1e3 * 1e6f64.powf(u)) as u64
            })
            .collect()
    }

    /// The function /histograms and `observer report` use, against the exact percentile of the
    /// samples it was given: within 10 % (docs/src/accuracy.md#histograms-and-views; buckets are ≤ 12.5 % wide).
    #[test]
    fn percentile_within_ten_percent_of_the_samples() {
        let mut ns = samples(20_000);
        let mut counts = vec![0u64; NBUCKETS];
        for &v in &ns {
            counts[bucket_index(v)] += 1;
        }
        ns.sort_unstable();
        for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999] {
            let exact = ns[((q * ns.len() as f64).ceil() as usize).min(ns.len()) - 1] as f64 / 1e9;
            let got = percentile(&counts, q);
            let err = (got - exact).abs() / exact;
            assert!(
                err < 0.10,
                "q={q}: {got} s vs exact {exact} s ({:.1} %)",
                err * 100.0
            );
        }
    }

    /// Edges: no samples → 0; q = 0 and q = 1 stay inside the lowest and highest non-empty
    /// buckets; samples only in the overflow bucket (> 134 s) give its finite lower edge.
    #[test]
    fn percentile_edges_and_overflow() {
        assert_eq!(percentile(&vec![0; NBUCKETS], 0.5), 0.0);
        let mut counts = vec![0u64; NBUCKETS];
        let (lo_i, hi_i) = (bucket_index(5_000), bucket_index(80_000_000));
        counts[lo_i] = 3;
        counts[hi_i] = 1;
        assert_eq!(percentile(&counts, 0.0), bucket_lower_seconds(lo_i));
        let top = percentile(&counts, 1.0);
        assert!(
            top > bucket_lower_seconds(hi_i) && top <= bucket_upper_seconds(hi_i),
            "{top}"
        );
        let mut over = vec![0u64; NBUCKETS];
        over[NBUCKETS - 1] = 5;
        let p = percentile(&over, 0.99);
        assert!(
            p.is_finite() && p == bucket_lower_seconds(NBUCKETS - 1),
            "{p}"
        );
        assert!(p > 134.0, "{p}");
    }
}
