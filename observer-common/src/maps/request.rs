//! Requests and bios in flight: `INFLIGHT`, `INFLIGHT_SLOTS`, `BIO_QUEUED`, `BIO_SLOTS`,
//! `CHAINED`, `REMAPS`, `UPPER` and their values.

#[cfg(doc)]
use super::*; // the items of the sibling files that the docs link to

/// State of a request in flight, from `block_io_start` (or the flush request's dispatch) to its
/// final completion; or of a bio of a bio-based disk (dm, md: no request ever carries it),
/// from `block_bio_queue` to `block_bio_complete`, with `dispatch_ns` always 0. Timestamps are
/// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, ns); 0 means "not seen".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Inflight {
    /// When the request entered the block layer (ns); 0 for the internal flush request.
    pub enter_ns: u64,
    /// First dispatch to the driver (ns); kept across requeues; 0 while queued.
    pub dispatch_ns: u64,
    /// Bytes completed so far (sum of the partial completions). For a live bio of a bio-based
    /// disk: the bytes of the bios chained to it and counted with it (observer-ebpf chain.rs).
    pub bytes: u64,
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class (see [`crate::class`]), from the flags at entry.
    pub class: u16,
    /// Times the request was requeued (saturating).
    pub requeues: u8,
    /// 1 between a requeue and the next dispatch.
    pub requeued: u8,
    /// First sector (512 B) at entry.
    pub sector: u64,
    /// Size (bytes, `request::__data_len`) at entry, replaced by the size at the first
    /// dispatch (after every merge into it).
    pub size: u32,
    /// Submitter's process id (tgid), captured at entry in the submitting task (0 for the
    /// flush request, which the block layer issues itself).
    pub pid: u32,
    /// Submitter's cgroup v2 id.
    pub cgroup: u64,
    /// Submitter's command name (TASK_COMM_LEN, NUL-padded).
    pub comm: [u8; 16],
    /// The disk's slot in the per-device arrays (`DEVSTATE`, `LOG_RANGES`), looked up in
    /// `DEV_INDEX` once, at entry (the flush request: at dispatch); [`NO_SLOT`] if the disk
    /// had none then.
    pub dev_slot: u32,
    /// Bios in the request at its first dispatch (1 ..= [`crate::dispatch::MAX_BIOS`], or one
    /// more: more than that); 0 until then, and always for the flush request (no bios). For a
    /// bio of a bio-based disk: the bios split off it (`block_split`, saturating) not yet seen
    /// ending on their own, counted as I/Os at its end (observer-ebpf probes/bio_split.rs).
    pub bios: u16,
    /// 1 if its first dispatch was a missed adjacent merge
    /// ([`crate::dispatch::is_missed_merge`]), else 0.
    pub missed: u8,
    /// How the end of a bio of a bio-based disk is seen ([`END_TRACED`], [`END_REMAPPED`],
    /// [`END_CHAINED`]); always [`END_TRACED`] for a request.
    pub end_by: u8,
    /// The cgroup v2 id that owns the I/O: the cgroup its first bio is charged to
    /// (`bio->bi_blkg->blkcg->css.cgroup->kn->id`, set by the block layer when the bio was
    /// created: for write-back, the dirtied inode's owner, not the flusher's), read when the
    /// request enters. 0 when unknown: the flush request (no bio), a kernel without
    /// CONFIG_BLK_CGROUP, a bio without a blkg, or an io controller on a cgroup v1 hierarchy.
    pub owner_cgroup: u64,
}

/// [`Inflight::end_by`]: its own `block_bio_complete` ends it (every request, and most bios).
pub const END_TRACED: u8 = 0;
/// [`Inflight::end_by`]: a bio of a bio-based disk (or a piece split from one) that went down
/// the stack itself, remapped onto a request-based disk (`block_bio_remap`: md raid0 without
/// iostats or on kernels before md_account_bio's clones, NVMe multipath heads): no
/// `block_bio_complete` comes for it (block/blk-mq.c, blk_update_request clears
/// BIO_TRACE_COMPLETION), it ends with the request that carries it (observer-ebpf
/// probes/bio_remap.rs).
pub const END_REMAPPED: u8 = 1;
/// [`Inflight::end_by`]: a bio submitted chained to a bio not yet submitted (`bi_private`, set
/// by block/bio.c bio_chain; block/blk-lib.c blk_next_bio chains each bio of a discard or of
/// a zero-out to the next). Its `block_bio_complete` comes on kernels whose bio_endio traces
/// before it hands a chained bio to its parent (5.11 on); before, it never comes. When the bio
/// it is chained to enters, it is counted with that one and its entry goes (observer-ebpf
/// chain.rs).
pub const END_CHAINED: u8 = 2;

/// `CHAINED`: LRU hash map, the kernel address of a bio not yet seen entering → the
/// [`ChainLink`] of the tracked bio chained to it (observer-ebpf chain.rs).
pub const CHAINED: &str = "CHAINED";
/// Capacity of `CHAINED`: chained bios in flight at once, all disks (least recently used
/// dropped beyond).
pub const CHAINED_ENTRIES: u32 = 4096;

/// `REMAPS`: LRU hash map, the kernel address of a bio remapped from a disk the daemon indexed
/// (`block_bio_remap`) → [`Remap`]: where it came from, until the bio starts a request or an
/// entry below, merges or ends (observer-ebpf inherit.rs).
pub const REMAPS: &str = "REMAPS";
/// Capacity of `REMAPS`: remapped bios between their remap and their request, all disks (least
/// recently used dropped beyond: that bio's request below is then not labelled log, and has no
/// [`UPPER`] link).
pub const REMAP_ENTRIES: u32 = 4096;

/// Value of `REMAPS`: the disk and sector a bio was remapped from.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Remap {
    /// Sector (512 B) on the upper disk (`block_bio_remap`'s `from`).
    pub sector: u64,
    /// The upper disk, as [`mkdev`]; 0 in an empty value (no remap).
    pub dev: u32,
    /// 1 if the bio came from the upper disk's log region (or was a log bio there), else 0.
    pub log: u32,
}

/// `UPPER`: LRU hash map, an entry's `INFLIGHT` key (`struct request *` of a request made from
/// a remapped bio, or `struct bio *` of a remapped bio's entry on a bio-based disk) → [`Upper`]:
/// the upper disk's I/O it serves. Written when the entry is made; never deleted (a reused key
/// has another [`Upper::enter_ns`] than its entry: the daemon ignores it).
pub const UPPER: &str = "UPPER";
/// Capacity of `UPPER`: entries made from remapped bios that are still in flight, all disks
/// (least recently used dropped beyond: such an entry shows no upper I/O).
pub const UPPER_ENTRIES: u32 = 16384;

/// Value of `UPPER`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Upper {
    /// The entry's [`Inflight::enter_ns`] when the link was made (ns): its identity.
    pub enter_ns: u64,
    /// Sector (512 B) on the upper disk the bio was remapped from.
    pub sector: u64,
    /// The upper disk, as [`mkdev`].
    pub dev: u32,
    /// Padding (0).
    pub _pad: u32,
}

/// Value of `CHAINED`: a tracked bio chained to the key (its address, and its entry time as
/// its identity: a struct reused since has another).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ChainLink {
    /// The chained bio's kernel address (its `INFLIGHT` key).
    pub child: u64,
    /// Its [`Inflight::enter_ns`] (ns).
    pub enter_ns: u64,
}

impl Inflight {
    /// Whether the entry holds a request in flight. Entries are kept after completion (marked
    /// free: both timestamps 0) so the next request on the same `struct request` overwrites them
    /// in place instead of inserting: request structs are preallocated per tag and reused.
    pub const fn is_live(&self) -> bool {
        self.enter_ns != 0 || self.dispatch_ns != 0
    }

    /// Whether the request is at the device now (stage `device`): dispatched and not requeued
    /// since. Otherwise a live request is in stage `queue` (waiting for its first dispatch, or
    /// requeued and waiting for the next).
    pub const fn at_device(&self) -> bool {
        self.dispatch_ns != 0 && self.requeued == 0
    }

    /// The bytes (B) a request whose completion was never seen is counted with when it is
    /// counted lost: its whole size (`size`, final at its first dispatch; at entry if that
    /// dispatch was not seen either), or the bytes of the partial completions seen if more. The
    /// kernel's /proc/diskstats counts those bytes (`blk_account_io_completion` adds each
    /// completion's, error or not), so `blkobs_bytes_total` counts them too.
    pub const fn lost_bytes(&self) -> u64 {
        if self.bytes > self.size as u64 {
            self.bytes
        } else {
            self.size as u64
        }
    }

    /// When the request's life started (ns): its entry, or its dispatch for the internal flush
    /// request, which never enters.
    pub const fn start_ns(&self) -> u64 {
        if self.enter_ns != 0 {
            self.enter_ns
        } else {
            self.dispatch_ns
        }
    }
}

/// `BIO_QUEUED`: hash map, a bio's kernel address → [`BioQueued`] for bios whose `BIO_SLOTS`
/// slot another bio holds, from the bio's entry
/// (block_bio_queue) on a request-based disk until it becomes a request (block_io_start, or
/// the fallback entry points), merges into one (block_bio_backmerge/frontmerge) or ends
/// (block_bio_complete: also a bio failed or merged without a tracepoint, e.g. a discard).
pub const BIO_QUEUED: &str = "BIO_QUEUED";
/// Capacity of `BIO_QUEUED`: bios between entry and request at once, all disks.
pub const BIO_QUEUED_ENTRIES: u32 = 16384;

/// Value of `BIO_QUEUED`: a bio that entered the block layer (btt Q) and has no request yet —
/// normally for microseconds; for long while it sleeps for a request slot (tag) or is
/// throttled (rq_qos: write-back throttling, cgroup I/O control).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct BioQueued {
    /// When it entered (ns, CLOCK_MONOTONIC); the entry is removed (slot given back, hash
    /// entry deleted) once the bio got its request, merged or ended.
    pub queue_ns: u64,
    /// First sector (512 B).
    pub sector: u64,
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Size (bytes).
    pub size: u32,
    /// Submitter's process id (tgid).
    pub pid: u32,
    /// Class (see [`crate::class`]) from the bio's flags (`bi_opf`); never [`crate::class::LOG`].
    pub class: u16,
    /// Always 0.
    pub _pad: u16,
}

/// `INFLIGHT_SLOTS`: array of [`SLOTS`] [`Slot`]`<`[`Inflight`]`>`, index [`slot_index`] of the
/// request pointer. Most requests live here; `INFLIGHT` (hash) holds only the requests whose
/// array slot belongs to another `struct request` (see [`Slot`]).
pub const INFLIGHT_SLOTS: &str = "INFLIGHT_SLOTS";
/// `BIO_SLOTS`: array of [`SLOTS`] [`Slot`]`<`[`BioQueued`]`>`, index [`slot_index`] of the bio
/// address, **leased** (see [`Slot`]): a bio holds its slot from its entry until it becomes a
/// request, merges or ends; `BIO_QUEUED` (hash) holds the bios whose slot another live bio holds.
pub const BIO_SLOTS: &str = "BIO_SLOTS";
/// Entries of `INFLIGHT_SLOTS` and `BIO_SLOTS` (a power of two).
pub const SLOTS: u32 = 1 << 14;
/// Map flags of the slot arrays: `BPF_F_MMAPABLE` (include/uapi/linux/bpf.h, Linux 5.5), so the
/// daemon reads them through a read-only mapping (1.5 MiB and 0.75 MiB, scanned in place)
/// instead of copying every slot out with `BPF_MAP_LOOKUP_BATCH` on each scrape.
pub const SLOTS_MAP_FLAGS: u32 = 1 << 10;

/// The slot of a kernel address (a `struct request *` or `struct bio *`) in the direct-mapped
/// arrays: Fibonacci hashing of the address in 64-byte units (both structs are at least
/// cache-line aligned slab or page objects), `0..SLOTS`.
#[inline(always)]
pub const fn slot_index(addr: u64) -> u32 {
    ((addr >> 6).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as u32
}

/// One entry of a direct-mapped slot array (`INFLIGHT_SLOTS`, `BIO_SLOTS`): the value of the
/// kernel object at address `key`. An array lookup is inlined by the verifier (a few ns) where a
/// hash lookup is a helper call (≈ 46 ns here, BENCHMARKS.md "Building blocks").
///
/// Claiming a free slot (`key` 0, `claims` 0) is `claims += 1` with an atomic add (`BPF_XADD`,
/// every kernel with BPF), then `key = addr` only if `claims` reads exactly 1: of CPUs racing
/// for the same free slot at most one wins; losers (and any object whose slot another one
/// holds) use the hash map. So a slot is only ever written by the events of its one holder,
/// never shared by two objects. Two rules of holding:
///
/// - **`INFLIGHT_SLOTS`: owned for good.** Request structs are preallocated per tag and
///   reused, so their set of addresses is small and stable: the first struct to claim a slot
///   keeps it for the map's life, and nearly every request finds its own slot.
/// - **`BIO_SLOTS`: leased.** Bio addresses are many (slab objects: in one minute of fio
///   thousands of addresses competed for slots held for good, and the hash map behind them
///   filled up), but few bios wait between entry and request at once. A bio holds its slot only
///   while it waits: it gives it back (`key = 0`, then `claims -= 1`) when it becomes a request,
///   merges or ends, and a CPU that lost the race takes its add back. Hash entries are
///   deleted at the same moments, so neither map keeps entries of bios that are gone.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Slot<V> {
    /// The owner's kernel address; 0 while the slot is unclaimed.
    pub key: u64,
    /// Claims outstanding (atomic add): the holder's, plus those of CPUs racing for it that
    /// have not taken theirs back yet; the slot is claimed by the one whose add made it 1.
    pub claims: u64,
    /// The owner's value, as in the hash map.
    pub value: V,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that entered at 1,000 ns, 4 KiB at entry.
    fn entered() -> Inflight {
        Inflight {
            enter_ns: 1_000,
            size: 4096,
            ..Inflight::default()
        }
    }

    #[test]
    fn free_entry_is_not_live() {
        // Marked free (observer-ebpf inflight.rs `mark_free`): both timestamps 0, the rest kept.
        let e = Inflight {
            enter_ns: 0,
            dispatch_ns: 0,
            ..entered()
        };
        assert!(!e.is_live());
        assert!(!Inflight::default().is_live());
    }

    #[test]
    fn entered_or_dispatched_entry_is_live() {
        assert!(entered().is_live());
        // The flush request: dispatched, never entered.
        let flush = Inflight {
            dispatch_ns: 5_000,
            ..Inflight::default()
        };
        assert!(flush.is_live());
    }

    #[test]
    fn at_device_between_dispatch_and_requeue() {
        let mut e = entered();
        assert!(!e.at_device(), "queued: not dispatched yet");
        e.dispatch_ns = 2_000;
        assert!(e.at_device());
        // Requeued: back in the queue stage, its first dispatch time kept.
        e.requeued = 1;
        e.requeues = 1;
        assert!(!e.at_device());
        // Dispatched again.
        e.requeued = 0;
        assert!(e.at_device());
    }

    #[test]
    fn lost_bytes_is_the_size_or_the_bytes_seen_if_more() {
        let mut e = entered();
        assert_eq!(e.lost_bytes(), 4096);
        // Partial completions of less than its size.
        e.bytes = 1024;
        assert_eq!(e.lost_bytes(), 4096);
        // More bytes completed than its size at entry (it grew by merges, dispatch unseen).
        e.bytes = 12_288;
        assert_eq!(e.lost_bytes(), 12_288);
        // The flush request: no data.
        assert_eq!(Inflight::default().lost_bytes(), 0);
    }

    #[test]
    fn start_is_entry_or_the_flush_request_dispatch() {
        let mut e = entered();
        e.dispatch_ns = 3_000;
        assert_eq!(e.start_ns(), 1_000);
        let flush = Inflight {
            dispatch_ns: 3_000,
            ..Inflight::default()
        };
        assert_eq!(flush.start_ns(), 3_000);
        assert_eq!(Inflight::default().start_ns(), 0);
    }
}
