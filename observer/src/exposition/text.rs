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
//!
//! The same writer, made with [`TextWriter::openmetrics`], writes the OpenMetrics 1.0 text
//! format instead ([`Format::OpenMetrics`]; spec:
//! <https://github.com/prometheus/OpenMetrics/blob/v1.0.0/specification/OpenMetrics.md>), for
//! the same family functions: a counter family is named without its `_total` in `# TYPE` and
//! `# HELP` (its samples keep it), `# UNIT seconds` / `# UNIT bytes` follows `# TYPE` for a family
//! whose name ends in `_seconds` / `_bytes` (the Prometheus naming conventions put the unit
//! there), `"` is escaped in help text too, +Inf, -Inf and NaN are written as the spec spells
//! them, histogram buckets carry the series' [`Exemplar`]s ([`HistogramSeries::exemplars`]), and
//! [`TextWriter::finish`] ends the exposition with `# EOF`.

use std::fmt::Write as _;

use prometheus::proto::{MetricFamily, MetricType};

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

/// Which text format a [`TextWriter`] writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text exposition format, version 0.0.4 (`text/plain; version=0.0.4`): the
    /// default.
    #[default]
    Text,
    /// OpenMetrics 1.0 text (`application/openmetrics-text; version=1.0.0`), with exemplars.
    OpenMetrics,
}

impl Format {
    /// The `Content-Type` of an exposition in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// An exemplar of one histogram bucket: one request that was counted in that bucket. In
/// OpenMetrics 1.0 `# {request_id="..."} value timestamp` after the bucket's sample; in the
/// protobuf format the classic `Bucket`'s `exemplar` ([`super::proto`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Exemplar {
    /// The exemplar's one label, `request_id`: the id `/stalls?id=` resolves. The spec limits
    /// an exemplar's label set to 128 UTF-8 characters (names and values together); the ids
    /// (`<digits>-<digits>`) stay far below, and the writers drop an exemplar that would not
    /// ([`Exemplar::fits`]).
    pub request_id: String,
    /// The request's latency in this histogram's stage (seconds).
    pub value: f64,
    /// When the request completed (Unix time, seconds; written with millisecond precision).
    pub timestamp: f64,
}

impl Exemplar {
    /// Its label set is within [`EXEMPLAR_MAX_LABEL_CHARS`].
    pub fn fits(&self) -> bool {
        "request_id".len() + self.request_id.chars().count() <= EXEMPLAR_MAX_LABEL_CHARS
    }
}

/// OpenMetrics 1.0: "The combined length of the label names and values of an Exemplar's
/// LabelSet MUST NOT exceed 128 UTF-8 characters."
pub const EXEMPLAR_MAX_LABEL_CHARS: usize = 128;

/// Appends families in the text format (or OpenMetrics, [`Format`]) to one `String`.
#[derive(Debug, Default)]
pub struct TextWriter {
    out: String,
    /// Scratch: the current series' `{label="value",...` (no closing brace).
    labels: String,
    format: Format,
}

impl TextWriter {
    /// An empty exposition in the text format (0.0.4).
    pub fn new() -> TextWriter {
        TextWriter::default()
    }

    /// An empty exposition in the OpenMetrics 1.0 text format.
    pub fn openmetrics() -> TextWriter {
        TextWriter::with_format(Format::OpenMetrics)
    }

    /// An empty exposition in `format`.
    pub fn with_format(format: Format) -> TextWriter {
        TextWriter::with_buffer(format, String::new())
    }

    /// An empty exposition in `format`, written into `buf` (cleared, its capacity kept:
    /// [`super::ScrapeBuffer`]).
    pub fn with_buffer(format: Format, mut buf: String) -> TextWriter {
        buf.clear();
        TextWriter {
            out: buf,
            format,
            ..TextWriter::default()
        }
    }

    /// The format being written.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Appends text written elsewhere, as it is (it must be in this writer's format).
    pub fn push_str(&mut self, text: &str) {
        self.out.push_str(text);
    }

    /// The exposition (in OpenMetrics ended by `# EOF`).
    pub fn finish(mut self) -> String {
        if self.format == Format::OpenMetrics {
            self.out.push_str("# EOF\n");
        }
        self.out
    }
}

impl MetricWriter for TextWriter {
    fn header(&mut self, d: &MetricDesc) {
        header(&mut self.out, self.format, d.name, d.help, d.kind);
    }

    fn sample(&mut self, desc: &MetricDesc, values: &[&str], v: f64) {
        self.set_labels(desc, values);
        line(
            &mut self.out,
            self.format,
            desc.name,
            "",
            &self.labels,
            None,
            v,
        );
    }

    /// The classic buckets (`h.native` is for the protobuf format only); in OpenMetrics with
    /// `h.exemplars` on their buckets (the text format 0.0.4 has no exemplars).
    fn histogram(&mut self, desc: &MetricDesc, values: &[&str], h: &HistogramSeries) {
        debug_assert_eq!(h.bounds.len(), h.cumulative.len(), "{}", desc.name);
        self.set_labels(desc, values);
        let TextWriter {
            out,
            labels,
            format,
        } = self;
        let format = *format;
        let name = desc.name;
        let sep = if labels.is_empty() { "{" } else { "," };
        let mut ex = h
            .exemplars
            .iter()
            .filter(|_| format == Format::OpenMetrics)
            .peekable();
        let mut exemplar_of = |i: usize| ex.next_if(|(j, _)| *j == i).map(|(_, e)| e);
        for (i, (le, c)) in h.bounds.les.iter().zip(h.cumulative).enumerate() {
            line(
                out,
                format,
                name,
                "_bucket",
                labels,
                Some((sep, le)),
                *c as f64,
            );
            exemplar_into(out, exemplar_of(i));
        }
        if !h.bounds.has_inf {
            line(
                out,
                format,
                name,
                "_bucket",
                labels,
                Some((sep, "+Inf")),
                h.count as f64,
            );
            exemplar_into(out, exemplar_of(h.bounds.len()));
        }
        line(out, format, name, "_sum", labels, None, h.sum);
        line(out, format, name, "_count", labels, None, h.count as f64);
    }

    /// Only an OpenMetrics exposition writes exemplars.
    fn wants_exemplars(&self) -> bool {
        self.format == Format::OpenMetrics
    }

    /// In the text format as the crate's `TextEncoder` writes them ([`super::encode`]); in
    /// OpenMetrics their counters and gauges (the only kinds it builds for us) through the same
    /// header and sample rules as the other families; families without series are left out.
    fn foreign(&mut self, families: Vec<MetricFamily>) {
        if self.format == Format::Text {
            self.out.push_str(&super::encode(families));
            return;
        }
        for f in families.iter().filter(|f| !f.get_metric().is_empty()) {
            let kind = f.get_field_type();
            if !matches!(kind, MetricType::COUNTER | MetricType::GAUGE) {
                continue;
            }
            header(&mut self.out, self.format, f.name(), f.help(), kind);
            for m in f.get_metric() {
                self.labels.clear();
                for (i, l) in m.get_label().iter().enumerate() {
                    self.labels.push_str(if i == 0 { "{" } else { "," });
                    self.labels.push_str(l.name());
                    self.labels.push_str("=\"");
                    escape_into(&mut self.labels, l.value(), true);
                    self.labels.push('"');
                }
                let v = if kind == MetricType::COUNTER {
                    m.get_counter().get_value()
                } else {
                    m.get_gauge().get_value()
                };
                line(
                    &mut self.out,
                    self.format,
                    f.name(),
                    "",
                    &self.labels,
                    None,
                    v,
                );
            }
        }
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

/// The OpenMetrics unit of a family name: the Prometheus naming conventions end a name in its
/// base unit, and the spec wants the family name to end in `_<unit>` when `# UNIT` is given.
fn unit_of(family: &str) -> Option<&'static str> {
    ["seconds", "bytes"].into_iter().find(|u| {
        family.len() > u.len() + 1
            && family.ends_with(u)
            && family[..family.len() - u.len()].ends_with('_')
    })
}

/// A family's `# HELP` (if any help), `# TYPE` and, in OpenMetrics, `# UNIT` lines. In
/// OpenMetrics a counter family is named without `_total`.
fn header(out: &mut String, format: Format, name: &str, help: &str, kind: MetricType) {
    let om = format == Format::OpenMetrics;
    let family = if om && kind == MetricType::COUNTER {
        name.strip_suffix("_total").unwrap_or(name)
    } else {
        name
    };
    if !help.is_empty() {
        out.push_str("# HELP ");
        out.push_str(family);
        out.push(' ');
        escape_into(out, help, om);
        out.push('\n');
    }
    out.push_str("# TYPE ");
    out.push_str(family);
    out.push(' ');
    out.push_str(match kind {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED if om => "unknown",
        MetricType::UNTYPED => "untyped",
    });
    out.push('\n');
    if let Some(unit) = unit_of(family).filter(|_| om) {
        out.push_str("# UNIT ");
        out.push_str(family);
        out.push(' ');
        out.push_str(unit);
        out.push('\n');
    }
}

/// One sample line: `name` + `suffix`, the series' `labels` (open, or empty), an extra
/// `le="..."` label after `sep`, the value; in OpenMetrics the line is left open for an
/// exemplar ([`exemplar_into`] ends it) only after a bucket: every other line ends here.
fn line(
    out: &mut String,
    format: Format,
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
    write_value(out, format, v);
    if le.is_none() {
        out.push('\n');
    }
}

/// Ends a bucket's line: ` # {request_id="..."} <value> <timestamp>` (OpenMetrics) if there is
/// an exemplar whose label set fits the spec's limit, then the newline.
fn exemplar_into(out: &mut String, e: Option<&Exemplar>) {
    if let Some(e) = e.filter(|e| e.fits()) {
        out.push_str(" # {request_id=\"");
        escape_into(out, &e.request_id, true);
        out.push_str("\"} ");
        write_value(out, Format::OpenMetrics, e.value);
        let _ = write!(out, " {:.3}", e.timestamp);
    }
    out.push('\n');
}

/// `v` as `f64`'s `Display` writes it; integers up to 2^53 (counts) without the float
/// formatter, which writes the same digits for them. In OpenMetrics, infinities and NaN as the
/// spec spells them (`+Inf`, `-Inf`, `NaN`; `Display` writes `inf`).
fn write_value(out: &mut String, format: Format, v: f64) {
    const EXACT: f64 = (1u64 << 53) as f64;
    if v.fract() == 0.0 && (0.0..=EXACT).contains(&v) && v.is_sign_positive() {
        let _ = write!(out, "{}", v as u64);
    } else if format == Format::OpenMetrics && !v.is_finite() {
        out.push_str(if v.is_nan() {
            "NaN"
        } else if v > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        });
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

    /// OpenMetrics: the counter family without `_total` (samples with it), help with `"`
    /// escaped, `# UNIT` for a name ending in its unit, infinities spelled `+Inf`/`-Inf`,
    /// exemplars on the buckets given (not on the text format's), `# EOF` last.
    #[test]
    fn openmetrics_mode() {
        let ex = Exemplar {
            request_id: "1764865123-42".into(),
            value: 0.0008,
            timestamp: 1764865123.4567,
        };
        let too_long = Exemplar {
            request_id: "x".repeat(EXEMPLAR_MAX_LABEL_CHARS),
            ..ex.clone()
        };
        let b = Bounds::new(&[0.001, 1.0]);
        let write = |format| {
            let mut w = TextWriter::with_format(format);
            let dw: &mut dyn MetricWriter = &mut w;
            let mut f = dw.family(&C);
            f.counter(&["a", "b"], f64::INFINITY);
            f.counter(&["a", "c"], f64::NEG_INFINITY);
            let mut f = dw.family(&H);
            f.native_histogram(
                &["d", "s"],
                &HistogramSeries {
                    bounds: &b,
                    cumulative: &[1, 2],
                    count: 3,
                    sum: 0.5,
                    native: None,
                    exemplars: &[(0, ex.clone()), (2, too_long.clone())],
                },
            );
            w.finish()
        };
        let want = r#"# HELP t_requests Help with a \\ backslash, a \"quote\"\nand a newline.
# TYPE t_requests counter
t_requests_total{device="a",op="b"} +Inf
t_requests_total{device="a",op="c"} -Inf
# HELP t_latency_seconds A histogram.
# TYPE t_latency_seconds histogram
# UNIT t_latency_seconds seconds
t_latency_seconds_bucket{device="d",stage="s",le="0.001"} 1 # {request_id="1764865123-42"} 0.0008 1764865123.457
t_latency_seconds_bucket{device="d",stage="s",le="1"} 2
t_latency_seconds_bucket{device="d",stage="s",le="+Inf"} 3
t_latency_seconds_sum{device="d",stage="s"} 0.5
t_latency_seconds_count{device="d",stage="s"} 3
# EOF
"#;
        assert_eq!(write(Format::OpenMetrics), want);
        let text = write(Format::Text);
        assert!(
            !text.contains('#') || !text.contains("request_id"),
            "{text}"
        );
        assert!(text.contains("# TYPE t_requests_total counter\n") && !text.contains("EOF"));
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
