//! [`DiskView`]: the latest tick's [`Inventory`], the one view of the disks every consumer
//! reads (names, bio-based, device-mapper names, the names `device=` accepts), with the names
//! of disks that went away.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc, Mutex, RwLock,
    },
};

use observer_common::maps::{dev_major, dev_minor};

use super::{BlockDisk, Inventory, KnownDisks, UnknownDisk, PROC_DISKSTATS, SYS_BLOCK};

/// The latest scan of the disks, indexed by number, the names of disks gone (until forgotten)
/// and the disks known while the daemon ran ([`KnownDisks`]).
///
/// A number not in the latest scan (a disk made since the tick) makes one scan at once
/// ([`DiskView::rescan`]), at most once per number between two ticks ([`DiskView::update`]):
/// a disk that went away costs one scan a second, not one per lookup.
pub struct DiskView {
    sys_block: PathBuf,
    diskstats: PathBuf,
    latest: RwLock<Latest>,
    /// The last name each number had, for disks that went away: their series keep their name
    /// until [`crate::collect::gone`] forgets them ([`DiskView::forget`]).
    last_names: Mutex<BTreeMap<u32, String>>,
    /// Numbers not found by a scan made for them since the last tick.
    misses: Mutex<BTreeSet<u32>>,
    known: KnownDisks,
    /// Ticks so far ([`DiskView::tick`]).
    ticks: AtomicU32,
}

/// Ticks between two full scans while [`Inventory::unchanged`] finds nothing changed: the
/// longest a disk's holders, slaves, partitions or other queue attributes can lag in the view
/// (10 s at the daemon's 1 s tick) when no disk appeared or went meanwhile. `GET /devices`, a
/// mount and a number not in the view scan at once ([`DiskView::rescan`]).
pub const FULL_SCAN_TICKS: u32 = 10;

#[derive(Default)]
struct Latest {
    inv: Arc<Inventory>,
    /// Number → index in `inv.disks`.
    by_dev: BTreeMap<u32, usize>,
}

impl Default for DiskView {
    fn default() -> Self {
        Self::new(Path::new(SYS_BLOCK), Path::new(PROC_DISKSTATS))
    }
}

impl DiskView {
    /// A view scanning `sys_block` (`/sys/block`) and `diskstats` (/proc/diskstats); empty
    /// until [`DiskView::update`] or [`DiskView::rescan`].
    pub fn new(sys_block: &Path, diskstats: &Path) -> DiskView {
        DiskView {
            sys_block: sys_block.to_path_buf(),
            diskstats: diskstats.to_path_buf(),
            latest: RwLock::default(),
            last_names: Mutex::default(),
            misses: Mutex::default(),
            known: KnownDisks::default(),
            ticks: AtomicU32::new(0),
        }
    }

    /// Takes a tick's scan as the view (and records it in the known disks).
    pub fn update(&self, inv: Inventory) -> Arc<Inventory> {
        self.misses.lock().expect("disk misses lock").clear();
        self.store(inv)
    }

    /// The tick's view: the same as before when [`Inventory::unchanged`] says so (and a full
    /// scan is not due: every [`FULL_SCAN_TICKS`]th tick, the first included), else a new scan
    /// ([`Inventory::scan_after`] the view: drive identities kept) taken as the view. Either
    /// way the numbers a scan missed since the last tick may be looked for again.
    pub fn tick(&self) -> Arc<Inventory> {
        let due = self
            .ticks
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(FULL_SCAN_TICKS);
        let prev = self.inventory();
        if !due && Inventory::unchanged(&self.sys_block, &self.diskstats, &prev) {
            self.misses.lock().expect("disk misses lock").clear();
            return prev;
        }
        let inv = Inventory::scan_after(&self.sys_block, &self.diskstats, &prev);
        self.update(inv)
    }

    /// Scans now and takes that scan as the view (a disk made since the tick: `GET /devices`,
    /// a mount that changed the log ranges, a number or name not in the view).
    pub fn rescan(&self) -> Arc<Inventory> {
        let inv = Inventory::scan_after(&self.sys_block, &self.diskstats, &self.inventory());
        self.store(inv)
    }

    fn store(&self, inv: Inventory) -> Arc<Inventory> {
        self.known.record(&inv);
        {
            let mut last = self.last_names.lock().expect("device names lock");
            for d in &inv.disks {
                if let Some(dev) = d.dev {
                    if last.get(&dev) != Some(&d.name) {
                        last.insert(dev, d.name.clone());
                    }
                }
            }
        }
        let by_dev = inv
            .disks
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((d.dev?, i)))
            .collect();
        let inv = Arc::new(inv);
        *self.latest.write().expect("disk view lock") = Latest {
            inv: inv.clone(),
            by_dev,
        };
        inv
    }

    /// The latest scan.
    pub fn inventory(&self) -> Arc<Inventory> {
        self.latest.read().expect("disk view lock").inv.clone()
    }

    /// `f` of disk `dev` in the view, scanning once more if it is not there (see [`DiskView`]);
    /// `None` if no scan finds it.
    fn with_disk<T>(&self, dev: u32, f: impl Fn(&BlockDisk) -> T) -> Option<T> {
        let find = |l: &Latest| l.by_dev.get(&dev).map(|&i| f(&l.inv.disks[i]));
        if let Some(v) = find(&self.latest.read().expect("disk view lock")) {
            return Some(v);
        }
        if !self.misses.lock().expect("disk misses lock").insert(dev) {
            return None;
        }
        self.rescan();
        find(&self.latest.read().expect("disk view lock"))
    }

    /// The kernel's name for disk `dev` ([`observer_common::maps::mkdev`]: `vda`, `loop0`,
    /// `nvme0n1`, a hidden `nvme0c1n1`). For a disk that is gone: the last name it had, or
    /// `MAJ:MIN` if it never had one while the daemon ran (or was forgotten).
    pub fn name(&self, dev: u32) -> String {
        if let Some(n) = self.with_disk(dev, |d| d.name.clone()) {
            return n;
        }
        self.last_names
            .lock()
            .expect("device names lock")
            .get(&dev)
            .cloned()
            .unwrap_or_else(|| format!("{}:{}", dev_major(dev), dev_minor(dev)))
    }

    /// Whether disk `dev` is bio-based (device-mapper, md, zram, ...): present, not hidden, and
    /// without `mq/` (block/blk-mq-sysfs.c creates it exactly for blk-mq queues:
    /// `queue->mq_ops` set, the test the programs make at `block_bio_queue`). Its bios never
    /// become requests: they are tracked from `block_bio_queue` to `block_bio_complete`, with
    /// no queue/device split. False for a disk that is gone.
    pub fn bio_based(&self, dev: u32) -> bool {
        self.with_disk(dev, |d| d.bio_based && !d.hidden)
            .unwrap_or(false)
    }

    /// A device-mapper disk's name and uuid (`dm/name`, `dm/uuid`, drivers/md/dm-sysfs.c) by
    /// its kernel name, e.g. `("vg0-data", "LVM-...")`; `None` for any other disk or one not in
    /// the view. The uuid is empty when the table has none.
    pub fn device_mapper(&self, disk: &str) -> Option<(String, String)> {
        let l = self.latest.read().expect("disk view lock");
        let d = l.inv.disks.iter().find(|d| d.name == disk)?;
        Some((d.dm_name.clone()?, d.dm_uuid.clone()))
    }

    /// Drops the remembered name of a forgotten device number (see [`DiskView::name`]).
    pub fn forget(&self, dev: u32) {
        self.last_names
            .lock()
            .expect("device names lock")
            .remove(&dev);
    }

    /// Whether `name` is a disk that exists or existed (known, or found by a scan made now: a
    /// disk created since the last tick counts); else why not ([`KnownDisks::check`]).
    pub fn check(&self, name: &str) -> Result<(), UnknownDisk> {
        self.known.check(name, || self.rescan())
    }

    /// The disks known ([`KnownDisks`]).
    pub fn known(&self) -> &KnownDisks {
        &self.known
    }
}

#[cfg(test)]
mod tests {
    use observer_common::maps::{mkdev, nameless_dev_of};

    use super::*;

    fn disk(dir: &Path, name: &str, dev: Option<&str>, mq: bool) {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        if let Some(dev) = dev {
            std::fs::write(dir.join(name).join("dev"), format!("{dev}\n")).unwrap();
        }
        std::fs::write(dir.join(name).join("size"), "8\n").unwrap();
        if mq {
            std::fs::create_dir_all(dir.join(name).join("mq")).unwrap();
        }
    }

    /// A tick keeps the view while names, numbers, sizes, schedulers and write caches stay;
    /// a change of any of them scans at once, anything else shows by the next full scan.
    #[test]
    fn tick_scans_in_full_on_change_or_when_due() {
        let dir = std::env::temp_dir().join(format!("obs-disktick-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        disk(&dir, "loop3", Some("7:3"), true);
        disk(&dir, "loop4", Some("7:4"), true);
        let q = dir.join("loop3/queue");
        std::fs::create_dir_all(&q).unwrap();
        std::fs::write(q.join("scheduler"), "[none] mq-deadline\n").unwrap();
        // Beside the disks' directory, not in it (a file there is a disk to a scan).
        let stats = dir.with_extension("diskstats");
        std::fs::write(&stats, "").unwrap();
        let v = DiskView::new(&dir, &stats);
        let first = v.tick();
        let same = |a: &Arc<Inventory>, b: &Arc<Inventory>| Arc::ptr_eq(a, b);
        assert!(same(&first, &v.tick()), "nothing changed: the same view");
        // Holders change only with another disk appearing; alone, they wait for the full scan.
        std::fs::create_dir_all(dir.join("loop4/holders/md0")).unwrap();
        let mut last = v.tick();
        assert!(same(&first, &last) && last.disks[1].holders.is_empty());
        for what in ["scheduler", "size", "name"] {
            match what {
                "scheduler" => std::fs::write(q.join("scheduler"), "none [mq-deadline]\n").unwrap(),
                "size" => std::fs::write(dir.join("loop3/size"), "0\n").unwrap(),
                _ => disk(&dir, "loop5", Some("7:5"), true),
            }
            let now = v.tick();
            assert!(!same(&last, &now), "{what} changed: scanned");
            last = now;
        }
        assert_eq!(last.disks[0].identity.scheduler, "mq-deadline");
        assert_eq!((last.disks[0].sectors, last.disks.len()), (0, 3));
        assert_eq!(last.disks[1].holders, ["md0"]);
        // Unchanged again: kept until the full scan is due.
        let mut ticks = 1;
        while same(&last, &v.tick()) {
            ticks += 1;
        }
        assert!(
            ticks <= FULL_SCAN_TICKS,
            "{ticks} ticks without a full scan"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&stats).unwrap();
    }

    /// Names (hidden disks by their diskstats number or name hash), the fallback for a disk
    /// made since the tick and for one gone, bio-based, dm names and uuids.
    #[test]
    fn names_bio_based_and_dm_names() {
        let dir = std::env::temp_dir().join(format!("obs-diskview-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        disk(&dir, "loop3", Some("7:3"), true);
        disk(&dir, "dm-0", Some("253:0"), false);
        disk(&dir, "md0", Some("9:0"), false);
        disk(&dir, "nvme1c1n1", None, true);
        disk(&dir, "nvme1c2n1", None, false);
        let dm = dir.join("dm-0/dm");
        std::fs::create_dir_all(&dm).unwrap();
        std::fs::write(dm.join("name"), "vg0-data\n").unwrap();
        std::fs::write(dm.join("uuid"), "LVM-abc\n").unwrap();
        let stats = dir.join("diskstats");
        std::fs::write(
            &stats,
            " 259       3 nvme1c1n1 1 0 8 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n    0       0 nvme1c2n1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        )
        .unwrap();
        let v = DiskView::new(&dir, &stats);
        v.update(Inventory::scan_in(&dir, &stats));
        assert_eq!(v.name(mkdev(7, 3)), "loop3");
        assert_eq!(v.name(mkdev(259, 3)), "nvme1c1n1");
        assert_eq!(v.name(nameless_dev_of(b"nvme1c2n1")), "nvme1c2n1");
        assert_eq!(v.name(mkdev(259, 1)), "259:1");
        assert!(!v.bio_based(mkdev(7, 3)));
        assert!(v.bio_based(mkdev(253, 0)));
        assert!(!v.bio_based(nameless_dev_of(b"nvme1c2n1")), "hidden");
        assert!(
            !v.bio_based(mkdev(253, 1)),
            "gone: not known to be bio-based"
        );
        assert_eq!(
            v.device_mapper("dm-0"),
            Some(("vg0-data".into(), "LVM-abc".into()))
        );
        assert_eq!(v.device_mapper("md0"), None);
        assert_eq!(v.device_mapper("../dm-0"), None);
        // Made since the tick: one scan finds it.
        disk(&dir, "loop4", Some("7:4"), true);
        assert_eq!(v.name(mkdev(7, 4)), "loop4");
        // Gone: keeps its last name until forgotten.
        std::fs::remove_dir_all(dir.join("loop3")).unwrap();
        v.update(Inventory::scan_in(&dir, &stats));
        assert_eq!(v.name(mkdev(7, 3)), "loop3");
        v.forget(mkdev(7, 3));
        assert_eq!(v.name(mkdev(7, 3)), "7:3");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
