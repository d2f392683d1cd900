//! Histogram snapshots kept for a bounded time, so `/histograms?since=5m` can answer "what
//! were the latencies over the last five minutes" from cumulative kernel counters.

use std::collections::{BTreeMap, VecDeque};

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
/// one per [`COARSE_NS`], so the windows hold 12 + 13 snapshots instead of 90 (each is ~100 KB
/// with a few busy disks: the windows' memory reaches its plateau after 2 minutes, not 15).
pub const FINE_NS: u64 = 2 * 60 * 1_000_000_000;
/// Spacing (ns) of the snapshots older than [`FINE_NS`]: 1 minute.
pub const COARSE_NS: u64 = 60 * 1_000_000_000;

/// One stage's cumulative histogram, sparse: (bucket, count) for non-empty buckets, and the sum.
#[derive(Clone, Debug, Default)]
struct Sparse {
    sum_ns: u64,
    buckets: Vec<(u16, u64)>,
}

type Key = (String, u16, u8);

/// Sparse histogram snapshots of every (device, class, stage), oldest first, each at a monotonic
/// time (ns): the bases that `/histograms?since=` subtracts from the current totals.
#[derive(Default)]
pub struct HistogramWindows {
    snaps: VecDeque<(u64, BTreeMap<Key, Sparse>)>,
}

fn sparse(s: &Snapshot) -> BTreeMap<Key, Sparse> {
    let mut out = BTreeMap::new();
    for ((dev, class), t) in &s.classes {
        for stage in Stage::ALL {
            let st = &t.stages[stage as usize];
            let buckets: Vec<(u16, u64)> = st
                .buckets
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (i as u16, *c))
                .collect();
            if !buckets.is_empty() {
                out.insert(
                    (dev.clone(), class.0, stage as u8),
                    Sparse {
                        sum_ns: st.sum_ns,
                        buckets,
                    },
                );
            }
        }
    }
    out
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
        self.snaps.push_back((now_ns, sparse(snap)));
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
        let empty = BTreeMap::new();
        let (start, base_map) = match base {
            Some((t, m)) => (Some(*t), m),
            None => (None, &empty),
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
                if let Some(b) = base_map.get(&(dev.clone(), class.0, stage as u8)) {
                    for (i, c) in &b.buckets {
                        counts[*i as usize] = counts[*i as usize].saturating_sub(*c);
                    }
                    sum_ns = sum_ns.saturating_sub(b.sum_ns);
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
    /// samples it was given: within 10 % (README's claim; buckets are ≤ 12.5 % wide).
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
