//! `GET /`: a small HTML page linking every endpoint, as node_exporter's landing page does, so a
//! browser pointed at the daemon finds its way instead of a 404.

use axum::{
    http::header,
    response::{IntoResponse, Response},
};

use super::params::NoParams;

/// The endpoints the page lists: (path relative to the page, what it is).
pub const ENDPOINTS: &[(&str, &str)] = &[
    ("metrics", "Prometheus metrics (text exposition format)"),
    (
        "healthz",
        "liveness: <code>ok</code> while the daemon serves",
    ),
    (
        "stalls",
        "slow requests, requests stuck right now, stall episodes (text; <code>?format=json</code>)",
    ),
    (
        "merges",
        "requests per device and class at dispatch, recent missed adjacent merges (text; <code>?format=json</code>)",
    ),
    (
        "inflight",
        "every request in flight now, oldest first (JSON)",
    ),
    (
        "histograms",
        "latency summaries per device, class and stage (JSON)",
    ),
    (
        "devices",
        "disks, their filesystems and filesystem log ranges (JSON)",
    ),
    (
        "openapi.yaml",
        "the OpenAPI 3 document of the JSON endpoints",
    ),
];

/// The page. Links are relative (`metrics`, not `/metrics`), so they also work behind a reverse
/// proxy that serves the daemon under a path prefix.
pub fn page() -> String {
    let items: String = ENDPOINTS
        .iter()
        .map(|(path, what)| format!("<li><a href=\"{path}\">/{path}</a> — {what}</li>\n"))
        .collect();
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>blkobs observer</title></head>\n\
         <body>\n<h1>blkobs observer</h1>\n<p>Live block I/O latency observer, version {}.</p>\n<ul>\n{items}</ul>\n</body>\n</html>\n",
        env!("CARGO_PKG_VERSION")
    )
}

/// The handler: the page as `text/html`.
pub async fn get_landing(_: NoParams) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page()).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn page_links_every_endpoint() {
        let p = super::page();
        for path in [
            "metrics",
            "healthz",
            "stalls",
            "merges",
            "inflight",
            "histograms",
            "devices",
            "openapi.yaml",
        ] {
            assert!(p.contains(&format!("<a href=\"{path}\">")), "{path}: {p}");
        }
    }
}
