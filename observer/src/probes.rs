//! Loads the embedded eBPF object, hands it the kernel layout, and attaches one program per
//! block tracepoint (tp_btf preferred, raw_tp fallback, the argument layout the kernel has).

use aya::{
    maps::{Array, HashMap, IterableMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePoint, RawTracePoint},
    Btf, Ebpf, EbpfLoader,
};
use observer_common::maps::{self as m, ClassKey, ClassStats, DevState, ErrorKey, Inflight, LogRanges, Settings};
use tracing::{info, warn};

use crate::kernel_layout::{ArgLayout, KernelBtf, LayoutError, VMLINUX_BTF};
use observer_common::layout::KernelLayout;

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
}

/// The maps the daemon reads, owned (taken out of the [`Ebpf`] object).
pub struct Maps {
    /// `INFLIGHT`: request pointer → state (read side, for scrapes).
    pub inflight: HashMap<MapData, u64, Inflight>,
    /// A second handle on `INFLIGHT` for the [`crate::reaper`], the only userspace writer.
    pub inflight_rw: std::sync::Mutex<HashMap<MapData, u64, Inflight>>,
    /// `CLASS_STATS`: (dev, class) → per-CPU stats.
    pub class_stats: PerCpuHashMap<MapData, ClassKey, ClassStats>,
    /// `ERRORS`: (dev, class, status) → per-CPU count.
    pub errors: PerCpuHashMap<MapData, ErrorKey, u64>,
    /// `COUNTERS`: [`observer_common::maps::Counter`] → per-CPU count.
    pub counters: PerCpuArray<MapData, u64>,
    /// `SETTINGS`: thresholds, writable at runtime.
    pub settings: std::sync::Mutex<Array<MapData, Settings>>,
    /// `DEVSTATE`: per-device last completion / dispatch.
    pub devstate: Array<MapData, DevState>,
    /// `EVENTS` ring buffer, taken by the event reader at startup.
    pub events: std::sync::Mutex<Option<RingBuf<MapData>>>,
    /// `LOG_RANGES`: disk → filesystem log ranges; written only by [`crate::fslog`].
    pub log_ranges: std::sync::Mutex<Array<MapData, LogRanges>>,
    /// Capacity of `INFLIGHT` (entries).
    pub inflight_capacity: u32,
    /// Capacity of `CLASS_STATS` (entries).
    pub class_stats_capacity: u32,
}

impl Maps {
    /// The device's state from its `DEVSTATE` slot, if the slot is this device's.
    pub fn devstate_of(&self, dev: u32) -> Option<DevState> {
        self.devstate.get(&m::dev_slot(dev), 0).ok().filter(|d| d.dev == dev)
    }

    /// Writes new thresholds for the programs (takes effect at the next event).
    pub fn set_settings(&self, s: Settings) -> Result<(), aya::maps::MapError> {
        self.settings.lock().expect("settings lock").set(0, s, 0)
    }
}

/// Attached programs; dropping this detaches everything.
pub struct Probes {
    _ebpf: Ebpf,
    /// How they were attached.
    pub info: AttachInfo,
}

/// Checks CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN) in the effective set.
pub fn check_privileges() -> Result<(), ProbeError> {
    use caps::{CapSet, Capability};
    let has = |c| caps::has_cap(None, CapSet::Effective, c).unwrap_or(false);
    if has(Capability::CAP_SYS_ADMIN) {
        return Ok(());
    }
    let missing: Vec<&str> = [(Capability::CAP_BPF, "CAP_BPF"), (Capability::CAP_PERFMON, "CAP_PERFMON")]
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

fn load_err(what: impl Into<String>) -> impl FnOnce(anyhow::Error) -> ProbeError {
    let what = what.into();
    move |source| ProbeError::Load { what, source }
}

/// How the programs are attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `tp_btf` with direct (BTF-checked) loads of kernel struct fields: the fast path.
    Btf,
    /// `raw_tp` with `bpf_probe_read_kernel`: for kernels where tp_btf is refused.
    Raw,
}

/// Loads the object and attaches every program in one mode, in the order given.
fn load_and_attach(
    mode: Mode,
    layout: &KernelLayout,
    btf: &Btf,
    inflight_entries: u32,
    stats_entries: u32,
    plan: &[(String, &str)],
) -> Result<Ebpf, ProbeError> {
    let layout =
        KernelLayout { direct_loads: u32::from(mode == Mode::Btf), loaded_ns: crate::reaper::monotonic_ns(), ..*layout };
    let mut ebpf = EbpfLoader::new()
        .btf(Some(btf))
        .override_global("LAYOUT", &layout, true)
        .map_max_entries(m::INFLIGHT, inflight_entries)
        .map_max_entries(m::CLASS_STATS, stats_entries)
        .load(OBJECT)
        .map_err(|e| load_err("loading the object")(e.into()))?;
    for (name, tp) in plan {
        let step = |what: &str| load_err(format!("{what} {name} on {tp} ({mode:?})"));
        match mode {
            Mode::Btf => {
                let prog: &mut BtfTracePoint = ebpf
                    .program_mut(&name)
                    .ok_or_else(|| step("finding")(anyhow::anyhow!("missing from object")))?
                    .try_into()
                    .map_err(|e: aya::programs::ProgramError| step("finding")(e.into()))?;
                prog.load(tp, btf).map_err(|e| step("loading")(e.into()))?;
                prog.attach().map_err(|e| step("attaching")(e.into()))?;
            }
            Mode::Raw => {
                let raw = format!("{name}_raw");
                let prog: &mut RawTracePoint = ebpf
                    .program_mut(&raw)
                    .ok_or_else(|| step("finding")(anyhow::anyhow!("missing from object")))?
                    .try_into()
                    .map_err(|e: aya::programs::ProgramError| step("finding")(e.into()))?;
                prog.load().map_err(|e| step("loading")(e.into()))?;
                prog.attach(tp).map_err(|e| step("attaching")(e.into()))?;
            }
        }
    }
    Ok(ebpf)
}

/// Loads and attaches everything; returns the probes (keep them alive) and the maps.
///
/// Tries `tp_btf` first; if any program is refused there, everything is loaded again as
/// `raw_tp` (`OBSERVER_ATTACH=raw_tp` forces that).
pub fn attach(inflight_entries: u32, stats_memory_mib: u32, settings: Settings) -> Result<(Probes, Maps), ProbeError> {
    check_privileges()?;
    let kbtf = KernelBtf::from_file(VMLINUX_BTF)?;
    let layout = kbtf.kernel_layout()?;
    let stats_entries = class_stats_entries(stats_memory_mib);

    let enter_tp = if layout.enter_fallback != 0 {
        warn!("kernel has no block_io_start tracepoint (Linux < 6.5): requests enter at block_rq_insert \
               or, when directly issued, at block_rq_issue (queue time 0); PREFLUSH/FUA may already be stripped");
        "block_rq_insert"
    } else {
        "block_io_start"
    };
    // Attach from the end of a request's life to its start, so every request that gets an
    // entry is sure to be seen at dispatch and completion.
    let mut plan: Vec<(&str, &str)> = vec![
        ("rq_complete", "block_rq_complete"),
        ("rq_requeue", "block_rq_requeue"),
        ("rq_merge", "block_rq_merge"),
        ("bio_backmerge", "block_bio_backmerge"),
        ("bio_frontmerge", "block_bio_frontmerge"),
        ("rq_issue", "block_rq_issue"),
    ];
    plan.push(if layout.enter_fallback != 0 { ("rq_insert", "block_rq_insert") } else { ("io_start", "block_io_start") });
    // Program variant per tracepoint argument layout, from BTF; then free that parse before
    // aya parses BTF again (peak RSS: the kernel's BTF is several MB).
    let plan: Vec<(String, &str)> = plan
        .into_iter()
        .map(|(base, tp)| match kbtf.arg_layout(tp) {
            Some(ArgLayout::Current) => Ok((base.to_string(), tp)),
            Some(ArgLayout::QueueFirst) => Ok((format!("{base}_q"), tp)),
            None => Err(ProbeError::Layout(LayoutError::Missing(format!("tracepoint {tp}")))),
        })
        .collect::<Result<_, _>>()?;
    drop(kbtf);
    let btf = Btf::from_sys_fs().map_err(|e| load_err("reading kernel BTF for tp_btf")(e.into()))?;

    let force_raw = std::env::var("OBSERVER_ATTACH").as_deref() == Ok("raw_tp");
    let attempt = |mode| load_and_attach(mode, &layout, &btf, inflight_entries, stats_entries, &plan);
    let (mut ebpf, mode) = if force_raw {
        (attempt(Mode::Raw)?, "raw_tp")
    } else {
        match attempt(Mode::Btf) {
            Ok(e) => (e, "tp_btf"),
            Err(e) => {
                warn!(error = %format!("{e:#}"), "tp_btf programs refused; loading everything again as raw_tp");
                (attempt(Mode::Raw)?, "raw_tp")
            }
        }
    };
    drop(btf);
    // Give the memory of both BTF parses back to the system.
    unsafe { libc::malloc_trim(0) };
    info!(mode, enter = enter_tp, class_stats_entries = stats_entries, inflight_entries, "eBPF programs attached");

    let take = |ebpf: &mut Ebpf, name: &str| {
        ebpf.take_map(name).ok_or_else(|| load_err(format!("map {name}"))(anyhow::anyhow!("missing from object")))
    };
    let conv = |name: &'static str| move |e: aya::maps::MapError| load_err(format!("map {name}"))(e.into());
    let inflight: HashMap<MapData, u64, Inflight> =
        HashMap::try_from(take(&mut ebpf, m::INFLIGHT)?).map_err(conv(m::INFLIGHT))?;
    // dup(2) the map fd for the reaper: BPF_MAP_GET_FD_BY_ID would need CAP_SYS_ADMIN.
    let dup = std::os::fd::AsFd::as_fd(IterableMap::map(&inflight).fd())
        .try_clone_to_owned()
        .map_err(|e| load_err("map INFLIGHT (dup)")(e.into()))?;
    let inflight_rw = MapData::from_fd(dup).map_err(conv(m::INFLIGHT))?;
    let maps = Maps {
        inflight,
        inflight_rw: std::sync::Mutex::new(
            HashMap::try_from(aya::maps::Map::HashMap(inflight_rw)).map_err(conv(m::INFLIGHT))?,
        ),
        class_stats: PerCpuHashMap::try_from(take(&mut ebpf, m::CLASS_STATS)?).map_err(conv(m::CLASS_STATS))?,
        errors: PerCpuHashMap::try_from(take(&mut ebpf, m::ERRORS)?).map_err(conv(m::ERRORS))?,
        counters: PerCpuArray::try_from(take(&mut ebpf, m::COUNTERS)?).map_err(conv(m::COUNTERS))?,
        settings: std::sync::Mutex::new(Array::try_from(take(&mut ebpf, m::SETTINGS)?).map_err(conv(m::SETTINGS))?),
        devstate: Array::try_from(take(&mut ebpf, m::DEVSTATE)?).map_err(conv(m::DEVSTATE))?,
        events: std::sync::Mutex::new(Some(RingBuf::try_from(take(&mut ebpf, m::EVENTS)?).map_err(conv(m::EVENTS))?)),
        log_ranges: std::sync::Mutex::new(
            Array::try_from(take(&mut ebpf, m::LOG_RANGES)?).map_err(conv(m::LOG_RANGES))?,
        ),
        inflight_capacity: inflight_entries,
        class_stats_capacity: stats_entries,
    };
    maps.set_settings(settings).map_err(|e| load_err("writing SETTINGS")(e.into()))?;
    Ok((Probes { _ebpf: ebpf, info: AttachInfo { mode, enter_tracepoint: enter_tp } }, maps))
}

#[cfg(test)]
mod tests {
    use object::{Object, ObjectSection, ObjectSymbol, RelocationTarget};

    /// No program calls an out-of-line `memset`/`memcpy`/`memmove`/`memcmp`/`bcmp`: the compiler
    /// emits them as global BPF subprograms, which kernels before ~6.6 refuse when handed a map
    /// value ("reg type unsupported for arg#0 function memset", Debian 12's 6.1). Structs in
    /// maps are written field by field instead (observer-ebpf `fill`, `put`).
    #[test]
    fn programs_call_no_memory_builtins() {
        let obj = object::File::parse(super::OBJECT).expect("the embedded eBPF object is ELF");
        let mut calls = Vec::new();
        for section in obj.sections() {
            for (_, reloc) in section.relocations() {
                if let RelocationTarget::Symbol(i) = reloc.target() {
                    let name = obj.symbol_by_index(i).ok().and_then(|s| s.name().ok().map(str::to_string)).unwrap_or_default();
                    if ["memset", "memcpy", "memmove", "memcmp", "bcmp"].contains(&name.as_str()) {
                        calls.push(format!("{} -> {name}", section.name().unwrap_or("?")));
                    }
                }
            }
        }
        assert!(calls.is_empty(), "calls to out-of-line memory builtins: {calls:?}");
    }
}
