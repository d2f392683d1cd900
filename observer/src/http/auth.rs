//! HTTP basic authentication and the extra response headers of the web configuration file
//! ([`crate::config::web`]), as exporter-toolkit does them: every path is protected (`/healthz`
//! too), a request without valid credentials gets 401 with `WWW-Authenticate: Basic`, and
//! passwords are checked against bcrypt hashes.
//!
//! bcrypt is slow on purpose (cost 10: about 70 ms of CPU). A check runs on the blocking pool,
//! one at a time, and its outcome is remembered (keyed by a SHA-256 of user, hash and password,
//! never the password itself), so Prometheus pays it once, not at every scrape. An unknown user
//! is checked against a hash of the same kind, so that timing does not tell which users exist.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{atomic::Ordering, Arc, LazyLock, Mutex},
};

use axum::{
    extract::Request,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    middleware::Next,
    response::{IntoResponse, Response},
    Json, Router,
};
use base64::Engine;
use tokio::sync::Semaphore;

use crate::{config::LiveWebConfig, exposition::selfmon::HttpRejections};

/// Remembered outcomes at most; beyond, the memory starts over.
const CACHE_ENTRIES: usize = 1024;

/// What unknown users are checked against (cost 10, as `htpasswd -nBC 10` makes them).
static UNKNOWN_USER_HASH: LazyLock<String> =
    LazyLock::new(|| bcrypt::hash("not a password of any user", 10).expect("bcrypt of a constant"));

/// Checks basic auth credentials against bcrypt hashes, remembering outcomes.
#[derive(Debug)]
pub struct BasicAuth {
    /// SHA-256 of (user, hash, password) → whether the password matched the hash.
    known: Mutex<HashMap<[u8; 32], bool>>,
    /// One bcrypt computation at a time: a flood of wrong passwords costs one CPU at most.
    bcrypt: Semaphore,
}

impl Default for BasicAuth {
    fn default() -> Self {
        Self {
            known: Mutex::new(HashMap::new()),
            bcrypt: Semaphore::new(1),
        }
    }
}

/// (user, password) from an `Authorization: Basic ...` header.
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

fn key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    ctx.finish()
        .as_ref()
        .try_into()
        .expect("SHA-256 is 32 bytes")
}

impl BasicAuth {
    /// Whether `headers` carry the password of one of `users`.
    pub async fn allows(&self, users: &BTreeMap<String, String>, headers: &HeaderMap) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let (hash, known_user) = match users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (String::new(), false),
        };
        let k = key(&user, &hash, &password);
        if let Some(ok) = self.known.lock().expect("auth cache lock").get(&k) {
            return *ok && known_user;
        }
        let Ok(_one_at_a_time) = self.bcrypt.acquire().await else {
            return false;
        };
        let ok = tokio::task::spawn_blocking(move || {
            let hash = if known_user {
                hash.as_str()
            } else {
                UNKNOWN_USER_HASH.as_str()
            };
            bcrypt::verify(password, hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        let mut known = self.known.lock().expect("auth cache lock");
        if known.len() >= CACHE_ENTRIES {
            known.clear();
        }
        known.insert(k, ok);
        ok && known_user
    }
}

/// 401 with `WWW-Authenticate: Basic`.
fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"observer\", charset=\"UTF-8\""),
        )],
        Json(serde_json::json!({
            "error": "authentication required: send the user and password of one of basic_auth_users in the web config file (HTTP basic auth)",
        })),
    )
        .into_response()
}

/// Wraps `router` so that, while the web configuration in effect has `basic_auth_users`, every
/// request needs valid credentials (else 401, counted in `rejected.unauthorized`), and every
/// response gets its `http_server_config.headers`.
pub fn protect(router: Router, web: Arc<LiveWebConfig>, rejected: Arc<HttpRejections>) -> Router {
    let auth = Arc::new(BasicAuth::default());
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let (web, auth, rejected) = (web.clone(), auth.clone(), rejected.clone());
            async move {
                let Some(cfg) = web.get() else {
                    return next.run(req).await;
                };
                let mut response =
                    if cfg.users.is_empty() || auth.allows(&cfg.users, req.headers()).await {
                        next.run(req).await
                    } else {
                        rejected.unauthorized.fetch_add(1, Ordering::Relaxed);
                        unauthorized()
                    };
                for (name, value) in &cfg.headers {
                    response.headers_mut().insert(name.clone(), value.clone());
                }
                response
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {token}")).unwrap(),
        );
        h
    }

    #[tokio::test]
    async fn checks_passwords_against_bcrypt_and_remembers() {
        let users = BTreeMap::from([
            ("prom".to_string(), bcrypt::hash("s3cret:x", 4).unwrap()),
            ("other".to_string(), bcrypt::hash("pw", 4).unwrap()),
        ]);
        let auth = BasicAuth::default();
        assert!(auth.allows(&users, &basic("prom", "s3cret:x")).await);
        assert!(auth.allows(&users, &basic("prom", "s3cret:x")).await);
        assert!(!auth.allows(&users, &basic("prom", "s3cret")).await);
        assert!(!auth.allows(&users, &basic("prom", "pw")).await);
        assert!(!auth.allows(&users, &basic("nobody", "pw")).await);
        assert!(!auth.allows(&users, &HeaderMap::new()).await);
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert!(!auth.allows(&users, &bearer).await);
        let mut garbage = HeaderMap::new();
        garbage.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic %%%"));
        assert!(!auth.allows(&users, &garbage).await);
        // 4 distinct (user, hash, password) triples were bcrypt-checked; repeats were not.
        assert_eq!(auth.known.lock().unwrap().len(), 4);
        // A changed hash (reload) is checked again, not taken from memory.
        let changed = BTreeMap::from([("prom".to_string(), bcrypt::hash("new", 4).unwrap())]);
        assert!(!auth.allows(&changed, &basic("prom", "s3cret:x")).await);
        assert!(auth.allows(&changed, &basic("prom", "new")).await);
    }
}
