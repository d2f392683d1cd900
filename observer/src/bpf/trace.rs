//! `observer trace`'s object (observer-ebpf/src/trace.rs): one program per block tracepoint
//! blktrace records, filtered to one disk, sending [`TraceRecord`]s through a ring buffer.
//! Loaded and attached on its own, beside (never instead of) a running daemon's programs.

use std::cell::OnceCell;

use aya::{
    maps::{MapData, PerCpuArray, RingBuf},
    Ebpf,
};
use observer_common::{
    blktrace::{TraceRecord, TRACE_DROPS, TRACE_EVENTS, TRACE_NESTED},
    layout::KernelLayout,
};

use super::{
    btf::{ArgLayout, KernelBtf, LayoutError, VMLINUX_BTF},
    loader::{
        check_privileges, load_err, object_loader, program_step, tp_btf_index, Mode, Phase,
        ProbeError, Step,
    },
};
use crate::time::monotonic_ns;

/// The object built by build.rs from observer-ebpf/src/trace.rs.
pub(crate) static OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/trace.bpf.o"));

/// The traced tracepoints and their programs, in attach order: from the end of an I/O's life
/// to its start (`block_bio_queue`, btt's Q, last), so an I/O whose Q is recorded has its
/// later events recorded too. `t_complete_nest` runs after `t_complete`, `t_bio_end_nest` after
/// `t_bio_end` (a tracepoint calls its probes in the order they were attached), and records
/// the completions the kernel skipped the first for (observer-ebpf/src/trace.rs
/// `on_complete`).
pub const TRACEPOINTS: [(&str, &str); 14] = [
    ("block_rq_complete", "t_complete"),
    ("block_rq_complete", "t_complete_nest"),
    ("block_bio_complete", "t_bio_end"),
    ("block_bio_complete", "t_bio_end_nest"),
    ("block_bio_remap", "t_remap"),
    ("block_split", "t_split"),
    ("block_rq_requeue", "t_requeue"),
    ("block_rq_issue", "t_issue"),
    ("block_rq_insert", "t_insert"),
    ("block_rq_merge", "t_rq_merge"),
    ("block_getrq", "t_getrq"),
    ("block_bio_frontmerge", "t_front"),
    ("block_bio_backmerge", "t_back"),
    ("block_bio_queue", "t_queue"),
];

/// The attached programs and what userspace reads; dropping [`TraceProbes::programs`]
/// detaches them (the maps stay readable).
pub struct TraceProbes {
    /// The loaded object: drop it to detach every program.
    pub programs: Ebpf,
    /// `TRACE_EVENTS`: [`TraceRecord`]s, each CPU's in the order they were made.
    pub events: RingBuf<MapData>,
    /// `TRACE_DROPS`: records the ring buffer had no room for, per CPU.
    pub drops: PerCpuArray<MapData, u64>,
    /// `TRACE_NESTED`: completions `t_complete_nest` and `t_bio_end_nest` recorded, per CPU.
    pub nested: PerCpuArray<MapData, u64>,
    /// The kernel's layout (flag bits and ops decode the records' `opf`).
    pub layout: KernelLayout,
    /// `tp_btf` or `raw_tp`.
    pub mode: &'static str,
    /// Whether `block_rq_complete` passes an errno (`int`, before 5.17) rather than a
    /// `blk_status_t` (from kernel BTF: the argument's type).
    pub complete_errno: bool,
}

/// Loads the trace object for disk `dev` (`mkdev`) with a ring buffer of `ring_bytes` (a
/// power of two) and attaches its programs: `tp_btf`, else all as `raw_tp`
/// (`OBSERVER_ATTACH=raw_tp` forces that). Errors say what to do ([`ProbeError`]).
pub fn attach(dev: u32, ring_bytes: u32) -> Result<TraceProbes, ProbeError> {
    check_privileges()?;
    // Values the loader borrows: declared before it, so they outlive it.
    let cells: [OnceCell<KernelLayout>; 2] = Default::default();
    let kbtf = KernelBtf::from_file(VMLINUX_BTF)?;
    let layout = kbtf.kernel_layout()?;
    let complete_errno = kbtf
        .tracepoint_args("block_rq_complete")
        .and_then(|a| a.get(1).cloned())
        .as_deref()
        == Some("int");
    let mut steps: Vec<Step> = Vec::new();
    for (tp, program) in TRACEPOINTS {
        match kbtf.arg_layout(tp) {
            Some(ArgLayout::Current) => steps.push((program.to_string(), tp)),
            Some(ArgLayout::QueueFirst) => steps.push((format!("{program}_q"), tp)),
            None => {
                return Err(ProbeError::Layout(LayoutError::Missing(format!(
                    "tracepoint {tp}"
                ))))
            }
        }
    }
    let btf = tp_btf_index(kbtf, &steps)?;
    let load = |mode: Mode, cell: &OnceCell<KernelLayout>| -> Result<Ebpf, ProbeError> {
        let l = cell.get_or_init(|| KernelLayout {
            direct_loads: u32::from(mode == Mode::Btf),
            loaded_ns: monotonic_ns(),
            ..layout
        });
        let mut ebpf = object_loader()
            .override_global("LAYOUT", l, true)
            .override_global("TRACE_DEV", &dev, true)
            .map_max_entries(TRACE_EVENTS, ring_bytes)
            .load(OBJECT)
            .map_err(|e| load_err("loading the trace object")(e.into()))?;
        for phase in [Phase::Load, Phase::Attach] {
            for (name, tp) in &steps {
                program_step(&mut ebpf, mode, &btf, name, tp, phase)?;
            }
        }
        Ok(ebpf)
    };
    let (mut ebpf, mode) = if std::env::var("OBSERVER_ATTACH").as_deref() == Ok("raw_tp") {
        (load(Mode::Raw, &cells[1])?, Mode::Raw)
    } else {
        match load(Mode::Btf, &cells[0]) {
            Ok(e) => (e, Mode::Btf),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "tp_btf programs refused; loading them as raw_tp");
                (load(Mode::Raw, &cells[1])?, Mode::Raw)
            }
        }
    };
    let take = |ebpf: &mut Ebpf, name: &str| {
        ebpf.take_map(name)
            .ok_or_else(|| load_err(format!("finding map {name}"))(anyhow::anyhow!("missing")))
    };
    let events = RingBuf::try_from(take(&mut ebpf, TRACE_EVENTS)?)
        .map_err(|e| load_err(TRACE_EVENTS)(e.into()))?;
    let drops = PerCpuArray::try_from(take(&mut ebpf, TRACE_DROPS)?)
        .map_err(|e| load_err(TRACE_DROPS)(e.into()))?;
    let nested = PerCpuArray::try_from(take(&mut ebpf, TRACE_NESTED)?)
        .map_err(|e| load_err(TRACE_NESTED)(e.into()))?;
    Ok(TraceProbes {
        programs: ebpf,
        events,
        drops,
        nested,
        layout,
        mode: mode.name(),
        complete_errno,
    })
}

/// A [`TraceRecord`] from a ring-buffer item (`None` if the item is not one: never, unless
/// object and daemon disagree).
pub fn record(item: &[u8]) -> Option<TraceRecord> {
    if item.len() < std::mem::size_of::<TraceRecord>() {
        return None;
    }
    // SAFETY: `item` holds at least size_of::<TraceRecord>() bytes, written by the programs as
    // one `TraceRecord` (repr(C), integers and a byte array: any bits are a value); the read is
    // unaligned-safe.
    Some(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const TraceRecord) })
}
