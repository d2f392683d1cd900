//! `--baseline <git-rev>`: the observer daemon as built at another revision, benched in the same
//! run as the current one (a before/after table from one run of the harness).
//!
//! The revision is checked out, detached, in a git worktree at target/bench/baseline-<short rev>
//! and built with `cargo build --release -p observer` there (observer/build.rs builds that
//! revision's eBPF too), with `CARGO_TARGET_DIR=target/bench/baseline-target`: the workspace's
//! own target dir is not touched, and baselines share their dir, so another revision rebuilds
//! only the workspace's crates. The daemon is copied to target/bench/observer@<short rev>; while
//! that file exists and the worktree is at the revision, nothing is built again.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

/// A baseline daemon, built.
pub struct Baseline {
    pub commit: String,
    pub short: String,
    pub subject: String,
    pub bin: PathBuf,
}

impl Baseline {
    /// Its name in tables: `observer@<short rev>`.
    pub fn label(&self) -> String {
        format!("observer@{}", self.short)
    }
}

fn git(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.arg("-C").arg(dir);
    c
}

/// Runs git quietly; its trimmed stdout.
fn git_out(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().context("running git")?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// Whether `tree` is a git worktree of its own (not just a directory inside `root`'s) checked out
/// at `commit`.
fn worktree_at(tree: &Path, commit: &str) -> bool {
    let top = git_out(git(tree).args(["rev-parse", "--show-toplevel"]));
    let head = git_out(git(tree).args(["rev-parse", "HEAD"]));
    match (top, head, tree.canonicalize()) {
        (Ok(top), Ok(head), Ok(tree)) => Path::new(&top) == tree && head == commit,
        _ => false,
    }
}

/// Resolves `rev`, and builds the daemon at it unless already built (`no_build`: fail instead).
pub fn prepare(root: &Path, rev: &str, no_build: bool) -> Result<Baseline> {
    let commit = git_out(git(root).args([
        "rev-parse",
        "--verify",
        "--quiet",
        &format!("{rev}^{{commit}}"),
    ]))
    .with_context(|| format!("--baseline {rev}: not a commit of this repository"))?;
    let short = git_out(git(root).args(["rev-parse", "--short=7", &commit]))?;
    let subject = git_out(git(root).args(["log", "-1", "--format=%s", &commit]))?;
    let bench = root.join("target/bench");
    std::fs::create_dir_all(&bench)?;
    let tree = bench.join(format!("baseline-{short}"));
    let b = Baseline {
        bin: bench.join(format!("observer@{short}")),
        commit,
        short,
        subject,
    };
    let at_rev = worktree_at(&tree, &b.commit);
    if at_rev && b.bin.exists() {
        eprintln!(
            "[bench] baseline {} ({}): already built, {}",
            b.label(),
            b.subject,
            b.bin.display()
        );
        return Ok(b);
    }
    ensure!(
        !no_build,
        "--no-build, but the baseline {} is not built yet (no {})",
        b.label(),
        b.bin.display()
    );
    if !at_rev {
        // Another commit, an interrupted checkout, or a directory git no longer knows: afresh.
        if tree.exists() {
            let _ = git_out(git(root).args(["worktree", "remove", "--force"]).arg(&tree));
            if tree.exists() {
                std::fs::remove_dir_all(&tree)
                    .with_context(|| format!("removing {}", tree.display()))?;
            }
        }
        git_out(git(root).args(["worktree", "prune"]))?;
        crate::run(
            git(root)
                .args(["worktree", "add", "--quiet", "--detach"])
                .arg(&tree)
                .arg(&b.commit),
        )?;
    }
    eprintln!(
        "[bench] building the baseline {} ({}) in {}",
        b.label(),
        b.subject,
        tree.display()
    );
    let target_dir = bench.join("baseline-target");
    crate::run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&tree)
            .env("CARGO_TARGET_DIR", &target_dir)
            .args(["build", "--release", "-p", "observer"]),
    )?;
    // Copied under a temporary name first: `bin` existing means built.
    let tmp = bench.join(format!(".observer@{}.tmp", b.short));
    std::fs::copy(target_dir.join("release/observer"), &tmp)
        .context("copying the baseline's observer binary")?;
    std::fs::rename(&tmp, &b.bin)?;
    Ok(b)
}
