//! cgroup v2 fixtures: a fresh group (removed on drop) to run a writer in, its `io.stat`,
//! controllers enabled below the root for a test, and where the io controller is mounted.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use super::{run_ok, unique};

/// The cgroup v2 mount: `/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host.
pub fn v2_root() -> PathBuf {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        PathBuf::from("/sys/fs/cgroup")
    } else {
        PathBuf::from("/sys/fs/cgroup/unified")
    }
}

/// A fresh cgroup v2 group directly under the v2 root; removed on drop (after its processes
/// exited).
pub struct Group {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path as the daemon shows it ("/name").
    pub rel: String,
}

impl Group {
    pub fn new(prefix: &str) -> Group {
        let name = unique(prefix);
        let dir = v2_root().join(&name);
        std::fs::create_dir(&dir).unwrap();
        Group {
            dir,
            rel: format!("/{name}"),
        }
    }

    /// Its cgroup v2 id: the inode number of its directory (kernfs id, 64-bit hosts).
    pub fn id(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&self.dir).unwrap().ino()
    }

    /// Runs `prog args` inside the group (a shell moves itself in, then execs), waiting for it.
    pub fn run(&self, prog: &Path, args: &[&str]) {
        run_ok(
            Command::new("sh")
                .args([
                    "-c",
                    "echo $$ > \"$1/cgroup.procs\" && shift && exec \"$@\"",
                    "sh",
                ])
                .arg(&self.dir)
                .arg(prog)
                .args(args),
        );
    }

    /// `wbytes` of the group's `io.stat` on disk `maj:min` (0 if the line is absent: no I/O).
    pub fn io_stat_wbytes(&self, majmin: &str) -> u64 {
        self.io_stat(majmin, "wbytes")
    }

    /// Field `key` (`rbytes`, `wbytes`, `rios`, `wios`, `dbytes`, `dios`) of the group's
    /// `io.stat` on disk `maj:min` (0 if the line is absent: no I/O). Counted per bio at
    /// submission (block/blk-cgroup.c blk_cgroup_bio_start).
    pub fn io_stat(&self, majmin: &str, key: &str) -> u64 {
        let text = std::fs::read_to_string(self.dir.join("io.stat")).unwrap();
        let prefix = format!("{key}=");
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(majmin))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(prefix.as_str()))
                    .map(|v| v.parse().unwrap())
            })
            .unwrap_or(0)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Controllers enabled in the v2 root's `cgroup.subtree_control` for a test; the ones this
/// guard enabled are disabled again on drop.
pub struct Subtree {
    added: Vec<String>,
}

impl Subtree {
    /// Enables `controllers` (e.g. "io") below the v2 root; `None` if one is not available.
    pub fn enable(controllers: &[&str]) -> Option<Subtree> {
        let root = v2_root();
        let avail = std::fs::read_to_string(root.join("cgroup.controllers")).ok()?;
        let on = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
        let mut s = Subtree { added: Vec::new() };
        for c in controllers {
            if !avail.split_whitespace().any(|a| a == *c) {
                return None;
            }
            if on.split_whitespace().any(|a| a == *c) {
                continue;
            }
            std::fs::write(root.join("cgroup.subtree_control"), format!("+{c}")).ok()?;
            s.added.push(c.to_string());
        }
        Some(s)
    }
}

impl Drop for Subtree {
    fn drop(&mut self) {
        for c in self.added.iter().rev() {
            let _ = std::fs::write(v2_root().join("cgroup.subtree_control"), format!("-{c}"));
        }
    }
}

/// The hierarchy the io controller (`blkio` in /proc/cgroups) is on: 0 = cgroup v2.
pub fn io_hierarchy() -> u32 {
    std::fs::read_to_string("/proc/cgroups")
        .unwrap()
        .lines()
        .find(|l| l.split_whitespace().next() == Some("blkio"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|h| h.parse().unwrap())
        .unwrap_or(0)
}
