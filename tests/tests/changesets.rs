//! Issue 19 item 1, "Changesets": `patchdiff_submit_changeset` against a real PostgreSQL 15 with
//! pg_patchdiff installed. All or none, the log (one `changeset_id`, the failing member named),
//! one request key for the whole changeset, the caller's transaction, two sessions locking
//! overlapping targets in opposite orders without a deadlock, tenancy and caps.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string). Every test makes its own
//! targets, so the tests can run in parallel on one database. (Tenant isolation of this function
//! is also swept with every other function in tests/tenancy.rs.)

use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use tokio_postgres::Client;

const F: &str = "patchdiff_submit_changeset";

async fn client() -> Client {
    let dsn = std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string");
    connect(&dsn).await.expect("connecting")
}

async fn content(c: &Client, id: &str) -> (i64, String) {
    let t = call(c, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    (
        t["version"].as_i64().unwrap(),
        t["current_content"].as_str().unwrap().to_owned(),
    )
}

/// The attempt rows of a target: (status, changeset_id, client_request_id, diagnostic code).
async fn rows(
    c: &Client,
    id: &str,
) -> Vec<(String, Option<String>, Option<String>, Option<String>)> {
    c.query(
        "SELECT status, changeset_id::text, client_request_id, diagnostic->>'code' \
         FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid ORDER BY log_sequence",
        &[&id],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

/// Attempt rows of these targets (the tests run in parallel: never the whole log).
async fn total_rows(c: &Client, ids: &[&str]) -> i64 {
    let ids: Vec<String> = ids.iter().map(|s| (*s).to_owned()).collect();
    c.query_one(
        "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = ANY ($1::text[]::uuid[])",
        &[&ids],
    )
    .await
    .unwrap()
    .get(0)
}

fn edit(id: &str, version: i64, from: &str, to: &str) -> Value {
    json!({"target_file_id": id, "intent": format!("rename {from} to {to}"),
           "expected_target_version": version, "edits": [{"match": from, "replace": to}]})
}

/// "Either every proposal is accepted and committed, or none is applied", and "every
/// proposal's attempt is logged under one changeset_id. When one is rejected, the others are
/// logged as rejected with a documented reason that names the failing member."
#[tokio::test]
async fn all_or_none_with_one_changeset_id_and_the_failing_member_named() {
    let c = client().await;
    let a = initialize_target(&c, "a.rs", "fn old_name() {}\n")
        .await
        .unwrap();
    let b = initialize_target(&c, "b.rs", "old_name();\nold_name();\n")
        .await
        .unwrap();
    let ops = json!({"target_file_id": b, "intent": "rename calls", "expected_target_version": 0,
        "operations": [{"op": "match", "match": "old_name", "replace": "new_name", "occurrence_index": 1},
                       {"op": "match", "match": "old_name", "replace": "new_name"}]});
    let r = call(
        &c,
        F,
        &json!({"members": [edit(&a, 0, "old_name", "new_name"), ops]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let cs = r["changeset_id"].as_str().unwrap().to_owned();
    assert_eq!(content(&c, &a).await, (1, "fn new_name() {}\n".into()));
    assert_eq!(
        content(&c, &b).await,
        (1, "new_name();\nnew_name();\n".into())
    );
    for id in [&a, &b] {
        assert_eq!(
            rows(&c, id).await,
            [("accepted".into(), Some(cs.clone()), None, None)]
        );
    }
    // Member 1 is stale: member 0 passes its own checks, yet neither is applied.
    let r = call(
        &c,
        F,
        &json!({"members": [edit(&a, 1, "new_name", "newer"), edit(&b, 0, "new_name", "newer")]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["failing_member"]["member_index"], 1);
    assert_eq!(r["failing_member"]["target_file_id"], b.as_str());
    assert_eq!(
        r["failing_member"]["failure_reason"],
        "target_version_mismatch"
    );
    let cs2 = r["changeset_id"].as_str().unwrap().to_owned();
    assert_eq!(content(&c, &a).await, (1, "fn new_name() {}\n".into()));
    assert_eq!(
        content(&c, &b).await,
        (1, "new_name();\nnew_name();\n".into())
    );
    assert_eq!(
        rows(&c, &a).await[1],
        (
            "rejected".into(),
            Some(cs2.clone()),
            None,
            Some("changeset_member_rejected".into())
        )
    );
    assert_eq!(rows(&c, &b).await[1].0, "rejected");
    assert_eq!(rows(&c, &b).await[1].1, Some(cs2.clone()));
    let m0 = &r["members"][0];
    assert_eq!(m0["failure_reason"], "context_invalid");
    assert_eq!(m0["diagnostic"]["failing_member_index"], 1);
    // The member's row does not name the failing member's target (its readers may not read it).
    assert!(
        m0["diagnostic"].get("failing_target_file_id").is_none(),
        "{m0}"
    );
    assert!(!m0.to_string().contains(b.as_str()), "{m0}");
    assert_eq!(m0["diagnostic"]["changeset_id"], cs2.as_str());
    // The log never holds an acceptance that did not take effect: every accepted row of the
    // two targets is one the versions account for.
    let accepted: i64 = c
        .query_one(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE changeset_id = $1::text::uuid AND status = 'accepted'",
            &[&cs2],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(accepted, 0);
    // History pages are those of the contract: no changeset_id member in their entries (the
    // stored diagnostic of a changeset_member_rejected row names it, as evidence).
    let page = call(&c, "patchdiff_get_pdcp_log", &json!({"target_file_id": a}))
        .await
        .unwrap();
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{page}");
    for e in entries {
        assert!(e.get("changeset_id").is_none(), "{e}");
    }
    assert_eq!(
        entries[0]["diagnostic"]["code"],
        "changeset_member_rejected"
    );
}

/// "One request key covers the whole changeset: a resend recovers all of it or none"; a
/// different body under the key is refused as the key conflict it is, and applies nothing.
#[tokio::test]
async fn one_key_recovers_the_whole_outcome_and_refuses_another_body() {
    let c = client().await;
    let a = initialize_target(&c, "a.md", "alpha\n").await.unwrap();
    let b = initialize_target(&c, "b.md", "alpha\n").await.unwrap();
    let args = json!({"client_request_id": "cs-key-1",
                      "members": [edit(&a, 0, "alpha", "beta"), edit(&b, 0, "alpha", "beta")]});
    let first = call(&c, F, &args).await.unwrap();
    assert_eq!(first["status"], "accepted", "{first}");
    let n = total_rows(&c, &[&a, &b]).await;
    let again = call(&c, F, &args).await.unwrap();
    assert_eq!(again["status"], "accepted");
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["changeset_id"], first["changeset_id"]);
    for i in 0..2 {
        assert_eq!(
            again["members"][i]["pdcp_log_id"],
            first["members"][i]["pdcp_log_id"]
        );
        assert_eq!(again["members"][i]["deduplicated"], true);
    }
    assert_eq!(
        total_rows(&c, &[&a, &b]).await,
        n,
        "an exact resend writes nothing"
    );
    assert_eq!(content(&c, &a).await.0, 1);
    // Another body under the same key: audited, nothing applied, the key keeps its outcome.
    let other = json!({"client_request_id": "cs-key-1",
                       "members": [edit(&a, 1, "beta", "gamma"), edit(&b, 1, "beta", "gamma")]});
    let r = call(&c, F, &other).await.unwrap();
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["code"], "request_key_conflict");
    assert_eq!(content(&c, &a).await, (1, "beta\n".into()));
    assert_eq!(content(&c, &b).await, (1, "beta\n".into()));
    let again = call(&c, F, &args).await.unwrap();
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["status"], "accepted");
    // A rejected keyed changeset recovers the same rejection, member for member.
    let x = initialize_target(&c, "x.md", "one\n").await.unwrap();
    let y = initialize_target(&c, "y.md", "one\n").await.unwrap();
    let args = json!({"client_request_id": "cs-key-2",
                      "members": [edit(&x, 0, "one", "two"), edit(&y, 0, "absent", "two")]});
    let first = call(&c, F, &args).await.unwrap();
    assert_eq!(first["status"], "rejected");
    let n = total_rows(&c, &[&x, &y]).await;
    let again = call(&c, F, &args).await.unwrap();
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["failing_member"], first["failing_member"]);
    assert_eq!(total_rows(&c, &[&x, &y]).await, n);
    assert_eq!(rows(&c, &x).await[0].2.as_deref(), Some("cs-key-2"));
}

/// docs/security.md, "Changesets": a member's `request_fingerprint`, which every reader of that
/// member's target sees on a log page, is salted per changeset, so it is no function of the other
/// members' proposals that such a reader could test guesses against (helper-75: a reader of one
/// member's target confirmed a guessed edit of a target it could not read). The same body sent
/// twice without a key gets other fingerprints; under a key, the resend recovers (the salt is read
/// back from the stored rows), and a single submission of a member's own proposal under the
/// changeset's key is still a key conflict, not a recovery of the member.
#[tokio::test]
async fn a_members_fingerprint_depends_on_no_other_member_alone() {
    let c = client().await;
    let private = initialize_target(&c, "private.md", "secret=hunter3\n")
        .await
        .unwrap();
    let shared = initialize_target(&c, "shared.md", "alpha\n").await.unwrap();
    let fingerprints = || async {
        let page = call(
            &c,
            "patchdiff_get_pdcp_log",
            &json!({"target_file_id": shared, "limit": 200}),
        )
        .await
        .unwrap();
        page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["request_fingerprint"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    // Rejected twice (the shared member's match is absent), so the same body can be sent again.
    let body = json!({"members": [edit(&private, 0, "hunter3", "hunter4"),
                                  edit(&shared, 0, "absent", "beta")]});
    for _ in 0..2 {
        let r = call(&c, F, &body).await.unwrap();
        assert_eq!(r["status"], "rejected", "{r}");
    }
    let seen = fingerprints().await;
    assert_eq!(seen.len(), 2);
    assert_ne!(
        seen[0], seen[1],
        "the same changeset body, sent twice, must not give the same member fingerprint"
    );
    // Keyed: accepted, then recovered by an exact resend with the fingerprint it stored.
    let keyed = json!({"client_request_id": "cs-salt",
                       "members": [edit(&private, 0, "hunter3", "hunter4"),
                                   edit(&shared, 0, "alpha", "beta")]});
    let first = call(&c, F, &keyed).await.unwrap();
    assert_eq!(first["status"], "accepted", "{first}");
    let stored = fingerprints().await[0].clone();
    let salts: Vec<Option<String>> = c
        .query(
            "SELECT request_envelope->>'changeset_salt' FROM patchdiff.pdcp_logs \
             WHERE client_request_id = 'cs-salt' AND target_file_id = ANY ($1::text[]::uuid[])",
            &[&vec![private.clone(), shared.clone()]],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(salts.len(), 2);
    assert!(salts[0].is_some() && salts[0] == salts[1], "{salts:?}");
    let n = total_rows(&c, &[&private, &shared]).await;
    let again = call(&c, F, &keyed).await.unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(again["changeset_id"], first["changeset_id"]);
    assert_eq!(total_rows(&c, &[&private, &shared]).await, n);
    assert_eq!(fingerprints().await[0], stored);
    // The shared member's own proposal alone, under the changeset's key: a conflict.
    let mut single = edit(&shared, 0, "alpha", "beta");
    single["client_request_id"] = json!("cs-salt");
    let r = call(&c, "patchdiff_submit_edits", &single).await.unwrap();
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["diagnostic"]["code"], "request_key_conflict", "{r}");
    assert_eq!(content(&c, &shared).await, (1, "beta\n".into()));
}

/// "It works in the caller's transaction over SQL": a ROLLBACK undoes every member and its
/// log rows; a COMMIT keeps them, together with the caller's own work.
#[tokio::test]
async fn the_callers_rollback_undoes_the_whole_changeset() {
    let mut c = client().await;
    let a = initialize_target(&c, "a.md", "alpha\n").await.unwrap();
    let b = initialize_target(&c, "b.md", "alpha\n").await.unwrap();
    let args = json!({"members": [edit(&a, 0, "alpha", "beta"), edit(&b, 0, "alpha", "beta")]});
    let tx = c.transaction().await.unwrap();
    let r = call(&tx, F, &args).await.unwrap();
    assert_eq!(r["status"], "accepted");
    tx.rollback().await.unwrap();
    assert_eq!(content(&c, &a).await, (0, "alpha\n".into()));
    assert!(rows(&c, &a).await.is_empty() && rows(&c, &b).await.is_empty());
    let tx = c.transaction().await.unwrap();
    let r = call(&tx, F, &args).await.unwrap();
    assert_eq!(r["status"], "accepted");
    tx.commit().await.unwrap();
    assert_eq!(content(&c, &b).await, (1, "beta\n".into()));
}

/// "Targets are locked in one global order, so two changesets cannot deadlock": two sessions,
/// each in its own transaction that holds its locks a moment, submit changesets over the same
/// three targets listed in opposite orders, many rounds. No call fails (no 40P01), each
/// changeset is accepted or rejected whole, and every target's version counts exactly the
/// accepted changesets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_and_stay_all_or_none() {
    const ROUNDS: usize = 40;
    let setup = client().await;
    // 256 KiB of text behind each lock: each member's locked read takes long enough that the
    // two sessions' lock acquisitions interleave (the control test below shows what opposite
    // orders do without one global order).
    let body = format!("x\n{}", "filler line\n".repeat(256 * 1024 / 12));
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(
            initialize_target(&setup, &format!("d{i}.md"), &body)
                .await
                .unwrap(),
        );
    }
    async fn side(ids: Vec<String>, reverse: bool) -> (usize, usize) {
        let mut c = client().await;
        let (mut accepted, mut rejected) = (0, 0);
        for _ in 0..ROUNDS {
            let mut members = Vec::new();
            for id in &ids {
                let v = content(&c, id).await.0;
                members.push(json!({"target_file_id": id, "intent": "append",
                    "expected_target_version": v,
                    "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "y"}]}));
            }
            if reverse {
                members.reverse();
            }
            let tx = c.transaction().await.unwrap();
            let r = call(&tx, F, &json!({"members": members}))
                .await
                .unwrap_or_else(|e| panic!("a changeset failed (deadlock?): {e:?}"));
            tx.batch_execute("SELECT pg_sleep(0.002)").await.unwrap();
            tx.commit().await.unwrap();
            let statuses: Vec<&str> = r["members"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["status"].as_str().unwrap())
                .collect();
            match r["status"].as_str().unwrap() {
                "accepted" => {
                    assert!(statuses.iter().all(|s| *s == "accepted"), "{r}");
                    accepted += 1;
                }
                "rejected" => {
                    assert!(statuses.iter().all(|s| *s == "rejected"), "{r}");
                    rejected += 1;
                }
                other => panic!("{other}: {r}"),
            }
        }
        (accepted, rejected)
    }
    let (x, y) = tokio::join!(
        tokio::spawn(side(ids.clone(), false)),
        tokio::spawn(side(ids.clone(), true))
    );
    let ((ax, rx), (ay, ry)) = (x.unwrap(), y.unwrap());
    assert_eq!(ax + rx + ay + ry, 2 * ROUNDS);
    for id in &ids {
        let (v, text) = content(&setup, id).await;
        assert_eq!(
            v as usize,
            ax + ay,
            "{id}: version counts the accepted changesets"
        );
        assert_eq!(text.len(), body.len() + ax + ay);
    }
    eprintln!(
        "changesets: {ax}+{ay} accepted, {rx}+{ry} rejected, no deadlock in {} calls",
        2 * ROUNDS
    );
}

/// The control of the test above: the same two sessions taking the same targets' locks in
/// opposite orders without a changeset (two single submissions in each transaction) deadlock,
/// and PostgreSQL ends one of them with 40P01. So the changeset test's setting can deadlock;
/// the changeset's one global order is what prevents it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_opposite_orders_without_one_order_deadlock() {
    let (mut c1, mut c2) = (client().await, client().await);
    let t1 = initialize_target(&c1, "c1.md", "x\n").await.unwrap();
    let t2 = initialize_target(&c1, "c2.md", "x\n").await.unwrap();
    let one = |id: &str| edit(id, 0, "x", "y");
    let tx1 = c1.transaction().await.unwrap();
    let tx2 = c2.transaction().await.unwrap();
    call(&tx1, "patchdiff_submit_edits", &one(&t1))
        .await
        .unwrap();
    call(&tx2, "patchdiff_submit_edits", &one(&t2))
        .await
        .unwrap();
    let (second1, second2) = (one(&t2), one(&t1));
    let (a, b) = tokio::join!(
        call(&tx1, "patchdiff_submit_edits", &second1),
        call(&tx2, "patchdiff_submit_edits", &second2)
    );
    let deadlocks = [&a, &b]
        .iter()
        .filter(|r| {
            r.as_ref()
                .err()
                .and_then(|e| e.code())
                .is_some_and(|c| *c == tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED)
        })
        .count();
    assert_eq!(deadlocks, 1, "{a:?} {b:?}");
}

/// Tenancy and hostile input: a member naming an unknown target ends the changeset with the
/// answer of an unknown target and nothing written; caps, a target twice and a member with its
/// own key are refused before any lock, writing nothing.
#[tokio::test]
async fn unknown_targets_and_caps_write_nothing() {
    let c = client().await;
    let a = initialize_target(&c, "a.md", "alpha\n").await.unwrap();
    let unknown = "0c0c0c0c-0000-4000-8000-000000000000";
    let n = total_rows(&c, &[&a, unknown]).await;
    let r = call(
        &c,
        F,
        &json!({"members": [edit(&a, 0, "alpha", "beta"), edit(unknown, 0, "alpha", "beta")]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "rejected");
    assert_eq!(r["code"], "target_not_found");
    assert_eq!(r["changeset_id"], Value::Null);
    assert_eq!(r["failing_member"]["member_index"], 1);
    assert_eq!(total_rows(&c, &[&a, unknown]).await, n);
    let many: Vec<Value> = (0..33).map(|_| edit(&a, 0, "alpha", "beta")).collect();
    let mut own_key = edit(&a, 0, "alpha", "beta");
    own_key["client_request_id"] = json!("mine");
    // 10,001 edits in two members: each under its own cap of 10,000, together over the
    // changeset's (one submission's work, docs/sql-api.md).
    let heavy = |id: &str, n: usize| {
        let mut m = edit(id, 0, "alpha", "alpha");
        m["edits"] = Value::Array(vec![m["edits"][0].clone(); n]);
        m
    };
    let over = json!({"members": [heavy(&a, 5_000), heavy(unknown, 5_001)]});
    for (args, code) in [
        (json!({"members": many}), "too_many_members"),
        (over, "too_many_changes"),
        (
            json!({"members": [edit(&a, 0, "alpha", "beta"), edit(&a, 0, "x", "y")]}),
            "duplicate_target",
        ),
        (json!({"members": [own_key]}), "member_request_key"),
        (json!({"members": []}), "invalid_members"),
    ] {
        let r = call(&c, F, &args).await.unwrap();
        assert_eq!(
            (r["status"].as_str(), r["code"].as_str()),
            (Some("invalid_argument"), Some(code)),
            "{r}"
        );
    }
    let big = json!({"members": [{"target_file_id": a, "intent": "big", "expected_target_version": 0,
        "edits": [{"match": "alpha", "replace": "x".repeat(4 * 1024 * 1024)}]}]});
    let r = call(&c, F, &big).await.unwrap();
    assert_eq!(r["code"], "changeset_too_large", "{}", r["failure_detail"]);
    assert_eq!(total_rows(&c, &[&a]).await, n, "refusals wrote rows");
    assert_eq!(content(&c, &a).await.0, 0);
}

/// Issue 19 item 1, "Over MCP, in the extended profile, with a schema and an example": the real
/// patchdiff-mcp process over real pipes lists patchdiff_submit_changeset only in `extended`
/// (not in `full`), and a rename across two targets goes through it all or nothing, with its
/// request key recovering the outcome.
#[test]
fn over_mcp_in_the_extended_profile() {
    use patchdiff_tests::stdio::Session;
    let dsn = std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN");
    let names = |s: &mut Session| -> Vec<Value> {
        s.request("tools/list", json!({}))["result"]["tools"]
            .as_array()
            .unwrap()
            .clone()
    };
    let mut full = Session::start(&dsn, &[("PATCHDIFF_MCP_PROFILE", "full")], "2025-11-25");
    assert!(names(&mut full).iter().all(|t| t["name"] != F));
    let r = full.request(
        "tools/call",
        json!({"name": F, "arguments": {"members": []}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");

    let mut s = Session::start(&dsn, &[("PATCHDIFF_MCP_PROFILE", "extended")], "2025-11-25");
    let tools = names(&mut s);
    let decl = tools
        .iter()
        .find(|t| t["name"] == F)
        .expect("listed in extended");
    assert_eq!(decl["inputSchema"]["required"], json!(["members"]));
    assert_eq!(
        decl["inputSchema"]["examples"][0]["members"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert!(decl["outputSchema"]["properties"]["changeset_id"].is_object());
    let mut ids = Vec::new();
    for (f, text) in [
        ("def.py", "def parse(data):\n    pass\n"),
        ("use.py", "parse(data)\n"),
    ] {
        let (t, _) = s.call(
            "patchdiff_initialize_target",
            json!({"filename": f, "content": text}),
        );
        ids.push(t["target_file_id"].as_str().unwrap().to_owned());
    }
    let rename = json!({"client_request_id": "mcp-rename-1", "members": [
        {"target_file_id": ids[0], "expected_target_version": 0, "intent": "Rename parse",
         "edits": [{"match": "def parse(", "replace": "def parse_header("}]},
        {"target_file_id": ids[1], "expected_target_version": 0, "intent": "Update the caller",
         "operations": [{"op": "match", "match": "parse(data)", "replace": "parse_header(data)"}]}]});
    let (t, result) = s.call(F, rename.clone());
    assert_eq!(t["status"], "accepted", "{t}");
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"], t);
    let (again, _) = s.call(F, rename);
    assert_eq!(again["deduplicated"], true);
    assert_eq!(again["changeset_id"], t["changeset_id"]);
    // A stale member: nothing applied, the failing member named.
    let stale = json!({"members": [
        {"target_file_id": ids[0], "expected_target_version": 1, "intent": "Rename again",
         "edits": [{"match": "parse_header", "replace": "read_header"}]},
        {"target_file_id": ids[1], "expected_target_version": 0, "intent": "Stale caller",
         "edits": [{"match": "parse_header", "replace": "read_header"}]}]});
    let (t, result) = s.call(F, stale);
    assert_eq!(
        (&t["status"], &result["isError"]),
        (&json!("rejected"), &json!(false)),
        "{t}"
    );
    assert_eq!(t["failing_member"]["member_index"], 1);
    let (cur, _) = s.call("patchdiff_get_target", json!({"target_file_id": ids[0]}));
    assert_eq!(
        cur["current_content"],
        "def parse_header(data):\n    pass\n"
    );
    // Unknown and missing names never reach SQL.
    let (t, result) = s.call(F, json!({"members": [], "surprise": 1}));
    assert_eq!(
        (&t["code"], &result["isError"]),
        (&json!("unknown_argument"), &json!(true))
    );
}
