//! Direct-mapped slot arrays (`INFLIGHT_SLOTS`): the value of a kernel object
//! found with an array lookup (inlined by the verifier) instead of a hash-map helper call. See
//! [`observer_common::maps::Slot`] for the ownership rule that makes a slot single-writer.
use core::ptr::{addr_of_mut, read_volatile};

use aya_ebpf::maps::Array;
use observer_common::maps::{slot_index, Slot};

use crate::store::put;

/// The value of the object at `addr` in its slot, if it owns the slot; else `None` (the object
/// lives in the hash map, if anywhere). `addr` must be a number, not a typed pointer (the
/// verifier refuses shifts of pointers): see the observer's `maps::scalar`.
#[inline(always)]
pub fn owned<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut V> {
    if addr == 0 {
        return None;
    }
    let s = map.get_ptr_mut(slot_index(addr))?;
    if unsafe { read_volatile(addr_of_mut!((*s).key)) } == addr {
        Some(unsafe { addr_of_mut!((*s).value) })
    } else {
        None
    }
}

/// The value of the object at `addr` in its slot, claiming the slot if nobody has yet; `None`
/// if the slot belongs to another object (or a racing CPU won it): then use the hash map.
/// A newly claimed slot's value is what the array was created with (zero).
#[inline(always)]
pub fn claim<V>(map: &Array<Slot<V>>, addr: u64) -> Option<*mut V> {
    if addr == 0 {
        return None;
    }
    let s = map.get_ptr_mut(slot_index(addr))?;
    let key = unsafe { read_volatile(addr_of_mut!((*s).key)) };
    if key == addr {
        return Some(unsafe { addr_of_mut!((*s).value) });
    }
    let claims = unsafe { addr_of_mut!((*s).claims) };
    if key != 0 || unsafe { read_volatile(claims) } != 0 {
        return None;
    }
    // BPF_XADD, its result unused (no BPF_FETCH: it verifies on every kernel). The BPF target
    // has no atomic read-modify-write in `core`, so the instruction is written out.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) claims,
            v = in(reg) 1u64,
        )
    };
    if unsafe { read_volatile(claims) } != 1 {
        return None;
    }
    unsafe { put(addr_of_mut!((*s).key), addr) };
    Some(unsafe { addr_of_mut!((*s).value) })
}
