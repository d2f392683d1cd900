//! The kernel's own witnesses of block I/O: /proc/diskstats and an ftrace instance recording
//! `block_io_start`.

use std::time::{Duration, Instant};

use super::{Daemon, Ftrace, FtraceSpec, LoopDev, Metrics, TraceEvent};

/// The /proc/diskstats fields of a device, by name.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskStats {
    pub reads: u64,
    pub reads_merged: u64,
    pub read_ms: u64,
    pub writes: u64,
    pub writes_merged: u64,
    pub write_ms: u64,
    pub in_flight: u64,
    pub discards: u64,
    pub flushes: u64,
    /// Sectors (512 B) read, written (WRITE_ZEROES included: block/blk-core.c accounts it as a
    /// write) and discarded, as completed: `blk_account_io_completion` adds `bytes >> 9`.
    pub read_sectors: u64,
    pub write_sectors: u64,
    pub discard_sectors: u64,
}

pub fn diskstats(name: &str) -> DiskStats {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))
        .expect("device in diskstats");
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .map(|v| v.parse().unwrap())
        .collect();
    DiskStats {
        reads: f[0],
        reads_merged: f[1],
        read_ms: f[3],
        writes: f[4],
        writes_merged: f[5],
        write_ms: f[7],
        in_flight: f[8],
        discards: f.get(11).copied().unwrap_or(0),
        flushes: f.get(15).copied().unwrap_or(0),
        read_sectors: f[2],
        write_sectors: f[6],
        discard_sectors: f.get(13).copied().unwrap_or(0),
    }
}

/// Waits until the device has nothing in flight (diskstats) for a moment.
pub fn quiesce(name: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut quiet = 0;
    while quiet < 5 {
        assert!(Instant::now() < deadline, "{name} did not quiesce");
        if diskstats(name).in_flight == 0 {
            quiet += 1;
        } else {
            quiet = 0;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scrape with the devices' /proc/diskstats read just before and just after it, retried
/// until both reads agree on every completed count: the witness and the scrape then describe
/// the same instant. (Read in sequence, a few reads that udev or the filesystem issued between
/// the scrape and the diskstats read counted on one side only: +4 reads once in CI's run,
/// −2 writes and −2 flushes once under heavy load.) Fails after 10 s of disagreement.
pub fn scrape_between_equal_diskstats(
    daemon: &Daemon,
    devs: &[&LoopDev],
) -> (Metrics, Vec<DiskStats>) {
    let done = |d: &DiskStats| (d.reads, d.writes, d.flushes, d.discards);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a: Vec<DiskStats> = devs.iter().map(|d| diskstats(&d.name)).collect();
        let m = daemon.scrape();
        let b: Vec<DiskStats> = devs.iter().map(|d| diskstats(&d.name)).collect();
        if a.iter().map(done).eq(b.iter().map(done)) {
            return (m, b);
        }
        assert!(
            Instant::now() < deadline,
            "the devices' diskstats kept changing around every scrape for 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One `block_io_start` (or other `block_rq` format: `block_rq_issue`) event from an ftrace
/// instance: what entered the block layer (or was dispatched), on which disk.
#[derive(Clone, Debug)]
pub struct IoStart {
    /// The disk, `MKDEV(major, minor)`.
    pub kdev: u32,
    pub rwbs: String,
    /// First sector (512 B).
    pub sector: u64,
    pub sectors: u64,
    pub comm: String,
}

/// An [`Ftrace`] of one event of the `block_rq` format for some disks.
pub struct IoTrace(Ftrace);

impl IoTrace {
    /// `block_io_start` on one disk (`MKDEV`).
    pub fn start(kdev: u32) -> IoTrace {
        IoTrace::of("block_io_start", &[kdev])
    }

    /// `event` (`block_io_start`, `block_rq_issue`, ...) on the disks `kdevs` (`MKDEV`).
    pub fn of(event: &'static str, kdevs: &[u32]) -> IoTrace {
        IoTrace(Ftrace::start(
            "io",
            FtraceSpec {
                events: &[event],
                kdevs,
                ..Default::default()
            },
        ))
    }

    /// Stops recording and returns the events.
    pub fn stop(&self) -> Vec<IoStart> {
        self.0.stop().iter().map(IoStart::from).collect()
    }
}

impl From<&TraceEvent> for IoStart {
    /// Panics on an event without "sector + sectors" (not of the `block_rq` format).
    fn from(e: &TraceEvent) -> IoStart {
        let (sector, sectors) = e.range().expect("trace line format");
        IoStart {
            kdev: e.kdev,
            rwbs: e.rwbs().to_string(),
            sector,
            sectors,
            comm: e
                .fields
                .last()
                .unwrap()
                .trim_matches(|c| c == '[' || c == ']')
                .to_string(),
        }
    }
}

/// Completions of the given disks that the kernel ran on top of a thread of PID 1, recorded by
/// a private ftrace instance limited to PID 1's threads (`set_event_pid`, `event-fork`);
/// removed on drop.
///
/// Why: the kernel of our development and CI machines (6.18.44-fc, a Firecracker guest whose
/// PID 1 is the sandbox agent) runs no BPF program in the context of PID 1's threads. A
/// `block_rq_complete` that its BLOCK softirq processes on top of such a thread (`local_bh_enable`
/// in the agent's own kernel work) reaches ftrace but not the observer, with
/// `recursion_misses` 0: the request is counted lost. Measured with a counter for `tgid == 1`
/// in `rq_complete`: 0 runs, while ftrace recorded 223 completions in that context. So every
/// lost completion must be one of these; on a kernel without that behaviour (the matrix VMs)
/// there are none.
///
/// Not started in the kernel-matrix VMs (`BLKOBS_VM`; it then records nothing): their PID 1 is
/// the payload's own busybox init, asleep in `wait4` for the whole run, so no completion can run
/// on top of it and the tests allow 0 lost there anyway. And there, ftrace instances froze the
/// whole guest (no console output, not even from the init's watchdog): Debian's 5.10 under
/// TCG, a loop of "mkdir instance, filter and enable `block_rq_complete`, disable, read, rmdir"
/// under fio froze at its first cycle with `set_event_pid` + `event-fork`, and after 20 cycles
/// without them; CI-length runs froze twice at a test's teardown.
pub struct Pid1Completions {
    trace: Option<Ftrace>,
}

impl Pid1Completions {
    /// Starts recording `block_rq_complete` for the disks `kdevs` (`MAJOR << 20 | MINOR`, as
    /// the tracepoint's `dev` field) in the context of PID 1's current threads and their
    /// children.
    pub fn start(kdevs: &[u32]) -> Pid1Completions {
        if std::env::var_os("BLKOBS_VM").is_some() {
            return Pid1Completions { trace: None };
        }
        let tids: Vec<String> = std::fs::read_dir("/proc/1/task")
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        Pid1Completions {
            trace: Some(Ftrace::start(
                "pid1",
                FtraceSpec {
                    events: &["block_rq_complete"],
                    kdevs,
                    buffer_kb: 4096,
                    pids: &tids,
                    ..Default::default()
                },
            )),
        }
    }

    /// Stops; the number of completions recorded per disk, as `(kdev, count)`.
    pub fn stop(&self) -> Vec<(u32, u64)> {
        let Some(t) = &self.trace else {
            return Vec::new();
        };
        let mut counts: Vec<(u32, u64)> = Vec::new();
        for e in t.stop() {
            match counts.iter_mut().find(|(d, _)| *d == e.kdev) {
                Some((_, n)) => *n += 1,
                None => counts.push((e.kdev, 1)),
            }
        }
        counts
    }

    /// Stops; the completions recorded, as ftrace's events (the disk, the CPU).
    pub fn stop_events(&self) -> Vec<TraceEvent> {
        self.trace.as_ref().map(|t| t.stop()).unwrap_or_default()
    }

    /// `n` recorded completions, as the tests print them: "not traced in the VM" there.
    pub fn shown(&self, n: f64) -> String {
        match self.trace {
            Some(_) => n.to_string(),
            None => "not traced in the VM".into(),
        }
    }

    /// Recorded completions of `kdev` (after [`Pid1Completions::stop`]).
    pub fn of(counts: &[(u32, u64)], kdev: u32) -> u64 {
        counts
            .iter()
            .find(|(d, _)| *d == kdev)
            .map_or(0, |(_, n)| *n)
    }
}

/// An [`Ftrace`] counting one `block` event (`block_rq_requeue`, ...) on one disk (`dev ==
/// kdev`, `MKDEV(maj, min)` as the event's `dev` field).
pub struct BlockEventCount(Ftrace);

impl BlockEventCount {
    /// Starts recording `events/block/<event>` for disk `kdev`.
    pub fn start(event: &'static str, kdev: u32) -> BlockEventCount {
        BlockEventCount(Ftrace::start(
            "count",
            FtraceSpec {
                events: &[event],
                kdevs: &[kdev],
                buffer_kb: 8192,
                ..Default::default()
            },
        ))
    }

    /// Stops; the number of events recorded (panics if the buffer overflowed).
    pub fn stop(&self) -> u64 {
        self.0.stop().len() as u64
    }
}
