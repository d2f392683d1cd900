//! What the programs aggregate: `CLASS_STATS`, `ERRORS`, `OWNER_STATS`, `CGROUP_LATENCY`, `COUNTERS`, and the
//! `SETTINGS` the daemon writes.

#[cfg(doc)]
use super::*; // the items of the sibling files that the docs link to

use crate::{dispatch::DispatchHist, hist::NBUCKETS, Stage};

/// Key of `CLASS_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class (see [`crate::class`]).
    pub class: u16,
    /// Always 0.
    pub _pad: u16,
}

/// One stage's latency histogram: sum in ns and counts per [`crate::hist`] bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StageHist {
    /// Sum of the latencies recorded (ns).
    pub sum_ns: u64,
    /// Counts per bucket; the last is the overflow bucket.
    pub buckets: [u64; NBUCKETS],
}

/// Everything recorded for one (device, class), per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ClassStats {
    /// Histograms indexed by [`Stage`] as usize.
    pub stages: [StageHist; Stage::COUNT],
    /// Requests completed (final completion only).
    pub requests: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Merges: bios merged into a request of this class plus requests merged away.
    pub merges: u64,
    /// Requeues of completed requests.
    pub requeues: u64,
    /// Completed requests that exceeded their op's slow threshold (see [`Settings`]).
    pub slow: u64,
    /// Latest final completion on this (device, class) on this CPU (ns), 0 if none.
    pub last_complete_ns: u64,
    /// Requests counted in `requests` whose completion was never seen (the struct was reused
    /// or the kernel reported none in flight), so no latency or bytes were recorded.
    pub lost: u64,
    /// Final completions of requests never seen entering (in flight before the programs were
    /// attached): not in `requests`, no latency. Classified by the flags at completion.
    pub untracked: u64,
    /// Size, merged bios and missed merges at the first dispatch of the requests counted in
    /// `requests` (lost ones included) that were dispatched with bios.
    pub dispatch: DispatchHist,
}

impl ClassStats {
    /// An all-zero value.
    pub const ZERO: ClassStats = ClassStats {
        stages: [StageHist {
            sum_ns: 0,
            buckets: [0; NBUCKETS],
        }; Stage::COUNT],
        requests: 0,
        bytes: 0,
        merges: 0,
        requeues: 0,
        slow: 0,
        last_complete_ns: 0,
        lost: 0,
        untracked: 0,
        dispatch: DispatchHist::ZERO,
    };
}

/// Key of `ERRORS`: completions with a non-zero `blk_status_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class of the request (0 when untracked: op read, no flags).
    pub class: u16,
    /// The `blk_status_t` value (include/linux/blk_types.h, e.g. 10 = BLK_STS_IOERR).
    pub status: u8,
    /// Always 0.
    pub _pad: u8,
}

/// Runtime settings the daemon writes into the `SETTINGS` array (one element) and may update
/// while running.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Slow-request thresholds (ns) per [`crate::class::Op`] code and [`Stage`] index:
    /// a completed request is reported when any stage exceeds its threshold. 0 disables a stage.
    pub slow_ns: [[u64; Stage::COUNT]; crate::class::Op::ALL.len()],
    /// A stall episode is reported when a device goes longer than this (ns) without completing
    /// (or dispatching) while it has requests outstanding (or queued).
    pub stall_ns: u64,
    /// Missed adjacent merges: the most time (ns) between two dispatches on a device for the
    /// second to count as one ([`crate::dispatch::is_missed_merge`]); 0 disables the check.
    pub merge_window_ns: u64,
    /// 1: completed requests are also counted per owner cgroup in `OWNER_STATS`
    /// (`[metrics] cgroup_label`); 0: not (no map access at completion).
    pub owner_stats: u64,
    /// 1: completed requests' stage latencies are also added per (disk, op, owner cgroup) to
    /// `CGROUP_LATENCY` (`[cgroups] latency`); 0: not (one branch at completion).
    pub cgroup_latency: u64,
}

/// `OWNER_STATS`: per-CPU hash, [`OwnerKey`] → [`OwnerStats`], written at completion only
/// while [`Settings::owner_stats`] is 1; [`Counter::OwnerStatsFull`] counts the requests it
/// had no room for.
pub const OWNER_STATS: &str = "OWNER_STATS";
/// Capacity of `OWNER_STATS`: (disk, class, owner cgroup) triples (preallocated: 16 bytes
/// per CPU each, 64 KiB per CPU).
pub const OWNER_STATS_ENTRIES: u32 = 4096;

/// Key of `OWNER_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class (see [`crate::class`]).
    pub class: u16,
    /// Always 0.
    pub _pad: u16,
    /// Owner cgroup v2 id ([`Inflight::owner_cgroup`]; 0 = unknown).
    pub cgroup: u64,
}

/// Value of `OWNER_STATS`, per CPU: what [`ClassStats::requests`] and [`ClassStats::bytes`]
/// count, for one owner cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerStats {
    /// Requests completed (lost ones included, as in `ClassStats::requests`).
    pub requests: u64,
    /// Bytes completed.
    pub bytes: u64,
}

/// `CGROUP_LATENCY`: per-CPU hash, [`OwnerKey`] (its `class` holds only the op code,
/// [`crate::class::Op`]: flags folded) → [`CgroupLatency`], written at completion only while
/// [`Settings::cgroup_latency`] is 1; [`Counter::CgroupLatencyFull`] counts the requests it had
/// no room for. Sized by the daemon at load: [`CGROUP_LATENCY_ENTRIES`] when the option is on
/// at start, else 1.
pub const CGROUP_LATENCY: &str = "CGROUP_LATENCY";
/// Capacity of `CGROUP_LATENCY` while `[cgroups] latency` is on: (disk, op, owner cgroup)
/// triples. Preallocated: `size_of::<CgroupLatency>()` = 6,768 bytes per CPU each, so 1.65 MiB
/// per CPU.
pub const CGROUP_LATENCY_ENTRIES: u32 = 256;

/// Value of `CGROUP_LATENCY`, per CPU: the stage histograms of one (disk, op, owner cgroup),
/// the same buckets as [`ClassStats::stages`]. The number of requests is the total stage's
/// count.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CgroupLatency {
    /// Histograms indexed by [`Stage`] as usize.
    pub stages: [StageHist; Stage::COUNT],
}

impl CgroupLatency {
    /// An all-zero value.
    pub const ZERO: CgroupLatency = CgroupLatency {
        stages: [StageHist {
            sum_ns: 0,
            buckets: [0; NBUCKETS],
        }; Stage::COUNT],
    };
}

/// Indexes of the global counters in `COUNTERS`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Requests not tracked because `INFLIGHT` was full.
    InflightFull = 0,
    /// Completions not aggregated because `CLASS_STATS` was full.
    StatsFull = 1,
    /// Timestamps that went backwards (never expected; such samples are dropped).
    ClockAnomalies = 2,
    /// Requests seen dispatched twice without a requeue or completion in between (a lost
    /// completion, counted in `ClassStats::lost`); the stale state was reset.
    StaleEntries = 3,
    /// Slow-request or stall events lost because the `EVENTS` ring buffer was full.
    EventsDropped = 4,
    /// Bios whose entry time was not kept because `BIO_QUEUED` was full: their request's
    /// queue stage starts at its creation instead.
    BioQueuedFull = 5,
    /// Requests (and flush-request dispatches) on a disk without a slot in `DEV_INDEX` (not
    /// indexed by the daemon yet, or beyond [`DEV_SLOT_LIMIT`]): counted and aggregated, but
    /// not classified as log writes and not stall-tracked.
    Unindexed = 6,
    /// Completed requests not counted per owner cgroup because `OWNER_STATS` was full (they
    /// are counted in `CLASS_STATS` as every request).
    OwnerStatsFull = 7,
    /// Completions (`block_rq_complete`, `block_bio_complete`) the kernel skipped the
    /// completion program for, because it was already running on that CPU (an interrupt inside
    /// it; kernel/trace/bpf_trace.c `__bpf_trace_run`), taken by its `_nested` program
    /// (observer-ebpf nested.rs). Counted, not lost.
    NestedEnds = 8,
    /// Completed requests whose latency was not added per owner cgroup because
    /// `CGROUP_LATENCY` was full (`[cgroups] latency`; they are in `CLASS_STATS` as every
    /// request).
    CgroupLatencyFull = 9,
}

impl Counter {
    /// Number of counters.
    pub const COUNT: u32 = 10;

    /// The counter at index `i` of `COUNTERS` (the kernel-side diagnostics log the index:
    /// observer-ebpf `maps::count`); `None` past [`Counter::COUNT`].
    pub const fn from_index(i: u32) -> Option<Counter> {
        Some(match i {
            0 => Counter::InflightFull,
            1 => Counter::StatsFull,
            2 => Counter::ClockAnomalies,
            3 => Counter::StaleEntries,
            4 => Counter::EventsDropped,
            5 => Counter::BioQueuedFull,
            6 => Counter::Unindexed,
            7 => Counter::OwnerStatsFull,
            8 => Counter::NestedEnds,
            9 => Counter::CgroupLatencyFull,
            _ => return None,
        })
    }

    /// The counter's name as the daemon's metrics and its log spell it: the `reason` label of
    /// `blkobs_dropped_requests_total` for the map-full drops, else the metric's stem.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::InflightFull => "inflight_map_full",
            Counter::StatsFull => "stats_map_full",
            Counter::ClockAnomalies => "clock_anomalies",
            Counter::StaleEntries => "stale_requests",
            Counter::EventsDropped => "events_dropped",
            Counter::BioQueuedFull => "bio_queue_map_full",
            Counter::Unindexed => "unindexed_requests",
            Counter::OwnerStatsFull => "owner_stats_map_full",
            Counter::NestedEnds => "nested_completions",
            Counter::CgroupLatencyFull => "cgroup_latency_map_full",
        }
    }
}
