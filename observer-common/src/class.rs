//! I/O classes: the request's operation plus the REQ_* flags users filter on.
//!
//! This is the one place where kernel `cmd_flags` are decoded ([`classify`], run inside the
//! eBPF programs) and where the resulting class is turned into names ([`Class`]). A class is a
//! `u16`: bits 0..4 the [`Op`], bit [`PREFLUSH`] and up the flags, bit [`LOG`] the log region,
//! bits [`IOPRIO_MASK`] the request's I/O priority class ([`with_ioprio`], [`IOPRIO_CLASSES`]).

use crate::layout::KernelLayout;

/// Operation of a request, collapsed from `enum req_op` (include/linux/blk_types.h).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// REQ_OP_READ.
    Read = 0,
    /// REQ_OP_WRITE.
    Write = 1,
    /// REQ_OP_FLUSH: on request-based devices only the block layer's internal flush request
    /// (block/blk-flush.c: `flush_rq`, one per hardware queue) carries it.
    Flush = 2,
    /// REQ_OP_DISCARD.
    Discard = 3,
    /// REQ_OP_WRITE_ZEROES (counted as a write in /proc/diskstats).
    WriteZeroes = 4,
    /// Anything else: secure erase, zone management, driver-private ops.
    Other = 5,
}

impl Op {
    /// All ops, in code order.
    pub const ALL: [Op; 6] = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::WriteZeroes,
        Op::Other,
    ];

    /// Decodes the low bits of a class.
    pub const fn from_code(code: u16) -> Op {
        match code & OP_MASK {
            0 => Op::Read,
            1 => Op::Write,
            2 => Op::Flush,
            3 => Op::Discard,
            4 => Op::WriteZeroes,
            _ => Op::Other,
        }
    }

    /// The `op` label value.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::WriteZeroes => "write_zeroes",
            Op::Other => "other",
        }
    }

    /// The operation letter(s) of blktrace's rwbs string (kernel/trace/blktrace.c: blk_fill_rwbs).
    pub const fn rwbs(self) -> &'static str {
        match self {
            Op::Read => "R",
            Op::Write => "W",
            Op::Flush => "F",
            Op::Discard => "D",
            Op::WriteZeroes | Op::Other => "N",
        }
    }
}

/// Bits of a class holding the [`Op`].
pub const OP_MASK: u16 = 0xf;
/// REQ_PREFLUSH: flush the device's volatile cache before this write.
pub const PREFLUSH: u16 = 1 << 4;
/// REQ_FUA: this write must be on stable media when it completes.
pub const FUA: u16 = 1 << 5;
/// REQ_SYNC: someone waits for it (O_DSYNC, fsync, log writes).
pub const SYNC: u16 = 1 << 6;
/// REQ_META: filesystem metadata.
pub const META: u16 = 1 << 7;
/// REQ_RAHEAD: readahead, may be failed by the driver.
pub const RAHEAD: u16 = 1 << 8;
/// Not a REQ_* flag: the request starts inside a filesystem log (journal) range known to the
/// daemon (XFS log, ext4/jbd2 journal; see `observer/src/fslog/`), or its first bio was
/// remapped from inside such a range of the disk above (md legs, dm targets, NVMe paths:
/// observer-ebpf inherit.rs). Set when the request (or a bio-based disk's bio) enters, from
/// the `LOG_RANGES` and `REMAPS` maps, never by [`classify`].
pub const LOG: u16 = 1 << 9;

/// Bits of a class holding the I/O priority class of a request (bits 10..12): its
/// `ioprio >> IOPRIO_CLASS_SHIFT`, read once when the request enters (observer-ebpf
/// inflight.rs `enter`, kernel.rs `rq_ioprio`: `request::ioprio`, or since 6.15 its first
/// bio's `bi_ioprio`, as the kernel's `req_get_ioprio`), then [`with_ioprio`]; so a request's
/// completion, its lost completion and its `/inflight` record all carry it. Also read for
/// untracked completions. 0 (`none`) where no request is read: the I/Os of bio-based disks
/// (dm, md), merges (counted at the merge, by the bio's or merged request's flags) and the
/// flush request (no bio).
pub const IOPRIO_MASK: u16 = 0x7 << IOPRIO_BIT;
/// Lowest bit of [`IOPRIO_MASK`].
const IOPRIO_BIT: u16 = 10;
/// `IOPRIO_CLASS_SHIFT` (include/uapi/linux/ioprio.h, ABI): the class is `ioprio >> 13`, the
/// level the low 13 bits (IOPRIO_PRIO_DATA).
pub const IOPRIO_CLASS_SHIFT: u16 = 13;

/// The `ioprio_class` label values, indexed by `IOPRIO_PRIO_CLASS(ioprio)` (3 bits): the names
/// of include/uapi/linux/ioprio.h's `IOPRIO_CLASS_NONE`, `_RT`, `_BE`, `_IDLE` in lower case
/// (`none`: the request carries no priority, e.g. a task never given one with ionice), then
/// `class_4` to `class_6` (not defined by the ABI) and `invalid` (`IOPRIO_CLASS_INVALID` = 7,
/// 6.x).
pub const IOPRIO_CLASSES: [&str; 8] = [
    "none", "rt", "be", "idle", "class_4", "class_5", "class_6", "invalid",
];

/// `class` with its I/O priority bits set from a request's `ioprio` (`struct request::ioprio`,
/// u16: class in the top 3 bits, level below; include/uapi/linux/ioprio.h IOPRIO_PRIO_CLASS).
#[inline(always)]
pub const fn with_ioprio(class: u16, ioprio: u16) -> u16 {
    (class & !IOPRIO_MASK) | ((ioprio >> IOPRIO_CLASS_SHIFT) << IOPRIO_BIT)
}

/// The flags exported as labels: (class bit, label name). Label names are the REQ_* names in
/// lower case, except REQ_RAHEAD, exported as `readahead`, and [`LOG`], exported as `log`
/// (`{op="write",log="true"}` selects filesystem log writes).
pub const FLAGS: [(u16, &str); 6] = [
    (PREFLUSH, "preflush"),
    (FUA, "fua"),
    (SYNC, "sync"),
    (META, "meta"),
    (RAHEAD, "readahead"),
    (LOG, "log"),
];

/// The operation of a raw `cmd_flags` / `bi_opf`: its `REQ_OP_*` bits (`REQ_OP_MASK`), with the
/// values BTF gave for them (`enum req_op`, or `enum req_opf` before 6.0:
/// include/linux/blk_types.h). The one decoder of the kernel's op bits; [`Op::from_code`]
/// is the one of a class's.
#[inline(always)]
pub fn op_of(opf: u32, l: &KernelLayout) -> Op {
    let op = opf & l.op_mask;
    if op == l.op_read {
        Op::Read
    } else if op == l.op_write {
        Op::Write
    } else if op == l.op_flush {
        Op::Flush
    } else if op == l.op_discard {
        Op::Discard
    } else if op == l.op_write_zeroes {
        Op::WriteZeroes
    } else {
        Op::Other
    }
}

/// Whether the raw op of `opf` transfers data to the device: `op_is_write`
/// (include/linux/blk_types.h: the op's lowest bit; writes, discards, write-zeroes and the
/// other data-out ops are odd), which blktrace uses to pick its READ or WRITE category.
#[inline(always)]
pub fn op_is_write(opf: u32, l: &KernelLayout) -> bool {
    (opf & l.op_mask) & 1 != 0
}

/// Computes the class of a request or bio from its raw `cmd_flags` / `bi_opf`.
///
/// Must see the flags before the block layer strips PREFLUSH/FUA (block/blk-flush.c), i.e. at
/// `block_io_start` or at bio level. (A merge never sees stripped flags: a request with
/// PREFLUSH or FUA does not merge, `REQ_NOMERGE_FLAGS` in include/linux/blk_types.h.)
#[inline(always)]
pub fn classify(opf: u32, l: &KernelLayout) -> u16 {
    let mut class = op_of(opf, l) as u16;
    if opf & l.flag_preflush != 0 {
        class |= PREFLUSH;
    }
    if opf & l.flag_fua != 0 {
        class |= FUA;
    }
    if opf & l.flag_sync != 0 {
        class |= SYNC;
    }
    if opf & l.flag_meta != 0 {
        class |= META;
    }
    if opf & l.flag_rahead != 0 {
        class |= RAHEAD;
    }
    class
}

/// A decoded class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Class(pub u16);

impl Class {
    /// The operation.
    pub const fn op(self) -> Op {
        Op::from_code(self.0)
    }

    /// Whether a flag bit ([`PREFLUSH`], [`FUA`], ...) is set.
    pub const fn has(self, flag: u16) -> bool {
        self.0 & flag != 0
    }

    /// The `ioprio_class` label value ([`IOPRIO_CLASSES`]): `none`, `rt`, `be`, `idle`, ...
    pub const fn ioprio_class(self) -> &'static str {
        IOPRIO_CLASSES[((self.0 & IOPRIO_MASK) >> IOPRIO_BIT) as usize]
    }

    /// blktrace's rwbs string for this class, e.g. `FWFSM` for an XFS log write
    /// (preflush, write, FUA, sync, meta).
    pub fn rwbs(self, out: &mut [u8; 8]) -> &str {
        let mut n = 0;
        let mut push = |s: &str, n: &mut usize| {
            for b in s.bytes() {
                out[*n] = b;
                *n += 1;
            }
        };
        if self.has(PREFLUSH) {
            push("F", &mut n);
        }
        push(self.op().rwbs(), &mut n);
        if self.has(FUA) {
            push("F", &mut n);
        }
        if self.has(RAHEAD) {
            push("A", &mut n);
        }
        if self.has(SYNC) {
            push("S", &mut n);
        }
        if self.has(META) {
            push("M", &mut n);
        }
        core::str::from_utf8(&out[..n]).unwrap_or("?")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The 6.18 values (include/linux/blk_types.h); the daemon reads them from BTF at runtime.
    pub(crate) fn layout() -> KernelLayout {
        KernelLayout {
            op_mask: 0xff,
            op_read: 0,
            op_write: 1,
            op_flush: 2,
            op_discard: 3,
            op_write_zeroes: 9,
            flag_sync: 1 << 11,
            flag_meta: 1 << 12,
            flag_fua: 1 << 17,
            flag_preflush: 1 << 18,
            flag_rahead: 1 << 19,
            ..Default::default()
        }
    }

    /// The op bits decode the same wherever they are decoded: from the kernel's flags
    /// ([`op_of`]: the only reader of `REQ_OP_*`, used by `classify` and by the programs'
    /// flush checks) and back from the class ([`Op::from_code`]: its only reader, used for
    /// labels and the programs' per-op thresholds); flag bits never change the op, and codes
    /// past `Other` (none is made) still decode to `Other`.
    #[test]
    fn op_bits_decode_in_one_place() {
        let l = layout();
        let flags = 1 << 11 | 1 << 12 | 1 << 17 | 1 << 18 | 1 << 19;
        for (raw, op) in [
            (0, Op::Read),
            (1, Op::Write),
            (2, Op::Flush),
            (3, Op::Discard),
            (9, Op::WriteZeroes),
            (5, Op::Other),  // REQ_OP_SECURE_ERASE
            (13, Op::Other), // REQ_OP_ZONE_APPEND
            (34, Op::Other), // REQ_OP_DRV_IN
        ] {
            assert_eq!(op_of(raw, &l), op, "REQ_OP {raw}");
            assert_eq!(op_of(raw | flags, &l), op, "REQ_OP {raw} with flags");
            assert_eq!(
                Op::from_code(classify(raw | flags, &l)),
                op,
                "class of {raw}"
            );
        }
        for code in 0..=OP_MASK {
            let op = Op::from_code(code);
            assert!((op as usize) < Op::ALL.len());
            assert_eq!(op == Op::Other, code >= Op::Other as u16, "code {code}");
        }
    }

    #[test]
    fn xfs_log_write_decodes_to_fwfsm() {
        let l = layout();
        let opf = 1 | 1 << 11 | 1 << 12 | 1 << 15 /* IDLE, not exported */ | 1 << 17 | 1 << 18;
        let c = Class(classify(opf, &l));
        assert_eq!(c.op(), Op::Write);
        assert!(c.has(PREFLUSH) && c.has(FUA) && c.has(SYNC) && c.has(META) && !c.has(RAHEAD));
        assert_eq!(c.rwbs(&mut [0; 8]), "FWFSM");
    }

    /// The priority class comes from the top 3 bits of `ioprio` (uapi IOPRIO_PRIO_CLASS), never
    /// touches the op or flags, and replaces an earlier one.
    #[test]
    fn ioprio_classes() {
        let l = layout();
        let c = classify(1 | 1 << 11, &l) | LOG;
        // IOPRIO_PRIO_VALUE(class, level) = class << 13 | level.
        for (ioprio, name) in [
            (0u16, "none"),
            (1 << 13 | 4, "rt"),
            (2 << 13 | 7, "be"),
            (3 << 13, "idle"),
            (7 << 13, "invalid"),
        ] {
            let p = Class(with_ioprio(c, ioprio));
            assert_eq!(p.ioprio_class(), name);
            assert_eq!(p.0 & !IOPRIO_MASK, c, "{name}: op and flags kept");
            assert_eq!(p.op(), Op::Write);
            assert_eq!(Class(with_ioprio(p.0, 0)).ioprio_class(), "none");
        }
        assert_eq!(Class(c).ioprio_class(), "none");
        assert_eq!(
            IOPRIO_MASK & (OP_MASK | PREFLUSH | FUA | SYNC | META | RAHEAD | LOG),
            0
        );
    }

    #[test]
    fn ops_and_flags() {
        let l = layout();
        assert_eq!(Class(classify(0, &l)).rwbs(&mut [0; 8]), "R");
        assert_eq!(Class(classify(1 << 19, &l)).rwbs(&mut [0; 8]), "RA");
        assert_eq!(Class(classify(2, &l)).op(), Op::Flush);
        assert_eq!(Class(classify(3 | 1 << 11, &l)).rwbs(&mut [0; 8]), "DS");
        assert_eq!(Class(classify(9, &l)).op(), Op::WriteZeroes);
        assert_eq!(Class(classify(5, &l)).op(), Op::Other); // secure erase
        assert_eq!(Class(classify(35, &l)).op(), Op::Other); // driver private
        for op in Op::ALL {
            assert_eq!(Op::from_code(op as u16), op);
        }
    }
}
