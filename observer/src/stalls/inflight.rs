//! Requests in flight now, from `INFLIGHT_SLOTS` and `INFLIGHT`: `/inflight` and the stuck list of `/stalls`.

use observer_common::maps::Inflight;

use std::collections::{BTreeMap, HashMap};

use super::records::{Filter, InflightRequest, Submitter, UpperIo};
use crate::{
    bpf::{
        batch::{read_bios, read_inflight},
        maps::KernelMaps,
    },
    config::DeviceFilter,
    disks::DiskView,
    labels::{comm, CgroupNames, ClassInfo},
    time::Clock,
};

/// The live requests of `INFLIGHT` (disks named and typed by `disks`), and the bios of `BIO_QUEUED` that have no request yet
/// (stage `queue` since their entry: sleeping for a tag, or throttled), on devices
/// `filter` allows and `f` selects (`device`, `min_ns` as a minimum age, `limit`), oldest
/// first, with stage, age and submitter, the upper I/O each serves and the I/Os below that
/// hold each (`UPPER`, observer-ebpf inherit.rs; at most [`MAX_DEPTH`] levels down).
pub fn inflight(
    maps: &KernelMaps,
    disks: &DiskView,
    filter: &DeviceFilter,
    f: &Filter,
    clock: &Clock,
    cg: &mut CgroupNames,
) -> Vec<InflightRequest> {
    let mut all: Vec<(u64, Inflight)> = read_inflight(&maps.inflight)
        .into_iter()
        .filter(|(_, e)| e.is_live())
        .collect();
    // A bio without a request, shown as a queued request: same fields, no submitter command
    // or cgroup (captured only for requests). Key 0: it has no entry of its own yet, so no
    // upper link.
    let bios: Vec<_> = read_bios(&maps.bio_slots, &maps.bio_queued)
        .into_iter()
        .filter(|(_, b)| b.queue_ns != 0)
        .collect();
    all.extend(bios.into_iter().map(|(_, b)| {
        (
            0,
            Inflight {
                enter_ns: b.queue_ns,
                dev: b.dev,
                class: b.class,
                sector: b.sector,
                size: b.size,
                pid: b.pid,
                ..Inflight::default()
            },
        )
    }));
    all.sort_by_key(|(_, e)| e.start_ns());
    let uppers: Vec<Option<(u32, u64)>> = all.iter().map(|(k, e)| upper_of(maps, *k, e)).collect();
    // The entries with an upper I/O, by upper disk, sorted by upper sector.
    let mut below: HashMap<u32, Vec<(u64, usize)>> = HashMap::new();
    for (j, u) in uppers.iter().enumerate() {
        if let Some((dev, sector)) = u {
            below.entry(*dev).or_default().push((*sector, j));
        }
    }
    for v in below.values_mut() {
        v.sort_unstable();
    }
    let mut view = View {
        all: &all,
        uppers: &uppers,
        below: &below,
        clock,
        cg,
        disks,
        bio_based: BTreeMap::new(),
        names: HashMap::new(),
    };
    let mut out = Vec::new();
    for (i, (_, e)) in all.iter().enumerate() {
        let name = view.name(e.dev);
        if !filter.allows(&name) || f.device.as_deref().is_some_and(|d| d != name) {
            continue;
        }
        let age = clock.mono_now.saturating_sub(e.start_ns());
        if f.min_ns.is_some_and(|m| age < m) {
            continue;
        }
        out.push(view.record(i, 0));
        if out.len() >= f.limit {
            break;
        }
    }
    out
}

/// Levels of [`InflightRequest::held_by`] followed down from an I/O (dm on md on legs is 2).
pub const MAX_DEPTH: usize = 4;

/// The upper disk and sector of the entry at `key` made at `e.enter_ns`, from `UPPER`: `None`
/// for an entry not made from a remapped bio, or whose link belongs to an earlier entry at the
/// same key.
fn upper_of(maps: &KernelMaps, key: u64, e: &Inflight) -> Option<(u32, u64)> {
    if key == 0 || e.enter_ns == 0 {
        return None;
    }
    let u = maps.upper.get(&key, 0).ok()?;
    (u.enter_ns == e.enter_ns && u.dev != 0).then_some((u.dev, u.sector))
}

/// The live entries, oldest first, and what records are made from them with.
struct View<'a> {
    all: &'a [(u64, Inflight)],
    uppers: &'a [Option<(u32, u64)>],
    below: &'a HashMap<u32, Vec<(u64, usize)>>,
    clock: &'a Clock,
    cg: &'a mut CgroupNames,
    disks: &'a DiskView,
    bio_based: BTreeMap<u32, bool>,
    names: HashMap<u32, String>,
}

impl View<'_> {
    fn name(&mut self, dev: u32) -> String {
        self.names
            .entry(dev)
            .or_insert_with(|| self.disks.name(dev))
            .clone()
    }

    /// The entries that serve entry `i`: their upper I/O is `i`'s disk at a sector inside `i`,
    /// and they entered after `i`.
    fn serving(&self, i: usize) -> Vec<usize> {
        let e = &self.all[i].1;
        let Some(v) = self.below.get(&e.dev) else {
            return Vec::new();
        };
        let end = e.sector + (e.size as u64).div_ceil(512).max(1);
        let from = v.partition_point(|&(s, _)| s < e.sector);
        v[from..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .map(|&(_, j)| j)
            .filter(|&j| j != i && self.all[j].1.start_ns() >= e.start_ns())
            .collect()
    }

    /// The record of entry `i`, with the entries that serve it down to [`MAX_DEPTH`].
    fn record(&mut self, i: usize, depth: usize) -> InflightRequest {
        let e = self.all[i].1;
        let clock = self.clock;
        let start = e.start_ns();
        let at_device = e.at_device();
        // A bio of a bio-based disk (dm, md): in flight since its entry, no stages.
        let bio = *self
            .bio_based
            .entry(e.dev)
            .or_insert_with(|| self.disks.bio_based(e.dev));
        let held_by = if depth < MAX_DEPTH {
            self.serving(i)
                .into_iter()
                .map(|j| self.record(j, depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        let upper = self.uppers[i].map(|(dev, sector)| UpperIo {
            device: self.name(dev),
            sector,
        });
        InflightRequest {
            device: self.name(e.dev),
            class: ClassInfo::of(e.class),
            stage: if bio {
                "total"
            } else if at_device {
                "device"
            } else {
                "queue"
            },
            age_seconds: clock.mono_now.saturating_sub(start) as f64 * 1e-9,
            stage_seconds: clock.mono_now.saturating_sub(if at_device {
                e.dispatch_ns
            } else {
                start
            }) as f64
                * 1e-9,
            since: clock.rfc3339(start),
            sector: e.sector,
            bytes: e.size as u64,
            requeues: e.requeues,
            submitter: Submitter {
                pid: e.pid,
                comm: comm(&e.comm),
                cgroup_id: e.cgroup,
                cgroup: self.cg.path(e.cgroup),
            },
            owner_cgroup_id: e.owner_cgroup,
            owner_cgroup: self.cg.path(e.owner_cgroup),
            upper,
            held_by,
        }
    }
}
