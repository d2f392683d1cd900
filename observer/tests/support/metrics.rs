//! The Prometheus exposition parsed into flat samples, and selections over them.

use std::collections::{BTreeMap, BTreeSet};

/// One sample: name, labels, value.
#[derive(Clone, Debug)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape, flattened to samples (histograms as _bucket/_sum/_count).
pub struct Metrics(pub Vec<Sample>);

/// Whether `name` (or the family it is a histogram series of) is one the daemon can export:
/// not ours (no `blkobs_` prefix), or a `"blkobs_..."` string literal in observer/src, read once.
pub fn declared(name: &str) -> bool {
    static NAMES: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let mut names = BTreeSet::new();
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d)
                .expect("reading observer/src")
                .flatten()
            {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    for part in text.split("\"blkobs_").skip(1) {
                        let n: String = part
                            .chars()
                            .take_while(|c| {
                                c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_'
                            })
                            .collect();
                        if part[n.len()..].starts_with('"') {
                            names.insert(format!("blkobs_{n}"));
                        }
                    }
                }
            }
        }
        assert!(!names.is_empty(), "no metric names found in observer/src");
        names
    });
    if !name.starts_with("blkobs_") || names.contains(name) {
        return true;
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .any(|s| name.strip_suffix(s).is_some_and(|f| names.contains(f)))
}

/// A latency class: the labels of a latency series other than `stage` (device, op, flags...).
pub type Class = Vec<(String, String)>;

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("parse exposition");
        let mut out = Vec::new();
        for s in scrape.samples {
            let labels: BTreeMap<String, String> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => out.push(Sample {
                    name: s.metric,
                    labels,
                    value: v,
                }),
                prometheus_parse::Value::Histogram(buckets) => {
                    for b in buckets {
                        let mut l = labels.clone();
                        l.insert(
                            "le".into(),
                            if b.less_than.is_infinite() {
                                "+Inf".into()
                            } else {
                                b.less_than.to_string()
                            },
                        );
                        out.push(Sample {
                            name: format!("{}_bucket", s.metric),
                            labels: l,
                            value: b.count,
                        });
                    }
                }
                prometheus_parse::Value::Summary(_) => {}
            }
        }
        Metrics(out)
    }

    /// Sum of samples named `name` whose labels include all of `want`.
    pub fn sum(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        self.select(name, want).map(|s| s.value).sum()
    }

    /// [`Metrics::sum`] here minus in `before`: what a test's own run added (a shared daemon
    /// counted earlier tests too).
    pub fn since(&self, before: &Metrics, name: &str, want: &[(&str, &str)]) -> f64 {
        self.sum(name, want) - before.sum(name, want)
    }

    /// The samples named `name` whose labels include all of `want`. Panics if `name` is one of
    /// ours (`blkobs_`) and no family of that name (or of which it is a `_bucket`, `_sum` or
    /// `_count` series) is declared in observer/src: an absent series then means a renamed
    /// metric, not a zero ([`declared`]).
    pub fn select<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        assert!(
            declared(name),
            "no metric family {name:?} is declared in observer/src (a `\"blkobs_...\"` string \
             there): renamed? A sum over it would be 0 whatever the daemon counts"
        );
        self.0.iter().filter(move |s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The latency classes of `device`: every label set of its latency sums, `stage` left out.
    pub fn latency_classes(&self, device: &str) -> BTreeSet<Class> {
        self.select("blkobs_request_latency_seconds_sum", &[("device", device)])
            .map(|s| {
                s.labels
                    .iter()
                    .filter(|(k, _)| *k != "stage")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .collect()
    }

    /// The latency sums of one class: (queue, device, total).
    pub fn stage_sums(&self, class: &Class) -> (f64, f64, f64) {
        let sum = |stage| self.class_stage(class, stage, "sum");
        (sum("queue"), sum("device"), sum("total"))
    }

    /// `blkobs_request_latency_seconds_<what>` (sum, count) of one class in stage `stage`.
    pub fn class_stage(&self, class: &Class, stage: &str, what: &str) -> f64 {
        let mut w = labels(class);
        w.push(("stage", stage));
        self.sum(&format!("blkobs_request_latency_seconds_{what}"), &w)
    }
}

/// A class as the label selector [`Metrics::sum`] takes.
pub fn labels(class: &Class) -> Vec<(&str, &str)> {
    class
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}
