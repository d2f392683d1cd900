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
