//! `block_split(struct bio *bio, unsigned int new_sector)` (before 5.11: `(q, bio,
//! new_sector)`): `bio` is a piece just split off another bio (block/blk-merge.c, dm; drivers/md
//! since 6.x), already chained to it (block/bio.c bio_chain: `bio->bi_private` is the parent);
//! the parent goes on from `new_sector`. On a bio-based disk each piece is an I/O of that disk
//! (md and dm account pieces one by one). Whether the kernel traces the piece's own end
//! depends on it: 5.10's bio_endio hands a chained bio to its parent before tracing
//! (block/bio.c, `bio_chain_endio` checked first), later kernels trace it. So a piece is only
//! counted here, in its parent's entry (`bios`): it is counted as an I/O of its own when it ends
//! on its own (its completion or remap finds the parent, inflight.rs `piece_of`), else with its
//! parent, at the parent's end (bio_end.rs, `bio_counted`). No entry is made for it: one
//! whose end is never traced would be left behind. A piece split off a piece without an entry
//! is counted only when it ends or is remapped on its own (its grandparent's `bios` hold the
//! piece in between).
use aya_ebpf::EbpfContext;
use observer_common::class::Op;
use observer_ebpf::{arg, kernel::bio_disk, layout, programs, read};

use crate::{
    chain::ends_traced,
    inflight::{forget_ended, split_counted, tracked_parent, Parent},
    inherit,
};

#[inline(always)]
fn on_split(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    let q: u64 = read(bio_disk(bio, &l), l.disk_queue);
    if read::<u64>(q, l.q_mq_ops) != 0 {
        // A request-based disk: the pieces become requests of their own there, a log bio's
        // pieces log requests (inherit.rs).
        inherit::split(bio, read(bio, l.bio_private));
        return;
    }
    forget_ended(bio);
    // Where the kernel traces a chained bio's end, that end counts the piece: counted here as
    // well, the parent's count would be raised in the task and lowered by the piece's end on
    // another CPU, two plain read-modify-writes that can lose one (docs/design/stacked-disks.md,
    // "6.12 raid0 on partitions").
    if ends_traced() {
        return;
    }
    if let Some(Parent {
        bio: parent,
        entry: p,
        holds,
        between,
    }) = tracked_parent(bio, &l)
    {
        // Its direct parent, or the bio a chained one it was split off was folded into
        // (chain.rs), counts it; a grandparent above a piece without an entry does not.
        // SAFETY: `p` is the parent's entry from `tracked_parent` (an INFLIGHT or ENDED_PARENTS
        // element, non-null), valid while the program runs, with no other reference to it in this
        // program; another CPU splitting or ending a piece of the same parent at once may update it
        // too: a saturating u16 count, so a race loses a count, never makes an invalid value.
        let p = unsafe { &mut *p };
        if (between == 0 || holds) && Op::from_code(p.class) != Op::Discard {
            p.bios = p.bios.saturating_add(1);
            split_counted(bio, parent);
        }
    }
}

programs!(on_split => "block_split", bio_split, bio_split_raw, 0);
programs!(on_split => "block_split", bio_split_q, bio_split_q_raw, 1);
