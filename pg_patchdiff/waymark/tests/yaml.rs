//! YAML naming rules (docs/structural-names.md "YAML").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = r#"# 🌟 中 retry settings
defaults: &defaults
  retry_count: 3
  timeout: 30
config:
  <<: *defaults
  'it''s': quoted
  "tab\tkey": 1
  tenants:
    - id: ten_013
      retry_count: 5
      limits: {timeout: 10}
    - name: beta
      id: 14
    - slug: gamma
    - other: true
    - scalar
    - - code: X1
  empty:
---
- key: first
  timeout: 1
- plain
"#;

#[test]
fn yaml_pairs_and_items_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::Yaml, FIXTURE);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("object", "defaults", None, "defaults"),
            (
                "config_item",
                "retry_count",
                Some("defaults"),
                "defaults.retry_count"
            ),
            (
                "config_item",
                "timeout",
                Some("defaults"),
                "defaults.timeout"
            ),
            ("object", "config", None, "config"),
            ("config_item", "<<", Some("config"), "config.<<"),
            ("config_item", "it's", Some("config"), "config.it's"),
            ("config_item", "tab\tkey", Some("config"), "config.tab\tkey"),
            ("array", "tenants", Some("config"), "config.tenants"),
            (
                "object",
                "tenants[ten_013]",
                Some("config"),
                "config.tenants[ten_013]"
            ),
            (
                "config_item",
                "id",
                Some("config.tenants[ten_013]"),
                "config.tenants[ten_013].id"
            ),
            (
                "config_item",
                "retry_count",
                Some("config.tenants[ten_013]"),
                "config.tenants[ten_013].retry_count"
            ),
            (
                "object",
                "limits",
                Some("config.tenants[ten_013]"),
                "config.tenants[ten_013].limits"
            ),
            (
                "config_item",
                "timeout",
                Some("config.tenants[ten_013].limits"),
                "config.tenants[ten_013].limits.timeout"
            ),
            (
                "object",
                "tenants[14]",
                Some("config"),
                "config.tenants[14]"
            ),
            (
                "config_item",
                "name",
                Some("config.tenants[14]"),
                "config.tenants[14].name"
            ),
            (
                "config_item",
                "id",
                Some("config.tenants[14]"),
                "config.tenants[14].id"
            ),
            (
                "object",
                "tenants[gamma]",
                Some("config"),
                "config.tenants[gamma]"
            ),
            (
                "config_item",
                "slug",
                Some("config.tenants[gamma]"),
                "config.tenants[gamma].slug"
            ),
            ("object", "tenants[3]", Some("config"), "config.tenants[3]"),
            (
                "config_item",
                "other",
                Some("config.tenants[3]"),
                "config.tenants[3].other"
            ),
            ("array", "tenants[5]", Some("config"), "config.tenants[5]"),
            (
                "object",
                "tenants[5][X1]",
                Some("config"),
                "config.tenants[5][X1]"
            ),
            (
                "config_item",
                "code",
                Some("config.tenants[5][X1]"),
                "config.tenants[5][X1].code"
            ),
            ("config_item", "empty", Some("config"), "config.empty"),
            ("object", "[first]", None, "[first]"),
            ("config_item", "key", Some("[first]"), "[first].key"),
            ("config_item", "timeout", Some("[first]"), "[first].timeout"),
        ]
    );
}

#[test]
fn yaml_scopes_are_pairs_and_sequence_items_in_code_points() {
    let o = checked(Language::Yaml, FIXTURE);
    assert_scope(FIXTURE, &o, "defaults.retry_count", 3, 3, "retry_count: 3");
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013].retry_count",
        11,
        11,
        "retry_count: 5",
    );
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013].limits.timeout",
        12,
        12,
        "timeout: 10",
    );
    assert_scope(FIXTURE, &o, "[first].timeout", 22, 22, "timeout: 1");
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013]",
        10,
        12,
        "- id: ten_013\n      retry_count: 5\n      limits: {timeout: 10}",
    );
    assert_scope(
        FIXTURE,
        &o,
        "defaults",
        2,
        4,
        "defaults: &defaults\n  retry_count: 3\n  timeout: 30",
    );
}

#[test]
fn yaml_every_document_root_mapping_is_top_level() {
    let text = "a: 1\n---\nb: 2\n...\n---\na: 3\n";
    let o = checked(Language::Yaml, text);
    assert_eq!(
        rows(&o),
        vec![
            ("config_item", "a", None, "a"),
            ("config_item", "b", None, "b"),
            ("config_item", "a", None, "a"),
        ]
    );
}

#[test]
fn yaml_documents_over_32768_lines_hit_a_grammar_limit_without_panic() {
    // tree-sitter-yaml 0.7.2 keeps scanner rows in int16_t (upstream issue
    // tree-sitter-grammars/tree-sitter-yaml#49). A text with anything after its line 32,768
    // parsed wrong, not as one error: docs/structural.md promises no symbols and syntax errors,
    // where the lines after it were listed as if at the top level (helper-98: `top.k39999` as
    // `k39999`, and a key before the line not found), also in trees without errors (helper-104:
    // after a plain scalar of 65,536 lines, `d.e` as a top-level `e`).
    let flat = |n: usize| (0..n).map(|i| format!("k{i}: {i}\n")).collect::<String>();
    let nested = format!(
        "top:\n{}",
        (0..40_000)
            .map(|i| format!("  k{i}: 1\n"))
            .collect::<String>()
    );
    for text in [
        flat(32_769),
        format!("{}x: 1", flat(32_768)),
        format!("{}# a comment\n", flat(32_768)),
        nested,
        "a: 1\n---\n".repeat(20_000),
        "---\nm:\n  x: 1\n".repeat(20_000),
        "---\na: 1\n".repeat(20_000),
        format!("a:\n  b\n{}d:\n  e: 1\n", " c\n".repeat(65_535)),
    ] {
        let o = checked(Language::Yaml, &text);
        assert!(o.has_errors);
        assert!(o.symbols.is_empty(), "{} symbols", o.symbols.len());
    }
    // Up to line 32,768, and white space after it, parse.
    for text in [
        flat(32_000),
        flat(32_768),
        format!("{}\n \n\n", flat(32_768)),
    ] {
        let o = checked(Language::Yaml, &text);
        assert!(!o.has_errors);
        assert_eq!(
            o.symbols.len(),
            text.lines().filter(|l| l.contains(':')).count()
        );
    }
}
