//! `cargo xtask vmtest`: run a payload (default: the `matrix` integration test) inside Debian's
//! 5.10, 6.1 and 6.12 cloud kernels, one after the other, in qemu (TCG: KVM guests hang on these
//! machines). The guest's root is this host's root filesystem, shared read-only over virtiofs (the
//! cloud kernels have no 9p), and the workspace is shared read-write at the same path, so host
//! tools and cargo-built binaries run unchanged. Console: stderr and target/vm/<label>/console.log.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::vm_kernels::{self, Kernel, LABELS};

#[derive(clap::Args, Default)]
pub struct VmArgs {
    /// Kernel to boot: 5.10, 6.1 or 6.12; repeat for several (default: all three, in that order).
    #[arg(long = "kernel", value_name = "LABEL")]
    pub kernels: Vec<String>,
    /// Kill a guest that has not powered off after this many minutes (per kernel).
    #[arg(long, default_value_t = 12)]
    pub timeout_min: u64,
    /// Command to run in the guest, from the workspace directory (default: the matrix test).
    #[arg(last = true)]
    pub cmd: Vec<String>,
}

struct Outcome {
    label: String,
    kver: String,
    boot: Option<Duration>,
    total: Duration,
    error: Option<String>,
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
        let o = boot(
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

/// Builds `observer/tests/matrix.rs` (and the daemon it runs, via CARGO_BIN_EXE_observer) on the
/// host and returns the command that runs it.
fn build_matrix_test(root: &Path) -> Result<Vec<String>> {
    let mut c = crate::cargo();
    c.args([
        "test",
        "--no-run",
        "-p",
        "observer",
        "--test",
        "matrix",
        "--message-format=json-render-diagnostics",
    ]);
    c.stdout(Stdio::piped());
    eprintln!("+ {c:?}");
    let out = c.output().context("starting cargo")?;
    if !out.status.success() {
        bail!("building the matrix test (observer/tests/matrix.rs) failed: {}; fix the build, or pass a command after `--`", out.status);
    }
    let mut exe = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["reason"] == "compiler-artifact" && v["target"]["name"] == "matrix" {
            if let Some(e) = v["executable"].as_str() {
                exe = Some(e.to_string());
            }
        }
    }
    let exe = exe.context("cargo did not report the matrix test executable")?;
    let rel = Path::new(&exe)
        .strip_prefix(root)
        .map(|p| p.display().to_string())
        .unwrap_or(exe);
    Ok(vec![rel, "--test-threads=1".into(), "--nocapture".into()])
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn shell_words(cmd: &[String]) -> String {
    cmd.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

fn virtiofsd() -> Result<PathBuf> {
    [
        "/usr/lib/qemu/virtiofsd",
        "/usr/libexec/virtiofsd",
        "/usr/bin/virtiofsd",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .context("no virtiofsd: install qemu-system-x86 (bash scripts/provision.sh)")
}

/// Starts virtiofsd for `dir`; read-only through a private read-only bind mount of its own (in a
/// mount namespace of its own, invisible to the host).
fn spawn_virtiofsd(dir: &Path, sock: &Path, ro_mnt: Option<&Path>, log: &Path) -> Result<Child> {
    let d = virtiofsd()?;
    let rust = !d.starts_with("/usr/lib/qemu");
    let _ = fs::remove_file(sock);
    let mut script = String::from("set -e; ");
    // The read-only host root does not change under the guest: let the guest cache it fully.
    let cache = if ro_mnt.is_some() { "always" } else { "auto" };
    let src = match ro_mnt {
        Some(m) => {
            fs::create_dir_all(m)?;
            script += &format!(
                "mount --bind {0} {1}; mount -o remount,bind,ro {1}; ",
                quote(&dir.display().to_string()),
                quote(&m.display().to_string())
            );
            m
        }
        None => dir,
    };
    let (src, sock) = (
        quote(&src.display().to_string()),
        quote(&sock.display().to_string()),
    );
    script += &if rust {
        format!(
            "exec {} --socket-path={sock} --shared-dir={src} --cache={cache} --sandbox=namespace",
            d.display()
        )
    } else {
        format!(
            "exec {} --socket-path={sock} -o source={src} -o cache={cache} -o sandbox=namespace",
            d.display()
        )
    };
    let logf = fs::File::create(log)?;
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(logf.try_clone()?)
        .stderr(logf)
        .spawn()
        .context("starting virtiofsd under unshare")
}

#[derive(Default)]
struct Console {
    payload_at: Option<Instant>,
    rc: Option<i32>,
    fail: Option<String>,
    tail: Vec<String>,
}

fn boot(root: &Path, k: &Kernel, cmd: &[String], timeout: Duration) -> Result<Outcome> {
    let label = &k.label;
    let dir = root.join("target/vm").join(label);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let rel = |p: &Path| p.strip_prefix(root).unwrap().display().to_string();
    let payload = dir.join("payload.sh");
    fs::write(&payload, format!("exec {}\n", shell_words(cmd)))?;
    let rcfile = dir.join("rc");
    let ci = std::env::var("CI").unwrap_or_default();
    let conf = format!(
        "LABEL={}\nKVER={}\nMODROOT={}\nWORKSPACE={}\nPAYLOAD={}\nRCFILE={}\nCI_VALUE={}\n",
        quote(label),
        quote(&k.kver),
        quote(&k.root.display().to_string()),
        quote(&root.display().to_string()),
        quote(&rel(&payload)),
        quote(&rel(&rcfile)),
        quote(&ci)
    );
    let initrd = vm_kernels::initramfs(k, &dir, &conf)?;

    // Sockets and the read-only bind mount point live outside the shared trees.
    let run = PathBuf::from(format!("/run/blkobs-vm-{}", std::process::id()));
    fs::create_dir_all(&run)?;
    let root_sock = run.join("hostroot.sock");
    let ws_sock = run.join("workspace.sock");
    let mut fsds = vec![
        spawn_virtiofsd(
            Path::new("/"),
            &root_sock,
            Some(&run.join("ro")),
            &dir.join("virtiofsd-hostroot.log"),
        )?,
        spawn_virtiofsd(root, &ws_sock, None, &dir.join("virtiofsd-workspace.log"))?,
    ];
    let t0 = Instant::now();
    while !(root_sock.exists() && ws_sock.exists()) {
        if t0.elapsed() > Duration::from_secs(10) {
            for f in &mut fsds {
                let _ = f.kill();
            }
            bail!(
                "virtiofsd did not create its sockets in 10 s: see {}/virtiofsd-*.log",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    let mem = "3072M";
    let mut q = Command::new("qemu-system-x86_64");
    q.args([
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        mem,
        "-nographic",
        "-nodefaults",
        "-no-user-config",
    ])
    .args(["-serial", "stdio", "-no-reboot", "-bios", "qboot.rom"])
    .args([
        "-object",
        &format!("memory-backend-memfd,id=mem,size={mem},share=on"),
        "-numa",
        "node,memdev=mem",
    ])
    .args([
        "-chardev",
        &format!("socket,id=fs0,path={}", root_sock.display()),
    ])
    .args([
        "-device",
        "vhost-user-fs-pci,queue-size=1024,chardev=fs0,tag=hostroot",
    ])
    .args([
        "-chardev",
        &format!("socket,id=fs1,path={}", ws_sock.display()),
    ])
    .args([
        "-device",
        "vhost-user-fs-pci,queue-size=1024,chardev=fs1,tag=workspace",
    ])
    .arg("-kernel")
    .arg(&k.vmlinuz)
    .arg("-initrd")
    .arg(&initrd)
    .args([
        "-append",
        "console=ttyS0 panic=-1 loglevel=4 mitigations=off",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    eprintln!("[vm] {label}: booting {} ({})", k.vmlinuz.display(), k.kver);
    let start = Instant::now();
    let mut qemu = match q.spawn() {
        Ok(c) => c,
        Err(e) => {
            for f in &mut fsds {
                let _ = f.kill();
                let _ = f.wait();
            }
            return Err(e).context(
                "starting qemu-system-x86_64: install qemu-system-x86 (bash scripts/provision.sh)",
            );
        }
    };
    let state = Arc::new(Mutex::new(Console::default()));
    let reader = {
        let (state, label) = (state.clone(), label.clone());
        let stdout = qemu.stdout.take().unwrap();
        let mut log = fs::File::create(dir.join("console.log"))?;
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            let mut buf = Vec::new();
            while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
                let line = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\r', '\n'])
                    .to_string();
                buf.clear();
                let _ = writeln!(log, "{line}");
                eprintln!("[{label}] {line}");
                let mut s = state.lock().unwrap();
                if line.contains("BLKOBS-VM-PAYLOAD-START") && s.payload_at.is_none() {
                    s.payload_at = Some(Instant::now());
                } else if let Some(rc) = line.split("BLKOBS-VM-RC=").nth(1) {
                    s.rc = rc.trim().parse().ok();
                } else if let Some(f) = line.split("BLKOBS-VM-FAIL: ").nth(1) {
                    s.fail = Some(f.to_string());
                }
                s.tail.push(line);
                if s.tail.len() > 40 {
                    s.tail.remove(0);
                }
            }
        })
    };
    let mut timed_out = false;
    let status = loop {
        if let Some(st) = qemu.try_wait()? {
            break st;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = qemu.kill();
            break qemu.wait()?;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let total = start.elapsed();
    let _ = reader.join();
    // virtiofsd exits when qemu disconnects; SIGTERM (lets it reap its sandbox child) if not.
    let t = Instant::now();
    for mut f in fsds {
        while f.try_wait().ok().flatten().is_none() && t.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(50));
        }
        if f.try_wait().ok().flatten().is_none() {
            unsafe { libc::kill(f.id() as i32, libc::SIGTERM) };
            std::thread::sleep(Duration::from_millis(300));
            let _ = f.kill();
        }
        let _ = f.wait();
    }
    let _ = fs::remove_dir_all(&run);

    let s = state.lock().unwrap();
    let rc = s.rc.or_else(|| {
        fs::read_to_string(&rcfile)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    });
    let boot = s.payload_at.map(|t| t - start);
    let tail = s
        .tail
        .iter()
        .rev()
        .take(25)
        .rev()
        .cloned()
        .collect::<Vec<_>>()
        .join("\n  ");
    let log = dir.join("console.log").display().to_string();
    let error = if timed_out {
        Some(format!(
            "timed out after {} min ({}); raise --timeout-min or look at {log}. Last console lines:\n  {tail}",
            timeout.as_secs() / 60,
            if boot.is_some() { "payload was running" } else { "the guest never reached the payload" }
        ))
    } else if boot.is_none() {
        Some(format!(
            "the guest never reached the payload ({}; qemu {status}); see {log}. Last console lines:\n  {tail}",
            s.fail.as_deref().unwrap_or("no BLKOBS-VM-PAYLOAD-START on the console")
        ))
    } else {
        match rc {
            Some(0) => None,
            Some(rc) => Some(format!("payload exited with status {rc}; see {log}. Last console lines:\n  {tail}")),
            None => Some(format!("the guest died while the payload ran (qemu {status}); see {log}. Last console lines:\n  {tail}")),
        }
    };
    if let Some(b) = boot {
        eprintln!(
            "[vm] {label}: boot to payload {:.1}s, total {:.1}s, payload rc {rc:?}",
            b.as_secs_f64(),
            total.as_secs_f64()
        );
    }
    Ok(Outcome {
        label: label.clone(),
        kver: k.kver.clone(),
        boot,
        total,
        error,
    })
}
