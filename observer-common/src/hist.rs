//! Log-linear latency buckets, computed identically in the kernel and in userspace.
//!
//! A latency in nanoseconds is first scaled to units of 1000/1024 ns ("binary microsecond
//! sub-units", so that 1 µs = 2^10 units exactly), then bucketed with [`SUB_BUCKETS`] linear
//! sub-buckets per power of two. Bucket boundaries therefore fall exactly on 1 µs · 2^k and on
//! 1 µs · 2^k · (1 + j/8): the conventional exp2-in-µs Prometheus buckets are exact unions of
//! kernel buckets. Bucket width is at most 1/8 of its lower bound (12.5 %), so a percentile
//! interpolated inside a bucket is within ~6 % of the exact value.
//!
//! Range: exact from 0 to 2^[`MAX_LOG2`] units (≈ 134 s); everything above lands in the last
//! bucket, the overflow bucket, which is never merged into a finite one.

/// Sub-buckets per power of two, as a shift (2^3 = 8).
pub const SUB_BITS: u32 = 3;
/// Sub-buckets per power of two.
pub const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Values at or above 2^MAX_LOG2 scaled units (≈ 134.2 s) go to the overflow bucket.
pub const MAX_LOG2: u32 = 37;
/// Number of finite buckets.
pub const FINITE_BUCKETS: usize = ((MAX_LOG2 - SUB_BITS + 1) as usize) << SUB_BITS;
/// Total number of buckets, including the overflow bucket at index `NBUCKETS - 1`.
pub const NBUCKETS: usize = FINITE_BUCKETS + 1;

/// Converts nanoseconds to scaled units (1 unit = 1000/1024 ns).
#[inline(always)]
pub const fn ns_to_units(ns: u64) -> u64 {
    // Exact for ns < 2^57 (about 4.5 years).
    ns.wrapping_mul(128) / 125
}

/// Floor of log2 of `v` for `v > 0`, without loops (the eBPF verifier prefers straight code).
#[inline(always)]
pub const fn log2(mut v: u64) -> u32 {
    let mut r = 0;
    if v >> 32 != 0 {
        v >>= 32;
        r += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        r += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        r += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        r += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        r += 2;
    }
    if v >> 1 != 0 {
        r += 1;
    }
    r
}

/// Bucket index (0..NBUCKETS) of a latency in nanoseconds.
#[inline(always)]
pub const fn bucket_index(ns: u64) -> usize {
    let u = ns_to_units(ns);
    if u < (2 * SUB_BUCKETS) as u64 {
        return u as usize;
    }
    let h = log2(u);
    if h >= MAX_LOG2 {
        return NBUCKETS - 1;
    }
    // u ≥ 2·SUB_BUCKETS, so h ≥ SUB_BITS + 1 already; saying so lets the verifiers of 5.10 and
    // 6.1 bound the index (they cannot relate h to u, explore h < SUB_BITS, see the subtraction
    // below wrap, and then refuse `buckets[i]`).
    let h = if h < SUB_BITS + 1 { SUB_BITS + 1 } else { h };
    let sub = ((u >> (h - SUB_BITS)) as usize) & (SUB_BUCKETS - 1);
    (((h - SUB_BITS + 1) as usize) << SUB_BITS) | sub
}

/// Lower bound of bucket `i` in scaled units (inclusive). For the overflow bucket, its start.
pub const fn bucket_lower_units(i: usize) -> u64 {
    if i < 2 * SUB_BUCKETS {
        return i as u64;
    }
    let h = (i >> SUB_BITS) as u32 + SUB_BITS - 1;
    let m = (i & (SUB_BUCKETS - 1)) as u64;
    (SUB_BUCKETS as u64 + m) << (h - SUB_BITS)
}

/// Lower bound of bucket `i` in seconds.
pub fn bucket_lower_seconds(i: usize) -> f64 {
    bucket_lower_units(i) as f64 * (1000.0 / 1024.0) * 1e-9
}

/// Upper bound (exclusive) of finite bucket `i` in seconds; `f64::INFINITY` for the overflow bucket.
pub fn bucket_upper_seconds(i: usize) -> f64 {
    if i >= NBUCKETS - 1 {
        f64::INFINITY
    } else {
        bucket_lower_seconds(i + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_monotonic() {
        assert_eq!(bucket_lower_units(0), 0);
        for i in 1..NBUCKETS {
            assert!(
                bucket_lower_units(i) > bucket_lower_units(i - 1),
                "bucket {i}"
            );
        }
        // Every value lands in the bucket whose bounds contain it.
        for ns in (0..2_000u64).chain(
            (0..60)
                .map(|k| 1u64 << k.min(40))
                .flat_map(|v| [v.saturating_sub(1), v, v + 1]),
        ) {
            let i = bucket_index(ns);
            let u = ns_to_units(ns);
            assert!(u >= bucket_lower_units(i), "{ns} ns below bucket {i}");
            if i < NBUCKETS - 1 {
                assert!(u < bucket_lower_units(i + 1), "{ns} ns above bucket {i}");
            }
        }
    }

    #[test]
    fn resolution_and_range() {
        // 1 µs and 60 s are inside the finite range; width ≤ 12.5 % above 16 units.
        assert!(bucket_index(1_000) < NBUCKETS - 1);
        assert!(bucket_index(60_000_000_000) < NBUCKETS - 1);
        assert_eq!(bucket_index(200_000_000_000), NBUCKETS - 1);
        for i in 16..NBUCKETS - 1 {
            let (lo, hi) = (
                bucket_lower_units(i) as f64,
                bucket_lower_units(i + 1) as f64,
            );
            assert!((hi - lo) / lo <= 0.125 + 1e-12, "bucket {i} too wide");
        }
        // exp2 µs edges are exact bucket edges.
        for k in 0..26 {
            let edge_s = (1u64 << k) as f64 * 1e-6;
            assert!(
                (0..NBUCKETS).any(|i| (bucket_lower_seconds(i) - edge_s).abs() < edge_s * 1e-12),
                "2^{k} µs"
            );
        }
    }

    #[test]
    fn percentile_from_buckets_within_10_percent() {
        // A log-uniform sample from 1 µs to 10 s: p50/p90/p99 estimated by linear
        // interpolation inside the bucket are within 10 % of the exact values.
        let mut values: Vec<u64> = (0..20_000u64)
            .map(|i| (1_000.0 * (1e7f64).powf(i as f64 / 20_000.0)) as u64)
            .collect();
        values.sort();
        let mut counts = [0u64; NBUCKETS];
        for &v in &values {
            counts[bucket_index(v)] += 1;
        }
        for q in [0.5, 0.9, 0.99, 0.999] {
            let exact = values[((values.len() as f64 * q) as usize).min(values.len() - 1)] as f64;
            let rank = q * values.len() as f64;
            let mut acc = 0.0;
            let mut est = 0.0;
            for (i, &c) in counts.iter().enumerate() {
                if acc + c as f64 >= rank && c > 0 {
                    let lo = bucket_lower_seconds(i) * 1e9;
                    let hi = bucket_upper_seconds(i) * 1e9;
                    est = lo + (hi - lo) * (rank - acc) / c as f64;
                    break;
                }
                acc += c as f64;
            }
            assert!(
                (est - exact).abs() / exact < 0.10,
                "q={q}: estimate {est} vs exact {exact}"
            );
        }
    }
}
