//! Builds `observer-ebpf` for `bpfel-unknown-none` and leaves the object in OUT_DIR, from where
//! `src/bpf/loader.rs` embeds it with `include_bytes!`: the daemon is one self-contained binary.
//!
//! The choice of toolchain route is made here and only here (see docs/src/development/building.md):
//! - `debian`: Debian's `rustc-web` (/usr/bin/rustc, LLVM 22) with its prebuilt `core` for
//!   bpfel-unknown-none (package libstd-rust-web-dev-bpf), `RUSTC_BOOTSTRAP=1`. What CI uses.
//! - `rustup`: `rustup run nightly cargo build -Z build-std=core` (needs the rust-src component).
//!
//! Choose with `OBSERVER_EBPF_TOOLCHAIN=debian|rustup`; by default `debian` when its pieces are
//! installed, else `rustup`. Both link with `bpf-linker`, which emits BTF (`--btf`).
use std::{
    env,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_BPF_CORE: &str = "/usr/lib/rustlib/bpfel-unknown-none/lib";
const TARGET: &str = "bpfel-unknown-none";

fn main() -> Result<()> {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.parent().context("workspace root")?.to_path_buf();
    for dir in [
        "observer-ebpf/src",
        "observer-ebpf/Cargo.toml",
        "observer-common/src",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=OBSERVER_EBPF_TOOLCHAIN");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let target_dir = ebpf_target_dir(&out_dir);

    if which("bpf-linker").is_none() {
        bail!(
            "bpf-linker not found on PATH. Run `scripts/provision.sh` (as root), or install it: \
             LLVM_PREFIX=/usr/lib/llvm-22 LLVM_SYS_221_PREFIX=/usr/lib/llvm-22 cargo install \
             bpf-linker --version 0.13.0 --no-default-features --features llvm-22"
        );
    }
    let debian_ready = Path::new(DEBIAN_RUSTC).exists() && Path::new(DEBIAN_BPF_CORE).exists();
    let route = env::var("OBSERVER_EBPF_TOOLCHAIN").unwrap_or_else(|_| {
        if debian_ready {
            "debian".into()
        } else {
            "rustup".into()
        }
    });

    let rustflags = [
        "--cfg=bpf_target_arch=\"x86_64\"",
        "-Cdebuginfo=2",
        "-Clink-arg=--btf",
    ]
    .join("\x1f");
    let mut cmd = match route.as_str() {
        "debian" => {
            if !debian_ready {
                bail!(
                    "OBSERVER_EBPF_TOOLCHAIN=debian but {DEBIAN_RUSTC} or {DEBIAN_BPF_CORE} is missing: \
                     run `scripts/provision.sh` or `apt-get install rustc-web libstd-rust-web-dev-bpf`"
                );
            }
            let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            c.env("RUSTC", DEBIAN_RUSTC).env("RUSTC_BOOTSTRAP", "1");
            c.args(["build"]);
            c
        }
        "rustup" => {
            if which("rustup").is_none() {
                bail!(
                    "no eBPF toolchain: install Debian's rustc-web + libstd-rust-web-dev-bpf \
                     (scripts/provision.sh), or rustup with `rustup toolchain install nightly \
                     --component rust-src`"
                );
            }
            let mut c = Command::new("rustup");
            c.args(["run", "nightly", "cargo", "build", "-Z", "build-std=core"]);
            c.env_remove("RUSTC");
            c
        }
        other => bail!("OBSERVER_EBPF_TOOLCHAIN={other}: use `debian` or `rustup`"),
    };
    // Do not leak the host build's settings into the BPF build (RUSTC_WORKSPACE_WRAPPER: under
    // `cargo clippy`, clippy-driver would wrap the BPF rustc).
    for (k, _) in env::vars() {
        let wrapper = k == "RUSTC_WRAPPER" || k == "RUSTC_WORKSPACE_WRAPPER";
        if k.starts_with("CARGO_") && k != "CARGO_HOME" || wrapper || k == "RUSTFLAGS" {
            cmd.env_remove(&k);
        }
    }
    cmd.current_dir(&root)
        .args([
            "-p",
            "observer-ebpf",
            "--release",
            "--target",
            TARGET,
            "--color",
            "never",
            "--target-dir",
        ])
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env("CARGO_TARGET_BPFEL_UNKNOWN_NONE_LINKER", "bpf-linker");
    cmd.stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("running {cmd:?}"))?;
    let stderr = child.stderr.take().context("the eBPF build's stderr")?;
    forward_diagnostics(BufReader::new(stderr));
    let status = child.wait().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("building observer-ebpf ({route} route) failed: {status}; see the output above");
    }
    let obj = target_dir.join(TARGET).join("release/observer");
    std::fs::copy(&obj, out_dir.join("observer.bpf.o"))
        .with_context(|| format!("copying {}", obj.display()))?;
    // The reaper's request-state probe (observer-ebpf/src/reqstate.rs); empty programs on the
    // same tracepoints, and cost probes, for `cargo xtask bench` (src/bin/observer-floor.rs).
    for bin in ["reqstate", "floor", "costs", "trace"] {
        let obj = target_dir.join(TARGET).join("release").join(bin);
        std::fs::copy(&obj, out_dir.join(format!("{bin}.bpf.o")))
            .with_context(|| format!("copying {}", obj.display()))?;
    }
    Ok(())
}

/// One eBPF target directory for every profile of this workspace (debug, release, clippy's
/// check): `<target dir>/bpf`, found as the ancestor of OUT_DIR holding cargo's CACHEDIR.TAG,
/// so the programs are compiled once per change, not once per profile.
fn ebpf_target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map_or_else(|| out_dir.join("ebpf-target"), |t| t.join("bpf"))
}

/// Copies the eBPF build's stderr to ours (shown with `cargo build -vv` or on failure) and turns
/// each of its compiler warnings into a `cargo:warning`, which cargo always shows.
fn forward_diagnostics(stderr: impl BufRead) {
    let mut warning: Vec<String> = Vec::new();
    let flush = |w: &mut Vec<String>| {
        for l in w.drain(..) {
            println!("cargo:warning={l}");
        }
    };
    for line in stderr.lines().map_while(Result::ok) {
        eprintln!("{line}");
        let summary = line.starts_with("warning: `") && line.contains("generated");
        let noise = summary || line.starts_with("warning: build failed");
        if line.starts_with("warning") && !noise {
            flush(&mut warning);
            warning.push(line);
        } else if !warning.is_empty() && !line.trim().is_empty() {
            warning.push(line);
        } else {
            flush(&mut warning);
        }
    }
    flush(&mut warning);
}

/// The first `bin` on `PATH`, if any.
fn which(bin: &str) -> Option<PathBuf> {
    env::var_os("PATH").and_then(|paths| {
        env::split_paths(&paths)
            .map(|p| p.join(bin))
            .find(|p| p.is_file())
    })
}
