//! The exported histogram buckets (`[histogram] buckets`, seconds) and how the finer in-kernel
//! buckets ([`observer_common::hist`], 8 per power of two) fold into them.

use observer_common::hist::{bucket_upper_seconds, NBUCKETS};

use super::text::Bounds;

/// Maps in-kernel buckets onto the exported bucket bounds.
#[derive(Clone, Debug)]
pub struct BucketMap {
    /// Exported upper bounds (seconds), ascending, without +Inf.
    pub bounds: Vec<f64>,
    /// The same bounds as `le` label values, formatted once.
    pub les: Bounds,
    /// For each kernel bucket: index into `bounds`, or `bounds.len()` for +Inf only.
    target: Vec<usize>,
}

impl BucketMap {
    /// A kernel bucket goes to the first exported bound that is ≥ its upper edge, so an exported
    /// `le` count never includes a sample above `le`. Bounds that fall inside a kernel bucket
    /// therefore round down by at most one kernel bucket (≤ 12.5 %). The default exp2-µs bounds
    /// fall exactly on kernel bucket edges.
    pub fn new(bounds: &[f64]) -> Self {
        let target = (0..NBUCKETS)
            .map(|i| {
                let upper = bucket_upper_seconds(i);
                bounds
                    .iter()
                    .position(|&b| upper <= b * (1.0 + 1e-9))
                    .unwrap_or(bounds.len())
            })
            .collect();
        Self {
            bounds: bounds.to_vec(),
            les: Bounds::new(bounds),
            target,
        }
    }

    /// For each kernel bucket ([`observer_common::hist`]): the index of the exported bound it
    /// is counted under (`bounds.len()`: only in +Inf). What the exemplar store folds slow
    /// requests' latencies with (`collect::exemplars::Exemplars::set_targets`).
    pub fn targets(&self) -> &[usize] {
        &self.target
    }

    /// Cumulative counts per exported bound (without +Inf) from kernel bucket counts.
    pub fn cumulative(&self, kernel: &[u64]) -> Vec<u64> {
        let mut per = vec![0u64; self.bounds.len() + 1];
        for (i, c) in kernel.iter().enumerate() {
            per[self.target[i]] += c;
        }
        let mut acc = 0;
        per.truncate(self.bounds.len());
        per.iter()
            .map(|c| {
                acc += c;
                acc
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use observer_common::hist::{bucket_index, bucket_lower_seconds};

    #[test]
    fn exp2_bounds_are_exact_kernel_edges() {
        let b = BucketMap::new(&crate::config::Histogram::default().buckets);
        // A sample just below and just above 1 ms = 1024 µs... use 2^10 µs = 1.024 ms.
        let mut k = vec![0u64; NBUCKETS];
        k[bucket_index(1_023_999)] += 1; // < 1.024 ms
        k[bucket_index(1_024_000)] += 1; // = 1.024 ms: belongs to the next bound (le is inclusive, but the kernel bucket starting at 1.024 ms spans above it)
        let cum = b.cumulative(&k);
        let i = b
            .bounds
            .iter()
            .position(|&x| (x - 0.001024).abs() < 1e-12)
            .unwrap();
        assert_eq!(cum[i], 1);
        assert_eq!(cum[i + 1], 2);
        assert_eq!(*cum.last().unwrap(), 2);
    }

    #[test]
    fn odd_bounds_never_overcount() {
        // For any bound, the exported cumulative count must not include samples above it.
        let bounds = [0.0001, 0.00033, 0.005, 1.0];
        let b = BucketMap::new(&bounds);
        for ns in [
            50_000u64,
            100_000,
            330_000,
            400_000,
            4_999_999,
            999_999_999,
            2_000_000_000,
        ] {
            let mut k = vec![0u64; NBUCKETS];
            k[bucket_index(ns)] += 1;
            let cum = b.cumulative(&k);
            for (j, &le) in bounds.iter().enumerate() {
                if cum[j] == 1 {
                    assert!(
                        ns as f64 * 1e-9 <= le * (1.0 + 1e-9),
                        "{ns} ns counted under le={le}"
                    );
                    // ...and is within one kernel bucket of the bound
                    assert!(bucket_lower_seconds(bucket_index(ns)) <= le);
                }
            }
        }
    }
}
