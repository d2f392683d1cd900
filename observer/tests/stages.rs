//! The queue and device stages against an independent per-request record: an ftrace instance
//! records `block_bio_queue` (btt Q), `block_rq_issue` (D) and `block_rq_complete` (C) on the
//! test device with the monotonic clock; every 4 KiB direct write goes to its own block (no
//! merges, no repeats), so the three events of one request are paired by sector. The sums and
//! counts of the observer's `queue` and `device` histograms must equal the witness's Q2D and
//! D2C sums within 1 µs per request on average (the two read the clock at slightly different
//! instants of the same events: measured +43 ns per request for Q2D and −370 ns for D2C on
//! the development machine) and its request count exactly.

mod support;

use std::{
    collections::HashMap,
    process::{Command, Stdio},
};

use support::*;

const EVENTS: [&str; 3] = ["block_bio_queue", "block_rq_issue", "block_rq_complete"];

/// An [`Ftrace`] of the three events on one disk, mono clock.
struct StageTrace(Ftrace);

impl StageTrace {
    fn start(kdev: u32) -> StageTrace {
        StageTrace(Ftrace::start(
            "stages",
            FtraceSpec {
                events: &EVENTS,
                kdevs: &[kdev],
                buffer_kb: 32768,
                mono: true,
                ..Default::default()
            },
        ))
    }

    /// Stops and returns (event, sector, time in ns) in trace order.
    fn stop(&self) -> Vec<(String, u64, u64)> {
        self.0
            .stop()
            .into_iter()
            .map(|e| {
                let (sector, _) = e.range().expect("trace line format");
                (e.event.to_string(), sector, e.t_ns)
            })
            .collect()
    }
}

/// fio random 4 KiB direct writes, each block once, queue depth 32 on 4 request slots
/// (mq-deadline, `nr_requests` 4): queue and device stages against the ftrace record.
#[test]
fn queue_and_device_stages_match_ftrace() {
    if !require_root("queue_and_device_stages_match_ftrace") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dev = LoopDev::new(64, "mq-deadline");
    dev.set_queue("nomerges", "2");
    // Few request slots for many writes in flight: most bios wait for a tag, so the queue
    // stage is long and starts at the bio's entry (Q), before the request exists.
    dev.set_queue("nr_requests", "4");
    // Every request of the run enters an indexed disk (a disk made after the daemon started
    // gets its slot at the next rescan).
    wait_tracked(&daemon, &dev.name);
    quiesce(&dev.name);
    let before = daemon.scrape();
    let trace = StageTrace::start(dev.kdev());
    let st = Command::new("fio")
        .args([
            "--name=stages",
            &format!("--filename={}", dev.path),
            "--rw=randwrite",
            "--bs=4k",
            "--direct=1",
            "--ioengine=libaio",
            "--iodepth=32",
            "--size=24M",
            "--output=/dev/null",
        ])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    quiesce(&dev.name);
    let events = trace.stop();
    daemon.wait_settled(&[&dev.name]);
    let after = daemon.scrape();

    // Pair by sector: every block is written once.
    let mut by_sector: HashMap<u64, [Option<u64>; 3]> = HashMap::new();
    for (e, sector, t) in &events {
        let i = EVENTS.iter().position(|x| x == e).unwrap();
        let slot = &mut by_sector.entry(*sector).or_default()[i];
        assert!(slot.is_none(), "{e} twice for sector {sector}");
        *slot = Some(*t);
    }
    let (mut n, mut q2d, mut d2c) = (0u64, 0u64, 0u64);
    for (sector, [q, d, c]) in &by_sector {
        let (Some(q), Some(d), Some(c)) = (q, d, c) else {
            panic!("sector {sector}: incomplete record {:?}", by_sector[sector]);
        };
        n += 1;
        q2d += d - q;
        d2c += c - d;
    }
    assert_eq!(n, 24 * 256, "fio wrote every block once");
    let sum = |m: &Metrics, stage: &str, what: &str| {
        m.sum(
            &format!("blkobs_request_latency_seconds_{what}"),
            &[
                ("device", dev.name.as_str()),
                ("op", "write"),
                ("stage", stage),
            ],
        )
    };
    let count = sum(&after, "queue", "count") - sum(&before, "queue", "count");
    let delta = |family: &str, labels: &[(&str, &str)]| {
        after.sum(family, labels) - before.sum(family, labels)
    };
    let on_dev = [("device", dev.name.as_str())];
    eprintln!(
        "{}: witness {n} requests; ours queue {count}, device {}, total {}; unindexed {}, \
         untracked {}, lost {}, dropped {}",
        dev.name,
        sum(&after, "device", "count") - sum(&before, "device", "count"),
        sum(&after, "total", "count") - sum(&before, "total", "count"),
        delta("blkobs_unindexed_requests_total", &[]),
        delta("blkobs_untracked_completions_total", &on_dev),
        delta("blkobs_lost_completions_total", &on_dev),
        delta("blkobs_dropped_requests_total", &[]),
    );
    assert_eq!(
        count, n as f64,
        "queue-stage samples vs the witness's requests"
    );
    let device_count = sum(&after, "device", "count") - sum(&before, "device", "count");
    assert_eq!(
        device_count, n as f64,
        "device-stage samples vs the witness's requests"
    );
    for (stage, witness) in [("queue", q2d), ("device", d2c)] {
        let ours = sum(&after, stage, "sum") - sum(&before, stage, "sum");
        let w = witness as f64 * 1e-9;
        let tol = n as f64 * 1e-6;
        eprintln!(
            "{stage}: observer {ours:.6} s, ftrace {w:.6} s over {n} requests: {:+.0} ns per request",
            (ours - w) / n as f64 * 1e9
        );
        assert!(
            (ours - w).abs() <= tol,
            "{stage}: observer {ours} s vs ftrace {w} s (tolerance {tol} s)"
        );
    }
}
