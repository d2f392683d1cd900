//! [`AppState`]: what the HTTP handlers, the background tasks and the reloader share. Built once
//! at startup by [`crate::daemon`]; nothing here depends on the HTTP layer.

use std::sync::{Arc, Mutex, RwLock};

use observer_common::maps::Settings;

use crate::{
    bpf::{loader::AttachInfo, maps::KernelMaps},
    collect::{
        events::History,
        reaper::{Reaped, Reaper},
        windows::HistogramWindows,
    },
    config::DeviceFilter,
    exposition::{BucketMap, ProcessMetrics},
    fslog::FsLogState,
};

/// The settings a configuration reload (SIGHUP) may change, swapped as a whole.
#[derive(Clone)]
pub struct ReloadableSettings {
    /// Which devices are exported (`[devices]`).
    pub filter: DeviceFilter,
    /// Exported histogram bucket bounds (`[histogram]`).
    pub buckets: BucketMap,
    /// Slow and stall thresholds (`[stalls]`; also in the kernel's `SETTINGS` map).
    pub settings: Settings,
}

/// Everything the handlers and background tasks share, behind one `Arc`.
pub struct AppState {
    /// The kernel maps.
    pub maps: KernelMaps,
    /// Settings a reload may change.
    pub runtime: RwLock<ReloadableSettings>,
    /// How the programs are attached (for `blkobs_build_info`).
    pub info: AttachInfo,
    /// Requests retired by the reaper.
    pub reaped: Reaped,
    /// The reaper's state (its request-state probe, suspects between passes).
    pub reaper: Mutex<Reaper>,
    /// Slow requests and stall episodes from the kernel.
    pub history: Mutex<History>,
    /// Histogram snapshots for `/histograms?since=`.
    pub windows: Mutex<HistogramWindows>,
    /// The last filesystem log discovery (see [`crate::fslog`]).
    pub fslog: Arc<FsLogState>,
    /// The standard `process_*` metrics of the daemon itself.
    pub process: ProcessMetrics,
}
