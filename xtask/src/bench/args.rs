//! `cargo xtask bench` command-line options.
use std::path::PathBuf;

use anyhow::{ensure, Context, Result};

use super::setup::Config;

/// `cargo xtask bench` options.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rounds; every configuration runs every workload once per round.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Seconds per fio run (after a 1 s ramp).
    #[arg(long, default_value_t = 10)]
    pub runtime: u32,
    /// Loop devices busy while scrape time is measured.
    #[arg(long, default_value_t = 32)]
    pub scrape_devices: u32,
    /// Also bench this block device (e.g. /dev/nvme0n1): random reads only unless --allow-writes.
    /// Refused when it or a partition of it is mounted, used as swap or held by another device.
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
    /// Allow the random-write workload on --device: DESTROYS ITS DATA.
    #[arg(long, requires = "device")]
    pub allow_writes: bool,
    /// Only these configurations (comma separated): untraced,floor,biolatency,observer,baseline
    /// (`baseline` needs --baseline, and is added by it).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Before/after: also bench the observer daemon built (release) at this git revision, as
    /// configuration `baseline` (`observer@<short rev>` in the tables), run exactly like
    /// `observer` in every phase. Built in a worktree under target/bench/baseline-<short rev>
    /// with its own target dir (target/bench/baseline-target); reused once built.
    #[arg(long, value_name = "GIT_REV")]
    pub baseline: Option<String>,
    /// Short CI version: 1 round, 2 s runs, 2 scrape devices. Exercises everything, proves nothing.
    #[arg(long)]
    pub smoke: bool,
    /// Also measure the building blocks of the observer's programs (probe reads vs direct loads,
    /// hash insert/lookup/delete, per-CPU lookup, histograms) with `observer-floor --costs`.
    #[arg(long)]
    pub costs: bool,
    /// I/O scheduler for the loop devices. A reused loop device keeps whatever an earlier user
    /// set, so it is always set; mq-deadline is the kernel's default for loop devices (and what the
    /// issue's biolatency numbers were taken with: its insert program runs once per request).
    #[arg(long, default_value = "mq-deadline")]
    pub scheduler: String,
    /// Only the exposition sizes: series and bytes of one `/metrics` scrape with 1 and
    /// `--scrape-devices` busy disks, text vs protobuf with native histograms (with and without
    /// classic buckets). Nothing else runs.
    #[arg(long)]
    pub exposition: bool,
    /// Skip `cargo build --release -p observer` (use the binaries in target/release).
    #[arg(long)]
    pub no_build: bool,
}

impl BenchArgs {
    /// `--smoke`: 1 round, 2 s runs, 2 scrape devices.
    pub fn apply_smoke(&mut self) {
        if self.smoke {
            self.rounds = 1;
            self.runtime = 2;
            self.scrape_devices = 2;
        }
    }

    /// The configurations to run: `--only`, or the default ones; `baseline` with --baseline.
    pub fn configs(&self) -> Result<Vec<Config>> {
        let mut v = Vec::new();
        if self.only.is_empty() {
            v.extend(Config::DEFAULT);
        }
        for o in &self.only {
            let c = *Config::ALL
                .iter()
                .find(|c| c.name() == o)
                .with_context(|| format!("unknown configuration {o:?}"))?;
            if !v.contains(&c) {
                v.push(c);
            }
        }
        if self.baseline.is_some() && !v.contains(&Config::Baseline) {
            v.push(Config::Baseline);
        }
        ensure!(
            self.baseline.is_some() || !v.contains(&Config::Baseline),
            "--only baseline needs --baseline <git-rev>"
        );
        Ok(v)
    }
}
