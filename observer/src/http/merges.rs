//! `GET /merges`: the merge report ([`crate::merge_report`]) per device and class, and the recent
//! missed adjacent merges (parameters `device`, `since`, `limit`, `format`). Text unless JSON is
//! asked for (`format=json` or `Accept`), as `/stalls`.

use std::sync::Arc;

use axum::{
    extract::{RawQuery, State},
    http::HeaderMap,
    response::{IntoResponse, Response},
};

use super::{
    blocking,
    endpoints::accepted,
    params::{parse, text_or_json, wants_json},
};
use crate::{
    collect::snapshot::Snapshot,
    merge_report::{self, MergeFilter},
    state::AppState,
    time::Clock,
};

/// The handler: 400 on a bad parameter (404 for an unknown device), else the report (50 pairs
/// by default).
pub async fn get_merges(
    State(st): State<Arc<AppState>>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let clock = Clock::now();
    let p = match parse(q.as_deref(), accepted("/merges"), &clock, &st.disks) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let json = wants_json(&p, &headers);
    let report = blocking(move || {
        let (filter, window_ns) = {
            let rt = st.runtime.read().expect("runtime lock");
            (rt.filter.clone(), rt.settings.merge_window_ns)
        };
        let snap = Snapshot::read(&st.maps, &st.reaped, &filter, &st.disks);
        let (pairs, recorded) = merge_report::read_pairs(&st.maps);
        let query = MergeFilter {
            device: p.device,
            since_ns: p.since_ns,
            limit: p.limit.unwrap_or(50),
        };
        merge_report::report(
            &snap,
            (&pairs, recorded),
            &filter,
            &st.disks,
            &query,
            window_ns,
            &clock,
        )
    })
    .await;
    text_or_json(json, report, merge_report::render_text)
}
