//! /stalls, /inflight, /histograms against known injected delays: a FUSE file that sleeps on
//! writes backs a loop device, so the device latency is known independently of the observer.

mod support;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use serde_json::Value;
use support::*;

/// The device latency of every write equals ftrace's dispatch-to-completion time of that
/// request, contains the FUSE server's own time for it, and recovers the injected delay within
/// 5 % + 3 ms (median); the submitter of fsync'ed writes is the process that wrote them.
#[test]
fn injected_delay_and_submitter() {
    if !require_root("injected_delay_and_submitter") {
        return;
    }
    let disk = SlowDisk::new(64, "none");
    quiesce(&disk.name);
    let delay = Duration::from_millis(150);
    disk.mount.set_write_delay(delay);
    // Witnesses of each request's device stage (btt D2C): its block_rq_issue and
    // block_rq_complete on the mono clock, the programs' own, in two ftrace instances, one
    // enabled before the daemon attaches its programs and one after. A tracepoint runs its
    // probes in the order they were registered (kernel/tracepoint.c tracepoint_add_func, equal
    // priorities), so each hit reads the clock in `before`, then in the programs, then in
    // `after`: the programs' D2C lies between `before`'s complete − `after`'s issue and
    // `after`'s complete − `before`'s issue, however long an interrupt or (in the TCG guests)
    // a descheduled vCPU holds a hit between its probes.
    let kdevs = [disk.kdev()];
    let spec = || FtraceSpec {
        events: &["block_rq_issue", "block_rq_complete"],
        kdevs: &kdevs,
        mono: true,
        ..Default::default()
    };
    let before = Ftrace::start("d2c-before", spec());
    let daemon = Daemon::start(&[]);
    let after = Ftrace::start("d2c-after", spec());
    let dd = named_dd("blkobs-fsyncer");
    let mut child = Command::new(&dd)
        .args([
            "if=/dev/zero",
            &format!("of={}", disk.path),
            "bs=4k",
            "count=6",
            "seek=100",
            "oflag=direct",
            "conv=fsync",
            "status=none",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    let (early, late) = (before.stop(), after.stop());
    // An instance's time (ns) of `event` for the write request at `sector`: its (only)
    // dispatch or completion.
    let at = |events: &[TraceEvent], event: &str, sector: u64| {
        let t: Vec<u64> = events
            .iter()
            .filter(|e| e.event == event && e.rwbs().contains('W'))
            .filter(|e| e.range().is_some_and(|(s, _)| s == sector))
            .map(|e| e.t_ns)
            .collect();
        assert_eq!(t.len(), 1, "{event} of the write at sector {sector}: {t:?}");
        t[0]
    };
    // The bounds (s) of the programs' D2C of the write at `sector`, and `after`'s own D2C.
    let d2c = |sector: u64| {
        let s = |a: u64, b: u64| a.saturating_sub(b) as f64 / 1e9;
        let (c0, c1) = (
            at(&early, "block_rq_complete", sector),
            at(&late, "block_rq_complete", sector),
        );
        let (d0, d1) = (
            at(&early, "block_rq_issue", sector),
            at(&late, "block_rq_issue", sector),
        );
        (s(c0, d1), s(c1, d0), s(c1, d1))
    };
    let v = json(
        &daemon,
        &format!("/stalls?device={}&format=json&limit=100", disk.name),
    );
    let mine = slow_where(&v, |s| s["submitter"]["comm"] == "blkobs-fsyncer");
    let writes: Vec<&Value> = mine.iter().filter(|s| s["op"] == "write").collect();
    // dd count=6 oflag=direct: exactly six 4 KiB write requests, each held 150 ms.
    assert_eq!(
        writes.len(),
        6,
        "expected exactly 6 slow writes by blkobs-fsyncer: {v}"
    );
    let want = delay.as_secs_f64();
    let served = disk.knobs().served.lock().unwrap().clone();
    let mut devs = Vec::new();
    let mut gaps = Vec::new();
    for w in &writes {
        assert_eq!(w["submitter"]["pid"], pid, "{w}");
        let dev = w["device_seconds"].as_f64().unwrap();
        // Witness 1: ftrace's D2C of the same request, from the instances around the programs'
        // probes: each write's inside their bracket, and the median near its low end (below). (It was held to `after` alone within 1 ms per write: an interrupt, the ring
        // buffer's wakeup or a descheduled TCG vCPU between the probes widened one write's gap
        // to −110 µs once in CI and to −2.2 to −3.6 ms in guests running this test side by
        // side.) It replaces a bound on the loop driver's and FUSE's hand-over (≤ 30 ms), which
        // depended on the machine's load (24 ms once).
        let sector = w["sector"].as_u64().unwrap();
        let (lo, hi, traced) = d2c(sector);
        eprintln!(
            "write at sector {sector}: device {dev:.6} s, ftrace D2C {traced:.6} s ({:+.1} µs), \
             between the instances' [{lo:.6}, {hi:.6}] s",
            (dev - traced) * 1e6
        );
        // 1 µs for the seconds' float rounding.
        assert!(
            dev >= lo - 1e-6 && dev <= hi + 1e-6,
            "device latency {dev} s outside the ftrace instances' bracket [{lo}, {hi}] s"
        );
        gaps.push(dev - lo);
        // Witness 2: the FUSE server's own time for the write at this offset, which the device
        // stage contains.
        let offset = sector * 512;
        let server = served
            .iter()
            .find(|(o, _)| *o == offset)
            .unwrap_or_else(|| panic!("no FUSE write at {offset}"))
            .1
            .as_secs_f64();
        assert!(
            dev >= server,
            "device latency {dev} s vs {server} s in the FUSE server"
        );
        let total = w["total_seconds"].as_f64().unwrap();
        let queue = w["queue_seconds"].as_f64().unwrap();
        assert!((queue + dev - total).abs() < 1e-6);
        assert_eq!(w["bytes"], 4096);
        assert_eq!(w["device"], disk.name.as_str());
        devs.push(dev);
    }
    // The programs read the clock first: the median write is within 100 µs of the bracket's
    // low end (`before`'s probes to the programs' at the completion, the programs' to
    // `after`'s at the dispatch: 4 µs on the host, 20–30 µs in the TCG guests). Its high end
    // also holds the rest of the completion program and the slow event's wakeup (the
    // ring buffer's interrupt), 40 µs on the host and up to 3.8 ms in the guests.
    gaps.sort_by(f64::total_cmp);
    let gap = gaps[gaps.len() / 2];
    assert!(
        gap < 100e-6,
        "median (device latency − the bracket's low end) {gap} s over the writes: {gaps:?}"
    );
    // Witness 3: the injected delay, recovered within 5 % + 3 ms (median of the writes).
    devs.sort_by(f64::total_cmp);
    let median = devs[devs.len() / 2];
    assert!(
        median >= want && median <= want * 1.05 + 0.003,
        "median device latency {median} s vs injected {want} s"
    );
    // The histograms endpoint agrees: device-stage p50 of these writes ≈ the delay.
    let h = json(&daemon, &format!("/histograms?device={}", disk.name));
    let dev_hist = h["histograms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["op"] == "write" && x["stage"] == "device" && x["count"].as_u64().unwrap() >= 6)
        .expect("device-stage histogram of writes");
    let p50 = dev_hist["p50"].as_f64().unwrap();
    assert!((p50 - want).abs() <= want * 0.13, "p50 {p50} vs {want}");
    // Prometheus: slow-request counter.
    let m = daemon.scrape();
    assert_eq!(
        m.sum(
            "blkobs_slow_requests_total",
            &[("device", &disk.name), ("op", "write")]
        ),
        6.0,
        "slow writes counted on {}",
        disk.name
    );

    // The CLI clients of the same daemon print what its API holds: `observer stalls --id` one
    // slow write by the id its record (and its exemplar) carries, the table all six, and
    // `observer report` the device-stage rows of /histograms over the same window, in µs.
    let url = format!("http://{}", daemon.addr);
    let cli = |args: &[&str]| -> String {
        let out = Command::new(observer_bin())
            .args(args)
            .args(["--url", &url])
            .output()
            .expect("running observer");
        assert!(
            out.status.success(),
            "observer {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let first = writes[0];
    let id = first["id"].as_str().expect("a slow record's id");
    let one: Value = serde_json::from_str(&cli(&["stalls", "--id", id, "--json"])).unwrap();
    let got = slow_where(&one, |_| true);
    assert_eq!(got.len(), 1, "observer stalls --id {id}: {one}");
    assert_eq!(got[0]["sector"], first["sector"], "{one}");
    assert_eq!(got[0]["device_seconds"], first["device_seconds"], "{one}");
    let table = cli(&["stalls", "--device", &disk.name]);
    assert_eq!(
        table
            .lines()
            .filter(|l| l.contains("blkobs-fsyncer"))
            .count(),
        6,
        "observer stalls --device {}:\n{table}",
        disk.name
    );
    let report = cli(&["report", "--device", &disk.name, "--since", "60s"]);
    let api = json(
        &daemon,
        &format!("/histograms?device={}&since=60s", disk.name),
    );
    let field = |line: &str, key: &str| -> f64 {
        let v = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in {line:?}"));
        v.trim_end_matches("us").parse().unwrap()
    };
    let mut rows = 0;
    for h in api["histograms"].as_array().unwrap() {
        if h["op"] != "write" || h["stage"] != "device" {
            continue;
        }
        let head = format!(
            "{} write [{}] stage=device ",
            disk.name,
            h["rwbs"].as_str().unwrap()
        );
        let line = report
            .lines()
            .find(|l| l.starts_with(&head))
            .unwrap_or_else(|| panic!("no {head:?} row in observer report:\n{report}"));
        assert_eq!(
            field(line, "count="),
            h["count"].as_f64().unwrap(),
            "{line}"
        );
        let p50_us = h["p50"].as_f64().unwrap() * 1e6;
        assert!(
            (field(line, "p50=") - p50_us).abs() <= 0.051,
            "{line} vs {p50_us} µs"
        );
        if h["count"].as_u64().unwrap() >= 6 {
            assert!((p50_us / 1e6 - want).abs() <= want * 0.13, "{line}");
        }
        rows += 1;
    }
    assert!(rows >= 1, "no device-stage write histogram in {api}");
}

/// A write held by the device is stuck at the device with a growing age, an ongoing device
/// stall is reported while it is held, and once released it is a slow request and an ended
/// episode.
#[test]
fn stuck_request_then_slow() {
    if !require_root("stuck_request_then_slow") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let disk = SlowDisk::new(64, "mq-deadline");
    // The ended episode is the programs' (observer-ebpf stall.rs): only with the disk's slot.
    wait_tracked(&daemon, &disk.name);
    quiesce(&disk.name);
    let dd = named_dd("blkobs-stuckwr");
    let mut child = disk.hold_write(|| {
        Command::new(&dd)
            .args([
                "if=/dev/zero",
                &format!("of={}", disk.path),
                "bs=4k",
                "count=1",
                "seek=7",
                "oflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(600));

    let inflight = json(&daemon, &format!("/inflight?device={}", disk.name));
    let reqs = inflight["requests"].as_array().unwrap();
    let held = reqs
        .iter()
        .find(|r| r["submitter"]["comm"] == "blkobs-stuckwr")
        .unwrap_or_else(|| panic!("{inflight}"));
    assert_eq!(held["stage"], "device");
    let age1 = held["age_seconds"].as_f64().unwrap();
    assert!(age1 >= 0.55, "age {age1}");

    let v = json(
        &daemon,
        &format!("/stalls?device={}&format=json", disk.name),
    );
    let stuck = v["stuck"].as_array().unwrap();
    assert!(
        stuck
            .iter()
            .any(|s| s["submitter"]["comm"] == "blkobs-stuckwr" && s["stage"] == "device"),
        "{v}"
    );
    let ongoing = v["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ongoing"] == true && e["kind"] == "device");
    let ongoing = ongoing.unwrap_or_else(|| panic!("no ongoing device stall: {v}"));
    assert!(ongoing["waiting"].as_u64().unwrap() >= 1);
    // Prometheus: the alerting gauge sees it.
    let m = daemon.scrape();
    assert!(
        m.sum(
            "blkobs_oldest_inflight_age_seconds",
            &[("device", &disk.name), ("stage", "device")]
        ) >= 0.55
    );
    let text = daemon
        .get(&format!("/stalls?device={}", disk.name))
        .unwrap()
        .1;
    assert!(
        text.contains("STUCK NOW") && text.contains("blkobs-stuckwr") && text.contains("ONGOING"),
        "{text}"
    );

    std::thread::sleep(Duration::from_millis(500));
    let inflight = json(&daemon, &format!("/inflight?device={}", disk.name));
    let age2 = inflight["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["submitter"]["comm"] == "blkobs-stuckwr")
        .unwrap()["age_seconds"]
        .as_f64()
        .unwrap();
    assert!(age2 >= age1 + 0.4, "age did not grow: {age1} -> {age2}");

    disk.knobs().release();
    assert!(child.wait().unwrap().success());
    // The episode ends at the daemon's next look at the disk's stall state (its tick): wait
    // for it (up to 5 s) rather than for a fixed time.
    let ended_device = |v: &Value| {
        v["episodes"].as_array().is_some_and(|a| {
            a.iter()
                .any(|e| e["ongoing"] == false && e["kind"] == "device")
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let v = loop {
        let v = json(
            &daemon,
            &format!("/stalls?device={}&format=json", disk.name),
        );
        if ended_device(&v) || std::time::Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let slow = slow_where(&v, |s| s["submitter"]["comm"] == "blkobs-stuckwr");
    assert_eq!(slow.len(), 1, "{v}");
    assert!(
        slow[0]["device_seconds"].as_f64().unwrap() >= age2,
        "{}",
        slow[0]
    );
    assert!(v["stuck"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["submitter"]["comm"] != "blkobs-stuckwr"));
    let ended = v["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ongoing"] == false && e["kind"] == "device");
    let ended = ended.unwrap_or_else(|| panic!("no ended device stall: {v}"));
    assert!(ended["duration_seconds"].as_f64().unwrap() >= age2 - 0.01);
    assert!(ended["waiting"].as_u64().unwrap() >= 1);
    let m = daemon.scrape();
    assert!(
        m.sum(
            "blkobs_stall_episodes_total",
            &[("device", &disk.name), ("kind", "device")]
        ) >= 1.0
    );
    assert!(
        m.sum(
            "blkobs_stall_seconds_total",
            &[("device", &disk.name), ("kind", "device")]
        ) >= age2 - 0.01
    );
}

/// Requests held in the I/O scheduler because the driver has no free tag are queue time
/// (btt I2D), not device time. A held write on the FUSE backing store blocks the loop worker,
/// so exactly `nr_tags` requests sit at the driver; `nr_tags + 8` concurrent direct writes
/// leave exactly 8 in mq-deadline until the hold is released. Witnesses: the driver's tag
/// count (sysfs `mq/*/nr_tags`), the FUSE server holding the first write, and the hold's own
/// duration. (/proc/diskstats in_flight cannot tell the two apart: on 6.18 it counts requests
/// from block_io_start, older kernels only dispatched ones.)
#[test]
fn scheduler_held_requests_are_queue_time() {
    if !require_root("scheduler_held_requests_are_queue_time") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let disk = SlowDisk::new(64, "mq-deadline");
    disk.set_queue("nomerges", "2");
    quiesce(&disk.name);
    let tags: u64 = std::fs::read_dir(format!("/sys/block/{}/mq", disk.name))
        .unwrap()
        .map(|q| {
            let q = q.unwrap().path().join("nr_tags");
            std::fs::read_to_string(q)
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    const HELD: u64 = 8;
    let n = tags + HELD;
    let queued = |v: &Value| {
        v["requests"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["stage"] == "queue")
            .count() as u64
    };
    // Wait until every write is submitted: `tags` at the driver, the rest in the scheduler.
    let mut fio = disk.hold_write_until(
        || {
            Command::new("fio")
                .args([
                    "--name=blkobs-held",
                    &format!("--filename={}", disk.path),
                    "--rw=randwrite",
                    "--bs=4k",
                    "--direct=1",
                    "--ioengine=libaio",
                    &format!("--iodepth={n}"),
                    &format!("--iodepth_batch_submit={n}"),
                    &format!("--size={}k", 4 * n),
                    "--output=/dev/null",
                ])
                .spawn()
                .unwrap()
        },
        Duration::from_millis(20),
        Duration::from_secs(20),
        |_| {
            let v = json(
                &daemon,
                &format!("/inflight?device={}&limit=100000", disk.name),
            );
            if diskstats(&disk.name).in_flight >= tags && queued(&v) == HELD {
                return Ok(());
            }
            Err(format!(
                "not {tags} dispatched + {HELD} queued: diskstats in_flight {}, {v}",
                diskstats(&disk.name).in_flight
            ))
        },
    );
    let held_from = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let v = json(
        &daemon,
        &format!("/inflight?device={}&limit=100000", disk.name),
    );
    assert_eq!(queued(&v), HELD, "{v}");
    let at_device = v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["stage"] == "device")
        .count() as u64;
    assert_eq!(at_device, tags, "{v}");
    let hold = held_from.elapsed().as_secs_f64();
    disk.knobs().release();
    assert!(fio.wait().unwrap().success());
    std::thread::sleep(Duration::from_millis(300));
    let v = json(
        &daemon,
        &format!("/stalls?device={}&format=json&limit=5000", disk.name),
    );
    let queue_held = slow_where(&v, |w| w["queue_seconds"].as_f64().unwrap() >= hold);
    assert_eq!(queue_held.len() as u64, HELD, "{v}");
    for w in &queue_held {
        let q = w["queue_seconds"].as_f64().unwrap();
        let d = w["device_seconds"].as_f64().unwrap();
        assert!(
            d < q / 10.0,
            "held write should be queue time: queue {q} device {d}"
        );
    }
    let device_held =
        slow_where(&v, |w| w["device_seconds"].as_f64().unwrap() >= hold).len() as u64;
    assert_eq!(device_held, tags, "{v}");
}

/// The OpenAPI document, validated against the real responses by schemathesis (PyPI), with
/// traffic on a slow device so the lists are not empty.
#[test]
fn openapi_matches_real_responses() {
    if !require_root("openapi_matches_real_responses") {
        return;
    }
    let venv = "/opt/blkobs-tools/venv/bin/st";
    let st = if std::path::Path::new(venv).is_file() {
        Some(venv)
    } else {
        ["schemathesis", "st"]
            .into_iter()
            .find(|t| which(t).is_some())
    };
    let Some(st) = st else {
        skip("schemathesis is not installed: run scripts/provision.sh");
        return;
    };
    // The longest request target allowed: the fuzzer's long invalid queries (2,342 bytes seen)
    // must be judged by their parameters (400), not cut off as too long (414, which
    // schemathesis does not count as a rejection: ST201). The limit has its own test.
    let dir = TempDir::new("blkobs-openapi");
    let cfg = dir.join("observer.toml");
    std::fs::write(&cfg, "[http]\nmax_uri_bytes = 65534\n").unwrap();
    let daemon = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let disk = SlowDisk::new(64, "none");
    disk.mount.set_write_delay(Duration::from_millis(120));
    let mut writer = Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", disk.path),
            "bs=4k",
            "count=30",
            "oflag=direct",
            "status=none",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let out = Command::new(st)
        .args([
            "run",
            &format!("http://{}/openapi.yaml", daemon.addr),
            "--checks",
            "all",
            "--max-examples",
            "25",
        ])
        .env("SCHEMATHESIS_TELEMETRY", "false")
        .current_dir(std::env::temp_dir()) // its cache directory stays out of the source tree
        .output()
        .unwrap();
    let _ = writer.kill();
    let _ = writer.wait();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found problems:\n{text}");
}
