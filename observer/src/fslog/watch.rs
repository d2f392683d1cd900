//! The discovery thread: reruns discovery when the mount table changes, keeps `LOG_RANGES`
//! and the shared [`FsLogState`] current, and logs what changed.

use std::{
    collections::BTreeMap,
    fs::File,
    io,
    path::Path,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use observer_common::maps::LogRanges;
use tracing::{info, warn};

use super::{
    discovery::{discover, Discovery},
    sources::Sources,
    FORCE_REFRESH, POLL_INTERVAL,
};

/// Shared, current discovery result (read by `/devices` and `/metrics`).
#[derive(Default)]
pub struct FsLogState {
    current: RwLock<Discovery>,
}

impl FsLogState {
    /// A copy of the current discovery.
    pub fn get(&self) -> Discovery {
        self.current.read().expect("fslog lock").clone()
    }
}

fn log_changes(old: &Discovery, new: &Discovery) {
    for w in &new.warnings {
        if !old.warnings.contains(w) {
            warn!("{w}");
        }
    }
    if old.ranges != new.ranges {
        for fs in &new.filesystems {
            for e in &fs.log {
                info!(fstype = %fs.fstype, mountpoint = %fs.mountpoints[0], device = %e.device, disk = %e.disk,
                      kind = ?e.kind, start = e.start, end = e.end, "filesystem log range");
            }
        }
        for name in old.ranges.keys().filter(|k| !new.ranges.contains_key(*k)) {
            info!(disk = %name, "no filesystem log on this disk any more");
        }
    }
}

/// Runs discovery now and then on every mountinfo change (POLLPRI) or every
/// [`POLL_INTERVAL`], on a dedicated thread, keeping `LOG_RANGES` and `state` up to date.
/// `write` applies the wanted `LOG_RANGES` contents, disk (`mkdev`) → ranges (normally
/// [`crate::bpf::devslots::DevSlots::set_log_ranges`]).
pub fn spawn(
    mut write: impl FnMut(&BTreeMap<u32, LogRanges>) + Send + 'static,
    state: Arc<FsLogState>,
    sources: Sources,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("fslog".into()).spawn(move || {
        let mut last_text = String::new();
        let mut last_run: Option<Instant> = None;
        loop {
            let text = match std::fs::read_to_string(&sources.mountinfo) {
                Ok(t) => t,
                Err(e) => {
                    warn!(path = %sources.mountinfo.display(), error = %e, "cannot read mountinfo; filesystem logs not updated");
                    std::thread::sleep(POLL_INTERVAL);
                    continue;
                }
            };
            if text != last_text || last_run.is_none_or(|t| t.elapsed() >= FORCE_REFRESH) {
                let d = discover(&text, &sources);
                write(&d.map_values());
                let mut cur = state.current.write().expect("fslog lock");
                log_changes(&cur, &d);
                *cur = d;
                last_text = text;
                last_run = Some(Instant::now());
            }
            wait_mountinfo_change(&sources.mountinfo, POLL_INTERVAL);
        }
    })
}

/// Blocks until the mount table changes (POLLPRI on mountinfo) or `timeout` passes.
fn wait_mountinfo_change(path: &Path, timeout: Duration) {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let Ok(mut f) = File::open(path) else {
        std::thread::sleep(timeout);
        return;
    };
    // The kernel reports a change relative to what this open file has seen: read it first.
    let mut sink = Vec::new();
    let _ = f.read_to_end(&mut sink);
    let mut pfd = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLPRI | libc::POLLERR,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if n > 0 {
        // Let a burst of mount changes (mount + remount) settle.
        std::thread::sleep(Duration::from_millis(100));
    }
}
