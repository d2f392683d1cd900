//! `cargo xtask vmtest`: run a payload (default: the [`GUEST_TESTS`] integration tests)
//! inside Debian's 5.10, 6.1 and 6.12 cloud kernels, two at a time (`--jobs`), in qemu (TCG: KVM guests hang on these
//! machines). The guest's root is this host's root filesystem, shared read-only over virtiofs (the
//! cloud kernels have no 9p), and the workspace is shared read-write at the same path, so host
//! tools and cargo-built binaries run unchanged. Console: stderr and target/vm/<label>/console.log.

use std::{
    fs,
    path::{Path, PathBuf},
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
    #[arg(long, default_value_t = 45)]
    pub timeout_min: u64,
    /// Guests run at once. Each TCG guest keeps about one host core busy on average (measured:
    /// qemu at 102 % of a core through md_stacks.rs's md raid1 tests, its 2 vCPUs mostly
    /// waiting on I/O and sleeps), so on a 2-core machine two at a time take about as long as
    /// the longest kernel plus the rest, not the sum.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// Where the guests' skipped tests are appended (`cargo xtask test` passes its skip list,
    /// which it reports at the end of the run); without it they are listed and fail the run.
    #[arg(skip)]
    pub skip_log: Option<std::path::PathBuf>,
    /// Where each test binary's and job's outcome goes (`cargo xtask test`'s table).
    #[arg(skip)]
    pub table: Option<std::sync::Arc<std::sync::Mutex<crate::suite::Table>>>,
    /// The test executables `cargo xtask test` built for the host (name as in its table,
    /// path): the guests run those instead of a build of their own (`cargo test -p observer`
    /// resolves features apart from the workspace and would compile everything again).
    #[arg(skip)]
    pub prebuilt: Option<Vec<(String, PathBuf)>>,
    /// Command to run in the guest, from the workspace directory (default: [`GUEST_TESTS`]).
    #[arg(last = true)]
    pub cmd: Vec<String>,
}

pub(crate) struct Outcome {
    pub(crate) label: String,
    /// The guest's name: the label, or `<label>-<shard>` ([`SHARDS`]).
    pub(crate) slot: String,
    pub(crate) kver: String,
    pub(crate) boot: Option<Duration>,
    pub(crate) total: Duration,
    pub(crate) error: Option<String>,
    /// Killed for printing nothing for [`crate::vm_boot::STALL`].
    pub(crate) stalled: bool,
    /// Why this kernel was booted a second time (the first boot stalled), if it was.
    pub(crate) retried: Option<String>,
    /// Tests the guest skipped, one line each (`[<label>] <crate> <test>: <why>`).
    pub(crate) skipped: Vec<String>,
    /// Each test binary the payload ran (its `BLKOBS-VM-TEST-END` line), in order.
    pub(crate) results: Vec<(String, crate::suite::Cell)>,
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

/// Work that shares the guests' slots: started when no kernel is left to boot (`cargo xtask
/// test` runs the Debian machines this way, in the slot the shorter kernels free).
pub type Job<'a> = (String, Box<dyn FnOnce() -> Result<()> + Send + 'a>);

pub fn run(root: &Path, args: VmArgs) -> Result<()> {
    run_with(root, args, Vec::new())
}

/// [`run`], with `then` run in the same slots after the kernels; every kernel's and job's
/// outcome is reported, and the first failure of either fails the run.
pub fn run_with(root: &Path, mut args: VmArgs, then: Vec<Job>) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask vmtest needs root (apt-get download into /var/cache/blkobs-vm, virtiofsd): run it as root");
    }
    if args.kernels.is_empty() {
        args.kernels = LABELS.iter().map(|s| s.to_string()).collect();
    }
    check(&args)?;
    // One vmtest at a time on this machine, whichever checkout asks (2 cores).
    fs::create_dir_all(vm_kernels::cache_dir())?;
    let lock_path = vm_kernels::cache_dir().join("lock");
    let lock = fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    use std::os::fd::AsRawFd;
    // SAFETY (both flock calls): `lock` is an open file that outlives them.
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
    let exes = match (&args.prebuilt, args.cmd.is_empty()) {
        (_, false) => Vec::new(),
        (Some(built), true) => prebuilt_guest_tests(root, built)?,
        (None, true) => build_matrix_test(root)?,
    };
    let cmd_for = |label: &str, shard: &str| {
        if args.cmd.is_empty() {
            matrix_command(&exes, label, shard)
        } else {
            args.cmd.clone()
        }
    };
    let apt = vm_kernels::apt_update()?;
    // Fetched one after the other (apt and the package cache are shared), booted in parallel.
    let mut kernels = Vec::new();
    for label in &args.kernels {
        let started = Instant::now();
        let kernel = vm_kernels::fetch(&apt, label)?;
        eprintln!(
            "[vm] {label}: {} ({}), prepared in {:.1?}",
            kernel.package,
            kernel.kver,
            started.elapsed()
        );
        kernels.push(kernel);
    }
    let jobs = args.jobs.max(1);
    // Guests in order: each kernel's longer shard first, then the shorter ones; a command
    // given after `--` runs once per kernel.
    let shards: Vec<&str> = if args.cmd.is_empty() {
        SHARDS.iter().map(|(name, _)| *name).collect()
    } else {
        vec![""]
    };
    let guests: Vec<(&vm_kernels::Kernel, &str)> = shards
        .iter()
        .flat_map(|sh| kernels.iter().map(move |k| (k, *sh)))
        .collect();
    let next = std::sync::Mutex::new(guests.iter());
    let outcomes = std::sync::Mutex::new(Vec::new());
    let n_then = then.len();
    let then = std::sync::Mutex::new(then.into_iter());
    let then_failed = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(guests.len() + n_then) {
            s.spawn(|| loop {
                let guest = next.lock().unwrap().next();
                if let Some((kernel, shard)) = guest {
                    let cmd = cmd_for(&kernel.label, shard);
                    let o = boot_with_retry(
                        root,
                        kernel,
                        &slot_name(&kernel.label, shard),
                        &cmd,
                        &args,
                    );
                    outcomes.lock().unwrap().push(o);
                    continue;
                }
                let job = then.lock().unwrap().next();
                let Some((name, job)) = job else {
                    return;
                };
                let started = Instant::now();
                let r = job();
                eprintln!(
                    "[vm] {name}: {} in {:.0} s",
                    if r.is_ok() { "ok" } else { "FAILED" },
                    started.elapsed().as_secs_f64()
                );
                if let Some(t) = &args.table {
                    let cell = crate::suite::Cell {
                        ok: r.is_ok(),
                        secs: started.elapsed().as_secs_f64(),
                        failed: Vec::new(),
                    };
                    t.lock().unwrap().add(&name, "machine", cell);
                }
                if let Err(e) = r {
                    then_failed.lock().unwrap().push(format!("{name}: {e:#}"));
                }
            });
        }
    });
    let then_failed = then_failed.into_inner().unwrap();
    let mut outcomes: Vec<Outcome> = outcomes
        .into_inner()
        .unwrap()
        .into_iter()
        .collect::<Result<_>>()?;
    outcomes.sort_by_key(|o| args.kernels.iter().position(|l| *l == o.label));
    if let Some(t) = &args.table {
        let mut t = t.lock().unwrap();
        for o in &outcomes {
            for (name, cell) in &o.results {
                t.add(name, &o.label, cell.clone());
            }
            // A guest that died, stalled or never ran its payload: one row says so.
            let tests_failed = o.results.iter().any(|(_, c)| !c.ok);
            if o.error.is_some() && !tests_failed {
                let failed = vec![o
                    .error
                    .as_deref()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()];
                let cell = crate::suite::Cell {
                    ok: false,
                    secs: o.total.as_secs_f64(),
                    failed,
                };
                t.add("guest (boot, payload)", &o.label, cell);
            }
        }
    }
    if let Some(label) = args.kernels.first() {
        for sh in &shards {
            eprintln!(
                "\n[vm] kernel matrix ({}): {}",
                slot_name(label, sh),
                shell_words(&cmd_for(label, sh))
            );
        }
    }
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
            "[vm] {:<9} {:<28} {:>16} {:>9.1}s  {res}",
            o.slot,
            o.kver,
            boot,
            o.total.as_secs_f64()
        );
    }
    for o in outcomes.iter().filter(|o| o.retried.is_some()) {
        eprintln!(
            "[vm] ######## {}: {}",
            o.label,
            o.retried.as_deref().unwrap_or("")
        );
    }
    let skipped: Vec<_> = GUEST_SKIPS
        .iter()
        .filter(|(k, ..)| args.kernels.iter().any(|l| l == k))
        .collect();
    if args.cmd.is_empty() && !skipped.is_empty() {
        eprintln!(
            "\n[vm] ######## {} guest test(s) NOT RUN in the matrix (open defects, docs/src/known-limits.md):",
            skipped.len()
        );
        for (kernel, file, test, why) in skipped {
            eprintln!("[vm]   {kernel}: {file}::{test}: {why}");
        }
    }
    let skipped: Vec<&String> = outcomes.iter().flat_map(|o| &o.skipped).collect();
    match &args.skip_log {
        Some(log) if !skipped.is_empty() => {
            let mut f = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .with_context(|| format!("opening {}", log.display()))?;
            use std::io::Write;
            for l in &skipped {
                writeln!(f, "{l}")?;
            }
        }
        None if !skipped.is_empty() => {
            eprintln!("\n[vm] ######## {} guest test(s) SKIPPED:", skipped.len());
            for l in &skipped {
                eprintln!("[vm]   {l}");
            }
        }
        _ => {}
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_some()).collect();
    if !then_failed.is_empty() {
        let kernels = failed
            .iter()
            .map(|o| format!("\nkernel {}: {}", o.label, o.error.as_deref().unwrap_or("")))
            .collect::<String>();
        bail!("{}{kernels}", then_failed.join("\n"));
    }
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
    if args.skip_log.is_none() && !skipped.is_empty() {
        bail!(
            "{} guest test(s) skipped (listed above): fix their prerequisites in the guest \
             (scripts/provision.sh installs the guests' tools), or run them alone to see why",
            skipped.len()
        );
    }
    Ok(())
}

/// Boots `kernel` with `cmd` as the payload, and once more if the first guest stalled or never
/// reached the payload. A guest stall under TCG has been seen on a loaded machine
/// (vm_boot.rs STALL), and a guest kernel that oopsed while booting, before the payload started
/// (6.12 under TCG: "Oops: int3" in sched_clock_tick, in a clean-clone CI run). The first
/// console is kept at target/vm/<label>-failed-boot-console.log; a second failure of the same
/// kind fails the kernel.
fn boot_with_retry(
    root: &Path,
    kernel: &vm_kernels::Kernel,
    slot: &str,
    cmd: &[String],
    args: &VmArgs,
) -> Result<Outcome> {
    let label = slot;
    let boot = || {
        crate::vm_boot::boot(
            root,
            kernel,
            slot,
            cmd,
            Duration::from_secs(args.timeout_min * 60),
        )
    };
    let mut o = boot()?;
    let first = if o.stalled {
        Some("STALLED")
    } else if o.boot.is_none() {
        Some("never reached the payload")
    } else {
        None
    };
    if let Some(what) = first {
        let kept = root.join(format!("target/vm/{label}-failed-boot-console.log"));
        let _ = fs::copy(root.join(format!("target/vm/{label}/console.log")), &kept);
        let why = o.error.clone().unwrap_or_default();
        eprintln!(
            "\n[vm] ######## {label}: the guest {what} ({}); its console is kept at {}. \
             Booting it once more.\n",
            why.lines().next().unwrap_or(""),
            kept.display()
        );
        o = boot()?;
        o.retried = Some(format!(
            "booted twice: the first boot {what}, console at {}",
            kept.display()
        ));
    }
    Ok(o)
}

/// The integration tests run in every guest by default: the kernel matrix proper, and the
/// held-request tests (the reaper's request-state probe, flush sequences by `end_io` on kernels
/// whose BTF lacks RQF_FLUSH_SEQ), the lost-completion test (none lost on these kernels), the
/// merge analysis against ftrace, the stacked (device-mapper) tests, the owner-cgroup tests
/// (write-back charged to its owner, against the cgroup's io.stat), latency per owner cgroup
/// (against io.stat and fio, on null_blk), the real drivers on the guests' qemu disks (NVMe,
/// polled NVMe, NVMe multipath paths, virtio-blk, virtio-scsi: [`crate::vm_boot`]'s
/// `GuestDisks`), the disk stacks (md RAID, LVM on md, dm-crypt with XFS), `observer trace`'s
/// blktrace files (blkparse against ftrace, btt against the daemon), the file of slow and stuck
/// requests (against `stat`) and the I/O priority class (against fio and ftrace). stacked.rs,
/// owner.rs, cgroup_latency.rs, drivers.rs and md_stacks.rs have tests `#[ignore]`d on hosts
/// without dm or md modules, cgroup2's io controller, null_blk or those disks, run here with
/// `--include-ignored` (the other files have no ignored test it would enable).
const GUEST_TESTS: [&str; 12] = [
    "matrix",
    "held",
    "lost",
    "merges",
    "stacked",
    "owner",
    "cgroup_latency",
    "drivers",
    "md_stacks",
    "trace",
    "which_file",
    "ioprio",
];

/// [`GUEST_TESTS`] split over two guests of each kernel (shard name, test files), so that
/// the two guest slots end together: md_stacks.rs alone is about as long as the others.
const SHARDS: [(&str, &[&str]); 2] = [
    (
        "",
        &[
            "matrix",
            "held",
            "lost",
            "merges",
            "stacked",
            "owner",
            "cgroup_latency",
            "drivers",
        ],
    ),
    ("md", &["md_stacks", "trace", "which_file", "ioprio"]),
];

/// The guest of kernel `label` that runs `shard`.
fn slot_name(label: &str, shard: &str) -> String {
    if shard.is_empty() {
        label.to_string()
    } else {
        format!("{label}-{shard}")
    }
}

/// The table row of a shard's daemon preflight.
fn preflight_row(shard: &str) -> String {
    slot_name("daemon-preflight", shard)
}

/// Guest tests left out of the matrix on one kernel (kernel label, file, test, why), each an
/// open defect that docs/src/known-limits.md#stacked-disks states with its numbers; the run names
/// them loudly. Run one with
/// `cargo xtask vmtest --kernel <label> -- target/debug/deps/<file>-<hash> --include-ignored <test>`.
pub(crate) const GUEST_SKIPS: [(&str, &str, &str, &str); 0] = [];

/// The daemon the guest tests run (`BLKOBS_OBSERVER_BIN`, observer/tests/support/process.rs):
/// the release build, as users run it. Under TCG the debug build spends ~18 s loading its
/// programs (aya's BTF relocation in unoptimised code), the release build ~5 s; a kernel's
/// guest suite starts the daemon about twenty times.
const GUEST_OBSERVER: &str = "target/release/observer";

/// [`GUEST_TESTS`]' executables among `built` (relative to `root`), in that order; the
/// release daemon is built by the caller.
fn prebuilt_guest_tests(
    root: &Path,
    built: &[(String, PathBuf)],
) -> Result<Vec<(&'static str, String)>> {
    GUEST_TESTS
        .iter()
        .map(|t| {
            let (_, path) = built
                .iter()
                .find(|(name, _)| *name == format!("observer/{t}"))
                .with_context(|| {
                    format!("the test build has no observer/{t}: see its errors above")
                })?;
            let rel = path.strip_prefix(root).unwrap_or(path);
            Ok((*t, rel.display().to_string()))
        })
        .collect()
}

/// Builds [`GUEST_TESTS`] and [`GUEST_OBSERVER`] on the host and returns each test's executable
/// (relative to `root`), in that order.
fn build_matrix_test(root: &Path) -> Result<Vec<(&'static str, String)>> {
    let mut r = crate::cargo();
    r.args(["build", "--release", "-p", "observer", "--bin", "observer"]);
    eprintln!("+ {r:?}");
    if !r.status().context("starting cargo")?.success() {
        bail!("building {GUEST_OBSERVER} for the guests failed; fix the build, or pass a command after `--`");
    }
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
        exes.push((t, rel));
    }
    Ok(exes)
}

/// Starts the daemon once before the tests and waits (at most the 120 s the tests' own helper
/// allows under TCG) until it serves the API. If the guest kernel cannot load the programs, no
/// test can pass: the payload stops with the daemon's log instead of failing every test slowly.
const PREFLIGHT: &str = "t daemon-preflight sh -c '\
    \"$BLKOBS_OBSERVER_BIN\" --listen 127.0.0.1:9598 >/tmp/preflight.log 2>&1 & p=$!; \
    end=$(( $(date +%s) + 120 )); \
    until timeout 10 \"$BLKOBS_OBSERVER_BIN\" stalls --url http://127.0.0.1:9598 --json >/dev/null 2>&1; do \
    if ! kill -0 $p 2>/dev/null || [ $(date +%s) -ge $end ]; then \
    echo \"the daemon did not serve in 120 s; its log:\"; tail -n 40 /tmp/preflight.log; \
    kill $p 2>/dev/null; exit 1; fi; sleep 0.5; done; \
    echo \"daemon-preflight: serving after $(( $(date +%s) + 120 - end )) s\"; \
    kill $p; wait $p; exit 0'; \
    [ $failed -eq 0 ] || { echo BLKOBS-VM-TESTS-FAILED=1; exit 1; }";

/// The command that runs `exes` one after the other in the guest of kernel `label`, going on
/// after a failing one, without that kernel's [`GUEST_SKIPS`]. Each binary is bracketed by
/// `BLKOBS-VM-TEST-START <name>` / `BLKOBS-VM-TEST-END <name> rc=<rc> secs=<s>` lines, which
/// vm_boot.rs reads back into the run's table; the payload fails if any binary failed.
fn matrix_command(exes: &[(&str, String)], label: &str, shard: &str) -> Vec<String> {
    let tests = SHARDS
        .iter()
        .find(|(name, _)| *name == shard)
        .map_or(&[][..], |(_, t)| *t);
    let runs: Vec<String> = exes
        .iter()
        .filter(|(t, _)| tests.contains(t))
        .map(|(t, rel)| {
            // `--include-ignored`: stacked.rs's, owner.rs's, drivers.rs's and md_stacks.rs's
            // guest-only tests (dm and md modules, cgroup2 with the io controller, the qemu
            // disks); the other files have no ignored tests.
            let skips: String = GUEST_SKIPS
                .iter()
                .filter(|(k, file, _, _)| *k == label && file == t)
                .map(|(_, _, test, _)| format!(" --skip {test}"))
                .collect();
            format!(
                "t observer/{t} {} --test-threads=1 --nocapture --include-ignored{skips}",
                quote(rel)
            )
        })
        .collect();
    vec![
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "export BLKOBS_OBSERVER_BIN={}; failed=0; \
             t() {{ n=$1; shift; echo \"BLKOBS-VM-TEST-START $n\"; s=$(date +%s); \"$@\"; rc=$?; \
             echo \"BLKOBS-VM-TEST-END $n rc=$rc secs=$(( $(date +%s) - s ))\"; \
             [ $rc -eq 0 ] || failed=$((failed + 1)); }}; {}; {}; \
             echo \"BLKOBS-VM-TESTS-FAILED=$failed\"; [ $failed -eq 0 ]",
            quote(GUEST_OBSERVER),
            PREFLIGHT.replacen("daemon-preflight", &preflight_row(shard), 1),
            runs.join("; ")
        ),
    ]
}

pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

pub(crate) fn shell_words(cmd: &[String]) -> String {
    cmd.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_run_every_guest_test_once() {
        let mut sharded: Vec<&str> = SHARDS.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        sharded.sort_unstable();
        let mut all = GUEST_TESTS.to_vec();
        all.sort_unstable();
        assert_eq!(sharded, all);
    }

    #[test]
    fn a_shard_runs_only_its_files_after_its_preflight() {
        let exes = [("matrix", "m".to_string()), ("md_stacks", "s".to_string())];
        let cmd = matrix_command(&exes, "6.1", "md").join(" ");
        assert!(cmd.contains("t daemon-preflight-md sh"), "{cmd}");
        assert!(cmd.contains("t observer/md_stacks 's'"), "{cmd}");
        assert!(!cmd.contains("observer/matrix"), "{cmd}");
    }
}
