//! [`MetricDesc`]: a metric's name, help, type and label names, declared once as a `const` next
//! to the code that fills it; and [`encode`], the text format of the families built from them.

use prometheus::{
    proto::{Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType},
    Encoder, TextEncoder,
};

/// What a metric is: everything but its values.
#[derive(Clone, Copy, Debug)]
pub struct MetricDesc {
    /// Metric name, e.g. `blkobs_requests_total`.
    pub name: &'static str,
    /// `# HELP` text.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricType,
    /// Label names, in the order they are exported; every series gives one value per name.
    pub labels: &'static [&'static str],
}

impl MetricDesc {
    /// The family of this metric with the given series (possibly empty: [`encode`] drops it).
    pub fn family(&self, metrics: Vec<Metric>) -> MetricFamily {
        let mut f = MetricFamily::default();
        f.set_name(self.name.to_string());
        f.set_help(self.help.to_string());
        f.set_field_type(self.kind);
        f.set_metric(metrics);
        f
    }

    /// A series with these label values (one per [`MetricDesc::labels`], same order) and no
    /// value yet.
    fn series(&self, values: &[&str]) -> Metric {
        debug_assert_eq!(
            values.len(),
            self.labels.len(),
            "label values of {}",
            self.name
        );
        let pairs = self
            .labels
            .iter()
            .zip(values)
            .map(|(k, v)| {
                let mut l = LabelPair::default();
                l.set_name(k.to_string());
                l.set_value(v.to_string());
                l
            })
            .collect();
        Metric::from_label(pairs)
    }

    /// A counter series with value `v`.
    pub fn counter(&self, values: &[&str], v: f64) -> Metric {
        let mut m = self.series(values);
        let mut c = Counter::default();
        c.set_value(v);
        m.set_counter(c);
        m
    }

    /// A gauge series with value `v`.
    pub fn gauge(&self, values: &[&str], v: f64) -> Metric {
        let mut m = self.series(values);
        let mut g = Gauge::default();
        g.set_value(v);
        m.set_gauge(g);
        m
    }

    /// A histogram series.
    pub fn histogram(&self, values: &[&str], h: Histogram) -> Metric {
        let mut m = self.series(values);
        m.set_histogram(h);
        m
    }
}

/// The Prometheus text exposition format (version 0.0.4) of `families`, in the order given;
/// families without series are left out.
pub fn encode(mut families: Vec<MetricFamily>) -> String {
    families.retain(|f| !f.get_metric().is_empty());
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&families, &mut out)
        .expect("text encoding to a Vec cannot fail");
    String::from_utf8(out).expect("exposition is UTF-8")
}
