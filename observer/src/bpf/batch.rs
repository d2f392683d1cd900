//! Reads whole maps in a few syscalls (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6+ for hash maps and
//! arrays) instead of one or two per entry: `INFLIGHT_SLOTS` has 16384 slots and `INFLIGHT`
//! keeps an entry per request struct ever used, and both are read on every scrape.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use aya::{
    maps::{Array, HashMap, IterableMap, MapData},
    Pod,
};
use observer_common::maps::{BioQueued, Inflight, Slot};

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BATCH: usize = 4096;

/// `union bpf_attr`'s `batch` member (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Where the programs keep the requests they track: a request owns its slot of
/// `INFLIGHT_SLOTS` (index `slot_index(rq)`, `key == rq`), or has an `INFLIGHT` hash entry,
/// never both (observer_common::maps::Slot).
pub struct InflightMaps {
    /// `INFLIGHT`: request pointer → entry, for requests whose slot belongs to another struct.
    pub hash: HashMap<MapData, u64, Inflight>,
    /// `INFLIGHT_SLOTS`: the direct-mapped array.
    pub slots: Array<MapData, Slot<Inflight>>,
}

/// Where an entry read by [`InflightMaps::get`] lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// In `INFLIGHT_SLOTS` at this index.
    Slot(u32),
    /// In the `INFLIGHT` hash map.
    Hash,
}

impl InflightMaps {
    /// The entry of request `rq` now, and where it is; `None` if it has none.
    pub fn get(&self, rq: u64) -> Option<(Place, Inflight)> {
        let i = observer_common::maps::slot_index(rq);
        match self.slots.get(&i, 0) {
            Ok(s) if s.key == rq => Some((Place::Slot(i), s.value)),
            _ => self.hash.get(&rq, 0).ok().map(|e| (Place::Hash, e)),
        }
    }

    /// Retires the entry of `rq` (the daemon's only write): deleted from the hash map, or
    /// marked free in its slot (both timestamps 0; the slot stays the struct's).
    /// Errors are the map update's.
    pub fn retire(
        &mut self,
        rq: u64,
        place: Place,
        e: &Inflight,
    ) -> Result<(), aya::maps::MapError> {
        match place {
            Place::Hash => self.hash.remove(&rq),
            Place::Slot(_) => self.write(
                rq,
                place,
                &Inflight {
                    enter_ns: 0,
                    dispatch_ns: 0,
                    ..*e
                },
            ),
        }
    }

    /// Overwrites the entry of `rq` at `place` (from [`InflightMaps::get`]); a slot keeps its
    /// owner and claim count. For the reaper and tests. Errors are the map update's.
    pub fn write(
        &mut self,
        rq: u64,
        place: Place,
        e: &Inflight,
    ) -> Result<(), aya::maps::MapError> {
        match place {
            Place::Hash => self.hash.insert(rq, e, 0),
            Place::Slot(i) => {
                let claims = self.slots.get(&i, 0)?.claims;
                self.slots.set(
                    i,
                    Slot {
                        key: rq,
                        claims,
                        value: *e,
                    },
                    0,
                )
            }
        }
    }
}

/// Every (request pointer, entry) the programs keep, live and free, from both maps. Falls back
/// to per-entry reads if the kernel refuses batch lookups.
pub fn read_inflight(maps: &InflightMaps) -> Vec<(u64, Inflight)> {
    let mut out: Vec<(u64, Inflight)> = read_slots(&maps.slots);
    out.extend(read_hash(&maps.hash));
    out
}

/// The claimed slots of a slot array, as (owner address, value).
pub fn read_slots<V: Pod + Default>(map: &Array<MapData, Slot<V>>) -> Vec<(u64, V)> {
    let fd = map_fd(IterableMap::map(map));
    let all: Vec<(u32, Slot<V>)> = match batch(fd) {
        Some(v) => v,
        None => map
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.ok().map(|s| (i as u32, s)))
            .collect(),
    };
    all.into_iter()
        .filter(|(_, s)| s.key != 0)
        .map(|(_, s)| (s.key, s.value))
        .collect()
}

/// Every (key, value) of a hash map.
pub fn read_hash<V: Pod + Default>(map: &HashMap<MapData, u64, V>) -> Vec<(u64, V)> {
    match batch(map_fd(IterableMap::map(map))) {
        Some(v) => v,
        None => map.iter().flatten().collect(),
    }
}

/// Bios between entry and request in `BIO_SLOTS` and `BIO_QUEUED` (entries with
/// `queue_ns` 0 are unused).
pub fn read_bios(
    slots: &Array<MapData, Slot<BioQueued>>,
    hash: &HashMap<MapData, u64, BioQueued>,
) -> Vec<(u64, BioQueued)> {
    let mut out = read_slots(slots);
    out.extend(read_hash(hash));
    out
}

fn map_fd(m: &MapData) -> RawFd {
    m.fd().as_fd().as_raw_fd()
}

/// The whole map by `BPF_MAP_LOOKUP_BATCH`; `None` if the kernel refuses it. Keys and values
/// are the map's own types (per-CPU maps are not supported here).
fn batch<K: Pod + Default, V: Pod + Default>(fd: RawFd) -> Option<Vec<(K, V)>> {
    let mut out = Vec::new();
    let mut keys = vec![K::default(); BATCH];
    let mut values = vec![V::default(); BATCH];
    // Hash maps and arrays both use a u32 cursor for in_batch/out_batch (a bucket index, an
    // array index).
    let mut cursor: u32 = 0;
    let mut next: u32 = 0;
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &mut cursor as *mut u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: BATCH as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: attr points to valid buffers of BATCH keys and values, sized as the map's.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        let errno = std::io::Error::last_os_error().raw_os_error();
        let n = attr.count as usize;
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        if ret == 0 {
            cursor = next;
            first = false;
            continue;
        }
        return match errno {
            Some(libc::ENOENT) => Some(out), // done
            _ if first => None,              // not supported: caller iterates
            _ => Some(out),
        };
    }
}
