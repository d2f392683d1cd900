//! Kernel time: `CLOCK_MONOTONIC` nanoseconds, the clock of `bpf_ktime_get_ns()` that every
//! timestamp in the maps and ring-buffer records uses, and its conversion to wall-clock time.

use std::time::{Duration, SystemTime};

/// `CLOCK_MONOTONIC` now, in ns: the clock of `bpf_ktime_get_ns()` (kernel/bpf/helpers.c), so
/// directly comparable with the timestamps the programs store.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Both clocks read at one instant, to convert kernel monotonic ns to wall-clock time and back.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// `CLOCK_MONOTONIC` at the instant (ns).
    pub mono_now: u64,
    /// Wall clock at the same instant.
    pub wall_now: SystemTime,
}

impl Clock {
    /// Reads both clocks now.
    pub fn now() -> Clock {
        Clock {
            mono_now: monotonic_ns(),
            wall_now: SystemTime::now(),
        }
    }

    /// Wall-clock time of a monotonic timestamp (ns); timestamps after `mono_now` map into the
    /// future.
    pub fn wall(&self, mono_ns: u64) -> SystemTime {
        if mono_ns <= self.mono_now {
            self.wall_now - Duration::from_nanos(self.mono_now - mono_ns)
        } else {
            self.wall_now + Duration::from_nanos(mono_ns - self.mono_now)
        }
    }

    /// A monotonic timestamp (ns) as RFC 3339 UTC with milliseconds, e.g.
    /// `2026-11-30T04:20:00.123Z`.
    pub fn rfc3339(&self, mono_ns: u64) -> String {
        humantime::format_rfc3339_millis(self.wall(mono_ns)).to_string()
    }

    /// Monotonic ns of a wall-clock time; saturates at 0 for times before boot.
    pub fn mono(&self, wall: SystemTime) -> u64 {
        match self.wall_now.duration_since(wall) {
            Ok(d) => self.mono_now.saturating_sub(d.as_nanos() as u64),
            Err(e) => self.mono_now + e.duration().as_nanos() as u64,
        }
    }
}
