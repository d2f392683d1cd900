//! The count of an ended I/O of a bio-based disk (dm, md, NVMe multipath heads): what every
//! way of seeing such an end shares. Its own `block_bio_complete` (probes/rq_complete.rs,
//! `bio_ended`), the completion of the request below that carried it (probes/bio_remap.rs),
//! and a chained bio whose end the kernel hid ([`crate::chain`], `hidden_end`) all count it
//! here.
use observer_common::{
    maps::{ClassStats, Counter, Inflight},
    Stage,
};
use observer_ebpf::store::observe_n;

use crate::maps::{count, error_seen, owner_count, stats};

/// Counts the end at `now` (ns, `bpf_ktime_get_ns`) of the bio-based I/O `e` (`e.bytes` set,
/// B) with `status` (`blk_status_t`, include/linux/blk_types.h; 0 = BLK_STS_OK): requests,
/// bytes, error, owner, the total stage (entry → now, btt Q2C). The counting part of
/// probes/rq_complete.rs `bio_ended`. Its stats entry and total (ns), or `None` (stats map
/// full, clock anomaly).
#[inline(always)]
pub fn bio_counted(e: &Inflight, status: u64, now: u64) -> Option<(&'static mut ClassStats, u64)> {
    if status != 0 {
        error_seen(e.dev, e.class, status);
    }
    // With the pieces split off it whose own end was not seen (`bios`, bio_split.rs): they
    // ended before it, and count as I/Os of their own with its latency.
    let n = 1 + e.bios as u64;
    // SAFETY: `stats` returns this CPU's value of the (dev, class) CLASS_STATS entry (a non-null
    // lookup of a per-CPU hash: no other CPU writes it), valid while the program runs; the caller's
    // use of it ends with its run. A program nesting on this CPU may count into the same value
    // meanwhile: integer counts, nothing invalid.
    let s = unsafe { &mut *stats(e.dev, e.class)? };
    s.requests += n;
    s.bytes += e.bytes;
    owner_count(e.dev, e.class, e.owner_cgroup, e.bytes);
    if now < e.enter_ns {
        count(Counter::ClockAnomalies);
        return None;
    }
    s.last_complete_ns = now;
    let total = now - e.enter_ns;
    observe_n(&mut s.stages[Stage::Total as usize], total, n);
    Some((s, total))
}
