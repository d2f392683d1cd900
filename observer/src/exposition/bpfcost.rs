//! What the observer's own eBPF programs cost, as ebpf_exporter exports it: declares
//! `blkobs_bpf_program_runs_total` and `blkobs_bpf_program_run_seconds_total`, by program. Only
//! while the kernel counts (`kernel.bpf_stats_enabled=1`, see [`crate::bpf::progstats`]).

use prometheus::proto::MetricType;

use super::{MetricDesc, TextWriter};
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
/// [`crate::bpf::progstats::exported`]; nothing is written for no runs).
pub fn families(w: &mut TextWriter, runs: &[ProgramRun]) {
    let mut f = w.family(&PROGRAM_RUNS);
    for r in runs {
        f.counter(&[&r.program], r.runs as f64);
    }
    let mut f = w.family(&PROGRAM_RUN_SECONDS);
    for r in runs {
        f.counter(&[&r.program], r.run_time_ns as f64 / 1e9);
    }
}
