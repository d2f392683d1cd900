//! The filesystem log witnesses (tests/fslog.rs, tests/deploy.rs): where xfs_db and
//! dumpe2fs/debugfs say the log is, and which writes ftrace saw inside it.

use std::time::Duration;

use super::{
    ensure_tracefs, mono_ns, quiesce, require_root, sh, skip, which, Daemon, Ftrace, FtraceSpec,
    IoStart, LoopDev, Metrics, TRACE_PRINT_NS,
};

/// require_root plus what these tests need beyond it: tracefs and the witnesses' tools.
pub fn require_fslog(test: &str) -> bool {
    if !require_root(test) {
        return false;
    }
    ensure_tracefs();
    let tracefs = std::path::Path::new("/sys/kernel/tracing/instances").is_dir();
    let missing: Vec<&str> = [
        "xfs_db",
        "mkfs.ext4",
        "mke2fs",
        "dumpe2fs",
        "debugfs",
        "sfdisk",
        "partx",
    ]
    .into_iter()
    .filter(|t| which(t).is_none())
    .collect();
    if tracefs && missing.is_empty() {
        return true;
    }
    let why = format!("{test}: needs tracefs at /sys/kernel/tracing (found: {tracefs}) and {missing:?}: run scripts/provision.sh (xfsprogs, e2fsprogs, fdisk, util-linux)");
    skip(&why)
}

pub fn sysfs_u64(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

pub fn field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("xfs_db printed no {name}: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// xfs_db's view of the log on `dev`: (logstart, first sector on `dev`, sectors).
pub fn xfs_witness(dev: &str) -> (u64, u64, u64) {
    let sb = sh(
        "xfs_db",
        &[
            "-r",
            "-c",
            "sb 0",
            "-c",
            "print logstart logblocks blocksize",
            dev,
        ],
    );
    let (logstart, logblocks, bs) = (
        field(&sb, "logstart"),
        field(&sb, "logblocks"),
        field(&sb, "blocksize"),
    );
    if logstart == 0 {
        return (0, 0, logblocks * bs / 512);
    }
    // "0x80030 (524336)"
    let daddr = sh(
        "xfs_db",
        &["-r", "-c", &format!("convert fsb {logstart} daddr"), dev],
    );
    let daddr: u64 = daddr
        .split('(')
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("xfs_db convert: {daddr}"));
    (logstart, daddr, logblocks * bs / 512)
}

pub fn block_size_ext4(dev: &str) -> u64 {
    let h = sh("dumpe2fs", &["-h", dev]);
    h.lines()
        .find_map(|l| l.strip_prefix("Block size:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// debugfs's view of the journal inode 8 on `dev`: merged (start, end) sectors on `dev`.
pub fn ext4_witness(dev: &str) -> Vec<(u64, u64)> {
    let h = sh("dumpe2fs", &["-h", dev]);
    assert!(
        h.lines()
            .any(|l| l.starts_with("Journal inode:") && l.trim_end().ends_with(" 8")),
        "{h}"
    );
    let spb = block_size_ext4(dev) / 512;
    let stat = sh("debugfs", &["-R", "stat <8>", dev]);
    let mut runs: Vec<(u64, u64)> = Vec::new();
    // EXTENTS:\n(0-4095):1566-5661, (4096-8191):...   ((ETBn) entries are index blocks).
    let ext = stat
        .split("EXTENTS:")
        .nth(1)
        .unwrap_or_else(|| panic!("debugfs stat <8>: no extents:\n{stat}"));
    for tok in ext
        .split([',', '\n', ' '])
        .filter(|t| t.contains("):") && !t.contains("ETB"))
    {
        let phys = tok.split("):").nth(1).unwrap();
        let (a, b) = match phys.split_once('-') {
            Some((a, b)) => (a.parse::<u64>().unwrap(), b.parse::<u64>().unwrap()),
            None => (phys.parse().unwrap(), phys.parse().unwrap()),
        };
        runs.push((a * spb, (b + 1) * spb));
    }
    runs.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for r in runs {
        match merged.last_mut() {
            Some(l) if r.0 <= l.1 => l.1 = l.1.max(r.1),
            _ => merged.push(r),
        }
    }
    assert!(!merged.is_empty(), "{stat}");
    merged
}

pub fn writes(m: &Metrics, dev: &str, log: &str) -> f64 {
    m.sum(
        "blkobs_requests_total",
        &[("device", dev), ("op", "write"), ("log", log)],
    )
}

fn untracked_writes(m: &Metrics, dev: &str) -> f64 {
    m.sum(
        "blkobs_untracked_completions_total",
        &[("device", dev), ("op", "write")],
    )
}

/// What the ftrace witness and the daemon saw on one disk during a workload.
pub struct Seen {
    /// Writes that entered the disk (`block_io_start`) at a time when the daemon must count
    /// them between its two scrapes, inside the log ranges / outside them (first sector).
    pub traced_in: usize,
    pub traced_out: usize,
    /// Writes that entered while a scrape's bracket ran (the last quiescing before it, then the
    /// scrape): the daemon may count each or not.
    pub edge_in: usize,
    pub edge_out: usize,
    pub log_true: f64,
    pub log_false: f64,
    /// The disk's writes completed without an entry (`blkobs_untracked_completions_total`,
    /// delta): traced at `block_io_start`, but the entry program did not run for them (on the
    /// development host's kernel, none runs in PID 1's threads: docs/src/design/how-it-works.md#lost-completions).
    pub untracked: f64,
    /// The disk's completions counted lost (`blkobs_lost_completions_total`, delta) and the
    /// kernel's recursion misses of the observer's programs (all, delta): printed, to tell a
    /// missed end from a misclassified write when the counts differ.
    pub lost: f64,
    pub recursion_misses: f64,
    /// Every `block_io_start` of the disk while the witness recorded.
    pub events: Vec<IoStart>,
}

/// Runs `work` between two scrapes of the daemon while ftrace records `block_io_start` (mono
/// clock) on each disk; returns per-disk counts of the writes the daemon must have counted
/// between the scrapes, inside / outside `ranges` (whole-disk sectors), next to its `log`
/// label deltas.
///
/// Recording starts before the first scrape and ends after the second, on the clock of
/// CLOCK_MONOTONIC reads around them. Each scrape follows a quiescing (nothing in flight in
/// /proc/diskstats for 100 ms): a write that entered before the first quiescing began completed
/// before the first scrape, and one that entered between the first scrape and the last
/// quiescing completed before the second. A write that entered during a quiescing-and-scrape
/// bracket is an edge, counted or not. (Counting only writes traced after the first scrape, the
/// recording started a few ms late: 801 counted vs 800 traced in CI once.)
pub fn witness(d: &Daemon, disks: &[(&LoopDev, &[(u64, u64)])], work: impl FnOnce()) -> Vec<Seen> {
    let kdevs: Vec<u32> = disks.iter().map(|(dev, _)| dev.kdev()).collect();
    let trace = Ftrace::start(
        "fslog",
        FtraceSpec {
            events: &["block_io_start"],
            kdevs: &kdevs,
            mono: true,
            ..Default::default()
        },
    );
    // ftrace's `trace` file prints µs (times truncated, [`TraceEvent::printed_window`]): a
    // write that entered in a bracket may be printed up to 1 µs before it, so each bracket
    // starts 1 µs early.
    let quiesced_scrape = || {
        let t0 = mono_ns().saturating_sub(TRACE_PRINT_NS);
        for (dev, _) in disks {
            quiesce(&dev.name);
        }
        let m = d.scrape();
        (t0..=mono_ns(), m)
    };
    let (first, before) = quiesced_scrape();
    work();
    sh("sync", &[]);
    for (dev, _) in disks {
        quiesce(&dev.name);
    }
    // Let the reaper retire requests whose completion never reached the programs; whatever
    // the kernel writes meanwhile is both traced and counted.
    std::thread::sleep(Duration::from_millis(1500));
    let (last, after) = quiesced_scrape();
    let events = trace.stop();
    disks
        .iter()
        .map(|(dev, rs)| {
            let starts: Vec<IoStart> = events
                .iter()
                .filter(|e| e.kdev == dev.kdev())
                .map(IoStart::from)
                .collect();
            let mut n = [[0usize; 2]; 2]; // [edge?][inside?]
            for (e, t) in starts
                .iter()
                .zip(events.iter().filter(|e| e.kdev == dev.kdev()))
            {
                let t = t.t_ns;
                let edge = first.contains(&t) || last.contains(&t);
                if e.rwbs.contains('W') && (edge || (*first.end() < t && t < *last.start())) {
                    n[edge as usize][in_ranges(rs, e.sector) as usize] += 1;
                }
            }
            let seen = Seen {
                traced_in: n[0][1],
                traced_out: n[0][0],
                edge_in: n[1][1],
                edge_out: n[1][0],
                log_true: writes(&after, &dev.name, "true") - writes(&before, &dev.name, "true"),
                log_false: writes(&after, &dev.name, "false") - writes(&before, &dev.name, "false"),
                untracked: untracked_writes(&after, &dev.name)
                    - untracked_writes(&before, &dev.name),
                lost: after.sum("blkobs_lost_completions_total", &[("device", &dev.name)])
                    - before.sum("blkobs_lost_completions_total", &[("device", &dev.name)]),
                recursion_misses: after.sum("blkobs_bpf_program_recursion_misses_total", &[])
                    - before.sum("blkobs_bpf_program_recursion_misses_total", &[]),
                events: starts,
            };
            eprintln!(
                "{}: traced writes in log {} (+{} at a scrape's edge) / outside {} (+{}); \
                 daemon log=true {} / log=false {} (untracked {}, lost {}, recursion misses {})",
                dev.name,
                seen.traced_in,
                seen.edge_in,
                seen.traced_out,
                seen.edge_out,
                seen.log_true,
                seen.log_false,
                seen.untracked,
                seen.lost,
                seen.recursion_misses
            );
            seen
        })
        .collect()
}

/// The daemon's counts equal the witness's exactly, but for writes that entered at a scrape's
/// edge (each counted or not) and writes it never had an entry for (untracked: each can be
/// missing from either label's count).
pub fn assert_classified(s: &Seen, what: &str) {
    // How far each label's count lies outside [traced, traced + edge].
    let outside = |got: f64, traced: usize, edge: usize| {
        (traced as f64 - got)
            .max(got - (traced + edge) as f64)
            .max(0.0)
    };
    let off = outside(s.log_true, s.traced_in, s.edge_in)
        + outside(s.log_false, s.traced_out, s.edge_out);
    assert!(
        off <= s.untracked,
        "{what}: log=\"true\" writes {} vs {} (+{} at a scrape's edge) traced inside the log, \
         log=\"false\" {} vs {} (+{}) outside ({} untracked; {} lost, {} recursion misses)",
        s.log_true,
        s.traced_in,
        s.edge_in,
        s.log_false,
        s.traced_out,
        s.edge_out,
        s.untracked,
        s.lost,
        s.recursion_misses
    );
}

pub fn in_ranges(rs: &[(u64, u64)], sector: u64) -> bool {
    rs.iter().any(|(s, e)| sector >= *s && sector < *e)
}
