//! `block_rq_insert(struct request *rq)`: the request goes to the scheduler or a software
//! queue. The entry point only on kernels without block_io_start (before 6.5).
use aya_ebpf::{helpers::bpf_ktime_get_ns, EbpfContext};
use observer_ebpf::{arg, layout, programs};

use crate::inflight::enter;

#[inline(always)]
fn on_insert(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    let l = layout();
    if l.enter_fallback != 0 {
        // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
        enter(rq, unsafe { bpf_ktime_get_ns() }, 0, false, true, &l);
    }
}

programs!(on_insert => "block_rq_insert", rq_insert, rq_insert_raw, 0);
programs!(on_insert => "block_rq_insert", rq_insert_q, rq_insert_q_raw, 1);
