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

    pub fn select<'a>(
        &'a self,
        name: &'a str,
        want: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
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
