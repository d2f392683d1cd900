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
//! | `blkobs_untracked_completions_total` | counter | device, op, flags |
//! | `blkobs_slow_requests_total` | counter | device, op, flags |
//! | `blkobs_oldest_inflight_age_seconds` | gauge | device, stage |
//! | `blkobs_stall_episodes_total`, `blkobs_stall_seconds_total` | counter | device, kind (device, dispatch) |
//! | `blkobs_events_received_total` | counter | kind |
//! | `blkobs_events_dropped_total` | counter | reason |
//! | `blkobs_request_errors_total` | counter | device, op, status |
//! | `blkobs_inflight_requests` | gauge | device, stage (queue, device) |
//! | `blkobs_fs_log_sectors` | gauge (`fslog/metrics.rs`) | device, fs_device, fstype, mountpoint, kind, start |
//! | `blkobs_fs_log_status` | gauge (`fslog/metrics.rs`), 1 per filesystem | device, fs_device, fstype, mountpoint, status (found, no_journal, unreadable, no_device_node, invalid, external_log_missing, io_error) |
//! | `blkobs_fs_log_warnings` | gauge (`fslog/metrics.rs`) | |
//! | `blkobs_bpf_program_runs_total`, `blkobs_bpf_program_run_seconds_total` | counter (`bpfcost.rs`), only while `kernel.bpf_stats_enabled=1` | program |
//! | `process_cpu_seconds_total`, `process_open_fds`, `process_max_fds`, `process_virtual_memory_bytes`, `process_resident_memory_bytes`, `process_start_time_seconds`, `process_threads` | the standard process metrics (`process.rs`, the prometheus crate's `ProcessCollector`) | |
//! | `blkobs_dropped_requests_total{reason}`, `blkobs_stale_requests_total`, `blkobs_clock_anomalies_total`, `blkobs_unindexed_requests_total`, `blkobs_devices_degraded`, `blkobs_map_entries{map}`, `blkobs_map_capacity{map}`, `blkobs_build_info`, `blkobs_http_rejected_total{reason}` | self-monitoring | |
//!
//! Label `log` is `true` for requests that start inside a filesystem log (journal) range
//! (`observer_common::class::LOG`, see `crate::fslog`): `{op="write",log="true"}` selects log writes.
//! "flags" above means the same flag labels as the histogram (preflush ... log).

pub mod bpfcost;
mod buckets;
mod desc;
mod inflight;
mod process;
mod requests;
pub mod selfmon;
mod stalls;

pub use buckets::BucketMap;
pub use desc::{encode, MetricDesc};
pub use process::ProcessMetrics;

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
