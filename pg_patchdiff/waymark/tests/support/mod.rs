//! Shared checks for the Waymark integration tests.
#![allow(dead_code)]

use patchdiff_engine::api::scope::{Outline, Symbol};
use patchdiff_waymark::{Language, outline};

/// `(kind, name, parent, path)` of one symbol.
pub type Row<'a> = (&'a str, &'a str, Option<&'a str>, &'a str);

/// The outline of `text`, after checking the invariants every outline must satisfy.
pub fn checked(language: Language, text: &str) -> Outline {
    let o = outline(language, text).expect("under the outline caps");
    assert_invariants(language, text, &o);
    // Deterministic: the same input gives the same outline.
    assert_eq!(
        o,
        outline(language, text).unwrap(),
        "outline is not deterministic"
    );
    o
}

/// Contract invariants: code-point spans inside the text, lines of `start` and of the last
/// code point, document order, `path` = `parent.name`, no trailing whitespace in a scope, and
/// (except TOML, whose tables do not nest) a parent's scope containing its children.
pub fn assert_invariants(language: Language, text: &str, o: &Outline) {
    let chars: Vec<char> = text.chars().collect();
    let mut line_at = Vec::with_capacity(chars.len() + 1);
    let mut line = 1;
    for &c in &chars {
        line_at.push(line);
        if c == '\n' {
            line += 1;
        }
    }
    line_at.push(line);
    assert_eq!(o.language, language.name());
    assert_eq!(o.engine, patchdiff_waymark::ENGINE);
    assert_eq!(o.grammar, language.grammar());
    for pair in o.symbols.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.start < b.start || (a.start == b.start && a.end >= b.end),
            "not in document order: {a:?} then {b:?}"
        );
    }
    for s in &o.symbols {
        assert!(
            s.start <= s.end && s.end <= chars.len(),
            "span out of range: {s:?}"
        );
        assert_eq!(s.start_line, line_at[s.start], "start_line of {s:?}");
        let end_line = if s.end > s.start {
            line_at[s.end - 1]
        } else {
            s.start_line
        };
        assert_eq!(s.end_line, end_line, "end_line of {s:?}");
        let expected_path = match &s.parent {
            Some(p) => format!("{p}.{}", s.name),
            None => s.name.clone(),
        };
        assert_eq!(s.path, expected_path, "path of {s:?}");
        if s.end > s.start {
            let last = chars[s.end - 1];
            assert!(
                !matches!(last, ' ' | '\t' | '\n' | '\r'),
                "trailing whitespace: {s:?}"
            );
        }
        if language != Language::Toml
            && let Some(parent) = &s.parent
        {
            assert!(
                o.symbols
                    .iter()
                    .any(|p| &p.path == parent && p.start <= s.start && s.end <= p.end),
                "no enclosing parent {parent:?} for {s:?}"
            );
        }
    }
}

pub fn rows(o: &Outline) -> Vec<Row<'_>> {
    o.symbols
        .iter()
        .map(|s| {
            (
                s.kind,
                s.name.as_str(),
                s.parent.as_deref(),
                s.path.as_str(),
            )
        })
        .collect()
}

/// The scope's text, cut by code points.
pub fn scope_text(text: &str, s: &Symbol) -> String {
    text.chars().skip(s.start).take(s.end - s.start).collect()
}

/// The one symbol with this path that starts on `start_line`.
pub fn symbol<'o>(o: &'o Outline, path: &str, start_line: usize) -> &'o Symbol {
    let found: Vec<&Symbol> = o
        .symbols
        .iter()
        .filter(|s| s.path == path && s.start_line == start_line)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one symbol {path} on line {start_line}: {found:?}"
    );
    found[0]
}

/// Checks a symbol's scope text and lines, and that its code-point `start` is the code-point
/// offset of the scope text's first occurrence on `start_line`.
pub fn assert_scope(
    text: &str,
    o: &Outline,
    path: &str,
    start_line: usize,
    end_line: usize,
    expected: &str,
) {
    let s = symbol(o, path, start_line);
    assert_eq!(scope_text(text, s), expected, "scope text of {path}");
    assert_eq!(
        (s.start_line, s.end_line),
        (start_line, end_line),
        "lines of {path}"
    );
    let line_start: usize = text
        .split_inclusive('\n')
        .take(start_line - 1)
        .map(|l| l.chars().count())
        .sum();
    let line: &str = text.split_inclusive('\n').nth(start_line - 1).unwrap_or("");
    let column = line
        .find(expected.lines().next().unwrap_or(""))
        .map(|b| line[..b].chars().count());
    assert_eq!(
        Some(s.start - line_start),
        column,
        "code-point start of {path}"
    );
    assert_eq!(
        s.end - s.start,
        expected.chars().count(),
        "code-point length of {path}"
    );
}
