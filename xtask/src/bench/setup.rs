//! What is benched: configurations, workloads, devices, and the tools they need.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

use anyhow::{bail, ensure, Context, Result};

use super::args::BenchArgs;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Config {
    Untraced,
    Floor,
    Biolatency,
    Observer,
    /// The observer daemon built at `--baseline <git-rev>`, run exactly like `Observer`.
    Baseline,
}

/// `observer@<short rev>`: the baseline's name in tables, set once it is built.
static BASELINE_LABEL: OnceLock<String> = OnceLock::new();

impl Config {
    /// Every configuration `--only` accepts.
    pub const ALL: [Config; 5] = [
        Config::Untraced,
        Config::Floor,
        Config::Biolatency,
        Config::Observer,
        Config::Baseline,
    ];
    /// What runs without `--only` (plus `Baseline` with `--baseline`).
    pub const DEFAULT: [Config; 4] = [
        Config::Untraced,
        Config::Floor,
        Config::Biolatency,
        Config::Observer,
    ];

    /// The name `--only` takes; also in log file names.
    pub fn name(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Floor => "floor",
            Config::Biolatency => "biolatency",
            Config::Observer => "observer",
            Config::Baseline => "baseline",
        }
    }

    /// The name in tables and progress lines: `observer@<short rev>` for the baseline.
    pub fn label(self) -> &'static str {
        match self {
            Config::Baseline => BASELINE_LABEL
                .get()
                .map(String::as_str)
                .unwrap_or("baseline"),
            c => c.name(),
        }
    }

    /// Names the baseline in tables (`observer@<short rev>`); the first call wins.
    pub fn set_baseline_label(label: String) {
        let _ = BASELINE_LABEL.set(label);
    }

    /// An observer daemon (the current one or the baseline): scraped, sampled, scrape-timed.
    pub fn is_daemon(self) -> bool {
        matches!(self, Config::Observer | Config::Baseline)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Workload {
    RandRead,
    RandWrite,
}

impl Workload {
    pub fn fio(self) -> &'static str {
        match self {
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
        }
    }
}

/// A device under test.
pub struct Target {
    pub dev: String,
    pub writes: bool,
}

impl Target {
    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }

    /// The workloads run on it in `round`: random reads, random writes if allowed; the order
    /// alternates between rounds.
    pub fn workloads(&self, round: u32) -> Vec<Workload> {
        let mut w = vec![Workload::RandRead];
        if self.writes {
            w.push(Workload::RandWrite);
        }
        if round % 2 == 1 {
            w.reverse();
        }
        w
    }
}

pub struct Env {
    pub root: PathBuf,
    pub logs: PathBuf,
    pub biolatency: PathBuf,
    /// The baseline daemon (`--baseline`), built.
    pub baseline: Option<super::baseline::Baseline>,
    pub args: BenchArgs,
    pub ramp: u32,
}

impl Env {
    /// The daemon binary of `config` (`Observer` or `Baseline`).
    pub fn daemon_bin(&self, config: Config) -> Result<PathBuf> {
        match config {
            Config::Observer => Ok(self.root.join("target/release/observer")),
            Config::Baseline => Ok(self
                .baseline
                .as_ref()
                .context("baseline configuration without --baseline")?
                .bin
                .clone()),
            c => bail!("{} is not an observer daemon", c.name()),
        }
    }
}

pub fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(bin))
                .find(|p| p.is_file())
        })
        .or_else(|| {
            ["/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(bin))
                .find(|p| p.is_file())
        })
}

/// libbpf-tools' biolatency: found, or installed from Debian's `libbpf-tools`.
pub fn find_or_install_biolatency() -> Result<PathBuf> {
    let find = || -> Option<PathBuf> {
        which("biolatency").or_else(|| {
            let out = Command::new("dpkg")
                .args(["-L", "libbpf-tools"])
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find(|l| l.ends_with("/biolatency"))
                .map(PathBuf::from)
        })
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    eprintln!("[bench] installing libbpf-tools (biolatency) with apt-get");
    crate::run(Command::new("apt-get").args(["update", "-qq"]))?;
    crate::run(
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "libbpf-tools",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    find().context("libbpf-tools installed but no biolatency binary found (dpkg -L libbpf-tools)")
}

/// Refuses a device that is in use: mounted, swap, held (dm, md), or the root disk.
pub fn check_user_device(d: &Path) -> Result<()> {
    let meta = std::fs::metadata(d).with_context(|| format!("--device {}", d.display()))?;
    use std::os::unix::fs::FileTypeExt;
    ensure!(
        meta.file_type().is_block_device(),
        "--device {} is not a block device",
        d.display()
    );
    let canon = std::fs::canonicalize(d)?;
    let name = canon
        .file_name()
        .context("device name")?
        .to_string_lossy()
        .into_owned();
    ensure!(
        Path::new("/sys/block").join(&name).exists(),
        "--device {}: give a whole disk (a /sys/block entry)",
        d.display()
    );
    let dev_prefix = format!("/dev/{name}");
    for f in ["/proc/mounts", "/proc/swaps"] {
        for line in std::fs::read_to_string(f)?.lines() {
            let src = line.split_whitespace().next().unwrap_or("");
            if src.starts_with(&dev_prefix) {
                bail!("--device {}: {src} is in use ({f}); refusing", d.display());
            }
        }
    }
    let holders = std::fs::read_dir(Path::new("/sys/block").join(&name).join("holders"))?.count();
    ensure!(
        holders == 0,
        "--device {}: held by another block device (dm/md); refusing",
        d.display()
    );
    Ok(())
}

pub fn scheduler(name: &str) -> String {
    std::fs::read_to_string(format!("/sys/block/{name}/queue/scheduler"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
