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

use std::thread;

use support::*;

/// One daemon for every test of this file (each test on its own disk).
static DAEMON: SharedDaemon = SharedDaemon::new();

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
    let daemon = DAEMON.get(|| Daemon::start(&[]));
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
    daemon.wait_settled(&[&raw.name, &fsdev.name]);
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
        let lost = after.sum("blkobs_lost_completions_total", &[("device", n)])
            - before.sum("blkobs_lost_completions_total", &[("device", n)]);
        let delta = |family: &str| {
            after.sum(family, &[("device", n)]) - before.sum(family, &[("device", n)])
        };
        let context = format!(
            "lost {lost}, untracked {}, requeues {}, errors {}; daemon-wide: nested {}, stale {}, \
             recursion misses {:?}",
            delta("blkobs_untracked_completions_total"),
            delta("blkobs_requeues_total"),
            delta("blkobs_request_errors_total"),
            after.sum("blkobs_nested_completions_total", &[])
                - before.sum("blkobs_nested_completions_total", &[]),
            after.sum("blkobs_stale_requests_total", &[])
                - before.sum("blkobs_stale_requests_total", &[]),
            after
                .select("blkobs_bpf_program_recursion_misses_total", &[])
                .filter(|s| s.value > 0.0)
                .map(|s| format!("{} {}", s.labels["program"], s.value))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            (ours("read"), ours("write"), ours("flush")),
            (
                (k1.reads - k0.reads) as f64,
                (k1.writes - k0.writes) as f64,
                (k1.flushes - k0.flushes) as f64
            ),
            "{n}: reads, writes, flushes vs /proc/diskstats ({context})"
        );
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
    let (task, timer) = NullBlk::task_and_timer(256);
    let daemon = DAEMON.get(|| Daemon::start(&[]));
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
    // One CPU: the timer's interrupts land on the task's completions.
    one_cpu_reads(&[("task", &task.name), ("timer", &timer.name)], 6);
    // null_blk completes everything before fio exits. A completion neither program saw is
    // counted lost when its request struct is reused, or by the reaper after two passes 1 s
    // apart: the scrape after that, and after the diskstats read.
    daemon.wait_settled(&[task.name.as_str(), timer.name.as_str()]);
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
    let (mut lost_total, mut extra_reads) = (0.0, 0.0);
    for (n, reads, k, lost) in checks {
        assert!(k > 1000.0, "{n}: workload too small ({k} reads)");
        assert!(reads >= k, "{n}: reads vs /proc/diskstats ({report:?})");
        lost_total += lost;
        extra_reads += reads - k;
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
    // Each skip is taken once. An end is also taken, a second time, when 8 keys are left above
    // its own in the pair's stack while it waits between its two programs (observer-ebpf
    // nested.rs; with the slot table before 2026-12-05: when interrupts between its programs
    // wrote another key into its slot, 1 in 4,096, and more than the ring's 8 keys; before the
    // ring, any one such interrupt, seen once on 6.1 as reads 29,100 vs 29,099 and once as
    // writes 820 vs 819 on the XFS disk of the test above): its request has no entry any more, so that second run counts an untracked completion
    // (with block_io_start, 6.5+) or, without it, one read more than diskstats (its request
    // is taken for one first seen at its end): so reads are at least diskstats', and every read
    // more is an end taken twice. One is lost only when the _nested program was skipped too,
    // or when a key left behind by a skipped _nested run matches it: at most the _nested
    // programs' own skips. A lost one is counted in blkobs_lost_completions_total, and nothing
    // else is.
    let untracked = after.sum("blkobs_untracked_completions_total", &[])
        - before.sum("blkobs_untracked_completions_total", &[]);
    let taken_once = taken - untracked - extra_reads;
    eprintln!(
        "taken {taken}, of which twice {} (untracked {untracked}, reads over diskstats \
         {extra_reads})",
        untracked + extra_reads
    );
    assert!(
        untracked >= 0.0
            && taken_once >= 0.0
            && taken_once <= missed
            && missed - taken_once <= nested_missed,
        "skipped {missed}, taken {taken} ({untracked} of them twice: untracked), _nested skipped \
         {nested_missed} ({report:?})"
    );
    assert!(
        lost_total <= missed - taken_once,
        "{lost_total} lost, more than the {} skips not taken ({report:?})",
        missed - taken_once
    );
}

/// A dm-linear disk over two null_blk disks, torn down on drop.
struct Linear(String);

impl Drop for Linear {
    fn drop(&mut self) {
        let _ = std::process::Command::new("dmsetup")
            .args(["remove", "--retry", &self.0])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The kernel name (`dm-3`) of the dm disk named `name`.
fn dm_kernel_name(name: &str) -> String {
    std::fs::read_dir("/sys/block")
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|d| {
            std::fs::read_to_string(format!("/sys/block/{d}/dm/name"))
                .is_ok_and(|n| n.trim() == name)
        })
        .unwrap_or_else(|| panic!("no /sys/block/dm-*/dm/name is {name}"))
}

/// Two completions counting into one per-CPU value at once are both counted (observer-ebpf
/// store.rs `add`: every count is one atomic add). A dm-linear disk maps its first half to a
/// null_blk disk that completes in the submitting task (`irqmode=0`) and its second half to one
/// that completes in an hrtimer interrupt (`irqmode=2`); random reads from one CPU make the
/// interrupt's dm bio ends land inside a `bio_complete` run for the other half's, and both
/// count into the dm disk's (device, read) value on that CPU. Every dm read is counted as
/// /proc/diskstats counts it, and every counted read is in the total-stage histogram. On 6.x
/// the kernel skips the interrupted program and `bio_complete_nested` counts the end (its
/// recursion misses prove the interleaving happened); 5.10 runs `bio_complete` itself nested.
#[test]
#[ignore = "needs null_blk: runs in the kernel-matrix VMs"]
fn nested_ends_of_one_disk_are_all_counted() {
    if !require_root_and(&["fio", "dmsetup"]) {
        return;
    }
    let size_mib = 256;
    let (task, timer) = NullBlk::task_and_timer(size_mib);
    let half = size_mib * 2048;
    let name = unique("blkobs-nest");
    let table = format!(
        "0 {half} linear /dev/{} 0\n{half} {half} linear /dev/{} 0",
        task.name, timer.name
    );
    sh("dmsetup", &["create", &name, "--table", &table]);
    let _linear = Linear(name.clone());
    let dm = dm_kernel_name(&name);
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    quiesce(&dm);
    // Recursion misses of the programs whose base name (without `_raw`) is in `names`.
    let misses_of = |m: &Metrics, names: &[&str]| {
        m.select("blkobs_bpf_program_recursion_misses_total", &[])
            .filter(|s| names.contains(&s.labels["program"].trim_end_matches("_raw")))
            .map(|s| s.value)
            .sum::<f64>()
    };
    let bio_misses = |m: &Metrics| misses_of(m, &["bio_complete", "bio_complete_q"]);
    // Both pairs: dm's bios and the legs' requests.
    let firsts = [
        "bio_complete",
        "bio_complete_q",
        "rq_complete",
        "rq_complete_q",
    ];
    let seconds = [
        "bio_complete_nested",
        "bio_complete_nested_q",
        "rq_complete_nested",
        "rq_complete_nested_q",
    ];
    let legs = [task.name.as_str(), timer.name.as_str()];
    let leg_reads = |m: &Metrics| {
        legs.iter()
            .map(|d| m.sum("blkobs_requests_total", &[("device", d), ("op", "read")]))
            .sum::<f64>()
    };
    let all_lost = |m: &Metrics| {
        [dm.as_str(), legs[0], legs[1]]
            .iter()
            .map(|d| m.sum("blkobs_lost_completions_total", &[("device", d)]))
            .sum::<f64>()
    };
    let ours = |m: &Metrics| {
        let read = [("device", dm.as_str()), ("op", "read")];
        let total = [("device", dm.as_str()), ("op", "read"), ("stage", "total")];
        (
            m.sum("blkobs_requests_total", &read),
            m.sum("blkobs_lost_completions_total", &read),
            m.sum("blkobs_request_latency_seconds_count", &total),
        )
    };
    let before = daemon.scrape();
    let k0 = diskstats(&dm);
    let legs0: u64 = legs.iter().map(|d| diskstats(d).reads).sum();
    // One CPU: the timer half's interrupts land on the task half's ends.
    one_cpu_reads(&[("j0", &dm), ("j1", &dm)], 6);
    // As in the test above: the legs' ends neither program saw are counted lost by the reaper.
    daemon.wait_settled(&legs);
    let k1 = diskstats(&dm);
    let legs1: u64 = legs.iter().map(|d| diskstats(d).reads).sum();
    let after = daemon.scrape();
    let (r0, l0, h0) = ours(&before);
    let (r1, l1, h1) = ours(&after);
    let (reads, lost, in_hist) = (r1 - r0, l1 - l0, h1 - h0);
    let k = (k1.reads - k0.reads) as f64;
    let misses = bio_misses(&after) - bio_misses(&before);
    let kernel = std::env::var("BLKOBS_VM_KERNEL").unwrap_or_else(|_| "host".into());
    eprintln!(
        "{kernel}: {dm} reads {reads} (diskstats {k}), {lost} lost, {in_hist} in the total \
         histogram; bio_complete skipped {misses} times"
    );
    assert!(k > 1000.0, "workload too small ({k} reads)");
    assert_eq!(reads, k, "{dm}: reads vs /proc/diskstats");
    assert_eq!(in_hist + lost, reads, "{dm}: reads in the total histogram");
    if kernel != "5.10" {
        assert!(
            misses > 0.0,
            "bio_complete was never skipped: no two ends of {dm} interleaved, the test proved nothing"
        );
    }
    // Every end a first program was skipped for is taken by its second program, unless that
    // was skipped too (observer-ebpf nested.rs), as in the test above, over both pairs. An end
    // taken twice shows as an untracked completion or a leg read over diskstats: not once.
    let delta = |f: &dyn Fn(&Metrics) -> f64| f(&after) - f(&before);
    let skipped = delta(&|m| misses_of(m, &firsts));
    let nested_skipped = delta(&|m| misses_of(m, &seconds));
    let taken = delta(&|m| m.sum("blkobs_nested_completions_total", &[]));
    let untracked = delta(&|m| m.sum("blkobs_untracked_completions_total", &[]));
    let extra_leg_reads = delta(&leg_reads) - (legs1 - legs0) as f64;
    let taken_once = taken - untracked - extra_leg_reads;
    let lost_all = delta(&all_lost);
    eprintln!(
        "{kernel}: first programs skipped {skipped} (second programs {nested_skipped}), taken \
         {taken} (untracked {untracked}, leg reads over diskstats {extra_leg_reads}), lost \
         {lost_all} on {dm} and its legs"
    );
    assert!(
        extra_leg_reads >= 0.0
            && taken_once >= 0.0
            && taken_once <= skipped
            && skipped - taken_once <= nested_skipped,
        "skipped {skipped}, taken {taken} ({untracked} untracked, {extra_leg_reads} leg reads \
         over diskstats), second programs skipped {nested_skipped}"
    );
    assert!(
        lost_all <= skipped - taken_once,
        "{lost_all} lost, more than the {} skips not taken",
        skipped - taken_once
    );
}
