//! `GET /stalls`: stuck requests, stall episodes, slow requests (parameters `device`, `since`,
//! `min`, `limit`, `format`), or one slow request by its id (`id`: 404 if the history no longer
//! keeps it). Text unless JSON is asked for (`format=json` or `Accept`).

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use observer_common::Stage;

use super::{
    blocking,
    endpoints::accepted,
    params::{parse, text_or_json, wants_json, ApiError},
};
use crate::{
    stalls::{self, Filter, ReportInput},
    state::AppState,
    time::Clock,
};

/// The handler: 400 on a bad parameter, else the report (50 per list by default).
pub async fn get_stalls(
    State(st): State<Arc<AppState>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let clock = Clock::now();
    let p = match parse(q.as_deref(), accepted("/stalls"), &clock, &st.disks) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let json = wants_json(&p, &headers);
    let id = p.id;
    let report = blocking(move || {
        let query = Filter {
            device: p.device,
            since_ns: p.since_ns,
            min_ns: p.min_ns,
            limit: p.limit.unwrap_or(50),
            id: p.id,
        };
        let settings = st.runtime.read().expect("runtime lock").settings;
        let slow_total_ns = std::array::from_fn(|op| settings.slow_ns[op][Stage::Total as usize]);
        let history = st.history.lock().expect("history lock");
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        stalls::report(&ReportInput {
            maps: &st.maps,
            history: &history,
            filter: &filter,
            disks: &st.disks,
            query: &query,
            stall_ns: settings.stall_ns,
            slow_total_ns,
            probe: st.request_probe.as_deref(),
        })
    })
    .await;
    if let (Some(id), true) = (id, report.slow.is_empty()) {
        return ApiError {
            status: StatusCode::NOT_FOUND,
            error: format!("slow request {id} is not kept: ids of another daemon run, or older than the latest [stalls] history_requests slow requests, are gone (or device= or since= exclude it)"),
            parameter: "id".into(),
        }
        .into_response();
    }
    text_or_json(json, report, stalls::render_text)
}
