//! The entry of a request: created when it enters, found by later tracepoints, freed (kept for
//! the next request on the same struct) when it completes. It lives in the request pointer's
//! slot of `INFLIGHT_SLOTS` if the struct owns that slot (nearly always), else in the
//! `INFLIGHT` hash map (observer_common::maps::Slot).
use core::ptr::addr_of_mut;

use aya_ebpf::{
    bindings::{BPF_ANY, BPF_NOEXIST},
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::{Array, LruHashMap},
};
use observer_common::{
    class::{classify, with_ioprio, Op},
    layout::KernelLayout,
    maps::{
        Counter, Inflight, Remap, Slot, END_CHAINED, END_REMAPPED, END_TRACED, SLOTS,
        SLOTS_MAP_FLAGS,
    },
};
use observer_ebpf::{
    kernel::{bio_owner, disk_dev, original_flags, read, rq_dev, rq_ioprio},
    slots::{claim, owned},
    store::{add, fill, put},
};

/// Request pointer → entry, direct-mapped (observer_common::maps::INFLIGHT_SLOTS).
#[map]
pub static INFLIGHT_SLOTS: Array<Slot<Inflight>> = Array::with_max_entries(SLOTS, SLOTS_MAP_FLAGS);

use crate::{
    chain::{entered_at, folded_into, hidden_end, link},
    inherit,
    maps::{
        addr_number, count, count_dispatch, dev_slot, log_class, owner_count, stats, INFLIGHT,
        ZERO_INFLIGHT,
    },
    queued::queued_at,
};

/// Starts tracking a request that entered the block layer, with its original cmd_flags. `now`
/// is the tracepoint's time (ns), or 0 (block_io_start): the entry is then the first bio's
/// entry (btt Q) if seen, else the clock — no clock read for nearly every request.
///
/// An existing entry for the same `struct request *` means the struct was freed and reused
/// since we saw it enter: its completion never reached `block_rq_complete` here. With
/// `replace`, that request is counted as completed with its latency lost, and replaced.
///
/// With `link_upper`, a request made from a remapped bio is linked to the upper I/O it serves
/// (inherit.rs `UPPER`); without (a request first seen at its completion: that program is
/// within 32 bytes of the 512-byte stack limit on 5.10), it only takes the bio's log class.
#[inline(always)]
pub fn enter(
    rq: u64,
    now: u64,
    dispatch_ns: u64,
    replace: bool,
    link_upper: bool,
    l: &KernelLayout,
) {
    let mut enter_ns = now;
    if l.enter_fallback != 0 {
        // Seen late (insert, issue or completion; kernels before 6.5 have no block_io_start):
        // the kernel's own allocation time is the entry.
        let start: u64 = read(rq, l.rq_start_time_ns);
        if start != 0 && start <= now {
            enter_ns = start;
        }
    }
    let sector: u64 = read(rq, l.rq_sector);
    let bio: u64 = read(rq, l.rq_bio);
    // The queue stage starts when the first bio entered (btt Q), if seen: before the request
    // existed (a tag wait, throttling) and, on the fallback kernels, before the insert.
    if let Some(q) = queued_at(bio) {
        if enter_ns == 0 || q < enter_ns {
            enter_ns = q;
        }
    }
    if enter_ns == 0 {
        // block_io_start passes no time of its own and the first bio's entry was not seen (a
        // split bio, or one that entered before the programs were attached). Not
        // `rq->start_time_ns`: at this tracepoint it may still hold the previous request's
        // value (block/blk-mq.c, blk_account_io_start sets it just after trace_block_io_start
        // when only I/O accounting needs it; seen as > 67 s latencies of split write-back
        // writes). The clock.
        // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
        enter_ns = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    }
    let Some(e) = entry(rq, replace) else { return };
    let dev = rq_dev(rq, l);
    // The disk's slot, looked up once here and kept in the entry for dispatch and completion.
    let disk_slot = dev_slot(dev);
    // The mark is taken by the call that makes the entry, here: before 6.5 `enter` is also
    // reached from tracepoints that find the request entered already (inherit.rs).
    let (class_up, up) = if link_upper {
        let up = inherit::take(bio);
        (inherit::class_of(&up), up)
    } else {
        (inherit::take_class(bio), Remap::default())
    };
    let class = classify(original_flags(rq, l), l) | log_class(dev, disk_slot, sector) | class_up;
    // The priority class, read once here so that every count of the request has it: its
    // completion, a lost completion, `/inflight` (class.rs IOPRIO_MASK).
    let class = with_ioprio(class, rq_ioprio(rq, bio, l));
    // SAFETY: `e` is `rq`'s entry from [`entry`] (its own INFLIGHT_SLOTS slot, or its INFLIGHT
    // element; non-null), valid while the program runs, and no reference to it is live here:
    // `fill`'s, `submitter`'s and `put`'s contracts hold.
    unsafe {
        fill(
            e,
            enter_ns,
            dispatch_ns,
            dev,
            disk_slot,
            class,
            sector,
            read(rq, l.rq_data_len),
        );
        // The submitting task: block_io_start runs in its context (never in an interrupt).
        submitter(e);
        // The owner: the first bio's cgroup (a request merging bios of several cgroups is
        // counted for its first bio's; bios merged later are not read).
        put(addr_of_mut!((*e).owner_cgroup), bio_owner(bio));
    }
    if link_upper {
        inherit::link(rq, enter_ns, &up);
    }
}

/// Writes the current task's pid (tgid), cgroup v2 id and command name into `e`.
///
/// # Safety
///
/// `e` must point at a writable, aligned `Inflight` (a map value from a non-null lookup or a
/// claimed slot) that no live reference points into.
#[inline(always)]
// SAFETY: bpf_get_current_pid_tgid and bpf_get_current_cgroup_id take no argument;
// bpf_get_current_comm writes exactly the 16 bytes it is given, `comm` ([u8; 16]) of the valid
// `*e`; the `put`s write fields of `*e` (the caller's contract).
unsafe fn submitter(e: *mut Inflight) {
    put(
        addr_of_mut!((*e).pid),
        (bpf_get_current_pid_tgid() >> 32) as u32,
    );
    put(addr_of_mut!((*e).cgroup), bpf_get_current_cgroup_id());
    // Writes all 16 bytes (zeros on failure).
    aya_ebpf::helpers::generated::bpf_get_current_comm(addr_of_mut!((*e).comm) as *mut _, 16);
}

/// Starts tracking a bio that entered a bio-based disk (`disk`: dm, md; block_bio_queue, in
/// the submitting task), which no request will ever carry: an entry like a request's (entry
/// time, class from `bi_opf`, log class, sector, size in bytes, submitter, owner cgroup), never dispatched,
/// keyed by the bio's address in the `INFLIGHT` hash map only (bio addresses are many and
/// short-lived: they must not own `INFLIGHT_SLOTS` slots for good, see
/// observer_common::maps::Slot). The entry is deleted at the bio's `block_bio_complete`
/// (probes/bio_complete.rs, `bio_completed`). A live entry already at that address is a bio
/// whose completion was not seen: counted as lost and replaced, or, if it was chained to a bio
/// not yet submitted then (chain.rs), counted as ended now. A bio chained so is linked.
#[inline(always)]
pub fn enter_bio(bio: u64, disk: u64, l: &KernelLayout) {
    // SAFETY: bpf_ktime_get_ns takes no argument and only returns CLOCK_MONOTONIC (ns).
    let now = unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() };
    forget_ended(bio);
    // Before `bio` is a map key (chain.rs, `link`).
    let parent: u64 = read(bio, l.bio_private);
    let e = match INFLIGHT.get_ptr_mut(&bio) {
        Some(p) => {
            // SAFETY: `p` is `bio`'s INFLIGHT element (a non-null lookup), valid while the program
            // runs; `old` is last used before `fill` writes it below, and a bio's own events never
            // run at once.
            let old = unsafe { &*p };
            if old.is_live() {
                if old.end_by == END_CHAINED {
                    // Its end was not traced, and it has ended: its struct is reused.
                    hidden_end(*old, now);
                } else {
                    count_lost(old);
                }
            }
            p
        }
        None => {
            let Some(zero) = ZERO_INFLIGHT.get_ptr(0) else {
                return;
            };
            // SAFETY: `zero` is this CPU's ZERO_INFLIGHT element 0 (a non-null lookup), valid while
            // the program runs; no program writes it (it stays all zero), so the insert's shared
            // borrow aliases no write.
            match INFLIGHT.insert(&bio, unsafe { &*zero }, BPF_NOEXIST as u64) {
                Ok(()) | Err(-17) => {}
                Err(_) => {
                    count(Counter::InflightFull);
                    return;
                }
            }
            let Some(p) = INFLIGHT.get_ptr_mut(&bio) else {
                return;
            };
            p
        }
    };
    let dev = disk_dev(disk, l);
    let disk_slot = dev_slot(dev);
    let sector: u64 = read(bio, l.bio_sector);
    let up = inherit::take(bio);
    let class = classify(read(bio, l.bio_opf), l)
        | log_class(dev, disk_slot, sector)
        | inherit::class_of(&up);
    // SAFETY: `e` is `bio`'s INFLIGHT element (found, or inserted above; non-null), valid while the
    // program runs; `old` is dead, so `fill`, `submitter` and `put` write through the only pointer,
    // and `&mut *e` is the only reference while `link` runs.
    unsafe {
        fill(
            e,
            now,
            0,
            dev,
            disk_slot,
            class,
            sector,
            read(bio, l.bio_size),
        );
        submitter(e);
        // The bio's owner (on a stacked disk: the cgroup the bio was charged to there).
        put(addr_of_mut!((*e).owner_cgroup), bio_owner(bio));
        link(bio, parent, &mut *e);
    }
    inherit::link(bio, now, &up);
}

/// Takes the entry of a bio of a bio-based disk out of `INFLIGHT` (see [`enter_bio`]): its
/// state if it was live.
#[inline(always)]
pub fn take_bio(bio: u64) -> Option<Inflight> {
    // SAFETY: HashMap::get, copied at once (before the remove) (aya's caveat: an element removed
    // and reused meanwhile reads as another key's value, integers only, never a fault: hash
    // elements are preallocated and stay mapped while the program runs, under RCU).
    let e = *unsafe { INFLIGHT.get(&bio) }?;
    // Whoever deletes the entry owns the end: the next bio of a chain entering on another CPU
    // may fold it in at once (chain.rs, `fold`), and then counts it; this end is then a piece
    // of that bio (probes/bio_complete.rs, `piece_of`). Only -ENOENT says so: a delete refused
    // otherwise (-EBUSY: the bucket held by a program this one interrupted) leaves the entry,
    // which fold then leaves alone too, and this end is counted here, as before.
    if INFLIGHT.remove(&bio) == Err(-2) {
        return None;
    }
    if e.is_live() {
        Some(e)
    } else {
        None
    }
}

/// What [`tracked_parent`] found up a bio's `bi_private` chain.
pub struct Parent {
    /// The tracked bio.
    pub bio: u64,
    /// Its entry (in `INFLIGHT`, or in `ENDED_PARENTS` for one that ended).
    pub entry: *mut Inflight,
    /// Whether the entry's counts (`bios`, `bytes`) hold the bio looked up from.
    pub holds: bool,
    /// The bio in between, without an entry (0: `bio` is the direct parent).
    pub between: u64,
}

/// Bios up the `bi_private` chain [`tracked_parent`] looks at: the parent and grandparent.
const MAX_UP: usize = 2;

/// Remapped bios that ended (with the request below that carried them: probes/bio_remap.rs)
/// while pieces split off them were still to come: bio → its entry as it ended
/// ([`keep_ended_parent`]).
#[map]
static ENDED_PARENTS: LruHashMap<u64, Inflight> =
    LruHashMap::with_max_entries(ENDED_PARENTS_ENTRIES, 0);
/// Ended parents kept, at most (the LRU drops the oldest).
const ENDED_PARENTS_ENTRIES: u32 = 1024;

/// `e`, the entry of the remapped bio `bio`, ended with the request below that carried it. md
/// raid0 on 5.10 sends the md bio itself down once it split its front pieces off, and that
/// bio's request can complete before a piece split off one of those pieces (untraced, at a
/// chunk boundary, after the piece was resubmitted) is remapped: the bio's end is then
/// counted with the pieces still pending in it (`bios`), and it is kept here so that such a
/// grandchild still finds it ([`tracked_parent`]) and counts as an I/O of its own. The bio
/// itself is not freed before its chained pieces end (block/bio.c bio_chain holds it), so its
/// address is not reused meanwhile. Nothing is kept for a bio without pending pieces.
#[inline(always)]
pub fn keep_ended_parent(bio: u64, e: &Inflight) {
    if e.bios > 0 {
        let _ = ENDED_PARENTS.insert(&bio, e, BPF_ANY as u64);
        if let Some(p) = PARENTS_KEPT.get_ptr_mut(0) {
            // SAFETY: `p` is PARENTS_KEPT element 0 (a non-null lookup): a u64 valid for the
            // map's life; every writer stores the same 1.
            unsafe { put(p, 1) };
        }
    }
}

/// 1 once [`keep_ended_parent`] kept a parent (md raid0 on 5.10, NVMe multipath heads), else
/// 0: until then no piece's `SPLIT_PIECES` entry can outlive it, and [`split_done`] costs a
/// remap (every bio sent to a partition is one: block/blk-core.c blk_partition_remap) one
/// array read.
#[map]
static PARENTS_KEPT: Array<u64> = Array::with_max_entries(1, 0);

/// `bio` is a new bio (it enters, or is split off another): an ended parent kept at its
/// address ([`keep_ended_parent`]) is a struct since freed and reused, and must not be found
/// as the parent of the new bio's pieces ([`tracked_parent`] would take them for pieces counted
/// at that parent's end: 5.10 md raid0 writes came out short of diskstats by 0.2 % to 6 % with
/// 1 MiB direct writes at an unaligned offset, md's split pieces reusing such addresses).
#[inline(always)]
pub fn forget_ended(bio: u64) {
    let _ = ENDED_PARENTS.remove(&bio);
    let _ = SPLIT_PIECES.remove(&bio);
}

/// Pieces `block_split` counted in a tracked bio's `bios` (probes/bio_split.rs): piece → the
/// bio whose count holds it. Only these are taken back out of that count when they end on their
/// own ([`piece_of`]); a piece split off the same bio without a trace (drivers/md/raid0.c on
/// 5.10 splits the md bio's last part at a chunk boundary, after the traced pieces before it
/// were split but before their rests re-entered) is an I/O besides them, not one of them.
#[map]
static SPLIT_PIECES: LruHashMap<u64, u64> = LruHashMap::with_max_entries(SPLIT_PIECES_ENTRIES, 0);
/// Traced pieces kept, at most (the LRU drops the oldest: a piece that never ends on its own
/// stays until then).
const SPLIT_PIECES_ENTRIES: u32 = 8192;

/// `piece`, split off a tracked bio with a trace, is counted in `parent`'s `bios`.
#[inline(always)]
pub fn split_counted(piece: u64, parent: u64) {
    let _ = SPLIT_PIECES.insert(&piece, &parent, BPF_ANY as u64);
}

/// `piece`, a traced piece, went down to a leg without [`piece_of`] taking it back out of its
/// parent's count: it was counted at its parent's end (the parent ended first: md raid0 on
/// 5.10, [`keep_ended_parent`]). Its `SPLIT_PIECES` entry would outlive it: a later untraced
/// piece at its address (md's own `bio_split`, from the same slab, which `block_split` never
/// shows) whose parent took the old parent's address would be taken for a counted one, and
/// its parent's count of pieces would lose one (5.10 md raid0 writes 2 to 6 short of md's
/// diskstats in some rounds).
#[inline(always)]
pub fn split_done(piece: u64) {
    if PARENTS_KEPT.get(0).is_none_or(|v| *v == 0) {
        return;
    }
    // By the number: see [`piece_of`].
    let key = addr_number(piece);
    // SAFETY: LruHashMap::get, only tested for presence: a lookup takes no lock, a delete does.
    if key != 0 && unsafe { SPLIT_PIECES.get(&key) }.is_some() {
        let _ = SPLIT_PIECES.remove(&key);
    }
}

/// Whether `piece` is counted in `parent`'s `bios` ([`split_counted`]).
#[inline(always)]
fn counted_in(piece: u64, parent: u64) -> bool {
    // SAFETY: LruHashMap::get, one u64 compared at once: an evicted and reused element reads as
    // another piece's parent (then no match), never a fault.
    unsafe { SPLIT_PIECES.get(&piece) }.is_some_and(|p| *p == parent)
}

/// The live entry of the tracked bio-based parent of `bio` (`bio->bi_private`, set by
/// block/bio.c bio_chain), or of its grandparent ([`MAX_UP`]): a piece split off a piece that
/// has no entry (drivers/md/raid0.c on 5.10 splits at chunk boundaries, untraced, a piece
/// blk-merge.c split before, traced), or off a chained bio folded into the next one
/// (chain.rs). Further up, `bi_private` is rarely a bio. The flag says whether the entry holds
/// `bio`'s count (`bios`, and the bytes of a folded chain): a direct parent counts its pieces
/// (bio_split.rs), and a bio that a chained one was folded into took that one's counts
/// (chain.rs, [`folded_into`]); a grandparent above a piece without an entry does not: its
/// count holds that piece, which is one I/O besides the grandchild. A grandparent may be one
/// that already ended ([`keep_ended_parent`]).
#[inline(always)]
pub fn tracked_parent(bio: u64, l: &KernelLayout) -> Option<Parent> {
    let mut b = bio;
    let mut between = 0;
    for step in 0..MAX_UP {
        // `bi_private` is a `void *`: what it points to has no BTF type, so the verifier
        // refuses a direct load through it (tp_btf on 5.10: "Permission denied"); read the
        // parent's own `bi_private` with a helper.
        b = if step == 0 {
            read(b, l.bio_private)
        } else {
            // SAFETY: bpf_probe_read_kernel of one u64 at `b + bio_private`: `b` may be anything
            // (`bi_private` is a `void *`), and a fault returns an error (then 0), never UB.
            unsafe {
                aya_ebpf::helpers::bpf_probe_read_kernel((b + l.bio_private as u64) as *const u64)
                    .unwrap_or(0)
            }
        };
        if b == 0 {
            return None;
        }
        if let Some(p) = INFLIGHT.get_ptr_mut(&b) {
            // SAFETY: `p` is `b`'s INFLIGHT element (a non-null lookup), valid while the program
            // runs; only read here (`is_live`, `dispatch_ns`), and the reference ends in this
            // iteration.
            let e = unsafe { &*p };
            let holds = counted_in(bio, b) || folded_into(if step == 0 { bio } else { between }, b);
            return (e.is_live() && e.dispatch_ns == 0).then_some(Parent {
                bio: b,
                entry: p,
                holds,
                between,
            });
        }
        // A parent that ended with pieces still to come ([`keep_ended_parent`]): a direct
        // piece was counted at its end (in `bios`), so it is none here (looking further up
        // would find the bio the parent is chained to, e.g. the next writeback bio); a
        // grandchild counts from it, whose count held the piece in between, not this one.
        if let Some(p) = ENDED_PARENTS.get_ptr_mut(&b) {
            return (step > 0).then_some(Parent {
                bio: b,
                entry: p,
                holds: false,
                between,
            });
        }
        between = b;
    }
    None
}

/// The entry for a piece split from a tracked bio of a bio-based disk below its
/// `block_bio_queue`, ending on its own (remapped, or completing): its parent's (see
/// [`tracked_parent`]) with the piece's own sector and size. A direct parent's count of pieces
/// split off it (`bios`, from `block_split`) goes down by one, so it is not counted again at
/// the parent's end; so do its bytes if it is a bio chained to the parent and folded into it
/// (chain.rs), whose own entry time it gets back. The counts of a grandparent that does not
/// hold the piece's count stay ([`tracked_parent`]). `None` if the bio has no such parent,
/// the parent is a discard, the bio (sent on from sector `from` of the upper disk, when
/// remapped) still covers part of the parent or of the piece in between (a clone of it, no
/// piece: [`covers`]), it is a piece remapped while its direct parent, remapped itself
/// (`END_REMAPPED`), holds its count: it is counted at that parent's end, with its latency; or
/// the remap is not from the parent's disk (`from`: `(mkdev, sector)`).
#[inline(always)]
pub fn piece_of(bio: u64, from: Option<(u32, u64)>, l: &KernelLayout) -> Option<Inflight> {
    let Parent {
        bio: parent,
        entry: p,
        holds,
        between,
    } = tracked_parent(bio, l)?;
    if let Some((from_dev, from)) = from {
        // A piece leaves its parent's disk once; a second remap is the leg's partition
        // (block/blk-core.c blk_partition_remap: md raid0 on sda1 and sdb1), whose `dev` is
        // the partition's. Its first remap decided it (5.10 md raid0: a piece counted at its
        // parent's end had dropped its `SPLIT_PIECES` entry then, and was counted again here).
        // SAFETY: `p` is the parent's entry from [`tracked_parent`] (an INFLIGHT or
        // ENDED_PARENTS element, non-null), valid while the program runs; one u32 is read.
        if unsafe { (*p).dev } != from_dev {
            return None;
        }
        // A clone of the parent, or of the piece in between (md raid5's aligned read of a
        // piece it split off the md bio without a trace), is no piece.
        let sectors = read::<u32>(bio, l.bio_size) as u64 >> 9;
        if covers(parent, from, sectors, l) || (between != 0 && covers(between, from, sectors, l)) {
            return None;
        }
    }
    // SAFETY: `p` is the parent's entry from [`tracked_parent`] (an INFLIGHT or ENDED_PARENTS
    // element, non-null), valid while the program runs, and this program holds no other reference
    // to it. A piece of the same parent ending on another CPU at once may update it too: saturating
    // integer counts, so a race can lose a count, never make an invalid value.
    let p = unsafe { &mut *p };
    // A discard is one I/O however it is cut: md sends a discard to each leg chained to its
    // parent (drivers/md/raid0.c, raid0_handle_discard; raid10 too), and splits at the
    // discard limits are the kernel's business (md's diskstats count them or not by kernel).
    if Op::from_code(p.class) == Op::Discard {
        return None;
    }
    let size: u32 = read(bio, l.bio_size);
    if holds {
        // Keyed by the number, not by `bio`'s own stack copy: in tp_btf programs `bio` is a
        // typed pointer, and the delete helper reading that copy as its key left the copy
        // unusable for the direct loads below (6.1's verifier: "R3 invalid mem access
        // 'scalar'" at `read(bio, l.bio_sector)`, and every tp_btf program refused).
        let key = addr_number(bio);
        if key != 0 {
            let _ = SPLIT_PIECES.remove(&key);
        }
        if from.is_some() && p.end_by == END_REMAPPED {
            // The parent went down itself and ends with the request below that carries it
            // (probes/bio_remap.rs), on any CPU at any time: taking the piece out of its count
            // here could come between that end's copy of the count and its delete, and the
            // piece would be counted twice (5.10 md raid0: one write over md's diskstats in
            // about one `blkdiscard -z` of 30, with the piece's decrement landing after the
            // parent's entry was deleted). The piece stays in the count read at that end.
            return None;
        }
        p.bios = p.bios.saturating_sub(1);
        // A bio chained to it and folded in (chain.rs) gives its bytes back too.
        p.bytes = p.bytes.saturating_sub(size as u64);
    }
    let mut e = *p;
    e.sector = read(bio, l.bio_sector);
    e.size = size;
    e.end_by = END_TRACED;
    e.bios = 0;
    e.bytes = 0;
    if let Some(t) = entered_at(bio, l) {
        e.enter_ns = t;
    }
    Some(e)
}

/// Whether the bio `parent` (not typed in BTF: read with the helper) still covers any of the
/// `sectors` (512 B) from `from`. block/bio.c bio_split gives the piece the front and advances
/// the parent past it, so a piece never overlaps its parent; a clone sent on in the parent's
/// place does (drivers/md/raid5.c raid5_read_one_chunk: the aligned read's clone has
/// `bi_private` = the md bio, and the md bio ends, traced, when the clone does).
#[inline(always)]
fn covers(parent: u64, from: u64, sectors: u64, l: &KernelLayout) -> bool {
    // SAFETY: bpf_probe_read_kernel of one u64 at `parent + off` (a bio not typed in BTF): a fault
    // returns an error (then 0), never UB.
    let at = |off: u32| unsafe {
        aya_ebpf::helpers::bpf_probe_read_kernel((parent + off as u64) as *const u64).unwrap_or(0)
    };
    let start = at(l.bio_sector);
    let len = (at(l.bio_size) as u32 as u64) >> 9;
    from < start + len && start < from + sectors.max(1)
}

/// Whether `bio` was split or sent on from a tracked discard (see [`piece_of`]).
#[inline(always)]
pub fn is_piece_of_discard(bio: u64, l: &KernelLayout) -> bool {
    tracked_parent(bio, l)
        // SAFETY: `p.entry` is a non-null INFLIGHT or ENDED_PARENTS element from
        // [`tracked_parent`], valid while the program runs; one u16 is read.
        .is_some_and(|p| Op::from_code(unsafe { (*p.entry).class }) == Op::Discard)
}

/// The `INFLIGHT` entry of `rq` to fill: its existing entry (kept for reuse), or a new one
/// inserted for it. A live existing entry means the struct was freed and reused since we saw it
/// enter: its completion never reached block_rq_complete here. With `replace`, that request is
/// counted as completed with its latency lost and the entry is returned; without, `None`.
#[inline(always)]
pub fn entry(rq: u64, replace: bool) -> Option<*mut Inflight> {
    // A struct that owns its array slot never has a hash entry: ownership is permanent, and a
    // struct only goes to the hash map when its slot belongs to another one.
    let found = match claim(&INFLIGHT_SLOTS, addr_number(rq)) {
        Some(p) => Some(p),
        None => INFLIGHT.get_ptr_mut(&rq),
    };
    if let Some(p) = found {
        // SAFETY: `p` is `rq`'s own INFLIGHT_SLOTS slot value (claimed: only this struct's events
        // write it) or its INFLIGHT element, valid while the program runs; only read, and the
        // reference ends before the caller writes through `p`.
        let old = unsafe { &*p };
        if old.is_live() {
            if !replace {
                return None;
            }
            count_lost(old);
        }
        return Some(p);
    }
    // A new key: insert the (zeroed, unused) scratch entry, then fill the map's copy in place.
    let zero = ZERO_INFLIGHT.get_ptr(0)?;
    // SAFETY: `zero` is this CPU's ZERO_INFLIGHT element 0 (a non-null lookup), valid while the
    // program runs; no program writes it (it stays all zero), so the insert's shared borrow aliases
    // no write.
    match INFLIGHT.insert(&rq, unsafe { &*zero }, BPF_NOEXIST as u64) {
        Ok(()) | Err(-17) => {}
        Err(_) => {
            count(Counter::InflightFull);
            return None;
        }
    }
    INFLIGHT.get_ptr_mut(&rq)
}

/// A request that completed without its completion reaching us: counted with its bytes
/// ([`Inflight::lost_bytes`]), no latency; its size, bios and missed merge at dispatch (if it
/// was dispatched) are counted.
#[inline(always)]
pub fn count_lost(e: &Inflight) {
    let bytes = e.lost_bytes();
    if let Some(s) = stats(e.dev, e.class) {
        // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry ([`stats`]: a
        // non-null lookup of a per-CPU hash, so no other CPU writes it), valid while the program
        // runs; a program nesting on this CPU counts into it with atomic adds too.
        unsafe {
            add(addr_of_mut!((*s).requests), 1);
            add(addr_of_mut!((*s).bytes), bytes);
            add(addr_of_mut!((*s).lost), 1);
            count_dispatch(s, e);
        }
    }
    owner_count(e.dev, e.class, e.owner_cgroup, bytes);
}

/// The live entry of a request, if any (free entries are kept for reuse, see
/// [`Inflight::is_live`]).
#[inline(always)]
pub fn live(rq: u64) -> Option<&'static mut Inflight> {
    let p = match owned(&INFLIGHT_SLOTS, addr_number(rq)) {
        Some(p) => p,
        None => INFLIGHT.get_ptr_mut(&rq)?,
    };
    // SAFETY: `p` is `rq`'s slot value (owned: only this struct's events write it) or its INFLIGHT
    // element: array elements are never freed, hash elements are preallocated and stay mapped under
    // RCU, so it is valid for the whole run; `'static` stands for that, callers keep it no longer.
    // A request's events do not run at once, so no other reference to it is live.
    let e = unsafe { &mut *p };
    if e.is_live() {
        Some(e)
    } else {
        None
    }
}

/// Marks an entry free (kept in the map for the next request on the same struct).
#[inline(always)]
pub fn mark_free(e: &mut Inflight) {
    // SAFETY: `e` is a `&mut Inflight`: its fields are valid, aligned and unaliased for these
    // writes.
    unsafe {
        put(&mut e.enter_ns, 0);
        put(&mut e.dispatch_ns, 0);
    }
}
