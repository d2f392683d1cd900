//! Per-device slots on the real kernel: two disks whose device numbers collided in the old
//! hashed per-device slot (`(dev * 2654435761 >> 22) & 1023`, where the second disk lost log
//! classification and stall detection) are both fully classified and stall-tracked.
//!
//! Needs root, tracefs, xfsprogs and /dev/fuse. Under CI (`CI` truthy) a test that cannot run
//! fails.

mod support;

use std::{collections::BTreeSet, path::Path, time::Duration};

use support::*;

/// The slot a disk had before the index: a multiplicative hash of `MKDEV`.
fn old_slot(dev: u32) -> u32 {
    (dev.wrapping_mul(2_654_435_761) >> 22) & 1023
}

/// The minor of loop index `n`: `n << part_shift`, `part_shift = fls(max_part)`
/// (drivers/block/loop.c).
fn loop_minor(n: u32) -> u32 {
    let max_part: u32 = std::fs::read_to_string("/sys/module/loop/parameters/max_part")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    n << (32 - max_part.leading_zeros())
}

/// Two loop indexes, neither existing now nor in `tried`, whose device numbers share an old
/// slot.
fn colliding_free_pair(tried: &BTreeSet<u32>) -> (u32, u32) {
    let free = |n: u32| {
        !tried.contains(&n)
            && !Path::new(&format!("/sys/block/loop{n}")).exists()
            && !Path::new(&format!("/dev/loop{n}")).exists()
    };
    let kdev = |n: u32| (7 << 20) | loop_minor(n);
    for a in (100..4000).filter(|n| free(*n)) {
        if let Some(b) = (a + 1..8000).find(|b| free(*b) && old_slot(kdev(*b)) == old_slot(kdev(a)))
        {
            return (a, b);
        }
    }
    panic!("no two free loop indexes with colliding old slots below 8000");
}

/// Two slow (FUSE-backed) disks at loop indexes whose device numbers collide in the old slot
/// hash, created for this test.
fn colliding_disks(size_mib: usize) -> (SlowDisk, SlowDisk) {
    let mut tried = BTreeSet::new();
    for _ in 0..5 {
        let (a, b) = colliding_free_pair(&tried);
        tried.extend([a, b]);
        let Some(da) = SlowDisk::at_index(a, size_mib, "none") else {
            continue;
        };
        let Some(db) = SlowDisk::at_index(b, size_mib, "none") else {
            continue;
        };
        return (da, db);
    }
    panic!("could not create two colliding loop devices (indexes taken concurrently?)");
}

/// What `/devices` says about `disk`'s per-device slot.
fn tracking(d: &Daemon, disk: &str) -> String {
    devices(d)["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["device"] == disk))
        .map(|x| x["tracking"].as_str().unwrap_or("?").to_string())
        .unwrap_or_else(|| "absent".into())
}

/// XFS on two disks whose device numbers collided under the old slot hash: with N fsync'ed
/// files on each, every log write on both is `log="true"` (and every other write
/// `log="false"`), exactly as the ftrace witness says; a 400 ms write on each ends a `device`
/// stall episode on each; `/devices` says `tracking: "full"` for both and nothing is degraded.
#[test]
fn colliding_device_numbers_are_all_tracked() {
    if !require_fslog("colliding_device_numbers_are_all_tracked")
        || !require(
            Path::new("/dev/fuse").exists() && Path::new("/dev/loop-control").exists(),
            "colliding_device_numbers_are_all_tracked: needs /dev/fuse and /dev/loop-control",
        )
    {
        return;
    }
    let daemon = Daemon::start(&[]);
    let (a, b) = colliding_disks(320);
    let (ka, kb) = (a.kdev(), b.kdev());
    eprintln!(
        "{} ({}) and {} ({}): old slot {} and {}",
        a.name,
        a.sysfs("dev"),
        b.name,
        b.sysfs("dev"),
        old_slot(ka),
        old_slot(kb)
    );
    assert_eq!(old_slot(ka), old_slot(kb), "the disks must collide");

    let ma = Mount::new(&a, &["mkfs.xfs", "-q", "-f"]);
    let mb = Mount::new(&b, &["mkfs.xfs", "-q", "-f"]);
    let (_, da, sa) = xfs_witness(&a.path);
    let (_, db, sb) = xfs_witness(&b.path);
    let (ra, rb) = (vec![(da, da + sa)], vec![(db, db + sb)]);
    wait_ranges(&daemon, &a.name, &ra);
    wait_ranges(&daemon, &b.name, &rb);
    for d in [&a, &b] {
        let ok = wait_every(Duration::from_millis(100), Duration::from_secs(5), || {
            tracking(&daemon, &d.name) == "full"
        });
        assert!(ok, "{}: tracking {}", d.name, tracking(&daemon, &d.name));
    }

    let n = 100;
    let seen = witness(&daemon, &[(&a, &ra), (&b, &rb)], || {
        fsync_files(&ma.dir, n);
        fsync_files(&mb.dir, n);
    });
    for (s, d) in seen.iter().zip([&a, &b]) {
        assert_classified(s, &d.name);
        assert!(
            s.traced_in >= n,
            "{}: {} log writes for {n} fsyncs",
            d.name,
            s.traced_in
        );
    }

    // A 400 ms write on each disk (default episode threshold 250 ms): a device stall episode
    // on each, which only a disk with its own DEVSTATE slot reports.
    for (d, m) in [(&a, &ma), (&b, &mb)] {
        quiesce(&d.name);
        let dir = m.dir.join("stall");
        std::fs::create_dir_all(&dir).unwrap();
        sh("sync", &[]);
        quiesce(&d.name);
        d.mount.set_write_delay(Duration::from_millis(400));
        fsync_files(&dir, 1);
        d.mount.set_write_delay(Duration::ZERO);
    }
    let episodes = |dev: &str| {
        daemon.scrape().sum(
            "blkobs_stall_episodes_total",
            &[("device", dev), ("kind", "device")],
        )
    };
    for d in [&a, &b] {
        let ok = wait_every(Duration::from_millis(200), Duration::from_secs(5), || {
            episodes(&d.name) >= 1.0
        });
        let v = daemon
            .get(&format!("/stalls?device={}&format=json", d.name))
            .unwrap()
            .1;
        assert!(ok, "{}: no device stall episode reported: {v}", d.name);
        eprintln!("{}: {} device stall episode(s)", d.name, episodes(&d.name));
    }
    let m = daemon.scrape();
    assert_eq!(m.sum("blkobs_devices_degraded", &[]), 0.0);
    assert!(m.sum("blkobs_map_entries", &[("map", "dev_index")]) >= 2.0);
    drop((ma, mb));
}
