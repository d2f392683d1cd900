//! The filesystem log witnesses (tests/fslog.rs, tests/deploy.rs): where xfs_db and
//! dumpe2fs/debugfs say the log is, and which writes ftrace saw inside it.

use std::time::Duration;

use super::{
    ensure_tracefs, quiesce, require_root, sh, skip, which, Daemon, IoStart, IoTrace, LoopDev,
    Metrics,
};

/// require_root plus what these tests need beyond it: tracefs and the witnesses' tools.
pub fn require_fslog(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    ensure_tracefs();
    let tracefs = std::path::Path::new("/sys/kernel/tracing/instances").is_dir();
    let missing: Vec<&str> = [
        "xfs_db",
        "mkfs.ext4",
        "mke2fs",
        "dumpe2fs",
        "debugfs",
        "sfdisk",
        "partx",
    ]
    .into_iter()
    .filter(|t| which(t).is_none())
    .collect();
    if tracefs && missing.is_empty() {
        return true;
    }
    let why = format!("{test}: needs tracefs at /sys/kernel/tracing (found: {tracefs}) and {missing:?}: run scripts/provision.sh (xfsprogs, e2fsprogs, fdisk, util-linux)");
    skip(&why)
}

pub fn sysfs_u64(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
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
    let sb = sh(
        "xfs_db",
        &[
            "-r",
            "-c",
            "sb 0",
            "-c",
            "print logstart logblocks blocksize",
            dev,
        ],
    );
    let (logstart, logblocks, bs) = (
        field(&sb, "logstart"),
        field(&sb, "logblocks"),
        field(&sb, "blocksize"),
    );
    if logstart == 0 {
        return (0, 0, logblocks * bs / 512);
    }
    // "0x80030 (524336)"
    let daddr = sh(
        "xfs_db",
        &["-r", "-c", &format!("convert fsb {logstart} daddr"), dev],
    );
    let daddr: u64 = daddr
        .split('(')
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("xfs_db convert: {daddr}"));
    (logstart, daddr, logblocks * bs / 512)
}

pub fn block_size_ext4(dev: &str) -> u64 {
    let h = sh("dumpe2fs", &["-h", dev]);
    h.lines()
        .find_map(|l| l.strip_prefix("Block size:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// debugfs's view of the journal inode 8 on `dev`: merged (start, end) sectors on `dev`.
pub fn ext4_witness(dev: &str) -> Vec<(u64, u64)> {
    let h = sh("dumpe2fs", &["-h", dev]);
    assert!(
        h.lines()
            .any(|l| l.starts_with("Journal inode:") && l.trim_end().ends_with(" 8")),
        "{h}"
    );
    let spb = block_size_ext4(dev) / 512;
    let stat = sh("debugfs", &["-R", "stat <8>", dev]);
    let mut runs: Vec<(u64, u64)> = Vec::new();
    // EXTENTS:\n(0-4095):1566-5661, (4096-8191):...   ((ETBn) entries are index blocks).
    let ext = stat
        .split("EXTENTS:")
        .nth(1)
        .unwrap_or_else(|| panic!("debugfs stat <8>: no extents:\n{stat}"));
    for tok in ext
        .split([',', '\n', ' '])
        .filter(|t| t.contains("):") && !t.contains("ETB"))
    {
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
    m.sum(
        "blkobs_requests_total",
        &[("device", dev), ("op", "write"), ("log", log)],
    )
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
    let traces: Vec<IoTrace> = disks
        .iter()
        .map(|(dev, _)| IoTrace::start(dev.kdev()))
        .collect();
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
            eprintln!(
                "{}: traced writes in log {} / outside {}; daemon log=true {} / log=false {}",
                dev.name, seen.traced_in, seen.traced_out, seen.log_true, seen.log_false
            );
            seen
        })
        .collect()
}

/// The daemon's counts equal the witness's (a tracepoint event that never reached the programs,
/// about 1 in 10^4 here, is allowed for).
pub fn assert_classified(s: &Seen, what: &str) {
    let close = |a: f64, b: usize| (a - b as f64).abs() <= (b as f64 * 0.002).max(1.0);
    assert!(
        close(s.log_true, s.traced_in),
        "{what}: log=\"true\" writes {} vs {} traced inside the log",
        s.log_true,
        s.traced_in
    );
    assert!(
        close(s.log_false, s.traced_out),
        "{what}: log=\"false\" writes {} vs {} traced outside the log",
        s.log_false,
        s.traced_out
    );
}

pub fn in_ranges(rs: &[(u64, u64)], sector: u64) -> bool {
    rs.iter().any(|(s, e)| sector >= *s && sector < *e)
}
