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
//!   a request of op `drv_in`, = ftrace's `block_rq_complete`, nothing lost or left in flight.
//! - NVMe multipath: the hidden path disks `nvmeXcYnZ` under the bio-based head have names,
//!   slots and series of their own; the active path's requests = its diskstats, nothing
//!   unindexed. The head's own (bio-based) counts = fio's completed I/Os, and = its
//!   diskstats where the kernel accounts the head (6.12), nothing lost or left in flight.
//!
//! Workloads are small: the guests run under TCG.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::{path::Path, time::Duration};

use support::*;

/// One daemon for every test of this file (each test on its own disk).
static DAEMON: SharedDaemon = SharedDaemon::new();

fn shared_daemon() -> HeldDaemon {
    DAEMON.get(|| Daemon::start(&[]))
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
    daemon.wait_settled(&[n]);
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
    // Every dispatch, requeue and completion on the disk (mono clock: the programs' clock).
    let trace = Ftrace::start(
        "requeue",
        FtraceSpec {
            events: &["block_rq_issue", "block_rq_requeue", "block_rq_complete"],
            kdevs: &[kdev_of(&d.sysfs("dev"))],
            buffer_kb: 16384,
            mono: true,
            ..Default::default()
        },
    );
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
    daemon.wait_settled(&[n]);
    let events = trace.stop();
    let ftrace = events
        .iter()
        .filter(|e| e.event == "block_rq_requeue")
        .count() as f64;
    // Device time as the witness records it, each write paired by sector (fio's random map
    // writes each block once): from its first dispatch, and from its last (after requeues).
    let (mut first_d, mut last_d) = (HashMap::new(), HashMap::new());
    let (mut from_first, mut from_last, mut paired) = (0u64, 0u64, 0u64);
    for e in &events {
        let Some((sector, _)) = e.range() else {
            continue;
        };
        match e.event {
            "block_rq_issue" => {
                first_d.entry(sector).or_insert(e.t_ns);
                last_d.insert(sector, e.t_ns);
            }
            "block_rq_complete" => {
                if let (Some(f), Some(l)) = (first_d.remove(&sector), last_d.remove(&sector)) {
                    from_first += e.t_ns - f;
                    from_last += e.t_ns - l;
                    paired += 1;
                }
            }
            _ => {}
        }
    }
    let d1 = diskstats(n);
    let after = daemon.scrape();
    let requeues = after.sum("blkobs_requeues_total", &[("device", n)])
        - before.sum("blkobs_requeues_total", &[("device", n)]);
    let device_stage = |what: &str| {
        let (name, sel) = (
            format!("blkobs_request_latency_seconds_{what}"),
            [("device", n), ("stage", "device")],
        );
        after.sum(&name, &sel) - before.sum(&name, &sel)
    };
    let (device_sum, device_count) = (device_stage("sum"), device_stage("count"));
    let (first_s, last_s) = (from_first as f64 * 1e-9, from_last as f64 * 1e-9);
    eprintln!(
        "{tag}: device time observer {device_sum:.6} s over {device_count} requests; ftrace from \
         the first dispatch {first_s:.6} s, from the last {last_s:.6} s, over {paired} requests"
    );
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
    // A requeued request's device time runs from its first dispatch (docs/src/concepts/stages.md, "Requeued
    // requests"): the sum equals the witness's from the first dispatch within 50 µs per request
    // on average (the programs and ftrace read the clock at different instants of one event,
    // 1 µs apart at most natively, tests/stages.rs; under TCG, with other guests running,
    // every instruction is slower, and an interrupt or the host's scheduler can come between
    // the two readings: measured −8.6 to +7.6 µs beside the other kernels' guests, +31.6 µs in
    // a clean-clone CI run with the Debian machines' guests beside them too). Where the
    // requeues cost more than twice that (most runs: the witness's sum from the last dispatch
    // is 74 to 320 µs per request less; one run 12), the sum is also closer to the
    // first-dispatch reading than to the last-dispatch one.
    assert_eq!(
        device_count, paired as f64,
        "{tag}: device-stage samples vs paired writes"
    );
    let tol = paired as f64 * 50e-6;
    let (off_first, off_last) = ((device_sum - first_s).abs(), (device_sum - last_s).abs());
    assert!(
        off_first <= tol,
        "{tag}: device time {device_sum} s vs ftrace from the first dispatch {first_s} s (from the \
         last: {last_s} s; tolerance {tol} s)"
    );
    if first_s - last_s > 2.0 * tol {
        assert!(
            off_first < off_last,
            "{tag}: device time {device_sum} s is nearer ftrace's from the last dispatch \
             {last_s} s than from the first {first_s} s"
        );
    } else {
        eprintln!(
            "{tag}: the requeues cost {:.1} µs per request: too little to tell the first dispatch \
             from the last at this tolerance",
            (first_s - last_s) / paired as f64 * 1e6
        );
    }
}

/// Passthrough requests (`blk_execute_rq`: SG_IO, NVMe passthrough, and here virtio-blk's
/// GET_ID, the 20-byte driver-private request every read of `/sys/block/vdX/serial` sends,
/// drivers/block/virtio_blk.c `virtblk_get_id`) carry an `end_io` and are never in a flush
/// sequence. Each one completes as a request of op `drv_in` (rwbs `N`): as many as ftrace's
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
    daemon.wait_settled(&[n]);
    let ftrace = trace.stop().iter().filter(|e| e.rwbs() == "N").count() as f64;
    let after = daemon.scrape();
    let ours = ours(&before, &after, n, "drv_in");
    let (untracked, lost) = untracked_lost(&before, &after, n);
    let stale = after.sum("blkobs_stale_requests_total", &[])
        - before.sum("blkobs_stale_requests_total", &[]);
    let left = json(&daemon, &format!("/inflight?device={n}"))["requests"]
        .as_array()
        .map_or(0, Vec::len);
    eprintln!(
        "{tag}: {READS} serial reads | ftrace block_rq_complete N {ftrace} | observer op=drv_in {ours} lost={lost} untracked={untracked} stale={stale} left={left}"
    );
    assert_eq!(
        ftrace, READS as f64,
        "{tag}: premise: one GET_ID request per serial read"
    );
    assert_eq!(ours, ftrace, "{tag}: requests of op drv_in vs ftrace");
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
    // The paths are request-based (the reaper retires their unseen ends); the head is not.
    daemon.wait_settled(&names[1..]);
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
    // request that carries it (docs/src/concepts/stacked-disks.md). Witnesses: fio's own
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

/// `blkobs_disk_info` names the drives: the serial qemu was given (xtask/src/vm_boot.rs),
/// qemu's model names (hw/nvme/ctrl.c "QEMU NVMe Ctrl", hw/scsi/scsi-disk.c "QEMU HARDDISK";
/// virtio-blk has none), a firmware revision and a wwid on NVMe, and the queue as util-linux's
/// lsblk reads it (ROTA, LOG-SEC, PHY-SEC, SCHED). A scheduler changed while the daemon runs is
/// in the next scrapes (the queue is read every tick, the drive once per disk appearance).
#[test]
#[ignore = "guest-only: needs the kernel-matrix VMs' qemu disks (cargo xtask vmtest runs it)"]
fn disk_info_names_the_drives() {
    let test = "disk_info_names_the_drives";
    if !require_root(test) {
        return;
    }
    let drives = [
        ("blkobs-nvme", "QEMU NVMe Ctrl"),
        ("blkobs-vblk", ""),
        ("blkobs-scsi", "QEMU HARDDISK"),
    ];
    let mut found = Vec::new();
    for (serial, model) in drives {
        let Some(d) = guest_disk(serial) else {
            return;
        };
        found.push((d, serial, model));
    }
    let daemon = shared_daemon();
    let info = |m: &Metrics, name: &str| -> BTreeMap<String, String> {
        let want = [("device", name)];
        let s: Vec<_> = m.select("blkobs_disk_info", &want).collect();
        assert_eq!(s.len(), 1, "[{}] one blkobs_disk_info of {name}", kernel());
        s[0].labels.clone()
    };
    let m = Metrics::parse(&daemon.metrics_text());
    for (d, serial, model) in &found {
        let tag = format!("[{} {test}] {} ({serial})", kernel(), d.name);
        let l = info(&m, &d.name);
        eprintln!("{tag}: {l:?}");
        assert_eq!(l["serial"], *serial, "{tag}: serial");
        assert_eq!(l["model"], *model, "{tag}: model");
        let lsblk = sh(
            "lsblk",
            &[
                "-d",
                "-n",
                "-r",
                "-o",
                "ROTA,LOG-SEC,PHY-SEC,SCHED",
                &d.path(),
            ],
        );
        let want: Vec<&str> = lsblk.split_whitespace().collect();
        let got = [
            l["rotational"].as_str(),
            l["logical_block_size"].as_str(),
            l["physical_block_size"].as_str(),
            l["scheduler"].as_str(),
        ];
        eprintln!("{tag}: lsblk ROTA LOG-SEC PHY-SEC SCHED: {lsblk:?}, ours {got:?}");
        assert_eq!(got.as_slice(), want.as_slice(), "{tag}: queue vs lsblk");
        assert_eq!(l["fua"], d.sysfs("queue/fua"), "{tag}: fua");
        assert_eq!(l["write_cache"], d.sysfs("queue/write_cache"), "{tag}");
        if serial == &"blkobs-nvme" {
            assert!(
                !l["revision"].is_empty() && !l["wwid"].is_empty(),
                "{tag}: NVMe firmware revision and wwid"
            );
        }
    }
    // A scheduler change shows within a tick or two.
    let (scsi, ..) = &found[2];
    let other = if scsi.sysfs("queue/scheduler").contains("[none]") {
        "mq-deadline"
    } else {
        "none"
    };
    let _sched = QueueAttr::set(&scsi.name, "scheduler", other);
    assert!(
        wait_every(Duration::from_millis(200), Duration::from_secs(5), || {
            info(&Metrics::parse(&daemon.metrics_text()), &scsi.name)["scheduler"] == other
        }),
        "[{} {test}] {}: scheduler {other} not in blkobs_disk_info",
        kernel(),
        scsi.name
    );
}

/// A zoned null_blk disk (host-managed, 16 MiB zones): every request is counted under the
/// kernel's op name. Witnesses, per phase: ftrace's `block_rq_complete` by rwbs (R, W, F, D,
/// and `N` split into requests with data, zone appends, and without, zone commands; not
/// `block_rq_issue`, which a data-less PREFLUSH write never reaches) and /proc/diskstats, which counts zone commands as reads or writes of 0 sectors by the op's
/// number (docs/src/concepts/classes.md#ops). Phases: fio `--zonemode=zbd` sequential writes;
/// one `blkzone` reset, open, close and finish each on known zones; files on a zoned btrfs,
/// whose data goes as zone appends, where the kernel mounts one.
#[test]
#[ignore = "needs null_blk: runs in the kernel-matrix VMs"]
fn zoned_null_blk_ops_by_kernel_name() {
    if !require_root("zoned_null_blk_ops_by_kernel_name") {
        return;
    }
    const ZONE: u64 = 32768; // sectors: 16 MiB
    let d = NullBlk::with(
        512,
        "mq-deadline",
        &[("zoned", "1"), ("zone_size", "16"), ("zone_nr_conv", "0")],
    );
    let n = d.name.clone();
    let tag = format!("[{} zoned] {n}", kernel());
    let daemon = shared_daemon();
    wait_tracked(&daemon, &n);
    // The zone facts as util-linux's lsblk reads them, and as configured.
    let lsblk = sh(
        "lsblk",
        &[
            "-d",
            "-n",
            "-r",
            "-b",
            "-o",
            "ZONED,ZONE-SZ",
            &format!("/dev/{n}"),
        ],
    );
    assert_eq!(
        lsblk.trim(),
        format!("host-managed {}", ZONE * 512),
        "{tag}: premise"
    );
    let mut seen = None;
    let same = wait_every(Duration::from_millis(200), Duration::from_secs(10), || {
        let m = Metrics::parse(&daemon.metrics_text());
        seen = m
            .select("blkobs_disk_info", &[("device", n.as_str())])
            .map(|s| format!("{} {}", s.labels["zoned"], s.labels["zone_size_bytes"]))
            .next();
        seen.as_deref() == Some(lsblk.trim())
    });
    assert!(same, "{tag}: blkobs_disk_info {seen:?} vs lsblk {lsblk:?}");
    let path = format!("/dev/{n}");
    // `frozen`: a filesystem on the disk, frozen (fsfreeze) while the witnesses are read at
    // each end of the phase, so its background writes fall inside or outside for all three.
    let freeze = |frozen: Option<&str>, how: &str| {
        if let Some(dir) = frozen {
            sh("fsfreeze", &[how, dir]);
        }
    };
    let phase = |what: &str, frozen: Option<&str>, run: &dyn Fn()| -> BTreeMap<String, f64> {
        freeze(frozen, "-f");
        quiesce(&n);
        daemon.wait_settled(&[&n]);
        let (before, d0) = (daemon.scrape(), diskstats(&n));
        let trace = Ftrace::start(
            "zoned",
            FtraceSpec {
                events: &["block_rq_complete"],
                kdevs: &[kdev_of(&d.sysfs("dev"))],
                ..Default::default()
            },
        );
        freeze(frozen, "-u");
        run();
        freeze(frozen, "-f");
        quiesce(&n);
        daemon.wait_settled(&[&n]);
        let events = trace.stop();
        let (after, d1) = (daemon.scrape(), diskstats(&n));
        freeze(frozen, "-u");
        let by_op: BTreeMap<String, f64> = observer_common::class::Op::ALL
            .iter()
            .map(|op| (op.name().to_string(), ours(&before, &after, &n, op.name())))
            .filter(|(_, v)| *v != 0.0)
            .collect();
        let bytes = |op: &str| {
            after.sum("blkobs_bytes_total", &[("device", &n), ("op", op)])
                - before.sum("blkobs_bytes_total", &[("device", &n), ("op", op)])
        };
        let o = |op: &str| by_op.get(op).copied().unwrap_or(0.0);
        // ftrace by rwbs: a leading F before an op letter is PREFLUSH.
        let mut traced: BTreeMap<&str, f64> = BTreeMap::new();
        for e in &events {
            let body = e.rwbs().strip_prefix('F').unwrap_or(e.rwbs());
            let with_data = e.range().is_some_and(|(_, sectors)| sectors > 0);
            let key = match body.chars().next() {
                Some('R') => "R",
                Some('W') => "W",
                Some('D') => "D",
                Some('N') if with_data => "N with data",
                Some('N') => "N without data",
                _ => "F",
            };
            *traced.entry(key).or_default() += 1.0;
        }
        let t = |k: &str| traced.get(k).copied().unwrap_or(0.0);
        let zone_cmds: f64 = [
            "zone_reset",
            "zone_reset_all",
            "zone_open",
            "zone_close",
            "zone_finish",
        ]
        .iter()
        .map(|op| o(op))
        .sum();
        let data_ops = ["read", "write", "zone_append", "write_zeroes"];
        let ours_rw: f64 = data_ops.iter().map(|op| o(op)).sum::<f64>() + zone_cmds;
        let ours_bytes: f64 = data_ops.iter().map(|op| bytes(op)).sum();
        let kernel_rw = ((d1.reads - d0.reads) + (d1.writes - d0.writes)) as f64;
        let kernel_bytes = ((d1.read_sectors - d0.read_sectors)
            + (d1.write_sectors - d0.write_sectors)) as f64
            * 512.0;
        let (untracked, lost) = untracked_lost(&before, &after, &n);
        eprintln!(
            "{tag} {what}: observer {by_op:?}, {ours_bytes} bytes | ftrace block_rq_complete \
             {traced:?} | diskstats reads+writes {kernel_rw}, {kernel_bytes} bytes, flushes {} \
             | lost {lost} untracked {untracked}",
            d1.flushes - d0.flushes
        );
        let pairs = [
            ("read = ftrace R", o("read"), t("R")),
            ("write = ftrace W", o("write"), t("W")),
            ("flush = ftrace F", o("flush"), t("F")),
            ("discard = ftrace D", o("discard"), t("D")),
            (
                "zone_append + write_zeroes = ftrace N with data",
                o("zone_append") + o("write_zeroes"),
                t("N with data"),
            ),
            (
                "zone commands = ftrace N without data",
                zone_cmds,
                t("N without data"),
            ),
            ("reads + writes = diskstats'", ours_rw, kernel_rw),
            (
                "bytes read and written = diskstats' sectors × 512",
                ours_bytes,
                kernel_bytes,
            ),
            (
                "flush = diskstats' flushes",
                o("flush"),
                (d1.flushes - d0.flushes) as f64,
            ),
            ("unknown = 0", o("unknown"), 0.0),
            ("lost = 0", lost, 0.0),
            ("untracked = 0", untracked, 0.0),
        ];
        let wrong: Vec<String> = pairs
            .iter()
            .filter(|(_, a, b)| a != b)
            .map(|(what, a, b)| format!("{what}: {a} vs {b}"))
            .collect();
        assert!(wrong.is_empty(), "{tag} {what}: {wrong:?}");
        by_op
    };

    let fio = phase("fio zbd", None, &|| {
        sh(
            "fio",
            &[
                "--name=zbd",
                &format!("--filename={path}"),
                "--direct=1",
                "--zonemode=zbd",
                "--rw=write",
                "--bs=64k",
                "--size=4z",
                "--io_size=8M",
                "--ioengine=psync",
            ],
        );
    });
    assert_eq!(fio.get("write"), Some(&128.0), "{tag}: fio's 128 writes");

    let cmds = phase("blkzone", None, &|| {
        let zone = |z: u64| (z * ZONE).to_string();
        sh("blkzone", &["reset", "-o", &zone(0), "-c", "2", &path]);
        sh("blkzone", &["open", "-o", &zone(4), "-c", "1", &path]);
        sh("blkzone", &["close", "-o", &zone(4), "-c", "1", &path]);
        sh("blkzone", &["finish", "-o", &zone(5), "-c", "1", &path]);
    });
    for (op, want) in [
        ("zone_reset", 2.0),
        ("zone_open", 1.0),
        ("zone_close", 1.0),
        ("zone_finish", 1.0),
    ] {
        assert_eq!(cmds.get(op), Some(&want), "{tag}: {op} requests by blkzone");
    }

    // A zoned btrfs sends its file data as zone appends (fs/btrfs/zoned.c,
    // btrfs_use_zone_append). A kernel that can mount one says so in
    // /sys/fs/btrfs/features/zoned (5.12+); elsewhere the phase cannot run.
    let mut modprobe = std::process::Command::new("modprobe");
    if let Some(root) = std::env::var_os("BLKOBS_VM_MODROOT") {
        modprobe.arg("-d").arg(root);
    }
    let _ = modprobe.arg("btrfs").status();
    if !Path::new("/sys/fs/btrfs/features/zoned").exists() {
        eprintln!(
            "{tag}: NOT RUN: the zone append phase: this kernel has no zoned btrfs \
             (/sys/fs/btrfs/features/zoned is missing)"
        );
        return;
    }
    sh("blkzone", &["reset", &path]);
    sh("mkfs.btrfs", &["-q", "-f", "-O", "zoned", &path]);
    let dir = std::env::temp_dir()
        .join(unique("blkobs-zoned"))
        .to_string_lossy()
        .into_owned();
    std::fs::create_dir_all(&dir).unwrap();
    let _unmount = Unmount(dir.clone());
    sh("mount", &["-t", "btrfs", &path, &dir]);
    let appends = phase("zoned btrfs", Some(&dir), &|| {
        for i in 0..8 {
            sh(
                "dd",
                &[
                    "if=/dev/urandom",
                    &format!("of={dir}/f{i}"),
                    "bs=256k",
                    "count=4",
                    "conv=fsync",
                    "status=none",
                ],
            );
        }
        sh("sync", &["-f", &dir]);
    });
    assert!(
        appends.get("zone_append").is_some_and(|&v| v > 0.0),
        "{tag}: no zone appends from a zoned btrfs: {appends:?}"
    );
}

/// Unmounts and removes its directory on drop (also after a failed assertion).
struct Unmount(String);

impl Drop for Unmount {
    fn drop(&mut self) {
        // A failed assertion may leave it frozen.
        let _ = std::process::Command::new("fsfreeze")
            .args(["-u", &self.0])
            .status();
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}
