//! docs/structural.md, "Limits": a text past the counters of its grammar's scanner has no
//! outline (no symbols, syntax errors), where its tree was silently wrong (helper-102), and the
//! incremental outline of such a text, after and before good ones, answers the same.

mod support;

use patchdiff_waymark::incremental::Trees;
use patchdiff_waymark::{Language, outline};
use support::checked;

/// Each text has no outline, fresh or from a kept tree of the same lineage.
fn no_outline(language: Language, texts: &[String], good: &str) {
    let mut trees = Trees::new(4, 64 << 20);
    for text in texts {
        let o = outline(language, text).unwrap();
        assert!(
            o.has_errors && o.symbols.is_empty(),
            "{language:?}: {} symbols, errors {}",
            o.symbols.len(),
            o.has_errors
        );
        assert_eq!(
            trees.outline(b"l", language, good.to_owned()).unwrap(),
            checked(language, good)
        );
        assert_eq!(trees.outline(b"l", language, text.clone()).unwrap(), o);
        assert_eq!(
            trees.outline(b"l", language, good.to_owned()).unwrap(),
            checked(language, good)
        );
    }
}

fn paths(language: Language, text: &str) -> Vec<(String, Option<String>)> {
    checked(language, text)
        .symbols
        .iter()
        .map(|s| (s.path.clone(), s.parent.clone()))
        .collect()
}

#[test]
fn python_indentation_past_65535_columns_has_no_outline() {
    // tree-sitter-python 0.25.0 keeps indentation widths in uint16_t: 8,192 tabs (8 columns
    // each) wrapped to 0, and `A.m` was listed as the top-level `m`.
    let good = "class A:\n    def m(self): pass\n";
    no_outline(
        Language::Python,
        &[
            format!("class A:\n{}def m(self): pass\n", "\t".repeat(8192)),
            format!("class A:\n{}def m(self): pass\n", " ".repeat(65_536)),
            format!(
                "class A:\n    def m(self):\n{}def inner(): pass\n    def n(self): pass\n",
                " ".repeat(65_540)
            ),
        ],
        good,
    );
    // Lines joined by a backslash add up to one run of indentation, and more than 256 joins in
    // one run have no outline either (the scanner's time grows with their square; helper-104).
    no_outline(
        Language::Python,
        &[
            format!(
                "class A:\n    def m(self):\n        pass\n{}    def n(self): pass\n",
                "\t\\\n".repeat(8192)
            ),
            format!(
                "class A:\n    def m(self):\n        pass\n        \\\n{}    def n(self): pass\n",
                "\t".repeat(8191)
            ),
            format!("x = 1\n{}y = 2\n", "\\\n".repeat(257)),
        ],
        good,
    );
    let text = format!("x = 1\n{}y = 2\n", "\\\n".repeat(256));
    assert!(!checked(Language::Python, &text).has_errors);
    // A backslash that ends a line of code joins no indentation.
    let text = format!("x = (1 + \\\n{}2)\n", " ".repeat(40_000)).repeat(3);
    assert!(!checked(Language::Python, &text).has_errors);
    // The widest indentation the scanner counts is still parsed.
    let text = format!("class A:\n{}def m(self): pass\n", " ".repeat(65_535));
    assert_eq!(
        paths(Language::Python, &text),
        [
            ("A".to_owned(), None),
            ("A.m".to_owned(), Some("A".to_owned()))
        ]
    );
}

#[test]
fn markdown_prefixes_and_fences_past_255_have_no_outline() {
    // tree-sitter-md 0.5.4 keeps columns, indentation and fence lengths in uint8_t: 256 spaces
    // and `# Fake` made a heading, a fence of 259 backticks was closed by three, one of 256 was
    // no fence, and a heading inside 255 block quotes vanished.
    let fence = |c: &str, n: usize| format!("{f}\n```\n# Inside\n{f}\n", f = c.repeat(n));
    no_outline(
        Language::Markdown,
        &[
            format!("para\n\n{}# Fake\n", " ".repeat(256)),
            format!("para\n\n{}# Fake\n", "\t".repeat(64)),
            fence("`", 259),
            fence("~", 259),
            fence("`", 256),
            format!("# Top\n\n{}# H\n\n# Next\n", "> ".repeat(255)),
            format!("# Top\n\n{}# H\n", "- ".repeat(200)),
        ],
        "# Top\n\n## Sub\n",
    );
    // Up to the counters' width: 255 spaces are an indented code block, not a heading; a fence
    // of 255 holds its text.
    assert_eq!(
        paths(
            Language::Markdown,
            &format!("para\n\n{}# Fake\n", " ".repeat(255))
        ),
        []
    );
    let kinds: Vec<&str> = checked(Language::Markdown, &fence("`", 255))
        .symbols
        .iter()
        .map(|s| s.kind)
        .collect();
    assert_eq!(kinds, ["code_block"]);
}

#[test]
fn yaml_indentation_past_32767_columns_has_no_outline() {
    // tree-sitter-yaml 0.7.2 keeps columns in int16_t: 65,538 spaces wrapped, and an invalid
    // text was listed without errors.
    no_outline(
        Language::Yaml,
        &[
            format!("a:\n{}b: 1\n  x: 3\nc: 2\n", " ".repeat(65_538)),
            format!("a:\n{}b: 1\nc: 2\n", " ".repeat(32_768)),
            // After an indicator, too (helper-104).
            format!("-{}a: 1\n  b: 2\n", " ".repeat(65_537)),
        ],
        "a:\n  b: 1\nc: 2\n",
    );
}

/// A line of white space alone indents nothing and opens nothing: the tree is right, and the
/// outline stays (helper-107: blank lines of 267 spaces inside the fences of a real Markdown
/// file took its 41 symbols away).
#[test]
fn lines_of_white_space_alone_keep_the_outline() {
    let md = format!("# Title\n\n```\ncode\n{}\n```\n\n## Two\n", " ".repeat(256));
    assert_eq!(
        paths(Language::Markdown, &md).len(),
        3,
        "{:?}",
        paths(Language::Markdown, &md)
    );
    let py = format!(
        "class A:\n    def m(self): pass\n{}\n    def n(self): pass\n",
        " ".repeat(70_000)
    );
    assert_eq!(
        paths(Language::Python, &py),
        [
            ("A".to_owned(), None),
            ("A.m".to_owned(), Some("A".to_owned())),
            ("A.n".to_owned(), Some("A".to_owned()))
        ]
    );
    let yaml = format!("a:\n  b: 1\n{}\nc: 2\n", " ".repeat(33_000));
    assert_eq!(
        paths(Language::Yaml, &yaml),
        [
            ("a".to_owned(), None),
            ("a.b".to_owned(), Some("a".to_owned())),
            ("c".to_owned(), None)
        ]
    );
    for (language, text) in [
        (Language::Markdown, &md),
        (Language::Python, &py),
        (Language::Yaml, &yaml),
    ] {
        assert!(!checked(language, text).has_errors, "{language:?}");
    }
}
