//! [`ProtoWriter`]: the Prometheus protobuf exposition format (the backend of
//! [`MetricWriter`] that `GET /metrics` answers with when the scraper asks for
//! [`CONTENT_TYPE`]): each family one `io.prometheus.client.MetricFamily` message, each preceded
//! by its length as a varint ("delimited"). Histograms carry native buckets
//! ([`super::native`]: latency at schema 8, request sizes at schema 0) and, unless
//! `[histogram] classic_in_protobuf = false`, their classic buckets too; every other family is
//! the same series with the same values as in the text format.
//!
//! The message types are prometheus/client_model io/prometheus/client/metrics.proto (proto2)
//! written out as `prost` structs, so no `protoc` runs at build time; each field's number is
//! upstream's (cited on the field). The `prometheus` crate's own model predates native
//! histograms and has none of their fields.

use prometheus::proto::MetricType as CrateType;
use prost::Message as _;

use super::{
    native::{self, NativeBuckets},
    writer::{HistogramSeries, MetricWriter, NativeSource},
    MetricDesc,
};

/// `Content-Type` of the delimited protobuf format (what Prometheus' scrape manager matches
/// with `--enable-feature=native-histograms` on 2.x, `scrape_native_histograms` on 3.x).
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// The messages of prometheus/client_model io/prometheus/client/metrics.proto (package
/// `io.prometheus.client`, proto2: every scalar optional), as `prost` structs. Field numbers are
/// upstream's, named in each field's docs.
pub mod model {
    /// `LabelPair`: a label of a series.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPair {
        /// Field 1 `name`.
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        /// Field 2 `value`.
        #[prost(string, optional, tag = "2")]
        pub value: Option<String>,
    }

    /// `MetricType`: the type of a family.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
    #[repr(i32)]
    pub enum MetricType {
        /// `COUNTER = 0`: the metric's `counter` is set.
        Counter = 0,
        /// `GAUGE = 1`: `gauge`.
        Gauge = 1,
        /// `SUMMARY = 2`: `summary`.
        Summary = 2,
        /// `UNTYPED = 3`: `untyped`.
        Untyped = 3,
        /// `HISTOGRAM = 4`: `histogram`.
        Histogram = 4,
        /// `GAUGE_HISTOGRAM = 5`: `histogram`.
        GaugeHistogram = 5,
    }

    /// `Gauge`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Gauge {
        /// Field 1 `value`.
        #[prost(double, optional, tag = "1")]
        pub value: Option<f64>,
    }

    /// `Counter`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Counter {
        /// Field 1 `value`.
        #[prost(double, optional, tag = "1")]
        pub value: Option<f64>,
        /// Field 2 `exemplar`.
        #[prost(message, optional, tag = "2")]
        pub exemplar: Option<Exemplar>,
        /// Field 3 `created_timestamp`.
        #[prost(message, optional, tag = "3")]
        pub created_timestamp: Option<Timestamp>,
    }

    /// `Quantile` of a summary.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Quantile {
        /// Field 1 `quantile`.
        #[prost(double, optional, tag = "1")]
        pub quantile: Option<f64>,
        /// Field 2 `value`.
        #[prost(double, optional, tag = "2")]
        pub value: Option<f64>,
    }

    /// `Summary`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        /// Field 1 `sample_count`.
        #[prost(uint64, optional, tag = "1")]
        pub sample_count: Option<u64>,
        /// Field 2 `sample_sum`.
        #[prost(double, optional, tag = "2")]
        pub sample_sum: Option<f64>,
        /// Field 3 `quantile`.
        #[prost(message, repeated, tag = "3")]
        pub quantile: Vec<Quantile>,
        /// Field 4 `created_timestamp`.
        #[prost(message, optional, tag = "4")]
        pub created_timestamp: Option<Timestamp>,
    }

    /// `Untyped`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Untyped {
        /// Field 1 `value`.
        #[prost(double, optional, tag = "1")]
        pub value: Option<f64>,
    }

    /// `Histogram`: classic buckets (`bucket`) and native ones (`schema` … `positive_count`),
    /// either or both; `sample_count` and `sample_sum` are shared.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Histogram {
        /// Field 1 `sample_count`.
        #[prost(uint64, optional, tag = "1")]
        pub sample_count: Option<u64>,
        /// Field 4 `sample_count_float` (float histograms; overrides `sample_count` if > 0).
        #[prost(double, optional, tag = "4")]
        pub sample_count_float: Option<f64>,
        /// Field 2 `sample_sum`.
        #[prost(double, optional, tag = "2")]
        pub sample_sum: Option<f64>,
        /// Field 3 `bucket`: classic buckets, `upper_bound` ascending, `+Inf` optional.
        #[prost(message, repeated, tag = "3")]
        pub bucket: Vec<Bucket>,
        /// Field 15 `created_timestamp`.
        #[prost(message, optional, tag = "15")]
        pub created_timestamp: Option<Timestamp>,
        /// Field 5 `schema` (sint32): `-4 ..= 8`, boundaries `2^(i · 2^-schema)`.
        #[prost(sint32, optional, tag = "5")]
        pub schema: Option<i32>,
        /// Field 6 `zero_threshold`: breadth of the zero bucket.
        #[prost(double, optional, tag = "6")]
        pub zero_threshold: Option<f64>,
        /// Field 7 `zero_count`.
        #[prost(uint64, optional, tag = "7")]
        pub zero_count: Option<u64>,
        /// Field 8 `zero_count_float`.
        #[prost(double, optional, tag = "8")]
        pub zero_count_float: Option<f64>,
        /// Field 9 `negative_span`.
        #[prost(message, repeated, tag = "9")]
        pub negative_span: Vec<BucketSpan>,
        /// Field 10 `negative_delta` (sint64).
        #[prost(sint64, repeated, tag = "10")]
        pub negative_delta: Vec<i64>,
        /// Field 11 `negative_count`.
        #[prost(double, repeated, tag = "11")]
        pub negative_count: Vec<f64>,
        /// Field 12 `positive_span`: a no-op span (0, 0) marks a native histogram without
        /// buckets.
        #[prost(message, repeated, tag = "12")]
        pub positive_span: Vec<BucketSpan>,
        /// Field 13 `positive_delta` (sint64): each bucket's count minus the previous one's.
        #[prost(sint64, repeated, tag = "13")]
        pub positive_delta: Vec<i64>,
        /// Field 14 `positive_count` (float histograms).
        #[prost(double, repeated, tag = "14")]
        pub positive_count: Vec<f64>,
        /// Field 16 `exemplars` (native histograms; each must have a timestamp).
        #[prost(message, repeated, tag = "16")]
        pub exemplars: Vec<Exemplar>,
    }

    /// `Bucket`: a classic bucket.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Bucket {
        /// Field 1 `cumulative_count`.
        #[prost(uint64, optional, tag = "1")]
        pub cumulative_count: Option<u64>,
        /// Field 4 `cumulative_count_float`.
        #[prost(double, optional, tag = "4")]
        pub cumulative_count_float: Option<f64>,
        /// Field 2 `upper_bound` (inclusive).
        #[prost(double, optional, tag = "2")]
        pub upper_bound: Option<f64>,
        /// Field 3 `exemplar`.
        #[prost(message, optional, tag = "3")]
        pub exemplar: Option<Exemplar>,
    }

    /// `BucketSpan`: `length` consecutive native buckets starting `offset` after the previous
    /// span's end (the first span: at index `offset`).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct BucketSpan {
        /// Field 1 `offset` (sint32).
        #[prost(sint32, optional, tag = "1")]
        pub offset: Option<i32>,
        /// Field 2 `length`.
        #[prost(uint32, optional, tag = "2")]
        pub length: Option<u32>,
    }

    /// `Exemplar`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Exemplar {
        /// Field 1 `label`.
        #[prost(message, repeated, tag = "1")]
        pub label: Vec<LabelPair>,
        /// Field 2 `value`.
        #[prost(double, optional, tag = "2")]
        pub value: Option<f64>,
        /// Field 3 `timestamp`.
        #[prost(message, optional, tag = "3")]
        pub timestamp: Option<Timestamp>,
    }

    /// `google.protobuf.Timestamp` (google/protobuf/timestamp.proto).
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Timestamp {
        /// Field 1 `seconds` since the Unix epoch.
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        /// Field 2 `nanos`.
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }

    /// `Metric`: one series.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metric {
        /// Field 1 `label`.
        #[prost(message, repeated, tag = "1")]
        pub label: Vec<LabelPair>,
        /// Field 2 `gauge`.
        #[prost(message, optional, tag = "2")]
        pub gauge: Option<Gauge>,
        /// Field 3 `counter`.
        #[prost(message, optional, tag = "3")]
        pub counter: Option<Counter>,
        /// Field 4 `summary`.
        #[prost(message, optional, tag = "4")]
        pub summary: Option<Summary>,
        /// Field 5 `untyped`.
        #[prost(message, optional, tag = "5")]
        pub untyped: Option<Untyped>,
        /// Field 7 `histogram`.
        #[prost(message, optional, tag = "7")]
        pub histogram: Option<Histogram>,
        /// Field 6 `timestamp_ms`.
        #[prost(int64, optional, tag = "6")]
        pub timestamp_ms: Option<i64>,
    }

    /// `MetricFamily`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct MetricFamily {
        /// Field 1 `name`.
        #[prost(string, optional, tag = "1")]
        pub name: Option<String>,
        /// Field 2 `help`.
        #[prost(string, optional, tag = "2")]
        pub help: Option<String>,
        /// Field 3 `type`.
        #[prost(enumeration = "MetricType", optional, tag = "3")]
        pub r#type: Option<i32>,
        /// Field 4 `metric`.
        #[prost(message, repeated, tag = "4")]
        pub metric: Vec<Metric>,
        /// Field 5 `unit`.
        #[prost(string, optional, tag = "5")]
        pub unit: Option<String>,
    }
}

use model::{
    Bucket, BucketSpan, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, Timestamp,
};

/// Appends families in the delimited protobuf format to one buffer.
#[derive(Debug)]
pub struct ProtoWriter {
    out: Vec<u8>,
    /// The family being written (encoded when the next one starts, or at [`Self::finish`]).
    family: Option<MetricFamily>,
    /// Write classic buckets beside native ones (`[histogram] classic_in_protobuf`).
    classic: bool,
}

impl ProtoWriter {
    /// An empty exposition; `classic`: histograms with native buckets keep their classic
    /// buckets too (histograms without native buckets always have their classic ones).
    pub fn new(classic: bool) -> ProtoWriter {
        ProtoWriter::with_buffer(classic, Vec::new())
    }

    /// The same, written into `buf` (cleared, its capacity kept: [`super::ScrapeBuffer`]).
    pub fn with_buffer(classic: bool, mut buf: Vec<u8>) -> ProtoWriter {
        buf.clear();
        ProtoWriter {
            out: buf,
            family: None,
            classic,
        }
    }

    /// The exposition: length-delimited `MetricFamily` messages, in the order written.
    pub fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.out
    }

    fn flush(&mut self) {
        if let Some(f) = self.family.take() {
            if !f.metric.is_empty() {
                f.encode_length_delimited(&mut self.out)
                    .expect("encoding to a Vec cannot fail");
            }
        }
    }

    fn push(&mut self, desc: &MetricDesc, metric: Metric) {
        match &mut self.family {
            Some(f) if f.name.as_deref() == Some(desc.name) => f.metric.push(metric),
            _ => {
                // A series without its header: start the family (Family always calls header).
                self.header(desc);
                self.push(desc, metric);
            }
        }
    }
}

/// The protobuf type of a descriptor's kind.
fn model_type(kind: CrateType) -> model::MetricType {
    match kind {
        CrateType::COUNTER => model::MetricType::Counter,
        CrateType::GAUGE => model::MetricType::Gauge,
        CrateType::SUMMARY => model::MetricType::Summary,
        CrateType::UNTYPED => model::MetricType::Untyped,
        CrateType::HISTOGRAM => model::MetricType::Histogram,
    }
}

/// Label pairs of a series.
fn labels(names: &[&str], values: &[&str]) -> Vec<LabelPair> {
    names
        .iter()
        .zip(values)
        .map(|(k, v)| LabelPair {
            name: Some((*k).to_string()),
            value: Some((*v).to_string()),
        })
        .collect()
}

/// The native fields of `h` set from `n`.
fn set_native(h: &mut Histogram, n: &NativeBuckets) {
    let (spans, deltas) = native::spans_and_deltas(&n.positive);
    h.schema = Some(n.schema);
    h.zero_threshold = Some(n.zero_threshold);
    h.zero_count = Some(n.zero_count);
    h.positive_span = if spans.is_empty() {
        vec![BucketSpan {
            offset: Some(0),
            length: Some(0),
        }]
    } else {
        spans
            .into_iter()
            .map(|(o, l)| BucketSpan {
                offset: Some(o),
                length: Some(l),
            })
            .collect()
    };
    h.positive_delta = deltas;
}

/// A classic bucket's `Exemplar`: the `request_id` label, the value, the completion time;
/// `None` if its label set exceeds the OpenMetrics limit ([`super::text::Exemplar::fits`]),
/// which Prometheus also enforces on protobuf exemplars.
fn exemplar(e: &super::Exemplar) -> Option<model::Exemplar> {
    e.fits().then(|| {
        let ms = (e.timestamp * 1e3).round() as i64;
        model::Exemplar {
            label: vec![LabelPair {
                name: Some("request_id".to_string()),
                value: Some(e.request_id.clone()),
            }],
            value: Some(e.value),
            timestamp: Some(Timestamp {
                seconds: ms.div_euclid(1000),
                nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
            }),
        }
    })
}

impl MetricWriter for ProtoWriter {
    fn header(&mut self, desc: &MetricDesc) {
        self.flush();
        self.family = Some(MetricFamily {
            name: Some(desc.name.to_string()),
            help: Some(desc.help.to_string()),
            r#type: Some(model_type(desc.kind) as i32),
            metric: Vec::new(),
            unit: None,
        });
    }

    fn sample(&mut self, desc: &MetricDesc, values: &[&str], v: f64) {
        let mut m = Metric {
            label: labels(desc.labels, values),
            ..Metric::default()
        };
        match desc.kind {
            CrateType::COUNTER => {
                m.counter = Some(Counter {
                    value: Some(v),
                    ..Counter::default()
                })
            }
            _ => m.gauge = Some(Gauge { value: Some(v) }),
        }
        self.push(desc, m);
    }

    fn histogram(&mut self, desc: &MetricDesc, values: &[&str], s: &HistogramSeries) {
        let mut h = Histogram {
            sample_count: Some(s.count),
            sample_sum: Some(s.sum),
            ..Histogram::default()
        };
        let native = s.native.map(|src| match src {
            NativeSource::Latency(k) => native::latency(k),
            NativeSource::RequestSize(k) => native::request_size(k),
        });
        if native.is_none() || self.classic {
            h.bucket = s
                .bounds
                .upper()
                .iter()
                .zip(s.cumulative)
                .enumerate()
                .map(|(i, (&le, &c))| Bucket {
                    cumulative_count: Some(c),
                    upper_bound: Some(le),
                    exemplar: s
                        .exemplars
                        .iter()
                        .find(|(j, _)| *j == i)
                        .and_then(|(_, e)| exemplar(e)),
                    ..Bucket::default()
                })
                .collect();
        }
        if let Some(n) = &native {
            set_native(&mut h, n);
        }
        let m = Metric {
            label: labels(desc.labels, values),
            histogram: Some(h),
            ..Metric::default()
        };
        self.push(desc, m);
    }

    /// Exemplars go on the classic buckets (`Bucket.exemplar`), where Prometheus reads them
    /// from a protobuf scrape; a series exported with native buckets only has none.
    fn wants_exemplars(&self) -> bool {
        true
    }

    /// Counters and gauges of the crate's families (the process collector has nothing else);
    /// series of any other type are skipped with a debug log.
    fn foreign(&mut self, families: Vec<prometheus::proto::MetricFamily>) {
        self.flush();
        for f in families {
            let kind = f.get_field_type();
            let metric: Vec<Metric> = f
                .get_metric()
                .iter()
                .filter_map(|m| {
                    let label = m
                        .get_label()
                        .iter()
                        .map(|l| LabelPair {
                            name: Some(l.name().to_string()),
                            value: Some(l.value().to_string()),
                        })
                        .collect();
                    let mut out = Metric {
                        label,
                        ..Metric::default()
                    };
                    match kind {
                        CrateType::COUNTER => {
                            out.counter = Some(Counter {
                                value: Some(m.get_counter().get_value()),
                                ..Counter::default()
                            })
                        }
                        CrateType::GAUGE => {
                            out.gauge = Some(Gauge {
                                value: Some(m.get_gauge().get_value()),
                            })
                        }
                        _ => {
                            tracing::debug!(family = f.name(), "only counters and gauges of the prometheus crate are written in protobuf");
                            return None;
                        }
                    }
                    Some(out)
                })
                .collect();
            if metric.is_empty() {
                continue;
            }
            let mf = MetricFamily {
                name: Some(f.name().to_string()),
                help: Some(f.help().to_string()),
                r#type: Some(model_type(kind) as i32),
                metric,
                unit: None,
            };
            mf.encode_length_delimited(&mut self.out)
                .expect("encoding to a Vec cannot fail");
        }
    }
}

/// Decodes a delimited exposition (what [`ProtoWriter::finish`] returns) into its families.
///
/// # Errors
///
/// A message that is not a valid length-delimited `MetricFamily` (a truncated body, or not
/// this format at all: check the response's `Content-Type` is [`CONTENT_TYPE`]).
pub fn decode(mut body: &[u8]) -> Result<Vec<MetricFamily>, prost::DecodeError> {
    let mut out = Vec::new();
    while !body.is_empty() {
        out.push(MetricFamily::decode_length_delimited(&mut body)?);
    }
    Ok(out)
}

/// A series of the text format, as [`text_samples`] gives it: metric name (with `_bucket`,
/// `_sum`, `_count` for histograms), labels in their exposition order (`le` last), value.
pub type TextSample = (String, Vec<(String, String)>, f64);

/// What the text format has for `families`: every counter and gauge series, and every
/// histogram's classic `_bucket` series (with `le="+Inf"` = `sample_count` if no bucket is
/// +Inf), `_sum` and `_count`, `le` formatted as the text format does (Rust's `f64` display,
/// `+Inf`). Native buckets have no text form and are left out. For comparing the two formats
/// (the unit tests, `tests/native.rs`).
pub fn text_samples(families: &[MetricFamily]) -> Vec<TextSample> {
    let mut out = Vec::new();
    for f in families {
        let name = f.name.as_deref().unwrap_or_default();
        for m in &f.metric {
            let labels: Vec<(String, String)> = m
                .label
                .iter()
                .map(|l| {
                    (
                        l.name.clone().unwrap_or_default(),
                        l.value.clone().unwrap_or_default(),
                    )
                })
                .collect();
            if let Some(c) = &m.counter {
                out.push((name.to_string(), labels.clone(), c.value.unwrap_or(0.0)));
            }
            if let Some(g) = &m.gauge {
                out.push((name.to_string(), labels.clone(), g.value.unwrap_or(0.0)));
            }
            if let Some(h) = &m.histogram {
                let count = h.sample_count.unwrap_or(0) as f64;
                let mut has_inf = false;
                for b in &h.bucket {
                    let le = b.upper_bound.unwrap_or(f64::INFINITY);
                    has_inf |= le == f64::INFINITY;
                    let le = if le == f64::INFINITY {
                        "+Inf".to_string()
                    } else {
                        le.to_string()
                    };
                    let mut l = labels.clone();
                    l.push(("le".to_string(), le));
                    out.push((
                        format!("{name}_bucket"),
                        l,
                        b.cumulative_count.unwrap_or(0) as f64,
                    ));
                }
                if !has_inf {
                    let mut l = labels.clone();
                    l.push(("le".to_string(), "+Inf".to_string()));
                    out.push((format!("{name}_bucket"), l, count));
                }
                out.push((
                    format!("{name}_sum"),
                    labels.clone(),
                    h.sample_sum.unwrap_or(0.0),
                ));
                out.push((format!("{name}_count"), labels.clone(), count));
            }
        }
    }
    out
}

/// The native buckets of `h`, decoded from its spans and deltas: `(lower, upper, count)` of
/// every positive bucket in a span (bounds in the metric's unit: `(lower, upper]`), ascending;
/// empty if `h` has no native buckets (`schema` unset). The zero bucket is `h.zero_count`.
pub fn native_buckets(h: &Histogram) -> Vec<(f64, f64, u64)> {
    let Some(schema) = h.schema else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let (mut idx, mut count) = (0i32, 0i64);
    let mut deltas = h.positive_delta.iter();
    for (k, s) in h.positive_span.iter().enumerate() {
        let off = s.offset.unwrap_or(0);
        idx = if k == 0 { off } else { idx + off };
        for _ in 0..s.length.unwrap_or(0) {
            count += deltas.next().copied().unwrap_or(0);
            out.push((
                native::upper_bound(schema, idx - 1),
                native::upper_bound(schema, idx),
                count as u64,
            ));
            idx += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exposition::{text::Bounds, Exemplar};
    use prometheus::proto::MetricType;

    /// Exemplars go into the classic buckets' `exemplar` (label `request_id`, value, timestamp);
    /// one on the +Inf bucket (not listed) or too long is left out.
    #[test]
    fn exemplars_on_classic_buckets() {
        const H: MetricDesc = MetricDesc {
            name: "t_latency_seconds",
            help: "A histogram.",
            kind: MetricType::HISTOGRAM,
            labels: &["device"],
        };
        let ex = Exemplar {
            request_id: "1764865123-42".into(),
            value: 0.0008,
            timestamp: 1764865123.4567,
        };
        let too_long = Exemplar {
            request_id: "x".repeat(crate::exposition::text::EXEMPLAR_MAX_LABEL_CHARS),
            ..ex.clone()
        };
        let b = Bounds::new(&[0.001, 1.0]);
        let mut w = ProtoWriter::new(true);
        let dw: &mut dyn MetricWriter = &mut w;
        assert!(dw.wants_exemplars());
        dw.family(&H).native_histogram(
            &["d"],
            &HistogramSeries {
                bounds: &b,
                cumulative: &[1, 2],
                count: 3,
                sum: 0.5,
                native: None,
                exemplars: &[(0, ex.clone()), (1, too_long), (2, ex)],
            },
        );
        let fams = decode(&w.finish()).unwrap();
        let buckets = &fams[0].metric[0].histogram.as_ref().unwrap().bucket;
        assert_eq!(buckets.len(), 2);
        let e = buckets[0].exemplar.as_ref().expect("exemplar of bucket 0");
        assert_eq!(e.label[0].name.as_deref(), Some("request_id"));
        assert_eq!(e.label[0].value.as_deref(), Some("1764865123-42"));
        assert_eq!(e.value, Some(0.0008));
        let ts = e.timestamp.as_ref().unwrap();
        assert_eq!((ts.seconds, ts.nanos), (1764865123, 457_000_000));
        assert!(buckets[1].exemplar.is_none());
    }
}
