//! The `/stalls` report: requests stuck now, stall episodes (ongoing and ended) and slow
//! completed requests, each list filtered and bounded by a [`Filter`].

use std::collections::BTreeMap;

use observer_common::{
    class::Op,
    maps::{Inflight, SlowEvent, StallEvent, STALL_DEVICE},
    stage::latency,
};

use super::{
    file::{of_slow, Mounts},
    inflight::inflight,
    records::{Episode, Filter, InflightRequest, SlowRequest, StallReport, Submitter},
};
use crate::{
    bpf::{batch::read_inflight, maps::KernelMaps, reqstate::RequestProbe},
    collect::events::History,
    config::DeviceFilter,
    disks::DiskView,
    labels::{comm, stall_kind_name, status_name, CgroupNames, ClassInfo},
    time::Clock,
};

/// What one report is about: the maps, the history, which devices, and the thresholds.
pub struct ReportInput<'a> {
    /// The kernel maps (`INFLIGHT`, `DEVSTATE`).
    pub maps: &'a KernelMaps,
    /// Slow requests and ended episodes received so far.
    pub history: &'a History,
    /// The configured device filter (`[devices]`).
    pub filter: &'a DeviceFilter,
    /// The disks (device names, bio-based, dm names).
    pub disks: &'a DiskView,
    /// The query's filter.
    pub query: &'a Filter,
    /// The stall episode threshold (ns).
    pub stall_ns: u64,
    /// Per op (index of [`Op::ALL`]): the slow threshold of stage total (ns), the default
    /// "stuck" age; 0 = use `stall_ns`.
    pub slow_total_ns: [u64; 6],
    /// The request-state probe, which looks up the file a request carries (None: not loaded,
    /// then only what the slow events carry is shown, without paths).
    pub probe: Option<&'a RequestProbe>,
}

impl ReportInput<'_> {
    /// Whether a device is in the report.
    fn device_ok(&self, name: &str) -> bool {
        self.filter.allows(name) && self.query.device.as_deref().is_none_or(|d| d == name)
    }
}

/// Builds the `/stalls` report at the current time.
pub fn report(input: &ReportInput) -> StallReport {
    let clock = Clock::now();
    let mut cg = CgroupNames::default();
    let entries: Vec<Inflight> = read_inflight(&input.maps.inflight)
        .into_iter()
        .map(|(_, e)| e)
        .filter(Inflight::is_live)
        .collect();
    // One slow request asked for by its id: nothing else.
    let only_slow = input.query.id.is_some();
    let stuck = if only_slow {
        Vec::new()
    } else {
        stuck(input, &clock, &mut cg)
    };
    let mut episodes = if only_slow {
        Vec::new()
    } else {
        ongoing_episodes(input, &entries, &clock)
    };
    if !only_slow {
        ended_episodes(input, &clock, &mut episodes);
    }
    episodes.truncate(input.query.limit);
    let slow = slow_requests(input, &clock, &mut cg);
    let dm_names = stuck
        .iter()
        .map(|r| &r.device)
        .chain(episodes.iter().map(|e| &e.device))
        .chain(slow.iter().map(|s| &s.device))
        .filter_map(|d| Some((d.clone(), input.disks.device_mapper(d)?.0)))
        .collect();
    StallReport {
        now: clock.rfc3339(clock.mono_now),
        stuck,
        episodes,
        slow,
        dm_names,
    }
}

/// Requests in flight longer than `min`, or than their op's total threshold, oldest first.
fn stuck(input: &ReportInput, clock: &Clock, cg: &mut CgroupNames) -> Vec<InflightRequest> {
    let f = input.query;
    let all = Filter {
        min_ns: Some(f.min_ns.unwrap_or(0)),
        limit: usize::MAX,
        ..f.clone()
    };
    let mut stuck = inflight(
        input.maps,
        input.disks,
        input.filter,
        &all,
        clock,
        cg,
        input.probe,
    );
    stuck.retain(|r| {
        let op = Op::ALL
            .iter()
            .position(|o| o.name() == r.class.op)
            .unwrap_or(5);
        let default = if input.slow_total_ns[op] != 0 {
            input.slow_total_ns[op]
        } else {
            input.stall_ns
        };
        r.age_seconds * 1e9 >= f.min_ns.unwrap_or(default) as f64
    });
    stuck.truncate(f.limit);
    stuck
}

/// Ongoing episodes, from the in-flight requests and each device's last completion (kind
/// `device`) or dispatch (kind `dispatch`) in `DEVSTATE`.
fn ongoing_episodes(input: &ReportInput, entries: &[Inflight], clock: &Clock) -> Vec<Episode> {
    let mut episodes = Vec::new();
    let mut by_dev: BTreeMap<u32, Vec<&Inflight>> = BTreeMap::new();
    for e in entries {
        by_dev.entry(e.dev).or_default().push(e);
    }
    for (dev, reqs) in by_dev {
        let name = input.disks.name(dev);
        if !input.device_ok(&name) {
            continue;
        }
        let ds = input.maps.devstate_of(dev).unwrap_or_default();
        // A bio-based disk's bios (dm, md) are at the device from their entry: nothing is
        // dispatched there (the programs end its device stalls at each bio completion).
        let bio = input.disks.bio_based(dev);
        let at_device: Vec<&Inflight> = reqs
            .iter()
            .copied()
            .filter(|e| bio || e.at_device())
            .collect();
        let queued: Vec<&Inflight> = reqs
            .iter()
            .copied()
            .filter(|e| !bio && e.enter_ns != 0 && !e.at_device())
            .collect();
        for (kind, set, last, first) in [
            (
                "device",
                &at_device,
                ds.last_complete_ns,
                at_device
                    .iter()
                    .map(|e| if bio { e.enter_ns } else { e.dispatch_ns })
                    .min(),
            ),
            (
                "dispatch",
                &queued,
                ds.last_dispatch_ns,
                queued.iter().map(|e| e.enter_ns).min(),
            ),
        ] {
            let Some(first) = first else { continue };
            let start = last.max(first);
            let len = clock.mono_now.saturating_sub(start);
            if len <= input.stall_ns.max(input.query.min_ns.unwrap_or(0)) {
                continue;
            }
            let classes = rwbs_counts(set.iter().map(|e| e.class));
            episodes.push(Episode {
                device: name.clone(),
                kind,
                start: clock.rfc3339(start),
                end: None,
                duration_seconds: len as f64 * 1e-9,
                ongoing: true,
                waiting: set.len() as u64,
                classes,
            });
        }
    }
    episodes
}

/// Requests per rwbs string, e.g. {"FWFSM": 8}.
fn rwbs_counts(classes: impl Iterator<Item = u16>) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for class in classes {
        *counts.entry(ClassInfo::of(class).rwbs).or_insert(0) += 1;
    }
    counts
}

/// Whether slow request `s` waited through all of episode `ev`: at the device since before it
/// started (kind `device`), or queued since before it started and not dispatched until it ended
/// (kind `dispatch`).
fn spans(s: &SlowEvent, ev: &StallEvent) -> bool {
    if ev.stall == STALL_DEVICE {
        s.req.dispatch_ns != 0 && s.req.dispatch_ns <= ev.start_ns
    } else {
        s.req.enter_ns != 0
            && s.req.enter_ns <= ev.start_ns
            && (s.req.dispatch_ns == 0 || s.req.dispatch_ns >= ev.end_ns)
    }
}

/// Appends ended episodes, newest first, until `episodes` holds `limit`; their waiting
/// requests come from the slow records that spanned them.
fn ended_episodes(input: &ReportInput, clock: &Clock, episodes: &mut Vec<Episode>) {
    let (f, history) = (input.query, input.history);
    for ev in history.episodes().iter().rev() {
        let name = input.disks.name(ev.dev);
        let len = ev.end_ns - ev.start_ns;
        if !input.device_ok(&name)
            || f.since_ns.is_some_and(|s| ev.end_ns < s)
            || f.min_ns.is_some_and(|m| len < m)
        {
            continue;
        }
        let waiting: Vec<&SlowEvent> = history
            .slow()
            .iter()
            .filter(|s| s.dev == ev.dev && s.complete_ns >= ev.end_ns && spans(s, ev))
            .collect();
        episodes.push(Episode {
            device: name,
            kind: stall_kind_name(ev.stall),
            start: clock.rfc3339(ev.start_ns),
            end: Some(clock.rfc3339(ev.end_ns)),
            duration_seconds: len as f64 * 1e-9,
            ongoing: false,
            waiting: waiting.len() as u64,
            classes: rwbs_counts(waiting.iter().map(|s| s.req.class)),
        });
        if episodes.len() >= f.limit {
            break;
        }
    }
}

/// Slow completed requests, newest first, since `since` and at least `min`.
fn slow_requests(input: &ReportInput, clock: &Clock, cg: &mut CgroupNames) -> Vec<SlowRequest> {
    let f = input.query;
    let h = input.history;
    let mut slow = Vec::new();
    let only = f.id.map(|id| h.slow_index(id));
    let mounts = Mounts::read();
    let kept = h.slow().iter().enumerate().rev();
    let kept: Box<dyn Iterator<Item = (usize, &SlowEvent)>> = match only {
        None => Box::new(kept),
        Some(i) => Box::new(kept.filter(move |(j, _)| Some(*j) == i)),
    };
    for (i, ev) in kept {
        if f.since_ns.is_some_and(|s| ev.complete_ns < s) {
            break;
        }
        let name = input.disks.name(ev.dev);
        if !input.device_ok(&name) {
            continue;
        }
        let mut r = slow_request(ev, name, input.disks.bio_based(ev.dev), clock, cg);
        r.file = of_slow(&ev.file, input.probe, &mounts);
        r.id = h.slow_id(i).to_string();
        if f.min_ns.is_some_and(|m| r.total_seconds * 1e9 < m as f64) {
            continue;
        }
        slow.push(r);
        if slow.len() >= f.limit {
            break;
        }
    }
    slow
}

/// One slow-request record as the API shows it (`bio_based`: of a bio-based disk).
fn slow_request(
    ev: &SlowEvent,
    device: String,
    bio_based: bool,
    clock: &Clock,
    cg: &mut CgroupNames,
) -> SlowRequest {
    let e = &ev.req;
    // As the programs took them (observer_common::stage): a stage it did not go through is none.
    let lat = latency(e.enter_ns, e.dispatch_ns, ev.complete_ns);
    SlowRequest {
        id: String::new(),
        time: clock.rfc3339(ev.complete_ns),
        device,
        class: ClassInfo::of(e.class),
        sector: e.sector,
        bytes: e.bytes,
        // A bio of a bio-based disk (dm, md) has its total only.
        queue_seconds: (e.enter_ns != 0 && !bio_based).then_some(lat.queue as f64 * 1e-9),
        device_seconds: (e.dispatch_ns != 0).then_some(lat.device as f64 * 1e-9),
        total_seconds: lat.total as f64 * 1e-9,
        merges: ev.merges,
        requeues: e.requeues,
        status: status_name(ev.status as u8),
        submitter: Submitter {
            pid: e.pid,
            comm: comm(&e.comm),
            cgroup_id: e.cgroup,
            cgroup: cg.path(e.cgroup),
        },
        owner_cgroup_id: e.owner_cgroup,
        owner_cgroup: cg.path(e.owner_cgroup),
        file: None,
    }
}
