//! Block devices as sysfs describes them (`/sys/dev/block/M:m`: name, whole disk, partition
//! start), their device nodes opened read-only, and aligned reads from them.

use std::{
    fs::File,
    io,
    os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt},
    path::Path,
};

use observer_common::maps::mkdev;
use serde::Serialize;
use tracing::debug;

use super::{error::FsLogError, sources::Sources};

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
    pub(super) disk_key: u32,
}

fn read_trim(path: &Path) -> Result<String, FsLogError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| FsLogError::Io {
            path: path.display().to_string(),
            source,
        })
}

fn parse_devno(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Resolves a block device number through `sys_dev_block` (normally `/sys/dev/block`).
pub fn block_dev(
    sys_dev_block: &Path,
    dev_root: &Path,
    major: u32,
    minor: u32,
) -> Result<BlockDev, FsLogError> {
    let id = format!("{major}:{minor}");
    let link = sys_dev_block.join(&id);
    let dir = std::fs::canonicalize(&link).map_err(|source| FsLogError::Io {
        path: link.display().to_string(),
        source,
    })?;
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sectors: u64 = read_trim(&dir.join("size"))?.parse().unwrap_or(0);
    let (disk, disk_dev, start) = if dir.join("partition").exists() {
        let parent = dir.parent().unwrap_or(&dir);
        let start: u64 = read_trim(&dir.join("start"))?.parse().unwrap_or(0);
        let ddev = read_trim(&parent.join("dev"))?;
        (
            parent
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            ddev,
            start,
        )
    } else {
        (name.clone(), id.clone(), 0)
    };
    let (dmaj, dmin) = parse_devno(&disk_dev).unwrap_or((major, minor));
    // DEVNAME from uevent gives the node under /dev (e.g. "loop3p1", "mapper/.." is dm-N).
    let devname = std::fs::read_to_string(dir.join("uevent"))
        .ok()
        .and_then(|u| {
            u.lines()
                .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
        })
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
pub(super) fn open_dev(
    bd: &BlockDev,
    fallback: Option<&str>,
    sources: &Sources,
) -> Result<(File, String), FsLogError> {
    let want = parse_devno(&bd.dev).map(|(a, b)| libc::makedev(a, b));
    let mut tried = Vec::new();
    let candidates = [
        Some(bd.node.clone()),
        fallback.and_then(|f| sources.dev_path(f)),
        Some(
            sources
                .dev_root
                .join("block")
                .join(&bd.dev)
                .display()
                .to_string(),
        ),
    ];
    for path in candidates.iter().flatten() {
        let ok = std::fs::metadata(path)
            .map(|m| m.file_type().is_block_device() && Some(m.rdev()) == want)
            .unwrap_or(false);
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
                Some(libc::EACCES | libc::EPERM) => FsLogError::Denied {
                    path: path.to_string(),
                    source,
                },
                _ => FsLogError::Io {
                    path: path.to_string(),
                    source,
                },
            })?;
        return Ok((f, path.to_string()));
    }
    debug!(dev = %bd.dev, ?tried, "no matching device node");
    Err(FsLogError::NoNode {
        dev: bd.dev.clone(),
        dev_root: sources.dev_root.display().to_string(),
    })
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
        let a_len = ((off + len as u64).div_ceil(ALIGN) * ALIGN - a_off) as usize;
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
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short read: device smaller than the superblock says",
            ));
        }
        Ok(buf[skip..skip + len].to_vec())
    }
}

impl ReadAt for [u8] {
    fn read_exact_at_off(&self, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = off
            .checked_add(len as u64)
            .filter(|&e| e <= self.len() as u64);
        match end {
            Some(e) => Ok(self[off as usize..e as usize].to_vec()),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "beyond the image",
            )),
        }
    }
}

pub(super) fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}
pub(super) fn be32(b: &[u8], o: usize) -> u32 {
    u32::from_be_bytes(b[o..o + 4].try_into().unwrap())
}
pub(super) fn be64(b: &[u8], o: usize) -> u64 {
    u64::from_be_bytes(b[o..o + 8].try_into().unwrap())
}
pub(super) fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
pub(super) fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
