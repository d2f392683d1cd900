//! `GET /histograms`: per device/class/stage count, sum and percentiles over a window
//! (parameters `device`, `since`; without `since`, since the daemon started).

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::{IntoResponse, Response},
    Json,
};

use super::{blocking, endpoints::accepted, params::parse};
use crate::{collect::snapshot::Snapshot, state::AppState, time::Clock};

/// The handler: 400 on a bad parameter, else `{"now", "window_start", "histograms": [...]}`.
pub async fn get_histograms(State(st): State<Arc<AppState>>, RawQuery(q): RawQuery) -> Response {
    let clock = Clock::now();
    let p = match parse(q.as_deref(), accepted("/histograms"), &clock, &st.disks) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let out = blocking(move || {
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &filter, &st.disks);
        let windows = st.windows.lock().expect("windows lock");
        let (start, list) = windows.summarize(&snap, p.since_ns, p.device.as_deref());
        serde_json::json!({
            "now": clock.rfc3339(clock.mono_now),
            "window_start": start.map(|t| clock.rfc3339(t)),
            "histograms": list,
        })
    })
    .await;
    Json(out).into_response()
}
