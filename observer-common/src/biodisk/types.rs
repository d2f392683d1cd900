//! What the bio-disk decisions take and return: zero-cost newtypes over what the programs read,
//! the entry of a tracked bio, the map values they look up, and the actions they ask for.
//! Fact numbers (F1..) are those of docs/design/stacked-disks.md.
use crate::class::Op;
use crate::maps::{ChainLink, Inflight, END_CHAINED, END_REMAPPED, END_TRACED};

/// A `struct bio *` (or whatever `bi_private` holds) as a number; 0 is no pointer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct BioPtr(pub u64);

impl BioPtr {
    /// No pointer.
    pub const NULL: BioPtr = BioPtr(0);
    /// Whether it is 0.
    pub const fn is_null(self) -> bool {
        self.0 == 0
    }
}

/// A disk, as `mkdev` (the `dev` of an entry, and the `dev` of `block_bio_remap`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct DiskDev(pub u32);

/// A `bpf_ktime_get_ns` time (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Nanos(pub u64);

/// A sector number or count (512 B).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct Sectors(pub u64);

/// How the end of a tracked bio will be seen (`Inflight::end_by`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EndBy {
    /// Its own `block_bio_complete` on the disk (F1).
    #[default]
    Traced,
    /// It went down itself onto a request-based disk: ended by the request that carries it
    /// (F7).
    Remapped,
    /// Chained to a bio not yet submitted: its end may be hidden (F4, F5).
    Chained,
}

impl EndBy {
    /// The `Inflight::end_by` code.
    pub const fn code(self) -> u8 {
        match self {
            EndBy::Traced => END_TRACED,
            EndBy::Remapped => END_REMAPPED,
            EndBy::Chained => END_CHAINED,
        }
    }
    /// From an `Inflight::end_by` code (unknown codes read as traced, as the programs do).
    pub const fn from_code(c: u8) -> EndBy {
        match c {
            END_REMAPPED => EndBy::Remapped,
            END_CHAINED => EndBy::Chained,
            _ => EndBy::Traced,
        }
    }
}

/// The protocol's part of a tracked bio's `INFLIGHT` entry (observer-ebpf inflight.rs
/// `enter_bio`); the rest (submitter, owner, log class) does not decide anything here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BioEntry {
    /// Entry time (`Inflight::enter_ns`; never 0 for a live entry).
    pub enter: Nanos,
    /// Its disk.
    pub disk: DiskDev,
    /// Its class (`crate::class`), whose op decides discards and folds.
    pub class: u16,
    /// First sector at entry.
    pub sector: Sectors,
    /// Size at entry (B).
    pub size: u32,
    /// Pieces counted in it, to be counted at its end (`Inflight::bios`, saturating u16).
    pub pieces: u16,
    /// Bytes of chained bios folded into it (`Inflight::bytes`).
    pub folded_bytes: u64,
    /// How its end is seen.
    pub end_by: EndBy,
}

impl BioEntry {
    /// Its op.
    pub const fn op(&self) -> Op {
        Op::from_code(self.class)
    }
    /// Copies the protocol's fields into an `Inflight` (the others are left as they are).
    pub fn store(&self, e: &mut Inflight) {
        e.enter_ns = self.enter.0;
        e.dispatch_ns = 0;
        e.dev = self.disk.0;
        e.class = self.class;
        e.sector = self.sector.0;
        e.size = self.size;
        e.bios = self.pieces;
        e.bytes = self.folded_bytes;
        e.end_by = self.end_by.code();
    }
}

impl From<&Inflight> for BioEntry {
    fn from(e: &Inflight) -> Self {
        BioEntry {
            enter: Nanos(e.enter_ns),
            disk: DiskDev(e.dev),
            class: e.class,
            sector: Sectors(e.sector),
            size: e.size,
            pieces: e.bios,
            folded_bytes: e.bytes,
            end_by: EndBy::from_code(e.end_by),
        }
    }
}

/// What an `INFLIGHT` lookup at a key found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Found {
    /// No element.
    #[default]
    Absent,
    /// An element that is not a live bio entry: a free one kept for reuse, or a request's
    /// (`dispatch_ns != 0`). It stops `tracked_parent`'s walk.
    Inactive,
    /// A live bio entry.
    Live(BioEntry),
}

impl Found {
    /// From an optional `Inflight` element.
    pub fn of(e: Option<&Inflight>) -> Found {
        match e {
            None => Found::Absent,
            Some(e) if e.is_live() && e.dispatch_ns == 0 => Found::Live(BioEntry::from(e)),
            Some(_) => Found::Inactive,
        }
    }
    /// The live entry, if any.
    pub const fn live(&self) -> Option<&BioEntry> {
        match self {
            Found::Live(e) => Some(e),
            _ => None,
        }
    }
    /// Whether an element is there at all.
    pub const fn present(&self) -> bool {
        !matches!(self, Found::Absent)
    }
}

/// A `CHAINED` value: the tracked bio chained to the key (F4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// The chained bio.
    pub child: BioPtr,
    /// Its entry time.
    pub enter: Nanos,
}

impl From<&ChainLink> for Link {
    fn from(v: &ChainLink) -> Self {
        Link {
            child: BioPtr(v.child),
            enter: Nanos(v.enter_ns),
        }
    }
}

/// What a program read of the bio its tracepoint names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BioRead {
    /// The bio.
    pub bio: BioPtr,
    /// `bi_private` (F3).
    pub private: BioPtr,
    /// `bi_iter.bi_sector` now.
    pub sector: Sectors,
    /// `bi_iter.bi_size` now (B).
    pub size: u32,
    /// Class from `bi_opf`.
    pub class: u16,
    /// `bi_status`.
    pub status: u8,
}

/// A bio's extent as the kernel has it now (`bi_sector`, `bi_size >> 9`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extent {
    /// First sector.
    pub start: Sectors,
    /// Length.
    pub len: Sectors,
}

impl Extent {
    /// Whether it shares a sector with the `len` sectors from `from` (a zero length counts
    /// as one sector, as observer-ebpf inflight.rs `covers` does).
    pub const fn overlaps(&self, from: Sectors, len: Sectors) -> bool {
        let l = if len.0 == 0 { 1 } else { len.0 };
        from.0 < self.start.0 + self.len.0 && self.start.0 < from.0 + l
    }
}

/// One bio up the `bi_private` chain, with every map value `tracked_parent` may read of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Up {
    /// The bio (a `bi_private`; maybe not a bio at all).
    pub bio: BioPtr,
    /// `INFLIGHT[bio]`.
    pub inflight: Found,
    /// `ENDED_PARENTS[bio]`.
    pub ended: Option<BioEntry>,
    /// `CHAINED[bio]`.
    pub chained: Option<Link>,
    /// Its extent now, read from the kernel (`covers`).
    pub now: Extent,
}

/// The two bios above a bio (parent, grandparent: observer-ebpf inflight.rs `MAX_UP`) and
/// `SPLIT_PIECES[bio]`: all the lookups `tracked_parent` and `piece_of` make.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ancestry {
    /// Parent (`bi_private`), then grandparent; `None` where the pointer read is 0.
    pub up: [Option<Up>; 2],
    /// `SPLIT_PIECES[bio]`: the parent whose count holds this piece.
    pub split_parent: Option<BioPtr>,
}

/// Where a remapped bio came from (`block_bio_remap`'s `dev`, `from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemapFrom {
    /// The upper disk (a partition's own dev for blk_partition_remap: F9).
    pub disk: DiskDev,
    /// The sector there.
    pub sector: Sectors,
}

/// Which kind of disk a bio is on now (`q->mq_ops` NULL or not: F2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskKind {
    /// dm, md, NVMe multipath heads: bios are the disk's I/Os.
    BioBased,
    /// Requests carry the bios.
    RequestBased,
}

/// Kernel behaviour the programs learn at run time (the latches `ENDS_TRACED`,
/// `PARENTS_KEPT`): named inputs of the decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Learned {
    /// The kernel has shown a traced end of a chained bio (F5: 5.11+): no linking, no folds.
    pub chained_ends_traced: bool,
    /// A remapped bio ended with pieces pending was kept (`ENDED_PARENTS`): split_done runs.
    pub parents_kept: bool,
}

/// A latch to set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Latch {
    /// `ENDS_TRACED` (chain.rs `saw_traced_end`).
    ChainedEndsTraced,
    /// `PARENTS_KEPT` (inflight.rs `keep_ended_parent`).
    ParentsKept,
}

/// An ended I/O to count (observer-ebpf bio_end.rs `bio_counted`): `ios` I/Os (1 + the pieces
/// it held) with `bytes`, each with the latency `end - enter` (none on a clock anomaly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    /// The disk.
    pub disk: DiskDev,
    /// The class.
    pub class: u16,
    /// I/Os.
    pub ios: u64,
    /// Bytes.
    pub bytes: u64,
    /// Entry time.
    pub enter: Nanos,
    /// End time.
    pub end: Nanos,
    /// `bi_status`.
    pub status: u8,
}

impl Io {
    /// The latency, or `None` on a clock anomaly (crate::stage::clock_anomaly).
    pub const fn latency(&self) -> Option<Nanos> {
        if crate::stage::clock_anomaly(self.enter.0, 0, self.end.0) {
            None
        } else {
            Some(Nanos(self.end.0 - self.enter.0))
        }
    }
}

/// One map operation or count a decision asks for, applied in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Count an ended I/O.
    Count(Io),
    /// Count an entry whose end was never seen as lost (inflight.rs `count_lost`).
    Lost(BioEntry),
    /// Count an end of a bio never seen entering (`untracked`).
    Untracked {
        /// The disk.
        disk: DiskDev,
        /// The class.
        class: u16,
    },
    /// Write `INFLIGHT[bio]` (insert or overwrite).
    Put {
        /// Key.
        bio: BioPtr,
        /// Value.
        entry: BioEntry,
    },
    /// Write the counts of the live `INFLIGHT[bio]` in place, values computed from what was
    /// read (a plain read-modify-write: the programs' updates are not atomic).
    SetCounts {
        /// Key.
        bio: BioPtr,
        /// New `pieces`.
        pieces: u16,
        /// New `folded_bytes`.
        folded_bytes: u64,
    },
    /// Write `end_by` of `INFLIGHT[bio]` in place.
    SetEndBy {
        /// Key.
        bio: BioPtr,
        /// Value.
        end_by: EndBy,
    },
    /// Delete `INFLIGHT[bio]`, result ignored.
    Remove {
        /// Key.
        bio: BioPtr,
    },
    /// Delete `INFLIGHT[bio]` (a chained bio folded into `into`); if that fails (its own end
    /// took it first), write `into`'s counts back to `pieces`, `folded_bytes` (60cb027).
    FoldOrUndo {
        /// The folded bio.
        bio: BioPtr,
        /// The bio it is folded into.
        into: BioPtr,
        /// `into`'s counts before the fold.
        pieces: u16,
        /// Its folded bytes before the fold.
        folded_bytes: u64,
    },
    /// `ENDED_PARENTS[bio] = entry`.
    KeepEnded {
        /// Key.
        bio: BioPtr,
        /// Value.
        entry: BioEntry,
    },
    /// Delete `ENDED_PARENTS[bio]` and `SPLIT_PIECES[bio]` (a new bio at that address).
    ForgetEnded {
        /// Key.
        bio: BioPtr,
    },
    /// `SPLIT_PIECES[piece] = parent`.
    SplitCounted {
        /// Key.
        piece: BioPtr,
        /// Value.
        parent: BioPtr,
    },
    /// Delete `SPLIT_PIECES[piece]`.
    ForgetSplit {
        /// Key.
        piece: BioPtr,
    },
    /// `CHAINED[next] = link`.
    Link {
        /// The bio not yet seen entering.
        next: BioPtr,
        /// The tracked bio chained to it.
        link: Link,
    },
    /// Delete `CHAINED[key]`.
    Unlink {
        /// Key.
        key: BioPtr,
    },
    /// Set a latch.
    Learn(Latch),
    /// Add to `REMAPPED_LIVE` (a gate only).
    RemappedLive(i8),
}

/// Most actions one decision returns.
pub const PLAN_MAX: usize = 8;

/// The actions of one decision, in order (no alloc: a fixed array).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    acts: [Option<Action>; PLAN_MAX],
    n: usize,
}

impl Plan {
    /// No action.
    pub const fn new() -> Plan {
        Plan {
            acts: [None; PLAN_MAX],
            n: 0,
        }
    }
    /// Appends `a` (a full plan is a bug in a decision: debug builds panic, others drop it).
    pub fn push(&mut self, a: Action) {
        debug_assert!(self.n < PLAN_MAX, "plan full");
        if self.n < PLAN_MAX {
            self.acts[self.n] = Some(a);
            self.n += 1;
        }
    }
    /// The actions.
    pub fn iter(&self) -> impl Iterator<Item = &Action> {
        self.acts[..self.n].iter().flatten()
    }
    /// How many.
    pub const fn len(&self) -> usize {
        self.n
    }
    /// Whether there is none.
    pub const fn is_empty(&self) -> bool {
        self.n == 0
    }
}
