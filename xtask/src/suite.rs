//! `cargo xtask test`: every check of the project in one run that goes on after a failure, and
//! one table at the end (each step and test binary × host and kernel: passed / failed / seconds).
//!
//! The test binaries are built once (`cargo test --no-run`) and run one by one, so a failing
//! binary neither hides the others nor stops the kernel matrix and the Debian machines, which
//! run in their guests at the same time.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};

/// One test executable cargo built.
pub struct TestExe {
    /// `<package>/<target>` for integration tests, `<package> (<kind>)` for unit tests.
    pub name: String,
    pub path: PathBuf,
    /// The package's directory: cargo runs tests from there.
    pub dir: PathBuf,
}

/// What one test binary (or step) did somewhere.
#[derive(Clone, Debug)]
pub struct Cell {
    pub ok: bool,
    pub secs: f64,
    /// The failing tests' names (libtest's `failures:` list).
    pub failed: Vec<String>,
}

/// Rows (steps, binaries) × columns (host, kernels, machines).
#[derive(Default)]
pub struct Table {
    rows: Vec<String>,
    cells: BTreeMap<(String, String), Cell>,
    columns: Vec<String>,
}

impl Table {
    pub fn add(&mut self, row: &str, column: &str, cell: Cell) {
        if !self.rows.iter().any(|r| r == row) {
            self.rows.push(row.to_string());
        }
        if !self.columns.iter().any(|c| c == column) {
            self.columns.push(column.to_string());
        }
        self.cells
            .insert((row.to_string(), column.to_string()), cell);
    }

    pub fn failures(&self) -> Vec<String> {
        self.cells
            .iter()
            .filter(|(_, c)| !c.ok)
            .map(|((r, col), c)| {
                let tests = if c.failed.is_empty() {
                    String::new()
                } else {
                    format!(": {}", c.failed.join(", "))
                };
                format!("{r} [{col}]{tests}")
            })
            .collect()
    }

    pub fn render(&self) -> String {
        let w0 = self.rows.iter().map(|r| r.len()).max().unwrap_or(4).max(4);
        let mut s = format!("{:<w0$}", "step");
        for c in &self.columns {
            s += &format!(" | {c:>12}");
        }
        s += "\n";
        s += &"-".repeat(w0 + self.columns.len() * 15);
        s += "\n";
        for r in &self.rows {
            s += &format!("{r:<w0$}");
            for c in &self.columns {
                let cell = match self.cells.get(&(r.clone(), c.clone())) {
                    Some(x) => format!("{} {:>5.0}s", if x.ok { "ok" } else { "FAIL" }, x.secs),
                    None => "-".into(),
                };
                s += &format!(" | {cell:>12}");
            }
            s += "\n";
        }
        s
    }
}

/// The names in the last libtest `failures:` block of `output` (the list after the captured
/// outputs), in order.
pub fn failed_tests(output: &str) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    let Some(start) = lines.iter().rposition(|l| l.trim_end() == "failures:") else {
        return Vec::new();
    };
    lines[start + 1..]
        .iter()
        .take_while(|l| !l.starts_with("test result:"))
        .filter_map(|l| l.strip_prefix("    "))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && !n.contains(' '))
        .collect()
}

/// Builds every test binary of the default members (`cargo test --no-run <cargo_args>`) once.
pub fn build(root: &Path, cargo_args: &[String]) -> Result<Vec<TestExe>> {
    let mut c = crate::cargo();
    c.args([
        "test",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ])
    .args(cargo_args)
    .stdout(Stdio::piped());
    eprintln!("+ {c:?}");
    let out = c.output().context("starting cargo")?;
    if !out.status.success() {
        bail!(
            "building the tests failed ({}): see the compiler's messages above",
            out.status
        );
    }
    let mut exes = Vec::new();
    for v in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact" && v["profile"]["test"] == true)
    {
        let Some(path) = v["executable"].as_str() else {
            continue;
        };
        let manifest = PathBuf::from(v["manifest_path"].as_str().unwrap_or_default());
        let package = manifest
            .parent()
            .and_then(|d| d.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = v["target"]["name"].as_str().unwrap_or_default();
        let kind = v["target"]["kind"][0].as_str().unwrap_or_default();
        let name = match kind {
            "test" => format!("{package}/{target}"),
            "bin" => format!("{package} (bin {target})"),
            _ => format!("{package} ({kind})"),
        };
        exes.push(TestExe {
            name,
            path: PathBuf::from(path),
            dir: manifest.parent().unwrap_or(root).to_path_buf(),
        });
    }
    exes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(exes)
}

/// Runs one test binary as cargo would (from its package's directory), its output streamed
/// through, and returns what it did.
pub fn run(exe: &TestExe, args: &[String], env: &[(&str, &Path)]) -> Cell {
    eprintln!(
        "\n+ [{}] {} {}",
        exe.name,
        exe.path.display(),
        args.join(" ")
    );
    let start = Instant::now();
    let mut c = Command::new(&exe.path);
    c.args(args)
        .current_dir(&exe.dir)
        .env("CARGO_MANIFEST_DIR", &exe.dir)
        .stdout(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            eprintln!("starting {}: {e}", exe.path.display());
            return Cell {
                ok: false,
                secs: 0.0,
                failed: vec!["(did not start)".into()],
            };
        }
    };
    let mut text = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // Prefixed as the guests' lines are: both run at once.
            println!("[host] {line}");
            text.push_str(&line);
            text.push('\n');
        }
    }
    let ok = child.wait().is_ok_and(|s| s.success());
    Cell {
        ok,
        secs: start.elapsed().as_secs_f64(),
        failed: if ok { Vec::new() } else { failed_tests(&text) },
    }
}

/// Runs a step (a command) and records it as a row of its own.
pub fn step(table: &mut Table, name: &str, cmd: &mut Command) -> bool {
    let start = Instant::now();
    let ok = crate::run(cmd)
        .map_err(|e| eprintln!("{name}: {e:#}"))
        .is_ok();
    table.add(
        name,
        "host",
        Cell {
            ok,
            secs: start.elapsed().as_secs_f64(),
            failed: Vec::new(),
        },
    );
    ok
}

/// What `cargo xtask test` runs.
pub struct Options {
    /// No kernel matrix, no Debian machines.
    pub no_vm: bool,
    /// The contributor's tier: no VMs, and not the binaries in [`SLOW_HOST_TESTS`].
    pub quick: bool,
    pub allow_skips: bool,
    /// `cargo test` arguments, then (after `--`) the test binaries' own.
    pub args: Vec<String>,
}

/// Host test binaries `--quick` leaves out: the one-minute soak and the bench's smoke run
/// (both still run in the full suite).
const SLOW_HOST_TESTS: [&str; 2] = ["observer/soak", "xtask/bench_smoke"];

/// The eBPF crate's lint: clippy of Debian's toolchain (the one that builds it, see
/// observer/build.rs) for bpfel-unknown-none, warnings denied, as aya-template lints its eBPF crate.
fn ebpf_clippy(root: &Path) -> Command {
    let mut c = Command::new("/usr/bin/cargo-clippy");
    for (k, _) in std::env::vars() {
        if k.starts_with("CARGO_") && k != "CARGO_HOME"
            || k.starts_with("RUSTC")
            || k == "RUSTFLAGS"
        {
            c.env_remove(&k);
        }
    }
    c.current_dir(root)
        .env("RUSTC", "/usr/bin/rustc")
        .env("RUSTC_BOOTSTRAP", "1")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "--cfg=bpf_target_arch=\"x86_64\"",
        )
        .args([
            "clippy",
            "-p",
            "observer-ebpf",
            "--release",
            "--target",
            "bpfel-unknown-none",
        ])
        .args([
            "--target-dir",
            "target/bpf-lint",
            "--lib",
            "--bins",
            "--",
            "-D",
            "warnings",
        ]);
    c
}

pub fn all(root: &Path, o: Options) -> Result<()> {
    let started = Instant::now();
    crate::provision()?;
    // Tests that cannot run here record why in this file (observer/tests/support/skip_rule.rs).
    let skip_log = root.join("target/skipped-tests.txt");
    let _ = std::fs::remove_file(&skip_log);
    let mut table = Table::default();
    let (cargo_args, test_args) = match o.args.iter().position(|a| a == "--") {
        Some(i) => (o.args[..i].to_vec(), o.args[i + 1..].to_vec()),
        None => (o.args.clone(), Vec::new()),
    };

    step(
        &mut table,
        "fmt --check",
        crate::cargo().args(["fmt", "--all", "--check"]),
    );
    // A Rust function, not a command: recorded the way step() records one.
    let t = Instant::now();
    let docs = crate::docs::check(root)
        .map_err(|e| eprintln!("docs: {e:#}"))
        .is_ok();
    table.add(
        "docs",
        "host",
        Cell {
            ok: docs,
            secs: t.elapsed().as_secs_f64(),
            failed: Vec::new(),
        },
    );
    step(
        &mut table,
        "clippy (host crates)",
        crate::cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]),
    );
    step(&mut table, "clippy (observer-ebpf)", &mut ebpf_clippy(root));
    // The daemon the guests, the bench smoke test and the Debian machines run: built once.
    let release = step(
        &mut table,
        "build --release",
        crate::cargo().args(["build", "--release", "-p", "observer"]),
    );

    let t = Instant::now();
    let exes = build(root, &cargo_args);
    table.add(
        "build tests",
        "host",
        Cell {
            ok: exes.is_ok(),
            secs: t.elapsed().as_secs_f64(),
            failed: vec![],
        },
    );
    let exes = exes.unwrap_or_else(|e| {
        eprintln!("{e:#}");
        Vec::new()
    });

    // The host suite runs while the kernel matrix and the Debian machines run in their TCG
    // guests: the guests hold the cores, the host tests mostly wait on I/O and the daemon.
    let shared = std::sync::Arc::new(std::sync::Mutex::new(std::mem::take(&mut table)));
    let vm = !(o.no_vm || o.quick);
    if !vm {
        eprintln!("\n######## KERNEL MATRIX AND DEBIAN MACHINES NOT RUN (--no-vm/--quick): 5.10, 6.1, 6.12, {} NOT TESTED ########\n", crate::machine::SUITES.join(", "));
    }
    let margs = crate::machine::MachineArgs::default();
    let guest_exes: Vec<(String, PathBuf)> = exes
        .iter()
        .map(|e| (e.name.clone(), e.path.clone()))
        .collect();
    let matrix = std::thread::scope(|s| {
        let matrix = vm.then(|| {
            let (shared, skip_log, margs) = (shared.clone(), skip_log.clone(), &margs);
            s.spawn(move || {
                let machines: Vec<crate::vm::Job> = margs
                    .suites
                    .iter()
                    .map(|suite| {
                        let root = root.to_path_buf();
                        let job: Box<dyn FnOnce() -> Result<()> + Send + '_> =
                            Box::new(move || crate::machine::run_suite(&root, suite, margs));
                        (format!("Debian machine {suite}"), job)
                    })
                    .collect();
                std::thread::scope(|s| {
                    // The images download while the guests boot (machine.rs prefetch_images).
                    s.spawn(|| crate::machine::prefetch_images(&margs.suites));
                    crate::vm::run_with(
                        root,
                        crate::vm::VmArgs {
                            timeout_min: 45,
                            jobs: 2,
                            skip_log: Some(skip_log),
                            table: Some(shared),
                            prebuilt: Some(guest_exes),
                            ..Default::default()
                        },
                        machines,
                    )
                })
            })
        });
        // Integration tests share loop devices and the kernel's tracepoints: one at a time.
        let mut args = test_args.clone();
        args.push("--test-threads=1".into());
        for exe in &exes {
            if o.quick && SLOW_HOST_TESTS.contains(&exe.name.as_str()) {
                continue;
            }
            let no_build = Path::new(if release { "1" } else { "" });
            let cell = run(
                exe,
                &args,
                &[
                    ("BLKOBS_SKIP_LOG", &skip_log),
                    ("BLKOBS_BENCH_NO_BUILD", no_build),
                ],
            );
            shared.lock().unwrap().add(&exe.name, "host", cell);
        }
        match matrix.map(|h| h.join()) {
            None => Ok(()),
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(anyhow::anyhow!("the kernel matrix's thread panicked")),
        }
    });
    table = std::mem::take(&mut *shared.lock().unwrap());
    if let Err(e) = &matrix {
        eprintln!("\nkernel matrix / Debian machines: {e:#}");
    }

    eprintln!(
        "\n######## cargo xtask test: {:.0} s ########\n{}",
        started.elapsed().as_secs_f64(),
        table.render()
    );
    let skips = crate::report_skips(&skip_log, o.allow_skips);
    let failures = table.failures();
    if !failures.is_empty() {
        bail!("{} failed:\n  {}", failures.len(), failures.join("\n  "));
    }
    matrix.context("the kernel matrix or a Debian machine failed (see above)")?;
    skips
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_read_from_the_last_list() {
        let out = "running 3 tests\ntest a ... ok\ntest b ... FAILED\n\nfailures:\n\n\
                   ---- b stdout ----\n    indented output line\nthread 'b' panicked\n\n\
                   failures:\n    b\n    mod_x::c\n\ntest result: FAILED. 1 passed; 2 failed\n";
        assert_eq!(failed_tests(out), ["b", "mod_x::c"]);
        assert!(failed_tests("test result: ok. 3 passed\n").is_empty());
    }

    #[test]
    fn the_table_lists_each_failure_with_its_column() {
        let mut t = Table::default();
        t.add(
            "observer/api",
            "host",
            Cell {
                ok: true,
                secs: 3.0,
                failed: vec![],
            },
        );
        t.add(
            "observer/api",
            "6.12",
            Cell {
                ok: false,
                secs: 9.0,
                failed: vec!["x".into()],
            },
        );
        assert_eq!(t.failures(), ["observer/api [6.12]: x"]);
        let r = t.render();
        assert!(r.contains("ok     3s") && r.contains("FAIL     9s"), "{r}");
    }
}
