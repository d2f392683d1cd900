//! Operation costs for `cargo xtask bench --costs`: one program per building block of the
//! observer's programs, all attached to `block_rq_issue` (once per request), so kernel.bpf_stats
//! gives each block's ns per run. Subtract the empty programs' (the fixed per-program cost,
//! bpf_stats' own clock reads included) to get the block's net cost. Not used by the daemon.
//!
//! The blocks mirror the observer's programs (src/probes/): reads through
//! `bpf_probe_read_kernel` versus direct (BTF-typed) loads, the `INFLIGHT` hash map keyed by
//! request pointer (insert, lookup hit, delete; run in that order on the same request), the
//! per-CPU `CLASS_STATS` lookup, three histogram updates, a per-CPU counter, the clock, the
//! direct-mapped slot lookup that replaced the hash map on the hot path, and the submitter
//! capture (pid, cgroup, comm).
#![no_std]
#![no_main]

use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
    programs::BtfTracePointContext,
    EbpfContext,
};
use observer_common::maps::{
    mkdev, ClassKey, ClassStats, Inflight, Slot, INFLIGHT_DEFAULT_ENTRIES, SLOTS,
};
use observer_ebpf::{
    slots::claim,
    store::{add, entry, observe, put},
};

// Filled by the loader from kernel BTF, as the daemon does.
observer_ebpf::layout_global!();

#[map]
static C_INFLIGHT: HashMap<u64, Inflight> = HashMap::with_max_entries(INFLIGHT_DEFAULT_ENTRIES, 0);
#[map]
static C_STATS: PerCpuHashMap<ClassKey, ClassStats> = PerCpuHashMap::with_max_entries(256, 0);
#[map]
static C_ZERO: PerCpuArray<ClassStats> = PerCpuArray::with_max_entries(1, 0);
#[map]
static C_COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(8, 0);
#[map]
static C_SLOTS: Array<Slot<Inflight>> = Array::with_max_entries(SLOTS, 0);
#[map]
static C_SCRATCH: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
#[map]
static C_SUBMITTER: PerCpuArray<Inflight> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn rq(c: &BtfTracePointContext) -> u64 {
    // SAFETY: `c` is a tp_btf context of `block_rq_issue`, whose arguments are u64 each
    // (kernel/trace/bpf_trace.c `__bpf_trace_run`); argument 0 is its first (`struct request *`
    // since 5.11, the kernels the bench runs on), and the verifier checks the read against the
    // prototype.
    unsafe { *(c.as_ptr() as *const u64) }
}

#[inline(always)]
fn pread<T: Default>(base: u64, off: u32) -> T {
    // SAFETY: bpf_probe_read_kernel copies `size_of::<T>()` bytes from any kernel address into a
    // value of its own: a fault returns an error (then `T::default()`), never UB.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T).unwrap_or_default() }
}

/// A plain load: the verifier checks it against the BTF type of `base` (tp_btf arguments and
/// pointers loaded from them are BTF-typed) and makes it fault-safe.
#[inline(always)]
fn direct<T: Copy>(base: u64, off: u32) -> T {
    // SAFETY: tp_btf only: `base` is a BTF-typed kernel pointer (the request argument, or a load
    // through one), so the verifier checks this load against its BTF type and makes it a PROBE_MEM
    // load whose fault reads 0 (kernel/bpf/verifier.c); `T` is an integer or pointer-sized number.
    unsafe { core::ptr::read((base + off as u64) as *const T) }
}

#[inline(always)]
fn field(off: &u32) -> u32 {
    // SAFETY: `off` is a reference to a u32 field of LAYOUT: valid and aligned; volatile so the
    // verifier sees the patched `.rodata` constant.
    unsafe { core::ptr::read_volatile(off) }
}

/// The disk number of request `r` (rq->q->disk->{major, first_minor}) by four direct loads.
#[inline(always)]
fn direct_dev(r: u64) -> u32 {
    let q: u64 = direct(r, field(&LAYOUT.rq_q));
    let d: u64 = direct(q, field(&LAYOUT.q_disk));
    mkdev(
        direct(d, field(&LAYOUT.disk_major)),
        direct(d, field(&LAYOUT.disk_first_minor)),
    )
}

#[inline(always)]
#[allow(clippy::erasing_op)]
fn sink(v: u64) -> i32 {
    // Keep the value alive without a map access: the return value of tp_btf is ignored.
    (v & 1) as i32 * 0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c00_empty(_c: BtfTracePointContext) -> i32 {
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c01_ktime(_c: BtfTracePointContext) -> i32 {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    sink(unsafe { bpf_ktime_get_ns() })
}

/// The observer's `layout()`: a volatile copy of the whole LAYOUT struct.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c02_layout_copy(c: BtfTracePointContext) -> i32 {
    // SAFETY: `LAYOUT` is this object's `KernelLayout` static (layout_global!), which nothing
    // writes at run time; any bits are a value (integers only).
    let l = unsafe { core::ptr::read_volatile(&LAYOUT) };
    sink(rq(&c) + l.rq_cmd_flags as u64 + l.op_mask as u64)
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c03_pread_1(c: BtfTracePointContext) -> i32 {
    let f: u32 = pread(rq(&c), field(&LAYOUT.rq_cmd_flags));
    sink(f as u64)
}

/// What `enter` reads: cmd_flags and rq->q->disk->{major, first_minor}: 5 helper calls.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c04_pread_5(c: BtfTracePointContext) -> i32 {
    let r = rq(&c);
    let f: u32 = pread(r, field(&LAYOUT.rq_cmd_flags));
    let q: u64 = pread(r, field(&LAYOUT.rq_q));
    let d: u64 = pread(q, field(&LAYOUT.q_disk));
    let dev = mkdev(
        pread(d, field(&LAYOUT.disk_major)),
        pread(d, field(&LAYOUT.disk_first_minor)),
    );
    sink(f as u64 + dev as u64)
}

/// The same five values by direct loads.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c05_direct_5(c: BtfTracePointContext) -> i32 {
    let r = rq(&c);
    let f: u32 = direct(r, field(&LAYOUT.rq_cmd_flags));
    sink(f as u64 + direct_dev(r) as u64)
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c06_hash_insert(c: BtfTracePointContext) -> i32 {
    let r = rq(&c);
    let e = Inflight {
        enter_ns: r,
        dev: 1,
        class: 2,
        ..Default::default()
    };
    let _ = C_INFLIGHT.insert(&r, &e, BPF_ANY as u64);
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c07_hash_lookup(c: BtfTracePointContext) -> i32 {
    let r = rq(&c);
    if let Some(e) = C_INFLIGHT.get_ptr_mut(&r) {
        // SAFETY: `e` is the C_INFLIGHT element of `r` (a non-null lookup), valid while the program
        // runs (preallocated, RCU); one u64 field is stored.
        unsafe { (*e).dispatch_ns = r };
    }
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c08_hash_delete(c: BtfTracePointContext) -> i32 {
    let _ = C_INFLIGHT.remove(&rq(&c));
    0
}

#[inline(always)]
fn stats(dev: u32, class: u16) -> Option<*mut ClassStats> {
    entry(
        &C_STATS,
        &ClassKey {
            dev,
            class,
            _pad: 0,
        },
        &C_ZERO,
    )
}

/// The per-CPU (dev, class) lookup of `stats()` (a hit after the first request).
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c09_pcpu_lookup(_c: BtfTracePointContext) -> i32 {
    if let Some(s) = stats(7 << 20, 1) {
        // SAFETY: `s` is this CPU's value of the C_STATS entry (`stats`: a non-null lookup of a
        // per-CPU hash, so no other CPU writes it), valid while the program runs.
        unsafe { add(addr_of_mut!((*s).requests), 1) };
    }
    0
}

/// The same lookup plus what `on_complete` does with the entry: counters, three histograms.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c10_pcpu_hist3(c: BtfTracePointContext) -> i32 {
    let r = rq(&c);
    if let Some(s) = stats(7 << 20, 1) {
        // SAFETY: `s` is this CPU's value of the C_STATS entry (`stats`: a non-null lookup of a
        // per-CPU hash, so no other CPU writes it), valid while the program runs. Atomic adds,
        // as the observer's (store.rs `add`).
        unsafe {
            add(addr_of_mut!((*s).requests), 1);
            add(addr_of_mut!((*s).bytes), 4096);
        }
        // A scalar that varies per request, so the bucket index is computed at run time.
        let a = direct::<u32>(r, field(&LAYOUT.rq_cmd_flags)) as u64 * 977 + 1000;
        // SAFETY: as above; the stages are StageHists inside it.
        unsafe {
            observe(addr_of_mut!((*s).stages[0]), a);
            observe(addr_of_mut!((*s).stages[1]), a + 12345);
            observe(addr_of_mut!((*s).stages[2]), 2 * a + 12345);
        }
    }
    0
}

#[btf_tracepoint(function = "block_rq_issue")]
pub fn c11_counter(_c: BtfTracePointContext) -> i32 {
    if let Some(p) = C_COUNTERS.get_ptr_mut(0) {
        // SAFETY: `p` is this CPU's C_COUNTERS element 0 (a non-null lookup of a per-CPU array), a
        // u64 valid while the program runs.
        unsafe { add(p, 1) };
    }
    0
}

/// What replaced the INFLIGHT hash lookups: the request pointer made a number through a per-CPU
/// scratch value (observer maps::addr_number), its slot of a direct-mapped array found (claimed on
/// first use with BPF_XADD), and a field written.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c11b_slot_lookup(c: BtfTracePointContext) -> i32 {
    let Some(s) = C_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: `s` is this CPU's C_SCRATCH element (a non-null lookup), a u64 valid while the
    // program runs; the store and the volatile load touch only it.
    let r = unsafe {
        put(s, rq(&c));
        core::ptr::read_volatile(s)
    };
    if let Some(e) = claim(&C_SLOTS, r) {
        // SAFETY: `e` is the value of the C_SLOTS slot `claim` returned for `r` (this CPU's or
        // `r`'s own claim), valid for the map's life; one u64 field is stored.
        unsafe { put(core::ptr::addr_of_mut!((*e).dispatch_ns), r) };
    }
    0
}

/// The submitter capture at entry: pid, cgroup id and command name (three helper calls).
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c11c_submitter(_c: BtfTracePointContext) -> i32 {
    let Some(e) = C_SUBMITTER.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: `e` is this CPU's C_SUBMITTER element (a non-null lookup), valid while the program
    // runs: the `put`s write two of its fields, and bpf_get_current_comm writes exactly 16 bytes
    // into its `comm` ([u8; 16]); the other two helpers take no argument.
    unsafe {
        put(
            core::ptr::addr_of_mut!((*e).pid),
            (bpf_get_current_pid_tgid() >> 32) as u32,
        );
        put(
            core::ptr::addr_of_mut!((*e).cgroup),
            bpf_get_current_cgroup_id(),
        );
        aya_ebpf::helpers::generated::bpf_get_current_comm(
            core::ptr::addr_of_mut!((*e).comm) as *mut _,
            16,
        );
    }
    0
}

/// The whole of a completion in a design without per-request state (Rezolus's since its PR
/// #1148): one clock, the request's own timestamps (`start_time_ns`, and `io_start_time_ns`, the
/// u64 after it in `struct request` on every kernel of the matrix: include/linux/blk-mq.h), its
/// flags, size and disk by direct loads, the per-CPU (dev, class) lookup, two counters and the
/// three stage histograms (Q2D, D2C, Q2C). Attached to `block_rq_issue` like every block, where
/// `io_start_time_ns` is not yet this request's: the values differ, the work does not.
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c11d_stateless(c: BtfTracePointContext) -> i32 {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    let r = rq(&c);
    let start_off = field(&LAYOUT.rq_start_time_ns);
    let start: u64 = direct(r, start_off);
    let io_start: u64 = direct(r, start_off + 8);
    let flags: u32 = direct(r, field(&LAYOUT.rq_cmd_flags));
    let bytes: u32 = direct(r, field(&LAYOUT.rq_data_len));
    let dev = direct_dev(r);
    let class = (flags & field(&LAYOUT.op_mask)) as u16;
    if let Some(s) = stats(dev, class) {
        // SAFETY: `s` is this CPU's value of the C_STATS entry (`stats`: a non-null lookup of a
        // per-CPU hash, so no other CPU writes it), valid while the program runs; the stages are
        // StageHists inside it. Atomic adds, as the observer's (store.rs `add`).
        unsafe {
            add(addr_of_mut!((*s).requests), 1);
            add(addr_of_mut!((*s).bytes), bytes as u64);
            observe(addr_of_mut!((*s).stages[0]), io_start.wrapping_sub(start));
            observe(addr_of_mut!((*s).stages[1]), now.wrapping_sub(io_start));
            observe(addr_of_mut!((*s).stages[2]), now.wrapping_sub(start));
        }
    }
    0
}

/// A second empty program, attached last: the baseline is the cheaper of the two (the first
/// program in the chain also pays for warming the trampoline's cache lines).
#[btf_tracepoint(function = "block_rq_issue")]
pub fn c12_empty_last(_c: BtfTracePointContext) -> i32 {
    0
}
