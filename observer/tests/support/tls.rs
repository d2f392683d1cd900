//! TLS fixtures: a throw-away PKI (rcgen) in a temporary directory, web config files, and
//! `curl` as an independent TLS client (OpenSSL, not rustls).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

use super::TempDir;

/// A CA (`ca.pem`), a server certificate for 127.0.0.1 and localhost signed by it
/// (`server.pem`, `server.key`), a client certificate signed by it (`client.pem`,
/// `client.key`), and a client certificate signed by another CA (`stranger.pem`,
/// `stranger.key`). Files are 0644 in a 0755 directory, removed on drop.
pub struct Pki {
    pub dir: TempDir,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap()
}

/// Writes `<name>.pem` and `<name>.key`: a certificate for `names` with `usage`, signed by `ca`.
fn leaf(
    dir: &Path,
    name: &str,
    ca: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) {
    let mut p =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(DnType::CommonName, name);
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, ca).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

impl Pki {
    pub fn new() -> Pki {
        let dir = TempDir::new("blkobs-pki");
        let ours = ca("blkobs test CA");
        std::fs::write(dir.join("ca.pem"), ours.pem()).unwrap();
        leaf(
            &dir.0,
            "server",
            &ours,
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        leaf(
            &dir.0,
            "client",
            &ours,
            &["prometheus.example"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        let theirs = ca("another CA");
        leaf(
            &dir.0,
            "stranger",
            &theirs,
            &["prometheus.example"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        Pki { dir }
    }

    /// A file of the PKI directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Writes `yaml` as `web.yml` (its relative paths name the files here); returns its path.
    pub fn web_config(&self, yaml: &str) -> PathBuf {
        let p = self.path("web.yml");
        std::fs::write(&p, yaml).unwrap();
        p
    }
}

/// A bcrypt hash of `password` (cost 4: quick; the daemon accepts any cost).
pub fn bcrypt_hash(password: &str) -> String {
    bcrypt::hash(password, 4).unwrap()
}

/// What `curl` got.
#[derive(Debug)]
pub struct Curled {
    /// curl's exit code (0: a response was received; 35/56/60...: TLS failures).
    pub exit: i32,
    /// The HTTP status, 0 if there was none.
    pub status: u16,
    /// Response headers (lower-case names) and body.
    pub headers: String,
    pub body: String,
    /// curl's own error message.
    pub stderr: String,
}

/// `curl -sS` with `args` (URL included), 10 s at most.
pub fn curl(args: &[&str]) -> Curled {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-D", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("run curl");
    let stdout = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    let (rest, code) = stdout.rsplit_once('\n').unwrap_or(("", &stdout));
    let (headers, body) = rest.split_once("\n\n").unwrap_or((rest, ""));
    Curled {
        exit: out.status.code().unwrap_or(-1),
        status: code.trim().parse().unwrap_or(0),
        headers: headers.to_ascii_lowercase(),
        body: body.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `curl` over HTTPS to `addr` + `path`, trusting the PKI's CA, with `extra` arguments (`-u`,
/// `--cert`...).
pub fn curl_https(pki: &Pki, addr: &str, path: &str, extra: &[&str]) -> Curled {
    let ca = pki.path("ca.pem");
    let url = format!("https://{addr}{path}");
    let mut args = vec!["--cacert", ca.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(&url);
    curl(&args)
}
