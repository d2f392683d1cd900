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
use rustls::{
    client::danger::HandshakeSignatureValid,
    crypto::{ring as provider, CryptoProvider},
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer, UnixTime},
    server::{
        danger::{ClientCertVerified, ClientCertVerifier},
        WebPkiClientVerifier,
    },
    DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme,
    SupportedProtocolVersion,
};
use serde::Deserialize;

use super::ConfigError;

/// `tls_server_config.client_auth_type`: whether clients must present a certificate, and
/// whether it is checked against `client_ca_file` (Go's `tls.ClientAuthType` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientAuth {
    /// No client certificate asked for (the default).
    #[default]
    NoClientCert,
    /// Asked for, not required, not verified (insecure: any certificate is accepted).
    RequestClientCert,
    /// Required, not verified (insecure: any certificate is accepted).
    RequireAnyClientCert,
    /// Verified against `client_ca_file` if the client sends one.
    VerifyClientCertIfGiven,
    /// Required and verified against `client_ca_file`: mutual TLS.
    RequireAndVerifyClientCert,
}

impl ClientAuth {
    const NAMES: &'static str = "NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert";

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "" | "NoClientCert" => Self::NoClientCert,
            "RequestClientCert" => Self::RequestClientCert,
            // "RequireClientCert": exporter-toolkit's old name, kept there for compatibility.
            "RequireAnyClientCert" | "RequireClientCert" => Self::RequireAnyClientCert,
            "VerifyClientCertIfGiven" => Self::VerifyClientCertIfGiven,
            "RequireAndVerifyClientCert" => Self::RequireAndVerifyClientCert,
            _ => return None,
        })
    }
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

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

/// `tls_server_config` (exporter-toolkit's `web.TLSConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsSpec {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
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

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

/// Reads a file named in the web config (relative to `dir`), naming the key on failure.
fn read_named(dir: &Path, key: &str, name: &str) -> Result<Vec<u8>, String> {
    let path = dir.join(name);
    std::fs::read(&path).map_err(|e| {
        format!(
            "{key}: cannot read {}: {e} (relative paths are relative to the web config file's directory; the daemon's user must be able to read it)",
            path.display()
        )
    })
}

/// PEM text inline (`inline_key`) or from a file (`file_key`), at most one of them.
fn pem_source(
    dir: &Path,
    inline: &Option<String>,
    inline_key: &str,
    file: &Option<String>,
    file_key: &str,
) -> Result<Option<(Vec<u8>, String)>, String> {
    match (non_empty(inline), non_empty(file)) {
        (Some(_), Some(_)) => Err(format!(
            "tls_server_config: both {inline_key} and {file_key} are set: keep one"
        )),
        (Some(text), None) => Ok(Some((
            text.as_bytes().to_vec(),
            format!("tls_server_config.{inline_key}"),
        ))),
        (None, Some(name)) => {
            let what = format!(
                "tls_server_config.{file_key} ({})",
                dir.join(name).display()
            );
            Ok(Some((
                read_named(dir, &format!("tls_server_config.{file_key}"), name)?,
                what,
            )))
        }
        (None, None) => Ok(None),
    }
}

fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: not PEM certificates: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "{what}: no certificate in it (expected PEM `BEGIN CERTIFICATE` blocks)"
        ));
    }
    Ok(certs)
}

fn tls_version(s: &str, key: &str) -> Result<&'static SupportedProtocolVersion, String> {
    match s {
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS10" | "TLS11" => Err(format!(
            "tls_server_config.{key}: {s} is not supported (rustls speaks TLS 1.2 and 1.3 only): use TLS12 or TLS13"
        )),
        _ => Err(format!(
            "tls_server_config.{key}: unknown TLS version {s:?}: use TLS12 or TLS13"
        )),
    }
}

/// The crypto provider (ring) with `cipher_suites` (TLS 1.2 suites, by their IANA/Go names;
/// TLS 1.3 suites are always on, as in Go) and `curve_preferences` applied.
fn provider_for(spec: &TlsSpec) -> Result<CryptoProvider, String> {
    let mut p = provider::default_provider();
    if let Some(names) = spec.cipher_suites.as_ref().filter(|n| !n.is_empty()) {
        let name_of = |s: &rustls::SupportedCipherSuite| format!("{:?}", s.suite());
        let tls12: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .copied()
            .collect();
        let mut chosen: Vec<_> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS13)
            .copied()
            .collect();
        for n in names {
            if let Some(s) = tls12.iter().find(|s| name_of(s) == *n) {
                chosen.push(*s);
            } else if !chosen.iter().any(|s| name_of(s) == *n)
                && !n.starts_with("TLS_AES_")
                && n != "TLS_CHACHA20_POLY1305_SHA256"
            {
                let known: Vec<String> = tls12.iter().map(name_of).collect();
                return Err(format!(
                    "tls_server_config.cipher_suites: {n:?} is not available: use some of {}",
                    known.join(", ")
                ));
            }
        }
        p.cipher_suites = chosen;
    }
    if let Some(names) = spec.curve_preferences.as_ref().filter(|n| !n.is_empty()) {
        let mut groups = Vec::new();
        for n in names {
            groups.push(match n.as_str() {
                "X25519" => provider::kx_group::X25519,
                "CurveP256" => provider::kx_group::SECP256R1,
                "CurveP384" => provider::kx_group::SECP384R1,
                _ => {
                    return Err(format!(
                        "tls_server_config.curve_preferences: {n:?} is not available: use X25519, CurveP256 or CurveP384"
                    ))
                }
            });
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

/// Accepts any client certificate (`RequestClientCert`, `RequireAnyClientCert`): only the
/// handshake signature is checked, proving the client holds the key of what it sent.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The rustls server configuration for `spec` (files relative to `dir`), or `None` when `spec`
/// configures nothing (exporter-toolkit then serves plain HTTP too).
fn server_config(spec: &TlsSpec, dir: &Path) -> Result<Option<(ServerConfig, ClientAuth)>, String> {
    let enabled = [
        &spec.cert,
        &spec.key,
        &spec.client_ca,
        &spec.cert_file,
        &spec.key_file,
        &spec.client_ca_file,
        &spec.client_auth_type,
    ]
    .iter()
    .any(|v| non_empty(v).is_some());
    if !enabled {
        return Ok(None);
    }
    if spec.client_allowed_sans.is_some() {
        return Err("tls_server_config.client_allowed_sans is not supported: sign the certificates allowed to scrape with a CA of their own and name it in client_ca_file (client_auth_type: RequireAndVerifyClientCert)".into());
    }
    let (cert_pem, cert_what) = pem_source(dir, &spec.cert, "cert", &spec.cert_file, "cert_file")?
        .ok_or("tls_server_config: missing one of cert or cert_file (the server's certificate chain, PEM)")?;
    let (key_pem, key_what) = pem_source(dir, &spec.key, "key", &spec.key_file, "key_file")?
        .ok_or(
            "tls_server_config: missing one of key or key_file (the server's private key, PEM)",
        )?;
    let chain = certificates(&cert_pem, &cert_what)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        format!("{key_what}: no usable private key in it ({e}); expected an unencrypted PEM `BEGIN PRIVATE KEY`, `BEGIN RSA PRIVATE KEY` or `BEGIN EC PRIVATE KEY` block")
    })?;

    let type_name = spec.client_auth_type.as_deref().unwrap_or("");
    let client_auth = ClientAuth::parse(type_name).ok_or_else(|| {
        format!(
            "tls_server_config.client_auth_type: unknown value {type_name:?}: use {}",
            ClientAuth::NAMES
        )
    })?;
    let ca = pem_source(
        dir,
        &spec.client_ca,
        "client_ca",
        &spec.client_ca_file,
        "client_ca_file",
    )?;
    if ca.is_some() && client_auth == ClientAuth::NoClientCert {
        return Err("tls_server_config: a client CA is set but client_auth_type is NoClientCert: set client_auth_type: RequireAndVerifyClientCert, or remove client_ca_file".into());
    }

    let versions = {
        let min = tls_version(
            spec.min_version.as_deref().unwrap_or("TLS12"),
            "min_version",
        )?;
        let max = tls_version(
            spec.max_version.as_deref().unwrap_or("TLS13"),
            "max_version",
        )?;
        let rank = |v: &SupportedProtocolVersion| u16::from(v.version);
        if rank(min) > rank(max) {
            return Err(
                "tls_server_config: min_version is above max_version: swap them".to_string(),
            );
        }
        [&rustls::version::TLS12, &rustls::version::TLS13]
            .into_iter()
            .filter(|v| (rank(min)..=rank(max)).contains(&rank(v)))
            .collect::<Vec<_>>()
    };
    let provider = Arc::new(provider_for(spec)?);

    let verifier: Arc<dyn ClientCertVerifier> = match client_auth {
        ClientAuth::NoClientCert => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert => {
            Arc::new(AnyClientCert {
                mandatory: client_auth == ClientAuth::RequireAnyClientCert,
                provider: provider.clone(),
            })
        }
        ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert => {
            let (ca_pem, ca_what) = ca.ok_or_else(|| {
                format!("tls_server_config: client_auth_type {client_auth} needs client_ca_file (or client_ca): the CA certificate(s) that sign the clients' certificates")
            })?;
            let mut roots = RootCertStore::empty();
            for c in certificates(&ca_pem, &ca_what)? {
                roots
                    .add(c)
                    .map_err(|e| format!("{ca_what}: not a usable CA certificate: {e}"))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder = if client_auth == ClientAuth::VerifyClientCertIfGiven {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| format!("{ca_what}: cannot verify clients with it: {e}"))?
        }
    };
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("tls_server_config: these versions, cipher suites and curves do not work together: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| {
            format!("{cert_what} and {key_what}: cannot be used together ({e}): the key must be the certificate's, and the certificate first in the file")
        })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.ignore_client_order = spec.prefer_server_cipher_suites.unwrap_or(true);
    Ok(Some((cfg, client_auth)))
}

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

    /// The example in docs/operations.md "Securing the endpoint" loads (with this PKI's files
    /// where it names its own), and its hash is of the password its comment says.
    #[test]
    fn the_documented_example_loads() {
        let f = Files::new();
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/operations.md"
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
