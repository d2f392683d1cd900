//! Merge analysis against independent witnesses: an ftrace instance (mono clock, the clock of
//! `bpf_ktime_get_ns`) recording every `block_rq_issue` on the test device, from which the test
//! computes the dispatched sizes and the missed adjacent merges by the same rule (same op,
//! starts where the previous dispatch on the device ended, within the window), /proc/diskstats
//! (writes completed and merged) and fio's own I/O count.
//!
//! - `nomerges_2_misses_what_0_merges`: sequential 4 KiB direct writes from 4 threads, in
//!   batches of 16 (one plug per batch), with `nomerges` 0 and then 2 on the same loop device:
//!   with 2, more missed merges and fewer bios per request, as the witnesses say.
//! - `adjacent_unmerged_dispatches_match_ftrace`: O_DIRECT sequential writes at iodepth 1 (each
//!   write completes before the next is submitted: nothing to merge with, every dispatch
//!   adjacent to the previous one): missed merges, the size histogram and the recent pairs of
//!   `/merges` equal the ftrace record; the size histogram's count equals diskstats' writes.
//!   Then a reload to `window = "0s"` turns the check off.

mod support;

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use support::*;

/// Default `[merges] window` (ns).
const WINDOW_NS: u64 = 1_000_000;

/// One `block_rq_issue` record: time (mono ns), op letter, first sector, sectors.
#[derive(Clone, Debug, PartialEq)]
struct Issue {
    t: u64,
    op: char,
    sector: u64,
    sectors: u64,
}

/// An [`Ftrace`] of `block_rq_issue` on one disk with the mono clock.
struct IssueTrace(Ftrace);

impl IssueTrace {
    fn start(kdev: u32) -> IssueTrace {
        IssueTrace(Ftrace::start(
            "merges",
            FtraceSpec {
                events: &["block_rq_issue"],
                kdevs: &[kdev],
                mono: true,
                ..Default::default()
            },
        ))
    }

    /// Stops and returns the dispatches in time order.
    fn stop(&self) -> Vec<Issue> {
        let mut out: Vec<Issue> = self
            .0
            .stop()
            .into_iter()
            .map(|e| {
                let (sector, sectors) = e.range().expect("trace line format");
                Issue {
                    t: e.t_ns,
                    op: op_letter(e.rwbs()),
                    sector,
                    sectors,
                }
            })
            .collect();
        out.sort_by_key(|i| i.t);
        out
    }
}

/// The op letter of an rwbs string (kernel/trace/blktrace.c, blk_fill_rwbs): an optional
/// leading `F` (PREFLUSH) before the op letter (`W`, `R`, `D`, `F` for a flush, `N`, `Z`).
fn op_letter(rwbs: &str) -> char {
    let b: Vec<char> = rwbs.chars().collect();
    if b.len() >= 2 && b[0] == 'F' && "WRDFNZ".contains(b[1]) {
        b[1]
    } else {
        b.first().copied().unwrap_or('?')
    }
}

/// The witness's missed adjacent merges: (previous, this) for each dispatch that starts where
/// the dispatch just before it on the device ended, same op, both with data, at most
/// `window_ns` later.
fn missed_pairs(issues: &[Issue], window_ns: u64) -> Vec<(Issue, Issue)> {
    issues
        .windows(2)
        .filter(|w| {
            let (a, b) = (&w[0], &w[1]);
            a.op == b.op
                && a.sectors > 0
                && b.sectors > 0
                && a.sector + a.sectors == b.sector
                && b.t - a.t <= window_ns
        })
        .map(|w| (w[0].clone(), w[1].clone()))
        .collect()
}

/// What the daemon exports for writes on `dev` (all write classes summed): missed merges,
/// size histogram count and sum, per-`le` cumulative size counts, merged-bios sum.
#[derive(Debug, Default)]
struct Exported {
    missed: f64,
    size_count: f64,
    size_sum: f64,
    size_le: BTreeMap<u64, f64>,
    merged_sum: f64,
    merged_count: f64,
}

fn exported(m: &Metrics, dev: &str) -> Exported {
    let w = [("device", dev), ("op", "write")];
    let mut size_le = BTreeMap::new();
    for s in m.select("blkobs_request_size_bytes_bucket", &w) {
        let le = &s.labels["le"];
        if le != "+Inf" {
            *size_le
                .entry(le.parse::<f64>().unwrap() as u64)
                .or_insert(0.0) += s.value;
        }
    }
    Exported {
        missed: m.sum("blkobs_missed_merges_total", &w),
        size_count: m.sum("blkobs_request_size_bytes_count", &w),
        size_sum: m.sum("blkobs_request_size_bytes_sum", &w),
        size_le,
        merged_sum: m.sum("blkobs_request_merged_bios_sum", &w),
        merged_count: m.sum("blkobs_request_merged_bios_count", &w),
    }
}

/// `after - before`, field by field.
fn delta(after: &Exported, before: &Exported) -> Exported {
    Exported {
        missed: after.missed - before.missed,
        size_count: after.size_count - before.size_count,
        size_sum: after.size_sum - before.size_sum,
        size_le: after
            .size_le
            .iter()
            .map(|(le, v)| (*le, v - before.size_le.get(le).copied().unwrap_or(0.0)))
            .collect(),
        merged_sum: after.merged_sum - before.merged_sum,
        merged_count: after.merged_count - before.merged_count,
    }
}

/// Scrapes until the daemon has counted `writes` write requests on `dev` (their lives end at
/// completion, or when counted lost by the reaper a few seconds later), at most 15 s.
fn settled(d: &Daemon, dev: &str, before: &Exported, writes: u64) -> Exported {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let now = delta(&exported(&d.scrape(), dev), before);
        if now.size_count >= writes as f64 || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// One run of the multi-threaded batched writer on `dev`: (exported delta, witness issues,
/// diskstats writes delta, diskstats merged writes delta, fio's writes).
fn batched_writers(d: &Daemon, dev: &LoopDev) -> (Exported, Vec<Issue>, u64, u64, u64) {
    quiesce(&dev.name);
    let before = exported(&d.scrape(), &dev.name);
    let ds0 = diskstats(&dev.name);
    let trace = IssueTrace::start(dev.kdev());
    let filename = format!("--filename={}", dev.path);
    let job = ["--name=batched", &filename, "--thread", "--numjobs=4"];
    let out = fio(&[&job[..], &FIO_BATCHED_WRITES, &FIO_BATCHED_WRITE_JOBS].concat());
    quiesce(&dev.name);
    let issues = trace.stop();
    let ds1 = diskstats(&dev.name);
    let writes = ds1.writes - ds0.writes;
    let got = settled(d, &dev.name, &before, writes);
    (
        got,
        issues,
        writes,
        ds1.writes_merged - ds0.writes_merged,
        fio_writes(&out),
    )
}

#[test]
fn nomerges_2_misses_what_0_merges() {
    if !require_root("nomerges_2_misses_what_0_merges") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let dev = LoopDev::new(64, "none");
    // Wait for the daemon to give the new disk its per-device slot (missed merges need it).
    wait_tracked(&daemon, &dev.name);
    let mut runs = Vec::new();
    for nomerges in ["0", "2"] {
        dev.set_queue("nomerges", nomerges);
        let (got, issues, writes, merged, fio_ios) = batched_writers(&daemon, &dev);
        let witness = missed_pairs(&issues, WINDOW_NS).len() as f64;
        let w_issued = issues.iter().filter(|i| i.op == 'W').count() as u64;
        let bios_per_rq = (got.size_count + got.merged_sum) / got.size_count;
        eprintln!(
            "nomerges={nomerges}: requests {} (diskstats {writes}, ftrace {w_issued}), merged bios {} \
             (diskstats {merged}), fio {fio_ios} writes, bios/request {bios_per_rq:.2}, \
             missed merges {} (ftrace {witness})",
            got.size_count, got.merged_sum, got.missed
        );
        assert_eq!(got.size_count, writes as f64, "requests vs diskstats");
        assert_eq!(w_issued, writes, "ftrace dispatches vs diskstats");
        assert_eq!(got.merged_count, got.size_count);
        assert_eq!(
            got.merged_sum, merged as f64,
            "bios merged vs diskstats' merged writes"
        );
        assert_eq!(
            got.size_count + got.merged_sum,
            fio_ios as f64,
            "every bio of fio in exactly one request"
        );
        assert_eq!(got.size_sum, fio_ios as f64 * 4096.0);
        // Four CPUs' dispatches may reach the device's state in another order than ftrace's
        // timestamps: within 2 % (+ 8) of the witness. Seen on 5.10 under TCG with
        // nomerges=0 (a few dozen pairs): 9/8, 10/8, 13/15, 34/31, 30/24; with nomerges=2
        // (thousands) at most 15 apart (3,386/3,371).
        assert!(
            (got.missed - witness).abs() <= witness * 0.02 + 8.0,
            "missed merges {} vs ftrace {witness}",
            got.missed
        );
        runs.push((got, witness, merged));
    }
    let (m0, m2) = (&runs[0], &runs[1]);
    assert!(m0.2 > 0, "nomerges=0 merged nothing: the workload is wrong");
    assert_eq!(m2.2, 0, "nomerges=2 merged");
    // Whether nomerges=2 also makes adjacent dispatches is the kernel's business, not ours:
    // kernels with 26fed4ac4eab ("block: flush plug based on hardware and software queue
    // order", 5.16) and without 34e0a279a993 ("block: do not reverse request order when
    // flushing plug list", 6.3), like Debian's 6.1, issue a flushed plug back to front, so each
    // dispatch ends where the previous one started and none is a missed merge by the rule
    // (ftrace: 0, and so are we); 5.10 and 6.18 issue it in order (thousands). Either way the count equals the witness
    // (above); the premise below only holds where the witness shows it.
    if m2.1 > m0.1 {
        assert!(
            m2.0.missed > m0.0.missed,
            "missed merges: {} with nomerges=2, {} with 0 (ftrace {} and {})",
            m2.0.missed,
            m0.0.missed,
            m2.1,
            m0.1
        );
    }
    let per_rq = |e: &Exported| (e.size_count + e.merged_sum) / e.size_count;
    assert!(
        per_rq(&m2.0) < per_rq(&m0.0),
        "bios per request: {} with nomerges=2, {} with 0",
        per_rq(&m2.0),
        per_rq(&m0.0)
    );
}

#[test]
fn adjacent_unmerged_dispatches_match_ftrace() {
    if !require_root("adjacent_unmerged_dispatches_match_ftrace") {
        return;
    }
    let dir = TempDir::new("blkobs-merges");
    let config = dir.join("observer.toml");
    // A 1 s window: one write at a time, the gap between dispatches is a completion and a
    // submission — tens of µs here, milliseconds in a TCG guest of the kernel matrix (5.10:
    // 15 % of the gaps > 1 ms) — so no gap comes near the window's edge, where the observer's
    // and ftrace's clocks could disagree.
    std::fs::write(&config, "[merges]\nwindow = \"1s\"\n").unwrap();
    let mut daemon = Daemon::start(&["--config", config.to_str().unwrap()]);
    let dev = LoopDev::new(64, "none");
    wait_tracked(&daemon, &dev.name);
    quiesce(&dev.name);
    let before = exported(&daemon.scrape(), &dev.name);
    let ds0 = diskstats(&dev.name);
    let trace = IssueTrace::start(dev.kdev());
    // Sequential direct writes one at a time, sizes 4-64 KiB: each completes before the next
    // is submitted, so none can merge, and each starts where the previous one ended.
    let out = fio(&[
        "--name=adjacent",
        &format!("--filename={}", dev.path),
        "--rw=write",
        "--bsrange=4k-64k",
        "--direct=1",
        "--ioengine=psync",
        "--iodepth=1",
        "--size=24M",
    ]);
    quiesce(&dev.name);
    let issues = trace.stop();
    let ds1 = diskstats(&dev.name);
    let writes = ds1.writes - ds0.writes;
    let got = settled(&daemon, &dev.name, &before, writes);
    let pairs = missed_pairs(&issues, 1_000_000_000);
    // Writes only: udev may read the device after fio closes it (its inotify watch).
    let w_issues: Vec<&Issue> = issues.iter().filter(|i| i.op == 'W').collect();
    // The witness's size histogram, in the exported buckets: le = 512 B · 2^i.
    let mut w_le: BTreeMap<u64, f64> = BTreeMap::new();
    for le in got.size_le.keys() {
        let n = w_issues.iter().filter(|i| i.sectors * 512 <= *le).count();
        w_le.insert(*le, n as f64);
    }
    let w_bytes: u64 = w_issues.iter().map(|i| i.sectors * 512).sum();
    eprintln!(
        "{} dispatches (diskstats {writes}, fio {}), {} bytes; missed merges {} (ftrace {}); \
         observer: {} requests, {} bytes, {} merged bios",
        w_issues.len(),
        fio_writes(&out),
        w_bytes,
        got.missed,
        pairs.len(),
        got.size_count,
        got.size_sum,
        got.merged_sum
    );
    assert!(
        pairs.len() as u64 * 10 >= writes * 9,
        "the workload should make (nearly) every dispatch adjacent to the previous one"
    );
    assert_eq!(
        w_issues.len() as u64,
        writes,
        "ftrace dispatches vs diskstats"
    );
    assert_eq!(got.size_count, writes as f64, "size histogram vs diskstats");
    assert_eq!(got.missed, pairs.len() as f64, "missed merges vs ftrace");
    assert_eq!(got.size_sum, w_bytes as f64, "bytes vs ftrace");
    assert_eq!(got.size_le, w_le, "size histogram vs ftrace, per le");
    assert_eq!(got.merged_sum, 0.0, "nothing merged");
    assert_eq!(ds1.writes_merged, ds0.writes_merged);

    // The recent pairs of /merges are pairs of the witness, at the witness's times.
    let v = json(
        &daemon,
        &format!("/merges?device={}&format=json&limit=1000", dev.name),
    );
    let shown = v["pairs"].as_array().unwrap();
    // Ours and ftrace's clock are read by two callbacks of one tracepoint call, ours first (the
    // programs were attached before the trace was enabled, and a tracepoint runs its probes in
    // the order they were registered): so a dispatch time is at most ftrace's for that
    // request, and after ftrace's for the disk's previous dispatch (one write at a time).
    // ftrace's `trace` file prints µs: its times are the true ones truncated, by < 1 µs
    // (ours was 13 ns over the printed one once).
    // Bounds, not a tolerance: a TCG guest can be taken off the CPU between the two callbacks
    // for long (251 µs measured on 6.1, 7.3 ms once with three guests on two cores, which a
    // 5 ms tolerance failed). The pair itself is matched by its sectors.
    let previous_issue = |t: u64| issues.iter().map(|i| i.t).filter(|&u| u < t).max();
    assert!(!shown.is_empty(), "{v}");
    assert!(v["recorded"].as_u64().unwrap() >= pairs.len() as u64);
    for p in shown {
        let (a, b) = (&p["first"], &p["second"]);
        let found = pairs.iter().find(|(x, y)| {
            x.sector == a["sector"].as_u64().unwrap() && y.sector == b["sector"].as_u64().unwrap()
        });
        let Some((x, y)) = found else {
            panic!("pair not in the witness: {p}");
        };
        assert_eq!(a["sectors"].as_u64().unwrap(), x.sectors, "{p}");
        assert_eq!(b["sectors"].as_u64().unwrap(), y.sectors, "{p}");
        assert_eq!(
            (a["op"].as_str(), b["op"].as_str()),
            (Some("write"), Some("write"))
        );
        for (ours, theirs) in [(a, x), (b, y)] {
            let t = ours["dispatch_ns"].as_u64().unwrap();
            let after = previous_issue(theirs.t).unwrap_or(0);
            assert!(
                t < printed_window(theirs.t).end && t > after,
                "dispatch time {t} not in (ftrace's previous dispatch {after}, ftrace's {}]: {p}",
                theirs.t
            );
        }
        assert_eq!(
            p["gap_ns"].as_u64().unwrap(),
            b["dispatch_ns"].as_u64().unwrap() - a["dispatch_ns"].as_u64().unwrap()
        );
    }
    let (status, text) = daemon.get(&format!("/merges?device={}", dev.name)).unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("MISSED ADJACENT MERGES"), "{text}");

    // Reloaded with the check off: the same workload counts requests, no missed merge.
    std::fs::write(&config, "[merges]\nwindow = \"0s\"\n").unwrap();
    daemon.signal(libc::SIGHUP);
    let off = wait_for(Duration::from_secs(10), || {
        let v = json(&daemon, "/merges?format=json&limit=1");
        (v["window_seconds"].as_f64() == Some(0.0)).then_some(())
    });
    assert!(off.is_some(), "reload did not apply the window");
    quiesce(&dev.name);
    let before = exported(&daemon.scrape(), &dev.name);
    let ds0 = diskstats(&dev.name);
    fio(&[
        "--name=off",
        &format!("--filename={}", dev.path),
        "--rw=write",
        "--bs=4k",
        "--direct=1",
        "--ioengine=psync",
        "--size=2M",
    ]);
    quiesce(&dev.name);
    let writes = diskstats(&dev.name).writes - ds0.writes;
    let got = settled(&daemon, &dev.name, &before, writes);
    assert_eq!(got.size_count, writes as f64);
    assert_eq!(got.missed, 0.0, "window 0s: no missed merges");
}
