//! How Linux lists its disks: `/sys/block/<disk>/` (`dev`, `size`, `hidden`, `mq/`, `dm/name`,
//! `slaves/`, `holders/`, `multipath/`, `queue/write_cache`, partitions), and /proc/diskstats
//! for the numbers of hidden disks.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use observer_common::maps::{dev_major, dev_minor, mkdev, nameless_dev_of};

/// Where the kernel lists every disk with its number, hidden ones included.
pub const PROC_DISKSTATS: &str = "/proc/diskstats";
/// Where the kernel lists the disks (whole disks only, hidden ones included).
pub const SYS_BLOCK: &str = "/sys/block";

/// One partition of a disk (`GET /devices` shows it as is).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Partition {
    /// Kernel name (`vda1`).
    pub name: String,
    /// `M:m` from sysfs.
    pub dev: String,
    /// First sector on the disk (512 B).
    pub start: u64,
    /// Size (sectors of 512 B).
    pub sectors: u64,
}

/// One entry of `/sys/block`. `GET /devices` shows it as is (with `name` as `device` and `dev`
/// as `M:m`), beside the disk's per-device slot and filesystems (`http::devices`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BlockDisk {
    /// Kernel name (`vda`, `md127`, `nvme0c1n1`).
    #[serde(rename = "device")]
    pub name: String,
    /// The number its I/O is counted under ([`disk_number`]): its sysfs `dev`; a hidden disk
    /// (an NVMe multipath path `nvmeXcYnZ`) has none: its /proc/diskstats number, or `0:N`
    /// from its name where that is 0:0 (5.10). `None` if it has none. Shown as `M:m`, empty
    /// for `None`.
    #[serde(serialize_with = "majmin")]
    pub dev: Option<u32>,
    /// Size (sectors of 512 B); 0: no media (a detached loop device, an empty drive).
    pub sectors: u64,
    /// `queue/write_cache`: `write back` or `write through` (empty if absent).
    pub write_cache: String,
    /// Bio-based: no `mq/` directory (device-mapper, md, zram, an NVMe multipath head): its
    /// bios are tracked from entry to completion, total stage only.
    pub bio_based: bool,
    /// A device-mapper disk's name (`dm/name`, e.g. `vg0-data`); `None` (null) for other
    /// disks.
    pub dm_name: Option<String>,
    /// The disks (or partitions) it sits on (`slaves/`: md0 → loop0, loop1; dm-0 → md0),
    /// sorted. An NVMe multipath head lists its path disks here too (`multipath/`,
    /// drivers/nvme/host/multipath.c: nvme0n1 → nvme0c0n1, nvme0c1n1).
    pub slaves: Vec<String>,
    /// The disks on top of it (`holders/`: loop0 → md0), sorted.
    pub holders: Vec<String>,
    /// A hidden disk (`hidden` = 1: an NVMe multipath path disk, no /dev node; its I/O is
    /// counted as its own).
    pub hidden: bool,
    /// Its partitions, by start sector.
    pub partitions: Vec<Partition>,
}

/// [`BlockDisk::dev`] as `GET /devices` writes it: `M:m`, or an empty string for `None`.
fn majmin<S: serde::Serializer>(dev: &Option<u32>, s: S) -> Result<S::Ok, S::Error> {
    match dev {
        Some(n) => s.collect_str(&format_args!("{}:{}", dev_major(*n), dev_minor(*n))),
        None => s.serialize_str(""),
    }
}

/// One scan of the disks.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    /// Every entry of `/sys/block`, by name.
    pub disks: Vec<BlockDisk>,
}

impl Inventory {
    /// Scans [`SYS_BLOCK`] (hidden disks' numbers from [`PROC_DISKSTATS`]).
    pub fn scan() -> Inventory {
        Inventory::scan_in(Path::new(SYS_BLOCK), Path::new(PROC_DISKSTATS))
    }

    /// Scans `sys_block`, reading `diskstats` (only) when a disk has no sysfs `dev`.
    pub fn scan_in(sys_block: &Path, diskstats: &Path) -> Inventory {
        let mut stats: Option<String> = None;
        let mut disks = Vec::new();
        for name in entries(sys_block) {
            let dir = sys_block.join(&name);
            let (dev, hidden_by_number) = disk_number(&dir, &name, || {
                stats
                    .get_or_insert_with(|| std::fs::read_to_string(diskstats).unwrap_or_default())
                    .clone()
            });
            disks.push(BlockDisk {
                dev,
                hidden: hidden_by_number || read(&dir.join("hidden")) == "1",
                sectors: read(&dir.join("size")).parse().unwrap_or(0),
                write_cache: read(&dir.join("queue/write_cache")),
                bio_based: !dir.join("mq").exists(),
                dm_name: std::fs::read_to_string(dir.join("dm/name"))
                    .ok()
                    .map(|n| n.trim_end().to_string()),
                slaves: {
                    let mut v = entries(&dir.join("slaves"));
                    v.extend(entries(&dir.join("multipath")));
                    v.sort();
                    v
                },
                holders: entries(&dir.join("holders")),
                partitions: partitions(&dir),
                name,
            });
        }
        Inventory { disks }
    }

    /// The numbers of the disks with media (size > 0), hidden disks included: the disks the
    /// programs count I/O of.
    pub fn present(&self) -> BTreeSet<u32> {
        self.disks
            .iter()
            .filter(|d| d.sectors > 0)
            .filter_map(|d| d.dev)
            .collect()
    }

    /// The disks with media that are hidden, with their numbers.
    pub fn hidden(&self) -> impl Iterator<Item = (u32, &str)> {
        self.disks
            .iter()
            .filter(|d| d.hidden && d.sectors > 0)
            .filter_map(|d| Some((d.dev?, d.name.as_str())))
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The names in a sysfs directory (`/sys/block`, `slaves/`, `holders/`, `multipath/`),
/// sorted; empty if there is none.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The partitions of the disk at sysfs directory `dir` (subdirectories with a `partition`
/// file), by start sector.
fn partitions(dir: &Path) -> Vec<Partition> {
    let mut partitions = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p: PathBuf = e.path();
        if p.join("partition").exists() {
            partitions.push(Partition {
                name: e.file_name().to_string_lossy().into_owned(),
                dev: read(&p.join("dev")),
                start: read(&p.join("start")).parse().unwrap_or(0),
                sectors: read(&p.join("size")).parse().unwrap_or(0),
            });
        }
    }
    partitions.sort_by_key(|p| p.start);
    partitions
}

/// The number the programs count the requests of disk `name` (its `/sys/block` directory
/// `dir`) under, and whether it is a hidden disk (no `dev` in sysfs). A disk's sysfs `dev`; a
/// hidden disk (GENHD_FL_HIDDEN: an NVMe multipath path `nvmeXcYnZ`, behind its bio-based head
/// `nvmeXnY`) has none, nor a `/sys/dev/block` entry, on every kernel, but is in
/// /proc/diskstats (`diskstats()` gives its text) with its own counts: under the number there
/// (6.1, 6.12: its allocated dev_t, e.g. 259:3), or, where that reads `0 0` (5.10: no dev_t for
/// hidden disks), the [`nameless_dev_of`] its name, as the programs compute it from
/// `gendisk::disk_name` (observer-ebpf kernel.rs, `disk_dev`). `None`: neither.
pub fn disk_number(
    dir: &Path,
    name: &str,
    diskstats: impl FnOnce() -> String,
) -> (Option<u32>, bool) {
    if let Ok(dev) = std::fs::read_to_string(dir.join("dev")) {
        return (parse_dev(&dev), false);
    }
    let text = diskstats();
    let line = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[2] == name);
    let Some(f) = line else {
        return (None, false);
    };
    let dev = parse_dev(&format!("{}:{}", f[0], f[1]));
    match dev {
        Some(0) => (Some(nameless_dev_of(name.as_bytes())), true),
        other => (other, true),
    }
}

/// `"M:m"` (sysfs `dev`) as `mkdev`.
pub fn parse_dev(s: &str) -> Option<u32> {
    let (maj, min) = s.trim().split_once(':')?;
    Some(mkdev(maj.parse().ok()?, min.parse().ok()?))
}
