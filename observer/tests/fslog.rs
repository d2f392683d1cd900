//! Filesystem log awareness on the real kernel: the log ranges the daemon finds equal what
//! xfs_db / dumpe2fs / debugfs say, and under an fsync-heavy load every write that starts inside
//! a log range (ftrace `block_io_start` witness) is counted as `log="true"`, and no other.
//!
//! Needs root, tracefs and xfsprogs/e2fsprogs. Under CI=true a test that cannot run fails.

mod common;

use std::{
    process::Command,
    time::{Duration, Instant},
};

use common::*;
use serde_json::Value;

/// require_root plus what these tests need beyond it: tracefs and the witnesses' tools.
fn require(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    let tracefs = std::path::Path::new("/sys/kernel/tracing/instances").is_dir();
    let missing: Vec<&str> = ["xfs_db", "mkfs.ext4", "mke2fs", "dumpe2fs", "debugfs", "sfdisk", "partx"]
        .into_iter()
        .filter(|t| !which(t))
        .collect();
    if tracefs && missing.is_empty() {
        return true;
    }
    let why = format!("{test}: needs tracefs at /sys/kernel/tracing (found: {tracefs}) and {missing:?}: run scripts/provision.sh (xfsprogs, e2fsprogs, fdisk, util-linux)");
    if in_ci() {
        panic!("{why}");
    }
    eprintln!("SKIPPED {why}");
    false
}

fn devices(d: &Daemon) -> Value {
    let (status, body) = d.get("/devices").expect("GET /devices");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("/devices is JSON")
}

/// Merged log ranges the daemon reports for a whole disk, as (start, end) sectors.
fn ranges(d: &Daemon, disk: &str) -> Vec<(u64, u64)> {
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
fn wait_ranges(d: &Daemon, disk: &str, want: &[(u64, u64)]) {
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

fn sysfs_u64(path: &str) -> u64 {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().parse().unwrap()
}

fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("xfs_db printed no {name}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// xfs_db's view of the log on `dev`: (logstart, first sector on `dev`, sectors).
fn xfs_witness(dev: &str) -> (u64, u64, u64) {
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

fn block_size_ext4(dev: &str) -> u64 {
    let h = sh("dumpe2fs", &["-h", dev]);
    h.lines().find_map(|l| l.strip_prefix("Block size:")).unwrap().trim().parse().unwrap()
}

/// debugfs's view of the journal inode 8 on `dev`: merged (start, end) sectors on `dev`.
fn ext4_witness(dev: &str) -> Vec<(u64, u64)> {
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

fn writes(m: &Metrics, dev: &str, log: &str) -> f64 {
    m.sum("blkobs_requests_total", &[("device", dev), ("op", "write"), ("log", log)])
}

/// What the ftrace witness and the daemon saw on one disk during a workload.
struct Seen {
    traced_in: usize,
    traced_out: usize,
    log_true: f64,
    log_false: f64,
    events: Vec<IoStart>,
}

/// Runs `work` while tracing `block_io_start` on each disk; returns per-disk counts of writes
/// inside / outside `ranges` (whole-disk sectors) next to the daemon's `log` label counts.
fn witness(d: &Daemon, disks: &[(&LoopDev, &[(u64, u64)])], work: impl FnOnce()) -> Vec<Seen> {
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
fn assert_classified(s: &Seen, what: &str) {
    let close = |a: f64, b: usize| (a - b as f64).abs() <= (b as f64 * 0.002).max(1.0);
    assert!(close(s.log_true, s.traced_in), "{what}: log=\"true\" writes {} vs {} traced inside the log", s.log_true, s.traced_in);
    assert!(close(s.log_false, s.traced_out), "{what}: log=\"false\" writes {} vs {} traced outside the log", s.log_false, s.traced_out);
}

fn in_ranges(rs: &[(u64, u64)], sector: u64) -> bool {
    rs.iter().any(|(s, e)| sector >= *s && sector < *e)
}

/// XFS with internal logs of different sizes, block sizes and AG counts: ranges equal xfs_db's;
/// under fsync load all log writes (and only those) are `log="true"`; unmount and mount while
/// running remove and restore the ranges.
#[test]
fn xfs_internal_logs() {
    if !require("xfs_internal_logs") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let configs: [(u64, &[&str]); 3] = [
        (320, &["mkfs.xfs", "-q", "-f", "-d", "agcount=4"]),
        (500, &["mkfs.xfs", "-q", "-f", "-d", "agcount=5", "-l", "size=96m"]),
        (400, &["mkfs.xfs", "-q", "-f", "-b", "size=1024", "-d", "agcount=3", "-l", "size=72m"]),
    ];
    let mut fss = Vec::new();
    for (size, mkfs) in configs {
        let dev = LoopDev::new(size, "none");
        let m = Mount::new(&dev, mkfs);
        let (logstart, daddr, sectors) = xfs_witness(&dev.path);
        assert_ne!(logstart, 0, "{mkfs:?}: expected an internal log");
        eprintln!("{mkfs:?}: logstart {logstart} → sectors [{daddr}, {})", daddr + sectors);
        fss.push((dev, m, vec![(daddr, daddr + sectors)]));
    }
    for (dev, _, want) in &fss {
        wait_ranges(&daemon, &dev.name, want);
    }
    // The ranges are exported as metrics too.
    let m = daemon.scrape();
    for (dev, _, want) in &fss {
        assert_eq!(m.sum("blkobs_fs_log_sectors", &[("device", &dev.name), ("fstype", "xfs"), ("kind", "internal")]),
                   (want[0].1 - want[0].0) as f64);
    }

    let (dev, mnt, rs) = &fss[0];
    let fsyncs = 300;
    let seen = witness(&daemon, &[(dev, rs)], || fsync_files(&mnt.dir, fsyncs));
    let s = &seen[0];
    assert_classified(s, "xfs agcount=4");
    assert!(s.traced_in >= fsyncs, "{} log writes for {fsyncs} fsyncs", s.traced_in);
    assert!(s.traced_out >= fsyncs, "data writes missing");
    // XFS log writes are the sync metadata writes with PREFLUSH and/or FUA: all inside the range.
    for e in &s.events {
        let log_pattern = e.rwbs.contains('W') && e.rwbs.contains('S') && e.rwbs.contains('M') && e.rwbs.contains('F');
        if log_pattern {
            assert!(in_ranges(rs, e.sector), "log-pattern write {e:?} outside the log {rs:?}");
        }
    }
    // The queue/device split of log writes is there, per device.
    let after = daemon.scrape();
    for stage in ["queue", "device"] {
        assert!(after.sum("blkobs_request_latency_seconds_count", &[("device", &dev.name), ("op", "write"), ("log", "true"), ("stage", stage)]) > 0.0);
    }

    // Unmount: the ranges go; mount again: they come back.
    let (name, path, want) = (fss[1].0.name.clone(), fss[1].0.path.clone(), fss[1].2.clone());
    fss[1].1.unmount();
    wait_ranges(&daemon, &name, &[]);
    assert_eq!(ranges(&daemon, &fss[0].0.name), fss[0].2, "other filesystems keep their ranges");
    fss[1].1.remount(&path, "");
    wait_ranges(&daemon, &name, &want);
}

/// A partitioned disk (sfdisk + losetup -P): an internal XFS log on partition 1 is reported at
/// partition start + xfs_db's sector; XFS on partition 2 with an external log on a second loop
/// device makes that device log in its entirety. Classification follows on both disks.
#[test]
fn xfs_partition_offset_and_external_log() {
    if !require("xfs_partition_offset_and_external_log") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let disk = LoopDev::partitioned(720, "none", "label: dos\nstart=2048, size=700000\nstart=704512, size=700000\n");
    let logdev = LoopDev::new(80, "none");
    let (p1, p2) = (disk.part(1), disk.part(2));
    let p1_start = sysfs_u64(&format!("/sys/block/{0}/{0}p1/start", disk.name));
    assert_eq!(p1_start, 2048);
    let m1 = Mount::on(&p1, &["mkfs.xfs", "-q", "-f", "-d", "agcount=5"], "");
    let m2 = Mount::on(&p2, &["mkfs.xfs", "-q", "-f", "-l", &format!("logdev={},size=64m", logdev.path)], &format!("logdev={}", logdev.path));
    let (_, daddr, sectors) = xfs_witness(&p1);
    let want_disk = vec![(p1_start + daddr, p1_start + daddr + sectors)];
    let xdb = sh("xfs_db", &["-r", "-c", "sb 0", "-c", "print logstart", &p2]);
    assert_eq!(field(&xdb, "logstart"), 0, "partition 2 must have an external log");
    let want_log = vec![(0, sysfs_u64(&format!("/sys/block/{}/size", logdev.name)))];
    wait_ranges(&daemon, &disk.name, &want_disk);
    wait_ranges(&daemon, &logdev.name, &want_log);
    let body = devices(&daemon);
    let fs2 = body["filesystems"].as_array().unwrap().iter().find(|f| f["device"]["name"] == format!("{}p2", disk.name)).unwrap();
    assert_eq!(fs2["log"][0]["kind"], "external");
    assert_eq!(fs2["device"]["start"].as_u64(), Some(704512));

    let n = 200;
    let seen = witness(&daemon, &[(&disk, &want_disk), (&logdev, &want_log)], || {
        fsync_files(&m1.dir, n);
        fsync_files(&m2.dir, n);
    });
    assert_classified(&seen[0], "partitioned disk");
    assert_classified(&seen[1], "external log device");
    assert!(seen[0].traced_in >= n, "partition 1 log writes: {}", seen[0].traced_in);
    assert!(seen[1].traced_in >= n && seen[1].traced_out == 0, "external log device: every write is a log write");
    drop((m1, m2));
}

/// ext4 with internal journals (1 KiB and 4 KiB blocks): ranges equal debugfs's extents of
/// inode 8; under fsync load jbd2's writes are log writes, data writes are not.
#[test]
fn ext4_internal_journal() {
    if !require("ext4_internal_journal") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let a = LoopDev::new(256, "none");
    let b = LoopDev::new(256, "none");
    let ma = Mount::new(&a, &["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-b", "1024"]);
    let mb = Mount::new(&b, &["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-b", "4096", "-J", "size=16"]);
    let wa = ext4_witness(&a.path);
    let wb = ext4_witness(&b.path);
    eprintln!("journals: {} {wa:?}, {} {wb:?}", a.name, b.name);
    wait_ranges(&daemon, &a.name, &wa);
    wait_ranges(&daemon, &b.name, &wb);

    let n = 300;
    let seen = witness(&daemon, &[(&a, &wa)], || fsync_files(&ma.dir, n));
    let s = &seen[0];
    assert_classified(s, "ext4 1k");
    assert!(s.traced_in >= n, "{} journal writes for {n} fsyncs", s.traced_in);
    for e in &s.events {
        if e.rwbs.contains('W') && e.comm.starts_with("jbd2/") {
            assert!(in_ranges(&wa, e.sector), "jbd2 write outside the journal: {e:?}");
        }
    }
    drop((ma, mb));
}

/// ext4 with its journal on an external device (mke2fs -O journal_dev): the device found
/// through s_journal_dev (checked against s_journal_uuid) is log in its entirety. The daemon
/// starts after the mount.
#[test]
fn ext4_external_journal() {
    if !require("ext4_external_journal") {
        return;
    }
    let jdev = LoopDev::new(32, "none");
    let data = LoopDev::new(256, "none");
    sh("mke2fs", &["-q", "-F", "-O", "journal_dev", "-b", "4096", &jdev.path]);
    let m = Mount::new(&data, &["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-b", "4096", "-J", &format!("device={}", jdev.path)]);
    // Started after the mount: the first discovery finds it.
    let daemon = Daemon::start(&[]);
    let h = sh("dumpe2fs", &["-h", &data.path]);
    let jline = h.lines().find(|l| l.starts_with("Journal device:")).unwrap_or_else(|| panic!("no external journal:\n{h}"));
    let (maj, min) = jdev.sysfs("dev").split_once(':').map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())).unwrap();
    let want_dev = format!("{:#06x}", (maj << 8) | min);
    assert!(jline.contains(&want_dev), "{jline} vs {want_dev}");
    let want = vec![(0, sysfs_u64(&format!("/sys/block/{}/size", jdev.name)))];
    wait_ranges(&daemon, &jdev.name, &want);
    wait_ranges(&daemon, &data.name, &[]);

    let n = 200;
    let seen = witness(&daemon, &[(&jdev, &want), (&data, &[])], || fsync_files(&m.dir, n));
    assert_classified(&seen[0], "external journal");
    assert_classified(&seen[1], "ext4 data device");
    assert!(seen[0].traced_in >= n && seen[0].traced_out == 0);
    assert!(seen[1].log_true == 0.0 && seen[1].traced_out > 0);
}

/// Superblocks that are corrupt (an overwritten XFS magic, a broken ext4 journal inode) are
/// skipped with a warning in /devices and the log; the daemon stays up and keeps other ranges.
#[test]
fn corrupt_superblocks_are_skipped() {
    if !require("corrupt_superblocks_are_skipped") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let good = LoopDev::new(320, "none");
    let x = LoopDev::new(320, "none");
    let e = LoopDev::new(128, "none");
    let _mg = Mount::new(&good, &["mkfs.xfs", "-q", "-f"]);
    let _mx = Mount::new(&x, &["mkfs.xfs", "-q", "-f"]);
    let _me = Mount::new(&e, &["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", "-b", "4096"]);
    let (_, gd, gs) = xfs_witness(&good.path);
    let (_, xd, xs) = xfs_witness(&x.path);
    wait_ranges(&daemon, &good.name, &[(gd, gd + gs)]);
    wait_ranges(&daemon, &x.name, &[(xd, xd + xs)]);
    wait_ranges(&daemon, &e.name, &ext4_witness(&e.path));

    // Corrupt behind the mounted filesystems' backs, in the loop devices' backing files.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(x.backing_file()).unwrap();
    f.write_all_at(b"JUNK", 0).unwrap();
    let h = sh("dumpe2fs", &[&e.path]);
    let itable: u64 = h.lines().find_map(|l| l.trim().strip_prefix("Inode table at ")).unwrap().split('-').next().unwrap().parse().unwrap();
    let isize: u64 = sh("dumpe2fs", &["-h", &e.path]).lines().find_map(|l| l.strip_prefix("Inode size:")).unwrap().trim().parse().unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(e.backing_file()).unwrap();
    f.write_all_at(&[0u8; 12], itable * 4096 + 7 * isize + 0x28).unwrap(); // inode 8's extent header
    drop(f);

    // A mount table change makes the daemon look again.
    let bind_dir = std::env::temp_dir().join(format!("blkobs-bind-{}", std::process::id()));
    std::fs::create_dir_all(&bind_dir).unwrap();
    struct Unbind(std::path::PathBuf);
    impl Drop for Unbind {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    sh("mount", &["--bind", _mg.dir.to_str().unwrap(), bind_dir.to_str().unwrap()]);
    let _unbind = Unbind(bind_dir);
    wait_ranges(&daemon, &x.name, &[]);
    wait_ranges(&daemon, &e.name, &[]);
    wait_ranges(&daemon, &good.name, &[(gd, gd + gs)]);
    let body = devices(&daemon);
    let warnings: Vec<String> = body["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect();
    assert!(warnings.iter().any(|w| w.contains(&x.path) && w.contains("no xfs superblock")), "{warnings:#?}");
    assert!(warnings.iter().any(|w| w.contains(&e.path) && w.contains("corrupt")), "{warnings:#?}");
    assert!(daemon.scrape().sum("blkobs_fs_log_warnings", &[]) >= 2.0);
    assert_eq!(daemon.get("/healthz").unwrap().0, 200);
}
