//! Log ranges per disk: merged and bounded to what `LOG_RANGES` holds (written into that map,
//! at each disk's per-device slot, by [`crate::bpf::devslots::DevSlots::set_log_ranges`]).

use std::collections::BTreeMap;

use observer_common::maps::{LogRanges, SectorRange, LOG_RANGES_MAX};
use serde::Serialize;

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
