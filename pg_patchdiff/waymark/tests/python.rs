//! Python naming rules (docs/structural-names.md "Python").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = r#"# 🌟 中 — retry settings
"""Module doc."""
import os

FRAME_SYNC_STREAM = "frame-sync"
retry_count: int = 3
a, b = 1, 2
os.environ["X"] = "1"


@cached
@other(retry_count=2)
async def fetch(url, retry_count=retry_count):
    timeout = 10

    def attempt(n):
        return n < retry_count

    return attempt


class Client(Base):
    retry_count = 5
    timeout: float

    def __init__(self, timeout=1.0):
        self.timeout = timeout

    @property
    def retry_count_value(self):
        return self.retry_count

    class Config:
        retry_count = 7

        def reload(self):
            pass


if os.environ.get("X"):
    def fallback():
        return retry_count
else:
    FALLBACK = None

type Alias = list[int]
"#;

#[test]
fn python_symbols_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::Python, FIXTURE);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("variable", "FRAME_SYNC_STREAM", None, "FRAME_SYNC_STREAM"),
            ("variable", "retry_count", None, "retry_count"),
            ("function", "fetch", None, "fetch"),
            ("function", "attempt", Some("fetch"), "fetch.attempt"),
            ("class", "Client", None, "Client"),
            (
                "variable",
                "retry_count",
                Some("Client"),
                "Client.retry_count"
            ),
            ("variable", "timeout", Some("Client"), "Client.timeout"),
            ("method", "__init__", Some("Client"), "Client.__init__"),
            (
                "method",
                "retry_count_value",
                Some("Client"),
                "Client.retry_count_value"
            ),
            ("class", "Config", Some("Client"), "Client.Config"),
            (
                "variable",
                "retry_count",
                Some("Client.Config"),
                "Client.Config.retry_count"
            ),
            (
                "method",
                "reload",
                Some("Client.Config"),
                "Client.Config.reload"
            ),
            ("function", "fallback", None, "fallback"),
            ("variable", "FALLBACK", None, "FALLBACK"),
            ("type", "Alias", None, "Alias"),
        ]
    );
}

#[test]
fn python_spans_are_code_points_with_exact_lines_after_non_ascii_comment() {
    let o = checked(Language::Python, FIXTURE);
    assert_scope(
        FIXTURE,
        &o,
        "FRAME_SYNC_STREAM",
        5,
        5,
        "FRAME_SYNC_STREAM = \"frame-sync\"",
    );
    assert_scope(FIXTURE, &o, "retry_count", 6, 6, "retry_count: int = 3");
    assert_scope(FIXTURE, &o, "Client.retry_count", 23, 23, "retry_count = 5");
    assert_scope(FIXTURE, &o, "Client.timeout", 24, 24, "timeout: float");
    assert_scope(
        FIXTURE,
        &o,
        "Client.Config.retry_count",
        34,
        34,
        "retry_count = 7",
    );
    assert_scope(
        FIXTURE,
        &o,
        "fetch.attempt",
        16,
        17,
        "def attempt(n):\n        return n < retry_count",
    );
    assert_scope(FIXTURE, &o, "FALLBACK", 44, 44, "FALLBACK = None");
    // The comment on line 1 has a 4-byte and a 3-byte character: byte and code-point
    // offsets differ by 5 from line 2 on.
    let frame = o
        .symbols
        .iter()
        .find(|s| s.name == "FRAME_SYNC_STREAM")
        .unwrap();
    let byte_start = FIXTURE.find("FRAME_SYNC_STREAM").unwrap();
    assert_eq!(frame.start, FIXTURE[..byte_start].chars().count());
    assert_ne!(frame.start, byte_start);
}

#[test]
fn python_decorated_definition_scope_includes_decorators() {
    let o = checked(Language::Python, FIXTURE);
    assert_scope(
        FIXTURE,
        &o,
        "fetch",
        11,
        19,
        "@cached\n@other(retry_count=2)\nasync def fetch(url, retry_count=retry_count):\n    timeout = 10\n\n    def attempt(n):\n        return n < retry_count\n\n    return attempt",
    );
    assert_scope(
        FIXTURE,
        &o,
        "Client.retry_count_value",
        29,
        31,
        "@property\n    def retry_count_value(self):\n        return self.retry_count",
    );
}

#[test]
fn python_method_is_a_def_directly_in_a_class_body_and_locals_are_not_symbols() {
    let o = checked(Language::Python, FIXTURE);
    let method = o
        .symbols
        .iter()
        .find(|s| s.path == "Client.__init__")
        .unwrap();
    assert_eq!(method.kind, "method");
    // `timeout = 10` inside fetch and `self.timeout = ...` are not symbols.
    assert!(
        !o.symbols
            .iter()
            .any(|s| s.path == "fetch.timeout" || s.name == "self.timeout")
    );
    assert_eq!(
        o.symbols.iter().filter(|s| s.name == "retry_count").count(),
        3
    );
}

#[test]
fn python_invalid_syntax_sets_has_errors_and_keeps_exact_spans() {
    let text = "def ok():\n    return 1\n\ndef broken(:\n    pass\n\nclass K:\n    x = 1\n";
    let o = checked(Language::Python, text);
    assert!(o.has_errors);
    assert!(o.symbols.iter().any(|s| s.path == "ok"));
}
