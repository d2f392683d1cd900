//! Stuck means stuck: a request that the layer below holds stays in `/inflight` and `/stalls`
//! for as long as it is held, and then completes with its real latency, never retired as a
//! "lost completion" — whatever `/sys/block/*/inflight` (which counts only requests with
//! RQF_IO_STAT) says. The layer below is the FUSE file behind a loop device
//! (support/slowfs.rs): it holds a write until released, or sleeps in fsync (the loop device's
//! flush). Witnesses: dd's own elapsed time and the hold's duration.

mod support;

use std::{
    process::{Command, Stdio},
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use serde_json::Value;
use support::*;

/// One daemon for every test of this file (each test on its own disk).
static DAEMON: SharedDaemon = SharedDaemon::new();

/// (lost completions, untracked completions) on `dev`.
fn lost_untracked(d: &Daemon, dev: &str) -> (f64, f64) {
    let m = d.scrape();
    (
        m.sum("blkobs_lost_completions_total", &[("device", dev)]),
        // This device's only: a request another test held may complete untracked on its own.
        m.sum("blkobs_untracked_completions_total", &[("device", dev)]),
    )
}

/// Which request a test follows: by its submitter's command name, or (where the submitter is
/// not the process that wrote: a request first seen when a kworker issues it, kernels before
/// 6.5) by a flag.
#[derive(Clone, Copy)]
enum Pick<'a> {
    Comm(&'a str),
    Flag(&'a str),
}

impl Pick<'_> {
    fn matches(self, r: &Value) -> bool {
        match self {
            Pick::Comm(c) => r["submitter"]["comm"] == c,
            Pick::Flag(f) => r["flags"].as_array().unwrap().iter().any(|x| x == f),
        }
    }
}

/// The request picked in `/inflight?device=`, if listed.
fn inflight_of(d: &Daemon, dev: &str, pick: Pick) -> Option<Value> {
    let v = json(d, &format!("/inflight?device={dev}"));
    v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| pick.matches(r))
        .cloned()
}

/// Watches the held request for `hold`: listed in `/inflight` at the device with a growing
/// age on every look (every 250 ms), and stuck in `/stalls` once older than the default slow
/// threshold (100 ms). Returns the last age.
fn watch_held(d: &Daemon, dev: &str, pick: Pick, hold: Duration) -> f64 {
    let start = Instant::now();
    let mut last = 0.0;
    while start.elapsed() < hold {
        let r = inflight_of(d, dev, pick).unwrap_or_else(|| {
            panic!(
                "the held request vanished from /inflight after {:?} (last age {last})",
                start.elapsed()
            )
        });
        assert_eq!(r["stage"], "device", "{r}");
        let age = r["age_seconds"].as_f64().unwrap();
        assert!(age >= last, "age went back: {last} -> {age}");
        last = age;
        if age < 0.2 {
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        let v = json(d, &format!("/stalls?device={dev}&format=json"));
        assert!(
            v["stuck"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| pick.matches(s)),
            "the held request is not stuck in /stalls at age {age}: {v}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    last
}

/// Issue 10.1's repro: `queue/iostats` = 0, so `/sys/block/B/inflight` reads 0 while the write
/// is held. The write stays in `/inflight` and `/stalls` for the whole 3 s hold, then is one
/// slow write whose device time is between the hold and dd's own elapsed time; nothing lost,
/// nothing untracked.
#[test]
fn held_write_with_iostats_off_stays_in_flight() {
    if !require_root("held_write_with_iostats_off_stays_in_flight") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let disk = SlowDisk::new(64, "none");
    disk.set_queue("iostats", "0");
    quiesce(&disk.name);
    let before = lost_untracked(&daemon, &disk.name);
    let dd = named_dd("blkobs-iostat0");
    let t0 = Instant::now();
    let mut child = disk.hold_write(|| {
        Command::new(&dd)
            .args([
                "if=/dev/zero",
                "bs=4k",
                "count=1",
                "oflag=direct",
                "status=none",
            ])
            .arg(format!("of={}", disk.path))
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    });
    let held_at = Instant::now();
    // The premise on current kernels: the kernel's own count does not see the held write
    // (blk_mq_check_inflight tests RQF_IO_STAT; 5.10's counted it regardless).
    let counted: u64 = std::fs::read_to_string(format!("/sys/block/{}/inflight", disk.name))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    eprintln!(
        "with iostats off, /sys/block/{}/inflight counts {counted}",
        disk.name
    );
    let pick = Pick::Comm("blkobs-iostat0");
    let age = watch_held(&daemon, &disk.name, pick, Duration::from_secs(3));
    assert!(age >= 2.5, "last age {age}");
    let hold = held_at.elapsed().as_secs_f64();
    disk.knobs().release();
    assert!(child.wait().unwrap().success());
    let elapsed = t0.elapsed().as_secs_f64();
    let slow = wait_slow_records(&daemon, &disk.name, 1, |s| pick.matches(s));
    assert_eq!(slow.len(), 1, "{slow:?}");
    let device = slow[0]["device_seconds"].as_f64().unwrap();
    assert!(
        device >= hold - 0.01 && device <= elapsed,
        "device {device} s: not within the hold ({hold} s) and dd's elapsed time ({elapsed} s)"
    );
    let after = lost_untracked(&daemon, &disk.name);
    assert_eq!(after, before, "(lost, untracked) changed");
}

/// A FUA write on a device without FUA (loop) completes its data part, then waits for the
/// post-flush (block/blk-flush.c), in state MQ_RQ_COMPLETE and counted nowhere in
/// `/sys/block/*/inflight`. The flush sleeps 2.5 s in the FUSE file's fsync: the write stays in
/// `/inflight` and `/stalls` throughout, then completes with its device time ≥ the flush's
/// sleep (and ≤ dd's elapsed time); nothing lost, nothing untracked.
#[test]
fn fua_write_waiting_for_post_flush_stays_in_flight() {
    if !require_root("fua_write_waiting_for_post_flush_stays_in_flight") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let disk = SlowDisk::new(64, "none");
    assert_eq!(disk.sysfs("queue/fua"), "0", "loop devices have no FUA");
    quiesce(&disk.name);
    let before = lost_untracked(&daemon, &disk.name);
    let sleep = Duration::from_millis(2500);
    disk.knobs()
        .fsync_delay_ns
        .store(sleep.as_nanos() as u64, Ordering::SeqCst);
    let dd = named_dd("blkobs-fuawr");
    let t0 = Instant::now();
    // O_DIRECT + O_DSYNC on a block device: one write with REQ_FUA (block/fops.c).
    let mut child = Command::new(&dd)
        .args([
            "if=/dev/zero",
            "bs=4k",
            "count=1",
            "oflag=direct,dsync",
            "status=none",
        ])
        .arg(format!("of={}", disk.path))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // By its flag: on kernels before 6.5 the write is first seen when a kworker issues it.
    let pick = Pick::Flag("fua");
    let listed = wait_for(Duration::from_secs(5), || {
        inflight_of(&daemon, &disk.name, pick)
    });
    assert!(
        listed.is_some(),
        "the FUA write never appeared in /inflight"
    );
    let age = watch_held(
        &daemon,
        &disk.name,
        pick,
        sleep - Duration::from_millis(700),
    );
    assert!(age >= 1.5, "last age {age}");
    assert!(child.wait().unwrap().success());
    let elapsed = t0.elapsed().as_secs_f64();
    disk.knobs().fsync_delay_ns.store(0, Ordering::SeqCst);
    wait_slow_records(&daemon, &disk.name, 1, |s| {
        Pick::Flag("preflush").matches(s)
    });
    // Two slow requests: the FUA write, then the data-less PREFLUSH write of the fsync that
    // block/fops.c does after an O_DSYNC write (generic_write_sync), never dispatched itself:
    // it waits in blk-flush.c for the flush request, which sleeps again.
    let fua = slow_records(&daemon, &disk.name, 5000, |s| pick.matches(s));
    assert_eq!(fua.len(), 1, "{fua:?}");
    let device = fua[0]["device_seconds"].as_f64().unwrap();
    assert!(
        device >= sleep.as_secs_f64() - 0.01 && device <= elapsed,
        "device {device} s: not within the flush's sleep ({sleep:?}) and dd's elapsed time ({elapsed} s)"
    );
    let preflush = slow_records(&daemon, &disk.name, 5000, |s| {
        Pick::Flag("preflush").matches(s)
    });
    assert_eq!(preflush.len(), 1, "{preflush:?}");
    let total = preflush[0]["total_seconds"].as_f64().unwrap();
    assert!(
        preflush[0]["device_seconds"].is_null()
            && total >= sleep.as_secs_f64() - 0.01
            && device + total <= elapsed,
        "{}",
        preflush[0]
    );
    let after = lost_untracked(&daemon, &disk.name);
    assert_eq!(after, before, "(lost, untracked) changed");
}

/// The reaper's positive case, against the kernel's own state: a real, idle `struct request`
/// of the test device is made to look dispatched 3 s ago in its slot of `INFLIGHT_SLOTS` (or
/// its `INFLIGHT` entry) (as if its completion
/// had been missed: its free entry, kept for reuse, is rewritten in place). The kernel says
/// the request is not in flight, so the reaper retires it within its two 1 s passes: gone
/// from `/inflight`, counted once in `blkobs_lost_completions_total` of that device.
#[test]
fn reaper_retires_a_request_the_kernel_says_is_not_in_flight() {
    use aya::maps::{Array, HashMap, IterableMap, Map, MapData};
    use observer::bpf::batch::{read_inflight, InflightMaps, SlotView};
    use observer_common::class::{Op, OP_MASK};
    if !require_root("reaper_retires_a_request_the_kernel_says_is_not_in_flight") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let dev = LoopDev::new(64, "none");
    dev.write_direct(0, 8);
    quiesce(&dev.name);
    let m = daemon.scrape();
    assert_eq!(
        m.sum("blkobs_build_info", &[("reaper", "request_state")]),
        1.0
    );
    let before = lost_untracked(&daemon, &dev.name);
    let slots: Array<MapData, _> =
        Array::try_from(Map::Array(daemon_map(&daemon, "INFLIGHT_SLOTS"))).unwrap();
    let view = std::sync::Arc::new(SlotView::new(IterableMap::map(&slots)).unwrap());
    let mut maps = InflightMaps {
        hash: HashMap::try_from(Map::HashMap(daemon_map(&daemon, "INFLIGHT"))).unwrap(),
        slots,
        view,
    };
    let (rq, _) = read_inflight(&maps)
        .into_iter()
        .find(|(_, e)| !e.is_live() && e.dev == dev.kdev() && e.class & OP_MASK == Op::Write as u16)
        .expect("a free entry of a write on the test device (kept for reuse after its completion)");
    let (place, mut e) = maps.get(rq).expect("the entry, read again");
    let now = observer::time::monotonic_ns();
    e.enter_ns = now - 3_000_000_000;
    e.dispatch_ns = now - 2_900_000_000;
    maps.write(rq, place, &e).unwrap();
    let listed = json(&daemon, &format!("/inflight?device={}", dev.name));
    assert_eq!(listed["requests"].as_array().unwrap().len(), 1, "{listed}");
    let gone = wait_for(Duration::from_secs(6), || {
        let v = json(&daemon, &format!("/inflight?device={}", dev.name));
        v["requests"].as_array().unwrap().is_empty().then_some(())
    });
    assert!(gone.is_some(), "the reaper did not retire the stale entry");
    let after = lost_untracked(&daemon, &dev.name);
    assert_eq!(after, (before.0 + 1.0, before.1), "(lost, untracked)");
}

/// The state letter of a process (`/proc/PID/stat` field 3), `None` once it is gone.
fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(") ")?.1.chars().next()
}

/// Issue 10.2's repro: time spent waiting for a request slot is queue time. `nr_requests` = 4
/// and a held write: 8 concurrent direct 4 KiB writers (different offsets), so 4 requests are
/// at the device (one held, three behind it) and 4 bios sleep for a tag. The hold lasts 2 s
/// after all 8 writers sleep in the kernel. Afterwards: exactly 4 writes with device time ≥ the
/// hold, exactly 4 with queue time ≥ the hold (the queue stage starts at the bio's entry,
/// btt Q, not at the request's creation), and every total within dd's own elapsed time.
#[test]
fn tag_wait_is_queue_time() {
    if !require_root("tag_wait_is_queue_time") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let disk = SlowDisk::new(64, "none");
    disk.set_queue("nomerges", "2");
    disk.set_queue("nr_requests", "4");
    quiesce(&disk.name);
    let before = lost_untracked(&daemon, &disk.name);
    let dd = named_dd("blkobs-tagwait");
    // All eight submitted: each sleeps in the kernel (D), for its completion or for a tag.
    let (t0, mut writers) = disk.hold_write_until(
        || {
            let t0 = Instant::now();
            let writers: Vec<_> = (0..8u64)
                .map(|i| {
                    Command::new(&dd)
                        .args([
                            "if=/dev/zero",
                            "bs=4k",
                            "count=1",
                            "oflag=direct",
                            "status=none",
                        ])
                        .arg(format!("of={}", disk.path))
                        .arg(format!("seek={}", i * 16))
                        .stdout(Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect();
            (t0, writers)
        },
        Duration::from_millis(100),
        Duration::from_secs(30),
        |(_, writers)| {
            writers
                .iter()
                .all(|c| proc_state(c.id()) == Some('D'))
                .then_some(())
                .ok_or_else(|| "the eight writers never all slept in the kernel".to_string())
        },
    );
    let held_from = Instant::now();
    std::thread::sleep(Duration::from_millis(300));
    // Four requests at the device, four bios queued without a request, all listed.
    let v = json(&daemon, &format!("/inflight?device={}", disk.name));
    let stages: Vec<&str> = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        (
            stages.iter().filter(|s| **s == "device").count(),
            stages.iter().filter(|s| **s == "queue").count()
        ),
        (4, 4),
        "nr_requests = 4: four requests at the device, four bios waiting for a tag: {v}"
    );
    let pids: Vec<u64> = writers.iter().map(|c| c.id() as u64).collect();
    assert!(
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| pids.contains(&r["submitter"]["pid"].as_u64().unwrap())),
        "every entry is one of the eight writers: {v}"
    );
    let stuck = json(
        &daemon,
        &format!("/stalls?device={}&format=json", disk.name),
    );
    assert_eq!(stuck["stuck"].as_array().unwrap().len(), 8, "{stuck}");
    std::thread::sleep(Duration::from_millis(1700));
    let hold = held_from.elapsed().as_secs_f64();
    disk.knobs().release();
    for c in &mut writers {
        assert!(c.wait().unwrap().success());
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let slow = wait_slow_records(&daemon, &disk.name, 8, |s| {
        Pick::Comm("blkobs-tagwait").matches(s)
    });
    assert_eq!(slow.len(), 8, "{slow:?}");
    let secs = |w: &Value, k: &str| w[k].as_f64().unwrap();
    let at_device = slow
        .iter()
        .filter(|w| secs(w, "device_seconds") >= hold)
        .count();
    let waited = slow
        .iter()
        .filter(|w| secs(w, "queue_seconds") >= hold)
        .count();
    assert_eq!((at_device, waited), (4, 4), "{slow:?}");
    for w in &slow {
        let total = secs(w, "total_seconds");
        assert!(
            total >= hold && total <= elapsed,
            "total {total} s: hold {hold} s, elapsed {elapsed} s: {w}"
        );
    }
    let after = lost_untracked(&daemon, &disk.name);
    assert_eq!(after, before, "(lost, untracked) changed");
}

/// The daemon reads `INFLIGHT_SLOTS` (16384 slots) through a read-only mapping on every scrape
/// and `/inflight`: that read must return exactly the claimed slots that reading every slot one
/// by one with the bpf syscall returns (keys and values), on every kernel of the matrix.
#[test]
fn slot_array_mapped_read_equals_one_by_one() {
    use aya::maps::{Array, IterableMap, Map, MapData};
    use observer::bpf::batch::SlotView;
    use observer_common::maps::{Inflight, Slot, SLOTS};
    if !require_root("slot_array_mapped_read_equals_one_by_one") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let dev = LoopDev::new(64, "none");
    dev.write_direct(0, 64);
    quiesce(&dev.name);
    let slots: Array<MapData, Slot<Inflight>> =
        Array::try_from(Map::Array(daemon_map(&daemon, "INFLIGHT_SLOTS"))).unwrap();
    // Only the test device's slots: other disks (the machine's own) claim slots meanwhile.
    let view = SlotView::<Inflight>::new(IterableMap::map(&slots)).unwrap();
    let mapped: Vec<(u64, u64, u32)> = view
        .read()
        .into_iter()
        .map(|(k, v)| (k, v.enter_ns, v.dev))
        .filter(|(_, _, d)| *d == dev.kdev())
        .collect();
    let mut one: Vec<(u64, u64, u32)> = (0..SLOTS)
        .map(|i| slots.get(&i, 0).unwrap())
        .filter(|s| s.key != 0)
        .map(|s| (s.key, s.value.enter_ns, s.value.dev))
        .filter(|(_, _, d)| *d == dev.kdev())
        .collect();
    let mut sorted = mapped.clone();
    sorted.sort();
    one.sort();
    assert!(!one.is_empty(), "no slot of the test device claimed");
    assert_eq!(
        sorted, one,
        "mapped read vs one-by-one read of INFLIGHT_SLOTS"
    );
    drop(daemon);
}

/// Bios hold a `BIO_SLOTS` slot only while they wait for a request: with `nr_requests` 4 and
/// 16 fio jobs writing, bios of the test device are seen holding slots mid-run;
/// once the device is quiet none holds one, no `BIO_QUEUED` entry of it is left, no slot's
/// claim count leaked (a free slot with claims ≠ 0 would be lost for good), nothing was
/// dropped, and the writes counted equal diskstats' (at least fio's own count).
#[test]
fn bio_slots_are_given_back() {
    use aya::maps::{Array, HashMap, IterableMap, Map, MapData};
    use observer::bpf::batch::SlotView;
    use observer_common::maps::{BioQueued, Slot, SLOTS};
    if !require_root("bio_slots_are_given_back") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let dev = LoopDev::new(256, "mq-deadline");
    dev.set_queue("nr_requests", "4");
    quiesce(&dev.name);
    let slots: Array<MapData, Slot<BioQueued>> =
        Array::try_from(Map::Array(daemon_map(&daemon, "BIO_SLOTS"))).unwrap();
    let hash: HashMap<MapData, u64, BioQueued> =
        HashMap::try_from(Map::HashMap(daemon_map(&daemon, "BIO_QUEUED"))).unwrap();
    let read_slots = || -> Vec<(u32, Slot<BioQueued>)> {
        (0..SLOTS).map(|i| (i, slots.get(&i, 0).unwrap())).collect()
    };
    let held_by_test_dev = |all: &[(u32, Slot<BioQueued>)]| {
        all.iter()
            .filter(|(_, s)| s.key != 0 && s.value.dev == dev.kdev())
            .count()
    };
    let dropped = |d: &Daemon| {
        d.scrape().sum(
            "blkobs_dropped_requests_total",
            &[("reason", "bio_queue_map_full")],
        )
    };
    let dropped_before = dropped(&daemon);
    let writes_counted = |d: &Daemon| {
        d.scrape().sum(
            "blkobs_requests_total",
            &[("device", dev.name.as_str()), ("op", "write")],
        )
    };
    let counted_before = writes_counted(&daemon);
    let before = diskstats(&dev.name);
    let path = dev.path.clone();
    let load = std::thread::spawn(move || {
        fio(&[
            "--name=tagwait",
            &format!("--filename={path}"),
            "--rw=randwrite",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=4",
            "--numjobs=16",
            "--group_reporting",
            "--runtime=4",
            "--time_based",
        ])
    });
    // Mid-run: 16 submitters, 4 tags: a dozen sleep in io_submit, each with a bio that
    // holds a slot while it waits (sampled through the daemon's mapped read), every 50 ms for
    // as long as fio runs: its 16 jobs may take seconds to start under TCG (a fixed 2 s of
    // sampling saw none on 6.1 once, with two guests on two cores).
    let view = SlotView::<BioQueued>::new(IterableMap::map(&slots)).unwrap();
    let mut most = 0;
    while !load.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
        let held = view
            .read()
            .iter()
            .filter(|(_, b)| b.dev == dev.kdev())
            .count();
        most = most.max(held);
    }
    let out = load.join().unwrap();
    quiesce(&dev.name);
    eprintln!("bios of the test device holding a slot mid-run: at most {most}");
    assert!(
        most >= 8,
        "at most {most} bios of the test device held a slot while 16 writers shared 4 tags"
    );
    let after = read_slots();
    assert_eq!(
        held_by_test_dev(&after),
        0,
        "slots still held by the test device's bios"
    );
    // A free slot with claims ≠ 0 is a claim never taken back; on the machine's own disk a
    // claim may be in progress, so only what persists across two reads counts.
    std::thread::sleep(Duration::from_millis(200));
    let again = read_slots();
    let leaked: Vec<u32> = after
        .iter()
        .zip(&again)
        .filter(|((_, a), (_, b))| a.key == 0 && a.claims != 0 && b.key == 0 && b.claims != 0)
        .map(|((i, _), _)| *i)
        .collect();
    assert!(
        leaked.is_empty(),
        "free slots with leaked claims: {leaked:?}"
    );
    assert!(
        again.iter().all(|(_, s)| s.key == 0 || s.claims >= 1),
        "a held slot without its holder's claim"
    );
    let left = hash
        .iter()
        .filter_map(Result::ok)
        .filter(|(_, b)| b.dev == dev.kdev())
        .count();
    assert_eq!(left, 0, "BIO_QUEUED entries of the test device left");
    assert_eq!(dropped(&daemon), dropped_before, "bio entries dropped");
    let now = diskstats(&dev.name);
    let writes = now.writes - before.writes;
    // fio's own count: requests plus the writes merged into them (random 4 KiB writes
    // sometimes land next to a queued one).
    let merged = now.writes_merged - before.writes_merged;
    let ios = out["jobs"][0]["write"]["total_ios"].as_f64().unwrap();
    let counted = writes_counted(&daemon) - counted_before;
    assert!(
        ios > 0.0 && (writes + merged) as f64 >= ios,
        "fio {ios} writes, diskstats {writes} + {merged} merged"
    );
    assert_eq!(counted, writes as f64, "writes counted vs diskstats");
}

/// The daemon reads `CLASS_STATS` (a per-CPU hash: 6,832 bytes per CPU per entry) with a few
/// `BPF_MAP_LOOKUP_BATCH` calls per scrape instead of two syscalls per entry: that read must
/// return exactly what aya's per-entry read returns (keys, and every CPU's value, byte for
/// byte), with the daemon's buffer and with one so small that every call must grow it (a
/// bucket holding more entries than asked for: `ENOSPC`), on every kernel of the matrix.
#[test]
fn class_stats_batched_read_equals_per_entry() {
    use aya::maps::{Map, MapData, PerCpuHashMap};
    use observer::bpf::batch::{batch_percpu_hash, PERCPU_BATCH_BYTES};
    use observer_common::maps::{ClassKey, ClassStats};
    if !require_root("class_stats_batched_read_equals_per_entry") {
        return;
    }
    let daemon = DAEMON.get(|| Daemon::start(&[]));
    let dev = LoopDev::new(64, "mq-deadline");
    // Several classes (reads, sync writes, flushes, readahead), submitted from two CPUs.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    for cpu in (0..cpus).map(|c| c.to_string()) {
        run_ok(Command::new("taskset").args([
            "-c",
            &cpu,
            "fio",
            "--name=classes",
            &format!("--filename=/dev/{}", dev.name),
            "--rw=randrw",
            "--bs=4k",
            "--direct=1",
            "--fsync=4",
            "--size=8m",
            "--ioengine=psync",
            "--output=/dev/null",
        ]));
        run_ok(Command::new("taskset").args([
            "-c",
            &cpu,
            "dd",
            &format!("if=/dev/{}", dev.name),
            "of=/dev/null",
            "bs=64k",
            "count=64",
            "status=none",
        ]));
    }
    quiesce(&dev.name);
    let map: PerCpuHashMap<MapData, ClassKey, ClassStats> =
        PerCpuHashMap::try_from(Map::PerCpuHashMap(daemon_map(&daemon, "CLASS_STATS"))).unwrap();
    fn bytes(v: &ClassStats) -> Vec<u8> {
        // SAFETY: ClassStats is plain data (Pod): repr(C), only u64s.
        unsafe {
            std::slice::from_raw_parts(
                (v as *const ClassStats).cast::<u8>(),
                std::mem::size_of::<ClassStats>(),
            )
        }
        .to_vec()
    }
    // Only the test device's entries: other disks (the machine's own) count meanwhile.
    let mine = |v: Vec<(ClassKey, Vec<Vec<u8>>)>| {
        let mut v: Vec<_> = v.into_iter().filter(|(k, _)| k.dev == dev.kdev()).collect();
        v.sort_by_key(|(k, _)| *k);
        v
    };
    let batched = |budget: usize| {
        mine(
            batch_percpu_hash(&map, budget, |_| Vec::new(), |v, s| v.push(bytes(s)))
                .expect("BPF_MAP_LOOKUP_BATCH on a per-CPU hash map (Linux 5.6+)"),
        )
    };
    let per_entry = || {
        mine(
            map.iter()
                .map(Result::unwrap)
                .map(|(k, v)| (k, v.iter().map(bytes).collect()))
                .collect(),
        )
    };
    // Equal reads before and after: nothing (udev's probe after the close) counted in between.
    let (one, big, small) = (0..5)
        .find_map(|_| {
            let one = per_entry();
            let big = batched(PERCPU_BATCH_BYTES);
            let small = batched(1);
            (per_entry() == one).then_some((one, big, small))
        })
        .expect("the test device's CLASS_STATS entries kept changing");
    let cpus = aya::util::nr_cpus().unwrap();
    assert!(
        one.len() >= 3,
        "too few classes on the test device: {}",
        one.len()
    );
    assert!(one.iter().all(|(_, v)| v.len() == cpus));
    let requests = |v: &[(ClassKey, Vec<Vec<u8>>)]| -> u64 {
        v.iter()
            .flat_map(|(_, cpus)| cpus.iter())
            .map(|b| {
                // SAFETY: b holds one ClassStats (bytes() above).
                unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<ClassStats>()) }.requests
            })
            .sum()
    };
    assert!(requests(&one) > 0, "no requests counted on the test device");
    assert!(
        big == one,
        "batched read (daemon's buffer) vs per-entry read of CLASS_STATS"
    );
    assert!(
        small == one,
        "batched read (growing buffer) vs per-entry read of CLASS_STATS"
    );
    drop(daemon);
}
