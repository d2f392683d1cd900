//! What the observer's own eBPF programs cost: each loaded program's run count and run time
//! (`bpf_prog_info` `run_cnt`, `run_time_ns`, read with `BPF_OBJ_GET_INFO_BY_FD` on the
//! program's own fd: CAP_BPF is enough). The kernel counts them only while
//! `kernel.bpf_stats_enabled` is 1 (`sysctl kernel.bpf_stats_enabled=1`; counting costs about
//! 20–30 ns per run, which is why it is off by default).

use std::path::Path;

use aya::Ebpf;

/// The sysctl that switches the kernel's per-program statistics on.
pub const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One program's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramRun {
    /// The program's name in the object (`rq_complete`, `io_start_raw`, `rq_state`, ...).
    pub program: String,
    /// Runs counted while statistics were enabled.
    pub runs: u64,
    /// Time spent running (ns), counted while statistics were enabled.
    pub run_time_ns: u64,
}

/// The counters of every loaded program of `ebpf` (programs of the object that were not loaded,
/// e.g. the `raw_tp` variants when `tp_btf` ones are attached, are left out), by name.
pub fn program_runs(ebpf: &Ebpf) -> Vec<ProgramRun> {
    let mut runs: Vec<ProgramRun> = ebpf
        .programs()
        .filter_map(|(name, p)| {
            let info = p.info().ok()?;
            Some(ProgramRun {
                program: name.to_string(),
                runs: info.run_count(),
                run_time_ns: info.run_time().as_nanos() as u64,
            })
        })
        .collect();
    runs.sort_by(|a, b| a.program.cmp(&b.program));
    runs
}

/// Whether the kernel counts program runs now: `Some(true)` when `kernel.bpf_stats_enabled`
/// reads 1, `None` if the sysctl cannot be read (e.g. under systemd's `ProcSubset=pid`).
pub fn stats_enabled() -> Option<bool> {
    stats_enabled_in(Path::new(BPF_STATS_SYSCTL))
}

fn stats_enabled_in(sysctl: &Path) -> Option<bool> {
    std::fs::read_to_string(sysctl)
        .ok()
        .map(|s| s.trim() != "0")
}

/// The counters worth exporting: all of them while statistics are enabled, none while they are
/// disabled (they would only repeat frozen values), and — when the sysctl cannot be read —
/// all of them once any program has counted a run (statistics are, or were, enabled).
pub fn exported(runs: Vec<ProgramRun>, enabled: Option<bool>) -> Vec<ProgramRun> {
    match enabled {
        Some(true) => runs,
        Some(false) => Vec::new(),
        None if runs.iter().any(|r| r.runs > 0) => runs,
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(n: u64) -> ProgramRun {
        ProgramRun {
            program: "rq_complete".into(),
            runs: n,
            run_time_ns: n * 100,
        }
    }

    #[test]
    fn exported_only_while_counted() {
        assert_eq!(exported(vec![run(0)], Some(true)), vec![run(0)]);
        assert!(exported(vec![run(5)], Some(false)).is_empty());
        assert_eq!(exported(vec![run(5)], None), vec![run(5)]);
        assert!(exported(vec![run(0)], None).is_empty());
    }

    #[test]
    fn sysctl_values() {
        let dir = std::env::temp_dir().join(format!("blkobs-sysctl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bpf_stats_enabled");
        std::fs::write(&f, "1\n").unwrap();
        assert_eq!(stats_enabled_in(&f), Some(true));
        std::fs::write(&f, "0\n").unwrap();
        assert_eq!(stats_enabled_in(&f), Some(false));
        assert_eq!(stats_enabled_in(&dir.join("missing")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
