//! Requests in flight now, per device and stage. Declares `blkobs_inflight_requests`,
//! `blkobs_oldest_inflight_age_seconds` and `blkobs_device_mapper_info`.

use prometheus::proto::MetricType;

use super::{MetricDesc, MetricWriter};
use crate::collect::snapshot::Snapshot;

/// Requests in flight per (device, stage).
pub const INFLIGHT_REQUESTS: MetricDesc = MetricDesc {
    name: "blkobs_inflight_requests",
    help: "Requests in flight now: stage=queue waiting for dispatch, stage=device dispatched and not completed; on bio-based disks (dm, md) stage=total: bios entered and not completed.",
    kind: MetricType::GAUGE,
    labels: &["device", "stage"],
};

/// Age of the oldest request in flight per (device, stage).
pub const OLDEST_INFLIGHT_AGE: MetricDesc = MetricDesc {
    name: "blkobs_oldest_inflight_age_seconds",
    help: "Age of the oldest request in flight: stage=queue since it entered, stage=device since its dispatch, stage=total (bio-based disks) since it entered; 0 when none.",
    kind: MetricType::GAUGE,
    labels: &["device", "stage"],
};

/// A device-mapper disk's name, as node_exporter's `node_disk_device_mapper_info`.
pub const DEVICE_MAPPER_INFO: MetricDesc = MetricDesc {
    name: "blkobs_device_mapper_info",
    help:
        "1 per device-mapper disk with series here: its dm name and uuid (/sys/block/<device>/dm/).",
    kind: MetricType::GAUGE,
    labels: &["device", "name", "uuid"],
};

/// The families, every device with a `queue` and a `device` series, or for a bio-based disk
/// (dm, md: nothing is dispatched there) one `total` series; then the device-mapper names.
pub fn families(w: &mut dyn MetricWriter, s: &Snapshot) {
    let mut f = w.family(&INFLIGHT_REQUESTS);
    for (dev, c) in &s.inflight {
        if c.bio_based {
            f.gauge(&[dev.as_str(), "total"], c.queue as f64);
            continue;
        }
        f.gauge(&[dev.as_str(), "queue"], c.queue as f64);
        f.gauge(&[dev.as_str(), "device"], c.device as f64);
    }
    let mut f = w.family(&OLDEST_INFLIGHT_AGE);
    for (dev, c) in &s.inflight {
        if c.bio_based {
            f.gauge(&[dev.as_str(), "total"], c.oldest_queue_ns as f64 * 1e-9);
            continue;
        }
        f.gauge(&[dev.as_str(), "queue"], c.oldest_queue_ns as f64 * 1e-9);
        f.gauge(&[dev.as_str(), "device"], c.oldest_device_ns as f64 * 1e-9);
    }
    if !s.device_mapper.is_empty() {
        let mut f = w.family(&DEVICE_MAPPER_INFO);
        for (dev, (name, uuid)) in &s.device_mapper {
            f.gauge(&[dev.as_str(), name.as_str(), uuid.as_str()], 1.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::snapshot::InflightCounts;

    /// A bio-based disk has one `total` series per family, a request-based one `queue` and
    /// `device`; a dm disk's name is an info series.
    #[test]
    fn bio_based_disks_have_a_total_stage_and_dm_names() {
        let mut s = Snapshot::default();
        s.inflight.insert(
            "dm-0".into(),
            InflightCounts {
                queue: 2,
                oldest_queue_ns: 1_500_000_000,
                bio_based: true,
                ..InflightCounts::default()
            },
        );
        s.inflight.insert(
            "loop0".into(),
            InflightCounts {
                queue: 1,
                device: 3,
                ..InflightCounts::default()
            },
        );
        s.device_mapper
            .insert("dm-0".into(), ("vg0-data".into(), "LVM-x".into()));
        let mut w = super::super::TextWriter::new();
        families(&mut w, &s);
        let text = w.finish();
        let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            series,
            [
                "blkobs_inflight_requests{device=\"dm-0\",stage=\"total\"} 2",
                "blkobs_inflight_requests{device=\"loop0\",stage=\"queue\"} 1",
                "blkobs_inflight_requests{device=\"loop0\",stage=\"device\"} 3",
                "blkobs_oldest_inflight_age_seconds{device=\"dm-0\",stage=\"total\"} 1.5",
                "blkobs_oldest_inflight_age_seconds{device=\"loop0\",stage=\"queue\"} 0",
                "blkobs_oldest_inflight_age_seconds{device=\"loop0\",stage=\"device\"} 0",
                "blkobs_device_mapper_info{device=\"dm-0\",name=\"vg0-data\",uuid=\"LVM-x\"} 1",
            ]
        );
    }
}
