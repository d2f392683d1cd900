//! The daemon's layering, as `observer/src/lib.rs` states it, held: every `crate::<module>`
//! path in a module's files (imports and paths in code alike; comments are not read) names a
//! module of a lower layer. The layers are read from lib.rs' doc itself (its numbered list), so
//! the order is written once. No root, no kernel.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// lib.rs' numbered list "//! N. [`a`], [`b`]": module → layer number (1 = top).
fn layers() -> BTreeMap<String, usize> {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
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
                "lib.rs layer {n}: {item:?} is not a [`module`] link"
            );
            assert!(
                out.insert(name.to_string(), n).is_none(),
                "{name} in two layers"
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

/// Every edge against the layers: (file, module it is in, module it names).
fn back_edges(layers: &BTreeMap<String, usize>) -> Vec<String> {
    let mut bad = Vec::new();
    for (module, &layer) in layers {
        let mut files = Vec::new();
        let dir = src().join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
        let file = src().join(format!("{module}.rs"));
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
            let rel = f.strip_prefix(src()).unwrap();
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
                        "{}: crate::{used}, a module lib.rs' layers do not list",
                        f.display()
                    ));
                    continue;
                };
                if to <= layer {
                    bad.push(format!(
                        "{}: {module} (layer {layer}) uses crate::{used} (layer {to})",
                        f.strip_prefix(src()).unwrap().display()
                    ));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

#[test]
fn every_module_is_in_a_layer() {
    let layers = layers();
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert!(declared.len() >= 10, "lib.rs declares {declared:?}");
    for m in &declared {
        assert!(layers.contains_key(*m), "lib.rs: module {m} is in no layer");
    }
    assert_eq!(
        layers.len(),
        declared.len(),
        "layers {layers:?} vs modules {declared:?}"
    );
}

#[test]
fn imports_flow_down_the_layers() {
    let bad = back_edges(&layers());
    assert!(
        bad.is_empty(),
        "imports against observer/src/lib.rs' layers (move the item to the layer that owns \
         it, or change the layers there):\n{}",
        bad.join("\n")
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
    let mut l = layers();
    l.insert("time".into(), 0);
    assert!(
        back_edges(&l)
            .iter()
            .any(|e| e.contains("bpf (layer") && e.ends_with("uses crate::time (layer 0)")),
        "{:?}",
        back_edges(&l)
    );
}
