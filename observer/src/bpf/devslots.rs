//! Per-device slots: every disk gets a slot of its own in the per-device arrays `DEVSTATE`
//! (stall detection) and `LOG_RANGES` (filesystem log classification), published to the
//! programs in the `DEV_INDEX` hash map (disk → slot). No two disks ever share a slot, whatever
//! their device numbers: up to [`DEV_SLOT_LIMIT`] disks are all fully classified and
//! stall-tracked. Disks beyond that are *degraded* (no log classification, no stall detection;
//! still counted and timed): `blkobs_devices_degraded` counts them and `GET /devices` names
//! them (`tracking: "degraded"`); one gets a slot as soon as another disk goes away.
//!
//! The disks are the entries of `/sys/block` with media (`size` > 0), plus any disk with a
//! filesystem log. They are scanned at startup, every [`RESCAN_INTERVAL`] and before every
//! filesystem log discovery (which a mount-table change triggers within ~0.1 s). A disk that
//! appears at runtime is indexed at the next scan: requests that enter it before that (at most
//! ~1 s after it got media; a filesystem mounted on it is indexed with the mount) lack log
//! classification and stall tracking, and are counted in `blkobs_unindexed_requests_total`.
//!
//! The programs look a disk's slot up once per request, when it enters (the flush request: at
//! its dispatch), and keep it in `Inflight::dev_slot`. They use a slot's `DEVSTATE` / `LOG_RANGES`
//! entry only if its `dev` is the request's disk, so a request in flight while its disk's slot
//! is given to another disk cannot touch the new owner's state; the same check on
//! `LOG_RANGES[slot].dev` validates the programs' per-CPU cache of `DEV_INDEX`. Hence the
//! publication order in [`DevSlots::rescan`]. Freed slots are reused last (first in, first
//! out).

use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::Duration,
};

use aya::maps::{Array, HashMap, MapData};
use observer_common::maps::{dev_major, dev_minor, DevState, LogRanges, DEV_SLOT_LIMIT};
use serde::Serialize;
use tracing::{info, warn};

use crate::disks::Inventory;

/// How often the daemon rescans `/sys/block` for disks that appeared or went away.
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(1);

/// Whether a disk's requests are classified and stall-tracked (`GET /devices`, `tracking`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tracking {
    /// The disk has its own slot: filesystem log classification and stall detection.
    Full,
    /// Not indexed yet (appeared since the last scan, at most [`RESCAN_INTERVAL`] ago).
    Pending,
    /// No slot: more than [`DEV_SLOT_LIMIT`] disks. Requests are counted and timed, but not
    /// classified as log writes and not stall-tracked.
    Degraded,
}

/// What one [`DevSlotTable::update`] changed, as (disk as `mkdev`, slot) pairs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DevSlotChanges {
    /// Slots of disks that went away, to clear.
    pub freed: Vec<(u32, u32)>,
    /// Slots given to disks, to publish.
    pub given: Vec<(u32, u32)>,
}

/// The slot assignment (no maps): disk → slot, one disk per slot, slots `1..=limit`.
#[derive(Clone, Debug)]
pub struct DevSlotTable {
    by_dev: BTreeMap<u32, u32>,
    /// Free slots, the longest free first.
    free: VecDeque<u32>,
    degraded: BTreeSet<u32>,
    limit: u32,
}

impl DevSlotTable {
    /// An empty table of `limit` slots (1 to `limit`; slot 0 is `NO_SLOT`).
    pub fn new(limit: u32) -> DevSlotTable {
        DevSlotTable {
            by_dev: BTreeMap::new(),
            free: (1..=limit).collect(),
            degraded: BTreeSet::new(),
            limit,
        }
    }

    /// Makes the table hold exactly the disks in `present` (as `mkdev`): frees the slots of
    /// disks that are gone, then gives free slots to present disks without one, lowest device
    /// number first. Disks with a slot keep it. Present disks left without a slot (no free
    /// slot) are [`DevSlotTable::degraded`].
    pub fn update(&mut self, present: &BTreeSet<u32>) -> DevSlotChanges {
        let mut changes = DevSlotChanges::default();
        let gone: Vec<u32> = self
            .by_dev
            .keys()
            .filter(|d| !present.contains(d))
            .copied()
            .collect();
        for dev in gone {
            if let Some(slot) = self.by_dev.remove(&dev) {
                self.free.push_back(slot);
                changes.freed.push((dev, slot));
            }
        }
        self.degraded.clear();
        for &dev in present {
            if self.by_dev.contains_key(&dev) {
                continue;
            }
            match self.free.pop_front() {
                Some(slot) => {
                    self.by_dev.insert(dev, slot);
                    changes.given.push((dev, slot));
                }
                None => {
                    self.degraded.insert(dev);
                }
            }
        }
        changes
    }

    /// Takes back the slot of `dev` (it could not be published) and counts the disk as
    /// degraded until the next update retries.
    pub fn revoke(&mut self, dev: u32) {
        if let Some(slot) = self.by_dev.remove(&dev) {
            self.free.push_back(slot);
            self.degraded.insert(dev);
        }
    }

    /// The slot of `dev`, if it has one.
    pub fn dev_slot(&self, dev: u32) -> Option<u32> {
        self.by_dev.get(&dev).copied()
    }

    /// Disks (as `mkdev`) present at the last update without a slot, ascending.
    pub fn degraded(&self) -> &BTreeSet<u32> {
        &self.degraded
    }

    /// Disks with a slot, with their slots.
    pub fn assigned(&self) -> &BTreeMap<u32, u32> {
        &self.by_dev
    }

    /// Number of slots (disks that can have one).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether `dev` is tracked fully, degraded, or not known yet.
    pub fn tracking(&self, dev: u32) -> Tracking {
        if self.by_dev.contains_key(&dev) {
            Tracking::Full
        } else if self.degraded.contains(&dev) {
            Tracking::Degraded
        } else {
            Tracking::Pending
        }
    }
}

fn name(dev: u32) -> String {
    format!("{}:{}", dev_major(dev), dev_minor(dev))
}

/// The slot table with the maps it is published in: `DEV_INDEX`, and the per-slot `DEVSTATE`
/// and `LOG_RANGES` entries. The only writer of those three maps.
pub struct DevSlots {
    table: DevSlotTable,
    index: HashMap<MapData, u32, u32>,
    devstate: Array<MapData, DevState>,
    log_ranges: Array<MapData, LogRanges>,
    /// The last wanted log ranges per disk (from filesystem log discovery).
    want: BTreeMap<u32, LogRanges>,
    /// The disks with media at the last [`DevSlots::rescan`].
    present: BTreeSet<u32>,
}

impl DevSlots {
    /// Takes the three maps (all entries zero, as loaded) and [`DEV_SLOT_LIMIT`] slots; no disk
    /// has a slot until [`DevSlots::rescan`].
    pub fn new(
        index: HashMap<MapData, u32, u32>,
        devstate: Array<MapData, DevState>,
        log_ranges: Array<MapData, LogRanges>,
    ) -> DevSlots {
        DevSlots {
            table: DevSlotTable::new(DEV_SLOT_LIMIT),
            index,
            devstate,
            log_ranges,
            want: BTreeMap::new(),
            present: BTreeSet::new(),
        }
    }

    /// Takes the disks of this tick's scan (`inv`: those with media, hidden ones included) and
    /// publishes the changes: a freed slot
    /// is removed from `DEV_INDEX` first, then its entries zeroed; a given slot gets its
    /// `DEVSTATE` owner and `LOG_RANGES` first, then goes into `DEV_INDEX`.
    pub fn rescan(&mut self, inv: &Inventory) {
        self.present = inv.present();
        self.publish();
    }

    fn publish(&mut self) {
        let mut present = self.present.clone();
        present.extend(self.want.keys().copied());
        let was_degraded = self.table.degraded().clone();
        let changes = self.table.update(&present);
        for (dev, slot) in &changes.freed {
            let _ = self.index.remove(dev);
            let _ = self.devstate.set(*slot, DevState::default(), 0);
            let _ = self.log_ranges.set(*slot, LogRanges::default(), 0);
        }
        for &(dev, slot) in &changes.given {
            let state = DevState::of(dev);
            let res = self
                .devstate
                .set(slot, state, 0)
                .and_then(|()| self.log_ranges.set(slot, self.ranges_of(dev), 0))
                .and_then(|()| self.index.insert(dev, slot, 0));
            match res {
                Ok(()) if was_degraded.contains(&dev) => {
                    info!(disk = %name(dev), slot, "disk has a per-device slot now: log classification and stall detection on");
                }
                Ok(()) => {}
                Err(e) => {
                    warn!(disk = %name(dev), slot, error = %e, "cannot publish the disk's slot: no log classification or stall detection on it");
                    self.table.revoke(dev);
                    let _ = self.index.remove(&dev);
                    let _ = self.devstate.set(slot, DevState::default(), 0);
                    let _ = self.log_ranges.set(slot, LogRanges::default(), 0);
                }
            }
        }
        let newly: Vec<String> = self
            .table
            .degraded()
            .difference(&was_degraded)
            .map(|d| name(*d))
            .collect();
        if !newly.is_empty() {
            warn!(disks = ?newly, limit = self.table.limit(),
                  "more disks than per-device slots: these have no filesystem log classification and no stall detection (blkobs_devices_degraded)");
        }
    }

    /// Sets the wanted filesystem log ranges per disk (`mkdev` → ranges) and writes them into
    /// the `LOG_RANGES` slots of the disks; a disk with a log but no slot yet gets one first
    /// if any is free, from `inv`, a scan of the disks made now (a disk made for a mount gets
    /// its slot at once). Slots of disks without a log are emptied.
    pub fn set_log_ranges(&mut self, want: &BTreeMap<u32, LogRanges>, inv: &Inventory) {
        self.want = want.clone();
        self.rescan(inv);
        for (&dev, &slot) in self.table.assigned() {
            let v = self.ranges_of(dev);
            if self.log_ranges.get(&slot, 0).ok() != Some(v) {
                if let Err(e) = self.log_ranges.set(slot, v, 0) {
                    warn!(disk = %name(dev), slot, error = %e, "cannot write LOG_RANGES: log writes on that disk are not classified");
                }
            }
        }
        for dev in want.keys().filter(|d| self.table.dev_slot(**d).is_none()) {
            warn!(disk = %name(*dev), "disk with a filesystem log has no per-device slot (degraded): its log writes are not classified");
        }
    }

    /// The `LOG_RANGES` value of `dev`: its wanted ranges, or none, owned by `dev`.
    fn ranges_of(&self, dev: u32) -> LogRanges {
        LogRanges {
            dev,
            ..self.want.get(&dev).copied().unwrap_or_default()
        }
    }

    /// The disk's `DEVSTATE` entry, if it has a slot.
    pub fn devstate_of(&self, dev: u32) -> Option<DevState> {
        let slot = self.table.dev_slot(dev)?;
        self.devstate.get(&slot, 0).ok().filter(|d| d.dev == dev)
    }

    /// The slot assignment.
    pub fn table(&self) -> &DevSlotTable {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use observer_common::maps::{mkdev, nameless_dev_of};

    use super::*;

    /// The hash that gave disks a slot before the index: `(dev * 2654435761 >> 22) & 1023`.
    fn old_hash(dev: u32) -> u32 {
        (dev.wrapping_mul(2_654_435_761) >> 22) & 1023
    }

    fn set(devs: &[u32]) -> BTreeSet<u32> {
        devs.iter().copied().collect()
    }

    #[test]
    fn colliding_disks_get_distinct_slots() {
        let (a, b) = (mkdev(7, 4), mkdev(7, 614));
        assert_eq!(old_hash(a), old_hash(b), "the pair of the issue collides");
        let mut t = DevSlotTable::new(DEV_SLOT_LIMIT);
        let c = t.update(&set(&[a, b]));
        assert_eq!(c.given.len(), 2);
        assert_ne!(t.dev_slot(a), t.dev_slot(b));
        assert!(t.dev_slot(a).is_some() && t.dev_slot(b).is_some());
        assert_eq!(t.tracking(b), Tracking::Full);
        // Every one of DEV_SLOT_LIMIT disks whose old hashes all collide in a few slots.
        let mut t = DevSlotTable::new(DEV_SLOT_LIMIT);
        let devs: BTreeSet<u32> = (0..1 << 20)
            .map(|m| mkdev(7, m))
            .filter(|d| old_hash(*d) < 4)
            .take(DEV_SLOT_LIMIT as usize)
            .collect();
        assert_eq!(devs.len(), DEV_SLOT_LIMIT as usize);
        t.update(&devs);
        assert!(t.degraded().is_empty());
        let slots: BTreeSet<u32> = t.assigned().values().copied().collect();
        assert_eq!(slots.len(), devs.len(), "one slot per disk");
        assert!(slots.iter().all(|s| (1..=DEV_SLOT_LIMIT).contains(s)));
    }

    #[test]
    fn limit_reached_then_degraded_then_slot_freed() {
        let mut t = DevSlotTable::new(3);
        let c = t.update(&set(&[10, 20, 30, 40, 50]));
        assert_eq!(c.given, vec![(10, 1), (20, 2), (30, 3)]);
        assert_eq!(t.degraded(), &set(&[40, 50]));
        assert_eq!(t.tracking(40), Tracking::Degraded);
        assert_eq!(t.tracking(60), Tracking::Pending);
        // Stable: nothing changes while the same disks are there.
        assert_eq!(
            t.update(&set(&[10, 20, 30, 40, 50])),
            DevSlotChanges::default()
        );
        assert_eq!(t.degraded(), &set(&[40, 50]));
        // A disk goes: its slot goes to the lowest degraded disk; the others keep theirs.
        let c = t.update(&set(&[10, 30, 40, 50]));
        assert_eq!(c.freed, vec![(20, 2)]);
        assert_eq!(c.given, vec![(40, 2)]);
        assert_eq!(
            (t.dev_slot(10), t.dev_slot(30), t.dev_slot(40)),
            (Some(1), Some(3), Some(2))
        );
        assert_eq!(t.degraded(), &set(&[50]));
        // Below the limit again: nothing degraded.
        t.update(&set(&[10, 50]));
        assert!(t.degraded().is_empty());
        assert_eq!(t.tracking(50), Tracking::Full);
        assert_eq!(t.tracking(40), Tracking::Pending);
    }

    #[test]
    fn freed_slots_are_reused_last() {
        let mut t = DevSlotTable::new(4);
        t.update(&set(&[1, 2]));
        assert_eq!((t.dev_slot(1), t.dev_slot(2)), (Some(1), Some(2)));
        t.update(&set(&[2]));
        let c = t.update(&set(&[2, 3]));
        assert_eq!(
            c.given,
            vec![(3, 3)],
            "slot 1 was freed last: not reused first"
        );
        t.revoke(3);
        assert_eq!(t.tracking(3), Tracking::Degraded);
        t.update(&set(&[2, 3]));
        assert_eq!(t.dev_slot(3), Some(4));
    }

    #[test]
    fn scan_lists_disks_with_media() {
        use crate::disks::{parse_dev, Inventory};
        let dir = std::env::temp_dir().join(format!("blkobs-devslots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (n, dev, size) in [
            ("loop4", "7:4", "2048"),
            ("loop5", "7:5", "0"),
            ("vda", "254:0", "100"),
        ] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join("dev"), format!("{dev}\n")).unwrap();
            std::fs::write(dir.join(n).join("size"), format!("{size}\n")).unwrap();
        }
        let stats = dir.join("diskstats");
        assert_eq!(
            Inventory::scan_in(&dir, &stats).present(),
            set(&[mkdev(7, 4), mkdev(254, 0)])
        );
        // Hidden NVMe path disks: no `dev`, numbered by /proc/diskstats (6.x), or by their
        // name's hash where diskstats says 0:0 (5.10); one only in sysfs is not a disk here.
        for n in ["nvme1c1n1", "nvme1c2n1", "nvme9c9n9"] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join("size"), "8\n").unwrap();
        }
        std::fs::write(
            &stats,
            " 259       3 nvme1c1n1 1 0 8 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n    0       0 nvme1c2n1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        )
        .unwrap();
        let hashed = nameless_dev_of(b"nvme1c2n1");
        assert_eq!(dev_major(hashed), 0);
        assert_ne!(dev_minor(hashed), 0);
        let inv = Inventory::scan_in(&dir, &stats);
        assert_eq!(
            inv.present(),
            set(&[mkdev(7, 4), mkdev(254, 0), mkdev(259, 3), hashed])
        );
        let hidden: Vec<(u32, &str)> = inv.hidden().collect();
        assert_eq!(
            hidden,
            [(mkdev(259, 3), "nvme1c1n1"), (hashed, "nvme1c2n1")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(parse_dev("259:65536\n"), Some(mkdev(259, 65536)));
        assert_eq!(parse_dev("x"), None);
    }
}
