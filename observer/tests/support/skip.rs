//! The one rule for a test that cannot run here: under CI it fails, elsewhere it skips visibly.

use std::path::Path;

use super::which;

#[path = "skip_rule.rs"]
mod rule;
pub use rule::{in_ci, skip};

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
    // SAFETY: geteuid(2) cannot fail and takes no memory.
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
