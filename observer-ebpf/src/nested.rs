//! Ends the kernel skipped a program for. 6.1 and 6.12 run a BPF program at most once
//! at a time per CPU (kernel/trace/bpf_trace.c `__bpf_trace_run`: a per-CPU `prog->active`
//! count; `tp_btf` and `raw_tp` alike): a bio that ends in an interrupt while `bio_complete` is
//! running on that CPU for another bio is not shown to it, and the kernel only counts the skip
//! (`bpf_prog_info` `recursion_misses`). 5.10 runs the program nested instead.
//!
//! So each completion tracepoint has a second program, attached after the first
//! (`bio_complete_nested`, `rq_complete_nested`), that runs the same handler when the first
//! was skipped. The two programs of one event run one after the other on one CPU; between
//! them only interrupts can run (tracepoint probes run with preemption off:
//! include/linux/tracepoint.h `__DO_TRACE`), and each interrupt's events are done before it
//! returns. So the first ([`ran`]) writes the event's key (from the request or bio pointer) into
//! this CPU's slot for that key (`PENDING`, direct-mapped: [`slot_index`]), and the second
//! ([`skipped`]) looks there:
//! - its key: the first ran for this event. The slot is cleared;
//! - not: the first was skipped (it was running lower on this CPU's stack, in any part of its
//!   run, prologue and epilogue included), and the second handles the event.
//!
//! A slot holds one key: an interrupt between the two programs of an event whose own key maps
//! to the same slot (1 in [`SLOTS`]) overwrites it, and that end is handled twice. A key is
//! left in its slot when the kernel skips its second program (an interrupt while the second
//! program runs); it is taken only if written less than [`MAX_WAIT_NS`] ago, and a request's
//! key includes the start of its life ([`rq_key`]), so it is not taken for the same struct's
//! next request, whose end may come microseconds later and be skipped too. An end is lost only when both programs
//! are skipped for it (an interrupt inside an interrupt inside them), or when such a key
//! matches it. No loop: 5.10's verifier walks every iteration of one, in every program.
//!
//! A run of the second for a skipped end shares per-CPU scratch values with the first's
//! interrupted run, as any two programs nesting on a CPU do (maps.rs, `OWNER_SCRATCH`).
use core::ptr::{addr_of_mut, write_volatile};

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};

use observer_common::layout::KernelLayout;
use observer_ebpf::read;

use crate::maps::addr_number;

/// Slots per pair and CPU (a power of two).
pub const SLOTS: u32 = 4096;

/// How long, in ns, a key waits for its second program at most: the interrupts that run
/// between the two programs of one event (a softirq defers to ksoftirqd after 2 ms:
/// kernel/softirq.c `MAX_SOFTIRQ_TIME`), with room for TCG.
pub const MAX_WAIT_NS: u64 = 100_000_000;

/// A slot: the key the first program wrote (0: empty), and when (`bpf_ktime_get_ns`, ns).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pending {
    key: u64,
    written_ns: u64,
}

/// The pairs, by block of `PENDING`.
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Pair {
    /// `bio_complete` and `bio_complete_nested` (probes/bio_queue.rs).
    BioComplete = 0,
    /// `rq_complete` and `rq_complete_nested` (probes/rq_complete.rs).
    RqComplete = 1,
}

#[map]
static PENDING: PerCpuArray<Pending> = PerCpuArray::with_max_entries(2 * SLOTS, 0);

/// An event's key: a number from the request's or bio's address ([`rq_key`], [`bio_key`]).
#[derive(Clone, Copy)]
pub struct Key(u64);

/// The key of a request's completion: its address and the start of its life
/// (`request::start_time_ns`, block/blk-mq.c blk_mq_rq_ctx_init; 0 where the kernel does not
/// stamp it), so that a key left behind by an earlier life of the same struct is not taken for
/// this one (request structs are reused at once, per tag).
#[inline(always)]
pub fn rq_key(rq: u64, l: &KernelLayout) -> Key {
    Key(addr_number(rq) ^ read::<u64>(rq, l.rq_start_time_ns))
}

/// The key of a bio's end: its address.
#[inline(always)]
pub fn bio_key(bio: u64) -> Key {
    Key(addr_number(bio))
}

/// The slot of `key` for `pair`: the key's bits above the cache line, multiplied (Fibonacci
/// hashing, as observer_common::maps::slot_index).
#[inline(always)]
fn slot_index(pair: Pair, key: Key) -> u32 {
    pair as u32 * SLOTS
        + ((key.0 >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as u32
}

/// The first program of `pair` runs for the event of `key`: called once per run, before its
/// handler (no pointer is held across it: 5.10's raw_tp `bio_complete_q` has no stack to
/// spare).
#[inline(always)]
pub fn ran(pair: Pair, key: Key) {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(p) = PENDING.get_ptr_mut(slot_index(pair, key)) {
        // SAFETY: `p` is this CPU's PENDING element (a non-null lookup of a per-CPU array),
        // valid while the program runs; programs on one CPU never run in parallel, only
        // nested, and both fields are u64 (a nesting program's store leaves a valid value).
        unsafe {
            write_volatile(addr_of_mut!((*p).key), key.0);
            write_volatile(addr_of_mut!((*p).written_ns), now);
        }
    }
}

/// The second program of `pair` runs for the event of `key`: whether the first was skipped
/// for it (see the module's rule); the second then runs the handler. Clears the slot when the
/// first ran.
#[inline(always)]
pub fn skipped(pair: Pair, key: Key) -> bool {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { bpf_ktime_get_ns() };
    let Some(p) = PENDING.get_ptr_mut(slot_index(pair, key)) else {
        return false;
    };
    // SAFETY: `p` is this CPU's PENDING element (a non-null lookup of a per-CPU array), valid while
    // the program runs; two u64 fields are read.
    let (k, at) = unsafe { ((*p).key, (*p).written_ns) };
    if k == key.0 && now.wrapping_sub(at) < MAX_WAIT_NS {
        // SAFETY: the same valid per-CPU element; one u64 field is stored.
        unsafe { write_volatile(addr_of_mut!((*p).key), 0) };
        return false;
    }
    true
}
