//! Writing map values. Every store is a plain (volatile) store of one field: a struct-wide
//! write may be compiled to a call to an out-of-line `memset`/`memcpy`, which the verifier of
//! 6.1 refuses on map values (see observer/src/bpf/loader.rs, `programs_call_no_memory_builtins`).
//! Every count is one atomic add ([`add`]): programs nest on a CPU (a completion in an
//! interrupt runs on top of a program in the interrupted task or softirq: nested.rs), and a
//! load, add and store of a per-CPU count that such a program also counts into would lose the
//! nested program's increment if the interrupt came between the load and the store.
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    maps::{PerCpuArray, PerCpuHashMap},
};
use observer_common::{
    hist::{bucket_index, NBUCKETS},
    maps::{Inflight, StageHist, END_TRACED},
    stage::{self, Latency},
    Stage,
};

/// Writes a value with a plain store that the compiler may not merge with its neighbours.
///
/// # Safety
///
/// `p` must be valid for a write of a `T` and aligned: a map value from a non-null lookup, or a
/// field of one (`addr_of_mut!`), that no live reference points into. `T` is plain data:
/// nothing is dropped.
#[inline(always)]
// SAFETY: the body is one `write_volatile`, whose contract is the caller's (# Safety).
pub unsafe fn put<T>(p: *mut T, v: T) {
    core::ptr::write_volatile(p, v)
}

/// Fills an [`Inflight`] (a map value) field by field; submitter and dispatch fields zero.
/// `dev_slot` is the disk's slot in the per-device arrays (`NO_SLOT` if none). Times in ns,
/// `sector` in 512 B, `size` in bytes.
///
/// # Safety
///
/// `e` must point at a writable, aligned `Inflight` (a map value from a non-null lookup or a
/// claimed slot) that no live reference points into.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
// SAFETY: every write is a [`put`] into a field of `*e`, valid by the caller's contract;
// `comm` is `[u8; 16]` at an 8-aligned offset (asserted below), so its two u64 stores (`comm`,
// `comm.add(1)`) are aligned and stay inside it.
pub unsafe fn fill(
    e: *mut Inflight,
    enter_ns: u64,
    dispatch_ns: u64,
    dev: u32,
    dev_slot: u32,
    class: u16,
    sector: u64,
    size: u32,
) {
    put(addr_of_mut!((*e).enter_ns), enter_ns);
    put(addr_of_mut!((*e).dispatch_ns), dispatch_ns);
    put(addr_of_mut!((*e).bytes), 0);
    put(addr_of_mut!((*e).dev), dev);
    put(addr_of_mut!((*e).class), class);
    put(addr_of_mut!((*e).requeues), 0);
    put(addr_of_mut!((*e).requeued), 0);
    put(addr_of_mut!((*e).sector), sector);
    put(addr_of_mut!((*e).size), size);
    put(addr_of_mut!((*e).pid), 0);
    put(addr_of_mut!((*e).cgroup), 0);
    let comm = addr_of_mut!((*e).comm) as *mut u64;
    put(comm, 0);
    put(comm.add(1), 0);
    put(addr_of_mut!((*e).dev_slot), dev_slot);
    put(addr_of_mut!((*e).bios), 0);
    put(addr_of_mut!((*e).missed), 0);
    put(addr_of_mut!((*e).end_by), END_TRACED);
    put(addr_of_mut!((*e).owner_cgroup), 0);
}

// `fill` writes `Inflight::comm` as two u64.
const _: () = assert!(core::mem::offset_of!(Inflight, comm) % 8 == 0);

/// `*p += v` as one `BPF_XADD` (on x86-64 one `lock add`), its result unused: no
/// `BPF_FETCH`, so it verifies on every kernel (the fetching atomics came in 5.12). An
/// interrupt cannot split it, so a nested program's count into the same u64 is never lost.
/// The BPF target has no atomic read-modify-write in `core`, so it is written out.
///
/// # Safety
///
/// `p` must be valid for reads and writes of a u64 and 8-aligned: a field of a map value from
/// a non-null lookup (`addr_of_mut!`), valid while the program runs.
#[inline(always)]
pub unsafe fn add(p: *mut u64, v: u64) {
    // SAFETY: `p` is valid and aligned (the caller's contract); the instruction adds `v` to it
    // atomically and touches no other memory, and no register but its two inputs.
    core::arch::asm!(
        "lock *(u64 *)({p} + 0) += {v}",
        p = in(reg) p,
        v = in(reg) v,
    )
}

/// Adds `n` samples of `ns` to a histogram: two atomic adds ([`add`]).
///
/// # Safety
///
/// `h` must point at a `StageHist` inside a map value from a non-null lookup (valid and
/// 8-aligned while the program runs).
#[inline(always)]
pub unsafe fn observe_n(h: *mut StageHist, ns: u64, n: u64) {
    let mut i = bucket_index(ns);
    if i >= NBUCKETS {
        i = NBUCKETS - 1;
    }
    // SAFETY: `i < NBUCKETS`, so the bucket is a u64 inside `*h`, valid by the caller's contract;
    // so is `sum_ns`.
    add(addr_of_mut!((*h).buckets).cast::<u64>().add(i), n);
    add(addr_of_mut!((*h).sum_ns), ns * n);
}

/// Adds `ns` to a histogram ([`observe_n`] of one sample).
///
/// # Safety
///
/// As [`observe_n`].
#[inline(always)]
pub unsafe fn observe(h: *mut StageHist, ns: u64) {
    observe_n(h, ns, 1)
}

/// Adds a completed request's stage latencies `lat` (ns) to the stage histograms `stages`
/// (indexed by [`Stage`] as usize), each stage only if the request went through it
/// ([`stage::recorded`]: queue if it entered, device if it was dispatched or is the flush
/// request, total always).
///
/// # Safety
///
/// `stages` must point at the `[StageHist; Stage::COUNT]` of a map value from a non-null lookup
/// (valid and 8-aligned while the program runs).
#[inline(always)]
pub unsafe fn observe_stages(
    stages: *mut [StageHist; Stage::COUNT],
    enter_ns: u64,
    dispatch_ns: u64,
    lat: &Latency,
) {
    let st = |i: Stage| addr_of_mut!((*stages)[i as usize]);
    if stage::recorded(Stage::Queue, enter_ns, dispatch_ns) {
        observe(st(Stage::Queue), lat.queue);
    }
    if stage::recorded(Stage::Device, enter_ns, dispatch_ns) {
        observe(st(Stage::Device), lat.device);
    }
    if stage::recorded(Stage::Total, enter_ns, dispatch_ns) {
        observe(st(Stage::Total), lat.total);
    }
}

/// The entry of `key` in a per-CPU hash map, inserted from the all-zero template `zero[0]` on
/// first use (the value may be too big for the stack). `None` if the map is full.
#[inline(always)]
pub fn entry<K, V>(map: &PerCpuHashMap<K, V>, key: &K, zero: &PerCpuArray<V>) -> Option<*mut V> {
    if let Some(p) = map.get_ptr_mut(key) {
        return Some(p);
    }
    let zero = zero.get_ptr(0)?;
    // SAFETY: `zero` is this CPU's element 0 of the template array (a non-null lookup), valid while
    // the program runs; no program writes it (it stays all zero), so a shared reference for the
    // insert's copy is sound.
    let _ = map.insert(key, unsafe { &*zero }, BPF_NOEXIST as u64);
    map.get_ptr_mut(key)
}
