//! `rq_state`: the reaper's question to the kernel, "is this request still in flight?". Never
//! attached: the daemon runs it on demand with BPF_PROG_TEST_RUN (raw_tp test runs exist since
//! Linux 5.10, commit 1b4d60ec162f), argument 0 being a `struct request *` it tracks, and reads
//! the program's return value: `request::state` (`enum mq_rq_state`: MQ_RQ_IDLE,
//! MQ_RQ_IN_FLIGHT, MQ_RQ_COMPLETE; block/blk-mq.c sets IN_FLIGHT in blk_mq_start_request and
//! IDLE again when the request is freed or requeued) in bits 0–7, plus [`IN_FLUSH_SEQ`] while
//! the request is inside a flush sequence (block/blk-flush.c: a write whose data part is done
//! stays COMPLETE while it waits for its post-flush), or `u32::MAX` if the struct cannot be read
//! (its device went away).
//!
//! A separate object, so the daemon can own it apart from the attached programs.
#![no_std]
#![no_main]

use aya_ebpf::helpers::bpf_probe_read_kernel;
use observer_ebpf::{
    kernel::{in_flush_seq, is_flush},
    layout,
};

/// Set in the result while the request is inside a flush sequence.
const IN_FLUSH_SEQ: u32 = 1 << 8;

observer_ebpf::layout_global!();

/// Returns `request::state` of the request at argument 0 (see the module docs). Written without
/// aya's `raw_tracepoint` macro, which discards the return value.
#[no_mangle]
// SAFETY: the `raw_tp` section holds only this function, which aya loads as a raw tracepoint
// program by its section; nothing in Rust calls it, and its signature is the one BPF gives such a
// program (a context pointer in, a u32 returned).
#[unsafe(link_section = "raw_tp")]
pub fn rq_state(ctx: *mut core::ffi::c_void) -> u32 {
    // SAFETY: `ctx` is the raw_tp argument array the daemon hands BPF_PROG_TEST_RUN
    // (observer/src/bpf/reqstate.rs: `args[0]` = the request), one u64 at least; the verifier
    // refuses a read past the context's size.
    let rq = unsafe { *(ctx as *const u64) };
    let l = layout();
    let p = (rq + l.rq_state as u64) as *const u32;
    // SAFETY: bpf_probe_read_kernel of one u32 at `rq + state`: `rq` may be a freed struct (the
    // reaper asks about requests it lost track of), and a fault returns an error (u32::MAX below),
    // never UB.
    match unsafe { bpf_probe_read_kernel(p) } {
        // Not for the flush request itself: its end_io stays set (block/blk-flush.c), and its
        // own state says whether the device has it.
        Ok(state) if !is_flush(rq, &l) && in_flush_seq(rq, &l) => (state & 0xff) | IN_FLUSH_SEQ,
        Ok(state) => state & 0xff,
        Err(_) => u32::MAX,
    }
}
