//! `GET /metrics`: the Prometheus exposition of a fresh snapshot, the stall history, the
//! filesystem log discovery, the programs' own cost and the standard `process_*` metrics. The
//! text format by default; the delimited protobuf format, with native histograms, when the
//! `Accept` header prefers it ([`negotiate`]).

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::IntoResponse,
};

use super::params::NoParams;
use crate::{
    collect::snapshot::Snapshot,
    exposition::{self, proto, MetricWriter, ProtoWriter, TextWriter},
    state::AppState,
};

/// `Content-Type` of the text format.
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition formats `/metrics` can answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text format, version 0.0.4: [`TextWriter`].
    Text,
    /// Delimited protobuf `io.prometheus.client.MetricFamily` ([`proto::CONTENT_TYPE`]):
    /// [`ProtoWriter`].
    Protobuf,
}

/// The format an `Accept` header asks for: protobuf if its media range
/// `application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
/// encoding=delimited` has a higher q-value than the best range the text format matches
/// (`text/plain`, `text/*`, `*/*`), as Prometheus sends with native histograms on (2.42: no
/// q, i.e. 1, vs `text/plain;version=0.0.4;q=0.5`); text otherwise, also without an `Accept` header or for one that
/// lists only formats the daemon does not write (e.g. `application/openmetrics-text`).
pub fn negotiate(accept: Option<&str>) -> Format {
    let (mut proto_q, mut text_q) = (0.0f32, 0.0f32);
    for r in super::accept::parse(accept.unwrap_or("")) {
        let t = r.media_type;
        if t.eq_ignore_ascii_case("application/vnd.google.protobuf")
            && r.param("proto") == Some("io.prometheus.client.MetricFamily")
            && r.param("encoding") == Some("delimited")
        {
            proto_q = proto_q.max(r.q);
        } else if t.eq_ignore_ascii_case("text/plain")
            || t.eq_ignore_ascii_case("text/*")
            || t == "*/*"
        {
            text_q = text_q.max(r.q);
        }
    }
    if proto_q > 0.0 && proto_q > text_q {
        Format::Protobuf
    } else {
        Format::Text
    }
}

/// The handler: reads the maps off the async workers (map reads are syscalls) and writes every
/// family in the negotiated [`Format`]; 500 if that task fails.
pub async fn get_metrics(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    _: NoParams,
) -> impl IntoResponse {
    let format = negotiate(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()));
    let body = tokio::task::spawn_blocking(move || {
        let rt = st.runtime.read().expect("runtime lock").clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &rt.filter, &st.disks);
        let write = |w: &mut dyn MetricWriter| {
            {
                let history = st.history.lock().expect("history lock");
                exposition::render(
                    w,
                    &snap,
                    &history,
                    &rt.buckets,
                    &st.info,
                    &rt.filter,
                    &st.disks,
                );
            }
            exposition::fslog::render_metrics(w, &st.fslog.get());
            let (runs, timed) = st.program_runs();
            exposition::bpfcost::families(w, &runs, timed);
            exposition::selfmon::http_families(w, &st.http_rejected);
            w.foreign(st.process.families());
        };
        match format {
            Format::Text => {
                let mut w = TextWriter::new();
                write(&mut w);
                w.finish().into_bytes()
            }
            Format::Protobuf => {
                let mut w = ProtoWriter::new(rt.classic_in_protobuf);
                write(&mut w);
                w.finish()
            }
        }
    })
    .await;
    match body {
        Ok(body) => {
            let ct = match format {
                Format::Text => TEXT,
                Format::Protobuf => proto::CONTENT_TYPE,
            };
            ([(header::CONTENT_TYPE, ct)], body).into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("scrape failed: {e}\n"),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        use Format::*;
        // As Debian's Prometheus 2.42.0 sends it with --enable-feature=native-histograms.
        let prom_242 = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("text/plain;version=0.0.4"), Text),
            (Some("application/openmetrics-text;version=1.0.0"), Text),
            (Some(prom_242), Protobuf),
            // Without the feature flag, 2.42 sends no protobuf range: text.
            (Some("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"), Protobuf),
            // Text preferred, or equal: text.
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.3,text/plain;q=0.7"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,*/*;q=0.5"), Text),
            // Not the delimited MetricFamily stream, or refused: text.
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0"), Text),
            (Some("APPLICATION/VND.GOOGLE.PROTOBUF;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.9,text/plain;q=0.1"), Protobuf),
        ] {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
    }
}
