//! Writing map values. Every store is a plain (volatile) store of one field: a struct-wide
//! write may be compiled to a call to an out-of-line `memset`/`memcpy`, which the verifier of
//! 6.1 refuses on map values (see observer/src/bpf/loader.rs, `programs_call_no_memory_builtins`).
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    maps::{PerCpuArray, PerCpuHashMap},
};
use observer_common::{
    hist::{bucket_index, NBUCKETS},
    maps::{Inflight, StageHist, END_TRACED},
};

/// Writes a value with a plain store that the compiler may not merge with its neighbours.
#[inline(always)]
pub unsafe fn put<T>(p: *mut T, v: T) {
    core::ptr::write_volatile(p, v)
}

/// Fills an [`Inflight`] (a map value) field by field; submitter and dispatch fields zero. `slot` is the
/// disk's slot in the per-device arrays (`NO_SLOT` if none).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn fill(
    e: *mut Inflight,
    enter_ns: u64,
    dispatch_ns: u64,
    dev: u32,
    slot: u32,
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
    put(addr_of_mut!((*e).slot), slot);
    put(addr_of_mut!((*e).bios), 0);
    put(addr_of_mut!((*e).missed), 0);
    put(addr_of_mut!((*e).end_by), END_TRACED);
    put(addr_of_mut!((*e).owner_cgroup), 0);
}

/// Adds `ns` to a histogram.
#[inline(always)]
pub fn observe(h: &mut StageHist, ns: u64) {
    let mut i = bucket_index(ns);
    if i >= NBUCKETS {
        i = NBUCKETS - 1;
    }
    h.buckets[i] += 1;
    h.sum_ns += ns;
}

/// Adds `n` samples of `ns` to a histogram.
#[inline(always)]
pub fn observe_n(h: &mut StageHist, ns: u64, n: u64) {
    let mut i = bucket_index(ns);
    if i >= NBUCKETS {
        i = NBUCKETS - 1;
    }
    h.buckets[i] += n;
    h.sum_ns += ns * n;
}

/// The entry of `key` in a per-CPU hash map, inserted from the all-zero template `zero[0]` on
/// first use (the value may be too big for the stack). `None` if the map is full.
#[inline(always)]
pub fn entry<K, V>(map: &PerCpuHashMap<K, V>, key: &K, zero: &PerCpuArray<V>) -> Option<*mut V> {
    if let Some(p) = map.get_ptr_mut(key) {
        return Some(p);
    }
    let zero = zero.get_ptr(0)?;
    let _ = map.insert(key, unsafe { &*zero }, BPF_NOEXIST as u64);
    map.get_ptr_mut(key)
}
