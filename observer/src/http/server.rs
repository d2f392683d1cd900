//! Serving the router to clients that may be hostile or careless (`[http]`,
//! [`HttpLimits`]): hyper's HTTP/1 connections with a header read timeout, a cap on open
//! connections (a semaphore taken at accept), a cap on requests served at once (tower's
//! load-shed over a global concurrency limit: 503) and on the request target's length (414).
//! Slow, idle or numerous clients cannot keep Prometheus from scraping: `tests/api.rs`.
//!
//! With `tls_server_config` in the web configuration file ([`crate::config::web`]) every
//! accepted connection is a TLS connection (rustls): the handshake runs in the connection's own
//! task, after the connection cap, and must finish within `header_read_timeout`. A plain HTTP
//! request on the TLS port gets a 400 saying to use `https://`. Both are counted
//! (`tls_handshake`): `tests/webconfig.rs`.

use std::{
    future::Future,
    io,
    sync::{atomic::Ordering, Arc, Mutex},
    time::{Duration, Instant},
};

use axum::{
    error_handling::HandleErrorLayer,
    extract::Request,
    http::{header, StatusCode},
    middleware::Next,
    response::IntoResponse,
    BoxError, Json, Router,
};
use hyper_util::{
    rt::{TokioIo, TokioTimer},
    server::graceful::GracefulShutdown,
    service::TowerToHyperService,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};
use tokio_rustls::{server::TlsStream, TlsAcceptor};
use tower::{limit::GlobalConcurrencyLimitLayer, ServiceBuilder};
use tracing::{debug, error, info, warn};

use crate::{
    config::{HttpLimits, LiveWebConfig},
    exposition::selfmon::HttpRejections,
};

/// Request heads (request line and headers) larger than this get 431 from hyper.
pub const MAX_HEAD_BYTES: usize = 32 * 1024;

/// How long a stop waits for open connections to finish their requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Wraps `routes` so that at most `limits.max_requests` of their requests are served at once;
/// the excess is answered at once with 503 (not queued) and counted.
pub fn limit_requests<S: Clone + Send + Sync + 'static>(
    routes: Router<S>,
    limits: &HttpLimits,
    rejected: Arc<HttpRejections>,
) -> Router<S> {
    let max = limits.max_requests;
    routes.route_layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(move |_: BoxError| {
                let rejected = rejected.clone();
                async move {
                    rejected.max_requests.fetch_add(1, Ordering::Relaxed);
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        [(header::RETRY_AFTER, "1")],
                        Json(serde_json::json!({
                            "error": format!("{max} requests are being served (http.max_requests): retry later"),
                        })),
                    )
                }
            }))
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::new(max)),
    )
}

/// Wraps `router` so that a request target (path and query) longer than
/// `limits.max_uri_bytes` is answered with 414 and counted.
pub fn limit_uri(router: Router, limits: &HttpLimits, rejected: Arc<HttpRejections>) -> Router {
    let max = limits.max_uri_bytes;
    router.layer(axum::middleware::from_fn(move |req: Request, next: Next| {
        let rejected = rejected.clone();
        async move {
            let len = req.uri().path_and_query().map_or(0, |pq| pq.as_str().len());
            if len > max {
                rejected.uri_too_long.fetch_add(1, Ordering::Relaxed);
                return (
                    StatusCode::URI_TOO_LONG,
                    Json(serde_json::json!({
                        "error": format!("the request target is {len} bytes, more than http.max_uri_bytes ({max})"),
                    })),
                )
                    .into_response();
            }
            next.run(req).await
        }
    }))
}

/// Lets a warning through at most every 10 s.
#[derive(Default)]
struct RateLimited {
    last: Mutex<Option<Instant>>,
}

impl RateLimited {
    fn due(&self) -> bool {
        let mut last = self.last.lock().expect("warning lock");
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(10));
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}

/// Why a TLS connection was not served.
#[derive(Debug, thiserror::Error)]
enum HandshakeError {
    #[error("no TLS handshake within {0:?} (http.header_read_timeout)")]
    Timeout(Duration),
    #[error("a plain HTTP request on the TLS port (answered 400): scrape with https://")]
    PlainHttp,
    #[error("not TLS (first byte {0:#04x})")]
    NotTls(u8),
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// The body of the 400 a plain HTTP request on the TLS port gets (as Go's servers answer it).
const PLAIN_HTTP_BODY: &str =
    "This server speaks HTTPS only (tls_server_config in the web config file): use https:// instead.\n";

/// The TLS handshake on `stream` within `timeout`; `None` if the client closed without sending
/// anything (a TCP probe: not an error). A connection whose first byte is not a TLS handshake
/// record is closed; if it looks like an HTTP request, after a 400 saying to use `https://`.
async fn handshake(
    acceptor: TlsAcceptor,
    stream: TcpStream,
    timeout: Duration,
) -> Result<Option<TlsStream<TcpStream>>, HandshakeError> {
    let work = async move {
        let mut first = [0u8; 1];
        if stream.peek(&mut first).await? == 0 {
            return Ok(None);
        }
        // 0x16: a TLS handshake record (the ClientHello).
        if first[0] != 0x16 {
            if first[0].is_ascii_uppercase() {
                reject_plain_http(stream).await;
                return Err(HandshakeError::PlainHttp);
            }
            return Err(HandshakeError::NotTls(first[0]));
        }
        Ok(Some(acceptor.accept(stream).await?))
    };
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or(Err(HandshakeError::Timeout(timeout)))
}

/// Reads the plain HTTP request head (briefly, so that closing does not reset the connection
/// before the client reads the answer), answers 400 with [`PLAIN_HTTP_BODY`] and closes.
async fn reject_plain_http(mut stream: TcpStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let _ = tokio::time::timeout(Duration::from_millis(500), async {
        while head.len() < MAX_HEAD_BYTES && !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let response = format!(
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{PLAIN_HTTP_BODY}",
        PLAIN_HTTP_BODY.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves `router` on `listener` with `limits` until `shutdown` resolves, then stops accepting
/// and waits up to [`DRAIN_TIMEOUT`] for open connections to finish. Connections beyond
/// `limits.max_connections` are closed as soon as accepted and counted in `rejected`. Each
/// connection is TLS if the web configuration in effect when it is accepted (`web`) has TLS.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: &HttpLimits,
    rejected: Arc<HttpRejections>,
    web: Arc<LiveWebConfig>,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES);
    let graceful = GracefulShutdown::new();
    let refused_warning = RateLimited::default();
    let tls_warning = Arc::new(RateLimited::default());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // E.g. EMFILE: wait instead of spinning.
                    error!(error = %e, "accepting an HTTP connection failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            let total = rejected.max_connections.fetch_add(1, Ordering::Relaxed) + 1;
            if refused_warning.due() {
                warn!(
                    max_connections = limits.max_connections,
                    refused_total = total,
                    "HTTP connection refused: max_connections are open (slow or idle clients?); raise http.max_connections if they are legitimate"
                );
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        let tls = web.get().and_then(|w| w.tls.clone()).map(TlsAcceptor::from);
        let Some(acceptor) = tls else {
            let conn = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    debug!(%peer, error = %e, "HTTP connection ended");
                }
                drop(permit);
            });
            continue;
        };
        let (http, rejected, tls_warning) = (http.clone(), rejected.clone(), tls_warning.clone());
        let timeout = limits.header_read_timeout;
        tokio::spawn(async move {
            match handshake(acceptor, stream, timeout).await {
                Ok(None) => debug!(%peer, "closed before a TLS handshake"),
                Ok(Some(tls)) => {
                    let conn = watcher.watch(http.serve_connection(TokioIo::new(tls), service));
                    if let Err(e) = conn.await {
                        debug!(%peer, error = %e, "HTTPS connection ended");
                    }
                }
                Err(e) => {
                    let total = rejected.tls_handshake.fetch_add(1, Ordering::Relaxed) + 1;
                    if tls_warning.due() {
                        warn!(%peer, error = %e, refused_total = total, "TLS handshake failed, connection closed (at most one such warning every 10 s): clients must use https://, trust the server's certificate and, if client_auth_type requires one, present a certificate signed by client_ca_file");
                    } else {
                        debug!(%peer, error = %e, "TLS handshake failed");
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    info!("HTTP listener closed; waiting for open connections");
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        warn!("HTTP connections still open after {DRAIN_TIMEOUT:?}: closing them");
    }
}

#[cfg(test)]
mod tests {
    use std::{
        io::{Read, Write},
        net::TcpStream,
    };

    use std::sync::atomic::AtomicUsize;

    use axum::routing::get;
    use tokio::sync::Notify;

    use super::*;

    /// What the test server's `/held` does: counts its requests in `entered`, then waits for
    /// `release`.
    #[derive(Clone, Default)]
    struct Held {
        entered: Arc<AtomicUsize>,
        release: Arc<Notify>,
    }

    /// A server on a free loopback port with `limits` and a `/held` route; returns its address.
    fn start(limits: HttpLimits, held: Held, rejected: Arc<HttpRejections>) -> String {
        start_with(limits, held, rejected, Arc::default())
    }

    /// As [`start`], with the web configuration `web` (TLS).
    fn start_with(
        limits: HttpLimits,
        held: Held,
        rejected: Arc<HttpRejections>,
        web: Arc<LiveWebConfig>,
    ) -> String {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = std_listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    std_listener.set_nonblocking(true).unwrap();
                    let listener = TcpListener::from_std(std_listener).unwrap();
                    let limited = limit_requests(
                        Router::new().route(
                            "/held",
                            get(move || async move {
                                held.entered.fetch_add(1, Ordering::SeqCst);
                                held.release.notified().await;
                                "released"
                            }),
                        ),
                        &limits,
                        rejected.clone(),
                    );
                    let router = limit_uri(
                        Router::new()
                            .route("/free", get(|| async { "free" }))
                            .merge(limited),
                        &limits,
                        rejected.clone(),
                    );
                    serve(
                        listener,
                        router,
                        &limits,
                        rejected,
                        web,
                        std::future::pending(),
                    )
                    .await;
                });
        });
        addr
    }

    fn get_status(addr: &str, path: &str) -> u16 {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {out:?}"))
    }

    /// Whether the server closes `s` (EOF or reset) within `within`.
    fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        s.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => true,
            Ok(_) => true, // an error response, then the close
            Err(e) => e.kind() == io::ErrorKind::ConnectionReset,
        }
    }

    #[test]
    fn requests_beyond_max_requests_get_503_at_once() {
        let held = Held::default();
        let rejected = Arc::new(HttpRejections::default());
        let limits = HttpLimits {
            max_requests: 1,
            ..HttpLimits::default()
        };
        let addr = start(limits, held.clone(), rejected.clone());
        let entered = |n: usize| {
            let t = Instant::now();
            while held.entered.load(Ordering::SeqCst) < n {
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "request {n} never served"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let first = {
            let addr = addr.clone();
            std::thread::spawn(move || get_status(&addr, "/held"))
        };
        entered(1);
        // The only permit is taken: refused at once, not queued.
        let t = Instant::now();
        assert_eq!(get_status(&addr, "/held"), 503);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert_eq!(rejected.max_requests.load(Ordering::Relaxed), 1);
        assert_eq!(
            get_status(&addr, "/free"),
            200,
            "unlimited routes still served"
        );
        held.release.notify_one();
        assert_eq!(first.join().unwrap(), 200);
        // The permit is free again (it went with the response).
        let again = {
            let addr = addr.clone();
            std::thread::spawn(move || get_status(&addr, "/held"))
        };
        entered(2);
        held.release.notify_one();
        assert_eq!(again.join().unwrap(), 200);
        assert_eq!(rejected.max_requests.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn connections_beyond_max_connections_are_closed() {
        let rejected = Arc::new(HttpRejections::default());
        let limits = HttpLimits {
            max_connections: 3,
            max_requests: 3,
            header_read_timeout: Duration::from_secs(30),
            ..HttpLimits::default()
        };
        let addr = start(limits, Held::default(), rejected.clone());
        let idle: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(200));
        let mut extra = TcpStream::connect(&addr).unwrap();
        assert!(
            closed_within(&mut extra, Duration::from_secs(5)),
            "4th connection kept"
        );
        assert_eq!(rejected.max_connections.load(Ordering::Relaxed), 1);
        drop(idle);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            get_status(&addr, "/free"),
            200,
            "served again once they closed"
        );
    }

    #[test]
    fn header_read_timeout_closes_idle_and_slow_connections() {
        let rejected = Arc::new(HttpRejections::default());
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(500),
            ..HttpLimits::default()
        };
        let addr = start(limits, Held::default(), rejected);
        let t = Instant::now();
        let mut idle = TcpStream::connect(&addr).unwrap();
        let mut slow = TcpStream::connect(&addr).unwrap();
        slow.write_all(b"GET /free HTTP/1.1\r\nHo").unwrap();
        assert!(closed_within(&mut idle, Duration::from_secs(5)));
        assert!(closed_within(&mut slow, Duration::from_secs(5)));
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(450) && e < Duration::from_secs(3),
            "{e:?}"
        );
    }

    #[test]
    fn long_request_targets_get_414() {
        let rejected = Arc::new(HttpRejections::default());
        let limits = HttpLimits {
            max_uri_bytes: 100,
            ..HttpLimits::default()
        };
        let addr = start(limits, Held::default(), rejected.clone());
        assert_eq!(get_status(&addr, &format!("/free?{}", "a".repeat(95))), 414);
        assert_eq!(get_status(&addr, &format!("/free?{}", "a".repeat(94))), 200);
        assert_eq!(rejected.uri_too_long.load(Ordering::Relaxed), 1);
        // A head beyond MAX_HEAD_BYTES (a large header): hyper answers 431.
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let big = "a".repeat(2 * MAX_HEAD_BYTES);
        let _ = write!(s, "GET /free HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
        let mut out = [0u8; 12];
        let _ = s.read(&mut out);
        assert!(
            out.starts_with(b"HTTP/1.1 431"),
            "{:?}",
            String::from_utf8_lossy(&out)
        );
    }

    /// A web configuration with TLS for 127.0.0.1 (a fresh self-signed certificate), and a
    /// rustls client trusting it.
    fn tls_pair() -> (LiveWebConfig, Arc<rustls::ClientConfig>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let indent = |pem: String| pem.trim_end().replace('\n', "\n    ");
        let yaml = format!(
            "tls_server_config:\n  cert: |\n    {}\n  key: |\n    {}\n",
            indent(cert.pem()),
            indent(key.serialize_pem())
        );
        let web = crate::config::WebConfig::from_yaml(
            &yaml,
            std::path::Path::new("."),
            std::path::Path::new("web.yml"),
        )
        .unwrap();
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        (LiveWebConfig::new(Some(web)), Arc::new(client))
    }

    /// GET `path` over TLS; the status.
    fn get_tls_status(addr: &str, client: &Arc<rustls::ClientConfig>, path: &str) -> u16 {
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        write!(
            tls,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        let _ = tls.read_to_string(&mut out);
        out.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0)
    }

    #[test]
    fn tls_handshakes_are_bounded_and_plain_http_gets_400() {
        let rejected = Arc::new(HttpRejections::default());
        let limits = HttpLimits {
            header_read_timeout: Duration::from_millis(500),
            max_connections: 2,
            ..HttpLimits::default()
        };
        let (web, client) = tls_pair();
        let addr = start_with(limits, Held::default(), rejected.clone(), Arc::new(web));
        // The count follows the close by a moment.
        let counted = |n: u64| {
            let t = Instant::now();
            while rejected.tls_handshake.load(Ordering::Relaxed) != n {
                assert!(
                    t.elapsed() < Duration::from_secs(2),
                    "tls_handshake = {}, not {n}",
                    rejected.tls_handshake.load(Ordering::Relaxed)
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        assert_eq!(get_tls_status(&addr, &client, "/free"), 200);
        // A TCP probe (connect, close) is not a failed handshake.
        drop(TcpStream::connect(&addr).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(rejected.tls_handshake.load(Ordering::Relaxed), 0);
        // Plain HTTP gets a 400 that says what to do.
        let mut plain = TcpStream::connect(&addr).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(plain, "GET /free HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = plain.read_to_string(&mut out);
        assert!(
            out.starts_with("HTTP/1.1 400 ") && out.contains("use https://"),
            "{out:?}"
        );
        counted(1);
        // Connections that never finish a handshake hold their connection permit only for
        // header_read_timeout, then the permits serve again.
        let t = Instant::now();
        let mut idle = TcpStream::connect(&addr).unwrap();
        let mut slow = TcpStream::connect(&addr).unwrap();
        slow.write_all(&[0x16, 0x03, 0x01]).unwrap();
        assert!(closed_within(&mut idle, Duration::from_secs(5)));
        assert!(closed_within(&mut slow, Duration::from_secs(5)));
        let e = t.elapsed();
        assert!(
            e >= Duration::from_millis(450) && e < Duration::from_secs(3),
            "{e:?}"
        );
        counted(3);
        assert_eq!(get_tls_status(&addr, &client, "/free"), 200);
    }
}
