//! The observer's own health: requests it could not track, map fill, build and attach mode.
//! Declares `blkobs_dropped_requests_total`,
//! `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`,
//! `blkobs_unindexed_requests_total`, `blkobs_devices_degraded`, `blkobs_map_entries`,
//! `blkobs_map_capacity`, `blkobs_build_info`, `blkobs_reaper_passes_total` and
//! `blkobs_http_rejected_total`.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus::proto::MetricType;

use observer_common::maps::Counter;

use super::{MetricDesc, MetricWriter};
use crate::{bpf::loader::AttachInfo, collect::snapshot::Snapshot};

/// HTTP requests and connections refused by the `[http]` limits or the web configuration, by
/// reason (for `blkobs_http_rejected_total`).
#[derive(Debug, Default)]
pub struct HttpRejections {
    /// Connections closed at once because `max_connections` were open.
    pub max_connections: AtomicU64,
    /// Requests answered 503 because `max_requests` were being served.
    pub max_requests: AtomicU64,
    /// Requests answered 414: request target longer than `max_uri_bytes`.
    pub uri_too_long: AtomicU64,
    /// Connections closed because their TLS handshake failed or timed out (plain HTTP to the
    /// TLS port, no or a wrong client certificate, an untrusted server certificate).
    pub tls_handshake: AtomicU64,
    /// Requests answered 401: no or wrong basic auth credentials.
    pub unauthorized: AtomicU64,
}

impl HttpRejections {
    /// (reason label, count) for each reason.
    pub fn counts(&self) -> [(&'static str, u64); 5] {
        [
            (
                "max_connections",
                self.max_connections.load(Ordering::Relaxed),
            ),
            ("max_requests", self.max_requests.load(Ordering::Relaxed)),
            ("uri_too_long", self.uri_too_long.load(Ordering::Relaxed)),
            ("tls_handshake", self.tls_handshake.load(Ordering::Relaxed)),
            ("unauthorized", self.unauthorized.load(Ordering::Relaxed)),
        ]
    }
}

/// Requests or completions lost to a full map, by map.
pub const DROPPED_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_dropped_requests_total",
    help: "Requests or completions not recorded because a map was full (bio_queue_map_full: a bio's entry time, its request's queue stage then starts at its creation; owner_stats_map_full: a request not counted for its cgroup, [cgroups] label; cgroup_latency_map_full: a request's latency not added for its cgroup, [cgroups] latency).",
    kind: MetricType::COUNTER,
    labels: &["reason"],
};

/// Request states overwritten by a new dispatch of the same request struct.
pub const STALE_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_stale_requests_total",
    help: "Request states discarded because the request was dispatched again without requeue or completion.",
    kind: MetricType::COUNTER,
    labels: &[],
};

/// Completions with timestamps going backwards.
pub const CLOCK_ANOMALIES: MetricDesc = MetricDesc {
    name: "blkobs_clock_anomalies_total",
    help: "Completions whose timestamps went backwards; their latency was not recorded.",
    kind: MetricType::COUNTER,
    labels: &[],
};

/// Completions taken by a `_nested` program.
pub const NESTED_COMPLETIONS: MetricDesc = MetricDesc {
    name: "blkobs_nested_completions_total",
    help: "Completions (block_rq_complete, block_bio_complete) the kernel skipped the observer's completion program for, because it was already running on that CPU (an interrupt inside it), and that its second, _nested program recorded instead: counted exactly, nothing lost.",
    kind: MetricType::COUNTER,
    labels: &[],
};

/// Requests on disks without a per-device slot.
pub const UNINDEXED_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_unindexed_requests_total",
    help: "Requests that entered a disk without a per-device slot (not indexed yet, or degraded): counted and timed, but not classified as filesystem log writes and not stall-tracked.",
    kind: MetricType::COUNTER,
    labels: &[],
};

/// Disks over the per-device slot limit.
pub const DEVICES_DEGRADED: MetricDesc = MetricDesc {
    name: "blkobs_devices_degraded",
    help: "Disks without a per-device slot because more disks than slots exist (GET /devices: tracking=degraded): no filesystem log classification, no stall detection.",
    kind: MetricType::GAUGE,
    labels: &[],
};

/// Entries in a BPF map now, per `map`: `inflight` (live and free-for-reuse entries of the
/// collision hash and the slots), `class_stats`, `dev_index` (disks with a slot), and while
/// their option is on `owner_stats` (`[cgroups] label`) and `cgroup_latency` (`[cgroups]
/// latency`): keys of the per-CPU hash, each holding one value per possible CPU.
pub const MAP_ENTRIES: MetricDesc = MetricDesc {
    name: "blkobs_map_entries",
    help: "Entries in a BPF map now.",
    kind: MetricType::GAUGE,
    labels: &["map"],
};

/// Capacity of a BPF map.
pub const MAP_CAPACITY: MetricDesc = MetricDesc {
    name: "blkobs_map_capacity",
    help: "Maximum entries of a BPF map.",
    kind: MetricType::GAUGE,
    labels: &["map"],
};

/// Version, attach mode, entry tracepoint and reaper mode ([`AttachInfo`]), value 1.
pub const BUILD_INFO: MetricDesc = MetricDesc {
    name: "blkobs_build_info",
    help: "Version, how the eBPF programs are attached, and how unseen completions are retired.",
    kind: MetricType::GAUGE,
    labels: &["version", "attach", "enter_tracepoint", "reaper"],
};

/// Requests and connections refused by the `[http]` limits and the web configuration.
pub const HTTP_REJECTED: MetricDesc = MetricDesc {
    name: "blkobs_http_rejected_total",
    help: "HTTP connections and requests refused by the [http] limits: max_connections (connection closed at once), max_requests (503), uri_too_long (414); and by the web config file: tls_handshake (failed or timed out TLS handshake, plain HTTP to the TLS port), unauthorized (401).",
    kind: MetricType::COUNTER,
    labels: &["reason"],
};

/// Passes of the once-a-second housekeeping (the reaper's among them).
pub const REAPER_PASSES: MetricDesc = MetricDesc {
    name: "blkobs_reaper_passes_total",
    help: "Passes of the daemon's once-a-second housekeeping: disks rescanned, requests whose completion was not seen retired (on the second pass that finds one no longer in flight), gone disks forgotten. Two passes after I/O went idle, its counts are final.",
    kind: MetricType::COUNTER,
    labels: &[],
};

/// `blkobs_reaper_passes_total`.
pub fn reaper_families(w: &mut dyn MetricWriter, passes: u64) {
    w.family(&REAPER_PASSES).counter(&[], passes as f64);
}

/// `blkobs_http_rejected_total`, one series per reason.
pub fn http_families(w: &mut dyn MetricWriter, r: &HttpRejections) {
    let mut f = w.family(&HTTP_REJECTED);
    for (reason, n) in r.counts().iter() {
        f.counter(&[reason], *n as f64);
    }
}

/// The self-monitoring families, in the order above.
pub fn families(w: &mut dyn MetricWriter, s: &Snapshot, info: &AttachInfo) {
    let c = &s.counters;
    let mut f = w.family(&DROPPED_REQUESTS);
    f.counter(&[Counter::InflightFull.name()], c.inflight_full as f64);
    f.counter(&[Counter::StatsFull.name()], c.stats_full as f64);
    f.counter(&[Counter::BioQueuedFull.name()], c.bio_queued_full as f64);
    f.counter(&[Counter::OwnerStatsFull.name()], c.owner_stats_full as f64);
    f.counter(
        &[Counter::CgroupLatencyFull.name()],
        c.cgroup_latency_full as f64,
    );
    w.family(&STALE_REQUESTS)
        .counter(&[], c.stale_entries as f64);
    w.family(&CLOCK_ANOMALIES)
        .counter(&[], c.clock_anomalies as f64);
    w.family(&UNINDEXED_REQUESTS)
        .counter(&[], c.unindexed as f64);
    w.family(&NESTED_COMPLETIONS)
        .counter(&[], c.nested_ends as f64);
    w.family(&DEVICES_DEGRADED)
        .gauge(&[], s.dev_slots.degraded as f64);
    let mut f = w.family(&MAP_ENTRIES);
    f.gauge(&["inflight"], s.inflight_entries.0 as f64);
    f.gauge(&["class_stats"], s.class_stats_entries.0 as f64);
    f.gauge(&["dev_index"], s.dev_slots.used as f64);
    let optional = [
        ("owner_stats", s.owner_stats_entries),
        ("cgroup_latency", s.cgroup_latency_entries),
    ];
    for (map, e) in optional {
        if let Some((n, _)) = e {
            f.gauge(&[map], n as f64);
        }
    }
    let mut f = w.family(&MAP_CAPACITY);
    f.gauge(&["inflight"], s.inflight_entries.1 as f64);
    f.gauge(&["class_stats"], s.class_stats_entries.1 as f64);
    f.gauge(&["dev_index"], s.dev_slots.capacity as f64);
    for (map, e) in optional {
        if let Some((_, cap)) = e {
            f.gauge(&[map], cap as f64);
        }
    }
    w.family(&BUILD_INFO).gauge(
        &[
            env!("CARGO_PKG_VERSION"),
            info.mode,
            info.enter_tracepoint,
            info.reaper,
        ],
        1.0,
    );
}
