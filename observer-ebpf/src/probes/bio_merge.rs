//! `block_bio_backmerge(struct bio *bio)` and `block_bio_frontmerge(struct bio *bio)`: a bio
//! merged into an existing request. Before 5.11: `(q, rq, bio)`, the bio third.
use aya_ebpf::EbpfContext;
use core::ptr::addr_of_mut;

use observer_common::class::{classify, with_ioprio};
use observer_ebpf::{
    arg,
    kernel::{bio_dev, bio_ioprio},
    layout, programs, read,
    store::add,
};

use crate::{maps::stats, queued::forget};

#[inline(always)]
fn on_bio_merge(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    forget(bio);
    let l = layout();
    let dev = bio_dev(bio, &l);
    // Counted for the request's class as its completion will be (its priority is the bio's).
    let class = with_ioprio(classify(read(bio, l.bio_opf), &l), bio_ioprio(bio, &l));
    if let Some(s) = stats(dev, class) {
        // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs `stats`: a
        // non-null lookup of a per-CPU hash, so no other CPU writes it), valid while the program
        // runs; a program nesting on this CPU counts into it with atomic adds too.
        unsafe { add(addr_of_mut!((*s).merges), 1) };
    }
}

programs!(on_bio_merge => "block_bio_backmerge", bio_backmerge, bio_backmerge_raw, 0);
programs!(on_bio_merge => "block_bio_backmerge", bio_backmerge_q, bio_backmerge_q_raw, 2);
programs!(on_bio_merge => "block_bio_frontmerge", bio_frontmerge, bio_frontmerge_raw, 0);
programs!(on_bio_merge => "block_bio_frontmerge", bio_frontmerge_q, bio_frontmerge_q_raw, 2);
