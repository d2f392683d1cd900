//! Label values decoded from kernel numbers, in one place: `blk_status_t` → status names,
//! class bits → op/flags/rwbs, stall kinds, task comms, cgroup ids → cgroup paths
//! ([`cgroup`]). Used by the exposition, the `/stalls` reports and the histogram windows alike.
//! Device numbers → kernel device names: `disks::DiskView`, the latest scan of the disks.

mod cgroup;

pub use cgroup::{owner_labels, set_cgroup_root, CgroupNames, LabelNames};

use observer_common::{
    class::{Class, FLAGS},
    maps::STALL_DEVICE,
};
use serde::Serialize;

/// Name of a `blk_status_t` (include/linux/blk_types.h), lower case without `BLK_STS_`
/// (`ok`, `ioerr`, ...); `code_N` for a value this table does not know.
pub fn status_name(status: u8) -> String {
    const NAMES: [&str; 17] = [
        "ok",
        "notsupp",
        "timeout",
        "nospc",
        "transport",
        "target",
        "resv_conflict",
        "medium",
        "protection",
        "resource",
        "ioerr",
        "dm_requeue",
        "again",
        "dev_resource",
        "zone_open_resource",
        "zone_active_resource",
        "offline",
    ];
    NAMES
        .get(status as usize)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("code_{status}"))
}

/// The `kind` of a stall (`StallEvent::stall`): `device` for [`STALL_DEVICE`] (requests at the
/// device, none completed), `dispatch` otherwise (requests queued, none dispatched).
pub fn stall_kind_name(kind: u32) -> &'static str {
    if kind == STALL_DEVICE {
        "device"
    } else {
        "dispatch"
    }
}

/// A task's `comm` as the kernel stores it (16 bytes, NUL-padded) → text.
pub fn comm(raw: &[u8; 16]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// Op, flags and rwbs of a class, as the JSON API shows them (flattened into each record).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassInfo {
    /// `op` label value (`read`, `write`, `flush`, ...).
    pub op: &'static str,
    /// Set flags, as label names (`preflush`, `fua`, `sync`, `meta`, `readahead`, `log`).
    pub flags: Vec<&'static str>,
    /// blktrace rwbs letters, e.g. `FWFSM`.
    pub rwbs: String,
    /// I/O priority class of the request (`none`, `rt`, `be`, `idle`:
    /// [`observer_common::class::IOPRIO_CLASSES`]), read when it entered.
    pub ioprio_class: &'static str,
}

impl ClassInfo {
    /// Decodes a class word (see [`observer_common::class`]).
    pub fn of(class: u16) -> ClassInfo {
        let c = Class(class);
        ClassInfo {
            op: c.op().name(),
            flags: FLAGS
                .iter()
                .filter(|(b, _)| c.has(*b))
                .map(|(_, n)| *n)
                .collect(),
            rwbs: c.rwbs(&mut [0; 8]).to_string(),
            ioprio_class: c.ioprio_class(),
        }
    }
}

/// `(label, value)` pairs of a (device, class) series: `device`, `op`, then every flag of
/// [`FLAGS`] as `"true"`/`"false"`, then `ioprio_class`, in that order (the order of the
/// exported label set).
pub fn class_label_values(device: &str, class: Class) -> Vec<&str> {
    let mut v = vec![device, class.op().name()];
    for (bit, _) in FLAGS {
        v.push(if class.has(bit) { "true" } else { "false" });
    }
    v.push(class.ioprio_class());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names() {
        assert_eq!(status_name(10), "ioerr");
        assert_eq!(status_name(200), "code_200");
    }
}
