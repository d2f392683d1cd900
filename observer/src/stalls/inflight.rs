//! Requests in flight now, from `INFLIGHT_SLOTS` and `INFLIGHT`: `/inflight` and the stuck list of `/stalls`.

use observer_common::maps::Inflight;

use super::{
    cgroup::CgroupNames,
    records::{Filter, InflightRequest, Submitter},
};
use crate::{
    bpf::{
        batch::{read_bios, read_inflight},
        maps::KernelMaps,
    },
    config::DeviceFilter,
    labels::{bio_based, comm, device_name, ClassInfo},
    time::Clock,
};

/// The live requests of `INFLIGHT`, and the bios of `BIO_QUEUED` that have no request yet
/// (stage `queue` since their entry: sleeping for a request slot, or throttled), on devices
/// `filter` allows and `f` selects (`device`, `min_ns` as a minimum age, `limit`), oldest
/// first, with stage, age and submitter.
pub fn inflight(
    maps: &KernelMaps,
    filter: &DeviceFilter,
    f: &Filter,
    clock: &Clock,
    cg: &mut CgroupNames,
) -> Vec<InflightRequest> {
    let mut all: Vec<Inflight> = read_inflight(&maps.inflight)
        .into_iter()
        .map(|(_, e)| e)
        .filter(Inflight::is_live)
        .collect();
    // A bio without a request, shown as a queued request: same fields, no submitter command
    // or cgroup (captured only for requests).
    let bios: Vec<_> = read_bios(&maps.bio_slots, &maps.bio_queued)
        .into_iter()
        .filter(|(_, b)| b.queue_ns != 0)
        .collect();
    all.extend(bios.into_iter().map(|(_, b)| Inflight {
        enter_ns: b.queue_ns,
        dev: b.dev,
        class: b.class,
        sector: b.sector,
        size: b.size,
        pid: b.pid,
        ..Inflight::default()
    }));
    all.sort_by_key(Inflight::start_ns);
    let mut bio_based_disks = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    for e in all {
        let name = device_name(e.dev);
        if !filter.allows(&name) || f.device.as_deref().is_some_and(|d| d != name) {
            continue;
        }
        let start = e.start_ns();
        let age = clock.mono_now.saturating_sub(start);
        if f.min_ns.is_some_and(|m| age < m) {
            continue;
        }
        let at_device = e.at_device();
        // A bio of a bio-based disk (dm, md): in flight since its entry, no stages.
        let bio = *bio_based_disks
            .entry(e.dev)
            .or_insert_with(|| bio_based(e.dev));
        out.push(InflightRequest {
            device: name,
            class: ClassInfo::of(e.class),
            stage: if bio {
                "total"
            } else if at_device {
                "device"
            } else {
                "queue"
            },
            age_seconds: age as f64 * 1e-9,
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
                cgroup: cg.path(e.cgroup),
            },
            owner_cgroup_id: e.owner_cgroup,
            owner_cgroup: cg.path(e.owner_cgroup),
        });
        if out.len() >= f.limit {
            break;
        }
    }
    out
}
