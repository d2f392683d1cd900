//! Runs for months: the daemon under load and churn for `BLKOBS_SOAK_SECONDS` (default 60 s in
//! the suite; `cargo xtask soak --minutes N` for the long form). Two surviving disks (XFS with
//! mq-deadline, ext4 with none) take fio random direct I/O and fsynced small writes the whole
//! time while a churn thread attaches and detaches loop devices (every other one with a
//! partition table, `losetup -P`), switches their scheduler, makes, mounts and unmounts ext4 on
//! every fifth; SIGHUP every 3 s; `/metrics` scraped every second and `/stalls`, `/inflight`,
//! `/histograms` polled concurrently.
//!
//! Asserted at the end: completed requests per op equal /proc/diskstats deltas on the
//! survivors, none untracked there and every lost completion explained (support/witness.rs,
//! `Pid1Completions`); every scrape and poll answered 200; in runs of 5 minutes or more, RSS
//! within 5 % between the end of warm-up (a third of the run, at most 2 minutes) and the end
//! (medians of 30 s of samples at each end; printed always); open fds and threads within the
//! jitter of what is in flight (+4, +2);
//! churned disks that went away have left `/metrics` (`forget_after` = 2 s); at least 50 churn
//! cycles. Then SIGTERM: exit 0 and every BPF program, map and link the daemon held (ids from
//! its /proc fdinfo) gone; the same after `kill -9`; and a restart comes up healthy.

mod support;

use std::{
    collections::BTreeSet,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use support::*;

/// The BPF objects a process holds, as ("prog" | "map" | "link", id), from /proc/PID/fdinfo.
fn bpf_ids(pid: u32) -> BTreeSet<(&'static str, u32)> {
    let mut ids = BTreeSet::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        for (key, kind) in [
            ("prog_id:", "prog"),
            ("map_id:", "map"),
            ("link_id:", "link"),
        ] {
            if let Some(v) = text
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse().ok())
            {
                ids.insert((kind, v));
            }
        }
    }
    ids
}

/// The ids of `ids` that still exist in the kernel (`bpftool <kind> show id N` succeeds).
fn still_alive(ids: &BTreeSet<(&'static str, u32)>) -> Vec<(&'static str, u32)> {
    ids.iter()
        .filter(|(kind, id)| {
            std::process::Command::new("bpftool")
                .args([kind, "show", "id", &id.to_string()])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .copied()
        .collect()
}

/// (VmRSS in KiB, threads, open fds) of a process.
fn resources(pid: u32) -> (u64, u64, usize) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |k: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count();
    (field("VmRSS:"), field("Threads:"), fds)
}

/// Repeats `f` every `every` until `stop`.
fn every(
    stop: &Arc<AtomicBool>,
    every: Duration,
    mut f: impl FnMut() + Send + 'static,
) -> thread::JoinHandle<()> {
    let stop = stop.clone();
    thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            f();
            thread::sleep(every);
        }
    })
}

#[test]
fn soak_under_load_churn_reloads_and_scrapes() {
    if !require_root_and(&["fio", "mkfs.xfs", "mkfs.ext4", "bpftool", "sfdisk"]) {
        return;
    }
    let seconds: u64 = std::env::var("BLKOBS_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let warmup = Duration::from_secs((seconds / 3).min(120));
    let dir = TempDir::new("blkobs-soak");
    let cfg = dir.join("observer.toml");
    std::fs::write(&cfg, "[devices]\nforget_after = \"2s\"\n").unwrap();
    let mut daemon = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let pid = daemon.pid();
    let held = bpf_ids(pid);
    for kind in ["prog", "map", "link"] {
        assert!(
            held.iter().any(|(k, _)| *k == kind),
            "no BPF {kind} in the daemon's fdinfo: {held:?}"
        );
    }

    let xfs = LoopDev::new(320, "mq-deadline");
    let ext4 = LoopDev::new(160, "none");
    let mut mx = Mount::new(&xfs, &["mkfs.xfs", "-f", "-q"]);
    let mut me = Mount::new(&ext4, &mkfs_ext4(&[]));
    let survivors = [&xfs, &ext4];
    for d in survivors {
        quiesce(&d.name);
    }
    let (before, d0) = scrape_between_equal_diskstats(&daemon, &survivors);
    let pid1 = Pid1Completions::start(&[xfs.kdev(), ext4.kdev()]);

    let stop = Arc::new(AtomicBool::new(false));
    let mut fio = Vec::new();
    for m in [&mx, &me] {
        let dir = format!("--directory={}", m.dir.display());
        for job in [
            vec![
                "--name=rand",
                "--size=32M",
                "--rw=randrw",
                "--bs=4k",
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=8",
            ],
            vec![
                "--name=fsync",
                "--size=4M",
                "--rw=write",
                "--bs=4k",
                "--fsync=1",
                "--ioengine=psync",
            ],
        ] {
            let child = std::process::Command::new("fio")
                .args(&job)
                .args([
                    dir.as_str(),
                    "--time_based",
                    &format!("--runtime={seconds}"),
                    "--output=/dev/null",
                ])
                .spawn()
                .expect("fio");
            fio.push(child);
        }
    }

    // Churn: loop devices attached and detached, partitions, schedulers, ext4 made and mounted.
    let cycles = Arc::new(AtomicU64::new(0));
    let churned = Arc::new(Mutex::new(BTreeSet::new()));
    let churn = {
        let (stop, cycles, churned) = (stop.clone(), cycles.clone(), churned.clone());
        thread::spawn(move || {
            let scheds = ["none", "mq-deadline", "none", "bfq"];
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let dev = if i.is_multiple_of(2) {
                    LoopDev::partitioned(64, "none", "label: gpt\n,24M\n,\n")
                } else {
                    LoopDev::new(64, "none")
                };
                churned.lock().unwrap().insert(dev.name.clone());
                let sched = scheds[i % scheds.len()];
                let _ = std::fs::write(format!("/sys/block/{}/queue/scheduler", dev.name), sched);
                dev.write_direct((i as u64 * 7) % 1000, 8);
                if i.is_multiple_of(5) {
                    let mut m = Mount::new(&dev, &mkfs_ext4(&[]));
                    fsync_files(&m.dir, 5);
                    m.unmount();
                }
                drop(dev);
                cycles.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        })
    };

    let base = format!("http://{}", daemon.addr);
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let scrape_ms = Arc::new(Mutex::new(Vec::<u128>::new()));
    let scraper = {
        let (base, failures, scrape_ms) = (base.clone(), failures.clone(), scrape_ms.clone());
        every(&stop, Duration::from_secs(1), move || {
            let t = Instant::now();
            match http(&format!("{base}/metrics")) {
                Ok((200, _)) => scrape_ms.lock().unwrap().push(t.elapsed().as_millis()),
                other => failures
                    .lock()
                    .unwrap()
                    .push(format!("/metrics: {other:?}")),
            }
        })
    };
    let poller = {
        let (base, failures) = (base.clone(), failures.clone());
        every(&stop, Duration::from_millis(500), move || {
            for path in [
                "/stalls?format=json",
                "/inflight",
                "/histograms",
                "/devices",
            ] {
                match http(&format!("{base}{path}")) {
                    Ok((200, _)) => {}
                    other => failures
                        .lock()
                        .unwrap()
                        .push(format!("{path}: {:?}", other.map(|(s, _)| s))),
                }
            }
        })
    };
    let reloads = Arc::new(AtomicU64::new(0));
    let reloader = {
        let reloads = reloads.clone();
        every(&stop, Duration::from_secs(3), move || {
            // SAFETY: kill(2) takes no memory; the daemon outlives this thread.
            unsafe { libc::kill(pid as i32, libc::SIGHUP) };
            reloads.fetch_add(1, Ordering::Relaxed);
        })
    };

    let started = Instant::now();
    thread::sleep(warmup);
    let mut warm = resources(pid);
    // RSS every 500 ms: drift is the median of the last 30 s against the median of the 30 s
    // after warm-up (a single sample lands on a scrape's or snapshot's transient megabytes:
    // ±2.5 MiB from one sample to the next in the 7-minute soak).
    let mut rss: Vec<(Duration, u64)> = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        assert!(daemon.running(), "the daemon exited during the soak");
        rss.push((started.elapsed(), resources(pid).0));
        thread::sleep(Duration::from_millis(500));
    }
    let median_rss = |from: Duration, to: Duration| {
        let mut v: Vec<u64> = rss
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, r)| *r)
            .collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let window = Duration::from_secs(30).min(warmup);
    let end_at = Duration::from_secs(seconds);
    warm.0 = median_rss(warmup, warmup + window);
    let end_rss = median_rss(end_at - window, end_at);
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("churn thread");
    for t in [scraper, poller, reloader] {
        t.join().unwrap();
    }
    for mut f in fio {
        assert!(f.wait().unwrap().success(), "fio failed");
    }
    let mut end = resources(pid);
    end.0 = end_rss;
    mx.unmount();
    me.unmount();
    for d in survivors {
        quiesce(&d.name);
    }
    // The reaper (two passes 1 s apart) and forget_after (2 s) get their time.
    thread::sleep(Duration::from_secs(4));
    let hidden = pid1.stop();
    let (after, d1) = scrape_between_equal_diskstats(&daemon, &survivors);

    let failures = failures.lock().unwrap().clone();
    let mut ms = scrape_ms.lock().unwrap().clone();
    ms.sort_unstable();
    let p99 = ms.get(ms.len() * 99 / 100).copied().unwrap_or(0);
    let cycles = cycles.load(Ordering::Relaxed);
    eprintln!(
        "{seconds} s: {cycles} churn cycles, {} reloads, {} scrapes (p99 {p99} ms, max {} ms), \
         RSS {} -> {} KiB, threads {} -> {}, fds {} -> {}",
        reloads.load(Ordering::Relaxed),
        ms.len(),
        ms.last().copied().unwrap_or(0),
        warm.0,
        end.0,
        warm.1,
        end.1,
        warm.2,
        end.2
    );
    assert!(failures.is_empty(), "requests failed: {failures:?}");
    assert!(cycles >= 50, "only {cycles} churn cycles");
    assert!(ms.len() as u64 >= seconds / 2, "only {} scrapes", ms.len());

    for ((d, k0), k1) in survivors.iter().zip(&d0).zip(&d1) {
        let n = d.name.as_str();
        let ours = |op: &str| {
            after.sum("blkobs_requests_total", &[("device", n), ("op", op)])
                - before.sum("blkobs_requests_total", &[("device", n), ("op", op)])
        };
        let got = (
            ours("read"),
            ours("write") + ours("write_zeroes"),
            ours("flush"),
            ours("discard"),
        );
        let want = (
            (k1.reads - k0.reads) as f64,
            (k1.writes - k0.writes) as f64,
            (k1.flushes - k0.flushes) as f64,
            (k1.discards - k0.discards) as f64,
        );
        let delta =
            |name: &str| after.sum(name, &[("device", n)]) - before.sum(name, &[("device", n)]);
        eprintln!(
            "{n}: reads, writes, flushes, discards {got:?} vs diskstats {want:?}; lost {}, \
             untracked {}, completions on top of PID 1 {}",
            delta("blkobs_lost_completions_total"),
            delta("blkobs_untracked_completions_total"),
            Pid1Completions::of(&hidden, d.kdev())
        );
        assert_eq!(got, want, "{n}: requests per op vs /proc/diskstats");
        assert_eq!(
            delta("blkobs_untracked_completions_total"),
            0.0,
            "{n}: untracked"
        );
        let lost = delta("blkobs_lost_completions_total");
        let in_pid1 = Pid1Completions::of(&hidden, d.kdev()) as f64;
        assert!(
            lost <= in_pid1,
            "{n}: {lost} lost, {in_pid1} completions in PID 1's context"
        );
    }
    let attached = |name: &str| {
        std::fs::read_to_string(format!("/sys/block/{name}/size")).is_ok_and(|s| s.trim() != "0")
    };
    let lingering: Vec<String> = churned
        .lock()
        .unwrap()
        .iter()
        .filter(|n| !attached(n) && !survivors.iter().any(|d| &d.name == *n))
        .filter(|n| {
            after
                .select("blkobs_requests_total", &[("device", n.as_str())])
                .count()
                > 0
        })
        .cloned()
        .collect();
    assert!(
        lingering.is_empty(),
        "series of detached disks still in /metrics after forget_after: {lingering:?}"
    );
    // Threads and fds vary by a few with what is in flight at the instant (tokio's blocking
    // threads live 10 s after use, each open HTTP connection is an fd): a leak grows beyond that.
    assert!(
        end.1 <= warm.1 + 2 && end.2 <= warm.2 + 4,
        "threads {} -> {}, open fds {} -> {} after warm-up",
        warm.1,
        end.1,
        warm.2,
        end.2
    );
    // RSS: asserted in the long form only: in 1 minute the histogram windows (15 minutes of
    // snapshots, bounded) are still filling, and the 1-minute form moved +2.5 %, too close to
    // the bound for a CI gate. 10 minutes: +3.5 % (BENCHMARKS.md).
    assert!(
        seconds < 300 || (end.0 as f64) <= warm.0 as f64 * 1.05,
        "RSS grew from {} to {} KiB after warm-up",
        warm.0,
        end.0
    );

    // SIGTERM: exit 0, every BPF object the daemon held is gone.
    daemon.signal(libc::SIGTERM);
    let st = daemon
        .wait_timeout(Duration::from_secs(10))
        .expect("daemon did not stop on SIGTERM");
    assert!(st.success(), "{st}");
    let left = wait_for(Duration::from_secs(5), || {
        let l = still_alive(&held);
        l.is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "BPF objects left after SIGTERM: {:?}",
        still_alive(&held)
    );

    // kill -9: the kernel frees them with the process's fds; a restart comes up.
    let mut killed = Daemon::start(&[]);
    let held = bpf_ids(killed.pid());
    killed.signal(libc::SIGKILL);
    killed
        .wait_timeout(Duration::from_secs(10))
        .expect("killed daemon reaped");
    let left = wait_for(Duration::from_secs(5), || {
        still_alive(&held).is_empty().then_some(())
    });
    assert!(
        left.is_some(),
        "BPF objects left after kill -9: {:?}",
        still_alive(&held)
    );
    let again = Daemon::start(&[]);
    assert!(again.scrape().sum("blkobs_build_info", &[]) >= 1.0);
}

/// A slow-request flood: every request is slow (`total = "1us"`) under fio at full speed for
/// 20 s. The daemon stays responsive (`/metrics` every 0.5 s, each within 5 s; p99 printed),
/// its memory stays capped (the slow history wraps, RSS within 5 % of the value at a third of
/// the run), and every record is accounted for: the slow requests the kernel counted (all
/// devices) equal the records received plus those the full ring buffer dropped. The identity
/// is over every disk: run it alone (`--test-threads=1`, as CI and `cargo xtask soak` do), not
/// beside other tests' I/O, whose new map entries a scrape may race with.
#[test]
fn slow_request_flood_is_counted_and_capped() {
    if !require_root_and(&["fio"]) {
        return;
    }
    let dir = TempDir::new("blkobs-flood");
    let cfg = dir.join("observer.toml");
    std::fs::write(
        &cfg,
        "[stalls]\nepisode = \"1h\"\nslow_default = { total = \"1us\" }\n",
    )
    .unwrap();
    let daemon = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let pid = daemon.pid();
    let dev = LoopDev::new(256, "none");
    let seconds = 20u64;
    let mut fio = std::process::Command::new("fio")
        .args([
            "--name=flood",
            &format!("--filename={}", dev.path),
            "--rw=randrw",
            "--bs=4k",
            "--direct=1",
            "--ioengine=io_uring",
            "--iodepth=32",
            "--numjobs=2",
            "--time_based",
            &format!("--runtime={seconds}"),
            "--output=/dev/null",
        ])
        .spawn()
        .expect("fio");
    let started = Instant::now();
    let mut ms = Vec::new();
    let mut third = None;
    while started.elapsed() < Duration::from_secs(seconds) {
        let t = Instant::now();
        let (status, _) = daemon.get("/metrics").expect("scrape during the flood");
        assert_eq!(status, 200);
        let took = t.elapsed();
        // Liveness, not speed (p99 is printed): a scrape waiting on the event reader's drain
        // took 3.9 s once; it must stay far below that on a loaded 2-CPU machine.
        assert!(
            took < Duration::from_secs(5),
            "/metrics took {took:?} during the flood"
        );
        ms.push(took.as_millis());
        if third.is_none() && started.elapsed() > Duration::from_secs(seconds / 3) {
            third = Some(resources(pid).0);
        }
        thread::sleep(Duration::from_millis(500));
    }
    assert!(fio.wait().unwrap().success());
    quiesce(&dev.name);
    let end = resources(pid).0;
    ms.sort_unstable();
    let p99 = ms[ms.len() * 99 / 100];
    // The identity, on one scrape; other disks' slow completions race with the reader for a
    // moment, so a few tries.
    let mut last = String::new();
    let ok = wait_for(Duration::from_secs(10), || {
        let m = daemon.scrape();
        let slow = m.sum("blkobs_slow_requests_total", &[]);
        let received = m.sum("blkobs_events_received_total", &[("kind", "slow_request")]);
        let dropped = m.sum("blkobs_events_dropped_total", &[("reason", "ringbuf_full")]);
        let history_full = m.sum("blkobs_events_dropped_total", &[("reason", "history_full")]);
        last = format!(
            "slow {slow} = received {received} + ringbuf_full {dropped}; history_full \
             {history_full}; episodes {}",
            m.sum("blkobs_events_received_total", &[("kind", "stall_episode")])
        );
        (slow == received + dropped && history_full > 0.0).then_some(())
    });
    eprintln!(
        "flood {seconds} s: {last}; /metrics p99 {p99} ms max {} ms over {} scrapes; RSS {} -> \
         {end} KiB",
        ms.last().unwrap(),
        ms.len(),
        third.unwrap()
    );
    if ok.is_none() {
        let m = daemon.scrape();
        let per_dev: Vec<String> = m
            .select("blkobs_slow_requests_total", &[])
            .filter(|s| s.value > 0.0)
            .map(|s| format!("{:?} {}", s.labels.get("device"), s.value))
            .collect();
        panic!("records not accounted for: {last}; slow by device {per_dev:?}");
    }
    assert!(
        end as f64 <= third.unwrap() as f64 * 1.05,
        "RSS grew from {} to {end} KiB during the flood",
        third.unwrap()
    );
}
