//! Disks that went away: once a disk has been missing from `/sys/block`, or without media
//! (size 0: a detached loop device, an ejected medium), for `[devices] forget_after`, its `CLASS_STATS`, `ERRORS` and `OWNER_STATS` entries (and the reaper's counts)
//! are deleted, so its series leave `/metrics` instead of staying until a restart. Entries are
//! keyed by device number (`MKDEV(major, minor)`), which the kernel reuses: a disk that comes
//! back with the same number before the grace period ends keeps counting where it was.

use std::{collections::BTreeMap, time::Duration};

use observer_common::maps::{dev_major, dev_minor};
use tracing::info;

use super::reaper::Reaped;
use crate::{
    bpf::maps::StatsWriter,
    disks::{DiskView, Inventory},
};

/// When each missing disk was first seen missing.
#[derive(Default)]
pub struct GoneDevices {
    /// Device number → monotonic ns when it was first found missing.
    missing_since: BTreeMap<u32, u64>,
}

impl GoneDevices {
    /// One pass at monotonic time `now` (ns) over the disks with entries in `maps`, against
    /// this tick's disks `inv` (the latest of `disks`, whose names of forgotten disks it drops):
    /// notes disks newly missing (or without media), forgets those
    /// missing for `forget_after` or longer. Returns the device numbers forgotten.
    pub fn sweep(
        &mut self,
        disks: &DiskView,
        inv: &Inventory,
        maps: &mut StatsWriter,
        now: u64,
        forget_after: Duration,
        reaped: &Reaped,
    ) -> Vec<u32> {
        let devs = maps.devices();
        self.missing_since
            .retain(|d, _| devs.binary_search(d).is_ok());
        let present = inv.present();
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
            let classes = maps.forget(dev);
            reaped
                .0
                .lock()
                .expect("reaper lock")
                .retain(|k, _| k.dev != dev);
            self.missing_since.remove(&dev);
            let name = disks.name(dev);
            disks.forget(dev);
            info!(
                device = %name,
                number = %format!("{}:{}", dev_major(dev), dev_minor(dev)),
                after = %humantime::format_duration(forget_after),
                classes,
                "disk gone: its series are removed from /metrics"
            );
        }
        forget
    }
}
