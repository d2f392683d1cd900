//! Completed requests per (device, class): the latency histograms by stage, the per-class
//! counters and the error counts. Declares `blkobs_request_latency_seconds`,
//! `blkobs_{slow_,}requests_total`, `blkobs_bytes_total`, `blkobs_merges_total`,
//! `blkobs_requeues_total`, `blkobs_lost_completions_total`, `blkobs_request_errors_total`
//! and, with `[cgroups] latency`, `blkobs_cgroup_request_latency_seconds` and
//! `blkobs_cgroup_latency_other_cgroups`.

use prometheus::proto::MetricType;

use std::collections::BTreeMap;

use observer_common::{class::Class, Stage};

use super::{
    text::Exemplar, BucketMap, Family, HistogramSeries, MetricDesc, MetricWriter, NativeSource,
};
use crate::{
    collect::{
        events::{History, RequestId},
        snapshot::{ClassTotals, Snapshot, StageTotals},
    },
    disks::DiskView,
    labels::{class_label_values, status_name},
};

/// Labels of every per-(device, class) series: `device`, `op`, then the flags of
/// [`observer_common::class::FLAGS`] in that order, then `ioprio_class` (the request's I/O
/// priority class: [`observer_common::class::IOPRIO_CLASSES`]).
pub const CLASS_LABELS: &[&str] = &CLASS_LABEL_NAMES;

const CLASS_LABEL_NAMES: [&str; 9] = [
    "device",
    "op",
    "preflush",
    "fua",
    "sync",
    "meta",
    "readahead",
    "log",
    "ioprio_class",
];

/// `labels` then `last`: a per-class label set with one more label (`M` = `N` + 1).
const fn and<const N: usize, const M: usize>(
    labels: [&'static str; N],
    last: &'static str,
) -> [&'static str; M] {
    assert!(M == N + 1, "one label more");
    let mut out = [last; M];
    let mut i = 0;
    while i < N {
        out[i] = labels[i];
        i += 1;
    }
    out
}

/// Latency histogram per (device, class, stage).
pub const REQUEST_LATENCY: MetricDesc = MetricDesc {
    name: "blkobs_request_latency_seconds",
    help: "Block request latency by stage: queue = entered block layer to dispatch (btt Q2D), device = dispatch to completion (D2C), total = Q2C.",
    kind: MetricType::HISTOGRAM,
    labels: &LATENCY_LABELS,
};

const LATENCY_LABELS: [&str; 10] = and(CLASS_LABEL_NAMES, "stage");

const fn class_counter(name: &'static str, help: &'static str) -> MetricDesc {
    MetricDesc {
        name,
        help,
        kind: MetricType::COUNTER,
        labels: CLASS_LABELS,
    }
}

/// A per-class counter: its descriptor, which field of [`ClassTotals`] it exports, and whether
/// zero values are exported (so that rates of the always-present counters work).
pub struct ClassCounter {
    /// Name, help, labels.
    pub desc: MetricDesc,
    /// The value.
    pub get: fn(&ClassTotals) -> u64,
    /// Export a series even when the value is 0.
    pub with_zeros: bool,
}

/// The per-class counters, in exposition order.
pub const CLASS_COUNTERS: [ClassCounter; 7] = [
    ClassCounter {
        desc: class_counter("blkobs_slow_requests_total", "Completed requests over their op's slow threshold (see /stalls)."),
        get: |t| t.slow,
        with_zeros: true,
    },
    ClassCounter {
        desc: class_counter(
            "blkobs_requests_total",
            "Completed block requests (final completion; merged-away requests are not counted).",
        ),
        get: |t| t.requests,
        with_zeros: true,
    },
    ClassCounter {
        desc: class_counter("blkobs_bytes_total", "Bytes of completed block requests."),
        get: |t| t.bytes,
        with_zeros: false,
    },
    ClassCounter {
        desc: class_counter("blkobs_merges_total", "Bios merged into existing requests plus requests merged into others."),
        get: |t| t.merges,
        with_zeros: false,
    },
    ClassCounter {
        desc: class_counter("blkobs_requeues_total", "Times completed requests had been requeued to be dispatched again."),
        get: |t| t.requeues,
        with_zeros: false,
    },
    ClassCounter {
        desc: class_counter(
            "blkobs_lost_completions_total",
            "Completed requests (included in blkobs_requests_total) whose completion event never reached the programs: no latency recorded; their bytes (the request's size) are in blkobs_bytes_total.",
        ),
        get: |t| t.lost,
        with_zeros: false,
    },
    ClassCounter {
        desc: class_counter(
            "blkobs_untracked_completions_total",
            "Final completions of requests never seen entering (in flight before the daemon started), classified by their flags at completion: not in blkobs_requests_total, no latency recorded.",
        ),
        get: |t| t.untracked,
        with_zeros: false,
    },
];

/// Failed completions per (device, op, `blk_status_t` name).
pub const REQUEST_ERRORS: MetricDesc = MetricDesc {
    name: "blkobs_request_errors_total",
    help: "Completions with a non-zero blk_status_t.",
    kind: MetricType::COUNTER,
    labels: &["device", "op", "status"],
};

/// The exemplars of `history` by series: (device name, class, stage) → (exported bucket,
/// exemplar), buckets ascending. Empty unless the writer writes exemplars
/// ([`MetricWriter::wants_exemplars`]: OpenMetrics, protobuf).
type SeriesExemplars = BTreeMap<(String, Class, u8), Vec<(usize, Exemplar)>>;

fn exemplars(
    w: &dyn MetricWriter,
    history: &History,
    buckets: &BucketMap,
    disks: &DiskView,
) -> SeriesExemplars {
    let mut by_series = SeriesExemplars::new();
    if !w.wants_exemplars() {
        return by_series;
    }
    for (&(dev, class, stage, bucket), e) in history.exemplars.iter() {
        if bucket as usize > buckets.bounds.len() {
            continue; // of another bucket set (a reload is being applied)
        }
        let id = RequestId {
            run: history.run,
            seq: e.seq,
        };
        by_series
            .entry((disks.name(dev), Class(class), stage))
            .or_default()
            .push((
                bucket as usize,
                Exemplar {
                    request_id: id.to_string(),
                    value: e.value_ns as f64 / 1e9,
                    timestamp: e.unix_ms as f64 * 1e-3,
                },
            ));
    }
    by_series
}

/// The histogram family: one series per (device, class, stage) with samples; in the protobuf
/// format with native buckets from the kernel's ([`super::native::latency`]). In OpenMetrics
/// and protobuf a classic bucket that a slow request kept in `history` landed in carries it as its exemplar
/// (`request_id`, its latency in that stage, its completion time; `collect::exemplars`);
/// `disks` names the exemplars' devices.
pub fn latency(
    w: &mut dyn MetricWriter,
    s: &Snapshot,
    buckets: &BucketMap,
    history: &History,
    disks: &DiskView,
) {
    let mut ex = exemplars(&*w, history, buckets, disks);
    let mut f = w.family(&REQUEST_LATENCY);
    for ((dev, class), t) in &s.classes {
        for stage in Stage::ALL {
            let st = &t.stages[stage as usize];
            if st.count() == 0 {
                continue;
            }
            let mut values = class_label_values(dev, *class);
            values.push(stage.name());
            let mine = if ex.is_empty() {
                Vec::new() // no exemplar wanted or kept: no key to build
            } else {
                ex.remove(&(dev.clone(), *class, stage as u8))
                    .unwrap_or_default()
            };
            stage_histogram(&mut f, &values, st, buckets, &mine);
        }
    }
}

/// One latency series of kernel buckets `st` (non-empty): classic buckets by `buckets`, native
/// ones from the kernel's, with `exemplars`.
fn stage_histogram(
    f: &mut Family,
    values: &[&str],
    st: &StageTotals,
    buckets: &BucketMap,
    exemplars: &[(usize, Exemplar)],
) {
    f.native_histogram(
        values,
        &HistogramSeries {
            bounds: &buckets.les,
            cumulative: &buckets.cumulative(&st.buckets),
            count: st.count(),
            sum: st.sum_ns as f64 * 1e-9,
            native: Some(NativeSource::Latency(&st.buckets)),
            exemplars,
        },
    );
}

/// Latency histogram per (device, op, stage, owner cgroup), `[cgroups] latency`.
pub const CGROUP_REQUEST_LATENCY: MetricDesc = MetricDesc {
    name: "blkobs_cgroup_request_latency_seconds",
    help: "Block request latency by stage and by the cgroup that owns the I/O (its first bio's, as io.stat charges it), op flags folded; at most [cgroups] max_per_device cgroups per device (the busiest by requests, re-chosen every 10 s), the rest in cgroup=\"other\". Stages as blkobs_request_latency_seconds.",
    kind: MetricType::HISTOGRAM,
    labels: &["device", "op", "stage", "cgroup"],
};

/// Cgroups folded into `cgroup="other"` per device.
pub const CGROUP_LATENCY_FOLDED: MetricDesc = MetricDesc {
    name: "blkobs_cgroup_latency_other_cgroups",
    help: "Distinct cgroups whose requests went to blkobs_cgroup_request_latency_seconds{cgroup=\"other\"} within the last 10 s (outside the device's top [cgroups] max_per_device).",
    kind: MetricType::GAUGE,
    labels: &["device"],
};

/// The per-cgroup latency families, while `[cgroups] latency` is on (`s.cgroup_latency`):
/// one histogram series per (device, op, stage, cgroup) with samples, in every format as
/// [`latency`] (no exemplars), and the folded-cgroups gauge.
pub fn cgroup_latency(w: &mut dyn MetricWriter, s: &Snapshot, buckets: &BucketMap) {
    let Some(c) = &s.cgroup_latency else {
        return;
    };
    {
        let mut f = w.family(&CGROUP_REQUEST_LATENCY);
        for ((dev, op, cgroup), stages) in &c.series {
            for stage in Stage::ALL {
                let st = &stages[stage as usize];
                if st.count() > 0 {
                    let values = [dev.as_str(), op.name(), stage.name(), cgroup.as_str()];
                    stage_histogram(&mut f, &values, st, buckets, &[]);
                }
            }
        }
    }
    let mut f = w.family(&CGROUP_LATENCY_FOLDED);
    for (dev, n) in &c.folded_cgroups {
        f.gauge(&[dev.as_str()], *n as f64);
    }
}

/// Labels of `blkobs_requests_total` and `blkobs_bytes_total` while `[cgroups] label` is on:
/// [`CLASS_LABELS`], then `cgroup`.
pub const OWNER_LABELS: &[&str] = &OWNER_LABEL_NAMES;

const OWNER_LABEL_NAMES: [&str; 10] = and(CLASS_LABEL_NAMES, "cgroup");

/// The per-class counter families, in [`CLASS_COUNTERS`] order. While `[cgroups] label` is on
/// (`s.owners`), `blkobs_requests_total` and `blkobs_bytes_total` are split by the cgroup that
/// owns the I/O instead ([`owner_counter`]).
pub fn counters(w: &mut dyn MetricWriter, s: &Snapshot) {
    for c in &CLASS_COUNTERS {
        if let Some(owners) = &s.owners {
            if c.desc.name == "blkobs_requests_total" {
                owner_counter(w, &c.desc, owners, |v| v.0, true);
                continue;
            }
            if c.desc.name == "blkobs_bytes_total" {
                owner_counter(w, &c.desc, owners, |v| v.1, false);
                continue;
            }
        }
        let mut f = w.family(&c.desc);
        for ((dev, class), t) in &s.classes {
            let v = (c.get)(t);
            if c.with_zeros || v > 0 {
                f.counter(&class_label_values(dev, *class), v as f64);
            }
        }
    }
}

/// One of the per-owner counters: `desc` with a `cgroup` label ([`OWNER_LABELS`]), one series
/// per (device, class, owner cgroup).
fn owner_counter(
    w: &mut dyn MetricWriter,
    desc: &MetricDesc,
    owners: &std::collections::BTreeMap<
        (String, observer_common::class::Class, String),
        (u64, u64),
    >,
    get: fn(&(u64, u64)) -> u64,
    with_zeros: bool,
) {
    let desc = MetricDesc {
        labels: OWNER_LABELS,
        ..*desc
    };
    let mut f = w.family(&desc);
    for ((dev, class, cgroup), v) in owners {
        let n = get(v);
        if with_zeros || n > 0 {
            let mut values = class_label_values(dev, *class);
            values.push(cgroup);
            f.counter(&values, n as f64);
        }
    }
}

/// The error family.
pub fn errors(w: &mut dyn MetricWriter, s: &Snapshot) {
    let mut f = w.family(&REQUEST_ERRORS);
    for ((dev, class, status), n) in &s.errors {
        f.counter(
            &[dev.as_str(), class.op().name(), &status_name(*status)],
            *n as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::class::FLAGS;

    #[test]
    fn class_labels_follow_the_flags() {
        let flags: Vec<&str> = FLAGS.iter().map(|(_, n)| *n).collect();
        assert_eq!(&CLASS_LABELS[2..2 + flags.len()], flags.as_slice());
        assert_eq!(CLASS_LABELS[2 + flags.len()..], ["ioprio_class"]);
        assert_eq!(&REQUEST_LATENCY.labels[..CLASS_LABELS.len()], CLASS_LABELS);
        assert_eq!(REQUEST_LATENCY.labels.last(), Some(&"stage"));
        assert_eq!(&OWNER_LABELS[..CLASS_LABELS.len()], CLASS_LABELS);
    }
}
