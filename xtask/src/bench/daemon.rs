//! The observer daemon under test: its self-monitoring counters, CPU and memory samples around
//! runs, and the scrape phase (/metrics timed with many devices busy).
use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use super::{
    bpftool::{disk_completions, proc_usage},
    fio::scrape_load,
    guards::{sleep, LoopDev, Proc},
    report::{DaemonResults, Results},
    setup::{Config, Env, Target},
    tracer::{http_get, Running},
};

/// The observer's self-monitoring counters and per-device completed requests.
#[derive(Clone, Debug, Default)]
pub struct ObsCounters {
    pub untracked: f64,
    pub dropped: f64,
    pub stale: f64,
    pub clock: f64,
    pub requests: BTreeMap<String, f64>,
}

impl ObsCounters {
    pub fn parse(body: &str) -> Self {
        let mut c = Self::default();
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let Some((name_labels, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let v: f64 = value.parse().unwrap_or(0.0);
            let name = name_labels.split('{').next().unwrap_or("");
            match name {
                "blkobs_untracked_completions_total" => c.untracked += v,
                "blkobs_dropped_requests_total" => c.dropped += v,
                "blkobs_stale_requests_total" => c.stale += v,
                "blkobs_clock_anomalies_total" => c.clock += v,
                "blkobs_requests_total" => {
                    if let Some(dev) = name_labels
                        .split("device=\"")
                        .nth(1)
                        .and_then(|s| s.split('"').next())
                    {
                        *c.requests.entry(dev.to_string()).or_default() += v;
                    }
                }
                _ => {}
            }
        }
        c
    }

    pub fn delta(&self, before: &Self) -> Self {
        let mut r = Self {
            untracked: self.untracked - before.untracked,
            dropped: self.dropped - before.dropped,
            stale: self.stale - before.stale,
            clock: self.clock - before.clock,
            requests: BTreeMap::new(),
        };
        for (d, v) in &self.requests {
            r.requests.insert(
                d.clone(),
                v - before.requests.get(d).copied().unwrap_or(0.0),
            );
        }
        r
    }
}

impl ObsCounters {
    fn add_events(&mut self, d: &ObsCounters) {
        self.untracked += d.untracked;
        self.dropped += d.dropped;
        self.stale += d.stale;
        self.clock += d.clock;
    }
}

impl DaemonResults {
    /// Adds one IOPS run of the daemon: its CPU, memory and counters between two samples.
    pub fn add_run(&mut self, before: &ObsSample, after: &ObsSample, targets: &[Target]) {
        self.cpu_s += after.cpu_s - before.cpu_s;
        self.requests += after.disk_total - before.disk_total;
        self.peak_rss_kib = self.peak_rss_kib.max(after.rss_kib);
        self.rss_kib = self.rss_kib.max(after.rss_now_kib);
        let d = after.counters.delta(&before.counters);
        self.events.add_events(&d);
        for t in targets {
            self.recorded += d.requests.get(t.name()).copied().unwrap_or(0.0);
            self.disk_completions += after.disks.get(t.name()).copied().unwrap_or(0)
                - before.disks.get(t.name()).copied().unwrap_or(0);
        }
    }
}

pub struct ObsSample {
    pub cpu_s: f64,
    pub rss_kib: u64,
    pub rss_now_kib: u64,
    pub counters: ObsCounters,
    pub disks: BTreeMap<String, u64>,
    pub disk_total: u64,
}

/// Waits until no request completes on the bench devices for 200 ms (udev probes a device after
/// a writer closes it), so that counters read around a run see the same requests.
pub fn settle(devs: &[String]) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(5);
    let snap = || -> Result<Vec<u64>> {
        let d = disk_completions()?;
        Ok(devs
            .iter()
            .map(|n| d.get(n).copied().unwrap_or(0))
            .collect())
    };
    let mut last = snap()?;
    while Instant::now() < end {
        sleep(Duration::from_millis(200))?;
        let now = snap()?;
        if now == last {
            return Ok(());
        }
        last = now;
    }
    Ok(())
}

pub fn observer_sample(r: &Running, devs: &[String]) -> Result<ObsSample> {
    settle(devs)?;
    let pid = r.pid().context("observer pid")?;
    let disks = disk_completions()?;
    let counters = ObsCounters::parse(&http_get(r.port, "/metrics")?);
    let (cpu_s, rss_kib, rss_now_kib) = proc_usage(pid)?;
    Ok(ObsSample {
        cpu_s,
        rss_kib,
        rss_now_kib,
        counters,
        disk_total: disks.values().sum(),
        disks,
    })
}

/// Scrape phase: N more loop devices busy, /metrics timed; every daemon in `configs` in turn,
/// over the same devices.
pub fn scrape_phase(env: &Env, configs: &[Config], dir: &Path, res: &mut Results) -> Result<()> {
    let daemons: Vec<Config> = configs.iter().copied().filter(|c| c.is_daemon()).collect();
    if daemons.is_empty() {
        return Ok(());
    }
    let n = env.args.scrape_devices;
    eprintln!("[bench] scrape phase: {n} loop devices busy");
    let mut loops = Vec::new();
    for i in 0..n {
        loops.push(LoopDev::create(
            &dir.join(format!("scrape{i}.img")),
            64,
            &env.args.scheduler,
        )?);
    }
    let names: Vec<String> = loops.iter().map(|l| l.name().to_string()).collect();
    let devs: Vec<&str> = loops.iter().map(|l| l.dev.as_str()).collect();
    for config in daemons {
        eprintln!("[bench]   {}", config.label());
        let r = res.daemons.entry(config).or_default();
        scrape_daemon(env, config, &names, &devs, r)?;
    }
    Ok(())
}

/// One daemon's scrape phase: started with the devices already there, /metrics every 250 ms
/// while fio keeps them busy.
fn scrape_daemon(
    env: &Env,
    config: Config,
    names: &[String],
    devs: &[&str],
    res: &mut DaemonResults,
) -> Result<()> {
    let running = Running::start(env, config, &format!("scrape-{}", config.name()))?;
    let before = observer_sample(&running, names)?;
    let secs = if env.args.smoke { 3 } else { 10 };
    let mut cmd = scrape_load(devs, secs + 2);
    let mut load = Proc::spawn("fio (scrape load)", &mut cmd, libc::SIGINT)?;
    sleep(Duration::from_secs(1))?;
    let end = Instant::now() + Duration::from_secs(secs as u64);
    let pid = running.pid().context("observer pid")?;
    let mut last = String::new();
    let mut idle = (Instant::now(), thread_cpu_ns(pid)?);
    while Instant::now() < end {
        let (t0, cpu0) = (Instant::now(), thread_cpu_ns(pid)?);
        res.between_ms += (t0 - idle.0).as_secs_f64() * 1e3;
        res.between_cpu_ms += cpu_ms(&idle.1, &cpu0);
        last = http_get(running.port, "/metrics")?;
        let (t1, cpu1) = (Instant::now(), thread_cpu_ns(pid)?);
        res.scrape_ms.push((t1 - t0).as_secs_f64() * 1e3);
        res.scrape_window_cpu_ms.push(cpu_ms(&cpu0, &cpu1));
        idle = (t1, cpu1);
        sleep(Duration::from_millis(250))?;
    }
    load.ensure_running()?;
    load.stop();
    let after = observer_sample(&running, names)?;
    res.peak_rss_kib = res.peak_rss_kib.max(after.rss_kib);
    res.rss_kib = res.rss_kib.max(after.rss_now_kib);
    res.scrape_events = after.counters.delta(&before.counters);
    for n in names {
        res.scrape_recorded += res.scrape_events.requests.get(n).copied().unwrap_or(0.0);
        res.scrape_completions +=
            after.disks.get(n).copied().unwrap_or(0) - before.disks.get(n).copied().unwrap_or(0);
    }
    res.scrape_series = last
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    res.scrape_devices = names
        .iter()
        .filter(|n| last.contains(&format!("device=\"{n}\"")))
        .count();
    Ok(())
}

/// CPU time (ns) each thread of `pid` has run so far (`/proc/PID/task/TID/schedstat`, first
/// field: nanoseconds, where `/proc/PID/stat` counts clock ticks of 10 ms), by thread id.
fn thread_cpu_ns(pid: u32) -> Result<BTreeMap<u32, u64>> {
    let mut cpu = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?;
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that ended since the directory was read has no file any more.
        let Ok(stat) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let ns = stat.split_whitespace().next().context("schedstat")?;
        cpu.insert(tid, ns.parse()?);
    }
    Ok(cpu)
}

/// CPU time (ms) of the threads between two [`thread_cpu_ns`] reads (a thread that ended in
/// between is left out; a new one counts from 0).
fn cpu_ms(before: &BTreeMap<u32, u64>, after: &BTreeMap<u32, u64>) -> f64 {
    after
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.get(tid).copied().unwrap_or(0)))
        .sum::<u64>() as f64
        / 1e6
}
