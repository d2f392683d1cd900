//! Stacked, bio-based disks (device-mapper) against the kernel's own witnesses: a `dm-delay`
//! disk over a loop device holds every bio for a known delay, so each bio's total latency is
//! known independently of the observer; `dm-flakey` in its down interval fails every read; a
//! suspended dm disk holds a bio until it is resumed. Counts are checked against the dm disk's
//! own /proc/diskstats line and fio's; errors against the failed reads.
//!
//! The host kernel of the development machines has no dm modules: the dm tests are ignored
//! there and run in the kernel-matrix VMs (`cargo xtask vmtest`, `--include-ignored`), whose
//! init loads dm-mod, dm-delay and dm-flakey. zram, bio-based too, runs everywhere: its test
//! is not ignored (the host's kernel has it built in; the VMs load the module). The workloads are small direct I/O (4 KiB, no
//! flush): dm counts diskstats per `dm_io`, so a bio split by dm would be counted twice there
//! and queued once here, and a data-less flush counts as a write there on some kernels.

mod support;

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use support::*;

/// A device-mapper disk made with `dmsetup create`, removed (`dmsetup remove --retry`) on
/// drop. Declare it after the devices under it so that it goes first.
struct DmDev {
    /// The dm name (`dmsetup` and `/sys/block/dm-N/dm/name`).
    dm_name: String,
    /// The kernel name, `dm-N`.
    name: String,
    /// `/dev/dm-N` (devtmpfs).
    path: String,
}

impl DmDev {
    fn create(prefix: &str, table: &str) -> DmDev {
        let dm_name = unique(prefix);
        sh("dmsetup", &["create", &dm_name, "--table", table]);
        // From here on the guard removes it, whatever fails next.
        let mut d = DmDev {
            dm_name,
            name: String::new(),
            path: String::new(),
        };
        let majmin = sh(
            "dmsetup",
            &[
                "info",
                "-c",
                "--noheadings",
                "-o",
                "major,minor",
                &d.dm_name,
            ],
        );
        let majmin = majmin.trim().replace(' ', "");
        let link = std::fs::read_link(format!("/sys/dev/block/{majmin}"))
            .unwrap_or_else(|e| panic!("/sys/dev/block/{majmin}: {e}"));
        d.name = link.file_name().unwrap().to_string_lossy().into_owned();
        d.path = format!("/dev/{}", d.name);
        assert!(
            wait_for(Duration::from_secs(5), || std::path::Path::new(&d.path)
                .exists()
                .then_some(()))
            .is_some(),
            "{} did not appear",
            d.path
        );
        d
    }

    fn dmsetup(&self, verb: &str) {
        sh("dmsetup", &[verb, &self.dm_name]);
    }
}

impl Drop for DmDev {
    fn drop(&mut self) {
        // A suspended disk cannot be removed until resumed; resuming a live one is harmless.
        let _ = Command::new("dmsetup")
            .args(["resume", &self.dm_name])
            .stderr(Stdio::null())
            .status();
        let ok = wait_every(Duration::from_millis(250), Duration::from_secs(10), || {
            Command::new("dmsetup")
                .args(["remove", "--retry", &self.dm_name])
                .status()
                .is_ok_and(|s| s.success())
        });
        if !ok {
            eprintln!("could not remove dm disk {}", self.dm_name);
        }
    }
}

/// A zram disk of our own (`/sys/class/zram-control/hot_add`, after loading the module if
/// needed: in the matrix VMs from `BLKOBS_VM_MODROOT`), `size_mib` of compressed RAM; reset
/// and removed (`hot_remove`) on drop. zram is bio-based and serves bios itself, in
/// memory: a bio-based disk on any kernel, this host's included.
struct Zram {
    /// `zramN`.
    name: String,
    /// `/dev/zramN`.
    path: String,
    id: String,
}

impl Zram {
    /// None (after [`skip`]) if zram cannot be had here.
    fn new(size_mib: u64) -> Option<Zram> {
        let ctl = std::path::Path::new("/sys/class/zram-control");
        if let Some(root) = std::env::var_os("BLKOBS_VM_MODROOT") {
            // In the VMs the kernel's own module requests find nothing (the modules are in the
            // unpacked package): the compressor zram asks for (lzo-rle, or lzo before 5.1)
            // is loaded here too, else setting the disk size fails ("Cannot initialise
            // lzo-rle compressing backend", 5.10).
            let _ = Command::new("modprobe")
                .arg("-d")
                .arg(root)
                .args(["-a", "lzo-rle", "lzo", "zram"])
                .status();
        }
        if !ctl.exists() {
            let _ = Command::new("modprobe")
                .args(["zram", "num_devices=0"])
                .status();
        }
        let Ok(id) = std::fs::read_to_string(ctl.join("hot_add")) else {
            skip("no zram (module zram, /sys/class/zram-control)");
            return None;
        };
        let id = id.trim().to_string();
        let z = Zram {
            name: format!("zram{id}"),
            path: format!("/dev/zram{id}"),
            id,
        };
        std::fs::write(
            format!("/sys/block/{}/disksize", z.name),
            format!("{}", size_mib << 20),
        )
        .unwrap_or_else(|e| panic!("{} disksize: {e}", z.name));
        assert!(
            wait_for(Duration::from_secs(5), || std::path::Path::new(&z.path)
                .exists()
                .then_some(()))
            .is_some(),
            "{} did not appear",
            z.path
        );
        Some(z)
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("/sys/block/{}/reset", self.name), "1");
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", &self.id);
    }
}

/// Whether the dm target `target` is available (dmsetup targets lists it once loaded), else
/// [`skip`] (a failure under CI).
fn require_dm(target: &str) -> bool {
    if !require_root_and(&["dmsetup", "fio", "losetup"]) {
        return false;
    }
    let targets = Command::new("dmsetup").arg("targets").output();
    let listed = targets.is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(target))
    });
    require(
        listed,
        &format!("device-mapper target `{target}` not loaded (modprobe dm-{target})"),
    )
}

/// The daemon with every completed bio over 20 ms a slow-request record (its exact total),
/// its programs attached as `attach` (`tp_btf`, or `raw_tp` forced), which it must report.
fn daemon(dir: &TempDir, attach: &str) -> Daemon {
    let cfg = dir.join("observer.toml");
    std::fs::write(&cfg, "[stalls]\nslow_default = { total = \"20ms\" }\n").unwrap();
    let env: &[(&str, &str)] = if attach == "raw_tp" {
        &[("OBSERVER_ATTACH", "raw_tp")]
    } else {
        &[]
    };
    let d = Daemon::start_env(&["--config", cfg.to_str().unwrap()], env);
    let m = d.scrape();
    assert_eq!(
        m.sum("blkobs_build_info", &[("attach", attach)]),
        1.0,
        "attached as {attach}: {:?}",
        m.select("blkobs_build_info", &[]).collect::<Vec<_>>()
    );
    d
}

/// A scrape with `name`'s /proc/diskstats read just before and after it, retried until both
/// reads agree (the witness and the scrape describe the same instant).
fn scrape_with_diskstats(d: &Daemon, name: &str) -> (Metrics, DiskStats) {
    let done = |s: &DiskStats| (s.reads, s.writes, s.flushes, s.discards);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = diskstats(name);
        let m = d.scrape();
        let b = diskstats(name);
        if done(&a) == done(&b) {
            return (m, b);
        }
        assert!(
            Instant::now() < deadline,
            "{name}'s diskstats kept changing"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the daemon lists `name` in `GET /devices` with a slot of its own (`tracking`
/// `full`: stall tracking), bio-based, with its dm name.
fn wait_listed(d: &Daemon, dm: &DmDev) {
    let listed = listed_bio_based(d, &dm.name);
    assert_eq!(listed["dm_name"], dm.dm_name.as_str(), "{listed}");
}

/// `name`'s entry in `GET /devices` once it has a slot of its own (`tracking` `full`),
/// checked to be bio-based.
fn listed_bio_based(d: &Daemon, name: &str) -> Value {
    let listed = wait_for(Duration::from_secs(10), || {
        devices(d)["devices"]
            .as_array()?
            .iter()
            .find(|x| x["device"] == name && x["tracking"] == "full")
            .cloned()
    })
    .unwrap_or_else(|| panic!("{name} not in /devices: {}", devices(d)));
    assert_eq!(listed["bio_based"], true, "{listed}");
    listed
}

fn delta(m1: &Metrics, m0: &Metrics, name: &str, want: &[(&str, &str)]) -> f64 {
    m1.sum(name, want) - m0.sum(name, want)
}

/// dm-delay with a known delay: every read and write bio of the dm disk is counted once, as
/// its /proc/diskstats line and fio count them; its total latency is the injected delay
/// (median within 5 % + 3 ms, from each bio's exact total in the slow records, and the
/// `/histograms` p50); it has no queue or device stage; its dm name is exported.
#[test]
#[ignore = "needs dm-delay/dm-flakey: runs in the kernel-matrix VMs (cargo xtask vmtest)"]
fn dm_delay_total_latency_and_counts() {
    if !require_dm("delay") {
        return;
    }
    // dm-delay holds a bio for whole jiffies (msecs_to_jiffies, then a timer and a workqueue)
    // and then the loop device below serves it: in the TCG guests that adds up to ~10 ms
    // (measured on 6.1 with 50 ms: median 59.3 ms). 200 ms keeps it within 5 % + 3 ms.
    const DELAY_MS: u64 = 200;
    const IOS: u64 = 16;
    let dir = TempDir::new("blkobs-stacked");
    let lower = LoopDev::kernel_scheduler(64);
    let sectors = 64 * 2048;
    let dm = DmDev::create(
        "blkobs-delay",
        &format!("0 {sectors} delay {} 0 {DELAY_MS}", lower.path),
    );
    let daemon = daemon(&dir, "tp_btf");
    wait_listed(&daemon, &dm);
    quiesce(&dm.name);
    let (m0, d0) = scrape_with_diskstats(&daemon, &dm.name);

    let job = |rw: &str, offset: &str| {
        fio(&[
            &format!("--name={rw}"),
            &format!("--filename={}", dm.path),
            "--direct=1",
            "--invalidate=0",
            "--ioengine=psync",
            &format!("--rw={rw}"),
            "--bs=4k",
            &format!("--offset={offset}"),
            &format!("--io_size={}k", IOS * 4),
        ])
    };
    let r = job("read", "0");
    let w = job("write", "8m");
    let fio_reads = r["jobs"][0]["read"]["total_ios"].as_u64().unwrap();
    let fio_writes = w["jobs"][0]["write"]["total_ios"].as_u64().unwrap();
    assert_eq!((fio_reads, fio_writes), (IOS, IOS), "fio's own counts");
    quiesce(&dm.name);
    let (m1, d1) = scrape_with_diskstats(&daemon, &dm.name);

    let n = dm.name.as_str();
    let ours = |op: &str| {
        delta(
            &m1,
            &m0,
            "blkobs_requests_total",
            &[("device", n), ("op", op)],
        )
    };
    let witness = (
        (d1.reads - d0.reads) as f64,
        (d1.writes - d0.writes) as f64,
        (d1.flushes - d0.flushes) as f64,
    );
    eprintln!(
        "{n}: ours reads/writes/flushes {:?}, diskstats {witness:?}, fio {fio_reads}/{fio_writes}",
        (ours("read"), ours("write"), ours("flush"))
    );
    assert_eq!(
        (ours("read"), ours("write"), ours("flush")),
        witness,
        "{n}: reads, writes, flushes vs its /proc/diskstats"
    );
    assert_eq!(ours("read"), IOS as f64, "{n}: reads vs fio");
    assert_eq!(ours("write"), IOS as f64, "{n}: writes vs fio");
    assert_eq!(
        delta(&m1, &m0, "blkobs_bytes_total", &[("device", n)]),
        (2 * IOS * 4096) as f64,
        "{n}: bytes"
    );
    // Honestly labelled: the total stage only, as many samples as bios.
    for op in ["read", "write"] {
        let count = |stage: &str| {
            delta(
                &m1,
                &m0,
                "blkobs_request_latency_seconds_count",
                &[("device", n), ("op", op), ("stage", stage)],
            )
        };
        assert_eq!(count("total"), IOS as f64, "{n} {op}: total-stage samples");
    }
    for stage in ["queue", "device"] {
        assert_eq!(
            m1.select(
                "blkobs_request_latency_seconds_count",
                &[("device", n), ("stage", stage)]
            )
            .count(),
            0,
            "{n}: no {stage}-stage series on a bio-based disk"
        );
    }
    assert_eq!(
        m1.sum(
            "blkobs_device_mapper_info",
            &[("device", n), ("name", &dm.dm_name)]
        ),
        1.0,
        "{n}: its dm name"
    );
    assert_eq!(
        m1.sum(
            "blkobs_inflight_requests",
            &[("device", n), ("stage", "total")]
        ),
        0.0
    );
    // The injected delay, per bio: each one's exact total from its slow record.
    let want = DELAY_MS as f64 / 1000.0;
    for op in ["read", "write"] {
        let recs = slow_records(&daemon, n, 1000, |s| s["op"] == op);
        assert_eq!(
            recs.len() as u64,
            IOS,
            "{n}: every {op} held {DELAY_MS} ms is a slow record (> 20 ms)"
        );
        let mut totals: Vec<f64> = recs
            .iter()
            .map(|s| {
                assert!(
                    s["queue_seconds"].is_null() && s["device_seconds"].is_null(),
                    "{s}"
                );
                assert_eq!(s["bytes"], 4096, "{s}");
                assert_eq!(s["submitter"]["comm"], "fio", "{s}");
                s["total_seconds"].as_f64().unwrap()
            })
            .collect();
        totals.sort_by(f64::total_cmp);
        let median = totals[totals.len() / 2];
        eprintln!(
            "{n} {op}: median total {:.2} ms (min {:.2}, max {:.2}) vs injected {DELAY_MS} ms",
            median * 1e3,
            totals[0] * 1e3,
            totals[totals.len() - 1] * 1e3
        );
        assert!(
            (median - want).abs() <= want * 0.05 + 0.003,
            "{n} {op}: median total {median} s vs injected {want} s"
        );
        // fio's own clock around each I/O (clat: submission to completion, as fio sees it)
        // contains each bio's total: our mean (the exact sum over the count) is at most
        // fio's mean, and less only by the system call's and fio's own time (1.8–2.3 ms in
        // the 6.1 TCG guest; 5.3 ms once in a clean-clone CI run, 6.12, with every guest of the
        // matrix and the Debian machines on two cores: a fixed 5 ms failed there). Allowed: the
        // median's own tolerance above, 5 % + 3 ms.
        let fio_out = if op == "read" { &r } else { &w };
        let fio_mean = fio_out["jobs"][0][op]["clat_ns"]["mean"].as_f64().unwrap() * 1e-9;
        let sum = delta(
            &m1,
            &m0,
            "blkobs_request_latency_seconds_sum",
            &[("device", n), ("op", op), ("stage", "total")],
        );
        let mean = sum / IOS as f64;
        eprintln!(
            "{n} {op}: mean total {:.3} ms, fio's mean clat {:.3} ms",
            mean * 1e3,
            fio_mean * 1e3
        );
        assert!(
            mean <= fio_mean && fio_mean - mean <= fio_mean * 0.05 + 0.003,
            "{n} {op}: mean total {mean} s vs fio's mean completion latency {fio_mean} s"
        );
        // The histograms agree (kernel buckets are up to 12.5 % wide).
        let h = json(&daemon, &format!("/histograms?device={n}"));
        let hist = h["histograms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["op"] == op && x["stage"] == "total")
            .unwrap_or_else(|| panic!("{n}: total-stage {op} histogram: {h}"));
        let p50 = hist["p50"].as_f64().unwrap();
        assert!(
            (p50 - want).abs() <= want * 0.13,
            "{n} {op}: /histograms p50 {p50} vs {want}"
        );
    }
}

/// dm-flakey in its down interval (up 0 s), with the programs forced to `raw_tp` (struct
/// fields read with bpf_probe_read_kernel): every direct read fails with EIO. Each failed
/// bio is counted once with its error (`blk_status_t` ioerr), as many as the reads that
/// failed (dd's exit status, the witness). /proc/diskstats is no witness here: see below.
#[test]
#[ignore = "needs dm-delay/dm-flakey: runs in the kernel-matrix VMs (cargo xtask vmtest)"]
fn dm_flakey_errors_per_device() {
    if !require_dm("flakey") {
        return;
    }
    const READS: u64 = 8;
    let dir = TempDir::new("blkobs-stacked");
    let lower = LoopDev::kernel_scheduler(16);
    let dm = DmDev::create(
        "blkobs-flakey",
        &format!("0 {} flakey {} 0 0 3600", 16 * 2048, lower.path),
    );
    let daemon = daemon(&dir, "raw_tp");
    wait_listed(&daemon, &dm);
    quiesce(&dm.name);
    let (m0, d0) = scrape_with_diskstats(&daemon, &dm.name);
    let mut failed = 0;
    for i in 0..READS {
        let st = Command::new("dd")
            .args([
                &format!("if={}", dm.path),
                "of=/dev/null",
                "bs=4k",
                "count=1",
                &format!("skip={}", i * 16),
                "iflag=direct",
                "status=none",
            ])
            .stderr(Stdio::null())
            .status()
            .unwrap();
        if !st.success() {
            failed += 1;
        }
    }
    assert_eq!(failed, READS, "every read in flakey's down interval fails");
    quiesce(&dm.name);
    let (m1, d1) = scrape_with_diskstats(&daemon, &dm.name);
    let n = dm.name.as_str();
    let errors = delta(
        &m1,
        &m0,
        "blkobs_request_errors_total",
        &[("device", n), ("op", "read"), ("status", "ioerr")],
    );
    let reads = delta(
        &m1,
        &m0,
        "blkobs_requests_total",
        &[("device", n), ("op", "read")],
    );
    eprintln!(
        "{n}: {failed} failed reads; ours: {reads} reads, {errors} ioerr; diskstats reads {}",
        d1.reads - d0.reads
    );
    assert_eq!(errors, READS as f64, "{n}: ioerr per failed read");
    assert_eq!(
        delta(&m1, &m0, "blkobs_request_errors_total", &[("device", n)]),
        READS as f64,
        "{n}: no other error"
    );
    assert_eq!(reads, READS as f64, "{n}: every failed read counted once");
    // dm accounts a bio in diskstats only once its target mapped it: on 6.1 a read flakey
    // kills at map time (DM_MAPIO_KILL) is not counted there at all (0 of 8), while it did
    // reach block_bio_queue and block_bio_complete (here: 8 reads, 8 errors).
    assert!(
        (d1.reads - d0.reads) as f64 <= reads,
        "{n}: diskstats counts more reads than were submitted"
    );
}

/// A bio held by a suspended dm disk is in flight there: `/inflight` lists it at stage
/// `total` with its submitter, `blkobs_inflight_requests{stage="total"}` counts it, while the
/// reader (the witness) is still blocked; after the resume it completes as a slow record whose
/// total covers the hold.
#[test]
#[ignore = "needs dm-delay/dm-flakey: runs in the kernel-matrix VMs (cargo xtask vmtest)"]
fn suspended_dm_holds_a_bio_in_flight() {
    if !require_dm("linear") {
        return;
    }
    let dir = TempDir::new("blkobs-stacked");
    let lower = LoopDev::kernel_scheduler(16);
    let dm = DmDev::create(
        "blkobs-linear",
        &format!("0 {} linear {} 0", 16 * 2048, lower.path),
    );
    let daemon = daemon(&dir, "tp_btf");
    wait_listed(&daemon, &dm);
    quiesce(&dm.name);
    dm.dmsetup("suspend");
    let dd = named_dd("blkobs-dmreader");
    let mut reader = ChildGuard {
        child: Command::new(&dd)
            .args([
                &format!("if={}", dm.path),
                "of=/dev/null",
                "bs=4k",
                "count=1",
                "iflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap(),
    };
    let n = dm.name.as_str();
    let inflight = || {
        let v = json(&daemon, &format!("/inflight?device={n}"));
        v["requests"].as_array().cloned().unwrap_or_default()
    };
    // The bio entered before it is first seen listed: from then on it is held.
    wait_for(Duration::from_secs(10), || {
        (!inflight().is_empty()).then_some(())
    })
    .expect("the held read in /inflight");
    let seen = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    let listed = inflight();
    assert!(
        reader.child.try_wait().unwrap().is_none(),
        "the reader is blocked by the suspended disk"
    );
    assert_eq!(listed.len(), 1, "{listed:?}");
    let r = &listed[0];
    assert_eq!(r["stage"], "total", "{r}");
    assert_eq!(r["op"], "read", "{r}");
    assert_eq!(r["submitter"]["comm"], "blkobs-dmreader", "{r}");
    assert_eq!(r["submitter"]["pid"], reader.child.id(), "{r}");
    assert!(r["age_seconds"].as_f64().unwrap() >= 1.5, "{r}");
    let m = daemon.scrape();
    assert_eq!(
        m.sum(
            "blkobs_inflight_requests",
            &[("device", n), ("stage", "total")]
        ),
        1.0
    );
    let text = daemon.get("/stalls").unwrap().1;
    assert!(
        text.lines()
            .any(|l| l.starts_with(n) && l.contains("total")),
        "/stalls lists the held bio:\n{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().eq([n, dm.dm_name.as_str()])),
        "/stalls names the dm disk:\n{text}"
    );
    let hold = seen.elapsed().as_secs_f64();
    dm.dmsetup("resume");
    let st = reader.child.wait().unwrap();
    assert!(st.success(), "the read completes after the resume");
    let recs = wait_for(Duration::from_secs(5), || {
        let r = slow_records(&daemon, n, 1000, |s| s["op"] == "read");
        (!r.is_empty()).then_some(r)
    })
    .expect("the held read as a slow record");
    assert_eq!(recs.len(), 1, "{recs:?}");
    let total = recs[0]["total_seconds"].as_f64().unwrap();
    assert!(total >= hold, "total {total} s covers the hold {hold} s");
    quiesce(n);
    let m = daemon.scrape();
    assert_eq!(
        m.sum(
            "blkobs_inflight_requests",
            &[("device", n), ("stage", "total")]
        ),
        0.0
    );
}

/// A zram disk (bio-based on every kernel, this host's too; not ignored): 64 direct 4 KiB
/// writes then 64 reads with fio are counted as its /proc/diskstats line and fio count them,
/// with their bytes, in the total stage only, nothing left in flight; `/devices` marks it
/// bio-based without a dm name.
#[test]
fn zram_bios_counted_as_its_diskstats() {
    if !require_root_and(&["fio"]) {
        return;
    }
    const IOS: u64 = 64;
    let Some(z) = Zram::new(16) else { return };
    let dir = TempDir::new("blkobs-stacked");
    let daemon = daemon(&dir, "tp_btf");
    let listed = listed_bio_based(&daemon, &z.name);
    assert!(listed["dm_name"].is_null(), "{listed}");
    quiesce(&z.name);
    let (m0, d0) = scrape_with_diskstats(&daemon, &z.name);
    let job = |rw: &str| {
        fio(&[
            &format!("--name={rw}"),
            &format!("--filename={}", z.path),
            "--direct=1",
            "--invalidate=0",
            "--ioengine=psync",
            &format!("--rw={rw}"),
            "--bs=4k",
            &format!("--io_size={}k", IOS * 4),
        ])
    };
    let w = job("write");
    let r = job("read");
    assert_eq!(
        (
            r["jobs"][0]["read"]["total_ios"].as_u64(),
            w["jobs"][0]["write"]["total_ios"].as_u64()
        ),
        (Some(IOS), Some(IOS)),
        "fio's own counts"
    );
    quiesce(&z.name);
    let (m1, d1) = scrape_with_diskstats(&daemon, &z.name);
    let n = z.name.as_str();
    let ours = |op: &str| {
        delta(
            &m1,
            &m0,
            "blkobs_requests_total",
            &[("device", n), ("op", op)],
        )
    };
    let witness = (
        (d1.reads - d0.reads) as f64,
        (d1.writes - d0.writes) as f64,
        (d1.flushes - d0.flushes) as f64,
    );
    eprintln!(
        "{n}: ours reads/writes/flushes {:?}, diskstats {witness:?}, fio {IOS}/{IOS}",
        (ours("read"), ours("write"), ours("flush"))
    );
    assert_eq!(
        (ours("read"), ours("write"), ours("flush")),
        witness,
        "{n}: reads, writes, flushes vs its /proc/diskstats"
    );
    assert_eq!((ours("read"), ours("write")), (IOS as f64, IOS as f64));
    assert_eq!(
        delta(&m1, &m0, "blkobs_bytes_total", &[("device", n)]),
        (2 * IOS * 4096) as f64
    );
    assert_eq!(
        delta(
            &m1,
            &m0,
            "blkobs_request_latency_seconds_count",
            &[("device", n), ("stage", "total")]
        ),
        (2 * IOS) as f64
    );
    for stage in ["queue", "device"] {
        assert_eq!(
            m1.select(
                "blkobs_request_latency_seconds_count",
                &[("device", n), ("stage", stage)]
            )
            .count(),
            0,
            "{n}: no {stage}-stage series on a bio-based disk"
        );
    }
    assert_eq!(
        m1.select("blkobs_inflight_requests", &[("device", n)])
            .map(|s| (s.labels["stage"].clone(), s.value))
            .collect::<Vec<_>>(),
        [("total".to_string(), 0.0)],
        "{n}: one in-flight series, stage total, empty"
    );
    assert_eq!(
        m1.select("blkobs_device_mapper_info", &[("device", n)])
            .count(),
        0
    );
}

/// A bio a suspended dm disk held since before the daemon started completes untracked: counted
/// in `blkobs_untracked_completions_total` of its disk and class, not as a request, no latency
/// (the reader still blocked when the daemon was up is the witness).
#[test]
#[ignore = "needs dm-delay/dm-flakey: runs in the kernel-matrix VMs (cargo xtask vmtest)"]
fn bio_in_flight_at_start_is_untracked() {
    if !require_dm("linear") {
        return;
    }
    let dir = TempDir::new("blkobs-stacked");
    let lower = LoopDev::kernel_scheduler(16);
    let dm = DmDev::create(
        "blkobs-linear",
        &format!("0 {} linear {} 0", 16 * 2048, lower.path),
    );
    quiesce(&dm.name);
    dm.dmsetup("suspend");
    let mut reader = ChildGuard {
        child: Command::new("dd")
            .args([
                &format!("if={}", dm.path),
                "of=/dev/null",
                "bs=4k",
                "count=1",
                "iflag=direct",
                "status=none",
            ])
            .spawn()
            .unwrap(),
    };
    std::thread::sleep(Duration::from_millis(500));
    let daemon = daemon(&dir, "tp_btf");
    listed_bio_based(&daemon, &dm.name);
    assert!(
        reader.child.try_wait().unwrap().is_none(),
        "the read was held across the daemon's start"
    );
    dm.dmsetup("resume");
    assert!(reader.child.wait().unwrap().success());
    quiesce(&dm.name);
    let n = dm.name.as_str();
    let m = daemon.scrape();
    assert_eq!(
        m.sum(
            "blkobs_untracked_completions_total",
            &[("device", n), ("op", "read")]
        ),
        1.0,
        "{n}: the held read, untracked"
    );
    assert_eq!(m.sum("blkobs_requests_total", &[("device", n)]), 0.0);
    assert_eq!(
        m.sum(
            "blkobs_inflight_requests",
            &[("device", n), ("stage", "total")]
        ),
        0.0
    );
}
