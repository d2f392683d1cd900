//! The merge report: the domain behind `GET /merges` (served by `http::merges`). Per device and
//! class, what requests looked like at their first dispatch (from the same [`Snapshot`] as
//! `/metrics`), and the recent **missed adjacent merges**: pairs of requests dispatched one right
//! after the other on a device, the second starting at the sector where the first ended, with
//! the same op, within the `[merges] window` (observer_common::dispatch::is_missed_merge).
//!
//! The pairs come from the programs' per-CPU rings (`MERGE_PAIRS`, the latest
//! [`MERGE_PAIRS_PER_CPU`] per CPU), read at query time: older pairs are overwritten by newer
//! ones on the same CPU and only counted (`recorded`). Times are CLOCK_MONOTONIC ns turned into
//! wall-clock times with [`Clock`]; sectors are 512-byte units of the whole disk.

use std::fmt::Write;

use observer_common::maps::{MissedMerge, MERGE_PAIRS_PER_CPU};
use serde::Serialize;

use crate::{
    bpf::maps::KernelMaps, collect::snapshot::Snapshot, config::DeviceFilter, disks::DiskView,
    labels::ClassInfo, time::Clock,
};

/// One request of a pair, at its dispatch.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PairRequest {
    /// Dispatch time (block_rq_issue; RFC 3339, ns precision).
    pub time: String,
    /// Dispatch time, CLOCK_MONOTONIC ns (as `bpf_ktime_get_ns()` and ftrace's `mono` clock).
    pub dispatch_ns: u64,
    /// Op, flags (original, at entry), rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// First sector (512 B, whole disk).
    pub sector: u64,
    /// Length in 512-byte sectors.
    pub sectors: u32,
}

/// A missed adjacent merge: `second` was dispatched right after `first` on `device` and starts
/// where `first` ends (`first.sector + first.sectors == second.sector`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MergePair {
    /// Kernel device name.
    pub device: String,
    /// `second.dispatch_ns - first.dispatch_ns` (ns).
    pub gap_ns: u64,
    /// The request dispatched first.
    pub first: PairRequest,
    /// The adjacent request dispatched right after it.
    pub second: PairRequest,
}

/// Per device and class: the requests counted at their first dispatch.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassMerges {
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// Requests counted (dispatched with data; counted when their life ended).
    pub requests: u64,
    /// Of those, missed adjacent merges.
    pub missed_merges: u64,
    /// Bios merged into them, in all (mean per request: `merged_bios / requests`).
    pub merged_bios: u64,
    /// Their bytes at dispatch, in all.
    pub bytes: u64,
}

/// Everything `/merges` shows.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MergeReport {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// The `[merges] window` in effect (s); 0 = the check is off.
    pub window_seconds: f64,
    /// Missed-merge pairs the programs have recorded since they were loaded (all CPUs); those
    /// beyond the last [`MERGE_PAIRS_PER_CPU`] per CPU were overwritten.
    pub recorded: u64,
    /// Per device and class with requests counted, by device then class.
    pub classes: Vec<ClassMerges>,
    /// Recent pairs, newest first (filters: `device`, `since`, `limit`).
    pub pairs: Vec<MergePair>,
}

/// Query filters of `/merges`.
#[derive(Clone, Debug, Default)]
pub struct MergeFilter {
    /// Only this device (kernel name).
    pub device: Option<String>,
    /// Only pairs whose second request was dispatched at or after this monotonic time (ns).
    pub since_ns: Option<u64>,
    /// At most this many pairs.
    pub limit: usize,
}

/// Every pair in the rings (entries ever written), oldest first, and the number recorded ever.
/// Unreadable entries are skipped.
pub fn read_pairs(maps: &KernelMaps) -> (Vec<MissedMerge>, u64) {
    let recorded = maps
        .merge_cursor
        .get(&0, 0)
        .map(|v| v.iter().sum())
        .unwrap_or(0);
    let mut pairs = Vec::new();
    for i in 0..MERGE_PAIRS_PER_CPU {
        if let Ok(values) = maps.merge_pairs.get(&i, 0) {
            pairs.extend(values.iter().filter(|p| p.dev != 0).copied());
        }
    }
    pairs.sort_by_key(|p| (p.dispatch_ns, p.dev, p.sector));
    (pairs, recorded)
}

/// One pair as the API shows it.
pub fn pair(p: &MissedMerge, device: String, clock: &Clock) -> MergePair {
    let req = |ns: u64, class: u16, sector: u64, sectors: u32| PairRequest {
        time: clock.rfc3339(ns),
        dispatch_ns: ns,
        class: ClassInfo::of(class),
        sector,
        sectors,
    };
    MergePair {
        device,
        gap_ns: p.dispatch_ns.saturating_sub(p.first_dispatch_ns),
        first: req(
            p.first_dispatch_ns,
            p.first_class,
            p.first_sector,
            p.first_sectors,
        ),
        second: req(p.dispatch_ns, p.class, p.sector, p.sectors),
    }
}

/// Builds the report: `snap` for the per-class totals (already limited to `filter`),
/// `pairs`/`recorded` from [`read_pairs`], `window_ns` the setting in effect, `disks` names
/// the pairs' devices.
pub fn report(
    snap: &Snapshot,
    (pairs, recorded): (&[MissedMerge], u64),
    filter: &DeviceFilter,
    disks: &DiskView,
    query: &MergeFilter,
    window_ns: u64,
    clock: &Clock,
) -> MergeReport {
    let wanted = |name: &str| query.device.as_deref().is_none_or(|d| d == name);
    let classes = snap
        .classes
        .iter()
        .filter(|((dev, _), t)| wanted(dev) && t.dispatch.count() > 0)
        .map(|((dev, class), t)| ClassMerges {
            device: dev.clone(),
            class: ClassInfo::of(class.0),
            requests: t.dispatch.count(),
            missed_merges: t.dispatch.missed,
            merged_bios: t.dispatch.merged_bios,
            bytes: t.dispatch.size_bytes,
        })
        .collect();
    let mut out = Vec::new();
    for p in pairs.iter().rev() {
        if query.since_ns.is_some_and(|s| p.dispatch_ns < s) {
            break;
        }
        let name = disks.name(p.dev);
        if !filter.allows(&name) || !wanted(&name) {
            continue;
        }
        out.push(pair(p, name, clock));
        if out.len() >= query.limit {
            break;
        }
    }
    MergeReport {
        now: clock.rfc3339(clock.mono_now),
        window_seconds: window_ns as f64 * 1e-9,
        recorded,
        classes,
        pairs: out,
    }
}

fn hhmmss(rfc: &str) -> &str {
    rfc.get(11..23).unwrap_or(rfc)
}

fn gap(ns: u64) -> String {
    if ns >= 1_000_000 {
        format!("{:.3}ms", ns as f64 * 1e-6)
    } else {
        format!("{:.1}us", ns as f64 * 1e-3)
    }
}

/// The report as tables for a terminal (as `/stalls` renders its own): the per-class totals,
/// then the pairs, newest first.
pub fn render_text(r: &MergeReport) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "blkobs merges at {} (window {})\n",
        r.now,
        if r.window_seconds > 0.0 {
            gap((r.window_seconds * 1e9).round() as u64)
        } else {
            "off".into()
        }
    );
    let _ = writeln!(
        o,
        "REQUESTS AT DISPATCH: {} class(es) (size and bios merged at the first dispatch)",
        r.classes.len()
    );
    if !r.classes.is_empty() {
        let _ = writeln!(
            o,
            "{:<10} {:<6} {:>10} {:>10} {:>8} {:>9} {:>10}",
            "DEVICE", "RWBS", "REQUESTS", "MISSED", "MISSED%", "MRG/RQ", "AVG BYTES"
        );
        for c in &r.classes {
            let n = c.requests.max(1) as f64;
            let _ = writeln!(
                o,
                "{:<10} {:<6} {:>10} {:>10} {:>7.2}% {:>9.2} {:>10.0}",
                c.device,
                c.class.rwbs,
                c.requests,
                c.missed_merges,
                c.missed_merges as f64 * 100.0 / n,
                c.merged_bios as f64 / n,
                c.bytes as f64 / n
            );
        }
    }
    let _ = writeln!(
        o,
        "\nMISSED ADJACENT MERGES: {} shown (newest first), {} recorded since start (second starts where first ended; sectors of 512 B)",
        r.pairs.len(),
        r.recorded
    );
    if r.pairs.is_empty() {
        return o;
    }
    let _ = writeln!(
        o,
        "{:<12} {:<10} {:>10} {:<6} {:>12} {:>6} {:<12} {:<6} {:>12} {:>6}",
        "TIME", "DEVICE", "GAP", "RWBS", "SECTOR", "LEN", "FIRST TIME", "RWBS", "SECTOR", "LEN"
    );
    for p in &r.pairs {
        let _ = writeln!(
            o,
            "{:<12} {:<10} {:>10} {:<6} {:>12} {:>6} {:<12} {:<6} {:>12} {:>6}",
            hhmmss(&p.second.time),
            p.device,
            gap(p.gap_ns),
            p.second.class.rwbs,
            p.second.sector,
            p.second.sectors,
            hhmmss(&p.first.time),
            p.first.class.rwbs,
            p.first.sector,
            p.first.sectors
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::snapshot::ClassTotals;
    use observer_common::{class::Class, maps::mkdev};

    #[test]
    fn report_filters_and_renders() {
        let clock = Clock::now();
        let mut snap = Snapshot::default();
        let mut t = ClassTotals::new();
        t.dispatch.record(4096, 1, 0);
        t.dispatch.record(4096, 2, 1);
        snap.classes.insert(("loop0".into(), Class(1)), t);
        snap.classes
            .insert(("loop1".into(), Class(0)), ClassTotals::new());
        // Device numbers that name no disk here: shown as MAJ:MIN.
        let dev = mkdev(4000, 7);
        let pairs: Vec<MissedMerge> = (0..5u64)
            .map(|k| MissedMerge {
                dev,
                class: 1,
                first_class: 1,
                sector: 808 + 8 * k,
                first_sector: 800 + 8 * k,
                sectors: 8,
                first_sectors: 8,
                dispatch_ns: 2_000 + 1_000 * k,
                first_dispatch_ns: 1_500 + 1_000 * k,
            })
            .collect();
        let disks = DiskView::default();
        let run = |q: &MergeFilter, window_ns| {
            report(
                &snap,
                (&pairs, 9),
                &DeviceFilter::default(),
                &disks,
                q,
                window_ns,
                &clock,
            )
        };
        let q = MergeFilter {
            limit: 3,
            ..Default::default()
        };
        let r = run(&q, 1_000_000);
        assert_eq!(r.classes.len(), 1, "only classes with requests counted");
        assert_eq!((r.classes[0].requests, r.classes[0].missed_merges), (2, 1));
        assert_eq!(r.pairs.len(), 3);
        assert_eq!(r.pairs[0].second.sector, 808 + 32, "newest first");
        assert_eq!(r.pairs[0].gap_ns, 500);
        assert_eq!(r.pairs[0].first.sector + 8, r.pairs[0].second.sector);
        assert_eq!(r.pairs[0].device, "4000:7");
        let text = render_text(&r);
        assert!(text.contains("window 1.000ms"), "{text}");
        assert!(
            text.contains("3 shown (newest first), 9 recorded"),
            "{text}"
        );
        assert!(text.contains("4000:7"), "{text}");
        let q = MergeFilter {
            since_ns: Some(4_000),
            limit: 10,
            device: Some("4000:7".into()),
        };
        let r = run(&q, 0);
        assert_eq!(r.pairs.len(), 3, "dispatched at 4000, 5000, 6000 ns");
        assert!(r.classes.is_empty(), "loop0 is not the device asked for");
        assert!(render_text(&r).contains("window off"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["pairs"][0]["second"]["rwbs"], "W");
        assert_eq!(json["pairs"][0]["first"]["sectors"], 8);
    }
}
