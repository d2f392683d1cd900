//! `block_bio_queue(struct bio *bio)` (before 5.11: `(q, bio)`): a bio enters the block layer
//! (btt's Q: block/blk-core.c, submit_bio_noacct_nocheck). On a request-based disk its entry
//! is kept in `BIO_SLOTS` (a slot leased for the bio's wait, or `BIO_QUEUED` if another bio
//! holds the slot) until it becomes a request (`inflight::enter` takes it: the
//! request's queue stage then starts at Q, so it includes sleeping for a request slot (tag)
//! and write-back or cgroup throttling (rq_qos), which happen before the request exists) or
//! merges into one (bio_merge.rs), or ends (`block_bio_complete(q, bio)`, bio_complete.rs:
//! also a bio that failed before it got a request, e.g. REQ_NOWAIT without a free tag, or
//! merged without a tracepoint, a discard). Meanwhile the daemon lists it in `/inflight` as
//! queued.
//! Bios of bio-based disks (dm, md: `queue->mq_ops` NULL) never become requests there: each
//! gets an entry of its own in `INFLIGHT` (inflight.rs, `enter_bio`), aggregated at its
//! `block_bio_complete` as a request with a total stage only (bio_complete.rs, `bio_completed`).
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_ANY,
    helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    EbpfContext,
};
use observer_common::{
    class::classify,
    maps::{BioQueued, Counter},
};
use observer_ebpf::{
    arg,
    kernel::{bio_disk, disk_dev},
    layout, programs, read,
    slots::lease,
    store::put,
};

use crate::{
    inflight::enter_bio,
    maps::{addr_number, count},
    queued::{BIO_QUEUED, BIO_SLOTS},
};

#[inline(always)]
fn on_bio_queue(c: &impl EbpfContext, i: usize) {
    let bio = arg(c, i);
    let l = layout();
    let disk = bio_disk(bio, &l);
    let q: u64 = read(disk, l.disk_queue);
    if read::<u64>(q, l.q_mq_ops) == 0 {
        enter_bio(bio, disk, &l);
        return;
    }
    let (queue_ns, sector, dev, size, pid, class) = (
        // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
        unsafe { bpf_ktime_get_ns() },
        read(bio, l.bio_sector),
        disk_dev(disk, &l),
        read(bio, l.bio_size),
        (bpf_get_current_pid_tgid() >> 32) as u32,
        classify(read(bio, l.bio_opf), &l),
    );
    // Its own slot, leased until the bio becomes a request, merges or ends; nearly always
    // free (few bios wait at once). Every field is written: the slot holds the last bio's.
    // (`addr_number` gives 0 in the rare case it fails: then the hash map, keyed by the pointer.)
    if let Some(p) = lease(&BIO_SLOTS, addr_number(bio)) {
        // SAFETY: `p` is the value of the BIO_SLOTS slot `bio` holds (`lease`: no other bio writes
        // it while `bio` holds it, and a bio's own events do not run at once), valid for the map's
        // life; each `put` writes one integer field.
        unsafe {
            put(addr_of_mut!((*p).sector), sector);
            put(addr_of_mut!((*p).dev), dev);
            put(addr_of_mut!((*p).size), size);
            put(addr_of_mut!((*p).pid), pid);
            put(addr_of_mut!((*p).class), class);
            put(addr_of_mut!((*p).queue_ns), queue_ns);
        }
        return;
    }
    let v = BioQueued {
        queue_ns,
        sector,
        dev,
        size,
        pid,
        class,
        _pad: 0,
    };
    // BPF_ANY: an entry left by an earlier bio at this address (it ended unseen) is replaced.
    if BIO_QUEUED.insert(&bio, &v, BPF_ANY as u64).is_err() {
        count(Counter::BioQueuedFull);
    }
}

programs!(on_bio_queue => "block_bio_queue", bio_queue, bio_queue_raw, 0);
programs!(on_bio_queue => "block_bio_queue", bio_queue_q, bio_queue_q_raw, 1);
