//! Filesystem log awareness on the real kernel: the log ranges the daemon finds equal what
//! xfs_db / dumpe2fs / debugfs say, and under an fsync-heavy load every write that starts inside
//! a log range (ftrace `block_io_start` witness) is counted as `log="true"`, and no other.
//!
//! Needs root, tracefs and xfsprogs/e2fsprogs. Under CI (`CI` truthy) a test that cannot run fails.

mod support;

use std::process::Command;

use support::*;

/// XFS with internal logs of different sizes, block sizes and AG counts: ranges equal xfs_db's;
/// under fsync load all log writes (and only those) are `log="true"`; unmount and mount while
/// running remove and restore the ranges.
#[test]
fn xfs_internal_logs() {
    if !require_fslog("xfs_internal_logs") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let configs: [(u64, &[&str]); 3] = [
        (320, &["mkfs.xfs", "-q", "-f", "-d", "agcount=4"]),
        (
            500,
            &["mkfs.xfs", "-q", "-f", "-d", "agcount=5", "-l", "size=96m"],
        ),
        (
            400,
            &[
                "mkfs.xfs",
                "-q",
                "-f",
                "-b",
                "size=1024",
                "-d",
                "agcount=3",
                "-l",
                "size=72m",
            ],
        ),
    ];
    let mut fss = Vec::new();
    for (size, mkfs) in configs {
        let dev = LoopDev::new(size, "none");
        let m = Mount::new(&dev, mkfs);
        let (logstart, daddr, sectors) = xfs_witness(&dev.path);
        assert_ne!(logstart, 0, "{mkfs:?}: expected an internal log");
        eprintln!(
            "{mkfs:?}: logstart {logstart} → sectors [{daddr}, {})",
            daddr + sectors
        );
        fss.push((dev, m, vec![(daddr, daddr + sectors)]));
    }
    for (dev, _, want) in &fss {
        wait_ranges(&daemon, &dev.name, want);
    }
    // The ranges are exported as metrics too.
    let m = daemon.scrape();
    for (dev, _, want) in &fss {
        assert_eq!(
            m.sum(
                "blkobs_fs_log_sectors",
                &[
                    ("device", &dev.name),
                    ("fstype", "xfs"),
                    ("kind", "internal")
                ]
            ),
            (want[0].1 - want[0].0) as f64
        );
    }

    let (dev, mnt, rs) = &fss[0];
    let fsyncs = 300;
    let seen = witness(&daemon, &[(dev, rs)], || fsync_files(&mnt.dir, fsyncs));
    let s = &seen[0];
    assert_classified(s, "xfs agcount=4");
    assert!(
        s.traced_in >= fsyncs,
        "{} log writes for {fsyncs} fsyncs",
        s.traced_in
    );
    assert!(s.traced_out >= fsyncs, "data writes missing");
    // XFS log writes are the sync metadata writes with PREFLUSH and/or FUA: all inside the range.
    for e in &s.events {
        let log_pattern = e.rwbs.contains('W')
            && e.rwbs.contains('S')
            && e.rwbs.contains('M')
            && e.rwbs.contains('F');
        if log_pattern {
            assert!(
                in_ranges(rs, e.sector),
                "log-pattern write {e:?} outside the log {rs:?}"
            );
        }
    }
    // The queue/device split of log writes is there, per device.
    let after = daemon.scrape();
    for stage in ["queue", "device"] {
        assert!(
            after.sum(
                "blkobs_request_latency_seconds_count",
                &[
                    ("device", &dev.name),
                    ("op", "write"),
                    ("log", "true"),
                    ("stage", stage)
                ]
            ) > 0.0
        );
    }

    // Unmount: the ranges go; mount again: they come back.
    let (name, path, want) = (
        fss[1].0.name.clone(),
        fss[1].0.path.clone(),
        fss[1].2.clone(),
    );
    fss[1].1.unmount();
    wait_ranges(&daemon, &name, &[]);
    assert_eq!(
        ranges(&daemon, &fss[0].0.name),
        fss[0].2,
        "other filesystems keep their ranges"
    );
    fss[1].1.remount(&path, "");
    wait_ranges(&daemon, &name, &want);
}

/// A partitioned disk (sfdisk + losetup -P): an internal XFS log on partition 1 is reported at
/// partition start + xfs_db's sector; XFS on partition 2 with an external log on a second loop
/// device makes that device log in its entirety. Classification follows on both disks.
#[test]
fn xfs_partition_offset_and_external_log() {
    if !require_fslog("xfs_partition_offset_and_external_log") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let disk = LoopDev::partitioned(
        720,
        "none",
        "label: dos\nstart=2048, size=700000\nstart=704512, size=700000\n",
    );
    let logdev = LoopDev::new(80, "none");
    let (p1, p2) = (disk.part(1), disk.part(2));
    let p1_start = sysfs_u64(&format!("/sys/block/{0}/{0}p1/start", disk.name));
    assert_eq!(p1_start, 2048);
    let m1 = Mount::on(&p1, &["mkfs.xfs", "-q", "-f", "-d", "agcount=5"], "");
    let m2 = Mount::on(
        &p2,
        &[
            "mkfs.xfs",
            "-q",
            "-f",
            "-l",
            &format!("logdev={},size=64m", logdev.path),
        ],
        &format!("logdev={}", logdev.path),
    );
    let (_, daddr, sectors) = xfs_witness(&p1);
    let want_disk = vec![(p1_start + daddr, p1_start + daddr + sectors)];
    let xdb = sh("xfs_db", &["-r", "-c", "sb 0", "-c", "print logstart", &p2]);
    assert_eq!(
        field(&xdb, "logstart"),
        0,
        "partition 2 must have an external log"
    );
    let want_log = vec![(0, sysfs_u64(&format!("/sys/block/{}/size", logdev.name)))];
    wait_ranges(&daemon, &disk.name, &want_disk);
    wait_ranges(&daemon, &logdev.name, &want_log);
    let body = devices(&daemon);
    let fs2 = body["filesystems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["device"]["name"] == format!("{}p2", disk.name))
        .unwrap();
    assert_eq!(fs2["log"][0]["kind"], "external");
    assert_eq!(fs2["device"]["start"].as_u64(), Some(704512));

    let n = 200;
    let seen = witness(
        &daemon,
        &[(&disk, &want_disk), (&logdev, &want_log)],
        || {
            fsync_files(&m1.dir, n);
            fsync_files(&m2.dir, n);
        },
    );
    assert_classified(&seen[0], "partitioned disk");
    assert_classified(&seen[1], "external log device");
    assert!(
        seen[0].traced_in >= n,
        "partition 1 log writes: {}",
        seen[0].traced_in
    );
    assert!(
        seen[1].traced_in >= n && seen[1].traced_out == 0,
        "external log device: every write is a log write"
    );
    drop((m1, m2));
}

/// ext4 block sizes the journal tests cover: (name, mkfs.ext4 / mke2fs `-b` value).
const EXT4_BLOCK_SIZES: [(&str, &str); 2] = [("1k", "1024"), ("4k", "4096")];

/// ext4 with internal journals, 1 KiB and 4 KiB blocks: ranges equal debugfs's extents of
/// inode 8; under fsync load on each, every write inside the journal (jbd2's among them) is a
/// log write and every other write is not.
#[test]
fn ext4_internal_journal() {
    if !require_fslog("ext4_internal_journal") {
        return;
    }
    let daemon = Daemon::start(&[]);
    // (mount, device, witness): the mount first, so that it drops (unmounts) before the device.
    let fss: Vec<_> = EXT4_BLOCK_SIZES
        .iter()
        .map(|(what, bs)| {
            let dev = LoopDev::new(256, "none");
            let mut mkfs = vec!["-b", *bs];
            if *what == "4k" {
                mkfs.extend(["-J", "size=16"]);
            }
            let m = Mount::new(&dev, &mkfs_ext4(&mkfs));
            assert_eq!(block_size_ext4(&dev.path).to_string(), *bs);
            let w = ext4_witness(&dev.path);
            eprintln!("ext4 {what}: {} journal {w:?}", dev.name);
            (m, dev, w)
        })
        .collect();
    for (_, dev, w) in &fss {
        wait_ranges(&daemon, &dev.name, w);
    }

    let n = 300;
    for ((what, _), (m, dev, w)) in EXT4_BLOCK_SIZES.iter().zip(&fss) {
        let seen = witness(&daemon, &[(dev, w)], || fsync_files(&m.dir, n));
        let s = &seen[0];
        assert_classified(s, &format!("ext4 {what}"));
        assert!(
            s.traced_in >= n,
            "ext4 {what}: {} journal writes for {n} fsyncs",
            s.traced_in
        );
        let jbd2 = s
            .events
            .iter()
            .filter(|e| e.rwbs.contains('W') && e.comm.starts_with("jbd2/"))
            .inspect(|e| {
                assert!(
                    in_ranges(w, e.sector),
                    "ext4 {what}: jbd2 write outside the journal: {e:?}"
                )
            })
            .count();
        assert!(jbd2 > 0, "ext4 {what}: no jbd2 write traced");
        eprintln!("ext4 {what}: {jbd2} jbd2 writes, all inside {w:?}");
    }
}

/// ext4 with its journal on an external device (mke2fs -O journal_dev), 1 KiB and 4 KiB blocks:
/// the device found through s_journal_dev (checked against s_journal_uuid) is log in its
/// entirety. The daemon starts after the mounts.
#[test]
fn ext4_external_journal() {
    if !require_fslog("ext4_external_journal") {
        return;
    }
    // (mount, data device, journal device): the mount drops (unmounts) first.
    let fss: Vec<(Mount, LoopDev, LoopDev)> = EXT4_BLOCK_SIZES
        .iter()
        .map(|(_, bs)| {
            let jdev = LoopDev::new(32, "none");
            let data = LoopDev::new(256, "none");
            sh(
                "mke2fs",
                &["-q", "-F", "-O", "journal_dev", "-b", bs, &jdev.path],
            );
            let m = Mount::new(
                &data,
                &mkfs_ext4(&["-b", bs, "-J", &format!("device={}", jdev.path)]),
            );
            assert_eq!(block_size_ext4(&data.path).to_string(), *bs);
            (m, data, jdev)
        })
        .collect();
    // Started after the mounts: the first discovery finds them.
    let daemon = Daemon::start(&[]);
    for ((what, _), (m, data, jdev)) in EXT4_BLOCK_SIZES.iter().zip(&fss) {
        let h = sh("dumpe2fs", &["-h", &data.path]);
        let jline = h
            .lines()
            .find(|l| l.starts_with("Journal device:"))
            .unwrap_or_else(|| panic!("no external journal:\n{h}"));
        let (maj, min) = jdev
            .sysfs("dev")
            .split_once(':')
            .map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap()))
            .unwrap();
        let want_dev = format!("{:#06x}", (maj << 8) | min);
        assert!(jline.contains(&want_dev), "{jline} vs {want_dev}");
        let want = vec![(0, sysfs_u64(&format!("/sys/block/{}/size", jdev.name)))];
        wait_ranges(&daemon, &jdev.name, &want);
        wait_ranges(&daemon, &data.name, &[]);
        eprintln!(
            "ext4 {what}: journal device {} ({jline}) log range {want:?}",
            jdev.name
        );

        let n = 200;
        let seen = witness(&daemon, &[(jdev, &want), (data, &[])], || {
            fsync_files(&m.dir, n)
        });
        assert_classified(&seen[0], &format!("ext4 {what} external journal"));
        assert_classified(&seen[1], &format!("ext4 {what} data device"));
        assert!(seen[0].traced_in >= n && seen[0].traced_out == 0);
        assert!(seen[1].log_true == 0.0 && seen[1].traced_out > 0);
    }
}

/// Superblocks that are corrupt (an overwritten XFS magic, a broken ext4 journal inode) are
/// skipped with a warning in /devices and the log; the daemon stays up and keeps other ranges.
#[test]
fn corrupt_superblocks_are_skipped() {
    if !require_fslog("corrupt_superblocks_are_skipped") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let good = LoopDev::new(320, "none");
    let x = LoopDev::new(320, "none");
    let e = LoopDev::new(128, "none");
    let _mg = Mount::new(&good, &["mkfs.xfs", "-q", "-f"]);
    let _mx = Mount::new(&x, &["mkfs.xfs", "-q", "-f"]);
    let _me = Mount::new(&e, &mkfs_ext4(&["-b", "4096"]));
    let (_, gd, gs) = xfs_witness(&good.path);
    let (_, xd, xs) = xfs_witness(&x.path);
    wait_ranges(&daemon, &good.name, &[(gd, gd + gs)]);
    wait_ranges(&daemon, &x.name, &[(xd, xd + xs)]);
    wait_ranges(&daemon, &e.name, &ext4_witness(&e.path));

    // Corrupt behind the mounted filesystems' backs, in the loop devices' backing files.
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(x.backing_file())
        .unwrap();
    f.write_all_at(b"JUNK", 0).unwrap();
    let h = sh("dumpe2fs", &[&e.path]);
    let itable: u64 = h
        .lines()
        .find_map(|l| l.trim().strip_prefix("Inode table at "))
        .unwrap()
        .split('-')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let isize: u64 = sh("dumpe2fs", &["-h", &e.path])
        .lines()
        .find_map(|l| l.strip_prefix("Inode size:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(e.backing_file())
        .unwrap();
    f.write_all_at(&[0u8; 12], itable * 4096 + 7 * isize + 0x28)
        .unwrap(); // inode 8's extent header
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
    sh(
        "mount",
        &[
            "--bind",
            _mg.dir.to_str().unwrap(),
            bind_dir.to_str().unwrap(),
        ],
    );
    let _unbind = Unbind(bind_dir);
    wait_ranges(&daemon, &x.name, &[]);
    wait_ranges(&daemon, &e.name, &[]);
    wait_ranges(&daemon, &good.name, &[(gd, gd + gs)]);
    let body = devices(&daemon);
    let warnings: Vec<String> = body["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&x.path) && w.contains("no xfs superblock")),
        "{warnings:#?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&e.path) && w.contains("corrupt")),
        "{warnings:#?}"
    );
    assert!(daemon.scrape().sum("blkobs_fs_log_warnings", &[]) >= 2.0);
    assert_eq!(daemon.get("/healthz").unwrap().0, 200);
}
