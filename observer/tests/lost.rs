//! Lost completions are explained, one by one: fio random read/write (io_uring, queue depth 64,
//! 2 jobs) on one loop device while 400 small files are written and fsynced on XFS on another
//! (the repro of issue 10.3). Every request is counted exactly as /proc/diskstats counts it, and
//! every completion the observer reports lost is one the kernel delivered to ftrace but ran no
//! BPF program for: on our development and CI kernel, a completion run by the BLOCK softirq on
//! top of a thread of PID 1 (support/witness.rs, [`Pid1Completions`]). On kernels without that
//! behaviour (the matrix VMs), none is lost.
//!
//! `BLKOBS_LOST_SECONDS` sets the fio runtime (default 10 s; BENCHMARKS.md's 10 M-request run
//! used 120).

mod support;

use std::{thread, time::Duration};

use support::*;

const FSYNCS: usize = 400;

#[test]
fn every_lost_completion_is_one_the_kernel_ran_no_bpf_for() {
    if !require_root_and(&["fio", "mkfs.xfs"]) {
        return;
    }
    let seconds: u64 = std::env::var("BLKOBS_LOST_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let raw = LoopDev::kernel_scheduler(256);
    let fsdev = LoopDev::kernel_scheduler(320);
    let mut m = Mount::new(&fsdev, &["mkfs.xfs", "-f", "-q"]);
    let daemon = Daemon::start(&[]);
    quiesce(&raw.name);
    quiesce(&fsdev.name);
    let (before, d0) = scrape_between_equal_diskstats(&daemon, &[&raw, &fsdev]);
    let d0 = (d0[0], d0[1]);
    let pid1 = Pid1Completions::start(&[raw.kdev(), fsdev.kdev()]);

    let dir = m.dir.clone();
    let fsyncs = thread::spawn(move || fsync_files(&dir, FSYNCS));
    let fio_out = fio(&[
        "--name=randrw",
        &format!("--filename={}", raw.path),
        "--direct=1",
        "--ioengine=io_uring",
        "--iodepth=64",
        "--numjobs=2",
        "--rw=randrw",
        "--bs=4k",
        "--time_based",
        &format!("--runtime={seconds}"),
        "--group_reporting",
    ]);
    fsyncs.join().unwrap();
    m.unmount();
    quiesce(&raw.name);
    quiesce(&fsdev.name);
    // The reaper retires a request whose completion was not seen after two passes 1 s apart,
    // more than 1 s after its dispatch.
    thread::sleep(Duration::from_millis(4000));
    let hidden = pid1.stop();
    let (after, d1) = scrape_between_equal_diskstats(&daemon, &[&raw, &fsdev]);
    let d1 = (d1[0], d1[1]);

    let fio_ios = fio_out["jobs"][0]["read"]["total_ios"].as_u64().unwrap()
        + fio_out["jobs"][0]["write"]["total_ios"].as_u64().unwrap();
    let mut report = Vec::new();
    for (dev, k0, k1) in [(&raw, d0.0, d1.0), (&fsdev, d0.1, d1.1)] {
        let n = dev.name.as_str();
        let ours = |op: &str| {
            after.sum("blkobs_requests_total", &[("device", n), ("op", op)])
                - before.sum("blkobs_requests_total", &[("device", n), ("op", op)])
        };
        let total = ours("read") + ours("write") + ours("flush");
        assert_eq!(
            (ours("read"), ours("write"), ours("flush")),
            (
                (k1.reads - k0.reads) as f64,
                (k1.writes - k0.writes) as f64,
                (k1.flushes - k0.flushes) as f64
            ),
            "{n}: reads, writes, flushes vs /proc/diskstats"
        );
        let lost = after.sum("blkobs_lost_completions_total", &[("device", n)])
            - before.sum("blkobs_lost_completions_total", &[("device", n)]);
        let in_pid1 = Pid1Completions::of(&hidden, dev.kdev()) as f64;
        report.push(format!(
            "{n}: {total} requests, {lost} lost, completions ftrace saw on top of PID 1: {}",
            pid1.shown(in_pid1)
        ));
        assert!(
            lost <= in_pid1,
            "{n}: {lost} lost completions, but only {in_pid1} completions ran in PID 1's \
             context: a loss with another cause ({report:?})"
        );
        if std::env::var_os("BLKOBS_VM").is_some() {
            assert_eq!(lost, 0.0, "{n}: lost completions in the matrix VM");
        }
    }
    eprintln!("{seconds} s, fio {fio_ios} I/Os: {}", report.join("; "));
    let untracked = after.sum("blkobs_untracked_completions_total", &[])
        - before.sum("blkobs_untracked_completions_total", &[]);
    assert_eq!(untracked, 0.0, "untracked completions");
    assert!(
        fio_ios > 1000,
        "workload too small to prove anything: {fio_ios}"
    );
}

/// Completions the kernel skips the completion program for are taken by its second program
/// (observer-ebpf nested.rs): two null_blk disks driven from one CPU, one completing in the
/// submitting task (`irqmode=0`), one in an hrtimer interrupt (`irqmode=2`), so that the
/// interrupt's completions land inside `rq_complete`'s runs for the other disk. On 6.x the
/// kernel skips those runs (kernel/trace/bpf_trace.c `__bpf_trace_run`, its recursion misses
/// count each); `blkobs_nested_completions_total` counts the skipped ends the second program
/// took (most of them), the rest are the only ones lost, and every read is counted as
/// /proc/diskstats counts it. On 5.10 the kernel runs the program nested instead: no miss, nothing taken, counts
/// equal all the same (the second program must not count an end twice).
#[test]
#[ignore = "needs null_blk: runs in the kernel-matrix VMs"]
fn completions_skipped_for_recursion_are_taken_by_the_nested_program() {
    if !require_root_and(&["fio"]) {
        return;
    }
    let task = NullBlk::with(256, "none", &[("irqmode", "0")]);
    let timer = NullBlk::with(
        256,
        "none",
        &[("irqmode", "2"), ("completion_nsec", "20000")],
    );
    let daemon = Daemon::start(&[]);
    let devs = [&task.name, &timer.name];
    let misses = |m: &Metrics| {
        m.select("blkobs_bpf_program_recursion_misses_total", &[])
            .filter(|s| {
                let p = s.labels["program"].trim_end_matches("_raw");
                matches!(
                    p,
                    "rq_complete" | "rq_complete_q" | "bio_complete" | "bio_complete_q"
                )
            })
            .map(|s| s.value)
            .sum::<f64>()
    };
    let nested_misses = |m: &Metrics| {
        m.select("blkobs_bpf_program_recursion_misses_total", &[])
            .filter(|s| s.labels["program"].contains("_nested"))
            .map(|s| s.value)
            .sum::<f64>()
    };
    let before = daemon.scrape();
    let d0: Vec<DiskStats> = devs.iter().map(|d| diskstats(d)).collect();
    let job = |name: &str, dev: &str| {
        vec![
            format!("--name={name}"),
            format!("--filename=/dev/{dev}"),
            "--direct=1".into(),
            "--ioengine=libaio".into(),
            "--iodepth=8".into(),
            "--rw=randread".into(),
            "--bs=4k".into(),
            "--time_based".into(),
            "--runtime=6".into(),
            // One CPU: the timer's interrupts land on the task's completions.
            "--cpus_allowed=0".into(),
        ]
    };
    let args: Vec<String> = [job("task", &task.name), job("timer", &timer.name)].concat();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    fio(&args);
    // null_blk completes everything before fio exits. A completion neither program saw is
    // counted lost when its request struct is reused, or by the reaper after two passes 1 s
    // apart: the scrape after that, and after the diskstats read.
    thread::sleep(Duration::from_millis(3000));
    let d1: Vec<DiskStats> = devs.iter().map(|d| diskstats(d)).collect();
    let after = daemon.scrape();
    let missed = misses(&after) - misses(&before);
    let nested_missed = nested_misses(&after) - nested_misses(&before);
    let taken = after.sum("blkobs_nested_completions_total", &[])
        - before.sum("blkobs_nested_completions_total", &[]);
    let mut report = Vec::new();
    let mut checks = Vec::new();
    for (i, n) in devs.iter().enumerate() {
        let n = n.as_str();
        let reads = after.sum("blkobs_requests_total", &[("device", n), ("op", "read")])
            - before.sum("blkobs_requests_total", &[("device", n), ("op", "read")]);
        let lost = after.sum("blkobs_lost_completions_total", &[("device", n)])
            - before.sum("blkobs_lost_completions_total", &[("device", n)]);
        let k = (d1[i].reads - d0[i].reads) as f64;
        report.push(format!("{n}: reads {reads} (diskstats {k}), lost {lost}"));
        checks.push((n.to_string(), reads, k, lost));
    }
    eprintln!(
        "{}: {}; completion programs skipped {missed} times (their _nested programs {nested_missed}), \
         blkobs_nested_completions_total {taken}",
        std::env::var("BLKOBS_VM_KERNEL").unwrap_or_else(|_| "host".into()),
        report.join("; ")
    );
    let by_program: Vec<String> = after
        .select("blkobs_bpf_program_recursion_misses_total", &[])
        .filter(|s| s.value > 0.0)
        .map(|s| format!("{} {}", s.labels["program"], s.value))
        .collect();
    eprintln!("recursion misses by program (since the daemon started): {by_program:?}");
    let mut lost_total = 0.0;
    for (n, reads, k, lost) in checks {
        assert!(k > 1000.0, "{n}: workload too small ({k} reads)");
        assert_eq!(reads, k, "{n}: reads vs /proc/diskstats ({report:?})");
        lost_total += lost;
    }
    // The interleaving happened: 5.10's __bpf_trace_run has no recursion check (it runs the
    // program nested, and nothing is skipped); 6.1's and 6.12's have (136 skips in 6 s on 6.1
    // under TCG).
    let kernel = std::env::var("BLKOBS_VM_KERNEL").unwrap_or_default();
    if kernel == "5.10" {
        assert_eq!(missed, 0.0, "5.10 skipped a program");
    } else {
        assert!(
            missed > 0.0,
            "no completion was skipped: the test proved nothing ({report:?})"
        );
    }
    // Each skip is taken once (never twice: reads equal diskstats). One is lost only when the
    // _nested program was skipped too, or when a key left behind by a skipped _nested run
    // matches it (observer-ebpf nested.rs): at most the _nested programs' own skips. A lost
    // one is counted in blkobs_lost_completions_total, and nothing else is.
    assert!(
        taken <= missed && missed - taken <= nested_missed,
        "skipped {missed}, taken {taken}, _nested skipped {nested_missed} ({report:?})"
    );
    assert!(
        lost_total <= missed - taken,
        "{lost_total} lost, more than the {} skips not taken ({report:?})",
        missed - taken
    );
}
