//! `cargo xtask bench`: what tracing costs a fast block device (issue #6, BENCHMARKS.md).
//!
//! Sets up a loop device over a file in /dev/shm (and optionally a device the user names), then
//! runs fio (4k random read and random write, io_uring, queue depth 32) under each configuration,
//! in an order that rotates every round so that noise from other work on the machine hits all
//! configurations alike:
//!
//! - `untraced`: nothing attached;
//! - `floor`: empty tp_btf programs on exactly the observer's tracepoints (`observer-floor`);
//! - `biolatency`: libbpf-tools `biolatency -Q -D -F` (installed from Debian if absent);
//! - `observer`: the daemon with its default configuration, scraped every 5 s;
//! - `baseline` (with `--baseline <git-rev>`): the daemon built at that revision, run exactly like
//!   `observer` in every phase (`observer@<short rev>` in the tables; see [`baseline`]).
//!
//! IOPS rounds run with `kernel.bpf_stats_enabled` as found (normally 0: the stats cost two clock
//! reads per program run). A separate pass per configuration then enables the sysctl and reads
//! run_time_ns / run_cnt deltas per program from `bpftool prog show -j`; ns per request is
//! Σ run_time_ns / requests completed on all disks (/sys/block/*/stat) in the same interval.
//! A last phase starts each daemon with 32 (smoke: 2) more loop devices busy and times scrapes.
//! `--exposition` runs only [`exposition`]: series and bytes of one scrape, text vs protobuf with
//! native histograms, with 1 and 32 busy disks.
//!
//! Everything created (loop devices, files, daemons, tracers, the sysctl) is undone by Drop
//! guards, also on errors, panics and Ctrl-C/SIGTERM. Only SIGKILL leaves debris; the next run
//! removes it (see [`remove_stale`]).

mod args;
mod baseline;
mod bpftool;
mod daemon;
mod exposition;
mod fio;
mod guards;
mod report;
mod setup;
mod summary;
mod tracer;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use anyhow::{ensure, Result};

pub use args::BenchArgs;
use bpftool::{bpf_progs, foreign_tracing_progs, measure, progs_of};
use daemon::{observer_sample, scrape_phase};
use fio::{fill, fio};
use guards::{install_signal_handlers, remove_stale, sleep, BpfStats, LoopDev, ShmDir};
use report::{render, Results};
use setup::{
    check_user_device, find_or_install_biolatency, scheduler, which, Config, Env, Target, Workload,
};
use tracer::{start_floor, Running};

pub fn run(root: &Path, mut args: BenchArgs) -> Result<()> {
    args.apply_smoke();
    ensure!(
        args.rounds >= 1 && args.runtime >= 1,
        "--rounds and --runtime must be at least 1"
    );
    ensure!(
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() } == 0,
        "cargo xtask bench needs root (loop devices, eBPF, sysctl)"
    );
    install_signal_handlers();
    remove_stale();
    // --exposition runs the current daemon only (built by prepare_tools unless --no-build).
    let configs = if args.exposition {
        vec![Config::Observer]
    } else {
        args.configs()?
    };
    let biolatency = prepare_tools(root, &args, &configs)?;
    let baseline = match &args.baseline {
        Some(rev) => {
            let b = baseline::prepare(root, rev, args.no_build)?;
            Config::set_baseline_label(b.label());
            Some(b)
        }
        None => None,
    };
    let logs = root.join("target/bench");
    std::fs::create_dir_all(&logs)?;
    if args.exposition {
        let shm = ShmDir(PathBuf::from(format!(
            "/dev/shm/blkobs-bench-{}",
            std::process::id()
        )));
        std::fs::create_dir_all(&shm.0)?;
        let table = exposition::run(root, &shm.0, args.scrape_devices, &args.scheduler)?;
        println!("{table}");
        std::fs::write(logs.join("exposition.md"), &table)?;
        return Ok(());
    }

    // Setup: devices. Drop order is reverse of declaration: loops go before their files.
    let shm = ShmDir(PathBuf::from(format!(
        "/dev/shm/blkobs-bench-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&shm.0)?;
    let main_loop = LoopDev::create(
        &shm.0.join("main.img"),
        if args.smoke { 256 } else { 1024 },
        &args.scheduler,
    )?;
    let mut targets = vec![Target {
        dev: main_loop.dev.clone(),
        writes: true,
    }];
    if let Some(d) = &args.device {
        check_user_device(d)?;
        targets.push(Target {
            dev: d.display().to_string(),
            writes: args.allow_writes,
        });
    }
    let env = Env {
        root: root.to_path_buf(),
        logs,
        biolatency,
        baseline,
        ramp: if args.smoke { 0 } else { 1 },
        args: args.clone(),
    };
    eprintln!(
        "[bench] loop device {} over {} (scheduler: {})",
        main_loop.dev,
        shm.0.display(),
        scheduler(main_loop.name())
    );
    // Fill it once (tmpfs allocates on first write), then warm up.
    fill(&main_loop.dev)?;

    let mut res = Results::default();
    for round in 0..args.rounds {
        iops_round(&env, &configs, &targets, round, &mut res)?;
    }
    stats_pass(&env, &configs, &targets[0], &mut res)?;
    if args.costs {
        costs_pass(&env, &targets[0], &mut res)?;
    }
    // Scrape with N devices busy.
    scrape_phase(&env, &configs, &shm.0, &mut res)?;

    let report = render(&env, &configs, &targets, &res);
    println!("{report}");
    std::fs::write(env.logs.join("results.md"), &report)?;
    eprintln!(
        "[bench] table written to {}",
        env.logs.join("results.md").display()
    );
    drop(main_loop);
    drop(shm);
    Ok(())
}

/// Checks the tools, builds the binaries (unless --no-build); returns biolatency's path (empty
/// when it is not benched).
fn prepare_tools(root: &Path, args: &BenchArgs, configs: &[Config]) -> Result<PathBuf> {
    for tool in ["fio", "bpftool", "losetup"] {
        ensure!(
            which(tool).is_some(),
            "{tool} not found: run `cargo xtask provision`"
        );
    }
    let biolatency = if configs.contains(&Config::Biolatency) {
        find_or_install_biolatency()?
    } else {
        PathBuf::new()
    };
    if !args.no_build {
        crate::run(
            Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .current_dir(root)
                .args(["build", "--release", "-p", "observer"]),
        )?;
    }
    for b in ["observer", "observer-floor"] {
        ensure!(
            root.join("target/release").join(b).exists(),
            "target/release/{b} missing: build with `cargo build --release -p observer`"
        );
    }
    Ok(biolatency)
}

/// One IOPS round: configuration order rotates each round, workload order alternates.
fn iops_round(
    env: &Env,
    configs: &[Config],
    targets: &[Target],
    round: u32,
    res: &mut Results,
) -> Result<()> {
    let args = &env.args;
    let dev_names: Vec<String> = targets.iter().map(|t| t.name().to_string()).collect();
    let mut order = configs.to_vec();
    order.rotate_left(round as usize % configs.len());
    eprintln!(
        "[bench] round {}/{}: {}",
        round + 1,
        args.rounds,
        order
            .iter()
            .map(|c| c.label())
            .collect::<Vec<_>>()
            .join(", ")
    );
    for &config in &order {
        let tag = format!("r{round}-{}", config.name());
        let mut running = Running::start(env, config, &tag)?;
        let obs_before = if config.is_daemon() {
            Some(observer_sample(&running, &dev_names)?)
        } else {
            None
        };
        let mut foreign = foreign_tracing_progs(&running.progs)?;
        let misses = |ids: &[u32]| -> Result<u64> {
            let all = bpf_progs()?;
            Ok(ids.iter().filter_map(|id| all.get(id)).map(|p| p.3).sum())
        };
        let misses_before = misses(&running.progs)?;
        for t in targets {
            for w in t.workloads(round) {
                res.runs += 1;
                let r = fio(
                    env,
                    &t.dev,
                    w,
                    args.runtime,
                    &format!("{tag}-{}-{}", t.name(), w.fio()),
                )?;
                running.ensure_running()?;
                eprintln!(
                    "[bench]   {:<16} {:<8} {:<9} {:>9.0} IOPS",
                    config.label(),
                    t.name(),
                    w.fio(),
                    r.iops
                );
                res.iops
                    .entry((t.name().to_string(), w, config))
                    .or_default()
                    .push(r.iops);
            }
        }
        *res.misses.entry(config).or_default() += misses(&running.progs)? - misses_before;
        foreign.extend(foreign_tracing_progs(&running.progs)?);
        foreign.sort();
        foreign.dedup();
        if !foreign.is_empty() {
            eprintln!(
                "[bench]   WARNING: foreign tracing programs loaded during this run: {}",
                foreign.join(" ")
            );
            res.foreign.push(format!(
                "round {} {}: {}",
                round + 1,
                config.label(),
                foreign.join(" ")
            ));
        }
        if let Some(before) = obs_before {
            let after = observer_sample(&running, &dev_names)?;
            res.daemons
                .entry(config)
                .or_default()
                .add_run(&before, &after, targets);
        }
    }
    Ok(())
}

/// bpf_stats pass: every traced configuration with kernel.bpf_stats_enabled=1, on the first
/// target; ns per program run and per request.
fn stats_pass(env: &Env, configs: &[Config], t: &Target, res: &mut Results) -> Result<()> {
    let _stats = BpfStats::enable()?;
    let traced: Vec<Config> = configs
        .iter()
        .copied()
        .filter(|c| *c != Config::Untraced)
        .collect();
    eprintln!("[bench] bpf_stats pass (kernel.bpf_stats_enabled=1 until it ends)");
    for round in 0..env.args.rounds.min(3) {
        let mut order = traced.clone();
        if !order.is_empty() {
            let n = order.len();
            order.rotate_left(round as usize % n);
        }
        for &config in &order {
            let tag = format!("stats{round}-{}", config.name());
            let running = Running::start(env, config, &tag)?;
            for w in t.workloads(round) {
                let run = measure(&running.progs, || {
                    fio(
                        env,
                        &t.dev,
                        w,
                        env.args.runtime,
                        &format!("{tag}-{}", w.fio()),
                    )
                })?;
                let total: u64 = run.0.values().map(|v| v.0).sum();
                eprintln!(
                    "[bench]   {:<16} {:<9} {:>5.0} ns/request (bpf_stats)",
                    config.label(),
                    w.fio(),
                    total as f64 / run.1.max(1) as f64
                );
                res.stats.entry((config, w)).or_default().push(run);
            }
        }
    }
    Ok(())
}

/// Costs pass: the building blocks of the observer's programs (`observer-floor --costs`), each
/// on block_rq_issue, with kernel.bpf_stats_enabled=1.
fn costs_pass(env: &Env, t: &Target, res: &mut Results) -> Result<()> {
    let _stats = BpfStats::enable()?;
    eprintln!("[bench] costs pass (observer-floor --costs, kernel.bpf_stats_enabled=1)");
    for i in 0..env.args.rounds.min(3) {
        let mut p = start_floor(
            env,
            "observer-floor --costs",
            &["--costs"],
            &env.logs.join("costs.log"),
        )?;
        let ids = progs_of(p.pid())?;
        sleep(Duration::from_millis(500))?;
        let run = measure(&ids, || {
            fio(
                env,
                &t.dev,
                Workload::RandRead,
                env.args.runtime,
                &format!("costs-{i}"),
            )
        })?;
        p.ensure_running()?;
        res.costs.push(run);
    }
    Ok(())
}
