//! Kernel device numbers → kernel device names, through sysfs.

use std::path::Path;

use observer_common::maps::{dev_major, dev_minor};

/// The kernel's name for a disk (`vda`, `loop0`, `nvme0n1`), from the `/sys/dev/block/MAJ:MIN`
/// symlink; `MAJ:MIN` if the device is gone. Looked up on every call, so a device number reused
/// by a new device is named correctly.
pub fn name(dev: u32) -> String {
    name_in(Path::new("/sys/dev/block"), dev)
}

fn name_in(sys_dev_block: &Path, dev: u32) -> String {
    let id = format!("{}:{}", dev_major(dev), dev_minor(dev));
    std::fs::read_link(sys_dev_block.join(&id))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_sysfs_with_fallback() {
        let dir = std::env::temp_dir().join(format!("obs-devtest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink("../../devices/virtual/block/loop3", dir.join("7:3")).unwrap();
        assert_eq!(name_in(&dir, observer_common::maps::mkdev(7, 3)), "loop3");
        assert_eq!(name_in(&dir, observer_common::maps::mkdev(259, 1)), "259:1");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
