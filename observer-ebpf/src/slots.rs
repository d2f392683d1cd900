//! Direct-mapped slot arrays (`INFLIGHT_SLOTS`, owned for good; `BIO_SLOTS`, leased): the value of a kernel object
//! found with an array lookup (inlined by the verifier) instead of a hash-map helper call. See
//! [`observer_common::maps::Slot`] for the claiming rule that makes a slot single-writer.
use core::ptr::{addr_of_mut, read_volatile};

use aya_ebpf::maps::Array;
use observer_common::maps::{slot_index, Slot};

use crate::store::{add, put};

/// The value of the object at `addr` in its slot, if it owns the slot; else `None` (the object
/// lives in the hash map, if anywhere). `addr` must be a number, not a typed pointer (the
/// verifier refuses shifts of pointers): see the observer's `maps::addr_number`.
#[inline(always)]
pub fn owned<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut V> {
    let s = slot_of(map, addr)?;
    // SAFETY: `s` is a non-null lookup of an element of the array `map` ([`slot_of`]): valid and
    // aligned for the map's life (array elements are never freed); `key`, a u64 a racing claim may
    // store to, is read in one volatile load.
    if unsafe { read_volatile(addr_of_mut!((*s).key)) } == addr {
        // SAFETY: only the address of a field of the valid element `s`; nothing is read.
        Some(unsafe { addr_of_mut!((*s).value) })
    } else {
        None
    }
}

/// The slot of the object at `addr` (`None` for a null address).
#[inline(always)]
fn slot_of<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut Slot<V>> {
    if addr == 0 {
        return None;
    }
    map.get_ptr_mut(slot_index(addr))
}

/// The value of the object at `addr` in its slot, claiming the slot if nobody has yet; `None`
/// if the slot belongs to another object (or a racing CPU won it): then use the hash map.
/// A newly claimed slot's value is what the array was created with (zero).
#[inline(always)]
pub fn claim<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut V> {
    take(map, addr, false)
}

/// [`claim`] (`take_back` false: slots owned for good) and [`lease`] (true).
#[inline(always)]
fn take<V>(map: &Array<Slot<V>>, addr: u64, take_back: bool) -> Option<*mut V> {
    let s = slot_of(map, addr)?;
    // SAFETY: `s` is a non-null lookup of an element of the array `map` ([`slot_of`]): valid and
    // aligned for the map's life (array elements are never freed); `key` is read in one volatile
    // load.
    let key = unsafe { read_volatile(addr_of_mut!((*s).key)) };
    if key == addr {
        // SAFETY: only the address of a field of the valid element `s` (the caller's own slot: key
        // = addr).
        return Some(unsafe { addr_of_mut!((*s).value) });
    }
    // SAFETY: only the address of the `claims` u64 of the valid element `s`.
    if !try_claim(unsafe { addr_of_mut!((*s).claims) }, key, take_back) {
        return None;
    }
    // SAFETY: this CPU's add made `claims` 1 ([`try_claim`]): it alone may write this free slot's
    // `key`, a u64 of the valid element `s`.
    unsafe { put(addr_of_mut!((*s).key), addr) };
    // SAFETY: only the address of a field of the valid element `s`, now the caller's slot.
    Some(unsafe { addr_of_mut!((*s).value) })
}

/// Whether this CPU won the free slot whose `claims` is at `claims` (`key`: the slot's key as
/// read): its add made the count 1. Without `take_back` a losing add stays (slots owned for
/// good: the slot is someone's anyway); with it, it is subtracted again (leased slots, which
/// are free again once their holder gives them back).
#[inline(always)]
fn try_claim(claims: *mut u64, key: u64, take_back: bool) -> bool {
    // SAFETY: `claims` is the `claims` u64 of a valid slot element ([`take`]), read in one volatile
    // load.
    if key != 0 || unsafe { read_volatile(claims) } != 0 {
        return false;
    }
    // SAFETY: `claims` is a valid u64 of a slot element (as above).
    unsafe { add(claims, 1) };
    // SAFETY: as above: one volatile load of the valid `claims`, after this CPU's add.
    if unsafe { read_volatile(claims) } == 1 {
        return true;
    }
    if take_back {
        // SAFETY: as above.
        unsafe { add(claims, u64::MAX) };
    }
    false
}

/// The value of the object at `addr` in its slot of a **leased** array (`BIO_SLOTS`): the slot
/// it holds already (the same object entering again), or its free slot, leased now; `None` if
/// another object holds the slot (or a racing CPU won it): then use the hash map. The value is
/// whatever the last holder left: write every field. Give it back with [`give_back`].
#[inline(always)]
pub fn lease<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut V> {
    take(map, addr, true)
}

/// Gives back the slot that `addr` holds in a leased array, returning what `read` takes from
/// its value first (`None`: it holds none, e.g. it gave it back already, or it lives in the
/// hash map). The key is cleared before the claim is released, so the next holder never
/// finds it set.
#[inline(always)]
pub fn give_back<V, R>(map: &Array<Slot<V>>, addr: u64, read: impl FnOnce(&V) -> R) -> Option<R> {
    let s = slot_of(map, addr)?;
    // SAFETY: `s` is a non-null lookup of an element of the array `map` ([`slot_of`]): valid and
    // aligned for the map's life (array elements are never freed); `key` is read in one volatile
    // load.
    if unsafe { read_volatile(addr_of_mut!((*s).key)) } != addr {
        return None;
    }
    // SAFETY: the slot is `addr`'s (its key checked above): only the events of that one object
    // write its value, and none runs during this one, so the shared reference, which ends with
    // `read`, aliases no write.
    let v = read(unsafe { &*addr_of_mut!((*s).value) });
    // SAFETY: `key` of the valid element `s`; the slot is still `addr`'s (its claim is released
    // only below), so no other CPU writes the key now.
    unsafe { put(addr_of_mut!((*s).key), 0) };
    // SAFETY: the `claims` u64 of the valid element `s`, for the atomic add.
    unsafe { add(addr_of_mut!((*s).claims), u64::MAX) };
    Some(v)
}
