//! Processes and small helpers: finding tools, running commands, child guards, HTTP, polling,
//! unique names and temporary directories, BPF object ids.

use std::{
    collections::BTreeSet,
    io::Read,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

/// Finds an executable: an absolute path that exists, else on PATH, else in /usr/sbin or /sbin
/// (root's tools, when PATH lacks them).
pub fn which(bin: &str) -> Option<PathBuf> {
    if bin.starts_with('/') {
        return Path::new(bin).is_file().then(|| PathBuf::from(bin));
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(bin))
                .find(|p| p.is_file())
        })
        .or_else(|| {
            ["/usr/sbin", "/sbin"]
                .iter()
                .map(|d| Path::new(d).join(bin))
                .find(|p| p.is_file())
        })
}

/// Runs a command, panicking with its output on failure; returns stdout.
pub fn sh(cmd: &str, args: &[&str]) -> String {
    run_ok(Command::new(cmd).args(args))
}

/// Runs `cmd` to completion, panicking with its stderr unless it succeeded; returns stdout.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs fio with the given job options, returns its JSON output.
pub fn fio(args: &[&str]) -> serde_json::Value {
    let out = sh("fio", &[&["--output-format=json"], args].concat());
    serde_json::from_str(&out).expect("fio JSON")
}

/// fio, one job per (name, disk): `seconds` of 4 KiB direct random reads (libaio, depth 8),
/// all on CPU 0 (so one disk's interrupt completions land inside another's completion work:
/// tests/lost.rs, tests/trace.rs).
pub fn one_cpu_reads(jobs: &[(&str, &str)], seconds: u32) {
    let args: Vec<String> = jobs
        .iter()
        .flat_map(|(name, dev)| {
            [
                format!("--name={name}"),
                format!("--filename=/dev/{dev}"),
                "--direct=1".into(),
                "--ioengine=libaio".into(),
                "--iodepth=8".into(),
                "--rw=randread".into(),
                "--bs=4k".into(),
                "--time_based".into(),
                format!("--runtime={seconds}"),
                "--cpus_allowed=0".into(),
            ]
        })
        .collect();
    fio(&args.iter().map(String::as_str).collect::<Vec<_>>());
}

/// fio options of 4 KiB direct sequential writes submitted 16 at a time (libaio: one plug per
/// batch, so they merge).
pub const FIO_BATCHED_WRITES: [&str; 6] = [
    "--rw=write",
    "--bs=4k",
    "--direct=1",
    "--ioengine=libaio",
    "--iodepth=16",
    "--iodepth_batch_submit=16",
];

/// With [`FIO_BATCHED_WRITES`]: completed 16 at a time too, 4 MiB per job, jobs 8 MiB apart.
pub const FIO_BATCHED_WRITE_JOBS: [&str; 3] = [
    "--iodepth_batch_complete_min=16",
    "--size=4M",
    "--offset_increment=8M",
];

/// fio's write I/Os (its JSON output), summed over its jobs.
pub fn fio_writes(out: &serde_json::Value) -> u64 {
    out["jobs"]
        .as_array()
        .expect("fio JSON jobs")
        .iter()
        .map(|j| j["write"]["total_ios"].as_u64().expect("write total_ios"))
        .sum()
}

/// Repository root (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The daemon binary these tests run: `$BLKOBS_OBSERVER_BIN` when set (a path, relative to the
/// workspace or absolute), else the one cargo built with them (CARGO_BIN_EXE_observer). The
/// kernel matrix sets it to target/release/observer: under TCG the debug build takes ~18 s to
/// load its programs, the release build ~5 s (aya's BTF relocation is userspace work).
pub fn observer_bin() -> PathBuf {
    match std::env::var_os("BLKOBS_OBSERVER_BIN") {
        Some(p) if !p.is_empty() => repo_root().join(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_observer")),
    }
}

/// A copy of the daemon binary in `dir` (mode 0755), so that an unprivileged user can run it
/// even when the build tree is not reachable for that user (e.g. a checkout under /root).
pub fn observer_copy_for_any_user(dir: &TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("observer");
    std::fs::copy(observer_bin(), &p).expect("copy the observer binary");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A unique name for this process and call: `<prefix>-<pid>-<n>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst)
    )
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `/tmp/<unique>` (mode 0755 so that a dropped-privilege daemon can read it).
    pub fn new(prefix: &str) -> Self {
        let p = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&p).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self(p)
    }
    /// A path inside.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (SIGKILL) and reaped on drop unless it already exited.
pub struct ChildGuard {
    /// The process.
    pub child: Child,
}

impl ChildGuard {
    /// Spawns `cmd` with stdout/stderr to `log`.
    pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> Self {
        let f = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Self { child }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal, unless the process has already been reaped (its pid may be reused).
    pub fn signal(&mut self, sig: i32) {
        if self.running() {
            // SAFETY: kill(2) takes no memory; the child is not reaped (checked above).
            unsafe {
                libc::kill(self.pid() as i32, sig);
            }
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for exit up to `timeout`; None if still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut st = None;
        wait_every(Duration::from_millis(50), timeout, || {
            st = self.child.try_wait().ok().flatten();
            st.is_some()
        });
        st
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A free TCP port on 127.0.0.1 (bound and released; small race accepted).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free loopback address, `127.0.0.1:<port>`.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// GET a URL: (status, body), non-2xx included; Err on transport errors.
pub fn http(url: &str) -> Result<(u16, String), String> {
    let read = |r: ureq::Response| {
        let status = r.status();
        let mut s = String::new();
        r.into_reader()
            .read_to_string(&mut s)
            .map(|_| (status, s))
            .map_err(|e| e.to_string())
    };
    // A connection of its own, closed after the response (as curl): a pooled keep-alive
    // connection would hold one of the server's `max_connections` for as long as it idles.
    let agent = ureq::AgentBuilder::new().max_idle_connections(0).build();
    match agent.get(url).timeout(Duration::from_secs(10)).call() {
        Ok(r) => read(r),
        Err(ureq::Error::Status(code, r)) => {
            Ok((code, read(r).map(|(_, body)| body).unwrap_or_default()))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// GET a URL; Err on transport errors or non-2xx.
pub fn http_get(url: &str) -> Result<String, String> {
    match http(url)? {
        (200..=299, body) => Ok(body),
        (status, body) => Err(format!("{url}: status {status}: {body}")),
    }
}

/// Polls `f` every 100 ms until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let mut v = None;
    wait_every(Duration::from_millis(100), timeout, || {
        v = f();
        v.is_some()
    });
    v
}

/// Calls `done` every `every` until it returns true (then true) or `timeout` passes (false).
pub fn wait_every(every: Duration, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(every);
    }
}

/// BPF program and link ids held open by a process (from /proc/PID/fdinfo).
pub fn bpf_ids_of(pid: u32) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut progs, mut links) = (BTreeSet::new(), BTreeSet::new());
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return (progs, links);
    };
    for e in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok()))
        };
        if let Some(id) = field("link_id:") {
            links.insert(id);
        } else if let Some(id) = field("prog_id:") {
            progs.insert(id);
        }
    }
    (progs, links)
}

/// The BPF map named `name` (the kernel keeps 15 characters of it) that process `pid` holds
/// open (`map_id:` in /proc/PID/fdinfo, named by `bpftool map show id`): `(id, max_entries)`.
pub fn bpf_map_of(pid: u32, name: &str) -> Option<(u64, u64)> {
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .ok()?
        .flatten()
    {
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Some(id) = info.lines().find_map(|l| {
            l.strip_prefix("map_id:")
                .and_then(|v| v.trim().parse::<u64>().ok())
        }) else {
            continue;
        };
        // A map closed meanwhile is not found: skipped.
        let Some(v) = bpftool_json(&["map", "show", "id", &id.to_string()]) else {
            continue;
        };
        if v["name"] == name {
            return Some((id, v["max_entries"].as_u64()?));
        }
    }
    None
}

/// Keys in BPF map `id` now, counted by the kernel's own dump (`bpftool map dump id`).
pub fn bpf_map_keys(id: u64) -> u64 {
    let args = ["map", "dump", "id", &id.to_string()];
    let v = bpftool_json(&args).unwrap_or_else(|| panic!("bpftool {args:?} failed"));
    v.as_array().expect("a dump is an array").len() as u64
}

/// `bpftool -j ARGS`'s JSON, or `None` (its error printed) if it failed.
fn bpftool_json(args: &[&str]) -> Option<serde_json::Value> {
    let out = Command::new("bpftool")
        .arg("-j")
        .args(args)
        .output()
        .expect("run bpftool");
    if !out.status.success() {
        eprintln!(
            "bpftool {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    Some(serde_json::from_slice(&out.stdout).expect("bpftool JSON"))
}

/// Ids of all BPF programs and links in the kernel now, according to `bpftool`.
pub fn bpftool_ids() -> (BTreeSet<u64>, BTreeSet<u64>) {
    let ids = |what: &str| -> BTreeSet<u64> {
        let v =
            bpftool_json(&[what, "show"]).unwrap_or_else(|| panic!("bpftool {what} show failed"));
        v.as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["id"].as_u64())
            .collect()
    };
    (ids("prog"), ids("link"))
}

/// The whitespace-separated values of line `key` (e.g. `"Uid:"`) of a `/proc/PID/status` text.
pub fn status_fields(status: &str, key: &str) -> Vec<String> {
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in {status}"));
    line.split_whitespace().skip(1).map(String::from).collect()
}

/// A copy of dd under a distinctive name, so the submitter can be recognised.
pub fn named_dd(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("blkobs-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    if !p.exists() {
        std::fs::copy("/usr/bin/dd", &p).unwrap();
    }
    p
}
