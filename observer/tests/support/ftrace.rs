//! The ftrace witness, once: a private tracefs instance recording `block` events of some disks
//! (optionally with the mono clock, or only in some tasks' context), and its records parsed.
//! Every test's trace (requests dispatched, bios queued and split, completions in PID 1's
//! context, requeues, ...) is one of these.

use std::{
    ops::Range,
    path::{Path, PathBuf},
    process::Command,
};

use super::unique;

/// The `trace` file prints times in µs, truncated: an event printed at `t` happened in
/// [`printed_window`]`(t)`, up to this much later.
pub const TRACE_PRINT_NS: u64 = 1_000;

/// When an event printed at `t_ns` happened: `t_ns..t_ns + TRACE_PRINT_NS` (ftrace's `trace`
/// file prints µs, truncated).
pub fn printed_window(t_ns: u64) -> Range<u64> {
    t_ns..t_ns + TRACE_PRINT_NS
}

/// CLOCK_MONOTONIC now (ns): the clock of a `mono` ftrace instance.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`.
    assert_eq!(
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
        0
    );
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Mounts tracefs at /sys/kernel/tracing when it is not mounted yet (a fresh machine), so the
/// ftrace witness is available. Left mounted: it is the kernel's standard location.
pub fn ensure_tracefs() {
    let t = Path::new("/sys/kernel/tracing");
    if t.join("instances").is_dir() {
        return;
    }
    let _ = Command::new("mount")
        .args(["-t", "tracefs", "tracefs", "/sys/kernel/tracing"])
        .status();
    if !t.join("instances").is_dir() {
        eprintln!("could not mount tracefs at /sys/kernel/tracing");
    }
}

/// The `trace` file of an ftrace instance directory; panics if the buffer overflowed (the
/// witness would be incomplete).
pub fn read_trace(instance: &Path) -> String {
    let text = std::fs::read_to_string(instance.join("trace")).unwrap();
    let counts = text
        .lines()
        .find_map(|l| l.strip_prefix("# entries-in-buffer/entries-written: "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.split_once('/'))
        .map(|(a, b)| (a.to_string(), b.to_string()));
    if let Some((kept, written)) = counts {
        assert_eq!(
            kept, written,
            "trace buffer overflowed: the witness is incomplete"
        );
    }
    text
}

/// A private ftrace instance; its events are disabled and the instance removed on drop (also
/// when the test fails).
pub struct Ftrace {
    dir: PathBuf,
    events: Vec<&'static str>,
}

/// One recorded event.
#[derive(Clone, Debug)]
pub struct TraceEvent {
    /// The event's name (`block_rq_issue`).
    pub event: &'static str,
    /// Its timestamp (ns of the instance's clock: `mono` = CLOCK_MONOTONIC when asked for),
    /// as the `trace` file prints it: in µs, truncated (the last three digits are 0; when it
    /// happened: [`TraceEvent::printed_window`]).
    pub t_ns: u64,
    /// The disk, `MKDEV(major, minor)` as the event's `dev` field.
    pub kdev: u32,
    /// The CPU it ran on (the trace line's `[NNN]`).
    pub cpu: u32,
    /// The fields after the disk, split at whitespace ("WS", "4096", "()", "8", "+", "8",
    /// "[fio]" for the `block_rq` format).
    pub fields: Vec<String>,
}

impl TraceEvent {
    /// When it happened ([`printed_window`] of its printed time).
    pub fn printed_window(&self) -> Range<u64> {
        printed_window(self.t_ns)
    }

    /// The rwbs string (blk_fill_rwbs), the first field of every `block` event.
    pub fn rwbs(&self) -> &str {
        self.fields.first().map_or("", String::as_str)
    }

    /// `(sector, sectors)` of an event with "sector + sectors" in it.
    pub fn range(&self) -> Option<(u64, u64)> {
        let plus = self.fields.iter().position(|x| x == "+")?;
        Some((
            self.fields.get(plus.checked_sub(1)?)?.parse().ok()?,
            self.fields.get(plus + 1)?.parse().ok()?,
        ))
    }
}

/// What to record, before [`Ftrace::start`].
pub struct FtraceSpec<'a> {
    /// `events/block/<name>` to enable.
    pub events: &'a [&'static str],
    /// Only these disks (`MKDEV`); empty: every disk.
    pub kdevs: &'a [u32],
    /// Per-CPU buffer (KiB).
    pub buffer_kb: u32,
    /// The `mono` trace clock (timestamps comparable with the programs' CLOCK_MONOTONIC).
    pub mono: bool,
    /// Only in the context of these task ids and their children (`set_event_pid`,
    /// `event-fork`); empty: every task.
    pub pids: &'a [String],
}

impl Default for FtraceSpec<'_> {
    fn default() -> Self {
        FtraceSpec {
            events: &[],
            kdevs: &[],
            buffer_kb: 16384,
            mono: false,
            pids: &[],
        }
    }
}

impl Ftrace {
    /// Creates the instance (named `blkobs-<what>-<pid>-<n>`) and starts recording.
    pub fn start(what: &str, spec: FtraceSpec) -> Ftrace {
        ensure_tracefs();
        let dir =
            PathBuf::from("/sys/kernel/tracing/instances").join(unique(&format!("blkobs-{what}")));
        std::fs::create_dir(&dir).expect("tracefs instance (is /sys/kernel/tracing mounted?)");
        let t = Ftrace {
            dir,
            events: spec.events.to_vec(),
        };
        std::fs::write(t.dir.join("buffer_size_kb"), spec.buffer_kb.to_string()).unwrap();
        if spec.mono {
            std::fs::write(t.dir.join("trace_clock"), "mono").unwrap();
        }
        if !spec.pids.is_empty() {
            std::fs::write(t.dir.join("options/event-fork"), "1").unwrap();
            std::fs::write(t.dir.join("set_event_pid"), spec.pids.join(" ")).unwrap();
        }
        let filter: Vec<String> = spec.kdevs.iter().map(|d| format!("dev == {d}")).collect();
        for e in spec.events {
            let ev = t.dir.join("events/block").join(e);
            if !filter.is_empty() {
                std::fs::write(ev.join("filter"), filter.join(" || ")).unwrap();
            }
            std::fs::write(ev.join("enable"), "1").unwrap();
        }
        t
    }

    fn disable(&self) {
        for e in &self.events {
            let _ = std::fs::write(self.dir.join("events/block").join(e).join("enable"), "0");
        }
    }

    /// Stops recording; the events in the order the buffer gives them (per CPU, merged by
    /// time). Panics if the buffer overflowed (the witness would be incomplete).
    pub fn stop(&self) -> Vec<TraceEvent> {
        self.disable();
        let text = read_trace(&self.dir);
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            // "fio-123 [001] ..... 1234.567890123: block_rq_issue: 7,0 WS 4096 () 8 + 8 [fio]"
            let Some((event, head, rest)) = self
                .events
                .iter()
                .find_map(|e| line.split_once(&format!(" {e}: ")).map(|(h, r)| (*e, h, r)))
            else {
                continue;
            };
            let ts = head.trim_end_matches(':').rsplit(' ').next().unwrap();
            let (s, ns) = ts.split_once('.').expect("trace timestamp format");
            let ns = format!("{ns:0<9}");
            let t_ns = s.parse::<u64>().unwrap() * 1_000_000_000 + ns[..9].parse::<u64>().unwrap();
            let mut f = rest.split_whitespace();
            let (maj, min) = f
                .next()
                .and_then(|d| d.split_once(','))
                .expect("trace line format: no disk");
            let cpu = head
                .rsplit_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .and_then(|(c, _)| c.trim().parse().ok())
                .expect("trace line format: no [cpu]");
            out.push(TraceEvent {
                event,
                t_ns,
                cpu,
                kdev: (maj.parse::<u32>().unwrap() << 20) | min.parse::<u32>().unwrap(),
                fields: f.map(str::to_string).collect(),
            });
        }
        out
    }
}

impl Drop for Ftrace {
    fn drop(&mut self) {
        self.disable();
        let _ = std::fs::remove_dir(&self.dir);
    }
}
