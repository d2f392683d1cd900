//! Everything the bench changes on the machine is undone by a Drop guard here, also on errors,
//! panics and Ctrl-C/SIGTERM: /dev/shm files, loop devices, kernel.bpf_stats_enabled, child
//! processes. [`remove_stale`] removes what a SIGKILLed earlier run left.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};

// Signals: Ctrl-C / SIGTERM set a flag; fio (same process group) stops too; we then unwind
// through the guards.

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

pub fn install_signal_handlers() {
    // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores to an atomic, which is
    // async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

pub fn check_stop() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// Sleeps, waking early on Ctrl-C.
pub fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_stop()?;
        thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    check_stop()
}

// Guards.

/// A file or directory under /dev/shm, removed on drop.
pub struct ShmDir(pub PathBuf);

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loop device, detached on drop.
pub struct LoopDev {
    pub dev: String,
}

impl LoopDev {
    pub fn create(file: &Path, size_mib: u64, scheduler: &str) -> Result<Self> {
        let f =
            std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
        f.set_len(size_mib << 20)?;
        drop(f);
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .context("running losetup")?;
        ensure!(
            out.status.success(),
            "losetup --find --show {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = String::from_utf8(out.stdout)?.trim().to_string();
        ensure!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        let me = Self { dev };
        let sched = format!("/sys/block/{}/queue/scheduler", me.name());
        std::fs::write(&sched, scheduler)
            .with_context(|| format!("setting {sched} to {scheduler}"))?;
        Ok(me)
    }

    pub fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// `kernel.bpf_stats_enabled`, restored on drop.
pub struct BpfStats {
    pub old: String,
}

pub const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub fn enable() -> Result<Self> {
        let old = std::fs::read_to_string(BPF_STATS)
            .context("reading kernel.bpf_stats_enabled")?
            .trim()
            .to_string();
        std::fs::write(BPF_STATS, "1").context("setting kernel.bpf_stats_enabled=1")?;
        Ok(Self { old })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, &self.old) {
            eprintln!(
                "[bench] WARNING: could not restore kernel.bpf_stats_enabled={}: {e}",
                self.old
            );
        }
    }
}

/// A child process, stopped (signal, then SIGKILL after 5 s) and reaped on drop.
pub struct Proc {
    pub child: Child,
    pub what: &'static str,
    pub stop_signal: libc::c_int,
}

impl Proc {
    pub fn spawn(what: &'static str, cmd: &mut Command, stop_signal: libc::c_int) -> Result<Self> {
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {what}: {cmd:?}"))?;
        Ok(Self {
            child,
            what,
            stop_signal,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn ensure_running(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited early: {st}", self.what);
        }
        Ok(())
    }

    pub fn stop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: kill(2) with our own child's pid (not yet reaped: try_wait saw it running).
        unsafe { libc::kill(self.child.id() as i32, self.stop_signal) };
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!("[bench] {} did not stop in 5 s: killing it", self.what);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Removes what a SIGKILLed earlier run left: /dev/shm/blkobs-bench-PID of dead PIDs and the loop
/// devices over their files.
pub fn remove_stale() {
    let Ok(rd) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("blkobs-bench-") else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        for f in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
            if let Ok(out) = Command::new("losetup").arg("-j").arg(f.path()).output() {
                for line in String::from_utf8_lossy(&out.stdout).lines() {
                    if let Some(dev) = line.split(':').next() {
                        eprintln!("[bench] removing stale {dev} from an earlier run");
                        let _ = Command::new("losetup").args(["-d", dev]).status();
                    }
                }
            }
        }
        let _ = std::fs::remove_dir_all(e.path());
    }
}
