//! The `Accept` request header (RFC 9110 §12.5.1): media ranges with their parameters and
//! quality values, for content negotiation (`GET /metrics`: text or protobuf).

/// One media range of an `Accept` header: `type/subtype`, its parameters (without `q`), and its
/// quality `q` (0 … 1, default 1).
#[derive(Clone, Debug, PartialEq)]
pub struct MediaRange<'a> {
    /// `type/subtype`, as sent (compare case-insensitively), e.g. `text/plain`, `*/*`.
    pub media_type: &'a str,
    /// Parameters other than `q`, names as sent, values unquoted, e.g. `("version", "0.0.4")`.
    pub params: Vec<(&'a str, &'a str)>,
    /// Quality value; an unparsable `q` counts as 0 (not acceptable).
    pub q: f32,
}

impl MediaRange<'_> {
    /// The parameter `name` (case-insensitive name), if present.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| *v)
    }
}

/// The media ranges of an `Accept` header value, in the order sent; empty elements are skipped.
pub fn parse(header: &str) -> Vec<MediaRange<'_>> {
    header
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media_type = parts.next().filter(|t| !t.is_empty())?;
            let mut q = 1.0f32;
            let mut params = Vec::new();
            for p in parts {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let (k, v) = (k.trim(), v.trim().trim_matches('"'));
                if k.eq_ignore_ascii_case("q") {
                    q = v
                        .parse::<f32>()
                        .ok()
                        .filter(|q| (0.0..=1.0).contains(q))
                        .unwrap_or(0.0);
                } else if !k.is_empty() {
                    params.push((k, v));
                }
            }
            Some(MediaRange {
                media_type,
                params,
                q,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_params_and_q() {
        let r = parse("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3, */* ; q=0.2,,bad;q=x");
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].media_type, "application/vnd.google.protobuf");
        assert_eq!(
            r[0].param("proto"),
            Some("io.prometheus.client.MetricFamily")
        );
        assert_eq!(r[0].param("Encoding"), Some("delimited"));
        assert_eq!(r[0].q, 0.7);
        assert_eq!(r[1].param("version"), Some("0.0.4"));
        assert_eq!((r[2].media_type, r[2].q), ("*/*", 0.2));
        assert_eq!(r[3].q, 0.0);
        assert_eq!(parse("text/plain")[0].q, 1.0);
        assert!(parse("").is_empty());
    }
}
