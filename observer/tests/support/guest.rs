//! The kernel-matrix guests' qemu disks (xtask/src/vm_boot.rs, `GuestDisks`), found by serial,
//! and what the driver tests set on them (restored on drop).

use std::path::{Path, PathBuf};

use super::skip;

/// One disk in `/sys/block` whose serial is the one asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestDisk {
    /// Kernel name (`nvme0n1`, `vda`, `sda`, `nvme1c1n1`).
    pub name: String,
    /// `hidden` = 1: an NVMe multipath path disk (no device node, no sysfs `dev`).
    pub hidden: bool,
    /// Bio-based (no `mq/`): an NVMe multipath head.
    pub bio_based: bool,
}

impl GuestDisk {
    /// `/sys/block/<name>/<attr>`, trimmed ("" if unreadable).
    pub fn sysfs(&self, attr: &str) -> String {
        read(&Path::new("/sys/block").join(&self.name).join(attr))
    }

    /// `/dev/<name>`.
    pub fn path(&self) -> String {
        format!("/dev/{}", self.name)
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The serial a disk reports: `serial` (virtio-blk), `device/serial` (NVMe: the controller's,
/// space-padded), the unit serial number VPD page (`device/vpd_pg80`, SCSI: a 4-byte header,
/// then the serial), or a SCSI `device/wwid` that contains it.
fn serial_of(dir: &Path) -> Vec<String> {
    let mut out = vec![read(&dir.join("serial")), read(&dir.join("device/serial"))];
    if let Ok(b) = std::fs::read(dir.join("device/vpd_pg80")) {
        if b.len() > 4 {
            out.push(String::from_utf8_lossy(&b[4..]).trim().to_string());
        }
    }
    out.push(read(&dir.join("device/wwid")));
    out.retain(|s| !s.is_empty());
    out
}

/// Every disk with serial `serial` (a multipath namespace: its head and its path disks), by name.
pub fn disks_by_serial(serial: &str) -> Vec<GuestDisk> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let dir = e.path();
        let serials = serial_of(&dir);
        let matches = serials
            .iter()
            .any(|s| s == serial || (s.starts_with("t10.") && s.ends_with(serial)));
        if matches {
            out.push(GuestDisk {
                name: e.file_name().to_string_lossy().into_owned(),
                hidden: read(&dir.join("hidden")) == "1",
                bio_based: !dir.join("mq").exists(),
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The one visible disk with serial `serial`, or `None` after [`skip`] (which fails under CI):
/// outside the kernel-matrix guests there is none.
pub fn guest_disk(serial: &str) -> Option<GuestDisk> {
    let found: Vec<GuestDisk> = disks_by_serial(serial)
        .into_iter()
        .filter(|d| !d.hidden)
        .collect();
    match found.as_slice() {
        [d] => Some(d.clone()),
        [] => {
            skip(&format!(
                "no disk with serial {serial} in /sys/block (the kernel-matrix guests have it: cargo xtask vmtest)"
            ));
            None
        }
        more => panic!("{} disks with serial {serial}: {more:?}", more.len()),
    }
}

/// A queue attribute (`queue/<attr>`) of a disk set for a test and restored on drop.
pub struct QueueAttr {
    path: PathBuf,
    old: String,
}

impl QueueAttr {
    /// Sets `/sys/block/<disk>/queue/<attr>` to `value`; panics if the kernel refuses.
    pub fn set(disk: &str, attr: &str, value: &str) -> QueueAttr {
        let path = Path::new("/sys/block").join(disk).join("queue").join(attr);
        let mut old = read(&path);
        // `scheduler` reads "none [mq-deadline]": the bracketed one is the current one.
        if let (Some(a), Some(b)) = (old.find('['), old.find(']')) {
            old = old[a + 1..b].to_string();
        }
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("{}: {value}: {e}", path.display()));
        QueueAttr { path, old }
    }
}

impl Drop for QueueAttr {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, &self.old);
    }
}

/// Zeroes the first `mib` MiB of disk `dev` (`/dev/...`) with direct writes: whatever an
/// earlier test left there (a filesystem signature) is gone.
pub fn wipe_head(dev: &str, mib: u64) {
    super::sh(
        "dd",
        &[
            "if=/dev/zero",
            &format!("of={dev}"),
            "bs=1M",
            &format!("count={mib}"),
            "oflag=direct",
            "status=none",
        ],
    );
}
