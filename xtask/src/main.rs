//! Project tasks: `cargo xtask provision | build | run | test | bench`.
//!
//! Every task that builds first runs `scripts/provision.sh` (idempotent), so the two README
//! commands work on a fresh Debian machine.

mod bench;

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
    /// Provision, then run every test (unit and real-kernel integration tests). Needs root.
    Test {
        /// Extra args for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Provision, build, then measure tracing overhead with fio (see BENCHMARKS.md). Needs root.
    Bench(bench::BenchArgs),
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
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

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Provision => provision(),
        Task::Build => {
            provision()?;
            run(cargo().args(["build", "--release", "-p", "observer"]))
        }
        Task::Run { args } => {
            provision()?;
            run(cargo().args(["build", "--release", "-p", "observer"]))?;
            run(Command::new(root().join("target/release/observer")).args(args))
        }
        Task::Test { args } => {
            provision()?;
            // Integration tests share loop devices and the kernel's tracepoints: one at a time.
            run(cargo().args(["test"]).args(&args).args(["--", "--test-threads=1"]))
        }
        Task::Bench(args) => {
            provision()?;
            bench::run(&root(), args)
        }
    }
}
