//! The report's last sections: the observer daemons' own costs, runs skipped or disturbed, and
//! the budget of issue 12, before/after when a baseline was benched.
use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    report::{median, minmax, paired_ratio, DaemonResults, Results},
    setup::{Config, Env, Target, Workload},
};

/// The daemons benched, the baseline ("before") first.
fn daemons(res: &Results) -> Vec<(Config, &DaemonResults)> {
    [Config::Baseline, Config::Observer]
        .into_iter()
        .filter_map(|c| res.daemons.get(&c).map(|d| (c, d)))
        .collect()
}

impl DaemonResults {
    /// CPU seconds per million requests completed during the IOPS runs.
    fn cpu_per_m(&self) -> f64 {
        if self.requests > 0 {
            self.cpu_s / (self.requests as f64 / 1e6)
        } else {
            f64::NAN
        }
    }

    /// Share of one core (%) at 100k IOPS.
    fn core_pct(&self) -> f64 {
        self.cpu_per_m() * 10.0
    }

    /// Completions on the measured devices (bench device in the IOPS runs, the busy devices in
    /// the scrape phase) that `blkobs_requests_total` does not have.
    fn lost(&self) -> f64 {
        (self.disk_completions as f64 - self.recorded)
            + (self.scrape_completions as f64 - self.scrape_recorded)
    }

    fn untracked(&self) -> f64 {
        self.events.untracked + self.scrape_events.untracked
    }

    fn dropped(&self) -> f64 {
        self.events.dropped + self.scrape_events.dropped
    }
}

pub fn observer_table(o: &mut String, env: &Env, res: &Results) {
    let ds = daemons(res);
    if ds.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n### Observer daemon (default configuration, /metrics scraped every 5 s during runs)\n"
    );
    let head: Vec<&str> = ds.iter().map(|(c, _)| c.label()).collect();
    let _ = writeln!(o, "| measure | {} |", head.join(" | "));
    let _ = writeln!(o, "|---|{}", "---:|".repeat(ds.len()));
    let mut row = |measure: &str, value: &dyn Fn(Config, &DaemonResults) -> String| {
        let cells: Vec<String> = ds.iter().map(|(c, d)| value(*c, d)).collect();
        let _ = writeln!(o, "| {measure} | {} |", cells.join(" | "));
    };
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    row(
        "peak RSS (VmHWM, max over runs, includes startup)",
        &|_, d| mib(d.peak_rss_kib),
    );
    row("RSS at the end of a run (VmRSS, max over runs)", &|_, d| {
        mib(d.rss_kib)
    });
    row("CPU seconds per million requests", &|_, d| {
        format!(
            "{:.4} s ({:.3} s over {:.1} M requests)",
            d.cpu_per_m(),
            d.cpu_s,
            d.requests as f64 / 1e6
        )
    });
    row("⇒ share of one core at 100k IOPS", &|_, d| {
        format!("{:.3} %", d.core_pct())
    });
    row(
        &format!(
            "/metrics scrape, {} loop devices busy: median / max (scrapes)",
            env.args.scrape_devices
        ),
        &|_, d| {
            let (_, mx) = minmax(&d.scrape_ms);
            format!(
                "{:.2} ms / {:.2} ms ({}; {} series, {} of {} devices exported)",
                median(&d.scrape_ms),
                mx,
                d.scrape_ms.len(),
                d.scrape_series,
                d.scrape_devices,
                env.args.scrape_devices
            )
        },
    );
    row(
        "daemon CPU per timed scrape (its threads during the scrape, less their rate between scrapes): median / max",
        &|_, d| {
            let cpu = d.scrape_cpu_ms();
            let (_, mx) = minmax(&cpu);
            format!(
                "{:.2} ms / {:.2} ms ({:.2} ms per s between scrapes)",
                median(&cpu),
                mx,
                if d.between_ms > 0.0 {
                    d.between_cpu_ms / d.between_ms * 1e3
                } else {
                    f64::NAN
                }
            )
        },
    );
    row(
        "untracked completions (IOPS runs / scrape phase)",
        &|_, d| format!("{} / {}", d.events.untracked, d.scrape_events.untracked),
    );
    row(
        "dropped requests, map full (IOPS runs / scrape phase)",
        &|_, d| format!("{} / {}", d.events.dropped, d.scrape_events.dropped),
    );
    row("stale entries, clock anomalies (IOPS runs)", &|_, d| {
        format!("{} , {}", d.events.stale, d.events.clock)
    });
    row(
        "requests recorded / completed on the bench device(s), IOPS runs",
        &|_, d| format!("{:.0} / {}", d.recorded, d.disk_completions),
    );
    row(
        "requests recorded / completed on the busy devices, scrape phase",
        &|_, d| format!("{:.0} / {}", d.scrape_recorded, d.scrape_completions),
    );
    row(
        "program runs skipped by the kernel (recursion_misses), IOPS runs",
        &|c, _| res.misses.get(&c).copied().unwrap_or(0).to_string(),
    );
}

/// Program runs the kernel skipped, and other tracers that were loaded.
pub fn misses_and_foreign(o: &mut String, res: &Results) {
    if !res.misses.is_empty() {
        let m: Vec<String> = res
            .misses
            .iter()
            .filter(|(c, _)| **c != Config::Untraced)
            .map(|(c, n)| format!("{} {n}", c.label()))
            .collect();
        let _ = writeln!(o, "\nProgram runs skipped by the kernel during the IOPS runs (bpftool recursion_misses: a lost event for any tracer): {}", m.join(", "));
    }
    if !res.foreign.is_empty() {
        let _ = writeln!(o, "\nWARNING: other tracing programs were loaded during {} configuration runs (of {} fio runs); they slow every configuration:", res.foreign.len(), res.runs);
        for f in &res.foreign {
            let _ = writeln!(o, "- {f}");
        }
    }
}

/// A daemon's value on one budget line, and whether it is within the budget.
type Cell = Option<(String, bool)>;

/// The budget of issue 12, one line per row; a column per daemon (the baseline, "before", then
/// the current observer) and the verdict for the current one. Information only: nothing here
/// fails the run.
pub fn budget(
    o: &mut String,
    env: &Env,
    targets: &[Target],
    res: &Results,
    totals: &BTreeMap<(Config, Workload), f64>,
) {
    let cols: Vec<Config> = if res.daemons.contains_key(&Config::Baseline) {
        vec![Config::Baseline, Config::Observer]
    } else {
        vec![Config::Observer]
    };
    let _ = writeln!(
        o,
        "\n### Budget (issue 12){}, medians of this run\n",
        if cols.len() > 1 { ": before/after" } else { "" }
    );
    let head: Vec<&str> = cols.iter().map(|c| c.label()).collect();
    let _ = writeln!(
        o,
        "| budget line | {} | budget | verdict ({}) |",
        head.join(" | "),
        Config::Observer.label()
    );
    let _ = writeln!(o, "|---|{}---|---|", "---:|".repeat(cols.len()));
    let mut row = |line: &str, budget: &str, cell: &dyn Fn(Config) -> Cell| {
        let cells: Vec<String> = cols
            .iter()
            .map(|c| cell(*c).map(|v| v.0).unwrap_or_else(|| "–".into()))
            .collect();
        let verdict = match cell(Config::Observer) {
            Some((_, true)) => "met",
            Some((_, false)) => "**NOT met**",
            None => "not measured",
        };
        let _ = writeln!(
            o,
            "| {line} | {} | {budget} | {verdict} |",
            cells.join(" | ")
        );
    };
    let t0 = targets[0].name().to_string();
    let ws = [Workload::RandRead, Workload::RandWrite];
    for w in ws {
        row(
            &format!("eBPF cost per request, {} (bpf_stats)", w.fio()),
            "≤ 300 ns",
            &|c| {
                let ns = totals.get(&(c, w))?;
                Some((format!("{ns:.0} ns"), *ns <= 300.0))
            },
        );
    }
    for w in ws {
        row(
            &format!(
                "IOPS / untraced, {} (of medians; median of per-round ratios)",
                w.fio()
            ),
            "≥ 0.92",
            &|c| {
                let get = |c| res.iops.get(&(t0.clone(), w, c));
                let (v, base) = (get(c)?, get(Config::Untraced)?);
                let r = median(v) / median(base);
                let paired = paired_ratio(v, base);
                Some((format!("{r:.3}; {paired:.3}"), r >= 0.92 && paired >= 0.92))
            },
        );
    }
    row(
        "lost + skipped / untracked / dropped, whole bench (see below)",
        "0",
        &|c| {
            let d = res.daemons.get(&c)?;
            let misses = res.misses.get(&c).copied().unwrap_or(0);
            let (lost, untracked, dropped) = (d.lost(), d.untracked(), d.dropped());
            Some((
                format!("{lost:.0} + {misses} / {untracked} / {dropped}"),
                lost == 0.0 && misses == 0 && untracked == 0.0 && dropped == 0.0,
            ))
        },
    );
    let n = env.args.scrape_devices;
    row(
        &format!("`/metrics` scrape median (max), {n} busy devices"),
        if n == 32 {
            "≤ 20 ms"
        } else {
            "≤ 20 ms (with 32 devices)"
        },
        &|c| {
            let d = res.daemons.get(&c).filter(|d| !d.scrape_ms.is_empty())?;
            let (m, (_, mx)) = (median(&d.scrape_ms), minmax(&d.scrape_ms));
            Some((format!("{m:.1} ms ({mx:.1})"), m <= 20.0))
        },
    );
    row(
        "daemon peak RSS (VmHWM, start-up included)",
        "≤ 32 MiB",
        &|c| {
            let d = res.daemons.get(&c).filter(|d| d.peak_rss_kib > 0)?;
            Some((
                format!("{:.1} MiB", d.peak_rss_kib as f64 / 1024.0),
                d.peak_rss_kib <= 32 * 1024,
            ))
        },
    );
    row(
        "daemon CPU in steady state, share of a core at 100 k IOPS",
        "< 1 %",
        &|c| {
            let d = res.daemons.get(&c).filter(|d| d.requests > 0)?;
            Some((format!("{:.3} %", d.core_pct()), d.core_pct() < 1.0))
        },
    );
    for w in ws {
        row(
            &format!(
                "(information) eBPF cost / biolatency's, {} (issue #6 asked ≤ ⅓)",
                w.fio()
            ),
            "≤ 0.33",
            &|c| {
                let (ns, bl) = (totals.get(&(c, w))?, totals.get(&(Config::Biolatency, w))?);
                Some((format!("{:.2}", ns / bl), ns / bl <= 1.0 / 3.0))
            },
        );
    }
    if let Some(bl) = ws
        .iter()
        .map(|w| totals.get(&(Config::Biolatency, *w)))
        .collect::<Option<Vec<_>>>()
    {
        let _ = writeln!(
            o,
            "\nbiolatency: {:.0} / {:.0} ns per request (randread / randwrite).",
            bl[0], bl[1]
        );
    }
    let _ = writeln!(
        o,
        "\nLost: completions on the measured devices (the bench device in the IOPS runs, the busy \
         devices in the scrape phase) that `blkobs_requests_total` lacks; skipped: program runs \
         the kernel skipped (recursion_misses, IOPS runs); untracked, dropped: the daemon's own \
         counters, IOPS runs and scrape phase."
    );
    if n != 32 {
        let _ = writeln!(
            o,
            "\nThe scrape line's budget is for 32 busy devices; this run had {n} (--scrape-devices)."
        );
    }
}
