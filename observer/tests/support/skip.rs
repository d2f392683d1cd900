//! The one rule for a test that cannot run here: under CI it fails, elsewhere it skips visibly.

use std::path::Path;

use super::which;

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
/// the file named by `BLKOBS_SKIP_LOG`, which `cargo xtask test` lists at the end of the run
/// (and fails on, unless `--allow-skips`). Returns false, for `if !... { return }`.
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

/// Checks a prerequisite. Returns false (after [`skip`]) when the test should be skipped;
/// panics in CI.
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    skip(&format!(
        "{what} (scripts/provision.sh installs the tools; tests run as root)"
    ))
}

/// `tool` found (see [`which`]), else [`skip`] with "`tool` not found (`hint`)".
pub fn require_tool(tool: &str, hint: &str) -> bool {
    require(which(tool).is_some(), &format!("{tool} not found ({hint})"))
}

/// Whether the test runs as root.
pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Root plus every tool in `tools`; see [`require`].
pub fn require_root_and(tools: &[&str]) -> bool {
    if !require(
        is_root(),
        "must run as root (loads eBPF programs, creates loop devices)",
    ) {
        return false;
    }
    tools
        .iter()
        .all(|t| require(which(t).is_some(), &format!("`{t}` not found on PATH")))
}

/// What the real-kernel tests need: root, kernel BTF, and losetup/mkfs.xfs/fio/mount.
/// Returns false (after [`skip`]) if the test cannot run here; panics instead under CI.
pub fn require_root(test: &str) -> bool {
    let root = is_root();
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    let tools = ["losetup", "mkfs.xfs", "fio", "mount"]
        .iter()
        .all(|t| which(t).is_some());
    if root && btf && tools {
        return true;
    }
    skip(&format!("{test}: needs root, /sys/kernel/btf/vmlinux and losetup/mkfs.xfs/fio (root={root} btf={btf} tools={tools}); run `cargo xtask test` as root"))
}
