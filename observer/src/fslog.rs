//! Filesystem log awareness: finds where the logs (journals) of mounted XFS and ext4
//! filesystems are on disk and hands those ranges to the eBPF programs (`LOG_RANGES`), which
//! then classify requests starting inside a range as [`observer_common::class::LOG`].
//!
//! Discovery, from scratch on every change of the mount table (`/proc/self/mountinfo`, or the
//! host's `<host_root>/proc/1/mountinfo` in a container, see [`Sources::for_host_root`]) and
//! every [`FORCE_REFRESH`] in any case:
//! 1. mountinfo → filesystems of type `xfs`, `ext4`, `ext3`, `ext2` and their device numbers;
//! 2. `/sys/dev/block/M:m` → the device's whole disk, and for a partition its start
//!    (`/sys/dev/block/M:m/start`, 512-byte sectors);
//! 3. the superblock, read read-only (`O_RDONLY | O_DIRECT`) from the device node:
//!    - XFS (fs/xfs/libxfs/xfs_format.h, `struct xfs_dsb`, big endian): the internal log is
//!      `sb_logblocks` filesystem blocks from `sb_logstart` (an AG-encoded block number:
//!      AG `logstart >> sb_agblklog`, block `logstart & (2^agblklog - 1)`, i.e. what
//!      `xfs_db -c "convert fsb <logstart> daddr"` computes). `sb_logstart == 0` means an external
//!      log: the `logdev=` mount option names the device, which is log in its entirety.
//!    - ext4 (fs/ext4/ext4.h, little endian): the journal is inode `s_journal_inum` (8); its
//!      blocks come from the inode's extent tree (or ext3-style block map) read through the group
//!      descriptor's inode table. An external journal (`s_journal_dev`, verified against
//!      `s_journal_uuid`) is log in its entirety.
//! 4. Ranges are converted to 512-byte sectors on the whole disk, merged per disk, and written
//!    to `LOG_RANGES` (entries of disks that no longer have a log are deleted).
//!
//! A superblock that cannot be read or does not make sense is skipped with a warning (logged
//! and shown in `/devices` with a [`LogStatus`], and in `blkobs_fs_log_status`), never fatal. Stacked devices (device-mapper, md) are not mapped to
//! their underlying disks: their filesystems are listed without ranges.

use std::{
    collections::BTreeMap,
    fs::File,
    io,
    os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt},
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, Instant, SystemTime},
};

use aya::maps::{Array, MapData};
use observer_common::maps::{dev_major, dev_minor, dev_slot, mkdev, LogRanges, SectorRange, DEV_SLOTS, LOG_RANGES_MAX};
use serde::Serialize;
use tracing::{debug, info, warn};

/// How often mountinfo is checked when no change is signalled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);
/// Discovery runs at least this often even when mountinfo did not change (a device reformatted
/// and remounted at the same place can leave mountinfo byte-identical).
pub const FORCE_REFRESH: Duration = Duration::from_secs(30);

/// Filesystem types whose logs are found.
pub const SUPPORTED: [&str; 4] = ["xfs", "ext4", "ext3", "ext2"];

/// Errors of discovery. Each one skips a single filesystem; the message says what to check.
#[derive(Debug, thiserror::Error)]
pub enum FsLogError {
    /// The device node exists but the daemon may not open it read-only (EACCES/EPERM).
    #[error("cannot open {path} read-only: {source}; the daemon needs read access to block devices: \
             under packaging/observer.service SupplementaryGroups=disk and DeviceAllow=block-* r (and the node owned \
             by group disk, as udev makes it), in Kubernetes the host /dev under --host-root and a device cgroup that \
             allows reading it, or run as root (docs/operations.md, \"Filesystem log discovery\")")]
    Denied {
        /// The device node.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// A file or device could not be read.
    #[error("cannot read {path}: {source}; check that it exists and is readable by the daemon (docs/operations.md)")]
    Io {
        /// What was read.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// No block device node found for a device number.
    #[error("no device node for block device {dev} under {dev_root} (looked at /sys/dev/block/{dev}/uevent DEVNAME and {dev_root}/block/{dev}): \
             is /dev populated (devtmpfs), not hidden (systemd PrivateDevices=yes), and in a container the host's /dev mounted at <--host-root>/dev?")]
    NoNode {
        /// `M:m`.
        dev: String,
        /// Where nodes were looked for.
        dev_root: String,
    },
    /// The superblock is not of the expected filesystem.
    #[error("{device}: no {fstype} superblock (magic {magic:#x}); filesystem skipped: check the device with {check}")]
    Magic {
        /// Device path.
        device: String,
        /// Expected type.
        fstype: &'static str,
        /// Magic found.
        magic: u32,
        /// A command to inspect it.
        check: String,
    },
    /// The superblock has the right magic but inconsistent fields.
    #[error("{device}: {fstype} superblock is corrupt or unsupported ({what}); filesystem skipped: check it with {check}")]
    Corrupt {
        /// Device path.
        device: String,
        /// Filesystem type.
        fstype: &'static str,
        /// What is wrong.
        what: String,
        /// A command to inspect it.
        check: String,
    },
    /// An external log device could not be identified.
    #[error("{mountpoint}: external log device not found ({what}); its log writes are not classified: check the mount options (logdev=) / `dumpe2fs -h`")]
    ExternalLog {
        /// The filesystem.
        mountpoint: String,
        /// Details.
        what: String,
    },
}

/// One mountinfo line (proc(5)), the fields discovery uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount ID.
    pub id: u32,
    /// `st_dev` of the filesystem: (major, minor).
    pub dev: (u32, u32),
    /// Mount point (unescaped).
    pub mountpoint: String,
    /// Filesystem type.
    pub fstype: String,
    /// Mount source (unescaped), e.g. `/dev/loop3`.
    pub source: String,
    /// Per-superblock options, e.g. `rw,attr2,logdev=/dev/loop4,...`.
    pub super_options: String,
}

fn unescape(s: &str) -> String {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses `/proc/self/mountinfo` text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            if sep < 6 || f.len() < sep + 4 {
                return None;
            }
            let (maj, min) = f[2].split_once(':')?;
            Some(MountEntry {
                id: f[0].parse().ok()?,
                dev: (maj.parse().ok()?, min.parse().ok()?),
                mountpoint: unescape(f[4]),
                fstype: f[sep + 1].to_string(),
                source: unescape(f[sep + 2]),
                super_options: f[sep + 3].to_string(),
            })
        })
        .collect()
}

/// A block device as sysfs describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockDev {
    /// Kernel name (`loop3p1`).
    pub name: String,
    /// `M:m`.
    pub dev: String,
    /// Device node used to read it.
    pub node: String,
    /// Size (512-byte sectors).
    pub sectors: u64,
    /// Whole disk's kernel name (same as `name` for a disk).
    pub disk: String,
    /// Whole disk as `M:m`.
    pub disk_dev: String,
    /// Start of the partition on the disk (512-byte sectors); 0 for a whole disk.
    pub start: u64,
    #[serde(skip)]
    disk_key: u32,
}

fn read_trim(path: &Path) -> Result<String, FsLogError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| FsLogError::Io { path: path.display().to_string(), source })
}

fn parse_devno(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Resolves a block device number through `sys_dev_block` (normally `/sys/dev/block`).
pub fn block_dev(sys_dev_block: &Path, dev_root: &Path, major: u32, minor: u32) -> Result<BlockDev, FsLogError> {
    let id = format!("{major}:{minor}");
    let link = sys_dev_block.join(&id);
    let dir = std::fs::canonicalize(&link).map_err(|source| FsLogError::Io { path: link.display().to_string(), source })?;
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let sectors: u64 = read_trim(&dir.join("size"))?.parse().unwrap_or(0);
    let (disk, disk_dev, start) = if dir.join("partition").exists() {
        let parent = dir.parent().unwrap_or(&dir);
        let start: u64 = read_trim(&dir.join("start"))?.parse().unwrap_or(0);
        let ddev = read_trim(&parent.join("dev"))?;
        (parent.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), ddev, start)
    } else {
        (name.clone(), id.clone(), 0)
    };
    let (dmaj, dmin) = parse_devno(&disk_dev).unwrap_or((major, minor));
    // DEVNAME from uevent gives the node under /dev (e.g. "loop3p1", "mapper/.." is dm-N).
    let devname = std::fs::read_to_string(dir.join("uevent"))
        .ok()
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string)))
        .unwrap_or_else(|| name.clone());
    Ok(BlockDev {
        node: dev_root.join(&devname).display().to_string(),
        name,
        dev: id,
        sectors,
        disk,
        disk_dev,
        start,
        disk_key: mkdev(dmaj, dmin),
    })
}

/// Opens a block device read-only, checking that the node is the expected device. Tries
/// `O_DIRECT` first (reads what is on the device, not a stale page cache).
/// Only ever read-only: `O_RDONLY` (with `O_DIRECT` when the device allows it); the daemon
/// reads superblocks, group descriptors, the journal inode and its extent blocks, nothing else.
///
/// `fallback` is the mount source (a path in the mount table's namespace, mapped under
/// [`Sources::dev_root`]); every candidate must be a block device with the expected number.
fn open_dev(bd: &BlockDev, fallback: Option<&str>, sources: &Sources) -> Result<(File, String), FsLogError> {
    let want = parse_devno(&bd.dev).map(|(a, b)| libc::makedev(a, b));
    let mut tried = Vec::new();
    let candidates = [Some(bd.node.clone()), fallback.and_then(|f| sources.dev_path(f)), Some(sources.dev_root.join("block").join(&bd.dev).display().to_string())];
    for path in candidates.iter().flatten() {
        let ok = std::fs::metadata(path).map(|m| m.file_type().is_block_device() && Some(m.rdev()) == want).unwrap_or(false);
        if !ok {
            tried.push(path.to_string());
            continue;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .or_else(|_| std::fs::OpenOptions::new().read(true).open(path))
            .map_err(|source| match source.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => FsLogError::Denied { path: path.to_string(), source },
                _ => FsLogError::Io { path: path.to_string(), source },
            })?;
        return Ok((f, path.to_string()));
    }
    debug!(dev = %bd.dev, ?tried, "no matching device node");
    Err(FsLogError::NoNode { dev: bd.dev.clone(), dev_root: sources.dev_root.display().to_string() })
}

/// Reads `len` bytes at byte `off`, with the alignment `O_DIRECT` needs (4 KiB).
pub trait ReadAt {
    /// Reads exactly `len` bytes at `off`.
    fn read_exact_at_off(&self, off: u64, len: usize) -> io::Result<Vec<u8>>;
}

impl ReadAt for File {
    fn read_exact_at_off(&self, off: u64, len: usize) -> io::Result<Vec<u8>> {
        const ALIGN: u64 = 4096;
        let a_off = off / ALIGN * ALIGN;
        let a_len = ((off + len as u64 + ALIGN - 1) / ALIGN * ALIGN - a_off) as usize;
        let mut raw = vec![0u8; a_len + ALIGN as usize];
        let shift = raw.as_ptr().align_offset(ALIGN as usize);
        let buf = &mut raw[shift..shift + a_len];
        let mut done = 0;
        while done < a_len {
            let n = self.read_at(&mut buf[done..], a_off + done as u64)?;
            if n == 0 {
                break;
            }
            done += n;
        }
        let skip = (off - a_off) as usize;
        if done < skip + len {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read: device smaller than the superblock says"));
        }
        Ok(buf[skip..skip + len].to_vec())
    }
}

impl ReadAt for [u8] {
    fn read_exact_at_off(&self, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = off.checked_add(len as u64).filter(|&e| e <= self.len() as u64);
        match end {
            Some(e) => Ok(self[off as usize..e as usize].to_vec()),
            None => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "beyond the image")),
        }
    }
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}
fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().unwrap())
}
fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// The XFS superblock fields that locate the log (fs/xfs/libxfs/xfs_format.h, `struct xfs_dsb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct XfsSuper {
    /// `sb_blocksize` (bytes).
    pub blocksize: u32,
    /// `sb_dblocks`: data blocks.
    pub dblocks: u64,
    /// `sb_logstart`: AG-encoded filesystem block of the internal log; 0 = external log.
    pub logstart: u64,
    /// `sb_agblocks`: blocks per allocation group.
    pub agblocks: u32,
    /// `sb_agcount`.
    pub agcount: u32,
    /// `sb_logblocks`: log size in filesystem blocks.
    pub logblocks: u32,
    /// `sb_agblklog`: log2 of agblocks, rounded up.
    pub agblklog: u8,
    /// `sb_logsectsize` (bytes; 0 means 512).
    pub logsectsize: u16,
}

/// XFS magic "XFSB".
pub const XFS_MAGIC: u32 = 0x5846_5342;

impl XfsSuper {
    /// Parses and sanity-checks the first 512 bytes of an XFS filesystem.
    pub fn parse(sb: &[u8], device: &str) -> Result<XfsSuper, FsLogError> {
        let check = format!("`xfs_db -r -c 'sb 0' -c print {device}`");
        if sb.len() < 200 || be32(sb, 0) != XFS_MAGIC {
            return Err(FsLogError::Magic { device: device.into(), fstype: "xfs", magic: if sb.len() >= 4 { be32(sb, 0) } else { 0 }, check });
        }
        let s = XfsSuper {
            blocksize: be32(sb, 4),
            dblocks: be64(sb, 8),
            logstart: be64(sb, 48),
            agblocks: be32(sb, 84),
            agcount: be32(sb, 88),
            logblocks: be32(sb, 96),
            agblklog: sb[124],
            logsectsize: be16(sb, 194),
        };
        let blocklog = sb[120];
        let corrupt = |what: String| FsLogError::Corrupt { device: device.into(), fstype: "xfs", what, check: check.clone() };
        if !s.blocksize.is_power_of_two() || !(512..=65536).contains(&s.blocksize) || 1u32 << blocklog != s.blocksize {
            return Err(corrupt(format!("sb_blocksize {} / sb_blocklog {blocklog}", s.blocksize)));
        }
        if s.agcount == 0 || s.agblocks == 0 || s.agblklog > 31 || (1u64 << s.agblklog) < s.agblocks as u64 {
            return Err(corrupt(format!("sb_agcount {} sb_agblocks {} sb_agblklog {}", s.agcount, s.agblocks, s.agblklog)));
        }
        if s.logblocks == 0 {
            return Err(corrupt("sb_logblocks 0".into()));
        }
        if s.logstart != 0 {
            let (agno, agbno) = s.ag_split(s.logstart);
            if agno >= s.agcount as u64 || agbno >= s.agblocks as u64 || s.log_daddr() + s.log_sectors() > s.dblocks * s.sectors_per_block() {
                return Err(corrupt(format!("log (sb_logstart {}, sb_logblocks {}) outside the {} data blocks", s.logstart, s.logblocks, s.dblocks)));
            }
        }
        Ok(s)
    }

    fn ag_split(&self, fsb: u64) -> (u64, u64) {
        (fsb >> self.agblklog, fsb & ((1u64 << self.agblklog) - 1))
    }

    fn sectors_per_block(&self) -> u64 {
        self.blocksize as u64 / 512
    }

    /// Whether the log is on another device.
    pub fn external_log(&self) -> bool {
        self.logstart == 0
    }

    /// First sector (512 B) of the internal log on the filesystem's device (XFS_FSB_TO_DADDR).
    pub fn log_daddr(&self) -> u64 {
        let (agno, agbno) = self.ag_split(self.logstart);
        (agno * self.agblocks as u64 + agbno) * self.sectors_per_block()
    }

    /// Log size in 512-byte sectors.
    pub fn log_sectors(&self) -> u64 {
        self.logblocks as u64 * self.sectors_per_block()
    }
}

/// ext2/3/4 superblock fields that locate the journal (fs/ext4/ext4.h, `struct ext4_super_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Ext4Super {
    /// Block size (bytes): 1024 << s_log_block_size.
    pub block_size: u32,
    /// `s_first_data_block`.
    pub first_data_block: u32,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// `s_inode_size` (128 for revision 0).
    pub inode_size: u16,
    /// Group descriptor size (32, or `s_desc_size` with the 64bit feature).
    pub desc_size: u16,
    /// `s_feature_compat`.
    pub feature_compat: u32,
    /// `s_feature_incompat`.
    pub feature_incompat: u32,
    /// `s_journal_inum` (8 for an internal journal, 0 with an external one).
    pub journal_inum: u32,
    /// `s_journal_dev` (external journal's device number, userspace `dev_t` encoding).
    pub journal_dev: u32,
    /// `s_uuid`.
    #[serde(skip)]
    pub uuid: [u8; 16],
    /// `s_journal_uuid`.
    #[serde(skip)]
    pub journal_uuid: [u8; 16],
}

/// ext2/3/4 magic.
pub const EXT4_MAGIC: u16 = 0xEF53;
/// COMPAT_HAS_JOURNAL.
pub const EXT4_COMPAT_HAS_JOURNAL: u32 = 0x4;
/// INCOMPAT_JOURNAL_DEV: this is an external journal device.
pub const EXT4_INCOMPAT_JOURNAL_DEV: u32 = 0x8;
const EXT4_INCOMPAT_64BIT: u32 = 0x80;
const EXT4_EXTENTS_FL: u32 = 0x80000;

impl Ext4Super {
    /// Parses the 1024 bytes at byte offset 1024 of the device.
    pub fn parse(sb: &[u8], device: &str) -> Result<Ext4Super, FsLogError> {
        let check = format!("`dumpe2fs -h {device}`");
        if sb.len() < 1024 || le16(sb, 56) != EXT4_MAGIC {
            return Err(FsLogError::Magic { device: device.into(), fstype: "ext4", magic: if sb.len() >= 58 { le16(sb, 56) as u32 } else { 0 }, check });
        }
        let log_bs = le32(sb, 24);
        let rev = le32(sb, 76);
        let incompat = le32(sb, 96);
        let corrupt = |what: String| FsLogError::Corrupt { device: device.into(), fstype: "ext4", what, check: check.clone() };
        if log_bs > 6 {
            return Err(corrupt(format!("s_log_block_size {log_bs}")));
        }
        let inode_size = if rev == 0 { 128 } else { le16(sb, 88) };
        let desc_size = if incompat & EXT4_INCOMPAT_64BIT != 0 { le16(sb, 254).max(32) } else { 32 };
        let s = Ext4Super {
            block_size: 1024 << log_bs,
            first_data_block: le32(sb, 20),
            inodes_per_group: le32(sb, 40),
            inode_size,
            desc_size,
            feature_compat: le32(sb, 92),
            feature_incompat: incompat,
            journal_inum: le32(sb, 224),
            journal_dev: le32(sb, 228),
            uuid: sb[104..120].try_into().unwrap(),
            journal_uuid: sb[208..224].try_into().unwrap(),
        };
        // An external journal device has no inodes.
        if !s.is_journal_dev()
            && (s.inodes_per_group == 0
                || !(128..=s.block_size).contains(&(s.inode_size as u32))
                || !s.inode_size.is_power_of_two()
                || !s.desc_size.is_power_of_two())
        {
            return Err(corrupt(format!("s_inodes_per_group {} s_inode_size {} desc size {}", s.inodes_per_group, s.inode_size, s.desc_size)));
        }
        Ok(s)
    }

    /// Whether the filesystem has a journal at all.
    pub fn has_journal(&self) -> bool {
        self.feature_compat & EXT4_COMPAT_HAS_JOURNAL != 0
    }

    /// Whether this superblock is that of an external journal device.
    pub fn is_journal_dev(&self) -> bool {
        self.feature_incompat & EXT4_INCOMPAT_JOURNAL_DEV != 0
    }

    /// Physical block extents `(start block, blocks)` of inode `ino`, merged and sorted by
    /// logical order. Supports extent trees (any depth up to 5) and ext2/3 block maps.
    pub fn inode_extents(&self, dev: &(impl ReadAt + ?Sized), ino: u32, device: &str) -> Result<Vec<(u64, u64)>, FsLogError> {
        let bs = self.block_size as u64;
        let check = format!("`debugfs -R 'stat <{ino}>' {device}`");
        let corrupt = |what: String| FsLogError::Corrupt { device: device.into(), fstype: "ext4", what, check: check.clone() };
        let io = |source: io::Error| FsLogError::Io { path: device.to_string(), source };
        if ino == 0 {
            return Err(corrupt("inode 0".into()));
        }
        let group = (ino - 1) / self.inodes_per_group;
        let index = (ino - 1) % self.inodes_per_group;
        // Group descriptors follow the superblock's block (also with META_BG for the first groups).
        let gdt = (self.first_data_block as u64 + 1) * bs + group as u64 * self.desc_size as u64;
        let gd = dev.read_exact_at_off(gdt, self.desc_size as usize).map_err(io)?;
        let mut itable = le32(&gd, 8) as u64;
        if self.desc_size >= 64 {
            itable |= (le32(&gd, 0x28) as u64) << 32;
        }
        if itable == 0 {
            return Err(corrupt(format!("group {group} has no inode table")));
        }
        let inode = dev.read_exact_at_off(itable * bs + index as u64 * self.inode_size as u64, 128).map_err(io)?;
        let mode = le16(&inode, 0);
        if mode & 0o170000 != 0o100000 {
            return Err(corrupt(format!("inode {ino} is not a regular file (mode {mode:o})")));
        }
        let flags = le32(&inode, 0x20);
        let i_block = &inode[0x28..0x28 + 60];
        let mut runs: Vec<(u64, u64)> = Vec::new();
        let mut push = |start: u64, len: u64| match runs.last_mut() {
            Some((s, l)) if *s + *l == start => *l += len,
            _ => runs.push((start, len)),
        };
        if flags & EXT4_EXTENTS_FL != 0 {
            let mut leaves: Vec<(u64, u64, u64)> = Vec::new(); // (logical, physical, len)
            self.walk_extents(dev, i_block, 5, &mut leaves, &corrupt, &io)?;
            leaves.sort();
            for (_, p, l) in leaves {
                push(p, l);
            }
        } else {
            let ptrs: Vec<u32> = (0..15).map(|i| le32(i_block, i * 4)).collect();
            for &b in &ptrs[..12] {
                if b != 0 {
                    push(b as u64, 1);
                }
            }
            for (level, &b) in ptrs[12..].iter().enumerate() {
                self.walk_indirect(dev, b, level as u32 + 1, &mut push, &io)?;
            }
        }
        if runs.is_empty() {
            return Err(corrupt(format!("inode {ino} has no blocks")));
        }
        Ok(runs)
    }

    fn walk_extents(
        &self,
        dev: &(impl ReadAt + ?Sized),
        node: &[u8],
        budget: u32,
        out: &mut Vec<(u64, u64, u64)>,
        corrupt: &dyn Fn(String) -> FsLogError,
        io: &dyn Fn(io::Error) -> FsLogError,
    ) -> Result<(), FsLogError> {
        if le16(node, 0) != 0xF30A {
            return Err(corrupt("bad extent header magic".into()));
        }
        let entries = le16(node, 2) as usize;
        let depth = le16(node, 6);
        if budget == 0 || 12 + entries * 12 > node.len() {
            return Err(corrupt(format!("extent node with {entries} entries at depth {depth}")));
        }
        for i in 0..entries {
            let e = &node[12 + i * 12..24 + i * 12];
            if depth == 0 {
                let mut len = le16(e, 4) as u64;
                if len > 32768 {
                    len -= 32768; // unwritten extent
                }
                let phys = (le16(e, 6) as u64) << 32 | le32(e, 8) as u64;
                out.push((le32(e, 0) as u64, phys, len));
            } else {
                let leaf = (le16(e, 8) as u64) << 32 | le32(e, 4) as u64;
                let child = dev.read_exact_at_off(leaf * self.block_size as u64, self.block_size as usize).map_err(io)?;
                self.walk_extents(dev, &child, budget - 1, out, corrupt, io)?;
            }
        }
        Ok(())
    }

    fn walk_indirect(
        &self,
        dev: &(impl ReadAt + ?Sized),
        block: u32,
        level: u32,
        push: &mut dyn FnMut(u64, u64),
        io: &dyn Fn(io::Error) -> FsLogError,
    ) -> Result<(), FsLogError> {
        if block == 0 {
            return Ok(());
        }
        let data = dev.read_exact_at_off(block as u64 * self.block_size as u64, self.block_size as usize).map_err(io)?;
        for i in 0..self.block_size as usize / 4 {
            let b = le32(&data, i * 4);
            if b == 0 {
                continue;
            }
            if level == 1 {
                push(b as u64, 1);
            } else {
                self.walk_indirect(dev, b, level - 1, push, io)?;
            }
        }
        Ok(())
    }
}

/// Decodes a userspace `dev_t` as stored in `s_journal_dev` (glibc `gnu_dev_major/minor`).
pub fn decode_dev_t(d: u32) -> (u32, u32) {
    ((d >> 8) & 0xfff, (d & 0xff) | ((d >> 12) & 0xfff00))
}

/// Internal log or a whole external log device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogKind {
    /// Inside the filesystem's own device.
    Internal,
    /// A separate device that is log in its entirety.
    External,
}

/// One range of a filesystem's log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogExtent {
    /// Internal or external.
    pub kind: LogKind,
    /// The device (disk or partition) holding it.
    pub device: String,
    /// Its whole disk.
    pub disk: String,
    /// Start on the device (512-byte sectors).
    pub device_start: u64,
    /// Start on the whole disk (512-byte sectors): what requests carry.
    pub start: u64,
    /// End on the whole disk, exclusive (512-byte sectors).
    pub end: u64,
    /// `end - start`.
    pub sectors: u64,
    #[serde(skip)]
    disk_key: u32,
}

impl LogExtent {
    fn new(kind: LogKind, bd: &BlockDev, device_start: u64, sectors: u64) -> Self {
        LogExtent {
            kind,
            device: bd.name.clone(),
            disk: bd.disk.clone(),
            device_start,
            start: bd.start + device_start,
            end: bd.start + device_start + sectors,
            sectors,
            disk_key: bd.disk_key,
        }
    }
}

/// A mounted filesystem and its log.
#[derive(Clone, Debug, Serialize)]
pub struct Filesystem {
    /// Filesystem type (mountinfo).
    pub fstype: String,
    /// Mount source.
    pub source: String,
    /// Mount points of this filesystem (bind mounts included), first one first.
    pub mountpoints: Vec<String>,
    /// The filesystem's (data) device.
    pub device: BlockDev,
    /// Where its log is; empty when it has none (ext2) or it could not be found.
    pub log: Vec<LogExtent>,
    /// Log block size: XFS `sb_logsectsize` / ext4 block size (bytes), for reference.
    pub log_unit: u32,
    /// Outcome of log discovery for this filesystem.
    pub log_status: LogStatus,
    /// Why the log is unknown, if it is (what to check or grant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// Outcome of log discovery for one filesystem (`log_status` in `/devices`, `status` label of
/// `blkobs_fs_log_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogStatus {
    /// Log ranges found: its log writes are `log="true"`.
    Found,
    /// The filesystem has no journal (ext2): nothing to find.
    NoJournal,
    /// The device node exists but may not be opened read-only (EACCES/EPERM): grant read access.
    Unreadable,
    /// No device node for the filesystem's device under the device root.
    NoDeviceNode,
    /// The superblock or journal inode does not make sense.
    Invalid,
    /// An external log device could not be identified.
    ExternalLogMissing,
    /// Another I/O error.
    IoError,
}

impl LogStatus {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStatus::Found => "found",
            LogStatus::NoJournal => "no_journal",
            LogStatus::Unreadable => "unreadable",
            LogStatus::NoDeviceNode => "no_device_node",
            LogStatus::Invalid => "invalid",
            LogStatus::ExternalLogMissing => "external_log_missing",
            LogStatus::IoError => "io_error",
        }
    }
}

impl FsLogError {
    /// The status this error gives a filesystem.
    pub fn status(&self) -> LogStatus {
        match self {
            FsLogError::Denied { .. } => LogStatus::Unreadable,
            FsLogError::Io { source, .. } if matches!(source.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => LogStatus::Unreadable,
            FsLogError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => LogStatus::NoDeviceNode,
            FsLogError::Io { .. } => LogStatus::IoError,
            FsLogError::NoNode { .. } => LogStatus::NoDeviceNode,
            FsLogError::Magic { .. } | FsLogError::Corrupt { .. } => LogStatus::Invalid,
            FsLogError::ExternalLog { .. } => LogStatus::ExternalLogMissing,
        }
    }
}

/// The result of one discovery.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Discovery {
    /// Supported filesystems found mounted.
    pub filesystems: Vec<Filesystem>,
    /// Merged ranges per whole disk (kernel name → ranges), as written to `LOG_RANGES`.
    pub ranges: BTreeMap<String, Vec<Range>>,
    /// Problems found (each also logged once).
    pub warnings: Vec<String>,
    /// Seconds since the epoch of this discovery.
    pub updated_unix: u64,
    #[serde(skip)]
    keys: BTreeMap<u32, (String, Vec<SectorRange>)>,
}

/// A merged log range on a whole disk (512-byte sectors, `end` exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Range {
    /// First sector.
    pub start: u64,
    /// End sector (exclusive).
    pub end: u64,
    /// `end - start`.
    pub sectors: u64,
}

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
        Sources { mountinfo: "/proc/self/mountinfo".into(), sys_dev_block: "/sys/dev/block".into(), dev_root: "/dev".into() }
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

fn option_value<'a>(opts: &'a str, key: &str) -> Option<&'a str> {
    opts.split(',').find_map(|o| o.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
}

fn xfs_logs(m: &MountEntry, bd: &BlockDev, sources: &Sources) -> Result<(Vec<LogExtent>, u32), FsLogError> {
    let (f, path) = open_dev(bd, Some(&m.source), sources)?;
    let sb = f.read_exact_at_off(0, 512).map_err(|source| FsLogError::Io { path: path.clone(), source })?;
    let s = XfsSuper::parse(&sb, &path)?;
    let unit = if s.logsectsize == 0 { 512 } else { s.logsectsize as u32 };
    if !s.external_log() {
        return Ok((vec![LogExtent::new(LogKind::Internal, bd, s.log_daddr(), s.log_sectors())], unit));
    }
    let ext = |what: String| FsLogError::ExternalLog { mountpoint: m.mountpoint.clone(), what };
    let logdev = option_value(&m.super_options, "logdev").ok_or_else(|| ext("sb_logstart is 0 but no logdev= mount option".into()))?;
    let logdev = unescape(logdev);
    let here = sources.dev_path(&logdev).unwrap_or_else(|| logdev.clone());
    let rdev = std::fs::metadata(&here).map_err(|e| ext(format!("{logdev} (looked at {here}): {e}")))?.rdev();
    let lbd = block_dev(&sources.sys_dev_block, &sources.dev_root, libc::major(rdev), libc::minor(rdev))?;
    Ok((vec![LogExtent::new(LogKind::External, &lbd, 0, lbd.sectors)], unit))
}

fn ext4_logs(m: &MountEntry, bd: &BlockDev, sources: &Sources) -> Result<(Vec<LogExtent>, u32), FsLogError> {
    let (f, path) = open_dev(bd, Some(&m.source), sources)?;
    let io = |source| FsLogError::Io { path: path.clone(), source };
    let sb = f.read_exact_at_off(1024, 1024).map_err(io)?;
    let s = Ext4Super::parse(&sb, &path)?;
    if !s.has_journal() {
        return Ok((Vec::new(), s.block_size));
    }
    if s.journal_inum != 0 {
        let spb = s.block_size as u64 / 512;
        let runs = s.inode_extents(&f, s.journal_inum, &path)?;
        let logs = runs.into_iter().map(|(b, n)| LogExtent::new(LogKind::Internal, bd, b * spb, n * spb)).collect();
        return Ok((logs, s.block_size));
    }
    let ext = |what: String| FsLogError::ExternalLog { mountpoint: m.mountpoint.clone(), what };
    if s.journal_dev == 0 {
        return Err(ext("s_journal_inum and s_journal_dev are both 0".into()));
    }
    let (maj, min) = decode_dev_t(s.journal_dev);
    let jbd = block_dev(&sources.sys_dev_block, &sources.dev_root, maj, min).map_err(|e| ext(format!("s_journal_dev {maj}:{min}: {e}")))?;
    let (jf, jpath) = open_dev(&jbd, None, sources)?;
    let jsb = jf.read_exact_at_off(1024, 1024).map_err(|source| FsLogError::Io { path: jpath.clone(), source })?;
    let js = Ext4Super::parse(&jsb, &jpath)?;
    if !js.is_journal_dev() || js.uuid != s.journal_uuid {
        return Err(ext(format!("{jpath} ({maj}:{min}) is not the journal device with the UUID in s_journal_uuid")));
    }
    Ok((vec![LogExtent::new(LogKind::External, &jbd, 0, jbd.sectors)], s.block_size))
}

/// Runs discovery once on the given mountinfo text.
pub fn discover(mountinfo: &str, sources: &Sources) -> Discovery {
    let mut d = Discovery {
        updated_unix: SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|t| t.as_secs()).unwrap_or(0),
        ..Default::default()
    };
    let mut by_dev: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for m in parse_mountinfo(mountinfo) {
        if !SUPPORTED.contains(&m.fstype.as_str()) {
            continue;
        }
        if let Some(&i) = by_dev.get(&m.dev) {
            d.filesystems[i].mountpoints.push(m.mountpoint.clone());
            continue;
        }
        let bd = match block_dev(&sources.sys_dev_block, &sources.dev_root, m.dev.0, m.dev.1) {
            Ok(bd) => bd,
            Err(e) => {
                d.warnings.push(format!("{} ({}): {e}", m.mountpoint, m.fstype));
                continue;
            }
        };
        let result = if m.fstype == "xfs" { xfs_logs(&m, &bd, sources) } else { ext4_logs(&m, &bd, sources) };
        let (log, log_unit, log_status, warning) = match result {
            Ok((log, unit)) => {
                let st = if log.is_empty() { LogStatus::NoJournal } else { LogStatus::Found };
                (log, unit, st, None)
            }
            Err(e) => {
                let w = format!("{} ({} on {}): {e}", m.mountpoint, m.fstype, bd.name);
                d.warnings.push(w.clone());
                (Vec::new(), 0, e.status(), Some(w))
            }
        };
        by_dev.insert(m.dev, d.filesystems.len());
        d.filesystems.push(Filesystem {
            fstype: m.fstype.clone(),
            source: m.source.clone(),
            mountpoints: vec![m.mountpoint.clone()],
            device: bd,
            log,
            log_unit,
            log_status,
            warning,
        });
    }
    // Merge per disk.
    let mut per: BTreeMap<u32, (String, Vec<SectorRange>)> = BTreeMap::new();
    for fs in &d.filesystems {
        for e in &fs.log {
            per.entry(e.disk_key).or_insert_with(|| (e.disk.clone(), Vec::new())).1.push(SectorRange { start: e.start, end: e.end });
        }
    }
    for (name, ranges) in per.values_mut() {
        ranges.sort();
        let mut merged: Vec<SectorRange> = Vec::new();
        for r in ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        if merged.len() > LOG_RANGES_MAX {
            d.warnings.push(format!(
                "{name}: {} log ranges, only the first {LOG_RANGES_MAX} are classified; the others' writes count as log=\"false\"",
                merged.len()
            ));
            merged.truncate(LOG_RANGES_MAX);
        }
        *ranges = merged;
    }
    d.ranges = per
        .values()
        .map(|(n, r)| (n.clone(), r.iter().map(|r| Range { start: r.start, end: r.end, sectors: r.end - r.start }).collect()))
        .collect();
    d.keys = per;
    d
}

impl Discovery {
    /// `LOG_RANGES` values: disk key → ranges.
    pub fn map_values(&self) -> BTreeMap<u32, LogRanges> {
        self.keys
            .iter()
            .map(|(k, (_, rs))| {
                let mut v = LogRanges::default();
                for (i, r) in rs.iter().take(LOG_RANGES_MAX).enumerate() {
                    v.ranges[i] = *r;
                }
                v.count = rs.len().min(LOG_RANGES_MAX) as u32;
                (*k, v)
            })
            .collect()
    }
}

/// Shared, current discovery result (read by `/devices` and `/metrics`).
#[derive(Default)]
pub struct FsLogState {
    current: RwLock<Discovery>,
}

impl FsLogState {
    /// A copy of the current discovery.
    pub fn get(&self) -> Discovery {
        self.current.read().expect("fslog lock").clone()
    }
}

/// Writes `want` into the `LOG_RANGES` array (slot [`dev_slot`] of each disk) and clears the
/// slots of disks that no longer have a log. Two disks with a log in the same slot: the first
/// keeps it, the second is not classified (logged).
pub fn sync_map(map: &mut Array<MapData, LogRanges>, want: &BTreeMap<u32, LogRanges>) {
    let mut slots: BTreeMap<u32, LogRanges> = BTreeMap::new();
    for (dev, v) in want {
        let slot = dev_slot(*dev);
        if let Some(other) = slots.get(&slot) {
            warn!(disk = %format!("{}:{}", dev_major(*dev), dev_minor(*dev)), other = %format!("{}:{}", dev_major(other.dev), dev_minor(other.dev)),
                  "two disks with a filesystem log share a LOG_RANGES slot: this disk's log writes are not classified");
            continue;
        }
        slots.insert(slot, LogRanges { dev: *dev, ..*v });
    }
    for slot in 0..DEV_SLOTS {
        let want = slots.get(&slot).copied().unwrap_or_default();
        let have = map.get(&slot, 0).unwrap_or_default();
        if have != want {
            if let Err(e) = map.set(slot, want, 0) {
                warn!(slot, error = %e, "cannot write LOG_RANGES: log writes on that disk are not classified");
            }
        }
    }
}

fn log_changes(old: &Discovery, new: &Discovery) {
    for w in &new.warnings {
        if !old.warnings.contains(w) {
            warn!("{w}");
        }
    }
    if old.ranges != new.ranges {
        for fs in &new.filesystems {
            for e in &fs.log {
                info!(fstype = %fs.fstype, mountpoint = %fs.mountpoints[0], device = %e.device, disk = %e.disk,
                      kind = ?e.kind, start = e.start, end = e.end, "filesystem log range");
            }
        }
        for name in old.ranges.keys().filter(|k| !new.ranges.contains_key(*k)) {
            info!(disk = %name, "no filesystem log on this disk any more");
        }
    }
}

/// Runs discovery now and then on every mountinfo change (POLLPRI) or every
/// [`POLL_INTERVAL`], on a dedicated thread, keeping `LOG_RANGES` and `state` up to date.
/// `write` applies the wanted `LOG_RANGES` contents (normally through [`sync_map`]).
pub fn spawn(
    mut write: impl FnMut(&BTreeMap<u32, LogRanges>) + Send + 'static,
    state: Arc<FsLogState>,
    sources: Sources,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("fslog".into()).spawn(move || {
        let mut last_text = String::new();
        let mut last_run: Option<Instant> = None;
        loop {
            let text = match std::fs::read_to_string(&sources.mountinfo) {
                Ok(t) => t,
                Err(e) => {
                    warn!(path = %sources.mountinfo.display(), error = %e, "cannot read mountinfo; filesystem logs not updated");
                    std::thread::sleep(POLL_INTERVAL);
                    continue;
                }
            };
            if text != last_text || last_run.is_none_or(|t| t.elapsed() >= FORCE_REFRESH) {
                let d = discover(&text, &sources);
                write(&d.map_values());
                let mut cur = state.current.write().expect("fslog lock");
                log_changes(&cur, &d);
                *cur = d;
                last_text = text;
                last_run = Some(Instant::now());
            }
            wait_mountinfo_change(&sources.mountinfo, POLL_INTERVAL);
        }
    })
}

/// Blocks until the mount table changes (POLLPRI on mountinfo) or `timeout` passes.
fn wait_mountinfo_change(path: &Path, timeout: Duration) {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let Ok(mut f) = File::open(path) else {
        std::thread::sleep(timeout);
        return;
    };
    // The kernel reports a change relative to what this open file has seen: read it first.
    let mut sink = Vec::new();
    let _ = f.read_to_end(&mut sink);
    let mut pfd = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLPRI | libc::POLLERR, revents: 0 };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n > 0 {
        // Let a burst of mount changes (mount + remount) settle.
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Extra metric families (Prometheus text), appended to `/metrics`:
/// `blkobs_fs_log_sectors{device, fs_device, fstype, mountpoint, kind}` = log size in sectors,
/// one series per log range: joins `log="true"` series (by `device`) to their filesystem.
pub fn render_metrics(d: &Discovery) -> String {
    use prometheus::{proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType}, Encoder, TextEncoder};
    let mut ms = Vec::new();
    for fs in &d.filesystems {
        for e in &fs.log {
            let mut m = Metric::default();
            let mut g = Gauge::default();
            g.set_value(e.sectors as f64);
            m.set_gauge(g);
            let start = e.start.to_string();
            m.set_label(
                [("device", e.disk.as_str()), ("fs_device", fs.device.name.as_str()), ("fstype", fs.fstype.as_str()),
                 ("mountpoint", fs.mountpoints[0].as_str()),
                 ("kind", if e.kind == LogKind::Internal { "internal" } else { "external" }), ("start", start.as_str())]
                    .iter()
                    .map(|(k, v)| {
                        let mut l = LabelPair::default();
                        l.set_name(k.to_string());
                        l.set_value(v.to_string());
                        l
                    })
                    .collect(),
            );
            ms.push(m);
        }
    }
    let mut fam = MetricFamily::default();
    fam.set_name("blkobs_fs_log_sectors".into());
    fam.set_help("Size of a mounted filesystem's log range (512-byte sectors); device is the whole disk, start the first sector on it. Requests starting inside get log=\"true\".".into());
    fam.set_field_type(MetricType::GAUGE);
    fam.set_metric(ms);
    let mut warn_m = Metric::default();
    let mut g = Gauge::default();
    g.set_value(d.warnings.len() as f64);
    warn_m.set_gauge(g);
    let mut wf = MetricFamily::default();
    wf.set_name("blkobs_fs_log_warnings".into());
    wf.set_help("Filesystems (or log ranges) skipped by the last log discovery; details in GET /devices and the log.".into());
    wf.set_field_type(MetricType::GAUGE);
    wf.set_metric(vec![warn_m]);
    let mut st_ms = Vec::new();
    for fs in &d.filesystems {
        let mut m = Metric::default();
        let mut g = Gauge::default();
        g.set_value(1.0);
        m.set_gauge(g);
        m.set_label(
            [("device", fs.device.disk.as_str()), ("fs_device", fs.device.name.as_str()), ("fstype", fs.fstype.as_str()),
             ("mountpoint", fs.mountpoints[0].as_str()), ("status", fs.log_status.as_str())]
                .iter()
                .map(|(k, v)| {
                    let mut l = LabelPair::default();
                    l.set_name(k.to_string());
                    l.set_value(v.to_string());
                    l
                })
                .collect(),
        );
        st_ms.push(m);
    }
    let mut sf = MetricFamily::default();
    sf.set_name("blkobs_fs_log_status".into());
    sf.set_help("One series per mounted XFS/ext2/3/4 filesystem, value 1, status = outcome of its log discovery: found, no_journal, unreadable (grant read access to the device, see GET /devices), no_device_node, invalid, external_log_missing, io_error.".into());
    sf.set_field_type(MetricType::GAUGE);
    sf.set_metric(st_ms);
    let mut fams = vec![wf];
    if !sf.get_metric().is_empty() {
        fams.insert(0, sf);
    }
    if !fam.get_metric().is_empty() {
        fams.insert(0, fam);
    }
    let mut out = Vec::new();
    TextEncoder::new().encode(&fams, &mut out).expect("text encoding to a Vec cannot fail");
    String::from_utf8(out).expect("exposition is UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xfs_sb(blocksize: u32, agblocks: u32, agcount: u32, agblklog: u8, logstart: u64, logblocks: u32) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[0..4].copy_from_slice(&XFS_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&blocksize.to_be_bytes());
        b[8..16].copy_from_slice(&(agblocks as u64 * agcount as u64).to_be_bytes());
        b[48..56].copy_from_slice(&logstart.to_be_bytes());
        b[84..88].copy_from_slice(&agblocks.to_be_bytes());
        b[88..92].copy_from_slice(&agcount.to_be_bytes());
        b[96..100].copy_from_slice(&logblocks.to_be_bytes());
        b[120] = blocksize.trailing_zeros() as u8;
        b[124] = agblklog;
        b
    }

    #[test]
    fn xfs_logstart_is_ag_encoded() {
        // 4 AGs of 16000 blocks (agblklog 14): log in AG 2 at block 5, 1000 blocks of 4 KiB.
        let s = XfsSuper::parse(&xfs_sb(4096, 16000, 4, 14, (2 << 14) | 5, 1000), "t").unwrap();
        assert_eq!(s.log_daddr(), (2 * 16000 + 5) * 8);
        assert_eq!(s.log_sectors(), 8000);
        assert!(!s.external_log());
    }

    #[test]
    fn xfs_bad_superblocks_are_errors() {
        assert!(matches!(XfsSuper::parse(&[0u8; 512], "t"), Err(FsLogError::Magic { .. })));
        assert!(matches!(XfsSuper::parse(&xfs_sb(4000, 16000, 4, 14, 5, 10), "t"), Err(FsLogError::Corrupt { .. })));
        // log beyond the AG count
        assert!(matches!(XfsSuper::parse(&xfs_sb(4096, 16000, 4, 14, 9 << 14, 10), "t"), Err(FsLogError::Corrupt { .. })));
        assert!(matches!(XfsSuper::parse(&xfs_sb(4096, 16000, 4, 14, 5, 0), "t"), Err(FsLogError::Corrupt { .. })));
        assert!(matches!(XfsSuper::parse(&[1u8; 3], "t"), Err(FsLogError::Magic { .. })));
    }

    #[test]
    fn ext4_journal_from_extents_and_block_map() {
        // A 1 KiB-block image: sb at 1024, GDT at block 2, inode table at block 5, inode size 128.
        let mut img = vec![0u8; 64 * 1024];
        let sb = 1024;
        img[sb + 20..sb + 24].copy_from_slice(&1u32.to_le_bytes()); // first data block
        img[sb + 40..sb + 44].copy_from_slice(&32u32.to_le_bytes()); // inodes per group
        img[sb + 56..sb + 58].copy_from_slice(&EXT4_MAGIC.to_le_bytes());
        img[sb + 76..sb + 80].copy_from_slice(&1u32.to_le_bytes()); // rev 1
        img[sb + 88..sb + 90].copy_from_slice(&128u16.to_le_bytes());
        img[sb + 92..sb + 96].copy_from_slice(&EXT4_COMPAT_HAS_JOURNAL.to_le_bytes());
        img[sb + 224..sb + 228].copy_from_slice(&8u32.to_le_bytes());
        img[2048 + 8..2048 + 12].copy_from_slice(&5u32.to_le_bytes());
        let ino = 5 * 1024 + 7 * 128;
        img[ino..ino + 2].copy_from_slice(&0o100600u16.to_le_bytes());
        img[ino + 0x20..ino + 0x24].copy_from_slice(&EXT4_EXTENTS_FL.to_le_bytes());
        let ib = ino + 0x28;
        img[ib..ib + 2].copy_from_slice(&0xF30Au16.to_le_bytes());
        img[ib + 2..ib + 4].copy_from_slice(&2u16.to_le_bytes());
        // extents out of logical order, physically adjacent: merged into one run
        for (i, (lblk, len, phys)) in [(10u32, 6u16, 40u32), (0u32, 10u16, 30u32)].iter().enumerate() {
            let e = ib + 12 + i * 12;
            img[e..e + 4].copy_from_slice(&lblk.to_le_bytes());
            img[e + 4..e + 6].copy_from_slice(&len.to_le_bytes());
            img[e + 8..e + 12].copy_from_slice(&phys.to_le_bytes());
        }
        let s = Ext4Super::parse(&img[1024..2048], "t").unwrap();
        assert_eq!(s.block_size, 1024);
        assert_eq!(s.inode_extents(img.as_slice(), 8, "t").unwrap(), vec![(30, 16)]);

        // Same inode as a block map: 12 direct blocks 100..112, indirect block 20 → 112, 113, 200.
        img[ino + 0x20..ino + 0x24].copy_from_slice(&0u32.to_le_bytes());
        for i in 0..12 {
            img[ib + i * 4..ib + i * 4 + 4].copy_from_slice(&(100 + i as u32).to_le_bytes());
        }
        img[ib + 48..ib + 52].copy_from_slice(&20u32.to_le_bytes());
        for (i, b) in [112u32, 113, 200].iter().enumerate() {
            img[20 * 1024 + i * 4..20 * 1024 + i * 4 + 4].copy_from_slice(&b.to_le_bytes());
        }
        assert_eq!(s.inode_extents(img.as_slice(), 8, "t").unwrap(), vec![(100, 14), (200, 1)]);

        // Corrupt extent header → error, no panic.
        img[ino + 0x20..ino + 0x24].copy_from_slice(&EXT4_EXTENTS_FL.to_le_bytes());
        img[ib..ib + 2].copy_from_slice(&0u16.to_le_bytes());
        assert!(s.inode_extents(img.as_slice(), 8, "t").is_err());
        assert!(matches!(Ext4Super::parse(&[0u8; 1024], "t"), Err(FsLogError::Magic { .. })));
    }

    #[test]
    fn mountinfo_lines() {
        let t = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - xfs /dev/loop3 rw,attr2,logdev=/dev/loop4\n\
                 37 35 98:1 / /x rw - ext4 /dev/loop5p1 rw\nbad line\n";
        let m = parse_mountinfo(t);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mountpoint, "/mnt/a b");
        assert_eq!(m[0].dev, (98, 0));
        assert_eq!(option_value(&m[0].super_options, "logdev"), Some("/dev/loop4"));
        assert_eq!(m[1].fstype, "ext4");
    }

    #[test]
    fn host_root_sources() {
        let s = Sources::for_host_root(Some(Path::new("/host")));
        assert_eq!(s.mountinfo, Path::new("/host/proc/1/mountinfo"));
        assert_eq!(s.dev_root, Path::new("/host/dev"));
        assert_eq!(s.dev_path("/dev/loop3").as_deref(), Some("/host/dev/loop3"));
        assert_eq!(s.dev_path("/dev/mapper/vg-lv").as_deref(), Some("/host/dev/mapper/vg-lv"));
        assert_eq!(s.dev_path("/srv/img"), None);
        let d = Sources::for_host_root(Some(Path::new("/")));
        assert_eq!(d.mountinfo, Path::new("/proc/self/mountinfo"));
        assert_eq!(Sources::for_host_root(None).dev_root, Path::new("/dev"));
    }

    #[test]
    fn error_status() {
        let io = |e: i32| FsLogError::Io { path: "x".into(), source: io::Error::from_raw_os_error(e) };
        assert_eq!(io(libc::EACCES).status(), LogStatus::Unreadable);
        assert_eq!(io(libc::EPERM).status(), LogStatus::Unreadable);
        assert_eq!(io(libc::ENOENT).status(), LogStatus::NoDeviceNode);
        assert_eq!(io(libc::EIO).status(), LogStatus::IoError);
        let denied = FsLogError::Denied { path: "/dev/sda".into(), source: io::Error::from_raw_os_error(libc::EACCES) };
        assert_eq!(denied.status(), LogStatus::Unreadable);
        assert!(denied.to_string().contains("SupplementaryGroups=disk"), "{denied}");
        assert_eq!(FsLogError::NoNode { dev: "7:0".into(), dev_root: "/dev".into() }.status(), LogStatus::NoDeviceNode);
        assert_eq!(LogStatus::ExternalLogMissing.as_str(), "external_log_missing");
    }

    #[test]
    fn dev_t_decoding() {
        assert_eq!(decode_dev_t(0x0703), (7, 3));
        assert_eq!(decode_dev_t((259 << 8) | 0x05 | (0x100 << 12)), (259, 0x105));
    }

    #[test]
    fn ranges_contain() {
        let mut r = LogRanges::default();
        r.ranges[0] = SectorRange { start: 10, end: 20 };
        r.ranges[1] = SectorRange { start: 100, end: 101 };
        r.count = 2;
        assert!(r.contains(10) && r.contains(19) && r.contains(100));
        assert!(!r.contains(20) && !r.contains(9) && !r.contains(101) && !r.contains(0));
        r.count = 1;
        assert!(!r.contains(100));
    }
}
