//! `GET /metrics`: the Prometheus text format of a fresh snapshot, the stall history, the
//! filesystem log discovery, the programs' own cost and the standard `process_*` metrics; or
//! OpenMetrics 1.0 text, with exemplars, when the scraper's `Accept` prefers it
//! ([`negotiate`]).

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::IntoResponse,
};

use super::params::NoParams;
use crate::{
    collect::snapshot::Snapshot,
    exposition::{self, Format, TextWriter},
    state::AppState,
};

/// The handler: reads the maps off the async workers (map reads are syscalls); 500 if that
/// task fails.
pub async fn get_metrics(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    _: NoParams,
) -> impl IntoResponse {
    let format = negotiate(
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok()),
    );
    let body = tokio::task::spawn_blocking(move || {
        let rt = st.runtime.read().expect("runtime lock").clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &rt.filter, &st.disks);
        let mut w = TextWriter::with_format(format);
        {
            let history = st.history.lock().expect("history lock");
            exposition::render(
                &mut w,
                &snap,
                &history,
                &rt.buckets,
                &st.info,
                &rt.filter,
                &st.disks,
            );
        }
        exposition::fslog::render_metrics(&mut w, &st.fslog.get());
        let (runs, timed) = st.program_runs();
        exposition::bpfcost::families(&mut w, &runs, timed);
        exposition::selfmon::http_families(&mut w, &st.http_rejected);
        w.push_families(st.process.families());
        w.finish()
    })
    .await;
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, format.content_type())], body).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("scrape failed: {e}\n"),
        )
            .into_response(),
    }
}

/// The format to answer an `Accept` header with (its values, in order): the media range with
/// the highest `q` (default 1; the first of equal ones) among those served:
/// `application/openmetrics-text` with `version` 1.0.0, 0.0.1 or none → OpenMetrics 1.0;
/// `text/plain` with `version` 0.0.4 or none, `text/*` and `*/*` → the text format. Ranges with
/// `q=0`, other versions and other types are passed over; without any served one (or without
/// the header) the text format, as every Prometheus exporter answers (no 406).
///
/// Prometheus 2.42 sends `application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`
/// (scrape/scrape.go `scrapeAcceptHeader`): OpenMetrics.
pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
    let mut best: Option<(f32, Format)> = None;
    for range in accept.into_iter().flat_map(|v| v.split(',')) {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let (mut q, mut version) = (1.0f32, None);
        for p in parts {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"');
            match k.trim().to_ascii_lowercase().as_str() {
                "q" => q = v.parse().unwrap_or(0.0),
                "version" => version = Some(v.to_string()),
                _ => {}
            }
        }
        let format = match (media.as_str(), version.as_deref()) {
            ("application/openmetrics-text", None | Some("1.0.0" | "0.0.1")) => Format::OpenMetrics,
            ("text/plain", None | Some("0.0.4")) | ("text/*" | "*/*", None) => Format::Text,
            _ => continue,
        };
        if q > 0.0 && best.is_none_or(|(b, _)| q > b) {
            best = Some((q, format));
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        let prometheus_2_42 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate([prometheus_2_42]), Format::OpenMetrics);
        for (accept, want) in [
            ("", Format::Text),
            ("*/*", Format::Text),
            ("text/plain", Format::Text),
            ("text/plain;version=0.0.4", Format::Text),
            ("application/openmetrics-text", Format::OpenMetrics),
            ("application/openmetrics-text; version=0.0.1", Format::OpenMetrics),
            ("Application/OpenMetrics-Text; Version=\"1.0.0\"", Format::OpenMetrics),
            // A version we do not write: passed over.
            ("application/openmetrics-text;version=2.0.0", Format::Text),
            // The higher q wins, whatever the order.
            ("text/plain;q=0.5,application/openmetrics-text;q=0.9", Format::OpenMetrics),
            ("application/openmetrics-text;q=0.3,text/plain;version=0.0.4;q=0.5", Format::Text),
            ("application/openmetrics-text;q=0", Format::Text),
            // Protobuf (not served here) is passed over.
            ("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8", Format::OpenMetrics),
            ("application/json", Format::Text),
        ] {
            assert_eq!(negotiate([accept]), want, "{accept:?}");
        }
        assert_eq!(
            negotiate(["text/plain;q=0.2", "application/openmetrics-text"]),
            Format::OpenMetrics,
            "several Accept headers"
        );
    }
}
