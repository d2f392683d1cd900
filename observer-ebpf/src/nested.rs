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
//! A key is left in its slot when the kernel skips its second program (an interrupt while the
//! second program runs). A request's key includes the start of its life ([`rq_key`]), so it is
//! not taken for the same struct's next request, whose end may come microseconds later and be
//! skipped too; a key without one (a bio's, or a request's where the kernel did not stamp it)
//! is taken only if written less than [`MAX_WAIT_NS`] ago, which costs the second program a
//! clock read (the first writes the clock it reads anyway: the request pair's handler uses
//! it).
//!
//! A slot holds one key: an interrupt between the two programs of an event whose own key maps
//! to the same slot (1 in [`SLOTS`]) overwrites it. So for a key with the start of its life,
//! the first program also writes it into this CPU's ring of the pair's last [`RING`] such keys
//! (`RECENT`), the second clears it there when it finds its slot, and a second program that
//! does not find its key in its slot looks in the ring before it takes the end: that end is
//! handled twice only if the slot was overwritten and [`RING`] more first programs ran between
//! its two programs. (Before the ring, a clean-clone CI run's 6.1 guest counted one write more
//! than diskstats, 820 vs 819, under `tests/lost.rs`' nesting: on kernels without
//! `block_io_start` the end handled twice enters the request anew.) A key without a life (a
//! bio's) is kept out of the ring: a copy left there by a skipped second program could match
//! the next bio at that address, reused at once, whose first program is skipped.
//!
//! An end is lost only when both programs are skipped for it (an interrupt inside an interrupt
//! inside them), or when a key left behind matches it: in its slot, as above, or in the ring,
//! where a copy of a request's key outlives its slot only by at most [`RING`] first-program
//! runs and matches only a later end of the same request life (a partial completion, a flush
//! sequence's second) whose first program is skipped. No loop: 5.10's verifier walks every
//! iteration of one, in every program.
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

/// Keys per pair and CPU in `RECENT` (a power of two).
pub const RING: u64 = 8;

/// A slot: the key the first program wrote (0: empty), when (`bpf_ktime_get_ns`, ns), and
/// the ring position it wrote the key at too (a count: position = `at % RING`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Pending {
    key: u64,
    written_ns: u64,
    at: u64,
}

/// A pair's ring of the last keys with a life its first program wrote, and how many it wrote.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Recent {
    keys: [u64; RING as usize],
    written: u64,
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

#[map]
static RECENT: PerCpuArray<Recent> = PerCpuArray::with_max_entries(2, 0);

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

/// The slot of `key` for `pair`: the key's bits above the cache line, multiplied (Fibonacci
/// hashing, as observer_common::maps::slot_index).
#[inline(always)]
fn slot_index(pair: Pair, key: Key) -> u32 {
    pair as u32 * SLOTS
        + ((key.value >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros()))
            as u32
}

/// The first program of `pair` runs for the event of `key`, at `now` (its handler's
/// `bpf_ktime_get_ns`, ns): called once per run, before its handler (no pointer is held
/// across it: 5.10's raw_tp `bio_complete_q` has no stack to spare).
#[inline(always)]
pub fn ran(pair: Pair, key: Key, now: u64) {
    let Some(p) = PENDING.get_ptr_mut(slot_index(pair, key)) else {
        return;
    };
    // SAFETY: `p` is this CPU's PENDING element (a non-null lookup of a per-CPU array), valid
    // while the program runs; programs on one CPU never run in parallel, only nested, and
    // every field is a u64 (a nesting program's store leaves a valid value).
    let (left, left_at) = unsafe {
        let left = ((*p).key, (*p).at);
        write_volatile(addr_of_mut!((*p).key), key.value);
        write_volatile(addr_of_mut!((*p).written_ns), now);
        left
    };
    if !key.life {
        return;
    }
    let Some(r) = RECENT.get_ptr_mut(pair as u32) else {
        return;
    };
    // SAFETY: `r` is this CPU's RECENT element (a non-null lookup of a per-CPU array), `p` as
    // above; u64 fields, the ring index masked into the array.
    unsafe {
        if left == key.value {
            // The same key, left by a skipped second program: its copy in the ring goes too.
            let copy = addr_of_mut!((*r).keys[(left_at % RING) as usize]);
            if *copy == key.value {
                write_volatile(copy, 0);
            }
        }
        let at = (*r).written;
        write_volatile(addr_of_mut!((*r).written), at.wrapping_add(1));
        write_volatile(addr_of_mut!((*r).keys[(at % RING) as usize]), key.value);
        write_volatile(addr_of_mut!((*p).at), at);
    }
}

/// The second program of `pair` runs for the event of `key`: whether the first was skipped
/// for it (see the module's rule); the second then runs the handler. Clears the slot when the
/// first ran.
#[inline(always)]
pub fn skipped(pair: Pair, key: Key) -> bool {
    let Some(p) = PENDING.get_ptr_mut(slot_index(pair, key)) else {
        return false;
    };
    // SAFETY: `p` is this CPU's PENDING element (a non-null lookup of a per-CPU array), valid while
    // the program runs; three u64 fields are read.
    let (k, written_ns, at) = unsafe { ((*p).key, (*p).written_ns, (*p).at) };
    if !key.life {
        // No ring: its slot alone, with the age check (module doc).
        // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
        if k == key.value && unsafe { bpf_ktime_get_ns() }.wrapping_sub(written_ns) < MAX_WAIT_NS {
            // SAFETY: the same valid per-CPU element; one u64 field is stored.
            unsafe { write_volatile(addr_of_mut!((*p).key), 0) };
            return false;
        }
        return true;
    }
    let Some(r) = RECENT.get_ptr_mut(pair as u32) else {
        return false;
    };
    if k == key.value {
        // SAFETY: `p` and `r` are this CPU's PENDING and RECENT elements (as above), valid
        // while the program runs; u64 fields are read and stored, the ring index masked into
        // the array.
        unsafe {
            write_volatile(addr_of_mut!((*p).key), 0);
            let ring = addr_of_mut!((*r).keys[(at % RING) as usize]);
            if *ring == key.value {
                write_volatile(ring, 0);
            }
        }
        return false;
    }
    // Not in its slot: taken unless another key overwrote the slot while this event waited
    // between its two programs; then the key is still in the ring (0 is an empty entry, never
    // a key searched for). No loop (module doc).
    // SAFETY: `r` is this CPU's RECENT element (as above); up to RING u64 fields are read, one
    // stored.
    key.value == 0 || unsafe { !take_recent(addr_of_mut!((*r).keys[0]), key.value) }
}

// take_recent compares RING keys, written out.
const _: () = assert!(RING == 8);

/// Whether the ring holds `key` (then it is taken out of it), the ring's `RING` keys
/// starting at `keys`, compared one by one without a loop.
///
/// # Safety
/// `keys` points at a valid ring of [`RING`] u64 keys (this CPU's `RECENT` element).
#[inline(always)]
unsafe fn take_recent(keys: *mut u64, key: u64) -> bool {
    macro_rules! at {
        ($($i:literal)*) => {$(
            // SAFETY: $i < RING: inside the caller's ring.
            let k = unsafe { keys.add($i) };
            // SAFETY: as above.
            if unsafe { *k } == key {
                // SAFETY: as above.
                unsafe { write_volatile(k, 0) };
                return true;
            }
        )*};
    }
    at!(0 1 2 3 4 5 6 7);
    false
}
