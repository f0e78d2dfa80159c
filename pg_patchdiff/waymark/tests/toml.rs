//! TOML naming rules (docs/structural-names.md "TOML").

mod support;

use patchdiff_waymark::Language;
use support::{assert_scope, checked, rows};

const FIXTURE: &str = r#"# 🌟 中 retry settings
title = "x"
retry_count = 1
a . "b c" = 1

[server.tls]
retry_count = 3
inline = { timeout = 5, k = [1, 2] }
arr = [ { id = "i1" }, 2, [ { name = "n" } ] ]
# trailing comment

[[tenants]]
id = "ten_013"
retry_count = 5

[tenants.limits]
timeout = 1

[[tenants.sub]]
name = "s"

[[tenants]]
x = 1

[[tenants.sub]]
timeout = 2

['quoted."key"']
"#;

#[test]
fn toml_tables_and_pairs_have_exact_kinds_names_parents_and_paths() {
    let o = checked(Language::Toml, FIXTURE);
    assert!(!o.has_errors);
    assert_eq!(
        rows(&o),
        vec![
            ("config_item", "title", None, "title"),
            ("config_item", "retry_count", None, "retry_count"),
            ("config_item", "a.b c", None, "a.b c"),
            ("object", "tls", Some("server"), "server.tls"),
            (
                "config_item",
                "retry_count",
                Some("server.tls"),
                "server.tls.retry_count"
            ),
            ("object", "inline", Some("server.tls"), "server.tls.inline"),
            (
                "config_item",
                "timeout",
                Some("server.tls.inline"),
                "server.tls.inline.timeout"
            ),
            (
                "array",
                "k",
                Some("server.tls.inline"),
                "server.tls.inline.k"
            ),
            ("array", "arr", Some("server.tls"), "server.tls.arr"),
            (
                "object",
                "arr[i1]",
                Some("server.tls"),
                "server.tls.arr[i1]"
            ),
            (
                "config_item",
                "id",
                Some("server.tls.arr[i1]"),
                "server.tls.arr[i1].id"
            ),
            ("array", "arr[2]", Some("server.tls"), "server.tls.arr[2]"),
            (
                "object",
                "arr[2][n]",
                Some("server.tls"),
                "server.tls.arr[2][n]"
            ),
            (
                "config_item",
                "name",
                Some("server.tls.arr[2][n]"),
                "server.tls.arr[2][n].name"
            ),
            ("object", "tenants[ten_013]", None, "tenants[ten_013]"),
            (
                "config_item",
                "id",
                Some("tenants[ten_013]"),
                "tenants[ten_013].id"
            ),
            (
                "config_item",
                "retry_count",
                Some("tenants[ten_013]"),
                "tenants[ten_013].retry_count"
            ),
            (
                "object",
                "limits",
                Some("tenants[ten_013]"),
                "tenants[ten_013].limits"
            ),
            (
                "config_item",
                "timeout",
                Some("tenants[ten_013].limits"),
                "tenants[ten_013].limits.timeout"
            ),
            (
                "object",
                "sub[s]",
                Some("tenants[ten_013]"),
                "tenants[ten_013].sub[s]"
            ),
            (
                "config_item",
                "name",
                Some("tenants[ten_013].sub[s]"),
                "tenants[ten_013].sub[s].name"
            ),
            ("object", "tenants[1]", None, "tenants[1]"),
            ("config_item", "x", Some("tenants[1]"), "tenants[1].x"),
            ("object", "sub[0]", Some("tenants[1]"), "tenants[1].sub[0]"),
            (
                "config_item",
                "timeout",
                Some("tenants[1].sub[0]"),
                "tenants[1].sub[0].timeout"
            ),
            ("object", "quoted.\"key\"", None, "quoted.\"key\""),
        ]
    );
}

#[test]
fn toml_table_scope_runs_from_header_through_its_last_pair() {
    let o = checked(Language::Toml, FIXTURE);
    assert_scope(
        FIXTURE,
        &o,
        "server.tls",
        6,
        9,
        "[server.tls]\nretry_count = 3\ninline = { timeout = 5, k = [1, 2] }\narr = [ { id = \"i1\" }, 2, [ { name = \"n\" } ] ]",
    );
    assert_scope(
        FIXTURE,
        &o,
        "tenants[ten_013]",
        12,
        14,
        "[[tenants]]\nid = \"ten_013\"\nretry_count = 5",
    );
    assert_scope(
        FIXTURE,
        &o,
        "tenants[ten_013].limits",
        16,
        17,
        "[tenants.limits]\ntimeout = 1",
    );
    assert_scope(FIXTURE, &o, "quoted.\"key\"", 28, 28, "['quoted.\"key\"']");
}

#[test]
fn toml_pair_scopes_are_exact_where_names_repeat() {
    let o = checked(Language::Toml, FIXTURE);
    assert_scope(FIXTURE, &o, "retry_count", 3, 3, "retry_count = 1");
    assert_scope(
        FIXTURE,
        &o,
        "server.tls.retry_count",
        7,
        7,
        "retry_count = 3",
    );
    assert_scope(
        FIXTURE,
        &o,
        "tenants[ten_013].retry_count",
        14,
        14,
        "retry_count = 5",
    );
    assert_scope(
        FIXTURE,
        &o,
        "server.tls.inline.timeout",
        8,
        8,
        "timeout = 5",
    );
    assert_scope(
        FIXTURE,
        &o,
        "tenants[ten_013].limits.timeout",
        17,
        17,
        "timeout = 1",
    );
    assert_scope(
        FIXTURE,
        &o,
        "tenants[1].sub[0].timeout",
        26,
        26,
        "timeout = 2",
    );
    assert_scope(FIXTURE, &o, "a.b c", 4, 4, "a . \"b c\" = 1");
}

#[test]
fn toml_headers_create_no_phantom_parent_tables() {
    let o = checked(Language::Toml, "[a.b.c]\nx = 1\n");
    assert_eq!(
        rows(&o),
        vec![
            ("object", "c", Some("a.b"), "a.b.c"),
            ("config_item", "x", Some("a.b.c"), "a.b.c.x")
        ]
    );
}
