//! Which disk a device name is: `blkobs_disk_info`, one series per disk with media, for joins
//! across a fleet (`* on (instance, device) group_left (model) ...`), from the disks' sysfs
//! identity ([`crate::disks::Identity`]).

use prometheus::proto::MetricType;

use super::{MetricDesc, MetricWriter};
use crate::{config::DeviceFilter, disks::DiskView};

/// A disk's identity and queue setup, as node_exporter's `node_disk_info` (plus the queue).
pub const DISK_INFO: MetricDesc = MetricDesc {
    name: "blkobs_disk_info",
    help: "1 per disk with media the device filter allows: model, serial, wwid, firmware revision (sysfs device/), rotational (0/1), logical and physical block size (bytes), I/O scheduler in use, write cache mode and FUA support (0/1), zone model (none, host-aware, host-managed), zone size (bytes) and max open and active zones (0: no limit) from its queue/ directory. Empty where the driver has none.",
    kind: MetricType::GAUGE,
    labels: &[
        "device",
        "model",
        "serial",
        "wwid",
        "revision",
        "rotational",
        "logical_block_size",
        "physical_block_size",
        "scheduler",
        "write_cache",
        "fua",
        "zoned",
        "zone_size_bytes",
        "max_open_zones",
        "max_active_zones",
    ],
};

/// The family, from the view's last scan.
pub fn families(w: &mut dyn MetricWriter, filter: &DeviceFilter, disks: &DiskView) {
    let inv = disks.inventory();
    let mut f = w.family(&DISK_INFO);
    let bit = |b: bool| if b { "1" } else { "0" };
    for d in inv.disks.iter().filter(|d| d.sectors > 0) {
        if !filter.allows(&d.name) {
            continue;
        }
        let i = &d.identity;
        f.gauge(
            &[
                d.name.as_str(),
                i.model.as_str(),
                i.serial.as_str(),
                i.wwid.as_str(),
                i.revision.as_str(),
                bit(i.rotational),
                &i.logical_block_size.to_string(),
                &i.physical_block_size.to_string(),
                i.scheduler.as_str(),
                d.write_cache.as_str(),
                bit(i.fua),
                i.zoned.as_str(),
                &i.zone_size_bytes.to_string(),
                &i.max_open_zones.to_string(),
                &i.max_active_zones.to_string(),
            ],
            1.0,
        );
    }
}
