//! Missed adjacent merges: at each dispatch, the request is compared with the one dispatched on
//! the same device just before it (kept in the device's `DEVSTATE` entry); a pair that fits
//! [`is_missed_merge`] is written to this CPU's ring in `MERGE_PAIRS` for the daemon's
//! `/merges`, and the request is marked so its class counts it when its life ends.
use core::ptr::addr_of_mut;

use aya_ebpf::{macros::map, maps::PerCpuArray};
use observer_common::{
    class::Op,
    dispatch::is_missed_merge,
    maps::{DevState, MissedMerge, MERGE_PAIRS_PER_CPU},
};
use observer_ebpf::store::put;

use crate::maps::SETTINGS;

/// Each CPU's latest missed adjacent merges (observer_common::maps::MERGE_PAIRS).
#[map]
static MERGE_PAIRS: PerCpuArray<MissedMerge> =
    PerCpuArray::with_max_entries(MERGE_PAIRS_PER_CPU, 0);
/// Pairs written on each CPU, ever (observer_common::maps::MERGE_CURSOR).
#[map]
static MERGE_CURSOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// A dispatch at `now` on the device of `ds` of a request of `class` starting at `sector`,
/// `sectors` long: whether it is a missed adjacent merge after the device's previous dispatch
/// (recorded in `MERGE_PAIRS` if so); then it becomes the device's previous dispatch (its time
/// is stored by the caller, `stall::dispatched`). Plain stores into the shared entry: two CPUs
/// dispatching on one device at the same instant may mix their fields (the latest writer wins).
#[inline(always)]
pub fn dispatched(ds: &mut DevState, class: u16, sector: u64, sectors: u32, now: u64) -> bool {
    let window = SETTINGS.get(0).map(|s| s.merge_window_ns).unwrap_or(0);
    let missed = is_missed_merge(
        Op::from_code(ds.last_class),
        ds.last_sector,
        ds.last_sectors,
        ds.last_dispatch_ns,
        Op::from_code(class),
        sector,
        sectors,
        now,
        window,
    );
    if missed {
        record(ds, class, sector, sectors, now);
    }
    ds.last_sector = sector;
    ds.last_sectors = sectors;
    ds.last_class = class;
    missed
}

/// Writes the pair (the device's previous dispatch, this one) at this CPU's cursor.
#[inline(always)]
fn record(ds: &DevState, class: u16, sector: u64, sectors: u32, now: u64) {
    let Some(c) = MERGE_CURSOR.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: `c` is this CPU's MERGE_CURSOR element 0 (a non-null lookup): a u64 valid while the
    // program runs.
    let n = unsafe { *c };
    let Some(p) = MERGE_PAIRS.get_ptr_mut((n % MERGE_PAIRS_PER_CPU as u64) as u32) else {
        return;
    };
    // SAFETY: `p` is this CPU's MERGE_PAIRS element (a non-null lookup, index below
    // MERGE_PAIRS_PER_CPU) and `c` its cursor: per-CPU values no other CPU writes; each `put`
    // writes one integer field.
    unsafe {
        put(addr_of_mut!((*p).dev), ds.dev);
        put(addr_of_mut!((*p).class), class);
        put(addr_of_mut!((*p).first_class), ds.last_class);
        put(addr_of_mut!((*p).sector), sector);
        put(addr_of_mut!((*p).first_sector), ds.last_sector);
        put(addr_of_mut!((*p).sectors), sectors);
        put(addr_of_mut!((*p).first_sectors), ds.last_sectors);
        put(addr_of_mut!((*p).dispatch_ns), now);
        put(addr_of_mut!((*p).first_dispatch_ns), ds.last_dispatch_ns);
        put(c, n + 1);
    }
}
