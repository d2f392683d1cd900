//! The layering of each crate, as its root file's doc states it, held: every `crate::<module>`
//! path in a module's files (imports and paths in code alike; comments are not read) names a
//! module of a lower layer. The layers are read from the crate doc itself (its numbered list),
//! so the order is written once. Three crates: the daemon (`observer/src/lib.rs`), the eBPF
//! programs (`observer-ebpf/src/main.rs`) and their library (`observer-ebpf/src/lib.rs`). No
//! root, no kernel: the eBPF sources are read as text, not built.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

/// A crate whose root file's doc lists its layers.
struct Crate {
    /// Its `src/` directory.
    src: PathBuf,
    /// Its root file in `src/` (`lib.rs`, `main.rs`).
    root: &'static str,
}

impl Crate {
    /// The root file, as the messages name it (from the workspace root).
    fn name(&self) -> String {
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let root = self.src.join(self.root);
        root.strip_prefix(ws).unwrap_or(&root).display().to_string()
    }
}

/// The daemon: observer/src/lib.rs.
fn observer() -> Crate {
    Crate {
        src: Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        root: "lib.rs",
    }
}

fn ebpf_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../observer-ebpf/src")
        .canonicalize()
        .unwrap()
}

/// The eBPF programs (binary `observer`): observer-ebpf/src/main.rs.
fn ebpf_programs() -> Crate {
    Crate {
        src: ebpf_src(),
        root: "main.rs",
    }
}

/// The eBPF programs' library (`observer_ebpf`): observer-ebpf/src/lib.rs.
fn ebpf_lib() -> Crate {
    Crate {
        src: ebpf_src(),
        root: "lib.rs",
    }
}

fn crates() -> [Crate; 3] {
    [observer(), ebpf_programs(), ebpf_lib()]
}

/// The root file's numbered list "//! N. [`a`], [`b`]": module → layer number (1 = top).
fn layers(c: &Crate) -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string(c.src.join(c.root)).unwrap();
    let root = c.name();
    let mut out = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("//! ") else {
            continue;
        };
        let Some((n, items)) = rest.split_once(". ") else {
            continue;
        };
        let Ok(n) = n.trim().parse::<usize>() else {
            continue;
        };
        for item in items.split(',') {
            let name = item.trim().trim_start_matches("[`").trim_end_matches("`]");
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{root} layer {n}: {item:?} is not a [`module`] link"
            );
            assert!(
                out.insert(name.to_string(), n).is_none(),
                "{root}: {name} in two layers"
            );
        }
    }
    out
}

/// Source without comments (`//` to the end of the line, `/* */`, nested) and without the
/// contents of string and char literals (raw strings too), so that neither hides nor invents
/// a path.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if rest.starts_with(b"r\"") || rest.starts_with(b"r#") {
            // r"..", r#".."#: ends at the quote followed by as many #.
            let hashes = rest[1..].iter().take_while(|c| **c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let end: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&end) {
                i += 1;
            }
            i += end.len();
            out.extend_from_slice(b"\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.extend_from_slice(b"\"\"");
        } else if b[i] == b'\'' && (rest.get(2) == Some(&b'\'') || rest.get(1) == Some(&b'\\')) {
            // A char literal ('"', '\n', '\''); a lifetime ('a) has no closing quote there.
            i += 1;
            while i < b.len() && b[i] != b'\'' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.extend_from_slice(b"' '");
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The top-level modules named by paths in `text` that start at the crate root: `crate::a::..`,
/// each item of `crate::{a::.., b, c::{..}}`, and `super::` climbing `depth` levels (the file's
/// depth below the crate root: 1 for `a.rs` and `a/mod.rs`, 2 for `a/b.rs`).
fn uses(text: &str, depth: usize) -> Vec<String> {
    let text = code(text);
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    // Inline modules open at `at` (`mod tests { use super::super::x; }`): each adds a level.
    let inline_mods = |s: &str, at: usize| -> usize {
        // pending: 1 after the word `mod`, 2 after `mod <name>`, until `{` or anything else.
        let (mut stack, mut pending, mut word) = (Vec::new(), 0u8, String::new());
        for c in s[..at].chars().chain(std::iter::once(' ')) {
            if c.is_ascii_alphanumeric() || c == '_' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                pending = match (pending, word.as_str()) {
                    (_, "mod") => 1,
                    (1, _) => 2,
                    _ => 0,
                };
                word.clear();
            }
            match c {
                '{' => {
                    stack.push(pending == 2);
                    pending = 0;
                }
                '}' => {
                    stack.pop();
                    pending = 0;
                }
                c if c.is_whitespace() => {}
                _ => pending = 0,
            }
        }
        stack.iter().filter(|m| **m).count()
    };
    let root = |s: &str, at: usize| -> Option<usize> {
        // `crate::` not preceded by an identifier character (`my_crate::` is another crate).
        let before = s[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        if s[at..].starts_with("crate::") {
            return Some(at + "crate::".len());
        }
        let mut j = at;
        let mut k = 0;
        while s[j..].starts_with("super::") {
            j += "super::".len();
            k += 1;
        }
        (k > 0 && k >= depth + inline_mods(s, at)).then_some(j)
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let next = ["crate::", "super::"]
            .iter()
            .filter_map(|p| text[at..].find(p).map(|i| at + i))
            .min();
        let Some(i) = next else { break };
        let Some(start) = root(&text, i) else {
            at = i + "super::".len();
            while text[at..].starts_with("super::") {
                at += "super::".len();
            }
            continue;
        };
        let rest = &text[start..];
        at = start;
        let Some(group) = rest.strip_prefix('{') else {
            out.push(ident(rest));
            continue;
        };
        let (mut depth, mut item) = (0usize, String::new());
        for c in group.chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(ident(&item));
                    item.clear();
                    continue;
                }
                _ => {}
            }
            item.push(c);
        }
        out.push(ident(&item));
    }
    out.retain(|m| !m.is_empty() && m != "self" && m != "super");
    out
}

fn rust_files(p: &Path, out: &mut Vec<PathBuf>) {
    if p.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            rust_files(&e.unwrap().path(), out);
        }
    } else if p.extension().is_some_and(|e| e == "rs") {
        out.push(p.to_path_buf());
    }
}

/// Every edge against the layers of crate `c`: (file, module it is in, module it names).
fn back_edges(c: &Crate, layers: &BTreeMap<String, usize>) -> Vec<String> {
    let src = &c.src;
    let root = c.name();
    let mut bad = Vec::new();
    for (module, &layer) in layers {
        let mut files = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let file = src.join(format!("{module}.rs"));
        if file.is_file() {
            files.push(file);
        }
        assert!(
            !files.is_empty(),
            "module {module}: no {module}.rs or {module}/"
        );
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            // Depth below the crate root: a.rs and a/mod.rs 1, a/b.rs and a/b/mod.rs 2.
            let rel = f.strip_prefix(src).unwrap();
            let parts = rel.components().count();
            let depth = if rel.ends_with("mod.rs") {
                parts - 1
            } else {
                parts
            };
            for used in uses(&text, depth) {
                if used == *module {
                    continue;
                }
                let Some(&to) = layers.get(&used) else {
                    bad.push(format!(
                        "{}: crate::{used}, a module {root}'s layers do not list",
                        f.display()
                    ));
                    continue;
                };
                if to <= layer {
                    bad.push(format!(
                        "{}: {module} (layer {layer}) uses crate::{used} (layer {to})",
                        rel.display()
                    ));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

/// The modules the root file declares (`mod a;`, `pub mod a;`, `pub(crate) mod a;`, at the
/// start of a line).
fn declared(c: &Crate) -> Vec<String> {
    let text = std::fs::read_to_string(c.src.join(c.root)).unwrap();
    text.lines()
        .filter_map(|l| {
            let l = l
                .strip_prefix("pub(crate) ")
                .or(l.strip_prefix("pub "))
                .unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn every_module_is_in_a_layer() {
    for (c, at_least) in crates().iter().zip([10, 8, 3]) {
        let layers = layers(c);
        let declared = declared(c);
        let root = c.name();
        assert!(declared.len() >= at_least, "{root} declares {declared:?}");
        for m in &declared {
            assert!(layers.contains_key(m), "{root}: module {m} is in no layer");
        }
        assert_eq!(
            layers.len(),
            declared.len(),
            "{root}: layers {layers:?} vs modules {declared:?}"
        );
    }
}

#[test]
fn imports_flow_down_the_layers() {
    let bad: Vec<String> = crates()
        .iter()
        .flat_map(|c| {
            let root = c.name();
            back_edges(c, &layers(c))
                .into_iter()
                .map(move |e| format!("{root} layers: {e}"))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "imports against the layers their crate's root file lists (move the item to the layer \
         that owns it, or change the layers there):\n{}",
        bad.join("\n")
    );
}

/// The eBPF programs' modules outside `probes/` never name it: the probes are the top, and
/// what two of them share lives in a module below (bio_end.rs).
#[test]
fn no_ebpf_module_uses_the_probes() {
    let c = ebpf_programs();
    let layers = layers(&c);
    assert_eq!(
        layers.get("probes"),
        Some(&1),
        "main.rs: probes is not the top layer"
    );
    assert!(
        layers.iter().all(|(m, &n)| n > 1 || m == "probes"),
        "main.rs: a module shares the top layer with probes: {layers:?}"
    );
}

#[test]
fn the_parser_sees_grouped_and_nested_paths() {
    let text = "use crate::{\n    a::{b, c::D},\n    e,\n    f::g, // crate::h\n};\n\
                /* crate::i /* nested */ crate::i2 */ let s = \"crate::l\"; let q = '\"';\n\
                let _ = crate::j::k(); let r = r#\"crate::m\"#; my_crate::n();\n\
                use crate::{self as x}; use super::super::o::P; use super::p;";
    // From a/b.rs (depth 2): super::super:: is the root, super:: is a/.
    assert_eq!(uses(text, 2), ["a", "e", "f", "j", "o"]);
    // Inside an inline module one more `super::` is needed.
    assert_eq!(
        uses("mod tests { use super::q; use super::super::r; }", 1),
        ["r"]
    );
    // From a.rs (depth 1): super:: is the root too.
    assert!(uses(text, 1).ends_with(&["o".to_string(), "p".to_string()]));
    // And a back edge is found: with `time` moved to the top layer, bpf's use of it is one.
    let c = observer();
    let mut l = layers(&c);
    l.insert("time".into(), 0);
    assert!(
        back_edges(&c, &l)
            .iter()
            .any(|e| e.contains("bpf (layer") && e.ends_with("uses crate::time (layer 0)")),
        "{:?}",
        back_edges(&c, &l)
    );
    // In the eBPF programs too: with `maps` moved to the top, inflight's use of it is one.
    let c = ebpf_programs();
    let mut l = layers(&c);
    l.insert("maps".into(), 0);
    assert!(
        back_edges(&c, &l)
            .iter()
            .any(|e| e.starts_with("inflight.rs: inflight (layer")
                && e.ends_with("uses crate::maps (layer 0)")),
        "{:?}",
        back_edges(&c, &l)
    );
}
