//! `tls_server_config`: certificates, keys and client CAs (inline or from files), client
//! authentication, protocol versions, cipher suites and curves, as exporter-toolkit reads
//! them, checked and turned into a rustls [`ServerConfig`].

use std::{fmt, path::Path, sync::Arc};

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

/// `tls_server_config` (exporter-toolkit's `web.TLSConfig`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TlsSpec {
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
pub(super) fn server_config(
    spec: &TlsSpec,
    dir: &Path,
) -> Result<Option<(ServerConfig, ClientAuth)>, String> {
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
