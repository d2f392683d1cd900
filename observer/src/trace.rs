//! `observer trace`: one disk's block events for a while, written as blktrace's binary files
//! (`<dev>.blktrace.<cpu>`, one per CPU) that `blkparse`, `btt` and `iowatcher` read unchanged,
//! without blktrace's debugfs relay files (which lockdown, containers and some VMs refuse).
//!
//! The events come from `observer trace`'s own programs ([`crate::bpf::trace`]); each becomes one
//! `struct blk_io_trace` (include/uapi/linux/blktrace_api.h, [`observer_common::blktrace`]) with
//! the fields kernel/trace/blktrace.c writes: per-CPU sequence numbers, the time in ns since the
//! trace started (CLOCK_MONOTONIC, blktrace's `ktime_get()`), sector, bytes, action word, pid,
//! device, CPU, error; and before a task's first event in each CPU's file a `BLK_TN_PROCESS`
//! note with its name.

use std::{
    collections::HashMap,
    fs::File,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use observer_common::{
    blktrace::{self, Event, Source, TraceRecord, BIO_COMPLETE, RQ_MERGE},
    layout::KernelLayout,
    maps::mkdev,
};

use crate::{bpf::trace as probes, time::monotonic_ns};

/// What to trace, from the command line.
#[derive(Clone, Debug)]
pub struct Options {
    /// The disk's kernel name (`loop0`, `sda`, `nvme0n1`): a whole disk, as in /sys/block.
    pub device: String,
    /// How long to record.
    pub duration: Duration,
    /// Where the files go (created if missing).
    pub output_dir: PathBuf,
    /// Bytes of the ring buffer (a power of two).
    pub ring_bytes: u32,
}

/// How long a record is held before it is written: a CPU's records reach the ring buffer in
/// the order they were reserved, not always in time order (a completion in an interrupt can
/// overtake the event it interrupted, whose time was already taken); 100 ms is far more than
/// any such window, so every file is in time order, as blkparse expects.
const HOLD_NS: u64 = 100_000_000;

/// How often the ring buffer is drained.
const POLL: Duration = Duration::from_millis(20);

/// What a trace wrote.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Events written per CPU (notes not counted).
    pub per_cpu: Vec<u64>,
    /// Events written per blkparse letter (Q, M, F, G, I, D, R, C, X, A).
    pub per_action: std::collections::BTreeMap<&'static str, u64>,
    /// Process notes written.
    pub notes: u64,
    /// Records the ring buffer had no room for (lost: a larger `--ring-mib` keeps them).
    pub dropped: u64,
    /// Completions `t_complete_nest` and `t_bio_end_nest` recorded because the kernel skipped
    /// `t_complete` or `t_bio_end` for them (an interrupt's completion inside it on that CPU:
    /// observer-ebpf/src/trace.rs `on_complete`); in the files like every other.
    pub nested: u64,
    /// Events the kernel ran none of the programs for (lost): the programs' recursion misses
    /// (`bpf_prog_info`, 0 on 5.10, which runs programs nested), less the completions
    /// the second programs recorded.
    pub skipped: u64,
    /// The files, one per CPU.
    pub files: Vec<PathBuf>,
}

/// The disk number (`mkdev`) of `/sys/block/<name>`. Errors say what to give instead.
pub fn disk_number(sys_block: &Path, name: &str) -> Result<u32> {
    let path = sys_block.join(name).join("dev");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no disk {name:?} in {}: give a whole disk's kernel name (e.g. sda, nvme0n1, \
             loop0; see `lsblk -d`); a partition is traced as its disk",
            sys_block.display()
        )
    })?;
    let (major, minor) = text
        .trim()
        .split_once(':')
        .with_context(|| format!("{}: expected MAJOR:MINOR, read {text:?}", path.display()))?;
    Ok(mkdev(major.parse()?, minor.parse()?))
}

/// One CPU's file: its writer, its sequence counter and the records held back.
struct CpuFile {
    out: BufWriter<File>,
    sequence: u32,
    held: Vec<TraceRecord>,
}

/// Turns records into `struct blk_io_trace`s.
struct Encoder {
    dev: u32,
    start_ns: u64,
    layout: KernelLayout,
    complete_errno: bool,
    /// The name each (CPU, pid) was last noted with in that CPU's file. Per CPU: the first
    /// event read of a task need not be its earliest (the CPUs' records arrive interleaved),
    /// and blkparse names an event only from a note read before it.
    named: HashMap<(u32, u32), [u8; 16]>,
    summary: Summary,
}

/// The 48 bytes of a `struct blk_io_trace` (native byte order, as the kernel writes it).
#[allow(clippy::too_many_arguments)]
fn header(
    sequence: u32,
    time: u64,
    sector: u64,
    bytes: u32,
    action: u32,
    pid: u32,
    device: u32,
    cpu: u32,
    error: u16,
    pdu_len: u16,
) -> [u8; blktrace::RECORD_BYTES] {
    let mut b = [0u8; blktrace::RECORD_BYTES];
    b[0..4].copy_from_slice(&(blktrace::MAGIC | blktrace::VERSION).to_ne_bytes());
    b[4..8].copy_from_slice(&sequence.to_ne_bytes());
    b[8..16].copy_from_slice(&time.to_ne_bytes());
    b[16..24].copy_from_slice(&sector.to_ne_bytes());
    b[24..28].copy_from_slice(&bytes.to_ne_bytes());
    b[28..32].copy_from_slice(&action.to_ne_bytes());
    b[32..36].copy_from_slice(&pid.to_ne_bytes());
    b[36..40].copy_from_slice(&device.to_ne_bytes());
    b[40..44].copy_from_slice(&cpu.to_ne_bytes());
    b[44..46].copy_from_slice(&error.to_ne_bytes());
    b[46..48].copy_from_slice(&pdu_len.to_ne_bytes());
    b
}

impl Encoder {
    /// Writes `r` (and, first, its task's name note if not written yet) to `f`.
    fn write(&mut self, f: &mut CpuFile, r: &TraceRecord) -> std::io::Result<()> {
        let code = r.event & !(RQ_MERGE | BIO_COMPLETE);
        let Some(event) = Event::from_code(code) else {
            return Ok(());
        };
        let time = r.time_ns.saturating_sub(self.start_ns);
        if self.named.get(&(r.cpu, r.pid)) != Some(&r.comm) {
            // blktrace.c trace_note_tsk: the task's comm (TASK_COMM_LEN = 16 bytes) as pdu.
            f.out.write_all(&header(
                0,
                time,
                0,
                0,
                blktrace::TN_PROCESS,
                r.pid,
                self.dev,
                r.cpu,
                0,
                16,
            ))?;
            f.out.write_all(&r.comm)?;
            self.named.insert((r.cpu, r.pid), r.comm);
            self.summary.notes += 1;
        }
        let source = Source::of_record(event, r.event);
        let action = blktrace::action(event, source, r.opf, &self.layout);
        let error = if event != Event::Complete || r.error == 0 {
            0
        } else if self.complete_errno && source == Source::Request {
            r.error as i32 as u16
        } else {
            // A blk_status_t (a bio's `bi_status` on every kernel): its errno is a kernel table
            // (block/blk-core.c blk_errors) that BTF does not carry; every failure is written
            // as -EIO.
            (-libc::EIO) as u16
        };
        // The pdu: X the new sector (be64, blktrace.c blk_add_trace_split); A `struct
        // blk_io_trace_remap` {be32 device_from, be32 device_to, be64 sector_from}
        // (blk_add_trace_bio_remap).
        let mut pdu = Vec::new();
        match event {
            Event::Split => pdu.extend_from_slice(&r.pdu_sector.to_be_bytes()),
            Event::Remap => {
                pdu.extend_from_slice(&r.pdu_dev.to_be_bytes());
                pdu.extend_from_slice(&self.dev.to_be_bytes());
                pdu.extend_from_slice(&r.pdu_sector.to_be_bytes());
            }
            _ => {}
        }
        f.sequence += 1;
        f.out.write_all(&header(
            f.sequence,
            time,
            r.sector,
            r.bytes,
            action,
            r.pid,
            self.dev,
            r.cpu,
            error,
            pdu.len() as u16,
        ))?;
        f.out.write_all(&pdu)?;
        let cpu = r.cpu as usize;
        if self.summary.per_cpu.len() <= cpu {
            self.summary.per_cpu.resize(cpu + 1, 0);
        }
        self.summary.per_cpu[cpu] += 1;
        *self.summary.per_action.entry(event.letter()).or_default() += 1;
        Ok(())
    }

    /// Writes the held records of every file made before `until_ns` (all with `u64::MAX`), in
    /// time order.
    fn flush(&mut self, files: &mut [CpuFile], until_ns: u64) -> std::io::Result<()> {
        for f in files.iter_mut() {
            f.held.sort_by_key(|r| r.time_ns);
            let n = f.held.partition_point(|r| r.time_ns < until_ns);
            let ready: Vec<TraceRecord> = f.held.drain(..n).collect();
            for r in &ready {
                self.write(f, r)?;
            }
        }
        Ok(())
    }
}

/// Records `opts.device` for `opts.duration` into `<output_dir>/<device>.blktrace.<cpu>`;
/// `ready` is called once the programs are attached (the recording starts then). Errors say
/// what to do (no such disk, no privilege, the kernel refused the programs, files not
/// writable).
pub fn run(opts: &Options, ready: impl FnOnce(&probes::TraceProbes)) -> Result<Summary> {
    if opts.device.contains('/') {
        bail!(
            "--device {:?}: give the kernel name (e.g. sda), not a path",
            opts.device
        );
    }
    let dev = disk_number(Path::new("/sys/block"), &opts.device)?;
    std::fs::create_dir_all(&opts.output_dir)
        .with_context(|| format!("creating {}", opts.output_dir.display()))?;
    let cpus = aya::util::nr_cpus()
        .map_err(|(_, e)| e)
        .context("reading the possible CPUs")?;
    let mut files = Vec::with_capacity(cpus);
    let mut paths = Vec::with_capacity(cpus);
    for cpu in 0..cpus {
        let path = opts
            .output_dir
            .join(format!("{}.blktrace.{cpu}", opts.device));
        let file = File::create(&path).with_context(|| {
            format!(
                "creating {}: choose a writable --output-dir",
                path.display()
            )
        })?;
        files.push(CpuFile {
            out: BufWriter::with_capacity(1 << 20, file),
            sequence: 0,
            held: Vec::new(),
        });
        paths.push(path);
    }
    let start_ns = monotonic_ns();
    let mut p = probes::attach(dev, opts.ring_bytes)?;
    let mut enc = Encoder {
        dev,
        start_ns,
        layout: p.layout,
        complete_errno: p.complete_errno,
        named: HashMap::new(),
        summary: Summary {
            per_cpu: vec![0; cpus],
            ..Default::default()
        },
    };
    ready(&p);
    let end = Instant::now() + opts.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(POLL.min(end - now));
        drain(&mut p.events, &mut files);
        enc.flush(&mut files, monotonic_ns().saturating_sub(HOLD_NS))?;
    }
    // Detach, then take what the programs sent before.
    let probes::TraceProbes {
        programs,
        mut events,
        drops,
        nested,
        ..
    } = p;
    let misses: u64 = crate::bpf::progstats::program_runs(&programs)
        .iter()
        .filter(|r| !r.program.contains("_nest"))
        .filter_map(|r| r.recursion_misses)
        .sum();
    drop(programs);
    drain(&mut events, &mut files);
    enc.flush(&mut files, u64::MAX)?;
    for f in &mut files {
        f.out.flush()?;
    }
    enc.summary.dropped = drops
        .get(&0, 0)
        .map(|v| v.iter().sum())
        .context("reading TRACE_DROPS")?;
    enc.summary.nested = nested
        .get(&0, 0)
        .map(|v| v.iter().sum())
        .context("reading TRACE_NESTED")?;
    enc.summary.skipped = misses.saturating_sub(enc.summary.nested);
    enc.summary.files = paths;
    Ok(enc.summary)
}

/// Moves every record in the ring buffer to its CPU's held records.
fn drain(events: &mut aya::maps::RingBuf<aya::maps::MapData>, files: &mut [CpuFile]) {
    while let Some(item) = events.next() {
        if let Some(r) = probes::record(&item) {
            if let Some(f) = files.get_mut(r.cpu as usize) {
                f.held.push(r);
            }
        }
    }
}

/// The summary as `observer trace` prints it: events per CPU and per action, notes, drops,
/// events skipped by the kernel and completions recorded nested, and where the files are.
pub fn render(s: &Summary, device: &str) -> String {
    let mut out = String::new();
    for (cpu, n) in s.per_cpu.iter().enumerate() {
        out.push_str(&format!("CPU{cpu} ({device}): {n} events\n"));
    }
    let actions: Vec<String> = s
        .per_action
        .iter()
        .map(|(a, n)| format!("{a} {n}"))
        .collect();
    out.push_str(&format!(
        "total: {} events ({}), {} process notes, {} dropped, {} skipped by the kernel \
         ({} completions recorded nested)\n",
        s.per_cpu.iter().sum::<u64>(),
        actions.join(", "),
        s.notes,
        s.dropped,
        s.skipped,
        s.nested
    ));
    if let Some(dir) = s.files.first().and_then(|p| p.parent()) {
        out.push_str(&format!(
            "files: {}/{device}.blktrace.0..{}; read with `blkparse -i {device} -D {}`\n",
            dir.display(),
            s.files.len().saturating_sub(1),
            dir.display()
        ));
    }
    out
}
