//! Structure rules for `src/`, kept from regressing (issues 11 and 24). Adding a destination should
//! be one new folder plus one line; that holds only while no file imports another that
//! imports it back, directly or through others (an import circle ties modules together so
//! none can change or be read alone), and while files stay small enough to read whole.
//!
//! The scanners are std-only over the source text (no parser, no dependency); the format
//! test runs rustfmt over every file, which `cargo fmt` misses behind the macro.
//! Reading a failure: the cycle test prints each circle as its files and the `a -> b`
//! edges inside it (a `crate::`/`super::`/`self::` path or child-module path in `a` that
//! lands in file `b`); break one edge, usually by moving the shared item down to a module
//! both can use. The size test prints each file over the limit with its count of lines
//! outside `#[cfg(test)] mod … { }` blocks; split the file into a folder of smaller ones.
//! The function test prints each function over its limit with its length in lines (its
//! body's braces matched with strings, characters and comments blanked out); split it into
//! named steps. The modules a `destinations!` invocation lists are edges of the file that
//! invokes it (the macro names their config and sink types), so a circle through the
//! registry is found like any other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const MAX_LINES: usize = 450;
const MAX_FN_LINES: usize = 120;
const NOT_CHILDREN: [&str; 6] = ["crate", "super", "self", "std", "core", "alloc"];

/// Every `.rs` file under `src/`, by path relative to it with `/` separators.
fn source_files() -> BTreeMap<String, String> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read a directory of src/") {
            let path = entry.expect("read a directory entry").path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(root).expect("path under src/");
                let rel = rel.components().map(|c| c.as_os_str().to_string_lossy());
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.insert(rel.collect::<Vec<_>>().join("/"), text);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    walk(&root, &root, &mut out);
    out
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn starts_with(t: &[char], i: usize, s: &str) -> bool {
    s.chars().enumerate().all(|(k, c)| t.get(i + k) == Some(&c))
}

fn text_of(t: &[char], a: usize, b: usize) -> String {
    t[a..b].iter().collect()
}

fn skip_ws(t: &[char], i: usize) -> usize {
    i + t[i.min(t.len())..]
        .iter()
        .take_while(|c| c.is_whitespace())
        .count()
}

/// End of the identifier at `i` (`[A-Za-z_][A-Za-z0-9_]*`, or lowercase only), if one starts there.
fn ident_end(t: &[char], i: usize, lower: bool) -> Option<usize> {
    let ok =
        |c: &char| matches!(c, 'a'..='z' | '0'..='9' | '_') || !lower && c.is_ascii_uppercase();
    t.get(i).filter(|c| ok(c) && !c.is_ascii_digit())?;
    Some(i + t[i..].iter().take_while(|c| ok(c)).count())
}

/// End of the `::a::b` segments (possibly none) starting at `j`.
fn segments_end(t: &[char], mut j: usize) -> usize {
    while let Some(e) = starts_with(t, j, "::")
        .then(|| ident_end(t, j + 2, false))
        .flatten()
    {
        j = e;
    }
    j
}

/// Removes each `#[cfg(test)] mod name {` block with its balanced braces.
fn strip_tests(text: &str) -> String {
    let mut t: Vec<char> = text.chars().collect();
    'again: loop {
        for start in (0..t.len()).filter(|&i| starts_with(&t, i, "#[cfg(test)]")) {
            let i = skip_ws(&t, start + 12);
            let name = skip_ws(&t, i + 3);
            let after = name
                + t[name.min(t.len())..]
                    .iter()
                    .take_while(|c| is_word(**c))
                    .count();
            let open = skip_ws(&t, after);
            if !starts_with(&t, i, "mod")
                || name == i + 3
                || after == name
                || t.get(open) != Some(&'{')
            {
                continue;
            }
            let mut depth = 0;
            let end = (open..t.len()).find(|&j| {
                depth += i32::from(t[j] == '{') - i32::from(t[j] == '}');
                depth == 0
            });
            t.drain(start..end.map_or(t.len(), |j| j + 1));
            continue 'again;
        }
        return t.into_iter().collect();
    }
}

/// Drops `//` comments to the end of the line, then `/* */` comments.
fn strip_comments(text: &str) -> String {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.find("//").map_or(l, |k| &l[..k]))
        .collect();
    let (mut out, mut rest) = (String::new(), lines.join("\n"));
    while let Some(a) = rest.find("/*") {
        let Some(b) = rest[a + 2..].find("*/") else {
            break;
        };
        out.push_str(&rest[..a]);
        rest = rest[a + 2 + b + 2..].to_string();
    }
    out + &rest
}

/// `crate`, `super` or `self` at `i`, not after `$` or a word character, followed by `::`.
fn keyword_at(t: &[char], i: usize) -> Option<&'static str> {
    if i > 0 && (t[i - 1] == '$' || is_word(t[i - 1])) {
        return None;
    }
    ["crate", "super", "self"]
        .into_iter()
        .find(|k| starts_with(t, i, k) && starts_with(t, i + k.len(), "::"))
}

type Paths = Vec<(&'static str, String)>;

/// Expands the items of a `{ ... }` group under `prefix` into `(keyword, tail)` paths.
fn expand_group(kw: &'static str, prefix: &str, body: &str, out: &mut Paths) {
    let (mut items, mut depth, mut cur) = (Vec::new(), 0i32, String::new());
    for ch in body.chars() {
        depth += i32::from(ch == '{') - i32::from(ch == '}');
        if ch == ',' && depth == 0 {
            items.push(std::mem::take(&mut cur));
        } else {
            cur.push(ch);
        }
    }
    items.push(cur);
    for item in items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()) {
        let run = item
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(item.len());
        let head = item[..run]
            .strip_suffix("::")
            .filter(|h| h.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'));
        match head
            .filter(|_| item[run..].starts_with('{') && item.ends_with('}') && item.len() > run + 1)
        {
            Some(head) => expand_group(
                kw,
                &format!("{prefix}::{head}"),
                &item[run + 1..item.len() - 1],
                out,
            ),
            None => match item.split(" as ").next().unwrap_or("").trim() {
                "self" | "*" => out.push((kw, prefix.to_string())),
                name => out.push((kw, format!("{prefix}::{name}"))),
            },
        }
    }
}

/// Every path in `text` that may name a module, as `(crate|super|self, "::a::b")`.
fn paths_in(text: &str, here: &[String], mods: &BTreeMap<Vec<String>, String>) -> Paths {
    let t: Vec<char> = text.chars().collect();
    let child = |name: &String| {
        !NOT_CHILDREN.contains(&name.as_str())
            && mods.contains_key(&[here, std::slice::from_ref(name)].concat())
    };
    let mut paths = Vec::new();
    // `crate::a::{b, c::{d}};` groups, cut out of `rest` before the plain-path scan.
    let (mut rest, mut i) = (Vec::new(), 0);
    while i < t.len() {
        if let Some(kw) = keyword_at(&t, i) {
            let j = segments_end(&t, i + kw.len());
            let semi = t[j..].iter().position(|c| *c == ';').map(|k| j + k);
            if let Some(semi) =
                semi.filter(|&s| starts_with(&t, j, "::{") && s >= j + 4 && t[s - 1] == '}')
            {
                expand_group(
                    kw,
                    &text_of(&t, i + kw.len(), j),
                    &text_of(&t, j + 3, semi - 1),
                    &mut paths,
                );
                i = semi + 1;
                continue;
            }
        }
        rest.push(t[i]);
        i += 1;
    }
    // Plain `crate::a::b` / `super::super::x` paths; a segment starting `super` is `super`.
    let mut i = 0;
    while i < rest.len() {
        let Some(kw) = keyword_at(&rest, i) else {
            i += 1;
            continue;
        };
        let mut j = i + kw.len();
        while let Some(e) = starts_with(&rest, j, "::")
            .then(|| {
                if starts_with(&rest, j + 2, "super") {
                    Some(j + 7)
                } else {
                    ident_end(&rest, j + 2, false)
                }
            })
            .flatten()
        {
            j = e;
        }
        if j > i + kw.len() {
            paths.push((kw, text_of(&rest, i + kw.len(), j)));
        }
        i = j;
    }
    // Inline `child::x` paths and `use child::a::b;` / `use child::{...};` naming declared children.
    for i in (0..t.len()).filter(|&i| i == 0 || !is_word(t[i - 1])) {
        let after_colon = i > 0 && t[i - 1] == ':';
        if let Some(e) =
            ident_end(&t, i, true).filter(|&e| !after_colon && starts_with(&t, e, "::"))
        {
            if child(&text_of(&t, i, e)) {
                paths.push(("self", format!("::{}", text_of(&t, i, e))));
            }
        }
        if !starts_with(&t, i, "use") || !t.get(i + 3).is_some_and(|c| c.is_whitespace()) {
            continue;
        }
        let a = skip_ws(&t, i + 3);
        let Some(b) = ident_end(&t, a, true) else {
            continue;
        };
        let j = segments_end(&t, b);
        let semi = t[j..]
            .iter()
            .position(|c| *c == ';')
            .map_or(t.len(), |s| j + s);
        let last = t[..semi].iter().rposition(|c| !c.is_whitespace());
        let group_ok = last.is_some_and(|c| c > j + 2 && t[c] == '}') && starts_with(&t, j, "::{");
        if semi < t.len() && (skip_ws(&t, j) == semi || group_ok) && child(&text_of(&t, a, b)) {
            paths.push(("self", format!("::{}", text_of(&t, a, j))));
        }
    }
    paths
}

fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(String::from)
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// Edges `file -> file` between source files, built like `tools/cycles.py`.
fn import_graph(files: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let mut mods: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for rel in files.keys() {
        // lib.rs and main.rs are both the root module; the library's root wins.
        if rel != "main.rs" || !files.contains_key("lib.rs") {
            mods.insert(module_of(rel), rel.clone());
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (rel, text) in files {
        if rel.rsplit('/').next() == Some("tests.rs") || rel.contains("/tests/") {
            continue;
        }
        let here = module_of(rel);
        for (kw, tail) in paths_in(&strip_comments(&strip_tests(text)), &here, &mods) {
            let mut base = if kw == "crate" {
                Vec::new()
            } else {
                here.clone()
            };
            let lead = (kw == "super").then_some("super");
            for seg in lead
                .into_iter()
                .chain(tail.split("::").filter(|s| !s.is_empty()))
            {
                match seg {
                    "super" => drop(base.pop()),
                    _ => base.push(seg.to_string()),
                }
            }
            let target = (0..=base.len()).rev().find_map(|n| mods.get(&base[..n]));
            if let Some(target) =
                target.filter(|t| *t != rel && t.rsplit('/').next() != Some("tests.rs"))
            {
                edges.entry(rel.clone()).or_default().insert(target.clone());
            }
        }
        for module in macro_modules(text) {
            let target = mods.get(&[here.clone(), vec![module]].concat());
            if let Some(target) = target.filter(|t| *t != rel) {
                edges.entry(rel.clone()).or_default().insert(target.clone());
            }
        }
    }
    edges
}

/// The modules a `destinations! { … Name = "type" in module: Config => Sink; … }`
/// invocation in `text` lists: the macro declares them and names their types.
fn macro_modules(text: &str) -> Vec<String> {
    let Some(start) = text.find("destinations! {") else {
        return Vec::new();
    };
    let body = &text[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    body.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(" in ")?;
            let (module, _) = rest.split_once(':')?;
            let module = module.trim();
            (!module.is_empty() && module.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
                .then(|| module.to_string())
        })
        .collect()
}

/// `text` with the contents of string and character literals and of comments replaced by
/// spaces (line breaks kept), so braces inside them do not count.
fn blank_literals(text: &str) -> String {
    let t: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < t.len() {
        let c = t[i];
        let next = t.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < t.len() && t[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < t.len() && !(t[i] == '*' && t.get(i + 1) == Some(&'/')) {
                out.push(blank(t[i]));
                i += 1;
            }
            out.push_str("  ");
            i += 2;
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (i == 0 || !is_word(t[i - 1]))
        {
            let hashes = t[i + 1..].iter().take_while(|c| **c == '#').count();
            if t.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let body_start = i + 2 + hashes;
            let end = (body_start..t.len())
                .find(|&k| starts_with(&t, k, &close))
                .map_or(t.len(), |k| k + close.chars().count());
            out.extend(t[i..end].iter().map(|c| blank(*c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < t.len() && t[i] != '"' {
                if t[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < t.len() {
                    out.push(blank(t[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime ('a).
            let len = if next == Some('\\') {
                t[i + 2..].iter().position(|c| *c == '\'').map(|p| p + 3)
            } else {
                (t.get(i + 2) == Some(&'\'')).then_some(3)
            };
            match len {
                Some(n) => {
                    out.extend(std::iter::repeat_n(' ', n.min(t.len() - i)));
                    i += n;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Every function in `text` (outside test modules) longer than `max` lines, from its `fn`
/// to its closing brace: `(name, lines)`.
fn long_functions(text: &str, max: usize) -> Vec<(String, usize)> {
    let t: Vec<char> = blank_literals(&strip_tests(text)).chars().collect();
    let mut out = Vec::new();
    for i in (0..t.len()).filter(|&i| starts_with(&t, i, "fn ") && (i == 0 || !is_word(t[i - 1]))) {
        let name_at = skip_ws(&t, i + 3);
        let Some(name_end) = ident_end(&t, name_at, false) else {
            continue;
        };
        // The body opens at the first `{` after the signature, unless a `;` comes first
        // (a trait method without a body).
        let Some(open) = (name_end..t.len()).find(|&k| t[k] == '{' || t[k] == ';') else {
            continue;
        };
        if t[open] == ';' {
            continue;
        }
        let mut depth = 0;
        let Some(close) = (open..t.len()).find(|&k| {
            depth += i32::from(t[k] == '{') - i32::from(t[k] == '}');
            depth == 0
        }) else {
            continue;
        };
        let lines = t[i..=close].iter().filter(|c| **c == '\n').count() + 1;
        if lines > max {
            out.push((text_of(&t, name_at, name_end), lines));
        }
    }
    out
}

/// Strongly connected components of more than one file: files that reach each other.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    fn reach<'a>(
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        from: &'a String,
    ) -> BTreeSet<&'a String> {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from]);
        while let Some(v) = todo.pop() {
            todo.extend(
                edges
                    .get(v)
                    .into_iter()
                    .flatten()
                    .filter(|w| seen.insert(*w)),
            );
        }
        seen
    }
    let reached: BTreeMap<&String, BTreeSet<&String>> =
        edges.keys().map(|v| (v, reach(edges, v))).collect();
    let both = |v: &String, w: &String| {
        reached[v].contains(w) && reached.get(w).is_some_and(|r| r.contains(v))
    };
    let comps = edges.keys().map(|v| {
        edges
            .keys()
            .filter(|w| both(v, w))
            .cloned()
            .collect::<Vec<_>>()
    });
    comps.filter(|comp| comp.len() > 1).collect()
}

#[test]
fn no_two_source_files_import_each_other_directly_or_through_others() {
    let files = source_files();
    let edges = import_graph(&files);
    let mut report = String::new();
    for comp in cycles(&edges) {
        report += &format!("cycle of {} files:\n", comp.len());
        for a in &comp {
            for b in edges
                .get(a)
                .into_iter()
                .flatten()
                .filter(|b| comp.contains(b))
            {
                report += &format!("  {a} -> {b}\n");
            }
        }
    }
    assert!(
        report.is_empty(),
        "files of src/ import each other in a circle; break one edge of each:\n{report}"
    );
}

/// Whether a file holds only tests (a `tests.rs` or `*_tests.rs` beside the code).
fn is_test_file(rel: &str) -> bool {
    rel.rsplit('/')
        .next()
        .is_some_and(|n| n == "tests.rs" || n.ends_with("_tests.rs"))
}

/// Every file of `files` over `max` lines outside test modules: `(lines, path)`.
fn long_files(files: &BTreeMap<String, String>, max: usize) -> Vec<(usize, String)> {
    files
        .iter()
        .filter(|(rel, _)| !is_test_file(rel))
        .map(|(rel, text)| (strip_tests(text).lines().count(), rel.clone()))
        .filter(|(count, _)| *count > max)
        .collect()
}

#[test]
fn no_function_in_src_is_longer_than_120_lines() {
    let mut report = String::new();
    for (rel, text) in source_files().iter().filter(|(rel, _)| !is_test_file(rel)) {
        for (name, lines) in long_functions(text, MAX_FN_LINES) {
            report += &format!("  src/{rel}: fn {name}: {lines} lines\n");
        }
    }
    assert!(
        report.is_empty(),
        "functions over {MAX_FN_LINES} lines; split them into named steps:\n{report}"
    );
}

#[test]
fn the_length_rules_fail_on_injected_cases_and_braces_in_literals_do_not_count() {
    let body: String = (0..130).map(|i| format!("    let x{i} = {i};\n")).collect();
    let long = format!("fn long() {{\n{body}}}\n");
    assert_eq!(
        long_functions(&long, MAX_FN_LINES),
        vec![("long".into(), 132)]
    );
    let tricky = "fn short() {\n    let a = \"}}}{\";\n    let b = '{';\n    // }\n    let c = r#\"}\"#;\n}\nfn after() {\n}\n";
    assert!(
        long_functions(tricky, 3).iter().all(|(n, _)| n == "short"),
        "{:?}",
        long_functions(tricky, 3)
    );
    assert_eq!(long_functions(tricky, 10), vec![]);
    let trait_fn = "trait T {\n    fn f(&self);\n}\n";
    assert!(long_functions(trait_fn, 0).iter().all(|(n, _)| n != "f"));
    let files: BTreeMap<String, String> = [
        ("big.rs".to_string(), "// x\n".repeat(MAX_LINES + 1)),
        ("tests.rs".to_string(), "x\n".repeat(900)),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        long_files(&files, MAX_LINES),
        vec![(MAX_LINES + 1, "big.rs".to_string())]
    );
}

#[test]
fn a_circle_through_the_destinations_macro_is_an_import_circle() {
    let files: BTreeMap<String, String> = [
        ("lib.rs", "pub mod config;\npub mod sinks;\n"),
        (
            "sinks/mod.rs",
            "registry::destinations! {\n    /// Doc.\n    Foo = \"foo\" in foo: FooConfig => FooSink;\n}\n",
        ),
        ("sinks/foo/mod.rs", "use crate::config::shared::Thing;\n"),
        ("config/mod.rs", "pub mod shared;\n"),
        ("config/shared.rs", "use crate::sinks::DestinationConfig;\n"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    let comps = cycles(&import_graph(&files));
    assert!(
        comps.iter().any(|c| c.contains(&"sinks/mod.rs".to_string())
            && c.contains(&"sinks/foo/mod.rs".to_string())),
        "{comps:?}"
    );
    assert_eq!(
        macro_modules(&files["sinks/mod.rs"]),
        vec!["foo".to_string()]
    );
}

#[test]
fn no_source_file_exceeds_450_lines_of_non_test_code() {
    let mut over = long_files(&source_files(), MAX_LINES);
    over.sort_by(|a, b| b.cmp(a));
    let report: String = over
        .iter()
        .map(|(count, rel)| format!("  src/{rel}: {count} lines\n"))
        .collect();
    assert!(
        report.is_empty(),
        "files over {MAX_LINES} lines outside #[cfg(test)] mod blocks; split them:\n{report}"
    );
}

/// `cargo fmt` follows `mod` declarations, and the destination modules are declared by the
/// `destinations!` macro, so it never reaches them; rustfmt itself, given every file,
/// does.
#[test]
fn every_source_file_is_formatted_as_rustfmt_leaves_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files: Vec<String> = source_files()
        .keys()
        .map(|rel| root.join("src").join(rel).to_string_lossy().into_owned())
        .collect();
    let rustfmt = std::env::var("RUSTFMT").unwrap_or_else(|_| "rustfmt".into());
    let out = std::process::Command::new(&rustfmt)
        .args(["--edition", "2021", "--check"])
        .args(&files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {rustfmt} (rustup component add rustfmt): {e}"));
    let diff = String::from_utf8_lossy(&out.stdout);
    let unformatted: BTreeSet<&str> = diff
        .lines()
        .filter_map(|l| l.strip_prefix("Diff in "))
        .map(|l| l.trim_end_matches(':'))
        .map(|l| l.rsplit_once(':').map_or(l, |(path, _)| path))
        .collect();
    assert!(
        out.status.success(),
        "files rustfmt would change (run rustfmt --edition 2021 on them):\n  {}\n{}",
        unformatted.into_iter().collect::<Vec<_>>().join("\n  "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// With `autotests = false` cargo builds only the targets Cargo.toml lists, so a new file
/// in `tests/` that is not a module of tests/integration.rs would never run, silently.
#[test]
fn every_file_in_tests_is_a_module_of_the_integration_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let harness =
        std::fs::read_to_string(root.join("integration.rs")).expect("read tests/integration.rs");
    let declared: BTreeSet<String> = harness
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod "))
        .filter_map(|l| l.strip_suffix(';'))
        .map(str::to_string)
        .collect();
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&root).expect("read tests/") {
        let path = entry.expect("read an entry of tests/").path();
        let is_rs = path.extension().is_some_and(|e| e == "rs");
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string);
        if let (true, Some(stem)) = (is_rs, stem) {
            if stem != "integration" {
                files.insert(stem);
            }
        }
    }
    if root.join("common/mod.rs").exists() {
        files.insert("common".to_string());
    }
    let missing: Vec<_> = files.difference(&declared).collect();
    let stale: Vec<_> = declared.difference(&files).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "tests/integration.rs must declare `mod <name>;` for each file in tests/: \
         missing {missing:?}, declared without a file {stale:?}"
    );
}
