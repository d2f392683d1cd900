//! Filesystems made and mounted for a test; unmounted (and the mount point removed) on drop.

use std::{io::Write, path::Path, path::PathBuf, process::Command};

use super::{sh, unique, LoopDev};

/// A filesystem made on a block device and mounted under /tmp; unmounted on drop.
pub struct Mount {
    pub dir: PathBuf,
    mounted: bool,
}

impl Mount {
    /// Makes a filesystem on a loop device and mounts it; see [`Mount::on`].
    pub fn new(dev: &LoopDev, mkfs: &[&str]) -> Mount {
        Self::on(&dev.path, mkfs, "")
    }

    /// Makes a filesystem on any block device path with `mkfs` (program and options, the
    /// device is appended) and mounts it with `-o opts` (if not empty).
    pub fn on(device: &str, mkfs: &[&str], opts: &str) -> Mount {
        let mut args: Vec<&str> = mkfs[1..].to_vec();
        args.push(device);
        sh(mkfs[0], &args);
        let dir = std::env::temp_dir().join(unique("blkobs-mnt"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = Mount {
            dir,
            mounted: false,
        };
        m.remount(device, opts);
        m
    }

    /// Unmounts now (the directory stays until drop).
    pub fn unmount(&mut self) {
        if self.mounted {
            sh("umount", &[self.dir.to_str().unwrap()]);
            self.mounted = false;
        }
    }

    /// Mounts again after [`Mount::unmount`] (same device and options given).
    pub fn remount(&mut self, device: &str, opts: &str) {
        let mut m = vec![device, self.dir.to_str().unwrap()];
        if !opts.is_empty() {
            m.extend(["-o", opts]);
        }
        sh("mount", &m);
        self.mounted = true;
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// `n` files of 4 KiB, each written and fsync'ed: the fs_mark-style fsync-per-file load.
pub fn fsync_files(dir: &Path, n: usize) {
    for i in 0..n {
        let mut f = std::fs::File::create(dir.join(format!("fsync-{i}"))).unwrap();
        f.write_all(&[0xa5u8; 4096]).unwrap();
        f.sync_all().unwrap();
    }
}

/// `mkfs.ext4` with every inode table and the journal written now (no lazy init writing later,
/// behind the test's back), then `extra` options.
pub fn mkfs_ext4<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "mkfs.ext4",
        "-q",
        "-F",
        "-E",
        "lazy_itable_init=0,lazy_journal_init=0",
    ];
    v.extend_from_slice(extra);
    v
}
