//! What was slow, what is stuck right now, and stall episodes: the domain behind `/stalls`
//! and `/inflight`.
//!
//! Sources: slow requests and ended stall episodes arrive from the kernel through the `EVENTS`
//! ring buffer ([`History::ingest`]); requests in flight and ongoing episodes are read from
//! `INFLIGHT` and `DEVSTATE` at query time ([`Current::read`]). All kernel times are
//! CLOCK_MONOTONIC ns; [`Clock`] turns them into wall-clock times for display.

use std::collections::{BTreeMap, VecDeque};

use observer_common::{
    class::{Class, FLAGS},
    maps::{Inflight, SlowEvent, StallEvent, STALL_DEVICE},
};
use serde::Serialize;

use crate::{config::DeviceFilter, devices, probes::Maps, reaper::monotonic_ns};

/// Converts kernel monotonic ns to wall-clock time.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// CLOCK_MONOTONIC now (ns).
    pub mono_now: u64,
    /// Wall clock now.
    pub wall_now: std::time::SystemTime,
}

impl Clock {
    /// Reads both clocks.
    pub fn now() -> Clock {
        Clock { mono_now: monotonic_ns(), wall_now: std::time::SystemTime::now() }
    }

    /// Wall-clock time of a monotonic timestamp.
    pub fn wall(&self, mono_ns: u64) -> std::time::SystemTime {
        if mono_ns <= self.mono_now {
            self.wall_now - std::time::Duration::from_nanos(self.mono_now - mono_ns)
        } else {
            self.wall_now + std::time::Duration::from_nanos(mono_ns - self.mono_now)
        }
    }

    /// RFC 3339 with milliseconds, UTC.
    pub fn rfc3339(&self, mono_ns: u64) -> String {
        humantime::format_rfc3339_millis(self.wall(mono_ns)).to_string()
    }

    /// Monotonic ns of a wall-clock time.
    pub fn mono(&self, wall: std::time::SystemTime) -> u64 {
        match self.wall_now.duration_since(wall) {
            Ok(d) => self.mono_now.saturating_sub(d.as_nanos() as u64),
            Err(e) => self.mono_now + e.duration().as_nanos() as u64,
        }
    }
}

/// Who submitted a request, captured at `block_io_start` in the submitting task.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Submitter {
    /// Process id (tgid); 0 for the block layer's own flush request.
    pub pid: u32,
    /// Command name (up to 15 bytes).
    pub comm: String,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// cgroup v2 path (relative to the cgroup v2 mount: /sys/fs/cgroup, its unified/ on a hybrid host, or under --host-root), when it still exists.
    pub cgroup: Option<String>,
}

fn comm(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

static CGROUP_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Sets where the cgroup v2 tree is: `<host_root>/sys/fs/cgroup` (or `/sys/fs/cgroup`), or its
/// `unified/` subdirectory on a hybrid (v1 + v2) host. Checked by filesystem magic, so a v1
/// hierarchy is never searched for v2 ids. Call once at startup.
pub fn set_cgroup_root(host_root: Option<&std::path::Path>) {
    let _ = CGROUP_ROOT.set(find_cgroup2_root(host_root.unwrap_or(std::path::Path::new("/"))));
}

fn find_cgroup2_root(root: &std::path::Path) -> std::path::PathBuf {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let base = root.join("sys/fs/cgroup");
    for cand in [base.clone(), base.join("unified")] {
        let Ok(c) = std::ffi::CString::new(cand.as_os_str().as_encoded_bytes()) else { continue };
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and statfs buffer.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0 && st.f_type as i64 == CGROUP2_SUPER_MAGIC {
            return cand;
        }
    }
    base
}

fn cgroup_root() -> &'static std::path::Path {
    CGROUP_ROOT.get_or_init(|| find_cgroup2_root(std::path::Path::new("/")))
}

/// cgroup v2 id → path, by the inode numbers of the cgroup v2 tree's directories (kernfs ids).
#[derive(Default)]
pub struct CgroupNames(BTreeMap<u64, Option<String>>);

impl CgroupNames {
    /// Path of a cgroup id ("/" for the root), cached.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.0.contains_key(&id) {
            let found = find_cgroup(cgroup_root(), id, 0);
            self.0.insert(id, found);
        }
        self.0.get(&id).cloned().flatten()
    }
}

fn find_cgroup(dir: &std::path::Path, id: u64, depth: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    if meta.ino() == id {
        let rel = dir.strip_prefix(cgroup_root()).ok()?;
        return Some(format!("/{}", rel.display()));
    }
    if depth > 8 {
        return None;
    }
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            if let Some(p) = find_cgroup(&e.path(), id, depth + 1) {
                return Some(p);
            }
        }
    }
    None
}

/// Op, flags and rwbs of a class, for reports.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassInfo {
    /// `op` label value.
    pub op: &'static str,
    /// Set flags, label names (`preflush`, `fua`, `sync`, `meta`, `readahead`).
    pub flags: Vec<&'static str>,
    /// blktrace rwbs letters, e.g. `FWFSM`.
    pub rwbs: String,
}

impl ClassInfo {
    /// Decodes a class.
    pub fn of(class: u16) -> ClassInfo {
        let c = Class(class);
        ClassInfo {
            op: c.op().name(),
            flags: FLAGS.iter().filter(|(b, _)| c.has(*b)).map(|(_, n)| *n).collect(),
            rwbs: c.rwbs(&mut [0; 8]).to_string(),
        }
    }
}

/// A completed request over its slow threshold.
#[derive(Clone, Debug, Serialize)]
pub struct SlowRequest {
    /// Completion time (RFC 3339).
    pub time: String,
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// First sector (512 B) at entry.
    pub sector: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Entered → dispatched (s); null for the flush request (never entered).
    pub queue_seconds: Option<f64>,
    /// Dispatched → completed (s); null if never dispatched itself.
    pub device_seconds: Option<f64>,
    /// Entered (or dispatched, for the flush request) → completed (s).
    pub total_seconds: f64,
    /// Bio merges into the request.
    pub merges: u32,
    /// Requeues.
    pub requeues: u8,
    /// `blk_status_t` name (`ok`, `ioerr`, ...).
    pub status: String,
    /// Who submitted it.
    pub submitter: Submitter,
}

/// A request in flight now.
#[derive(Clone, Debug, Serialize)]
pub struct InflightRequest {
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// `queue` (waiting for dispatch, or requeued) or `device` (at the driver).
    pub stage: &'static str,
    /// Time since it entered (or was dispatched, for the flush request), seconds.
    pub age_seconds: f64,
    /// Time spent in the current stage so far, seconds.
    pub stage_seconds: f64,
    /// When it entered (RFC 3339).
    pub since: String,
    /// First sector (512 B).
    pub sector: u64,
    /// Size at entry (bytes).
    pub bytes: u64,
    /// Requeues so far.
    pub requeues: u8,
    /// Who submitted it.
    pub submitter: Submitter,
}

/// A stall episode, ended or ongoing.
#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    /// Kernel device name.
    pub device: String,
    /// `device`: requests at the device, none completed; `dispatch`: requests queued, none dispatched.
    pub kind: &'static str,
    /// Start (RFC 3339).
    pub start: String,
    /// End (RFC 3339); null while ongoing.
    pub end: Option<String>,
    /// Length so far (s).
    pub duration_seconds: f64,
    /// Still going on.
    pub ongoing: bool,
    /// Requests waiting through the whole episode (known for ongoing episodes, and for ended
    /// ones through the slow-request records).
    pub waiting: u64,
    /// Waiting requests by rwbs, e.g. {"FWFSM": 8}.
    pub classes: BTreeMap<String, u64>,
}

/// Bounded history of kernel events.
pub struct History {
    slow: VecDeque<SlowEvent>,
    episodes: VecDeque<StallEvent>,
    cap_slow: usize,
    cap_episodes: usize,
    /// Slow requests dropped from the history because it was full.
    pub slow_overflow: u64,
    /// Episodes dropped from the history because it was full.
    pub episode_overflow: u64,
    /// (device number, kind) → (episodes, seconds), all ever seen (not bounded by the history).
    pub episode_totals: BTreeMap<(u32, u32), (u64, f64)>,
}

impl History {
    /// An empty history keeping at most `cap_slow` requests and `cap_episodes` episodes.
    pub fn new(cap_slow: usize, cap_episodes: usize) -> History {
        History {
            slow: VecDeque::new(),
            episodes: VecDeque::new(),
            cap_slow,
            cap_episodes,
            slow_overflow: 0,
            episode_overflow: 0,
            episode_totals: BTreeMap::new(),
        }
    }

    /// Adds one ring-buffer record; unknown or short records are ignored.
    pub fn ingest(&mut self, bytes: &[u8]) {
        let Some(kind) = bytes.get(..4).map(|b| u32::from_ne_bytes(b.try_into().unwrap())) else { return };
        match kind {
            observer_common::maps::EVENT_SLOW if bytes.len() >= std::mem::size_of::<SlowEvent>() => {
                // SAFETY: length checked; SlowEvent is repr(C) plain data.
                let ev: SlowEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                if self.slow.len() == self.cap_slow {
                    self.slow.pop_front();
                    self.slow_overflow += 1;
                }
                self.slow.push_back(ev);
            }
            observer_common::maps::EVENT_STALL if bytes.len() >= std::mem::size_of::<StallEvent>() => {
                // SAFETY: as above.
                let ev: StallEvent = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
                // Two CPUs may report the same episode: same device, kind and start.
                if self.episodes.iter().rev().take(16).any(|e| e.dev == ev.dev && e.stall == ev.stall && e.start_ns == ev.start_ns) {
                    return;
                }
                let t = self.episode_totals.entry((ev.dev, ev.stall)).or_default();
                t.0 += 1;
                t.1 += (ev.end_ns - ev.start_ns) as f64 * 1e-9;
                if self.episodes.len() == self.cap_episodes {
                    self.episodes.pop_front();
                    self.episode_overflow += 1;
                }
                self.episodes.push_back(ev);
            }
            _ => {}
        }
    }
}

/// Query filters, all optional.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this device (kernel name).
    pub device: Option<String>,
    /// Only events at or after this monotonic time (ns).
    pub since_ns: Option<u64>,
    /// Only requests whose total (or age) is at least this (ns); episodes at least this long.
    pub min_ns: Option<u64>,
    /// At most this many of each list.
    pub limit: usize,
}

fn kind_name(k: u32) -> &'static str {
    if k == STALL_DEVICE {
        "device"
    } else {
        "dispatch"
    }
}

/// Everything `/stalls` shows.
#[derive(Clone, Debug, Serialize)]
pub struct StallReport {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// Requests in flight longer than their op's slow threshold (or `min`), oldest first.
    pub stuck: Vec<InflightRequest>,
    /// Stall episodes, ongoing first, then newest first.
    pub episodes: Vec<Episode>,
    /// Slow completed requests, newest first.
    pub slow: Vec<SlowRequest>,
}

/// Reads the in-flight requests, oldest first.
pub fn inflight(maps: &Maps, filter: &DeviceFilter, f: &Filter, clock: &Clock, cg: &mut CgroupNames) -> Vec<InflightRequest> {
    let mut all: Vec<Inflight> = crate::mapdump::inflight(&maps.inflight).into_iter().map(|(_, e)| e).filter(Inflight::is_live).collect();
    all.sort_by_key(|e| if e.enter_ns != 0 { e.enter_ns } else { e.dispatch_ns });
    let mut out = Vec::new();
    for e in all {
        let name = devices::name(e.dev);
        if !filter.allows(&name) || f.device.as_deref().is_some_and(|d| d != name) {
            continue;
        }
        let start = if e.enter_ns != 0 { e.enter_ns } else { e.dispatch_ns };
        let age = clock.mono_now.saturating_sub(start);
        if f.min_ns.is_some_and(|m| age < m) {
            continue;
        }
        let at_device = e.dispatch_ns != 0 && e.requeued == 0;
        out.push(InflightRequest {
            device: name,
            class: ClassInfo::of(e.class),
            stage: if at_device { "device" } else { "queue" },
            age_seconds: age as f64 * 1e-9,
            stage_seconds: clock.mono_now.saturating_sub(if at_device { e.dispatch_ns } else { start }) as f64 * 1e-9,
            since: clock.rfc3339(start),
            sector: e.sector,
            bytes: e.size as u64,
            requeues: e.requeues,
            submitter: Submitter { pid: e.pid, comm: comm(&e.comm), cgroup_id: e.cgroup, cgroup: cg.path(e.cgroup) },
        });
        if out.len() >= f.limit {
            break;
        }
    }
    out
}

/// Builds the `/stalls` report. `slow_total_ns[op]` is the default "stuck" age per op.
pub fn report(
    maps: &Maps,
    history: &History,
    filter: &DeviceFilter,
    f: &Filter,
    stall_ns: u64,
    slow_total_ns: &[u64; 6],
) -> StallReport {
    let clock = Clock::now();
    let mut cg = CgroupNames::default();
    let dev_ok = |name: &str| filter.allows(name) && f.device.as_deref().is_none_or(|d| d == name);

    // Stuck: in flight longer than `min`, or than the op's total threshold.
    let entries: Vec<Inflight> = crate::mapdump::inflight(&maps.inflight).into_iter().map(|(_, e)| e).filter(Inflight::is_live).collect();
    let mut stuck = inflight(maps, filter, &Filter { min_ns: Some(f.min_ns.unwrap_or(0)), limit: usize::MAX, ..f.clone() }, &clock, &mut cg);
    stuck.retain(|r| {
        let op = observer_common::class::Op::ALL.iter().position(|o| o.name() == r.class.op).unwrap_or(5);
        let th = f.min_ns.unwrap_or(if slow_total_ns[op] != 0 { slow_total_ns[op] } else { stall_ns });
        r.age_seconds * 1e9 >= th as f64
    });
    stuck.truncate(f.limit);

    // Ongoing episodes, from the in-flight requests and the devices' last completion/dispatch.
    let mut episodes = Vec::new();
    let mut by_dev: BTreeMap<u32, Vec<&Inflight>> = BTreeMap::new();
    for e in &entries {
        by_dev.entry(e.dev).or_default().push(e);
    }
    for (dev, reqs) in by_dev {
        let name = devices::name(dev);
        if !dev_ok(&name) {
            continue;
        }
        let ds = maps.devstate_of(dev).unwrap_or_default();
        let at_device: Vec<&&Inflight> = reqs.iter().filter(|e| e.dispatch_ns != 0 && e.requeued == 0).collect();
        let queued: Vec<&&Inflight> = reqs.iter().filter(|e| e.enter_ns != 0 && (e.dispatch_ns == 0 || e.requeued != 0)).collect();
        for (kind, set, last, first) in [
            ("device", &at_device, ds.last_complete_ns, at_device.iter().map(|e| e.dispatch_ns).min()),
            ("dispatch", &queued, ds.last_dispatch_ns, queued.iter().map(|e| e.enter_ns).min()),
        ] {
            let Some(first) = first else { continue };
            let start = last.max(first);
            let len = clock.mono_now.saturating_sub(start);
            if len <= stall_ns.max(f.min_ns.unwrap_or(0)) {
                continue;
            }
            let mut classes = BTreeMap::new();
            for e in set.iter() {
                *classes.entry(ClassInfo::of(e.class).rwbs).or_insert(0) += 1;
            }
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

    // Ended episodes, newest first; waiting requests from the slow records that spanned them.
    for ev in history.episodes.iter().rev() {
        let name = devices::name(ev.dev);
        let len = ev.end_ns - ev.start_ns;
        if !dev_ok(&name) || f.since_ns.is_some_and(|s| ev.end_ns < s) || f.min_ns.is_some_and(|m| len < m) {
            continue;
        }
        let mut classes = BTreeMap::new();
        let mut waiting = 0;
        for s in history.slow.iter().filter(|s| s.dev == ev.dev && s.complete_ns >= ev.end_ns) {
            let spans = if ev.stall == STALL_DEVICE {
                s.req.dispatch_ns != 0 && s.req.dispatch_ns <= ev.start_ns
            } else {
                s.req.enter_ns != 0 && s.req.enter_ns <= ev.start_ns && (s.req.dispatch_ns == 0 || s.req.dispatch_ns >= ev.end_ns)
            };
            if spans {
                waiting += 1;
                *classes.entry(ClassInfo::of(s.req.class).rwbs).or_insert(0) += 1;
            }
        }
        episodes.push(Episode {
            device: name,
            kind: kind_name(ev.stall),
            start: clock.rfc3339(ev.start_ns),
            end: Some(clock.rfc3339(ev.end_ns)),
            duration_seconds: len as f64 * 1e-9,
            ongoing: false,
            waiting,
            classes,
        });
        if episodes.len() >= f.limit {
            break;
        }
    }
    episodes.truncate(f.limit);

    let mut slow = Vec::new();
    for ev in history.slow.iter().rev() {
        if f.since_ns.is_some_and(|s| ev.complete_ns < s) {
            break;
        }
        let name = devices::name(ev.dev);
        if !dev_ok(&name) {
            continue;
        }
        let r = slow_request(ev, name, &clock, &mut cg);
        if f.min_ns.is_some_and(|m| r.total_seconds * 1e9 < m as f64) {
            continue;
        }
        slow.push(r);
        if slow.len() >= f.limit {
            break;
        }
    }
    StallReport { now: clock.rfc3339(clock.mono_now), stuck, episodes, slow }
}

fn slow_request(ev: &SlowEvent, device: String, clock: &Clock, cg: &mut CgroupNames) -> SlowRequest {
    let e = &ev.req;
    let start = if e.enter_ns != 0 { e.enter_ns } else { e.dispatch_ns };
    SlowRequest {
        time: clock.rfc3339(ev.complete_ns),
        device,
        class: ClassInfo::of(e.class),
        sector: e.sector,
        bytes: e.bytes,
        queue_seconds: (e.enter_ns != 0).then(|| {
            (if e.dispatch_ns != 0 { e.dispatch_ns } else { ev.complete_ns } - e.enter_ns) as f64 * 1e-9
        }),
        device_seconds: (e.dispatch_ns != 0).then(|| (ev.complete_ns - e.dispatch_ns) as f64 * 1e-9),
        total_seconds: (ev.complete_ns - start) as f64 * 1e-9,
        merges: ev.merges,
        requeues: e.requeues,
        status: crate::metrics::status_name(ev.status as u8),
        submitter: Submitter { pid: e.pid, comm: comm(&e.comm), cgroup_id: e.cgroup, cgroup: cg.path(e.cgroup) },
    }
}

fn secs(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.3}s")
    } else {
        format!("{:.3}ms", v * 1e3)
    }
}

fn opt_secs(v: Option<f64>) -> String {
    v.map(secs).unwrap_or_else(|| "-".into())
}

fn hhmmss(rfc: &str) -> &str {
    rfc.get(11..23).unwrap_or(rfc)
}

/// The report as a table for a terminal.
pub fn render_text(r: &StallReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "blkobs stalls at {}\n", r.now);
    let _ = writeln!(o, "STUCK NOW: {} request(s) in flight over threshold (oldest first)", r.stuck.len());
    if !r.stuck.is_empty() {
        let _ = writeln!(o, "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>3} {:>7} {:<16} {}", "DEVICE", "STAGE", "AGE", "IN STAGE", "RWBS", "SECTOR", "BYTES", "RQ", "PID", "COMM", "CGROUP");
        for s in &r.stuck {
            let _ = writeln!(o, "{:<10} {:<7} {:>10} {:>10} {:<6} {:>12} {:>8} {:>3} {:>7} {:<16} {}",
                s.device, s.stage, secs(s.age_seconds), secs(s.stage_seconds), s.class.rwbs, s.sector, s.bytes, s.requeues,
                s.submitter.pid, s.submitter.comm, s.submitter.cgroup.as_deref().unwrap_or("-"));
        }
    }
    let _ = writeln!(o, "\nSTALL EPISODES: {} (device = no completion while requests at device; dispatch = none dispatched while queued)", r.episodes.len());
    if !r.episodes.is_empty() {
        let _ = writeln!(o, "{:<10} {:<9} {:<13} {:>10} {:>8} {:<8} {}", "DEVICE", "KIND", "START", "DURATION", "WAITING", "STATE", "CLASSES");
        for e in &r.episodes {
            let classes: Vec<String> = e.classes.iter().map(|(k, v)| format!("{k}x{v}")).collect();
            let _ = writeln!(o, "{:<10} {:<9} {:<13} {:>10} {:>8} {:<8} {}", e.device, e.kind, hhmmss(&e.start),
                secs(e.duration_seconds), e.waiting, if e.ongoing { "ONGOING" } else { "ended" }, classes.join(" "));
        }
    }
    let _ = writeln!(o, "\nSLOW REQUESTS: {} (newest first)", r.slow.len());
    if !r.slow.is_empty() {
        let _ = writeln!(o, "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} {:>3} {:>7} {:<16} {}",
            "TIME", "DEVICE", "RWBS", "QUEUE", "DEVICE", "TOTAL", "SECTOR", "BYTES", "MRG", "RQ", "PID", "COMM", "CGROUP");
        for s in &r.slow {
            let _ = writeln!(o, "{:<13} {:<10} {:<6} {:>10} {:>10} {:>10} {:>12} {:>8} {:>3} {:>3} {:>7} {:<16} {}",
                hhmmss(&s.time), s.device, s.class.rwbs, opt_secs(s.queue_seconds), opt_secs(s.device_seconds), secs(s.total_seconds),
                s.sector, s.bytes, s.merges, s.requeues, s.submitter.pid, s.submitter.comm, s.submitter.cgroup.as_deref().unwrap_or("-"));
        }
    }
    o
}
