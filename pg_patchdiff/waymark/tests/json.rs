//! JSON naming rules (docs/structural-names.md "JSON").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = r#"{
  "_comment": "🌟 中",
  "config": {
    "retry_count": 3,
    "timeout": 30,
    "tenants": [
      {"id": "ten_013", "retry_count": 5, "limits": {"timeout": 10}},
      {"name": "beta", "id": 14, "timeout": 1},
      {"slug": "gamma"},
      {"other": true, "id": null},
      "scalar",
      [{"code": "X1"}, 2]
    ]
  },
  "FRAME_SYNC_STREAM": "x",
  "esc\u00e9\"q": 1
}
"#;

#[test]
fn json_members_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::Json, FIXTURE);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("config_item", "_comment", None, "_comment"),
            ("object", "config", None, "config"),
            (
                "config_item",
                "retry_count",
                Some("config"),
                "config.retry_count"
            ),
            ("config_item", "timeout", Some("config"), "config.timeout"),
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
                "config_item",
                "timeout",
                Some("config.tenants[14]"),
                "config.tenants[14].timeout"
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
            (
                "config_item",
                "id",
                Some("config.tenants[3]"),
                "config.tenants[3].id"
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
            (
                "config_item",
                "FRAME_SYNC_STREAM",
                None,
                "FRAME_SYNC_STREAM"
            ),
            ("config_item", "esc\u{e9}\"q", None, "esc\u{e9}\"q"),
        ]
    );
}

#[test]
fn json_member_scope_is_the_whole_key_value_pair_in_code_points() {
    let o = checked(Language::Json, FIXTURE);
    assert_scope(
        FIXTURE,
        &o,
        "config.retry_count",
        4,
        4,
        "\"retry_count\": 3",
    );
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013].retry_count",
        7,
        7,
        "\"retry_count\": 5",
    );
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013].limits.timeout",
        7,
        7,
        "\"timeout\": 10",
    );
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[14].timeout",
        8,
        8,
        "\"timeout\": 1",
    );
    assert_scope(
        FIXTURE,
        &o,
        "config.tenants[ten_013]",
        7,
        7,
        "{\"id\": \"ten_013\", \"retry_count\": 5, \"limits\": {\"timeout\": 10}}",
    );
    let tenants = o
        .symbols
        .iter()
        .find(|s| s.path == "config.tenants")
        .unwrap();
    assert_eq!((tenants.start_line, tenants.end_line), (6, 13));
}

#[test]
fn json_array_element_key_prefers_id_then_name_key_slug_code_else_index() {
    let o = checked(Language::Json, FIXTURE);
    let names: Vec<&str> = o
        .symbols
        .iter()
        .filter(|s| s.kind == "object" && s.name.starts_with("tenants["))
        .map(|s| s.name.as_str())
        .collect();
    // `id` wins over an earlier `name`; `null` ids do not count; scalars are not symbols
    // but count for the index; nested arrays extend the key.
    assert_eq!(
        names,
        [
            "tenants[ten_013]",
            "tenants[14]",
            "tenants[gamma]",
            "tenants[3]",
            "tenants[5][X1]"
        ]
    );
    let text = r#"[{"key": "k1"}, {"code": 7}, {"x": 1}]"#;
    let o = checked(Language::Json, text);
    let names: Vec<&str> = o
        .symbols
        .iter()
        .filter(|s| s.kind == "object")
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["[k1]", "[7]", "[2]"]);
}

#[test]
fn json_deeply_nested_input_does_not_overflow_and_caps_symbol_depth() {
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let o = checked(Language::Json, &deep);
    // At most 128 levels of nested symbols are listed.
    assert_eq!(o.symbols.len(), 128);
    assert_eq!(o.symbols[2].path, "[0][0][0]");
    let deep = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let o = checked(Language::Json, &deep);
    assert_eq!(o.symbols.len(), 128);
    assert_eq!(o.symbols[1].path, "a.a");
}
