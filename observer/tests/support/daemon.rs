//! The observer daemon under test, and what it says in `GET /devices`.

use std::{
    ops::{Deref, DerefMut},
    path::Path,
    process::{Command, Stdio},
    sync::{Mutex, MutexGuard},
    time::Duration,
};

use serde_json::Value;

use super::{free_addr, http, observer_bin, wait_for, ChildGuard, Metrics};

/// The observer daemon on a loopback address, up (`/healthz` answered 200) once constructed.
/// Drop sends SIGTERM and waits up to 10 s; the [`ChildGuard`] inside then kills whatever is
/// left. Derefs to that guard (pid, signal, wait_timeout).
pub struct Daemon {
    proc: ChildGuard,
    pub addr: String,
}

impl Daemon {
    /// The daemon on a free port with `extra` arguments.
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_env(extra, &[])
    }

    /// Asserts that `blkobs_map_entries{map=label}` and `blkobs_map_capacity{map=label}` equal
    /// the daemon's BPF map `kernel_name` as the kernel dumps and describes it (`bpftool`:
    /// keys, `max_entries`), in a scrape between two dumps that agree (I/O on another disk may
    /// add a key meanwhile: then it is tried again, 5 times at most). The map must have keys.
    pub fn assert_map_fill(&self, kernel_name: &str, label: &str) {
        let (id, max) = super::bpf_map_of(self.pid(), kernel_name)
            .unwrap_or_else(|| panic!("the daemon holds no BPF map {kernel_name}"));
        for _ in 0..5 {
            let before = super::bpf_map_keys(id);
            let m = self.scrape();
            if super::bpf_map_keys(id) != before {
                continue;
            }
            let entries = m.sum("blkobs_map_entries", &[("map", label)]);
            let capacity = m.sum("blkobs_map_capacity", &[("map", label)]);
            eprintln!(
                "{kernel_name}: {entries} of {capacity} entries in /metrics; bpftool: {before} of {max}"
            );
            assert!(before > 0, "{kernel_name} has no key: nothing to compare");
            assert_eq!(
                entries, before as f64,
                "{kernel_name} entries vs bpftool's dump"
            );
            assert_eq!(
                capacity, max as f64,
                "{kernel_name} capacity vs bpftool's max_entries"
            );
            return;
        }
        panic!("{kernel_name} changed between every two dumps (5 tries)");
    }

    /// The TCP port the daemon listens on (of [`Daemon::addr`]), e.g. for a Prometheus
    /// scrape config.
    pub fn port(&self) -> u16 {
        let port = self.addr.rsplit(':').next().expect("host:port");
        port.parse().expect("a numeric port")
    }

    /// Starts with extra environment variables (e.g. OBSERVER_ATTACH=raw_tp).
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let addr = free_addr();
        let child = Command::new(observer_bin())
            .args(["--listen", &addr])
            .args(extra)
            .env("OBSERVER_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting observer");
        Self::healthy(ChildGuard { child }, addr, None)
    }

    /// Starts the daemon with `cmd` (which must end with the observer binary and its
    /// arguments, `--listen addr` included; it may be a wrapper: setpriv, unshare, strace),
    /// output to `log`, and waits until `/healthz` answers.
    pub fn spawn(cmd: Command, addr: String, log: &Path) -> Daemon {
        Self::healthy(ChildGuard::spawn(cmd, "observer", log), addr, Some(log))
    }

    /// As [`Daemon::spawn`], but up once `ready(addr)` returns true (e.g. `/healthz` over TLS
    /// with credentials) instead of a plain `GET /healthz`.
    pub fn spawn_until(
        cmd: Command,
        addr: String,
        log: &Path,
        ready: impl Fn(&str) -> bool,
    ) -> Daemon {
        Self::ready(
            ChildGuard::spawn(cmd, "observer", log),
            addr,
            Some(log),
            ready,
        )
    }

    fn healthy(proc: ChildGuard, addr: String, log: Option<&Path>) -> Daemon {
        Self::ready(proc, addr, log, |addr| {
            http(&format!("http://{addr}/healthz")).is_ok_and(|(s, _)| s == 200)
        })
    }

    fn ready(
        proc: ChildGuard,
        addr: String,
        log: Option<&Path>,
        ready: impl Fn(&str) -> bool,
    ) -> Daemon {
        let mut d = Daemon { proc, addr };
        let log = || {
            log.map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .unwrap_or_default()
        };
        // Under TCG (the kernel matrix) loading and verifying the programs takes ~10x longer.
        let limit = if std::env::var_os("BLKOBS_VM").is_some() {
            120
        } else {
            30
        };
        let up = wait_for(Duration::from_secs(limit), || {
            if let Some(status) = d.proc.child.try_wait().unwrap() {
                panic!("observer exited early: {status}\n{}", log());
            }
            ready(&d.addr).then_some(())
        });
        assert!(
            up.is_some(),
            "observer did not become ready in {limit} s on {}\n{}",
            d.addr,
            log()
        );
        d
    }

    /// GET a path; (status, body).
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        http(&format!("http://{}{}", self.addr, path))
    }

    pub fn metrics_text(&self) -> String {
        let (status, body) = self.get("/metrics").expect("scrape");
        assert_eq!(status, 200);
        body
    }

    pub fn scrape(&self) -> Metrics {
        Metrics::parse(&self.metrics_text())
    }

    /// Waits until nothing of `devices` is in flight for the daemon (`blkobs_inflight_requests`
    /// 0: every request ended or, its completion unseen, was retired by the reaper), then for one
    /// more whole pass, so a retirement under way is counted too. Call it once the I/O is done.
    pub fn wait_settled(&self, devices: &[&str]) {
        let busy = |m: &Metrics| -> f64 {
            devices
                .iter()
                .map(|d| m.sum("blkobs_inflight_requests", &[("device", d)]))
                .sum()
        };
        let mut left = f64::NAN;
        // A hang guard, not a timing bound: the reaper retires an unseen completion in 2-3 s.
        let idle = super::wait_every(Duration::from_millis(100), Duration::from_secs(120), || {
            left = busy(&self.scrape());
            left == 0.0
        });
        assert!(
            idle,
            "{left} requests of {devices:?} still in flight after 120 s"
        );
        self.wait_passes(1);
    }

    /// Waits until the daemon has done `n` more housekeeping passes (`blkobs_reaper_passes_total`,
    /// one a second: rescan, reaper) than when called. After I/O went idle, two passes retire
    /// every completion the programs did not see; `n` = 3 also covers a pass already under way.
    pub fn wait_passes(&self, n: u64) {
        let passes = || self.scrape().sum("blkobs_reaper_passes_total", &[]) as u64;
        let start = passes();
        // A hang guard, not a timing bound: a pass takes a second unless the daemon is stuck.
        let ok = super::wait_every(Duration::from_millis(100), Duration::from_secs(120), || {
            passes() >= start + n
        });
        assert!(
            ok,
            "the daemon did not do {n} housekeeping passes in 120 s (from {start})"
        );
    }
}

impl Deref for Daemon {
    type Target = ChildGuard;
    fn deref(&self) -> &ChildGuard {
        &self.proc
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut ChildGuard {
        &mut self.proc
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.proc.signal(libc::SIGTERM);
        let _ = self.proc.wait_timeout(Duration::from_secs(10));
    }
}

/// A daemon the tests of one binary share, started by the first of them: under TCG each start
/// (loading and verifying the programs) takes 10–20 s. A test holds it for its whole run (the
/// lock serializes those tests) and reads only its own disk, as deltas between its own
/// scrapes. Stopped (SIGTERM, as [`Daemon`]'s drop) when the test process exits.
pub struct SharedDaemon(Mutex<Option<Daemon>>);

/// A [`SharedDaemon`] held by the calling test; derefs to the daemon.
pub struct HeldDaemon(MutexGuard<'static, Option<Daemon>>);

/// Every [`SharedDaemon`] started, for the exit handler.
static STARTED: Mutex<Vec<&'static SharedDaemon>> = Mutex::new(Vec::new());

extern "C" fn stop_shared_daemons() {
    let all = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    for s in all.iter() {
        drop(s.0.lock().unwrap_or_else(|e| e.into_inner()).take());
    }
}

impl SharedDaemon {
    pub const fn new() -> Self {
        SharedDaemon(Mutex::new(None))
    }

    /// The daemon, started by `start` on first use. A test that failed while holding it
    /// leaves it to the next (its disk is gone); a daemon that exited fails the test.
    pub fn get(&'static self, start: impl FnOnce() -> Daemon) -> HeldDaemon {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_mut() {
            Some(d) => {
                if let Some(status) = d.proc.child.try_wait().unwrap() {
                    panic!("the shared daemon exited ({status}) during an earlier test");
                }
            }
            None => {
                *g = Some(start());
                let mut all = STARTED.lock().unwrap_or_else(|e| e.into_inner());
                if all.is_empty() {
                    // SAFETY: registers a plain `extern "C" fn()` that takes no arguments.
                    unsafe { libc::atexit(stop_shared_daemons) };
                }
                all.push(self);
            }
        }
        HeldDaemon(g)
    }
}

impl Deref for HeldDaemon {
    type Target = Daemon;
    fn deref(&self) -> &Daemon {
        self.0.as_ref().expect("started")
    }
}

/// `GET /devices`, parsed.
pub fn devices(d: &Daemon) -> Value {
    let (status, body) = d.get("/devices").expect("GET /devices");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("/devices is JSON")
}

/// What `/devices` says about `disk`'s per-device slot (`tracking`: full, degraded, pending),
/// or `absent` while the disk is not listed.
pub fn tracking(d: &Daemon, disk: &str) -> String {
    devices(d)["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["device"] == disk))
        .map(|x| x["tracking"].as_str().unwrap_or("?").to_string())
        .unwrap_or_else(|| "absent".into())
}

/// Waits (up to 5 s) until the daemon gave `disk` its per-device slot (`tracking: "full"`):
/// a disk made after the daemon started is indexed at its next rescan (within ~1 s,
/// bpf/devslots.rs), and a request entering before that gets no stall tracking, so a test
/// that wants a stall episode of its first request waits for this first.
pub fn wait_tracked(d: &Daemon, disk: &str) {
    let ok = super::wait_every(Duration::from_millis(50), Duration::from_secs(5), || {
        tracking(d, disk) == "full"
    });
    assert!(ok, "{disk}: tracking {} after 5 s", tracking(d, disk));
}

/// Merged log ranges the daemon reports for a whole disk, as (start, end) sectors (none while
/// the disk is not listed).
pub fn ranges(d: &Daemon, disk: &str) -> Vec<(u64, u64)> {
    devices(d)["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["device"] == disk))
        .and_then(|x| x["log_ranges"].as_array())
        .map(|a| {
            a.iter()
                .map(|r| (r["start"].as_u64().unwrap(), r["end"].as_u64().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (≤ 10 s) until the daemon reports exactly `want` for `disk`.
pub fn wait_ranges(d: &Daemon, disk: &str, want: &[(u64, u64)]) {
    let mut got = Vec::new();
    let same = wait_for(Duration::from_secs(10), || {
        got = ranges(d, disk);
        (got == want).then_some(())
    });
    assert!(
        same.is_some(),
        "{disk}: daemon reports log ranges {got:?}, witness says {want:?}\n{:#}",
        devices(d)
    );
}

/// GET `path`, asserting 200, parsed as JSON.
pub fn json(d: &Daemon, path: &str) -> Value {
    let (status, body) = d.get(path).expect("GET");
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
}

/// The slow records of a `/stalls` JSON body that `keep` selects, in the body's order.
pub fn slow_where(stalls: &Value, keep: impl Fn(&Value) -> bool) -> Vec<Value> {
    stalls["slow"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| keep(s))
        .cloned()
        .collect()
}

/// The slow records of disk `dev` that `keep` selects, from
/// `/stalls?device=dev&format=json&limit=limit` (see [`slow_where`]).
/// [`slow_records`] once at least `n` are there (the ring buffer's records reach `/stalls`
/// just after the requests end), after the disk settled ([`Daemon::wait_settled`]).
pub fn wait_slow_records(
    d: &Daemon,
    dev: &str,
    n: usize,
    keep: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    d.wait_settled(&[dev]);
    let mut got = Vec::new();
    // A hang guard, not a timing bound.
    super::wait_every(Duration::from_millis(50), Duration::from_secs(120), || {
        got = slow_records(d, dev, 5000, &keep);
        got.len() >= n
    });
    got
}

pub fn slow_records(
    d: &Daemon,
    dev: &str,
    limit: usize,
    keep: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let v = json(
        d,
        &format!("/stalls?device={dev}&format=json&limit={limit}"),
    );
    slow_where(&v, keep)
}

/// The BPF map named `name` that `daemon` holds open (found through the map ids in
/// /proc/PID/fdinfo): a handle of its own, for tests that read (or, for the reaper's test,
/// write) the programs' state directly. Not "the newest map of that name": tests of one binary
/// run in parallel, each with its own daemon. Panics if the daemon holds no such map.
pub fn daemon_map(daemon: &Daemon, name: &str) -> aya::maps::MapData {
    let pid = daemon.pid();
    std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/fdinfo: {e}"))
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("map_id:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .filter_map(|id| aya::maps::MapData::from_id(id).ok())
        .find(|m| {
            m.info()
                .ok()
                .and_then(|i| i.name_as_str().map(str::to_owned))
                .as_deref()
                == Some(name)
        })
        .unwrap_or_else(|| panic!("the daemon (pid {pid}) holds no map named {name}"))
}
