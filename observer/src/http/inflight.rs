//! `GET /inflight`: every request in flight, oldest first (parameters `device`, `min`, `limit`;
//! at most 1000 by default).

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    response::{IntoResponse, Response},
    Json,
};

use super::{blocking, endpoints::accepted, params::parse};
use crate::{
    labels::CgroupNames,
    stalls::{self, Filter},
    state::AppState,
    time::Clock,
};

/// The handler: 400 on a bad parameter, else `{"now": ..., "requests": [...]}`.
pub async fn get_inflight(State(st): State<Arc<AppState>>, RawQuery(q): RawQuery) -> Response {
    let clock = Clock::now();
    let p = match parse(q.as_deref(), accepted("/inflight"), &clock, &st.disks) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let list = blocking(move || {
        let f = Filter {
            device: p.device,
            since_ns: None,
            min_ns: p.min_ns,
            limit: p.limit.unwrap_or(1000),
            id: None,
        };
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        stalls::inflight(
            &st.maps,
            &st.disks,
            &filter,
            &f,
            &clock,
            &mut CgroupNames::default(),
            st.request_probe.as_deref(),
        )
    })
    .await;
    Json(serde_json::json!({ "now": clock.rfc3339(clock.mono_now), "requests": list }))
        .into_response()
}
