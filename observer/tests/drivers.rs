//! Real block drivers in the kernel matrix: the qemu disks every `cargo xtask vmtest` guest gets
//! (xtask/src/vm_boot.rs, `GuestDisks`), found by serial. Guest-only: `#[ignore]`d on the host
//! (its disks are its own), run in the VMs with `--include-ignored`; there a missing disk
//! skips, or fails under `CI` (tests/support/skip.rs).
//!
//! - The matrix's end-to-end checks (`support::end_to_end_on`: per-op requests = the disk's
//!   /proc/diskstats deltas, 0 lost, 0 untracked, log writes labelled, PREFLUSH and FUA
//!   classes) on NVMe (XFS, scheduler `none`; native FUA), virtio-blk (ext4, `mq-deadline`)
//!   and virtio-scsi (XFS, `mq-deadline`).
//! - Polled I/O on NVMe (`nvme.poll_queues=1`): fio io_uring `hipri` direct I/O, completed by
//!   polling in the submitter's context; requests = diskstats, and the poll queue's own
//!   `queued` count (debugfs) took them.
//! - Requeues on a 16-entry virtio-blk queue: `blkobs_requeues_total` = ftrace's
//!   `block_rq_requeue` count on the disk, > 0; requests = diskstats.
//! - Passthrough requests (virtio-blk's GET_ID, one per read of `serial`): each completes as
//!   a request of op `other`, = ftrace's `block_rq_complete`, nothing lost or left in flight.
//! - NVMe multipath: the hidden path disks `nvmeXcYnZ` under the bio-based head have names,
//!   slots and series of their own; the active path's requests = its diskstats, nothing
//!   unindexed. The head's own (bio-based) counts = fio's completed I/Os, and = its
//!   diskstats where the kernel accounts the head (6.12), nothing lost or left in flight.
//!
//! Workloads are small: the guests run under TCG.

mod support;

use std::{
    path::Path,
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use support::*;

/// One daemon for every test of this file: under TCG each start (loading and verifying the
/// programs) takes 15–20 s, six starts most of the file's time budget. Each test works on its
/// own disk with deltas between its own scrapes; holding the lock serializes the tests.
/// Stopped (SIGTERM, as `Daemon`'s drop) when the test process exits.
static DAEMON: Mutex<Option<Daemon>> = Mutex::new(None);

extern "C" fn stop_shared_daemon() {
    let mut g = DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    drop(g.take());
}

/// The [`DAEMON`], started on first use, held for the calling test.
struct Shared(MutexGuard<'static, Option<Daemon>>);

impl std::ops::Deref for Shared {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        self.0.as_ref().expect("started")
    }
}

fn shared_daemon() -> Shared {
    let mut g = DAEMON.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        *g = Some(Daemon::start(&[]));
        unsafe { libc::atexit(stop_shared_daemon) };
    }
    Shared(g)
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string()
}

/// The visible disk with `serial`, its scheduler set to `scheduler` (restored on drop) and
/// its head wiped; `None` after a skip (a failure under CI).
fn setup(
    test: &str,
    serial: &str,
    scheduler: Option<&str>,
) -> Option<(GuestDisk, Option<QueueAttr>)> {
    if !require_root(test) {
        return None;
    }
    let d = guest_disk(serial)?;
    let sched = scheduler.map(|s| QueueAttr::set(&d.name, "scheduler", s));
    if let Some(s) = scheduler {
        assert!(
            d.sysfs("queue/scheduler").contains(&format!("[{s}]")),
            "{test} {}: scheduler {s}: {}",
            d.name,
            d.sysfs("queue/scheduler")
        );
    }
    wipe_head(&d.path(), 4);
    Some((d, sched))
}

/// [`end_to_end_on`] on the disk with `serial`; with `native_fua`, the disk must have FUA
/// (`queue/fua` = 1: the log's FUA writes reach it as FUA, no post-flush).
fn end_to_end_driver(
    test: &str,
    serial: &str,
    fs: &str,
    scheduler: &str,
    native_fua: bool,
) -> Option<E2e> {
    let (d, _sched) = setup(test, serial, Some(scheduler))?;
    let tag = format!("[{} {test} {fs} {scheduler}]", kernel());
    if native_fua {
        assert_eq!(d.sysfs("queue/fua"), "1", "{tag} {}: queue/fua", d.name);
    }
    assert_eq!(
        d.sysfs("queue/write_cache"),
        "write back",
        "{tag} {}: a volatile write cache (PREFLUSH/FUA reach the disk)",
        d.name
    );
    let daemon = shared_daemon();
    let e = end_to_end_on(&daemon, &tag, &d.name, kdev_of(&d.sysfs("dev")), fs);
    assert!(
        e.fua > 0.0 && e.preflush > 0.0,
        "{tag} {}: FUA ({}) and PREFLUSH ({}) classes",
        d.name,
        e.fua,
        e.preflush
    );
    eprintln!(
        "{tag} {}: queue/fua={} discard_max_bytes={}",
        d.name,
        d.sysfs("queue/fua"),
        d.sysfs("queue/discard_max_bytes")
    );
    Some(e)
}

#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn nvme_xfs_none() {
    end_to_end_driver("nvme_xfs_none", "blkobs-nvme", "xfs", "none", true);
}

#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn virtio_blk_ext4_mq_deadline() {
    end_to_end_driver(
        "virtio_blk_ext4_mq_deadline",
        "blkobs-vblk",
        "ext4",
        "mq-deadline",
        false,
    );
}

#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn virtio_scsi_xfs_mq_deadline() {
    end_to_end_driver(
        "virtio_scsi_xfs_mq_deadline",
        "blkobs-scsi",
        "xfs",
        "mq-deadline",
        false,
    );
}

/// The NVMe disk's poll hardware queues (debugfs `hctxN/type` = `poll`): their `queued`
/// counts summed. `None` without debugfs.
fn poll_queued(disk: &str) -> Option<u64> {
    let dir = Path::new("/sys/kernel/debug/block").join(disk);
    let mut total = None;
    for e in std::fs::read_dir(&dir).ok()?.flatten() {
        let p = e.path();
        let ty = std::fs::read_to_string(p.join("type")).unwrap_or_default();
        if ty.trim() == "poll" {
            let q: u64 = std::fs::read_to_string(p.join("queued"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            *total.get_or_insert(0) += q;
        }
    }
    total
}

/// Requests of `n` per op counted by the observer between two scrapes.
fn ours(before: &Metrics, after: &Metrics, n: &str, op: &str) -> f64 {
    after.sum("blkobs_requests_total", &[("device", n), ("op", op)])
        - before.sum("blkobs_requests_total", &[("device", n), ("op", op)])
}

/// Requests: (reads, writes + write_zeroes, flushes, discards).
type Counts = (f64, f64, f64, f64);

/// [`Counts`] of `n` by the observer, and by diskstats.
fn counts(
    before: &Metrics,
    after: &Metrics,
    n: &str,
    d0: &DiskStats,
    d1: &DiskStats,
) -> (Counts, Counts) {
    let o = |op| ours(before, after, n, op);
    (
        (
            o("read"),
            o("write") + o("write_zeroes"),
            o("flush"),
            o("discard"),
        ),
        (
            (d1.reads - d0.reads) as f64,
            (d1.writes - d0.writes) as f64,
            (d1.flushes - d0.flushes) as f64,
            (d1.discards - d0.discards) as f64,
        ),
    )
}

fn untracked_lost(before: &Metrics, after: &Metrics, n: &str) -> (f64, f64) {
    (
        after.sum("blkobs_untracked_completions_total", &[])
            - before.sum("blkobs_untracked_completions_total", &[]),
        after.sum("blkobs_lost_completions_total", &[("device", n)])
            - before.sum("blkobs_lost_completions_total", &[("device", n)]),
    )
}

/// fio io_uring with `hipri` (IORING_SETUP_IOPOLL) on the NVMe disk's poll queue: completions
/// found by polling in fio's own context, not by an interrupt. Counted like any other.
#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn nvme_polled_io_uring() {
    let Some((d, _)) = setup("nvme_polled_io_uring", "blkobs-nvme", None) else {
        return;
    };
    let tag = format!("[{} nvme_polled_io_uring] {}", kernel(), d.name);
    assert_eq!(
        d.sysfs("queue/io_poll"),
        "1",
        "{tag}: queue/io_poll (nvme.poll_queues=1 on the guest's command line)"
    );
    let daemon = shared_daemon();
    let n = d.name.as_str();
    quiesce(n);
    let before = daemon.scrape();
    let d0 = diskstats(n);
    let p0 = poll_queued(n);
    let out = fio(&[
        "--name=polled",
        &format!("--filename={}", d.path()),
        "--ioengine=io_uring",
        "--hipri=1",
        "--direct=1",
        "--rw=randrw",
        "--bs=4k",
        "--size=8M",
        "--iodepth=4",
        "--number_ios=1500",
    ]);
    quiesce(n);
    std::thread::sleep(Duration::from_millis(3500));
    let d1 = diskstats(n);
    let after = daemon.scrape();
    let p1 = poll_queued(n);
    let job = &out["jobs"][0];
    let fio_ios =
        job["read"]["total_ios"].as_f64().unwrap() + job["write"]["total_ios"].as_f64().unwrap();
    let (o, k) = counts(&before, &after, n, &d0, &d1);
    let (untracked, lost) = untracked_lost(&before, &after, n);
    let polled = p0.zip(p1).map(|(a, b)| b - a);
    eprintln!(
        "{tag}: fio {fio_ios} I/Os | diskstats r/w/f/d {k:?} | observer {o:?} lost={lost} untracked={untracked} | poll queue queued +{polled:?}"
    );
    assert_eq!(
        o, k,
        "{tag}: reads, writes, flushes, discards vs /proc/diskstats"
    );
    assert!(o.0 + o.1 >= 1000.0, "{tag}: workload too small");
    assert_eq!((lost, untracked), (0.0, 0.0), "{tag}: lost, untracked");
    check_classes(&after, &tag, n);
    if let Some(p) = polled {
        // The poll queue took fio's I/O (a witness that it was polled at all).
        assert!(
            p as f64 >= fio_ios,
            "{tag}: poll hardware queue queued {p} requests for {fio_ios} polled I/Os"
        );
    } else {
        eprintln!("{tag}: no debugfs poll queue stats (not a witness here)");
    }
}

/// A 16-entry virtqueue without indirect descriptors runs out of descriptors under fio qd 64:
/// virtio-blk returns BLK_STS_DEV_RESOURCE and the block layer requeues the request.
#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn virtio_tiny_queue_requeues() {
    let Some((d, _)) = setup("virtio_tiny_queue_requeues", "blkobs-vtiny", None) else {
        return;
    };
    let tag = format!("[{} virtio_tiny_queue_requeues] {}", kernel(), d.name);
    let daemon = shared_daemon();
    let n = d.name.as_str();
    quiesce(n);
    let before = daemon.scrape();
    let d0 = diskstats(n);
    let trace = BlockEventCount::start("block_rq_requeue", kdev_of(&d.sysfs("dev")));
    fio(&[
        "--name=requeue",
        &format!("--filename={}", d.path()),
        "--ioengine=libaio",
        "--direct=1",
        "--rw=randwrite",
        "--bs=4k",
        "--size=64M",
        "--iodepth=64",
        "--number_ios=3000",
    ]);
    quiesce(n);
    std::thread::sleep(Duration::from_millis(3500));
    let ftrace = trace.stop() as f64;
    let d1 = diskstats(n);
    let after = daemon.scrape();
    let requeues = after.sum("blkobs_requeues_total", &[("device", n)])
        - before.sum("blkobs_requeues_total", &[("device", n)]);
    let (o, k) = counts(&before, &after, n, &d0, &d1);
    let (untracked, lost) = untracked_lost(&before, &after, n);
    let delta = |name: &str| after.sum(name, &[]) - before.sum(name, &[]);
    eprintln!(
        "{tag}: requeues observer {requeues} ftrace {ftrace} | diskstats r/w/f/d {k:?} | observer {o:?} lost={lost} untracked={untracked} | stale={} nested={} recursion_misses={}",
        delta("blkobs_stale_requests_total"),
        delta("blkobs_nested_completions_total"),
        delta("blkobs_bpf_program_recursion_misses_total"),
    );
    assert_eq!(
        o, k,
        "{tag}: reads, writes, flushes, discards vs /proc/diskstats"
    );
    assert!(o.1 >= 2000.0, "{tag}: workload too small");
    assert!(
        ftrace > 0.0,
        "{tag}: no requeue at all (the queue is not tiny?)"
    );
    assert_eq!(
        requeues, ftrace,
        "{tag}: requeues vs ftrace block_rq_requeue"
    );
    assert_eq!((lost, untracked), (0.0, 0.0), "{tag}: lost, untracked");
    check_classes(&after, &tag, n);
}

/// Passthrough requests (`blk_execute_rq`: SG_IO, NVMe passthrough, and here virtio-blk's
/// GET_ID, the 20-byte driver-private request every read of `/sys/block/vdX/serial` sends,
/// drivers/block/virtio_blk.c `virtblk_get_id`) carry an `end_io` and are never in a flush
/// sequence. Each one completes as a request of op `other` (rwbs `N`): as many as ftrace's
/// `block_rq_complete` of rwbs `N` on the disk, none lost, untracked, stale or left in
/// `/inflight`. /proc/diskstats does not account passthrough requests: ftrace is the witness.
/// (Kernels whose BTF lacks RQF_FLUSH_SEQ, 5.10 and 6.1, took `end_io` alone for a flush
/// sequence: every serial read stayed in flight and was counted lost when its request struct
/// was used again, 5 of 3,000 writes in `virtio_tiny_queue_requeues` on 5.10.)
#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn passthrough_requests_complete() {
    const READS: usize = 24;
    let Some((d, _)) = setup("passthrough_requests_complete", "blkobs-vblk", None) else {
        return;
    };
    let tag = format!("[{} passthrough_requests_complete] {}", kernel(), d.name);
    let daemon = shared_daemon();
    let n = d.name.as_str();
    quiesce(n);
    let before = daemon.scrape();
    let trace = Ftrace::start(
        "passthrough",
        FtraceSpec {
            events: &["block_rq_complete"],
            kdevs: &[kdev_of(&d.sysfs("dev"))],
            ..Default::default()
        },
    );
    for _ in 0..READS {
        assert_eq!(d.sysfs("serial"), "blkobs-vblk", "{tag}: serial");
    }
    quiesce(n);
    std::thread::sleep(Duration::from_millis(1500));
    let ftrace = trace.stop().iter().filter(|e| e.rwbs() == "N").count() as f64;
    let after = daemon.scrape();
    let ours = ours(&before, &after, n, "other");
    let (untracked, lost) = untracked_lost(&before, &after, n);
    let stale = after.sum("blkobs_stale_requests_total", &[])
        - before.sum("blkobs_stale_requests_total", &[]);
    let left = json(&daemon, &format!("/inflight?device={n}"))["requests"]
        .as_array()
        .map_or(0, Vec::len);
    eprintln!(
        "{tag}: {READS} serial reads | ftrace block_rq_complete N {ftrace} | observer op=other {ours} lost={lost} untracked={untracked} stale={stale} left={left}"
    );
    assert_eq!(
        ftrace, READS as f64,
        "{tag}: premise: one GET_ID request per serial read"
    );
    assert_eq!(ours, ftrace, "{tag}: requests of op other vs ftrace");
    assert_eq!(
        (lost, untracked, stale, left),
        (0.0, 0.0, 0.0, 0),
        "{tag}: lost, untracked, stale, left in /inflight"
    );
}

/// NVMe multipath: the head `nvmeXnY` is bio-based; its bios go to a hidden path disk
/// `nvmeXcYnZ` (no sysfs `dev`, no device node), which the block layer accounts in
/// /proc/diskstats under its own name. Each path must be a disk of its own here.
#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn nvme_multipath_hidden_paths() {
    if !require_root("nvme_multipath_hidden_paths") {
        return;
    }
    let Some(head) = guest_disk("blkobs-mp") else {
        return;
    };
    let tag = format!("[{} nvme_multipath_hidden_paths] {}", kernel(), head.name);
    assert!(head.bio_based, "{tag}: the head is bio-based");
    let paths: Vec<GuestDisk> = disks_by_serial("blkobs-mp")
        .into_iter()
        .filter(|d| d.hidden)
        .collect();
    assert_eq!(paths.len(), 2, "{tag}: two hidden path disks: {paths:?}");
    let daemon = shared_daemon();
    // Every path is a disk with a slot (`/devices`: tracking full) once indexed.
    let indexed = wait_for(Duration::from_secs(10), || {
        let v = devices(&daemon);
        let all = paths.iter().all(|p| {
            v["devices"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x["device"] == p.name.as_str() && x["tracking"] == "full")
        });
        all.then_some(())
    });
    assert!(
        indexed.is_some(),
        "{tag}: path disks not indexed: {:#}",
        devices(&daemon)
    );
    let names: Vec<&str> = std::iter::once(head.name.as_str())
        .chain(paths.iter().map(|p| p.name.as_str()))
        .collect();
    for n in &names {
        quiesce(n);
    }
    let before = daemon.scrape();
    let d0: Vec<DiskStats> = names.iter().map(|n| diskstats(n)).collect();
    let job = fio(&[
        "--name=mp",
        &format!("--filename={}", head.path()),
        "--ioengine=libaio",
        "--direct=1",
        "--rw=randrw",
        "--bs=4k",
        "--size=16M",
        "--iodepth=8",
        "--number_ios=1500",
    ]);
    for n in &names {
        quiesce(n);
    }
    std::thread::sleep(Duration::from_millis(3500));
    let d1: Vec<DiskStats> = names.iter().map(|n| diskstats(n)).collect();
    let after = daemon.scrape();
    let unindexed = after.sum("blkobs_unindexed_requests_total", &[])
        - before.sum("blkobs_unindexed_requests_total", &[]);
    let mut active = Vec::new();
    for (i, n) in names.iter().enumerate().skip(1) {
        let (o, k) = counts(&before, &after, n, &d0[i], &d1[i]);
        let (_, lost) = untracked_lost(&before, &after, n);
        eprintln!("{tag}: path {n}: diskstats r/w/f/d {k:?} | observer {o:?} lost={lost}");
        assert_eq!(o, k, "{tag}: path {n} vs its /proc/diskstats");
        assert_eq!(lost, 0.0, "{tag}: path {n} lost");
        if k.0 + k.1 > 0.0 {
            active.push(*n);
        }
        check_classes(&after, &tag, n);
    }
    let (o, k) = counts(&before, &after, &head.name, &d0[0], &d1[0]);
    let (untracked, lost) = untracked_lost(&before, &after, &head.name);
    // The head: one I/O per bio fio submitted (4 KiB direct, never split), ended with the path
    // request that carries it (README, "Stacked, bio-based disks"). Witnesses: fio's own
    // completed I/Os on every kernel, and the head's /proc/diskstats where the kernel accounts
    // the head at all (6.12's drivers/nvme/host/multipath.c does, nvme_mpath_start_request;
    // 5.10's and 6.1's leave it at 0).
    let fio_rw = (
        job["jobs"][0]["read"]["total_ios"].as_f64().unwrap(),
        job["jobs"][0]["write"]["total_ios"].as_f64().unwrap(),
    );
    let accounted = k != (0.0, 0.0, 0.0, 0.0);
    let left = json(&daemon, &format!("/inflight?device={}", head.name))["requests"]
        .as_array()
        .map_or(0, Vec::len);
    eprintln!(
        "{tag}: head {}: diskstats r/w/f/d {k:?}{} | fio r/w {fio_rw:?} | observer {o:?} | lost={lost} untracked={untracked} left={left} unindexed={unindexed} active={active:?}",
        head.name,
        if accounted { "" } else { " (no accounting)" }
    );
    assert_eq!((o.0, o.1), fio_rw, "{tag}: head reads, writes vs fio's");
    if accounted {
        assert_eq!(o, k, "{tag}: head vs its /proc/diskstats");
    }
    assert_eq!(
        (lost, untracked, left),
        (0.0, 0.0, 0),
        "{tag}: head lost, untracked, left in /inflight"
    );
    assert_eq!(active.len(), 1, "{tag}: one active path");
    let a = names.iter().position(|n| *n == active[0]).unwrap();
    assert!(
        (d1[a].reads - d0[a].reads) + (d1[a].writes - d0[a].writes) >= 1000,
        "{tag}: workload too small"
    );
    assert_eq!(unindexed, 0.0, "{tag}: unindexed requests");
    assert_eq!(untracked, 0.0, "{tag}: untracked completions");
}
