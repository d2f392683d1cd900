//! The one table of endpoints: the router, the 404 text, the landing page, the handlers'
//! parameter checks ([`accepted`]) and the tests (OpenAPI document, API tests) all read
//! [`ENDPOINTS`].

use std::sync::Arc;

use axum::routing::{get, MethodRouter};

use super::{
    counters, devices, histograms, inflight, landing, merges, metrics, openapi, params, stalls,
};
use crate::state::AppState;

/// One endpoint (every one answers `GET` only).
pub struct Endpoint {
    /// Its path from the root, `/metrics`.
    pub path: &'static str,
    /// What it serves, one line (HTML: the landing page shows it).
    pub about: &'static str,
    /// Whether it reads the kernel maps: such endpoints are served at most `[http]
    /// max_requests` at once (503 beyond: [`super::server::limit_requests`]).
    pub reads_maps: bool,
    /// Whether docs/openapi.yaml describes it (the JSON API).
    pub in_openapi: bool,
    /// The query parameters it accepts ([`super::params`]), in the order its 400 lists them;
    /// any other gets 400.
    pub params: &'static [&'static str],
    /// Its handler.
    pub handler: fn() -> MethodRouter<Arc<AppState>>,
}

/// Every endpoint, in the order the landing page lists them (`/` itself first, not listed).
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        path: "/",
        about: "this page",
        reads_maps: false,
        in_openapi: false,
        params: &[],
        handler: || get(landing::get_landing),
    },
    Endpoint {
        path: "/metrics",
        about: "Prometheus metrics (text exposition format; OpenMetrics 1.0 with exemplars, or protobuf with native histograms and exemplars, if Accept asks for it)",
        reads_maps: true,
        in_openapi: false,
        params: &[],
        handler: || get(metrics::get_metrics),
    },
    Endpoint {
        path: "/healthz",
        about: "liveness: <code>ok</code> while the daemon serves",
        reads_maps: false,
        in_openapi: false,
        params: &[],
        handler: || get(|_: params::NoParams| async { "ok\n" }),
    },
    Endpoint {
        path: "/stalls",
        about: "slow requests, requests stuck right now, stall episodes (text; <code>?format=json</code>)",
        reads_maps: true,
        in_openapi: true,
        params: &["device", "since", "min", "limit", "format", "id"],
        handler: || get(stalls::get_stalls),
    },
    Endpoint {
        path: "/merges",
        about: "requests per device and class at dispatch, recent missed adjacent merges (text; <code>?format=json</code>)",
        reads_maps: true,
        in_openapi: true,
        params: &["device", "since", "limit", "format"],
        handler: || get(merges::get_merges),
    },
    Endpoint {
        path: "/inflight",
        about: "every request in flight now, oldest first (JSON)",
        reads_maps: true,
        in_openapi: true,
        params: &["device", "min", "limit"],
        handler: || get(inflight::get_inflight),
    },
    Endpoint {
        path: "/histograms",
        about: "latency summaries per device, class and stage (JSON)",
        reads_maps: true,
        in_openapi: true,
        params: &["device", "since"],
        handler: || get(histograms::get_histograms),
    },
    Endpoint {
        path: "/counters",
        about: "completed requests and bytes per device and class since start, requests in flight now and the oldest one's age (JSON)",
        reads_maps: true,
        in_openapi: true,
        params: &["device"],
        handler: || get(counters::get_counters),
    },
    Endpoint {
        path: "/devices",
        about: "disks, their stacks, filesystems and filesystem log ranges (JSON)",
        reads_maps: true,
        in_openapi: true,
        params: &[],
        handler: || get(devices::get_devices),
    },
    Endpoint {
        path: "/openapi.yaml",
        about: "the OpenAPI 3 document of the JSON endpoints",
        reads_maps: false,
        in_openapi: false,
        params: &[],
        handler: || get(openapi::get_openapi),
    },
];

/// The query parameters endpoint `path` accepts ([`Endpoint::params`]). Panics for a path
/// not in [`ENDPOINTS`] (a handler naming itself wrongly: the API tests fail).
pub fn accepted(path: &str) -> &'static [&'static str] {
    ENDPOINTS
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("{path} is not in ENDPOINTS"))
        .params
}

/// The 404 body's advice: "try /, /metrics, ...".
pub fn not_found_text() -> String {
    let paths: Vec<&str> = ENDPOINTS.iter().map(|e| e.path).collect();
    format!("not found: try {}", paths.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openapi_describes_exactly_the_json_endpoints() {
        // docs/openapi.yaml: `paths:` entries are the lines "  /name:".
        let documented: Vec<&str> = openapi::OPENAPI
            .lines()
            .filter_map(|l| l.strip_prefix("  /"))
            .filter_map(|l| l.strip_suffix(':'))
            .collect();
        let json: Vec<&str> = ENDPOINTS
            .iter()
            .filter(|e| e.in_openapi)
            .map(|e| &e.path[1..])
            .collect();
        assert_eq!(documented, json);
    }

    #[test]
    fn paths_are_unique_and_rooted() {
        let mut p: Vec<&str> = ENDPOINTS.iter().map(|e| e.path).collect();
        assert!(p.iter().all(|p| p.starts_with('/')));
        p.sort_unstable();
        p.dedup();
        assert_eq!(p.len(), ENDPOINTS.len());
        assert_eq!(ENDPOINTS[0].path, "/");
    }

    #[test]
    fn accepted_parameters() {
        assert_eq!(accepted("/inflight"), ["device", "min", "limit"]);
        assert!(accepted("/devices").is_empty());
        let known = ["device", "since", "min", "limit", "format", "id"];
        for e in ENDPOINTS {
            assert!(e.params.iter().all(|p| known.contains(p)), "{}", e.path);
        }
    }

    #[test]
    fn not_found_names_every_endpoint() {
        let t = not_found_text();
        for e in ENDPOINTS {
            assert!(
                t.contains(&format!(" {},", e.path)) || t.ends_with(e.path),
                "{t}"
            );
        }
    }
}
