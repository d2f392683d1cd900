//! `block_rq_requeue(struct request *rq)`: sent back to be dispatched again.
use observer_ebpf::{arg, programs};

use crate::inflight::live;

#[inline(always)]
fn on_requeue(rq: u64) {
    if let Some(e) = live(rq) {
        e.requeued = 1;
        e.requeues = e.requeues.saturating_add(1);
    }
}

programs!("block_rq_requeue", rq_requeue, rq_requeue_raw, |c| {
    on_requeue(arg(&c, 0))
});
programs!("block_rq_requeue", rq_requeue_q, rq_requeue_q_raw, |c| {
    on_requeue(arg(&c, 1))
});
