//! Bios between their entry (`block_bio_queue`, btt Q) and their request on a request-based
//! disk: the entry of each, leased in `BIO_SLOTS` (direct-mapped by address) or, if another
//! bio holds that slot, in `BIO_QUEUED`. Filled by probes/bio_queue.rs; taken by the request
//! the bio starts (inflight.rs, [`queued_at`]: its queue stage starts at Q), or dropped when
//! the bio merges into an existing request or ends ([`forget`]).
use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap},
};
use observer_common::maps::{BioQueued, Slot, BIO_QUEUED_ENTRIES, SLOTS, SLOTS_MAP_FLAGS};
use observer_ebpf::slots::give_back;

use crate::{inherit, maps::addr_number};

/// Bios between entry and request whose slot another bio holds: address → entry
/// (observer_common::maps::BIO_QUEUED).
#[map]
pub static BIO_QUEUED: HashMap<u64, BioQueued> = HashMap::with_max_entries(BIO_QUEUED_ENTRIES, 0);
/// Bios between entry and request, direct-mapped, each slot leased for one bio's wait
/// (observer_common::maps::BIO_SLOTS).
#[map]
pub static BIO_SLOTS: Array<Slot<BioQueued>> = Array::with_max_entries(SLOTS, SLOTS_MAP_FLAGS);

/// When the bio entered the block layer, if it was seen; its entry is removed (the request's
/// entry takes over).
#[inline(always)]
pub fn queued_at(bio: u64) -> Option<u64> {
    if bio == 0 {
        return None;
    }
    if let Some(t) = give_back(&BIO_SLOTS, addr_number(bio), |b| b.queue_ns) {
        return Some(t);
    }
    // SAFETY: HashMap::get, one u64 copied at once (aya's caveat: an element removed and reused
    // meanwhile reads as another key's value, integers only, never a fault: hash elements are
    // preallocated and stay mapped while the program runs, under RCU).
    let t = unsafe { BIO_QUEUED.get(&bio) }?.queue_ns;
    let _ = BIO_QUEUED.remove(&bio);
    Some(t)
}

/// Forgets a bio that merged into an existing request, or ended (removes its entry, if any).
#[inline(always)]
pub fn forget(bio: u64) {
    inherit::forget(bio);
    if bio != 0 && give_back(&BIO_SLOTS, addr_number(bio), |_| ()).is_none() {
        let _ = BIO_QUEUED.remove(&bio);
    }
}
