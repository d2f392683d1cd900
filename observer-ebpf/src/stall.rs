//! Stall episodes: a device that went longer than the threshold without a dispatch (requests
//! queued) or without a completion (requests at the device).
use observer_common::{
    maps::{DevState, StallEvent, EVENT_STALL, NO_SLOT, STALL_DEVICE, STALL_DISPATCH},
    stage::stall,
};

use crate::maps::{emit, DEVSTATE, SETTINGS};

/// The device's shared state at its slot (the request's [`Inflight::dev_slot`]); None if the
/// disk had no slot, or the slot is no longer this disk's (the daemon gave it to another disk
/// after this one went away), as the side `side` reads ([`DevState::dev`] for the dispatch
/// side, [`DevState::complete_dev`] for the completion side: each side reads only its own
/// cache line).
///
/// [`Inflight::dev_slot`]: observer_common::maps::Inflight::dev_slot
#[inline(always)]
fn devstate(
    dev: u32,
    dev_slot: u32,
    side: impl Fn(&DevState) -> u32,
) -> Option<&'static mut DevState> {
    if dev_slot == NO_SLOT {
        return None;
    }
    let p = DEVSTATE.get_ptr_mut(dev_slot)?;
    // SAFETY: `p` is DEVSTATE element `dev_slot` (a non-null lookup): valid for the map's life
    // (array elements are never freed). It is shared: other CPUs and the daemon store into it at
    // once; every field is an integer, so a race mixes values (the latest writer wins, as
    // DevState documents), never makes an invalid one.
    let ds = unsafe { &mut *p };
    if side(ds) == dev {
        Some(ds)
    } else {
        None
    }
}

/// Emits a stall episode if the device went longer than the threshold without this event
/// ([`stall`]).
#[inline(always)]
fn maybe_stall(dev: u32, kind: u32, class: u16, start_ns: u64, now: u64) {
    let t = SETTINGS.get(0).map(|s| s.stall_ns).unwrap_or(0);
    if stall(t, start_ns, now) {
        emit(&StallEvent {
            kind: EVENT_STALL,
            dev,
            stall: kind,
            class: class as u32,
            start_ns,
            end_ns: now,
        });
    }
}

/// A dispatch on `dev` (at `dev_slot`) of a request that entered at `enter_ns` (0: the flush
/// request), starting at `sector` (512 B), `sectors` long. Ends a dispatch stall: requests were
/// queued and none was dispatched since max(last dispatch, entry). Returns whether it is a
/// missed adjacent merge after the device's previous dispatch
/// ([`crate::missed_merge::dispatched`]; false on a disk without a slot).
#[inline(always)]
pub fn dispatched(
    dev: u32,
    dev_slot: u32,
    class: u16,
    enter_ns: u64,
    now: u64,
    sector: u64,
    sectors: u32,
) -> bool {
    let Some(ds) = devstate(dev, dev_slot, |ds| ds.dev) else {
        return false;
    };
    let missed = crate::missed_merge::dispatched(ds, class, sector, sectors, now);
    if enter_ns != 0 {
        maybe_stall(
            dev,
            STALL_DISPATCH,
            class,
            ds.last_dispatch_ns.max(enter_ns),
            now,
        );
    }
    ds.last_dispatch_ns = now;
    missed
}

/// A completion on `dev` (at `dev_slot`) of a request dispatched at `dispatch_ns`. Ends a device
/// stall: requests at the device and none completed since max(last completion, this dispatch).
#[inline(always)]
pub fn completed(dev: u32, dev_slot: u32, class: u16, dispatch_ns: u64, now: u64) {
    let Some(ds) = devstate(dev, dev_slot, |ds| ds.complete_dev) else {
        return;
    };
    maybe_stall(
        dev,
        STALL_DEVICE,
        class,
        ds.last_complete_ns.max(dispatch_ns),
        now,
    );
    ds.last_complete_ns = now;
}
