//! The HTTP surface as an exporter: the landing page, strict query parameters, and what hostile
//! or careless clients cannot do to it. Run as root (the daemon loads its programs):
//! `cargo test -p observer --test api -- --test-threads=1 --nocapture`.

mod support;

use std::time::Duration;

use support::*;

/// `href="..."` targets of an HTML page, in order.
fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split_once('"').map(|(h, _)| h.to_string()))
        .collect()
}

/// `GET /` is an HTML page whose links reach every endpoint (each answers 200).
#[test]
fn landing_page_links_every_endpoint() {
    if !require_root("landing_page_links_every_endpoint") {
        return;
    }
    let daemon = Daemon::start(&[]);
    let r = ureq::get(&format!("http://{}/", daemon.addr))
        .timeout(Duration::from_secs(10))
        .call()
        .expect("GET /");
    assert_eq!(r.status(), 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    let html = r.into_string().unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    let links = hrefs(&html);
    let want = [
        "metrics",
        "healthz",
        "stalls",
        "inflight",
        "histograms",
        "devices",
        "openapi.yaml",
    ];
    assert_eq!(links, want, "{html}");
    for l in &links {
        let (status, body) = daemon.get(&format!("/{l}")).unwrap();
        assert_eq!(status, 200, "/{l} linked from / answers {status}: {body}");
        assert!(!body.is_empty(), "/{l}");
    }
    // Still a 404 (JSON, naming the landing page) for what does not exist.
    let (status, body) = daemon.get("/index.html").unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("try /,"), "{body}");
}
