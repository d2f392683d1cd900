//! What `/stalls` and `/inflight` return: the records and the query filter.

use std::collections::BTreeMap;

use serde::Serialize;

use super::file::FileRecord;
use crate::labels::ClassInfo;

/// Who submitted a request, captured at `block_io_start` in the submitting task.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Submitter {
    /// Process id (tgid); 0 for the block layer's own flush request.
    pub pid: u32,
    /// Command name (up to 15 bytes).
    pub comm: String,
    /// cgroup v2 id.
    pub cgroup_id: u64,
    /// cgroup v2 path (relative to the cgroup v2 mount: /sys/fs/cgroup, its unified/ on a hybrid host, or under --host-root), when it still exists.
    pub cgroup: Option<String>,
}

/// A completed request over its slow threshold.
#[derive(Clone, Debug, Serialize)]
pub struct SlowRequest {
    /// Its id, `<run>-<seq>` (`collect::events::RequestId`): what `/stalls?id=` takes and what
    /// the latency histograms' OpenMetrics exemplars name (`request_id`).
    pub id: String,
    /// Completion time (RFC 3339).
    pub time: String,
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// First sector (512 B) at entry.
    pub sector: u64,
    /// Bytes completed.
    pub bytes: u64,
    /// Entered → dispatched (s); null for the flush request (never entered) and for a bio of a
    /// bio-based disk (dm, md: total only).
    pub queue_seconds: Option<f64>,
    /// Dispatched → completed (s); null if never dispatched itself.
    pub device_seconds: Option<f64>,
    /// Entered (or dispatched, for the flush request) → completed (s).
    pub total_seconds: f64,
    /// Bio merges into the request.
    pub merges: u32,
    /// Requeues.
    pub requeues: u8,
    /// `blk_status_t` name (`ok`, `ioerr`, ...).
    pub status: String,
    /// Who submitted it.
    pub submitter: Submitter,
    /// cgroup v2 id of the cgroup that owns the I/O ([`observer_common::maps::Inflight::owner_cgroup`]:
    /// its first bio's, as that cgroup's `io.stat` counts it; for write-back the dirtied
    /// inode's owner, where the submitter is the flusher); 0 when unknown.
    pub owner_cgroup_id: u64,
    /// Its path (as [`Submitter::cgroup`]); null when unknown or gone.
    pub owner_cgroup: Option<String>,
    /// The file whose data it carried (its first page, read at its completion; the path looked
    /// up when the report is made); null for no data page (flush, discard).
    pub file: Option<FileRecord>,
}

/// A request in flight now.
#[derive(Clone, Debug, Serialize)]
pub struct InflightRequest {
    /// Kernel device name.
    pub device: String,
    /// Op, flags, rwbs.
    #[serde(flatten)]
    pub class: ClassInfo,
    /// `queue` (waiting for dispatch, or requeued; or a bio with no request yet: sleeping for a
    /// tag, or throttled) or `device` (at the driver); `total` for a bio of a
    /// bio-based disk (dm, md), in flight since its entry, with no stages.
    pub stage: &'static str,
    /// Time since it entered (or was dispatched, for the flush request), seconds.
    pub age_seconds: f64,
    /// Time spent in the current stage so far, seconds.
    pub stage_seconds: f64,
    /// When it entered (RFC 3339).
    pub since: String,
    /// First sector (512 B).
    pub sector: u64,
    /// Size (bytes): at entry, and from its first dispatch on the size then (after every merge
    /// into it).
    pub bytes: u64,
    /// Requeues so far.
    pub requeues: u8,
    /// Who submitted it.
    pub submitter: Submitter,
    /// cgroup v2 id of the cgroup that owns the I/O ([`observer_common::maps::Inflight::owner_cgroup`]:
    /// its first bio's, as that cgroup's `io.stat` counts it; for write-back the dirtied
    /// inode's owner, where the submitter is the flusher); 0 when unknown.
    pub owner_cgroup_id: u64,
    /// Its path (as [`Submitter::cgroup`]); null when unknown or gone.
    pub owner_cgroup: Option<String>,
    /// The file whose data it carries (its first page, asked of the kernel when the list is
    /// made); null for no data page (flush, discard) or a bio not yet in a request.
    pub file: Option<FileRecord>,
    /// The upper disk's I/O this one serves: where `block_bio_remap` says its bio came from
    /// (a leg request of md0's bio; a dm clone's original); null for an I/O submitted to this
    /// disk itself.
    pub upper: Option<UpperIo>,
    /// The I/Os in flight below that serve this one (their `upper` is this disk, at a sector
    /// inside this I/O, and they entered after it), each with its own `held_by`: for a stuck md
    /// or dm bio, the leg requests that hold it. Empty for an I/O on a disk with nothing below.
    pub held_by: Vec<InflightRequest>,
}

/// Where an I/O below came from (`block_bio_remap`'s `dev` and `from`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct UpperIo {
    /// The upper disk's kernel name (`md0`, `dm-0`, `nvme0n1`).
    pub device: String,
    /// The sector (512 B) on it.
    pub sector: u64,
}

/// A stall episode, ended or ongoing.
#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    /// Kernel device name.
    pub device: String,
    /// `device`: requests at the device, none completed; `dispatch`: requests queued, none dispatched.
    pub kind: &'static str,
    /// Start (RFC 3339).
    pub start: String,
    /// End (RFC 3339); null while ongoing.
    pub end: Option<String>,
    /// Length so far (s).
    pub duration_seconds: f64,
    /// Still going on.
    pub ongoing: bool,
    /// Requests waiting through the whole episode (known for ongoing episodes, and for ended
    /// ones through the slow-request records).
    pub waiting: u64,
    /// Waiting requests by rwbs, e.g. {"FWFSM": 8}.
    pub classes: BTreeMap<String, u64>,
}

/// Query filters, all optional.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this device (kernel name).
    pub device: Option<String>,
    /// Only events at or after this monotonic time (ns).
    pub since_ns: Option<u64>,
    /// Only requests whose total (or age) is at least this (ns); episodes at least this long.
    pub min_ns: Option<u64>,
    /// At most this many of each list.
    pub limit: usize,
    /// Only this slow request (`/stalls?id=`); the stuck and episode lists are then empty.
    pub id: Option<crate::collect::events::RequestId>,
}

/// Everything `/stalls` shows.
#[derive(Clone, Debug, Serialize)]
pub struct StallReport {
    /// When the report was made (RFC 3339).
    pub now: String,
    /// Requests in flight longer than their op's slow threshold (or `min`), oldest first.
    pub stuck: Vec<InflightRequest>,
    /// Stall episodes, ongoing first, then newest first.
    pub episodes: Vec<Episode>,
    /// Slow completed requests, newest first.
    pub slow: Vec<SlowRequest>,
    /// The device-mapper names of the dm disks above (`dm-0` → `vg0-data`), for the text
    /// table's footer (JSON clients have them in `GET /devices`, `dm_name`).
    #[serde(skip)]
    pub dm_names: BTreeMap<String, String>,
}
