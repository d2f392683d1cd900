//! `block_bio_queue(struct bio *bio)` (before 5.11: `(q, bio)`): a bio enters the block layer
//! (btt's Q: block/blk-core.c, submit_bio_noacct_nocheck). On a request-based disk its entry
//! is kept in `BIO_QUEUED` until it becomes a request (`inflight::enter` takes it: the
//! request's queue stage then starts at Q, so it includes sleeping for a request slot (tag)
//! and write-back or cgroup throttling (rq_qos), which happen before the request exists) or
//! merges into one (bio_merge.rs), or ends (`block_bio_complete(q, bio)`: also a bio that
//! failed before it got a request, e.g. REQ_NOWAIT without a free tag, or merged without a
//! tracepoint, a discard). Meanwhile the daemon lists it in `/inflight` as queued.
//! Bios of bio-based disks (dm, md: `queue->mq_ops` NULL) never become requests there and are
//! not kept.
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::HashMap,
    EbpfContext,
};
use observer_common::{
    class::classify,
    maps::{BioQueued, Counter, BIO_QUEUED_ENTRIES},
};
use observer_ebpf::{
    arg,
    kernel::{bio_disk, disk_dev},
    layout, programs, read,
};

use crate::maps::count;

/// Bios between entry and request: address → entry (observer_common::maps::BIO_QUEUED).
#[map]
pub static BIO_QUEUED: HashMap<u64, BioQueued> = HashMap::with_max_entries(BIO_QUEUED_ENTRIES, 0);

#[inline(always)]
fn on_bio_queue(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    let disk = bio_disk(bio, &l);
    let q: u64 = read(disk, l.disk_queue);
    if read::<u64>(q, l.q_mq_ops) == 0 {
        return;
    }
    let v = BioQueued {
        queue_ns: unsafe { bpf_ktime_get_ns() },
        sector: read(bio, l.bio_sector),
        dev: disk_dev(disk, &l),
        size: read(bio, l.bio_size),
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        class: classify(read(bio, l.bio_opf), &l),
        _pad: 0,
    };
    if BIO_QUEUED.insert(&bio, &v, 0).is_err() {
        count(Counter::BioQueuedFull);
    }
}

/// When the bio entered the block layer, if it was seen; its entry is removed.
#[inline(always)]
pub fn queued_at(bio: u64) -> Option<u64> {
    if bio == 0 {
        return None;
    }
    let t = unsafe { BIO_QUEUED.get(&bio) }?.queue_ns;
    let _ = BIO_QUEUED.remove(&bio);
    Some(t)
}

/// Forgets a bio that merged into an existing request, or ended.
#[inline(always)]
pub fn forget(bio: u64) {
    let _ = BIO_QUEUED.remove(&bio);
}

/// `block_bio_complete(struct request_queue *q, struct bio *bio, ...)` (the queue first on
/// every kernel): the bio ended.
#[inline(always)]
fn on_bio_complete(c: &impl EbpfContext, i: usize) {
    forget(arg(c, i));
}

programs!(on_bio_complete => "block_bio_complete", bio_complete, bio_complete_raw, 1);
programs!(on_bio_complete => "block_bio_complete", bio_complete_q, bio_complete_q_raw, 1);
programs!(on_bio_queue => "block_bio_queue", bio_queue, bio_queue_raw, 0);
programs!(on_bio_queue => "block_bio_queue", bio_queue_q, bio_queue_q_raw, 1);
