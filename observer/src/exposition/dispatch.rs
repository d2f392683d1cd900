//! Metrics of what requests looked like at their first dispatch, per (device, class)
//! (observer_common::dispatch): their size, the bios merged into them and the missed adjacent
//! merges. Declares `blkobs_request_size_bytes`, `blkobs_request_merged_bios` and
//! `blkobs_missed_merges_total`.

use std::sync::OnceLock;

use observer_common::dispatch::{
    merged_upper, size_upper_bytes, DispatchHist, MERGED_BUCKETS, SIZE_BUCKETS,
};
use prometheus::proto::MetricType;

use super::{
    requests::CLASS_LABELS, text::Bounds, HistogramSeries, MetricDesc, MetricWriter, NativeSource,
};
use crate::{collect::snapshot::Snapshot, labels::class_label_values};

/// Request size at the first dispatch, per (device, class).
pub const REQUEST_SIZE: MetricDesc = MetricDesc {
    name: "blkobs_request_size_bytes",
    help: "Size of block requests at their first dispatch to the driver (block_rq_issue, after every merge into them), in bytes; log2 buckets from 512 B to 4 GiB, as bcc's bitesize. Requests without data (the flush request) are not counted.",
    kind: MetricType::HISTOGRAM,
    labels: CLASS_LABELS,
};

/// Bios merged into each request by its first dispatch, per (device, class).
pub const REQUEST_MERGED_BIOS: MetricDesc = MetricDesc {
    name: "blkobs_request_merged_bios",
    help: "Bios merged into each block request by its first dispatch (bios in the request minus one: 0 = not merged); buckets 0, 1, 2-3, 4-7, ..., 128-255, more than 256 bios only in +Inf.",
    kind: MetricType::HISTOGRAM,
    labels: CLASS_LABELS,
};

/// Missed adjacent merges per (device, class) of the second request.
pub const MISSED_MERGES: MetricDesc = MetricDesc {
    name: "blkobs_missed_merges_total",
    help: "Requests dispatched right after a request of the same op on the same device that ended at the sector where they start, within the [merges] window (default 1 ms): adjacent I/O the block layer did not merge (pairs in GET /merges).",
    kind: MetricType::COUNTER,
    labels: CLASS_LABELS,
};

/// `le` bounds of [`REQUEST_SIZE`]: 512 B · 2^i, i = 0 … [`SIZE_BUCKETS`] − 1.
fn size_bounds() -> &'static Bounds {
    static B: OnceLock<Bounds> = OnceLock::new();
    B.get_or_init(|| {
        let b: Vec<f64> = (0..SIZE_BUCKETS)
            .map(|i| size_upper_bytes(i) as f64)
            .collect();
        Bounds::new(&b)
    })
}

/// `le` bounds of [`REQUEST_MERGED_BIOS`]: 0, 1, 3, …, 255 (the overflow bucket only in +Inf).
fn merged_bounds() -> &'static Bounds {
    static B: OnceLock<Bounds> = OnceLock::new();
    B.get_or_init(|| {
        let b: Vec<f64> = (0..MERGED_BUCKETS)
            .filter_map(|i| merged_upper(i).map(|v| v as f64))
            .collect();
        Bounds::new(&b)
    })
}

/// Running sums of `counts`, one per bound (`bounds` ≤ counts: later counts only in +Inf).
fn cumulative(counts: &[u64], bounds: usize) -> Vec<u64> {
    let mut acc = 0;
    counts[..bounds]
        .iter()
        .map(|c| {
            acc += c;
            acc
        })
        .collect()
}

/// One exported histogram series: cumulative counts per bound, count (+Inf), sum.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Samples ≤ each bound.
    pub cumulative: Vec<u64>,
    /// Samples in all.
    pub count: u64,
    /// Sum of the samples (bytes, or bios merged).
    pub sum: u64,
}

/// The size series and the merged-bios series of a histogram, as exported.
pub fn exported(h: &DispatchHist) -> (Series, Series) {
    (
        Series {
            cumulative: cumulative(&h.size, SIZE_BUCKETS),
            count: h.count(),
            sum: h.size_bytes,
        },
        Series {
            cumulative: cumulative(&h.merged, MERGED_BUCKETS - 1),
            count: h.merged.iter().sum(),
            sum: h.merged_bios,
        },
    )
}

/// The three families: histograms for classes with dispatched requests, the counter for every
/// class (0 included, so rates and alerts work before the first missed merge). In the protobuf
/// format the request sizes also have native buckets (schema 0, exact:
/// [`super::native::request_size`]); the merged bios keep classic buckets only, since theirs
/// (0, 1, 2–3, 4–7, …, over 256) are not powers of two and the last has no upper bound.
pub fn families(w: &mut dyn MetricWriter, s: &Snapshot) {
    let mut f = w.family(&REQUEST_SIZE);
    for ((dev, class), t) in &s.classes {
        let (h, _) = exported(&t.dispatch);
        if h.count > 0 {
            let values = class_label_values(dev, *class);
            f.native_histogram(
                &values,
                &HistogramSeries {
                    bounds: size_bounds(),
                    cumulative: &h.cumulative,
                    count: h.count,
                    sum: h.sum as f64,
                    native: Some(NativeSource::RequestSize(&t.dispatch.size)),
                    exemplars: &[],
                },
            );
        }
    }
    let mut f = w.family(&REQUEST_MERGED_BIOS);
    for ((dev, class), t) in &s.classes {
        let (_, h) = exported(&t.dispatch);
        if h.count > 0 {
            let values = class_label_values(dev, *class);
            f.histogram(
                &values,
                merged_bounds(),
                &h.cumulative,
                h.count,
                h.sum as f64,
            );
        }
    }
    let mut f = w.family(&MISSED_MERGES);
    for ((dev, class), t) in &s.classes {
        f.counter(&class_label_values(dev, *class), t.dispatch.missed as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_cumulative_counts() {
        assert_eq!(size_bounds().len(), SIZE_BUCKETS);
        assert_eq!(merged_bounds().len(), MERGED_BUCKETS - 1);
        let mut h = DispatchHist::ZERO;
        h.record(4096, 1, 0);
        h.record(4096, 3, 1);
        h.record(1 << 20, 300, 0);
        let (s, m) = exported(&h);
        let (size, n, bytes) = (s.cumulative, s.count, s.sum);
        let (merged, m, bios) = (m.cumulative, m.count, m.sum);
        assert_eq!((n, bytes), (3, 8192 + (1 << 20)));
        assert_eq!(size[2], 0);
        assert_eq!(size[3], 2, "two requests ≤ 4096 B");
        assert_eq!(*size.last().unwrap(), 3);
        assert_eq!(m, 3);
        assert_eq!(merged[0], 1, "one request not merged");
        assert_eq!(merged[2], 2, "two merged ≤ 3 times");
        assert_eq!(*merged.last().unwrap(), 2, "the long one only in +Inf");
        assert_eq!(bios, 2 + 256);
    }
}
