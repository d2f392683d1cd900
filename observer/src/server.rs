//! HTTP endpoints: `/metrics` (Prometheus text format), `/healthz`, `/devices`, and the API in
//! [`crate::api`].

use std::sync::{Arc, Mutex, RwLock};

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::IntoResponse,
    routing::get,
    Router,
};
use observer_common::maps::Settings;

use crate::{
    api,
    config::DeviceFilter,
    metrics::BucketMap,
    probes::{AttachInfo, Maps},
    reaper::Reaped,
    snapshot::Snapshot,
    stalls::History,
    windows::Windows,
};

/// Settings that a config reload may change.
#[derive(Clone)]
pub struct Runtime {
    /// Exported devices.
    pub filter: DeviceFilter,
    /// Exported buckets.
    pub buckets: BucketMap,
    /// Slow and stall thresholds (also in the kernel's SETTINGS map).
    pub settings: Settings,
}

/// What the handlers share.
pub struct AppState {
    /// The kernel maps.
    pub maps: Maps,
    /// Reloadable settings.
    pub runtime: RwLock<Runtime>,
    /// Attach details for build_info.
    pub info: AttachInfo,
    /// Requests retired by the reaper.
    pub reaped: Reaped,
    /// Slow requests and stall episodes from the kernel.
    pub history: Mutex<History>,
    /// Histogram snapshots for `/histograms?since=`.
    pub windows: Mutex<Windows>,
    /// Filesystem logs found (see [`crate::fslog`]).
    pub fslog: Arc<crate::fslog::FsLogState>,
}

/// The router.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/stalls", get(api::get_stalls))
        .route("/inflight", get(api::get_inflight))
        .route("/histograms", get(api::get_histograms))
        .route("/devices", get(crate::api_devices::devices))
        .route("/openapi.yaml", get(api::get_openapi))
        .fallback(|| async {
            (StatusCode::NOT_FOUND, axum::Json(serde_json::json!({
                "error": "not found: try /metrics, /stalls, /inflight, /histograms, /devices, /openapi.yaml",
            })))
        })
        .with_state(state)
}

async fn metrics(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    // Map reads are syscalls: keep them off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let rt = st.runtime.read().expect("runtime lock").clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &rt.filter);
        let history = st.history.lock().expect("history lock");
        crate::metrics::render(&snap, &history, &rt.buckets, &st.info, &rt.filter) + &crate::fslog::render_metrics(&st.fslog.get())
    })
    .await;
    match body {
        Ok(body) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("scrape failed: {e}\n")).into_response(),
    }
}
