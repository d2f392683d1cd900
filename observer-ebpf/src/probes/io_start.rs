//! `block_io_start(struct request *rq)`: a bio became a request (block/blk-mq.c:
//! blk_account_io_start). Added in 6.5 by 5a80bd075f3b ("block: introduce
//! block_io_start/block_io_done tracepoints"); older kernels enter at `block_rq_insert`
//! (rq_insert.rs). It never took the queue: the `_q` pair is declared like every handler's but
//! never chosen.
use aya_ebpf::EbpfContext;
use observer_ebpf::{arg, layout, programs};

use crate::inflight::enter;

#[inline(always)]
fn on_io_start(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    // No clock read: `enter` takes the first bio's entry time (block_bio_queue).
    enter(rq, 0, 0, true, true, &layout());
}

programs!(on_io_start => "block_io_start", io_start, io_start_raw, 0);
programs!(on_io_start => "block_io_start", io_start_q, io_start_q_raw, 1);
