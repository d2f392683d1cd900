//! The web configuration file (`--web.config.file`, `web_config_file`): TLS and HTTP basic
//! authentication in the format of Prometheus exporter-toolkit's web configuration file (YAML),
//! so that a file written for node_exporter works here:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: observer.crt            # relative paths: relative to this file's directory
//!   key_file: observer.key
//!   client_auth_type: RequireAndVerifyClientCert   # optional: mutual TLS
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12                 # TLS12 (default) or TLS13
//! basic_auth_users:                    # user: bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//!   prometheus: $2y$10$...
//! ```
//!
//! Everything exporter-toolkit documents is recognised. Supported: `tls_server_config` (`cert`,
//! `key`, `client_ca` inline or the `*_file` keys, all five `client_auth_type`s, `min_version`,
//! `max_version`, `cipher_suites` (TLS 1.2), `curve_preferences`, `prefer_server_cipher_suites`),
//! `http_server_config` (`headers`; `http2` is accepted and ignored: the daemon speaks HTTP/1.1),
//! `basic_auth_users`. Refused with an error saying what to do instead: `client_allowed_sans`
//! and `rate_limit`. Any other key is an error naming it.
//!
//! A file is loaded completely (YAML, certificates, keys, CA, bcrypt hashes) or not at all:
//! [`WebConfig::load`]. The daemon keeps the one in effect in a [`LiveWebConfig`], which a
//! SIGHUP reload replaces (an invalid file is rejected and the old one kept).

use std::{
    collections::BTreeMap,
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    sync::{Arc, RwLock},
};

use axum::http::{HeaderName, HeaderValue};
use rustls::ServerConfig;
use serde::Deserialize;

use super::ConfigError;

mod tls;

pub use tls::ClientAuth;
use tls::{server_config, TlsSpec};

/// A loaded, valid web configuration file.
#[derive(Clone)]
pub struct WebConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// TLS for every connection; `None`: plain HTTP (no `tls_server_config`, or an empty one).
    pub tls: Option<Arc<ServerConfig>>,
    /// What `tls_server_config.client_auth_type` asks of clients.
    pub client_auth: ClientAuth,
    /// `basic_auth_users`: user name → bcrypt hash. Empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// `http_server_config.headers`: set on every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .field("headers", &self.headers)
            .finish()
    }
}

/// The web configuration in effect, shared by the accept loop (TLS), the authentication layer
/// and the reloader, which swaps it as a whole.
#[derive(Debug, Default)]
pub struct LiveWebConfig {
    current: RwLock<Option<Arc<WebConfig>>>,
}

impl LiveWebConfig {
    /// Starts with `web` (`None`: plain HTTP, no authentication).
    pub fn new(web: Option<WebConfig>) -> Self {
        Self {
            current: RwLock::new(web.map(Arc::new)),
        }
    }

    /// The configuration in effect now.
    pub fn get(&self) -> Option<Arc<WebConfig>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces it: new connections and requests use `web`.
    pub fn set(&self, web: Option<WebConfig>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = web.map(Arc::new);
    }
}

/// What to warn about when serving on `addr` with `web`, if anything: plain HTTP or basic auth
/// in clear text on an address other than loopback.
pub fn exposure_warning(addr: SocketAddr, web: Option<&WebConfig>) -> Option<String> {
    if addr.ip().is_loopback() {
        return None;
    }
    match web {
        Some(w) if w.tls.is_some() => None,
        Some(w) if !w.users.is_empty() => Some(format!(
            "serving basic auth over plain HTTP on {addr}: passwords cross the network in clear text; add tls_server_config to the web config file {} (docs/operations.md \"Securing the endpoint\")",
            w.path.display()
        )),
        _ => Some(format!(
            "serving plain HTTP without authentication on {addr} (not loopback): anyone who reaches it can read the metrics and the API; give a web config file with tls_server_config and basic_auth_users (--web.config.file or web_config_file, docs/operations.md \"Securing the endpoint\"), or listen on 127.0.0.1 / firewall the port"
        )),
    }
}

/// The file as written (exporter-toolkit's `web.Config`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSpec {
    tls_server_config: Option<TlsSpec>,
    http_server_config: Option<HttpSpec>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<serde_norway::Value>,
}

/// `http_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSpec {
    /// Accepted and ignored: the daemon speaks HTTP/1.1 only (ALPN offers `http/1.1`).
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// Response headers `http_server_config.headers` may set, with their allowed values (empty:
/// any), as exporter-toolkit allows them.
const EXTRA_HEADERS: &[(&str, &[&str])] = &[
    ("Strict-Transport-Security", &[]),
    ("X-Content-Type-Options", &["nosniff"]),
    ("X-Frame-Options", &["deny", "sameorigin"]),
    ("X-XSS-Protection", &[]),
    ("Content-Security-Policy", &[]),
];

/// `basic_auth_users`, each hash checked to be bcrypt.
fn users(spec: Option<BTreeMap<String, String>>) -> Result<BTreeMap<String, String>, String> {
    let users = spec.unwrap_or_default();
    for (user, hash) in &users {
        if user.contains(':') || user.is_empty() {
            return Err(format!(
                "basic_auth_users: user name {user:?} cannot be used with basic auth (empty, or contains ':')"
            ));
        }
        if let Err(e) = bcrypt::HashParts::from_str(hash) {
            return Err(format!(
                "basic_auth_users.{user}: not a bcrypt hash ({e}); store the hash, not the password: htpasswd -nBC 10 \"\" | tr -d ':\\n'"
            ));
        }
    }
    Ok(users)
}

fn headers(spec: Option<HttpSpec>) -> Result<Vec<(HeaderName, HeaderValue)>, String> {
    let mut out = Vec::new();
    for (name, value) in spec.and_then(|h| h.headers).unwrap_or_default() {
        let Some((_, allowed)) = EXTRA_HEADERS.iter().find(|(n, _)| *n == name) else {
            let names: Vec<&str> = EXTRA_HEADERS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "http_server_config.headers: {name:?} cannot be configured: only {}",
                names.join(", ")
            ));
        };
        if !allowed.is_empty() && !allowed.contains(&value.as_str()) {
            return Err(format!(
                "http_server_config.headers.{name}: {value:?} is not allowed: use one of {allowed:?}"
            ));
        }
        if value.is_empty() {
            continue;
        }
        let v = HeaderValue::from_str(&value)
            .map_err(|e| format!("http_server_config.headers.{name}: {e}"))?;
        let name = HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes())
            .expect("the names above are valid");
        out.push((name, v));
    }
    Ok(out)
}

impl WebConfig {
    /// Reads `path` and everything it names (certificates, key, CA; relative to the file's
    /// directory) and checks it all. Errors name the key and say what to do.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let fail = |problem: String| ConfigError::Web {
            path: path.display().to_string(),
            problem,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read it: {e}")))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::from_yaml(&text, dir, path).map_err(fail)
    }

    /// Parses `text` (files relative to `dir`); `path` is recorded as its origin.
    pub fn from_yaml(text: &str, dir: &Path, path: &Path) -> Result<Self, String> {
        let spec: FileSpec = serde_norway::from_str::<Option<FileSpec>>(text)
            .map_err(|e| e.to_string())?
            .unwrap_or_default();
        if spec.rate_limit.is_some() {
            return Err("rate_limit is not supported: the daemon bounds requests served at once instead (http.max_requests, --max-requests; 503 beyond)".into());
        }
        let (tls, client_auth) = match &spec.tls_server_config {
            Some(t) => match server_config(t, dir)? {
                Some((cfg, auth)) => (Some(Arc::new(cfg)), auth),
                None => (None, ClientAuth::NoClientCert),
            },
            None => (None, ClientAuth::NoClientCert),
        };
        Ok(Self {
            path: path.to_path_buf(),
            tls,
            client_auth,
            users: users(spec.basic_auth_users)?,
            headers: headers(spec.http_server_config)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair,
    };

    /// A directory with `ca.pem`, `server.pem`/`server.key` (signed by it, for 127.0.0.1) and
    /// `other.key` (a key of no certificate here). Removed on drop.
    struct Files(PathBuf);

    impl Files {
        fn new() -> Self {
            static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "blkobs-webcfg-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            ca.distinguished_name.push(DnType::CommonName, "test CA");
            let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
            let mut server = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
            server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let key = KeyPair::generate().unwrap();
            let cert = server.signed_by(&key, &ca).unwrap();
            std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
            std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
            std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
            let other = KeyPair::generate().unwrap();
            std::fs::write(dir.join("other.key"), other.serialize_pem()).unwrap();
            Self(dir)
        }

        fn parse(&self, yaml: &str) -> Result<WebConfig, String> {
            WebConfig::from_yaml(yaml, &self.0, &self.0.join("web.yml"))
        }

        fn err(&self, yaml: &str) -> String {
            match self.parse(yaml) {
                Ok(w) => panic!("accepted: {w:?}\n{yaml}"),
                Err(e) => e,
            }
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const TLS: &str = "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n";

    #[test]
    fn loads_tls_client_auth_users_and_headers() {
        let f = Files::new();
        let hash = bcrypt::hash("pw", 4).unwrap();
        let w = f
            .parse(&format!(
                "{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519, CurveP256]\nhttp_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  prometheus: {hash}\n"
            ))
            .unwrap();
        let tls = w.tls.as_ref().expect("TLS");
        assert_eq!(w.client_auth, ClientAuth::RequireAndVerifyClientCert);
        assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(w.users.len(), 1);
        assert_eq!(w.headers.len(), 1);
        assert_eq!(w.headers[0].0, "x-frame-options");
        // Inline PEM works as the files do; every client_auth_type is accepted.
        let cert = std::fs::read_to_string(f.0.join("server.pem")).unwrap();
        let key = std::fs::read_to_string(f.0.join("server.key")).unwrap();
        let indent = |s: &str| s.replace('\n', "\n    ");
        for auth in [
            "NoClientCert",
            "RequestClientCert",
            "RequireAnyClientCert",
            "VerifyClientCertIfGiven",
        ] {
            let ca = if auth == "NoClientCert" {
                ""
            } else {
                "  client_ca_file: ca.pem\n"
            };
            let w = f
                .parse(&format!(
                    "tls_server_config:\n  cert: |\n    {}\n  key: |\n    {}\n  client_auth_type: {auth}\n{ca}",
                    indent(&cert),
                    indent(&key)
                ))
                .unwrap();
            assert!(w.tls.is_some());
            assert_eq!(w.client_auth.to_string(), auth);
        }
    }

    #[test]
    fn empty_files_and_sections_mean_plain_http() {
        let f = Files::new();
        for yaml in ["", "# nothing\n", "tls_server_config:\nbasic_auth_users:\n"] {
            let w = f.parse(yaml).unwrap();
            assert!(w.tls.is_none() && w.users.is_empty(), "{yaml:?}");
        }
        let w = f
            .parse("tls_server_config:\n  cert_file: \"\"\n  key_file: \"\"\n")
            .unwrap();
        assert!(w.tls.is_none());
    }

    #[test]
    fn errors_name_the_key_and_say_what_to_do() {
        let f = Files::new();
        let cases: &[(&str, &[&str])] = &[
            ("tls_server_confg: {}\n", &["tls_server_confg"]),
            (&format!("{TLS}  cert_flie: x\n"), &["cert_flie"]),
            (
                "tls_server_config:\n  cert_file: server.pem\n",
                &["missing one of key or key_file"],
            ),
            (
                "tls_server_config:\n  cert_file: nope.pem\n  key_file: server.key\n",
                &["tls_server_config.cert_file", "nope.pem", "No such file"],
            ),
            (
                "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
                &["tls_server_config.cert_file", "no certificate"],
            ),
            (
                "tls_server_config:\n  cert_file: server.pem\n  key_file: server.pem\n",
                &["tls_server_config.key_file", "private key"],
            ),
            (
                "tls_server_config:\n  cert_file: server.pem\n  key_file: other.key\n",
                &["cannot be used together", "the key must be the certificate's"],
            ),
            (
                &format!("{TLS}  client_ca_file: ca.pem\n"),
                &["NoClientCert", "RequireAndVerifyClientCert"],
            ),
            (
                &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n"),
                &["needs client_ca_file"],
            ),
            (
                &format!("{TLS}  client_auth_type: Mandatory\n"),
                &["client_auth_type", "Mandatory", "RequireAndVerifyClientCert"],
            ),
            (
                &format!("{TLS}  min_version: TLS10\n"),
                &["min_version", "TLS12 or TLS13"],
            ),
            (
                &format!("{TLS}  min_version: TLS13\n  max_version: TLS12\n"),
                &["min_version is above max_version"],
            ),
            (
                &format!("{TLS}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n"),
                &["cipher_suites", "TLS_RSA_WITH_RC4_128_SHA", "TLS_ECDHE_"],
            ),
            (
                &format!("{TLS}  curve_preferences: [CurveP521]\n"),
                &["curve_preferences", "CurveP521"],
            ),
            (
                &format!("{TLS}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n  client_allowed_sans: [a]\n"),
                &["client_allowed_sans", "client_ca_file"],
            ),
            (
                "rate_limit:\n  interval: 1s\n  burst: 5\n",
                &["rate_limit", "max_requests"],
            ),
            (
                "basic_auth_users:\n  prometheus: hunter2\n",
                &["basic_auth_users.prometheus", "not a bcrypt hash", "htpasswd"],
            ),
            (
                "http_server_config:\n  headers:\n    Server: x\n",
                &["http_server_config.headers", "Server"],
            ),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: allow\n",
                &["X-Frame-Options", "deny"],
            ),
            ("basic_auth_users: [a, b]\n", &["basic_auth_users"]),
        ];
        for (yaml, want) in cases {
            let e = f.err(yaml);
            for w in *want {
                assert!(e.contains(w), "{yaml:?}: {e:?} lacks {w:?}");
            }
            // Nothing of the files' contents (keys!) is quoted.
            assert!(!e.contains("-----"), "{e}");
        }
        // Through the file: unreadable file names the file.
        let e = WebConfig::load(&f.0.join("missing.yml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("web config file") && e.contains("missing.yml"),
            "{e}"
        );
    }

    /// The example in docs/src/operations.md "Securing the endpoint" loads (with this PKI's files
    /// where it names its own), and its hash is of the password its comment says.
    #[test]
    fn the_documented_example_loads() {
        let f = Files::new();
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/src/operations.md"
        ))
        .unwrap();
        let section = doc.split("## Securing the endpoint").nth(1).unwrap();
        let yaml = section
            .split("```yaml\n")
            .nth(1)
            .and_then(|s| s.split("```").next())
            .unwrap();
        std::fs::create_dir(f.0.join("tls")).unwrap();
        for (from, to) in [
            ("server.pem", "observer.crt"),
            ("server.key", "observer.key"),
            ("ca.pem", "clients-ca.crt"),
        ] {
            std::fs::copy(f.0.join(from), f.0.join("tls").join(to)).unwrap();
        }
        let w = f.parse(yaml).unwrap();
        assert!(w.tls.is_some(), "{yaml}");
        assert_eq!(w.client_auth, ClientAuth::RequireAndVerifyClientCert);
        assert!(bcrypt::verify("change me", &w.users["prometheus"]).unwrap());
    }

    #[test]
    fn warns_about_plain_http_beyond_loopback() {
        let f = Files::new();
        let any: SocketAddr = "0.0.0.0:9617".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:9617".parse().unwrap();
        let tls = f.parse(TLS).unwrap();
        let auth_only = f
            .parse(&format!(
                "basic_auth_users:\n  p: {}\n",
                bcrypt::hash("x", 4).unwrap()
            ))
            .unwrap();
        assert!(exposure_warning(lo, None).is_none());
        assert!(exposure_warning(any, Some(&tls)).is_none());
        let w = exposure_warning(any, None).unwrap();
        assert!(
            w.contains("--web.config.file") && w.contains("0.0.0.0:9617"),
            "{w}"
        );
        let w = exposure_warning(any, Some(&auth_only)).unwrap();
        assert!(
            w.contains("clear text") && w.contains("tls_server_config"),
            "{w}"
        );
    }
}
