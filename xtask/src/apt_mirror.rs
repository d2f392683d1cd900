//! The Debian mirrors this machine's own apt uses (/etc/apt/sources.list and sources.list.d,
//! one-line and deb822 formats), so the kernel matrix and the machine images download from the
//! same place as `apt-get` here: a local mirror or a proxy configured for apt works unchanged.

use std::{fs, path::Path};

use anyhow::{bail, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirrors {
    /// The archive (`<codename>`, `-updates`, `-backports`), e.g. `http://deb.debian.org/debian`.
    pub debian: String,
    /// The security archive (`<codename>-security`), if apt here has one.
    pub security: Option<String>,
}

/// `(uri, suite)` of every `deb` source in one file's text (`deb822`: a `.sources` file).
fn sources(text: &str, deb822: bool) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if !deb822 {
        for line in text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
        {
            let mut words = line.split_whitespace();
            if words.next() != Some("deb") {
                continue;
            }
            let mut rest: Vec<&str> = words.collect();
            if rest.first().is_some_and(|w| w.starts_with('[')) {
                let end = rest.iter().position(|w| w.ends_with(']')).unwrap_or(0);
                rest.drain(..=end);
            }
            if let [uri, suite, ..] = rest[..] {
                out.push((uri.trim_end_matches('/').to_string(), suite.to_string()));
            }
        }
        return out;
    }
    for stanza in text.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .filter(|l| !l.trim_start().starts_with('#'))
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
                .unwrap_or_default()
        };
        if !field("Types").split_whitespace().any(|t| t == "deb")
            || field("Enabled").eq_ignore_ascii_case("no")
        {
            continue;
        }
        for uri in field("URIs").split_whitespace() {
            for suite in field("Suites").split_whitespace() {
                out.push((uri.trim_end_matches('/').to_string(), suite.to_string()));
            }
        }
    }
    out
}

/// The mirrors from a list of `(uri, suite)`.
fn pick(all: &[(String, String)]) -> Option<Mirrors> {
    let debian = all
        .iter()
        .find(|(_, s)| !s.ends_with("-security"))?
        .0
        .clone();
    let security = all
        .iter()
        .find(|(_, s)| s.ends_with("-security"))
        .map(|(u, _)| u.clone());
    Some(Mirrors { debian, security })
}

/// The host's mirrors, or `BLKOBS_APT_MIRROR` / `BLKOBS_APT_SECURITY_MIRROR` when set.
pub fn host() -> Result<Mirrors> {
    if let Ok(debian) = std::env::var("BLKOBS_APT_MIRROR") {
        let security = std::env::var("BLKOBS_APT_SECURITY_MIRROR").ok();
        return Ok(Mirrors { debian, security });
    }
    let etc = Path::new("/etc/apt");
    let mut all = Vec::new();
    if let Ok(t) = fs::read_to_string(etc.join("sources.list")) {
        all.extend(sources(&t, false));
    }
    let mut parts: Vec<_> = fs::read_dir(etc.join("sources.list.d"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    parts.sort();
    for p in parts {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if let (Ok(t), "list" | "sources") = (fs::read_to_string(&p), ext) {
            all.extend(sources(&t, ext == "sources"));
        }
    }
    match pick(&all) {
        Some(m) => Ok(m),
        None => bail!(
            "no Debian `deb` source in /etc/apt/sources.list or /etc/apt/sources.list.d: add one, \
             or name the mirror with BLKOBS_APT_MIRROR=http://<mirror>/debian (and \
             BLKOBS_APT_SECURITY_MIRROR for the security archive)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_sources_with_options_and_comments() {
        let t = "# comment\ndeb [signed-by=/k.gpg arch=amd64] http://mirror.local/debian/ bookworm main\n\
                 deb-src http://x/debian bookworm main\n\
                 deb http://mirror.local/debian-security bookworm-security main # trailing\n";
        let m = pick(&sources(t, false)).unwrap();
        assert_eq!(m.debian, "http://mirror.local/debian");
        assert_eq!(
            m.security.as_deref(),
            Some("http://mirror.local/debian-security")
        );
    }

    #[test]
    fn deb822_sources_skip_disabled_and_source_only_stanzas() {
        let t = "Types: deb-src\nURIs: http://src/debian\nSuites: bookworm\n\n\
                 Types: deb\nURIs: http://off/debian\nSuites: bookworm\nEnabled: no\n\n\
                 Types: deb deb-src\nURIs: http://proxy:3142/debian\nSuites: bookworm bookworm-updates\n\
                 Components: main\n\n\
                 Types: deb\nURIs: http://proxy:3142/debian-security\nSuites: bookworm-security\n";
        let m = pick(&sources(t, true)).unwrap();
        assert_eq!(m.debian, "http://proxy:3142/debian");
        assert_eq!(
            m.security.as_deref(),
            Some("http://proxy:3142/debian-security")
        );
    }

    #[test]
    fn no_security_source_is_none_not_a_guess() {
        let m = pick(&sources("deb http://m/debian trixie main\n", false)).unwrap();
        assert_eq!(m.security, None);
        assert!(pick(&[]).is_none());
    }
}
