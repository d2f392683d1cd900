//! What the observer's own eBPF programs cost, as ebpf_exporter exports it: declares
//! `blkobs_bpf_program_runs_total` and `blkobs_bpf_program_run_seconds_total`, by program, only
//! while the kernel counts (`kernel.bpf_stats_enabled=1`, see [`crate::bpf::progstats`]); and
//! `blkobs_bpf_program_recursion_misses_total`, always.

use prometheus::proto::MetricType;

use super::{MetricDesc, MetricWriter};
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

/// Runs of each program the kernel skipped (recursion).
pub const PROGRAM_RECURSION_MISSES: MetricDesc = MetricDesc {
    name: "blkobs_bpf_program_recursion_misses_total",
    help: "Times the kernel skipped this eBPF program of the observer because it was already running on that CPU (bpf_prog_info recursion_misses; 0 on 5.10, which does not skip). A skipped completion program is an end the observer never saw: counted later in blkobs_lost_completions_total.",
    kind: MetricType::COUNTER,
    labels: &["program"],
};

/// The families for `runs`: recursion misses always (of the programs whose count the kernel
/// gave), run counts and times only when `timed`
/// ([`crate::bpf::progstats::runs_exported`]). Nothing is written for no programs.
pub fn families(w: &mut dyn MetricWriter, runs: &[ProgramRun], timed: bool) {
    let mut f = w.family(&PROGRAM_RECURSION_MISSES);
    for r in runs {
        if let Some(n) = r.recursion_misses {
            f.counter(&[&r.program], n as f64);
        }
    }
    if !timed {
        return;
    }
    let mut f = w.family(&PROGRAM_RUNS);
    for r in runs {
        f.counter(&[&r.program], r.runs as f64);
    }
    let mut f = w.family(&PROGRAM_RUN_SECONDS);
    for r in runs {
        f.counter(&[&r.program], r.run_time_ns as f64 / 1e9);
    }
}
