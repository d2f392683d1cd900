//! `GET /metrics`: the Prometheus exposition of a fresh snapshot, the stall history, the
//! filesystem log discovery, the programs' own cost and the standard `process_*` metrics. The
//! text format (0.0.4) by default; OpenMetrics 1.0 text with exemplars, or the delimited
//! protobuf format with native histograms (and exemplars on classic buckets), when the
//! `Accept` header prefers it ([`negotiate`]). Every format is written by the same family
//! functions into a [`MetricWriter`].

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, HeaderMap, StatusCode},
    response::IntoResponse,
};

use bytes::Bytes;

use super::params::NoParams;
use crate::{
    collect::snapshot::Snapshot,
    exposition::{self, proto, text, MetricWriter, ProtoWriter, ScrapeBuffer, TextWriter},
    state::AppState,
};

/// The exposition formats `/metrics` can answer in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text format, version 0.0.4: [`TextWriter`] (the default).
    Text,
    /// OpenMetrics 1.0 text, with exemplars: [`TextWriter`] in [`text::Format::OpenMetrics`].
    OpenMetrics,
    /// Delimited protobuf `io.prometheus.client.MetricFamily` ([`proto::CONTENT_TYPE`]):
    /// [`ProtoWriter`].
    Protobuf,
}

impl Format {
    /// The `Content-Type` of an exposition in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => text::Format::Text.content_type(),
            Format::OpenMetrics => text::Format::OpenMetrics.content_type(),
            Format::Protobuf => proto::CONTENT_TYPE,
        }
    }
}

/// The format of one media range of `Accept`, if `/metrics` writes it:
/// `application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
/// encoding=delimited` → protobuf; `application/openmetrics-text` with `version` 1.0.0, 0.0.1
/// or none → OpenMetrics 1.0; `text/plain` with `version` 0.0.4 or none, `text/*` and `*/*` →
/// the text format.
fn format_of(r: &super::accept::MediaRange) -> Option<Format> {
    let t = r.media_type;
    if t.eq_ignore_ascii_case("application/vnd.google.protobuf") {
        (r.param("proto") == Some("io.prometheus.client.MetricFamily")
            && r.param("encoding") == Some("delimited"))
        .then_some(Format::Protobuf)
    } else if t.eq_ignore_ascii_case("application/openmetrics-text") {
        matches!(r.param("version"), None | Some("1.0.0" | "0.0.1")).then_some(Format::OpenMetrics)
    } else if t.eq_ignore_ascii_case("text/plain") {
        matches!(r.param("version"), None | Some("0.0.4")).then_some(Format::Text)
    } else if t.eq_ignore_ascii_case("text/*") || t == "*/*" {
        Some(Format::Text)
    } else {
        None
    }
}

/// The format to answer `Accept` headers with (their values, in order; none: the text format):
/// the served media range ([`format_of`]) with the highest q-value (default 1; parsed by
/// [`super::accept`]); at equal q the text format, else the first listed. Ranges with `q=0`,
/// other versions and other types are passed over; without any served one the text format, as
/// every Prometheus exporter answers (no 406).
///
/// Prometheus 2.42 sends `application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1`
/// (scrape/scrape.go `scrapeAcceptHeader`): OpenMetrics; with `--enable-feature=native-histograms`
/// it puts the protobuf range first, without q: protobuf.
pub fn negotiate<'a>(accept: impl IntoIterator<Item = &'a str>) -> Format {
    let mut best: Option<(f32, Format)> = None;
    for value in accept {
        for r in super::accept::parse(value) {
            let Some(format) = format_of(&r) else {
                continue;
            };
            let better = match best {
                None => true,
                Some((q, _)) => r.q > q || (r.q == q && format == Format::Text),
            };
            if r.q > 0.0 && better {
                best = Some((r.q, format));
            }
        }
    }
    best.map_or(Format::Text, |(_, f)| f)
}

/// A sent `/metrics` body's buffer: given back to the [`ScrapeBuffer`] when the body is dropped.
struct SentBody {
    buf: Vec<u8>,
    back: Arc<ScrapeBuffer>,
}

impl AsRef<[u8]> for SentBody {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for SentBody {
    fn drop(&mut self) {
        self.back.put(std::mem::take(&mut self.buf));
    }
}

/// The handler: reads the maps off the async workers (map reads are syscalls) and writes every
/// family in the negotiated [`Format`], into the last scrape's buffer ([`ScrapeBuffer`]); 500
/// if that task fails.
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
    let back = st.scrape_buffer.clone();
    let body = tokio::task::spawn_blocking(move || {
        let buf = st.scrape_buffer.take();
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
            exposition::selfmon::reaper_families(
                w,
                st.reaper_passes.load(std::sync::atomic::Ordering::Acquire),
            );
            exposition::selfmon::http_families(w, &st.http_rejected);
            w.foreign(st.process.families());
        };
        match format {
            Format::Text | Format::OpenMetrics => {
                let text_format = if format == Format::Text {
                    text::Format::Text
                } else {
                    text::Format::OpenMetrics
                };
                let mut w = TextWriter::with_buffer(text_format, buf);
                write(&mut w);
                w.finish().into_bytes()
            }
            Format::Protobuf => {
                let mut w = ProtoWriter::with_buffer(rt.classic_in_protobuf, buf.into_bytes());
                write(&mut w);
                w.finish()
            }
        }
    })
    .await;
    match body {
        Ok(buf) => (
            [(header::CONTENT_TYPE, format.content_type())],
            Bytes::from_owner(SentBody { buf, back }),
        )
            .into_response(),
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
        let prom_242_native = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        // And without it (scrape/scrape.go `scrapeAcceptHeader`).
        let prom_242 = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (None, Text),
            (Some(""), Text),
            (Some("*/*"), Text),
            (Some("text/plain"), Text),
            (Some("text/plain;version=0.0.4"), Text),
            (Some(prom_242_native), Protobuf),
            (Some(prom_242), OpenMetrics),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("application/openmetrics-text;version=1.0.0"), OpenMetrics),
            (Some("application/openmetrics-text; version=0.0.1"), OpenMetrics),
            (Some("Application/OpenMetrics-Text; Version=\"1.0.0\""), OpenMetrics),
            // A version we do not write: passed over.
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (Some("text/plain;version=1.0.0"), Text),
            // The higher q wins, whatever the order.
            (Some("text/plain;q=0.5,application/openmetrics-text;q=0.9"), OpenMetrics),
            (Some("application/openmetrics-text;q=0.3,text/plain;version=0.0.4;q=0.5"), Text),
            (Some("application/openmetrics-text;q=0.9,application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.95"), Protobuf),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text;q=0.8"), OpenMetrics),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"), Protobuf),
            // Text preferred, or equal: text.
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.3,text/plain;q=0.7"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,*/*;q=0.5"), Text),
            (Some("application/openmetrics-text;q=0.5,text/plain;q=0.5"), Text),
            // Equal q between the other two: the first listed.
            (Some("application/openmetrics-text,application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"), OpenMetrics),
            // Not the delimited MetricFamily stream, or refused: passed over.
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=text"), Text),
            (Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (Some("APPLICATION/VND.GOOGLE.PROTOBUF;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.9,text/plain;q=0.1"), Protobuf),
            (Some("application/json"), Text),
        ] {
            assert_eq!(negotiate(accept), want, "{accept:?}");
        }
        assert_eq!(
            negotiate(["text/plain;q=0.2", "application/openmetrics-text"]),
            OpenMetrics,
            "several Accept headers"
        );
    }
}
