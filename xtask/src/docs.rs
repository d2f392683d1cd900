//! `cargo xtask docs` (and the suite's "docs" step): the documentation holds together.
//!
//! - every relative markdown link in README.md and docs/**/*.md resolves to a file or
//!   directory, and every `#anchor` it names is a heading of the target page (slugs as GitHub
//!   and mdBook make them: lowercase, whitespace to `-`, punctuation other than `-` and `_`
//!   dropped, a repeated heading suffixed `-1`, `-2`, …);
//! - every page under docs/src is listed in docs/src/SUMMARY.md;
//! - README.md is at most [`README_MAX_BYTES`], every question of its "What it answers" has
//!   its answer and link (`→`) within [`ANSWER_MAX_WORDS`] words of the top, and it still names
//!   `cargo xtask run` and `cargo xtask test` (the command .ci/run runs);
//! - every metric family of observer/src/exposition/ is named in docs/src/reference/metrics.md,
//!   every config key of observer/src/config/ in docs/src/reference/config.md and
//!   packaging/observer.toml, and every `docs/….md#anchor` the code cites exists;
//! - if `mdbook` is on PATH, `mdbook build docs -d ../target/book` succeeds.
//!
//! Symlinked pages (docs/operations.md, docs/fslog.md: kept for old links and the code that
//! names them) are checked through their targets, not twice.

use std::{
    collections::{BTreeSet, HashMap},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Result};

/// Where code, tests and packaging cite pages as `docs/….md#anchor`: each citation must
/// resolve like a link.
const CITING_DIRS: [&str; 7] = [
    "observer",
    "observer-common",
    "observer-ebpf",
    "xtask",
    "packaging",
    "scripts",
    "dashboards",
];

/// The front door stays a front door.
pub(crate) const README_MAX_BYTES: u64 = 15_000;
/// A reader finds each question's answer within this many words of README's top.
pub(crate) const ANSWER_MAX_WORDS: usize = 300;

/// Problems with README's questions: none listed, or one answered too far down.
fn answer_distances(readme: &str) -> Vec<String> {
    let Some(start) = readme.find("## What it answers") else {
        return vec!["README.md: no \"## What it answers\" section".into()];
    };
    let section = &readme[start..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    let mut problems = Vec::new();
    let mut questions = 0;
    for (at, _) in section[..end].match_indices('→') {
        questions += 1;
        let words = readme[..start + at].split_whitespace().count();
        if words > ANSWER_MAX_WORDS {
            let line = readme[..start + at].lines().count();
            problems.push(format!(
                "README.md:{line}: an answer {words} words from the top, more than \
                 {ANSWER_MAX_WORDS}: shorten what comes before it"
            ));
        }
    }
    if questions == 0 {
        problems.push("README.md: \"## What it answers\" links no answer (`→`)".into());
    }
    problems
}

/// Checks the documentation under `root` (the workspace) and fails listing every problem.
pub(crate) fn check(root: &Path) -> Result<()> {
    let mut problems = Vec::new();
    let readme = root.join("README.md");
    match std::fs::metadata(&readme) {
        Ok(m) if m.len() > README_MAX_BYTES => problems.push(format!(
            "README.md: {} bytes, more than {README_MAX_BYTES}: move detail into docs/src/",
            m.len()
        )),
        Ok(_) => {}
        Err(e) => problems.push(format!("README.md: {e}")),
    }
    // .ci/run runs "README's test command"; users copy the build command from it.
    let front = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    problems.extend(answer_distances(&front));
    for command in ["cargo xtask run", "cargo xtask test"] {
        if !front.contains(command) {
            problems.push(format!(
                "README.md: no `{command}` (the documented build/test command)"
            ));
        }
    }
    let mut pages = vec![readme];
    collect_markdown(&root.join("docs"), &mut pages, &mut problems);
    let mut anchors: HashMap<PathBuf, BTreeSet<String>> = HashMap::new();
    for page in &pages {
        let Ok(text) = std::fs::read_to_string(page) else {
            problems.push(format!("{}: unreadable", shown(root, page)));
            continue;
        };
        for (line, target) in links(&text) {
            if let Some(p) = check_link(page, &target, &mut anchors) {
                problems.push(format!("{}:{line}: ({target}): {p}", shown(root, page)));
            }
        }
    }
    problems.extend(summary_problems(&root.join("docs/src")));
    problems.extend(undocumented_metrics(root));
    problems.extend(undocumented_config_keys(root));
    for dir in CITING_DIRS {
        code_citations(root, &root.join(dir), &mut anchors, &mut problems);
    }
    if which("mdbook") {
        let out = Command::new("mdbook")
            .current_dir(root)
            .args(["build", "docs", "-d", "../target/book"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => problems.push(format!(
                "mdbook build docs failed ({}): {}",
                o.status,
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => problems.push(format!("starting mdbook: {e}")),
        }
    } else {
        eprintln!("docs: mdbook not on PATH, book not built (links and SUMMARY checked)");
    }
    if problems.is_empty() {
        eprintln!(
            "docs: {} pages, links, anchors and SUMMARY.md ok",
            pages.len()
        );
        return Ok(());
    }
    bail!(
        "{} documentation problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    )
}

fn shown(root: &Path, p: &Path) -> String {
    p.strip_prefix(root).unwrap_or(p).display().to_string()
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// Every `.md` file under `dir` that is not a symlink (a symlinked page is its target's).
fn collect_markdown(dir: &Path, out: &mut Vec<PathBuf>, problems: &mut Vec<String>) {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            problems.push(format!("{}: {e}", dir.display()));
            return;
        }
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_symlink() {
            if !path.exists() {
                problems.push(format!("{}: dangling symlink", path.display()));
            }
        } else if kind.is_dir() {
            collect_markdown(&path, out, problems);
        } else if path.extension().is_some_and(|x| x == "md") {
            out.push(path);
        }
    }
}

/// What is wrong with `target`, a link on `page`, if anything.
fn check_link(
    page: &Path,
    target: &str,
    anchors: &mut HashMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if is_external(target) {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((f, a)) => (f, Some(a)),
        None => (target, None),
    };
    let dest = if file.is_empty() {
        page.to_path_buf()
    } else {
        page.parent().unwrap_or(Path::new(".")).join(file)
    };
    if !dest.exists() {
        return Some(format!("{} does not exist", dest.display()));
    }
    let anchor = anchor.filter(|a| !a.is_empty())?;
    if dest.extension().is_none_or(|x| x != "md") {
        return None;
    }
    let key = dest.canonicalize().unwrap_or(dest.clone());
    let set = anchors.entry(key).or_insert_with(|| {
        std::fs::read_to_string(&dest)
            .map(|t| headings(&t).into_iter().collect())
            .unwrap_or_default()
    });
    if set.contains(anchor) {
        None
    } else {
        Some(format!("no heading #{anchor} in {}", dest.display()))
    }
}

/// Metric families the exposition code declares (`"blkobs_…"` / `"process_…"` string
/// literals outside comments and `#[cfg(test)]` code in observer/src/exposition/) that the
/// metrics reference page does not name.
fn undocumented_metrics(root: &Path) -> Vec<String> {
    let page = "docs/src/reference/metrics.md";
    let Ok(doc) = std::fs::read_to_string(root.join(page)) else {
        return vec![format!("{page}: missing")];
    };
    let mut files = Vec::new();
    let mut ignored = Vec::new();
    collect_files(
        &root.join("observer/src/exposition"),
        "rs",
        &mut files,
        &mut ignored,
    );
    let mut names = BTreeSet::new();
    for f in files {
        if let Ok(text) = std::fs::read_to_string(&f) {
            names.extend(metric_names(&text));
        }
    }
    if names.is_empty() {
        return vec!["observer/src/exposition: no metric names found".into()];
    }
    names
        .into_iter()
        .filter(|n| !doc.contains(n.as_str()))
        .map(|n| format!("{page}: metric {n} (observer/src/exposition) is not documented"))
        .collect()
}

/// Config keys (fields of the `Deserialize` structs in observer/src/config/mod.rs and
/// stalls.rs) that the configuration reference or the packaged config file does not name.
fn undocumented_config_keys(root: &Path) -> Vec<String> {
    let mut keys = BTreeSet::new();
    for f in [
        "observer/src/config/mod.rs",
        "observer/src/config/stalls.rs",
    ] {
        match std::fs::read_to_string(root.join(f)) {
            Ok(t) => keys.extend(config_keys(&t)),
            Err(e) => return vec![format!("{f}: {e}")],
        }
    }
    let mut problems = Vec::new();
    for doc in ["docs/src/reference/config.md", "packaging/observer.toml"] {
        let Ok(text) = std::fs::read_to_string(root.join(doc)) else {
            problems.push(format!("{doc}: missing"));
            continue;
        };
        for k in &keys {
            if !has_word(&text, k) {
                problems.push(format!(
                    "{doc}: config key {k} (observer/src/config/) is not there"
                ));
            }
        }
    }
    problems
}

/// `source` up to its `#[cfg(test)] mod … {` (a `#[cfg(test)]` on a single item is kept out of
/// the way by the caller's own filters, not cut here).
fn without_test_module(source: &str) -> &str {
    let mut at = 0;
    for line in source.split_inclusive('\n') {
        let next = &source[at + line.len()..];
        if line.trim_end() == "#[cfg(test)]"
            && next
                .lines()
                .next()
                .is_some_and(|l| l.starts_with("mod ") && l.ends_with('{'))
        {
            return &source[..at];
        }
        at += line.len();
    }
    source
}

/// Whether `word` occurs in `text` with no identifier character on either side.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(word).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(ident)
            && !text[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// The `pub` field names of the structs a source derives `Deserialize` for.
pub(crate) fn config_keys(source: &str) -> BTreeSet<String> {
    let code = without_test_module(source);
    let mut out = BTreeSet::new();
    let (mut derives, mut inside) = (false, false);
    for line in code.lines() {
        if line.starts_with("#[derive(") {
            derives = line.contains("Deserialize");
        } else if line.starts_with("pub struct ") && line.ends_with('{') {
            inside = derives;
            derives = false;
        } else if line.starts_with('}') {
            inside = false;
        } else if inside {
            if let Some(field) = line
                .strip_prefix("    pub ")
                .and_then(|f| f.split_once(':'))
            {
                out.insert(field.0.trim().to_string());
            }
        }
    }
    out
}

/// The metric names a Rust source declares: string literals starting `blkobs_` or `process_`,
/// outside comments and before its `#[cfg(test)]` module.
pub(crate) fn metric_names(source: &str) -> BTreeSet<String> {
    let code = without_test_module(source);
    let mut out = BTreeSet::new();
    for line in code.lines() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        for (i, part) in line.split('"').enumerate() {
            let literal = i % 2 == 1;
            if literal
                && (part.starts_with("blkobs_") || part.starts_with("process_"))
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                out.insert(part.to_string());
            }
        }
    }
    out
}

fn collect_files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>, problems: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        problems.push(format!("{}: unreadable", dir.display()));
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let path = e.path();
        if path.is_dir() {
            collect_files(&path, ext, out, problems);
        } else if path.extension().is_some_and(|x| x == ext) {
            out.push(path);
        }
    }
}

/// Checks every `docs/<path>.md[#anchor]` named in the source files under `dir`.
fn code_citations(
    root: &Path,
    dir: &Path,
    anchors: &mut HashMap<PathBuf, BTreeSet<String>>,
    problems: &mut Vec<String>,
) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                code_citations(root, &path, anchors, problems);
            }
            continue;
        }
        // This file's own tests cite made-up pages.
        if path.ends_with("xtask/src/docs.rs") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for (line, cited) in doc_citations(&text) {
            if let Some(p) = check_link(&root.join("README.md"), &cited, anchors) {
                problems.push(format!("{}:{line}: cites {cited}: {p}", shown(root, &path)));
            }
        }
    }
}

/// `(line, "docs/….md#anchor")` of each documentation page a source file names.
pub(crate) fn doc_citations(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("docs/") {
            let before = rest[..at].chars().next_back();
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "_./-#".contains(c)))
                .unwrap_or(tail.len());
            let cited = tail[..len].trim_end_matches(['.', '#']);
            let page = cited.split('#').next().unwrap_or("");
            if page.ends_with(".md")
                && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '/')
            {
                out.push((i + 1, cited.to_string()));
            }
            rest = &tail[len.max(5)..];
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

/// The slug GitHub and mdBook give a heading's text.
pub(crate) fn slug(heading: &str) -> String {
    let text = strip_inline(heading);
    let mut s = String::new();
    for c in text.trim().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            s.extend(c.to_lowercase());
        } else if c.is_whitespace() {
            s.push('-');
        }
    }
    s
}

/// A heading's visible text: links `[text](url)` become `text`, images go.
fn strip_inline(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        match after.find("](") {
            Some(j) if !after[..j].contains('[') => {
                let text = &after[..j];
                let tail = &after[j + 2..];
                match tail.find(')') {
                    Some(k) => {
                        if !out.ends_with('!') {
                            out.push_str(text);
                        } else {
                            out.pop();
                        }
                        rest = &tail[k + 1..];
                    }
                    None => {
                        out.push('[');
                        rest = after;
                    }
                }
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Lines outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = if t.starts_with("```") {
            Some("```")
        } else if t.starts_with("~~~") {
            Some("~~~")
        } else {
            None
        };
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The anchors of a page's headings (ATX `#` headings outside code), repeats numbered.
pub(crate) fn headings(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    // Explicit anchors: <a id="x"></a> / <a name="x"></a>.
    for (_, line) in prose(text) {
        for attr in ["id=\"", "name=\""] {
            let mut rest = line;
            while let Some(i) = rest.find(attr) {
                let tail = &rest[i + attr.len()..];
                if let Some(j) = tail.find('"') {
                    out.push(tail[..j].to_string());
                    rest = &tail[j..];
                } else {
                    break;
                }
            }
        }
    }
    out
}

/// `(line, target)` of every inline link `[text](target)` and image outside code (the line
/// of its `](`; the text may start on an earlier line).
pub(crate) fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(end) = tail.find(')') else { break };
            let inner = tail[..end].trim();
            let target = inner
                .strip_prefix('<')
                .and_then(|s| s.split_once('>').map(|(t, _)| t))
                .unwrap_or_else(|| inner.split_whitespace().next().unwrap_or(""));
            // The `[` may be on an earlier line: link text wraps.
            if !target.is_empty() {
                out.push((n, target.to_string()));
            }
            rest = &tail[end..];
        }
    }
    out
}

/// The line with its `code spans` removed (links inside them are examples, not links).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for part in line.split('`') {
        if !in_code {
            out.push_str(part);
        }
        in_code = !in_code;
    }
    out
}

/// Pages under `src` that SUMMARY.md does not list, and SUMMARY entries that do not exist.
fn summary_problems(src: &Path) -> Vec<String> {
    let summary = src.join("SUMMARY.md");
    let Ok(text) = std::fs::read_to_string(&summary) else {
        return vec![format!("{}: missing", summary.display())];
    };
    let listed: BTreeSet<PathBuf> = links(&text)
        .into_iter()
        .filter(|(_, t)| !is_external(t))
        .map(|(_, t)| src.join(t.split('#').next().unwrap_or("")))
        .collect();
    let mut pages = Vec::new();
    let mut problems = Vec::new();
    collect_markdown(src, &mut pages, &mut problems);
    for p in pages {
        if p != summary && !listed.contains(&p) {
            problems.push(format!(
                "docs/src/{}: not listed in docs/src/SUMMARY.md",
                p.strip_prefix(src).unwrap_or(&p).display()
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_counted_in_words_from_the_top() {
        let near = "# t\n\n## What it answers\n\n- **Q?** `cmd`. → [p](p.md)\n\n## Install\n→ x\n";
        assert!(answer_distances(near).is_empty());
        let far = format!(
            "# t\n{}\n## What it answers\n- **Q?** → [p](p.md)\n",
            "w ".repeat(300)
        );
        let p = answer_distances(&far);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("308 words"), "{p:?}");
        assert_eq!(answer_distances("# t\n## What it answers\nnone\n").len(), 1);
        assert_eq!(answer_distances("# t\n").len(), 1);
    }

    #[test]
    fn slugs_follow_github_and_mdbook() {
        assert_eq!(
            slug("Stacked, bio-based disks (device-mapper, md, NVMe multipath)"),
            "stacked-bio-based-disks-device-mapper-md-nvme-multipath"
        );
        assert_eq!(
            slug("I/O priority: `ioprio_class`"),
            "io-priority-ioprio_class"
        );
        assert_eq!(
            slug("What is stuck right now: `/stalls`"),
            "what-is-stuck-right-now-stalls"
        );
        assert_eq!(
            slug("Exemplars: from a latency bucket to the slow request"),
            "exemplars-from-a-latency-bucket-to-the-slow-request"
        );
        assert_eq!(slug("See [the API](api.md#x) now"), "see-the-api-now");
        assert_eq!(slug("1. 5.10's verifier"), "1-510s-verifier");
        assert_eq!(slug("  Two  spaces "), "two--spaces");
    }

    #[test]
    fn repeated_headings_are_numbered_and_code_is_skipped() {
        let t =
            "# A\n## Tests\n```sh\n# not a heading\n```\n## Tests\n#nohash\n<a id=\"x1\"></a>\n";
        assert_eq!(headings(t), ["a", "tests", "tests-1", "x1"]);
    }

    #[test]
    fn links_are_found_outside_code() {
        let t = "see [a](a.md#b) and `[c](c.md)` and ![img](i.png \"t\")\n\
                 ```\n[d](d.md)\n```\n[e](<e f.md>) [g](https://x.org/y.md) (not [a link] (x))\n\
                 [wrapped\nlink](w.md)\n";
        assert_eq!(
            links(t),
            [
                (1, "a.md#b".to_string()),
                (1, "i.png".to_string()),
                (5, "e f.md".to_string()),
                (5, "https://x.org/y.md".to_string()),
                (7, "w.md".to_string()),
            ]
        );
    }

    #[test]
    fn metric_names_come_from_code_not_comments_or_tests() {
        let src = "//! `blkobs_in_a_comment` \n\
                   const D: MetricDesc = MetricDesc { name: \"blkobs_requests_total\", help: \"blkobs_x y\" };\n\
                   let c = class_counter(\"blkobs_slow_requests_total\", \"...\");\n\
                   #[cfg(test)]\nmod tests {\n    const T: &str = \"blkobs_only_in_tests\";\n}\n";
        let names: Vec<_> = metric_names(src).into_iter().collect();
        assert_eq!(
            names,
            ["blkobs_requests_total", "blkobs_slow_requests_total"]
        );
    }

    #[test]
    fn config_keys_are_the_deserialized_structs_fields() {
        let src = "#[cfg(test)]\nmod fuzz;\n#[derive(Debug)]\npub struct NotConfig {\n    pub secret: u8,\n}\n\
                   #[derive(Clone, Debug, Deserialize, PartialEq)]\n#[serde(default)]\n\
                   pub struct Stalls {\n    /// Doc.\n    pub episode: Duration,\n    \
                   pub history_requests: usize,\n    private: u8,\n}\n\
                   #[cfg(test)]\nmod tests {\n#[derive(Deserialize)]\npub struct T {\n    pub t: u8,\n}\n}\n";
        let keys: Vec<_> = config_keys(src).into_iter().collect();
        assert_eq!(keys, ["episode", "history_requests"]);
        assert!(has_word("# history_requests = 1", "history_requests"));
        assert!(!has_word("slow_default_x = 1", "slow_default"));
    }

    #[test]
    fn code_citations_are_found() {
        let t = "// see docs/src/a.md#b-c, and docs/fslog.md.\n\
                 x = \"(docs/src/operations.md \\\"Securing\\\")\"; ../docs/openapi.yaml\n";
        assert_eq!(
            doc_citations(t),
            [
                (1, "docs/src/a.md#b-c".to_string()),
                (1, "docs/fslog.md".to_string()),
                (2, "docs/src/operations.md".to_string()),
            ]
        );
    }

    #[test]
    fn link_targets_are_resolved_with_their_anchors() {
        let dir = std::env::temp_dir().join(format!("xtask-docs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/p.md"), "# Page\n## A `b` c\n").unwrap();
        let page = dir.join("index.md");
        std::fs::write(&page, "# Index\n").unwrap();
        let mut cache = HashMap::new();
        assert_eq!(check_link(&page, "sub/p.md#a-b-c", &mut cache), None);
        assert_eq!(check_link(&page, "#index", &mut cache), None);
        assert_eq!(
            check_link(&page, "https://example.org/#nope", &mut cache),
            None
        );
        assert!(check_link(&page, "sub/p.md#nope", &mut cache)
            .unwrap()
            .contains("no heading #nope"));
        assert!(check_link(&page, "sub/q.md", &mut cache)
            .unwrap()
            .contains("does not exist"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
