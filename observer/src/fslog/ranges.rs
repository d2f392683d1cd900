//! Log ranges per disk: merged, bounded to what `LOG_RANGES` holds, and written into that map.

use std::collections::BTreeMap;

use aya::maps::{Array, MapData};
use observer_common::maps::{
    dev_major, dev_minor, dev_slot, LogRanges, SectorRange, DEV_SLOTS, LOG_RANGES_MAX,
};
use serde::Serialize;
use tracing::warn;

use super::discovery::Discovery;

/// A merged log range on a whole disk (512-byte sectors, `end` exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Range {
    /// First sector.
    pub start: u64,
    /// End sector (exclusive).
    pub end: u64,
    /// `end - start`.
    pub sectors: u64,
}

impl Discovery {
    /// `LOG_RANGES` values: disk key → ranges.
    pub fn map_values(&self) -> BTreeMap<u32, LogRanges> {
        self.keys
            .iter()
            .map(|(k, (_, rs))| {
                let mut v = LogRanges::default();
                for (i, r) in rs.iter().take(LOG_RANGES_MAX).enumerate() {
                    v.ranges[i] = *r;
                }
                v.count = rs.len().min(LOG_RANGES_MAX) as u32;
                (*k, v)
            })
            .collect()
    }
}

/// Writes `want` into the `LOG_RANGES` array (slot [`dev_slot`] of each disk) and clears the
/// slots of disks that no longer have a log. Two disks with a log in the same slot: the first
/// keeps it, the second is not classified (logged).
pub fn sync_map(map: &mut Array<MapData, LogRanges>, want: &BTreeMap<u32, LogRanges>) {
    let mut slots: BTreeMap<u32, LogRanges> = BTreeMap::new();
    for (dev, v) in want {
        let slot = dev_slot(*dev);
        if let Some(other) = slots.get(&slot) {
            warn!(disk = %format!("{}:{}", dev_major(*dev), dev_minor(*dev)), other = %format!("{}:{}", dev_major(other.dev), dev_minor(other.dev)),
                  "two disks with a filesystem log share a LOG_RANGES slot: this disk's log writes are not classified");
            continue;
        }
        slots.insert(slot, LogRanges { dev: *dev, ..*v });
    }
    for slot in 0..DEV_SLOTS {
        let want = slots.get(&slot).copied().unwrap_or_default();
        let have = map.get(&slot, 0).unwrap_or_default();
        if have != want {
            if let Err(e) = map.set(slot, want, 0) {
                warn!(slot, error = %e, "cannot write LOG_RANGES: log writes on that disk are not classified");
            }
        }
    }
}

/// Disk key → (disk name, merged ranges), as [`Discovery`] keeps it for `LOG_RANGES`.
pub(super) type DiskRanges = BTreeMap<u32, (String, Vec<SectorRange>)>;

/// Merges the log extents of `filesystems` per whole disk (512-byte sectors, overlapping or
/// touching ranges joined) and bounds each disk to [`LOG_RANGES_MAX`] ranges. Returns the
/// ranges by disk name (for `/devices`), by disk key (for `LOG_RANGES`), and a warning per
/// disk that had more ranges than fit.
pub(super) fn merge_per_disk(
    filesystems: &[super::Filesystem],
) -> (BTreeMap<String, Vec<Range>>, DiskRanges, Vec<String>) {
    let mut per: DiskRanges = BTreeMap::new();
    let mut warnings = Vec::new();
    for fs in filesystems {
        for e in &fs.log {
            per.entry(e.disk_key)
                .or_insert_with(|| (e.disk.clone(), Vec::new()))
                .1
                .push(SectorRange {
                    start: e.start,
                    end: e.end,
                });
        }
    }
    for (name, ranges) in per.values_mut() {
        ranges.sort();
        let mut merged: Vec<SectorRange> = Vec::new();
        for r in ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        if merged.len() > LOG_RANGES_MAX {
            warnings.push(format!(
                "{name}: {} log ranges, only the first {LOG_RANGES_MAX} are classified; the others' writes count as log=\"false\"",
                merged.len()
            ));
            merged.truncate(LOG_RANGES_MAX);
        }
        *ranges = merged;
    }
    let by_name = per
        .values()
        .map(|(n, r)| {
            (
                n.clone(),
                r.iter()
                    .map(|r| Range {
                        start: r.start,
                        end: r.end,
                        sectors: r.end - r.start,
                    })
                    .collect(),
            )
        })
        .collect();
    (by_name, per, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_contain() {
        let mut r = LogRanges::default();
        r.ranges[0] = SectorRange { start: 10, end: 20 };
        r.ranges[1] = SectorRange {
            start: 100,
            end: 101,
        };
        r.count = 2;
        assert!(r.contains(10) && r.contains(19) && r.contains(100));
        assert!(!r.contains(20) && !r.contains(9) && !r.contains(101) && !r.contains(0));
        r.count = 1;
        assert!(!r.contains(100));
    }
}
