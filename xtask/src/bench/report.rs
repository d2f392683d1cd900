//! The results of a bench run and their markdown report (target/bench/results.md).
use std::{collections::BTreeMap, fmt::Write as _, thread};

use super::{
    bpftool::StatsRun,
    daemon::ObsCounters,
    setup::{scheduler, Config, Env, Target, Workload},
    summary::{budget, misses_and_foreign, observer_table},
};

#[derive(Default)]
pub struct Results {
    /// (target, workload, config) → IOPS per round.
    pub iops: BTreeMap<(String, Workload, Config), Vec<f64>>,
    /// (config, workload) → per stats round: program name → (run_time_ns, run_cnt) deltas, and
    /// requests completed on all disks meanwhile.
    pub stats: BTreeMap<(Config, Workload), Vec<StatsRun>>,
    /// Per observer daemon (the current one, the baseline): its own costs and counters.
    pub daemons: BTreeMap<Config, DaemonResults>,
    /// Building blocks: program → (run_time_ns, run_cnt), and requests, per run of the costs pass.
    pub costs: Vec<StatsRun>,
    /// Per configuration: program runs the kernel skipped (recursion_misses) during IOPS runs.
    pub misses: BTreeMap<Config, u64>,
    /// Runs during which someone else's tracing programs were loaded, with their names.
    pub foreign: Vec<String>,
    pub runs: u32,
}

/// One observer daemon's figures over the whole bench.
#[derive(Default)]
pub struct DaemonResults {
    /// CPU seconds and requests completed (all disks) during its IOPS runs; peak RSS KiB.
    pub cpu_s: f64,
    pub requests: u64,
    pub peak_rss_kib: u64,
    /// Largest VmRSS seen at the end of a run (steady state, after startup).
    pub rss_kib: u64,
    /// Counters summed over its IOPS runs, and requests it recorded vs the disks' count.
    pub events: ObsCounters,
    pub recorded: f64,
    pub disk_completions: u64,
    /// Scrape durations (ms) with N devices busy; series in the last body; devices exported.
    pub scrape_ms: Vec<f64>,
    /// The daemon's CPU time (ms, all its threads) during each timed scrape, and its CPU time
    /// (ms) and the wall time (ms) between the scrapes: [`DaemonResults::scrape_cpu_ms`].
    pub scrape_window_cpu_ms: Vec<f64>,
    pub between_cpu_ms: f64,
    pub between_ms: f64,
    pub scrape_series: usize,
    pub scrape_devices: usize,
    pub scrape_events: ObsCounters,
    /// Requests it recorded vs completed on the busy devices of the scrape phase.
    pub scrape_recorded: f64,
    pub scrape_completions: u64,
}

impl DaemonResults {
    /// The daemon's own CPU time per scrape (ms): its CPU time during each timed scrape less
    /// what it spends in as long between scrapes (the ring buffer, the ticks, the 5 s
    /// scraper), so what a scrape itself costs, whoever waits for the CPU.
    pub fn scrape_cpu_ms(&self) -> Vec<f64> {
        let rate = if self.between_ms > 0.0 {
            self.between_cpu_ms / self.between_ms
        } else {
            0.0
        };
        self.scrape_window_cpu_ms
            .iter()
            .zip(&self.scrape_ms)
            .map(|(cpu, wall)| cpu - rate * wall)
            .collect()
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

pub fn minmax(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

pub fn render(env: &Env, configs: &[Config], targets: &[Target], res: &Results) -> String {
    let mut o = String::new();
    let a = &env.args;
    let cmdline: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(
        o,
        "## blkobs bench: {} round(s) × {} s per run{}\n",
        a.rounds,
        a.runtime,
        if a.smoke {
            " (SMOKE: numbers mean nothing)"
        } else {
            ""
        }
    );
    let _ = writeln!(o, "command: `cargo xtask {}`  ", cmdline.join(" "));
    if let Some(b) = &env.baseline {
        let _ = writeln!(
            o,
            "baseline: `{}` = {} ({})  ",
            b.label(),
            b.commit,
            b.subject
        );
    }
    let _ = writeln!(o, "fio: 4k, io_uring, iodepth 32, direct, 1 job, ramp {} s; kernel {}; {} CPUs ({}); loop scheduler: {}\n",
        env.ramp, uname_r(), num_cpus(), cpu_model(), targets.first().map(|t| scheduler(t.name())).unwrap_or_default());
    iops_table(&mut o, configs, targets, res);
    let totals = stats_table(&mut o, env, targets, res);
    costs_table(&mut o, res);
    observer_table(&mut o, env, res);
    misses_and_foreign(&mut o, res);
    budget(&mut o, env, targets, res, &totals);
    o
}

/// Median over rounds of the per-round ratio `v[i] / base[i]` (entry i of every configuration
/// is round i).
pub fn paired_ratio(v: &[f64], base: &[f64]) -> f64 {
    median(&v.iter().zip(base).map(|(x, y)| x / y).collect::<Vec<_>>())
}

fn iops_table(o: &mut String, configs: &[Config], targets: &[Target], res: &Results) {
    let _ = writeln!(o, "### IOPS\n");
    let _ = writeln!(o, "| device | workload | configuration | median IOPS | min | max | ratio to untraced (of medians) | ratio to untraced (median of per-round ratios) |");
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|---:|");
    for t in targets {
        for w in [Workload::RandRead, Workload::RandWrite] {
            let base_v = res.iops.get(&(t.name().to_string(), w, Config::Untraced));
            let base = base_v.map(|v| median(v));
            for &c in configs {
                let Some(v) = res.iops.get(&(t.name().to_string(), w, c)) else {
                    continue;
                };
                let (mn, mx) = minmax(v);
                let m = median(v);
                let ratio = base
                    .map(|b| format!("{:.3}", m / b))
                    .unwrap_or_else(|| "-".into());
                // Entry i of every configuration is round i: pairs taken minutes apart at most.
                let paired = base_v
                    .map(|b| format!("{:.3}", paired_ratio(v, b)))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(
                    o,
                    "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |",
                    t.name(),
                    w.fio(),
                    c.label(),
                    m,
                    mn,
                    mx,
                    ratio,
                    paired
                );
            }
        }
    }
}

/// The bpf_stats table; returns the total ns per request per (configuration, workload).
fn stats_table(
    o: &mut String,
    env: &Env,
    targets: &[Target],
    res: &Results,
) -> BTreeMap<(Config, Workload), f64> {
    let a = &env.args;
    let _ = writeln!(o, "\n### eBPF cost (kernel.bpf_stats, separate pass on {}, {} run(s) per configuration and workload, medians)\n", targets[0].name(), a.rounds.min(3));
    let _ = writeln!(
        o,
        "| configuration | workload | program | runs per request | ns per run | ns per request |"
    );
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|");
    let mut totals: BTreeMap<(Config, Workload), f64> = BTreeMap::new();
    for ((c, w), rounds) in &res.stats {
        let mut names: Vec<&String> = rounds.iter().flat_map(|(p, _)| p.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let col = |f: &dyn Fn(u64, u64, f64) -> f64| -> f64 {
                median(
                    &rounds
                        .iter()
                        .filter_map(|(p, r)| {
                            p.get(name)
                                .map(|(ns, cnt)| f(*ns, *cnt, (*r).max(1) as f64))
                        })
                        .collect::<Vec<_>>(),
                )
            };
            let runs = col(&|_, cnt, r| cnt as f64 / r);
            let per_run = col(&|ns, cnt, _| if cnt > 0 { ns as f64 / cnt as f64 } else { 0.0 });
            let per_req = col(&|ns, _, r| ns as f64 / r);
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.2} | {:.0} | {:.0} |",
                c.label(),
                w.fio(),
                name,
                runs,
                per_run,
                per_req
            );
        }
        let per_round: Vec<f64> = rounds
            .iter()
            .map(|(p, r)| p.values().map(|v| v.0).sum::<u64>() as f64 / (*r).max(1) as f64)
            .collect();
        let total = median(&per_round);
        let (mn, mx) = minmax(&per_round);
        let _ = writeln!(
            o,
            "| {} | {} | **total** (median; min–max of {} runs: {:.0}–{:.0}) | | | **{:.0}** |",
            c.label(),
            w.fio(),
            per_round.len(),
            mn,
            mx,
            total
        );
        totals.insert((*c, *w), total);
    }
    if totals.keys().any(|(c, _)| *c == Config::Floor) {
        let _ = writeln!(o, "\nAbove the floor (total minus the empty programs' total, same workload: the work the programs do):\n");
        for ((c, w), t) in &totals {
            if let (false, Some(f)) = (*c == Config::Floor, totals.get(&(Config::Floor, *w))) {
                let _ = writeln!(
                    o,
                    "- {} {}: {:.0} ns per request",
                    c.label(),
                    w.fio(),
                    t - f
                );
            }
        }
    }
    totals
}

fn costs_table(o: &mut String, res: &Results) {
    if res.costs.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n### Building blocks (observer-floor --costs on block_rq_issue, randread, {} run(s); median ns per run)\n", res.costs.len());
    let _ = writeln!(
        o,
        "| block | ns per run | minus empty program (the cheaper of c00/c12) | runs per request |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|");
    let mut names: Vec<&String> = res.costs.iter().flat_map(|(p, _)| p.keys()).collect();
    names.sort();
    names.dedup();
    let per_run = |name: &str| -> f64 {
        median(
            &res.costs
                .iter()
                .filter_map(|(p, _)| p.get(name))
                .filter(|(_, c)| *c > 0)
                .map(|(ns, c)| *ns as f64 / *c as f64)
                .collect::<Vec<_>>(),
        )
    };
    let empty = per_run("c00_empty").min(per_run("c12_empty_last"));
    for n in names {
        let runs: f64 = median(
            &res.costs
                .iter()
                .filter_map(|(p, r)| p.get(n).map(|(_, c)| *c as f64 / (*r).max(1) as f64))
                .collect::<Vec<_>>(),
        );
        let v = per_run(n);
        let _ = writeln!(o, "| {n} | {v:.0} | {:.0} | {runs:.2} |", v - empty);
    }
}

pub fn uname_r() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default()
}

pub fn num_cpus() -> usize {
    thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
