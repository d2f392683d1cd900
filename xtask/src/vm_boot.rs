//! Booting one kernel for `cargo xtask vmtest`: virtiofsd for the host root (read-only) and the
//! workspace, qemu (TCG) with our initramfs, the console streamed to stderr and
//! target/vm/<label>/console.log, the payload's exit code read from its marker line; a guest
//! whose payload falls silent for [`STALL`] is killed as stalled.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::suite::Cell;
use crate::vm::{quote, shell_words, Outcome};
use crate::vm_kernels::{self, Kernel};

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

/// A guest whose payload has printed nothing for this long has stopped making progress (the
/// longest quiet test of the matrix prints within about a minute under TCG). CI once saw a 5.10
/// guest stall so: a CPU in the kernel for 584 s (an RCU stall) and a soft lockup in the
/// running test's task, and nothing after.
/// The file in target/vm/<label>/ where the guest's tests record their skips (the guest's
/// BLKOBS_SKIP_LOG), read back into [`Outcome::skipped`].
const GUEST_SKIP_LOG: &str = "skipped-tests.txt";

pub(crate) const STALL: Duration = Duration::from_secs(300);

/// Whether a console line is the kernel's (`[ 1234.567890] ...`) rather than the payload's.
fn kernel_line(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with('[')
        && t[1..]
            .split(']')
            .next()
            .is_some_and(|ts| ts.trim().parse::<f64>().is_ok())
}

#[derive(Default)]
struct Console {
    payload_at: Option<Instant>,
    /// When the payload last printed a line (not the kernel).
    payload_line_at: Option<Instant>,
    rc: Option<i32>,
    fail: Option<String>,
    tail: Vec<String>,
    /// Lines of the guest's watchdog task dump (vm_init.sh), kept for the timeout message.
    watchdog: Vec<String>,
    /// The test binary running now (`BLKOBS-VM-TEST-START`) and its output so far.
    test: Option<(String, String)>,
    results: Vec<(String, Cell)>,
}

impl Console {
    /// Follows the payload's `BLKOBS-VM-TEST-START/END` brackets (vm.rs matrix_command).
    fn test_line(&mut self, line: &str) {
        if let Some(name) = line.split("BLKOBS-VM-TEST-START ").nth(1) {
            self.test = Some((name.trim().to_string(), String::new()));
        } else if let Some(end) = line.split("BLKOBS-VM-TEST-END ").nth(1) {
            let mut words = end.split_whitespace();
            let name = words.next().unwrap_or("?").to_string();
            let num = |key: &str, w: &[&str]| {
                w.iter()
                    .find_map(|x| x.strip_prefix(key))
                    .and_then(|v| v.parse::<f64>().ok())
            };
            let w: Vec<&str> = words.collect();
            let ok = num("rc=", &w) == Some(0.0);
            let text = self.test.take().map(|(_, t)| t).unwrap_or_default();
            let failed = if ok {
                Vec::new()
            } else {
                crate::suite::failed_tests(&text)
            };
            let secs = num("secs=", &w).unwrap_or(0.0);
            self.results.push((name, Cell { ok, secs, failed }));
        } else if let Some((_, text)) = &mut self.test {
            text.push_str(line);
            text.push('\n');
        }
    }
}

/// Boots kernel `k` and runs `cmd` in it. `slot` names the guest (its target/vm/<slot>/
/// directory, images and console prefix): two guests of one kernel run side by side.
pub(crate) fn boot(
    root: &Path,
    k: &Kernel,
    slot: &str,
    cmd: &[String],
    timeout: Duration,
) -> Result<Outcome> {
    let label = &slot.to_string();
    let dir = root.join("target/vm").join(label);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let rel = |p: &Path| p.strip_prefix(root).unwrap().display().to_string();
    let payload = dir.join("payload.sh");
    fs::write(&payload, format!("exec {}\n", shell_words(cmd)))?;
    let rcfile = dir.join("rc");
    let skipfile = dir.join(GUEST_SKIP_LOG);
    let ci = std::env::var("CI").unwrap_or_default();
    let conf = format!(
        "LABEL={}\nKVER={}\nMODROOT={}\nWORKSPACE={}\nPAYLOAD={}\nRCFILE={}\nSKIPLOG={}\nCI_VALUE={}\nWATCHDOG={}\n",
        quote(&k.label),
        quote(&k.kver),
        quote(&k.root.display().to_string()),
        quote(&root.display().to_string()),
        quote(&rel(&payload)),
        quote(&rel(&rcfile)),
        quote(&rel(&skipfile)),
        quote(&ci),
        // The guest dumps its tasks (states, kernel stacks) this long after the payload
        // started, before the host's timeout kills it: a hang is then explained on the console.
        timeout.as_secs().saturating_sub(150).max(60)
    );
    let initrd = vm_kernels::initramfs(k, &dir, &conf)?;

    // Sockets and the read-only bind mount point live outside the shared trees.
    let run = PathBuf::from(format!(
        "/run/blkobs-vm-{}-{}",
        std::process::id(),
        label.replace('.', "_")
    ));
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

    let images = GuestDisks::create(label)?;
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
    .args(images.qemu_args())
    .arg("-kernel")
    .arg(&k.vmlinuz)
    .arg("-initrd")
    .arg(&initrd)
    .args([
        "-append",
        // One polled queue on each NVMe controller (io_uring --hipri completes in the
        // submitting task); the driver is built into Debian's cloud kernels.
        "console=ttyS0 panic=-1 loglevel=4 mitigations=off nvme.poll_queues=1",
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
                if !kernel_line(&line) {
                    s.payload_line_at = Some(Instant::now());
                }
                if line.contains("BLKOBS-VM-PAYLOAD-START") && s.payload_at.is_none() {
                    s.payload_at = Some(Instant::now());
                } else if let Some(rc) = line.split("BLKOBS-VM-RC=").nth(1) {
                    s.rc = rc.trim().parse().ok();
                } else if let Some(f) = line.split("BLKOBS-VM-FAIL: ").nth(1) {
                    s.fail = Some(f.to_string());
                }
                s.test_line(&line);
                if line.contains("BLKOBS-VM-WATCHDOG") && s.watchdog.len() < 400 {
                    s.watchdog.push(line.clone());
                }
                s.tail.push(line);
                if s.tail.len() > 40 {
                    s.tail.remove(0);
                }
            }
        })
    };
    let mut timed_out = false;
    let mut stalled = false;
    let status = loop {
        if let Some(st) = qemu.try_wait()? {
            break st;
        }
        if start.elapsed() > timeout {
            timed_out = true;
            let _ = qemu.kill();
            break qemu.wait()?;
        }
        let quiet = {
            let s = state.lock().unwrap();
            s.payload_at.and(s.payload_line_at).map(|t| t.elapsed())
        };
        if quiet.is_some_and(|q| q > STALL) {
            stalled = true;
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
            // SAFETY: kill(2) with our own child's pid (not yet reaped: try_wait saw it running).
            unsafe { libc::kill(f.id() as i32, libc::SIGTERM) };
            std::thread::sleep(Duration::from_millis(300));
            let _ = f.kill();
        }
        let _ = f.wait();
    }
    let _ = fs::remove_dir_all(&run);
    drop(images);

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
    let error = if stalled {
        Some(format!(
            "stalled: the payload printed nothing for {} s (the guest stopped making progress); \
             see {log}. Last console lines:\n  {tail}",
            STALL.as_secs()
        ))
    } else if timed_out {
        Some(format!(
            "timed out after {} min ({}); raise --timeout-min or look at {log}. Last console lines:\n  {tail}{}",
            timeout.as_secs() / 60,
            if boot.is_some() { "payload was running" } else { "the guest never reached the payload" },
            if s.watchdog.is_empty() {
                String::new()
            } else {
                format!("\nThe guest's task dump (vm_init.sh watchdog):\n  {}", s.watchdog.join("\n  "))
            }
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
    // The guest's skipped tests (observer/tests/support/skip.rs appends to BLKOBS_SKIP_LOG,
    // which vm_init.sh points at this file in the shared workspace).
    let skipped = fs::read_to_string(&skipfile)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("[{label}] {l}"))
        .collect();
    Ok(Outcome {
        label: k.label.clone(),
        slot: slot.to_string(),
        skipped,
        kver: k.kver.clone(),
        boot,
        total,
        error,
        stalled,
        retried: None,
        results: s.results.clone(),
    })
}

/// The real block drivers every guest gets, over sparse image files in /dev/shm (removed when
/// the guest is gone). Tests find a disk by its serial (`/sys/block/*/serial`, `device/serial`,
/// SCSI `device/vpd_pg80`; observer/tests/support/guest.rs):
///
/// | serial | qemu device | guest disk |
/// |---|---|---|
/// | `blkobs-nvme` | `nvme`, 2 I/O queues + 1 poll queue, volatile write cache, native FUA | `nvme0n1` |
/// | `blkobs-mp` | `nvme-subsys` with two `nvme` controllers sharing namespace 1 | head `nvme1n1`, hidden paths `nvme1c1n1`, `nvme1c2n1` |
/// | `blkobs-vblk` | `virtio-blk-pci` | `vda` |
/// | `blkobs-vtiny` | `virtio-blk-pci`, 16-entry virtqueue, no indirect descriptors, 1 queue (requeues) | `vdb` |
/// | `blkobs-scsi` | `virtio-scsi-pci` + `scsi-hd` | `sda` |
/// | `blkobs-leg-nvme` | `nvme`, 2 I/O queues: md raid1's first leg | `nvme3n1` |
/// | `blkobs-leg-scsi` | `scsi-hd` on the same virtio-scsi bus: md raid1's second leg | `sdb` |
///
/// Names are the usual ones, not promised: tests look the serial up.
pub(crate) struct GuestDisks {
    dir: PathBuf,
    args: Vec<String>,
}

/// (serial, size in MiB) of the image files.
const GUEST_IMAGES: [(&str, u64); 7] = [
    ("blkobs-nvme", 2048),
    ("blkobs-mp", 2048),
    ("blkobs-vblk", 2048),
    ("blkobs-vtiny", 1024),
    ("blkobs-scsi", 2048),
    ("blkobs-leg-nvme", 512),
    ("blkobs-leg-scsi", 512),
];

impl GuestDisks {
    fn create(label: &str) -> Result<GuestDisks> {
        let dir = PathBuf::from(format!(
            "/dev/shm/blkobs-vm-{}-{}",
            std::process::id(),
            label.replace('.', "_")
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut img = std::collections::HashMap::new();
        for (serial, mib) in GUEST_IMAGES {
            let p = dir.join(format!("{serial}.img"));
            let f = fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
            f.set_len(mib << 20)?;
            img.insert(serial, p.display().to_string());
        }
        let drive = |id: &str, serial: &str| {
            format!(
                "file={},if=none,id={id},format=raw,cache=unsafe,aio=threads",
                img[serial]
            )
        };
        let mut args = Vec::new();
        let mut push = |a: &str, b: String| {
            args.push(a.to_string());
            args.push(b);
        };
        push("-drive", drive("nvm0", "blkobs-nvme"));
        push(
            "-device",
            "nvme,serial=blkobs-nvme,drive=nvm0,max_ioqpairs=4".into(),
        );
        push("-device", "nvme-subsys,id=mpsub,nqn=blkobs-mp".into());
        push(
            "-device",
            "nvme,serial=blkobs-mp,subsys=mpsub,id=mpc0".into(),
        );
        push(
            "-device",
            "nvme,serial=blkobs-mp,subsys=mpsub,id=mpc1".into(),
        );
        push("-drive", drive("mp0", "blkobs-mp"));
        push(
            "-device",
            "nvme-ns,drive=mp0,nsid=1,shared=on,bus=mpc0".into(),
        );
        push("-drive", drive("vb0", "blkobs-vblk"));
        push(
            "-device",
            "virtio-blk-pci,drive=vb0,serial=blkobs-vblk".into(),
        );
        push("-drive", drive("vt0", "blkobs-vtiny"));
        push(
            "-device",
            "virtio-blk-pci,drive=vt0,serial=blkobs-vtiny,queue-size=16,indirect_desc=off,num-queues=1".into(),
        );
        push("-device", "virtio-scsi-pci,id=scsi0".into());
        push("-drive", drive("sc0", "blkobs-scsi"));
        push(
            "-device",
            "scsi-hd,drive=sc0,bus=scsi0.0,serial=blkobs-scsi".into(),
        );
        // The mirror legs of md raid1 on real drivers (observer/tests/md_stacks.rs).
        push("-drive", drive("lg0", "blkobs-leg-nvme"));
        push(
            "-device",
            "nvme,serial=blkobs-leg-nvme,drive=lg0,max_ioqpairs=2".into(),
        );
        push("-drive", drive("lg1", "blkobs-leg-scsi"));
        push(
            "-device",
            "scsi-hd,drive=lg1,bus=scsi0.0,serial=blkobs-leg-scsi".into(),
        );
        Ok(GuestDisks { dir, args })
    }

    fn qemu_args(&self) -> &[String] {
        &self.args
    }
}

impl Drop for GuestDisks {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_line;

    #[test]
    fn kernel_lines_are_told_from_the_payloads() {
        assert!(kernel_line(
            "[ 1048.698632] watchdog: BUG: soft lockup - CPU#1 stuck for 22s!"
        ));
        assert!(kernel_line(
            "[    0.000000] Linux version 5.10.0-43-cloud-amd64"
        ));
        assert!(!kernel_line("test md_raid1_xfs ... ok"));
        assert!(!kernel_line(
            "[6.12.118+deb13-cloud-amd64 raid1 md124] loop0: log writes 65"
        ));
        assert!(!kernel_line("[vm] 5.10: booting"));
        assert!(!kernel_line(""));
    }
}
