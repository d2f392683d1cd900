//! Prometheus exposition of a [`Snapshot`]. All names and label sets are defined here.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `blkobs_request_latency_seconds` | histogram | device, op, preflush, fua, sync, meta, readahead, log, stage |
//! | `blkobs_requests_total` | counter | device, op, flags |
//! | `blkobs_bytes_total` | counter | device, op, flags |
//! | `blkobs_merges_total` | counter | device, op, flags |
//! | `blkobs_requeues_total` | counter | device, op, flags |
//! | `blkobs_lost_completions_total` | counter | device, op, flags |
//! | `blkobs_slow_requests_total` | counter | device, op, flags |
//! | `blkobs_oldest_inflight_age_seconds` | gauge | device, stage |
//! | `blkobs_stall_episodes_total`, `blkobs_stall_seconds_total` | counter | device, kind (device, dispatch) |
//! | `blkobs_events_dropped_total` | counter | reason |
//! | `blkobs_request_errors_total` | counter | device, op, status |
//! | `blkobs_inflight_requests` | gauge | device, stage (queue, device) |
//! | `blkobs_fs_log_sectors` | gauge (fslog.rs) | device, fs_device, fstype, mountpoint, kind, start |
//! | `blkobs_fs_log_status` | gauge (fslog.rs), 1 per filesystem | device, fs_device, fstype, mountpoint, status (found, no_journal, unreadable, no_device_node, invalid, external_log_missing, io_error) |
//! | `blkobs_fs_log_warnings` | gauge (fslog.rs) | |
//! | `blkobs_untracked_completions_total`, `blkobs_dropped_requests_total{reason}`, `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`, `blkobs_map_entries{map}`, `blkobs_map_capacity{map}`, `blkobs_build_info` | self-monitoring | |
//!
//! Label `log` is `true` for requests that start inside a filesystem log (journal) range
//! (`observer_common::class::LOG`, see `fslog.rs`): `{op="write",log="true"}` selects log writes.
//! "flags" above means the same flag labels as the histogram (preflush ... log).

use prometheus::{
    proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
    Encoder, TextEncoder,
};

use observer_common::{
    class::{Class, FLAGS},
    hist::{bucket_upper_seconds, NBUCKETS},
    Stage,
};

use crate::{config::DeviceFilter, devices, probes::AttachInfo, snapshot::Snapshot, stalls::History};

/// Maps in-kernel buckets onto the exported bucket bounds.
#[derive(Clone, Debug)]
pub struct BucketMap {
    /// Exported upper bounds (seconds), ascending, without +Inf.
    pub bounds: Vec<f64>,
    /// For each kernel bucket: index into `bounds`, or `bounds.len()` for +Inf only.
    target: Vec<usize>,
}

impl BucketMap {
    /// A kernel bucket goes to the first exported bound that is ≥ its upper edge, so an exported
    /// `le` count never includes a sample above `le`. Bounds that fall inside a kernel bucket
    /// therefore round down by at most one kernel bucket (≤ 12.5 %). The default exp2-µs bounds
    /// fall exactly on kernel bucket edges.
    pub fn new(bounds: &[f64]) -> Self {
        let target = (0..NBUCKETS)
            .map(|i| {
                let upper = bucket_upper_seconds(i);
                bounds.iter().position(|&b| upper <= b * (1.0 + 1e-9)).unwrap_or(bounds.len())
            })
            .collect();
        Self { bounds: bounds.to_vec(), target }
    }

    /// Cumulative counts per exported bound (without +Inf) from kernel bucket counts.
    pub fn cumulative(&self, kernel: &[u64]) -> Vec<u64> {
        let mut per = vec![0u64; self.bounds.len() + 1];
        for (i, c) in kernel.iter().enumerate() {
            per[self.target[i]] += c;
        }
        let mut acc = 0;
        per.truncate(self.bounds.len());
        per.iter().map(|c| {
            acc += c;
            acc
        }).collect()
    }
}

/// Name of a `blk_status_t` (include/linux/blk_types.h), lower case without `BLK_STS_`.
pub fn status_name(status: u8) -> String {
    const NAMES: [&str; 17] = [
        "ok", "notsupp", "timeout", "nospc", "transport", "target", "resv_conflict", "medium",
        "protection", "resource", "ioerr", "dm_requeue", "again", "dev_resource",
        "zone_open_resource", "zone_active_resource", "offline",
    ];
    NAMES.get(status as usize).map(|s| s.to_string()).unwrap_or_else(|| format!("code_{status}"))
}

fn labels(pairs: &[(&str, &str)]) -> Vec<LabelPair> {
    pairs
        .iter()
        .map(|(k, v)| {
            let mut l = LabelPair::default();
            l.set_name(k.to_string());
            l.set_value(v.to_string());
            l
        })
        .collect()
}

fn class_labels<'a>(device: &'a str, class: Class) -> Vec<(&'static str, &'a str)> {
    let mut v = vec![("device", device), ("op", class.op().name())];
    for (bit, name) in FLAGS {
        v.push((name, if class.has(bit) { "true" } else { "false" }));
    }
    v
}

fn family(name: &str, help: &str, ty: MetricType, metrics: Vec<Metric>) -> MetricFamily {
    let mut f = MetricFamily::default();
    f.set_name(name.to_string());
    f.set_help(help.to_string());
    f.set_field_type(ty);
    f.set_metric(metrics);
    f
}

fn counter(l: &[(&str, &str)], v: f64) -> Metric {
    let mut m = Metric::from_label(labels(l));
    let mut c = Counter::default();
    c.set_value(v);
    m.set_counter(c);
    m
}

fn gauge(l: &[(&str, &str)], v: f64) -> Metric {
    let mut g = Gauge::default();
    g.set_value(v);
    let mut m = Metric::from_gauge(g);
    m.set_label(labels(l));
    m
}

/// Renders the text exposition format (version 0.0.4).
pub fn render(s: &Snapshot, history: &History, buckets: &BucketMap, info: &AttachInfo, filter: &DeviceFilter) -> String {
    let mut fams = Vec::new();

    let mut hists = Vec::new();
    for ((dev, class), t) in &s.classes {
        for stage in Stage::ALL {
            let st = &t.stages[stage as usize];
            let count = st.count();
            if count == 0 {
                continue;
            }
            let mut l = class_labels(dev, *class);
            l.push(("stage", stage.name()));
            let mut h = Histogram::default();
            h.set_sample_count(count);
            h.set_sample_sum(st.sum_ns as f64 * 1e-9);
            h.set_bucket(
                buckets
                    .bounds
                    .iter()
                    .zip(buckets.cumulative(&st.buckets))
                    .map(|(&le, c)| {
                        let mut b = Bucket::default();
                        b.set_upper_bound(le);
                        b.set_cumulative_count(c);
                        b
                    })
                    .collect(),
            );
            let mut m = Metric::from_label(labels(&l));
            m.set_histogram(h);
            hists.push(m);
        }
    }
    fams.push(family(
        "blkobs_request_latency_seconds",
        "Block request latency by stage: queue = entered block layer to dispatch (btt Q2D), device = dispatch to completion (D2C), total = Q2C.",
        MetricType::HISTOGRAM,
        hists,
    ));

    type Get = fn(&crate::snapshot::ClassTotals) -> u64;
    let per_class: [(&str, &str, Get); 6] = [
        ("blkobs_slow_requests_total", "Completed requests over their op's slow threshold (see /stalls).", |t| t.slow),
        ("blkobs_requests_total", "Completed block requests (final completion; merged-away requests are not counted).", |t| t.requests),
        ("blkobs_bytes_total", "Bytes of completed block requests.", |t| t.bytes),
        ("blkobs_merges_total", "Bios merged into existing requests plus requests merged into others.", |t| t.merges),
        ("blkobs_requeues_total", "Times completed requests had been requeued to be dispatched again.", |t| t.requeues),
        ("blkobs_lost_completions_total", "Completed requests (included in blkobs_requests_total) whose completion event never reached the programs: no latency or bytes recorded.", |t| t.lost),
    ];
    for (name, help, get) in per_class {
        let ms = s
            .classes
            .iter()
            .filter(|(_, t)| get(t) > 0 || name == "blkobs_requests_total" || name == "blkobs_slow_requests_total")
            .map(|((dev, class), t)| counter(&class_labels(dev, *class), get(t) as f64))
            .collect();
        fams.push(family(name, help, MetricType::COUNTER, ms));
    }

    let errs = s
        .errors
        .iter()
        .map(|((dev, class, status), n)| {
            let st = status_name(*status);
            counter(&[("device", dev), ("op", class.op().name()), ("status", &st)], *n as f64)
        })
        .collect();
    fams.push(family("blkobs_request_errors_total", "Completions with a non-zero blk_status_t.", MetricType::COUNTER, errs));

    let mut inflight = Vec::new();
    for (dev, c) in &s.inflight {
        inflight.push(gauge(&[("device", dev), ("stage", "queue")], c.queue as f64));
        inflight.push(gauge(&[("device", dev), ("stage", "device")], c.device as f64));
    }
    fams.push(family(
        "blkobs_inflight_requests",
        "Requests in flight now: stage=queue waiting for dispatch, stage=device dispatched and not completed.",
        MetricType::GAUGE,
        inflight,
    ));

    let mut oldest = Vec::new();
    for (dev, c) in &s.inflight {
        oldest.push(gauge(&[("device", dev), ("stage", "queue")], c.oldest_queue_ns as f64 * 1e-9));
        oldest.push(gauge(&[("device", dev), ("stage", "device")], c.oldest_device_ns as f64 * 1e-9));
    }
    fams.push(family(
        "blkobs_oldest_inflight_age_seconds",
        "Age of the oldest request in flight: stage=queue since it entered, stage=device since its dispatch; 0 when none.",
        MetricType::GAUGE,
        oldest,
    ));
    // Every known device gets both kinds, 0 until an episode ends, so alerts and rates work.
    let mut totals: std::collections::BTreeMap<(String, &str), (u64, f64)> = std::collections::BTreeMap::new();
    for dev in s.inflight.keys() {
        totals.insert((dev.clone(), "device"), (0, 0.0));
        totals.insert((dev.clone(), "dispatch"), (0, 0.0));
    }
    for ((dev, kind), (n, secs)) in &history.episode_totals {
        let name = devices::name(*dev);
        if !filter.allows(&name) {
            continue;
        }
        let kind = if *kind == observer_common::maps::STALL_DEVICE { "device" } else { "dispatch" };
        let t = totals.entry((name, kind)).or_default();
        t.0 += n;
        t.1 += secs;
    }
    let (mut episodes, mut seconds) = (Vec::new(), Vec::new());
    for ((dev, kind), (n, secs)) in &totals {
        episodes.push(counter(&[("device", dev), ("kind", kind)], *n as f64));
        seconds.push(counter(&[("device", dev), ("kind", kind)], *secs));
    }
    fams.push(family(
        "blkobs_stall_episodes_total",
        "Ended stall episodes: kind=device (requests at the device, none completed) or dispatch (requests queued, none dispatched) for longer than the episode threshold.",
        MetricType::COUNTER,
        episodes,
    ));
    fams.push(family("blkobs_stall_seconds_total", "Total length of ended stall episodes.", MetricType::COUNTER, seconds));
    fams.push(family(
        "blkobs_events_dropped_total",
        "Slow-request and stall records lost: reason=ringbuf_full in the kernel, or history_full when the in-memory history dropped its oldest.",
        MetricType::COUNTER,
        vec![
            counter(&[("reason", "ringbuf_full")], s.counters.events_dropped as f64),
            counter(&[("reason", "history_full")], (history.slow_overflow + history.episode_overflow) as f64),
        ],
    ));

    let c = &s.counters;
    fams.push(family(
        "blkobs_untracked_completions_total",
        "Final completions of requests never seen entering (in flight before the daemon started): counted, no latency recorded.",
        MetricType::COUNTER,
        vec![counter(&[], c.untracked_completions as f64)],
    ));
    fams.push(family(
        "blkobs_dropped_requests_total",
        "Requests or completions not recorded because a map was full.",
        MetricType::COUNTER,
        vec![
            counter(&[("reason", "inflight_map_full")], c.inflight_full as f64),
            counter(&[("reason", "stats_map_full")], c.stats_full as f64),
        ],
    ));
    fams.push(family(
        "blkobs_stale_requests_total",
        "Request states discarded because the request was dispatched again without requeue or completion.",
        MetricType::COUNTER,
        vec![counter(&[], c.stale_entries as f64)],
    ));
    fams.push(family(
        "blkobs_clock_anomalies_total",
        "Completions whose timestamps went backwards; their latency was not recorded.",
        MetricType::COUNTER,
        vec![counter(&[], c.clock_anomalies as f64)],
    ));
    fams.push(family(
        "blkobs_map_entries",
        "Entries in a BPF map now.",
        MetricType::GAUGE,
        vec![
            gauge(&[("map", "inflight")], s.inflight_entries.0 as f64),
            gauge(&[("map", "class_stats")], s.class_stats_entries.0 as f64),
        ],
    ));
    fams.push(family(
        "blkobs_map_capacity",
        "Maximum entries of a BPF map.",
        MetricType::GAUGE,
        vec![
            gauge(&[("map", "inflight")], s.inflight_entries.1 as f64),
            gauge(&[("map", "class_stats")], s.class_stats_entries.1 as f64),
        ],
    ));
    fams.push(family(
        "blkobs_build_info",
        "Version and how the eBPF programs are attached.",
        MetricType::GAUGE,
        vec![gauge(
            &[("version", env!("CARGO_PKG_VERSION")), ("attach", info.mode), ("enter_tracepoint", info.enter_tracepoint)],
            1.0,
        )],
    ));

    fams.retain(|f| !f.get_metric().is_empty());
    let mut out = Vec::new();
    TextEncoder::new().encode(&fams, &mut out).expect("text encoding to a Vec cannot fail");
    String::from_utf8(out).expect("exposition is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::hist::{bucket_index, bucket_lower_seconds};

    #[test]
    fn exp2_bounds_are_exact_kernel_edges() {
        let b = BucketMap::new(&crate::config::Histogram::default().buckets);
        // A sample just below and just above 1 ms = 1024 µs... use 2^10 µs = 1.024 ms.
        let mut k = vec![0u64; NBUCKETS];
        k[bucket_index(1_023_999)] += 1; // < 1.024 ms
        k[bucket_index(1_024_000)] += 1; // = 1.024 ms: belongs to the next bound (le is inclusive, but the kernel bucket starting at 1.024 ms spans above it)
        let cum = b.cumulative(&k);
        let i = b.bounds.iter().position(|&x| (x - 0.001024).abs() < 1e-12).unwrap();
        assert_eq!(cum[i], 1);
        assert_eq!(cum[i + 1], 2);
        assert_eq!(*cum.last().unwrap(), 2);
    }

    #[test]
    fn odd_bounds_never_overcount() {
        // For any bound, the exported cumulative count must not include samples above it.
        let bounds = [0.0001, 0.00033, 0.005, 1.0];
        let b = BucketMap::new(&bounds);
        for ns in [50_000u64, 100_000, 330_000, 400_000, 4_999_999, 999_999_999, 2_000_000_000] {
            let mut k = vec![0u64; NBUCKETS];
            k[bucket_index(ns)] += 1;
            let cum = b.cumulative(&k);
            for (j, &le) in bounds.iter().enumerate() {
                if cum[j] == 1 {
                    assert!(ns as f64 * 1e-9 <= le * (1.0 + 1e-9), "{ns} ns counted under le={le}");
                    // ...and is within one kernel bucket of the bound
                    assert!(bucket_lower_seconds(bucket_index(ns)) <= le);
                }
            }
        }
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(10), "ioerr");
        assert_eq!(status_name(200), "code_200");
    }
}
