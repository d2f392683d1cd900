//! Disks that went away: once a disk has been missing from `/sys/block`, or without media
//! (size 0: a detached loop device, an ejected medium), for `[devices] forget_after`, its `CLASS_STATS`, `ERRORS` and `OWNER_STATS` entries (and the reaper's counts)
//! are deleted, so its series leave `/metrics` instead of staying until a restart. Entries are
//! keyed by device number (`MKDEV(major, minor)`), which the kernel reuses: a disk that comes
//! back with the same number before the grace period ends keeps counting where it was.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use aya::maps::{MapData, PerCpuHashMap};
use observer_common::maps::{
    dev_major, dev_minor, ClassKey, ClassStats, ErrorKey, OwnerKey, OwnerStats,
};
use tracing::info;

use super::reaper::Reaped;
use crate::bpf::devslots::scan_disks;

/// Writable handles on the per-device maps and when each missing disk was first seen missing.
pub struct GoneDevices {
    class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats>,
    errors: PerCpuHashMap<MapData, ErrorKey, u64>,
    owner_stats: PerCpuHashMap<MapData, OwnerKey, OwnerStats>,
    /// Device number → monotonic ns when it was first found missing.
    missing_since: BTreeMap<u32, u64>,
    /// `/sys/block` (a test may point elsewhere).
    sys_block: PathBuf,
}

impl GoneDevices {
    /// Over second handles (dup'ed fds) on `CLASS_STATS`, `ERRORS` and `OWNER_STATS`.
    pub fn new(
        class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats>,
        errors: PerCpuHashMap<MapData, ErrorKey, u64>,
        owner_stats: PerCpuHashMap<MapData, OwnerKey, OwnerStats>,
    ) -> GoneDevices {
        GoneDevices {
            class_stats,
            errors,
            owner_stats,
            missing_since: BTreeMap::new(),
            sys_block: PathBuf::from("/sys/block"),
        }
    }

    /// One pass at monotonic time `now` (ns): notes disks newly missing, forgets those missing
    /// for `forget_after` or longer. Returns the device numbers forgotten.
    pub fn sweep(&mut self, now: u64, forget_after: Duration, reaped: &Reaped) -> Vec<u32> {
        let mut devs: Vec<u32> = self.class_stats.keys().flatten().map(|k| k.dev).collect();
        devs.extend(self.errors.keys().flatten().map(|k| k.dev));
        devs.sort_unstable();
        devs.dedup();
        self.missing_since
            .retain(|d, _| devs.binary_search(d).is_ok());
        let present = scan_disks(&self.sys_block);
        let mut forget = Vec::new();
        for dev in devs {
            if present.contains(&dev) {
                self.missing_since.remove(&dev);
                continue;
            }
            let since = *self.missing_since.entry(dev).or_insert(now);
            if now.saturating_sub(since) >= forget_after.as_nanos() as u64 {
                forget.push(dev);
            }
        }
        for &dev in &forget {
            let stats: Vec<ClassKey> = self
                .class_stats
                .keys()
                .flatten()
                .filter(|k| k.dev == dev)
                .collect();
            for k in &stats {
                let _ = self.class_stats.remove(k);
            }
            let errors: Vec<ErrorKey> = self
                .errors
                .keys()
                .flatten()
                .filter(|k| k.dev == dev)
                .collect();
            for k in &errors {
                let _ = self.errors.remove(k);
            }
            let owners: Vec<OwnerKey> = self
                .owner_stats
                .keys()
                .flatten()
                .filter(|k| k.dev == dev)
                .collect();
            for k in &owners {
                let _ = self.owner_stats.remove(k);
            }
            reaped
                .0
                .lock()
                .expect("reaper lock")
                .retain(|k, _| k.dev != dev);
            self.missing_since.remove(&dev);
            let name = crate::labels::device_name(dev);
            crate::labels::forget_device_name(dev);
            info!(
                device = %name,
                number = %format!("{}:{}", dev_major(dev), dev_minor(dev)),
                after = %humantime::format_duration(forget_after),
                classes = stats.len(),
                "disk gone: its series are removed from /metrics"
            );
        }
        forget
    }
}
