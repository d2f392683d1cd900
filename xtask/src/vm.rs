//! `cargo xtask vmtest`: run a payload (default: the [`GUEST_TESTS`] integration tests)
//! inside Debian's 5.10, 6.1 and 6.12 cloud kernels, one after the other, in qemu (TCG: KVM guests hang on these
//! machines). The guest's root is this host's root filesystem, shared read-only over virtiofs (the
//! cloud kernels have no 9p), and the workspace is shared read-write at the same path, so host
//! tools and cargo-built binaries run unchanged. Console: stderr and target/vm/<label>/console.log.

use std::{
    fs,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::vm_kernels::{self, LABELS};

#[derive(clap::Args, Default)]
pub struct VmArgs {
    /// Kernel to boot: 5.10, 6.1 or 6.12; repeat for several (default: all three, in that order).
    #[arg(long = "kernel", value_name = "LABEL")]
    pub kernels: Vec<String>,
    /// Kill a guest that has not powered off after this many minutes (per kernel).
    #[arg(long, default_value_t = 20)]
    pub timeout_min: u64,
    /// Command to run in the guest, from the workspace directory (default: [`GUEST_TESTS`]).
    #[arg(last = true)]
    pub cmd: Vec<String>,
}

pub(crate) struct Outcome {
    pub(crate) label: String,
    pub(crate) kver: String,
    pub(crate) boot: Option<Duration>,
    pub(crate) total: Duration,
    pub(crate) error: Option<String>,
}

/// Rejects unknown kernel labels (before anything is installed or built).
pub fn check(args: &VmArgs) -> Result<()> {
    for k in &args.kernels {
        if !LABELS.contains(&k.as_str()) {
            bail!(
                "unknown kernel label {k:?}: use --kernel with one of {}",
                LABELS.join(", ")
            );
        }
    }
    Ok(())
}

pub fn run(root: &Path, mut args: VmArgs) -> Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask vmtest needs root (apt-get download into /var/cache/blkobs-vm, virtiofsd): run it as root");
    }
    if args.kernels.is_empty() {
        args.kernels = LABELS.iter().map(|s| s.to_string()).collect();
    }
    check(&args)?;
    // One guest at a time on this machine, whichever checkout asks (2 cores).
    fs::create_dir_all(vm_kernels::cache_dir())?;
    let lock_path = vm_kernels::cache_dir().join("lock");
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    use std::os::fd::AsRawFd;
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        eprintln!(
            "[vm] another vmtest holds {}: waiting for it",
            lock_path.display()
        );
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "locking {}: {}",
                lock_path.display(),
                std::io::Error::last_os_error()
            );
        }
    }
    let cmd = if args.cmd.is_empty() {
        build_matrix_test(root)?
    } else {
        args.cmd.clone()
    };
    let apt = vm_kernels::apt_update()?;
    let mut outcomes = Vec::new();
    for label in &args.kernels {
        let started = Instant::now();
        let kernel = vm_kernels::fetch(&apt, label)?;
        eprintln!(
            "[vm] {label}: {} ({}), prepared in {:.1?}",
            kernel.package,
            kernel.kver,
            started.elapsed()
        );
        let o = crate::vm_boot::boot(
            root,
            &kernel,
            &cmd,
            Duration::from_secs(args.timeout_min * 60),
        )?;
        outcomes.push(o);
    }
    eprintln!("\n[vm] kernel matrix: {}", shell_words(&cmd));
    eprintln!(
        "[vm] {:<6} {:<28} {:>16} {:>10}  result",
        "label", "kernel", "boot->payload", "total"
    );
    for o in &outcomes {
        let boot = o
            .boot
            .map_or("-".into(), |b| format!("{:.1}s", b.as_secs_f64()));
        let res = o
            .error
            .as_deref()
            .map_or("ok", |e| e.split(['(', ';']).next().unwrap_or("").trim());
        eprintln!(
            "[vm] {:<6} {:<28} {:>16} {:>9.1}s  {res}",
            o.label,
            o.kver,
            boot,
            o.total.as_secs_f64()
        );
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_some()).collect();
    if !failed.is_empty() {
        let msgs: Vec<String> = failed
            .iter()
            .map(|o| format!("kernel {}: {}", o.label, o.error.as_ref().unwrap()))
            .collect();
        bail!(
            "kernel matrix failed on {} of {} kernel(s):\n{}",
            failed.len(),
            outcomes.len(),
            msgs.join("\n")
        );
    }
    Ok(())
}

/// The integration tests run in every guest by default: the kernel matrix proper, and the
/// held-request tests (the reaper's request-state probe, flush sequences by `end_io` on kernels
/// whose BTF lacks RQF_FLUSH_SEQ), the lost-completion test (none lost on these kernels), the
/// merge analysis against ftrace, the stacked (device-mapper) tests and the owner-cgroup tests
/// (write-back charged to its owner, against the cgroup's io.stat). The last two are
/// `#[ignore]`d on hosts without dm modules or cgroup2's io controller and run here with
/// `--include-ignored` (the other files have no ignored test it would enable).
const GUEST_TESTS: [&str; 6] = ["matrix", "held", "lost", "merges", "stacked", "owner"];

/// Builds [`GUEST_TESTS`] (and the daemon they run, via CARGO_BIN_EXE_observer) on the host and
/// returns the command that runs them one after the other, stopping at the first failure.
fn build_matrix_test(root: &Path) -> Result<Vec<String>> {
    let mut c = crate::cargo();
    c.args(["test", "--no-run", "-p", "observer"]);
    for t in GUEST_TESTS {
        c.args(["--test", t]);
    }
    c.arg("--message-format=json-render-diagnostics");
    c.stdout(Stdio::piped());
    eprintln!("+ {c:?}");
    let out = c.output().context("starting cargo")?;
    if !out.status.success() {
        bail!("building the guest tests ({GUEST_TESTS:?} in observer/tests/) failed: {}; fix the build, or pass a command after `--`", out.status);
    }
    let mut exes = Vec::new();
    for t in GUEST_TESTS {
        let exe = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["reason"] == "compiler-artifact" && v["target"]["name"] == t)
            .find_map(|v| v["executable"].as_str().map(str::to_string))
            .with_context(|| format!("cargo did not report the {t} test executable"))?;
        let rel = Path::new(&exe)
            .strip_prefix(root)
            .map(|p| p.display().to_string())
            .unwrap_or(exe);
        // `--include-ignored`: stacked.rs's and owner.rs's guest-only tests (dm modules,
        // cgroup2 with the io controller); the other files have no ignored tests.
        exes.push(format!(
            "{} --test-threads=1 --nocapture --include-ignored",
            quote(&rel)
        ));
    }
    Ok(vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("set -e; {}", exes.join("; ")),
    ])
}

pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub(crate) fn shell_words(cmd: &[String]) -> String {
    cmd.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}
