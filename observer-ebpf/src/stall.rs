//! Stall episodes: a device that went longer than the threshold without a dispatch (requests
//! queued) or without a completion (requests at the device).
use observer_common::maps::{
    dev_slot, DevState, StallEvent, EVENT_STALL, STALL_DEVICE, STALL_DISPATCH,
};

use crate::maps::{emit, DEVSTATE, SETTINGS};

/// The device's shared state in its slot, claimed on first use; None if another disk owns
/// the slot (that disk then has no stall detection; the daemon reports the collision).
#[inline(always)]
fn devstate(dev: u32) -> Option<&'static mut DevState> {
    let p = DEVSTATE.get_ptr_mut(dev_slot(dev))?;
    let ds = unsafe { &mut *p };
    if ds.dev == dev {
        return Some(ds);
    }
    if ds.dev == 0 {
        ds.dev = dev;
        return Some(ds);
    }
    None
}

/// Emits a stall episode if the device went longer than the threshold without this event.
#[inline(always)]
fn maybe_stall(dev: u32, kind: u32, class: u16, start_ns: u64, now: u64) {
    let t = SETTINGS.get(0).map(|s| s.stall_ns).unwrap_or(0);
    if t != 0 && start_ns != 0 && now > start_ns && now - start_ns > t {
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

/// A dispatch on `dev` of a request that entered at `enter_ns` (0: the flush request). Ends a
/// dispatch stall: requests were queued and none was dispatched since max(last dispatch, entry).
#[inline(always)]
pub fn dispatched(dev: u32, class: u16, enter_ns: u64, now: u64) {
    let Some(ds) = devstate(dev) else { return };
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
}

/// A completion on `dev` of a request dispatched at `dispatch_ns`. Ends a device stall:
/// requests at the device and none completed since max(last completion, this dispatch).
#[inline(always)]
pub fn completed(dev: u32, class: u16, dispatch_ns: u64, now: u64) {
    let Some(ds) = devstate(dev) else { return };
    maybe_stall(
        dev,
        STALL_DEVICE,
        class,
        ds.last_complete_ns.max(dispatch_ns),
        now,
    );
    ds.last_complete_ns = now;
}
