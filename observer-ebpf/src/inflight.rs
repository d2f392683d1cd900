//! The entry of a request: created when it enters, found by later tracepoints, freed (kept for
//! the next request on the same struct) when it completes. It lives in the request pointer's
//! slot of `INFLIGHT_SLOTS` if the struct owns that slot (nearly always), else in the
//! `INFLIGHT` hash map (observer_common::maps::Slot).
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::Array,
};
use observer_common::{
    class::classify,
    layout::KernelLayout,
    maps::{Counter, Inflight, Slot, SLOTS, SLOTS_MAP_FLAGS},
};
use observer_ebpf::{
    kernel::{bio_owner, disk_dev, original_flags, read, rq_dev},
    slots::{claim, owned},
    store::{fill, put},
};

/// Request pointer → entry, direct-mapped (observer_common::maps::INFLIGHT_SLOTS).
#[map]
pub static INFLIGHT_SLOTS: Array<Slot<Inflight>> = Array::with_max_entries(SLOTS, SLOTS_MAP_FLAGS);

use crate::{
    maps::{count, dev_slot, log_class, owner_count, scalar, stats, INFLIGHT, ZERO_INFLIGHT},
    probes::bio_queue::queued_at,
};

/// Starts tracking a request that entered the block layer, with its original cmd_flags. `now`
/// is the tracepoint's time (ns), or 0 (block_io_start): the entry is then the first bio's
/// entry (btt Q) if seen, else the clock — no clock read for nearly every request.
///
/// An existing entry for the same `struct request *` means the struct was freed and reused
/// since we saw it enter: its completion never reached `block_rq_complete` here. With
/// `replace`, that request is counted as completed with its latency lost, and replaced.
#[inline(always)]
pub fn enter(rq: u64, now: u64, dispatch_ns: u64, replace: bool, l: &KernelLayout) {
    let mut enter_ns = now;
    if l.enter_fallback != 0 {
        // Seen late (insert, issue or completion; kernels before 6.5 have no block_io_start):
        // the kernel's own allocation time is the entry.
        let start: u64 = read(rq, l.rq_start_time_ns);
        if start != 0 && start <= now {
            enter_ns = start;
        }
    }
    let sector: u64 = read(rq, l.rq_sector);
    let bio: u64 = read(rq, l.rq_bio);
    // The queue stage starts when the first bio entered (btt Q), if seen: before the request
    // existed (a tag wait, throttling) and, on the fallback kernels, before the insert.
    if let Some(q) = queued_at(bio) {
        if enter_ns == 0 || q < enter_ns {
            enter_ns = q;
        }
    }
    if enter_ns == 0 {
        // block_io_start passes no time of its own and the first bio's entry was not seen (a
        // split bio, or one that entered before the programs were attached). Not
        // `rq->start_time_ns`: at this tracepoint it may still hold the previous request's
        // value (block/blk-mq.c, blk_account_io_start sets it just after trace_block_io_start
        // when only I/O accounting needs it; seen as > 67 s latencies of split write-back
        // writes). The clock.
        enter_ns = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    }
    let Some(e) = slot(rq, replace) else { return };
    let dev = rq_dev(rq, l);
    // The disk's slot, looked up once here and kept in the entry for dispatch and completion.
    let disk_slot = dev_slot(dev);
    let class = classify(original_flags(rq, l), l) | log_class(dev, disk_slot, sector);
    unsafe {
        fill(
            e,
            enter_ns,
            dispatch_ns,
            dev,
            disk_slot,
            class,
            sector,
            read(rq, l.rq_data_len),
        );
        // The submitting task: block_io_start runs in its context (never in an interrupt).
        submitter(e);
        // The owner: the first bio's cgroup (a request merging bios of several cgroups is
        // counted for its first bio's; bios merged later are not read).
        put(addr_of_mut!((*e).owner_cgroup), bio_owner(bio));
    }
}

/// Writes the current task's pid (tgid), cgroup v2 id and command name into `e`.
#[inline(always)]
unsafe fn submitter(e: *mut Inflight) {
    put(
        addr_of_mut!((*e).pid),
        (bpf_get_current_pid_tgid() >> 32) as u32,
    );
    put(addr_of_mut!((*e).cgroup), bpf_get_current_cgroup_id());
    // Writes all 16 bytes (zeros on failure).
    aya_ebpf::helpers::generated::bpf_get_current_comm(addr_of_mut!((*e).comm) as *mut _, 16);
}

/// Starts tracking a bio that entered a bio-based disk (`disk`: dm, md; block_bio_queue, in
/// the submitting task), which no request will ever carry: an entry like a request's (entry
/// time, class from `bi_opf`, log class, sector, size in bytes, submitter, owner cgroup), never dispatched,
/// keyed by the bio's address in the `INFLIGHT` hash map only (bio addresses are many and
/// short-lived: they must not own `INFLIGHT_SLOTS` slots for good, see
/// observer_common::maps::Slot). The entry is deleted at the bio's `block_bio_complete`
/// (probes/rq_complete.rs, `bio_completed`). A live entry already at that address is a bio
/// whose completion was not seen: counted as lost and replaced.
#[inline(always)]
pub fn enter_bio(bio: u64, disk: u64, l: &KernelLayout) {
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    let e = match INFLIGHT.get_ptr_mut(&bio) {
        Some(p) => {
            let old = unsafe { &*p };
            if old.is_live() {
                lost(old);
            }
            p
        }
        None => {
            let Some(zero) = ZERO_INFLIGHT.get_ptr(0) else {
                return;
            };
            match INFLIGHT.insert(&bio, unsafe { &*zero }, BPF_NOEXIST as u64) {
                Ok(()) | Err(-17) => {}
                Err(_) => {
                    count(Counter::InflightFull);
                    return;
                }
            }
            let Some(p) = INFLIGHT.get_ptr_mut(&bio) else {
                return;
            };
            p
        }
    };
    let dev = disk_dev(disk, l);
    let disk_slot = dev_slot(dev);
    let sector: u64 = read(bio, l.bio_sector);
    let class = classify(read(bio, l.bio_opf), l) | log_class(dev, disk_slot, sector);
    unsafe {
        fill(
            e,
            now,
            0,
            dev,
            disk_slot,
            class,
            sector,
            read(bio, l.bio_size),
        );
        submitter(e);
        // The bio's owner (on a stacked disk: the cgroup the bio was charged to there).
        put(addr_of_mut!((*e).owner_cgroup), bio_owner(bio));
    }
}

/// Takes the entry of a bio of a bio-based disk out of `INFLIGHT` (see [`enter_bio`]): its
/// state if it was live.
#[inline(always)]
pub fn take_bio(bio: u64) -> Option<Inflight> {
    let e = *unsafe { INFLIGHT.get(&bio) }?;
    let _ = INFLIGHT.remove(&bio);
    if e.is_live() {
        Some(e)
    } else {
        None
    }
}

/// The `INFLIGHT` entry of `rq` to fill: its existing entry (kept for reuse), or a new one
/// inserted for it. A live existing entry means the struct was freed and reused since we saw it
/// enter: its completion never reached block_rq_complete here. With `replace`, that request is
/// counted as completed with its latency lost and the entry is returned; without, `None`.
#[inline(always)]
pub fn slot(rq: u64, replace: bool) -> Option<*mut Inflight> {
    // A struct that owns its array slot never has a hash entry: ownership is permanent, and a
    // struct only goes to the hash map when its slot belongs to another one.
    let found = match claim(&INFLIGHT_SLOTS, scalar(rq)) {
        Some(p) => Some(p),
        None => INFLIGHT.get_ptr_mut(&rq),
    };
    if let Some(p) = found {
        let old = unsafe { &*p };
        if old.is_live() {
            if !replace {
                return None;
            }
            lost(old);
        }
        return Some(p);
    }
    // A new key: insert the (zeroed, unused) scratch entry, then fill the map's copy in place.
    let zero = ZERO_INFLIGHT.get_ptr(0)?;
    match INFLIGHT.insert(&rq, unsafe { &*zero }, BPF_NOEXIST as u64) {
        Ok(()) | Err(-17) => {}
        Err(_) => {
            count(Counter::InflightFull);
            return None;
        }
    }
    INFLIGHT.get_ptr_mut(&rq)
}

/// A request that completed without its completion reaching us: counted, no latency; its
/// size, bios and missed merge at dispatch (if it was dispatched) are counted.
#[inline(always)]
pub fn lost(e: &Inflight) {
    if let Some(s) = stats(e.dev, e.class) {
        let s = unsafe { &mut *s };
        s.requests += 1;
        s.lost += 1;
        s.dispatch.record(e.size, e.bios, e.missed);
    }
    owner_count(e.dev, e.class, e.owner_cgroup, 0);
}

/// The live entry of a request, if any (free entries are kept for reuse, see
/// [`Inflight::is_live`]).
#[inline(always)]
pub fn live(rq: u64) -> Option<&'static mut Inflight> {
    let p = match owned(&INFLIGHT_SLOTS, scalar(rq)) {
        Some(p) => p,
        None => INFLIGHT.get_ptr_mut(&rq)?,
    };
    let e = unsafe { &mut *p };
    if e.is_live() {
        Some(e)
    } else {
        None
    }
}

/// Marks an entry free (kept in the map for the next request on the same struct).
#[inline(always)]
pub fn free(e: &mut Inflight) {
    unsafe {
        put(&mut e.enter_ns, 0);
        put(&mut e.dispatch_ns, 0);
    }
}
