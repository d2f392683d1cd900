//! Keeps `cargo xtask bench` working: runs its smoke version (1 round, 2 s runs, 2 scrape
//! devices), which exercises every configuration (untraced, floor, biolatency, observer), the
//! bpf_stats pass and the scrape phase, and checks that the table came out and nothing was left
//! behind. No timing assertions: the numbers of a 2 s run on a shared machine mean nothing.
//!
//! Needs root. Without it the test is skipped (visibly, and listed in `$BLKOBS_SKIP_LOG`), except
//! under CI, where it fails: the rule of observer/tests/support/skip_rule.rs, compiled here from
//! that same file.

use std::process::Command;

#[path = "../../observer/tests/support/skip_rule.rs"]
mod skip_rule;

fn loop_devices_over(dir: &str) -> Vec<String> {
    let out = Command::new("losetup")
        .args(["-l", "-n", "-O", "NAME,BACK-FILE"])
        .output()
        .expect("losetup");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(dir))
        .map(str::to_string)
        .collect()
}

#[test]
fn bench_smoke_runs_every_configuration() {
    // SAFETY: geteuid(2) cannot fail and takes no memory.
    if unsafe { libc::geteuid() } != 0 {
        let why = "bench smoke test needs root (loop devices, eBPF, sysctl)";
        skip_rule::skip(why);
        return;
    }
    let stats_before = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap();
    // `cargo xtask test` builds the release daemon once, before the tests, and says so.
    let no_build = std::env::var_os("BLKOBS_BENCH_NO_BUILD").is_some_and(|v| v == "1");
    let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "--smoke"])
        .args(no_build.then_some("--no-build"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running xtask bench");
    // Its files live in /dev/shm/blkobs-bench-<its pid>.
    let dir = format!("/dev/shm/blkobs-bench-{}", child.id());
    let out = child.wait_with_output().expect("waiting for xtask bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "cargo xtask bench --smoke failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );

    for needle in [
        "### IOPS",
        "### eBPF cost",
        "### Observer daemon",
        "### Budget (issue 12)",
        "ns per request",
        "/metrics scrape",
        "| eBPF cost per request, randread (bpf_stats) |",
        "| daemon peak RSS (VmHWM, start-up included) |",
    ] {
        assert!(stdout.contains(needle), "table lacks {needle:?}:\n{stdout}");
    }
    for config in ["untraced", "floor", "biolatency", "observer"] {
        for w in ["randread", "randwrite"] {
            assert!(
                stdout
                    .lines()
                    .any(|l| l.contains(&format!("| {w} | {config} |"))),
                "no IOPS row for {config} {w}:\n{stdout}"
            );
        }
    }
    for config in ["floor", "biolatency", "observer"] {
        assert!(
            stdout.contains(&format!("| {config} | randread | **total**")),
            "no bpf_stats total for {config}:\n{stdout}"
        );
    }
    // Cleanup on the success path: sysctl restored, no loop devices or files left.
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").unwrap(),
        stats_before
    );
    assert!(
        loop_devices_over(&dir).is_empty(),
        "loop devices left: {:?}",
        loop_devices_over(&dir)
    );
    assert!(!std::path::Path::new(&dir).exists(), "{dir} left behind");
}
