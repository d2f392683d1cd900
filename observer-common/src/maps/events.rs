//! What the programs send or keep for the daemon to read: `EVENTS` (slow requests, stall
//! episodes) and the missed-merge rings (`MERGE_PAIRS`).

use super::*;

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
    /// The file whose data the request's first page holds, read at its completion.
    pub file: FileRef,
}

/// [`FileRef::kind`]: no data page (the flush request, a discard, write zeroes), or the
/// layout is unknown.
pub const FILE_NONE: u32 = 0;
/// Page cache of a file (any inode but a block device's): `ino`, `fs_dev` and `inode` set.
pub const FILE_DATA: u32 = 1;
/// Page cache of a block device inode: buffer heads, i.e. filesystem metadata and the journal
/// (fs/buffer.c, jbd2), or raw I/O through the block device's page cache.
pub const FILE_METADATA: u32 = 2;
/// User memory of iomap direct I/O (fs/iomap/direct-io.c): the file is the one of the
/// `struct kiocb` the bio's `struct iomap_dio` (`bi_private`) serves; `ino`, `fs_dev`, `inode`
/// set.
pub const FILE_DIRECT: u32 = 3;
/// Anonymous memory (PAGE_MAPPING_ANON): direct I/O from user memory whose file could not be
/// found (not iomap), or swap.
pub const FILE_ANON: u32 = 4;
/// Kernel memory: no mapping, or one that is no page cache (a slab or driver buffer, a jbd2
/// frozen copy, a bounce page).
pub const FILE_KERNEL: u32 = 5;

/// The file whose data a request (its first bio's first page) carries
/// (observer-ebpf/src/file.rs). 24 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileRef {
    /// Kernel address of the `struct inode` (for the daemon's path lookup, which checks it still
    /// holds `ino` on `fs_dev`); 0 when none.
    pub inode: u64,
    /// `inode::i_ino`.
    pub ino: u64,
    /// `inode::i_sb->s_dev`: the filesystem's device, kernel encoding (major << 20 | minor, as
    /// [`mkdev`]).
    pub fs_dev: u32,
    /// [`FILE_NONE`], [`FILE_DATA`], [`FILE_METADATA`], [`FILE_DIRECT`], [`FILE_ANON`],
    /// [`FILE_KERNEL`].
    pub kind: u32,
}

/// Path components kept by the on-demand lookup (observer-ebpf/src/reqstate.rs `file_of`).
pub const FILE_PATH_DEPTH: usize = 8;
/// Bytes kept of each component (NUL-terminated).
pub const FILE_NAME_BYTES: usize = 64;

/// `FILE_INFO` (one element, in the request-state object): what one on-demand lookup found.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FileInfo {
    /// The file.
    pub file: FileRef,
    /// Components found in `names`, from the file up (`names[0]` is the file's own name).
    pub depth: u32,
    /// 1 if the walk stopped at [`FILE_PATH_DEPTH`] before the filesystem's root.
    pub truncated: u32,
    /// NUL-terminated names, leaf first.
    pub names: [[u8; FILE_NAME_BYTES]; FILE_PATH_DEPTH],
}

/// The request-state object's map of one [`FileInfo`].
pub const FILE_INFO: &str = "FILE_INFO";

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
