//! Shell naming rules (docs/structural-names.md "Shell").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = r#"#!/usr/bin/env bash
# 🌟 中 retry settings
RETRY_COUNT=3
export TIMEOUT=30 VERBOSE=1
readonly FRAME_SYNC_STREAM="frame"
declare -a HOSTS=(a b)
A=1 B=2

retry() {
  local retry_count=$RETRY_COUNT
  TIMEOUT=5
  helper() { echo "$TIMEOUT"; }
  helper
}

function cleanup {
  echo done
}

if [ -n "$X" ]; then
  RETRY_COUNT=9
  function late() { :; }
fi
"#;

#[test]
fn shell_functions_and_top_level_variables_have_exact_names_and_parents() {
    let o = checked(Language::Shell, FIXTURE);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("variable", "RETRY_COUNT", None, "RETRY_COUNT"),
            ("variable", "TIMEOUT", None, "TIMEOUT"),
            ("variable", "VERBOSE", None, "VERBOSE"),
            ("variable", "FRAME_SYNC_STREAM", None, "FRAME_SYNC_STREAM"),
            ("variable", "HOSTS", None, "HOSTS"),
            ("variable", "A", None, "A"),
            ("variable", "B", None, "B"),
            ("function", "retry", None, "retry"),
            ("function", "helper", Some("retry"), "retry.helper"),
            ("function", "cleanup", None, "cleanup"),
            ("function", "late", None, "late"),
        ]
    );
}

#[test]
fn shell_scopes_are_exact_in_code_points() {
    let o = checked(Language::Shell, FIXTURE);
    assert_scope(FIXTURE, &o, "RETRY_COUNT", 3, 3, "RETRY_COUNT=3");
    assert_scope(FIXTURE, &o, "TIMEOUT", 4, 4, "TIMEOUT=30");
    assert_scope(
        FIXTURE,
        &o,
        "FRAME_SYNC_STREAM",
        5,
        5,
        "readonly FRAME_SYNC_STREAM=\"frame\"",
    );
    assert_scope(FIXTURE, &o, "HOSTS", 6, 6, "declare -a HOSTS=(a b)");
    assert_scope(
        FIXTURE,
        &o,
        "retry.helper",
        12,
        12,
        "helper() { echo \"$TIMEOUT\"; }",
    );
    assert_scope(
        FIXTURE,
        &o,
        "cleanup",
        16,
        18,
        "function cleanup {\n  echo done\n}",
    );
    let retry = o.symbols.iter().find(|s| s.path == "retry").unwrap();
    assert_eq!((retry.start_line, retry.end_line), (9, 14));
}
