//! What the observer's own eBPF programs cost: each loaded program's run count and run time
//! (`bpf_prog_info` `run_cnt`, `run_time_ns`, read with `BPF_OBJ_GET_INFO_BY_FD` on the
//! program's own fd: CAP_BPF is enough). The kernel counts them only while
//! `kernel.bpf_stats_enabled` is 1 (`sysctl kernel.bpf_stats_enabled=1`; counting costs about
//! 20–30 ns per run, which is why it is off by default). The same call gives each program's
//! recursion misses, which the kernel always counts (0 on 5.10, which does not skip).

use std::{
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    path::Path,
};

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
    /// Runs the kernel skipped because the program was already running on that CPU (an
    /// interrupt fired the same tracepoint inside it): `bpf_prog_info` `recursion_misses`,
    /// counted always (kernel/trace/bpf_trace.c `__bpf_trace_run`, which runs `tp_btf` and
    /// `raw_tp` programs alike: a per-CPU `prog->active` count; 5.10's `__bpf_trace_run` has no
    /// such check, runs nested programs, and this reads 0 there). A skipped completion is a request or bio whose end
    /// the observer never sees: it is counted as lost when its address is used again. `None`
    /// if the kernel did not answer.
    pub recursion_misses: Option<u64>,
}

/// The counters of every loaded program of `ebpf` (programs of the object that were not loaded,
/// e.g. the `raw_tp` variants when `tp_btf` ones are attached, are left out), by name.
pub fn program_runs(ebpf: &Ebpf) -> Vec<ProgramRun> {
    let mut runs: Vec<ProgramRun> = ebpf
        .programs()
        // A tail call's target runs as part of its caller (bpf_stats and recursion checks are
        // the caller's): it would only read 0.
        .filter(|(name, _)| !super::tracepoints::is_tail_called(name))
        .filter_map(|(name, p)| {
            let info = p.info().ok()?;
            Some(ProgramRun {
                program: name.to_string(),
                runs: info.run_count(),
                run_time_ns: info.run_time().as_nanos() as u64,
                recursion_misses: p.fd().ok().and_then(|fd| recursion_misses(fd.as_fd())),
            })
        })
        .collect();
    runs.sort_by(|a, b| a.program.cmp(&b.program));
    runs
}

/// `bpf_prog_info` `recursion_misses` of the program behind `fd` (`BPF_OBJ_GET_INFO_BY_FD`;
/// aya's `ProgramInfo` does not expose the field), or `None` if the call fails. A kernel with a
/// shorter `bpf_prog_info` (5.10) fills only what it has: the field stays 0.
fn recursion_misses(fd: BorrowedFd<'_>) -> Option<u64> {
    use aya_obj::generated::{bpf_attr, bpf_attr__bindgen_ty_9, bpf_cmd, bpf_prog_info};
    // SAFETY: both are plain C structs of integers, for which all-zero bytes are valid values
    // (and the kernel requires the bytes it does not know to be zero).
    let mut info: bpf_prog_info = unsafe { std::mem::zeroed() };
    let mut attr: bpf_attr = unsafe { std::mem::zeroed() };
    attr.info = bpf_attr__bindgen_ty_9 {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of::<bpf_prog_info>() as u32,
        info: &mut info as *mut bpf_prog_info as u64,
    };
    // SAFETY: `attr` is a whole bpf_attr of the size passed; `info` points at `info_len`
    // writable bytes that live until the call returns; `fd` is open for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            bpf_cmd::BPF_OBJ_GET_INFO_BY_FD as libc::c_long,
            &mut attr as *mut bpf_attr,
            std::mem::size_of::<bpf_attr>() as libc::c_long,
        )
    };
    (rc == 0).then_some(info.recursion_misses)
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

/// Whether the run counts and run times are worth exporting: while statistics are enabled,
/// not while they are disabled (they would only repeat frozen values), and — when the sysctl
/// cannot be read — once any program has counted a run (statistics are, or were, enabled).
/// Recursion misses are counted always and exported always.
pub fn runs_exported(runs: &[ProgramRun], enabled: Option<bool>) -> bool {
    match enabled {
        Some(enabled) => enabled,
        None => runs.iter().any(|r| r.runs > 0),
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
            recursion_misses: Some(0),
        }
    }

    #[test]
    fn runs_exported_only_while_counted() {
        assert!(runs_exported(&[run(0)], Some(true)));
        assert!(!runs_exported(&[run(5)], Some(false)));
        assert!(runs_exported(&[run(5)], None));
        assert!(!runs_exported(&[run(0)], None));
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
