//! Issue 19, item 3 ("Diffs"), end to end against a real PostgreSQL with pg_patchdiff:
//!
//! 1. `patchdiff_diff` between two versions across a SAVE answers GNU `diff -U<context>`'s hunks
//!    of the two texts, checked against the real `diff` binary, for several version pairs and
//!    contexts ([`versions_across_a_save_diff_like_gnu_diff`]);
//! 2. paging: small pages concatenate to the whole hunk text, each valid UTF-8 and within its
//!    byte budget, even through a line longer than a page ([`pages_concatenate_to_the_whole_diff`]);
//! 3. an unknown version is refused with the known range ([`unknown_versions_name_the_range`]);
//! 4. another tenant gets exactly the answer for an unknown target
//!    ([`another_tenant_gets_the_unknown_target_answer`]);
//! 5. the real `patchdiff-mcp` in the `extended` profile lists `patchdiff_diff` (read-only) and
//!    serves it, while `full` neither lists nor serves it
//!    ([`the_extended_profile_serves_diffs_over_mcp`]).
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required), a superuser connection string;
//! `PATCHDIFF_MCP_BIN` for proof 5 (default: the workspace's debug build). GNU `diff` must be on
//! the PATH: the tests fail without it.

use patchdiff_tests::roles::{config_for, dsn, open, recipe, unique};
use patchdiff_tests::stdio::Session;
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::process::Command;
use tokio_postgres::Client;

/// GNU diff's hunks for two texts: its output without the two header lines.
fn gnu_hunks(old: &str, new: &str, context: usize) -> String {
    let dir = std::env::temp_dir().join(unique("patchdiff_diffs"));
    std::fs::create_dir_all(&dir).unwrap();
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::write(&a, old).unwrap();
    std::fs::write(&b, new).unwrap();
    let out = Command::new("diff")
        .arg(format!("-U{context}"))
        .arg(&a)
        .arg(&b)
        .output()
        .expect("GNU diff must be installed to prove issue 19 item 3");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    text.splitn(3, '\n').nth(2).unwrap_or("").to_owned()
}

async fn content(c: &Client, id: &str) -> String {
    let r = call(c, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    r["current_content"].as_str().unwrap().to_owned()
}

async fn submit(c: &Client, id: &str, version: i64, find: &str, replace: &str) {
    let r = call(
        c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": id, "expected_target_version": version, "intent": "edit",
                "edits": [{"match": find, "replace": replace}]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
}

async fn diff(c: &Client, args: Value) -> Value {
    call(c, "patchdiff_diff", &args).await.unwrap()
}

/// A target with versions 0..=4, a SAVE at version 2, CRLF upload, a last line without a final
/// newline; returns its id and the canonical text of every version.
async fn history(c: &Client) -> (String, Vec<String>) {
    let upload =
        "alpha\r\nbeta\r\ngamma\r\ndelta\r\nepsilon\r\nzeta\r\neta\r\ntheta\r\niota\r\nkappa";
    let id = initialize_target(c, "notes.md", upload).await.unwrap();
    let mut texts = vec![content(c, &id).await];
    assert!(!texts[0].contains('\r'), "stored canonical LF");
    submit(c, &id, 0, "beta\n", "BETA\nbeta two\n").await;
    texts.push(content(c, &id).await);
    submit(c, &id, 1, "kappa", "kappa\n").await;
    texts.push(content(c, &id).await);
    let saved = call(
        c,
        "patchdiff_save",
        &json!({"target_file_id": id, "expected_target_version": 2}),
    )
    .await
    .unwrap();
    assert_eq!(saved["status"], "saved", "{saved}");
    submit(c, &id, 2, "eta\ntheta\n", "").await;
    texts.push(content(c, &id).await);
    submit(c, &id, 3, "alpha\n", "Ünïcödé 日本\nalpha\n").await;
    texts.push(content(c, &id).await);
    (id, texts)
}

/// Issue 19 item 3: any two versions, across a SAVE, in either order, answer GNU diff's hunks.
#[tokio::test]
async fn versions_across_a_save_diff_like_gnu_diff() {
    let c = connect(&dsn()).await.unwrap();
    let (id, texts) = history(&c).await;
    for (from, to) in [(0, 4), (1, 3), (2, 4), (4, 0), (3, 3), (0, 2), (2, 3)] {
        for context in [0, 1, 3, 10] {
            let r = diff(
                &c,
                json!({"target_file_id": id, "from_version": from, "to_version": to, "context": context}),
            )
            .await;
            assert_eq!(r["status"], "ok", "{r}");
            let expected = gnu_hunks(&texts[from], &texts[to], context);
            assert_eq!(
                r["hunks"].as_str().unwrap(),
                expected,
                "{from}->{to} -U{context}"
            );
            assert_eq!(r["identical"], expected.is_empty());
            assert_eq!(r["has_more"], false);
            assert_eq!(
                r["header"],
                format!("--- notes.md\tversion {from}\n+++ notes.md\tversion {to}\n")
            );
        }
    }
    // to_version defaults to the current version.
    let r = diff(&c, json!({"target_file_id": id, "from_version": 1})).await;
    assert_eq!(r["to_version"], 4);
    assert_eq!(
        r["hunks"].as_str().unwrap(),
        gnu_hunks(&texts[1], &texts[4], 3)
    );
}

/// Issue 19 item 3, bounded output: pages of at most max_page_bytes concatenate to the whole
/// hunk text; a line longer than a page is cut at code point boundaries only.
#[tokio::test]
async fn pages_concatenate_to_the_whole_diff() {
    let c = connect(&dsn()).await.unwrap();
    let old: String = (0..400).map(|i| format!("line {i} é\n")).collect();
    let id = initialize_target(&c, "big.txt", &old).await.unwrap();
    let long = "日本語ü".repeat(700);
    submit(&c, &id, 0, "line 10 é\n", &format!("{long}\n")).await;
    submit(&c, &id, 1, "line 300 é\n", "changed\n").await;
    let new = content(&c, &id).await;
    let whole = gnu_hunks(&old, &new, 3);
    let mut got = String::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let r = diff(
            &c,
            json!({"target_file_id": id, "from_version": 0, "to_version": 2,
                   "max_page_bytes": 1024, "cursor": cursor}),
        )
        .await;
        assert_eq!(r["status"], "ok", "{r}");
        let page = r["hunks"].as_str().unwrap();
        assert!(page.len() <= 1024, "{}", page.len());
        assert_eq!(r["offset"], got.len());
        assert_eq!(r["total_bytes"], whole.len());
        got.push_str(page);
        pages += 1;
        cursor = r["next_cursor"].clone();
        assert_eq!(r["has_more"], !cursor.is_null());
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(got, whole);
    assert!(pages >= 5, "{pages} pages");
    // A cursor sent with other versions is refused.
    let first = diff(
        &c,
        json!({"target_file_id": id, "from_version": 0, "to_version": 2, "max_page_bytes": 1024}),
    )
    .await;
    let r = diff(
        &c,
        json!({"target_file_id": id, "from_version": 1, "to_version": 2, "cursor": first["next_cursor"]}),
    )
    .await;
    assert_eq!(r["code"], "invalid_cursor", "{r}");
}

/// Issue 19 item 3: an unknown version is a clear error with the known range.
#[tokio::test]
async fn unknown_versions_name_the_range() {
    let c = connect(&dsn()).await.unwrap();
    let id = initialize_target(&c, "v.txt", "a\n").await.unwrap();
    submit(&c, &id, 0, "a", "b").await;
    for args in [
        json!({"target_file_id": id, "from_version": 2}),
        json!({"target_file_id": id, "from_version": 0, "to_version": 7}),
    ] {
        let r = diff(&c, args).await;
        assert_eq!(r["status"], "invalid_argument", "{r}");
        assert_eq!(r["code"], "unknown_version");
        assert_eq!(r["first_version"], 0);
        assert_eq!(r["current_version"], 1);
    }
    let r = diff(&c, json!({"target_file_id": id, "from_version": -1})).await;
    assert_eq!(r["code"], "invalid_from_version", "{r}");
}

/// docs/security.md: a role that may not read the target gets the same answer as for an
/// unknown target, in a database of its own with a tenant role by the least-privilege recipe.
#[tokio::test]
async fn another_tenant_gets_the_unknown_target_answer() {
    let su = connect(&dsn()).await.unwrap();
    let db = unique("diffs_tenancy");
    let role = unique("diffs_tenant");
    su.batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let result = tokio::spawn({
        let (db, role) = (db.clone(), role.clone());
        async move {
            let owner = open(&config_for(&db, None)).await.unwrap();
            owner
                .batch_execute("CREATE EXTENSION pg_patchdiff")
                .await
                .unwrap();
            owner
                .batch_execute(&recipe(&db, &role, "pw-diffs"))
                .await
                .unwrap();
            let id = initialize_target(&owner, "secret.md", "one\n")
                .await
                .unwrap();
            submit(&owner, &id, 0, "one", "two").await;
            let tenant = open(&config_for(&db, Some((&role, "pw-diffs"))))
                .await
                .unwrap();
            let unknown = "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69";
            let theirs = diff(&tenant, json!({"target_file_id": id, "from_version": 0})).await;
            let nothing = diff(
                &tenant,
                json!({"target_file_id": unknown, "from_version": 0}),
            )
            .await;
            assert_eq!(theirs["status"], "not_found", "{theirs}");
            assert_eq!(
                theirs.to_string().replace(&id, "ID"),
                nothing.to_string().replace(unknown, "ID"),
                "another tenant's target answers as an unknown one"
            );
            // Even with a version the target does not have: nothing about it leaks.
            let r = diff(&tenant, json!({"target_file_id": id, "from_version": 99})).await;
            assert_eq!(r, theirs);
            // The owner sees it.
            let mine = diff(&owner, json!({"target_file_id": id, "from_version": 0})).await;
            assert_eq!(mine["hunks"], "@@ -1 +1 @@\n-one\n+two\n");
        }
    })
    .await;
    su.batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
    su.batch_execute(&format!("DROP ROLE {role}"))
        .await
        .unwrap();
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Issue 19: `patchdiff_diff` is listed (read-only, with its schema and example) and served by
/// the real front end in the `extended` profile only.
#[tokio::test]
async fn the_extended_profile_serves_diffs_over_mcp() {
    let c = connect(&dsn()).await.unwrap();
    let (id, texts) = history(&c).await;
    let dsn = dsn();
    let id2 = id.clone();
    let (listed, full_names, called, refused) = tokio::task::spawn_blocking(move || {
        let mut s = Session::start(&dsn, &[("PATCHDIFF_MCP_PROFILE", "extended")], "2025-06-18");
        let list = s.request("tools/list", json!({}));
        let tools = list["result"]["tools"].as_array().unwrap().clone();
        let diff = tools
            .iter()
            .find(|t| t["name"] == "patchdiff_diff")
            .cloned()
            .unwrap_or(Value::Null);
        let (answer, result) = s.call(
            "patchdiff_diff",
            json!({"target_file_id": id2, "from_version": 0, "to_version": 4, "context": 2}),
        );
        let mut f = Session::start(&dsn, &[("PATCHDIFF_MCP_PROFILE", "full")], "2025-06-18");
        let full = f.request("tools/list", json!({}));
        let full_names: Vec<String> = full["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        let refused = f.request(
            "tools/call",
            json!({"name": "patchdiff_diff", "arguments": {"target_file_id": id2, "from_version": 0}}),
        );
        (
            (diff, tools.len()),
            full_names,
            (answer, result),
            refused,
        )
    })
    .await
    .unwrap();
    let (decl, count) = listed;
    assert_eq!(decl["annotations"]["readOnlyHint"], true, "{decl}");
    assert_eq!(
        decl["inputSchema"]["required"],
        json!(["target_file_id", "from_version"])
    );
    assert!(decl["inputSchema"]["examples"].is_array(), "{decl}");
    assert!(decl["outputSchema"].is_object(), "{decl}");
    // docs/profiles.md: extended = full + issue 19's tools across targets and versions
    // (patchdiff_submit_changeset, patchdiff_diff).
    assert_eq!(
        count,
        full_names.len() + 2,
        "extended = full + patchdiff_submit_changeset + patchdiff_diff"
    );
    assert!(!full_names.iter().any(|n| n == "patchdiff_diff"));
    let (answer, result) = called;
    assert_eq!(answer["status"], "ok", "{answer}");
    assert_eq!(
        answer["hunks"].as_str().unwrap(),
        gnu_hunks(&texts[0], &texts[4], 2)
    );
    assert_eq!(
        result["structuredContent"]["hunks"], answer["hunks"],
        "{result}"
    );
    assert!(
        refused.get("error").is_some(),
        "full refuses patchdiff_diff: {refused}"
    );
}
