//! `GET /metrics`: the Prometheus text format of a fresh snapshot, the stall history, the
//! filesystem log discovery, the programs' own cost and the standard `process_*` metrics.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
};

use super::params::NoParams;
use crate::{
    collect::snapshot::Snapshot,
    exposition::{self, TextWriter},
    state::AppState,
};

/// The handler: reads the maps off the async workers (map reads are syscalls); 500 if that
/// task fails.
pub async fn get_metrics(State(st): State<Arc<AppState>>, _: NoParams) -> impl IntoResponse {
    let body = tokio::task::spawn_blocking(move || {
        let rt = st.runtime.read().expect("runtime lock").clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &rt.filter, &st.disks);
        let mut w = TextWriter::new();
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
        w.push_str(&exposition::encode(st.process.families()));
        w.finish()
    })
    .await;
    match body {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("scrape failed: {e}\n"),
        )
            .into_response(),
    }
}
