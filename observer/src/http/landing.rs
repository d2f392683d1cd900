//! `GET /`: a small HTML page linking every endpoint, as node_exporter's landing page does, so a
//! browser pointed at the daemon finds its way instead of a 404.

use axum::{
    http::header,
    response::{IntoResponse, Response},
};

use super::{endpoints::ENDPOINTS, params::NoParams};

/// The page. Links are relative (`metrics`, not `/metrics`), so they also work behind a reverse
/// proxy that serves the daemon under a path prefix.
pub fn page() -> String {
    let items: String = ENDPOINTS[1..]
        .iter()
        .map(|e| {
            let rel = &e.path[1..];
            format!("<li><a href=\"{rel}\">/{rel}</a> — {}</li>\n", e.about)
        })
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
    fn page_links_every_endpoint_but_itself() {
        let p = super::page();
        for e in &super::ENDPOINTS[1..] {
            assert!(
                p.contains(&format!("<a href=\"{}\">", &e.path[1..])),
                "{}: {p}",
                e.path
            );
        }
        assert_eq!(
            p.matches("<a href=").count(),
            super::ENDPOINTS.len() - 1,
            "{p}"
        );
    }
}
