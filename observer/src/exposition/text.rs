//! [`TextWriter`]: the text exposition format (version 0.0.4) written straight from the values
//! (the text backend of [`MetricWriter`]),
//! without building the `prometheus` crate's object model (a `MetricFamily` per metric, two
//! `String`s per label pair, a `Bucket` per histogram bound) on every scrape, which was most of
//! a scrape's CPU time with 32 busy devices (BENCHMARKS.md). It writes exactly what that crate's
//! `TextEncoder` writes for the same families: the tests below compare both, byte for byte.
//!
//! What it writes, per family with at least one series (families without are left out):
//! `# HELP <name> <help>` (only if help is not empty; `\` and newline escaped), `# TYPE <name>
//! <counter|gauge|histogram>`, then one line per sample, `<name>{<label>="<value>",...} <value>`
//! (no braces without labels; `\`, newline and `"` escaped in label values; values as Rust's
//! `f64` `Display`, which is what the crate uses). A histogram series is its `_bucket` lines,
//! one per bound with `le` last among its labels, a `le="+Inf"` line with the sample count
//! (unless a bound was +Inf), then `_sum` and `_count`.

use std::fmt::Write as _;

use prometheus::proto::MetricType;

use super::{
    writer::{HistogramSeries, MetricWriter},
    MetricDesc,
};

/// Histogram bounds with their `le` label values formatted once (they are the same for every
/// series and every scrape).
#[derive(Clone, Debug)]
pub struct Bounds {
    /// `le` values, escaped, one per bound in the order given.
    les: Vec<String>,
    /// One of the bounds is +Inf: no extra `le="+Inf"` line is written.
    has_inf: bool,
    /// The bounds themselves (the protobuf format's `upper_bound`s).
    upper: Vec<f64>,
}

impl Bounds {
    /// The `le` values of `bounds` (upper bounds, seconds or any unit; ascending, as exported).
    pub fn new(bounds: &[f64]) -> Bounds {
        Bounds {
            les: bounds
                .iter()
                .map(|b| {
                    let mut s = String::new();
                    escape_into(&mut s, &b.to_string(), true);
                    s
                })
                .collect(),
            has_inf: bounds
                .iter()
                .any(|b| b.is_infinite() && b.is_sign_positive()),
            upper: bounds.to_vec(),
        }
    }

    /// The bounds, as given to [`Bounds::new`].
    pub fn upper(&self) -> &[f64] {
        &self.upper
    }

    /// Number of bounds.
    pub fn len(&self) -> usize {
        self.les.len()
    }

    /// True if there are no bounds (a histogram then has only its +Inf bucket).
    pub fn is_empty(&self) -> bool {
        self.les.is_empty()
    }
}

/// Appends families in the text format to one `String`.
#[derive(Debug, Default)]
pub struct TextWriter {
    out: String,
    /// Scratch: the current series' `{label="value",...` (no closing brace).
    labels: String,
}

impl TextWriter {
    /// An empty exposition.
    pub fn new() -> TextWriter {
        TextWriter::default()
    }

    /// Appends text written elsewhere (e.g. [`super::encode`] of the `prometheus` crate's own
    /// collectors; [`MetricWriter::foreign`] does that).
    pub fn push_str(&mut self, text: &str) {
        self.out.push_str(text);
    }

    /// The exposition.
    pub fn finish(self) -> String {
        self.out
    }
}

impl MetricWriter for TextWriter {
    fn header(&mut self, d: &MetricDesc) {
        let out = &mut self.out;
        if !d.help.is_empty() {
            out.push_str("# HELP ");
            out.push_str(d.name);
            out.push(' ');
            escape_into(out, d.help, false);
            out.push('\n');
        }
        out.push_str("# TYPE ");
        out.push_str(d.name);
        out.push(' ');
        out.push_str(match d.kind {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "untyped",
        });
        out.push('\n');
    }

    fn sample(&mut self, desc: &MetricDesc, values: &[&str], v: f64) {
        self.set_labels(desc, values);
        line(&mut self.out, desc.name, "", &self.labels, None, v);
    }

    /// The classic buckets (`h.native` is for the protobuf format only).
    fn histogram(&mut self, desc: &MetricDesc, values: &[&str], h: &HistogramSeries) {
        debug_assert_eq!(h.bounds.len(), h.cumulative.len(), "{}", desc.name);
        self.set_labels(desc, values);
        let TextWriter { out, labels } = self;
        let name = desc.name;
        let sep = if labels.is_empty() { "{" } else { "," };
        for (le, c) in h.bounds.les.iter().zip(h.cumulative) {
            line(out, name, "_bucket", labels, Some((sep, le)), *c as f64);
        }
        if !h.bounds.has_inf {
            line(
                out,
                name,
                "_bucket",
                labels,
                Some((sep, "+Inf")),
                h.count as f64,
            );
        }
        line(out, name, "_sum", labels, None, h.sum);
        line(out, name, "_count", labels, None, h.count as f64);
    }

    fn foreign(&mut self, families: Vec<prometheus::proto::MetricFamily>) {
        self.out.push_str(&super::encode(families));
    }
}

impl TextWriter {
    /// The series' labels into the scratch: `{label="value",...` (no closing brace), or
    /// nothing without labels.
    fn set_labels(&mut self, d: &MetricDesc, values: &[&str]) {
        debug_assert_eq!(values.len(), d.labels.len(), "label values of {}", d.name);
        let labels = &mut self.labels;
        labels.clear();
        for (i, (k, v)) in d.labels.iter().zip(values).enumerate() {
            labels.push_str(if i == 0 { "{" } else { "," });
            labels.push_str(k);
            labels.push_str("=\"");
            escape_into(labels, v, true);
            labels.push('"');
        }
    }
}

/// One sample line: `name` + `suffix`, the series' `labels` (open, or empty), an extra
/// `le="..."` label after `sep`, the value.
fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &str,
    le: Option<(&str, &str)>,
    v: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    out.push_str(labels);
    if let Some((sep, le)) = le {
        out.push_str(sep);
        out.push_str("le=\"");
        out.push_str(le);
        out.push_str("\"}");
    } else if !labels.is_empty() {
        out.push('}');
    }
    out.push(' ');
    write_value(out, v);
    out.push('\n');
}

/// `v` as `f64`'s `Display` writes it; integers up to 2^53 (counts) without the float
/// formatter, which writes the same digits for them.
fn write_value(out: &mut String, v: f64) {
    const EXACT: f64 = (1u64 << 53) as f64;
    if v.fract() == 0.0 && (0.0..=EXACT).contains(&v) && v.is_sign_positive() {
        let _ = write!(out, "{}", v as u64);
    } else {
        let _ = write!(out, "{v}");
    }
}

/// Appends `v` with `\` → `\\`, newline → `\n` and, if `quote`, `"` → `\"`.
fn escape_into(out: &mut String, v: &str, quote: bool) {
    let special = |c: char| c == '\\' || c == '\n' || (quote && c == '"');
    if !v.contains(special) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            _ => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The `prometheus` crate is the witness: the same families built in its object model and
    //! encoded by its `TextEncoder` must give the same text.

    use super::*;
    use prometheus::proto::{Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily};
    use proptest::prelude::*;

    const C: MetricDesc = MetricDesc {
        name: "t_requests_total",
        help: "Help with a \\ backslash, a \"quote\"\nand a newline.",
        kind: MetricType::COUNTER,
        labels: &["device", "op"],
    };
    const G: MetricDesc = MetricDesc {
        name: "t_gauge",
        help: "",
        kind: MetricType::GAUGE,
        labels: &[],
    };
    const H: MetricDesc = MetricDesc {
        name: "t_latency_seconds",
        help: "A histogram.",
        kind: MetricType::HISTOGRAM,
        labels: &["device", "stage"],
    };
    const HN: MetricDesc = MetricDesc {
        name: "t_unlabelled_seconds",
        help: "A histogram without labels.",
        kind: MetricType::HISTOGRAM,
        labels: &[],
    };

    /// One series of the test: label values and what it holds.
    #[derive(Clone, Debug)]
    enum Value {
        Plain(f64),
        Hist {
            cumulative: Vec<u64>,
            count: u64,
            sum: f64,
        },
    }

    /// A family of the test: its descriptor and its series (label values, value).
    type Fam<'a> = (&'a MetricDesc, Vec<(Vec<String>, Value)>);

    fn witness(families: &[Fam], bounds: &[f64]) -> String {
        let mut mfs = Vec::new();
        for (d, series) in families {
            let mut f = MetricFamily::default();
            f.set_name(d.name.to_string());
            f.set_help(d.help.to_string());
            f.set_field_type(d.kind);
            let metrics: Vec<Metric> = series
                .iter()
                .map(|(values, v)| {
                    let pairs = d
                        .labels
                        .iter()
                        .zip(values)
                        .map(|(k, v)| {
                            let mut l = LabelPair::default();
                            l.set_name(k.to_string());
                            l.set_value(v.clone());
                            l
                        })
                        .collect();
                    let mut m = Metric::from_label(pairs);
                    match (d.kind, v) {
                        (MetricType::COUNTER, Value::Plain(x)) => {
                            let mut c = Counter::default();
                            c.set_value(*x);
                            m.set_counter(c);
                        }
                        (MetricType::GAUGE, Value::Plain(x)) => {
                            let mut g = Gauge::default();
                            g.set_value(*x);
                            m.set_gauge(g);
                        }
                        (
                            MetricType::HISTOGRAM,
                            Value::Hist {
                                cumulative,
                                count,
                                sum,
                            },
                        ) => {
                            let mut h = Histogram::default();
                            h.set_sample_count(*count);
                            h.set_sample_sum(*sum);
                            h.set_bucket(
                                bounds
                                    .iter()
                                    .zip(cumulative)
                                    .map(|(&le, &c)| {
                                        let mut b = Bucket::default();
                                        b.set_upper_bound(le);
                                        b.set_cumulative_count(c);
                                        b
                                    })
                                    .collect(),
                            );
                            m.set_histogram(h);
                        }
                        _ => unreachable!(),
                    }
                    m
                })
                .collect();
            f.set_metric(metrics);
            mfs.push(f);
        }
        super::super::encode(mfs)
    }

    fn ours(families: &[Fam], bounds: &[f64]) -> String {
        let b = Bounds::new(bounds);
        let mut w = TextWriter::new();
        for (d, series) in families {
            let dw: &mut dyn MetricWriter = &mut w;
            let mut f = dw.family(d);
            for (values, v) in series {
                let values: Vec<&str> = values.iter().map(String::as_str).collect();
                match v {
                    Value::Plain(x) if d.kind == MetricType::COUNTER => f.counter(&values, *x),
                    Value::Plain(x) => f.gauge(&values, *x),
                    Value::Hist {
                        cumulative,
                        count,
                        sum,
                    } => f.histogram(&values, &b, cumulative, *count, *sum),
                }
            }
        }
        w.finish()
    }

    fn hist(n: usize, scale: u64) -> Value {
        let cumulative: Vec<u64> = (0..n as u64).map(|i| i * scale).collect();
        Value::Hist {
            count: cumulative.last().copied().unwrap_or(0) + 3,
            cumulative,
            sum: 0.1 + 0.2,
        }
    }

    #[test]
    fn same_text_as_the_text_encoder() {
        let bounds: Vec<f64> = (0..=26).map(|k| (1u64 << k) as f64 * 1e-6).collect();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let families = vec![
            (
                &C,
                vec![
                    (s(&["loop0", "read"]), Value::Plain(0.0)),
                    (s(&["we\"ird\\dev\nname", "write"]), Value::Plain(12345.0)),
                    (s(&["", "ünïcode"]), Value::Plain(2f64.powi(60))),
                    (s(&["x", "y"]), Value::Plain(1e-9)),
                    (s(&["x", "z"]), Value::Plain(1e21)),
                    (s(&["x", "n"]), Value::Plain(-3.0)),
                    (s(&["x", "m"]), Value::Plain(-0.0)),
                    (s(&["x", "nan"]), Value::Plain(f64::NAN)),
                    (s(&["x", "inf"]), Value::Plain(f64::INFINITY)),
                ],
            ),
            (&G, vec![(vec![], Value::Plain(0.5))]),
            (&H, vec![]), // empty: left out
            (
                &H,
                vec![
                    (s(&["loop0", "queue"]), hist(bounds.len(), 7)),
                    (s(&["a\"b", "device"]), hist(bounds.len(), 0)),
                ],
            ),
            (&HN, vec![(vec![], hist(bounds.len(), 1 << 40))]),
        ];
        let want = witness(&families, &bounds);
        assert!(want.contains("le=\"+Inf\""));
        assert!(want.contains("_sum{"));
        assert_eq!(ours(&families, &bounds), want);
    }

    #[test]
    fn odd_bounds_and_an_infinite_one() {
        for bounds in [
            vec![],
            vec![0.1, 0.25, 1.0 / 3.0, 1e-7, 123456789.0],
            vec![0.5, f64::INFINITY],
        ] {
            let families = vec![(
                &H,
                vec![(
                    vec!["d".to_string(), "s".to_string()],
                    hist(bounds.len(), 2),
                )],
            )];
            assert_eq!(
                ours(&families, &bounds),
                witness(&families, &bounds),
                "{bounds:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn any_labels_and_values(
            labels in proptest::collection::vec(("\\PC{0,12}|[\\\\\"\n a]{0,6}", "\\PC{0,4}"), 1..6),
            plain in proptest::collection::vec(any::<f64>(), 1..6),
            counts in proptest::collection::vec(0u64..(1 << 60), 4),
            sum in any::<f64>(),
        ) {
            let bounds = [1e-6, 0.001, 0.5];
            let cumulative = {
                let mut c = counts.clone();
                c.sort_unstable();
                c
            };
            let count = cumulative[3];
            let series: Vec<(Vec<String>, Value)> = labels
                .iter()
                .zip(plain.iter().cycle())
                .map(|((a, b), v)| (vec![a.clone(), b.clone()], Value::Plain(*v)))
                .collect();
            let hists: Vec<(Vec<String>, Value)> = labels
                .iter()
                .map(|(a, b)| {
                    (
                        vec![a.clone(), b.clone()],
                        Value::Hist { cumulative: cumulative[..3].to_vec(), count, sum },
                    )
                })
                .collect();
            let families = vec![(&C, series), (&H, hists)];
            prop_assert_eq!(ours(&families, &bounds), witness(&families, &bounds));
        }
    }
}
