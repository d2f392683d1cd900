//! Loads the embedded eBPF object, hands it the kernel layout, and attaches one program per
//! block tracepoint (tp_btf preferred, raw_tp fallback, the argument layout the kernel has).

use std::cell::OnceCell;

use aya::{
    maps::ProgramArray,
    programs::{BtfTracePoint, RawTracePoint},
    Btf, Ebpf, EbpfLoader,
};
use observer_common::{
    layout::KernelLayout,
    maps::{self as m, ClassStats, Settings},
};
use tracing::{info, warn};

use super::{
    btf::{attach_id_index, ArgLayout, KernelBtf, LayoutError, VMLINUX_BTF},
    maps::KernelMaps,
    reqstate::RequestProbe,
    tracepoints::{attach_order, Tracepoint, TAIL_CALLS},
};
use crate::{disks::DiskView, time::monotonic_ns};

/// The eBPF object built by build.rs from `observer-ebpf`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observer.bpf.o"));

/// Errors while loading or attaching. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// Kernel BTF missing or incomplete.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// Not enough privilege.
    #[error("missing {0}: run as root, or grant the capabilities (e.g. systemd AmbientCapabilities=CAP_BPF CAP_PERFMON)")]
    Privilege(String),
    /// The kernel refused the object or a program.
    #[error("loading the eBPF programs failed at {what}: {source:#}")]
    Load {
        /// Which step.
        what: String,
        /// The loader's error (with the verifier log, if any).
        source: anyhow::Error,
    },
}

/// Where and how the programs are attached, for logs and `blkobs_build_info`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AttachInfo {
    /// `tp_btf` or `raw_tp` (the first program decides; all use the same kind when possible).
    pub mode: &'static str,
    /// The tracepoint used as "entered the block layer".
    pub enter_tracepoint: &'static str,
    /// How requests whose completion was not seen are retired: `request_state` (the kernel is
    /// asked for the request's state, [`RequestProbe`]) or `off` (the kernel refused the
    /// probe; such entries wait for their struct's reuse).
    pub reaper: &'static str,
}

/// Attached programs; dropping this detaches everything.
pub struct Probes {
    _ebpf: Ebpf,
    /// How they were attached.
    pub info: AttachInfo,
    /// The reaper's request-state probe (for [`crate::collect::reaper::Reaper`]); `None` if
    /// this kernel refused it (then nothing is reaped: see the warning logged).
    pub request_probe: Option<RequestProbe>,
    /// The reader of the programs' aya-log records (`None` if unavailable: see
    /// [`super::kernel_log::take`]); taken by the daemon, which drains it.
    pub kernel_log: Option<super::kernel_log::KernelLog>,
}

impl Probes {
    /// Run counts and run times of the attached programs (see [`super::progstats`]).
    pub fn program_runs(&self) -> Vec<super::progstats::ProgramRun> {
        super::progstats::program_runs(&self._ebpf)
    }
}

/// Checks CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN) in the effective set.
pub fn check_privileges() -> Result<(), ProbeError> {
    use caps::{CapSet, Capability};
    let has = |c| caps::has_cap(None, CapSet::Effective, c).unwrap_or(false);
    if has(Capability::CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&str> = [
        (Capability::CAP_BPF, "CAP_BPF"),
        (Capability::CAP_PERFMON, "CAP_PERFMON"),
    ]
    .into_iter()
    .filter(|(c, _)| !has(*c))
    .map(|(_, n)| n)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ProbeError::Privilege(missing.join(" and ")))
    }
}

/// Number of `CLASS_STATS` entries that fit a memory budget on this machine.
pub fn class_stats_entries(budget_mib: u32) -> u32 {
    let cpus = aya::util::nr_cpus().unwrap_or(1).max(1) as u64;
    let per_entry = std::mem::size_of::<ClassStats>() as u64 * cpus;
    ((budget_mib as u64 * 1024 * 1024) / per_entry).clamp(64, 65536) as u32
}

/// Capacity of `CGROUP_LATENCY`: [`m::CGROUP_LATENCY_ENTRIES`] when `[cgroups] latency` is on at
/// load (`settings.cgroup_latency`), else 1 (a preallocated per-CPU hash costs its capacity ×
/// 6,768 bytes × CPUs whether used or not).
fn cgroup_latency_entries(settings: &Settings) -> u32 {
    if settings.cgroup_latency != 0 {
        m::CGROUP_LATENCY_ENTRIES
    } else {
        1
    }
}

pub(super) fn load_err(what: impl Into<String>) -> impl FnOnce(anyhow::Error) -> ProbeError {
    let what = what.into();
    move |source| ProbeError::Load { what, source }
}

/// How the programs are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// `tp_btf` with direct (BTF-checked) loads of kernel struct fields: the fast path.
    Btf,
    /// `raw_tp` with `bpf_probe_read_kernel`: for kernels where tp_btf is refused.
    Raw,
}

impl Mode {
    /// The object's name of program `name` in this mode (`_raw` appended for raw_tp).
    pub(super) fn program(self, name: &str) -> String {
        match self {
            Mode::Btf => name.to_string(),
            Mode::Raw => format!("{name}_raw"),
        }
    }

    /// The name in logs and `blkobs_build_info{attach}`.
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::Btf => "tp_btf",
            Mode::Raw => "raw_tp",
        }
    }
}

/// A program to attach: its name in the object (argument-layout variant included) and its
/// tracepoint.
pub(super) type Step = (String, &'static str);

/// The one loader for both objects. `EbpfLoader::new()` parses all of vmlinux BTF (aya's
/// `Btf::from_sys_fs`, for CO-RE relocations: RSS +19 MiB while it parses, 13 MiB held, on
/// 6.18), and every `new()` parses again; so it is made once, first, while the daemon is
/// small, and that BTF is dropped at once: the objects have no CO-RE relocations (their
/// `.BTF.ext` has an empty `core_relo` section: kernel offsets come from [`KernelLayout`]),
/// so loading them without target BTF is the same, and the tp_btf attach ids come from
/// [`attach_id_index`]. Start-up peak (VmHWM) on 6.18: 25 MiB, here; it was 37 MiB while the
/// loader's BTF and a second parse for the tp_btf ids were held together (and a third parse
/// for the request-state probe's loader followed).
pub(super) fn object_loader<'a>() -> EbpfLoader<'a> {
    let mut loader = EbpfLoader::new();
    loader.btf(None);
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe { libc::malloc_trim(0) };
    loader
}

/// Loads the object with the layout and map sizes, loads (verifies) every program in one mode,
/// then attaches them in the order given, one right after the other: verification takes tens
/// of ms per program, and requests that enter before the entry point is attached complete
/// untracked (measured on a loop device at ~85k IOPS: 6,119 untracked when each program was
/// verified just before its attach). `prepare` runs between the two, on the loaded object
/// (its maps exist, no program runs yet), and its result is returned with the object. `cell`
/// keeps this attempt's layout for as long as the loader borrows it (aya's `override_global`).
#[allow(clippy::too_many_arguments)]
fn load_and_attach<'a, T>(
    loader: &mut EbpfLoader<'a>,
    cell: &'a OnceCell<KernelLayout>,
    mode: Mode,
    layout: &KernelLayout,
    btf: &Btf,
    capacity: (u32, u32, u32),
    plan: &[Step],
    prepare: &mut dyn FnMut(&mut Ebpf) -> Result<T, ProbeError>,
) -> Result<(Ebpf, T), ProbeError> {
    let layout = cell.get_or_init(|| KernelLayout {
        direct_loads: u32::from(mode == Mode::Btf),
        loaded_ns: monotonic_ns(),
        ..*layout
    });
    let mut ebpf = loader
        .override_global("LAYOUT", layout, true)
        .map_max_entries(m::INFLIGHT, capacity.0)
        .map_max_entries(m::CLASS_STATS, capacity.1)
        .map_max_entries(m::CGROUP_LATENCY, capacity.2)
        .load(OBJECT)
        .map_err(|e| load_err("loading the object")(e.into()))?;
    let tails = tail_steps(plan);
    for (name, tp) in plan.iter().chain(tails.iter().map(|(step, _)| step)) {
        program_step(&mut ebpf, mode, btf, name, tp, Phase::Load)?;
    }
    for (step, map) in &tails {
        set_tail(&mut ebpf, mode, step, map)?;
    }
    let prepared = prepare(&mut ebpf)?;
    for (name, tp) in plan {
        program_step(&mut ebpf, mode, btf, name, tp, Phase::Attach)?;
    }
    Ok((ebpf, prepared))
}

/// The programs of [`TAIL_CALLS`] whose caller is in `plan`, each in its caller's argument-layout
/// variant (`rq_complete_nested_q` → `rq_complete_remapped_q`), with the map that holds it.
fn tail_steps(plan: &[Step]) -> Vec<(Step, &'static str)> {
    TAIL_CALLS
        .iter()
        .filter_map(|t| {
            plan.iter().find_map(|(name, tp)| {
                let variant = name.strip_prefix(t.caller)?;
                (*tp == t.tracepoint && (variant.is_empty() || variant == "_q"))
                    .then(|| ((format!("{}{variant}", t.program), t.tracepoint), t.map))
            })
        })
        .collect()
}

/// Puts the loaded program of `step` into element 0 of the program array `map`, where its
/// caller's `bpf_tail_call` finds it. The array is the object's own (kept open with it: the
/// kernel empties a program array when its last user reference closes, kernel/bpf/arraymap.c
/// `prog_array_map_clear`).
fn set_tail(ebpf: &mut Ebpf, mode: Mode, (name, tp): &Step, map: &str) -> Result<(), ProbeError> {
    let program = mode.program(name);
    let step = |what: &str| load_err(format!("{what} {program} on {tp} ({mode:?}) as {map}[0]"));
    let fd = ebpf
        .program(&program)
        .ok_or_else(|| step("finding")(anyhow::anyhow!("missing from object")))?
        .fd()
        .and_then(|fd| fd.try_clone().map_err(Into::into))
        .map_err(|e| step("finding")(e.into()))?;
    let map_data = ebpf
        .map_mut(map)
        .ok_or_else(|| step("finding")(anyhow::anyhow!("map missing from object")))?;
    let mut array = ProgramArray::try_from(map_data).map_err(|e| step("opening")(e.into()))?;
    array.set(0, &fd, 0).map_err(|e| step("setting")(e.into()))
}

/// What [`program_step`] does to a program.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Load it into the kernel (the verifier runs here).
    Load,
    /// Attach the loaded program to its tracepoint.
    Attach,
}

/// Loads or attaches program `name` (with `_raw` appended in raw mode) for tracepoint `tp`.
pub(super) fn program_step(
    ebpf: &mut Ebpf,
    mode: Mode,
    btf: &Btf,
    name: &str,
    tp: &str,
    what: Phase,
) -> Result<(), ProbeError> {
    let step = |what: &str| load_err(format!("{what} {name} on {tp} ({mode:?})"));
    let program = mode.program(name);
    let prog = ebpf
        .program_mut(&program)
        .ok_or_else(|| step("finding")(anyhow::anyhow!("missing from object")))?;
    let finding = |e: aya::programs::ProgramError| step("finding")(e.into());
    match (mode, what) {
        (Mode::Btf, Phase::Load) => {
            let prog: &mut BtfTracePoint = prog.try_into().map_err(finding)?;
            prog.load(tp, btf).map_err(|e| step("loading")(e.into()))?;
        }
        (Mode::Btf, Phase::Attach) => {
            let prog: &mut BtfTracePoint = prog.try_into().map_err(finding)?;
            prog.attach().map_err(|e| step("attaching")(e.into()))?;
        }
        (Mode::Raw, Phase::Load) => {
            let prog: &mut RawTracePoint = prog.try_into().map_err(finding)?;
            prog.load().map_err(|e| step("loading")(e.into()))?;
        }
        (Mode::Raw, Phase::Attach) => {
            let prog: &mut RawTracePoint = prog.try_into().map_err(finding)?;
            prog.attach(tp).map_err(|e| step("attaching")(e.into()))?;
        }
    }
    Ok(())
}

/// The entry tracepoint and the programs to attach, each in the variant for this kernel's
/// tracepoint argument layout (from BTF).
fn plan(kbtf: &KernelBtf, layout: &KernelLayout) -> Result<(Tracepoint, Vec<Step>), ProbeError> {
    let order = attach_order(layout.enter_fallback != 0);
    let enter = *order
        .last()
        .expect("the attach order ends with the entry point");
    if layout.enter_fallback != 0 {
        warn!("kernel has no block_io_start tracepoint (Linux < 6.5): requests enter at block_rq_insert \
               or, when directly issued, at block_rq_issue (queue time 0); PREFLUSH/FUA may already be stripped");
    }
    let steps = order
        .into_iter()
        .map(|t| match kbtf.arg_layout(t.name) {
            Some(ArgLayout::Current) => Ok((t.program.to_string(), t.name)),
            Some(ArgLayout::QueueFirst) => Ok((format!("{}_q", t.program), t.name)),
            None => Err(ProbeError::Layout(LayoutError::Missing(format!(
                "tracepoint {}",
                t.name
            )))),
        })
        .collect::<Result<_, _>>()?;
    Ok((enter, steps))
}

/// The tp_btf attach ids of `steps`' tracepoints ([`attach_id_index`]); drops `kbtf` (all of
/// vmlinux BTF, parsed) before building the small index, so both are never held together.
pub(super) fn tp_btf_index(kbtf: KernelBtf, steps: &[Step]) -> Result<Btf, ProbeError> {
    let typedefs: Vec<(&str, u32)> = steps
        .iter()
        .filter_map(|(_, tp)| kbtf.tracepoint_typedef_id(tp).map(|id| (*tp, id)))
        .collect();
    drop(kbtf);
    attach_id_index(&typedefs).map_err(|e| load_err("indexing kernel BTF for tp_btf")(e.into()))
}

/// Loads as `tp_btf` and, if any program is refused there, everything again as `raw_tp`
/// (`OBSERVER_ATTACH=raw_tp` forces that). Returns the object, what `prepare` returned for it
/// ([`load_and_attach`]) and the mode that worked. `cells` keep each attempt's layout for as
/// long as the loader borrows it.
fn load_either_mode<'a, T>(
    loader: &mut EbpfLoader<'a>,
    cells: &'a [OnceCell<KernelLayout>; 2],
    layout: &KernelLayout,
    btf: &Btf,
    capacity: (u32, u32, u32),
    steps: &[Step],
    prepare: &mut dyn FnMut(&mut Ebpf) -> Result<T, ProbeError>,
) -> Result<(Ebpf, T, Mode), ProbeError> {
    let mut attempt = |mode, cell| {
        load_and_attach(loader, cell, mode, layout, btf, capacity, steps, prepare)
            .map(|(e, t)| (e, t, mode))
    };
    if std::env::var("OBSERVER_ATTACH").as_deref() == Ok("raw_tp") {
        return attempt(Mode::Raw, &cells[1]);
    }
    attempt(Mode::Btf, &cells[0]).or_else(|e| {
        warn!(error = %format!("{e:#}"), "tp_btf programs refused; loading everything again as raw_tp");
        attempt(Mode::Raw, &cells[1])
    })
}

/// Loads and attaches everything; returns the probes (keep them alive) and the maps.
///
/// `inflight_entries` sizes `INFLIGHT`; `stats_memory_mib` bounds `CLASS_STATS` (see
/// [`class_stats_entries`]). Between loading the programs and attaching them, `settings` are
/// written to `SETTINGS` and every disk `disks` scans now gets its per-device slot
/// (`DEV_INDEX`, [`super::devslots`]), so no request the programs see runs with default
/// settings or counts as unindexed because the daemon had not scanned yet. Errors say what to
/// do ([`ProbeError`]).
pub fn attach(
    inflight_entries: u32,
    stats_memory_mib: u32,
    settings: Settings,
    disks: &DiskView,
) -> Result<(Probes, KernelMaps), ProbeError> {
    check_privileges()?;
    // Values the loader borrows (aya's `override_global`): declared before it, so they outlive it.
    let layout_cells: [OnceCell<KernelLayout>; 2] = Default::default();
    let probe_layout = OnceCell::new();
    let owner_cell = OnceCell::new();
    let file_cell = OnceCell::new();
    let mut loader = object_loader();
    let kbtf = KernelBtf::from_file(VMLINUX_BTF)?;
    let layout = kbtf.kernel_layout()?;
    loader.override_global(
        "OWNER_LAYOUT",
        owner_cell.get_or_init(|| kbtf.owner_layout()),
        true,
    );
    loader.override_global(
        "FILE_LAYOUT",
        file_cell.get_or_init(|| kbtf.file_layout()),
        true,
    );
    let stats_entries = class_stats_entries(stats_memory_mib);
    let (enter, steps) = plan(&kbtf, &layout)?;
    let mq_rq_in_flight = kbtf.enum_values(&["MQ_RQ_IN_FLIGHT"])[0];
    let btf = tp_btf_index(kbtf, &steps)?;
    let mut prepare = |ebpf: &mut Ebpf| {
        let maps = KernelMaps::take(ebpf, inflight_entries, stats_entries)?;
        maps.set_settings(settings)
            .map_err(|e| load_err("writing SETTINGS")(e.into()))?;
        maps.dev_slots
            .lock()
            .expect("dev slots lock")
            .rescan(&disks.rescan());
        Ok(maps)
    };
    let (mut ebpf, maps, mode) = load_either_mode(
        &mut loader,
        &layout_cells,
        &layout,
        &btf,
        (
            inflight_entries,
            stats_entries,
            cgroup_latency_entries(&settings),
        ),
        &steps,
        &mut prepare,
    )?;
    drop(btf);
    // Give the memory of the BTF lookups and the object's parse back to the system.
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe { libc::malloc_trim(0) };
    let (mode, enter_tp) = (mode.name(), enter.name);
    info!(
        mode,
        enter = enter_tp,
        class_stats_entries = stats_entries,
        inflight_entries,
        "eBPF programs attached"
    );
    let request_probe = match mq_rq_in_flight
        .ok_or_else(|| {
            load_err("the request-state probe")(anyhow::anyhow!(
                "kernel BTF has no MQ_RQ_IN_FLIGHT"
            ))
        })
        .and_then(|v| {
            // raw_tp: struct fields are read with bpf_probe_read_kernel.
            let probe_layout = probe_layout.get_or_init(|| KernelLayout {
                direct_loads: 0,
                ..layout
            });
            RequestProbe::load(&mut loader, probe_layout, v)
        }) {
        Ok(p) => Some(p),
        Err(e) => {
            warn!(error = %format!("{e:#}"), "requests whose completion was not seen stay tracked until their struct is reused");
            None
        }
    };
    let kernel_log = super::kernel_log::take(&mut ebpf);
    Ok((
        Probes {
            _ebpf: ebpf,
            kernel_log,
            info: AttachInfo {
                mode,
                enter_tracepoint: enter_tp,
                reaper: if request_probe.is_some() {
                    "request_state"
                } else {
                    "off"
                },
            },
            request_probe,
        },
        maps,
    ))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// The tail call's target takes its caller's argument-layout variant, and `Mode::program`
    /// adds `_raw` to both alike; a plan without the caller gets no tail.
    #[test]
    fn tail_steps_follow_the_callers_variant() {
        let steps = |names: &[&str]| -> Vec<super::Step> {
            names
                .iter()
                .map(|n| (n.to_string(), "block_rq_complete"))
                .collect()
        };
        let names = |plan: &[super::Step]| -> Vec<String> {
            super::tail_steps(plan)
                .into_iter()
                .map(|((name, _), map)| format!("{name} {map}"))
                .collect()
        };
        assert_eq!(
            names(&steps(&["rq_complete", "rq_complete_nested"])),
            ["rq_complete_remapped RQ_COMPLETE_TAIL"]
        );
        assert_eq!(
            names(&steps(&["rq_complete_q", "rq_complete_nested_q"])),
            ["rq_complete_remapped_q RQ_COMPLETE_TAIL"]
        );
        assert!(names(&steps(&["rq_complete"])).is_empty());
        assert_eq!(
            super::Mode::Raw.program("rq_complete_remapped_q"),
            "rq_complete_remapped_q_raw"
        );
        assert!(super::super::tracepoints::is_tail_called(
            "rq_complete_remapped_q_raw"
        ));
        assert!(!super::super::tracepoints::is_tail_called(
            "rq_complete_nested"
        ));
    }

    use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};

    /// No program calls an out-of-line `memset`/`memcpy`/`memmove`/`memcmp`/`bcmp`: the compiler
    /// emits them as global BPF subprograms, which kernels before ~6.6 refuse when handed a map
    /// value ("reg type unsupported for arg#0 function memset", Debian 12's 6.1). Structs in
    /// maps are written field by field instead (observer-ebpf `fill`, `put`).
    /// The verifier's limit on a program's stack, all frames of a call chain together
    /// (include/linux/filter.h `MAX_BPF_STACK`, the same on every kernel of the matrix).
    const MAX_BPF_STACK: u64 = 512;
    /// What the programs may use of it: a change that grows a frame past this fails here, on
    /// the host, before a kernel's verifier refuses the program (6.1 once refused
    /// `block_rq_complete` at 480 + 32 bytes, and the raw_tp fallback was refused the same way).
    const STACK_MARGIN: u64 = 448;

    /// Each function's own stack depth in `obj`'s code (bytes below r10 it touches: loads and
    /// stores through r10, and r10-derived pointers it builds, e.g. a map key's address for a
    /// helper), and its BPF-to-BPF callees (section index, offset), by (section index, offset).
    /// The verifier's `stack_depth` of a subprogram is the same maximum over the accesses it
    /// can reach (kernel/bpf/verifier.c, `check_stack_access` → `update_stack_depth`); this
    /// reads every instruction, reachable or not, so it is never less.
    #[allow(clippy::type_complexity)]
    fn frames(obj: &object::File) -> BTreeMap<(usize, u64), (String, u64, Vec<(usize, u64)>)> {
        let mut out = BTreeMap::new();
        for section in obj.sections() {
            if section.kind() != object::SectionKind::Text {
                continue;
            }
            let code = section.data().expect("section data");
            let relocs: BTreeMap<u64, (usize, u64)> = section
                .relocations()
                .filter_map(|(at, r)| match r.target() {
                    RelocationTarget::Symbol(i) => {
                        let sym = obj.symbol_by_index(i).ok()?;
                        Some((at, (sym.section_index()?.0, sym.address())))
                    }
                    _ => None,
                })
                .collect();
            for sym in obj.symbols() {
                if sym.section_index() != Some(section.index())
                    || sym.kind() != object::SymbolKind::Text
                    || sym.size() == 0
                {
                    continue;
                }
                let (start, end) = (sym.address(), sym.address() + sym.size());
                let mut depth = 0i64;
                let mut calls = Vec::new();
                // Registers holding r10 + offset, as far as a straight read tells.
                let mut fp: [Option<i64>; 11] = [None; 11];
                fp[10] = Some(0);
                let mut pc = start;
                while pc + 8 <= end {
                    let i = &code[pc as usize..pc as usize + 8];
                    let (op, dst, src) = (i[0], (i[1] & 0x0f) as usize, (i[1] >> 4) as usize);
                    let off = i16::from_le_bytes([i[2], i[3]]) as i64;
                    let imm = i32::from_le_bytes([i[4], i[5], i[6], i[7]]) as i64;
                    let width = if op == 0x18 { 16 } else { 8 }; // ld_imm64 takes two slots
                    let touch = |fp: &[Option<i64>; 11], depth: &mut i64, base: usize, off: i64| {
                        if let Some(b) = fp.get(base).copied().flatten() {
                            *depth = (*depth).max(-(b + off));
                        }
                    };
                    match op & 0x07 {
                        // LDX: a load from src + off into dst.
                        0x01 => {
                            touch(&fp, &mut depth, src, off);
                            fp[dst] = None;
                        }
                        // ST, STX (atomics included): a store to dst + off.
                        0x02 | 0x03 => touch(&fp, &mut depth, dst, off),
                        // ALU64: track `rX = rY` of a frame pointer and `rX += imm` on one.
                        0x07 => {
                            if op == 0xbf {
                                fp[dst] = fp[src];
                            } else if op == 0x07 && fp[dst].is_some() {
                                fp[dst] = fp[dst].map(|b| b + imm);
                                touch(&fp, &mut depth, dst, 0);
                            } else if dst != 10 {
                                fp[dst] = None;
                            }
                        }
                        // ALU32 and ld_imm64 write a register that is then no frame pointer.
                        0x04 | 0x00 if dst != 10 => fp[dst] = None,
                        // JMP: a call. A BPF-to-BPF one (src 1: BPF_PSEUDO_CALL) is relocated
                        // to a symbol (its address + (imm + 1) × 8) or relative to this one.
                        0x05 if op == 0x85 => {
                            if src == 1 {
                                calls.push(match relocs.get(&pc) {
                                    Some(&(sec, addr)) => {
                                        (sec, (addr as i64 + (imm + 1) * 8) as u64)
                                    }
                                    None => (section.index().0, (pc as i64 + (imm + 1) * 8) as u64),
                                });
                            }
                            // Helpers and callees clobber r1-r5; r0 holds the result.
                            for r in fp.iter_mut().take(6) {
                                *r = None;
                            }
                        }
                        _ => {}
                    }
                    pc += width;
                }
                let name = sym.name().unwrap_or("?").to_string();
                out.insert((section.index().0, start), (name, depth as u64, calls));
            }
        }
        out
    }

    /// Stack of the deepest call chain from `f`: each frame rounded up to 32 bytes (at least
    /// 32), as kernel/bpf/verifier.c `check_max_stack_depth` adds them.
    #[allow(clippy::type_complexity)]
    fn chain_depth(
        frames: &BTreeMap<(usize, u64), (String, u64, Vec<(usize, u64)>)>,
        f: (usize, u64),
        seen: &mut Vec<(usize, u64)>,
    ) -> u64 {
        let Some((name, own, calls)) = frames.get(&f) else {
            panic!("a call into {f:?}, where no function starts");
        };
        assert!(!seen.contains(&f), "recursion through {name}");
        seen.push(f);
        let deepest = calls
            .iter()
            .map(|&c| chain_depth(frames, c, seen))
            .max()
            .unwrap_or(0);
        seen.pop();
        (*own).max(1).div_ceil(32) * 32 + deepest
    }

    /// Every program of the daemon's objects (the observer's, and the reaper's request-state
    /// probe) stays within [`STACK_MARGIN`] of the verifier's 512 bytes, its callees' frames
    /// included. The depth is a property of the object, the same for every kernel of the
    /// matrix: the kernels differ in what they refuse at 512, not in what they count.
    #[test]
    fn programs_stack_within_margin() {
        let (mut report, mut over) = (Vec::new(), Vec::new());
        for (what, bytes) in [
            ("observer", super::OBJECT),
            ("reqstate", crate::bpf::reqstate::OBJECT),
            ("trace", crate::bpf::trace::OBJECT),
        ] {
            let obj = object::File::parse(bytes).expect("the embedded eBPF object is ELF");
            let frames = frames(&obj);
            let mut deepest = 0;
            for (&f, (name, own, _)) in &frames {
                let sec = obj.section_by_index(object::SectionIndex(f.0)).unwrap();
                if sec.name().unwrap_or("") == ".text" {
                    continue; // subprograms: counted in the chains of the programs calling them
                }
                let total = chain_depth(&frames, f, &mut Vec::new());
                deepest = deepest.max(total);
                report.push(format!(
                    "{what}/{name}: own frame {own}, with callees {total}"
                ));
                if total > STACK_MARGIN {
                    over.push(format!("{what}/{name}: {total} (own frame {own})"));
                }
            }
            assert!(deepest > 0, "{what}: no program found in the object");
        }
        eprintln!("{}", report.join("\n"));
        assert!(
            over.is_empty(),
            "programs whose stack with their callees is over the margin of {STACK_MARGIN} of \
             the verifier's {MAX_BPF_STACK} bytes: {over:#?}"
        );
    }

    /// The analysis sees a frame: a function that stores at r10 - 488 has an own depth of 488,
    /// and one that calls it (rounded frames: 32 + 512) is over the limit.
    #[test]
    fn stack_analysis_reads_frames_and_calls() {
        // Two functions in one section, as the BPF target emits them; hand-assembled.
        // f (at 0): call g; exit.   g (at 16): *(u64 *)(r10 - 488) = r1; r2 = r10;
        // r2 += -40; exit.
        let ins = |op: u8, regs: u8, off: i16, imm: i32| {
            let mut v = vec![op, regs];
            v.extend(off.to_le_bytes());
            v.extend(imm.to_le_bytes());
            v
        };
        let mut code = Vec::new();
        code.extend(ins(0x85, 0x10, 0, 1)); // call pc + 1 + 1 = g
        code.extend(ins(0x95, 0, 0, 0));
        code.extend(ins(0x7b, 0x1a, -488, 0)); // *(u64 *)(r10 - 488) = r1
        code.extend(ins(0xbf, 0xa2, 0, 0)); // r2 = r10
        code.extend(ins(0x07, 0x02, 0, -40)); // r2 += -40
        code.extend(ins(0x95, 0, 0, 0));
        let mut w = object::write::Object::new(
            object::BinaryFormat::Elf,
            object::Architecture::Bpf,
            object::Endianness::Little,
        );
        let text = w.add_section(Vec::new(), b"prog".to_vec(), object::SectionKind::Text);
        w.append_section_data(text, &code, 8);
        for (name, at, size) in [("f", 0, 16), ("g", 16, 32)] {
            w.add_symbol(object::write::Symbol {
                name: name.as_bytes().to_vec(),
                value: at,
                size,
                kind: object::SymbolKind::Text,
                scope: object::SymbolScope::Compilation,
                weak: false,
                section: object::write::SymbolSection::Section(text),
                flags: object::SymbolFlags::None,
            });
        }
        let bytes = w.write().unwrap();
        let obj = object::File::parse(&*bytes).unwrap();
        let frames = frames(&obj);
        let (&f, _) = frames.iter().find(|(_, v)| v.0 == "f").unwrap();
        let (_, g) = frames.iter().find(|(_, v)| v.0 == "g").unwrap();
        assert_eq!(g.1, 488);
        assert_eq!(chain_depth(&frames, f, &mut Vec::new()), 32 + 512);
    }

    /// No program's entry point calls its handler as a BPF-to-BPF function: aya's macro
    /// declares the handler inside the entry point as a function of the same name taking the
    /// context struct by value, which LLVM left out of line once `block_rq_complete`'s handler
    /// grew past its inlining threshold (a call and a second stack frame per event).
    /// observer-ebpf's `programs!` marks it `inline(always)`.
    #[test]
    fn entry_points_inline_their_handler() {
        let mut outlined = Vec::new();
        for bytes in [super::OBJECT, crate::bpf::trace::OBJECT] {
            let obj = object::File::parse(bytes).expect("the embedded eBPF object is ELF");
            let programs: Vec<String> = obj
                .symbols()
                .filter(|s| s.is_global() && s.kind() == object::SymbolKind::Text)
                .filter_map(|s| s.name().ok().map(str::to_string))
                .collect();
            for local in obj.symbols().filter(|s| s.is_local()) {
                let name = local.name().unwrap_or_default();
                // Rust v0 mangling of `<program>::<program>`: the inner function aya's macro
                // declares inside the entry point.
                if let Some(p) = programs
                    .iter()
                    .find(|p| name.ends_with(&format!("{}{p}{}{p}", p.len(), p.len())))
                {
                    outlined.push(p.clone());
                }
            }
        }
        assert!(
            outlined.is_empty(),
            "programs that call their handler out of line (6.1 refuses the struct argument): {outlined:?}"
        );
    }

    #[test]
    fn programs_call_no_memory_builtins() {
        let mut calls = Vec::new();
        for bytes in [super::OBJECT, crate::bpf::trace::OBJECT] {
            let obj = object::File::parse(bytes).expect("the embedded eBPF object is ELF");
            for section in obj.sections() {
                for (_, reloc) in section.relocations() {
                    if let RelocationTarget::Symbol(i) = reloc.target() {
                        let name = obj
                            .symbol_by_index(i)
                            .ok()
                            .and_then(|s| s.name().ok().map(str::to_string))
                            .unwrap_or_default();
                        if ["memset", "memcpy", "memmove", "memcmp", "bcmp"]
                            .contains(&name.as_str())
                        {
                            calls.push(format!("{} -> {name}", section.name().unwrap_or("?")));
                        }
                    }
                }
            }
        }
        assert!(
            calls.is_empty(),
            "calls to out-of-line memory builtins: {calls:?}"
        );
    }
}
