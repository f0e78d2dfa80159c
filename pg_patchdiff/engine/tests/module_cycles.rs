//! Issue 16, item 1: the engine's modules form no cycle. A module imports only modules below it,
//! so each can be read, tested and changed without the ones that use it.
//!
//! The check reads `src/**/*.rs`, collects every `crate::` path (in `use` trees, with their
//! `{...}` groups, and inline) and every `super::` / `self::` path, resolves each to the deepest
//! module it names, and fails with the cycle if the graph has one. It runs at two granularities:
//! the top-level concept folders (`text`, `format`, `submission`, ...) and the single module
//! files. `lib.rs` is left out: it is the facade, above everything by design. `#[cfg(test)]`
//! items are left out too: a unit test may reach any module it tests against.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Module path of a source file relative to `src/`: `lib.rs` is the root `""`, `a/mod.rs` is
/// `a`, `a/b.rs` is `a::b`.
fn module_of(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs");
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    if rel == "lib" {
        String::new()
    } else {
        rel.replace('/', "::")
    }
}

/// The source without comment lines and without `#[cfg(test)]` items. Items are found by
/// rustfmt's layout (`cargo fmt --check` is a gate): an item spanning lines ends at the first
/// line holding only its own indentation and `}`.
fn production_code(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if t.starts_with("//") {
            i += 1;
            continue;
        }
        if t == "#[cfg(test)]" {
            i += 1;
            while i < lines.len() && lines[i].trim_start().starts_with("#[") {
                i += 1;
            }
            if i < lines.len() {
                let item = lines[i];
                let indent = &item[..item.len() - item.trim_start().len()];
                let closing = format!("{indent}}}");
                if !item.trim_end().ends_with(';') {
                    while i < lines.len() && lines[i].trim_end() != closing {
                        i += 1;
                    }
                }
            }
            i += 1;
            continue;
        }
        out.push_str(lines[i]);
        out.push('\n');
        i += 1;
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Parses a path tree at `s[*at..]` (after a `crate::`-like prefix): `a::b`, `a::{b, c::d}`,
/// `a::b as c`, `*`. Appends every full path, each as its segments, to `out`.
fn parse_tree(s: &[char], at: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_ws = |at: &mut usize| {
        while *at < s.len() && s[*at].is_whitespace() {
            *at += 1;
        }
    };
    let mut path = prefix;
    loop {
        skip_ws(at);
        if *at < s.len() && s[*at] == '{' {
            *at += 1;
            loop {
                skip_ws(at);
                if *at >= s.len() {
                    return;
                }
                if s[*at] == '}' {
                    *at += 1;
                    return;
                }
                parse_tree(s, at, path.clone(), out);
                skip_ws(at);
                if *at < s.len() && s[*at] == ',' {
                    *at += 1;
                }
            }
        }
        let start = *at;
        while *at < s.len() && is_ident(s[*at]) {
            *at += 1;
        }
        if start == *at {
            // `*` or anything that is not a path segment ends the path here.
            if *at < s.len() && s[*at] == '*' {
                *at += 1;
            }
            out.push(path);
            return;
        }
        let seg: String = s[start..*at].iter().collect();
        if seg != "self" {
            path.push(seg);
        }
        if s[*at..].starts_with(&[':', ':']) {
            *at += 2;
        } else {
            // Skip an `as alias` so the caller's `,` or `}` comes next.
            let mut look = *at;
            while look < s.len() && s[look].is_whitespace() {
                look += 1;
            }
            if s[look..].starts_with(&['a', 's']) && s.get(look + 2).is_some_and(|c| !is_ident(*c))
            {
                *at = look + 2;
                skip_ws(at);
                while *at < s.len() && is_ident(s[*at]) {
                    *at += 1;
                }
            }
            out.push(path);
            return;
        }
    }
}

/// Every module path named in `code` of the module `module`, resolved to absolute segments.
fn named_paths(module: &str, code: &str) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let here: Vec<String> = if module.is_empty() {
        vec![]
    } else {
        module.split("::").map(String::from).collect()
    };
    // `self::` names the module's own children, `super::` its parent's (in `a/b.rs` as in
    // `a/b/mod.rs`, module `a::b`, `super` is `a`).
    let self_base = here.clone();
    let super_base = here[..here.len().saturating_sub(1)].to_vec();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let boundary = i == 0 || !is_ident(s[i - 1]) && s[i - 1] != ':';
        if boundary {
            for (kw, base) in [
                ("crate::", vec![]),
                ("super::", super_base.clone()),
                ("self::", self_base.clone()),
            ] {
                let k: Vec<char> = kw.chars().collect();
                if s[i..].starts_with(&k) {
                    let mut at = i + k.len();
                    parse_tree(&s, &mut at, base, &mut out);
                    i = at;
                    break;
                }
            }
        }
        i += 1;
    }
    out
}

/// The deepest module in `modules` that `path` starts with; `None` for the crate root.
fn resolve(path: &[String], modules: &BTreeSet<String>) -> Option<String> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// `node` at a granularity: the whole module path, or its first `depth` segments.
fn at_depth(module: &str, depth: Option<usize>) -> String {
    match depth {
        None => module.to_string(),
        Some(d) => module.split("::").take(d).collect::<Vec<_>>().join("::"),
    }
}

/// The import graph of `files` (module path, is `mod.rs`, source), at a granularity.
fn graph(files: &[(String, bool, String)], depth: Option<usize>) -> Graph {
    let modules: BTreeSet<String> = files.iter().map(|(m, _, _)| m.clone()).collect();
    let mut g = Graph::new();
    for (module, _, src) in files {
        if module.is_empty() {
            continue;
        }
        let from = at_depth(module, depth);
        g.entry(from.clone()).or_default();
        for path in named_paths(module, &production_code(src)) {
            if let Some(to) = resolve(&path, &modules) {
                let to = at_depth(&to, depth);
                if to != from {
                    g.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    g
}

/// One cycle of `g`, as its nodes in order with the first repeated at the end, if any.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        n: &str,
        g: &Graph,
        mark: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(n.to_string(), Mark::OnPath);
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match mark.get(m).copied().unwrap_or(Mark::New) {
                Mark::OnPath => {
                    let start = path.iter().position(|p| p == m).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(m, g, mark, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        mark.insert(n.to_string(), Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    for n in g.keys() {
        if mark.get(n).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(c) = visit(n, g, &mut mark, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn engine_sources() -> Vec<(String, bool, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, bool, String)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                let is_mod_rs = rel.ends_with("mod.rs");
                out.push((
                    module_of(&rel),
                    is_mod_rs,
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

fn assert_acyclic(depth: Option<usize>, what: &str) {
    let g = graph(&engine_sources(), depth);
    if let Some(c) = find_cycle(&g) {
        panic!("module cycle between {what}: {}", c.join(" -> "));
    }
}

#[test]
fn no_cycle_between_concept_folders() {
    assert_acyclic(Some(1), "top-level concept folders");
}

#[test]
fn no_cycle_between_module_files() {
    assert_acyclic(None, "module files");
}

/// The checker sees the real imports: without these edges it would pass on any tree.
#[test]
fn the_real_graph_has_the_expected_edges() {
    let files = engine_sources();
    let g = graph(&files, None);
    for (from, to) in [
        ("format::tx1", "format::sequential"),
        ("format::sequential", "format::common"),
        ("history::replay", "submission::scoped"),
        ("submission::scoped", "submission::submit"),
        ("submission::submit", "scope::observation"),
        ("text::occurrence", "text"),
    ] {
        assert!(
            g.get(from).is_some_and(|s| s.contains(to)),
            "{from} -> {to} missing from {g:#?}"
        );
    }
    let top = graph(&files, Some(1));
    assert!(top["history"].contains("submission"), "{top:#?}");
    assert!(top["submission"].contains("format"), "{top:#?}");
}

fn file(module: &str, is_mod_rs: bool, src: &str) -> (String, bool, String) {
    (module.to_string(), is_mod_rs, src.to_string())
}

/// The checker fails on a cycle: a synthetic tree where `a::x` imports `b` through a `use`
/// group and `b` names `a::x` inline.
#[test]
fn a_synthetic_cycle_is_found() {
    let files = [
        file("", false, "mod a;\nmod b;\n"),
        file("a", true, "pub mod x;\n"),
        file(
            "a::x",
            false,
            "use crate::{b::{self, Thing as T}, c};\npub fn f() {}\n",
        ),
        file("b", false, "pub fn g() { crate::a::x::f() }\n"),
        file("c", false, "pub const C: u8 = 0;\n"),
    ];
    let g = graph(&files, None);
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a::x".into(), "b".into(), "a::x".into()])
    );
    let top = graph(&files, Some(1));
    assert_eq!(
        find_cycle(&top),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}

/// `super::` paths count, and so does a three-module cycle.
#[test]
fn a_cycle_through_super_is_found() {
    let files = [
        file("p", true, "pub mod q;\npub mod r;\nuse self::q::Q;\n"),
        file("p::q", false, "use super::r::R;\npub struct Q;\n"),
        file("p::r", false, "use crate::p::Q as _;\npub struct R;\n"),
    ];
    let c = find_cycle(&graph(&files, None)).expect("a cycle");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4, "{c:?}");
}

/// Unit tests and comments may name anything; they are not part of the module graph.
#[test]
fn test_items_and_comments_are_not_edges() {
    let files = [
        file("a", false, "use crate::b::B;\npub struct A;\n"),
        file(
            "b",
            false,
            "//! See [`crate::a`].\npub struct B;\n\n#[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n\n#[cfg(test)]\nuse crate::a::A;\n",
        ),
    ];
    let g = graph(&files, None);
    assert_eq!(find_cycle(&g), None, "{g:#?}");
    assert!(g["a"].contains("b"));
}

/// An acyclic graph is accepted, with a diamond (two paths to one node) that is not a cycle.
#[test]
fn a_diamond_is_not_a_cycle() {
    let mut g = Graph::new();
    for (a, b) in [("top", "l"), ("top", "r"), ("l", "base"), ("r", "base")] {
        g.entry(a.into()).or_default().insert(b.into());
    }
    assert_eq!(find_cycle(&g), None);
    g.entry("base".into()).or_default().insert("top".into());
    assert!(find_cycle(&g).is_some());
}
