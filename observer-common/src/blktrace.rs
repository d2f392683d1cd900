//! blktrace's binary format and what `observer trace` sends from its programs to build it.
//!
//! The record layout and every constant below are uapi (ABI, stable since blktrace v2 of
//! 2006): include/uapi/linux/blktrace_api.h (`struct blk_io_trace`, `enum blktrace_cat`,
//! `enum blktrace_act`, `enum blktrace_notify`). Which category bits an event carries is
//! kernel/trace/blktrace.c `__blk_add_trace` (and `blk_add_trace_rq`: request events add
//! `BLK_TC_FS`); [`action`] mirrors it over the one flag decoder, [`crate::class`].

use crate::{
    class::{self, classify, Class, Op},
    layout::KernelLayout,
};

/// `BLK_IO_TRACE_MAGIC`: the first word of every record is `MAGIC | VERSION`.
pub const MAGIC: u32 = 0x6561_7400;
/// `BLK_IO_TRACE_VERSION`: the record version blkparse reads.
pub const VERSION: u32 = 0x07;
/// Bytes of `struct blk_io_trace` (the pdu follows it).
pub const RECORD_BYTES: usize = 48;
/// `BLK_TC_SHIFT`: category bits sit above the action code.
pub const TC_SHIFT: u32 = 16;

/// `enum blktrace_cat` bits (before the shift of [`TC_SHIFT`]).
pub mod cat {
    /// BLK_TC_READ.
    pub const READ: u32 = 1 << 0;
    /// BLK_TC_WRITE.
    pub const WRITE: u32 = 1 << 1;
    /// BLK_TC_FLUSH (REQ_PREFLUSH, and REQ_OP_FLUSH).
    pub const FLUSH: u32 = 1 << 2;
    /// BLK_TC_SYNC.
    pub const SYNC: u32 = 1 << 3;
    /// BLK_TC_QUEUE.
    pub const QUEUE: u32 = 1 << 4;
    /// BLK_TC_REQUEUE.
    pub const REQUEUE: u32 = 1 << 5;
    /// BLK_TC_ISSUE.
    pub const ISSUE: u32 = 1 << 6;
    /// BLK_TC_COMPLETE.
    pub const COMPLETE: u32 = 1 << 7;
    /// BLK_TC_FS: a filesystem (not passthrough) request.
    pub const FS: u32 = 1 << 8;
    /// BLK_TC_NOTIFY: a note (process name, ...), not an I/O event.
    pub const NOTIFY: u32 = 1 << 10;
    /// BLK_TC_AHEAD (REQ_RAHEAD).
    pub const AHEAD: u32 = 1 << 11;
    /// BLK_TC_META.
    pub const META: u32 = 1 << 12;
    /// BLK_TC_DISCARD.
    pub const DISCARD: u32 = 1 << 13;
    /// BLK_TC_FUA.
    pub const FUA: u32 = 1 << 15;
}

/// `BLK_TC_ACT(c)`: category bits in an action word.
pub const fn tc_act(c: u32) -> u32 {
    c << TC_SHIFT
}

/// `BLK_TN_PROCESS`: the note naming a pid (pdu: its 16-byte `comm`), written once per task
/// before its first event (blktrace.c `trace_note_tsk`).
pub const TN_PROCESS: u32 = tc_act(cat::NOTIFY);

/// The events `observer trace` records, one per block tracepoint; the value is the action
/// code of `enum blktrace_act` (`__BLK_TA_*`) blkparse prints as the letter in the name.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Event {
    /// Q, `block_bio_queue`: a bio enters (`__BLK_TA_QUEUE`).
    Queue = 1,
    /// M, `block_bio_backmerge` and `block_rq_merge` (`__BLK_TA_BACKMERGE`).
    BackMerge = 2,
    /// F, `block_bio_frontmerge` (`__BLK_TA_FRONTMERGE`).
    FrontMerge = 3,
    /// G, `block_getrq`: a request allocated for a bio (`__BLK_TA_GETRQ`).
    GetRq = 4,
    /// R, `block_rq_requeue` (`__BLK_TA_REQUEUE`).
    Requeue = 6,
    /// D, `block_rq_issue`: dispatched to the driver (`__BLK_TA_ISSUE`).
    Issue = 7,
    /// C, `block_rq_complete`, and `block_bio_complete` for a bio-based disk's bios
    /// (`__BLK_TA_COMPLETE`).
    Complete = 8,
    /// I, `block_rq_insert`: into the scheduler or dispatch list (`__BLK_TA_INSERT`).
    Insert = 12,
    /// X, `block_split`: a bio split, the pdu the new sector (`__BLK_TA_SPLIT`).
    Split = 13,
    /// A, `block_bio_remap`: a stacked disk sent the bio on to this one, the pdu
    /// `struct blk_io_trace_remap` (`__BLK_TA_REMAP`).
    Remap = 15,
}

impl Event {
    /// Every event, in action-code order.
    pub const ALL: [Event; 10] = [
        Event::Queue,
        Event::BackMerge,
        Event::FrontMerge,
        Event::GetRq,
        Event::Requeue,
        Event::Issue,
        Event::Complete,
        Event::Insert,
        Event::Split,
        Event::Remap,
    ];

    /// The event of an action code ([`TraceRecord::event`]).
    pub fn from_code(code: u32) -> Option<Event> {
        Event::ALL.into_iter().find(|e| *e as u32 == code)
    }

    /// blkparse's letter for it (blkparse's `%a`).
    pub const fn letter(self) -> &'static str {
        match self {
            Event::Queue => "Q",
            Event::BackMerge => "M",
            Event::FrontMerge => "F",
            Event::GetRq => "G",
            Event::Requeue => "R",
            Event::Issue => "D",
            Event::Complete => "C",
            Event::Insert => "I",
            Event::Split => "X",
            Event::Remap => "A",
        }
    }

    /// The category of the action itself (`BLK_TA_*` = code | `BLK_TC_ACT(category)`;
    /// `BLK_TA_SPLIT` has none).
    const fn category(self) -> u32 {
        match self {
            Event::Requeue => cat::REQUEUE,
            Event::Issue => cat::ISSUE,
            Event::Complete => cat::COMPLETE,
            Event::Split => 0,
            _ => cat::QUEUE,
        }
    }

    /// Whose event it is by its tracepoint: a request's (blktrace.c `blk_add_trace_rq`) or a
    /// bio's. `block_rq_merge` (M of a request) and `block_bio_complete` (C of a bio) are the
    /// exceptions, marked in the record ([`RQ_MERGE`], [`BIO_COMPLETE`]).
    pub const fn source(self) -> Source {
        match self {
            Event::Requeue | Event::Issue | Event::Complete | Event::Insert => Source::Request,
            _ => Source::Bio,
        }
    }
}

/// Whether an event is a request's or a bio's: blktrace.c `blk_add_trace_rq` adds `BLK_TC_FS`
/// to a (non-passthrough) request's events, `blk_add_trace_bio` nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A bio event (Q, M, F, G, X, A, and C of a bio-based disk).
    Bio,
    /// A request event (I, D, R, C, and M of `block_rq_merge`).
    Request,
}

impl Source {
    /// The source of a record's event ([`TraceRecord::event`], with its marker bits).
    pub fn of_record(event: Event, code: u32) -> Source {
        if code & RQ_MERGE != 0 {
            Source::Request
        } else if code & BIO_COMPLETE != 0 {
            Source::Bio
        } else {
            event.source()
        }
    }
}

/// The action word blktrace writes for `event` of a bio or request with raw flags `opf`
/// (`bi_opf` / `cmd_flags`): the action code, its category, and what `__blk_add_trace` adds:
/// READ or WRITE by `op_is_write` (include/linux/blk_types.h: the op's lowest bit), SYNC,
/// AHEAD, META, FLUSH (REQ_PREFLUSH), FUA, DISCARD for REQ_OP_DISCARD, FLUSH for
/// REQ_OP_FLUSH; plus FS for request events ([`Source`]).
pub fn action(event: Event, source: Source, opf: u32, l: &KernelLayout) -> u32 {
    let c = Class(classify(opf, l));
    let mut bits = event.category();
    bits |= if class::op_is_write(opf, l) {
        cat::WRITE
    } else {
        cat::READ
    };
    for (flag, bit) in [
        (class::SYNC, cat::SYNC),
        (class::RAHEAD, cat::AHEAD),
        (class::META, cat::META),
        (class::PREFLUSH, cat::FLUSH),
        (class::FUA, cat::FUA),
    ] {
        if c.has(flag) {
            bits |= bit;
        }
    }
    match c.op() {
        Op::Discard => bits |= cat::DISCARD,
        Op::Flush => bits |= cat::FLUSH,
        _ => {}
    }
    if source == Source::Request {
        bits |= cat::FS;
    }
    event as u32 | tc_act(bits)
}

/// One event as the programs send it through the `TRACE_EVENTS` ring buffer: fixed size
/// (72 bytes), everything blktrace writes for it but the sequence number (given per CPU by
/// userspace, in time order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceRecord {
    /// `bpf_ktime_get_ns()` at the tracepoint (CLOCK_MONOTONIC ns: blktrace's `ktime_get()`).
    pub time_ns: u64,
    /// First sector (512 B) of the bio or request; 0 for a request without one.
    pub sector: u64,
    /// `bi_opf` or `cmd_flags`, raw (decoded by [`action`] in userspace).
    pub opf: u32,
    /// Bytes: the bio's `bi_size`, the request's `__data_len`, at completion `nr_bytes`.
    pub bytes: u32,
    /// The current task's pid (`task_struct::pid`, the thread id), as blktrace's `tsk->pid`.
    pub pid: u32,
    /// The CPU the tracepoint ran on.
    pub cpu: u32,
    /// Completion error: a request's as `block_rq_complete` passed it (`int` errno before
    /// 5.17's `blk_status_t`), a bio's `bi_status` (a `blk_status_t` on every kernel); 0 for
    /// other events.
    pub error: u32,
    /// [`Event`] code; bit [`RQ_MERGE`] set for `block_rq_merge`.
    pub event: u32,
    /// The current task's `comm` (NUL-padded).
    pub comm: [u8; 16],
    /// X: the sector the bio was split at; A: the sector it had on the disk it came from.
    pub pdu_sector: u64,
    /// A: the disk the bio came from (`MKDEV`); 0 for other events.
    pub pdu_dev: u32,
    /// Padding (0).
    pub pad: u32,
}

/// Set in [`TraceRecord::event`] by `block_rq_merge` (a request merged into another: a request
/// event, with `BLK_TC_FS`).
pub const RQ_MERGE: u32 = 1 << 8;

/// Set in [`TraceRecord::event`] by `block_bio_complete`: a bio's end (a bio event, no
/// `BLK_TC_FS`).
pub const BIO_COMPLETE: u32 = 1 << 9;

/// `TRACE_EVENTS`: the ring buffer of [`TraceRecord`]s.
pub const TRACE_EVENTS: &str = "TRACE_EVENTS";
/// `TRACE_DROPS`: per-CPU array of one u64, records the ring buffer had no room for.
pub const TRACE_DROPS: &str = "TRACE_DROPS";
/// `TRACE_NESTED`: per-CPU array of one u64, completions `t_complete_nest` and
/// `t_bio_end_nest` recorded because the kernel skipped `t_complete` or `t_bio_end` for them
/// (observer-ebpf/src/trace.rs `on_complete`).
pub const TRACE_NESTED: &str = "TRACE_NESTED";
/// Default bytes of `TRACE_EVENTS` (a power of two, as BPF_MAP_TYPE_RINGBUF requires).
pub const TRACE_EVENTS_BYTES: u32 = 8 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::class::tests::layout;

    /// Action words as blktrace.c composes them (`BLK_TA_*` | `BLK_TC_ACT(...)`), checked
    /// against the uapi numbers: blkparse reads these bits back as rwbs letters and event kinds.
    #[test]
    fn action_words_match_blktrace() {
        let l = layout();
        let write_sync = l.op_write | l.flag_sync;
        // Q of a sync write: __BLK_TA_QUEUE | (QUEUE | WRITE | SYNC) << 16.
        assert_eq!(
            action(Event::Queue, Source::Bio, write_sync, &l),
            1 | (0x10 | 0x2 | 0x8) << 16
        );
        // D of a read: __BLK_TA_ISSUE | (ISSUE | READ | FS) << 16.
        assert_eq!(
            action(Event::Issue, Source::Request, l.op_read, &l),
            7 | (0x40 | 0x1 | 0x100) << 16
        );
        // C of a preflush+FUA write: FLUSH and FUA bits, WRITE, COMPLETE, FS.
        let pf = l.op_write | l.flag_preflush | l.flag_fua;
        assert_eq!(
            action(Event::Complete, Source::Request, pf, &l),
            8 | (0x80 | 0x2 | 0x4 | 0x8000 | 0x100) << 16
        );
        // The flush op is not a write: READ with FLUSH (blkparse prints "FN").
        assert_eq!(
            action(Event::Issue, Source::Request, l.op_flush, &l),
            7 | (0x40 | 0x1 | 0x4 | 0x100) << 16
        );
        // A discard is a write with DISCARD; block_rq_merge's M is a request event (FS).
        assert_eq!(
            action(
                Event::BackMerge,
                Source::of_record(Event::BackMerge, 2 | RQ_MERGE),
                l.op_discard,
                &l
            ),
            2 | (0x10 | 0x2 | 0x2000 | 0x100) << 16
        );
        // Readahead and meta.
        let ra = l.op_read | l.flag_rahead | l.flag_meta;
        assert_eq!(
            action(Event::GetRq, Source::Bio, ra, &l),
            4 | (0x10 | 0x1 | 0x800 | 0x1000) << 16
        );
        // C of a bio-based disk's bio: a bio event, no FS (blktrace.c
        // blk_add_trace_bio_complete).
        assert_eq!(
            action(
                Event::Complete,
                Source::of_record(Event::Complete, 8 | BIO_COMPLETE),
                l.op_write,
                &l
            ),
            8 | (0x80 | 0x2) << 16
        );
        // X has no category of its own (BLK_TA_SPLIT); A is QUEUE (BLK_TA_REMAP).
        assert_eq!(
            action(Event::Split, Source::Bio, l.op_read, &l),
            13 | 0x1 << 16
        );
        assert_eq!(
            action(Event::Remap, Source::Bio, l.op_write, &l),
            15 | (0x10 | 0x2) << 16
        );
        for e in Event::ALL {
            assert_eq!(Event::from_code(e as u32), Some(e));
            assert_eq!(Source::of_record(e, e as u32), e.source());
        }
    }
}
