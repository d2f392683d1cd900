//! The JSON/text API: `/stalls`, `/inflight`, `/histograms`, `/openapi.yaml`.
//! Bad parameters get 400 with `{"error": ..., "parameter": ...}`.

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    extract::{Query, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

use crate::{
    server::AppState,
    snapshot::Snapshot,
    stalls::{self, Clock, Filter},
};

/// The OpenAPI 3 document of the JSON endpoints (checked in as docs/openapi.yaml).
pub const OPENAPI: &str = include_str!("../../docs/openapi.yaml");

/// A 400 naming the bad parameter.
#[derive(Debug, Serialize)]
pub struct ApiError {
    /// What is wrong and what is accepted.
    pub error: String,
    /// The query parameter at fault.
    pub parameter: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, Json(self)).into_response()
    }
}

fn bad(parameter: &str, error: impl Into<String>) -> ApiError {
    ApiError { error: error.into(), parameter: parameter.into() }
}

/// Query parameters shared by the endpoints; each endpoint says which it accepts.
struct Params {
    device: Option<String>,
    since_ns: Option<u64>,
    min_ns: Option<u64>,
    limit: Option<usize>,
    json: Option<bool>,
}

fn parse(q: &HashMap<String, String>, allowed: &[&str], clock: &Clock) -> Result<Params, ApiError> {
    for k in q.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(k, format!("unknown parameter; accepted: {}", allowed.join(", "))));
        }
    }
    let since_ns = match q.get("since") {
        None => None,
        Some(v) => Some(if let Some(ns) = parse_duration_ns(v) {
            clock.mono_now.saturating_sub(ns)
        } else if let Some(t) = parse_unix_time(v) {
            clock.mono(t)
        } else {
            return Err(bad("since", format!("{v:?} is neither a duration (30s, 1.5m, 500ms) nor a Unix time in seconds (1764450000)")));
        }),
    };
    let min_ns = q
        .get("min")
        .map(|v| parse_duration_ns(v).ok_or_else(|| bad("min", format!("{v:?} is not a duration like 30s, 1.5m or 500ms"))))
        .transpose()?;
    let limit = q
        .get("limit")
        .map(|v| match v.parse::<usize>() {
            Ok(n) if (1..=100_000).contains(&n) => Ok(n),
            _ => Err(bad("limit", format!("{v:?} is not an integer in 1..=100000"))),
        })
        .transpose()?;
    let json = q
        .get("format")
        .map(|v| match v.as_str() {
            "json" => Ok(true),
            "text" => Ok(false),
            _ => Err(bad("format", format!("{v:?}: use json or text"))),
        })
        .transpose()?;
    let device = q.get("device").cloned();
    if let Some(d) = &device {
        if d.is_empty() || d.chars().count() > 64 || d.contains('/') {
            return Err(bad("device", "a kernel device name like vda, nvme0n1 or loop0"));
        }
    }
    Ok(Params { device, since_ns, min_ns, limit, json })
}

/// `<number><unit>`: digits with an optional fraction (up to 9 digits each), unit one of
/// ns, us, ms, s, m, h (the `DurationParam` pattern in docs/openapi.yaml). Saturates.
fn parse_duration_ns(v: &str) -> Option<u64> {
    let split = v.find(|c: char| !c.is_ascii_digit() && c != '.')?;
    let (num, unit) = v.split_at(split);
    let unit_ns: u128 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() || int.len() > 9 || frac.len() > 9 || (num.contains('.') && frac.is_empty()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let int: u128 = int.parse().ok()?;
    let frac_ns: u128 = if frac.is_empty() { 0 } else { frac.parse::<u128>().ok()? * unit_ns / 10u128.pow(frac.len() as u32) };
    Some((int * unit_ns + frac_ns).min(u64::MAX as u128) as u64)
}

/// A Unix time in seconds: 10 digits with an optional fraction (up to 9 digits).
fn parse_unix_time(v: &str) -> Option<std::time::SystemTime> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if int.len() != 10 || !int.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 9 || (v.contains('.') && frac.is_empty()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    let nanos: u64 = if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32) };
    Some(std::time::UNIX_EPOCH + Duration::new(secs, nanos as u32))
}

fn wants_json(p: &Params, headers: &HeaderMap) -> bool {
    p.json.unwrap_or_else(|| {
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("application/json"))
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("API worker panicked")
}

/// `GET /stalls`: stuck requests, stall episodes, slow requests. Text unless JSON is asked for.
pub async fn get_stalls(State(st): State<Arc<AppState>>, Query(q): Query<HashMap<String, String>>, headers: HeaderMap) -> Response {
    let clock = Clock::now();
    let p = match parse(&q, &["device", "since", "min", "limit", "format"], &clock) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let json = wants_json(&p, &headers);
    let report = blocking(move || {
        let f = Filter { device: p.device, since_ns: p.since_ns, min_ns: p.min_ns, limit: p.limit.unwrap_or(50) };
        let settings = st.runtime.read().expect("runtime lock").settings;
        let slow_total = std::array::from_fn(|op| settings.slow_ns[op][observer_common::Stage::Total as usize]);
        let history = st.history.lock().expect("history lock");
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        stalls::report(&st.maps, &history, &filter, &f, settings.stall_ns, &slow_total)
    })
    .await;
    if json {
        Json(report).into_response()
    } else {
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], stalls::render_text(&report)).into_response()
    }
}

/// `GET /inflight`: every request in flight, oldest first.
pub async fn get_inflight(State(st): State<Arc<AppState>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let clock = Clock::now();
    let p = match parse(&q, &["device", "min", "limit"], &clock) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let list = blocking(move || {
        let f = Filter { device: p.device, since_ns: None, min_ns: p.min_ns, limit: p.limit.unwrap_or(1000) };
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        stalls::inflight(&st.maps, &filter, &f, &clock, &mut stalls::CgroupNames::default())
    })
    .await;
    Json(serde_json::json!({ "now": clock.rfc3339(clock.mono_now), "requests": list })).into_response()
}

/// `GET /histograms`: per device/class/stage count, sum and percentiles over a window.
pub async fn get_histograms(State(st): State<Arc<AppState>>, Query(q): Query<HashMap<String, String>>) -> Response {
    let clock = Clock::now();
    let p = match parse(&q, &["device", "since"], &clock) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let out = blocking(move || {
        let filter = st.runtime.read().expect("runtime lock").filter.clone();
        let snap = Snapshot::read(&st.maps, &st.reaped, &filter);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("30s"), Some(30_000_000_000));
        assert_eq!(parse_duration_ns("1.5m"), Some(90_000_000_000));
        assert_eq!(parse_duration_ns("500ms"), Some(500_000_000));
        assert_eq!(parse_duration_ns("0.000000001s"), Some(1));
        assert_eq!(parse_duration_ns("999999999h"), Some(u64::MAX)); // saturates
        for bad in ["", "s", "5", "5 s", "-5s", "1.s", ".5s", "5sec", "1e3s", "5S", "1234567890s"] {
            assert_eq!(parse_duration_ns(bad), None, "{bad:?}");
        }
        assert!(parse_unix_time("1764450000").is_some());
        assert!(parse_unix_time("1764450000.25").is_some());
        for bad in ["176445000", "17644500000", "1764450000.", "abc", "2026-01-01T00:00:00Z"] {
            assert!(parse_unix_time(bad).is_none(), "{bad:?}");
        }
    }
}

/// `GET /openapi.yaml`.
pub async fn get_openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/yaml")], OPENAPI).into_response()
}
