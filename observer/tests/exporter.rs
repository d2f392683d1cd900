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
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    assert!(
        cpu >= 0.0 && cpu <= ticks / tck + 1.0,
        "{cpu} vs {}",
        ticks / tck
    );
}
