//! Native histogram buckets (Prometheus' sparse exponential histograms) from the kernel's
//! buckets, for the protobuf exposition ([`super::proto`]).
//!
//! A native bucket of schema `s` and index `j` holds the values in
//! `(2^((j-1)·2^-s), 2^(j·2^-s)]`, in the metric's unit; values with `|v|` ≤ the zero
//! threshold are in the zero bucket (prometheus/client_model io/prometheus/client/metrics.proto,
//! `Histogram.schema`, "each bucket boundary is the previous boundary times 2^(2^-n)").
//!
//! **Latency** ([`latency`], schema [`LATENCY_SCHEMA`] = 8, seconds). The kernel's buckets
//! ([`observer_common::hist`]) have edges `(1 + m/8) · 2^k` µs (m = 0…7, k ≥ −6; below that
//! `n/1024` µs, n = 1…16), i.e. `e = n · 2^k · 10^-6` s with an integer `n` ≤ 16. A native
//! boundary is `2^(p/q)` (rational exponent `p/q = j · 2^-s`), and `e = 2^(p/q)` would need
//! `e^q = 2^p`; but the prime 5 divides `e^q` to the power `−6q` (`−5q` when 5 divides `n`),
//! never 0. So **no kernel edge is a native boundary at any schema**: every schema moves edges.
//! The highest schema, 8, moves them least: each kernel bucket `[lo, hi)` goes to the native
//! bucket containing its upper edge `hi`, whose upper boundary `b` is `hi ≤ b < hi · 2^(1/256)`:
//! every edge moves up by less than **0.271 %** ([`LATENCY_EDGE_ERROR`] = `2^(1/256) − 1`;
//! over the kernel's actual edges at most 0.266 %, [`LATENCY_EDGE_WORST`]), never down, so a
//! finite sample is never counted below its value. Kernel buckets are at least 1/16 of their value
//! wide (`16/15` apart) and schema 8's are `2^(1/256)` ≈ 1.0027 apart, so every kernel bucket
//! has its own native bucket: the kernel's resolution is kept (lower schemas would merge
//! kernel buckets for no gain in exactness). Bucket 0 holds exactly 0 ns (`ns · 128 / 125 < 1`
//! only for 0) and goes to the zero bucket (threshold [`ZERO_THRESHOLD`], client_golang's
//! default). The overflow bucket (≥ 2^37 binary µs ≈ 134.2 s, `+Inf` only in the classic
//! buckets) goes to the native bucket just above the last finite one's, (134.4 s, 134.8 s]:
//! its values are ≥ 134.2 s but not resolved further, as in the classic buckets; their sum is
//! exact in `sample_sum`. Counts and sums are unchanged.
//!
//! **Request size** ([`request_size`], schema [`SIZE_SCHEMA`] = 0, bytes): size bucket `i`
//! holds `(2^(8+i), 2^(9+i)]` bytes (bucket 0: ≤ 512 B, which is exactly 512 B since requests
//! with data are whole 512-byte sectors), i.e. native index `9 + i` of schema 0: exact.

use std::sync::OnceLock;

use observer_common::{
    dispatch::SIZE_BUCKETS,
    hist::{bucket_upper_seconds, NBUCKETS},
};

/// Schema of the latency histograms' native buckets: 2^8 = 256 buckets per power of two.
pub const LATENCY_SCHEMA: i32 = 8;

/// Schema of `blkobs_request_size_bytes`' native buckets: one per power of two of bytes.
pub const SIZE_SCHEMA: i32 = 0;

/// Zero threshold of every native histogram here: 2^-128, the default of client_golang
/// (`DefNativeHistogramZeroThreshold`). Only a 0 ns latency is that small. Being > 0 also makes
/// Prometheus 2.40–2.44 (which decide by `zero_threshold > 0 || zero_count > 0 || deltas`)
/// see every series as native.
pub const ZERO_THRESHOLD: f64 = f64::from_bits(895 << 52);

/// The most a latency edge moves up when a kernel bucket goes to its native bucket:
/// `2^(1/256) − 1` ≈ 0.00271 (0.271 %).
pub const LATENCY_EDGE_ERROR: f64 = 0.002_711_275_050_202_5;

/// The most any kernel latency edge actually moves up (over all of them, at schema 8):
/// 0.2659 %; [`LATENCY_EDGE_ERROR`] is the bound for any value.
pub const LATENCY_EDGE_WORST: f64 = 0.002_659;

/// A histogram's native buckets, sparse: only buckets with samples (and the zero bucket).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NativeBuckets {
    /// Schema: `-4 ..= 8`.
    pub schema: i32,
    /// Zero bucket width (metric's unit): values with `|v|` ≤ it count in `zero_count`.
    pub zero_threshold: f64,
    /// Samples in the zero bucket.
    pub zero_count: u64,
    /// `(index, count)` of each positive bucket with samples, indices ascending.
    pub positive: Vec<(i32, u64)>,
}

/// Upper boundary of native bucket `index` at `schema`: `2^(index · 2^-schema)` (the metric's
/// unit).
pub fn upper_bound(schema: i32, index: i32) -> f64 {
    (index as f64 * (-schema as f64).exp2()).exp2()
}

/// Where each kernel latency bucket goes: `None` = the zero bucket, `Some(j)` = native index
/// `j` of schema [`LATENCY_SCHEMA`]. `NBUCKETS` entries, strictly increasing after bucket 0.
pub fn latency_targets() -> &'static [Option<i32>] {
    static T: OnceLock<Vec<Option<i32>>> = OnceLock::new();
    T.get_or_init(|| {
        let per_octave = f64::from(1u32 << LATENCY_SCHEMA);
        let mut t: Vec<Option<i32>> = (0..NBUCKETS - 1)
            .map(|i| {
                if i == 0 {
                    None
                } else {
                    // The native bucket containing the kernel bucket's upper edge: the first
                    // `j` with 2^(j/256) ≥ hi. No edge is a native boundary (module docs;
                    // `no_kernel_edge_is_a_native_boundary` checks the margin), so `ceil` of
                    // the f64 value is exact.
                    let hi = bucket_upper_seconds(i);
                    Some((hi.log2() * per_octave).ceil() as i32)
                }
            })
            .collect();
        let last = t.last().copied().flatten().unwrap_or(0);
        t.push(Some(last + 1));
        t
    })
}

/// Native buckets of a latency histogram (seconds) from its `NBUCKETS` kernel bucket counts.
pub fn latency(kernel: &[u64]) -> NativeBuckets {
    let targets = latency_targets();
    let mut n = NativeBuckets {
        schema: LATENCY_SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        ..NativeBuckets::default()
    };
    for (c, t) in kernel.iter().zip(targets) {
        if *c == 0 {
            continue;
        }
        match t {
            None => n.zero_count += c,
            Some(j) => push(&mut n.positive, *j, *c),
        }
    }
    n
}

/// Native buckets of `blkobs_request_size_bytes` (bytes) from its `SIZE_BUCKETS` kernel bucket
/// counts: bucket `i` → index `9 + i` of schema 0, `(2^(8+i), 2^(9+i)]`.
pub fn request_size(kernel: &[u64]) -> NativeBuckets {
    let mut n = NativeBuckets {
        schema: SIZE_SCHEMA,
        zero_threshold: ZERO_THRESHOLD,
        ..NativeBuckets::default()
    };
    for (i, c) in kernel.iter().enumerate().take(SIZE_BUCKETS) {
        if *c > 0 {
            push(&mut n.positive, 9 + i as i32, *c);
        }
    }
    n
}

/// Adds `c` samples to bucket `j` (ascending: the last one or a new one).
fn push(positive: &mut Vec<(i32, u64)>, j: i32, c: u64) {
    match positive.last_mut() {
        Some((last, n)) if *last == j => *n += c,
        _ => positive.push((j, c)),
    }
}

/// Empty buckets between two populated ones up to which one span continues (with zero counts)
/// rather than a new span starting: a span costs two varints and a message header, a zero
/// delta one byte (client_golang's `makeBuckets` does the same with gaps of at most 2).
const MAX_GAP: i32 = 2;

/// The sparse encoding of ascending `(index, count)` buckets: spans `(offset, length)` (offset
/// from the end of the previous span, or the first index) and one delta per bucket in the
/// spans (count minus the previous bucket's count, the first against 0), as
/// `positive_span`/`positive_delta` of io/prometheus/client/metrics.proto (fields 12 and 13).
pub fn spans_and_deltas(buckets: &[(i32, u64)]) -> (Vec<(i32, u32)>, Vec<i64>) {
    let mut spans: Vec<(i32, u32)> = Vec::new();
    let mut deltas = Vec::with_capacity(buckets.len());
    let mut prev_count: i64 = 0;
    let mut next_index = 0i32; // index after the end of the last span
    for &(j, c) in buckets {
        let c = c as i64;
        match spans.last_mut() {
            Some((_, len)) if j - next_index <= MAX_GAP => {
                for _ in next_index..j {
                    deltas.push(-prev_count);
                    prev_count = 0;
                }
                *len += (j - next_index) as u32 + 1;
            }
            Some(_) => spans.push((j - next_index, 1)),
            None => spans.push((j, 1)),
        }
        deltas.push(c - prev_count);
        prev_count = c;
        next_index = j + 1;
    }
    (spans, deltas)
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::hist::{bucket_index, bucket_lower_seconds, FINITE_BUCKETS};

    /// The upper bound of native bucket `j` at schema 8, and of `j − 1` (its lower bound).
    fn native_edges(j: i32) -> (f64, f64) {
        (
            upper_bound(LATENCY_SCHEMA, j - 1),
            upper_bound(LATENCY_SCHEMA, j),
        )
    }

    #[test]
    fn error_bound_constant_is_two_to_the_one_over_256() {
        assert!((LATENCY_EDGE_ERROR - ((1.0f64 / 256.0).exp2() - 1.0)).abs() < 1e-15);
        assert_eq!(ZERO_THRESHOLD, (-128f64).exp2());
    }

    /// Every finite kernel bucket's upper edge lies strictly inside its native bucket, at least
    /// 1e-6 of a native bucket away from both of its boundaries (so f64 rounding cannot move
    /// it), and the native upper boundary is above the edge by less than 0.271 %.
    #[test]
    fn no_kernel_edge_is_a_native_boundary() {
        let t = latency_targets();
        assert_eq!(t.len(), NBUCKETS);
        assert_eq!(t[0], None, "0 ns: the zero bucket");
        let mut worst = 0.0f64;
        for (i, target) in t.iter().enumerate().take(FINITE_BUCKETS).skip(1) {
            let hi = bucket_upper_seconds(i);
            let x = hi.log2() * 256.0;
            let frac = x - x.floor();
            assert!(frac > 1e-6 && frac < 1.0 - 1e-6, "bucket {i}: {x}");
            let j = target.unwrap();
            let (lo_b, up_b) = native_edges(j);
            assert!(
                lo_b < hi && hi <= up_b,
                "bucket {i}: {hi} not in ({lo_b}, {up_b}]"
            );
            let moved = up_b / hi - 1.0;
            assert!((0.0..LATENCY_EDGE_ERROR).contains(&moved), "bucket {i}");
            worst = worst.max(moved);
        }
        // Over the kernel's edges the most any moves is 0.266 % (LATENCY_EDGE_WORST).
        assert!((worst - LATENCY_EDGE_WORST).abs() < 5e-7, "worst {worst}");
    }

    /// Every kernel bucket maps into its own native bucket (the kernel's resolution is kept), in
    /// order, with the overflow bucket last, just above 134.2 s.
    #[test]
    fn every_kernel_bucket_has_its_own_native_bucket() {
        let t = latency_targets();
        for i in 2..NBUCKETS {
            assert!(
                t[i].unwrap() > t[i - 1].unwrap(),
                "buckets {} and {i}",
                i - 1
            );
        }
        let last = t[NBUCKETS - 1].unwrap();
        assert_eq!(last, t[NBUCKETS - 2].unwrap() + 1);
        let (lo, _) = native_edges(last);
        assert!(lo >= bucket_lower_seconds(NBUCKETS - 1), "{lo}");
        assert!((lo - 134.217728).abs() / 134.217728 < LATENCY_EDGE_ERROR);
    }

    /// A sample of `ns` nanoseconds, bucketed by the kernel and mapped, is in a native bucket
    /// whose upper bound is ≥ its value and less than 0.271 % above its kernel bucket's upper
    /// edge (samples of the overflow bucket, ≥ 134.2 s: just above 134.2 s); counts are
    /// preserved.
    #[test]
    fn samples_land_in_a_native_bucket_at_or_above_them() {
        let mut kernel = vec![0u64; NBUCKETS];
        let mut n = 0u64;
        for ns in (0..3_000u64)
            .chain((0..40).flat_map(|k| {
                let v = 1u64 << k;
                [v - 1, v, v + 1, v * 3 / 2, v * 15 / 8]
            }))
            .chain([134_217_727_999, 134_217_728_000, 200_000_000_000])
        {
            let i = bucket_index(ns);
            kernel[i] += 1;
            n += 1;
            let one = {
                let mut k = vec![0u64; NBUCKETS];
                k[i] = 1;
                latency(&k)
            };
            if ns == 0 {
                assert_eq!((one.zero_count, one.positive.len()), (1, 0));
                continue;
            }
            assert_eq!(one.zero_count, 0);
            let [(j, 1)] = one.positive[..] else {
                panic!("{ns} ns: {:?}", one.positive)
            };
            let (lo, up) = native_edges(j);
            let v = ns as f64 * 1e-9;
            if i == NBUCKETS - 1 {
                assert!(lo >= bucket_lower_seconds(i), "{ns} ns: {lo}");
                continue;
            }
            assert!(v <= up, "{ns} ns above native bucket {j} ({lo}, {up}]");
            {
                assert!(up < bucket_upper_seconds(i) * (1.0 + LATENCY_EDGE_ERROR));
                assert!(lo >= bucket_lower_seconds(i), "{ns} ns: {lo}");
            }
        }
        let all = latency(&kernel);
        assert_eq!(
            all.zero_count + all.positive.iter().map(|p| p.1).sum::<u64>(),
            n
        );
        assert!(all.positive.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn request_sizes_are_exact_at_schema_0() {
        let mut kernel = [0u64; SIZE_BUCKETS];
        for (i, c) in kernel.iter_mut().enumerate() {
            *c = (i as u64 * 7) % 5;
        }
        let n = request_size(&kernel);
        assert_eq!(n.schema, 0);
        for &(j, c) in &n.positive {
            let i = (j - 9) as usize;
            assert_eq!(c, kernel[i]);
            assert_eq!(
                upper_bound(0, j),
                observer_common::dispatch::size_upper_bytes(i) as f64
            );
            assert_eq!(upper_bound(0, j - 1), (256u64 << i) as f64);
        }
        assert_eq!(
            n.positive.iter().map(|p| p.1).sum::<u64>(),
            kernel.iter().sum::<u64>()
        );
    }

    /// Decoding spans and deltas gives back the buckets, with short gaps filled by zeros.
    #[test]
    fn spans_and_deltas_round_trip() {
        let cases: Vec<Vec<(i32, u64)>> = vec![
            vec![],
            vec![(-5, 3)],
            vec![(1, 1), (2, 5), (3, 2)],
            vec![(1, 1), (3, 5), (6, 2), (10, 7), (200, 1)],
            vec![(-300, 9), (-299, 9), (0, 4), (1, 0)],
        ];
        for buckets in cases {
            let (spans, deltas) = spans_and_deltas(&buckets);
            let mut got = Vec::new();
            let (mut idx, mut count, mut d) = (0i32, 0i64, deltas.iter());
            for (k, &(off, len)) in spans.iter().enumerate() {
                idx = if k == 0 { off } else { idx + off };
                for _ in 0..len {
                    count += d.next().unwrap();
                    if count != 0 {
                        got.push((idx, count as u64));
                    }
                    idx += 1;
                }
            }
            assert!(d.next().is_none());
            let want: Vec<_> = buckets.iter().copied().filter(|b| b.1 != 0).collect();
            assert_eq!(got, want);
        }
        // Gaps of 1 and 2 empty buckets: one span, zeros in it.
        let (spans, deltas) = spans_and_deltas(&[(1, 1), (3, 5), (6, 2)]);
        assert_eq!(spans, [(1, 6)]);
        assert_eq!(deltas, [1, -1, 5, -5, 0, 2]);
        // A gap of 3: a new span, offset 3 after the first one's end.
        let (spans, deltas) = spans_and_deltas(&[(1, 1), (5, 2)]);
        assert_eq!(spans, [(1, 1), (3, 1)]);
        assert_eq!(deltas, [1, 1]);
    }
}
