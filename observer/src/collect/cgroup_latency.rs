//! `[cgroups] latency`: the stage histograms of `CGROUP_LATENCY` ((disk, op, owner cgroup) →
//! per-CPU histograms) turned into a bounded set of monotonic series per device: at most
//! `max_per_device` cgroups per disk have their own series (the busiest by requests, re-chosen
//! every [`RECHOOSE`]), everything else goes to [`OTHER`].
//!
//! Every read adds what each kernel entry gained since the previous read (its delta) to the
//! series of the cgroup it is counted for now, so every exported series only grows: a cgroup
//! that leaves the top N keeps its series (no new samples; its later I/O goes to `other`) until
//! more than `max_per_device` such retired cgroups pile up on the disk; then the oldest one's
//! series is folded into `other` and no longer exported (if it is chosen again later its series
//! starts again from 0: a counter reset). The sum over a disk's series is always every sample
//! the kernel recorded for it.

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    sync::Mutex,
    time::{Duration, Instant},
};

use observer_common::{
    class::Op,
    maps::{CgroupLatency, OwnerKey},
    Stage,
};

use super::snapshot::StageTotals;
use crate::bpf::{batch::read_percpu_hash, maps::KernelMaps};

/// The `cgroup` label value of the series that the cgroups outside a disk's top N fold into
/// (never a cgroup's label: those are paths, starting with `/`, `id:<id>` or `""`).
pub const OTHER: &str = "other";

/// How often the top N of each disk is chosen again, from the requests of each cgroup since
/// the previous choice. A free place (fewer than N chosen) is filled at once.
pub const RECHOOSE: Duration = Duration::from_secs(10);

/// The three stage histograms of one series, indexed by [`Stage`] as usize.
pub type Stages = Vec<StageTotals>;

fn zero_stages() -> Stages {
    Stage::ALL.iter().map(|_| StageTotals::new()).collect()
}

fn add_stages(dst: &mut Stages, src: &Stages) {
    for (d, s) in dst.iter_mut().zip(src) {
        d.add(s);
    }
}

/// `cur - prev`, bucket by bucket; `cur` itself where a bucket went down (the entry was
/// deleted and recreated since: a forgotten disk).
fn delta(cur: &Stages, prev: Option<&Stages>) -> Stages {
    let Some(prev) = prev else {
        return cur.clone();
    };
    let shrunk = cur
        .iter()
        .zip(prev)
        .any(|(c, p)| c.sum_ns < p.sum_ns || c.buckets.iter().zip(&p.buckets).any(|(a, b)| a < b));
    if shrunk {
        return cur.clone();
    }
    cur.iter()
        .zip(prev)
        .map(|(c, p)| StageTotals {
            sum_ns: c.sum_ns - p.sum_ns,
            buckets: c
                .buckets
                .iter()
                .zip(&p.buckets)
                .map(|(a, b)| a - b)
                .collect(),
        })
        .collect()
}

/// Requests in a delta: its total-stage count (every recorded request has a total).
fn requests(s: &Stages) -> u64 {
    s[Stage::Total as usize].count()
}

/// One disk's choice and series.
#[derive(Default)]
struct Disk {
    /// Cgroup ids with their own series now, at most `max`.
    chosen: Vec<u64>,
    /// Cgroups that left the top N, oldest first, at most `max`: their series stay exported.
    retired: VecDeque<u64>,
    /// Requests per cgroup since the last choice.
    window: BTreeMap<u64, u64>,
    /// When the top N was last chosen (`None`: never).
    chosen_at: Option<Instant>,
    /// (op code, cgroup id) → its series (chosen and retired cgroups).
    named: BTreeMap<(u16, u64), Stages>,
    /// op code → the `other` series.
    other: BTreeMap<u16, Stages>,
    /// Cgroups whose I/O went to `other`, with when it last did.
    folded: BTreeMap<u64, Instant>,
}

impl Disk {
    /// Chooses the top `max` cgroups by requests in the window (the chosen ones first among
    /// equals, then the lower id); the ones that drop out are retired, the oldest retired beyond
    /// `max` folded into `other`.
    fn rechoose(&mut self, max: usize, now: Instant) {
        let mut cands: BTreeSet<u64> = self.window.keys().copied().collect();
        cands.extend(&self.chosen);
        let mut ranked: Vec<u64> = cands.into_iter().collect();
        let was = |id: &u64| self.chosen.contains(id);
        ranked.sort_by_key(|id| {
            (
                std::cmp::Reverse(self.window.get(id).copied().unwrap_or(0)),
                !was(id),
                *id,
            )
        });
        ranked.truncate(max);
        for id in std::mem::take(&mut self.chosen) {
            if !ranked.contains(&id) {
                self.retire(id, max);
            }
        }
        for id in &ranked {
            self.retired.retain(|r| r != id);
        }
        self.chosen = ranked;
        self.window.clear();
        self.chosen_at = Some(now);
    }

    fn retire(&mut self, id: u64, max: usize) {
        self.retired.push_back(id);
        while self.retired.len() > max {
            let Some(old) = self.retired.pop_front() else {
                break;
            };
            let keys: Vec<(u16, u64)> = self.named.keys().filter(|k| k.1 == old).copied().collect();
            for k in keys {
                if let Some(s) = self.named.remove(&k) {
                    add_stages(self.other.entry(k.0).or_insert_with(zero_stages), &s);
                }
            }
        }
    }

    /// Adds one read's deltas ((op, cgroup, delta)) of this disk.
    fn add(&mut self, deltas: Vec<(u16, u64, Stages)>, max: usize, now: Instant) {
        for (_, cg, d) in &deltas {
            *self.window.entry(*cg).or_default() += requests(d);
        }
        if self
            .chosen_at
            .is_none_or(|t| now.duration_since(t) >= RECHOOSE)
        {
            self.rechoose(max, now);
        } else if self.chosen.len() < max {
            // Free places: the busiest newcomers of this read, at once.
            let mut fresh: BTreeMap<u64, u64> = BTreeMap::new();
            for (_, cg, d) in &deltas {
                if !self.chosen.contains(cg) {
                    *fresh.entry(*cg).or_default() += requests(d);
                }
            }
            let mut fresh: Vec<(u64, u64)> = fresh.into_iter().collect();
            fresh.sort_by_key(|&(id, n)| (std::cmp::Reverse(n), id));
            for (id, _) in fresh.into_iter().take(max - self.chosen.len()) {
                self.retired.retain(|r| *r != id);
                self.chosen.push(id);
            }
        }
        for (op, cg, d) in deltas {
            let dst = if self.chosen.contains(&cg) {
                self.named.entry((op, cg)).or_insert_with(zero_stages)
            } else {
                if requests(&d) > 0 {
                    self.folded.insert(cg, now);
                }
                self.other.entry(op).or_insert_with(zero_stages)
            };
            add_stages(dst, &d);
        }
        self.folded.retain(|_, t| now.duration_since(*t) < RECHOOSE);
    }
}

/// The kernel map's last values and every disk's series, kept across reads.
struct Tracker {
    /// `[cgroups] max_per_device`.
    max: usize,
    /// Each `CGROUP_LATENCY` key's value (summed over CPUs) at the previous read.
    prev: BTreeMap<OwnerKey, Stages>,
    /// The keys that counted nothing since the previous read.
    idle: Vec<OwnerKey>,
    disks: BTreeMap<u32, Disk>,
}

static TRACKER: Mutex<Tracker> = Mutex::new(Tracker::new(8));

impl Tracker {
    /// Nothing read yet, `max` cgroups per device.
    const fn new(max: usize) -> Tracker {
        Tracker {
            max,
            prev: BTreeMap::new(),
            idle: Vec::new(),
            disks: BTreeMap::new(),
        }
    }
}

/// Sets `[cgroups] max_per_device` (at startup and on reload); a lower value takes effect at
/// the next choice.
pub fn set_max_per_device(n: usize) {
    TRACKER.lock().expect("cgroup latency lock").max = n;
}

/// One disk's exported series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiskSeries {
    /// (op, cgroup id or `None` for [`OTHER`]) → stage histograms.
    pub series: BTreeMap<(Op, Option<u64>), Stages>,
    /// Distinct cgroups whose I/O went to `other` within the last [`RECHOOSE`].
    pub folded_cgroups: u64,
}

/// Reads `CGROUP_LATENCY`, adds what each entry gained since the previous read to the series
/// it is counted for now, and returns every disk's series by device number, with the number
/// of entries the map held (before the entries of gone cgroups were deleted).
pub fn read(maps: &KernelMaps) -> (BTreeMap<u32, DiskSeries>, usize) {
    // Locked before the map is read: two reads (a scrape and the 10 s tick) applied in the
    // other order than they read would see values go down and count the newer one twice.
    let mut t = TRACKER.lock().expect("cgroup latency lock");
    let read = read_percpu_hash(
        &maps.cgroup_latency,
        |_| zero_stages(),
        |a, v: &CgroupLatency| {
            for (d, s) in a.iter_mut().zip(v.stages.iter()) {
                d.add_kernel(s);
            }
        },
    );
    let entries = read.len();
    let out = t.update(read, Instant::now());
    // Entries of cgroups that are gone (no longer in the tree) and counted nothing
    // since the previous read are deleted, so that the kernel map holds the live cgroups: what
    // they counted is in the series already; a late request recreates its entry, which the
    // next read counts from 0 (no `prev` left).
    let gone: Vec<OwnerKey> = {
        let mut labels = crate::labels::owner_labels();
        t.idle
            .iter()
            .filter(|k| labels.gone(k.cgroup))
            .copied()
            .collect()
    };
    if !gone.is_empty() {
        maps.stats_rw
            .lock()
            .expect("stats maps lock")
            .forget_cgroup_latency(&gone);
        for k in &gone {
            t.prev.remove(k);
        }
    }
    (out, entries)
}

impl Tracker {
    fn update(&mut self, read: Vec<(OwnerKey, Stages)>, now: Instant) -> BTreeMap<u32, DiskSeries> {
        let mut by_disk: BTreeMap<u32, Vec<(u16, u64, Stages)>> = BTreeMap::new();
        let mut prev = BTreeMap::new();
        self.idle.clear();
        for (k, cur) in read {
            let d = delta(&cur, self.prev.get(&k));
            if requests(&d) == 0 {
                self.idle.push(k);
            }
            by_disk
                .entry(k.dev)
                .or_default()
                .push((k.class, k.cgroup, d));
            prev.insert(k, cur);
        }
        self.prev = prev;
        let max = self.max;
        for (dev, deltas) in by_disk {
            self.disks.entry(dev).or_default().add(deltas, max, now);
        }
        self.disks
            .iter()
            .map(|(dev, d)| {
                let mut series = BTreeMap::new();
                for (&(op, cg), s) in &d.named {
                    series.insert((Op::from_code(op), Some(cg)), s.clone());
                }
                for (&op, s) in &d.other {
                    series.insert((Op::from_code(op), None), s.clone());
                }
                let folded_cgroups = d.folded.len() as u64;
                (
                    *dev,
                    DiskSeries {
                        series,
                        folded_cgroups,
                    },
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::hist::bucket_index;

    fn key(cg: u64) -> OwnerKey {
        OwnerKey {
            dev: 7,
            class: Op::Write as u16,
            _pad: 0,
            cgroup: cg,
        }
    }

    /// `n` requests of 1 ms in every stage.
    fn hist(n: u64) -> Stages {
        let mut s = zero_stages();
        for st in &mut s {
            st.buckets[bucket_index(1_000_000)] = n;
            st.sum_ns = n * 1_000_000;
        }
        s
    }

    fn total(d: &DiskSeries) -> u64 {
        d.series.values().map(requests).sum()
    }

    fn named(d: &DiskSeries) -> Vec<u64> {
        d.series.keys().filter_map(|k| k.1).collect()
    }

    /// N = 2, four cgroups: the two busiest get series, the rest fold into `other`; the sum is
    /// every request; a cgroup that drops out keeps its (frozen) series and its new I/O goes to
    /// `other`; every series only grows.
    #[test]
    fn top_n_other_and_monotonic() {
        let mut t = Tracker::new(2);
        let t0 = Instant::now();
        let read = |a: u64, b: u64, c: u64, d: u64| {
            vec![
                (key(1), hist(a)),
                (key(2), hist(b)),
                (key(3), hist(c)),
                (key(4), hist(d)),
            ]
        };
        let r1 = t.update(read(100, 50, 10, 5), t0);
        let d1 = &r1[&7];
        assert_eq!(named(d1), vec![1, 2]);
        assert_eq!(total(d1), 165);
        assert_eq!(requests(&d1.series[&(Op::Write, None)]), 15);
        assert_eq!(d1.folded_cgroups, 2);
        // 11 s later cgroups 3 and 4 were the busy ones: they replace 1 and 2, whose series stay.
        let r2 = t.update(read(101, 50, 510, 305), t0 + Duration::from_secs(11));
        let d2 = &r2[&7];
        assert_eq!(named(d2), vec![1, 2, 3, 4]);
        assert_eq!(total(d2), 966);
        // Cgroup 1 left the top N at the choice before its +1: that and its +100 now go to other.
        let r3 = t.update(read(201, 50, 510, 305), t0 + Duration::from_secs(12));
        let d3 = &r3[&7];
        assert_eq!(requests(&d3.series[&(Op::Write, Some(1))]), 100);
        assert_eq!(total(d3), 1066);
        for (k, s) in &d2.series {
            assert!(requests(&d3.series[k]) >= requests(s), "{k:?} went down");
        }
        // Two more changes of the top N retire more than N: the oldest retired is folded.
        let r4 = t.update(read(2201, 2050, 510, 305), t0 + Duration::from_secs(23));
        let d4 = &r4[&7];
        assert_eq!(named(d4).len(), 4, "{:?}", named(d4));
        let _ = t.update(read(2201, 2050, 5510, 5305), t0 + Duration::from_secs(34));
        let r5 = t.update(read(2201, 2050, 5510, 5305), t0 + Duration::from_secs(35));
        let d5 = &r5[&7];
        assert!(named(d5).len() <= 4);
        assert_eq!(total(d5), 2201 + 2050 + 5510 + 5305);
    }

    /// N = 0 folds everything; a recreated entry (values went down) counts from 0 again.
    #[test]
    fn zero_n_and_recreated_entries() {
        let mut t = Tracker::new(0);
        let t0 = Instant::now();
        let r = t.update(vec![(key(1), hist(10))], t0);
        assert_eq!(named(&r[&7]), Vec::<u64>::new());
        let r = t.update(vec![(key(1), hist(3))], t0);
        assert_eq!(total(&r[&7]), 13);
    }
}
