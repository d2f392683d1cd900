//! `block_rq_merge(struct request *rq)`: `rq` is merged into another request and freed; it is
//! not an I/O of its own.
use aya_ebpf::EbpfContext;
use core::ptr::addr_of_mut;

use observer_common::class::{classify, with_ioprio};
use observer_ebpf::{
    arg,
    kernel::{rq_dev, rq_ioprio},
    layout, programs, read,
    store::add,
};

use crate::{
    inflight::{live, mark_free},
    maps::stats,
};

#[inline(always)]
fn on_rq_merge(c: &impl EbpfContext, i: usize) {
    let rq = arg(c, i);
    let (dev, class) = match live(rq) {
        Some(e) => {
            let dc = (e.dev, e.class);
            mark_free(e);
            dc
        }
        None => {
            let l = layout();
            let class = classify(read(rq, l.rq_cmd_flags), &l);
            let ioprio = rq_ioprio(rq, read(rq, l.rq_bio), &l);
            (rq_dev(rq, &l), with_ioprio(class, ioprio))
        }
    };
    if let Some(s) = stats(dev, class) {
        // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs `stats`: a
        // non-null lookup of a per-CPU hash, so no other CPU writes it), valid while the program
        // runs; a program nesting on this CPU counts into it with atomic adds too.
        unsafe { add(addr_of_mut!((*s).merges), 1) };
    }
}

programs!(on_rq_merge => "block_rq_merge", rq_merge, rq_merge_raw, 0);
programs!(on_rq_merge => "block_rq_merge", rq_merge_q, rq_merge_q_raw, 1);
