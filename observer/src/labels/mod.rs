//! Label values decoded from kernel numbers, in one place: device numbers → kernel device
//! names, `blk_status_t` → status names, class bits → op/flags/rwbs, stall kinds, task comms,
//! cgroup ids → cgroup paths ([`cgroup`]). Used by the exposition, the `/stalls` reports and
//! the histogram windows alike.

mod cgroup;

use std::{collections::BTreeMap, path::Path, sync::Mutex};

pub use cgroup::{owner_labels, set_cgroup_root, CgroupNames, LabelNames};

use observer_common::{
    class::{Class, FLAGS},
    maps::{dev_major, dev_minor, STALL_DEVICE},
};
use serde::Serialize;

/// The last name each device number resolved to, for disks that went away: their series keep
/// their name until [`crate::collect::gone`] forgets them ([`forget_device_name`]).
static LAST_NAMES: Mutex<BTreeMap<u32, String>> = Mutex::new(BTreeMap::new());

/// The kernel's name for a disk (`vda`, `loop0`, `nvme0n1`), from the `/sys/dev/block/MAJ:MIN`
/// symlink. Looked up on every call, so a device number reused by a new device is named
/// correctly. For a disk that is gone: the last name it had, or `MAJ:MIN` if it never had one
/// while the daemon ran (or was forgotten).
pub fn device_name(dev: u32) -> String {
    let id = format!("{}:{}", dev_major(dev), dev_minor(dev));
    let mut last = LAST_NAMES.lock().expect("device names lock");
    match resolve(Path::new("/sys/dev/block"), &id) {
        Some(name) => {
            if last.get(&dev) != Some(&name) {
                last.insert(dev, name.clone());
            }
            name
        }
        None => last.get(&dev).cloned().unwrap_or(id),
    }
}

/// Whether disk `dev` ([`observer_common::maps::mkdev`]) is bio-based (device-mapper, md,
/// zram, ...): it exists and has no `/sys/dev/block/MAJ:MIN/mq` directory, which
/// block/blk-mq-sysfs.c creates exactly for blk-mq queues (`queue->mq_ops` set, the test the
/// programs make at `block_bio_queue`). Its bios never become requests: they are tracked from
/// `block_bio_queue` to `block_bio_complete`, with no queue/device split. False for a disk
/// that is gone.
pub fn bio_based(dev: u32) -> bool {
    bio_based_in(Path::new("/sys/dev/block"), dev)
}

fn bio_based_in(sys_dev_block: &Path, dev: u32) -> bool {
    let d = sys_dev_block.join(format!("{}:{}", dev_major(dev), dev_minor(dev)));
    d.join("dev").exists() && !d.join("mq").exists()
}

/// A device-mapper disk's name and uuid (`/sys/block/<disk>/dm/name`, `dm/uuid`,
/// drivers/md/dm-sysfs.c), e.g. `("vg0-data", "LVM-...")`; `None` for any other disk. The uuid
/// is empty when the table has none.
pub fn device_mapper_name(disk: &str) -> Option<(String, String)> {
    device_mapper_name_in(Path::new("/sys/block"), disk)
}

fn device_mapper_name_in(sys_block: &Path, disk: &str) -> Option<(String, String)> {
    if disk.is_empty() || disk.contains('/') || disk.starts_with('.') {
        return None;
    }
    let dm = sys_block.join(disk).join("dm");
    let name = std::fs::read_to_string(dm.join("name")).ok()?;
    let uuid = std::fs::read_to_string(dm.join("uuid")).unwrap_or_default();
    Some((name.trim_end().to_string(), uuid.trim_end().to_string()))
}

/// Remembers `name` for `dev`: a hidden disk (an NVMe multipath path `nvmeXcYnZ`) has no
/// `/sys/dev/block` entry to resolve, so [`device_name`] names it from here (the disk scan
/// calls this for every hidden disk of each tick's scan, `bpf::devslots::DevSlots::rescan`).
pub fn remember_device_name(dev: u32, name: &str) {
    let mut last = LAST_NAMES.lock().expect("device names lock");
    if last.get(&dev).map(String::as_str) != Some(name) {
        last.insert(dev, name.to_string());
    }
}

/// Drops the remembered name of a forgotten device number (see [`device_name`]).
pub fn forget_device_name(dev: u32) {
    LAST_NAMES.lock().expect("device names lock").remove(&dev);
}

fn resolve(sys_dev_block: &Path, id: &str) -> Option<String> {
    std::fs::read_link(sys_dev_block.join(id))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

#[cfg(test)]
fn device_name_in(sys_dev_block: &Path, dev: u32) -> String {
    let id = format!("{}:{}", dev_major(dev), dev_minor(dev));
    resolve(sys_dev_block, &id).unwrap_or(id)
}

/// Name of a `blk_status_t` (include/linux/blk_types.h), lower case without `BLK_STS_`
/// (`ok`, `ioerr`, ...); `code_N` for a value this table does not know.
pub fn status_name(status: u8) -> String {
    const NAMES: [&str; 17] = [
        "ok",
        "notsupp",
        "timeout",
        "nospc",
        "transport",
        "target",
        "resv_conflict",
        "medium",
        "protection",
        "resource",
        "ioerr",
        "dm_requeue",
        "again",
        "dev_resource",
        "zone_open_resource",
        "zone_active_resource",
        "offline",
    ];
    NAMES
        .get(status as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("code_{status}"))
}

/// The `kind` of a stall (`StallEvent::stall`): `device` for [`STALL_DEVICE`] (requests at the
/// device, none completed), `dispatch` otherwise (requests queued, none dispatched).
pub fn stall_kind_name(kind: u32) -> &'static str {
    if kind == STALL_DEVICE {
        "device"
    } else {
        "dispatch"
    }
}

/// A task's `comm` as the kernel stores it (16 bytes, NUL-padded) → text.
pub fn comm(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// Op, flags and rwbs of a class, as the JSON API shows them (flattened into each record).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassInfo {
    /// `op` label value (`read`, `write`, `flush`, ...).
    pub op: &'static str,
    /// Set flags, as label names (`preflush`, `fua`, `sync`, `meta`, `readahead`, `log`).
    pub flags: Vec<&'static str>,
    /// blktrace rwbs letters, e.g. `FWFSM`.
    pub rwbs: String,
}

impl ClassInfo {
    /// Decodes a class word (see [`observer_common::class`]).
    pub fn of(class: u16) -> ClassInfo {
        let c = Class(class);
        ClassInfo {
            op: c.op().name(),
            flags: FLAGS
                .iter()
                .filter(|(b, _)| c.has(*b))
                .map(|(_, n)| *n)
                .collect(),
            rwbs: c.rwbs(&mut [0; 8]).to_string(),
        }
    }
}

/// `(label, value)` pairs of a (device, class) series: `device`, `op`, then every flag of
/// [`FLAGS`] as `"true"`/`"false"`, in that order (the order of the exported label set).
pub fn class_label_values(device: &str, class: Class) -> Vec<&str> {
    let mut v = vec![device, class.op().name()];
    for (bit, _) in FLAGS {
        v.push(if class.has(bit) { "true" } else { "false" });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_sysfs_with_fallback() {
        let dir = std::env::temp_dir().join(format!("obs-devtest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("../../devices/virtual/block/loop3", dir.join("7:3")).unwrap();
        assert_eq!(
            device_name_in(&dir, observer_common::maps::mkdev(7, 3)),
            "loop3"
        );
        assert_eq!(
            device_name_in(&dir, observer_common::maps::mkdev(259, 1)),
            "259:1"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Bio-based = present without `mq/`; dm names from `dm/name` and `dm/uuid` (fake sysfs).
    #[test]
    fn bio_based_disks_and_dm_names() {
        use observer_common::maps::mkdev;
        let dir = std::env::temp_dir().join(format!("obs-biobased-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (id, mq) in [("7:0", true), ("253:0", false)] {
            std::fs::create_dir_all(dir.join(id)).unwrap();
            std::fs::write(dir.join(id).join("dev"), format!("{id}\n")).unwrap();
            if mq {
                std::fs::create_dir_all(dir.join(id).join("mq")).unwrap();
            }
        }
        assert!(!bio_based_in(&dir, mkdev(7, 0)));
        assert!(bio_based_in(&dir, mkdev(253, 0)));
        assert!(
            !bio_based_in(&dir, mkdev(253, 1)),
            "gone: not known to be bio-based"
        );
        let dm = dir.join("dm-0/dm");
        std::fs::create_dir_all(&dm).unwrap();
        std::fs::write(dm.join("name"), "vg0-data\n").unwrap();
        std::fs::write(dm.join("uuid"), "LVM-abc\n").unwrap();
        std::fs::create_dir_all(dir.join("md0")).unwrap();
        assert_eq!(
            device_mapper_name_in(&dir, "dm-0"),
            Some(("vg0-data".into(), "LVM-abc".into()))
        );
        assert_eq!(device_mapper_name_in(&dir, "md0"), None);
        assert_eq!(device_mapper_name_in(&dir, "../dm-0"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn status_names() {
        assert_eq!(status_name(10), "ioerr");
        assert_eq!(status_name(200), "code_200");
    }
}
