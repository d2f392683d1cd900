//! A kernel sysctl set for the duration of a test and put back on drop.

/// A sysctl (`/proc/sys/<key with / for .>`) set by the test; its old value is written back on
/// drop.
pub struct Sysctl {
    path: String,
    /// The value before the test set it.
    pub old: String,
}

impl Sysctl {
    /// Sets `key` (e.g. `kernel.bpf_stats_enabled`) to `value`, asserting it reads back.
    pub fn set(key: &str, value: &str) -> Sysctl {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let old = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {path}: {e}"))
            .trim()
            .to_string();
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("writing {path}: {e}"));
        let s = Sysctl { path, old };
        assert_eq!(s.get(), value, "{key}");
        s
    }

    /// The value now.
    pub fn get(&self) -> String {
        std::fs::read_to_string(&self.path)
            .unwrap()
            .trim()
            .to_string()
    }

    /// Writes `value` (still restored to the old value on drop).
    pub fn write(&self, value: &str) {
        std::fs::write(&self.path, value).unwrap_or_else(|e| panic!("writing {}: {e}", self.path));
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}
