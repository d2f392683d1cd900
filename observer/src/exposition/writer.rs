//! [`MetricWriter`]: what every family function of `/metrics` writes into, so each family is
//! declared once ([`MetricDesc`]) and filled by one code path whatever the format. Two
//! backends: [`super::TextWriter`] (the text format, version 0.0.4) and
//! [`super::proto::ProtoWriter`] (the delimited protobuf format, with native histograms).
//!
//! A family function takes `w: &mut dyn MetricWriter`, calls [`family`](Family) on it with its
//! descriptor and then one [`Family::counter`], [`Family::gauge`], [`Family::histogram`] or
//! [`Family::native_histogram`] per series. The family's header is written with its first
//! series, so a family given none leaves no trace in either format.

use prometheus::proto::{MetricFamily, MetricType};

use super::{
    text::{Bounds, Exemplar},
    MetricDesc,
};

/// Where the kernel's buckets of a histogram series come from, for its native (sparse
/// exponential) buckets in the protobuf exposition ([`super::native`]). The text format ignores
/// it.
#[derive(Clone, Copy, Debug)]
pub enum NativeSource<'a> {
    /// A latency histogram's in-kernel buckets ([`observer_common::hist`], log-linear, 8 per
    /// power of two of ~1 µs; `NBUCKETS` counts), exported at schema 8 in seconds
    /// ([`super::native::latency`]).
    Latency(&'a [u64]),
    /// The request-size buckets (`observer_common::dispatch`, `SIZE_BUCKETS` counts: bucket `i`
    /// = `(2^(8+i), 2^(9+i)]` bytes), exported at schema 0 in bytes, exactly
    /// ([`super::native::request_size`]).
    RequestSize(&'a [u64]),
}

/// One histogram series, as every format needs it.
#[derive(Clone, Copy, Debug)]
pub struct HistogramSeries<'a> {
    /// The classic bucket bounds (`le`), ascending.
    pub bounds: &'a Bounds,
    /// Samples ≤ each of `bounds` (as many as `bounds`).
    pub cumulative: &'a [u64],
    /// Samples in all (the `+Inf` bucket, `_count`).
    pub count: u64,
    /// Sum of the samples, in the metric's unit (seconds, bytes, bios): `_sum`.
    pub sum: f64,
    /// The kernel buckets behind it, for native buckets; `None`: classic buckets only.
    pub native: Option<NativeSource<'a>>,
    /// Exemplars of its classic buckets: `(i, exemplar)` for the bucket of bound `i`
    /// (`bounds.len()`: the +Inf bucket), ascending `i`, at most one per bucket. Written by
    /// the backends whose format has them (OpenMetrics text; protobuf, on classic buckets),
    /// ignored by the others; empty unless [`MetricWriter::wants_exemplars`].
    pub exemplars: &'a [(usize, Exemplar)],
}

/// A backend of `/metrics`: receives families, one series at a time, in exposition order.
/// The calls come from [`Family`]; `header` exactly once per family, before its first series.
pub trait MetricWriter {
    /// Starts family `desc` (its `# HELP`/`# TYPE`, or a new `MetricFamily` message).
    fn header(&mut self, desc: &MetricDesc);
    /// A counter or gauge (by `desc.kind`) series: one label value per label of `desc`.
    fn sample(&mut self, desc: &MetricDesc, values: &[&str], v: f64);
    /// A histogram series: one label value per label of `desc`.
    fn histogram(&mut self, desc: &MetricDesc, values: &[&str], h: &HistogramSeries);
    /// Whether this backend writes [`HistogramSeries::exemplars`]: family functions gather
    /// exemplars only then.
    fn wants_exemplars(&self) -> bool {
        false
    }
    /// Families built by the `prometheus` crate itself (the process collector), in the order
    /// given; families without series are left out.
    fn foreign(&mut self, families: Vec<MetricFamily>);
}

impl<'a> dyn MetricWriter + 'a {
    /// Starts the family `desc`: its header is written with its first series.
    pub fn family<'w>(&'w mut self, desc: &'w MetricDesc) -> Family<'w, 'a> {
        Family {
            w: self,
            desc,
            started: false,
        }
    }
}

/// Writes the series of one family into a [`MetricWriter`]; see `dyn MetricWriter::family`.
pub struct Family<'w, 'a> {
    w: &'w mut (dyn MetricWriter + 'a),
    desc: &'w MetricDesc,
    started: bool,
}

impl Family<'_, '_> {
    /// A counter series: one value per label of the descriptor, same order.
    pub fn counter(&mut self, values: &[&str], v: f64) {
        debug_assert_eq!(self.desc.kind, MetricType::COUNTER, "{}", self.desc.name);
        self.start(values);
        self.w.sample(self.desc, values, v);
    }

    /// A gauge series: one value per label of the descriptor, same order.
    pub fn gauge(&mut self, values: &[&str], v: f64) {
        debug_assert_eq!(self.desc.kind, MetricType::GAUGE, "{}", self.desc.name);
        self.start(values);
        self.w.sample(self.desc, values, v);
    }

    /// A histogram series with classic buckets only: `cumulative[i]` samples ≤ bound `i` (as
    /// many as `bounds`), `count` samples in all (the +Inf bucket), `sum` of their values.
    pub fn histogram(
        &mut self,
        values: &[&str],
        bounds: &Bounds,
        cumulative: &[u64],
        count: u64,
        sum: f64,
    ) {
        self.native_histogram(
            values,
            &HistogramSeries {
                bounds,
                cumulative,
                count,
                sum,
                native: None,
                exemplars: &[],
            },
        );
    }

    /// A histogram series, with native buckets in the protobuf format if `h.native` is set.
    pub fn native_histogram(&mut self, values: &[&str], h: &HistogramSeries) {
        debug_assert_eq!(self.desc.kind, MetricType::HISTOGRAM, "{}", self.desc.name);
        debug_assert_eq!(h.bounds.len(), h.cumulative.len(), "{}", self.desc.name);
        debug_assert!(h.exemplars.windows(2).all(|w| w[0].0 < w[1].0));
        self.start(values);
        self.w.histogram(self.desc, values, h);
    }

    fn start(&mut self, values: &[&str]) {
        debug_assert_eq!(
            values.len(),
            self.desc.labels.len(),
            "label values of {}",
            self.desc.name
        );
        if !self.started {
            self.started = true;
            self.w.header(self.desc);
        }
    }
}
