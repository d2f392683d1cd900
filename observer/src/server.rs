//! HTTP endpoints: `GET /metrics` (Prometheus text format), `GET /healthz`, `GET /devices`.

use std::sync::Arc;

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Router,
};

use crate::{config::DeviceFilter, metrics::BucketMap, probes::{AttachInfo, Maps}, reaper::Reaped, snapshot::Snapshot};

/// What the handlers share.
pub struct AppState {
    /// The kernel maps.
    pub maps: Maps,
    /// Exported devices.
    pub filter: DeviceFilter,
    /// Exported buckets.
    pub buckets: BucketMap,
    /// Attach details for build_info.
    pub info: AttachInfo,
    /// Requests retired by the reaper.
    pub reaped: Reaped,
    /// Filesystem logs found (see [`crate::fslog`]).
    pub fslog: Arc<crate::fslog::FsLogState>,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/devices", get(crate::api_devices::devices))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: try /metrics or /healthz\n") })
        .with_state(state)
}

async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    // Map reads are syscalls: keep them off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let snap = Snapshot::read(&st.maps, &st.reaped, &st.filter);
        crate::metrics::render(&snap, &st.buckets, &st.info) + &crate::fslog::render_metrics(&st.fslog.get())
    })
    .await;
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("scrape failed: {e}\n")).into_response(),
    }
}
