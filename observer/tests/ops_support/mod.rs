//! Helpers shared by the integration tests: guards that always clean up (loop devices, daemon
//! and tool processes, temp dirs), the CI skip/fail rule, and small HTTP/bpftool helpers.
//!
//! Rule: a test that cannot run here (not root, tool missing) panics when `CI=true`, and
//! otherwise prints why and returns (skips).
#![allow(dead_code)]

use std::{
    collections::BTreeSet,
    io::Read,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
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

/// Checks a prerequisite. Returns false (after printing) when the test should be skipped;
/// panics in CI.
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    skip(&format!("{what} (scripts/provision.sh installs the tools; tests run as root)"))
}

/// Whether the test runs as root.
pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Finds an executable on PATH (or an absolute path that exists).
pub fn which(bin: &str) -> Option<PathBuf> {
    if bin.starts_with('/') {
        return Path::new(bin).is_file().then(|| PathBuf::from(bin));
    }
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(bin)).find(|p| p.is_file()))
}

/// Root plus every tool in `tools`; see [`require`].
pub fn require_root_and(tools: &[&str]) -> bool {
    if !require(is_root(), "must run as root (loads eBPF programs, creates loop devices)") {
        return false;
    }
    tools.iter().all(|t| require(which(t).is_some(), &format!("`{t}` not found on PATH")))
}

/// Repository root (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The daemon binary built by cargo for these tests.
pub fn observer_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_observer"))
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

/// A unique name for this process and call.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::SeqCst))
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

/// A loop device over a file in /dev/shm; detached and the file removed on drop.
pub struct LoopDev {
    /// `/dev/loopN`.
    pub path: PathBuf,
    /// `loopN`.
    pub name: String,
    file: PathBuf,
}

impl LoopDev {
    /// Creates a `size_mib` loop device (scheduler left as the kernel chose).
    pub fn new(size_mib: u64) -> Self {
        let file = PathBuf::from("/dev/shm").join(format!("{}.img", unique("blkobs-test")));
        let f = std::fs::File::create(&file).expect("create backing file in /dev/shm");
        f.set_len(size_mib << 20).unwrap();
        drop(f);
        let out = Command::new("losetup").args(["--find", "--show"]).arg(&file).output().expect("run losetup");
        if !out.status.success() {
            let _ = std::fs::remove_file(&file);
            panic!("losetup failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        Self { path, name, file }
    }

    /// Writes `count` 4 KiB blocks with O_DIRECT at `seek_blocks` (real requests on the device).
    pub fn write_direct(&self, seek_blocks: u64, count: u64) {
        let st = Command::new("dd")
            .args(["if=/dev/zero", "bs=4k", "oflag=direct,dsync", "status=none"])
            .arg(format!("of={}", self.path.display()))
            .arg(format!("seek={seek_blocks}"))
            .arg(format!("count={count}"))
            .status()
            .expect("run dd");
        assert!(st.success(), "dd on {} failed", self.path.display());
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        for _ in 0..20 {
            match Command::new("losetup").arg("-d").arg(&self.path).status() {
                Ok(s) if s.success() => break,
                _ => std::thread::sleep(Duration::from_millis(250)),
            }
        }
        let _ = std::fs::remove_file(&self.file);
    }
}

/// A child process killed (SIGKILL) and reaped on drop unless it already exited.
pub struct ChildGuard {
    /// The process.
    pub child: Child,
    /// What it is, for messages.
    pub what: String,
}

impl ChildGuard {
    /// Spawns `cmd` with stdout/stderr to `log`.
    pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> Self {
        let f = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null()).stdout(f.try_clone().unwrap()).stderr(f);
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Self { child, what: what.into() }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits for exit up to `timeout`; None if still running.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET a URL; Err on transport errors or non-2xx.
pub fn http_get(url: &str) -> Result<String, String> {
    match ureq::get(url).timeout(Duration::from_secs(10)).call() {
        Ok(r) => {
            let mut s = String::new();
            r.into_reader().read_to_string(&mut s).map_err(|e| e.to_string())?;
            Ok(s)
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Polls `f` every 100 ms until it returns Some or `timeout` passes.
pub fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the daemon with `args` (stderr/stdout to `log`) and waits until /healthz answers.
pub fn start_observer(cmd: Command, port: u16, log: &Path) -> ChildGuard {
    let mut d = ChildGuard::spawn(cmd, "observer", log);
    let up = wait_for(Duration::from_secs(30), || {
        if !d.running() {
            return Some(false);
        }
        http_get(&format!("http://127.0.0.1:{port}/healthz")).ok().map(|_| true)
    });
    if up != Some(true) {
        panic!("observer did not come up on port {port}; log:\n{}", std::fs::read_to_string(log).unwrap_or_default());
    }
    d
}

/// BPF program and link ids held open by a process (from /proc/PID/fdinfo).
pub fn bpf_ids_of(pid: i32) -> (BTreeSet<u64>, BTreeSet<u64>) {
    let (mut progs, mut links) = (BTreeSet::new(), BTreeSet::new());
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else { return (progs, links) };
    for e in dir.flatten() {
        let Ok(info) = std::fs::read_to_string(e.path()) else { continue };
        let field = |k: &str| {
            info.lines().find_map(|l| l.strip_prefix(k).and_then(|v| v.trim().parse::<u64>().ok()))
        };
        if let Some(id) = field("link_id:") {
            links.insert(id);
        } else if let Some(id) = field("prog_id:") {
            progs.insert(id);
        }
    }
    (progs, links)
}

/// Ids of all BPF programs and links in the kernel now, according to `bpftool`.
pub fn bpftool_ids() -> (BTreeSet<u64>, BTreeSet<u64>) {
    let ids = |what: &str| -> BTreeSet<u64> {
        let out = Command::new("bpftool").args(["-j", what, "show"]).output().expect("run bpftool");
        assert!(out.status.success(), "bpftool {what} show failed: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bpftool JSON");
        v.as_array().unwrap().iter().filter_map(|e| e["id"].as_u64()).collect()
    };
    (ids("prog"), ids("link"))
}
