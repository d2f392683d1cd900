//! Where discovery looks: the mount table, sysfs and the device nodes, on the host or under
//! `--host-root`.

use std::path::{Path, PathBuf};

/// Where discovery looks.
#[derive(Clone, Debug)]
pub struct Sources {
    /// The mount table: `/proc/self/mountinfo`, or the host's `<host_root>/proc/1/mountinfo`.
    pub mountinfo: PathBuf,
    /// `/sys/dev/block` (sysfs lists every block device of the kernel, also in a container).
    pub sys_dev_block: PathBuf,
    /// Where device nodes are: `/dev`, or the host's `<host_root>/dev`.
    pub dev_root: PathBuf,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            mountinfo: "/proc/self/mountinfo".into(),
            sys_dev_block: "/sys/dev/block".into(),
            dev_root: "/dev".into(),
        }
    }
}

impl Sources {
    /// The sources for `--host-root DIR` (`host_root` in the config): the host's mount table
    /// from `DIR/proc/1/mountinfo` (PID 1 of the host's PID namespace: the host's mount
    /// namespace) and its device nodes under `DIR/dev`. Mount points in that table are host
    /// paths and are never opened: only the device numbers and types are used, and device
    /// nodes are found through `/sys/dev/block/M:m/uevent` (`DEVNAME`) under `DIR/dev`.
    /// `None` (or `/`): the daemon's own mount table and `/dev`.
    pub fn for_host_root(host_root: Option<&Path>) -> Sources {
        match host_root {
            Some(r) if r != Path::new("/") => Sources {
                mountinfo: r.join("proc/1/mountinfo"),
                sys_dev_block: "/sys/dev/block".into(),
                dev_root: r.join("dev"),
            },
            _ => Sources::default(),
        }
    }

    /// A device path from the mount table (`/dev/loop3`, a `logdev=` option) as seen here:
    /// under [`Sources::dev_root`]; `None` for a path outside `/dev`.
    pub fn dev_path(&self, p: &str) -> Option<String> {
        let rest = p.strip_prefix("/dev/")?;
        Some(self.dev_root.join(rest).display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_root_sources() {
        let s = Sources::for_host_root(Some(Path::new("/host")));
        assert_eq!(s.mountinfo, Path::new("/host/proc/1/mountinfo"));
        assert_eq!(s.dev_root, Path::new("/host/dev"));
        assert_eq!(s.dev_path("/dev/loop3").as_deref(), Some("/host/dev/loop3"));
        assert_eq!(
            s.dev_path("/dev/mapper/vg-lv").as_deref(),
            Some("/host/dev/mapper/vg-lv")
        );
        assert_eq!(s.dev_path("/srv/img"), None);
        let d = Sources::for_host_root(Some(Path::new("/")));
        assert_eq!(d.mountinfo, Path::new("/proc/self/mountinfo"));
        assert_eq!(Sources::for_host_root(None).dev_root, Path::new("/dev"));
    }
}
