//! Which file a slow or stuck request carries ([`FileRecord`]): from the slow event's
//! [`FileRef`] (read by the completion program, only for a slow request) or, for a request in
//! flight, asked of the kernel on demand ([`RequestProbe::file`], one BPF_PROG_TEST_RUN per
//! record listed), with its path from the inode's first dentry up to its filesystem's root, and
//! that filesystem's mount point from `/proc/self/mountinfo`.

use serde::Serialize;

use observer_common::maps::{
    FileInfo, FileRef, FILE_ANON, FILE_DATA, FILE_DIRECT, FILE_KERNEL, FILE_METADATA,
};

use crate::bpf::reqstate::{FileQuery, RequestProbe};

/// The file whose data a request carries (its first bio's first page).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FileRecord {
    /// `data` (page cache of a file), `metadata` (page cache of the block device: buffer heads,
    /// i.e. filesystem metadata and the journal), `direct` (iomap direct I/O from user memory:
    /// the file of its `kiocb`), `anonymous` (user memory of a file not known: direct I/O outside
    /// iomap, or swap), `kernel` (kernel memory: a driver or slab buffer, a jbd2 frozen copy).
    pub kind: &'static str,
    /// Inode number (`stat -c %i`), for `data` and `direct`.
    pub inode: Option<u64>,
    /// The filesystem's device, `major:minor` (`stat -c %d` as major:minor: `super_block::s_dev`).
    pub fs_device: Option<String>,
    /// Path: the mount point of `fs_device` and the names up from the inode's first dentry (at
    /// most 8, `…/` in front when cut there); null when the inode has no dentry or is gone.
    pub path: Option<String>,
}

/// The `kind` name of a [`FileRef::kind`]; None for no data page.
pub fn kind_name(kind: u32) -> Option<&'static str> {
    Some(match kind {
        FILE_DATA => "data",
        FILE_METADATA => "metadata",
        FILE_DIRECT => "direct",
        FILE_ANON => "anonymous",
        FILE_KERNEL => "kernel",
        _ => return None,
    })
}

/// Mount points by filesystem device (`/proc/self/mountinfo`: field 3 `major:minor`, field 4
/// the root within the filesystem, field 5 the mount point), read once per report.
#[derive(Default)]
pub struct Mounts(Vec<(String, String, String)>);

impl Mounts {
    /// Reads `/proc/self/mountinfo`; empty if it cannot be read (paths are then relative to
    /// their filesystem's root).
    pub fn read() -> Mounts {
        let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        Mounts(
            text.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    Some((
                        f.get(2)?.to_string(),
                        f.get(3)?.to_string(),
                        f.get(4)?.to_string(),
                    ))
                })
                .collect(),
        )
    }

    /// `path` (from the filesystem's root) as seen through a mount of `dev` whose root holds
    /// it; as is if none.
    fn place(&self, dev: &str, path: &str) -> String {
        for (d, root, at) in &self.0 {
            let inner = if root == "/" {
                Some(path)
            } else {
                path.strip_prefix(root.as_str())
                    .filter(|r| r.is_empty() || r.starts_with('/'))
            };
            if let (true, Some(inner)) = (d == dev, inner) {
                return format!("{}{inner}", at.trim_end_matches('/'));
            }
        }
        path.to_string()
    }
}

/// `major:minor` of a kernel `dev_t` (major << 20 | minor).
fn dev_name(dev: u32) -> String {
    format!("{}:{}", dev >> 20, dev & 0xfffff)
}

/// The path in `info` (names leaf first), from its filesystem's root.
fn path_of(info: &FileInfo) -> Option<String> {
    let depth = (info.depth as usize).min(info.names.len());
    if depth == 0 {
        return None;
    }
    let mut path = String::new();
    if info.truncated != 0 {
        path.push('…');
    }
    for name in info.names[..depth].iter().rev() {
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        path.push('/');
        path.push_str(&String::from_utf8_lossy(&name[..end]));
    }
    Some(path)
}

/// The record of `file`, with the path `info` found (if it is of the same inode).
fn record(file: &FileRef, info: Option<&FileInfo>, mounts: &Mounts) -> Option<FileRecord> {
    let kind = kind_name(file.kind)?;
    let named = matches!(file.kind, FILE_DATA | FILE_DIRECT);
    let dev = dev_name(file.fs_dev);
    let path = info
        .filter(|i| named && i.file.inode == file.inode && i.file.ino == file.ino)
        .and_then(path_of)
        .map(|p| {
            if p.starts_with('…') {
                p
            } else {
                mounts.place(&dev, &p)
            }
        });
    Some(FileRecord {
        kind,
        inode: named.then_some(file.ino),
        fs_device: named.then_some(dev),
        path,
    })
}

/// The file of a slow request, from its event's `file`; the path looked up now by the inode's
/// address, if it still holds that inode number.
pub fn of_slow(
    file: &FileRef,
    probe: Option<&RequestProbe>,
    mounts: &Mounts,
) -> Option<FileRecord> {
    let info = match (probe, file.kind) {
        (Some(p), FILE_DATA | FILE_DIRECT) if file.inode != 0 => {
            p.file(FileQuery::Inode(file.inode, file.ino)).ok()
        }
        _ => None,
    };
    record(file, info.as_ref(), mounts)
}

/// The file of an I/O in flight: `key` is its `INFLIGHT` key (a request, or a bio of a
/// bio-based disk when `bio`), asked of the kernel now.
pub fn of_inflight(
    key: u64,
    bio: bool,
    probe: Option<&RequestProbe>,
    mounts: &Mounts,
) -> Option<FileRecord> {
    let p = probe.filter(|_| key != 0)?;
    let q = if bio {
        FileQuery::Bio(key)
    } else {
        FileQuery::Request(key)
    };
    let info = p.file(q).ok()?;
    record(&info.file, Some(&info), mounts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(names: &[&str], truncated: bool) -> FileInfo {
        let mut i = FileInfo {
            file: FileRef {
                inode: 0xffff_8880_0000_1000,
                ino: 12,
                fs_dev: (254 << 20) | 3,
                kind: FILE_DATA,
            },
            depth: names.len() as u32,
            truncated: truncated as u32,
            names: [[0; 64]; 8],
        };
        for (k, n) in names.iter().enumerate() {
            i.names[k][..n.len()].copy_from_slice(n.as_bytes());
        }
        i
    }

    #[test]
    fn path_is_joined_root_first_under_the_mount() {
        let mounts = Mounts(vec![
            ("8:1".into(), "/".into(), "/".into()),
            ("254:3".into(), "/".into(), "/mnt/slow".into()),
        ]);
        let i = info(&["slow.dat", "d"], false);
        let r = record(&i.file, Some(&i), &mounts).unwrap();
        assert_eq!(r.kind, "data");
        assert_eq!(r.inode, Some(12));
        assert_eq!(r.fs_device.as_deref(), Some("254:3"));
        assert_eq!(r.path.as_deref(), Some("/mnt/slow/d/slow.dat"));
        let cut = info(&["f"; 8], true);
        assert!(record(&cut.file, Some(&cut), &mounts)
            .unwrap()
            .path
            .unwrap()
            .starts_with("…/f/"));
    }

    #[test]
    fn metadata_has_no_inode_and_another_inodes_path_is_not_taken() {
        let mounts = Mounts::default();
        let mut i = info(&["x"], false);
        let meta = FileRef {
            kind: FILE_METADATA,
            ..i.file
        };
        let r = record(&meta, Some(&i), &mounts).unwrap();
        assert_eq!((r.kind, r.inode, r.path), ("metadata", None, None));
        let other = i.file;
        i.file.ino = 13;
        assert_eq!(record(&other, Some(&i), &mounts).unwrap().path, None);
        assert_eq!(record(&FileRef::default(), None, &mounts), None);
    }
}
