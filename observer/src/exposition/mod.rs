//! Prometheus exposition of a [`Snapshot`]: `/metrics`. Each metric's name, help and labels are
//! declared once, as a [`MetricDesc`] `const` in the file of its feature (`requests`,
//! `inflight`, `stalls`, `selfmon`, and `crate::fslog` for the filesystem-log gauges); the
//! functions beside them only fill values.
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
//! | `blkobs_fs_log_sectors` | gauge (`fslog/metrics.rs`) | device, fs_device, fstype, mountpoint, kind, start |
//! | `blkobs_fs_log_status` | gauge (`fslog/metrics.rs`), 1 per filesystem | device, fs_device, fstype, mountpoint, status (found, no_journal, unreadable, no_device_node, invalid, external_log_missing, io_error) |
//! | `blkobs_fs_log_warnings` | gauge (`fslog/metrics.rs`) | |
//! | `blkobs_untracked_completions_total`, `blkobs_dropped_requests_total{reason}`, `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`, `blkobs_map_entries{map}`, `blkobs_map_capacity{map}`, `blkobs_build_info` | self-monitoring | |
//!
//! Label `log` is `true` for requests that start inside a filesystem log (journal) range
//! (`observer_common::class::LOG`, see `crate::fslog`): `{op="write",log="true"}` selects log writes.
//! "flags" above means the same flag labels as the histogram (preflush ... log).

mod buckets;
mod desc;
mod inflight;
mod requests;
mod selfmon;
mod stalls;

pub use buckets::BucketMap;
pub use desc::{encode, MetricDesc};

use crate::{
    bpf::loader::AttachInfo, collect::events::History, collect::snapshot::Snapshot,
    config::DeviceFilter,
};

/// The daemon's metric families (all but the filesystem-log ones) in the text exposition format
/// (version 0.0.4), in a fixed order: latency histograms, per-class counters, errors, in-flight,
/// stalls, self-monitoring. `buckets` are the exported bounds; `filter` limits the stall totals
/// (the snapshot is already filtered).
pub fn render(
    s: &Snapshot,
    history: &History,
    buckets: &BucketMap,
    info: &AttachInfo,
    filter: &DeviceFilter,
) -> String {
    let mut families = vec![requests::latency(s, buckets)];
    families.extend(requests::counters(s));
    families.push(requests::errors(s));
    families.extend(inflight::families(s));
    families.extend(stalls::families(s, history, filter));
    families.extend(selfmon::families(s, info));
    encode(families)
}

#[cfg(test)]
mod tests {
    use observer_common::{class::Class, hist::NBUCKETS, maps::mkdev};

    use super::*;
    use crate::{
        collect::snapshot::{ClassTotals, InflightCounts, SelfCounters, StageTotals},
        config::{Devices, Histogram},
        fslog::{render_metrics, sample_discovery, Discovery},
    };

    /// Five classes on two devices with samples in a few buckets, in-flight requests, errors,
    /// self-monitoring counters and ended stall episodes on an unknown device.
    fn sample() -> (Snapshot, History) {
        let mut s = Snapshot::default();
        for (i, class) in [0x0001u16, 0x0011, 0x0230, 0x0002, 0x0103]
            .iter()
            .enumerate()
        {
            let i64_ = i as u64;
            let mut t = ClassTotals {
                stages: (0..3)
                    .map(|_| StageTotals {
                        sum_ns: 0,
                        buckets: vec![0; NBUCKETS],
                    })
                    .collect(),
                requests: 10 + i64_,
                bytes: 4096 * i64_,
                merges: i64_ % 2,
                requeues: 0,
                lost: if i == 3 { 2 } else { 0 },
                slow: i64_ / 2,
            };
            for st in 0..3 {
                if i == 4 && st == 0 {
                    continue;
                }
                t.stages[st].sum_ns = 1_234_567 * (i64_ + 1) * (st as u64 + 1);
                t.stages[st].buckets[40 + i * 7 + st * 3] = 3 + i64_;
                t.stages[st].buckets[100 + st] = 1;
            }
            s.classes
                .insert((format!("dev{}", i % 2), Class(*class)), t);
        }
        let busy = InflightCounts {
            queue: 2,
            device: 1,
            oldest_queue_ns: 5_000_000,
            oldest_device_ns: 1_500_000_000,
        };
        s.inflight.insert("dev0".into(), busy);
        s.inflight.insert("dev1".into(), InflightCounts::default());
        s.errors.insert(("dev0".into(), Class(1), 10), 4);
        s.errors.insert(("dev1".into(), Class(2), 200), 1);
        s.counters = SelfCounters {
            untracked_completions: 1,
            inflight_full: 2,
            stats_full: 3,
            clock_anomalies: 4,
            stale_entries: 5,
            events_dropped: 6,
        };
        s.inflight_entries = (17, 16384);
        s.class_stats_entries = (5, 1000);
        let mut h = History::new(10, 10);
        h.episode_totals.insert((mkdev(250, 99), 0), (3, 1.25));
        h.episode_totals.insert((mkdev(250, 99), 1), (1, 0.5));
        h.slow_overflow = 7;
        (s, h)
    }

    /// The whole `/metrics` output of fixed inputs is byte-identical to `golden.prom` (recorded
    /// from the flat-module daemon before the restructuring; the version label is normalized).
    #[test]
    fn exposition_matches_golden() {
        let (s, h) = sample();
        let buckets = BucketMap::new(&Histogram::default().buckets);
        let odd = BucketMap::new(&[0.0001, 0.00033, 0.005, 1.0]);
        let info = AttachInfo {
            mode: "tp_btf",
            enter_tracepoint: "block_io_start",
        };
        let all = DeviceFilter::new(&Devices::default());
        let none = DeviceFilter::new(&Devices {
            include: vec!["nothing*".into()],
            exclude: vec![],
        });
        let mut out = render(&s, &h, &buckets, &info, &all) + &render_metrics(&sample_discovery());
        out += "=====\n";
        out += &(render(&Snapshot::default(), &History::new(1, 1), &odd, &info, &all)
            + &render_metrics(&Discovery::default()));
        out += "=====\n";
        out += &render(&s, &h, &odd, &info, &none);
        let out = out.replace(
            concat!("version=\"", env!("CARGO_PKG_VERSION"), "\""),
            "version=\"X\"",
        );
        if let Ok(path) = std::env::var("GOLDEN_OUT") {
            std::fs::write(path, &out).unwrap();
        }
        assert!(
            out == include_str!("golden.prom"),
            "exposition output differs from golden.prom"
        );
    }
}
