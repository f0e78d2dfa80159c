//! Issue 17, section 1 ("Where the code departs from the contract"), over real stdio and the
//! real database: `source`, observed_v2 receipts of rejections, target identity on the
//! submission tools and preview, strict observation mode's place in the contract's order, and
//! `same_as_failure_context` as an MCP-only projection. Each test names the clause it proves.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required) and `PATCHDIFF_MCP_BIN`.

use patchdiff_tests::stdio::Session;
use serde_json::{Value, json};

const REVISION: &str = "2025-11-25";
const TELEMETRY: &str = include_str!("../fixtures/structural/telemetry.py");
const UNKNOWN: &str = "11111111-1111-4111-8111-111111111111";

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN must be set")
}

fn session(env: &[(&str, &str)]) -> Session {
    Session::start(&dsn(), env, REVISION)
}

fn full() -> Session {
    session(&[("PATCHDIFF_MCP_PROFILE", "full")])
}

fn init(s: &mut Session, content: &str) -> String {
    let (r, _) = s.call(
        "patchdiff_initialize_target",
        json!({"filename": "telemetry.py", "content": content}),
    );
    assert_eq!(r["status"], "ok", "{r}");
    r["target_file_id"].as_str().unwrap().to_owned()
}

/// Every attempt row of `target`, newest first, as patchdiff_get_pdcp_log pages them.
fn log(s: &mut Session, target: &str) -> Vec<Value> {
    let (page, _) = s.call(
        "patchdiff_get_pdcp_log",
        json!({"target_file_id": target, "limit": 200}),
    );
    page["entries"].as_array().unwrap().clone()
}

/// The same call straight over SQL, as a DBA makes it.
fn sql(function: &str, args: &Value) -> Value {
    patchdiff_tests::with_sql(&dsn(), async |c| {
        patchdiff_tests::call(c, function, args).await.unwrap()
    })
}

/// Contract "patchdiff_submit_edits": `source (string, default "model_response")`. Host names
/// with spaces and non-ASCII are accepted and come back byte for byte from the log; one over
/// the documented 256 code points (docs/sql-api.md) is invalid_argument / source_too_large with
/// nothing written.
#[test]
fn source_is_any_bounded_string_stored_as_sent() {
    let mut s = full();
    let t = init(&mut s, "a\n");
    let sources = [
        "Claude Code",
        "user edit",
        "\u{7de8}\u{96c6} \u{1f916} caf\u{00e9}",
    ];
    for (v, source) in sources.iter().enumerate() {
        let (find, with) = if v % 2 == 0 { ("a", "b") } else { ("b", "a") };
        let (r, _) = s.call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": v, "intent": "i",
                   "edits": [{"match": find, "replace": with}], "source": source}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
    }
    let logged: Vec<String> = log(&mut s, &t)
        .iter()
        .rev()
        .map(|e| e["source"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(logged, sources);
    let (r, result) = s.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": 3, "intent": "i",
               "edits": [{"match": "b", "replace": "a"}], "source": "\u{00e9}".repeat(257)}),
    );
    assert_eq!(
        (&r["status"], &r["code"], &r["limit"], &r["actual"]),
        (
            &json!("invalid_argument"),
            &json!("source_too_large"),
            &json!(256),
            &json!(257)
        ),
        "{r}"
    );
    assert_eq!(result["isError"], true);
    assert_eq!(log(&mut s, &t).len(), 3);
}

/// Observe Uploader.flush and FRAME_SYNC_STREAM on a fresh target over `ed`; the commit
/// arguments of a bundle whose second group misses.
fn missing_bundle(host: &mut Session, ed: &mut Session, key: &str) -> (String, Value) {
    let t = init(host, TELEMETRY);
    let (observed, _) = ed.call(
        "patchdiff_observe_scopes",
        json!({"target_file_id": t, "selections": [{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM"}]}),
    );
    assert_eq!(observed["status"], "observed_batch", "{observed}");
    let scopes = observed["scopes"].as_array().unwrap();
    let commit = json!({
        "snapshot": observed["snapshot"], "intent": "tune", "client_request_id": key,
        "groups": [
            {"observation_id": scopes[0]["observation_id"], "operations": [
                {"op": "match", "match": "limit = 64", "replace": "limit = 128"},
                {"op": "match", "match": "limit", "replace": "cap", "occurrence_index": 1}]},
            {"observation_id": scopes[1]["observation_id"], "operations": [
                {"op": "match", "match": "frames-v9", "replace": "frames-v2"}]},
        ],
    });
    (t, commit)
}

/// observed-editor-v2 "Commit receipts": `transaction.before` and the operation/group counts
/// are "taken from the service result, including on recovery". A rejected commit, fresh and
/// then recovered under its key after the target moved on, carries the original before
/// version and the counts; `current` is the target now.
#[test]
fn v2_rejection_receipts_carry_before_version_and_counts() {
    let mut host = full();
    let mut ed = session(&[
        ("PATCHDIFF_MCP_PROFILE", "observed_v2"),
        ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
    ]);
    let (t, commit) = missing_bundle(&mut host, &mut ed, "v2-reject-1");
    let (r, result) = ed.call("patchdiff_commit_bundle", commit.clone());
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(result["isError"], true);
    let tx = &r["transaction"];
    assert_eq!(
        (
            &tx["before"]["version"],
            &tx["group_count"],
            &tx["operation_count"]
        ),
        (&json!(0), &json!(2), &json!(3)),
        "{r}"
    );
    assert_eq!(tx["after"], json!({"version": null, "hash": null}));
    assert!(tx["before"]["hash"].is_string(), "{r}");

    // The target moves on (the trusted connection), then the editor resends the same commit.
    let (ok, _) = host.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
               "edits": [{"match": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 32"}]}),
    );
    assert_eq!(ok["status"], "accepted", "{ok}");
    let (again, _) = ed.call("patchdiff_commit_bundle", commit);
    let tx2 = &again["transaction"];
    assert_eq!(tx2["deduplicated"], true, "{again}");
    assert_eq!(tx2["pdcp_log_id"], tx["pdcp_log_id"]);
    assert_eq!(
        (
            &tx2["before"]["version"],
            &tx2["group_count"],
            &tx2["operation_count"]
        ),
        (&json!(0), &json!(2), &json!(3)),
        "{again}"
    );
    assert_eq!(tx2["before"]["hash"], tx["before"]["hash"]);
    assert_eq!(again["current"]["version"], 1);
}

/// Contract "Bounded rejection context" (`unavailable_reason: "invalid_target_id" |
/// "target_not_found"`) and "Retryable rejections" (false for target-identity failures): over
/// MCP, every submission tool and preview answers a malformed or unknown target with that
/// rejection and `pdcp_log_id: null` (nothing can be stored without a target; docs/sql-api.md).
#[test]
fn target_identity_failures_are_rejections_over_mcp() {
    let mut s = full();
    let hash = "0".repeat(64);
    let calls = [
        (
            "patchdiff_submit_edits",
            "patchdiff-tx/1",
            json!({"intent": "i", "expected_target_version": 0, "edits": [{"match": "a", "replace": "b"}]}),
        ),
        (
            "patchdiff_submit_operations",
            "patchdiff-tx/2",
            json!({"intent": "i", "expected_target_version": 0, "operations": [{"op": "match", "match": "a", "replace": "b"}]}),
        ),
        (
            "patchdiff_submit_replacement",
            "patchdiff-tx/3",
            json!({"intent": "i", "expected_target_version": 0, "replacement": "b"}),
        ),
        (
            "patchdiff_submit_observed_operations",
            "patchdiff-tx/2",
            json!({"intent": "i", "expected_target_version": 0, "expected_current_hash": hash,
                   "observation_id": UNKNOWN, "operations": [{"op": "match", "match": "a", "replace": "b"}]}),
        ),
        (
            "patchdiff_preview",
            "patchdiff-tx/3",
            json!({"format": "patchdiff-tx/3", "intent": "i", "expected_target_version": 0, "replacement": "b"}),
        ),
    ];
    for (id, code) in [
        ("not-a-uuid", "invalid_target_id"),
        (UNKNOWN, "target_not_found"),
    ] {
        for (tool, format, args) in &calls {
            let mut a = args.clone();
            a["target_file_id"] = json!(id);
            let (r, result) = s.call(tool, a.clone());
            assert_eq!(
                (&r["status"], &r["code"], &r["failure_reason"]),
                (&json!("rejected"), &json!(code), &json!("context_invalid")),
                "{tool} {id}: {r}"
            );
            assert_eq!(result["isError"], false, "{tool}: {result}");
            assert_eq!(r["target_file_id"], id);
            let d = &r["diagnostic"];
            assert_eq!(
                (&d["code"], &d["retryable"], &d["format"]),
                (&json!(code), &json!(false), &json!(format)),
                "{tool}: {r}"
            );
            for c in [&d["failure_context"], &r["current_context"]] {
                assert_eq!(
                    (&c["available"], &c["unavailable_reason"], &c["text"]),
                    (&json!(false), &json!(code), &Value::Null),
                    "{tool}: {r}"
                );
            }
            if *tool != "patchdiff_preview" {
                assert_eq!(r["pdcp_log_id"], Value::Null, "{tool}: {r}");
            }
            // The same call over SQL answers the same rejection.
            assert_eq!(sql(tool, &a), r, "{tool} over SQL");
        }
    }

    // observed_v2's commit: the same rejection, as its receipt (isError: true there).
    let mut ed = session(&[("PATCHDIFF_MCP_PROFILE", "observed_v2")]);
    for (id, code) in [
        ("not-a-uuid", "invalid_target_id"),
        (UNKNOWN, "target_not_found"),
    ] {
        let (r, result) = ed.call(
            "patchdiff_commit_bundle",
            json!({"snapshot": {"target_file_id": id, "expected_target_version": 0,
                                "expected_current_hash": hash, "observation_bundle_id": UNKNOWN},
                   "intent": "i", "client_request_id": "k-1",
                   "groups": [{"observation_id": UNKNOWN, "operations": [{"op": "match", "match": "a", "replace": "b"}]}]}),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("rejected"), &json!(code)),
            "{r}"
        );
        assert_eq!(result["isError"], true);
        assert_eq!(r["transaction"]["pdcp_log_id"], Value::Null);
        assert_eq!(r["diagnostics"]["retryable"], false, "{r}");
        assert_eq!(
            r["diagnostics"]["current_context"]["unavailable_reason"],
            code
        );
    }
}

/// Contract "Common input and request-key rules" and "patchdiff_submit_replacement" ordering,
/// on a strict-mode connection: invalid text is classified first (the audited
/// target_encoding_invalid, not OBSERVATION_REQUIRED), and a valid oversized fresh replacement
/// is replacement_too_large with nothing written.
#[test]
fn strict_mode_keeps_the_contracts_order_over_stdio() {
    let mut host = full();
    let mut strict = session(&[
        ("PATCHDIFF_MCP_PROFILE", "full"),
        ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
    ]);
    let t = init(&mut host, "a\n");
    let (r, _) = strict.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
               "edits": [{"match": "a\u{0}", "replace": "b"}]}),
    );
    assert_eq!(r["failure_reason"], "target_encoding_invalid", "{r}");
    assert_eq!(r.get("code"), None, "{r}");
    assert_eq!(log(&mut host, &t).len(), 1);
    let (r, result) = strict.call(
        "patchdiff_submit_replacement",
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
               "replacement": "y".repeat(1_000_001)}),
    );
    assert_eq!(
        (&r["status"], &r["code"], &r["pdcp_log_id"]),
        (
            &json!("invalid_argument"),
            &json!("replacement_too_large"),
            &Value::Null
        ),
        "{r}"
    );
    assert_eq!(result["isError"], true);
    assert_eq!(log(&mut host, &t).len(), 1);
    let (r, _) = strict.call(
        "patchdiff_submit_replacement",
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "i", "replacement": "y"}),
    );
    assert_eq!(r["code"], "OBSERVATION_REQUIRED", "{r}");
    assert_eq!(log(&mut host, &t).len(), 2);
}

/// Contract "Bounded rejection context": "On MCP responses, including preview, a current_context
/// that would equal diagnostic.failure_context key for key is returned as unavailable_reason:
/// same_as_failure_context ... The Python service result keeps the full object." The same
/// rejection, its keyed recovery and a preview, over MCP and over SQL.
#[test]
fn same_as_failure_context_is_an_mcp_projection() {
    let mut s = full();
    let t = init(&mut s, "alpha beta alpha\n");
    let args = json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
                      "edits": [{"match": "alpha", "replace": "gamma"}], "client_request_id": "same-1"});
    let preview = json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0,
                         "intent": "i", "edits": [{"match": "alpha", "replace": "gamma"}]});
    let (fresh, _) = s.call("patchdiff_submit_edits", args.clone());
    let (recovered, _) = s.call("patchdiff_submit_edits", args.clone());
    let (previewed, _) = s.call("patchdiff_preview", preview.clone());
    assert_eq!(recovered["deduplicated"], true, "{recovered}");
    for r in [&fresh, &recovered, &previewed] {
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(
            r["current_context"]["unavailable_reason"], "same_as_failure_context",
            "{r}"
        );
        assert_eq!(r["diagnostic"]["failure_context"]["available"], true);
    }
    // Over SQL the same answers keep the full object, equal to failure_context.
    for (function, a) in [
        ("patchdiff_submit_edits", &args),
        ("patchdiff_preview", &preview),
    ] {
        let r = sql(function, a);
        assert_eq!(
            r["current_context"], r["diagnostic"]["failure_context"],
            "{r}"
        );
        assert_eq!(r["current_context"]["text"], "alpha beta alpha\n");
    }
    // Once the target has moved on, a recovery's current_context differs and stays whole.
    let (ok, _) = s.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
               "edits": [{"match": "beta", "replace": "delta"}]}),
    );
    assert_eq!(ok["status"], "accepted", "{ok}");
    let (later, _) = s.call("patchdiff_submit_edits", args);
    assert_eq!(later["deduplicated"], true);
    assert_eq!(later["current_context"]["available"], true, "{later}");
    assert_eq!(later["current_context"]["text"], "alpha delta alpha\n");
}
