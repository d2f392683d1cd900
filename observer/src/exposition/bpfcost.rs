//! What the observer's own eBPF programs cost, as ebpf_exporter exports it: declares
//! `blkobs_bpf_program_runs_total` and `blkobs_bpf_program_run_seconds_total`, by program. Only
//! while the kernel counts (`kernel.bpf_stats_enabled=1`, see [`crate::bpf::progstats`]).

use prometheus::proto::{MetricFamily, MetricType};

use super::MetricDesc;
use crate::bpf::progstats::ProgramRun;

/// Runs of each program.
pub const PROGRAM_RUNS: MetricDesc = MetricDesc {
    name: "blkobs_bpf_program_runs_total",
    help: "Times the kernel ran this eBPF program of the observer, counted while kernel.bpf_stats_enabled=1 (exported only then).",
    kind: MetricType::COUNTER,
    labels: &["program"],
};

/// Time spent in each program.
pub const PROGRAM_RUN_SECONDS: MetricDesc = MetricDesc {
    name: "blkobs_bpf_program_run_seconds_total",
    help: "Time the kernel spent running this eBPF program of the observer (seconds), counted while kernel.bpf_stats_enabled=1 (exported only then).",
    kind: MetricType::COUNTER,
    labels: &["program"],
};

/// The two families for `runs` (already filtered by
/// [`crate::bpf::progstats::exported`]; empty families are left out of the exposition).
pub fn families(runs: &[ProgramRun]) -> Vec<MetricFamily> {
    vec![
        PROGRAM_RUNS.family(
            runs.iter()
                .map(|r| PROGRAM_RUNS.counter(&[&r.program], r.runs as f64))
                .collect(),
        ),
        PROGRAM_RUN_SECONDS.family(
            runs.iter()
                .map(|r| PROGRAM_RUN_SECONDS.counter(&[&r.program], r.run_time_ns as f64 / 1e9))
                .collect(),
        ),
    ]
}
