//! XFS: the log's place from the superblock (fs/xfs/libxfs/xfs_format.h, `struct xfs_dsb`, big
//! endian), internal or on the `logdev=` device.

use std::os::unix::fs::MetadataExt;

use serde::Serialize;

use super::{
    blockdev::{be16, be32, be64, block_dev, open_dev, BlockDev, ReadAt},
    discovery::{LogExtent, LogKind},
    error::FsLogError,
    mountinfo::{option_value, unescape, MountEntry},
    sources::Sources,
};

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
            return Err(FsLogError::Magic {
                device: device.into(),
                fstype: "xfs",
                magic: if sb.len() >= 4 { be32(sb, 0) } else { 0 },
                check,
            });
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
        let corrupt = |what: String| FsLogError::Corrupt {
            device: device.into(),
            fstype: "xfs",
            what,
            check: check.clone(),
        };
        if !s.blocksize.is_power_of_two()
            || !(512..=65536).contains(&s.blocksize)
            || 1u32 << blocklog != s.blocksize
        {
            return Err(corrupt(format!(
                "sb_blocksize {} / sb_blocklog {blocklog}",
                s.blocksize
            )));
        }
        if s.agcount == 0
            || s.agblocks == 0
            || s.agblklog > 31
            || (1u64 << s.agblklog) < s.agblocks as u64
        {
            return Err(corrupt(format!(
                "sb_agcount {} sb_agblocks {} sb_agblklog {}",
                s.agcount, s.agblocks, s.agblklog
            )));
        }
        if s.logblocks == 0 {
            return Err(corrupt("sb_logblocks 0".into()));
        }
        if s.logstart != 0 {
            let (agno, agbno) = s.ag_split(s.logstart);
            if agno >= s.agcount as u64
                || agbno >= s.agblocks as u64
                || s.log_daddr() + s.log_sectors() > s.dblocks * s.sectors_per_block()
            {
                return Err(corrupt(format!(
                    "log (sb_logstart {}, sb_logblocks {}) outside the {} data blocks",
                    s.logstart, s.logblocks, s.dblocks
                )));
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

pub(super) fn xfs_logs(
    m: &MountEntry,
    bd: &BlockDev,
    sources: &Sources,
) -> Result<(Vec<LogExtent>, u32), FsLogError> {
    let (f, path) = open_dev(bd, Some(&m.source), sources)?;
    let sb = f
        .read_exact_at_off(0, 512)
        .map_err(|source| FsLogError::Io {
            path: path.clone(),
            source,
        })?;
    let s = XfsSuper::parse(&sb, &path)?;
    let unit = if s.logsectsize == 0 {
        512
    } else {
        s.logsectsize as u32
    };
    if !s.external_log() {
        return Ok((
            vec![LogExtent::new(
                LogKind::Internal,
                bd,
                s.log_daddr(),
                s.log_sectors(),
            )],
            unit,
        ));
    }
    let ext = |what: String| FsLogError::ExternalLog {
        mountpoint: m.mountpoint.clone(),
        what,
    };
    let logdev = option_value(&m.super_options, "logdev")
        .ok_or_else(|| ext("sb_logstart is 0 but no logdev= mount option".into()))?;
    let logdev = unescape(logdev);
    let here = sources.dev_path(&logdev).unwrap_or_else(|| logdev.clone());
    let rdev = std::fs::metadata(&here)
        .map_err(|e| ext(format!("{logdev} (looked at {here}): {e}")))?
        .rdev();
    let lbd = block_dev(
        &sources.sys_dev_block,
        &sources.dev_root,
        libc::major(rdev),
        libc::minor(rdev),
    )?;
    Ok((
        vec![LogExtent::new(LogKind::External, &lbd, 0, lbd.sectors)],
        unit,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xfs_sb(
        blocksize: u32,
        agblocks: u32,
        agcount: u32,
        agblklog: u8,
        logstart: u64,
        logblocks: u32,
    ) -> Vec<u8> {
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
        assert!(matches!(
            XfsSuper::parse(&[0u8; 512], "t"),
            Err(FsLogError::Magic { .. })
        ));
        assert!(matches!(
            XfsSuper::parse(&xfs_sb(4000, 16000, 4, 14, 5, 10), "t"),
            Err(FsLogError::Corrupt { .. })
        ));
        // log beyond the AG count
        assert!(matches!(
            XfsSuper::parse(&xfs_sb(4096, 16000, 4, 14, 9 << 14, 10), "t"),
            Err(FsLogError::Corrupt { .. })
        ));
        assert!(matches!(
            XfsSuper::parse(&xfs_sb(4096, 16000, 4, 14, 5, 0), "t"),
            Err(FsLogError::Corrupt { .. })
        ));
        assert!(matches!(
            XfsSuper::parse(&[1u8; 3], "t"),
            Err(FsLogError::Magic { .. })
        ));
    }
}
