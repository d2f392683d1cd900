//! ext2/3/4: the journal's blocks from the superblock (fs/ext4/ext4.h, little endian) and the
//! journal inode's extent tree or block map, or the external journal device.

use std::io;

use observer_common::maps::decode_user_dev;
use serde::Serialize;

use super::{
    blockdev::{block_dev, le16, le32, open_dev, BlockDev, ReadAt},
    discovery::{LogExtent, LogKind},
    error::FsLogError,
    mountinfo::MountEntry,
    sources::Sources,
};

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
            return Err(FsLogError::Magic {
                device: device.into(),
                fstype: "ext4",
                magic: if sb.len() >= 58 {
                    le16(sb, 56) as u32
                } else {
                    0
                },
                check,
            });
        }
        let log_bs = le32(sb, 24);
        let rev = le32(sb, 76);
        let incompat = le32(sb, 96);
        let corrupt = |what: String| FsLogError::Corrupt {
            device: device.into(),
            fstype: "ext4",
            what,
            check: check.clone(),
        };
        if log_bs > 6 {
            return Err(corrupt(format!("s_log_block_size {log_bs}")));
        }
        let inode_size = if rev == 0 { 128 } else { le16(sb, 88) };
        let desc_size = if incompat & EXT4_INCOMPAT_64BIT != 0 {
            le16(sb, 254).max(32)
        } else {
            32
        };
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
            return Err(corrupt(format!(
                "s_inodes_per_group {} s_inode_size {} desc size {}",
                s.inodes_per_group, s.inode_size, s.desc_size
            )));
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
    pub fn inode_extents(
        &self,
        dev: &(impl ReadAt + ?Sized),
        ino: u32,
        device: &str,
    ) -> Result<Vec<(u64, u64)>, FsLogError> {
        let bs = self.block_size as u64;
        let check = format!("`debugfs -R 'stat <{ino}>' {device}`");
        let corrupt = |what: String| FsLogError::Corrupt {
            device: device.into(),
            fstype: "ext4",
            what,
            check: check.clone(),
        };
        let io = |source: io::Error| FsLogError::Io {
            path: device.to_string(),
            source,
        };
        if ino == 0 {
            return Err(corrupt("inode 0".into()));
        }
        let group = (ino - 1) / self.inodes_per_group;
        let index = (ino - 1) % self.inodes_per_group;
        // Group descriptors follow the superblock's block (also with META_BG for the first groups).
        let gdt = (self.first_data_block as u64 + 1) * bs + group as u64 * self.desc_size as u64;
        let gd = dev
            .read_exact_at_off(gdt, self.desc_size as usize)
            .map_err(io)?;
        let mut itable = le32(&gd, 8) as u64;
        if self.desc_size >= 64 {
            itable |= (le32(&gd, 0x28) as u64) << 32;
        }
        if itable == 0 {
            return Err(corrupt(format!("group {group} has no inode table")));
        }
        let inode = dev
            .read_exact_at_off(itable * bs + index as u64 * self.inode_size as u64, 128)
            .map_err(io)?;
        let mode = le16(&inode, 0);
        if mode & 0o170000 != 0o100000 {
            return Err(corrupt(format!(
                "inode {ino} is not a regular file (mode {mode:o})"
            )));
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
            return Err(corrupt(format!(
                "extent node with {entries} entries at depth {depth}"
            )));
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
                let child = dev
                    .read_exact_at_off(leaf * self.block_size as u64, self.block_size as usize)
                    .map_err(io)?;
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
        let data = dev
            .read_exact_at_off(
                block as u64 * self.block_size as u64,
                self.block_size as usize,
            )
            .map_err(io)?;
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

pub(super) fn ext4_logs(
    m: &MountEntry,
    bd: &BlockDev,
    sources: &Sources,
) -> Result<(Vec<LogExtent>, u32), FsLogError> {
    let (f, path) = open_dev(bd, Some(&m.source), sources)?;
    let io = |source| FsLogError::Io {
        path: path.clone(),
        source,
    };
    let sb = f.read_exact_at_off(1024, 1024).map_err(io)?;
    let s = Ext4Super::parse(&sb, &path)?;
    if !s.has_journal() {
        return Ok((Vec::new(), s.block_size));
    }
    if s.journal_inum != 0 {
        let spb = s.block_size as u64 / 512;
        let runs = s.inode_extents(&f, s.journal_inum, &path)?;
        let logs = runs
            .into_iter()
            .map(|(b, n)| LogExtent::new(LogKind::Internal, bd, b * spb, n * spb))
            .collect();
        return Ok((logs, s.block_size));
    }
    let ext = |what: String| FsLogError::ExternalLog {
        mountpoint: m.mountpoint.clone(),
        what,
    };
    if s.journal_dev == 0 {
        return Err(ext("s_journal_inum and s_journal_dev are both 0".into()));
    }
    let (maj, min) = decode_user_dev(s.journal_dev);
    let jbd = block_dev(&sources.sys_dev_block, &sources.dev_root, maj, min)
        .map_err(|e| ext(format!("s_journal_dev {maj}:{min}: {e}")))?;
    let (jf, jpath) = open_dev(&jbd, None, sources)?;
    let jsb = jf
        .read_exact_at_off(1024, 1024)
        .map_err(|source| FsLogError::Io {
            path: jpath.clone(),
            source,
        })?;
    let js = Ext4Super::parse(&jsb, &jpath)?;
    if !js.is_journal_dev() || js.uuid != s.journal_uuid {
        return Err(ext(format!(
            "{jpath} ({maj}:{min}) is not the journal device with the UUID in s_journal_uuid"
        )));
    }
    Ok((
        vec![LogExtent::new(LogKind::External, &jbd, 0, jbd.sectors)],
        s.block_size,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for (i, (lblk, len, phys)) in [(10u32, 6u16, 40u32), (0u32, 10u16, 30u32)]
            .iter()
            .enumerate()
        {
            let e = ib + 12 + i * 12;
            img[e..e + 4].copy_from_slice(&lblk.to_le_bytes());
            img[e + 4..e + 6].copy_from_slice(&len.to_le_bytes());
            img[e + 8..e + 12].copy_from_slice(&phys.to_le_bytes());
        }
        let s = Ext4Super::parse(&img[1024..2048], "t").unwrap();
        assert_eq!(s.block_size, 1024);
        assert_eq!(
            s.inode_extents(img.as_slice(), 8, "t").unwrap(),
            vec![(30, 16)]
        );

        // Same inode as a block map: 12 direct blocks 100..112, indirect block 20 → 112, 113, 200.
        img[ino + 0x20..ino + 0x24].copy_from_slice(&0u32.to_le_bytes());
        for i in 0..12 {
            img[ib + i * 4..ib + i * 4 + 4].copy_from_slice(&(100 + i as u32).to_le_bytes());
        }
        img[ib + 48..ib + 52].copy_from_slice(&20u32.to_le_bytes());
        for (i, b) in [112u32, 113, 200].iter().enumerate() {
            img[20 * 1024 + i * 4..20 * 1024 + i * 4 + 4].copy_from_slice(&b.to_le_bytes());
        }
        assert_eq!(
            s.inode_extents(img.as_slice(), 8, "t").unwrap(),
            vec![(100, 14), (200, 1)]
        );

        // Corrupt extent header → error, no panic.
        img[ino + 0x20..ino + 0x24].copy_from_slice(&EXT4_EXTENTS_FL.to_le_bytes());
        img[ib..ib + 2].copy_from_slice(&0u16.to_le_bytes());
        assert!(s.inode_extents(img.as_slice(), 8, "t").is_err());
        assert!(matches!(
            Ext4Super::parse(&[0u8; 1024], "t"),
            Err(FsLogError::Magic { .. })
        ));
    }
}
