//! Shared by the filesystem log tests (tests/fslog.rs, tests/deploy.rs): the witnesses
//! (xfs_db, dumpe2fs/debugfs, ftrace `block_io_start`), `/devices` helpers, and starting the
//! daemon from an arbitrary command (another identity, sandbox or mount namespace).

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::*;

/// Mounts tracefs at /sys/kernel/tracing when it is not mounted yet (a fresh machine), so the
/// ftrace witness is available. Left mounted: it is the kernel's standard location.
pub fn ensure_tracefs() {
    let t = Path::new("/sys/kernel/tracing");
    if t.join("instances").is_dir() {
        return;
    }
    let _ = Command::new("mount").args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"]).status();
    if !t.join("instances").is_dir() {
        eprintln!("could not mount tracefs at /sys/kernel/tracing");
    }
}

impl Daemon {
    /// Starts the daemon with `cmd` (which must end with the observer binary and its
    /// arguments, `--listen addr` included) and waits until `/healthz` answers.
    pub fn spawn_cmd(mut cmd: Command, addr: String, log: &Path) -> Daemon {
        let f = std::fs::File::create(log).unwrap();
        let child = cmd.stdout(Stdio::null()).stderr(f).spawn().expect("starting observer");
        let mut d = Daemon { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!("observer exited early: {status}\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
            if d.get("/healthz").map(|(s, _)| s == 200).unwrap_or(false) {
                return d;
            }
            assert!(Instant::now() < deadline, "observer did not become healthy in 30 s\n{}", std::fs::read_to_string(log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// A free loopback address.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}

/// require_root plus what these tests need beyond it: tracefs and the witnesses' tools.
pub fn require(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    ensure_tracefs();
    let tracefs = std::path::Path::new("/sys/kernel/tracing/instances").is_dir();
    let missing: Vec<&str> = ["xfs_db", "mkfs.ext4", "mke2fs", "dumpe2fs", "debugfs", "sfdisk", "partx"]
        .into_iter()
        .filter(|t| !which(t))
        .collect();
    if tracefs && missing.is_empty() {
        return true;
    }
    let why = format!("{test}: needs tracefs at /sys/kernel/tracing (found: {tracefs}) and {missing:?}: run scripts/provision.sh (xfsprogs, e2fsprogs, fdisk, util-linux)");
    super::skip(&why)
}

pub fn devices(d: &Daemon) -> Value {
    let (status, body) = d.get("/devices").expect("GET /devices");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("/devices is JSON")
}

/// Merged log ranges the daemon reports for a whole disk, as (start, end) sectors.
pub fn ranges(d: &Daemon, disk: &str) -> Vec<(u64, u64)> {
    devices(d)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["device"] == disk)
        .map(|x| {
            x["log_ranges"].as_array().unwrap().iter().map(|r| (r["start"].as_u64().unwrap(), r["end"].as_u64().unwrap())).collect()
        })
        .unwrap_or_default()
}

/// Waits (≤ 10 s) until the daemon reports exactly `want` for `disk`.
pub fn wait_ranges(d: &Daemon, disk: &str, want: &[(u64, u64)]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = ranges(d, disk);
        if got == want {
            return;
        }
        if Instant::now() > deadline {
            panic!("{disk}: daemon reports log ranges {got:?}, witness says {want:?}\n{:#}", devices(d));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn sysfs_u64(path: &str) -> u64 {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().parse().unwrap()
}

pub fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("xfs_db printed no {name}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// xfs_db's view of the log on `dev`: (logstart, first sector on `dev`, sectors).
pub fn xfs_witness(dev: &str) -> (u64, u64, u64) {
    let sb = sh("xfs_db", &["-r", "-c", "sb 0", "-c", "print logstart logblocks blocksize", dev]);
    let (logstart, logblocks, bs) = (field(&sb, "logstart"), field(&sb, "logblocks"), field(&sb, "blocksize"));
    if logstart == 0 {
        return (0, 0, logblocks * bs / 512);
    }
    // "0x80030 (524336)"
    let daddr = sh("xfs_db", &["-r", "-c", &format!("convert fsb {logstart} daddr"), dev]);
    let daddr: u64 = daddr.split('(').nth(1).and_then(|r| r.split(')').next()).and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("xfs_db convert: {daddr}"));
    (logstart, daddr, logblocks * bs / 512)
}

pub fn block_size_ext4(dev: &str) -> u64 {
    let h = sh("dumpe2fs", &["-h", dev]);
    h.lines().find_map(|l| l.strip_prefix("Block size:")).unwrap().trim().parse().unwrap()
}

/// debugfs's view of the journal inode 8 on `dev`: merged (start, end) sectors on `dev`.
pub fn ext4_witness(dev: &str) -> Vec<(u64, u64)> {
    let h = sh("dumpe2fs", &["-h", dev]);
    assert!(h.lines().any(|l| l.starts_with("Journal inode:") && l.trim_end().ends_with(" 8")), "{h}");
    let spb = block_size_ext4(dev) / 512;
    let stat = sh("debugfs", &["-R", "stat <8>", dev]);
    let mut runs: Vec<(u64, u64)> = Vec::new();
    // EXTENTS:\n(0-4095):1566-5661, (4096-8191):...   ((ETBn) entries are index blocks).
    let ext = stat.split("EXTENTS:").nth(1).unwrap_or_else(|| panic!("debugfs stat <8>: no extents:\n{stat}"));
    for tok in ext.split([',', '\n', ' ']).filter(|t| t.contains("):") && !t.contains("ETB")) {
        let phys = tok.split("):").nth(1).unwrap();
        let (a, b) = match phys.split_once('-') {
            Some((a, b)) => (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()),
            None => (phys.parse().unwrap(), phys.parse().unwrap()),
        };
        runs.push((a * spb, (b + 1) * spb));
    }
    runs.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for r in runs {
        match merged.last_mut() {
            Some(l) if r.0 <= l.1 => l.1 = l.1.max(r.1),
            _ => merged.push(r),
        }
    }
    assert!(!merged.is_empty(), "{stat}");
    merged
}

pub fn writes(m: &Metrics, dev: &str, log: &str) -> f64 {
    m.sum("blkobs_requests_total", &[("device", dev), ("op", "write"), ("log", log)])
}

/// What the ftrace witness and the daemon saw on one disk during a workload.
pub struct Seen {
    pub traced_in: usize,
    pub traced_out: usize,
    pub log_true: f64,
    pub log_false: f64,
    pub events: Vec<IoStart>,
}

/// Runs `work` while tracing `block_io_start` on each disk; returns per-disk counts of writes
/// inside / outside `ranges` (whole-disk sectors) next to the daemon's `log` label counts.
pub fn witness(d: &Daemon, disks: &[(&LoopDev, &[(u64, u64)])], work: impl FnOnce()) -> Vec<Seen> {
    for (dev, _) in disks {
        quiesce(&dev.name);
    }
    let before = d.scrape();
    let traces: Vec<IoTrace> = disks.iter().map(|(dev, _)| IoTrace::start(dev.kdev())).collect();
    work();
    sh("sync", &[]);
    for (dev, _) in disks {
        quiesce(&dev.name);
    }
    // Let the reaper retire requests whose completion never reached the programs; whatever
    // the kernel writes meanwhile is both traced and counted.
    std::thread::sleep(Duration::from_millis(1500));
    for (dev, _) in disks {
        quiesce(&dev.name);
    }
    let events: Vec<Vec<IoStart>> = traces.iter().map(|t| t.stop()).collect();
    let after = d.scrape();
    disks
        .iter()
        .zip(events)
        .map(|((dev, rs), ev)| {
            let w: Vec<&IoStart> = ev.iter().filter(|e| e.rwbs.contains('W')).collect();
            let inside = |e: &&&IoStart| in_ranges(rs, e.sector);
            let traced_in = w.iter().filter(inside).count();
            let seen = Seen {
                traced_in,
                traced_out: w.len() - traced_in,
                log_true: writes(&after, &dev.name, "true") - writes(&before, &dev.name, "true"),
                log_false: writes(&after, &dev.name, "false") - writes(&before, &dev.name, "false"),
                events: ev,
            };
            eprintln!("{}: traced writes in log {} / outside {}; daemon log=true {} / log=false {}",
                dev.name, seen.traced_in, seen.traced_out, seen.log_true, seen.log_false);
            seen
        })
        .collect()
}

/// The daemon's counts equal the witness's (a tracepoint event that never reached the programs,
/// about 1 in 10^4 here, is allowed for).
pub fn assert_classified(s: &Seen, what: &str) {
    let close = |a: f64, b: usize| (a - b as f64).abs() <= (b as f64 * 0.002).max(1.0);
    assert!(close(s.log_true, s.traced_in), "{what}: log=\"true\" writes {} vs {} traced inside the log", s.log_true, s.traced_in);
    assert!(close(s.log_false, s.traced_out), "{what}: log=\"false\" writes {} vs {} traced outside the log", s.log_false, s.traced_out);
}

pub fn in_ranges(rs: &[(u64, u64)], sector: u64) -> bool {
    rs.iter().any(|(s, e)| sector >= *s && sector < *e)
}

