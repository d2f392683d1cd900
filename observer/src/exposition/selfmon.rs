//! The observer's own health: requests it could not track, map fill, build and attach mode.
//! Declares `blkobs_dropped_requests_total`,
//! `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`,
//! `blkobs_unindexed_requests_total`, `blkobs_devices_degraded`, `blkobs_map_entries`,
//! `blkobs_map_capacity`, `blkobs_build_info` and `blkobs_http_rejected_total`.

use prometheus::proto::{MetricFamily, MetricType};

use super::MetricDesc;
use crate::{bpf::loader::AttachInfo, collect::snapshot::Snapshot, state::HttpRejections};

/// Requests or completions lost to a full map, by map.
pub const DROPPED_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_dropped_requests_total",
    help: "Requests or completions not recorded because a map was full (bio_queue_map_full: a bio's entry time, its request's queue stage then starts at its creation).",
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

/// Entries in a BPF map now.
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

/// `blkobs_http_rejected_total`, one series per reason.
pub fn http_families(r: &HttpRejections) -> Vec<MetricFamily> {
    vec![HTTP_REJECTED.family(
        r.counts()
            .iter()
            .map(|(reason, n)| HTTP_REJECTED.counter(&[reason], *n as f64))
            .collect(),
    )]
}

/// The self-monitoring families, in the order above.
pub fn families(s: &Snapshot, info: &AttachInfo) -> Vec<MetricFamily> {
    let c = &s.counters;
    vec![
        DROPPED_REQUESTS.family(vec![
            DROPPED_REQUESTS.counter(&["inflight_map_full"], c.inflight_full as f64),
            DROPPED_REQUESTS.counter(&["stats_map_full"], c.stats_full as f64),
            DROPPED_REQUESTS.counter(&["bio_queue_map_full"], c.bio_queued_full as f64),
        ]),
        STALE_REQUESTS.family(vec![STALE_REQUESTS.counter(&[], c.stale_entries as f64)]),
        CLOCK_ANOMALIES.family(vec![CLOCK_ANOMALIES.counter(&[], c.clock_anomalies as f64)]),
        UNINDEXED_REQUESTS.family(vec![UNINDEXED_REQUESTS.counter(&[], c.unindexed as f64)]),
        DEVICES_DEGRADED.family(vec![DEVICES_DEGRADED.gauge(&[], s.slots.degraded as f64)]),
        MAP_ENTRIES.family(vec![
            MAP_ENTRIES.gauge(&["inflight"], s.inflight_entries.0 as f64),
            MAP_ENTRIES.gauge(&["class_stats"], s.class_stats_entries.0 as f64),
            MAP_ENTRIES.gauge(&["dev_index"], s.slots.used as f64),
        ]),
        MAP_CAPACITY.family(vec![
            MAP_CAPACITY.gauge(&["inflight"], s.inflight_entries.1 as f64),
            MAP_CAPACITY.gauge(&["class_stats"], s.class_stats_entries.1 as f64),
            MAP_CAPACITY.gauge(&["dev_index"], s.slots.capacity as f64),
        ]),
        BUILD_INFO.family(vec![BUILD_INFO.gauge(
            &[
                env!("CARGO_PKG_VERSION"),
                info.mode,
                info.enter_tracepoint,
                info.reaper,
            ],
            1.0,
        )]),
    ]
}
