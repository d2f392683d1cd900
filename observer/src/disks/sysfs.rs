//! How Linux lists its disks: `/sys/block/<disk>/` (`dev`, `size`, `hidden`, `mq/`, `dm/name`,
//! `slaves/`, `holders/`, `multipath/`, `queue/write_cache`, partitions, and what identifies
//! the drive: [`Identity`]), and /proc/diskstats for the numbers of hidden disks.

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
    /// A device-mapper disk's uuid (`dm/uuid`; empty if its table has none or it is no
    /// device-mapper disk). Not shown by `GET /devices`.
    #[serde(skip)]
    pub dm_uuid: String,
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
    /// What the drive is and how its queue is set up ([`Identity::read`]).
    pub identity: Identity,
}

/// What identifies a disk across a fleet and how its queue is set up, from sysfs, as
/// node_exporter's `node_disk_info` gives it (which reads udev's database; these are the sysfs
/// files udev's values come from). Text fields are empty where the driver has none (loop, dm,
/// md, zram: no `device/`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Identity {
    /// Drive model: `device/model` (SCSI: drivers/scsi/scsi_sysfs.c, the INQUIRY product id;
    /// NVMe: the controller's, or for a multipath head the subsystem's, `model`,
    /// drivers/nvme/host/sysfs.c), trimmed.
    pub model: String,
    /// Serial number: `device/serial` (NVMe), `serial` (virtio-blk:
    /// drivers/block/virtio_blk.c, the `serial=` qemu gives the drive), or the unit serial
    /// number VPD page `device/vpd_pg80` (SCSI: SPC-4 7.8.15, ASCII from byte 4), trimmed.
    pub serial: String,
    /// World wide identifier: `wwid` (NVMe namespace: `eui.`, `nguid.` or `nvme.` form) or
    /// `device/wwid` (SCSI: `naa.`, `t10.`, ...). Not udev's `ID_WWN` (`0x...`), which
    /// node_exporter exports as `wwn`.
    pub wwid: String,
    /// Firmware revision: `device/firmware_rev` (NVMe) or `device/rev` (SCSI), trimmed.
    pub revision: String,
    /// `queue/rotational`: the driver says it seeks (loop devices inherit it from the file's
    /// disk on recent kernels).
    pub rotational: bool,
    /// `queue/logical_block_size` (bytes): the smallest unit the disk addresses.
    pub logical_block_size: u32,
    /// `queue/physical_block_size` (bytes): the smallest unit it writes without a
    /// read-modify-write.
    pub physical_block_size: u32,
    /// The I/O scheduler in use: the bracketed name in `queue/scheduler` (`none`,
    /// `mq-deadline`, `kyber`, `bfq`); `none` for bio-based disks, which have no scheduler.
    pub scheduler: String,
    /// `queue/fua` (Linux ≥ 4.18): the disk takes writes with REQ_FUA itself; otherwise the
    /// block layer turns each into the write followed by a cache flush (block/blk-flush.c).
    pub fua: bool,
    /// `queue/zoned`: `none`, `host-aware` or `host-managed` (block/blk-sysfs.c; `none` where
    /// the file is missing).
    pub zoned: String,
    /// Zone size (bytes) of a zoned disk: `queue/chunk_sectors` × 512 (the block layer keeps
    /// the zone size there); 0 for a disk that is not zoned.
    pub zone_size_bytes: u64,
    /// `queue/max_open_zones` (5.9+; 0: no limit, or not zoned).
    pub max_open_zones: u32,
    /// `queue/max_active_zones` (5.9+; 0: no limit, or not zoned).
    pub max_active_zones: u32,
}

impl Identity {
    /// Reads the identity of the disk at sysfs directory `dir` (`/sys/block/<disk>`); the drive
    /// fields (model, serial, wwid, revision) are `drive`'s where given (the same disk seen
    /// before), the queue's are read every time. Missing files give empty text, 0 sizes, false.
    pub fn read(dir: &Path, drive: Option<&Identity>) -> Identity {
        let device = dir.join("device");
        let first = |files: &[PathBuf]| {
            files
                .iter()
                .map(|f| read(f))
                .find(|v| !v.is_empty())
                .unwrap_or_default()
        };
        let scheduler = read(&dir.join("queue/scheduler"));
        let queue = Identity {
            rotational: read(&dir.join("queue/rotational")) == "1",
            logical_block_size: read(&dir.join("queue/logical_block_size"))
                .parse()
                .unwrap_or(0),
            physical_block_size: read(&dir.join("queue/physical_block_size"))
                .parse()
                .unwrap_or(0),
            scheduler: active_scheduler(&scheduler),
            fua: read(&dir.join("queue/fua")) == "1",
            ..zones(dir)
        };
        if let Some(d) = drive {
            return Identity {
                model: d.model.clone(),
                serial: d.serial.clone(),
                wwid: d.wwid.clone(),
                revision: d.revision.clone(),
                ..queue
            };
        }
        Identity {
            model: read(&device.join("model")),
            serial: {
                let s = first(&[device.join("serial"), dir.join("serial")]);
                if s.is_empty() {
                    std::fs::read(device.join("vpd_pg80"))
                        .map(|b| vpd_serial(&b))
                        .unwrap_or_default()
                } else {
                    s
                }
            },
            wwid: first(&[dir.join("wwid"), device.join("wwid")]),
            revision: first(&[device.join("firmware_rev"), device.join("rev")]),
            ..queue
        }
    }
}

/// The zone facts of the disk at `dir` ([`Identity::zoned`] and the three after it).
fn zones(dir: &Path) -> Identity {
    let zoned = read(&dir.join("queue/zoned"));
    let zoned = if zoned.is_empty() {
        "none".into()
    } else {
        zoned
    };
    let num = |f: &str| read(&dir.join("queue").join(f)).parse::<u64>().unwrap_or(0);
    let is_zoned = zoned != "none";
    Identity {
        zone_size_bytes: if is_zoned {
            num("chunk_sectors") * 512
        } else {
            0
        },
        max_open_zones: num("max_open_zones") as u32,
        max_active_zones: num("max_active_zones") as u32,
        zoned,
        ..Identity::default()
    }
}

/// The scheduler in use from `queue/scheduler` (`none [mq-deadline] kyber` → `mq-deadline`;
/// a bio-based disk's file reads `none`, one without the file nothing: `none` too).
fn active_scheduler(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or("none")
        .to_string()
}

/// The product serial number of a SCSI unit serial number VPD page (0x80): the page length is
/// bytes 2..4 (big-endian), the ASCII serial follows from byte 4; trimmed of the spaces and
/// NULs drives pad it with. Empty for anything else.
fn vpd_serial(page: &[u8]) -> String {
    if page.len() < 4 || page[1] != 0x80 {
        return String::new();
    }
    let len = u16::from_be_bytes([page[2], page[3]]) as usize;
    let end = (4 + len).min(page.len());
    String::from_utf8_lossy(&page[4..end])
        .trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .to_string()
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
        Inventory::scan_after(sys_block, diskstats, &Inventory::default())
    }

    /// [`Inventory::scan_in`], keeping the drive identity (model, serial, wwid, revision) of
    /// the disks `prev` has under the same name and number instead of reading it again: a
    /// virtio-blk `serial` read sends the device a request (GET_ID, drivers/block/virtio_blk.c),
    /// so it is read once per disk appearance, not every tick.
    pub fn scan_after(sys_block: &Path, diskstats: &Path, prev: &Inventory) -> Inventory {
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
                dm_uuid: std::fs::read_to_string(dir.join("dm/uuid"))
                    .map(|n| n.trim_end().to_string())
                    .unwrap_or_default(),
                slaves: {
                    let mut v = entries(&dir.join("slaves"));
                    v.extend(entries(&dir.join("multipath")));
                    v.sort();
                    v
                },
                holders: entries(&dir.join("holders")),
                partitions: partitions(&dir),
                identity: Identity::read(
                    &dir,
                    prev.disks
                        .iter()
                        .find(|p| p.name == name && p.dev == dev)
                        .map(|p| &p.identity),
                ),
                name,
            });
        }
        Inventory { disks }
    }

    /// Whether a scan now would find `prev` again in what changes while the set of disks stays
    /// the same: the names in `sys_block` (in order), and each disk's number, size (a loop
    /// device attached or detached keeps its name), active scheduler and write cache (set by
    /// hand or by udev rules at any time). Four reads per disk instead of a scan's ~17
    /// (`open` and path walks under sysfs: most of an idle daemon's CPU, 1.1 % of a core with
    /// 37 disks: BENCHMARKS.md). The rest (holders, slaves, partitions, dm names, the other queue
    /// attributes, the drive's identity) changes when a disk appears or goes (a stack assembled
    /// or taken apart), or not at all; [`super::DiskView::tick`] scans in full every
    /// [`super::FULL_SCAN_TICKS`] ticks besides.
    pub fn unchanged(sys_block: &Path, diskstats: &Path, prev: &Inventory) -> bool {
        let names = entries(sys_block);
        if names.len() != prev.disks.len() {
            return false;
        }
        let mut stats: Option<String> = None;
        names.iter().zip(&prev.disks).all(|(name, p)| {
            let dir = sys_block.join(name);
            *name == p.name
                && disk_number(&dir, name, || {
                    stats
                        .get_or_insert_with(|| {
                            std::fs::read_to_string(diskstats).unwrap_or_default()
                        })
                        .clone()
                })
                .0 == p.dev
                && read(&dir.join("size")).parse().unwrap_or(0) == p.sectors
                && active_scheduler(&read(&dir.join("queue/scheduler"))) == p.identity.scheduler
                && read(&dir.join("queue/write_cache")) == p.write_cache
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An NVMe namespace (identity from its controller), a SCSI disk (serial from VPD page
    /// 0x80), a virtio-blk disk (its own `serial`) and a dm disk (nothing but its queue).
    #[test]
    fn identity_of_nvme_scsi_virtio_and_dm() {
        let dir = std::env::temp_dir().join(format!("obs-identity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let put = |f: &str, v: &[u8]| {
            let p = dir.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        put(
            "nvme0n1/device/model",
            b"QEMU NVMe Ctrl                          \n",
        );
        put("nvme0n1/device/serial", b"blkobs0             \n");
        put("nvme0n1/device/firmware_rev", b"7.2.22  \n");
        put(
            "nvme0n1/wwid",
            b"nvme.1b36-626c6b6f627330-51454d55204e564d65204374726c-00000001\n",
        );
        put("nvme0n1/queue/rotational", b"0\n");
        put("nvme0n1/queue/logical_block_size", b"512\n");
        put("nvme0n1/queue/physical_block_size", b"512\n");
        put(
            "nvme0n1/queue/scheduler",
            b"[none] mq-deadline kyber bfq \n",
        );
        put("nvme0n1/queue/fua", b"1\n");
        put("sda/device/model", b"QEMU HARDDISK   \n");
        put("sda/device/rev", b"2.5+\n");
        put("sda/device/wwid", b"t10.ATA     QEMU HARDDISK   QM00001\n");
        put("sda/device/vpd_pg80", b"\x00\x80\x00\x0c  blkobs-sd\0\0\0");
        put("sda/queue/rotational", b"1\n");
        put("sda/queue/scheduler", b"none [mq-deadline] kyber bfq\n");
        put("vdc/serial", b"blkobs-vdc\n");
        put("vdc/queue/logical_block_size", b"4096\n");
        put("dm-0/queue/scheduler", b"none\n");
        let nvme = Identity::read(&dir.join("nvme0n1"), None);
        assert_eq!(nvme.model, "QEMU NVMe Ctrl");
        assert_eq!(nvme.serial, "blkobs0");
        assert_eq!(nvme.revision, "7.2.22");
        assert!(nvme.wwid.starts_with("nvme.1b36-"));
        assert_eq!(
            (nvme.logical_block_size, nvme.physical_block_size),
            (512, 512)
        );
        assert_eq!(nvme.scheduler, "none");
        assert!(nvme.fua && !nvme.rotational);
        let sda = Identity::read(&dir.join("sda"), None);
        assert_eq!(
            (
                sda.model.as_str(),
                sda.serial.as_str(),
                sda.revision.as_str()
            ),
            ("QEMU HARDDISK", "blkobs-sd", "2.5+")
        );
        assert_eq!(sda.wwid, "t10.ATA     QEMU HARDDISK   QM00001");
        assert_eq!(sda.scheduler, "mq-deadline");
        assert!(sda.rotational && !sda.fua);
        assert_eq!((sda.zoned.as_str(), sda.zone_size_bytes), ("none", 0));
        // A host-managed disk: its zone size is queue/chunk_sectors.
        put("nullb0/queue/zoned", b"host-managed\n");
        put("nullb0/queue/chunk_sectors", b"32768\n");
        put("nullb0/queue/max_open_zones", b"8\n");
        put("nullb0/queue/max_active_zones", b"12\n");
        let z = Identity::read(&dir.join("nullb0"), None);
        assert_eq!(
            (
                z.zoned.as_str(),
                z.zone_size_bytes,
                z.max_open_zones,
                z.max_active_zones
            ),
            ("host-managed", 16 << 20, 8, 12)
        );
        let vdc = Identity::read(&dir.join("vdc"), None);
        assert_eq!(vdc.serial, "blkobs-vdc");
        assert_eq!(vdc.logical_block_size, 4096);
        assert_eq!(vdc.model, "");
        // Seen before: the drive fields are kept (no second read), the queue's read again.
        put("vdc/serial", b"changed\n");
        put("vdc/queue/scheduler", b"[mq-deadline] none\n");
        let again = Identity::read(&dir.join("vdc"), Some(&vdc));
        assert_eq!(
            (again.serial.as_str(), again.scheduler.as_str()),
            ("blkobs-vdc", "mq-deadline")
        );
        let dm = Identity::read(&dir.join("dm-0"), None);
        assert_eq!(
            dm,
            Identity {
                scheduler: "none".into(),
                zoned: "none".into(),
                ..Identity::default()
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn vpd_serial_takes_the_page_length() {
        assert_eq!(vpd_serial(b"\x00\x80\x00\x04ABCDEFGH"), "ABCD");
        assert_eq!(vpd_serial(b"\x00\x83\x00\x04ABCD"), "", "another page");
        assert_eq!(vpd_serial(b"\x00\x80"), "");
        assert_eq!(vpd_serial(b"\x00\x80\x00\x40AB"), "AB", "short read");
    }
}
