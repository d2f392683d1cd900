//! Query parameters of the API endpoints, parsed and checked in one place: `device`, `since`,
//! `min`, `limit`, `format`. Each endpoint names the ones it accepts; anything else, or a bad
//! value, gets 400 with `{"error": ..., "parameter": ...}`.

use std::{collections::HashMap, time::Duration};

use axum::{
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

use crate::time::Clock;

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

/// A 400 for `parameter` with message `error`.
pub fn bad(parameter: &str, error: impl Into<String>) -> ApiError {
    ApiError {
        error: error.into(),
        parameter: parameter.into(),
    }
}

/// Query parameters shared by the endpoints, parsed; each endpoint says which it accepts.
pub struct Params {
    /// `device`: a kernel device name (1..=64 characters, no `/`).
    pub device: Option<String>,
    /// `since`: a duration back from now or a Unix time, as monotonic ns.
    pub since_ns: Option<u64>,
    /// `min`: a duration (ns).
    pub min_ns: Option<u64>,
    /// `limit`: 1..=100000.
    pub limit: Option<usize>,
    /// `format`: `json` (true) or `text` (false).
    pub json: Option<bool>,
}

/// Parses query `q`, accepting only the parameters in `allowed`; `since` is converted with
/// `clock`. The error names the first bad parameter.
pub fn parse(
    q: &HashMap<String, String>,
    allowed: &[&str],
    clock: &Clock,
) -> Result<Params, ApiError> {
    for k in q.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(bad(
                k,
                format!("unknown parameter; accepted: {}", allowed.join(", ")),
            ));
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
        .map(|v| {
            parse_duration_ns(v).ok_or_else(|| {
                bad(
                    "min",
                    format!("{v:?} is not a duration like 30s, 1.5m or 500ms"),
                )
            })
        })
        .transpose()?;
    let limit = q
        .get("limit")
        .map(|v| match v.parse::<usize>() {
            Ok(n) if (1..=100_000).contains(&n) => Ok(n),
            _ => Err(bad(
                "limit",
                format!("{v:?} is not an integer in 1..=100000"),
            )),
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
            return Err(bad(
                "device",
                "a kernel device name like vda, nvme0n1 or loop0",
            ));
        }
    }
    Ok(Params {
        device,
        since_ns,
        min_ns,
        limit,
        json,
    })
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
    if int.is_empty()
        || int.len() > 9
        || frac.len() > 9
        || (num.contains('.') && frac.is_empty())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let int: u128 = int.parse().ok()?;
    let frac_ns: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u128>().ok()? * unit_ns / 10u128.pow(frac.len() as u32)
    };
    Some((int * unit_ns + frac_ns).min(u64::MAX as u128) as u64)
}

/// A Unix time in seconds: 10 digits with an optional fraction (up to 9 digits).
fn parse_unix_time(v: &str) -> Option<std::time::SystemTime> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if int.len() != 10
        || !int.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
        || (v.contains('.') && frac.is_empty())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: u64 = int.parse().ok()?;
    let nanos: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    Some(std::time::UNIX_EPOCH + Duration::new(secs, nanos as u32))
}

/// Whether to answer in JSON: `format=` if given, else the `Accept` header.
pub fn wants_json(p: &Params, headers: &HeaderMap) -> bool {
    p.json.unwrap_or_else(|| {
        headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("application/json"))
    })
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
        for bad in [
            "",
            "s",
            "5",
            "5 s",
            "-5s",
            "1.s",
            ".5s",
            "5sec",
            "1e3s",
            "5S",
            "1234567890s",
        ] {
            assert_eq!(parse_duration_ns(bad), None, "{bad:?}");
        }
        assert!(parse_unix_time("1764450000").is_some());
        assert!(parse_unix_time("1764450000.25").is_some());
        for bad in [
            "176445000",
            "17644500000",
            "1764450000.",
            "abc",
            "2026-01-01T00:00:00Z",
        ] {
            assert!(parse_unix_time(bad).is_none(), "{bad:?}");
        }
    }
}
