//! `cargo xtask bench`: what tracing costs a fast block device (issue #6, BENCHMARKS.md).
//!
//! Sets up a loop device over a file in /dev/shm (and optionally a device the user names), then
//! runs fio (4k random read and random write, io_uring, queue depth 32) under each configuration,
//! in an order that rotates every round so that noise from other work on the machine hits all
//! configurations alike:
//!
//! - `untraced`: nothing attached;
//! - `floor`: empty tp_btf programs on exactly the observer's tracepoints (`observer-floor`);
//! - `biolatency`: libbpf-tools `biolatency -Q -D -F` (installed from Debian if absent);
//! - `observer`: the daemon with its default configuration, scraped every 5 s.
//!
//! IOPS rounds run with `kernel.bpf_stats_enabled` as found (normally 0: the stats cost two clock
//! reads per program run). A separate pass per configuration then enables the sysctl and reads
//! run_time_ns / run_cnt deltas per program from `bpftool prog show -j`; ns per request is
//! Σ run_time_ns / requests completed on all disks (/sys/block/*/stat) in the same interval.
//! A last phase starts the observer with 32 (smoke: 2) more loop devices busy and times scrapes.
//!
//! Everything created (loop devices, files, daemons, tracers, the sysctl) is undone by Drop
//! guards, also on errors, panics and Ctrl-C/SIGTERM. Only SIGKILL leaves debris; the next run
//! removes it (see [`remove_stale`]).

use std::{
    collections::{BTreeMap, HashMap},
    fmt::Write as _,
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

/// `cargo xtask bench` options.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Rounds; every configuration runs every workload once per round.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// Seconds per fio run (after a 1 s ramp).
    #[arg(long, default_value_t = 10)]
    pub runtime: u32,
    /// Loop devices busy while scrape time is measured.
    #[arg(long, default_value_t = 32)]
    pub scrape_devices: u32,
    /// Also bench this block device (e.g. /dev/nvme0n1): random reads only unless --allow-writes.
    /// Refused when it or a partition of it is mounted, used as swap or held by another device.
    #[arg(long, value_name = "DEV")]
    pub device: Option<PathBuf>,
    /// Allow the random-write workload on --device: DESTROYS ITS DATA.
    #[arg(long, requires = "device")]
    pub allow_writes: bool,
    /// Only these configurations (comma separated): untraced,floor,biolatency,observer.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Short CI version: 1 round, 2 s runs, 2 scrape devices. Exercises everything, proves nothing.
    #[arg(long)]
    pub smoke: bool,
    /// Also measure the building blocks of the observer's programs (probe reads vs direct loads,
    /// hash insert/lookup/delete, per-CPU lookup, histograms) with `observer-floor --costs`.
    #[arg(long)]
    pub costs: bool,
    /// I/O scheduler for the loop devices. A reused loop device keeps whatever an earlier user
    /// set, so it is always set; mq-deadline is the kernel's default for loop devices (and what the
    /// issue's biolatency numbers were taken with: its insert program runs once per request).
    #[arg(long, default_value = "mq-deadline")]
    pub scheduler: String,
    /// Skip `cargo build --release -p observer` (use the binaries in target/release).
    #[arg(long)]
    pub no_build: bool,
}

// ------------------------------------------------------------------------------------------
// Signals: Ctrl-C / SIGTERM set a flag; fio (same process group) stops too; we then unwind
// through the guards.

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

fn install_signal_handlers() {
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

fn check_stop() -> Result<()> {
    if STOP.load(Ordering::SeqCst) {
        bail!("interrupted; cleaning up");
    }
    Ok(())
}

/// Sleeps, waking early on Ctrl-C.
fn sleep(d: Duration) -> Result<()> {
    let end = Instant::now() + d;
    while Instant::now() < end {
        check_stop()?;
        thread::sleep((end - Instant::now()).min(Duration::from_millis(50)));
    }
    check_stop()
}

// ------------------------------------------------------------------------------------------
// Guards.

/// A file or directory under /dev/shm, removed on drop.
struct ShmDir(PathBuf);

impl Drop for ShmDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loop device, detached on drop.
struct LoopDev {
    dev: String,
}

impl LoopDev {
    fn create(file: &Path, size_mib: u64, scheduler: &str) -> Result<Self> {
        let f = std::fs::File::create(file).with_context(|| format!("creating {}", file.display()))?;
        f.set_len(size_mib << 20)?;
        drop(f);
        let out = Command::new("losetup").args(["--find", "--show"]).arg(file).output().context("running losetup")?;
        ensure!(out.status.success(), "losetup --find --show {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
        let dev = String::from_utf8(out.stdout)?.trim().to_string();
        ensure!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
        let me = Self { dev };
        let sched = format!("/sys/block/{}/queue/scheduler", me.name());
        std::fs::write(&sched, scheduler).with_context(|| format!("setting {sched} to {scheduler}"))?;
        Ok(me)
    }

    fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// `kernel.bpf_stats_enabled`, restored on drop.
struct BpfStats {
    old: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> Result<Self> {
        let old = std::fs::read_to_string(BPF_STATS).context("reading kernel.bpf_stats_enabled")?.trim().to_string();
        std::fs::write(BPF_STATS, "1").context("setting kernel.bpf_stats_enabled=1")?;
        Ok(Self { old })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, &self.old) {
            eprintln!("[bench] WARNING: could not restore kernel.bpf_stats_enabled={}: {e}", self.old);
        }
    }
}

/// A child process, stopped (signal, then SIGKILL after 5 s) and reaped on drop.
struct Proc {
    child: Child,
    what: &'static str,
    stop_signal: libc::c_int,
}

impl Proc {
    fn spawn(what: &'static str, cmd: &mut Command, stop_signal: libc::c_int) -> Result<Self> {
        let child = cmd.spawn().with_context(|| format!("starting {what}: {cmd:?}"))?;
        Ok(Self { child, what, stop_signal })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn ensure_running(&mut self) -> Result<()> {
        if let Some(st) = self.child.try_wait()? {
            bail!("{} exited early: {st}", self.what);
        }
        Ok(())
    }

    fn stop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
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
fn remove_stale() {
    let Ok(rd) = std::fs::read_dir("/dev/shm") else { return };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("blkobs-bench-") else { continue };
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

// ------------------------------------------------------------------------------------------
// Configurations and workloads.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Config {
    Untraced,
    Floor,
    Biolatency,
    Observer,
}

impl Config {
    const ALL: [Config; 4] = [Config::Untraced, Config::Floor, Config::Biolatency, Config::Observer];

    fn name(self) -> &'static str {
        match self {
            Config::Untraced => "untraced",
            Config::Floor => "floor",
            Config::Biolatency => "biolatency",
            Config::Observer => "observer",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Workload {
    RandRead,
    RandWrite,
}

impl Workload {
    fn fio(self) -> &'static str {
        match self {
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
        }
    }
}

/// A device under test.
struct Target {
    dev: String,
    writes: bool,
}

impl Target {
    fn name(&self) -> &str {
        self.dev.trim_start_matches("/dev/")
    }
}

struct Env {
    root: PathBuf,
    logs: PathBuf,
    biolatency: PathBuf,
    args: BenchArgs,
    ramp: u32,
}

/// A running configuration: the tracer process (none when untraced) and its program ids.
struct Running {
    proc: Option<Proc>,
    port: u16,
    progs: Vec<u32>,
    scraper: Option<Scraper>,
}

impl Running {
    fn start(env: &Env, config: Config, tag: &str) -> Result<Self> {
        let log = |n: &str| -> Result<std::fs::File> {
            Ok(std::fs::File::create(env.logs.join(format!("{n}-{tag}.log")))?)
        };
        let mut port = 0;
        let proc = match config {
            Config::Untraced => None,
            Config::Floor => {
                let mut p = Proc::spawn(
                    "observer-floor",
                    Command::new(env.root.join("target/release/observer-floor"))
                        .stdout(Stdio::piped())
                        .stderr(log("floor")?),
                    libc::SIGTERM,
                )?;
                let mut line = String::new();
                BufReader::new(p.child.stdout.take().context("floor stdout")?).read_line(&mut line)?;
                ensure!(line.starts_with("ready"), "observer-floor failed (see {}): {line:?}", env.logs.display());
                Some(p)
            }
            Config::Biolatency => Some(Proc::spawn(
                "biolatency",
                Command::new(&env.biolatency).args(["-Q", "-D", "-F"]).stdout(Stdio::null()).stderr(log("biolatency")?),
                libc::SIGINT,
            )?),
            Config::Observer => {
                port = free_port()?;
                let mut p = Proc::spawn(
                    "observer",
                    Command::new(env.root.join("target/release/observer"))
                        .args(["--listen", &format!("127.0.0.1:{port}")])
                        .stdout(Stdio::null())
                        .stderr(log("observer")?),
                    libc::SIGTERM,
                )?;
                // It attaches before it listens: /healthz answering means attached.
                let end = Instant::now() + Duration::from_secs(30);
                while http_get(port, "/healthz").is_err() {
                    p.ensure_running()?;
                    ensure!(Instant::now() < end, "observer did not answer /healthz in 30 s");
                    sleep(Duration::from_millis(50))?;
                }
                Some(p)
            }
        };
        // Wait for the programs to show up (biolatency has no ready signal), then settle.
        let mut progs = Vec::new();
        if let Some(p) = &proc {
            let want = match config {
                Config::Biolatency => 3,
                _ => 7,
            };
            let end = Instant::now() + Duration::from_secs(30);
            loop {
                progs = progs_of(p.pid())?;
                if progs.len() >= want {
                    break;
                }
                ensure!(Instant::now() < end, "{}: only {} of {want} programs loaded after 30 s", config.name(), progs.len());
                sleep(Duration::from_millis(100))?;
            }
        }
        sleep(Duration::from_millis(500))?;
        let mut r = Self { proc, port, progs, scraper: None };
        if config == Config::Observer {
            r.scraper = Some(Scraper::start(port, Duration::from_secs(5)));
        }
        r.ensure_running()?;
        Ok(r)
    }

    fn ensure_running(&mut self) -> Result<()> {
        if let Some(p) = &mut self.proc {
            p.ensure_running()?;
        }
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(|p| p.pid())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.scraper.take() {
            s.stop();
        }
    }
}

/// Scrapes /metrics periodically in a thread (a Prometheus stand-in), so daemon CPU includes it.
struct Scraper {
    stop: Arc<AtomicBool>,
    handle: thread::JoinHandle<()>,
}

impl Scraper {
    fn start(port: u16, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = thread::spawn(move || {
            let mut next = Instant::now() + every;
            while !s.load(Ordering::SeqCst) {
                if Instant::now() >= next {
                    let _ = http_get(port, "/metrics");
                    next += every;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
        Self { stop, handle }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.handle.join();
    }
}

// ------------------------------------------------------------------------------------------
// Small readers.

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// GET over HTTP/1.0 (no chunking; the server closes). Returns the body.
fn http_get(port: u16, path: &str) -> Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").context("malformed HTTP response")?;
    ensure!(head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200"), "GET {path}: {}", head.lines().next().unwrap_or(""));
    Ok(body.to_string())
}

/// `bpftool prog show -j`, as id → (name, run_time_ns, run_cnt, recursion_misses).
fn bpf_progs() -> Result<HashMap<u32, (String, u64, u64, u64)>> {
    let out = Command::new("bpftool").args(["prog", "show", "-j"]).output().context("running bpftool")?;
    ensure!(out.status.success(), "bpftool prog show: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool's JSON")?;
    let mut m = HashMap::new();
    for p in v.as_array().into_iter().flatten() {
        let Some(id) = p["id"].as_u64() else { continue };
        m.insert(
            id as u32,
            (
                p["name"].as_str().unwrap_or("?").to_string(),
                p["run_time_ns"].as_u64().unwrap_or(0),
                p["run_cnt"].as_u64().unwrap_or(0),
                // Runs the kernel skipped because the program was already running on that CPU.
                p["recursion_misses"].as_u64().unwrap_or(0),
            ),
        );
    }
    Ok(m)
}

/// Programs held open by a process (program and link fds name them in /proc/PID/fdinfo; this
/// bpftool is built without its own pid lookup).
fn progs_of(pid: u32) -> Result<Vec<u32>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else { continue };
        for l in info.lines() {
            if let Some(id) = l.strip_prefix("prog_id:").and_then(|x| x.trim().parse::<u32>().ok()) {
                v.push(id);
            }
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

/// Tracing programs loaded by others (another observer, a test) while we measure: they tax
/// every configuration, the untraced one included, so the report counts the runs they touched.
fn foreign_tracing_progs(ours: &[u32]) -> Result<Vec<String>> {
    let out = Command::new("bpftool").args(["prog", "show", "-j"]).output().context("running bpftool")?;
    let v: Value = serde_json::from_slice(&out.stdout).context("parsing bpftool's JSON")?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .filter(|p| matches!(p["type"].as_str(), Some("tracing" | "raw_tracepoint" | "tracepoint" | "kprobe")))
        .filter(|p| !ours.contains(&(p["id"].as_u64().unwrap_or(0) as u32)))
        .map(|p| format!("{}:{}", p["id"], p["name"].as_str().unwrap_or("?")))
        .collect())
}

/// Completed requests (reads, writes, discards, flushes) per whole disk, from /sys/block/*/stat.
fn disk_completions() -> Result<BTreeMap<String, u64>> {
    let mut m = BTreeMap::new();
    for e in std::fs::read_dir("/sys/block")?.flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let f: Vec<u64> = s.split_whitespace().filter_map(|x| x.parse().ok()).collect();
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        m.insert(e.file_name().to_string_lossy().into_owned(), get(0) + get(4) + get(11) + get(15));
    }
    Ok(m)
}

fn total_completions() -> Result<u64> {
    Ok(disk_completions()?.values().sum())
}

/// (CPU seconds, peak RSS KiB, current RSS KiB) of a process.
fn proc_usage(pid: u32) -> Result<(f64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("/proc/pid/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm)": state is field 3, utime 14, stime 15 → indices 11, 12 here.
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> u64 {
        status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
    };
    Ok((ticks as f64 / hz, kib("VmHWM:"), kib("VmRSS:")))
}

/// The observer's self-monitoring counters and per-device completed requests.
#[derive(Clone, Debug, Default)]
struct ObsCounters {
    untracked: f64,
    dropped: f64,
    stale: f64,
    clock: f64,
    requests: BTreeMap<String, f64>,
}

impl ObsCounters {
    fn parse(body: &str) -> Self {
        let mut c = Self::default();
        for line in body.lines().filter(|l| !l.starts_with('#')) {
            let Some((name_labels, value)) = line.rsplit_once(' ') else { continue };
            let v: f64 = value.parse().unwrap_or(0.0);
            let name = name_labels.split('{').next().unwrap_or("");
            match name {
                "blkobs_untracked_completions_total" => c.untracked += v,
                "blkobs_dropped_requests_total" => c.dropped += v,
                "blkobs_stale_requests_total" => c.stale += v,
                "blkobs_clock_anomalies_total" => c.clock += v,
                "blkobs_requests_total" => {
                    if let Some(dev) = name_labels.split("device=\"").nth(1).and_then(|s| s.split('"').next()) {
                        *c.requests.entry(dev.to_string()).or_default() += v;
                    }
                }
                _ => {}
            }
        }
        c
    }

    fn delta(&self, before: &Self) -> Self {
        let mut r = Self {
            untracked: self.untracked - before.untracked,
            dropped: self.dropped - before.dropped,
            stale: self.stale - before.stale,
            clock: self.clock - before.clock,
            requests: BTreeMap::new(),
        };
        for (d, v) in &self.requests {
            r.requests.insert(d.clone(), v - before.requests.get(d).copied().unwrap_or(0.0));
        }
        r
    }
}

// ------------------------------------------------------------------------------------------
// fio.

struct FioResult {
    iops: f64,
}

fn fio(env: &Env, target: &str, w: Workload, runtime: u32, tag: &str) -> Result<FioResult> {
    check_stop()?;
    let mut cmd = Command::new("fio");
    cmd.args([
        "--name=bench",
        &format!("--filename={target}"),
        "--direct=1",
        "--ioengine=io_uring",
        "--iodepth=32",
        &format!("--rw={}", w.fio()),
        "--bs=4k",
        "--numjobs=1",
        "--time_based",
        &format!("--runtime={runtime}"),
        &format!("--ramp_time={}", env.ramp),
        "--randrepeat=0",
        "--norandommap",
        "--output-format=json",
    ]);
    let out = cmd.output().context("running fio")?;
    check_stop()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!("fio failed ({}): {}{}", out.status, String::from_utf8_lossy(&out.stderr), stdout);
    }
    std::fs::write(env.logs.join(format!("fio-{tag}.json")), stdout.as_bytes())?;
    let json = &stdout[stdout.find('{').context("no JSON in fio's output")?..];
    let v: Value = serde_json::from_str(json).context("parsing fio's JSON")?;
    let job = &v["jobs"][0];
    let side = match w {
        Workload::RandRead => &job["read"],
        Workload::RandWrite => &job["write"],
    };
    let iops = side["iops"].as_f64().context("fio JSON without iops")?;
    ensure!(iops > 0.0, "fio reported 0 IOPS on {target}");
    Ok(FioResult { iops })
}

// ------------------------------------------------------------------------------------------
// The run.

/// One measured run: program name → (run_time_ns, run_cnt) deltas, and requests completed.
type StatsRun = (BTreeMap<String, (u64, u64)>, u64);

#[derive(Default)]
struct Results {
    /// (target, workload, config) → IOPS per round.
    iops: BTreeMap<(String, Workload, Config), Vec<f64>>,
    /// (config, workload) → per stats round: program name → (run_time_ns, run_cnt) deltas, and
    /// requests completed on all disks meanwhile.
    stats: BTreeMap<(Config, Workload), Vec<StatsRun>>,
    /// Observer daemon: CPU seconds and requests during fio runs; peak RSS KiB.
    obs_cpu_s: f64,
    obs_requests: u64,
    obs_peak_rss_kib: u64,
    /// Largest VmRSS seen at the end of a run (steady state, after startup).
    obs_rss_kib: u64,
    /// Observer counters summed over all its runs, and requests it recorded vs the disk's count.
    obs_events: ObsCounters,
    obs_recorded: f64,
    obs_disk_completions: u64,
    /// Scrape durations (ms) with N devices busy; series in the last body; devices exported.
    scrape_ms: Vec<f64>,
    scrape_series: usize,
    scrape_devices: usize,
    scrape_events: ObsCounters,
    /// Building blocks: program → (run_time_ns, run_cnt), and requests, per run of the costs pass.
    costs: Vec<StatsRun>,
    /// Per configuration: program runs the kernel skipped (recursion_misses) during IOPS runs.
    misses: BTreeMap<Config, u64>,
    /// Runs during which someone else's tracing programs were loaded, with their names.
    foreign: Vec<String>,
    runs: u32,
}

pub fn run(root: &Path, mut args: BenchArgs) -> Result<()> {
    if args.smoke {
        args.rounds = 1;
        args.runtime = 2;
        args.scrape_devices = 2;
    }
    ensure!(args.rounds >= 1 && args.runtime >= 1, "--rounds and --runtime must be at least 1");
    ensure!(unsafe { libc::geteuid() } == 0, "cargo xtask bench needs root (loop devices, eBPF, sysctl)");
    install_signal_handlers();
    remove_stale();
    let configs: Vec<Config> = if args.only.is_empty() {
        Config::ALL.to_vec()
    } else {
        let mut v = Vec::new();
        for o in &args.only {
            v.push(*Config::ALL.iter().find(|c| c.name() == o).with_context(|| format!("unknown configuration {o:?}"))?);
        }
        v
    };

    // Setup: tools.
    for tool in ["fio", "bpftool", "losetup"] {
        ensure!(which(tool).is_some(), "{tool} not found: run `cargo xtask provision`");
    }
    let biolatency = if configs.contains(&Config::Biolatency) { find_or_install_biolatency()? } else { PathBuf::new() };
    if !args.no_build {
        crate::run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(root)
            .args(["build", "--release", "-p", "observer"]))?;
    }
    for b in ["observer", "observer-floor"] {
        ensure!(root.join("target/release").join(b).exists(), "target/release/{b} missing: build with `cargo build --release -p observer`");
    }
    let logs = root.join("target/bench");
    std::fs::create_dir_all(&logs)?;

    // Setup: devices. Drop order is reverse of declaration: loops go before their files.
    let shm = ShmDir(PathBuf::from(format!("/dev/shm/blkobs-bench-{}", std::process::id())));
    std::fs::create_dir_all(&shm.0)?;
    let main_loop = LoopDev::create(&shm.0.join("main.img"), if args.smoke { 256 } else { 1024 }, &args.scheduler)?;
    let mut targets = vec![Target { dev: main_loop.dev.clone(), writes: true }];
    if let Some(d) = &args.device {
        check_user_device(d)?;
        targets.push(Target { dev: d.display().to_string(), writes: args.allow_writes });
    }
    let env = Env { root: root.to_path_buf(), logs, biolatency, ramp: if args.smoke { 0 } else { 1 }, args: args.clone() };
    eprintln!("[bench] loop device {} over {} (scheduler: {})", main_loop.dev, shm.0.display(), scheduler(main_loop.name()));
    // Fill it once (tmpfs allocates on first write), then warm up.
    crate::run(Command::new("fio").args([
        "--name=fill", &format!("--filename={}", main_loop.dev), "--rw=write", "--bs=1M", "--direct=1",
        "--ioengine=io_uring", "--iodepth=8", "--output=/dev/null",
    ]))?;

    let mut res = Results::default();
    let dev_names: Vec<String> = targets.iter().map(|t| t.name().to_string()).collect();
    let workloads_of = |t: &Target, round: u32| -> Vec<Workload> {
        let mut w = vec![Workload::RandRead];
        if t.writes {
            w.push(Workload::RandWrite);
        }
        if round % 2 == 1 {
            w.reverse();
        }
        w
    };

    // IOPS rounds: configuration order rotates each round, workload order alternates.
    for round in 0..args.rounds {
        let mut order = configs.clone();
        order.rotate_left(round as usize % configs.len());
        eprintln!("[bench] round {}/{}: {}", round + 1, args.rounds, order.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "));
        for &config in &order {
            let tag = format!("r{round}-{}", config.name());
            let mut running = Running::start(&env, config, &tag)?;
            let obs_before = if config == Config::Observer { Some(observer_sample(&running, &dev_names)?) } else { None };
            let mut foreign = foreign_tracing_progs(&running.progs)?;
            let misses = |ids: &[u32]| -> Result<u64> {
                let all = bpf_progs()?;
                Ok(ids.iter().filter_map(|id| all.get(id)).map(|p| p.3).sum())
            };
            let misses_before = misses(&running.progs)?;
            for t in &targets {
                for w in workloads_of(t, round) {
                    res.runs += 1;
                    let r = fio(&env, &t.dev, w, args.runtime, &format!("{tag}-{}-{}", t.name(), w.fio()))?;
                    running.ensure_running()?;
                    eprintln!("[bench]   {:<10} {:<8} {:<9} {:>9.0} IOPS", config.name(), t.name(), w.fio(), r.iops);
                    res.iops.entry((t.name().to_string(), w, config)).or_default().push(r.iops);
                }
            }
            *res.misses.entry(config).or_default() += misses(&running.progs)? - misses_before;
            foreign.extend(foreign_tracing_progs(&running.progs)?);
            foreign.sort();
            foreign.dedup();
            if !foreign.is_empty() {
                eprintln!("[bench]   WARNING: foreign tracing programs loaded during this run: {}", foreign.join(" "));
                res.foreign.push(format!("round {} {}: {}", round + 1, config.name(), foreign.join(" ")));
            }
            if let Some(before) = obs_before {
                let after = observer_sample(&running, &dev_names)?;
                res.obs_cpu_s += after.cpu_s - before.cpu_s;
                res.obs_requests += after.disk_total - before.disk_total;
                res.obs_peak_rss_kib = res.obs_peak_rss_kib.max(after.rss_kib);
                res.obs_rss_kib = res.obs_rss_kib.max(after.rss_now_kib);
                let d = after.counters.delta(&before.counters);
                add_events(&mut res.obs_events, &d);
                for t in &targets {
                    res.obs_recorded += d.requests.get(t.name()).copied().unwrap_or(0.0);
                    res.obs_disk_completions += after.disks.get(t.name()).copied().unwrap_or(0)
                        - before.disks.get(t.name()).copied().unwrap_or(0);
                }
            }
        }
    }

    // bpf_stats pass.
    {
        let _stats = BpfStats::enable()?;
        let traced: Vec<Config> = configs.iter().copied().filter(|c| *c != Config::Untraced).collect();
        eprintln!("[bench] bpf_stats pass (kernel.bpf_stats_enabled=1 until it ends)");
        let stats_rounds = args.rounds.min(3);
        for round in 0..stats_rounds {
            let mut order = traced.clone();
            if !order.is_empty() {
                let n = order.len();
                order.rotate_left(round as usize % n);
            }
            for &config in &order {
                let tag = format!("stats{round}-{}", config.name());
                let running = Running::start(&env, config, &tag)?;
                let t = &targets[0];
                for w in workloads_of(t, round) {
                    let before = bpf_progs()?;
                    let c0 = total_completions()?;
                    fio(&env, &t.dev, w, args.runtime, &format!("{tag}-{}", w.fio()))?;
                    let c1 = total_completions()?;
                    let after = bpf_progs()?;
                    let mut per = BTreeMap::new();
                    for id in &running.progs {
                        let (Some(b), Some(a)) = (before.get(id), after.get(id)) else { continue };
                        let e = per.entry(a.0.clone()).or_insert((0, 0));
                        e.0 += a.1 - b.1;
                        e.1 += a.2 - b.2;
                    }
                    let total: u64 = per.values().map(|v| v.0).sum();
                    eprintln!("[bench]   {:<10} {:<9} {:>5.0} ns/request (bpf_stats)", config.name(), w.fio(), total as f64 / (c1 - c0).max(1) as f64);
                    res.stats.entry((config, w)).or_default().push((per, c1 - c0));
                }
            }
        }
    }

    if args.costs {
        let _stats = BpfStats::enable()?;
        eprintln!("[bench] costs pass (observer-floor --costs, kernel.bpf_stats_enabled=1)");
        for i in 0..args.rounds.min(3) {
            let mut p = Proc::spawn(
                "observer-floor --costs",
                Command::new(root.join("target/release/observer-floor"))
                    .arg("--costs")
                    .stdout(Stdio::piped())
                    .stderr(std::fs::File::create(env.logs.join("costs.log"))?),
                libc::SIGTERM,
            )?;
            let mut line = String::new();
            BufReader::new(p.child.stdout.take().context("stdout")?).read_line(&mut line)?;
            ensure!(line.starts_with("ready"), "observer-floor --costs failed (see {}): {line:?}", env.logs.join("costs.log").display());
            let ids = progs_of(p.pid())?;
            sleep(Duration::from_millis(500))?;
            let before = bpf_progs()?;
            let c0 = total_completions()?;
            fio(&env, &targets[0].dev, Workload::RandRead, args.runtime, &format!("costs-{i}"))?;
            let c1 = total_completions()?;
            let after = bpf_progs()?;
            p.ensure_running()?;
            let mut per = BTreeMap::new();
            for id in &ids {
                let (Some(b), Some(a)) = (before.get(id), after.get(id)) else { continue };
                per.insert(a.0.clone(), (a.1 - b.1, a.2 - b.2));
            }
            res.costs.push((per, c1 - c0));
        }
    }

    // Scrape with N devices busy.
    if configs.contains(&Config::Observer) {
        scrape_phase(&env, &shm.0, &mut res)?;
    }

    let report = render(&env, &configs, &targets, &res);
    println!("{report}");
    std::fs::write(env.logs.join("results.md"), &report)?;
    eprintln!("[bench] table written to {}", env.logs.join("results.md").display());
    drop(main_loop);
    drop(shm);
    Ok(())
}

fn add_events(into: &mut ObsCounters, d: &ObsCounters) {
    into.untracked += d.untracked;
    into.dropped += d.dropped;
    into.stale += d.stale;
    into.clock += d.clock;
}

struct ObsSample {
    cpu_s: f64,
    rss_kib: u64,
    rss_now_kib: u64,
    counters: ObsCounters,
    disks: BTreeMap<String, u64>,
    disk_total: u64,
}

/// Waits until no request completes on the bench devices for 200 ms (udev probes a device after
/// a writer closes it), so that counters read around a run see the same requests.
fn settle(devs: &[String]) -> Result<()> {
    let end = Instant::now() + Duration::from_secs(5);
    let snap = || -> Result<Vec<u64>> {
        let d = disk_completions()?;
        Ok(devs.iter().map(|n| d.get(n).copied().unwrap_or(0)).collect())
    };
    let mut last = snap()?;
    while Instant::now() < end {
        sleep(Duration::from_millis(200))?;
        let now = snap()?;
        if now == last {
            return Ok(());
        }
        last = now;
    }
    Ok(())
}

fn observer_sample(r: &Running, devs: &[String]) -> Result<ObsSample> {
    settle(devs)?;
    let pid = r.pid().context("observer pid")?;
    let disks = disk_completions()?;
    let counters = ObsCounters::parse(&http_get(r.port, "/metrics")?);
    let (cpu_s, rss_kib, rss_now_kib) = proc_usage(pid)?;
    Ok(ObsSample { cpu_s, rss_kib, rss_now_kib, counters, disk_total: disks.values().sum(), disks })
}

fn scrape_phase(env: &Env, dir: &Path, res: &mut Results) -> Result<()> {
    let n = env.args.scrape_devices;
    eprintln!("[bench] scrape phase: {n} loop devices busy");
    let mut loops = Vec::new();
    for i in 0..n {
        loops.push(LoopDev::create(&dir.join(format!("scrape{i}.img")), 64, &env.args.scheduler)?);
    }
    let running = Running::start(env, Config::Observer, "scrape")?;
    let names: Vec<String> = loops.iter().map(|l| l.name().to_string()).collect();
    let before = observer_sample(&running, &names)?;
    let secs = if env.args.smoke { 3 } else { 10 };
    // One fio job per device, mixed read/write with some sync writes, so every device has several
    // (op, flags) classes; low depth: 32 jobs share 2 cores.
    let mut cmd = Command::new("fio");
    cmd.args(["--ioengine=io_uring", "--direct=1", "--bs=4k", "--iodepth=4", "--rw=randrw", "--time_based"])
        .arg(format!("--runtime={}", secs + 2))
        .arg("--output=/dev/null")
        .stdout(Stdio::null());
    for (i, l) in loops.iter().enumerate() {
        cmd.arg(format!("--name=d{i}")).arg(format!("--filename={}", l.dev));
        if i % 2 == 1 {
            cmd.arg("--fsync=8");
        }
    }
    let mut load = Proc::spawn("fio (scrape load)", &mut cmd, libc::SIGINT)?;
    sleep(Duration::from_secs(1))?;
    let end = Instant::now() + Duration::from_secs(secs as u64);
    let mut last = String::new();
    while Instant::now() < end {
        let t0 = Instant::now();
        last = http_get(running.port, "/metrics")?;
        res.scrape_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        sleep(Duration::from_millis(250))?;
    }
    load.ensure_running()?;
    load.stop();
    let after = observer_sample(&running, &names)?;
    res.obs_peak_rss_kib = res.obs_peak_rss_kib.max(after.rss_kib);
    res.obs_rss_kib = res.obs_rss_kib.max(after.rss_now_kib);
    res.scrape_events = after.counters.delta(&before.counters);
    res.scrape_series = last.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).count();
    res.scrape_devices = names.iter().filter(|n| last.contains(&format!("device=\"{n}\""))).count();
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Setup helpers.

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(bin)).find(|p| p.is_file()))
        .or_else(|| ["/usr/sbin", "/sbin"].iter().map(|d| Path::new(d).join(bin)).find(|p| p.is_file()))
}

/// libbpf-tools' biolatency: found, or installed from Debian's `libbpf-tools`.
fn find_or_install_biolatency() -> Result<PathBuf> {
    let find = || -> Option<PathBuf> {
        which("biolatency").or_else(|| {
            let out = Command::new("dpkg").args(["-L", "libbpf-tools"]).output().ok()?;
            String::from_utf8_lossy(&out.stdout).lines().find(|l| l.ends_with("/biolatency")).map(PathBuf::from)
        })
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    eprintln!("[bench] installing libbpf-tools (biolatency) with apt-get");
    crate::run(Command::new("apt-get").args(["update", "-qq"]))?;
    crate::run(Command::new("apt-get").args(["install", "-y", "-qq", "--no-install-recommends", "libbpf-tools"]).env("DEBIAN_FRONTEND", "noninteractive"))?;
    find().context("libbpf-tools installed but no biolatency binary found (dpkg -L libbpf-tools)")
}

/// Refuses a device that is in use: mounted, swap, held (dm, md), or the root disk.
fn check_user_device(d: &Path) -> Result<()> {
    let meta = std::fs::metadata(d).with_context(|| format!("--device {}", d.display()))?;
    use std::os::unix::fs::FileTypeExt;
    ensure!(meta.file_type().is_block_device(), "--device {} is not a block device", d.display());
    let canon = std::fs::canonicalize(d)?;
    let name = canon.file_name().context("device name")?.to_string_lossy().into_owned();
    ensure!(Path::new("/sys/block").join(&name).exists(), "--device {}: give a whole disk (a /sys/block entry)", d.display());
    let dev_prefix = format!("/dev/{name}");
    for f in ["/proc/mounts", "/proc/swaps"] {
        for line in std::fs::read_to_string(f)?.lines() {
            let src = line.split_whitespace().next().unwrap_or("");
            if src.starts_with(&dev_prefix) {
                bail!("--device {}: {src} is in use ({f}); refusing", d.display());
            }
        }
    }
    let holders = std::fs::read_dir(Path::new("/sys/block").join(&name).join("holders"))?.count();
    ensure!(holders == 0, "--device {}: held by another block device (dm/md); refusing", d.display());
    Ok(())
}

fn scheduler(name: &str) -> String {
    std::fs::read_to_string(format!("/sys/block/{name}/queue/scheduler")).map(|s| s.trim().to_string()).unwrap_or_default()
}

// ------------------------------------------------------------------------------------------
// Report.

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn minmax(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)))
}

fn render(env: &Env, configs: &[Config], targets: &[Target], res: &Results) -> String {
    let a = &env.args;
    let mut o = String::new();
    let cmdline: Vec<String> = std::env::args().skip(1).collect();
    let _ = writeln!(o, "## blkobs bench: {} round(s) × {} s per run{}\n", a.rounds, a.runtime, if a.smoke { " (SMOKE: numbers mean nothing)" } else { "" });
    let _ = writeln!(o, "command: `cargo xtask {}`  ", cmdline.join(" "));
    let _ = writeln!(o, "fio: 4k, io_uring, iodepth 32, direct, 1 job, ramp {} s; kernel {}; {} CPUs ({}); loop scheduler: {}\n",
        env.ramp, uname_r(), num_cpus(), cpu_model(), targets.first().map(|t| scheduler(t.name())).unwrap_or_default());

    let _ = writeln!(o, "### IOPS\n");
    let _ = writeln!(o, "| device | workload | configuration | median IOPS | min | max | ratio to untraced (of medians) | ratio to untraced (median of per-round ratios) |");
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|---:|---:|");
    for t in targets {
        for w in [Workload::RandRead, Workload::RandWrite] {
            let base_v = res.iops.get(&(t.name().to_string(), w, Config::Untraced));
            let base = base_v.map(|v| median(v));
            for &c in configs {
                let Some(v) = res.iops.get(&(t.name().to_string(), w, c)) else { continue };
                let (mn, mx) = minmax(v);
                let m = median(v);
                let ratio = base.map(|b| format!("{:.3}", m / b)).unwrap_or_else(|| "-".into());
                // Entry i of every configuration is round i: pairs taken minutes apart at most.
                let paired = base_v
                    .map(|b| format!("{:.3}", median(&v.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>())))
                    .unwrap_or_else(|| "-".into());
                let _ = writeln!(o, "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} | {} |", t.name(), w.fio(), c.name(), m, mn, mx, ratio, paired);
            }
        }
    }

    let _ = writeln!(o, "\n### eBPF cost (kernel.bpf_stats, separate pass on {}, {} run(s) per configuration and workload, medians)\n", targets[0].name(), a.rounds.min(3));
    let _ = writeln!(o, "| configuration | workload | program | runs per request | ns per run | ns per request |");
    let _ = writeln!(o, "|---|---|---|---:|---:|---:|");
    let mut totals: BTreeMap<(Config, Workload), f64> = BTreeMap::new();
    for ((c, w), rounds) in &res.stats {
        let mut names: Vec<&String> = rounds.iter().flat_map(|(p, _)| p.keys()).collect();
        names.sort();
        names.dedup();
        for name in names {
            let col = |f: &dyn Fn(u64, u64, f64) -> f64| -> f64 {
                median(&rounds.iter().filter_map(|(p, r)| p.get(name).map(|(ns, cnt)| f(*ns, *cnt, (*r).max(1) as f64))).collect::<Vec<_>>())
            };
            let runs = col(&|_, cnt, r| cnt as f64 / r);
            let per_run = col(&|ns, cnt, _| if cnt > 0 { ns as f64 / cnt as f64 } else { 0.0 });
            let per_req = col(&|ns, _, r| ns as f64 / r);
            let _ = writeln!(o, "| {} | {} | {} | {:.2} | {:.0} | {:.0} |", c.name(), w.fio(), name, runs, per_run, per_req);
        }
        let per_round: Vec<f64> = rounds.iter().map(|(p, r)| p.values().map(|v| v.0).sum::<u64>() as f64 / (*r).max(1) as f64).collect();
        let total = median(&per_round);
        let (mn, mx) = minmax(&per_round);
        let _ = writeln!(o, "| {} | {} | **total** (median; min–max of {} runs: {:.0}–{:.0}) | | | **{:.0}** |", c.name(), w.fio(), per_round.len(), mn, mx, total);
        totals.insert((*c, *w), total);
    }
    if totals.keys().any(|(c, _)| *c == Config::Floor) {
        let _ = writeln!(o, "\nAbove the floor (total minus the empty programs' total, same workload: the work the programs do):\n");
        for ((c, w), t) in &totals {
            if let (false, Some(f)) = (*c == Config::Floor, totals.get(&(Config::Floor, *w))) {
                let _ = writeln!(o, "- {} {}: {:.0} ns per request", c.name(), w.fio(), t - f);
            }
        }
    }

    if !res.costs.is_empty() {
        let _ = writeln!(o, "\n### Building blocks (observer-floor --costs on block_rq_issue, randread, {} run(s); median ns per run)\n", res.costs.len());
        let _ = writeln!(o, "| block | ns per run | minus empty program (the cheaper of c00/c12) | runs per request |");
        let _ = writeln!(o, "|---|---:|---:|---:|");
        let mut names: Vec<&String> = res.costs.iter().flat_map(|(p, _)| p.keys()).collect();
        names.sort();
        names.dedup();
        let per_run = |name: &str| -> f64 {
            median(&res.costs.iter().filter_map(|(p, _)| p.get(name)).filter(|(_, c)| *c > 0).map(|(ns, c)| *ns as f64 / *c as f64).collect::<Vec<_>>())
        };
        let empty = per_run("c00_empty").min(per_run("c12_empty_last"));
        for n in names {
            let runs: f64 = median(&res.costs.iter().filter_map(|(p, r)| p.get(n).map(|(_, c)| *c as f64 / (*r).max(1) as f64)).collect::<Vec<_>>());
            let v = per_run(n);
            let _ = writeln!(o, "| {n} | {v:.0} | {:.0} | {runs:.2} |", v - empty);
        }
    }

    let cpu_per_m = if res.obs_requests > 0 { res.obs_cpu_s / (res.obs_requests as f64 / 1e6) } else { f64::NAN };
    let scrape_med = median(&res.scrape_ms);
    let (_, scrape_max) = minmax(&res.scrape_ms);
    let e = &res.obs_events;
    let s = &res.scrape_events;
    if configs.contains(&Config::Observer) {
        let _ = writeln!(o, "\n### Observer daemon (default configuration, /metrics scraped every 5 s during runs)\n");
        let _ = writeln!(o, "| measure | value |");
        let _ = writeln!(o, "|---|---:|");
        let _ = writeln!(o, "| peak RSS (VmHWM, max over runs, includes startup) | {:.1} MiB |", res.obs_peak_rss_kib as f64 / 1024.0);
        let _ = writeln!(o, "| RSS at the end of a run (VmRSS, max over runs) | {:.1} MiB |", res.obs_rss_kib as f64 / 1024.0);
        let _ = writeln!(o, "| CPU seconds per million requests | {:.4} s ({:.3} s over {:.1} M requests) |", cpu_per_m, res.obs_cpu_s, res.obs_requests as f64 / 1e6);
        let _ = writeln!(o, "| ⇒ share of one core at 100k IOPS | {:.3} % |", cpu_per_m * 0.1 * 100.0);
        let _ = writeln!(o, "| /metrics scrape, {} loop devices busy: median / max of {} | {:.2} ms / {:.2} ms ({} series, {} of {} devices exported) |",
            a.scrape_devices, res.scrape_ms.len(), scrape_med, scrape_max, res.scrape_series, res.scrape_devices, a.scrape_devices);
        let _ = writeln!(o, "| untracked completions (IOPS runs / scrape phase) | {} / {} |", e.untracked, s.untracked);
        let _ = writeln!(o, "| dropped requests, map full (IOPS runs / scrape phase) | {} / {} |", e.dropped, s.dropped);
        let _ = writeln!(o, "| stale entries, clock anomalies (IOPS runs) | {} , {} |", e.stale, e.clock);
        let _ = writeln!(o, "| requests recorded / completed on the bench device(s) | {:.0} / {} |", res.obs_recorded, res.obs_disk_completions);
        let _ = writeln!(o, "| program runs skipped by the kernel (recursion_misses), IOPS runs | {} |", res.misses.get(&Config::Observer).copied().unwrap_or(0));
    }

    if !res.misses.is_empty() {
        let m: Vec<String> = res.misses.iter().filter(|(c, _)| **c != Config::Untraced).map(|(c, n)| format!("{} {n}", c.name())).collect();
        let _ = writeln!(o, "\nProgram runs skipped by the kernel during the IOPS runs (bpftool recursion_misses: a lost event for any tracer): {}", m.join(", "));
    }
    if !res.foreign.is_empty() {
        let _ = writeln!(o, "\nWARNING: other tracing programs were loaded during {} configuration runs (of {} fio runs); they slow every configuration:", res.foreign.len(), res.runs);
        for f in &res.foreign {
            let _ = writeln!(o, "- {f}");
        }
    }

    // Budget lines (information only: nothing here fails the run).
    let _ = writeln!(o, "\n### Budget (issue #6), medians of this run\n");
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let t0 = targets[0].name().to_string();
    for w in [Workload::RandRead, Workload::RandWrite] {
        let get = |c| res.iops.get(&(t0.clone(), w, c)).map(|v| median(v));
        if let (Some(b), Some(ob)) = (get(Config::Untraced), get(Config::Observer)) {
            let r = ob / b;
            let key = |c| (t0.clone(), w, c);
            let paired = match (res.iops.get(&key(Config::Observer)), res.iops.get(&key(Config::Untraced))) {
                (Some(v), Some(b)) => median(&v.iter().zip(b).map(|(x, y)| x / y).collect::<Vec<_>>()),
                _ => f64::NAN,
            };
            let _ = writeln!(o, "- {}: observer IOPS ratio {:.3} of medians, {:.3} median of per-round ratios (≥ 0.92): {}", w.fio(), r, paired, verdict(r >= 0.92 && paired >= 0.92));
        }
        if let Some(ns) = totals.get(&(Config::Observer, w)) {
            let _ = writeln!(o, "- {}: observer eBPF {:.0} ns/request (≤ 280): {}", w.fio(), ns, verdict(*ns <= 280.0));
            if let Some(bl) = totals.get(&(Config::Biolatency, w)) {
                let _ = writeln!(o, "- {}: observer / biolatency eBPF cost {:.2} (≤ 0.33; biolatency {:.0} ns): {}", w.fio(), ns / bl, bl, verdict(ns / bl <= 1.0 / 3.0));
            }
        }
    }
    if res.obs_requests > 0 {
        let _ = writeln!(o, "- peak RSS {:.1} MiB (≤ 32): {}", res.obs_peak_rss_kib as f64 / 1024.0, verdict(res.obs_peak_rss_kib <= 32 * 1024));
        let _ = writeln!(o, "- CPU {:.3} % of a core at 100k IOPS (< 1 %): {}", cpu_per_m * 10.0, verdict(cpu_per_m * 10.0 < 1.0));
    }
    if !res.scrape_ms.is_empty() {
        let _ = writeln!(o, "- scrape median {:.2} ms, max {:.2} ms with {} devices (≤ 20 ms): {}", scrape_med, scrape_max, a.scrape_devices, verdict(scrape_med <= 20.0));
        let zero = e.untracked + e.dropped + s.untracked + s.dropped == 0.0;
        let _ = writeln!(o, "- dropped or untracked completions: {}: {} (and: {} runs skipped by the kernel; {:.0} completions on the bench device not in blkobs_requests_total)",
            e.untracked + e.dropped + s.untracked + s.dropped, verdict(zero),
            res.misses.get(&Config::Observer).copied().unwrap_or(0), res.obs_disk_completions as f64 - res.obs_recorded);
    }
    o
}

fn uname_r() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("model name")).map(|v| v.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_default()
}

fn num_cpus() -> usize {
    thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}
