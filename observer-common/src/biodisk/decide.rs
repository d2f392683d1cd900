//! The decisions of the bio-disk protocol, one per event, as the programs make them today
//! (observer-ebpf inflight.rs, chain.rs, probes/bio_*.rs). Each takes what the program read and
//! the map values it looked up, and returns a [`Plan`]. Fact numbers: docs/design/stacked-disks.md.
use crate::class::Op;

use super::types::*;

/// Fixes a test can revert in the model, to show that its regression case fails without it.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fix {
    /// 2266dc6: a traced piece remapped after its parent ended drops its `SPLIT_PIECES` entry.
    SplitDone,
    /// 5a83445: a piece remapped while its remapped parent holds it stays in that count.
    RemappedParentHolds,
    /// 6d1be51: a piece leaves its parent's disk once (a partition's second remap is none).
    PartitionOnce,
    /// 60cb027: whoever deletes a chained bio's entry owns its end.
    DeleteOwnsEnd,
    /// 84f78d1: only a piece `block_split` counted is taken out of its parent's count.
    SplitPiecesOnly,
    /// 81c566a: a clone of the parent (or of the piece in between) is no piece.
    CloneCovers,
    /// 4347420: a direct piece of an ended parent is none (no walk further up).
    EndedParentStops,
    /// Once chained ends are traced, a piece counts at its own end, not in its parent
    /// (probes/bio_split.rs `on_split`).
    OwnEndCounts,
}

#[cfg(test)]
std::thread_local! {
    static REVERTED: core::cell::Cell<Option<Fix>> = const { core::cell::Cell::new(None) };
}

/// Runs `f` with `fix` reverted in the model (this thread only).
#[cfg(test)]
pub fn with_reverted<T>(fix: Fix, f: impl FnOnce() -> T) -> T {
    REVERTED.with(|r| r.set(Some(fix)));
    let out = f();
    REVERTED.with(|r| r.set(None));
    out
}

#[cfg(test)]
fn reverted(fix: Fix) -> bool {
    REVERTED.with(|r| r.get() == Some(fix))
}

#[cfg(test)]
std::thread_local! {
    static KEEP_FIRST: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// Runs `f` with a proposed change (not in the programs): [`end_remapped`] sets the
/// `PARENTS_KEPT` latch, then keeps the ended parent, then deletes its entry, so that no
/// piece remapped in between finds neither (or finds it kept while split_done is off).
#[cfg(test)]
pub fn with_keep_first<T>(f: impl FnOnce() -> T) -> T {
    KEEP_FIRST.with(|r| r.set(true));
    let out = f();
    KEEP_FIRST.with(|r| r.set(false));
    out
}

#[cfg(test)]
fn keep_first() -> bool {
    KEEP_FIRST.with(|r| r.get())
}

#[cfg(not(test))]
const fn keep_first() -> bool {
    false
}

macro_rules! kept {
    ($fix:ident) => {{
        #[cfg(test)]
        let k = !reverted(Fix::$fix);
        #[cfg(not(test))]
        let k = true;
        k
    }};
}

/// Whether the model runs with 60cb027 reverted (for the simulator: unchecked deletes).
pub fn delete_owns_end() -> bool {
    kept!(DeleteOwnsEnd)
}

/// Where `tracked_parent` found the parent's entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    /// Live in `INFLIGHT`.
    Inflight,
    /// In `ENDED_PARENTS` (F8).
    Ended,
}

/// What `tracked_parent` found (observer-ebpf inflight.rs `Parent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parent {
    /// The tracked bio.
    pub bio: BioPtr,
    /// Its entry as read.
    pub entry: BioEntry,
    /// Where.
    pub kept: Kept,
    /// Whether its counts hold the bio looked up from.
    pub holds: bool,
    /// The bio in between (a grandparent was found), if any.
    pub between: Option<BioPtr>,
    /// Index into [`Ancestry::up`] of the parent found.
    pub level: usize,
}

/// observer-ebpf inflight.rs `tracked_parent`: the live entry of the parent (F3) or of the
/// grandparent of `bio`, or an ended grandparent (F8).
pub fn tracked_parent(bio: BioPtr, a: &Ancestry) -> Option<Parent> {
    let mut between: Option<BioPtr> = None;
    for (level, up) in a.up.iter().enumerate() {
        let up = (*up)?;
        if up.bio.is_null() {
            return None;
        }
        // folded_into(step 0 ? bio : between, b): CHAINED[b].child.
        let below = between.unwrap_or(bio);
        let folded = up.chained.is_some_and(|l| l.child == below);
        let counted = a.split_parent == Some(up.bio);
        match up.inflight {
            Found::Live(entry) => {
                let holds = if kept!(SplitPiecesOnly) {
                    counted || folded
                } else {
                    level == 0 || counted || folded
                };
                return Some(Parent {
                    bio: up.bio,
                    entry,
                    kept: Kept::Inflight,
                    holds,
                    between,
                    level,
                });
            }
            Found::Inactive => return None,
            Found::Absent => {}
        }
        if let Some(entry) = up.ended {
            if level > 0 {
                return Some(Parent {
                    bio: up.bio,
                    entry,
                    kept: Kept::Ended,
                    holds: false,
                    between,
                    level,
                });
            }
            if kept!(EndedParentStops) {
                return None;
            }
        }
        between = Some(up.bio);
    }
    None
}

/// What [`piece_of`] decided.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    /// The piece's own entry to count or keep, if it is a piece.
    pub entry: Option<BioEntry>,
    /// Its `SPLIT_PIECES` entry goes.
    pub forget_split: bool,
    /// The parent's counts to write: (parent, pieces, folded bytes).
    pub parent_counts: Option<(BioPtr, u16, u64)>,
}

/// observer-ebpf inflight.rs `piece_of`: the entry of `r`, a piece of a tracked bio ending on
/// its own (remapped from `from`, or completing), and what it changes in its parent.
pub fn piece_of(r: &BioRead, from: Option<RemapFrom>, a: &Ancestry) -> Piece {
    let mut out = Piece::default();
    let Some(p) = tracked_parent(r.bio, a) else {
        return out;
    };
    if let Some(from) = from {
        // F9: a piece leaves its parent's disk once (6d1be51).
        if kept!(PartitionOnce) && p.entry.disk != from.disk {
            return out;
        }
        // F6: a clone overlaps what its parent (or the piece in between) still covers.
        let sectors = Sectors(r.size as u64 >> 9);
        let parent_now = a.up[p.level].map(|u| u.now).unwrap_or_default();
        let between_now = if p.level > 0 {
            a.up[p.level - 1].map(|u| u.now)
        } else {
            None
        };
        if kept!(CloneCovers)
            && (parent_now.overlaps(from.sector, sectors)
                || between_now.is_some_and(|e| e.overlaps(from.sector, sectors)))
        {
            return out;
        }
    }
    // A discard is one I/O however it is cut.
    if p.entry.op() == Op::Discard {
        return out;
    }
    let mut counts = (p.entry.pieces, p.entry.folded_bytes);
    if p.holds {
        out.forget_split = true;
        // F7: the remapped parent ends on any CPU at once; the piece stays in its count.
        if kept!(RemappedParentHolds) && from.is_some() && p.entry.end_by == EndBy::Remapped {
            return out;
        }
        counts = (
            counts.0.saturating_sub(1),
            counts.1.saturating_sub(r.size as u64),
        );
        if p.kept == Kept::Inflight {
            out.parent_counts = Some((p.bio, counts.0, counts.1));
        }
    }
    let mut e = p.entry;
    e.sector = r.sector;
    e.size = r.size;
    e.end_by = EndBy::Traced;
    e.pieces = 0;
    e.folded_bytes = 0;
    if let Some(t) = entered_at(r.bio, a) {
        e.enter = t;
    }
    out.entry = Some(e);
    out
}

/// observer-ebpf chain.rs `entered_at`: the own entry time of a chained bio folded into the
/// next one, while its link is there.
pub fn entered_at(bio: BioPtr, a: &Ancestry) -> Option<Nanos> {
    let l = a.up[0]?.chained?;
    (l.child == bio).then_some(l.enter)
}

/// Whether `bio` has a tracked discard parent (inflight.rs `is_piece_of_discard`).
pub fn is_piece_of_discard(bio: BioPtr, a: &Ancestry) -> bool {
    tracked_parent(bio, a).is_some_and(|p| p.entry.op() == Op::Discard)
}

/// What `fold` may take in: `CHAINED[bio]` and the `INFLIGHT` entry of its child.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoldView {
    /// `CHAINED[bio]`.
    pub link: Option<Link>,
    /// `INFLIGHT[link.child]`.
    pub child: Found,
}

/// What `enter_bio` reads besides the bio: its disk, the time, `INFLIGHT[bio]`, the fold's
/// lookups and whether `INFLIGHT[bi_private]` is live (any live entry, `is_live`: F4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entering {
    /// The bio-based disk it enters.
    pub disk: DiskDev,
    /// `bpf_ktime_get_ns`.
    pub now: Nanos,
    /// `INFLIGHT[bio]`.
    pub old: Found,
    /// `CHAINED[bio]` and its child's entry.
    pub fold: FoldView,
    /// Whether `INFLIGHT[bi_private]` is live.
    pub parent_live: bool,
}

/// `block_bio_queue` on a bio-based disk (inflight.rs `enter_bio`, chain.rs `link`, `fold`).
pub fn on_entry(r: &BioRead, at: &Entering, learned: Learned) -> Plan {
    let Entering {
        disk,
        now,
        old,
        fold,
        parent_live,
    } = *at;
    let mut plan = Plan::new();
    plan.push(Action::ForgetEnded { bio: r.bio });
    if let Found::Live(o) = old {
        if o.end_by == EndBy::Chained {
            // F5: its end was hidden, and it has ended: its struct is reused (hidden_end).
            plan.push(Action::Count(Io {
                disk: o.disk,
                class: o.class,
                ios: 1 + o.pieces as u64,
                bytes: o.folded_bytes + o.size as u64,
                enter: o.enter,
                end: now,
                status: 0,
            }));
        } else {
            plan.push(Action::Lost(o));
        }
    }
    let mut e = BioEntry {
        enter: now,
        disk,
        class: r.class,
        sector: r.sector,
        size: r.size,
        pieces: 0,
        folded_bytes: 0,
        end_by: EndBy::Traced,
    };
    if learned.chained_ends_traced {
        plan.push(Action::Put {
            bio: r.bio,
            entry: e,
        });
        return plan;
    }
    let mut fold_of = None;
    if let (Some(l), Found::Live(c)) = (fold.link, fold.child) {
        if c.end_by == EndBy::Chained && c.enter == l.enter && c.disk == e.disk && c.op() == e.op()
        {
            e.pieces = 1u16.saturating_add(c.pieces);
            e.folded_bytes = c.size as u64 + c.folded_bytes;
            fold_of = Some(l.child);
        }
    }
    plan.push(Action::Put {
        bio: r.bio,
        entry: e,
    });
    if let Some(child) = fold_of {
        plan.push(Action::FoldOrUndo {
            bio: child,
            into: r.bio,
            pieces: 0,
            folded_bytes: 0,
        });
    }
    // `link` looks the parent up after `fold` deleted the child: a parent at the folded
    // child's address (freed, and reused by the next bio of the chain) is not live.
    let parent_live = parent_live && fold_of != Some(r.private);
    if !r.private.is_null() && !parent_live {
        plan.push(Action::Link {
            next: r.private,
            link: Link {
                child: r.bio,
                enter: now,
            },
        });
        plan.push(Action::SetEndBy {
            bio: r.bio,
            end_by: EndBy::Chained,
        });
    }
    plan
}

/// `block_split` of `piece` on a bio-based disk (probes/bio_split.rs). `SPLIT_PIECES[piece]`
/// was just forgotten (the plan's first action), so `a.split_parent` is not read. Once the
/// kernel has shown a traced end of a chained bio (F5), a piece's own end is traced and
/// counts it (`end_as_piece`): it is not counted in its parent, whose count would otherwise be
/// raised here in the task and taken down by the piece's end on another CPU, two plain
/// read-modify-writes of one entry that can lose one (6.12 md raid0: +1).
pub fn on_split(piece: BioPtr, a: &Ancestry, learned: Learned) -> Plan {
    let mut plan = Plan::new();
    plan.push(Action::ForgetEnded { bio: piece });
    if learned.chained_ends_traced && kept!(OwnEndCounts) {
        return plan;
    }
    let a = Ancestry {
        split_parent: None,
        ..*a
    };
    if let Some(p) = tracked_parent(piece, &a) {
        if (p.between.is_none() || p.holds)
            && p.entry.op() != Op::Discard
            && p.kept == Kept::Inflight
        {
            plan.push(Action::SetCounts {
                bio: p.bio,
                pieces: p.entry.pieces.saturating_add(1),
                folded_bytes: p.entry.folded_bytes,
            });
            plan.push(Action::SplitCounted {
                piece,
                parent: p.bio,
            });
        }
    }
    plan
}

/// chain.rs `unlink` for the end of `bio` (`own`: its entry, `None` for a piece).
fn unlink(plan: &mut Plan, r: &BioRead, own: Option<&BioEntry>, a: &Ancestry, learned: Learned) {
    let chained = own.is_none_or(|e| e.end_by == EndBy::Chained);
    if !chained && learned.chained_ends_traced {
        return;
    }
    plan.push(Action::Unlink { key: r.bio });
    if !chained {
        return;
    }
    if entered_at(r.bio, a).is_some() {
        plan.push(Action::Unlink { key: r.private });
    }
}

/// What `block_bio_remap` says and `INFLIGHT[bio]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remapping {
    /// The kind of disk the bio is on now.
    pub to: DiskKind,
    /// Where it came from.
    pub from: RemapFrom,
    /// `INFLIGHT[bio]`.
    pub own: Found,
}

/// `block_bio_remap` of `r` (probes/bio_remap.rs).
pub fn on_remap(r: &BioRead, at: &Remapping, a: &Ancestry, learned: Learned) -> Plan {
    let Remapping { to, from, own } = *at;
    let mut plan = Plan::new();
    if to == DiskKind::BioBased {
        // Its end is traced there (F1).
        return plan;
    }
    if own.present() {
        if let Found::Live(e) = own {
            if e.end_by != EndBy::Remapped {
                if e.end_by == EndBy::Chained {
                    unlink(&mut plan, r, Some(&e), a, learned);
                }
                plan.push(Action::SetEndBy {
                    bio: r.bio,
                    end_by: EndBy::Remapped,
                });
                plan.push(Action::RemappedLive(1));
            }
        }
        return plan;
    }
    let p = piece_of(r, Some(from), a);
    if p.forget_split {
        plan.push(Action::ForgetSplit { piece: r.bio });
    }
    if let Some((bio, pieces, folded_bytes)) = p.parent_counts {
        plan.push(Action::SetCounts {
            bio,
            pieces,
            folded_bytes,
        });
    }
    match p.entry {
        None => {
            // split_done (2266dc6).
            if kept!(SplitDone) && learned.parents_kept {
                plan.push(Action::ForgetSplit { piece: r.bio });
            }
        }
        Some(mut e) => {
            e.end_by = EndBy::Remapped;
            plan.push(Action::Put {
                bio: r.bio,
                entry: e,
            });
            plan.push(Action::RemappedLive(1));
        }
    }
    plan
}

/// The first half of a bio's end on a bio-based disk (inflight.rs `take_bio`): whether to
/// delete `INFLIGHT[bio]` first. If the delete finds the entry ([`end_taken`] with it, when
/// live) the end is its own; if not (another CPU took it) or nothing was there,
/// [`end_as_piece`] decides.
pub const fn end_takes(own: Found) -> bool {
    own.present()
}

/// The end of `r` at `now`, whose own live entry `e` this program deleted (bio_complete.rs
/// `bio_completed`, `bio_ended`).
pub fn end_taken(r: &BioRead, e: &BioEntry, now: Nanos, a: &Ancestry, learned: Learned) -> Plan {
    let mut plan = Plan::new();
    unlink(&mut plan, r, Some(e), a, learned);
    // Pieces ended unseen: all of its size at entry is done.
    let bytes = if e.pieces == 0 && r.size != 0 && r.size <= e.size {
        r.size
    } else {
        e.size
    };
    plan.push(Action::Count(Io {
        disk: e.disk,
        class: e.class,
        ios: 1 + e.pieces as u64,
        bytes: bytes as u64 + e.folded_bytes,
        enter: e.enter,
        end: now,
        status: r.status,
    }));
    plan
}

/// The end of `r` at `now` on `disk` with no entry of its own: a piece, a piece of a discard,
/// a folded chained bio, or untracked (bio_complete.rs `bio_completed`).
pub fn end_as_piece(
    r: &BioRead,
    disk: DiskDev,
    now: Nanos,
    a: &Ancestry,
    learned: Learned,
) -> Plan {
    let mut plan = Plan::new();
    let p = piece_of(r, None, a);
    if let Some(e) = p.entry {
        if p.forget_split {
            plan.push(Action::ForgetSplit { piece: r.bio });
        }
        if let Some((bio, pieces, folded_bytes)) = p.parent_counts {
            plan.push(Action::SetCounts {
                bio,
                pieces,
                folded_bytes,
            });
        }
        // F5: a chained bio's end was traced.
        plan.push(Action::Learn(Latch::ChainedEndsTraced));
        unlink(&mut plan, r, None, a, learned);
        plan.push(Action::Count(Io {
            disk: e.disk,
            class: e.class,
            ios: 1,
            bytes: e.size as u64,
            enter: e.enter,
            end: now,
            status: r.status,
        }));
        return plan;
    }
    if is_piece_of_discard(r.bio, a) {
        plan.push(Action::Learn(Latch::ChainedEndsTraced));
        return plan;
    }
    if entered_at(r.bio, a).is_some() {
        plan.push(Action::Learn(Latch::ChainedEndsTraced));
        unlink(&mut plan, r, None, a, learned);
        return plan;
    }
    plan.push(Action::Untracked {
        disk,
        class: r.class,
    });
    plan
}

/// A remapped entry `e` of `bio` ends with the request below that carried it at `now`
/// (probes/bio_remap.rs `take`, `end_found`, `ended_unrequested`): deleted, kept for its
/// pieces still to come (F8), counted with them.
pub fn end_remapped(bio: BioPtr, e: &BioEntry, now: Nanos, status: u8) -> Plan {
    let mut plan = Plan::new();
    if e.end_by != EndBy::Remapped {
        return plan;
    }
    if keep_first() && e.pieces > 0 {
        // The latch first: split_done must run for any piece that can find the kept parent.
        plan.push(Action::Learn(Latch::ParentsKept));
        plan.push(Action::KeepEnded { bio, entry: *e });
    }
    // As the programs do: deleted, then kept (a grandchild remapped in between finds
    // neither: a model finding, docs/design/stacked-disks.md).
    plan.push(Action::Remove { bio });
    plan.push(Action::RemappedLive(-1));
    if e.pieces > 0 && !keep_first() {
        plan.push(Action::KeepEnded { bio, entry: *e });
        plan.push(Action::Learn(Latch::ParentsKept));
    }
    plan.push(Action::Count(Io {
        disk: e.disk,
        class: e.class,
        ios: 1 + e.pieces as u64,
        bytes: e.size as u64 + e.folded_bytes,
        enter: e.enter,
        end: now,
        status,
    }));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::Op;

    const MD: DiskDev = DiskDev(9 << 20);

    fn entry(op: Op, pieces: u16, end_by: EndBy) -> BioEntry {
        BioEntry {
            enter: Nanos(100),
            disk: MD,
            class: op as u16,
            sector: Sectors(0),
            size: 65536,
            pieces,
            folded_bytes: 0,
            end_by,
        }
    }

    fn up(bio: u64, inflight: Found) -> Option<Up> {
        Some(Up {
            bio: BioPtr(bio),
            inflight,
            ..Up::default()
        })
    }

    #[test]
    fn direct_parent_holds_only_a_counted_piece() {
        let e = entry(Op::Write, 1, EndBy::Traced);
        let mut a = Ancestry {
            up: [up(2, Found::Live(e)), None],
            split_parent: Some(BioPtr(2)),
        };
        let p = tracked_parent(BioPtr(1), &a).unwrap();
        assert!(p.holds && p.between.is_none());
        a.split_parent = None;
        assert!(!tracked_parent(BioPtr(1), &a).unwrap().holds);
    }

    #[test]
    fn an_ended_direct_parent_is_none_an_ended_grandparent_counts() {
        let e = entry(Op::Write, 1, EndBy::Remapped);
        let mut u = up(2, Found::Absent).unwrap();
        u.ended = Some(e);
        let a = Ancestry {
            up: [Some(u), None],
            split_parent: None,
        };
        assert!(tracked_parent(BioPtr(1), &a).is_none());
        let a = Ancestry {
            up: [up(3, Found::Absent), Some(u)],
            split_parent: None,
        };
        let p = tracked_parent(BioPtr(1), &a).unwrap();
        assert_eq!(
            (p.kept, p.holds, p.between),
            (Kept::Ended, false, Some(BioPtr(3)))
        );
    }

    #[test]
    fn a_clone_that_overlaps_its_parent_is_no_piece() {
        let e = entry(Op::Read, 0, EndBy::Traced);
        let mut u = up(2, Found::Live(e)).unwrap();
        u.now = Extent {
            start: Sectors(0),
            len: Sectors(8),
        };
        let a = Ancestry {
            up: [Some(u), None],
            split_parent: None,
        };
        let r = BioRead {
            bio: BioPtr(1),
            private: BioPtr(2),
            size: 4096,
            ..BioRead::default()
        };
        let from = RemapFrom {
            disk: MD,
            sector: Sectors(0),
        };
        assert!(piece_of(&r, Some(from), &a).entry.is_none());
        let from = RemapFrom {
            disk: MD,
            sector: Sectors(8),
        };
        assert!(piece_of(&r, Some(from), &a).entry.is_some());
    }

    #[test]
    fn a_remap_from_another_disk_is_no_piece() {
        let e = entry(Op::Write, 0, EndBy::Traced);
        let a = Ancestry {
            up: [up(2, Found::Live(e)), None],
            split_parent: None,
        };
        let r = BioRead {
            bio: BioPtr(1),
            private: BioPtr(2),
            size: 4096,
            ..BioRead::default()
        };
        let from = RemapFrom {
            disk: DiskDev(7 << 20 | 1),
            sector: Sectors(64),
        };
        assert!(piece_of(&r, Some(from), &a).entry.is_none());
    }

    #[test]
    fn a_piece_of_a_remapped_parent_stays_in_its_count() {
        let e = entry(Op::Write, 1, EndBy::Remapped);
        let a = Ancestry {
            up: [up(2, Found::Live(e)), None],
            split_parent: Some(BioPtr(2)),
        };
        let r = BioRead {
            bio: BioPtr(1),
            private: BioPtr(2),
            sector: Sectors(128),
            size: 4096,
            ..BioRead::default()
        };
        let from = RemapFrom {
            disk: MD,
            sector: Sectors(128),
        };
        let p = piece_of(&r, Some(from), &a);
        assert!(p.entry.is_none() && p.forget_split && p.parent_counts.is_none());
        // Its traced end (no remap) takes it out.
        let p = piece_of(&r, None, &a);
        assert_eq!(p.parent_counts, Some((BioPtr(2), 0, 0)));
    }

    #[test]
    fn entry_folds_a_linked_chained_bio_and_links_itself() {
        let r = BioRead {
            bio: BioPtr(2),
            private: BioPtr(3),
            class: Op::Write as u16,
            size: 1 << 20,
            ..BioRead::default()
        };
        let mut c = entry(Op::Write, 0, EndBy::Chained);
        c.size = 1 << 20;
        let fold = FoldView {
            link: Some(Link {
                child: BioPtr(1),
                enter: Nanos(100),
            }),
            child: Found::Live(c),
        };
        let at = Entering {
            disk: MD,
            now: Nanos(200),
            old: Found::Absent,
            fold,
            parent_live: false,
        };
        let plan = on_entry(&r, &at, Learned::default());
        let acts: std::vec::Vec<_> = plan.iter().copied().collect();
        assert!(
            matches!(acts[1], Action::Put { entry, .. } if entry.pieces == 1 && entry.folded_bytes == 1 << 20)
        );
        assert!(matches!(acts[2], Action::FoldOrUndo { bio: BioPtr(1), .. }));
        assert!(matches!(
            acts[3],
            Action::Link {
                next: BioPtr(3),
                ..
            }
        ));
        // Once chained ends are traced: no fold, no link.
        let learned = Learned {
            chained_ends_traced: true,
            ..Learned::default()
        };
        assert_eq!(on_entry(&r, &at, learned).len(), 2);
    }

    #[test]
    fn a_remapped_parent_ends_with_its_pieces_and_is_kept() {
        let e = entry(Op::Write, 2, EndBy::Remapped);
        let plan = end_remapped(BioPtr(2), &e, Nanos(300), 0);
        let acts: std::vec::Vec<_> = plan.iter().copied().collect();
        assert!(acts.contains(&Action::KeepEnded {
            bio: BioPtr(2),
            entry: e
        }));
        assert!(
            matches!(acts.last(), Some(Action::Count(io)) if io.ios == 3 && io.latency() == Some(Nanos(200)))
        );
    }
}
