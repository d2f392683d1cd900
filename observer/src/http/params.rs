//! Query parameters of the endpoints, parsed and checked in one place: `device`, `since`,
//! `min`, `limit`, `format`. Each endpoint accepts those of its entry in the one table
//! (`Endpoint::params`, [`super::endpoints::accepted`]); a parameter it does not accept, one
//! given twice, or a bad value gets 400 with `{"error": ..., "parameter": ...}`; a `device`
//! that is not a disk this daemon has seen gets 404 in the same form. Endpoints without
//! parameters (an empty `params`) take [`NoParams`].

use std::{borrow::Cow, collections::HashMap, time::Duration};

use axum::{
    extract::FromRequestParts,
    http::{header, request::Parts, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Serialize;

use crate::{disks::DiskView, time::Clock};

/// A 400 (or 404 for an unknown device) naming the parameter at fault.
#[derive(Debug, Serialize)]
pub struct ApiError {
    /// 400, or 404 for a device that is not a disk.
    #[serde(skip)]
    pub status: StatusCode,
    /// What is wrong and what is accepted.
    pub error: String,
    /// The query parameter at fault.
    pub parameter: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self)).into_response()
    }
}

/// A 400 for `parameter` with message `error`.
pub fn bad(parameter: &str, error: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::BAD_REQUEST,
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
    /// `id`: a slow request's id, `<run>-<seq>` (`/stalls`).
    pub id: Option<crate::collect::events::RequestId>,
}

/// The raw query string (`None`: no `?`) as name → value, percent-decoded, accepting only the
/// names in `allowed`, each at most once. The error names the first parameter at fault.
pub fn pairs(raw: Option<&str>, allowed: &[&str]) -> Result<HashMap<String, String>, ApiError> {
    let mut out: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
        if !allowed.contains(&k.as_ref()) {
            return Err(bad(
                &k,
                if allowed.is_empty() {
                    "unknown parameter: this endpoint takes none".to_string()
                } else {
                    format!("unknown parameter; accepted: {}", allowed.join(", "))
                },
            ));
        }
        if out.contains_key(k.as_ref()) {
            return Err(bad(&k, "given more than once: give each parameter once"));
        }
        out.insert(k.into_owned(), Cow::into_owned(v));
    }
    Ok(out)
}

/// Parses the raw query string, accepting only the parameters in `allowed`, each once; `since`
/// is converted with `clock`; `device` must be a disk in `disks` (else 404). The error names
/// the first bad parameter.
pub fn parse(
    raw: Option<&str>,
    allowed: &[&str],
    clock: &Clock,
    disks: &DiskView,
) -> Result<Params, ApiError> {
    let p = parse_values(&pairs(raw, allowed)?, clock)?;
    if let Some(d) = &p.device {
        disks.check(d).map_err(|e| ApiError {
            status: StatusCode::NOT_FOUND,
            error: e.to_string(),
            parameter: "device".into(),
        })?;
    }
    Ok(p)
}

/// Checks and converts the values of `q` (names already checked).
fn parse_values(q: &HashMap<String, String>, clock: &Clock) -> Result<Params, ApiError> {
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
    let id = q
        .get("id")
        .map(|v| {
            v.parse().map_err(|()| {
                bad(
                    "id",
                    format!("{v:?} is not a slow request's id like 1764865123-42 (the request_id of a /metrics exemplar, or a slow request's id in /stalls)"),
                )
            })
        })
        .transpose()?;
    let device = q.get("device").cloned();
    if let Some(d) = &device {
        if d.is_empty() || d.chars().count() > 64 || d.contains('/') || d == "." || d == ".." {
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
        id,
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

/// The extractor of endpoints that take no parameters: any query parameter gets 400 naming it.
pub struct NoParams;

impl<S: Send + Sync> FromRequestParts<S> for NoParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        pairs(parts.uri.query(), &[]).map(|_| NoParams)
    }
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

/// A report endpoint's answer: `report` as JSON when `json` ([`wants_json`]), else
/// `text(&report)` as `text/plain; charset=utf-8` (`/stalls`, `/merges`).
pub fn text_or_json<T: Serialize>(
    json: bool,
    report: T,
    text: impl FnOnce(&T) -> String,
) -> Response {
    if json {
        Json(report).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            text(&report),
        )
            .into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_repeated_parameters() {
        let ok = pairs(Some("device=vda&limit=5"), &["device", "limit"]).unwrap();
        assert_eq!(ok["device"], "vda");
        assert!(pairs(None, &[]).unwrap().is_empty());
        assert!(pairs(Some(""), &[]).unwrap().is_empty());
        assert_eq!(pairs(Some("a%20b=c%2Fd"), &["a b"]).unwrap()["a b"], "c/d");
        for (q, allowed, param) in [
            ("limit=5&limit=6", &["limit"][..], "limit"),
            ("limit=5&limit=5", &["limit"][..], "limit"),
            ("bogus=1", &[][..], "bogus"),
            ("device=vda&what", &["device"][..], "what"),
            ("lim%69t=1&limit=2", &["limit"][..], "limit"),
        ] {
            let e = pairs(Some(q), allowed).unwrap_err();
            assert_eq!(
                (e.status, e.parameter.as_str()),
                (StatusCode::BAD_REQUEST, param),
                "{q}"
            );
        }
    }

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
