//! Reading the kernel's BPF and block statistics: `bpftool prog show -j`, program ids held by a
//! process, completed requests per disk, a process's CPU and memory.
use std::{
    collections::{BTreeMap, HashMap},
    process::Command,
};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

/// `bpftool prog show -j`: every loaded program.
fn bpftool_progs() -> Result<Value> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "-j"])
        .output()
        .context("running bpftool")?;
    ensure!(
        out.status.success(),
        "bpftool prog show: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).context("parsing bpftool's JSON")
}

/// One measured run: program name → (run_time_ns, run_cnt) deltas, and requests completed.
pub type StatsRun = (BTreeMap<String, (u64, u64)>, u64);

/// Runs `work` and returns what the programs `ids` ran meanwhile (run_time_ns and run_cnt
/// added, summed per program name; kernel.bpf_stats_enabled must be 1) and the requests
/// completed on all disks.
pub fn measure<T>(ids: &[u32], work: impl FnOnce() -> Result<T>) -> Result<StatsRun> {
    let before = bpf_progs()?;
    let c0 = total_completions()?;
    work()?;
    let c1 = total_completions()?;
    let after = bpf_progs()?;
    let mut per = BTreeMap::new();
    for id in ids {
        let (Some(b), Some(a)) = (before.get(id), after.get(id)) else {
            continue;
        };
        let e = per.entry(a.0.clone()).or_insert((0, 0));
        e.0 += a.1 - b.1;
        e.1 += a.2 - b.2;
    }
    Ok((per, c1 - c0))
}

/// `bpftool prog show -j`, as id → (name, run_time_ns, run_cnt, recursion_misses).
pub fn bpf_progs() -> Result<HashMap<u32, (String, u64, u64, u64)>> {
    let v = bpftool_progs()?;
    let mut m = HashMap::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(id) = p["id"].as_u64() else { continue };
        m.insert(
            id as u32,
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["run_time_ns"].as_u64().unwrap_or(0),
                p["run_cnt"].as_u64().unwrap_or(0),
                // Runs the kernel skipped because the program was already running on that CPU.
                p["recursion_misses"].as_u64().unwrap_or(0),
            ),
        );
    }
    Ok(m)
}

/// Programs held open by a process (program and link fds name them in /proc/PID/fdinfo; this
/// bpftool is built without its own pid lookup).
pub fn progs_of(pid: u32) -> Result<Vec<u32>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        for l in info.lines() {
            if let Some(id) = l
                .strip_prefix("prog_id:")
                .and_then(|x| x.trim().parse::<u32>().ok())
            {
                v.push(id);
            }
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

/// Tracing programs loaded by others (another observer, a test) while we measure: they tax
/// every configuration, the untraced one included, so the report counts the runs they touched.
pub fn foreign_tracing_progs(ours: &[u32]) -> Result<Vec<String>> {
    let v = bpftool_progs()?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| {
            matches!(
                p["type"].as_str(),
                Some("tracing" | "raw_tracepoint" | "tracepoint" | "kprobe")
            )
        })
        .filter(|p| !ours.contains(&(p["id"].as_u64().unwrap_or(0) as u32)))
        .map(|p| format!("{}:{}", p["id"], p["name"].as_str().unwrap_or("?")))
        .collect())
}

/// Completed requests (reads, writes, discards, flushes) per whole disk, from /sys/block/*/stat.
pub fn disk_completions() -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir("/sys/block")?.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let f: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        m.insert(
            e.file_name().to_string_lossy().into_owned(),
            get(0) + get(4) + get(11) + get(15),
        );
    }
    Ok(m)
}

fn total_completions() -> Result<u64> {
    Ok(disk_completions()?.values().sum())
}

/// (CPU seconds, peak RSS KiB, current RSS KiB) of a process.
pub fn proc_usage(pid: u32) -> Result<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("/proc/pid/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm)": state is field 3, utime 14, stime 15 → indices 11, 12 here.
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    // SAFETY: sysconf reads a constant; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    Ok((ticks as f64 / hz, kib("VmHWM:"), kib("VmRSS:")))
}
