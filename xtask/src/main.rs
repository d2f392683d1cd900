//! Project tasks: `cargo xtask provision | build | run | test | vmtest | machine | bench | docs`.
//!
//! Every task that builds first runs `scripts/provision.sh` (idempotent), so the two README
//! commands work on a fresh Debian machine.

mod apt_mirror;
mod bench;
mod docs;
mod machine;
mod suite;
mod vm;
mod vm_boot;
mod vm_kernels;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the build toolchain and test tools (apt packages, bpf-linker). Needs root.
    Provision,
    /// Build the daemon (release), eBPF programs embedded.
    Build,
    /// Provision, build and run the daemon on this host (as root). Extra args go to `observer`.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Provision, then run every test (unit and real-kernel integration tests, and `xtask bench
    /// --smoke`: xtask/tests/bench_smoke.rs), then the kernel matrix (`vmtest`: the matrix test
    /// in Debian's 5.10, 6.1 and 6.12 kernels) and the Debian machine (`machine`). Needs root.
    Test {
        /// Skip the kernel matrix (`vmtest`) and the Debian machine after the host suite.
        #[arg(long)]
        no_vm: bool,
        /// The contributor's tier (docs/src/development/testing.md): lints, unit tests and the host's
        /// real-kernel tests, without the VMs, the soak and the bench smoke run.
        #[arg(long)]
        quick: bool,
        /// Succeed even if tests were skipped (they are still listed). Without it, any skipped
        /// test makes the run fail.
        #[arg(long)]
        allow_skips: bool,
        /// Extra args for `cargo test --no-run`, then after `--` for the test binaries.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Boot Debian's 5.10 / 6.1 / 6.12 cloud kernels in qemu, two at a time (`--jobs`), and run
    /// the matrix test (or the command after `--`) inside, with this host's root filesystem.
    /// Needs root.
    Vmtest(vm::VmArgs),
    /// A Debian machine in qemu with systemd as PID 1: the project's .deb installed with apt,
    /// enabled, reloaded, stopped, rebooted, upgraded and purged (xtask/src/machine.rs). Needs
    /// root and this machine's apt mirror for the first image.
    Machine(machine::MachineArgs),
    /// Provision, build, then measure tracing overhead with fio (see BENCHMARKS.md). Needs root.
    Bench(bench::BenchArgs),
    /// Check the documentation: links and anchors in README.md and docs/, every book page in
    /// docs/src/SUMMARY.md, README.md's size, and `mdbook build` when mdbook is installed.
    Docs,
    /// Provision, then run the soak test (observer/tests/soak.rs: load, device churn, reloads,
    /// scrapes; resources and exact counts checked at the end) for this long. The suite runs it
    /// for 1 minute. Needs root.
    Soak {
        /// Duration in minutes.
        #[arg(long, default_value_t = 10)]
        minutes: u64,
    },
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn provision() -> Result<()> {
    run(Command::new("bash").arg(root().join("scripts/provision.sh")))
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// Lists the tests that skipped (one line each, written by the tests themselves) and fails
/// unless `allow` is set: a run that skipped tests has not proven what it did not run.
fn report_skips(log: &Path, allow: bool) -> Result<()> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let skipped: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if skipped.is_empty() {
        eprintln!("no test skipped");
        return Ok(());
    }
    eprintln!("\n{} test(s) SKIPPED:", skipped.len());
    for line in &skipped {
        eprintln!("  {line}");
    }
    if allow {
        eprintln!("(--allow-skips: not failing the run)");
        Ok(())
    } else {
        bail!("{} test(s) skipped: fix their prerequisites (run as root after scripts/provision.sh), or pass --allow-skips", skipped.len())
    }
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Provision => provision(),
        Task::Docs => docs::check(&root()),
        Task::Soak { minutes } => {
            provision()?;
            run(cargo()
                .env("BLKOBS_SOAK_SECONDS", (minutes * 60).to_string())
                .args([
                    "test",
                    "-p",
                    "observer",
                    "--test",
                    "soak",
                    "--",
                    // One at a time: the flood test's identity counts every disk's slow
                    // requests, and the soak's churn would race with it.
                    "--test-threads=1",
                    "--nocapture",
                ]))
        }
        Task::Build => {
            provision()?;
            run(cargo().args(["build", "--release", "-p", "observer"]))
        }
        Task::Run { args } => {
            provision()?;
            run(cargo().args(["build", "--release", "-p", "observer"]))?;
            run(Command::new(root().join("target/release/observer")).args(args))
        }
        Task::Test {
            no_vm,
            quick,
            allow_skips,
            args,
        } => suite::all(
            &root(),
            suite::Options {
                no_vm,
                quick,
                allow_skips,
                args,
            },
        ),
        Task::Vmtest(args) => {
            vm::check(&args)?;
            provision()?;
            vm::run(&root(), args)
        }
        Task::Machine(args) => {
            provision()?;
            machine::run(&root(), args)
        }
        Task::Bench(args) => {
            provision()?;
            bench::run(&root(), args)
        }
    }
}
