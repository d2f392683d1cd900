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
    report::Results,
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

impl Results {
    /// Adds one IOPS run of the observer: its CPU, memory and counters between two samples.
    pub fn add_observer_run(&mut self, before: &ObsSample, after: &ObsSample, targets: &[Target]) {
        self.obs_cpu_s += after.cpu_s - before.cpu_s;
        self.obs_requests += after.disk_total - before.disk_total;
        self.obs_peak_rss_kib = self.obs_peak_rss_kib.max(after.rss_kib);
        self.obs_rss_kib = self.obs_rss_kib.max(after.rss_now_kib);
        let d = after.counters.delta(&before.counters);
        self.obs_events.add_events(&d);
        for t in targets {
            self.obs_recorded += d.requests.get(t.name()).copied().unwrap_or(0.0);
            self.obs_disk_completions += after.disks.get(t.name()).copied().unwrap_or(0)
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

pub fn scrape_phase(env: &Env, dir: &Path, res: &mut Results) -> Result<()> {
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
    let running = Running::start(env, Config::Observer, "scrape")?;
    let names: Vec<String> = loops.iter().map(|l| l.name().to_string()).collect();
    let before = observer_sample(&running, &names)?;
    let secs = if env.args.smoke { 3 } else { 10 };
    let devs: Vec<&str> = loops.iter().map(|l| l.dev.as_str()).collect();
    let mut cmd = scrape_load(&devs, secs + 2);
    let mut load = Proc::spawn("fio (scrape load)", &mut cmd, libc::SIGINT)?;
    sleep(Duration::from_secs(1))?;
    let end = Instant::now() + Duration::from_secs(secs as u64);
    let mut last = String::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        last = http_get(running.port, "/metrics")?;
        res.scrape_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        sleep(Duration::from_millis(250))?;
    }
    load.ensure_running()?;
    load.stop();
    let after = observer_sample(&running, &names)?;
    res.obs_peak_rss_kib = res.obs_peak_rss_kib.max(after.rss_kib);
    res.obs_rss_kib = res.obs_rss_kib.max(after.rss_now_kib);
    res.scrape_events = after.counters.delta(&before.counters);
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
