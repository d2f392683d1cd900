//! `block_rq_requeue(struct request *rq)`: sent back to be dispatched again.
use aya_ebpf::EbpfContext;
use observer_ebpf::{arg, programs};

use crate::inflight::live;

#[inline(always)]
fn on_requeue(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    if let Some(e) = live(rq) {
        e.requeued = 1;
        e.requeues = e.requeues.saturating_add(1);
    }
}

programs!(on_requeue => "block_rq_requeue", rq_requeue, rq_requeue_raw, 0);
programs!(on_requeue => "block_rq_requeue", rq_requeue_q, rq_requeue_q_raw, 1);
