//! I/O classes: the request's operation plus the REQ_* flags users filter on.
//!
//! This is the one place where kernel `cmd_flags` are decoded ([`classify`], run inside the
//! eBPF programs) and where the resulting class is turned into names ([`Class`]). A class is a
//! `u16`: bits 0..5 the [`Op`], bit [`PREFLUSH`] and up the flags, bit [`LOG`] the log region,
//! bits [`IOPRIO_MASK`] the request's I/O priority class ([`with_ioprio`], [`IOPRIO_CLASSES`]).

use crate::layout::KernelLayout;

/// Operation of a request: the kernel's `enum req_op` (`enum req_opf` before 6.0,
/// include/linux/blk_types.h) under its own names. The kernel's numbers differ between
/// versions, so a class carries this code instead; [`OpTable`] maps one to the other.
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
    /// REQ_OP_WRITE_ZEROES.
    WriteZeroes = 4,
    /// REQ_OP_SECURE_ERASE.
    SecureErase = 5,
    /// REQ_OP_WRITE_SAME (removed in 5.18).
    WriteSame = 6,
    /// REQ_OP_ZONE_APPEND: a data write whose sector the device picks inside the zone.
    ZoneAppend = 7,
    /// REQ_OP_ZONE_RESET.
    ZoneReset = 8,
    /// REQ_OP_ZONE_RESET_ALL.
    ZoneResetAll = 9,
    /// REQ_OP_ZONE_OPEN.
    ZoneOpen = 10,
    /// REQ_OP_ZONE_CLOSE.
    ZoneClose = 11,
    /// REQ_OP_ZONE_FINISH.
    ZoneFinish = 12,
    /// REQ_OP_SCSI_IN (SCSI passthrough, removed in 5.18 for REQ_OP_DRV_IN).
    ScsiIn = 13,
    /// REQ_OP_SCSI_OUT (removed in 5.18 for REQ_OP_DRV_OUT).
    ScsiOut = 14,
    /// REQ_OP_DRV_IN: driver-private passthrough from the device (SG_IO, NVMe passthrough,
    /// virtio-blk's GET_ID).
    DrvIn = 15,
    /// REQ_OP_DRV_OUT: driver-private passthrough to the device.
    DrvOut = 16,
    /// An op of the running kernel's enum this table does not list (the daemon logs its
    /// name and number once), as the kernel's `blk_op_str` says "UNKNOWN".
    Unknown = 17,
}

impl Op {
    /// All ops, in code order.
    pub const ALL: [Op; 18] = [
        Op::Read,
        Op::Write,
        Op::Flush,
        Op::Discard,
        Op::WriteZeroes,
        Op::SecureErase,
        Op::WriteSame,
        Op::ZoneAppend,
        Op::ZoneReset,
        Op::ZoneResetAll,
        Op::ZoneOpen,
        Op::ZoneClose,
        Op::ZoneFinish,
        Op::ScsiIn,
        Op::ScsiOut,
        Op::DrvIn,
        Op::DrvOut,
        Op::Unknown,
    ];

    /// Decodes the low bits of a class.
    pub const fn from_code(code: u16) -> Op {
        // An identity match: the compiler makes it one comparison, no table in `.rodata`.
        match code & OP_MASK {
            0 => Op::Read,
            1 => Op::Write,
            2 => Op::Flush,
            3 => Op::Discard,
            4 => Op::WriteZeroes,
            5 => Op::SecureErase,
            6 => Op::WriteSame,
            7 => Op::ZoneAppend,
            8 => Op::ZoneReset,
            9 => Op::ZoneResetAll,
            10 => Op::ZoneOpen,
            11 => Op::ZoneClose,
            12 => Op::ZoneFinish,
            13 => Op::ScsiIn,
            14 => Op::ScsiOut,
            15 => Op::DrvIn,
            16 => Op::DrvOut,
            _ => Op::Unknown,
        }
    }

    /// The kernel's enumerator name (`REQ_OP_` + the upper-cased [`Self::name`]); `None` for
    /// [`Op::Unknown`].
    pub const fn kernel_name(self) -> Option<&'static str> {
        Some(match self {
            Op::Read => "REQ_OP_READ",
            Op::Write => "REQ_OP_WRITE",
            Op::Flush => "REQ_OP_FLUSH",
            Op::Discard => "REQ_OP_DISCARD",
            Op::WriteZeroes => "REQ_OP_WRITE_ZEROES",
            Op::SecureErase => "REQ_OP_SECURE_ERASE",
            Op::WriteSame => "REQ_OP_WRITE_SAME",
            Op::ZoneAppend => "REQ_OP_ZONE_APPEND",
            Op::ZoneReset => "REQ_OP_ZONE_RESET",
            Op::ZoneResetAll => "REQ_OP_ZONE_RESET_ALL",
            Op::ZoneOpen => "REQ_OP_ZONE_OPEN",
            Op::ZoneClose => "REQ_OP_ZONE_CLOSE",
            Op::ZoneFinish => "REQ_OP_ZONE_FINISH",
            Op::ScsiIn => "REQ_OP_SCSI_IN",
            Op::ScsiOut => "REQ_OP_SCSI_OUT",
            Op::DrvIn => "REQ_OP_DRV_IN",
            Op::DrvOut => "REQ_OP_DRV_OUT",
            Op::Unknown => return None,
        })
    }

    /// The `op` label value: the kernel's `blk_op_str()` (block/blk-core.c) in lower case.
    pub const fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::WriteZeroes => "write_zeroes",
            Op::SecureErase => "secure_erase",
            Op::WriteSame => "write_same",
            Op::ZoneAppend => "zone_append",
            Op::ZoneReset => "zone_reset",
            Op::ZoneResetAll => "zone_reset_all",
            Op::ZoneOpen => "zone_open",
            Op::ZoneClose => "zone_close",
            Op::ZoneFinish => "zone_finish",
            Op::ScsiIn => "scsi_in",
            Op::ScsiOut => "scsi_out",
            Op::DrvIn => "drv_in",
            Op::DrvOut => "drv_out",
            Op::Unknown => "unknown",
        }
    }

    /// The op of an `op` label value ([`Self::name`]).
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// The operation letter(s) of blktrace's rwbs string (kernel/trace/blktrace.c:
    /// blk_fill_rwbs): `N` for every op it has no letter for.
    pub const fn rwbs(self) -> &'static str {
        match self {
            Op::Read => "R",
            Op::Write | Op::WriteSame => "W",
            Op::Flush => "F",
            Op::Discard => "D",
            Op::SecureErase => "DE",
            _ => "N",
        }
    }

    /// Whether the op moves data that the request's bytes count ([`Op::ZoneAppend`] is a
    /// write whose sector the device chooses).
    pub const fn is_data_write(self) -> bool {
        matches!(self, Op::Write | Op::ZoneAppend)
    }

    /// Whether the op is a passthrough command, which /proc/diskstats does not count
    /// (block/blk-mq.c `blk_do_io_stat`: never for passthrough, unless the queue's
    /// `iostats_passthrough` is on, 6.13+).
    pub const fn is_passthrough(self) -> bool {
        matches!(self, Op::ScsiIn | Op::ScsiOut | Op::DrvIn | Op::DrvOut)
    }
}

/// A /proc/diskstats column group (include/linux/blk_types.h `enum stat_group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StatGroup {
    /// Reads completed, sectors read, time reading.
    Read,
    /// Writes completed, sectors written, time writing.
    Write,
    /// Discards completed, sectors discarded.
    Discard,
    /// Flush requests completed.
    Flush,
}

/// The diskstats group a completed request of `op` (kernel number `raw`) is counted in, or
/// `None` where diskstats does not count it (passthrough). As the kernel's `op_stat_group`
/// (include/linux/blkdev.h): discards apart, then by `op_is_write`, the number's lowest bit;
/// so on 5.10 a zone reset (6) is a read and on 6.x (13) a write, both with 0 sectors. The
/// flush request is counted apart (block/blk-flush.c `blk_account_io_flush`).
pub const fn stat_group(op: Op, raw: u32) -> Option<StatGroup> {
    if op.is_passthrough() {
        return None;
    }
    Some(match op {
        Op::Flush => StatGroup::Flush,
        Op::Discard => StatGroup::Discard,
        _ if raw & 1 != 0 => StatGroup::Write,
        _ => StatGroup::Read,
    })
}

/// Size of [`OpTable`]: `REQ_OP_BITS` is 8 on every kernel since 4.10, so a masked op indexes
/// it without a bounds check.
pub const OP_TABLE_LEN: usize = 256;

/// The kernel's op numbers mapped to [`Op`] codes, built by the daemon from the running
/// kernel's `enum req_op` ([`op_table`]) and read by the programs ([`op_of`]).
pub type OpTable = [u8; 256];

/// The [`OpTable`] of a kernel whose op enumerators are `enumerators` (name, value), and
/// those it names that [`Op`] does not list (`__REQ_OP_LAST`/`REQ_OP_LAST` are not ops).
/// Every number no enumerator has maps to [`Op::Unknown`].
pub fn op_table<'a>(
    enumerators: impl IntoIterator<Item = (&'a str, u32)>,
) -> (OpTable, [Option<(&'a str, u32)>; 8]) {
    let mut table = [Op::Unknown as u8; OP_TABLE_LEN];
    let mut unlisted = [None; 8];
    let mut n = 0;
    for (name, raw) in enumerators {
        if !name.starts_with("REQ_OP_") || name == "REQ_OP_LAST" {
            continue;
        }
        match Op::ALL
            .into_iter()
            .find(|op| op.kernel_name() == Some(name))
        {
            Some(op) if (raw as usize) < OP_TABLE_LEN => table[raw as usize] = op as u8,
            _ => {
                if n < unlisted.len() {
                    unlisted[n] = Some((name, raw));
                    n += 1;
                }
            }
        }
    }
    (table, unlisted)
}

/// Bits of a class holding the [`Op`].
pub const OP_MASK: u16 = 0x1f;
/// REQ_PREFLUSH: flush the device's volatile cache before this write.
pub const PREFLUSH: u16 = 1 << 5;
/// REQ_FUA: this write must be on stable media when it completes.
pub const FUA: u16 = 1 << 6;
/// REQ_SYNC: someone waits for it (O_DSYNC, fsync, log writes).
pub const SYNC: u16 = 1 << 7;
/// REQ_META: filesystem metadata.
pub const META: u16 = 1 << 8;
/// REQ_RAHEAD: readahead, may be failed by the driver.
pub const RAHEAD: u16 = 1 << 9;
/// Not a REQ_* flag: the request starts inside a filesystem log (journal) range known to the
/// daemon (XFS log, ext4/jbd2 journal; see `observer/src/fslog/`), or its first bio was
/// remapped from inside such a range of the disk above (md legs, dm targets, NVMe paths:
/// observer-ebpf inherit.rs). Set when the request (or a bio-based disk's bio) enters, from
/// the `LOG_RANGES` and `REMAPS` maps, never by [`classify`].
pub const LOG: u16 = 1 << 10;

/// Bits of a class holding the I/O priority class of a request (bits 11..13): its
/// `ioprio >> IOPRIO_CLASS_SHIFT`, read once when the request enters (observer-ebpf
/// inflight.rs `enter`, kernel.rs `rq_ioprio`: `request::ioprio`, or since 6.15 its first
/// bio's `bi_ioprio`, as the kernel's `req_get_ioprio`), then [`with_ioprio`]; so a request's
/// completion, its lost completion and its `/inflight` record all carry it. Also read for
/// untracked completions. 0 (`none`) where no request is read: the I/Os of bio-based disks
/// (dm, md), merges (counted at the merge, by the bio's or merged request's flags) and the
/// flush request (no bio).
pub const IOPRIO_MASK: u16 = 0x7 << IOPRIO_BIT;
/// Lowest bit of [`IOPRIO_MASK`].
const IOPRIO_BIT: u16 = 11;
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

/// The operation of a raw `cmd_flags` / `bi_opf`: its `REQ_OP_*` bits (`REQ_OP_MASK`) looked
/// up in the table the daemon built from the running kernel's `enum req_op` (`enum req_opf`
/// before 6.0: include/linux/blk_types.h). The one decoder of the kernel's op bits;
/// [`Op::from_code`] is the one of a class's.
#[inline(always)]
pub fn op_of(opf: u32, l: &KernelLayout) -> Op {
    Op::from_code(l.op_codes[(opf & l.op_mask) as u8 as usize] as u16)
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

    /// `enum req_op` of 6.1 to 6.18 (include/linux/blk_types.h).
    pub(crate) const REQ_OP_6X: [(&str, u32); 15] = [
        ("REQ_OP_READ", 0),
        ("REQ_OP_WRITE", 1),
        ("REQ_OP_FLUSH", 2),
        ("REQ_OP_DISCARD", 3),
        ("REQ_OP_SECURE_ERASE", 5),
        ("REQ_OP_ZONE_APPEND", 7),
        ("REQ_OP_WRITE_ZEROES", 9),
        ("REQ_OP_ZONE_OPEN", 10),
        ("REQ_OP_ZONE_CLOSE", 11),
        ("REQ_OP_ZONE_FINISH", 12),
        ("REQ_OP_ZONE_RESET", 13),
        ("REQ_OP_ZONE_RESET_ALL", 15),
        ("REQ_OP_DRV_IN", 34),
        ("REQ_OP_DRV_OUT", 35),
        ("REQ_OP_LAST", 36),
    ];

    /// `enum req_opf` of 5.10 (include/linux/blk_types.h).
    pub(crate) const REQ_OP_5_10: [(&str, u32); 18] = [
        ("REQ_OP_READ", 0),
        ("REQ_OP_WRITE", 1),
        ("REQ_OP_FLUSH", 2),
        ("REQ_OP_DISCARD", 3),
        ("REQ_OP_SECURE_ERASE", 5),
        ("REQ_OP_ZONE_RESET", 6),
        ("REQ_OP_WRITE_SAME", 7),
        ("REQ_OP_ZONE_RESET_ALL", 8),
        ("REQ_OP_WRITE_ZEROES", 9),
        ("REQ_OP_ZONE_OPEN", 10),
        ("REQ_OP_ZONE_CLOSE", 11),
        ("REQ_OP_ZONE_FINISH", 12),
        ("REQ_OP_ZONE_APPEND", 13),
        ("REQ_OP_SCSI_IN", 32),
        ("REQ_OP_SCSI_OUT", 33),
        ("REQ_OP_DRV_IN", 34),
        ("REQ_OP_DRV_OUT", 35),
        ("REQ_OP_LAST", 36),
    ];

    /// The 6.18 values (include/linux/blk_types.h); the daemon reads them from BTF at runtime.
    pub(crate) fn layout() -> KernelLayout {
        KernelLayout {
            op_codes: op_table(REQ_OP_6X).0,
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
    /// past `Unknown` (none is made) still decode to `Unknown`.
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
            (5, Op::SecureErase),
            (7, Op::ZoneAppend),
            (13, Op::ZoneReset),
            (15, Op::ZoneResetAll),
            (34, Op::DrvIn),
            (35, Op::DrvOut),
            (4, Op::Unknown),  // no enumerator
            (36, Op::Unknown), // REQ_OP_LAST
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
            assert_eq!(op == Op::Unknown, code >= Op::Unknown as u16, "code {code}");
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
        assert_eq!(Class(classify(5, &l)).rwbs(&mut [0; 8]), "DE");
        assert_eq!(Class(classify(7 | 1 << 11, &l)).rwbs(&mut [0; 8]), "NS");
        for op in Op::ALL {
            assert_eq!(Op::from_code(op as u16), op);
            assert_eq!(Op::from_name(op.name()), Some(op));
        }
    }

    /// Each kernel's numbers map to the same ops by name, every listed op of 5.10 and 6.x
    /// is known, and the kernel's own spelling is the label (`REQ_OP_` dropped, lower case).
    #[test]
    fn op_tables_follow_each_kernels_numbers() {
        for (kernel, enumerators) in [("6.x", &REQ_OP_6X[..]), ("5.10", &REQ_OP_5_10[..])] {
            let (table, unlisted) = op_table(enumerators.iter().copied());
            assert_eq!(unlisted, [None; 8], "{kernel}");
            for &(name, raw) in enumerators {
                let op = Op::from_code(table[raw as usize] as u16);
                if name == "REQ_OP_LAST" {
                    assert_eq!(op, Op::Unknown);
                    continue;
                }
                assert_eq!(op.kernel_name(), Some(name), "{kernel}");
                assert_eq!(
                    op.name().to_uppercase(),
                    name["REQ_OP_".len()..],
                    "{kernel}"
                );
            }
        }
        let (t510, _) = op_table(REQ_OP_5_10);
        let (t6, _) = op_table(REQ_OP_6X);
        assert_eq!(t510[13], Op::ZoneAppend as u8);
        assert_eq!(t6[13], Op::ZoneReset as u8);
        let (_, unlisted) = op_table([("REQ_OP_READ", 0), ("REQ_OP_FROB", 17)]);
        assert_eq!(unlisted[0], Some(("REQ_OP_FROB", 17)));
    }

    /// diskstats' group follows the op's number: a zone reset is a read on 5.10 (6) and a
    /// write on 6.x (13); zone appends are writes; passthrough is not counted.
    #[test]
    fn stat_groups_follow_op_is_write() {
        use StatGroup::*;
        for (kernel, enumerators) in [("6.x", &REQ_OP_6X[..]), ("5.10", &REQ_OP_5_10[..])] {
            let (table, _) = op_table(enumerators.iter().copied());
            let group = |name: &str| {
                let raw = enumerators.iter().find(|e| e.0 == name).unwrap().1;
                stat_group(Op::from_code(table[raw as usize] as u16), raw)
            };
            assert_eq!(group("REQ_OP_READ"), Some(Read), "{kernel}");
            assert_eq!(group("REQ_OP_WRITE"), Some(Write), "{kernel}");
            assert_eq!(group("REQ_OP_ZONE_APPEND"), Some(Write), "{kernel}");
            assert_eq!(group("REQ_OP_WRITE_ZEROES"), Some(Write), "{kernel}");
            assert_eq!(group("REQ_OP_DISCARD"), Some(Discard), "{kernel}");
            assert_eq!(group("REQ_OP_FLUSH"), Some(Flush), "{kernel}");
            assert_eq!(group("REQ_OP_ZONE_CLOSE"), Some(Write), "{kernel}");
            assert_eq!(group("REQ_OP_ZONE_FINISH"), Some(Read), "{kernel}");
            assert_eq!(group("REQ_OP_DRV_IN"), None, "{kernel}");
        }
        assert_eq!(stat_group(Op::ZoneReset, 6), Some(Read));
        assert_eq!(stat_group(Op::ZoneReset, 13), Some(Write));
    }
}
