//! [`MetricDesc`]: a metric's name, help, type and label names, declared once as a `const` next
//! to the code that fills it (through [`super::MetricWriter`]); and [`encode`], the text format of
//! families built by the `prometheus` crate itself (its process collector).

use prometheus::{
    proto::{MetricFamily, MetricType},
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
    /// Label names, in the order they are exported; every series gives one value per name
    /// ([`super::text::Family`]).
    pub labels: &'static [&'static str],
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
