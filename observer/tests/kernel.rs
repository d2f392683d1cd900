//! Real eBPF, real devices: the observer against /proc/diskstats on loop devices with XFS.
//!
//! Needs root and a kernel with BTF. Under CI (`CI` truthy) a test that cannot run fails.

mod support;

use std::{path::Path, process::Command, time::Duration};

use support::*;

/// More load than the matrix's (`support::end_to_end_on`): fio random mixed I/O on 48 MiB,
/// and sequential 4 KiB direct writes submitted 16 at a time (one plug), whose adjacent bios
/// merge into one request (block/blk-merge.c, plug merges), so the merge counts below are not
/// 0 = 0.
fn more_load(dir: &Path) {
    let dir = format!("--directory={}", dir.display());
    fio(&[
        "--name=rand48",
        &dir,
        "--size=48M",
        "--rw=randrw",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        "--runtime=3",
        "--time_based",
    ]);
    fio(&[
        &["--name=merge", &dir, "--size=8M"][..],
        &FIO_BATCHED_WRITES,
    ]
    .concat());
}

/// The matrix's end-to-end check (requests and bytes per op = diskstats, lost only in PID 1's
/// context, 0 untracked, log writes, PREFLUSH/FUA, queue + device = total per class) on an XFS
/// loop device with one scheduler, plus: merges = diskstats' merged counts, the flush request's
/// device-stage samples, no absurd latency, the read-time witness and promtool.
fn end_to_end(scheduler: &str, mode: &str) {
    let tag = format!("[{scheduler} {mode}]");
    let (daemon, dev) = e2e_setup(&tag, mode, &[], 700, scheduler);
    let e = end_to_end_with(&daemon, &tag, dev.name(), dev.kdev(), "xfs", more_load);
    let (before, after, n) = (&e.before, &e.after, dev.name());
    let delta = |f: fn(&DiskStats) -> u64| (f(&e.d1) - f(&e.d0)) as f64;
    assert!(
        e.reads > 1000.0 && e.writes > 1000.0 && e.discards > 0.0,
        "{tag} workload too small to prove anything"
    );

    // 1. Merges equal the kernel's merged counts.
    let merges = |op: &str| {
        after.sum("blkobs_merges_total", &[("device", n), ("op", op)])
            - before.sum("blkobs_merges_total", &[("device", n), ("op", op)])
    };
    eprintln!(
        "{tag} merges: diskstats r={} w={} | observer r={} w={}",
        delta(|s| s.reads_merged),
        delta(|s| s.writes_merged),
        merges("read"),
        merges("write") + merges("write_zeroes")
    );
    assert!(
        delta(|s| s.writes_merged) > 0.0,
        "the workload made no write merges"
    );
    assert_eq!(merges("read"), delta(|s| s.reads_merged), "read merges");
    assert_eq!(
        merges("write") + merges("write_zeroes"),
        delta(|s| s.writes_merged),
        "write merges"
    );

    // 2. The internal flush request has a device stage, and no queue stage: one device-stage
    // sample per flush the kernel counted (diskstats), less the flushes reported lost.
    let flush = |what: &str, stage: Option<&str>| {
        let mut sel = vec![("device", n), ("op", "flush")];
        if let Some(st) = stage {
            sel.push(("stage", st));
        }
        after.sum(what, &sel) - before.sum(what, &sel)
    };
    let flush_lost = flush("blkobs_lost_completions_total", None);
    assert_eq!(
        flush("blkobs_request_latency_seconds_count", Some("device")),
        delta(|s| s.flushes) - flush_lost,
        "flush device-stage samples vs diskstats flushes ({flush_lost} lost)"
    );
    assert_eq!(
        after.sum(
            "blkobs_request_latency_seconds_count",
            &[("device", n), ("op", "flush"), ("stage", "queue")]
        ),
        0.0
    );

    // 3. Several classes, none with an absurd latency: nothing above 67 s (the last finite
    // bucket) on a RAM-backed loop device.
    let classes = after.latency_classes(n);
    assert!(
        classes.len() >= 4,
        "expected several classes, got {classes:?}"
    );
    for class in &classes {
        let mut w = labels(class);
        w.push(("stage", "total"));
        w.push(("le", "67.108864"));
        assert_eq!(
            after.sum("blkobs_request_latency_seconds_bucket", &w),
            after.class_stage(class, "total", "count"),
            "{class:?}: absurd latency"
        );
    }
    let q_reads = after.sum(
        "blkobs_request_latency_seconds_count",
        &[("device", n), ("op", "read"), ("stage", "queue")],
    );
    assert!(q_reads > 0.0);

    // 4. Time witness: diskstats' time spent on reads vs our total-stage sums. The kernel
    //    starts its clock at request allocation; our total starts earlier, when the first bio
    //    entered (block_bio_queue), which makes ours more (measured +0.4 % to +1.7 %). But the
    //    kernel's clock is read once per plug (block/blk.h blk_time_get_ns caches it in the
    //    submitting task's plug until it sleeps or is preempted; block/blk-mq.c
    //    blk_mq_rq_time_init): every request allocated later in the same plug starts at the
    //    plug's first time, which makes diskstats more. On a loaded 2-core CI machine that won
    //    once (ours -2.2 %), so the witness is held to -5 % .. +5 %.
    let our_read_s = after.sum(
        "blkobs_request_latency_seconds_sum",
        &[("device", n), ("op", "read"), ("stage", "total")],
    ) - before.sum(
        "blkobs_request_latency_seconds_sum",
        &[("device", n), ("op", "read"), ("stage", "total")],
    );
    let ks_read_s = delta(|s| s.read_ms) / 1000.0;
    eprintln!("{tag} read time: diskstats {ks_read_s:.3} s, observer {our_read_s:.3} s");
    assert!(
        our_read_s <= ks_read_s * 1.05 + 0.02 && our_read_s >= ks_read_s * 0.95 - 0.01,
        "read time {our_read_s} s vs diskstats {ks_read_s} s"
    );

    // 5. The exposition passes promtool.
    promtool_check(&daemon.metrics_text());
}

fn promtool_check(text: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn scheduler_none_end_to_end() {
    if require_root("scheduler_none_end_to_end") {
        end_to_end("none", "tp_btf");
    }
}

#[test]
fn scheduler_mq_deadline_end_to_end() {
    if require_root("scheduler_mq_deadline_end_to_end") {
        end_to_end("mq-deadline", "tp_btf");
    }
}

/// The raw_tp fallback (bpf_probe_read_kernel instead of BTF-checked loads) counts the same.
#[test]
fn raw_tp_fallback_end_to_end() {
    if require_root("raw_tp_fallback_end_to_end") {
        end_to_end("mq-deadline", "raw_tp");
    }
}

/// A partition's I/O is attributed to its whole disk; a device created after the daemon
/// started shows up without a restart.
#[test]
fn partition_io_counts_for_the_disk() {
    if !require_root("partition_io_counts_for_the_disk") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dev = LoopDev::new(64, "none");
    assert!(sfdisk(
        Path::new(&dev.path),
        "label: dos\nstart=2048, size=32768\n"
    ));
    sh("partx", &["-a", &dev.path]);
    // The partition goes before the loop device, also when an assertion fails (a partition
    // left on a detached loop device breaks the next test that gets its number).
    struct Parts<'a>(&'a str);
    impl Drop for Parts<'_> {
        fn drop(&mut self) {
            let _ = Command::new("partx").args(["-d", self.0]).status();
        }
    }
    let _parts = Parts(&dev.path);
    let part = format!("{}p1", dev.path);
    assert!(Path::new(&part).exists(), "{part} missing");
    quiesce(&dev.name);
    // The disk has its slot (the daemon indexes new disks every second): its own requests
    // are then never unindexed.
    assert!(
        wait_for(Duration::from_secs(10), || {
            let v = json(&daemon, "/devices");
            v["devices"]
                .as_array()?
                .iter()
                .any(|d| d["device"] == dev.name.as_str() && d["tracking"] == "full")
                .then_some(())
        })
        .is_some(),
        "{} never got a slot",
        dev.name
    );
    let m0 = daemon.scrape();
    let w0 = m0.sum(
        "blkobs_requests_total",
        &[("device", &dev.name), ("op", "write")],
    );
    let d0 = diskstats(&dev.name);
    sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={part}"),
            "bs=4k",
            "count=100",
            "oflag=direct",
            "status=none",
        ],
    );
    quiesce(&dev.name);
    let m = daemon.scrape();
    let w1 = m.sum(
        "blkobs_requests_total",
        &[("device", &dev.name), ("op", "write")],
    );
    assert_eq!(w1 - w0, (diskstats(&dev.name).writes - d0.writes) as f64);
    assert!(w1 - w0 >= 100.0);
    // A bio sent to a partition is remapped to its disk (block/blk-core.c blk_partition_remap
    // traces it): no request of an unindexed disk for that.
    assert_eq!(
        m.sum("blkobs_unindexed_requests_total", &[]),
        m0.sum("blkobs_unindexed_requests_total", &[]),
        "partition bios counted as unindexed requests"
    );
    assert_eq!(
        m.select(
            "blkobs_requests_total",
            &[("device", &format!("{}p1", dev.name))]
        )
        .count(),
        0
    );
}

/// Requests already in flight when the daemon starts (or entering while it attaches its
/// programs one by one) are counted as untracked on their device and never get a latency.
/// Witness /proc/diskstats, read before the daemon starts and once it is up: an untracked
/// request completed during start-up or was among the at most 64 fio keeps in flight when it
/// was up, and every completion after start-up is either a request or untracked.
/// A write held at a FUSE-backed device across the start is exactly one untracked completion.
#[test]
fn inflight_at_start_is_untracked() {
    if !require_root("inflight_at_start_is_untracked") {
        return;
    }
    const DEPTH: u64 = 64;
    let dev = LoopDev::new(256, "mq-deadline");
    let mut bg = Command::new("fio")
        .args([
            "--name=bg",
            &format!("--filename={}", dev.path),
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            &format!("--iodepth={DEPTH}"),
            "--runtime=6",
            "--time_based",
            "--output=/dev/null",
        ])
        .spawn()
        .unwrap();
    // And one write held at the device (the FUSE file under a loop device) across the start:
    // dispatched before the programs were attached, completed after — exactly one untracked
    // completion, whatever the timing. (fio's requests in flight at the start may all complete
    // before block_rq_complete is attached, the programs being attached one by one: 0
    // untracked there is possible, and was seen.)
    let slow = SlowDisk::new(16, "none");
    quiesce(&slow.name);
    let mut held = slow.hold_write(|| {
        Command::new("dd")
            .args([
                "if=/dev/zero",
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .arg(format!("of={}", slow.path))
            .spawn()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(1500));
    let before_start = diskstats(&dev.name);
    let daemon = Daemon::start(&[]);
    let after_start = diskstats(&dev.name);
    slow.knobs().release();
    assert!(held.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(1000));
    assert!(bg.wait().unwrap().success());
    // A fixed amount of I/O with the daemon up, so the tracked side is never too small to
    // prove anything, however long the start took (fio's 6 s above may all pass during it on a
    // loaded machine: `count > 1000` failed once so).
    const AFTER: u64 = 5120;
    fio(&[
        "--name=after",
        &format!("--filename={}", dev.path),
        "--rw=randread",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=16",
        &format!("--io_size={}", AFTER * 4096),
    ]);
    quiesce(&dev.name);
    quiesce(&slow.name);
    let end = diskstats(&dev.name);
    let m = daemon.scrape();
    let n = &dev.name;
    let untracked = m.sum("blkobs_untracked_completions_total", &[("device", n)]);
    let requests = m.sum("blkobs_requests_total", &[("device", n)]);
    let reads = |d: &DiskStats| (d.reads + d.writes) as f64;
    eprintln!(
        "{n}: {untracked} untracked, {requests} requests; diskstats completions since before \
         start {}, since up {}",
        reads(&end) - reads(&before_start),
        reads(&end) - reads(&after_start)
    );
    let during_start = reads(&after_start) - reads(&before_start);
    let held_untracked = m.sum(
        "blkobs_untracked_completions_total",
        &[("device", &slow.name)],
    );
    assert_eq!(
        held_untracked, 1.0,
        "the write held across the start on {}",
        slow.name
    );
    assert!(
        untracked <= during_start + DEPTH as f64,
        "{untracked} untracked completions on {n}: {during_start} completed during start-up, \
         at most {DEPTH} in flight after"
    );
    assert!(
        requests + untracked <= reads(&end) - reads(&before_start)
            && requests + untracked >= reads(&end) - reads(&after_start),
        "requests + untracked outside the diskstats bounds"
    );
    assert_eq!(m.sum("blkobs_clock_anomalies_total", &[]), 0.0);
    let count = m.sum(
        "blkobs_request_latency_seconds_count",
        &[("device", n), ("stage", "total")],
    );
    let fast = m.sum(
        "blkobs_request_latency_seconds_bucket",
        &[("device", n), ("stage", "total"), ("le", "1.048576")],
    );
    let lost = m.sum("blkobs_lost_completions_total", &[("device", n)]);
    assert!(
        count + lost >= AFTER as f64,
        "{count} latencies and {lost} lost for at least the {AFTER} reads after start-up"
    );
    assert_eq!(
        count,
        requests - lost,
        "one total-stage sample per tracked request whose completion was seen"
    );
    assert_eq!(
        fast, count,
        "a request took over 1 s on a RAM-backed loop device: bogus latency"
    );
}

#[test]
fn bad_config_and_flags_exit_2_naming_the_key() {
    let bin = env!("CARGO_BIN_EXE_observer");
    let out = Command::new(bin)
        .args(["--listen", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));

    let dir = std::env::temp_dir().join(format!("blkobs-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("bad.toml");
    std::fs::write(&cfg, "[histogram]\nbuckets = [0.5, 0.1]\n").unwrap();
    let out = Command::new(bin)
        .args(["--config", cfg.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("histogram.buckets"));
    std::fs::write(&cfg, "listen = \"127.0.0.1:1\"\nunknown_key = 1\n").unwrap();
    let out = Command::new(bin)
        .args(["--config", cfg.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown_key"));
    std::fs::write(&cfg, "[devices]\ninclude = [\"loop*\"]\n").unwrap();
    let out = Command::new(bin)
        .args(["--config", cfg.to_str().unwrap(), "--check-config"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Without CAP_BPF/CAP_PERFMON the daemon says what is missing, exits non-zero, and leaves
/// nothing attached.
#[test]
fn unprivileged_start_fails_cleanly() {
    if !require_root("unprivileged_start_fails_cleanly") {
        return;
    }
    let links = || {
        sh("bpftool", &["link", "show"])
            .lines()
            .filter(|l| l.contains("prog"))
            .count()
    };
    let before = links();
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            env!("CARGO_BIN_EXE_observer"),
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_PERFMON"),
        "{err}"
    );
    assert_eq!(links(), before);
}

/// A disk that goes away (a loop device detached and removed) keeps its series for
/// `[devices] forget_after` (here 3 s), so scrapes see its final counts, then they leave
/// `/metrics`; the kernel entries are deleted, so a disk created later with the same device
/// number counts from zero (witness: its own /proc/diskstats delta). The loop devices are made
/// at a free high index (LOOP_CTL_ADD), which nobody else reuses meanwhile.
#[test]
fn gone_disks_leave_metrics_after_forget_after() {
    if !require_root("gone_disks_leave_metrics_after_forget_after") {
        return;
    }
    let dir = TempDir::new("blkobs-gone");
    let cfg = dir.join("observer.toml");
    std::fs::write(&cfg, "[devices]\nforget_after = \"3s\"\n").unwrap();
    let file = dir.join("disk.img");
    std::fs::File::create(&file)
        .unwrap()
        .set_len(64 << 20)
        .unwrap();
    let daemon = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let (index, dev) = (1700..1740)
        .find_map(|i| LoopDev::at_index(i, file.clone(), "none").map(|d| (i, d)))
        .expect("no free loop index in 1700..1740");
    let name = dev.name.clone();
    let requests = |d: &Daemon| {
        let m = d.scrape();
        (m.select("blkobs_requests_total", &[("device", &name)])
            .count()
            > 0)
        .then(|| m.sum("blkobs_requests_total", &[("device", &name)]))
    };
    dev.write_direct(0, 16);
    quiesce(&name);
    let total = diskstats(&name);
    let first = wait_for(Duration::from_secs(5), || {
        requests(&daemon).filter(|n| *n >= 16.0)
    })
    .expect("the writes in /metrics");
    let ops = |d: &DiskStats| d.reads + d.writes + d.discards + d.flushes;
    assert_eq!(
        first,
        ops(&total) as f64,
        "{name}: requests vs /proc/diskstats"
    );
    drop(dev);
    let removed = std::time::Instant::now();
    assert!(
        !Path::new(&format!("/sys/block/{name}")).exists(),
        "{name} still exists"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        requests(&daemon),
        Some(first),
        "{name}: final counts still exported 1.5 s after it went away"
    );
    let gone = wait_for(Duration::from_secs(15), || {
        requests(&daemon).is_none().then(|| removed.elapsed())
    })
    .expect("series of the removed disk never left /metrics");
    eprintln!("{name}: {first} requests, series removed {gone:?} after the disk went away");
    assert!(
        gone >= Duration::from_millis(2900) && gone <= Duration::from_secs(6),
        "removed after {gone:?}: forget_after is 3 s, checked every second"
    );

    // The same device number again: counts from zero.
    let again = LoopDev::at_index(index, file.clone(), "none").expect("re-create the loop device");
    let d0 = diskstats(&again.name);
    again.write_direct(0, 4);
    quiesce(&again.name);
    let d1 = diskstats(&again.name);
    let n = wait_for(Duration::from_secs(5), || requests(&daemon)).expect("new disk listed");
    assert_eq!(
        n,
        (ops(&d1) - ops(&d0)) as f64,
        "{name} re-created: counts from zero, as its diskstats since it was created"
    );
}

/// `blkobs_disk_info` of a loop device made after the daemon started: its queue as util-linux's
/// lsblk reads it (ROTA, LOG-SEC, PHY-SEC, SCHED), no drive identity (loop has no `device/`),
/// and a scheduler and write cache changed while it runs in the next scrapes. The qemu drives'
/// model, serial, revision and wwid: tests/drivers.rs in the kernel matrix.
#[test]
fn disk_info_follows_the_queue() {
    if !require_root("disk_info_follows_the_queue") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dev = LoopDev::new(16, "mq-deadline");
    let info = || -> Option<std::collections::BTreeMap<String, String>> {
        let m = Metrics::parse(&daemon.metrics_text());
        let want = [("device", dev.name.as_str())];
        let s: Vec<_> = m.select("blkobs_disk_info", &want).collect();
        assert!(s.len() <= 1, "{} series of {}", s.len(), dev.name);
        s.first().map(|s| s.labels.clone())
    };
    let lsblk = || {
        sh(
            "lsblk",
            &[
                "-d",
                "-n",
                "-r",
                "-o",
                "ROTA,LOG-SEC,PHY-SEC,SCHED",
                &dev.path,
            ],
        )
    };
    let ours = |l: &std::collections::BTreeMap<String, String>| {
        [
            "rotational",
            "logical_block_size",
            "physical_block_size",
            "scheduler",
        ]
        .map(|k| l[k].clone())
        .join(" ")
    };
    // LoopDev sets the scheduler just after the disk appears: the first scrape may show the
    // queue before that write, a later one must show it as lsblk does.
    let mut last = (String::new(), None);
    let same = wait_every(Duration::from_millis(200), Duration::from_secs(5), || {
        let want = lsblk().trim().to_string();
        let l = info();
        let hit = l.as_ref().is_some_and(|l| ours(l) == want);
        last = (want, l);
        hit
    });
    eprintln!("{}: lsblk {:?}, ours {:?}", dev.name, last.0, last.1);
    assert!(
        same,
        "blkobs_disk_info of {} not lsblk's {:?} within 5 s: {:?}",
        dev.name, last.0, last.1
    );
    let l = last.1.unwrap();
    assert_eq!(l["scheduler"], "mq-deadline");
    for k in ["model", "serial", "wwid", "revision"] {
        assert_eq!(l[k], "", "{k} of a loop device");
    }
    assert_eq!(l["fua"], dev.sysfs("queue/fua"));
    let wc = if dev.sysfs("queue/write_cache") == "write back" {
        "write through"
    } else {
        "write back"
    };
    // (every LoopDev sets its own scheduler when made: nothing to restore)
    std::fs::write(format!("/sys/block/{}/queue/scheduler", dev.name), "none").unwrap();
    dev.set_queue("write_cache", wc);
    assert!(
        wait_every(Duration::from_millis(200), Duration::from_secs(5), || {
            let l = info().unwrap();
            l["scheduler"] == "none" && l["write_cache"] == wc
        }),
        "scheduler none and write cache {wc:?} not in blkobs_disk_info: {:?}",
        info()
    );
}
