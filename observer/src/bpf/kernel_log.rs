//! Kernel-side diagnostics: the records the programs write with aya-log on their rare paths
//! (observer-ebpf `maps::count`: a map full, a stale entry, a clock anomaly, dropped events, an
//! unindexed disk — at the 1st, 2nd, 4th … occurrence per CPU), drained from the `AYA_LOGS`
//! ring buffer into the daemon's log under the target `observer::kernel`. Nothing is logged per
//! request; the counts themselves are the `blkobs_*` self-monitoring metrics.

use aya::Ebpf;
use observer_common::maps::Counter;
use tokio::io::unix::AsyncFd;
use tracing::{debug, error, info, trace, warn};

/// Forwards aya-log records to `tracing` at their level, target `observer::kernel`.
pub struct TracingLog;

impl log::Log for TracingLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, r: &log::Record<'_>) {
        let msg = named(r.args().to_string());
        match r.level() {
            log::Level::Error => error!(target: "observer::kernel", "{msg}"),
            log::Level::Warn => warn!(target: "observer::kernel", "{msg}"),
            log::Level::Info => info!(target: "observer::kernel", "{msg}"),
            log::Level::Debug => debug!(target: "observer::kernel", "{msg}"),
            log::Level::Trace => trace!(target: "observer::kernel", "{msg}"),
        }
    }

    fn flush(&self) {}
}

/// `counter <index>: …` (as observer-ebpf `maps::count` logs it) with the counter's name
/// ([`Counter::name`]) in place of `counter <index>`; any other text unchanged.
fn named(text: String) -> String {
    let name = text
        .strip_prefix("counter ")
        .and_then(|r| r.split_once(':'))
        .and_then(|(i, rest)| Some((Counter::from_index(i.parse().ok()?)?.name(), rest)));
    match name {
        Some((name, rest)) => format!("{name}:{rest}"),
        None => text,
    }
}

/// The reader of the programs' `AYA_LOGS` ring buffer.
pub type KernelLog = aya_log::EbpfLogger<TracingLog>;

/// Takes `AYA_LOGS` out of the loaded object. `None` (with a warning saying what is lost) if
/// the object has no such map or it cannot be opened as a ring buffer; the programs then still
/// count every rare event in the `blkobs_*` metrics.
pub fn take(ebpf: &mut Ebpf) -> Option<KernelLog> {
    match aya_log::EbpfLogger::init_with_logger(ebpf, TracingLog) {
        Ok(l) => Some(l),
        Err(e) => {
            warn!(error = %e, "kernel-side diagnostics (aya-log) are off: the blkobs_* self-monitoring counters still count every rare event");
            None
        }
    }
}

/// Drains `log` into the daemon's log whenever the ring buffer is readable, until the daemon
/// stops. Errors if its fd cannot be polled.
pub fn spawn_reader(log: KernelLog) -> std::io::Result<()> {
    // SAFETY: the logger owns its ring buffer's fd for as long as the AsyncFd lives.
    let mut fd = unsafe { AsyncFd::register(log) }?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else {
                return;
            };
            // Cleared before draining, as for EVENTS (daemon/mod.rs): a wakeup that came during
            // the drain is not lost.
            guard.clear_ready();
            guard.get_inner_mut().flush();
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::named;

    #[test]
    fn counter_index_is_named() {
        assert_eq!(
            named("counter 6: 4 on CPU 1".into()),
            "unindexed_requests: 4 on CPU 1"
        );
        assert_eq!(
            named("counter 5: 1 on CPU 0".into()),
            "bio_queue_map_full: 1 on CPU 0"
        );
        assert_eq!(
            named("counter 99: 1 on CPU 0".into()),
            "counter 99: 1 on CPU 0"
        );
        assert_eq!(named("something else".into()), "something else");
    }
}
