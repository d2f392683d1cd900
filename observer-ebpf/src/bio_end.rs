//! The count of an ended I/O of a bio-based disk (dm, md, NVMe multipath heads): what every
//! way of seeing such an end shares. Its own `block_bio_complete` (probes/bio_complete.rs,
//! `bio_ended`), the completion of the request below that carried it (probes/bio_remap.rs),
//! and a chained bio whose end the kernel hid ([`crate::chain`], `hidden_end`) all count it
//! here.
use core::ptr::addr_of_mut;

use observer_common::{
    maps::{ClassStats, Counter, Inflight},
    stage::clock_anomaly,
    Stage,
};
use observer_ebpf::store::{add, observe_n, put};

use crate::maps::{count, error_seen, owner_count, stats};

/// Counts the end at `now` (ns, `bpf_ktime_get_ns`) of the bio-based I/O `e` (`e.bytes` set,
/// B) with `status` (`blk_status_t`, include/linux/blk_types.h; 0 = BLK_STS_OK): requests,
/// bytes, error, owner, the total stage (entry → now, btt Q2C). The counting part of
/// probes/bio_complete.rs `bio_ended`. Its stats entry and total (ns), or `None` (stats map
/// full, clock anomaly).
#[inline(always)]
pub fn bio_counted(e: &Inflight, status: u64, now: u64) -> Option<(*mut ClassStats, u64)> {
    if status != 0 {
        error_seen(e.dev, e.class, status);
    }
    // With the pieces split off it whose own end was not seen (`bios`, bio_split.rs): they
    // ended before it, and count as I/Os of their own with its latency.
    let n = 1 + e.bios as u64;
    let s = stats(e.dev, e.class)?;
    // SAFETY: `s` is this CPU's value of the (dev, class) CLASS_STATS entry (maps.rs `stats`: a
    // non-null lookup of a per-CPU hash, so no other CPU writes it), valid while the program runs;
    // a program nesting on this CPU counts into it with atomic adds too.
    unsafe {
        add(addr_of_mut!((*s).requests), n);
        add(addr_of_mut!((*s).bytes), e.bytes);
    }
    owner_count(e.dev, e.class, e.owner_cgroup, e.bytes);
    // Never dispatched: only its entry and now are compared.
    if clock_anomaly(e.enter_ns, 0, now) {
        count(Counter::ClockAnomalies);
        return None;
    }
    let total = now - e.enter_ns;
    // SAFETY: as above; `last_complete_ns` is a plain store (the latest of any writer is right).
    unsafe {
        put(addr_of_mut!((*s).last_complete_ns), now);
        observe_n(addr_of_mut!((*s).stages[Stage::Total as usize]), total, n);
    }
    Some((s, total))
}
