//! The project's one CI/skip rule, with no dependencies, so every test crate compiles this same
//! file: the integration tests (`support::skip` re-exports it), observer's unit tests
//! (`observer/src/bpf/mod.rs`, `#[cfg(test)] mod skip_rule`) and xtask's bench smoke test
//! (`xtask/tests/bench_smoke.rs`), each through `#[path]`.

/// True when running under CI: `CI` set to anything but empty, `0`, `false`, `no` or `off`.
/// There a test that cannot run fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no" | "off"
        )
    })
}

/// Skips the calling test visibly, or panics under CI. The reason goes to stderr (written to
/// the handle directly: libtest hides captured `eprintln!` of passing tests) and is appended to
/// the file named by `BLKOBS_SKIP_LOG` as `<crate> <test>: <why>`, which `cargo xtask test`
/// lists at the end of the run (and fails on, unless `--allow-skips`); in the kernel-matrix
/// guests that file is target/vm/<label>/skipped-tests.txt, read back by xtask's vm.rs. Returns
/// false, for `if !... { return }`.
pub fn skip(why: &str) -> bool {
    if in_ci() {
        panic!("cannot run under CI: {why}");
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {why}");
    if let Some(log) = std::env::var_os("BLKOBS_SKIP_LOG") {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let test = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(f, "{} {test}: {why}", env!("CARGO_CRATE_NAME"));
        }
    }
    false
}
