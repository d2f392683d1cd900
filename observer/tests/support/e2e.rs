//! The end-to-end checks on one disk, once (`tests/matrix.rs` on loop and null_blk devices,
//! `tests/drivers.rs` on the guests' NVMe, virtio-blk and virtio-scsi disks, `tests/kernel.rs`
//! on loop devices with more load and checks of its own on the returned scrapes): a
//! filesystem with an fsync-heavy load plus fio mixed direct I/O, buffered reads, delete +
//! fstrim, then against the kernel's /proc/diskstats: exact completed requests per op, 0
//! untracked and (in the VMs) 0 lost completions, the filesystem log found and its writes
//! classified, PREFLUSH/FUA kept, queue + device = total per class.

use std::time::Duration;

use super::{
    diskstats, fio, fsync_files, labels, quiesce, ranges, sh, wait_for, Daemon, DiskStats,
    HeldDaemon, LoopDev, Metrics, Mount, NullBlk, Pid1Completions, SharedDaemon,
};

/// The ops of `blkobs_requests_total`: the kernel's, by name.
fn ops() -> impl Iterator<Item = &'static str> {
    observer_common::class::Op::ALL
        .into_iter()
        .map(|op| op.name())
}

/// The ops a filesystem on a plain disk sends, which diskstats counts.
const FS_OPS: [&str; 5] = ["read", "write", "flush", "discard", "write_zeroes"];

/// Files written and fsync'ed by [`end_to_end_on`].
pub const FSYNCS: usize = 60;

/// `mkfs` for `fs` (program and options; the device is appended).
pub fn mkfs(fs: &str) -> Vec<&'static str> {
    match fs {
        "xfs" => vec!["mkfs.xfs", "-q", "-f"],
        // Kernels before 5.15 cannot mount ext4 with orphan_file, which e2fsprogs 1.47 enables.
        "ext4" => vec!["mkfs.ext4", "-q", "-F", "-O", "^orphan_file"],
        other => panic!("no mkfs for {other}"),
    }
}

/// What [`end_to_end_on`] measured: deltas over the run, in requests, and the scrapes and
/// diskstats around it for checks of the caller's own.
pub struct E2e {
    /// Completed reads, writes (+ write_zeroes), discards, flushes counted by the observer
    /// (= the /proc/diskstats deltas, asserted).
    pub reads: f64,
    pub writes: f64,
    pub discards: f64,
    pub flushes: f64,
    /// Writes with `log="true"`, `fua="true"`, `preflush="true"` (cumulative for the disk).
    pub log_writes: f64,
    pub fua: f64,
    pub preflush: f64,
    /// `blkobs_lost_completions_total` of the disk and untracked completions (all disks,
    /// delta): 0 asserted (lost: in the VMs; on the host those in PID 1's context allowed).
    pub lost: f64,
    pub untracked: f64,
    /// The scrapes and the disk's /proc/diskstats before the filesystem was made and after
    /// the reaper's wait.
    pub before: Metrics,
    pub after: Metrics,
    pub d0: DiskStats,
    pub d1: DiskStats,
}

/// The end-to-end run on disk `n` (its whole disk, `/dev/<n>`; `kdev` = `MKDEV(maj, min)` as
/// tracepoints report it) with the daemon already up. Makes filesystem `fs` on it (wiping
/// what was there), runs the load, unmounts, asserts (see the module docs) and returns the
/// numbers. `tag` prefixes every message.
pub fn end_to_end_on(daemon: &Daemon, tag: &str, n: &str, kdev: u32, fs: &str) -> E2e {
    end_to_end_with(daemon, tag, n, kdev, fs, |_| {})
}

/// [`end_to_end_on`] with `more` load in the mounted filesystem's directory, after the
/// fsyncs and random I/O.
pub fn end_to_end_with(
    daemon: &Daemon,
    tag: &str,
    n: &str,
    kdev: u32,
    fs: &str,
    more: impl FnOnce(&std::path::Path),
) -> E2e {
    let tag = format!("{tag} {n}");
    quiesce(n);
    let before = daemon.scrape();
    let d0 = diskstats(n);
    let pid1 = Pid1Completions::start(&[kdev]);

    let mut m = Mount::on(&format!("/dev/{n}"), &mkfs(fs), "");
    // The daemon finds the log within seconds of the mount; fsyncs before that are not "log".
    let log_found = wait_for(Duration::from_secs(15), || {
        (!ranges(daemon, n).is_empty()).then_some(())
    });
    assert!(log_found.is_some(), "{tag} no log range found for {fs}");
    fsyncs_and_randrw(&m.dir);
    more(&m.dir);
    let dir = format!("--directory={}", m.dir.display());
    fio(&[
        "--name=seq",
        &dir,
        "--size=8M",
        "--rw=read",
        "--bs=64k",
        "--ioengine=psync",
        "--invalidate=1",
    ]);
    for e in std::fs::read_dir(&m.dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::remove_file(p).unwrap();
        }
    }
    // Discards only where the disk takes them (a loop device does; a qemu disk may not).
    let discard_max = std::fs::read_to_string(format!("/sys/block/{n}/queue/discard_max_bytes"))
        .unwrap_or_default();
    if discard_max.trim().parse::<u64>().unwrap_or(0) > 0 {
        sh("fstrim", &[m.dir.to_str().unwrap()]);
    }
    m.unmount();
    quiesce(n);
    // Give the reaper its chance to retire anything it (wrongly) thinks is lost: two whole
    // passes after the I/O went idle.
    daemon.wait_passes(3);
    let pid1_events: Vec<_> = pid1
        .stop_events()
        .into_iter()
        .filter(|e| e.kdev == kdev)
        .collect();
    let in_pid1 = pid1_events.len() as f64;
    let d1 = diskstats(n);
    let after = daemon.scrape();

    // Completed requests by op equal the kernel's own accounting exactly.
    let delta = |f: fn(&DiskStats) -> u64| (f(&d1) - f(&d0)) as f64;
    let ours = |op: &str| {
        after.sum("blkobs_requests_total", &[("device", n), ("op", op)])
            - before.sum("blkobs_requests_total", &[("device", n), ("op", op)])
    };
    let (r, w, d, f) = (
        ours("read"),
        ours("write") + ours("write_zeroes"),
        ours("discard"),
        ours("flush"),
    );
    let (kr, kw, kd, kf) = (
        delta(|s| s.reads),
        delta(|s| s.writes),
        delta(|s| s.discards),
        delta(|s| s.flushes),
    );
    let lost = after.since(&before, "blkobs_lost_completions_total", &[("device", n)]);
    let untracked = after.sum("blkobs_untracked_completions_total", &[])
        - before.sum("blkobs_untracked_completions_total", &[]);
    let write_with = |k: &str| {
        after.since(
            &before,
            "blkobs_requests_total",
            &[("device", n), ("op", "write"), (k, "true")],
        )
    };
    let (log_writes, fua, preflush) =
        (write_with("log"), write_with("fua"), write_with("preflush"));
    let stale = after.sum("blkobs_stale_requests_total", &[])
        - before.sum("blkobs_stale_requests_total", &[]);
    eprintln!(
        "{tag} stale={stale} diskstats r={kr} w={kw} d={kd} f={kf} | observer r={r} w={w} d={d} f={f} lost={lost} \
         (completions in PID 1's context: {}) untracked={untracked} log_writes={log_writes} fua={fua} preflush={preflush}",
        pid1.shown(in_pid1)
    );
    assert_eq!(
        (r, w, d, f),
        (kr, kw, kd, kf),
        "{tag} reads, writes, discards, flushes vs /proc/diskstats"
    );
    for op in ops().filter(|op| !FS_OPS.contains(op)) {
        assert_eq!(ours(op), 0.0, "{tag} {op} requests");
    }
    // Bytes by op equal the kernel's sectors × 512 (both add the bytes each completion
    // reports; a lost completion, host only in PID 1's context, adds its request's size).
    let bytes = |op: &str| {
        after.sum("blkobs_bytes_total", &[("device", n), ("op", op)])
            - before.sum("blkobs_bytes_total", &[("device", n), ("op", op)])
    };
    let ours_bytes = (
        bytes("read"),
        bytes("write") + bytes("write_zeroes"),
        bytes("discard"),
    );
    let kernel_bytes = (
        delta(|s| s.read_sectors) * 512.0,
        delta(|s| s.write_sectors) * 512.0,
        delta(|s| s.discard_sectors) * 512.0,
    );
    // A completion our programs never saw (host only: PID 1's context) is counted, once retired
    // as lost, with the size its request had when last seen, which can be short of what it
    // completed (a merge after that): by at most the bytes ftrace saw it complete.
    let pid1_bytes = |letter: char| -> f64 {
        pid1_events
            .iter()
            .filter(|e| rwbs_op(e.rwbs()) == Some(letter))
            .filter_map(|e| e.range())
            .map(|(_, sectors)| sectors as f64 * 512.0)
            .sum::<f64>()
            + 0.0 // an empty sum is -0.0
    };
    let allowed_bytes = (pid1_bytes('R'), pid1_bytes('W'), pid1_bytes('D'));
    eprintln!(
        "{tag} bytes read/written/discarded: observer {ours_bytes:?}, diskstats sectors × 512 \
         {kernel_bytes:?}, completed in PID 1's context {allowed_bytes:?}"
    );
    let within = |ours: f64, kernel: f64, allowed: f64| (ours - kernel).abs() <= allowed;
    assert!(
        within(ours_bytes.0, kernel_bytes.0, allowed_bytes.0)
            && within(ours_bytes.1, kernel_bytes.1, allowed_bytes.1)
            && within(ours_bytes.2, kernel_bytes.2, allowed_bytes.2),
        "{tag} bytes read, written, discarded {ours_bytes:?} vs /proc/diskstats sectors × 512 \
         {kernel_bytes:?}: not equal, nor within the bytes of the completions in PID 1's \
         context {allowed_bytes:?} ({lost} lost)"
    );
    assert!(
        r > 100.0 && w > 100.0 && f >= FSYNCS as f64 / 2.0,
        "{tag} workload too small to prove anything"
    );
    // In the matrix's kernels: none. On the development host's kernel, exactly those whose
    // completion ran on top of a thread of PID 1, for which that kernel runs no BPF program
    // (tests/lost.rs; docs/src/design/how-it-works.md#lost-completions).
    let total: f64 = ops().map(ours).sum();
    let allowed = if std::env::var_os("BLKOBS_VM").is_some() {
        0.0
    } else {
        in_pid1
    };
    assert!(
        lost <= allowed,
        "{tag} {lost} lost completions of {total}, {in_pid1} completions in PID 1's context: {:?}",
        after
            .select("blkobs_lost_completions_total", &[("device", n)])
            .filter(|s| s.value > 0.0)
            .collect::<Vec<_>>()
    );
    assert_eq!(untracked, 0.0, "{tag} untracked completions");
    // Every fsync on a write-back cache makes the filesystem send PREFLUSH and/or FUA writes,
    // which must keep those flags (captured before blk-flush.c strips them).
    assert!(
        fua + preflush >= FSYNCS as f64,
        "{tag} {fua} FUA + {preflush} PREFLUSH writes for {FSYNCS} fsyncs"
    );
    assert!(
        log_writes >= FSYNCS as f64 / 2.0,
        "{tag} only {log_writes} log writes for {FSYNCS} fsyncs"
    );
    check_classes(&after, &tag, n);
    // FUA writes on a device without FUA (loop) run through a flush sequence: their data
    // part completes once inside it, and again, with 0 bytes, after the post-flush. Reading
    // that first completion as final (the bug this matrix found on 6.12) frees the entry and
    // turns every second completion into an untracked one (or, without block_io_start, into a
    // request of its own): `untracked == 0` and the exact counts above are the check that the
    // device stage runs to the end of the post-flush. The mean device times
    // are printed for the record; they are no witness (flushes queue behind other I/O).
    let device_mean = |sel: &[(&str, &str)]| {
        let mut c = sel.to_vec();
        c.push(("stage", "device"));
        after.sum("blkobs_request_latency_seconds_sum", &c)
            / after.sum("blkobs_request_latency_seconds_count", &c)
    };
    eprintln!(
        "{tag} mean device time: FUA writes {:.1} µs, flushes {:.1} µs",
        device_mean(&[("device", n), ("op", "write"), ("fua", "true")]) * 1e6,
        device_mean(&[("device", n), ("op", "flush")]) * 1e6
    );
    drop(m);
    E2e {
        reads: r,
        writes: w,
        discards: d,
        flushes: f,
        log_writes,
        fua,
        preflush,
        lost,
        untracked,
        before,
        after,
        d0,
        d1,
    }
}

/// Per class of disk `n`: queue + device = total (sums) and total-stage samples = requests -
/// lost.
/// The shared part of the end-to-end workload in the filesystem at `dir`: [`FSYNCS`] ×
/// (4 KiB write + fsync), then 2 s of fio 4 KiB direct random reads and writes (libaio, depth 8)
/// on a 16 MiB file.
pub fn fsyncs_and_randrw(dir: &std::path::Path) {
    fsync_files(dir, FSYNCS);
    fio(&[
        "--name=rand",
        &format!("--directory={}", dir.display()),
        "--size=16M",
        "--rw=randrw",
        "--bs=4k",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        "--runtime=2",
        "--time_based",
    ]);
}

pub fn check_classes(after: &Metrics, tag: &str, n: &str) {
    for class in &after.latency_classes(n) {
        let want = labels(class);
        let (q, dv, t) = after.stage_sums(class);
        assert!(
            (q + dv - t).abs() <= 1e-6 * t.max(1.0),
            "{tag} {class:?}: queue {q} + device {dv} != total {t}"
        );
        let samples = after.sum("blkobs_requests_total", &want)
            - after.sum("blkobs_lost_completions_total", &want);
        assert_eq!(
            after.class_stage(class, "total", "count"),
            samples,
            "{tag} {class:?}: total-stage samples vs requests - lost"
        );
    }
}

/// `MKDEV(major, minor)` of a `/sys/block/<disk>/dev` text (`"259:0"`), as tracepoints report it.
pub fn kdev_of(dev: &str) -> u32 {
    let (maj, min) = dev.trim().split_once(':').expect("MAJ:MIN");
    (maj.parse::<u32>().unwrap() << 20) | min.parse::<u32>().unwrap()
}

/// The device under test: a loop device over a file in /dev/shm, or, where loop devices take
/// no I/O scheduler (5.10: loop's tag set is BLK_MQ_F_NO_SCHED), a memory-backed null_blk
/// device with a volatile write cache (it supports FUA, so no post-flush there).
pub enum TestDev {
    Loop(LoopDev),
    Null(NullBlk),
}

impl TestDev {
    pub fn new(size_mib: u64, scheduler: &str) -> TestDev {
        let l = LoopDev::new(size_mib, scheduler);
        if l.sysfs("queue/scheduler")
            .contains(&format!("[{scheduler}]"))
        {
            return TestDev::Loop(l);
        }
        eprintln!(
            "loop devices take no {scheduler} on this kernel ({}): using null_blk",
            l.sysfs("queue/scheduler")
        );
        drop(l);
        TestDev::Null(NullBlk::new(size_mib, scheduler))
    }

    pub fn name(&self) -> &str {
        match self {
            TestDev::Loop(l) => &l.name,
            TestDev::Null(n) => &n.name,
        }
    }

    pub fn sysfs(&self, attr: &str) -> String {
        match self {
            TestDev::Loop(l) => l.sysfs(attr),
            TestDev::Null(n) => n.sysfs(attr),
        }
    }

    /// `MKDEV(major, minor)`, as tracepoints report it.
    pub fn kdev(&self) -> u32 {
        kdev_of(&self.sysfs("dev"))
    }
}

/// The daemons of the end-to-end runs, one per attach mode (each run on a disk of its own).
static TP_BTF: SharedDaemon = SharedDaemon::new();
static RAW_TP: SharedDaemon = SharedDaemon::new();

/// The end-to-end runs' setup (tests/matrix.rs, tests/kernel.rs): the daemon attached as
/// `attach` (`tp_btf`, or `raw_tp` forced with `OBSERVER_ATTACH`; shared by the runs of one
/// mode), its `blkobs_build_info` with `attach` and the `build_info` labels asserted 1; then a
/// [`TestDev`] of `size_mib` with `scheduler`, asserted to have a volatile write cache and that
/// scheduler. `tag` prefixes the messages.
pub fn e2e_setup(
    tag: &str,
    attach: &str,
    build_info: &[(&str, &str)],
    size_mib: u64,
    scheduler: &str,
) -> (HeldDaemon, TestDev) {
    let daemon = if attach == "raw_tp" {
        RAW_TP.get(|| Daemon::start_env(&[], &[("OBSERVER_ATTACH", "raw_tp")]))
    } else {
        TP_BTF.get(|| Daemon::start(&[]))
    };
    let info = daemon.scrape();
    let mut want = vec![("attach", attach)];
    want.extend_from_slice(build_info);
    assert_eq!(
        info.sum("blkobs_build_info", &want),
        1.0,
        "{tag} build_info: {:?}",
        info.select("blkobs_build_info", &[]).collect::<Vec<_>>()
    );
    let dev = TestDev::new(size_mib, scheduler);
    let named = format!("{tag} {}", dev.name());
    assert_eq!(
        dev.sysfs("queue/write_cache"),
        "write back",
        "{named} the device has a volatile write cache"
    );
    assert!(
        dev.sysfs("queue/scheduler")
            .contains(&format!("[{scheduler}]")),
        "{named} scheduler"
    );
    (daemon, dev)
}

/// The data direction of a `block_rq_complete` event's rwbs (blk_fill_rwbs: 'F' first for a
/// PREFLUSH, then 'D' discard, 'W' write, 'R' read, 'N' none): `'D'`, `'W'` or `'R'`, or `None`
/// for a flush without data.
fn rwbs_op(rwbs: &str) -> Option<char> {
    rwbs.chars().find(|c| matches!(c, 'D' | 'W' | 'R'))
}
