//! The report's last sections: the observer daemon's own costs, runs skipped or disturbed, and
//! the budget lines of issue #6.
use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    report::{median, minmax, paired_ratio, Results},
    setup::{Config, Env, Target, Workload},
};

/// The observer daemon's CPU seconds per million requests during the IOPS runs, and the median
/// and maximum scrape time (ms).
fn daemon_figures(res: &Results) -> (f64, f64, f64) {
    let cpu_per_m = if res.obs_requests > 0 {
        res.obs_cpu_s / (res.obs_requests as f64 / 1e6)
    } else {
        f64::NAN
    };
    let (_, scrape_max) = minmax(&res.scrape_ms);
    (cpu_per_m, median(&res.scrape_ms), scrape_max)
}

pub fn observer_table(o: &mut String, env: &Env, res: &Results) {
    let a = &env.args;
    let (cpu_per_m, scrape_med, scrape_max) = daemon_figures(res);
    let e = &res.obs_events;
    let s = &res.scrape_events;
    let _ = writeln!(
        o,
        "\n### Observer daemon (default configuration, /metrics scraped every 5 s during runs)\n"
    );
    let _ = writeln!(o, "| measure | value |\n|---|---:|");
    let mut row = |measure: &str, value: String| {
        let _ = writeln!(o, "| {measure} | {value} |");
    };
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    row(
        "peak RSS (VmHWM, max over runs, includes startup)",
        mib(res.obs_peak_rss_kib),
    );
    row(
        "RSS at the end of a run (VmRSS, max over runs)",
        mib(res.obs_rss_kib),
    );
    row(
        "CPU seconds per million requests",
        format!(
            "{:.4} s ({:.3} s over {:.1} M requests)",
            cpu_per_m,
            res.obs_cpu_s,
            res.obs_requests as f64 / 1e6
        ),
    );
    row(
        "⇒ share of one core at 100k IOPS",
        format!("{:.3} %", cpu_per_m * 0.1 * 100.0),
    );
    row(
        &format!(
            "/metrics scrape, {} loop devices busy: median / max of {}",
            a.scrape_devices,
            res.scrape_ms.len()
        ),
        format!(
            "{:.2} ms / {:.2} ms ({} series, {} of {} devices exported)",
            scrape_med, scrape_max, res.scrape_series, res.scrape_devices, a.scrape_devices
        ),
    );
    row(
        "untracked completions (IOPS runs / scrape phase)",
        format!("{} / {}", e.untracked, s.untracked),
    );
    row(
        "dropped requests, map full (IOPS runs / scrape phase)",
        format!("{} / {}", e.dropped, s.dropped),
    );
    row(
        "stale entries, clock anomalies (IOPS runs)",
        format!("{} , {}", e.stale, e.clock),
    );
    row(
        "requests recorded / completed on the bench device(s)",
        format!("{:.0} / {}", res.obs_recorded, res.obs_disk_completions),
    );
    row(
        "program runs skipped by the kernel (recursion_misses), IOPS runs",
        res.misses
            .get(&Config::Observer)
            .copied()
            .unwrap_or(0)
            .to_string(),
    );
}

/// Program runs the kernel skipped, and other tracers that were loaded.
pub fn misses_and_foreign(o: &mut String, res: &Results) {
    if !res.misses.is_empty() {
        let m: Vec<String> = res
            .misses
            .iter()
            .filter(|(c, _)| **c != Config::Untraced)
            .map(|(c, n)| format!("{} {n}", c.name()))
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

/// Budget lines (information only: nothing here fails the run).
pub fn budget(
    o: &mut String,
    env: &Env,
    targets: &[Target],
    res: &Results,
    totals: &BTreeMap<(Config, Workload), f64>,
) {
    let a = &env.args;
    let (cpu_per_m, scrape_med, scrape_max) = daemon_figures(res);
    let e = &res.obs_events;
    let s = &res.scrape_events;
    let _ = writeln!(o, "\n### Budget (issue #6), medians of this run\n");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let t0 = targets[0].name().to_string();
    for w in [Workload::RandRead, Workload::RandWrite] {
        let get = |c| res.iops.get(&(t0.clone(), w, c)).map(|v| median(v));
        if let (Some(b), Some(ob)) = (get(Config::Untraced), get(Config::Observer)) {
            let r = ob / b;
            let key = |c| (t0.clone(), w, c);
            let paired = match (
                res.iops.get(&key(Config::Observer)),
                res.iops.get(&key(Config::Untraced)),
            ) {
                (Some(v), Some(b)) => paired_ratio(v, b),
                _ => f64::NAN,
            };
            let _ = writeln!(o, "- {}: observer IOPS ratio {:.3} of medians, {:.3} median of per-round ratios (≥ 0.92): {}", w.fio(), r, paired, verdict(r >= 0.92 && paired >= 0.92));
        }
        if let Some(ns) = totals.get(&(Config::Observer, w)) {
            let _ = writeln!(
                o,
                "- {}: observer eBPF {:.0} ns/request (≤ 280): {}",
                w.fio(),
                ns,
                verdict(*ns <= 280.0)
            );
            if let Some(bl) = totals.get(&(Config::Biolatency, w)) {
                let _ = writeln!(
                    o,
                    "- {}: observer / biolatency eBPF cost {:.2} (≤ 0.33; biolatency {:.0} ns): {}",
                    w.fio(),
                    ns / bl,
                    bl,
                    verdict(ns / bl <= 1.0 / 3.0)
                );
            }
        }
    }
    if res.obs_requests > 0 {
        let _ = writeln!(
            o,
            "- peak RSS {:.1} MiB (≤ 32): {}",
            res.obs_peak_rss_kib as f64 / 1024.0,
            verdict(res.obs_peak_rss_kib <= 32 * 1024)
        );
        let _ = writeln!(
            o,
            "- CPU {:.3} % of a core at 100k IOPS (< 1 %): {}",
            cpu_per_m * 10.0,
            verdict(cpu_per_m * 10.0 < 1.0)
        );
    }
    if !res.scrape_ms.is_empty() {
        let _ = writeln!(
            o,
            "- scrape median {:.2} ms, max {:.2} ms with {} devices (≤ 20 ms): {}",
            scrape_med,
            scrape_max,
            a.scrape_devices,
            verdict(scrape_med <= 20.0)
        );
        let zero = e.untracked + e.dropped + s.untracked + s.dropped == 0.0;
        let _ = writeln!(o, "- dropped or untracked completions: {}: {} (and: {} runs skipped by the kernel; {:.0} completions on the bench device not in blkobs_requests_total)",
            e.untracked + e.dropped + s.untracked + s.dropped, verdict(zero),
            res.misses.get(&Config::Observer).copied().unwrap_or(0), res.obs_disk_completions as f64 - res.obs_recorded);
    }
}
