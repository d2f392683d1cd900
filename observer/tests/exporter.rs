//! The observer's own metrics, as exporters conventionally export them: the standard `process_*`
//! metrics, and what its eBPF programs cost (`blkobs_bpf_program_*`). Run as root:
//! `cargo test -p observer --test exporter -- --test-threads=1 --nocapture`.

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use support::*;

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A field of /proc/PID/status (`VmRSS:  1234 kB` → 1234).
fn status_field(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status_fields(&s, key)[0].parse().unwrap()
}

/// `process_*` are there, typed as usual, and agree with what /proc says of the daemon's pid
/// and with the test's own clock.
#[test]
fn process_metrics_are_sane() {
    if !require_root("process_metrics_are_sane") {
        return;
    }
    let before = unix_now();
    let daemon = Daemon::start(&[]);
    let after = unix_now();
    let pid = daemon.pid();
    let text = daemon.metrics_text();
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_threads", "gauge"),
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}\n")),
            "{name} {kind} missing"
        );
    }
    let m = Metrics::parse(&text);
    let v = |name: &str| m.sum(name, &[]);

    let start = v("process_start_time_seconds");
    eprintln!("start time {start} (test clock: daemon started in [{before:.3}, {after:.3}])");
    // Whole seconds, from clock ticks after boot.
    assert!(
        start >= before.floor() - 1.0 && start <= after + 1.0,
        "process_start_time_seconds {start} outside [{before}, {after}] (± 1 s)"
    );

    let fds = v("process_open_fds");
    let proc_fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    eprintln!(
        "open fds {fds} (/proc/{pid}/fd: {proc_fds}), max {}",
        v("process_max_fds")
    );
    assert!(
        fds > 10.0,
        "the daemon holds BPF maps, programs and links: {fds}"
    );
    assert!((fds - proc_fds).abs() <= 4.0, "{fds} vs /proc {proc_fds}");
    assert!(v("process_max_fds") >= fds);

    let rss = v("process_resident_memory_bytes");
    let proc_rss = status_field(pid, "VmRSS") as f64 * 1024.0;
    eprintln!(
        "rss {rss} (/proc VmRSS {proc_rss}), vsz {}",
        v("process_virtual_memory_bytes")
    );
    assert!(
        rss > 1e6 && rss >= proc_rss * 0.5 && rss <= proc_rss * 2.0,
        "{rss} vs {proc_rss}"
    );
    assert!(v("process_virtual_memory_bytes") >= rss);

    let threads = v("process_threads");
    let proc_threads = status_field(pid, "Threads") as f64;
    assert!(
        threads >= 2.0 && (threads - proc_threads).abs() <= 4.0,
        "{threads} vs {proc_threads}"
    );

    // CPU: whole seconds; not more than the kernel's utime + stime.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    let cpu = v("process_cpu_seconds_total");
    eprintln!("cpu {cpu} s (/proc: {} ticks)", ticks);
    // SAFETY: sysconf reads a constant of the C library; no memory is passed.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    assert!(
        cpu >= 0.0 && cpu <= ticks / tck + 1.0,
        "{cpu} vs {}",
        ticks / tck
    );
}

/// Runs and run time of the programs whose name starts with `prefix` (all variants: `tp_btf`,
/// `_raw`, `_q`).
fn program_cost(m: &Metrics, prefix: &str) -> (f64, f64) {
    let sum = |name: &str| {
        m.select(name, &[])
            .filter(|s| s.labels["program"].starts_with(prefix))
            .map(|s| s.value)
            .sum::<f64>()
    };
    (
        sum("blkobs_bpf_program_runs_total"),
        sum("blkobs_bpf_program_run_seconds_total"),
    )
}

/// With `kernel.bpf_stats_enabled=1` every program the daemon loaded is listed, and the
/// completion program's runs grow by at least the completions /proc/diskstats counts on a loop
/// device (it runs for every disk on the host, and for partial completions too), with a
/// positive run time. Every program's recursion misses are listed, whatever the sysctl. With
/// the sysctl at 0 (checked only when it was 0 before the test: others on this host
/// may be using the statistics) nothing is exported. The old value is restored.
#[test]
fn bpf_program_cost_counts_every_completion() {
    if !require_root("bpf_program_cost_counts_every_completion") {
        return;
    }
    let stats = Sysctl::set("kernel.bpf_stats_enabled", "0");
    let was_off = stats.old == "0";
    if !was_off {
        stats.write("1");
    }
    let daemon = Daemon::start(&[]);
    // Recursion misses are counted by the kernel always: listed for every program either way
    // (read back with BPF_OBJ_GET_INFO_BY_FD; a failed read would drop the program).
    let m = daemon.scrape();
    let missed: Vec<&String> = m
        .select("blkobs_bpf_program_recursion_misses_total", &[])
        .map(|s| &s.labels["program"])
        .collect();
    assert!(missed.len() >= 10, "recursion misses of {missed:?}");
    assert!(missed.iter().any(|p| *p == "rq_state"), "{missed:?}");
    if was_off {
        let m = daemon.scrape();
        assert_eq!(
            m.select("blkobs_bpf_program_runs_total", &[]).count()
                + m.select("blkobs_bpf_program_run_seconds_total", &[])
                    .count(),
            0,
            "exported with kernel.bpf_stats_enabled=0"
        );
        stats.write("1");
    } else {
        eprintln!("kernel.bpf_stats_enabled was 1 already: the disabled case is not checked");
    }
    let dev = LoopDev::new(64, "none");
    quiesce(&dev.name);

    let m0 = daemon.scrape();
    let programs: Vec<String> = m0
        .select("blkobs_bpf_program_runs_total", &[])
        .map(|s| s.labels["program"].clone())
        .collect();
    eprintln!("programs: {programs:?}");
    // 8 lifecycle tracepoints + the entry point, and the reaper's probe.
    assert!(programs.len() >= 10, "{programs:?}");
    assert!(programs.iter().any(|p| p == "rq_state"), "{programs:?}");
    let (runs0, secs0) = program_cost(&m0, "rq_complete");
    let d0 = diskstats(&dev.name);
    dev.write_direct(0, 3000);
    let read = std::process::Command::new("dd")
        .args([
            "of=/dev/null",
            "bs=4k",
            "count=1000",
            "iflag=direct",
            "status=none",
        ])
        .arg(format!("if={}", dev.path))
        .status()
        .unwrap();
    assert!(read.success());
    quiesce(&dev.name);
    let d1 = diskstats(&dev.name);
    let m1 = daemon.scrape();
    let (runs1, secs1) = program_cost(&m1, "rq_complete");
    let completions = (d1.reads + d1.writes + d1.discards + d1.flushes)
        - (d0.reads + d0.writes + d0.discards + d0.flushes);
    let (runs, secs) = (runs1 - runs0, secs1 - secs0);
    eprintln!(
        "{completions} completions on {} (diskstats); rq_complete ran {runs} times in {secs:.6} s ({:.0} ns per run)",
        dev.name,
        secs / runs * 1e9
    );
    assert!(completions >= 4000, "{completions}");
    assert!(
        runs >= completions as f64,
        "{runs} runs < {completions} completions"
    );
    assert!(secs > 0.0, "run time {secs}");
    let (all_runs, all_secs) = program_cost(&m1, "");
    eprintln!("all programs: {all_runs} runs, {all_secs:.6} s");
    drop(daemon);
    drop(stats);
}

/// A test that sums a metric the daemon no longer declares (renamed, misspelled) fails instead
/// of reading 0: support/metrics.rs `declared` knows the families from observer/src.
#[test]
fn sums_over_undeclared_metrics_fail() {
    let m = Metrics::parse(
        "# TYPE blkobs_requests_total counter\nblkobs_requests_total{device=\"loop0\"} 3\n",
    );
    assert_eq!(m.sum("blkobs_requests_total", &[("device", "loop0")]), 3.0);
    // Declared, absent from this scrape: a real zero.
    assert_eq!(m.sum("blkobs_lost_completions_total", &[]), 0.0);
    assert!(declared("blkobs_request_latency_seconds_bucket"));
    assert!(declared("process_cpu_seconds_total"));
    assert!(!declared("blkobs_request_total"));
    let renamed = std::panic::catch_unwind(|| m.sum("blkobs_completions_lost_total", &[]));
    assert!(
        renamed.is_err(),
        "a sum over an undeclared metric must fail"
    );
}
