//! `observer trace`'s programs: one short program per block tracepoint blktrace records
//! (Q, M, F, G, I, D, R, C, and for stacked disks A, X and the C of a bio-based disk), each
//! sending one fixed-size [`TraceRecord`](observer_common::blktrace::TraceRecord) of the traced
//! disk to userspace through the `TRACE_EVENTS` ring buffer; userspace writes blktrace's
//! per-CPU files from them (observer/src/trace.rs). A separate object, loaded only by `observer trace`: the daemon's
//! programs are neither changed nor slowed by it, and both run side by side.
//!
//! Each handler exists as a `tp_btf` and a `raw_tp` program, and for both argument layouts
//! (`programs!`, as the daemon's: the `_q` variants take the queue first, Linux < 5.11). The
//! disk is the read-only global `TRACE_DEV` (`MKDEV`, set by the loader); struct offsets come
//! from `LAYOUT` (kernel BTF), as in the daemon's programs.
#![no_std]
#![no_main]

use core::ptr::addr_of_mut;

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        generated::bpf_get_current_comm,
    },
    macros::map,
    maps::{PerCpuArray, RingBuf},
    EbpfContext,
};
use observer_common::blktrace::{Event, TraceRecord, BIO_COMPLETE, RQ_MERGE, TRACE_EVENTS_BYTES};
use observer_ebpf::{
    arg,
    kernel::{bio_dev, rq_dev},
    layout, programs, read,
    store::add,
};

observer_ebpf::layout_global!();

/// The traced disk, `mkdev(major, minor)`: set by the loader before load.
#[no_mangle]
static TRACE_DEV: u32 = 0;

/// The records, in the order each CPU made them. Resized by the loader.
#[map]
static TRACE_EVENTS: RingBuf = RingBuf::with_byte_size(TRACE_EVENTS_BYTES, 0);
/// Records the ring buffer had no room for (index 0, per CPU).
#[map]
static TRACE_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);
/// Completions `t_complete_nest` and `t_bio_end_nest` recorded because the kernel skipped
/// `t_complete` or `t_bio_end` for them (index 0, per CPU).
#[map]
static TRACE_NESTED: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Slots per CPU of [`COMPLETE_KEYS`] (a power of two).
const KEY_SLOTS: u32 = 1024;
/// The key of each completion `t_complete` or `t_bio_end` ran for, until the second program
/// of its pair takes it (0: empty), per CPU, direct-mapped by [`key_of`].
#[map]
static COMPLETE_KEYS: PerCpuArray<u64> = PerCpuArray::with_max_entries(KEY_SLOTS, 0);

/// Whether `dev` is the traced disk.
#[inline(always)]
fn traced(dev: u32) -> bool {
    // SAFETY: a u32 static that nothing writes at run time (`.rodata`, patched by the loader
    // before load); a volatile load, so the verifier sees the patched constant.
    dev == unsafe { core::ptr::read_volatile(core::ptr::addr_of!(TRACE_DEV)) }
}

/// Sends one record (the current task's pid and comm, this CPU, now), or counts it dropped.
/// Written field by field into the reserved ring-buffer space: no record on the stack, no
/// `memset` of one (observer/src/bpf/loader.rs `programs_call_no_memory_builtins`).
#[inline(always)]
fn send(event: u32, sector: u64, bytes: u32, opf: u32, error: u32, pdu: (u64, u32)) {
    let Some(mut entry) = TRACE_EVENTS.reserve::<TraceRecord>(0) else {
        if let Some(n) = TRACE_DROPS.get_ptr_mut(0) {
            // SAFETY: `n` is this CPU's value of TRACE_DROPS[0], valid while the program runs.
            unsafe { add(n, 1) };
        }
        return;
    };
    let r = entry.as_mut_ptr();
    // SAFETY: `r` points at the reserved, exclusively ours space of one `TraceRecord` (aligned
    // by the ring buffer to 8 bytes); every field is written before the entry is submitted,
    // `comm` by the helper, which writes exactly its 16 bytes (NUL-padded, or zeroes).
    unsafe {
        addr_of_mut!((*r).time_ns).write(bpf_ktime_get_ns());
        addr_of_mut!((*r).sector).write(sector);
        addr_of_mut!((*r).opf).write(opf);
        addr_of_mut!((*r).bytes).write(bytes);
        addr_of_mut!((*r).pid).write(bpf_get_current_pid_tgid() as u32);
        addr_of_mut!((*r).cpu).write(bpf_get_smp_processor_id());
        addr_of_mut!((*r).error).write(error);
        addr_of_mut!((*r).event).write(event);
        addr_of_mut!((*r).pdu_sector).write(pdu.0);
        addr_of_mut!((*r).pdu_dev).write(pdu.1);
        // On failure the helper zeroes the buffer itself (kernel/bpf/helpers.c
        // bpf_get_current_comm: `err_clear`).
        bpf_get_current_comm(addr_of_mut!((*r).comm) as *mut core::ffi::c_void, 16);
    }
    entry.submit(0);
}

/// A bio event (Q, M, F, G): the bio's first sector, size and flags (blktrace.c
/// `blk_add_trace_bio`).
#[inline(always)]
fn bio_event(c: &impl EbpfContext, i: usize, event: Event) {
    let bio = arg(c, i);
    let l = layout();
    if bio == 0 || !traced(bio_dev(bio, l)) {
        return;
    }
    send(
        event as u32,
        read(bio, l.bio_sector),
        read(bio, l.bio_size),
        read(bio, l.bio_opf),
        0,
        (0, 0),
    );
}

/// A request event (I, D, R, M of `block_rq_merge`): the request's first sector, bytes and
/// flags (blktrace.c `blk_add_trace_rq`).
#[inline(always)]
fn rq_event(c: &impl EbpfContext, i: usize, event: u32) {
    let rq = arg(c, i);
    let l = layout();
    if !traced(rq_dev(rq, l)) {
        return;
    }
    send(
        event,
        read(rq, l.rq_sector),
        read(rq, l.rq_data_len),
        read(rq, l.rq_cmd_flags),
        0,
        (0, 0),
    );
}

#[inline(always)]
fn on_queue(c: &impl EbpfContext, i: usize) {
    bio_event(c, i, Event::Queue);
}
#[inline(always)]
fn on_backmerge(c: &impl EbpfContext, i: usize) {
    bio_event(c, i, Event::BackMerge);
}
#[inline(always)]
fn on_frontmerge(c: &impl EbpfContext, i: usize) {
    bio_event(c, i, Event::FrontMerge);
}
#[inline(always)]
fn on_getrq(c: &impl EbpfContext, i: usize) {
    bio_event(c, i, Event::GetRq);
}
#[inline(always)]
fn on_insert(c: &impl EbpfContext, i: usize) {
    rq_event(c, i, Event::Insert as u32);
}
#[inline(always)]
fn on_issue(c: &impl EbpfContext, i: usize) {
    rq_event(c, i, Event::Issue as u32);
}
#[inline(always)]
fn on_requeue(c: &impl EbpfContext, i: usize) {
    rq_event(c, i, Event::Requeue as u32);
}
#[inline(always)]
fn on_rq_merge(c: &impl EbpfContext, i: usize) {
    rq_event(c, i, Event::BackMerge as u32 | RQ_MERGE);
}

/// `block_rq_complete(rq, error, nr_bytes)`: the bytes completed now, and the error.
///
/// The kernel runs a program at most once at a time per CPU (kernel/trace/bpf_trace.c
/// `__bpf_trace_run`: a per-CPU `prog->active` count, since 5.12; 5.10 runs it nested): a
/// completion in an interrupt that lands inside `t_complete` on that CPU, in any part of its
/// run, is not shown to it, and only counted (`bpf_prog_info` `recursion_misses`). So a second
/// program, `t_complete_nest`, attached after it, records every completion `t_complete` left
/// out (as the daemon's pair did until 2026-12-05, before observer-ebpf/src/nested.rs became
/// a stack, with a key made of the request's numbers instead of its address): `t_complete` puts the completion's key in this CPU's slot
/// for it ([`ran`]); `t_complete_nest` finds it there (then `t_complete` ran: the slot is
/// emptied) or not (`t_complete` was skipped: it records the completion) ([`skipped`]).
/// Between the two programs of one event only interrupts run, and each interrupt's events are
/// done before it returns. `block_bio_complete` has the same pair (`t_bio_end`,
/// `t_bio_end_nest`): a stacked disk's bios end in its legs' completions, often interrupts.
#[inline(always)]
fn on_complete(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    let l = layout();
    if !traced(rq_dev(rq, l)) {
        return;
    }
    ran(rq_complete_key(c, i));
    complete(c, i);
}

/// `t_complete_nest`: records the completion if `t_complete` was skipped for it (see
/// [`on_complete`]).
#[inline(always)]
fn on_complete_nest(c: &impl EbpfContext, i: usize) {
    if traced(rq_dev(arg(c, i), layout())) && skipped(rq_complete_key(c, i)) {
        complete(c, i);
    }
}

/// `block_bio_complete(q, bio)`: a bio that passed `block_bio_queue` ended without a request
/// (block/bio.c `bio_endio`, `BIO_TRACE_COMPLETION`; a request's bios have it cleared in
/// `blk_update_request`, "completion has already been traced"): a bio-based disk's (md, dm,
/// NVMe multipath head) I/O, written as C like blktrace's `blk_add_trace_bio_complete`. The
/// bio is argument 1 on every kernel.
#[inline(always)]
fn on_bio_end(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    if bio == 0 || !traced(bio_dev(bio, layout())) {
        return;
    }
    ran(bio_end_key(bio));
    bio_end(bio);
}

/// `t_bio_end_nest`: records the bio's end if `t_bio_end` was skipped for it.
#[inline(always)]
fn on_bio_end_nest(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    if bio != 0 && traced(bio_dev(bio, layout())) && skipped(bio_end_key(bio)) {
        bio_end(bio);
    }
}

/// Sends a C record for a bio's end: its sector, size and flags, and its `bi_status` (a
/// `blk_status_t`, written as `-EIO` in userspace when not 0).
#[inline(always)]
fn bio_end(bio: u64) {
    let l = layout();
    send(
        Event::Complete as u32 | BIO_COMPLETE,
        read(bio, l.bio_sector),
        read(bio, l.bio_size),
        read(bio, l.bio_opf),
        u32::from(read::<u8>(bio, l.bio_status)),
        (0, 0),
    );
}

/// `block_bio_remap(bio, dev, from)` (5.10: the queue first): a stacked disk sent the bio on
/// to the traced disk, A. Recorded on the disk the bio goes to (`bio`'s, as blktrace's
/// `blk_add_trace_bio_remap`), with where it came from (`dev`, `from`) for the pdu.
#[inline(always)]
fn on_remap(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    if bio == 0 || !traced(bio_dev(bio, l)) {
        return;
    }
    send(
        Event::Remap as u32,
        read(bio, l.bio_sector),
        read(bio, l.bio_size),
        read(bio, l.bio_opf),
        0,
        (arg(c, i + 2), arg(c, i + 1) as u32),
    );
}

/// `block_split(bio, new_sector)` (5.10: the queue first): the bio was split at `new_sector`,
/// X (blktrace's `blk_add_trace_split`: the pdu is the new sector).
#[inline(always)]
fn on_split(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    if bio == 0 || !traced(bio_dev(bio, l)) {
        return;
    }
    send(
        Event::Split as u32,
        read(bio, l.bio_sector),
        read(bio, l.bio_size),
        read(bio, l.bio_opf),
        0,
        (arg(c, i + 1), 0),
    );
}

/// An event's key for the second program of its pair (never 0), and its slot.
#[derive(Clone, Copy)]
struct Key {
    slot: u32,
    key: u64,
}

/// A key from numbers read out of the struct (a tracepoint's pointer is no number the verifier
/// lets a program hash).
#[inline(always)]
fn key_of(a: u64, b: u64, c: u64) -> Key {
    let key = (a.rotate_left(24) ^ b ^ (c << 40)) | 1;
    Key {
        slot: (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - KEY_SLOTS.trailing_zeros())) as u32,
        key,
    }
}

/// A request completion's key: its first sector, the start of its life
/// (`request::start_time_ns`, 0 where not stamped), and the bytes completed now (a partial
/// completion advances the sector: block/blk-mq.c `blk_update_request`).
#[inline(always)]
fn rq_complete_key(c: &impl EbpfContext, i: usize) -> Key {
    let rq = arg(c, i);
    let l = layout();
    key_of(
        read(rq, l.rq_sector),
        read(rq, l.rq_start_time_ns),
        arg(c, i + 2),
    )
}

/// A bio end's key: its sector, size and flags.
#[inline(always)]
fn bio_end_key(bio: u64) -> Key {
    let l = layout();
    key_of(
        read(bio, l.bio_sector),
        u64::from(read::<u32>(bio, l.bio_size)),
        u64::from(read::<u32>(bio, l.bio_opf)),
    )
}

/// The first program of a pair ran for the event of `k`.
#[inline(always)]
fn ran(k: Key) {
    if let Some(p) = COMPLETE_KEYS.get_ptr_mut(k.slot) {
        // SAFETY: this CPU's COMPLETE_KEYS element (a non-null lookup), a u64 valid while the
        // program runs; a nesting program's store leaves a valid value.
        unsafe { core::ptr::write_volatile(p, k.key) };
    }
}

/// Whether the first program of a pair was skipped for the event of `k` (then it is counted in
/// `TRACE_NESTED`, and the caller records it); empties the slot if it ran.
#[inline(always)]
fn skipped(k: Key) -> bool {
    let Some(p) = COMPLETE_KEYS.get_ptr_mut(k.slot) else {
        return false;
    };
    // SAFETY: this CPU's COMPLETE_KEYS element (a non-null lookup), a u64 valid while the
    // program runs.
    unsafe {
        if core::ptr::read_volatile(p) == k.key {
            core::ptr::write_volatile(p, 0);
            return false;
        }
    }
    if let Some(n) = TRACE_NESTED.get_ptr_mut(0) {
        // SAFETY: `n` is this CPU's value of TRACE_NESTED[0], valid while the program runs.
        unsafe { add(n, 1) };
    }
    true
}

/// Sends a C record for `block_rq_complete`'s arguments.
#[inline(always)]
fn complete(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    let l = layout();
    send(
        Event::Complete as u32,
        read(rq, l.rq_sector),
        arg(c, i + 2) as u32,
        read(rq, l.rq_cmd_flags),
        arg(c, i + 1) as u32,
        (0, 0),
    );
}

// Names within the kernel's 15 characters before the `_q`/`_raw` suffixes.
programs!(on_queue => "block_bio_queue", t_queue, t_queue_raw, 0);
programs!(on_queue => "block_bio_queue", t_queue_q, t_queue_q_raw, 1);
programs!(on_backmerge => "block_bio_backmerge", t_back, t_back_raw, 0);
programs!(on_backmerge => "block_bio_backmerge", t_back_q, t_back_q_raw, 2);
programs!(on_frontmerge => "block_bio_frontmerge", t_front, t_front_raw, 0);
programs!(on_frontmerge => "block_bio_frontmerge", t_front_q, t_front_q_raw, 2);
programs!(on_getrq => "block_getrq", t_getrq, t_getrq_raw, 0);
programs!(on_getrq => "block_getrq", t_getrq_q, t_getrq_q_raw, 1);
programs!(on_insert => "block_rq_insert", t_insert, t_insert_raw, 0);
programs!(on_insert => "block_rq_insert", t_insert_q, t_insert_q_raw, 1);
programs!(on_issue => "block_rq_issue", t_issue, t_issue_raw, 0);
programs!(on_issue => "block_rq_issue", t_issue_q, t_issue_q_raw, 1);
programs!(on_requeue => "block_rq_requeue", t_requeue, t_requeue_raw, 0);
programs!(on_requeue => "block_rq_requeue", t_requeue_q, t_requeue_q_raw, 1);
programs!(on_rq_merge => "block_rq_merge", t_rq_merge, t_rq_merge_raw, 0);
programs!(on_rq_merge => "block_rq_merge", t_rq_merge_q, t_rq_merge_q_raw, 1);
programs!(on_complete => "block_rq_complete", t_complete, t_complete_raw, 0);
programs!(on_complete => "block_rq_complete", t_complete_q, t_complete_q_raw, 1);
programs!(on_complete_nest => "block_rq_complete", t_complete_nest, t_complete_nest_raw, 0);
programs!(on_complete_nest => "block_rq_complete", t_complete_nest_q, t_complete_nest_q_raw, 1);
programs!(on_bio_end => "block_bio_complete", t_bio_end, t_bio_end_raw, 1);
programs!(on_bio_end => "block_bio_complete", t_bio_end_q, t_bio_end_q_raw, 1);
programs!(on_bio_end_nest => "block_bio_complete", t_bio_end_nest, t_bio_end_nest_raw, 1);
programs!(on_bio_end_nest => "block_bio_complete", t_bio_end_nest_q, t_bio_end_nest_q_raw, 1);
programs!(on_remap => "block_bio_remap", t_remap, t_remap_raw, 0);
programs!(on_remap => "block_bio_remap", t_remap_q, t_remap_q_raw, 1);
programs!(on_split => "block_split", t_split, t_split_raw, 0);
programs!(on_split => "block_split", t_split_q, t_split_q_raw, 1);
