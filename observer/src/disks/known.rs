//! The disks this daemon has seen: every entry of `/sys/block` now or in any scan since it
//! started (every second, [`crate::daemon`]), by kernel name and as `MAJ:MIN` (how a disk that
//! went away is named in reports). The API's `device=` parameter accepts only these.

use std::{collections::BTreeMap, sync::Arc, sync::Mutex};

use observer_common::maps::{dev_major, dev_minor};

use super::Inventory;

/// At most this many names are remembered (more only while more disks are present); beyond it
/// the ones gone longest are forgotten: a host that creates and removes disks for months must
/// not grow the set without bound.
pub const CAPACITY: usize = 4096;

/// Why a name is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownDisk {
    /// A partition: its I/O is counted for its disk.
    #[error("{name} is a partition: its I/O is counted for its disk, use device={disk}")]
    Partition {
        /// The partition.
        name: String,
        /// Its disk.
        disk: String,
    },
    /// Never a disk while the daemon ran.
    #[error("no disk {name} exists or existed while the daemon ran: GET /devices lists the disks")]
    Never {
        /// The name asked for.
        name: String,
    },
}

/// The set, with when each name was last seen (scan number). Kept by [`super::DiskView`],
/// which records every scan in it.
#[derive(Default)]
pub struct KnownDisks {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    scans: u64,
    names: BTreeMap<String, u64>,
}

impl KnownDisks {
    /// Adds every disk of a scan (name and `MAJ:MIN`), then forgets the names gone longest
    /// while more than [`CAPACITY`] are known.
    pub fn record(&self, inv: &Inventory) {
        let mut found = Vec::new();
        for d in &inv.disks {
            found.push(d.name.clone());
            // A hidden disk has no sysfs `dev`: its series are named, never `MAJ:MIN`.
            if let (Some(dev), false) = (d.dev, d.hidden) {
                found.push(format!("{}:{}", dev_major(dev), dev_minor(dev)));
            }
        }
        let mut seen = self.seen.lock().expect("known disks lock");
        seen.scans += 1;
        let now = seen.scans;
        for name in found {
            seen.names.insert(name, now);
        }
        if seen.names.len() > CAPACITY {
            // Only names gone now, the longest gone first: disks present are always known.
            let mut gone: Vec<(u64, String)> = seen
                .names
                .iter()
                .filter(|(_, t)| **t < now)
                .map(|(n, t)| (*t, n.clone()))
                .collect();
            gone.sort();
            let excess = seen.names.len() - CAPACITY;
            for (_, n) in gone.into_iter().take(excess) {
                seen.names.remove(&n);
            }
        }
    }

    /// Whether `name` is a disk that exists or existed (known, or in a scan made now by
    /// `scan`, which records it: a disk created since the last scan counts); else why not (a
    /// partition of a disk in that scan, or never a disk).
    pub fn check(
        &self,
        name: &str,
        scan: impl FnOnce() -> Arc<Inventory>,
    ) -> Result<(), UnknownDisk> {
        let plain = !name.is_empty() && name != "." && name != ".." && !name.contains('/');
        if plain {
            if self.knows(name) {
                return Ok(());
            }
            let inv = scan();
            if inv.disks.iter().any(|d| d.name == name) {
                return Ok(());
            }
            if let Some(d) = inv
                .disks
                .iter()
                .find(|d| d.partitions.iter().any(|p| p.name == name))
            {
                return Err(UnknownDisk::Partition {
                    name: name.to_string(),
                    disk: d.name.clone(),
                });
            }
        }
        Err(UnknownDisk::Never {
            name: name.to_string(),
        })
    }

    fn knows(&self, name: &str) -> bool {
        self.seen
            .lock()
            .expect("known disks lock")
            .names
            .contains_key(name)
    }

    /// How many names are known.
    pub fn len(&self) -> usize {
        self.seen.lock().expect("known disks lock").names.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::disks::DiskView;

    fn disk(root: &Path, name: &str, dev: &str) {
        let d = root.join("block").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("dev"), format!("{dev}\n")).unwrap();
    }

    #[test]
    fn known_gone_partition_and_bounded() {
        let root = std::env::temp_dir().join(format!("blkobs-disks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        disk(&root, "vda", "254:0");
        disk(&root, "loop3", "7:3");
        // A directory under vda with a `partition` file.
        let part = root.join("block/vda/vda1");
        std::fs::create_dir_all(&part).unwrap();
        std::fs::write(part.join("partition"), "1\n").unwrap();
        let k = DiskView::new(&root.join("block"), &root.join("diskstats"));
        k.rescan();
        assert_eq!(k.check("vda"), Ok(()));
        assert_eq!(k.check("7:3"), Ok(()));
        // Gone from /sys/block: still known.
        std::fs::remove_dir_all(root.join("block/loop3")).unwrap();
        k.rescan();
        assert_eq!(k.check("loop3"), Ok(()));
        // Appeared since the last rescan: accepted at once.
        disk(&root, "nvme0n1", "259:0");
        assert_eq!(k.check("nvme0n1"), Ok(()));
        assert_eq!(
            k.check("vda1"),
            Err(UnknownDisk::Partition {
                name: "vda1".into(),
                disk: "vda".into()
            })
        );
        for bad in ["sdz", "..", ".", "", "a/b"] {
            assert!(
                matches!(k.check(bad), Err(UnknownDisk::Never { .. })),
                "{bad}"
            );
        }
        // Bounded: the names gone longest are forgotten first, present ones never.
        for i in 0..10 {
            disk(&root, &format!("g{i}"), &format!("2:{i}"));
        }
        k.rescan();
        for i in 0..10 {
            std::fs::remove_dir_all(root.join(format!("block/g{i}"))).unwrap();
        }
        for i in 0..CAPACITY / 2 - 4 {
            disk(&root, &format!("d{i}"), &format!("1:{i}"));
        }
        k.rescan();
        assert_eq!(
            k.known().len(),
            CAPACITY,
            "vda, nvme0n1 and the d* are present"
        );
        for name in ["vda", "254:0", "nvme0n1", "d0", "1:0"] {
            assert_eq!(k.check(name), Ok(()), "{name} is present");
        }
        assert!(k.check("loop3").is_err(), "gone longest: forgotten");
        assert!(k.check("7:3").is_err(), "gone longest: forgotten");
        assert_eq!(k.check("g9"), Ok(()), "gone later: still known");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
