//! `GET /counters`: per device, the cumulative counters of every class (completed requests and
//! bytes, lost, untracked, slow, merges, requeues: what `/metrics` exports as
//! `blkobs_requests_total`, `blkobs_bytes_total`, ...) and the requests in flight now with the
//! oldest one's age per stage (`blkobs_inflight_requests`, `blkobs_oldest_inflight_age_seconds`),
//! read from the kernel maps at one instant (parameter `device`).
//!
//! Counters count from the daemon's start, as `/proc/diskstats` counts from boot: a client
//! computes rates (IOPS, bytes/s) from two answers and their `monotonic_seconds`, as `observer
//! top` does.
//!
//! ```json
//! {"now": "2026-12-04T16:40:00.123Z", "monotonic_seconds": 8123.456789,
//!  "devices": [{"device": "loop3", "bio_based": false,
//!               "inflight": {"queue": 0, "device": 2, "oldest_queue_seconds": 0.0,
//!                            "oldest_device_seconds": 0.0012},
//!               "classes": [{"op": "write", "flags": ["sync"], "rwbs": "WS",
//!                            "ioprio_class": "be", "requests": 4096, "bytes": 16777216,
//!                            "lost": 0, "untracked": 0, "slow": 0, "merges": 0,
//!                            "requeues": 0}]}]}
//! ```

use std::{collections::BTreeMap, sync::Arc};

use axum::{
    extract::{RawQuery, State},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

use super::{blocking, endpoints::accepted, params::parse};
use crate::{
    collect::snapshot::{ClassTotals, InflightCounts, Snapshot},
    labels::ClassInfo,
    state::AppState,
    time::Clock,
};

/// Requests in flight on one device at the read.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Inflight {
    /// Requests entered and not dispatched (on a bio-based disk: its bios in flight).
    pub queue: u64,
    /// Requests dispatched to the driver and not completed (0 on a bio-based disk).
    pub device: u64,
    /// Age (seconds) of the oldest request in stage queue since it entered; 0 if none.
    pub oldest_queue_seconds: f64,
    /// Age (seconds) of the oldest request at the device since its dispatch; 0 if none.
    pub oldest_device_seconds: f64,
}

impl From<&InflightCounts> for Inflight {
    fn from(c: &InflightCounts) -> Inflight {
        Inflight {
            queue: c.queue,
            device: c.device,
            oldest_queue_seconds: c.oldest_queue_ns as f64 * 1e-9,
            oldest_device_seconds: c.oldest_device_ns as f64 * 1e-9,
        }
    }
}

/// One (device, class)'s counters since the daemon started.
#[derive(Debug, Serialize, PartialEq)]
pub struct ClassCounters {
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// Completed requests (lost ones included), as `blkobs_requests_total`.
    pub requests: u64,
    /// Completed bytes, as `blkobs_bytes_total`.
    pub bytes: u64,
    /// Completed requests without a latency (completion not seen).
    pub lost: u64,
    /// Completions of requests in flight before the daemon started (not in `requests`).
    pub untracked: u64,
    /// Completed requests over their slow threshold.
    pub slow: u64,
    /// Bios merged into requests and requests merged away.
    pub merges: u64,
    /// Requeues.
    pub requeues: u64,
}

impl ClassCounters {
    fn of(class: u16, t: &ClassTotals) -> ClassCounters {
        ClassCounters {
            class: ClassInfo::of(class),
            requests: t.requests,
            bytes: t.bytes,
            lost: t.lost,
            untracked: t.untracked,
            slow: t.slow,
            merges: t.merges,
            requeues: t.requeues,
        }
    }
}

/// One device: its in-flight requests and its classes' counters.
#[derive(Debug, Serialize, PartialEq)]
pub struct DeviceCounters {
    /// Kernel device name.
    pub device: String,
    /// A bio-based disk (dm, md): `inflight.queue` counts its bios in flight (stage total).
    pub bio_based: bool,
    /// Requests in flight now.
    pub inflight: Inflight,
    /// Every class with something counted, in class order.
    pub classes: Vec<ClassCounters>,
}

/// The devices of `snap` (only `device` when given), by name: every device with counted
/// classes or requests in flight.
pub fn devices(snap: &Snapshot, device: Option<&str>) -> Vec<DeviceCounters> {
    let mut out: BTreeMap<&str, DeviceCounters> = BTreeMap::new();
    let names = snap
        .classes
        .keys()
        .map(|(d, _)| d.as_str())
        .chain(snap.inflight.keys().map(String::as_str));
    for d in names.filter(|d| device.is_none_or(|w| w == *d)) {
        out.entry(d).or_insert_with(|| {
            let inflight = snap.inflight.get(d);
            DeviceCounters {
                device: d.to_string(),
                bio_based: inflight.is_some_and(|c| c.bio_based),
                inflight: inflight.map(Inflight::from).unwrap_or_default(),
                classes: Vec::new(),
            }
        });
    }
    for ((dev, class), t) in &snap.classes {
        if let Some(d) = out.get_mut(dev.as_str()) {
            d.classes.push(ClassCounters::of(class.0, t));
        }
    }
    out.into_values().collect()
}

/// The handler: 400 on a bad parameter, else `{"now", "monotonic_seconds", "devices": [...]}`.
pub async fn get_counters(State(st): State<Arc<AppState>>, RawQuery(q): RawQuery) -> Response {
    let clock = Clock::now();
    let p = match parse(q.as_deref(), accepted("/counters"), &clock, &st.disks) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let out = blocking(move || {
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        let at = Clock::now();
        let snap = Snapshot::read(&st.maps, &st.reaped, &filter, &st.disks);
        serde_json::json!({
            "now": at.rfc3339(at.mono_now),
            "monotonic_seconds": at.mono_now as f64 * 1e-9,
            "devices": devices(&snap, p.device.as_deref()),
        })
    })
    .await;
    Json(out).into_response()
}

#[cfg(test)]
mod tests {
    use observer_common::class::Class;

    use super::*;

    #[test]
    fn devices_with_classes_or_requests_in_flight() {
        let mut snap = Snapshot::default();
        let mut t = ClassTotals::new();
        t.requests = 7;
        t.bytes = 7 * 4096;
        snap.classes.insert(("loop1".into(), Class(1)), t.clone());
        snap.classes.insert(("loop1".into(), Class(0)), t);
        snap.inflight.insert(
            "vda".into(),
            InflightCounts {
                queue: 1,
                device: 2,
                oldest_queue_ns: 1_500_000_000,
                oldest_device_ns: 250_000_000,
                bio_based: false,
            },
        );
        let d = devices(&snap, None);
        let names: Vec<&str> = d.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(names, ["loop1", "vda"]);
        assert_eq!(d[0].classes.len(), 2);
        assert_eq!(
            (d[0].classes[0].requests, d[0].classes[0].bytes),
            (7, 28672)
        );
        assert_eq!(d[0].inflight, Inflight::default());
        assert_eq!(
            d[1].inflight,
            Inflight {
                queue: 1,
                device: 2,
                oldest_queue_seconds: 1.5,
                oldest_device_seconds: 0.25
            }
        );
        assert!(d[1].classes.is_empty());
        let only = devices(&snap, Some("vda"));
        assert_eq!(only.len(), 1);
        assert!(devices(&snap, Some("sdz")).is_empty());
    }
}
