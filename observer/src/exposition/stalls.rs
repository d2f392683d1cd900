//! Stall episodes and lost stall/slow records. Declares `blkobs_stall_episodes_total`,
//! `blkobs_stall_seconds_total`, `blkobs_events_received_total` and
//! `blkobs_events_dropped_total`.

use std::collections::BTreeMap;

use prometheus::proto::MetricType;

use super::{MetricDesc, MetricWriter};
use crate::{
    collect::{events::History, snapshot::Snapshot},
    config::DeviceFilter,
    disks::DiskView,
    labels::stall_kind_name,
};

/// Ended stall episodes per (device, kind).
pub const STALL_EPISODES: MetricDesc = MetricDesc {
    name: "blkobs_stall_episodes_total",
    help: "Ended stall episodes: kind=device (requests at the device, none completed) or dispatch (requests queued, none dispatched) for longer than the episode threshold.",
    kind: MetricType::COUNTER,
    labels: &["device", "kind"],
};

/// Total length of ended stall episodes per (device, kind).
pub const STALL_SECONDS: MetricDesc = MetricDesc {
    name: "blkobs_stall_seconds_total",
    help: "Total length of ended stall episodes.",
    kind: MetricType::COUNTER,
    labels: &["device", "kind"],
};

/// Slow-request and stall records received from the kernel, by kind.
pub const EVENTS_RECEIVED: MetricDesc = MetricDesc {
    name: "blkobs_events_received_total",
    help: "Records received from the kernel's ring buffer: kind=slow_request (one per slow completion, also counted in blkobs_slow_requests_total) or stall_episode (one per ended episode).",
    kind: MetricType::COUNTER,
    labels: &["kind"],
};

/// Slow-request and stall records lost, by where.
pub const EVENTS_DROPPED: MetricDesc = MetricDesc {
    name: "blkobs_events_dropped_total",
    help: "Slow-request and stall records lost: reason=ringbuf_full in the kernel, or history_full when the in-memory history dropped its oldest.",
    kind: MetricType::COUNTER,
    labels: &["reason"],
};

/// (device name, kind) → (episodes, seconds). Every device of the snapshot gets both kinds,
/// 0 until an episode ends, so alerts and rates work; devices the filter refuses are left out.
fn episode_totals<'a>(
    s: &Snapshot,
    history: &History,
    filter: &DeviceFilter,
    disks: &DiskView,
) -> BTreeMap<(String, &'a str), (u64, f64)> {
    let mut totals: BTreeMap<(String, &str), (u64, f64)> = BTreeMap::new();
    for dev in s.inflight.keys() {
        totals.insert((dev.clone(), "device"), (0, 0.0));
        totals.insert((dev.clone(), "dispatch"), (0, 0.0));
    }
    for ((dev, kind), (n, secs)) in &history.episode_totals {
        let name = disks.name(*dev);
        if !filter.allows(&name) {
            continue;
        }
        let t = totals.entry((name, stall_kind_name(*kind))).or_default();
        t.0 += n;
        t.1 += secs;
    }
    totals
}

/// The four families (`disks` names the devices of the episode totals).
pub fn families(
    w: &mut dyn MetricWriter,
    s: &Snapshot,
    history: &History,
    filter: &DeviceFilter,
    disks: &DiskView,
) {
    let totals = episode_totals(s, history, filter, disks);
    let mut f = w.family(&STALL_EPISODES);
    for ((dev, kind), (n, _)) in &totals {
        f.counter(&[dev, kind], *n as f64);
    }
    let mut f = w.family(&STALL_SECONDS);
    for ((dev, kind), (_, secs)) in &totals {
        f.counter(&[dev, kind], *secs);
    }
    let mut f = w.family(&EVENTS_RECEIVED);
    f.counter(&["slow_request"], history.slow_received as f64);
    f.counter(&["stall_episode"], history.episodes_received as f64);
    let mut f = w.family(&EVENTS_DROPPED);
    f.counter(&["ringbuf_full"], s.counters.events_dropped as f64);
    f.counter(
        &["history_full"],
        (history.slow_overflow + history.episode_overflow) as f64,
    );
}
