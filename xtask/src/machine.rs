//! `cargo xtask machine`: the observer on a real Debian machine, installed and run the way a user
//! does it. A Debian image made by mmdebstrap from Debian's own packages (systemd as PID 1, apt,
//! xfsprogs, fio, fsmark, prometheus, bpftool; the suite's own kernel and initramfs), cached
//! under `cache_dir()/machine/`; the project's .deb built by cargo-deb (twice: revision 1, and 2
//! for the upgrade); qemu (TCG) boots the image on a copy-on-write overlay with a virtio disk and
//! an NVMe disk for I/O, and systemd runs `machine_payload.sh` (apt install, enable --now,
//! endpoints, exact counts against /proc/diskstats, reload, a rejected reload, stop, reboot,
//! upgrade, purge). Every `BLKOBS-CHECK` line it prints must say ok.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::vm_kernels::cache_dir;

/// `cargo xtask machine` options.
#[derive(clap::Args)]
pub struct MachineArgs {
    /// Debian suite of the image (its kernel boots it); repeat for several, booted side by side
    /// (default: bookworm and trixie).
    #[arg(long = "suite", value_name = "SUITE")]
    pub suites: Vec<String>,
    /// Build the image again even if a cached one exists.
    #[arg(long)]
    pub rebuild_image: bool,
    /// Give up on a guest after this many seconds.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
}

/// The suites `cargo xtask test` and `cargo xtask machine` boot by default: Debian 12 (systemd
/// 252, Linux 6.1) and Debian 13 (systemd 257, Linux 6.12).
pub const SUITES: &[&str] = &["bookworm", "trixie"];

impl Default for MachineArgs {
    fn default() -> Self {
        MachineArgs {
            suites: SUITES.iter().map(|s| s.to_string()).collect(),
            rebuild_image: false,
            timeout: 900,
        }
    }
}

/// The image's packages, beyond mmdebstrap's `apt` variant (Essential + apt).
const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "udev",
    "dbus",
    "linux-image-cloud-amd64",
    "initramfs-tools",
    "kmod",
    "procps",
    "iproute2",
    "e2fsprogs",
    "xfsprogs",
    "fio",
    "fsmark",
    "prometheus",
    "curl",
    "ca-certificates",
    "bpftool",
    "jq",
    "dmsetup",
];

/// Runs on the host with the image root as `$1` (mmdebstrap's customize hook).
const CUSTOMIZE: &str = r#"set -e
R=$1
echo blkobs-machine > "$R/etc/hostname"
echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$R/etc/fstab"
chroot "$R" passwd -d root
cat > "$R/etc/systemd/system/blkobs-payload.service" <<'EOF'
[Unit]
Description=blkobs machine payload (cargo xtask machine)
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mkdir -p /run/blkobs-payload && mount -o ro LABEL=blkobs-pay /run/blkobs-payload && exec /bin/sh /run/blkobs-payload/payload.sh'
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
EOF
chroot "$R" systemctl enable blkobs-payload.service
chroot "$R" systemctl mask serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer \
  e2scrub_all.timer fstrim.timer man-db.timer
chroot "$R" systemctl disable prometheus.service
"#;

/// A stable cache key of what the image is made of (FNV-1a of the inputs).
fn image_key(suite: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in suite
        .bytes()
        .chain(PACKAGES.join(",").bytes())
        .chain(CUSTOMIZE.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{suite}-{h:016x}")
}

/// The cached image: `root.img` (raw ext4), `vmlinuz`, `initrd.img`.
struct Image {
    dir: PathBuf,
}

/// Builds the images of `suites` that are not cached yet, one after the other; errors are left
/// for [`run_suite`] to report. `cargo xtask test` calls it while the kernel matrix starts, so
/// the machines find their images ready (mostly downloads: 2–6 min each).
pub fn prefetch_images(suites: &[String]) {
    for suite in suites {
        if let Err(e) = image(suite, false) {
            eprintln!("[machine {suite}] image not built ahead: {e:#}");
        }
    }
}

fn image(suite: &str, rebuild: bool) -> Result<Image> {
    // One build at a time (the prefetch and a machine that wants its image wait for each other).
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache_dir().join("machine").join(image_key(suite));
    let done = dir.join("done");
    if done.exists() && !rebuild {
        eprintln!("[machine {suite}] cached image {}", dir.display());
        return Ok(Image { dir });
    }
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let root = dir.join("root");
    let hook = dir.join("customize.sh");
    fs::write(&hook, CUSTOMIZE)?;
    eprintln!("[machine {suite}] building the image with mmdebstrap (2–6 min)");
    crate::run(
        Command::new("mmdebstrap")
            .args(["--variant=apt", "--quiet"])
            .arg(format!("--include={}", PACKAGES.join(",")))
            .arg(format!("--customize-hook=sh {} \"$1\"", hook.display()))
            .arg(suite)
            .arg(&root)
            .arg(&crate::apt_mirror::host()?.debian),
    )
    .context("mmdebstrap failed: it downloads from this machine's own apt mirror (/etc/apt/sources.list*; override with BLKOBS_APT_MIRROR); check that it is reachable")?;
    let boot = root.join("boot");
    for (prefix, name) in [("vmlinuz-", "vmlinuz"), ("initrd.img-", "initrd.img")] {
        let f = fs::read_dir(&boot)?
            .filter_map(|e| e.ok())
            .find(|e| e.file_name().to_string_lossy().starts_with(prefix))
            .with_context(|| format!("no {prefix}* in the image's /boot"))?;
        fs::copy(f.path(), dir.join(name))?;
    }
    mkfs_ext4("root", &root, &dir.join("root.img"), "4G")?;
    fs::remove_dir_all(&root)?;
    fs::write(&done, "")?;
    Ok(Image { dir })
}

/// An ext4 image file of `size` holding the tree `dir`, labelled `label`.
fn mkfs_ext4(label: &str, dir: &Path, img: &Path, size: &str) -> Result<()> {
    crate::run(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-L", label, "-d"])
            .arg(dir)
            .arg(img)
            .arg(size),
    )
}

/// The two packages (revision 1 and 2 of the same build), in `out`.
fn debs(root: &Path, out: &Path) -> Result<()> {
    // One suite at a time: cargo-deb stages under target/debian.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    for rev in ["1", "2"] {
        crate::deb(root, rev, Some(&out.join(format!("observer_v{rev}.deb"))))?;
    }
    Ok(())
}

/// Every query of the shipped dashboards, one per line: `file<TAB>panel title<TAB>legend<TAB>expr`
/// (Grafana variables left in: the guest substitutes them).
fn dashboard_queries(root: &Path) -> Result<String> {
    fn walk(panel: &serde_json::Value, file: &str, out: &mut String) {
        let flat = |v: &serde_json::Value| v.as_str().unwrap_or("").replace(['\t', '\n'], " ");
        for t in panel["targets"].as_array().into_iter().flatten() {
            if t["expr"].is_string() {
                out.push_str(&format!(
                    "{file}\t{}\t{}\t{}\n",
                    flat(&panel["title"]),
                    flat(&t["legendFormat"]),
                    flat(&t["expr"])
                ));
            }
        }
        for p in panel["panels"].as_array().into_iter().flatten() {
            walk(p, file, out);
        }
    }
    let mut out = String::new();
    let mut files: Vec<PathBuf> = fs::read_dir(root.join("dashboards"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let json: serde_json::Value = serde_json::from_slice(&fs::read(&f)?)
            .with_context(|| format!("parsing {}", f.display()))?;
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        walk(&json, &name, &mut out);
    }
    Ok(out)
}

/// Every suite of `args`, side by side (two TCG guests share this machine's cores well: see
/// `vm::VmArgs::jobs`); fails if any fails.
pub fn run(root: &Path, mut args: MachineArgs) -> Result<()> {
    if args.suites.is_empty() {
        args = MachineArgs {
            suites: MachineArgs::default().suites,
            ..args
        };
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = args
            .suites
            .iter()
            .map(|suite| s.spawn(|| run_suite(root, suite, &args)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| bail!("the machine thread panicked"))
            })
            .collect()
    });
    let failed: Vec<String> = results
        .into_iter()
        .zip(&args.suites)
        .filter_map(|(r, s)| r.err().map(|e| format!("{s}: {e:#}")))
        .collect();
    if !failed.is_empty() {
        bail!("the Debian machine failed:\n{}", failed.join("\n"));
    }
    Ok(())
}

/// Builds (or reuses) `suite`'s image, builds the packages, boots the machine and checks every
/// `BLKOBS-CHECK` line. Needs root (mkfs, qemu) and network access to this machine's apt mirror for the
/// first image. Work files: target/machine/<suite>/.
/// Every path of the daemon's one endpoint table (observer/src/http/endpoints.rs, `path: "..."`),
/// one per line: the machine checks that each answers under the real unit.
fn endpoint_paths(root: &Path) -> Result<String> {
    let table = root.join("observer/src/http/endpoints.rs");
    let text =
        fs::read_to_string(&table).with_context(|| format!("reading {}", table.display()))?;
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path: \"")?.strip_suffix("\","))
        .collect();
    if paths.len() < 2 {
        bail!(
            "no endpoint table in {}: `path: \"...\",` lines expected",
            table.display()
        );
    }
    Ok(paths.join("\n") + "\n")
}

/// The version of the qemu that emulates the machines' disks (`qemu-system-x86_64 --version`:
/// "QEMU emulator version 7.2.22 (Debian ...)" → "7.2.22").
fn qemu_version() -> Result<String> {
    let out = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .context("running qemu-system-x86_64 --version (bash scripts/provision.sh)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .map(str::to_string)
        .with_context(|| format!("no version in qemu-system-x86_64 --version: {text:?}"))
}

pub fn run_suite(root: &Path, suite: &str, args: &MachineArgs) -> Result<()> {
    let img = image(suite, args.rebuild_image)?;
    let work = root.join("target/machine").join(suite);
    let _ = fs::remove_dir_all(&work);
    let pay = work.join("payload");
    fs::create_dir_all(&pay)?;
    debs(root, &pay)?;
    fs::copy(
        root.join("xtask/src/machine_payload.sh"),
        pay.join("payload.sh"),
    )?;
    fs::write(pay.join("queries.tsv"), dashboard_queries(root)?)?;
    // The NVMe disk's firmware revision as the emulator sets it (hw/nvme/ctrl.c: the
    // controller's FR is QEMU_VERSION): the payload's witness where udev has none (bookworm).
    fs::write(pay.join("qemu_version"), qemu_version()?)?;
    fs::write(pay.join("endpoints"), endpoint_paths(root)?)?;
    mkfs_ext4("blkobs-pay", &pay, &work.join("payload.img"), "256M")?;
    crate::run(
        Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "raw", "-b"])
            .arg(img.dir.join("root.img"))
            .arg(work.join("overlay.qcow2")),
    )?;
    for (name, size) in [("vdc.img", 2u64 << 30), ("nvme.img", 1 << 30)] {
        fs::File::create(work.join(name))?.set_len(size)?;
    }
    let p = |n: &str| work.join(n).display().to_string();
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-m", "3072", "-smp", "2", "-nic", "none"])
        .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
        .arg("-kernel")
        .arg(img.dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(img.dir.join("initrd.img"))
        .args(["-append", "root=/dev/vda rw console=ttyS0 quiet"])
        .args(["-device", "nvme,serial=blkobs0,drive=nv"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    // vda: the root overlay, vdb: the payload (read-only), vdc: virtio-blk, nv: the NVMe disk.
    for (file, opts) in [
        ("overlay.qcow2", "if=virtio,format=qcow2"),
        ("payload.img", "if=virtio,format=raw,readonly=on"),
        ("vdc.img", "if=virtio,format=raw"),
        ("nvme.img", "if=none,id=nv,format=raw"),
    ] {
        cmd.args(["-drive", &format!("file={},{opts}", p(file))]);
    }
    eprintln!("+ {cmd:?}");
    let mut child = cmd
        .spawn()
        .context("starting qemu-system-x86_64 (bash scripts/provision.sh)")?;
    let stdout = child.stdout.take().expect("piped");
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_secs(1));
            if fs::metadata(format!("/proc/{pid}")).is_err() {
                return false;
            }
        }
        let _ = Command::new("kill").arg(pid.to_string()).status();
        true
    });
    let mut log = fs::File::create(work.join("console.log"))?;
    let (mut oks, mut fails, mut done) = (Vec::new(), Vec::new(), false);
    let started = Instant::now();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        let line = line.trim_end_matches('\r');
        writeln!(log, "{line}")?;
        eprintln!(
            "[machine {suite} {:>4}s] {line}",
            started.elapsed().as_secs()
        );
        if let Some(name) = line.strip_prefix("BLKOBS-CHECK ok ") {
            oks.push(name.to_string());
        } else if let Some(name) = line.strip_prefix("BLKOBS-CHECK FAIL ") {
            fails.push(name.to_string());
        } else if line.starts_with("BLKOBS-MACHINE-DONE") {
            done = true;
        }
    }
    child.wait()?;
    let timed_out = watchdog.join().unwrap_or(false);
    eprintln!(
        "[machine {suite}] {} checks ok, {} failed, in {} s; console: {}",
        oks.len(),
        fails.len(),
        started.elapsed().as_secs(),
        work.join("console.log").display()
    );
    if timed_out {
        bail!(
            "the {suite} machine did not finish within {} s",
            args.timeout
        );
    }
    if !fails.is_empty() {
        bail!("{suite}: {}", fails.join("; "));
    }
    if !done || oks.is_empty() {
        bail!("the {suite} machine's payload did not finish (see its console above)");
    }
    Ok(())
}
