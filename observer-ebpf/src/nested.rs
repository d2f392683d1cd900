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
//! returns. So the events of a pair on a CPU nest like brackets, and each pair keeps a stack
//! per CPU (`STACK`: 8 keys, their push times and the depth, 136 bytes, hot in L1): the first
//! program ([`ran`]) pushes the event's key (from the request or bio pointer), and the second
//! ([`skipped`]) looks for it in the [`DEPTH`] positions under the top, from the top down:
//! - found: the first ran for this event. The depth drops to its position: it is popped with
//!   everything above it, and its position is zeroed;
//! - not: the first was skipped (it was running lower on this CPU's stack, in any part of its
//!   run, prologue and epilogue included), and the second handles the event. Nothing is
//!   popped.
//!
//! A first program whose second the kernel skipped (an interrupt landed in a second program)
//! leaves its key: above the key that second program looks for (popped with it, not zeroed),
//! or, once that program has lowered the depth, under the top, where it raises the depth for
//! good until positions wrap over it; the [`DEPTH`] positions the search reads wrap to those
//! above the top too. Such a key matches a later end only if that end's first program is
//! skipped and its key is the same: a request's key includes the start of its life
//! ([`rq_key`]), so only a later end of the same life can (a partial completion, a flush
//! sequence's second); a key without one (a bio's, or a request's where the kernel did not
//! stamp it) is taken only if pushed less than [`MAX_WAIT_NS`] ago, which costs the second
//! program a clock read (the first pushes the clock it reads anyway: the request pair's
//! handler uses it). A bio's address is reused at once, so a skipped end of a new bio can be
//! taken for a predecessor's left key within that time and lost (the reaper counts it). Before
//! popped keys were zeroed, a clean-clone CI run's dm-linear test (tests/lost.rs) lost 3 of
//! 84 skipped ends on 6.1 that way.
//!
//! On 5.10, where the programs nest, a first program interrupted inside its push is safe: it
//! raises the depth before it writes its key, so a nested push goes above it (or, before the
//! raise, is popped before the interrupted push writes the same position).
//!
//! (Until 2026-12-05 a direct-mapped table of 4,096 slots per CPU, indexed by the key, with a
//! ring of the last 8 request keys, did this: two cache misses per completion, 50–70 ns of
//! `rq_complete`'s 270 in the bench.)
//!
//! An end is lost when both programs are skipped for it (an interrupt inside an interrupt
//! inside them), or when an old key matches it, as above. One is handled twice when 8 keys are
//! left above its own while it waits between its two programs, each by an interrupt landing in
//! a second program after it lowered the depth, or when its key is 0 (`addr_number` failed): 0
//! is never searched for. No loop: 5.10's verifier walks every iteration of one, in every
//! program (which leaves the raw_tp second programs close to 6.1's limit of 1M instructions:
//! zeroing every copy of a popped key, not only its position, took `rq_complete_nested_raw`
//! past it).
//!
//! A run of the second for a skipped end shares per-CPU scratch values with the first's
//! interrupted run, as any two programs nesting on a CPU do (maps.rs, `OWNER_SCRATCH`).
use core::ptr::{addr_of_mut, read_volatile, write_volatile};

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::map, maps::PerCpuArray};

use observer_common::layout::KernelLayout;
use observer_ebpf::read;

use crate::maps::addr_number;

/// Keys a pair's stack holds per CPU (a power of two): positions are the depth modulo it.
pub const DEPTH: u64 = 8;

/// How long, in ns, a key waits for its second program at most: the interrupts that run
/// between the two programs of one event (a softirq defers to ksoftirqd after 2 ms:
/// kernel/softirq.c `MAX_SOFTIRQ_TIME`), with room for TCG.
pub const MAX_WAIT_NS: u64 = 100_000_000;

/// A pair's stack on one CPU: how many keys were pushed and not popped (a count; the top key
/// is at `(depth - 1) % DEPTH`), the keys, and when each was pushed (`bpf_ktime_get_ns`, ns).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Stack {
    keys: [u64; DEPTH as usize],
    pushed_ns: [u64; DEPTH as usize],
    depth: u64,
}

/// The pairs, by element of `STACK`.
#[derive(Clone, Copy)]
#[repr(u32)]
pub enum Pair {
    /// `bio_complete` and `bio_complete_nested` (probes/bio_queue.rs).
    BioComplete = 0,
    /// `rq_complete` and `rq_complete_nested` (probes/rq_complete.rs).
    RqComplete = 1,
}

#[map]
static STACK: PerCpuArray<Stack> = PerCpuArray::with_max_entries(2, 0);

/// An event's key: a number from the request's or bio's address ([`rq_key`], [`bio_key`]),
/// and whether it also holds the start of the request's life (then no age check is needed:
/// a key left behind by an earlier life differs).
#[derive(Clone, Copy)]
pub struct Key {
    value: u64,
    life: bool,
}

/// The key of a request's completion: its address and the start of its life
/// (`request::start_time_ns`, block/blk-mq.c blk_mq_rq_ctx_init; 0 where the kernel does not
/// stamp it), so that a key left behind by an earlier life of the same struct is not taken for
/// this one (request structs are reused at once, per tag).
#[inline(always)]
pub fn rq_key(rq: u64, l: &KernelLayout) -> Key {
    let start: u64 = read(rq, l.rq_start_time_ns);
    Key {
        value: addr_number(rq) ^ start,
        life: start != 0,
    }
}

/// The key of a bio's end: its address (no start of life: the age check applies).
#[inline(always)]
pub fn bio_key(bio: u64) -> Key {
    Key {
        value: addr_number(bio),
        life: false,
    }
}

/// The first program of `pair` runs for the event of `key`, at `now` (its handler's
/// `bpf_ktime_get_ns`, ns): called once per run, before its handler (no pointer is held
/// across it: 5.10's raw_tp `bio_complete_q` has no stack to spare). Pushes the key.
#[inline(always)]
pub fn ran(pair: Pair, key: Key, now: u64) {
    let Some(s) = STACK.get_ptr_mut(pair as u32) else {
        return;
    };
    // SAFETY: `s` is this CPU's STACK element (a non-null lookup of a per-CPU array), valid
    // while the program runs; programs on one CPU never run in parallel, only nested, and
    // every field is a u64 (a nesting program's store leaves a valid value); the position is
    // masked into the arrays. The depth is raised before the key is written (module doc).
    unsafe {
        let d = read_volatile(addr_of_mut!((*s).depth));
        write_volatile(addr_of_mut!((*s).depth), d.wrapping_add(1));
        let i = (d % DEPTH) as usize;
        write_volatile(addr_of_mut!((*s).keys[i]), key.value);
        write_volatile(addr_of_mut!((*s).pushed_ns[i]), now);
    }
}

/// The second program of `pair` runs for the event of `key`: whether the first was skipped
/// for it (see the module's rule); the second then runs the handler. When the first ran, its
/// key is popped with every key above it.
#[inline(always)]
pub fn skipped(pair: Pair, key: Key) -> bool {
    let Some(s) = STACK.get_ptr_mut(pair as u32) else {
        return false;
    };
    // SAFETY: `s` is this CPU's STACK element (as in `ran`); u64 fields are read, the depth
    // stored; positions masked into the arrays.
    unsafe {
        let d = read_volatile(addr_of_mut!((*s).depth));
        let Some(below) = find(addr_of_mut!((*s).keys[0]), d, key.value) else {
            return true;
        };
        if !key.life {
            // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
            let now = bpf_ktime_get_ns();
            let pushed = *addr_of_mut!((*s).pushed_ns[(below % DEPTH) as usize]);
            if now.wrapping_sub(pushed) >= MAX_WAIT_NS {
                return true;
            }
        }
        write_volatile(addr_of_mut!((*s).depth), below);
        // The popped key goes, so that a later end with the same key (a new bio at the same
        // address) cannot be taken for this one's (module doc). One store at a masked index:
        // zeroing every copy, with or without branches, took `rq_complete_nested_raw` past
        // 6.1's verifier limit.
        write_volatile(addr_of_mut!((*s).keys[(below % DEPTH) as usize]), 0);
    }
    false
}

// `find` compares DEPTH keys, written out.
const _: () = assert!(DEPTH == 8);

/// The depth below the topmost of the [`DEPTH`] keys under depth `d` that equals `key` (its
/// position is that depth modulo [`DEPTH`]), the stack's keys starting at `keys`; `None` if
/// none does (0 is never searched for: it is no key). Compared one by one without a loop.
///
/// # Safety
/// `keys` points at a valid stack of [`DEPTH`] u64 keys (this CPU's `STACK` element).
#[inline(always)]
unsafe fn find(keys: *mut u64, d: u64, key: u64) -> Option<u64> {
    if key == 0 {
        return None;
    }
    macro_rules! at {
        ($($i:literal)*) => {$(
            let below = d.wrapping_sub($i);
            // SAFETY: the position is masked below DEPTH: inside the caller's stack.
            if unsafe { *keys.add((below % DEPTH) as usize) } == key {
                return Some(below);
            }
        )*};
    }
    at!(1 2 3 4 5 6 7 8);
    None
}
