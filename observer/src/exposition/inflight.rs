//! Requests in flight now, per device and stage. Declares `blkobs_inflight_requests` and
//! `blkobs_oldest_inflight_age_seconds`.

use prometheus::proto::MetricType;

use super::{MetricDesc, TextWriter};
use crate::collect::snapshot::Snapshot;

/// Requests in flight per (device, stage).
pub const INFLIGHT_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_inflight_requests",
    help: "Requests in flight now: stage=queue waiting for dispatch, stage=device dispatched and not completed.",
    kind: MetricType::GAUGE,
    labels: &["device", "stage"],
};

/// Age of the oldest request in flight per (device, stage).
pub const OLDEST_INFLIGHT_AGE: MetricDesc = MetricDesc {
    name: "blkobs_oldest_inflight_age_seconds",
    help: "Age of the oldest request in flight: stage=queue since it entered, stage=device since its dispatch; 0 when none.",
    kind: MetricType::GAUGE,
    labels: &["device", "stage"],
};

/// Both families, every device with a `queue` and a `device` series.
pub fn families(w: &mut TextWriter, s: &Snapshot) {
    let mut f = w.family(&INFLIGHT_REQUESTS);
    for (dev, c) in &s.inflight {
        f.gauge(&[dev.as_str(), "queue"], c.queue as f64);
        f.gauge(&[dev.as_str(), "device"], c.device as f64);
    }
    let mut f = w.family(&OLDEST_INFLIGHT_AGE);
    for (dev, c) in &s.inflight {
        f.gauge(&[dev.as_str(), "queue"], c.oldest_queue_ns as f64 * 1e-9);
        f.gauge(&[dev.as_str(), "device"], c.oldest_device_ns as f64 * 1e-9);
    }
}
