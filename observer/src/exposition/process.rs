//! The standard process metrics every Prometheus client library exports, from the `prometheus`
//! crate's [`ProcessCollector`] (reads `/proc/self`): `process_cpu_seconds_total` (whole
//! seconds: the crate counts in integers), `process_open_fds`, `process_max_fds`,
//! `process_virtual_memory_bytes`, `process_resident_memory_bytes`,
//! `process_start_time_seconds` (Unix time), `process_threads`.

use prometheus::{
    core::Collector,
    process_collector::ProcessCollector,
    proto::{Gauge, MetricFamily, MetricType},
};

/// The process collector, and the start time worked out without `/proc/stat`.
pub struct ProcessMetrics {
    collector: ProcessCollector,
    /// Start time (Unix seconds) from `/proc/self/stat` and the clocks, used when the collector
    /// has none: it needs the boot time from `/proc/stat`, which the systemd unit's
    /// `ProcSubset=pid` hides.
    start_time: Option<f64>,
}

impl Default for ProcessMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessMetrics {
    /// The collector for this process.
    pub fn new() -> ProcessMetrics {
        ProcessMetrics {
            collector: ProcessCollector::for_self(),
            start_time: start_time_without_proc_stat(),
        }
    }

    /// The families, read now. Empty if `/proc/self` cannot be read.
    pub fn families(&self) -> Vec<MetricFamily> {
        let mut families = self.collector.collect();
        for f in &mut families {
            if f.name() == "process_start_time_seconds" && f.get_field_type() == MetricType::GAUGE {
                for m in f.mut_metric() {
                    let Some(t) = self.start_time else { continue };
                    if m.get_gauge().get_value() == 0.0 {
                        let mut g = Gauge::default();
                        g.set_value(t.floor());
                        m.set_gauge(g);
                    }
                }
            }
        }
        families
    }
}

/// When this process started (Unix seconds): now minus its age, the age being
/// `CLOCK_BOOTTIME` now minus `/proc/self/stat` `starttime` (clock ticks after boot). Reads only
/// `/proc/self`.
pub fn start_time_without_proc_stat() -> Option<f64> {
    let ticks = procfs::process::Process::myself()
        .ok()?
        .stat()
        .ok()?
        .starttime;
    let started_after_boot = ticks as f64 / procfs::ticks_per_second() as f64;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return None;
    }
    let since_boot = ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_secs_f64();
    Some(now - (since_boot - started_after_boot))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_agrees_with_the_boot_time_method() {
        let ours = start_time_without_proc_stat().expect("start time");
        let boot = procfs::boot_time_secs().expect("/proc/stat btime") as f64;
        let ticks = procfs::process::Process::myself()
            .unwrap()
            .stat()
            .unwrap()
            .starttime;
        let theirs = boot + ticks as f64 / procfs::ticks_per_second() as f64;
        // btime is whole seconds.
        assert!((ours - theirs).abs() < 1.5, "{ours} vs {theirs}");
    }

    #[test]
    fn families_are_the_standard_ones() {
        let names: Vec<String> = ProcessMetrics::new()
            .families()
            .iter()
            .map(|f| f.name().to_string())
            .collect();
        for n in [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_threads",
        ] {
            assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
        }
    }
}
