//! A point-in-time read of the kernel maps, summed over CPUs and keyed by device name: the one
//! place where userspace turns raw map contents into domain values.

use std::collections::{btree_map::Entry, BTreeMap};

use observer_common::{
    class::{Class, Op},
    dispatch::DispatchHist,
    hist::NBUCKETS,
    maps::{ClassStats, Counter, StageHist},
    Stage,
};

use super::reaper::Reaped;
use crate::{
    bpf::{
        batch::{for_each_inflight, read_percpu_hash},
        maps::KernelMaps,
    },
    config::DeviceFilter,
    disks::DiskView,
    time::monotonic_ns,
};

/// One stage's histogram, summed over CPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct StageTotals {
    /// Sum of latencies (ns).
    pub sum_ns: u64,
    /// Counts per kernel bucket ([`observer_common::hist`]); the last is overflow.
    pub buckets: Vec<u64>,
}

impl StageTotals {
    /// An empty histogram.
    pub(crate) fn new() -> Self {
        Self {
            sum_ns: 0,
            buckets: vec![0; NBUCKETS],
        }
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Adds one CPU's kernel histogram ([`StageHist`]: the same buckets).
    pub fn add_kernel(&mut self, h: &StageHist) {
        self.sum_ns += h.sum_ns;
        for (d, s) in self.buckets.iter_mut().zip(h.buckets.iter()) {
            *d += s;
        }
    }

    /// Adds another histogram's samples.
    pub fn add(&mut self, o: &StageTotals) {
        self.sum_ns += o.sum_ns;
        for (d, s) in self.buckets.iter_mut().zip(&o.buckets) {
            *d += s;
        }
    }
}

/// Everything recorded for one (device, class), summed over CPUs.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassTotals {
    /// Histograms indexed by [`Stage`] as usize.
    pub stages: Vec<StageTotals>,
    /// Completed requests.
    pub requests: u64,
    /// Completed bytes.
    pub bytes: u64,
    /// Merges (bios into requests, requests into requests).
    pub merges: u64,
    /// Requeues.
    pub requeues: u64,
    /// Completed requests whose completion was not seen: counted in `requests`, no latency.
    pub lost: u64,
    /// Completed requests over their slow threshold.
    pub slow: u64,
    /// Final completions of requests never seen entering: not in `requests`, no latency.
    pub untracked: u64,
    /// Size, merged bios and missed merges at first dispatch (see
    /// [`observer_common::dispatch`]).
    pub dispatch: DispatchHist,
}

impl ClassTotals {
    /// All zero, with an empty histogram per stage.
    pub(crate) fn new() -> Self {
        Self {
            stages: Stage::ALL.iter().map(|_| StageTotals::new()).collect(),
            requests: 0,
            bytes: 0,
            merges: 0,
            requeues: 0,
            lost: 0,
            slow: 0,
            untracked: 0,
            dispatch: DispatchHist::ZERO,
        }
    }

    /// Adds another (device, class)'s totals (two device numbers with one name).
    fn merge(&mut self, o: &ClassTotals) {
        for (dst, src) in self.stages.iter_mut().zip(o.stages.iter()) {
            dst.add(src);
        }
        self.requests += o.requests;
        self.bytes += o.bytes;
        self.merges += o.merges;
        self.requeues += o.requeues;
        self.lost += o.lost;
        self.slow += o.slow;
        self.untracked += o.untracked;
        self.dispatch.add(&o.dispatch);
    }

    fn add(&mut self, v: &ClassStats) {
        for (dst, src) in self.stages.iter_mut().zip(v.stages.iter()) {
            dst.add_kernel(src);
        }
        self.requests += v.requests;
        self.bytes += v.bytes;
        self.merges += v.merges;
        self.requeues += v.requeues;
        self.lost += v.lost;
        self.slow += v.slow;
        self.untracked += v.untracked;
        self.dispatch.add(&v.dispatch);
    }
}

/// Requests in flight on one device right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InflightCounts {
    /// Entered, not dispatched (or requeued and waiting for re-dispatch). On a bio-based
    /// disk ([`Self::bio_based`]): its bios in flight, entered and not completed (no stages).
    pub queue: u64,
    /// Dispatched to the driver, not completed.
    pub device: u64,
    /// Age (ns) of the oldest request in stage queue (since it entered), 0 if none.
    pub oldest_queue_ns: u64,
    /// Age (ns) of the oldest request at the device (since its dispatch), 0 if none.
    pub oldest_device_ns: u64,
    /// The disk is bio-based ([`DiskView::bio_based`]: dm, md): `queue` and
    /// `oldest_queue_ns` count its bios in flight since their entry, exported as stage `total`.
    pub bio_based: bool,
}

/// Global self-monitoring counters, summed over CPUs (see [`Counter`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SelfCounters {
    /// [`Counter::InflightFull`].
    pub inflight_full: u64,
    /// [`Counter::StatsFull`].
    pub stats_full: u64,
    /// [`Counter::ClockAnomalies`].
    pub clock_anomalies: u64,
    /// [`Counter::StaleEntries`].
    pub stale_entries: u64,
    /// [`Counter::EventsDropped`].
    pub events_dropped: u64,
    /// [`Counter::BioQueuedFull`].
    pub bio_queued_full: u64,
    /// [`Counter::Unindexed`].
    pub unindexed: u64,
    /// [`Counter::OwnerStatsFull`].
    pub owner_stats_full: u64,
    /// [`Counter::NestedEnds`].
    pub nested_ends: u64,
    /// [`Counter::CgroupLatencyFull`].
    pub cgroup_latency_full: u64,
}

/// The per-device slots (see [`crate::bpf::devslots`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevSlotCounts {
    /// Disks with a per-device slot (entries in `DEV_INDEX`).
    pub used: u64,
    /// Disks that can have one ([`observer_common::maps::DEV_SLOT_LIMIT`]).
    pub capacity: u32,
    /// Disks without one because all were taken (degraded).
    pub degraded: u64,
}

/// (device, class, owner cgroup label) → (requests, bytes): the `cgroup`-labelled counters.
pub type OwnerTotals = BTreeMap<(String, Class, String), (u64, u64)>;

/// While `[cgroups] latency` is on: the exported series of
/// `blkobs_cgroup_request_latency_seconds` ([`super::cgroup_latency`]).
#[derive(Clone, Debug, Default)]
pub struct CgroupLatencyTotals {
    /// (device, op, `cgroup` label: the owner cgroup's as in [`Snapshot::owners`], or
    /// [`super::cgroup_latency::OTHER`]) → stage histograms, indexed by [`Stage`] as usize.
    pub series: BTreeMap<(String, Op, String), Vec<StageTotals>>,
    /// device → distinct cgroups whose I/O went to `other` within the last
    /// [`super::cgroup_latency::RECHOOSE`].
    pub folded_cgroups: BTreeMap<String, u64>,
}

/// A read of all maps.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// (device, class) → totals. Only devices the filter allows.
    pub classes: BTreeMap<(String, Class), ClassTotals>,
    /// device → in-flight counts (every device with stats or in-flight requests).
    pub inflight: BTreeMap<String, InflightCounts>,
    /// (device, class, blk_status_t) → failed completions.
    pub errors: BTreeMap<(String, Class, u8), u64>,
    /// Self-monitoring.
    pub counters: SelfCounters,
    /// Entries in INFLIGHT (live and free-for-reuse) / its capacity.
    pub inflight_entries: (u64, u32),
    /// Entries in CLASS_STATS / its capacity.
    pub class_stats_entries: (u64, u32),
    /// Entries in OWNER_STATS / its capacity, while `[cgroups] label` is on (`None` while off).
    pub owner_stats_entries: Option<(u64, u32)>,
    /// Entries in CGROUP_LATENCY / its capacity, while `[cgroups] latency` is on (`None`
    /// while off).
    pub cgroup_latency_entries: Option<(u64, u32)>,
    /// Per-device slots in use, capacity, and degraded disks.
    pub dev_slots: DevSlotCounts,
    /// Device-mapper disks among `inflight`'s: device → (dm name, dm uuid)
    /// ([`DiskView::device_mapper`]).
    pub device_mapper: BTreeMap<String, (String, String)>,
    /// While `[cgroups] label` is on: (device, class, owner cgroup label) → (requests, bytes)
    /// from `OWNER_STATS`, plus the reaper's retired requests under the unknown owner `""`;
    /// `None` while off. The label is the cgroup's path, `""` (unknown owner) or `id:<id>`
    /// (a cgroup not in the tree).
    pub owners: Option<OwnerTotals>,
    /// While `[cgroups] latency` is on: the per-cgroup latency series; `None` while off.
    pub cgroup_latency: Option<CgroupLatencyTotals>,
}

impl Snapshot {
    /// Reads every map once, naming the devices with `disks`. Errors of single entries (a key
    /// deleted while iterating) are skipped.
    pub fn read(
        maps: &KernelMaps,
        reaped: &Reaped,
        filter: &DeviceFilter,
        disks: &DiskView,
    ) -> Snapshot {
        let mut s = Snapshot::default();
        let mut names = DeviceNames {
            filter,
            disks,
            cache: BTreeMap::new(),
        };
        let n_stats = s.add_class_stats(maps, &mut names);
        s.add_reaped(reaped, &mut names);
        let n_inflight = s.add_inflight(maps, &mut names);
        s.add_errors(maps, &mut names);
        s.counters = SelfCounters::read(maps);
        s.inflight_entries = (n_inflight, maps.inflight_capacity);
        s.class_stats_entries = (n_stats, maps.class_stats_capacity);
        s.dev_slots = DevSlotCounts::read(maps);
        for (dev, c) in &s.inflight {
            if c.bio_based {
                if let Some(dm) = disks.device_mapper(dev) {
                    s.device_mapper.insert(dev.clone(), dm);
                }
            }
        }
        if maps.owner_stats_on() {
            s.add_owners(maps, reaped, &mut names);
        }
        if maps.cgroup_latency_on() {
            s.add_cgroup_latency(maps, &mut names);
        }
        s
    }

    /// The per-cgroup latency series ([`super::cgroup_latency::read`]) by device name and
    /// `cgroup` label (two device numbers or cgroup ids with one name are summed).
    fn add_cgroup_latency(&mut self, maps: &KernelMaps, names: &mut DeviceNames) {
        let mut out = CgroupLatencyTotals::default();
        // Read first: the read takes the labels' lock itself (gone cgroups).
        let (read, entries) = super::cgroup_latency::read(maps);
        self.cgroup_latency_entries = Some((entries as u64, maps.cgroup_latency_capacity));
        let mut labels = crate::labels::owner_labels();
        for (dev, d) in read {
            let Some(name) = names.get(dev) else {
                continue;
            };
            *out.folded_cgroups.entry(name.clone()).or_default() += d.folded_cgroups;
            for ((op, cg), st) in d.series {
                let label = cg.map_or_else(
                    || super::cgroup_latency::OTHER.to_string(),
                    |id| labels.label(id),
                );
                match out.series.entry((name.clone(), op, label)) {
                    Entry::Vacant(e) => {
                        e.insert(st);
                    }
                    Entry::Occupied(mut e) => {
                        for (a, b) in e.get_mut().iter_mut().zip(&st) {
                            a.add(b);
                        }
                    }
                }
            }
        }
        self.cgroup_latency = Some(out);
    }

    /// The in-flight counts of disk `name` (number `dev`), created on first use.
    fn counts(&mut self, name: String, dev: u32, disks: &DiskView) -> &mut InflightCounts {
        self.inflight.entry(name).or_insert_with(|| InflightCounts {
            bio_based: disks.bio_based(dev),
            ..InflightCounts::default()
        })
    }

    /// Sums `OWNER_STATS` over CPUs per (device, class, owner cgroup label); adds the reaper's
    /// retired requests (counted lost, as in `classes`) under the unknown owner.
    fn add_owners(&mut self, maps: &KernelMaps, reaped: &Reaped, names: &mut DeviceNames) {
        let read = read_percpu_hash(
            &maps.owner_stats,
            |_| (0u64, 0u64),
            |a, v| {
                a.0 += v.requests;
                a.1 += v.bytes;
            },
        );
        self.owner_stats_entries = Some((read.len() as u64, maps.owner_stats_capacity));
        let mut labels = crate::labels::owner_labels();
        let mut out = OwnerTotals::new();
        for (key, (requests, bytes)) in read {
            let Some(dev) = names.get(key.dev) else {
                continue;
            };
            let o = out
                .entry((dev, Class(key.class), labels.label(key.cgroup)))
                .or_default();
            o.0 += requests;
            o.1 += bytes;
        }
        for (key, r) in reaped.0.lock().expect("reaper lock").iter() {
            let Some(dev) = names.get(key.dev) else {
                continue;
            };
            out.entry((dev, Class(key.class), String::new()))
                .or_default()
                .0 += r.requests;
        }
        self.owners = Some(out);
    }

    /// Sums `CLASS_STATS` over CPUs per (device, class); returns the number of map entries.
    /// One batched read of the whole map ([`read_percpu_hash`]), summed as it is read.
    fn add_class_stats(&mut self, maps: &KernelMaps, names: &mut DeviceNames) -> u64 {
        let read = read_percpu_hash(
            &maps.class_stats,
            |key| names.get(key.dev).map(|dev| (dev, ClassTotals::new())),
            |t, v| {
                if let Some((_, t)) = t {
                    t.add(v);
                }
            },
        );
        let entries = read.len() as u64;
        for (key, t) in read {
            let Some((dev, t)) = t else {
                continue;
            };
            self.counts(dev.clone(), key.dev, names.disks);
            match self.classes.entry((dev, Class(key.class))) {
                Entry::Vacant(e) => {
                    e.insert(t);
                }
                Entry::Occupied(mut e) => e.get_mut().merge(&t),
            }
        }
        entries
    }

    /// Counts the reaper's retired requests as completed, with their latency lost.
    fn add_reaped(&mut self, reaped: &Reaped, names: &mut DeviceNames) {
        for (key, r) in reaped.0.lock().expect("reaper lock").iter() {
            let Some(dev) = names.get(key.dev) else {
                continue;
            };
            let t = self
                .classes
                .entry((dev, Class(key.class)))
                .or_insert_with(ClassTotals::new);
            t.requests += r.requests;
            t.bytes += r.bytes;
            t.lost += r.requests;
            t.dispatch.add(&r.dispatch);
        }
    }

    /// Counts live `INFLIGHT` entries per device and stage, with the oldest age of each; returns
    /// the number of map entries (free ones kept for reuse included).
    fn add_inflight(&mut self, maps: &KernelMaps, names: &mut DeviceNames) -> u64 {
        let mut entries = 0;
        let now = monotonic_ns();
        for_each_inflight(&maps.inflight, |_, e| {
            entries += 1;
            if !e.is_live() {
                return;
            }
            let Some(dev) = names.get(e.dev) else {
                return;
            };
            let c = self.counts(dev, e.dev, names.disks);
            if e.at_device() {
                c.device += 1;
                c.oldest_device_ns = c.oldest_device_ns.max(now.saturating_sub(e.dispatch_ns));
            } else {
                c.queue += 1;
                c.oldest_queue_ns = c.oldest_queue_ns.max(now.saturating_sub(e.enter_ns));
            }
        });
        entries
    }

    /// Sums `ERRORS` over CPUs per (device, class, status), in one batched read.
    fn add_errors(&mut self, maps: &KernelMaps, names: &mut DeviceNames) {
        for (key, n) in read_percpu_hash(&maps.errors, |_| 0u64, |n, v| *n += v) {
            let Some(dev) = names.get(key.dev) else {
                continue;
            };
            *self
                .errors
                .entry((dev, Class(key.class), key.status))
                .or_default() += n;
        }
    }
}

impl SelfCounters {
    /// Reads `COUNTERS`, summed over CPUs; an unreadable counter reads 0.
    fn read(maps: &KernelMaps) -> SelfCounters {
        let counter = |c: Counter| {
            maps.counters
                .get(&(c as u32), 0)
                .map(|v| v.iter().sum())
                .unwrap_or(0)
        };
        SelfCounters {
            inflight_full: counter(Counter::InflightFull),
            stats_full: counter(Counter::StatsFull),
            clock_anomalies: counter(Counter::ClockAnomalies),
            stale_entries: counter(Counter::StaleEntries),
            events_dropped: counter(Counter::EventsDropped),
            bio_queued_full: counter(Counter::BioQueuedFull),
            unindexed: counter(Counter::Unindexed),
            owner_stats_full: counter(Counter::OwnerStatsFull),
            nested_ends: counter(Counter::NestedEnds),
            cgroup_latency_full: counter(Counter::CgroupLatencyFull),
        }
    }
}

impl DevSlotCounts {
    fn read(maps: &KernelMaps) -> DevSlotCounts {
        let slots = maps.dev_slots.lock().expect("dev slots lock");
        let t = slots.table();
        DevSlotCounts {
            used: t.assigned().len() as u64,
            capacity: t.limit(),
            degraded: t.degraded().len() as u64,
        }
    }
}

/// Device numbers → kernel names for one snapshot, cached; `None` for devices the filter
/// refuses.
struct DeviceNames<'a> {
    filter: &'a DeviceFilter,
    disks: &'a DiskView,
    cache: BTreeMap<u32, Option<String>>,
}

impl DeviceNames<'_> {
    fn get(&mut self, dev: u32) -> Option<String> {
        let (filter, disks) = (self.filter, self.disks);
        self.cache
            .entry(dev)
            .or_insert_with(|| {
                let n = disks.name(dev);
                filter.allows(&n).then_some(n)
            })
            .clone()
    }
}
