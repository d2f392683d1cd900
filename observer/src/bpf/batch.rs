//! Reads whole maps cheaply: the slot arrays through a read-only mapping ([`SlotView`]), hash
//! maps in a few syscalls (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6+) instead of one or two per entry.
//! `INFLIGHT_SLOTS` has 16384 slots and `INFLIGHT` keeps an entry per request struct ever used
//! there, and both are read on every scrape.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use aya::{
    maps::{Array, HashMap, IterableMap, MapData, PerCpuHashMap},
    Pod,
};
use observer_common::maps::{BioQueued, Inflight, Slot, SLOTS};

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

/// One walk of a map with `BPF_MAP_LOOKUP_BATCH`: the kernel's cursor between calls (hash maps
/// and arrays both use a `u32`: a bucket index, an array index; include/uapi/linux/bpf.h).
struct BatchWalk {
    fd: RawFd,
    cursor: u32,
    next: u32,
    started: bool,
}

/// What one [`BatchWalk::call`] returned besides the entries it copied.
enum Batch {
    /// More to read: call again.
    More,
    /// The last bucket was read (`-ENOENT`).
    Done,
    /// The call failed with this errno (`ENOSPC`: the next bucket alone did not fit `count`;
    /// the walk then resumes at that bucket).
    Failed(Option<i32>),
}

impl BatchWalk {
    fn new(fd: RawFd) -> Self {
        BatchWalk {
            fd,
            cursor: 0,
            next: 0,
            started: false,
        }
    }

    /// Asks for up to `count` entries into `keys` and `values` (raw buffers laid out as the
    /// kernel writes them for this map); returns how many it copied, and what next.
    ///
    /// # Safety
    /// `keys` and `values` must be writable for `count` entries of the map's key size and
    /// value layout.
    unsafe fn call(&mut self, keys: *mut u8, values: *mut u8, count: usize) -> (usize, Batch) {
        let mut attr = BatchAttr {
            in_batch: if self.started {
                &mut self.cursor as *mut u32 as u64
            } else {
                0
            },
            out_batch: &mut self.next as *mut u32 as u64,
            keys: keys as u64,
            values: values as u64,
            count: count as u32,
            map_fd: self.fd as u32,
            ..Default::default()
        };
        // SAFETY: the caller's buffers; attr and the cursors live across the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_BATCH,
                &mut attr as *mut BatchAttr,
                std::mem::size_of::<BatchAttr>(),
            )
        };
        let errno = std::io::Error::last_os_error().raw_os_error();
        let n = (attr.count as usize).min(count);
        let step = match (ret, errno) {
            (0, _) => Batch::More,
            (_, Some(libc::ENOENT)) => return (n, Batch::Done),
            (_, e @ Some(libc::ENOSPC)) => Batch::Failed(e),
            (_, e) => return (n, Batch::Failed(e)),
        };
        self.cursor = self.next;
        self.started = true;
        (n, step)
    }
}

/// Where the programs keep the requests they track: a request owns its slot of
/// `INFLIGHT_SLOTS` (index `slot_index(rq)`, `key == rq`), or has an `INFLIGHT` hash entry,
/// never both (observer_common::maps::Slot).
pub struct InflightMaps {
    /// `INFLIGHT`: request pointer → entry, for requests whose slot belongs to another struct.
    pub hash: HashMap<MapData, u64, Inflight>,
    /// `INFLIGHT_SLOTS`: the direct-mapped array (point reads and the reaper's writes).
    pub slots: Array<MapData, Slot<Inflight>>,
    /// The same array, mapped: what [`read_inflight`] scans. One mapping, shared by the
    /// daemon's handles (the scrape's and the reaper's).
    pub view: std::sync::Arc<SlotView<Inflight>>,
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
    let mut out = Vec::new();
    for_each_inflight(maps, |rq, e| out.push((rq, e)));
    out
}

/// Calls `f` with every (request pointer, entry) of [`read_inflight`], the slots read in
/// place (no copy of the array).
pub fn for_each_inflight(maps: &InflightMaps, mut f: impl FnMut(u64, Inflight)) {
    maps.view.for_each(&mut f);
    for (rq, e) in read_hash(&maps.hash) {
        f(rq, e);
    }
}

/// A read-only view of a slot array (`INFLIGHT_SLOTS`, `BIO_SLOTS`: created with
/// [`observer_common::maps::SLOTS_MAP_FLAGS`], `BPF_F_MMAPABLE`), mapped once: reading it scans
/// the kernel's values in place, no syscall and no copy of 16384 slots per read. Where the
/// kernel refuses the mapping (before Linux 5.5) it is read with `BPF_MAP_LOOKUP_BATCH`.
pub struct SlotView<V> {
    fd: std::os::fd::OwnedFd,
    /// The mapping (`SLOTS` values, each `Slot<V>`), or null if mmap failed.
    base: *const Slot<V>,
    /// Length of the mapping in bytes.
    bytes: usize,
}

// SAFETY: the mapping is read-only and only read with volatile loads; the kernel updates it
// concurrently by design (a torn value is the same as a batch lookup racing an update).
unsafe impl<V> Send for SlotView<V> {}
unsafe impl<V> Sync for SlotView<V> {}

impl<V: Pod + Default> SlotView<V>
where
    Slot<V>: Pod,
{
    /// Maps the array behind `map` (a dup of its fd is kept). Errors: dup(2) failing.
    pub fn new(map: &MapData) -> std::io::Result<SlotView<V>> {
        let fd = map.fd().as_fd().try_clone_to_owned()?;
        let page = 4096usize;
        let bytes = (SLOTS as usize * std::mem::size_of::<Slot<V>>()).div_ceil(page) * page;
        // SAFETY: a fresh read-only shared mapping of the map fd; checked for MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        let base = if p == libc::MAP_FAILED {
            tracing::debug!(error = %std::io::Error::last_os_error(), "slot array not mappable; reading it with batch lookups");
            std::ptr::null()
        } else {
            p as *const Slot<V>
        };
        Ok(SlotView { fd, base, bytes })
    }

    /// The claimed slots, as (owner address, value).
    pub fn read(&self) -> Vec<(u64, V)> {
        let mut out = Vec::new();
        self.for_each(|key, v| out.push((key, v)));
        out
    }

    /// Calls `f` with (owner address, value) of every claimed slot, read in place: the scrape
    /// counts live requests without copying the 16384-slot array (1.5 MiB) out first.
    pub fn for_each(&self, mut f: impl FnMut(u64, V)) {
        if self.base.is_null() {
            for (_, s) in batch::<u32, Slot<V>>(self.fd.as_raw_fd()).unwrap_or_default() {
                if s.key != 0 {
                    f(s.key, s.value);
                }
            }
            return;
        }
        for i in 0..SLOTS as usize {
            // SAFETY: i < SLOTS, inside the mapping; volatile reads of plain data.
            let key =
                unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*self.base.add(i)).key)) };
            if key != 0 {
                let s = unsafe { std::ptr::read_volatile(self.base.add(i)) };
                f(s.key, s.value);
            }
        }
    }
}

impl<V> Drop for SlotView<V> {
    fn drop(&mut self) {
        if !self.base.is_null() {
            // SAFETY: the mapping made in `new`, not used after this.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.bytes) };
        }
    }
}

/// Every (key, value) of a hash map.
pub fn read_hash<V: Pod + Default>(map: &HashMap<MapData, u64, V>) -> Vec<(u64, V)> {
    match batch(map_fd(IterableMap::map(map))) {
        Some(v) => v,
        None => map.iter().flatten().collect(),
    }
}

/// Bios between entry and request in `BIO_SLOTS` and `BIO_QUEUED`, as (bio address, entry).
/// A slot read while its bio gives it back may show a stale value under its key: callers
/// filter on `queue_ns != 0` and take the rest as a snapshot, not a transaction.
pub fn read_bios(
    slots: &SlotView<BioQueued>,
    hash: &HashMap<MapData, u64, BioQueued>,
) -> Vec<(u64, BioQueued)> {
    let mut out = slots.read();
    out.extend(read_hash(hash));
    out
}

fn map_fd(m: &MapData) -> RawFd {
    m.fd().as_fd().as_raw_fd()
}

/// The whole map by `BPF_MAP_LOOKUP_BATCH`; `None` if the kernel refuses it or a call fails
/// midway (never a part of the map). Keys and values
/// are the map's own types (per-CPU maps are not supported here).
fn batch<K: Pod + Default, V: Pod + Default>(fd: RawFd) -> Option<Vec<(K, V)>> {
    let mut out = Vec::new();
    // Each buffer below the daemon's mmap threshold (see PERCPU_BATCH_BYTES): 4096 `Inflight`
    // values (320 KiB) were a fresh mapping per call, and its page faults ≈ 14 % of the
    // daemon's CPU under scrape load (perf).
    let count = (PERCPU_BATCH_BYTES / std::mem::size_of::<K>().max(std::mem::size_of::<V>()))
        .clamp(1, BATCH);
    let mut keys = vec![K::default(); count];
    let mut values = vec![V::default(); count];
    let mut walk = BatchWalk::new(fd);
    loop {
        // SAFETY: `count` keys and values, sized as the map's.
        let (n, step) = unsafe {
            walk.call(
                keys.as_mut_ptr() as *mut u8,
                values.as_mut_ptr() as *mut u8,
                count,
            )
        };
        out.extend(keys[..n].iter().copied().zip(values[..n].iter().copied()));
        match step {
            Batch::More => {}
            Batch::Done => return Some(out),
            // Refused (not supported), or failed midway: never a partial map, the caller
            // reads it entry by entry.
            Batch::Failed(e) => {
                tracing::debug!(errno = ?e, read = out.len(), "BPF_MAP_LOOKUP_BATCH failed; reading entry by entry");
                return None;
            }
        }
    }
}

/// Bytes of per-CPU values [`read_percpu_hash`] asks the kernel for per `BPF_MAP_LOOKUP_BATCH`
/// call (at least one entry's): below glibc's mmap threshold as the daemon sets it
/// (`daemon::tune_allocator`, 128 KiB), so the buffer comes from the heap, not from a fresh
/// mapping (page faults) on every scrape. `CLASS_STATS` on 2 CPUs: 8 entries of 13,664 bytes.
pub const PERCPU_BATCH_BYTES: usize = 120 * 1024;

/// Every key of a per-CPU hash map (`BPF_MAP_TYPE_PERCPU_HASH`) with its values on every
/// possible CPU folded into one `A`: `init(key)` once per key, then `add(acc, value)` once per
/// possible CPU, in CPU order (the order `bpf_map_lookup_elem` returns them in). Read with
/// `BPF_MAP_LOOKUP_BATCH` ([`batch_percpu_hash`], a handful of syscalls for the whole map);
/// where the kernel refuses it (before Linux 5.6) or a call fails midway, entry by entry with
/// aya (two syscalls per entry: next key, lookup), skipping entries deleted meanwhile. Never a
/// part of the map from the batch path: what it read is dropped before the fallback.
pub fn read_percpu_hash<K, V, A>(
    map: &PerCpuHashMap<MapData, K, V>,
    mut init: impl FnMut(&K) -> A,
    mut add: impl FnMut(&mut A, &V),
) -> Vec<(K, A)>
where
    K: Pod + Default,
    V: Pod,
{
    if let Some(v) = batch_percpu_hash(map, PERCPU_BATCH_BYTES, &mut init, &mut add) {
        return v;
    }
    map.iter()
        .flatten()
        .map(|(k, values)| {
            let mut a = init(&k);
            for v in values.iter() {
                add(&mut a, v);
            }
            (k, a)
        })
        .collect()
}

/// The batch path of [`read_percpu_hash`] alone (for tests: `None` says the kernel refused or a
/// call failed, and nothing was returned). `budget` is the bytes of values asked for per call;
/// a bucket holding more entries than that (the kernel copies whole buckets, `ENOSPC`) is
/// retried with a buffer twice as large.
///
/// The layout is the kernel's (kernel/bpf/hashtab.c, `__htab_map_lookup_and_delete_batch`):
/// keys packed at `key_size` bytes, each entry's values as `round_up(value_size, 8)` bytes per
/// possible CPU (`num_possible_cpus()`, which `aya::util::nr_cpus` counts from
/// /sys/devices/system/cpu/possible); `in_batch`/`out_batch` a `u32` bucket index; `-ENOENT`
/// once the last bucket was read.
pub fn batch_percpu_hash<K, V, A>(
    map: &PerCpuHashMap<MapData, K, V>,
    budget: usize,
    mut init: impl FnMut(&K) -> A,
    mut add: impl FnMut(&mut A, &V),
) -> Option<Vec<(K, A)>>
where
    K: Pod + Default,
    V: Pod,
{
    let fd = map_fd(IterableMap::map(map));
    let cpus = aya::util::nr_cpus().ok()?.max(1);
    let stride = std::mem::size_of::<V>().next_multiple_of(8);
    let entry = stride * cpus;
    // In u64 words: 8-aligned, so every value (at a multiple of 8 bytes) is aligned for V
    // when V's alignment is at most 8; otherwise it is copied out unaligned.
    let words = |n: usize| n * entry / 8;
    let mut count = (budget / entry).max(1);
    let mut keys = vec![K::default(); count];
    let mut values = vec![0u64; words(count)];
    let mut out = Vec::new();
    let mut walk = BatchWalk::new(fd);
    loop {
        // SAFETY: buffers of `count` keys and `count` entries of per-CPU values, laid out as
        // the kernel writes them (above).
        let (n, step) = unsafe {
            walk.call(
                keys.as_mut_ptr() as *mut u8,
                values.as_mut_ptr() as *mut u8,
                count,
            )
        };
        let bytes = values.as_ptr() as *const u8;
        for (i, k) in keys[..n].iter().enumerate() {
            let mut a = init(k);
            for cpu in 0..cpus {
                // SAFETY: inside the values the kernel wrote (i < n <= count entries); plain
                // data (Pod), 8-aligned when V needs no more.
                let p = unsafe { bytes.add(i * entry + cpu * stride) } as *const V;
                if std::mem::align_of::<V>() <= 8 {
                    add(&mut a, unsafe { &*p });
                } else {
                    // SAFETY: as above; read_unaligned copies a value that may be misaligned.
                    add(&mut a, &unsafe { std::ptr::read_unaligned(p) });
                }
            }
            out.push((*k, a));
        }
        match step {
            Batch::More => {}
            Batch::Done => return Some(out),
            // The next bucket alone does not fit (nothing copied; the walk resumes at that
            // bucket): again with room for twice as many entries.
            Batch::Failed(Some(libc::ENOSPC)) if n == 0 && count < (1 << 20) => {
                count *= 2;
                keys = vec![K::default(); count];
                values = vec![0u64; words(count)];
            }
            // Refused (not supported), or failed midway: never a partial map.
            Batch::Failed(e) => {
                tracing::debug!(errno = ?e, read = out.len(), "BPF_MAP_LOOKUP_BATCH (per-CPU) failed; reading entry by entry");
                return None;
            }
        }
    }
}
