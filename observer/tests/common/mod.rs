//! Shared fixtures for the real-kernel tests: the daemon, loop devices, mounts, witnesses.
//! Every fixture cleans up in `Drop`, so a failing assertion leaves nothing behind.
#![allow(dead_code)]

pub mod fslog_witness;
pub mod slowfs;

use std::{
    collections::BTreeMap,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

/// True when running under CI: `CI` set to anything but empty, `0`, `false`, `no` or `off`.
/// There a test that cannot run fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no" | "off"))
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
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
            let test = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(f, "{} {test}: {why}", env!("CARGO_CRATE_NAME"));
        }
    }
    false
}

/// Returns false (after saying why) if the test cannot run here; panics instead under CI.
pub fn require_root(test: &str) -> bool {
    let root = unsafe { libc::geteuid() } == 0;
    let btf = Path::new("/sys/kernel/btf/vmlinux").exists();
    let tools = ["losetup", "mkfs.xfs", "fio", "mount"].iter().all(|t| which(t));
    if root && btf && tools {
        return true;
    }
    skip(&format!("{test}: needs root, /sys/kernel/btf/vmlinux and losetup/mkfs.xfs/fio (root={root} btf={btf} tools={tools}); run `cargo xtask test` as root"))
}

pub fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
        || Path::new("/usr/sbin").join(tool).is_file()
        || Path::new("/sbin").join(tool).is_file()
}

/// Runs a command, panicking with its output on failure; returns stdout.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The observer daemon on a free loopback port.
pub struct Daemon {
    child: Child,
    pub addr: String,
}

impl Daemon {
    pub fn start(extra: &[&str]) -> Daemon {
        Self::start_env(extra, &[])
    }

    /// Starts with extra environment variables (e.g. OBSERVER_ATTACH=raw_tp).
    pub fn start_env(extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_observer"))
            .args(["--listen", &addr])
            .args(extra)
            .env("OBSERVER_LOG", "error")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting observer");
        let mut d = Daemon { child, addr };
        // Under TCG (the kernel matrix) loading and verifying the programs takes ~10x longer.
        let limit = if std::env::var_os("BLKOBS_VM").is_some() { 120 } else { 30 };
        let deadline = Instant::now() + Duration::from_secs(limit);
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!("observer exited early: {status}");
            }
            if d.get("/healthz").map(|(s, _)| s == 200).unwrap_or(false) {
                return d;
            }
            assert!(Instant::now() < deadline, "observer did not become healthy in {limit} s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GET a path; (status, body).
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        match ureq::get(&format!("http://{}{}", self.addr, path)).timeout(Duration::from_secs(10)).call() {
            Ok(r) => Ok((r.status(), r.into_string().map_err(|e| e.to_string())?)),
            Err(ureq::Error::Status(code, r)) => Ok((code, r.into_string().unwrap_or_default())),
            Err(e) => Err(e.to_string()),
        }
    }

    pub fn metrics_text(&self) -> String {
        let (status, body) = self.get("/metrics").expect("scrape");
        assert_eq!(status, 200);
        body
    }

    pub fn scrape(&self) -> Metrics {
        Metrics::parse(&self.metrics_text())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One sample: name, labels, value.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape, flattened to samples (histograms as _bucket/_sum/_count).
pub struct Metrics(pub Vec<Sample>);

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parse exposition");
        let mut out = Vec::new();
        for s in scrape.samples {
            let labels: BTreeMap<String, String> = s.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => {
                    out.push(Sample { name: s.metric, labels, value: v })
                }
                prometheus_parse::Value::Histogram(buckets) => {
                    for b in buckets {
                        let mut l = labels.clone();
                        l.insert("le".into(), if b.less_than.is_infinite() { "+Inf".into() } else { b.less_than.to_string() });
                        out.push(Sample { name: format!("{}_bucket", s.metric), labels: l, value: b.count });
                    }
                }
                prometheus_parse::Value::Summary(_) => {}
            }
        }
        Metrics(out)
    }

    /// Sum of samples named `name` whose labels include all of `want`.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.select(name, want).map(|s| s.value).sum()
    }

    pub fn select<'a>(&'a self, name: &'a str, want: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a Sample> + 'a {
        self.0.iter().filter(move |s| {
            s.name == name && want.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A loop device over a file in /dev/shm; detached and deleted on drop.
pub struct LoopDev {
    pub path: String,
    pub name: String,
    file: PathBuf,
}

impl LoopDev {
    pub fn new(size_mib: u64, scheduler: &str) -> LoopDev {
        let file = PathBuf::from(format!(
            "/dev/shm/blkobs-test-{}-{}.img",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(size_mib << 20).unwrap();
        drop(f);
        let path = match Command::new("losetup").args(["-f", "--show"]).arg(&file).output() {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            other => {
                let _ = std::fs::remove_file(&file);
                panic!("losetup failed: {other:?}");
            }
        };
        let name = path.trim_start_matches("/dev/").to_string();
        let dev = LoopDev { path, name, file };
        std::fs::write(format!("/sys/block/{}/queue/scheduler", dev.name), scheduler).expect("set scheduler");
        dev
    }

    pub fn sysfs(&self, attr: &str) -> String {
        std::fs::read_to_string(format!("/sys/block/{}/{attr}", self.name)).unwrap().trim().to_string()
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.path]).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A filesystem made and mounted on a loop device; unmounted on drop.
pub struct Mount {
    pub dir: PathBuf,
    mounted: bool,
}

impl Mount {
    pub fn new(dev: &LoopDev, mkfs: &[&str]) -> Mount {
        let mut args: Vec<&str> = mkfs[1..].to_vec();
        args.push(&dev.path);
        sh(mkfs[0], &args);
        let dir = std::env::temp_dir().join(format!("blkobs-mnt-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir).unwrap();
        sh("mount", &[&dev.path, dir.to_str().unwrap()]);
        Mount { dir, mounted: true }
    }

    pub fn unmount(&mut self) {
        if self.mounted {
            sh("umount", &[self.dir.to_str().unwrap()]);
            self.mounted = false;
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The /proc/diskstats fields of a device, by name.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStats {
    pub reads: u64,
    pub reads_merged: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub writes_merged: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub discards: u64,
    pub flushes: u64,
}

pub fn diskstats(name: &str) -> DiskStats {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap();
    let line = text.lines().find(|l| l.split_whitespace().nth(2) == Some(name)).expect("device in diskstats");
    let f: Vec<u64> = line.split_whitespace().skip(3).map(|v| v.parse().unwrap()).collect();
    DiskStats {
        reads: f[0],
        reads_merged: f[1],
        read_ms: f[3],
        writes: f[4],
        writes_merged: f[5],
        write_ms: f[7],
        in_flight: f[8],
        discards: f.get(11).copied().unwrap_or(0),
        flushes: f.get(15).copied().unwrap_or(0),
    }
}

/// Waits until the device has nothing in flight (diskstats) for a moment.
pub fn quiesce(name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut quiet = 0;
    while quiet < 5 {
        assert!(Instant::now() < deadline, "{name} did not quiesce");
        if diskstats(name).in_flight == 0 {
            quiet += 1;
        } else {
            quiet = 0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `n` files of 4 KiB, each written and fsync'ed: the fs_mark-style fsync-per-file load.
pub fn fsync_files(dir: &Path, n: usize) {
    use std::io::Write;
    for i in 0..n {
        let mut f = std::fs::File::create(dir.join(format!("fsync-{i}"))).unwrap();
        f.write_all(&[0xa5u8; 4096]).unwrap();
        f.sync_all().unwrap();
    }
}

/// Runs fio with the given job options, returns its JSON output.
pub fn fio(args: &[&str]) -> serde_json::Value {
    let out = sh("fio", &[&["--output-format=json"], args].concat());
    serde_json::from_str(&out).expect("fio JSON")
}

// ---- Fixtures for the filesystem log tests (tests/fslog.rs) ----

impl LoopDev {
    /// A loop device whose backing file first gets a partition table from `sfdisk_script`
    /// (sfdisk works on the plain file), attached with `losetup -P` so the kernel creates
    /// the partition devices (`<path>p1`, ...).
    pub fn partitioned(size_mib: u64, scheduler: &str, sfdisk_script: &str) -> LoopDev {
        use std::io::Write;
        let file = PathBuf::from(format!(
            "/dev/shm/blkobs-test-{}-{}.img",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::File::create(&file).unwrap().set_len(size_mib << 20).unwrap();
        let mut sfdisk = Command::new("sfdisk").arg("-q").arg(&file).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
        sfdisk.stdin.take().unwrap().write_all(sfdisk_script.as_bytes()).unwrap();
        if !sfdisk.wait().unwrap().success() {
            let _ = std::fs::remove_file(&file);
            panic!("sfdisk failed on {}", file.display());
        }
        let path = match Command::new("losetup").args(["-f", "--show", "-P"]).arg(&file).output() {
            Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
            other => {
                let _ = std::fs::remove_file(&file);
                panic!("losetup -P failed: {other:?}");
            }
        };
        let name = path.trim_start_matches("/dev/").to_string();
        let dev = LoopDev { path, name, file };
        std::fs::write(format!("/sys/block/{}/queue/scheduler", dev.name), scheduler).expect("set scheduler");
        // The kernel's own scan (losetup -P) finds nothing on kernels built without the
        // partition table parsers; then add the partitions from userspace (BLKPG).
        let deadline = Instant::now() + Duration::from_secs(1);
        while !Path::new(&dev.part(1)).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !Path::new(&dev.part(1)).exists() {
            sh("partx", &["-a", &dev.path]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !Path::new(&dev.part(1)).exists() {
            assert!(Instant::now() < deadline, "{} did not appear", dev.part(1));
            std::thread::sleep(Duration::from_millis(50));
        }
        dev
    }

    /// Path of partition `n` (`/dev/loopXpN`).
    pub fn part(&self, n: u32) -> String {
        format!("{}p{n}", self.path)
    }

    /// The backing file (to corrupt on-disk structures behind the kernel's back in tests).
    pub fn backing_file(&self) -> &Path {
        &self.file
    }

    /// The kernel's `MKDEV(major, minor)` of this (whole) device, as tracepoints report it.
    pub fn kdev(&self) -> u32 {
        let (maj, min) = self.sysfs("dev").split_once(':').map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap())).unwrap();
        (maj << 20) | min
    }
}

impl Mount {
    /// Makes a filesystem on any block device path with `mkfs` (program and options, the
    /// device is appended) and mounts it with `-o opts` (if not empty).
    pub fn on(device: &str, mkfs: &[&str], opts: &str) -> Mount {
        let mut args: Vec<&str> = mkfs[1..].to_vec();
        args.push(device);
        sh(mkfs[0], &args);
        let dir = std::env::temp_dir().join(format!("blkobs-mnt-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = vec![device, dir.to_str().unwrap()];
        if !opts.is_empty() {
            m.extend(["-o", opts]);
        }
        sh("mount", &m);
        Mount { dir, mounted: true }
    }

    /// Mounts again after [`Mount::unmount`] (same device and options given).
    pub fn remount(&mut self, device: &str, opts: &str) {
        let mut m = vec![device, self.dir.to_str().unwrap()];
        if !opts.is_empty() {
            m.extend(["-o", opts]);
        }
        sh("mount", &m);
        self.mounted = true;
    }
}

/// One `block_io_start` event from an ftrace instance: what entered the block layer.
#[derive(Clone, Debug)]
pub struct IoStart {
    pub rwbs: String,
    pub sector: u64,
    pub sectors: u64,
    pub comm: String,
}

/// A private ftrace instance recording `block_io_start` for one disk; removed on drop.
pub struct IoTrace {
    dir: PathBuf,
}

impl IoTrace {
    pub fn start(kdev: u32) -> IoTrace {
        let dir = PathBuf::from(format!("/sys/kernel/tracing/instances/blkobs-test-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst)));
        std::fs::create_dir(&dir).expect("tracefs instance (is /sys/kernel/tracing mounted?)");
        let t = IoTrace { dir };
        std::fs::write(t.dir.join("buffer_size_kb"), "16384").unwrap();
        let ev = t.dir.join("events/block/block_io_start");
        std::fs::write(ev.join("filter"), format!("dev == {kdev}")).unwrap();
        std::fs::write(ev.join("enable"), "1").unwrap();
        t
    }

    /// Stops recording and returns the events.
    pub fn stop(&self) -> Vec<IoStart> {
        std::fs::write(self.dir.join("events/block/block_io_start/enable"), "0").unwrap();
        let text = std::fs::read_to_string(self.dir.join("trace")).unwrap();
        let counts = text
            .lines()
            .find_map(|l| l.strip_prefix("# entries-in-buffer/entries-written: "))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.split_once('/'))
            .map(|(a, b)| (a.to_string(), b.to_string()));
        if let Some((kept, written)) = counts {
            assert_eq!(kept, written, "trace buffer overflowed: the witness is incomplete");
        }
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((_, rest)) = line.split_once("block_io_start: ") else { continue };
            let t: Vec<&str> = rest.split_whitespace().collect();
            let plus = t.iter().position(|x| *x == "+").expect("trace line format");
            out.push(IoStart {
                rwbs: t[1].to_string(),
                sector: t[plus - 1].parse().unwrap(),
                sectors: t[plus + 1].parse().unwrap(),
                comm: t.last().unwrap().trim_matches(|c| c == '[' || c == ']').to_string(),
            });
        }
        out
    }
}

impl Drop for IoTrace {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("events/block/block_io_start/enable"), "0");
        let _ = std::fs::remove_dir(&self.dir);
    }
}
