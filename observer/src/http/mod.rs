//! The HTTP layer: the router and one file per endpoint, with their query parameters parsed in
//! [`params`]. `/` (an HTML page linking the others), `/metrics` (Prometheus text format),
//! `/healthz`, `/stalls`, `/inflight`, `/histograms`, `/devices`, `/openapi.yaml`. Only [`crate::daemon`] uses this module.

pub mod devices;
pub mod histograms;
pub mod inflight;
pub mod landing;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod stalls;

use std::sync::Arc;

use axum::{http::StatusCode, routing::get, Router};

use crate::state::AppState;

/// Every route, with `state` shared by the handlers; unknown paths get 404 with a JSON error
/// listing the endpoints. Every endpoint rejects query parameters it does not take, and repeated
/// ones, with 400 ([`params`]).
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(landing::get_landing))
        .route("/metrics", get(metrics::get_metrics))
        .route("/healthz", get(|_: params::NoParams| async { "ok\n" }))
        .route("/stalls", get(stalls::get_stalls))
        .route("/inflight", get(inflight::get_inflight))
        .route("/histograms", get(histograms::get_histograms))
        .route("/devices", get(devices::get_devices))
        .route("/openapi.yaml", get(openapi::get_openapi))
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({
                    "error": "not found: try /, /metrics, /healthz, /stalls, /inflight, /histograms, /devices, /openapi.yaml",
                })),
            )
        })
        .with_state(state)
}

/// Runs `f` on the blocking pool (map reads are syscalls) and waits for it.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("API worker panicked")
}
