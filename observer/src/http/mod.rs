//! The HTTP layer: the router over the one endpoint table ([`endpoints`]) and one file per
//! endpoint, with their query parameters parsed in [`params`]: `/` (an HTML page linking the
//! others), `/metrics` (Prometheus text format, or protobuf with native histograms when the
//! scraper asks for it), `/healthz`, `/stalls`, `/merges`, `/inflight`, `/histograms`,
//! `/counters`, `/devices`, `/openapi.yaml`. Only [`crate::daemon`] uses this
//! module.

pub mod accept;
pub mod auth;
pub mod counters;
pub mod devices;
pub mod endpoints;
pub mod histograms;
pub mod inflight;
pub mod landing;
pub mod merges;
pub mod metrics;
pub mod openapi;
pub mod params;
pub mod server;
pub mod stalls;

use std::sync::Arc;

use axum::{http::StatusCode, Router};

use crate::{config::HttpLimits, state::AppState};
pub use endpoints::{Endpoint, ENDPOINTS};

/// Every route of [`ENDPOINTS`], with `state` shared by the handlers; unknown paths get 404
/// with a JSON error listing the endpoints. Every endpoint rejects query parameters it does not take, and repeated
/// ones, with 400 ([`params`]). The endpoints that read the kernel maps (`/metrics` and the
/// JSON API) are served at most `limits.max_requests` at once (503 beyond), and every request
/// target is limited to `limits.max_uri_bytes` (414), see [`server`]. While the web
/// configuration file has `basic_auth_users`, every path (`/healthz` too, as exporter-toolkit
/// does) needs their credentials (401), see [`auth`].
pub fn router(state: Arc<AppState>, limits: &HttpLimits) -> Router {
    let (mut readers, mut others) = (Router::new(), Router::new());
    for e in ENDPOINTS {
        if e.reads_maps {
            readers = readers.route(e.path, (e.handler)());
        } else {
            others = others.route(e.path, (e.handler)());
        }
    }
    let readers = server::limit_requests(readers, limits, state.http_rejected.clone());
    let router = others
        .merge(readers)
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                axum::Json(serde_json::json!({ "error": endpoints::not_found_text() })),
            )
        })
        .with_state(state.clone());
    let router = server::limit_uri(router, limits, state.http_rejected.clone());
    auth::protect(router, state.web.clone(), state.http_rejected.clone())
}

/// Runs `f` on the blocking pool (map reads are syscalls) and waits for it.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("API worker panicked")
}
