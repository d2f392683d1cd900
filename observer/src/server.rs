//! HTTP endpoints: `GET /metrics` (Prometheus text format) and `GET /healthz`.

use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Router,
};

use crate::{config::DeviceFilter, metrics::BucketMap, probes::{AttachInfo, Maps}, snapshot::Snapshot};

/// What the handlers share.
pub struct AppState {
    /// The kernel maps.
    pub maps: Maps,
    /// Exported devices (swapped on SIGHUP reload, see `service`).
    pub filter: ArcSwap<DeviceFilter>,
    /// Exported buckets (swapped on SIGHUP reload, see `service`).
    pub buckets: ArcSwap<BucketMap>,
    /// Attach details for build_info.
    pub info: AttachInfo,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found: try /metrics or /healthz\n") })
        .with_state(state)
}

async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    // Map reads are syscalls: keep them off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let (filter, buckets) = (st.filter.load_full(), st.buckets.load_full());
        let snap = Snapshot::read(&st.maps, &filter);
        crate::metrics::render(&snap, &buckets, &st.info)
    })
    .await;
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("scrape failed: {e}\n")).into_response(),
    }
}
