//! Layouts of the BPF maps shared by the programs and the daemon.
//!
//! | map | type | key | value |
//! |---|---|---|---|
//! | `INFLIGHT_SLOTS` | array of [`SLOTS`], index [`slot_index`]`(rq)` | [`Slot`]`<`[`Inflight`]`>` (key: `struct request *`) |
//! | `INFLIGHT` | hash | `struct request *` as u64 | [`Inflight`] (requests whose slot another struct owns; and, keyed by `struct bio *`, the bios of bio-based disks — dm, md, zram — from `block_bio_queue` to `block_bio_complete`, never dispatched) |
//! | `BIO_SLOTS` | array of [`SLOTS`], index [`slot_index`]`(bio)` | [`Slot`]`<`[`BioQueued`]`>` (key: `struct bio *`) |
//! | `BIO_QUEUED` | hash | `struct bio *` as u64 | [`BioQueued`] (bios whose leased slot another bio holds) |
//! | `CLASS_STATS` | per-CPU hash | [`ClassKey`] | [`ClassStats`] |
//! | `ERRORS` | per-CPU hash | [`ErrorKey`] | u64 count |
//! | `COUNTERS` | per-CPU array | [`Counter`] as u32 | u64 |
//! | `ZERO` | per-CPU array, 1 entry | 0 | [`ClassStats`] (always zero; template for inserts) |
//! | `DEV_INDEX` | hash, [`DEV_SLOTS`] entries | disk as [`mkdev`] (u32) | its slot (u32, 1 ≤ slot < [`DEV_SLOTS`]; written by the daemon only) |
//! | `DEVSTATE` | array of [`DEV_SLOTS`], index = slot | [`DevState`] (`dev` written by the daemon) |
//! | `LOG_RANGES` | array of [`DEV_SLOTS`], index = slot | [`LogRanges`] (written by the daemon only) |
//! | `MERGE_PAIRS` | per-CPU array of [`MERGE_PAIRS_PER_CPU`], index = cursor mod size | [`MissedMerge`]: each CPU's latest missed adjacent merges |
//! | `MERGE_CURSOR` | per-CPU array, 1 entry | u64: pairs written to `MERGE_PAIRS` on that CPU, ever |
//! | `OWNER_STATS` | per-CPU hash, [`OWNER_STATS_ENTRIES`] | [`OwnerKey`] | [`OwnerStats`] (only while [`Settings::owner_stats`] is 1) |
//!
//! **Per-device slots.** The daemon gives every disk it sees (with media, in `/sys/block`) its
//! own slot of the per-device arrays and publishes it in `DEV_INDEX`: no two disks ever share
//! one, whatever their device numbers, up to [`DEV_SLOT_LIMIT`] disks. The programs look the
//! slot up once per request, when it enters (or, for the flush request, at its dispatch), and
//! keep it in [`Inflight::slot`]; dispatch and completion index the arrays with it directly.
//! The lookup goes through a small per-CPU cache (`SLOT_CACHE`, validated against
//! `LOG_RANGES[slot].dev`), so most requests find their slot with array lookups only.

use crate::{hist::NBUCKETS, merges::DispatchHist, Stage};

/// `SETTINGS`: array of one [`Settings`], written by the daemon.
pub const SETTINGS: &str = "SETTINGS";
/// `DEVSTATE`: array of [`DEV_SLOTS`] [`DevState`], indexed by a disk's slot (`DEV_INDEX`).
pub const DEVSTATE: &str = "DEVSTATE";
/// `EVENTS`: ring buffer of [`SlowEvent`] and [`StallEvent`].
pub const EVENTS: &str = "EVENTS";
/// Default size of `EVENTS` (bytes, a power of two).
pub const EVENTS_BYTES: u32 = 1 << 20;

/// Map names, as the programs declare them.
pub const INFLIGHT: &str = "INFLIGHT";
/// See module docs.
pub const CLASS_STATS: &str = "CLASS_STATS";
/// See module docs.
pub const ERRORS: &str = "ERRORS";
/// See module docs.
pub const COUNTERS: &str = "COUNTERS";

/// See module docs.
pub const LOG_RANGES: &str = "LOG_RANGES";
/// See module docs: disk ([`mkdev`]) → slot.
pub const DEV_INDEX: &str = "DEV_INDEX";
/// Ranges per disk in [`LogRanges`]; more are dropped by the daemon with a warning.
pub const LOG_RANGES_MAX: usize = 8;

/// Default capacity of `INFLIGHT` (requests tracked at once, all devices).
pub const INFLIGHT_DEFAULT_ENTRIES: u32 = 16384;

/// A device number as the kernel's `MKDEV(major, minor)`: `major << 20 | minor`. Requests are
/// keyed by their disk (`gendisk`), so a partition's I/O is attributed to the whole disk.
pub const fn mkdev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xfffff)
}

/// Major number of a [`mkdev`] value.
pub const fn dev_major(dev: u32) -> u32 {
    dev >> 20
}

/// Minor number of a [`mkdev`] value.
pub const fn dev_minor(dev: u32) -> u32 {
    dev & 0xfffff
}

/// (major, minor) of a device number in the *userspace* `dev_t` encoding the kernel stores on
/// disk, e.g. ext4's `s_journal_dev`: `new_decode_dev()` in include/linux/kdev_t.h (the same as
/// glibc's `gnu_dev_major`/`gnu_dev_minor` for 32-bit values). Not the [`mkdev`] encoding of
/// [`dev_major`]/[`dev_minor`]: `0x0703` is 7:3 here and 0:1795 there.
pub const fn decode_user_dev(d: u32) -> (u32, u32) {
    ((d >> 8) & 0xfff, (d & 0xff) | ((d >> 12) & 0xfff00))
}

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
    /// Bytes completed so far (sum of the partial completions).
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
    pub slot: u32,
    /// Bios in the request at its first dispatch (1 ..= [`crate::merges::MAX_BIOS`], or one
    /// more: more than that); 0 until then, and always for the flush request (no bios).
    pub bios: u16,
    /// 1 if its first dispatch was a missed adjacent merge
    /// ([`crate::merges::is_missed_merge`]), else 0.
    pub missed: u8,
    /// Always 0.
    pub _pad: u8,
    /// The cgroup v2 id that owns the I/O: the cgroup its first bio is charged to
    /// (`bio->bi_blkg->blkcg->css.cgroup->kn->id`, set by the block layer when the bio was
    /// created: for write-back, the dirtied inode's owner, not the flusher's), read when the
    /// request enters. 0 when unknown: the flush request (no bio), a kernel without
    /// CONFIG_BLK_CGROUP, a bio without a blkg, or an io controller on a cgroup v1 hierarchy.
    pub owner_cgroup: u64,
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

/// Entries of the per-device arrays (`DEVSTATE`, `LOG_RANGES`) and of `DEV_INDEX`. Slot 0 is
/// never given to a disk ([`NO_SLOT`]), so [`DEV_SLOT_LIMIT`] disks have one.
pub const DEV_SLOTS: u32 = 1024;

/// The slot of a disk that has none (not indexed yet, or more than [`DEV_SLOT_LIMIT`] disks):
/// its requests are neither classified as filesystem log writes nor stall-tracked, and are
/// counted in [`Counter::Unindexed`]. Entry 0 of the per-device arrays is never written.
pub const NO_SLOT: u32 = 0;

/// How many disks get a slot of their own, each a different one (slots 1 to
/// [`DEV_SLOTS`]` - 1`): any set of up to this many disks is fully classified and
/// stall-tracked; the daemon reports the others as degraded.
pub const DEV_SLOT_LIMIT: u32 = DEV_SLOTS - 1;

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

/// Key of `CLASS_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class (see [`crate::class`]).
    pub class: u16,
    /// Always 0.
    pub _pad: u16,
}

/// One stage's latency histogram: sum in ns and counts per [`crate::hist`] bucket.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StageHist {
    /// Sum of the latencies recorded (ns).
    pub sum_ns: u64,
    /// Counts per bucket; the last is the overflow bucket.
    pub buckets: [u64; NBUCKETS],
}

/// Everything recorded for one (device, class), per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ClassStats {
    /// Histograms indexed by [`Stage`] as usize.
    pub stages: [StageHist; Stage::COUNT],
    /// Requests completed (final completion only).
    pub requests: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Merges: bios merged into a request of this class plus requests merged away.
    pub merges: u64,
    /// Requeues of completed requests.
    pub requeues: u64,
    /// Completed requests that exceeded their op's slow threshold (see [`Settings`]).
    pub slow: u64,
    /// Latest final completion on this (device, class) on this CPU (ns), 0 if none.
    pub last_complete_ns: u64,
    /// Requests counted in `requests` whose completion was never seen (the struct was reused
    /// or the kernel reported none in flight), so no latency or bytes were recorded.
    pub lost: u64,
    /// Final completions of requests never seen entering (in flight before the programs were
    /// attached): not in `requests`, no latency. Classified by the flags at completion.
    pub untracked: u64,
    /// Size, merged bios and missed merges at the first dispatch of the requests counted in
    /// `requests` (lost ones included) that were dispatched with bios.
    pub dispatch: DispatchHist,
}

impl ClassStats {
    /// An all-zero value.
    pub const ZERO: ClassStats = ClassStats {
        stages: [StageHist {
            sum_ns: 0,
            buckets: [0; NBUCKETS],
        }; Stage::COUNT],
        requests: 0,
        bytes: 0,
        merges: 0,
        requeues: 0,
        slow: 0,
        last_complete_ns: 0,
        lost: 0,
        untracked: 0,
        dispatch: DispatchHist::ZERO,
    };
}

/// Key of `ERRORS`: completions with a non-zero `blk_status_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class of the request (0 when untracked: op read, no flags).
    pub class: u16,
    /// The `blk_status_t` value (include/linux/blk_types.h, e.g. 10 = BLK_STS_IOERR).
    pub status: u8,
    /// Always 0.
    pub _pad: u8,
}

/// Runtime settings the daemon writes into the `SETTINGS` array (one element) and may update
/// while running.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Slow-request thresholds (ns) per [`crate::class::Op`] code and [`Stage`] index:
    /// a completed request is reported when any stage exceeds its threshold. 0 disables a stage.
    pub slow_ns: [[u64; Stage::COUNT]; 6],
    /// A stall episode is reported when a device goes longer than this (ns) without completing
    /// (or dispatching) while it has requests outstanding (or queued).
    pub stall_ns: u64,
    /// Missed adjacent merges: the most time (ns) between two dispatches on a device for the
    /// second to count as one ([`crate::merges::is_missed_merge`]); 0 disables the check.
    pub merge_window_ns: u64,
    /// 1: completed requests are also counted per owner cgroup in `OWNER_STATS`
    /// (`[metrics] cgroup_label`); 0: not (no map access at completion).
    pub owner_stats: u64,
}

/// `OWNER_STATS`: per-CPU hash, [`OwnerKey`] → [`OwnerStats`], written at completion only
/// while [`Settings::owner_stats`] is 1; [`Counter::OwnerStatsFull`] counts the requests it
/// had no room for.
pub const OWNER_STATS: &str = "OWNER_STATS";
/// Capacity of `OWNER_STATS`: (disk, class, owner cgroup) triples (preallocated: 16 bytes
/// per CPU each, 64 KiB per CPU).
pub const OWNER_STATS_ENTRIES: u32 = 4096;

/// Key of `OWNER_STATS`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerKey {
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Class (see [`crate::class`]).
    pub class: u16,
    /// Always 0.
    pub _pad: u16,
    /// Owner cgroup v2 id ([`Inflight::owner_cgroup`]; 0 = unknown).
    pub cgroup: u64,
}

/// Value of `OWNER_STATS`, per CPU: what [`ClassStats::requests`] and [`ClassStats::bytes`]
/// count, for one owner cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OwnerStats {
    /// Requests completed (lost ones included, as in `ClassStats::requests`).
    pub requests: u64,
    /// Bytes completed.
    pub bytes: u64,
}

/// Per-device state in `DEVSTATE`, shared by all CPUs (updated with plain stores: the latest
/// writer wins, which is the latest event up to a few ns). The daemon writes a slot's `dev`
/// (and zero times) when it gives the slot to a disk, and zeroes it when the disk goes; the
/// programs only use a slot whose `dev` is the request's disk.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevState {
    /// The disk owning this slot ([`mkdev`]); 0 while unused.
    pub dev: u32,
    /// Always 0.
    pub _pad: u32,
    /// Latest final completion on the device (ns).
    pub last_complete_ns: u64,
    /// Latest dispatch on the device (ns).
    pub last_dispatch_ns: u64,
    /// First sector (512 B) of the request dispatched at `last_dispatch_ns`.
    pub last_sector: u64,
    /// Its length in 512-byte sectors (`__data_len >> 9`; 0 for the flush request).
    pub last_sectors: u32,
    /// Its class (see [`crate::class`]).
    pub last_class: u16,
    /// Always 0.
    pub _pad2: u16,
}

/// `MERGE_PAIRS`: per-CPU array of [`MERGE_PAIRS_PER_CPU`] [`MissedMerge`], each CPU's ring of
/// its latest missed adjacent merges (written at `MERGE_CURSOR % MERGE_PAIRS_PER_CPU`).
pub const MERGE_PAIRS: &str = "MERGE_PAIRS";
/// `MERGE_CURSOR`: per-CPU array of one u64, the pairs each CPU has written, ever.
pub const MERGE_CURSOR: &str = "MERGE_CURSOR";
/// Entries per CPU of `MERGE_PAIRS`.
pub const MERGE_PAIRS_PER_CPU: u32 = 64;

/// A missed adjacent merge: request `second` was dispatched on `dev` right after request
/// `first`, with the same op, starting at the sector where `first` ended, within the window
/// ([`Settings::merge_window_ns`]). Sectors are 512-byte units of the whole disk, times
/// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC, ns) of each request's dispatch (block_rq_issue).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MissedMerge {
    /// Disk, as [`mkdev`]; 0 for an entry never written.
    pub dev: u32,
    /// Class of the second request (see [`crate::class`]).
    pub class: u16,
    /// Class of the first request.
    pub first_class: u16,
    /// First sector of the second request.
    pub sector: u64,
    /// First sector of the first request (`first_sector + first_sectors == sector`).
    pub first_sector: u64,
    /// Length of the second request (sectors).
    pub sectors: u32,
    /// Length of the first request (sectors).
    pub first_sectors: u32,
    /// Dispatch of the second request (ns).
    pub dispatch_ns: u64,
    /// Dispatch of the first request (ns).
    pub first_dispatch_ns: u64,
}

/// `EVENTS` ring buffer record kinds ([`SlowEvent::kind`], [`StallEvent::kind`]).
pub const EVENT_SLOW: u32 = 1;
/// See [`EVENT_SLOW`].
pub const EVENT_STALL: u32 = 2;

/// A completed request that exceeded a slow threshold. Times are `bpf_ktime_get_ns()` (ns).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SlowEvent {
    /// [`EVENT_SLOW`].
    pub kind: u32,
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// Entry state of the request, at its final completion.
    pub req: Inflight,
    /// Final completion (ns).
    pub complete_ns: u64,
    /// Bios in the request at completion minus one: bio merges into it (capped at 63).
    pub merges: u32,
    /// `blk_status_t` of the final completion.
    pub status: u32,
}

/// Stall episode kinds ([`StallEvent::stall`]).
pub const STALL_DEVICE: u32 = 0;
/// See [`STALL_DEVICE`].
pub const STALL_DISPATCH: u32 = 1;

/// A stall episode that just ended: [`STALL_DEVICE`]: requests were at the device and none
/// completed from `start_ns` to `end_ns`; [`STALL_DISPATCH`]: requests were queued and none
/// was dispatched.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StallEvent {
    /// [`EVENT_STALL`].
    pub kind: u32,
    /// Disk, as [`mkdev`].
    pub dev: u32,
    /// [`STALL_DEVICE`] or [`STALL_DISPATCH`].
    pub stall: u32,
    /// Class of the request whose completion (dispatch) ended the episode.
    pub class: u32,
    /// Start (ns).
    pub start_ns: u64,
    /// End (ns).
    pub end_ns: u64,
}

/// Indexes of the global counters in `COUNTERS`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Unused since untracked completions are counted per device and class
    /// ([`ClassStats::untracked`]); the slot keeps the other counters' indices.
    Reserved0 = 0,
    /// Requests not tracked because `INFLIGHT` was full.
    InflightFull = 1,
    /// Completions not aggregated because `CLASS_STATS` was full.
    StatsFull = 2,
    /// Timestamps that went backwards (never expected; such samples are dropped).
    ClockAnomalies = 3,
    /// Requests seen dispatched twice without a requeue or completion in between (a lost
    /// completion, counted in `ClassStats::lost`); the stale state was reset.
    StaleEntries = 4,
    /// Slow-request or stall events lost because the `EVENTS` ring buffer was full.
    EventsDropped = 5,
    /// Bios whose entry time was not kept because `BIO_QUEUED` was full: their request's
    /// queue stage starts at its creation instead.
    BioQueuedFull = 6,
    /// Requests (and flush-request dispatches) on a disk without a slot in `DEV_INDEX` (not
    /// indexed by the daemon yet, or beyond [`DEV_SLOT_LIMIT`]): counted and aggregated, but
    /// not classified as log writes and not stall-tracked.
    Unindexed = 7,
    /// Completed requests not counted per owner cgroup because `OWNER_STATS` was full (they
    /// are counted in `CLASS_STATS` as every request).
    OwnerStatsFull = 8,
}

impl Counter {
    /// Number of counters.
    pub const COUNT: u32 = 9;

    /// The counter at index `i` of `COUNTERS` (the kernel-side diagnostics log the index:
    /// observer-ebpf `maps::count`); `None` past [`Counter::COUNT`].
    pub const fn from_index(i: u32) -> Option<Counter> {
        Some(match i {
            0 => Counter::Reserved0,
            1 => Counter::InflightFull,
            2 => Counter::StatsFull,
            3 => Counter::ClockAnomalies,
            4 => Counter::StaleEntries,
            5 => Counter::EventsDropped,
            6 => Counter::BioQueuedFull,
            7 => Counter::Unindexed,
            8 => Counter::OwnerStatsFull,
            _ => return None,
        })
    }

    /// The counter's name as the daemon's metrics and its log spell it: the `reason` label of
    /// `blkobs_dropped_requests_total` for the map-full drops, else the metric's stem.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Reserved0 => "reserved",
            Counter::InflightFull => "inflight_map_full",
            Counter::StatsFull => "stats_map_full",
            Counter::ClockAnomalies => "clock_anomalies",
            Counter::StaleEntries => "stale_requests",
            Counter::EventsDropped => "events_dropped",
            Counter::BioQueuedFull => "bio_queue_map_full",
            Counter::Unindexed => "unindexed_requests",
            Counter::OwnerStatsFull => "owner_stats_map_full",
        }
    }
}

/// One filesystem log range on a whole disk: `[start, end)` in 512-byte sectors, as
/// `struct request::__sector` counts them (partition offset already added).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SectorRange {
    /// First sector (inclusive).
    pub start: u64,
    /// End sector (exclusive).
    pub end: u64,
}

/// Value of `LOG_RANGES`: the log (journal) ranges on one disk. A request whose first sector is
/// inside one of `ranges[..count]` gets [`crate::class::LOG`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogRanges {
    /// Valid entries in `ranges` (≤ [`LOG_RANGES_MAX`]).
    pub count: u32,
    /// The disk these ranges belong to ([`mkdev`]), at its slot (`DEV_INDEX`) of `LOG_RANGES`;
    /// the programs ignore the entry for any other disk.
    pub dev: u32,
    /// The ranges; entries past `count` are ignored.
    pub ranges: [SectorRange; LOG_RANGES_MAX],
}

impl LogRanges {
    /// Whether `sector` (512-byte units on the whole disk) is inside one of the ranges. The
    /// eBPF side runs the same bounded loop.
    #[inline(always)]
    pub fn contains(&self, sector: u64) -> bool {
        let mut i = 0;
        while i < LOG_RANGES_MAX {
            if i as u32 >= self.count {
                break;
            }
            let r = &self.ranges[i];
            if sector >= r.start && sector < r.end {
                return true;
            }
            i += 1;
        }
        false
    }
}

#[cfg(feature = "user")]
mod pod {
    unsafe impl aya::Pod for super::LogRanges {}
    unsafe impl aya::Pod for super::Inflight {}
    unsafe impl aya::Pod for super::BioQueued {}
    unsafe impl aya::Pod for super::ClassKey {}
    unsafe impl aya::Pod for super::ClassStats {}
    unsafe impl aya::Pod for super::ErrorKey {}
    unsafe impl aya::Pod for super::Settings {}
    unsafe impl aya::Pod for super::DevState {}
    unsafe impl aya::Pod for super::MissedMerge {}
    unsafe impl aya::Pod for super::OwnerKey {}
    unsafe impl aya::Pod for super::OwnerStats {}
    // Two u64 then the value: no padding for values whose size is a multiple of 8, as every
    // slot value's is (`slot_values_have_no_padding`).
    unsafe impl<V: aya::Pod> aya::Pod for super::Slot<V> {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Inflight` is read by the daemon (INFLIGHT, inside `SlowEvent`): no implicit padding,
    /// 8-byte aligned size.
    #[test]
    fn inflight_layout() {
        assert_eq!(core::mem::size_of::<Inflight>(), 88);
        assert_eq!(core::mem::offset_of!(Inflight, owner_cgroup), 80);
        assert_eq!(core::mem::offset_of!(Inflight, slot), 72);
        assert_eq!(core::mem::size_of::<SlowEvent>(), 112);
        assert_eq!(core::mem::size_of::<OwnerKey>(), 16);
        assert_eq!(core::mem::offset_of!(Inflight, bios), 76);
        assert_eq!(core::mem::size_of::<MissedMerge>(), 48);
        assert_eq!(core::mem::size_of::<DevState>(), 40);
    }

    #[test]
    fn slot_values_have_no_padding() {
        assert_eq!(core::mem::size_of::<Slot<Inflight>>(), 16 + 88);
        assert_eq!(core::mem::size_of::<Slot<BioQueued>>(), 16 + 32);
    }

    /// Request structs (tag-set pages, a few hundred bytes apart) spread over the slots: 4096
    /// structs 384 B apart take at least 3/4 of their own slots.
    #[test]
    fn slot_index_spreads_request_structs() {
        let base = 0xffff_8881_0a00_0000u64;
        let mut seen = std::collections::HashSet::new();
        for k in 0..4096u64 {
            let i = slot_index(base + k * 384);
            assert!(i < SLOTS);
            seen.insert(i);
        }
        assert!(seen.len() > 3072, "{} distinct slots", seen.len());
    }

    #[test]
    fn user_dev_t_decoding() {
        assert_eq!(decode_user_dev(0x0703), (7, 3));
        assert_eq!(
            decode_user_dev((259 << 8) | 0x05 | (0x100 << 12)),
            (259, 0x105)
        );
        assert_eq!(
            (dev_major(mkdev(259, 0x105)), dev_minor(mkdev(259, 0x105))),
            (259, 0x105)
        );
    }
}
