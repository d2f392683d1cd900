//! Kernels for the matrix: Debian's own cloud kernel packages, downloaded with apt-get against a
//! sources list of our own (the host's apt configuration is never touched), unpacked, `depmod`ed,
//! plus a small initramfs (busybox-static, the virtiofs module chain, `vm_init.sh`).

use std::{
    collections::{HashMap, HashSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

/// Where downloads, apt lists and unpacked kernels live (override: BLKOBS_VM_CACHE).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("BLKOBS_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/blkobs-vm"))
}

pub const LABELS: [&str; 3] = ["5.10", "6.1", "6.12"];

/// Package name prefix, and the suites a label's package may come from.
fn spec(label: &str) -> Result<(&'static str, &'static [&'static str])> {
    Ok(match label {
        "5.10" => ("linux-image-5.10.", &["bullseye"]),
        // 6.1.0-N (bookworm); not 6.1.0-0.deb11.N (bullseye's backport): see `matches`.
        "6.1" => ("linux-image-6.1.0-", &["bookworm"]),
        // trixie's own (+deb13), or bookworm's security/backports build (+deb12).
        "6.12" => ("linux-image-6.12.", &["trixie", "bookworm"]),
        other => bail!(
            "unknown kernel label {other:?}: use one of {}",
            LABELS.join(", ")
        ),
    })
}

/// `linux-image-<prefix>...-cloud-amd64-unsigned`; for 6.1 only `6.1.0-<digits>-`.
fn matches(label: &str, prefix: &str, name: &str) -> bool {
    let Some(mid) = name
        .strip_prefix(prefix)
        .and_then(|r| r.strip_suffix("-cloud-amd64-unsigned"))
    else {
        return false;
    };
    label != "6.1" || mid.chars().all(|c| c.is_ascii_digit())
}

/// The suites the kernels come from (fetch's candidates), on this host's own mirrors.
fn sources() -> Result<String> {
    let m = crate::apt_mirror::host()?;
    let key = "[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
    let mut s = String::new();
    let suites: [(&str, &[&str]); 3] = [
        ("bullseye", &[""]),
        ("bookworm", &["", "-updates", "-backports"]),
        ("trixie", &["", "-updates"]),
    ];
    for (codename, archive) in suites {
        for suite in archive {
            s += &format!("deb {key} {} {codename}{suite} main\n", m.debian);
        }
        if let Some(sec) = &m.security {
            s += &format!("deb {key} {sec} {codename}-security main\n");
        }
    }
    Ok(s)
}

/// An unpacked kernel package, ready to boot.
pub struct Kernel {
    pub label: String,
    pub package: String,
    /// `uname -r` of the kernel.
    pub kver: String,
    /// Root of the unpacked package (lib/modules/<kver> below it, depmod'ed).
    pub root: PathBuf,
    pub vmlinuz: PathBuf,
}

fn apt_opts(apt: &Path) -> Vec<String> {
    let p = |s: &str| apt.join(s).display().to_string();
    vec![
        format!("-oDir::Etc::sourcelist={}", p("sources.list")),
        "-oDir::Etc::sourceparts=/nonexistent".into(),
        format!("-oDir::State::Lists={}", p("lists")),
        format!("-oDir::Cache={}", p("cache")),
        // Our own binary caches (Docker-style images set these to "" host-wide: slow apt-cache).
        "-oDir::Cache::pkgcache=pkgcache.bin".into(),
        "-oDir::Cache::srcpkgcache=srcpkgcache.bin".into(),
        "-oAPT::Sandbox::User=root".into(),
        "-oAcquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::DEP-11-icons-hidpi::DefaultEnabled=false".into(),
        "-oAcquire::IndexTargets::deb::CNF::DefaultEnabled=false".into(),
        "-qq".into(),
    ]
}

fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Our own apt lists, refreshed once per `vmtest` invocation.
pub fn apt_update() -> Result<PathBuf> {
    let apt = cache_dir().join("apt");
    for d in ["lists/partial", "cache/archives/partial"] {
        fs::create_dir_all(apt.join(d))
            .with_context(|| format!("creating {} (run as root)", apt.display()))?;
    }
    fs::write(apt.join("sources.list"), sources()?)?;
    eprintln!("[vm] apt-get update (own lists under {})", apt.display());
    let updated = crate::run(Command::new("apt-get").args(apt_opts(&apt)).arg("update"));
    let have_lists = fs::read_dir(apt.join("lists"))?.count() > 2;
    match updated {
        Ok(()) => Ok(apt),
        Err(e) if have_lists => {
            eprintln!("[vm] WARNING: apt-get update failed ({e:#}); using the lists from the last update");
            Ok(apt)
        }
        Err(e) => Err(e).context(
            "apt-get update for the kernel matrix failed: it uses this machine's own apt mirrors (/etc/apt/sources.list*; override with BLKOBS_APT_MIRROR), check that they are reachable",
        ),
    }
}

fn version_gt(a: &str, b: &str) -> bool {
    Command::new("dpkg")
        .args(["--compare-versions", a, "gt", b])
        .status()
        .is_ok_and(|s| s.success())
}

/// Candidate packages for a label, newest version first: (package, version).
fn candidates(apt: &Path, label: &str) -> Result<Vec<(String, String)>> {
    let (prefix, suites) = spec(label)?;
    let names: Vec<String> = output(
        Command::new("apt-cache")
            .args(apt_opts(apt))
            .args(["pkgnames", "linux-image-"]),
    )?
    .lines()
    .filter(|n| matches(label, prefix, n))
    .map(str::to_string)
    .collect();
    if names.is_empty() {
        bail!(
            "no package {prefix}*-cloud-amd64-unsigned in {}: apt lists incomplete?",
            apt.display()
        );
    }
    let madison = output(
        Command::new("apt-cache")
            .args(apt_opts(apt))
            .arg("madison")
            .args(&names),
    )?;
    let mut found: Vec<(String, String)> = Vec::new();
    for line in madison.lines() {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        let [pkg, ver, src] = f[..] else { continue };
        let suite = src.split_whitespace().nth(1).unwrap_or("");
        if suites
            .iter()
            .any(|s| suite.starts_with(&format!("{s}/")) || suite.starts_with(&format!("{s}-")))
        {
            found.push((pkg.to_string(), ver.to_string()));
        }
    }
    // Insertion sort, newest first, by dpkg's version order (a few dozen entries).
    let mut sorted: Vec<(String, String)> = Vec::new();
    for c in found {
        let at = sorted
            .iter()
            .position(|s| version_gt(&c.1, &s.1))
            .unwrap_or(sorted.len());
        sorted.insert(at, c);
    }
    sorted.dedup();
    Ok(sorted)
}

/// Download (newest that the registry serves) and unpack the kernel for `label`; reuses the cache.
pub fn fetch(apt: &Path, label: &str) -> Result<Kernel> {
    let debs = cache_dir().join("debs");
    fs::create_dir_all(&debs)?;
    let cands = candidates(apt, label)?;
    let mut errors = Vec::new();
    for (pkg, ver) in &cands {
        let file = debs.join(format!("{pkg}_{}_amd64.deb", ver.replace(':', "%3a")));
        // The registry lists some packages it does not serve (404): remember those for a day.
        let missing = debs.join(format!("{pkg}_{ver}.unavailable"));
        let recent = |p: &Path| {
            fs::metadata(p)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|e| e.as_secs() < 86_400))
        };
        if !file.exists() && recent(&missing) {
            errors.push(format!("{pkg}={ver} (404 within the last day)"));
            continue;
        }
        if !file.exists() {
            eprintln!("[vm] {label}: apt-get download {pkg}={ver}");
            let st = Command::new("apt-get")
                .args(apt_opts(apt))
                .args(["download", &format!("{pkg}={ver}")])
                .current_dir(&debs)
                .status()?;
            if !st.success() || !file.exists() {
                eprintln!("[vm] {label}: {pkg}={ver} not downloadable, trying the next older one");
                let _ = fs::write(&missing, "");
                errors.push(format!("{pkg}={ver}"));
                continue;
            }
        }
        if !errors.is_empty() {
            eprintln!(
                "[vm] {label}: newer packages listed but not served: {}",
                errors.join(", ")
            );
        }
        return unpack(label, pkg, &file);
    }
    bail!("kernel {label}: no candidate could be downloaded (tried {errors:?}); check access to this machine's apt mirror (/etc/apt/sources.list*)")
}

fn unpack(label: &str, pkg: &str, deb: &Path) -> Result<Kernel> {
    let stem = deb.file_stem().unwrap().to_string_lossy().into_owned();
    let root = cache_dir().join("kernels").join(&stem);
    let done = root.join(".blkobs-ready-2");
    if !done.exists() {
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root)?;
        crate::run(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&root))?;
        // Merged-/usr packages (6.12) ship usr/lib/modules; kmod's -b/-d look under lib/modules.
        if !root.join("lib/modules").exists() && root.join("usr/lib/modules").exists() {
            std::os::unix::fs::symlink("usr/lib", root.join("lib"))?;
        }
    }
    let kver = fs::read_dir(root.join("lib/modules"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .with_context(|| format!("{}: no lib/modules/<version>", root.display()))?;
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{kver}"));
    if !vmlinuz.exists() {
        bail!("{}: no kernel image boot/vmlinuz-{kver}", root.display());
    }
    if !done.exists() {
        // 6.12's modules are .ko.xz: decompress them once here, not in every (emulated) guest.
        let sh = "find lib/modules/ -name '*.ko.xz' -print0 | xargs -0 -r -P2 -n64 xz -d";
        crate::run(
            Command::new("sh")
                .args(["-c", sh])
                .current_dir(root.join("")),
        )
        .context("xz -d (xz-utils)")?;
        crate::run(Command::new("depmod").arg("-b").arg(&root).arg(&kver))
            .context("depmod failed: install kmod (scripts/provision.sh does)")?;
        fs::write(&done, "")?;
    }
    Ok(Kernel {
        label: label.into(),
        package: pkg.into(),
        kver,
        root,
        vmlinuz,
    })
}

/// Modules (in load order) that must be in the initramfs for virtiofs: whatever of them is not
/// built into this kernel, with their dependencies from modules.dep.
fn boot_modules(k: &Kernel) -> Result<Vec<PathBuf>> {
    let moddir = k.root.join("lib/modules").join(&k.kver);
    let dep = fs::read_to_string(moddir.join("modules.dep")).context("modules.dep (depmod)")?;
    let name = |p: &str| -> String {
        let f = Path::new(p)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        f.split('.').next().unwrap().replace('-', "_")
    };
    let mut by_name: HashMap<String, (String, Vec<String>)> = HashMap::new();
    for line in dep.lines() {
        let Some((m, deps)) = line.split_once(':') else {
            continue;
        };
        by_name.insert(
            name(m),
            (
                m.to_string(),
                deps.split_whitespace().map(str::to_string).collect(),
            ),
        );
    }
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    fn visit(
        n: &str,
        by: &HashMap<String, (String, Vec<String>)>,
        seen: &mut HashSet<String>,
        out: &mut Vec<String>,
    ) {
        if !seen.insert(n.to_string()) {
            return;
        }
        if let Some((path, deps)) = by.get(n) {
            for d in deps {
                let dn = Path::new(d).file_name().unwrap().to_string_lossy();
                visit(
                    &dn.split('.').next().unwrap().replace('-', "_"),
                    by,
                    seen,
                    out,
                );
            }
            out.push(path.clone());
        }
    }
    for m in ["virtio_pci", "virtio_console", "virtiofs"] {
        visit(m, &by_name, &mut seen, &mut order);
    }
    Ok(order.into_iter().map(|p| moddir.join(p)).collect())
}

/// Writes the initramfs for `k` into `dir` and returns its path.
pub fn initramfs(k: &Kernel, dir: &Path, conf: &str) -> Result<PathBuf> {
    let tree = dir.join("initramfs");
    let _ = fs::remove_dir_all(&tree);
    for d in ["bin", "modules", "proc", "sys", "dev", "mnt/root"] {
        fs::create_dir_all(tree.join(d))?;
    }
    let busybox = Path::new("/bin/busybox");
    if !busybox.exists() {
        bail!("/bin/busybox missing: install busybox-static (bash scripts/provision.sh)");
    }
    fs::copy(busybox, tree.join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", tree.join("bin/sh"))?;
    let mut order = String::new();
    for m in boot_modules(k)? {
        let base = m.file_name().unwrap().to_string_lossy().into_owned();
        let plain = base
            .trim_end_matches(".xz")
            .trim_end_matches(".zst")
            .to_string();
        let bytes = match base.rsplit('.').next() {
            Some("xz") => output_bytes(Command::new("xz").arg("-dc").arg(&m))?,
            Some("zst") => output_bytes(Command::new("zstd").arg("-dc").arg(&m))?,
            _ => fs::read(&m)?,
        };
        fs::write(tree.join("modules").join(&plain), bytes)?;
        order.push_str(&plain);
        order.push('\n');
    }
    fs::write(tree.join("modules.order"), order)?;
    fs::write(tree.join("vm.conf"), conf)?;
    let init = tree.join("init");
    fs::write(&init, include_str!("vm_init.sh"))?;
    crate::run(Command::new("chmod").arg("755").arg(&init))?;
    let out = dir.join("initramfs.cpio.gz");
    let sh = format!(
        "cd '{}' && find . | cpio --quiet -o -H newc | gzip -1 > '{}'",
        tree.display(),
        out.display()
    );
    crate::run(Command::new("sh").arg("-c").arg(sh))
        .context("building the initramfs needs cpio and gzip")?;
    Ok(out)
}

fn output_bytes(cmd: &mut Command) -> Result<Vec<u8>> {
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(out.stdout)
}
