//! Merge analysis, computed identically in the kernel and in userspace: what a request looked
//! like when it was first dispatched (its size and the bios merged into it), and the rule for a
//! **missed adjacent merge**.
//!
//! Facts from the kernel sources this relies on:
//! - A request's bios are the list `request::bio → bio::bi_next → …` (include/linux/blk-mq.h);
//!   a bio merged into it is appended (back merge) or prepended (front merge) by
//!   block/blk-merge.c (`bio_attempt_back_merge`, `bio_attempt_front_merge`), and a request
//!   merged into another one hands over its whole list (`attempt_merge`). Nothing is merged
//!   into a request after `blk_mq_start_request` (block_rq_issue): so the list at the first
//!   dispatch is final, and its length minus one is the number of bios merged into it.
//! - Since 5.11 (e8a676d61c07, "block: simplify and extend the block_bio_merge tracepoint
//!   class") `block_bio_backmerge`/`frontmerge` only get the bio, not the request it merges
//!   into: so bios are counted on the request's list at dispatch, not at the merge events.
//! - `request::__data_len` is the request's size in bytes (u32) and `request::__sector` its
//!   first sector in 512-byte units (`blk_rq_pos`, `blk_rq_bytes` in include/linux/blk-mq.h);
//!   ftrace's `block_rq_issue` prints the same two as `sector + nr_sector`.

use core::ptr::addr_of_mut;

use crate::class::Op;

/// Buckets of the request-size histogram ([`size_index`]): ≤ 512 B, then one per power of two
/// up to 4 GiB (`__data_len` is a u32, so nothing is larger).
pub const SIZE_BUCKETS: usize = 24;

/// Most bios counted per request when its list is walked at dispatch. A longer list is counted
/// in the overflow bucket of the merged-bios histogram ([`MERGED_BUCKETS`] − 1).
pub const MAX_BIOS: u32 = 256;

/// Buckets of the merged-bios histogram ([`merged_index`]): 0, 1, 2–3, 4–7, …, 128–255 bios
/// merged, then an overflow bucket (more than [`MAX_BIOS`] bios) that only `+Inf` counts.
pub const MERGED_BUCKETS: usize = 10;

/// Bucket of a request of `bytes` bytes: 0 for ≤ 512 B, else `ceil(log2(bytes)) - 9`, so bucket
/// `i` holds sizes in `(2^(8+i), 2^(9+i)]` bytes and a power of two lands in the bucket whose
/// upper bound it is (4096 B → bucket 3, `le="4096"`).
#[inline(always)]
pub const fn size_index(bytes: u32) -> usize {
    if bytes <= 512 {
        return 0;
    }
    let i = crate::hist::log2((bytes - 1) as u64) as usize + 1 - 9;
    if i >= SIZE_BUCKETS {
        SIZE_BUCKETS - 1
    } else {
        i
    }
}

/// Upper bound (inclusive, bytes) of size bucket `i`: `512 · 2^i`.
pub const fn size_upper_bytes(i: usize) -> u64 {
    512u64 << i
}

/// Bucket of a request that had `bios` bios at its first dispatch (`bios` ≥ 1; `MAX_BIOS + 1`
/// means "more than [`MAX_BIOS`]"): by bios merged into it, `m = bios - 1`: 0 for m = 0, else
/// `floor(log2(m)) + 1` (1: 1, 2: 2–3, 3: 4–7, …, 8: 128–255), and the overflow bucket
/// [`MERGED_BUCKETS`]` - 1` beyond.
#[inline(always)]
pub const fn merged_index(bios: u32) -> usize {
    if bios > MAX_BIOS {
        return MERGED_BUCKETS - 1;
    }
    let m = bios.saturating_sub(1);
    if m == 0 {
        return 0;
    }
    let i = crate::hist::log2(m as u64) as usize + 1;
    if i >= MERGED_BUCKETS - 1 {
        MERGED_BUCKETS - 2
    } else {
        i
    }
}

/// Upper bound (inclusive, bios merged) of merged-bios bucket `i`: 0, 1, 3, 7, …, 255; `None`
/// for the overflow bucket.
pub const fn merged_upper(i: usize) -> Option<u64> {
    if i >= MERGED_BUCKETS - 1 {
        None
    } else {
        Some((1u64 << i) - 1)
    }
}

/// Whether a request dispatched at `now` (ns) of op `op` starting
/// at sector `sector` with `sectors` 512-byte sectors is a **missed adjacent merge** after the
/// request dispatched on the same device just before it (`prev_*`): same op, both with data,
/// it starts exactly where the previous one ended, and it was dispatched at most `window_ns`
/// after it. `window_ns` 0 disables the rule.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub const fn is_missed_merge(
    prev_op: Op,
    prev_sector: u64,
    prev_sectors: u32,
    prev_ns: u64,
    op: Op,
    sector: u64,
    sectors: u32,
    now: u64,
    window_ns: u64,
) -> bool {
    window_ns != 0
        && prev_ns != 0
        && now >= prev_ns
        && now - prev_ns <= window_ns
        && prev_op as u16 == op as u16
        && prev_sectors != 0
        && sectors != 0
        && prev_sector + prev_sectors as u64 == sector
}

/// What the requests of one (device, class) looked like at their first dispatch, counted when
/// their life ends (final completion, or counted as lost): the size and merged-bios histograms
/// and the missed adjacent merges. Requests without bios (the flush request) are not in it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchHist {
    /// Requests per size bucket ([`size_index`]), size = `__data_len` at the first dispatch.
    pub size: [u64; SIZE_BUCKETS],
    /// Sum of those sizes (bytes).
    pub size_bytes: u64,
    /// Requests per merged-bios bucket ([`merged_index`]).
    pub merged: [u64; MERGED_BUCKETS],
    /// Sum of the bios merged into them (a request over [`MAX_BIOS`] bios adds `MAX_BIOS`).
    pub merged_bios: u64,
    /// Requests whose dispatch was a missed adjacent merge ([`is_missed_merge`]).
    pub missed: u64,
}

impl DispatchHist {
    /// All zero.
    pub const ZERO: DispatchHist = DispatchHist {
        size: [0; SIZE_BUCKETS],
        size_bytes: 0,
        merged: [0; MERGED_BUCKETS],
        merged_bios: 0,
        missed: 0,
    };

    /// Counts one request: `bytes` at its first dispatch, `bios` in its list then (0: not
    /// recorded, e.g. never dispatched or the flush request: nothing is counted), `missed` 1 if
    /// its dispatch was a missed adjacent merge.
    #[inline(always)]
    pub fn record(&mut self, bytes: u32, bios: u16, missed: u8) {
        // SAFETY: `self` is a live `&mut DispatchHist`: valid, aligned and unaliased, so is
        // every u64 field `record_at` passes to the plain add.
        unsafe { Self::record_at(self, bytes, bios, missed, |p, v| *p += v) }
    }

    /// [`Self::record`] into `*h` with `add(field, n)` for every field it adds to: the programs
    /// pass their atomic add (observer-ebpf/src/store.rs `add`), since programs nesting on a
    /// CPU count into the same per-CPU value.
    ///
    /// # Safety
    ///
    /// `h` must be valid and 8-aligned for the whole call; `add` is called only with pointers
    /// to u64 fields of `*h`.
    #[inline(always)]
    pub unsafe fn record_at(
        h: *mut DispatchHist,
        bytes: u32,
        bios: u16,
        missed: u8,
        add: impl Fn(*mut u64, u64),
    ) {
        if bios == 0 {
            return;
        }
        let s = size_index(bytes);
        if s < SIZE_BUCKETS {
            add(addr_of_mut!((*h).size).cast::<u64>().add(s), 1);
        }
        add(addr_of_mut!((*h).size_bytes), bytes as u64);
        let m = merged_index(bios as u32);
        if m < MERGED_BUCKETS {
            add(addr_of_mut!((*h).merged).cast::<u64>().add(m), 1);
        }
        let merged = if bios as u32 > MAX_BIOS {
            MAX_BIOS
        } else {
            bios as u32 - 1
        };
        // Zeros are not added: each add is an atomic instruction in the programs, and most
        // requests carry one bio and miss no merge.
        if merged != 0 {
            add(addr_of_mut!((*h).merged_bios), merged as u64);
        }
        if missed != 0 {
            add(addr_of_mut!((*h).missed), missed as u64);
        }
    }

    /// Adds another histogram (another CPU's, or another device number with the same name).
    pub fn add(&mut self, o: &DispatchHist) {
        for (d, s) in self.size.iter_mut().zip(o.size.iter()) {
            *d += s;
        }
        for (d, s) in self.merged.iter_mut().zip(o.merged.iter()) {
            *d += s;
        }
        self.size_bytes += o.size_bytes;
        self.merged_bios += o.merged_bios;
        self.missed += o.missed;
    }

    /// Requests counted.
    pub fn count(&self) -> u64 {
        let mut n = 0;
        let mut i = 0;
        while i < SIZE_BUCKETS {
            n += self.size[i];
            i += 1;
        }
        n
    }
}

impl Default for DispatchHist {
    fn default() -> Self {
        DispatchHist::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_buckets() {
        assert_eq!(size_index(0), 0);
        assert_eq!(size_index(512), 0);
        assert_eq!(size_index(513), 1);
        assert_eq!(size_index(1024), 1);
        assert_eq!(size_index(4096), 3);
        assert_eq!(size_index(4097), 4);
        assert_eq!(size_index(1 << 20), 11);
        assert_eq!(size_index(u32::MAX), SIZE_BUCKETS - 1);
        for i in 0..SIZE_BUCKETS {
            let up = size_upper_bytes(i);
            if up <= u32::MAX as u64 {
                assert_eq!(size_index(up as u32), i, "upper bound of {i}");
                assert_eq!(size_index(up as u32 + 1), (i + 1).min(SIZE_BUCKETS - 1));
            }
        }
        assert_eq!(size_upper_bytes(SIZE_BUCKETS - 1), 1 << 32);
    }

    #[test]
    fn merged_buckets() {
        assert_eq!(merged_index(1), 0);
        assert_eq!(merged_index(2), 1);
        assert_eq!(merged_index(3), 2);
        assert_eq!(merged_index(4), 2);
        assert_eq!(merged_index(5), 3);
        assert_eq!(merged_index(MAX_BIOS), 8);
        assert_eq!(merged_index(MAX_BIOS + 1), MERGED_BUCKETS - 1);
        for bios in 1..=MAX_BIOS {
            let i = merged_index(bios);
            let up = merged_upper(i).unwrap();
            assert!((bios - 1) as u64 <= up, "{bios} bios in bucket {i}");
            if i > 0 {
                assert!((bios - 1) as u64 > merged_upper(i - 1).unwrap());
            }
        }
        assert_eq!(merged_upper(MERGED_BUCKETS - 1), None);
    }

    #[test]
    fn missed_merge_rule() {
        let w = 1_000_000;
        // (op, sector, sectors, dispatch ns) of the previous request and of this one.
        type Dispatch = (Op, u64, u32, u64);
        let missed = |p: Dispatch, c: Dispatch, window: u64| {
            is_missed_merge(p.0, p.1, p.2, p.3, c.0, c.1, c.2, c.3, window)
        };
        let (wr, rd, fl) = (Op::Write, Op::Read, Op::Flush);
        // Adjacent writes 0.5 ms apart: missed.
        assert!(missed((wr, 800, 8, 1_000), (wr, 808, 8, 501_000), w));
        // Not adjacent, other op, too late, no data, window off.
        assert!(!missed((wr, 800, 8, 1_000), (wr, 816, 8, 501_000), w));
        assert!(!missed((rd, 800, 8, 1_000), (wr, 808, 8, 501_000), w));
        assert!(!missed((wr, 800, 8, 1_000), (wr, 808, 8, 1_001_001), w));
        assert!(missed((wr, 800, 8, 1_000), (wr, 808, 8, 1_001_000), w));
        assert!(!missed((fl, 0, 0, 1_000), (fl, 0, 0, 2_000), w));
        assert!(!missed((wr, 800, 8, 1_000), (wr, 808, 8, 2_000), 0));
        assert!(!missed((wr, 800, 8, 0), (wr, 808, 8, 2_000), w));
    }

    #[test]
    fn record_and_add() {
        let mut h = DispatchHist::ZERO;
        h.record(4096, 1, 0);
        h.record(8192, 2, 1);
        h.record(0, 0, 1); // not recorded: no bios
        h.record(1 << 20, MAX_BIOS as u16 + 1, 0);
        assert_eq!(h.count(), 3);
        assert_eq!(h.size[3], 1);
        assert_eq!(h.size[4], 1);
        assert_eq!(h.merged[0], 1);
        assert_eq!(h.merged[1], 1);
        assert_eq!(h.merged[MERGED_BUCKETS - 1], 1);
        assert_eq!(h.merged_bios, 1 + MAX_BIOS as u64);
        assert_eq!(h.size_bytes, 4096 + 8192 + (1 << 20));
        assert_eq!(h.missed, 1);
        let mut t = DispatchHist::default();
        t.add(&h);
        t.add(&h);
        assert_eq!(t.count(), 6);
        assert_eq!(t.missed, 2);
    }
}
