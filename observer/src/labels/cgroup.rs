//! cgroup v2 ids (captured by the programs at submission) → cgroup paths, for the submitter of
//! each request in `/stalls` and `/inflight`, and the owner's `cgroup` label of `/metrics`.

use std::{
    collections::BTreeMap,
    sync::{Mutex, MutexGuard},
};

/// The `cgroup` label values of owner cgroup ids, kept across scrapes ([`owner_labels`]).
static OWNER_LABELS: Mutex<LabelNames> = Mutex::new(LabelNames::new());

/// The process-wide cache of owner cgroup labels (`[cgroups] label`), locked.
pub fn owner_labels() -> MutexGuard<'static, LabelNames> {
    OWNER_LABELS.lock().expect("owner labels lock")
}

static CGROUP_ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// Sets where the cgroup v2 tree is: `<host_root>/sys/fs/cgroup` (or `/sys/fs/cgroup`), or its
/// `unified/` subdirectory on a hybrid (v1 + v2) host. Checked by filesystem magic, so a v1
/// hierarchy is never searched for v2 ids. Call once at startup.
pub fn set_cgroup_root(host_root: Option<&std::path::Path>) {
    let _ = CGROUP_ROOT.set(find_cgroup2_root(
        host_root.unwrap_or(std::path::Path::new("/")),
    ));
}

fn find_cgroup2_root(root: &std::path::Path) -> std::path::PathBuf {
    const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
    let base = root.join("sys/fs/cgroup");
    for cand in [base.clone(), base.join("unified")] {
        let Ok(c) = std::ffi::CString::new(cand.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: statfs is plain old data: all zeroes is a valid value.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and statfs buffer.
        if unsafe { libc::statfs(c.as_ptr(), &mut st) } == 0
            && st.f_type as i64 == CGROUP2_SUPER_MAGIC
        {
            return cand;
        }
    }
    base
}

fn cgroup_root() -> &'static std::path::Path {
    CGROUP_ROOT.get_or_init(|| find_cgroup2_root(std::path::Path::new("/")))
}

/// cgroup v2 id → path, by the inode numbers of the cgroup v2 tree's directories (kernfs ids).
#[derive(Default)]
pub struct CgroupNames(BTreeMap<u64, Option<String>>);

impl CgroupNames {
    /// Path of a cgroup id ("/" for the root), cached.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        self.0
            .entry(id)
            .or_insert_with(|| find_cgroup(cgroup_root(), id, 0))
            .clone()
    }
}

/// cgroup id → path for the `cgroup` label of `/metrics`, kept across scrapes: a path once
/// found is kept (cgroup ids are not reused while the host runs: a 64-bit kernfs id carries a
/// generation), an id not found is looked up again at most every [`LabelNames::RETRY`].
#[derive(Default)]
pub struct LabelNames {
    found: BTreeMap<u64, String>,
    missing: BTreeMap<u64, std::time::Instant>,
}

impl LabelNames {
    /// An empty cache.
    pub const fn new() -> LabelNames {
        LabelNames {
            found: BTreeMap::new(),
            missing: BTreeMap::new(),
        }
    }

    /// How long an id that was not in the cgroup tree waits before it is looked up again.
    pub const RETRY: std::time::Duration = std::time::Duration::from_secs(10);

    /// The label value of cgroup `id`: its path ("/" for the root), `""` for 0 (owner
    /// unknown), `id:<id>` for a cgroup not (or no longer) in the tree.
    pub fn label(&mut self, id: u64) -> String {
        if id == 0 {
            return String::new();
        }
        if let Some(p) = self.found.get(&id) {
            return p.clone();
        }
        let now = std::time::Instant::now();
        let due = self
            .missing
            .get(&id)
            .is_none_or(|t| now.duration_since(*t) >= Self::RETRY);
        if due {
            if let Some(p) = find_cgroup(cgroup_root(), id, 0) {
                self.missing.remove(&id);
                self.found.insert(id, p.clone());
                return p;
            }
            self.missing.insert(id, now);
        }
        format!("id:{id}")
    }
}

impl LabelNames {
    /// Whether cgroup `id` is no longer in the tree: its known path is gone or is another
    /// cgroup now (a different inode), or it was never found (looked up again at most every
    /// [`LabelNames::RETRY`]). False for 0 (owner unknown).
    pub fn gone(&mut self, id: u64) -> bool {
        use std::os::unix::fs::MetadataExt;
        if id == 0 {
            return false;
        }
        match self.found.get(&id) {
            Some(p) => std::fs::metadata(cgroup_root().join(p.trim_start_matches('/')))
                .map_or(true, |m| m.ino() != id),
            None => self.label(id).starts_with("id:"),
        }
    }
}

fn find_cgroup(dir: &std::path::Path, id: u64, depth: u32) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).ok()?;
    if meta.ino() == id {
        let rel = dir.strip_prefix(cgroup_root()).ok()?;
        return Some(format!("/{}", rel.display()));
    }
    if depth > 8 {
        return None;
    }
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            if let Some(p) = find_cgroup(&e.path(), id, depth + 1) {
                return Some(p);
            }
        }
    }
    None
}
