//! The observer's maps (read by the daemon by name) and their small accessors.
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use aya_log_ebpf::warn;
use observer_common::class::Op;
use observer_common::dispatch::DispatchHist;
use observer_common::layout::KernelLayout;
use observer_common::maps::{
    CgroupLatency, ClassKey, ClassStats, Counter, DevState, ErrorKey, FileRef, Inflight, LogRanges,
    OwnerKey, OwnerStats, SectorRange, Settings, SlowEvent, DEV_SLOTS, EVENTS_BYTES, EVENT_SLOW,
    INFLIGHT_DEFAULT_ENTRIES, NO_SLOT, OWNER_STATS_ENTRIES,
};
use observer_common::stage::{self, Latency};
use observer_ebpf::file::file_of_bio;
use observer_ebpf::kernel::direct_loads;
use observer_ebpf::store::{add, entry, observe_stages, put};

#[map]
pub static INFLIGHT: HashMap<u64, Inflight> =
    HashMap::with_max_entries(INFLIGHT_DEFAULT_ENTRIES, 0);
/// Capacity is set by the daemon before load (memory budget / CPUs).
#[map]
static CLASS_STATS: PerCpuHashMap<ClassKey, ClassStats> = PerCpuHashMap::with_max_entries(256, 0);
#[map]
static ERRORS: PerCpuHashMap<ErrorKey, u64> = PerCpuHashMap::with_max_entries(1024, 0);
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);
/// Completed requests and bytes per (disk, class, owner cgroup), written only while
/// `Settings::owner_stats` is 1 (observer_common::maps::OWNER_STATS).
#[map]
static OWNER_STATS: PerCpuHashMap<OwnerKey, OwnerStats> =
    PerCpuHashMap::with_max_entries(OWNER_STATS_ENTRIES, 0);
/// Stage latencies per (disk, op, owner cgroup), written only while `Settings::cgroup_latency`
/// is 1 (observer_common::maps::CGROUP_LATENCY). One entry here: the daemon sizes it at load.
#[map]
static CGROUP_LATENCY: PerCpuHashMap<OwnerKey, CgroupLatency> =
    PerCpuHashMap::with_max_entries(1, 0);
/// One all-zero `CgroupLatency`: the template for new `CGROUP_LATENCY` entries (too big for the
/// stack).
#[map]
static ZERO_CGROUP_LATENCY: PerCpuArray<CgroupLatency> = PerCpuArray::with_max_entries(1, 0);
/// Slow thresholds and stall threshold, written by the daemon.
#[map]
pub static SETTINGS: Array<Settings> = Array::with_max_entries(1, 0);
/// Per-device stall state, indexed by the disk's slot (see `DEV_INDEX`).
#[map]
pub static DEVSTATE: Array<DevState> = Array::with_max_entries(DEV_SLOTS, 0);
/// Disk (`MKDEV`) → its slot in `DEVSTATE` and `LOG_RANGES`, one per disk, written by the
/// daemon (observer/src/bpf/devslots.rs). Looked up once per request.
#[map]
static DEV_INDEX: HashMap<u32, u32> = HashMap::with_max_entries(DEV_SLOTS, 0);
/// Slow requests and stall episodes: the only per-event traffic to userspace, and only for
/// requests over a threshold.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES, 0);
/// One all-zero `Inflight`: what a new `INFLIGHT` key is inserted with, before being filled in
/// place (no large struct is built on the stack or copied).
#[map]
pub static ZERO_INFLIGHT: PerCpuArray<Inflight> = PerCpuArray::with_max_entries(1, 0);
/// One all-zero `ClassStats`: the template for new `CLASS_STATS` entries (too big for the stack).
#[map]
static ZERO: PerCpuArray<ClassStats> = PerCpuArray::with_max_entries(1, 0);
/// Filesystem log ranges per disk, indexed by the disk's slot, written by the daemon
/// (observer/src/fslog/ranges.rs).
#[map]
static LOG_RANGES: Array<LogRanges> = Array::with_max_entries(DEV_SLOTS, 0);

/// One u64 per CPU, where [`addr_number`] turns a pointer into a number.
#[map]
static SCRATCH: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A tracepoint's pointer argument as a plain number (0 if that fails, see below), for
/// hashing: in tp_btf programs arguments are typed pointers, whose shifts and multiplications
/// the verifier refuses ("pointer arithmetic with >>= operator prohibited"), and a pointer's
/// stack copy cannot be read back in halves ("invalid size of register fill"). Stored into a
/// map value (allowed for programs loaded with CAP_PERFMON: kernel/bpf/verifier.c,
/// allow_ptr_leaks) and loaded again, it is a number. The scratch value is per CPU but not
/// per program run: another program may run on this CPU between the store and the load (a
/// completion in an interrupt, or another task: tracing programs run with migration, not
/// preemption, disabled), so the value read back is compared with the pointer and the store
/// retried; after 4 clobbered tries, 0 (the caller then uses the hash map). Without this check
/// the 1-minute soak counted 4 untracked and 2 unexplained lost completions.
#[inline(always)]
pub fn addr_number(p: u64) -> u64 {
    let Some(s) = SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    for _ in 0..4 {
        // SAFETY: `s` is this CPU's SCRATCH element (a non-null lookup of index 0): a u64, valid
        // while the program runs; `put` and the volatile read touch only it. The asm moves a
        // register to itself: no memory, no other register.
        unsafe {
            put(s, p);
            let v = core::ptr::read_volatile(s);
            // An opaque copy: the compiler would otherwise return `p` itself once `v == p`.
            let mut n = v;
            core::arch::asm!("{0} = {0}", inout(reg) n);
            if v == p {
                return n;
            }
        }
    }
    0
}

/// Counts a rare event (a map full, a stale entry, a clock anomaly, a dropped event, an
/// unindexed disk) in `COUNTERS`, and at its 1st, 2nd, 4th, 8th … occurrence on a CPU logs it
/// through aya-log (`AYA_LOGS`, which the daemon drains into its own log, target
/// `observer::kernel`): a trail of at most 64 lines per counter and CPU, written only on these
/// paths, never per request.
#[inline(always)]
pub fn count(c: Counter) {
    if let Some(p) = COUNTERS.get_ptr_mut(c as u32) {
        // SAFETY: `p` is this CPU's COUNTERS element `c` (a non-null lookup, index <
        // Counter::COUNT): a u64 valid while the program runs. Counted with an atomic add, as
        // every program nesting on this CPU counts; read back in one volatile load (a nested
        // program's count may be in it: the log trail is approximate, the count is not).
        let n = unsafe {
            add(p, 1);
            core::ptr::read_volatile(p)
        };
        if n & (n - 1) == 0 {
            // aya-log's macros take a context they do not use (aya-log-ebpf-macros 0.2:
            // `let _ = ctx;`); these helpers run without one. Numbers only: a `&str` argument
            // of varying length is copied with an out-of-line memcpy, which older verifiers
            // refuse (loader.rs, programs_call_no_memory_builtins); the daemon names the
            // counter (bpf/kernel_log.rs).
            // SAFETY: bpf_get_smp_processor_id (the last argument) takes no argument and only
            // returns this CPU's number.
            warn!(&(), "counter {}: {} on CPU {}", c as u32, n, unsafe {
                aya_ebpf::helpers::bpf_get_smp_processor_id()
            });
        }
    }
}

/// Whether a completed I/O of `class` with stages `lat` (ns) is slow: [`stage::slow`] with the
/// thresholds `SETTINGS` holds for its op (none while the daemon has not written them).
#[inline(always)]
pub fn slow(class: u16, lat: &Latency) -> bool {
    let Some(set) = SETTINGS.get(0) else {
        return false;
    };
    stage::slow(lat, &set.slow_ns[Op::from_code(class) as usize])
}

/// Stats entry of (dev, class), created on first use.
#[inline(always)]
pub fn stats(dev: u32, class: u16) -> Option<*mut ClassStats> {
    let p = entry(
        &CLASS_STATS,
        &ClassKey {
            dev,
            class,
            _pad: 0,
        },
        &ZERO,
    );
    if p.is_none() {
        count(Counter::StatsFull);
    }
    p
}

/// Counts a request's first dispatch (size, bios merged, missed merge) into the dispatch
/// histogram of its CLASS_STATS value `s`, with atomic adds (store.rs `add`).
///
/// # Safety
///
/// `s` must be this CPU's value of a CLASS_STATS entry from a non-null lookup ([`stats`]),
/// valid while the program runs.
#[inline(always)]
pub unsafe fn count_dispatch(s: *mut ClassStats, e: &Inflight) {
    DispatchHist::record_at(
        addr_of_mut!((*s).dispatch),
        e.size,
        e.bios,
        e.missed,
        |p, v| {
            // SAFETY: `p` is a u64 field of `*s`, valid by the caller's contract.
            add(p, v)
        },
    );
}

/// `OWNER_STATS`' key and insert value, built in map memory instead of on the stack:
/// `block_rq_complete`'s frame was at the verifier's limit when this was written (504 bytes + a
/// 32-byte callee were refused on 6.1: "combined stack size of 2 calls is 544"); it is 352 + 32
/// now that the layout is read in place (kernel.rs `layout`), and observer/src/bpf/loader.rs
/// `programs_stack_within_margin` holds every program to 448.
#[repr(C)]
pub struct OwnerScratch {
    key: OwnerKey,
    value: OwnerStats,
}

/// One [`OwnerScratch`] per CPU. Not per program run: a completion in an interrupt may run
/// `owner_count` between another program's (a lost request's, at entry) writing the key and
/// its map call; that one request is then counted for the interrupting request's key.
#[map]
static OWNER_SCRATCH: PerCpuArray<OwnerScratch> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's [`OwnerScratch`] with its key set to (`dev`, `class`, `cgroup`), if the
/// `SETTINGS` field `on` picks is non-zero; `None` when off (one array lookup, inlined by the
/// verifier, and a branch).
#[inline(always)]
fn owner_key(
    on: impl Fn(&Settings) -> u64,
    dev: u32,
    class: u16,
    cgroup: u64,
) -> Option<*mut OwnerScratch> {
    match SETTINGS.get(0) {
        Some(set) if on(set) != 0 => {}
        _ => return None,
    }
    let s = OWNER_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: `s` is this CPU's OWNER_SCRATCH element (a non-null lookup), valid while the program
    // runs; each store writes one field of its key.
    unsafe {
        put(addr_of_mut!((*s).key.dev), dev);
        put(addr_of_mut!((*s).key.class), class);
        put(addr_of_mut!((*s).key._pad), 0);
        put(addr_of_mut!((*s).key.cgroup), cgroup);
    }
    Some(s)
}

/// Counts a completed request (`bytes`: 0 for a lost one) for its owner cgroup in
/// `OWNER_STATS`, if `Settings::owner_stats` is on: one array lookup (inlined by the verifier)
/// and a branch when off; when on, one more array lookup, a hash lookup (and an insert for a
/// new triple; [`Counter::OwnerStatsFull`] when the map is full). No stack.
#[inline(always)]
pub fn owner_count(dev: u32, class: u16, cgroup: u64, bytes: u64) {
    let Some(s) = owner_key(|set| set.owner_stats, dev, class, cgroup) else {
        return;
    };
    // SAFETY: `s` is this CPU's OWNER_SCRATCH element (a non-null lookup), valid while the program
    // runs; `key` and `value` are its fields, and the map calls only read them. `p` is this CPU's
    // value of the OWNER_STATS entry of `key` (a non-null lookup of a per-CPU hash: no other CPU
    // writes it). A program nesting on this CPU may rewrite the scratch between these stores and
    // the map call (see OWNER_SCRATCH): one count goes to its key, nothing invalid.
    unsafe {
        let key = &(*s).key;
        if let Some(p) = OWNER_STATS.get_ptr_mut(key) {
            add(addr_of_mut!((*p).requests), 1);
            add(addr_of_mut!((*p).bytes), bytes);
            return;
        }
        put(addr_of_mut!((*s).value.requests), 1);
        put(addr_of_mut!((*s).value.bytes), bytes);
        match OWNER_STATS.insert(key, &(*s).value, BPF_NOEXIST as u64) {
            Ok(()) => {}
            // Inserted meanwhile by another CPU: count into this CPU's copy.
            Err(-17) => {
                if let Some(p) = OWNER_STATS.get_ptr_mut(key) {
                    add(addr_of_mut!((*p).requests), 1);
                    add(addr_of_mut!((*p).bytes), bytes);
                }
            }
            Err(_) => count(Counter::OwnerStatsFull),
        }
    }
}

/// Adds a completed request's stage latencies (`lat`, ns; the stages [`stage::recorded`] says
/// it went through) to its (disk, op, owner cgroup) histograms in `CGROUP_LATENCY`, if
/// `Settings::cgroup_latency` is on: one array lookup (inlined by the verifier) and a branch when
/// off; when on, the key is built in `OWNER_SCRATCH` (no stack), then a hash lookup (and an
/// insert from `ZERO_CGROUP_LATENCY` for a new triple; [`Counter::CgroupLatencyFull`] when the
/// map is full) and two atomic adds per stage.
#[inline(always)]
pub fn cgroup_latency(e: &Inflight, lat: &Latency) {
    // Not in the raw_tp programs: with it, both completion programs took 6.1's verifier past
    // its 1M-instruction limit (kernel matrix, `rq_complete_nested_raw`); the daemon warns.
    if !direct_loads() {
        return;
    }
    let op = Op::from_code(e.class) as u16;
    let Some(s) = owner_key(|set| set.cgroup_latency, e.dev, op, e.owner_cgroup) else {
        return;
    };
    // SAFETY: `s` is this CPU's OWNER_SCRATCH element (a non-null lookup), valid while the program
    // runs; `key` is its field and the map calls only read it. `h` is this CPU's value of the
    // CGROUP_LATENCY entry of `key` (store.rs `entry`: a non-null lookup of a per-CPU hash, so
    // no other CPU writes it); a nesting program counts into it with atomic adds too. A program
    // nesting on this CPU may rewrite the scratch key before the map call (see OWNER_SCRATCH):
    // that one request then lands in the nested one's (disk, op, cgroup), nothing invalid.
    unsafe {
        let Some(h) = entry(&CGROUP_LATENCY, &(*s).key, &ZERO_CGROUP_LATENCY) else {
            count(Counter::CgroupLatencyFull);
            return;
        };
        observe_stages(addr_of_mut!((*h).stages), e.enter_ns, e.dispatch_ns, lat);
    }
}

#[inline(always)]
pub fn error_seen(dev: u32, class: u16, status: u64) {
    let key = ErrorKey {
        dev,
        class,
        status: status as u8,
        _pad: 0,
    };
    match ERRORS.get_ptr_mut(&key) {
        // SAFETY: `p` is this CPU's value of the ERRORS entry of `key` (a non-null lookup of a
        // per-CPU hash): no other CPU writes it.
        Some(p) => unsafe { add(p, 1) },
        None => {
            let _ = ERRORS.insert(&key, &1, BPF_NOEXIST as u64);
        }
    }
}

/// Entries per CPU of `SLOT_CACHE` (a power of two).
const SLOT_CACHE_ENTRIES: u32 = 64;

/// Per CPU, direct-mapped (entry: the disk's `MKDEV` hashed): `dev << 32 | slot` of a disk
/// recently looked up in `DEV_INDEX`, so that a request usually finds its disk's slot with two
/// array lookups instead of a hash lookup. A cached slot is used only while `LOG_RANGES[slot]`
/// still names the disk (the daemon writes it before it publishes the slot and zeroes it when
/// it frees the slot): a stale entry costs the hash lookup, never a wrong slot.
#[map]
static SLOT_CACHE: PerCpuArray<u64> = PerCpuArray::with_max_entries(SLOT_CACHE_ENTRIES, 0);

/// The slot of disk `dev` in the per-device arrays (from this CPU's `SLOT_CACHE`, else one hash
/// lookup in `DEV_INDEX`), or [`NO_SLOT`] (counted) if the daemon has not given it one.
#[inline(always)]
pub fn dev_slot(dev: u32) -> u32 {
    let i = (dev.wrapping_mul(2_654_435_761) >> 26) & (SLOT_CACHE_ENTRIES - 1);
    let cached = SLOT_CACHE.get_ptr_mut(i);
    if let Some(c) = cached {
        // SAFETY: `c` is this CPU's SLOT_CACHE element `i` (a non-null lookup, i <
        // SLOT_CACHE_ENTRIES): a u64.
        let v = unsafe { *c };
        let slot = v as u32;
        if (v >> 32) as u32 == dev && slot != NO_SLOT {
            if let Some(r) = LOG_RANGES.get(slot) {
                if r.dev == dev {
                    return slot;
                }
            }
        }
    }
    // SAFETY: HashMap::get, the u32 copied at once (aya's caveat: an element removed and reused
    // meanwhile reads as another key's value, integers only, never a fault: hash elements are
    // preallocated and stay mapped while the program runs, under RCU). The daemon deletes only the
    // slot of a gone disk; a slot read so is another disk's, which LOG_RANGES and DEVSTATE users
    // check against `dev` (`r.dev == dev`, stall.rs `ds.dev == dev`).
    match unsafe { DEV_INDEX.get(&dev) } {
        Some(s) => {
            let slot = *s;
            if let Some(c) = cached {
                // SAFETY: `c` is this CPU's SLOT_CACHE element (see above), a u64 valid while the
                // program runs.
                unsafe { put(c, ((dev as u64) << 32) | slot as u64) };
            }
            slot
        }
        None => {
            count(Counter::Unindexed);
            NO_SLOT
        }
    }
}

/// The slot the daemon gave disk `dev` (`DEV_INDEX`), or `None`, not counted: for a disk that
/// is not a request's own (the disk above in `block_bio_remap`, or a partition there).
#[inline(always)]
pub fn indexed_slot(dev: u32) -> Option<u32> {
    // SAFETY: HashMap::get, the u32 copied at once (aya's caveat: an element removed and reused
    // meanwhile reads as another key's value, integers only, never a fault: hash elements are
    // preallocated and stay mapped while the program runs, under RCU); its only user, inherit.rs
    // `mark`, checks the slot's LOG_RANGES entry against the disk.
    unsafe { DEV_INDEX.get(&dev) }.copied()
}

/// [`observer_common::class::LOG`] if the request starts inside a filesystem log range of its
/// disk (at `slot`, see [`dev_slot`]), else 0. One array lookup (inlined by the verifier).
#[inline(always)]
pub fn log_class(dev: u32, slot: u32, sector: u64) -> u16 {
    if log_range(dev, slot, sector).is_some() {
        observer_common::class::LOG
    } else {
        0
    }
}

/// The filesystem log range of disk `dev` (at `slot`) that `sector` (512 B) is inside, if any.
#[inline(always)]
pub fn log_range(dev: u32, slot: u32, sector: u64) -> Option<SectorRange> {
    if slot == NO_SLOT {
        return None;
    }
    match LOG_RANGES.get(slot) {
        Some(r) if r.dev == dev => r.find(sector),
        _ => None,
    }
}

/// Sends a slow request's [`SlowEvent`] to the daemon (`file` read from `bio` only now, for
/// a slow request: observer_ebpf::file), written field by field straight into the reserved
/// ring-buffer space: no event on the stack (it was 160 of the completion programs' 448 bytes,
/// observer/src/bpf/loader.rs `programs_stack_within_margin`). Counted when the ring buffer is
/// full. `complete_ns` in ns.
#[inline(always)]
pub fn emit_slow(
    req: &Inflight,
    complete_ns: u64,
    merges: u32,
    status: u32,
    bio: u64,
    l: &KernelLayout,
) {
    let Some(mut entry) = EVENTS.reserve::<SlowEvent>(0) else {
        count(Counter::EventsDropped);
        return;
    };
    let r = entry.as_mut_ptr();
    // SAFETY: `r` points at the reserved, exclusively ours space of one `SlowEvent` (aligned
    // by the ring buffer to 8 bytes); every field is written before the entry is submitted.
    unsafe {
        addr_of_mut!((*r).kind).write(EVENT_SLOW);
        addr_of_mut!((*r).dev).write(req.dev);
        addr_of_mut!((*r).req).write(*req);
        addr_of_mut!((*r).complete_ns).write(complete_ns);
        addr_of_mut!((*r).merges).write(merges);
        addr_of_mut!((*r).status).write(status);
        // raw_tp programs leave it unknown: its probe reads and kinds in both completion
        // programs took 6.1's verifier past its 1M-instruction limit (kernel matrix,
        // `rq_complete_nested_raw`). Stuck requests still get theirs on demand (reqstate's
        // `file_of`).
        let file = if direct_loads() {
            file_of_bio(bio, l)
        } else {
            FileRef::default()
        };
        addr_of_mut!((*r).file).write(file);
    }
    entry.submit(0);
}

/// Sends a slow-request or stall event to the daemon; counted when the ring buffer is full.
#[inline(always)]
pub fn emit<T: 'static>(ev: &T) {
    if EVENTS.output::<T>(ev, 0).is_err() {
        count(Counter::EventsDropped);
    }
}
