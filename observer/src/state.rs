//! [`AppState`]: what the HTTP handlers, the background tasks and the reloader share. Built once
//! at startup by [`crate::daemon`]; nothing here depends on the HTTP layer.

use std::sync::{Arc, Mutex, RwLock};

use observer_common::maps::Settings;

use crate::{
    bpf::{
        loader::{AttachInfo, Probes},
        maps::KernelMaps,
    },
    collect::{
        events::History,
        gone::GoneDevices,
        reaper::{Reaped, Reaper},
        windows::HistogramWindows,
    },
    config::{DeviceFilter, LiveWebConfig},
    disks::DiskView,
    exposition::{selfmon::HttpRejections, BucketMap, ProcessMetrics, ScrapeBuffer},
    fslog::FsLogState,
};

/// The settings a configuration reload (SIGHUP) may change, swapped as a whole.
#[derive(Clone)]
pub struct ReloadableSettings {
    /// Which devices are exported (`[devices]`).
    pub filter: DeviceFilter,
    /// Exported histogram bucket bounds (`[histogram]`).
    pub buckets: BucketMap,
    /// Classic buckets beside the native ones in the protobuf exposition
    /// (`[histogram] classic_in_protobuf`).
    pub classic_in_protobuf: bool,
    /// Slow and stall thresholds (`[stalls]`) and the missed-merge window (`[merges]`), as in
    /// the kernel's `SETTINGS` map.
    pub settings: Settings,
    /// How long a disk that went away keeps its series (`[devices] forget_after`).
    pub forget_after: std::time::Duration,
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
    /// Housekeeping passes done (disk rescan, reaper, gone disks), for
    /// `blkobs_reaper_passes_total`: what a client waits on instead of sleeping.
    pub reaper_passes: std::sync::atomic::AtomicU64,
    /// Disks missing from `/sys/block`, until `[devices] forget_after` removes their series.
    pub gone: Mutex<GoneDevices>,
    /// Slow requests and stall episodes from the kernel.
    pub history: Mutex<History>,
    /// Histogram snapshots for `/histograms?since=`.
    pub windows: Mutex<HistogramWindows>,
    /// The last filesystem log discovery (see [`crate::fslog`]).
    pub fslog: Arc<FsLogState>,
    /// Requests and connections refused by the `[http]` limits and the web configuration.
    pub http_rejected: Arc<HttpRejections>,
    /// The web configuration in effect (TLS, basic auth); a reload replaces it.
    pub web: Arc<LiveWebConfig>,
    /// The latest scan of the disks (device names, bio-based, dm names) and the disks that
    /// exist or existed while the daemon ran (what `device=` accepts).
    pub disks: DiskView,
    /// The standard `process_*` metrics of the daemon itself.
    pub process: ProcessMetrics,
    /// The buffer of the last `/metrics` body, for the next one to be written into.
    pub scrape_buffer: Arc<ScrapeBuffer>,
    /// The attached programs (their run counters are read at each scrape). Taken and dropped at
    /// shutdown, which detaches them.
    pub programs: Mutex<Option<Probes>>,
    /// The reaper's request-state probe (also held by [`AppState::reaper`]), for its run
    /// counters; `None` where the kernel refused it.
    pub request_probe: Option<Arc<crate::bpf::reqstate::RequestProbe>>,
}

impl AppState {
    /// Run counters of every program the daemon loaded (attached ones and the reaper's probe),
    /// and whether their run counts and times are worth exporting
    /// ([`crate::bpf::progstats::runs_exported`]).
    pub fn program_runs(&self) -> (Vec<crate::bpf::progstats::ProgramRun>, bool) {
        let mut runs = self
            .programs
            .lock()
            .expect("programs lock")
            .as_ref()
            .map(Probes::program_runs)
            .unwrap_or_default();
        // Not through the reaper's lock: a scrape would wait for a whole reaper pass.
        if let Some(p) = &self.request_probe {
            runs.extend(p.program_runs());
        }
        let timed =
            crate::bpf::progstats::runs_exported(&runs, crate::bpf::progstats::stats_enabled());
        (runs, timed)
    }
}
