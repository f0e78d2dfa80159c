//! Structural observation over real stdio (issue "Structural observation", tests): a trusted
//! `full` connection initializes five files of five languages; an `observed_v2` editor with
//! strict observation mode lists, observes and commits one bundle per file; the trusted
//! connection replays every target (all four checks true) and exports it byte-identical to the
//! expected file; keyed recovery of a bundle works across the v2 tool and the underlying
//! observed tool.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required) and `PATCHDIFF_MCP_BIN`.

use patchdiff_engine::wire::ascii_len;
use patchdiff_tests::stdio::Session;
use serde_json::{Value, json};

const REVISION: &str = "2025-11-25";
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/structural");
/// observed-editor-v2 "Commit receipts": the logical commit JSON is capped at 8,192 bytes.
const RECEIPT_MAX_BYTES: usize = 8_192;

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN must be set")
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}")).unwrap()
}

fn editor() -> Session {
    Session::start(
        &dsn(),
        &[
            ("PATCHDIFF_MCP_PROFILE", "observed_v2"),
            ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
            ("PATCHDIFF_WAYMARK_MODE", "resident"),
        ],
        REVISION,
    )
}

fn operator() -> Session {
    Session::start(&dsn(), &[("PATCHDIFF_MCP_PROFILE", "full")], REVISION)
}

fn m(find: &str, with: &str) -> Value {
    json!({"op": "match", "match": find, "replace": with})
}

/// One file's bundle: its selections, and the operations of each selected scope (by ordinal),
/// built from the scope text the observation returned.
struct Plan {
    file: &'static str,
    selections: Value,
    operations: fn(&[Value]) -> Vec<Vec<Value>>,
}

fn plans() -> Vec<Plan> {
    vec![
        Plan {
            file: "telemetry.py",
            selections: json!([{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM"}]),
            operations: |_| {
                vec![
                    vec![m("limit = 64", "limit = 128")],
                    vec![m("frames-v1", "frames-v2")],
                ]
            },
        },
        Plan {
            file: "client.ts",
            selections: json!([{"symbol_name": "Channel.connect", "kind": "method"}, {"symbol_name": "FRAME_SYNC_STREAM"}]),
            // A scope-local span: coordinates count from the scope's start.
            operations: |scopes| {
                let text = scopes[0]["text"].as_str().unwrap();
                let at = text.find("retries = 3").unwrap() + "retries = ".len();
                vec![
                    vec![
                        json!({"op": "span", "start": at, "end": at + 1, "expected_text": "3", "replace": "5"}),
                    ],
                    vec![m("frames-v1", "frames-v2")],
                ]
            },
        },
        Plan {
            file: "tenants.json",
            selections: json!([{"symbol_name": "tenants[ten_013]"}, {"symbol_name": "region"}]),
            operations: |_| {
                vec![
                    vec![m("\"basic\"", "\"pro\""), m("10", "25")],
                    vec![m("eu-west", "eu-central")],
                ]
            },
        },
        Plan {
            file: "checklist.md",
            selections: json!([{"symbol_name": "row:CHK-14-C"}, {"symbol_name": "fence:L12"}]),
            operations: |_| vec![vec![m("pending", "done")], vec![m("pending", "done")]],
        },
        Plan {
            file: "deploy.yaml",
            selections: json!([{"symbol_name": "services.worker"}]),
            operations: |_| vec![vec![m("replicas: 2", "replicas: 4")]],
        },
    ]
}

/// The end-to-end proof, over real pipes, with the trusted host's full connection and
/// the editing agent's observed_v2 connection.
#[test]
fn five_languages_commit_through_observed_v2_and_replay_exactly() {
    let mut host = operator();
    let mut ed = editor();

    // The editor's catalog: exactly the five tools, each marked alwaysLoad.
    let tools = ed.request("tools/list", json!({}))["result"]["tools"].clone();
    let mut names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "patchdiff_commit_bundle",
            "patchdiff_find_occurrences",
            "patchdiff_list_scopes",
            "patchdiff_observe_scopes",
            "patchdiff_read_target"
        ]
    );
    for t in tools.as_array().unwrap() {
        assert_eq!(t["_meta"]["antigravity/alwaysLoad"], true, "{}", t["name"]);
    }

    for plan in plans() {
        let before = fixture(plan.file);
        let (init, _) = host.call(
            "patchdiff_initialize_target",
            json!({"filename": plan.file, "content": before}),
        );
        assert_eq!(init["status"], "ok", "{init}");
        let target = init["target_file_id"].as_str().unwrap().to_owned();

        // Strict mode: the unobserved route is not even offered; listing issues nothing.
        let (listed, _) = ed.call("patchdiff_list_scopes", json!({"target_file_id": target}));
        assert_eq!(listed["status"], "candidates", "{}: {listed}", plan.file);
        assert!(
            listed["total_candidates"].as_u64().unwrap() >= 2,
            "{listed}"
        );

        let (observed, result) = ed.call(
            "patchdiff_observe_scopes",
            json!({"target_file_id": target, "selections": plan.selections}),
        );
        assert_eq!(
            observed["status"], "observed_batch",
            "{}: {observed}",
            plan.file
        );
        assert_ne!(result["isError"], true);
        let scopes = observed["scopes"].as_array().unwrap().clone();
        let ops = (plan.operations)(&scopes);
        let groups: Vec<Value> = scopes
            .iter()
            .zip(ops)
            .map(|(s, o)| json!({"observation_id": s["observation_id"], "operations": o}))
            .collect();
        let key = format!("five-file-{}", plan.file);
        let commit = json!({
            "snapshot": observed["snapshot"],
            "intent": format!("scoped edits of {}", plan.file),
            "client_request_id": key,
            "groups": groups,
        });
        let (receipt, result) = ed.call("patchdiff_commit_bundle", commit.clone());
        assert_eq!(receipt["status"], "accepted", "{}: {receipt}", plan.file);
        assert_ne!(result["isError"], true);
        assert!(
            ascii_len(&receipt) <= RECEIPT_MAX_BYTES,
            "{}",
            ascii_len(&receipt)
        );
        assert_eq!(receipt["transaction"]["before"]["version"], 0);
        assert_eq!(receipt["transaction"]["after"]["version"], 1);
        assert_eq!(receipt["current"]["version"], 1);
        assert_eq!(receipt["scopes"]["total"], scopes.len());
        assert_eq!(result["structuredContent"], receipt);

        // The same commit again through the v2 tool: recovered, not applied twice.
        let (again, _) = ed.call("patchdiff_commit_bundle", commit.clone());
        assert_eq!(again["transaction"]["deduplicated"], true, "{again}");
        assert_eq!(
            again["transaction"]["pdcp_log_id"],
            receipt["transaction"]["pdcp_log_id"]
        );
        // ... and through the underlying observed tool with the normalized arguments.
        let snap = &observed["snapshot"];
        let (underlying, _) = host.call(
            "patchdiff_submit_observed_operations",
            json!({
                "target_file_id": snap["target_file_id"],
                "expected_target_version": snap["expected_target_version"],
                "expected_current_hash": snap["expected_current_hash"],
                "observation_bundle_id": snap["observation_bundle_id"],
                "intent": commit["intent"],
                "client_request_id": key,
                "groups": commit["groups"],
            }),
        );
        assert_eq!(underlying["deduplicated"], true, "{underlying}");
        assert_eq!(
            underlying["pdcp_log_id"],
            receipt["transaction"]["pdcp_log_id"]
        );

        // The trusted host replays and exports.
        let (replay, _) = host.call("patchdiff_replay", json!({"target_file_id": target}));
        assert_eq!(replay["status"], "success", "{replay}");
        assert_eq!(replay["materialized_state_matches"], true, "{replay}");
        for k in [
            "content_matches",
            "stored_hash_matches",
            "recomputed_hash_matches",
            "version_matches",
        ] {
            assert_eq!(
                replay["materialized_state_checks"][k], true,
                "{k}: {replay}"
            );
        }
        let (export, _) = host.call(
            "patchdiff_export_target",
            json!({"target_file_id": target, "format": "original_text"}),
        );
        assert_eq!(
            export["content"].as_str().unwrap(),
            fixture(&format!("{}.expected", plan.file)),
            "{}",
            plan.file
        );
    }
}

/// Strict observation mode on a connection that still offers the unobserved tools
/// (`observed_editor` does not; `full` does): every unobserved write is an audited
/// OBSERVATION_REQUIRED rejection.
#[test]
fn strict_mode_refuses_unobserved_writes_over_stdio() {
    let mut host = operator();
    let mut strict = Session::start(
        &dsn(),
        &[
            ("PATCHDIFF_MCP_PROFILE", "full"),
            ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
        ],
        REVISION,
    );
    let (init, _) = host.call(
        "patchdiff_initialize_target",
        json!({"filename": "telemetry.py", "content": fixture("telemetry.py")}),
    );
    let target = init["target_file_id"].clone();
    let (r, _) = strict.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": target, "intent": "x", "expected_target_version": 0,
               "edits": [{"match": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 32"}]}),
    );
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["diagnostic"]["code"], "OBSERVATION_REQUIRED", "{r}");
    // The same edit without strict mode is accepted.
    let (ok, _) = host.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": target, "intent": "x", "expected_target_version": 0,
               "edits": [{"match": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 32"}]}),
    );
    assert_eq!(ok["status"], "accepted", "{ok}");
}

/// The catalog's placeholders (contract: "Bind illustrative IDs, both guards and returned
/// cursors to actual receipts"): target, first and second observation, bundle, hash.
const PLACEHOLDER_TARGET: &str = "11111111-1111-4111-8111-111111111111";
const PLACEHOLDER_O1: &str = "33333333-3333-4333-8333-333333333333";
const PLACEHOLDER_O2: &str = "44444444-4444-4444-8444-444444444444";
const PLACEHOLDER_BUNDLE: &str = "55555555-5555-4555-8555-555555555555";
const PLACEHOLDER_HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// An example with each placeholder string replaced by its real value and every
/// `expected_target_version` (top level or in the snapshot) set to the real version; no
/// placeholder may survive.
fn bind(example: &Value, ids: &[(&str, &Value)], version: i64) -> Value {
    fn walk(v: &mut Value, ids: &[(&str, &Value)], version: i64) {
        match v {
            Value::String(s) => {
                if let Some((_, real)) = ids.iter().find(|(p, _)| p == s) {
                    *v = (*real).clone();
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|c| walk(c, ids, version)),
            Value::Object(m) => {
                for (k, c) in m.iter_mut() {
                    if k == "expected_target_version" {
                        *c = json!(version);
                    } else {
                        walk(c, ids, version);
                    }
                }
            }
            _ => {}
        }
    }
    let mut bound = example.clone();
    walk(&mut bound, ids, version);
    let text = bound.to_string();
    for p in [
        PLACEHOLDER_TARGET,
        PLACEHOLDER_O1,
        PLACEHOLDER_O2,
        PLACEHOLDER_BUNDLE,
        PLACEHOLDER_HASH,
    ] {
        assert!(!text.contains(p), "unbound placeholder {p} in {bound}");
    }
    bound
}

/// The examples `tools/list` advertises for `tool` on `session`'s profile.
fn advertised(session: &mut Session, tool: &str) -> Vec<Value> {
    let tools = session.request("tools/list", json!({}))["result"]["tools"].clone();
    let t = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} is not listed"))
        .clone();
    t["inputSchema"]["examples"].as_array().unwrap().clone()
}

/// Contract "Discovery, argument errors and examples" ("Every advertised example runs over real
/// stdio and PostgreSQL in the test suite") and "Structural Observation and Scoped Submission"
/// ("examples for filtered candidate discovery, direct single selection, batch selection,
/// observation paging, and separate single/batch submissions"), plus the three observed_v2
/// examples (observed-editor-v2.txt): each runs, in catalog order, with its placeholders bound
/// to real receipts, and gets the outcome its tool description documents. The file is
/// telemetry.py with an Uploader.flush longer than one 4,000-code-point page, so the paging
/// example's offset 4000 is the cursor the selection returns.
#[test]
fn advertised_structural_examples_run_in_order() {
    let mut host = operator();
    let padding = "        # frames stay in stream order across retries\n".repeat(90);
    let content = fixture("telemetry.py").replace(
        "    def flush(self, buffer):\n",
        &format!("    def flush(self, buffer):\n{padding}"),
    );
    let init = |host: &mut Session| {
        let (init, _) = host.call(
            "patchdiff_initialize_target",
            json!({"filename": "telemetry.py", "content": content}),
        );
        assert_eq!(init["status"], "ok", "{init}");
        (init["target_file_id"].clone(), init["current_hash"].clone())
    };
    let run = |s: &mut Session, tool: &str, args: Value| {
        let (t, result) = s.call(tool, args);
        assert_ne!(result["isError"], true, "{tool}: {t}");
        t
    };
    let observe = advertised(&mut host, "patchdiff_observe_scope");
    let submit = advertised(&mut host, "patchdiff_submit_observed_operations");
    assert_eq!((observe.len(), submit.len()), (4, 2));

    // Target A: discovery, single selection, paging, the single-form submission.
    let (a, a_hash) = init(&mut host);
    let ids = [(PLACEHOLDER_TARGET, &a)];
    let found = run(
        &mut host,
        "patchdiff_observe_scope",
        bind(&observe[0], &ids, 0),
    );
    assert_eq!(
        (&found["status"], &found["observation_id"]),
        (&json!("candidates"), &Value::Null),
        "{found}"
    );
    let names: Vec<&Value> = found["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert!(names.contains(&&json!("Uploader.flush")), "{found}");
    let one = run(
        &mut host,
        "patchdiff_observe_scope",
        bind(&observe[1], &ids, 0),
    );
    assert_eq!(one["status"], "observed", "{one}");
    assert_eq!(one["next_offset"], 4000, "{one}");
    let o1 = one["observation_id"].clone();
    // observe[2] (the bundle) runs on target B, below, in catalog order.
    let (b, b_hash) = init(&mut host);
    let ids_b = [(PLACEHOLDER_TARGET, &b)];
    let bundle = run(
        &mut host,
        "patchdiff_observe_scope",
        bind(&observe[2], &ids_b, 0),
    );
    assert_eq!(bundle["status"], "observed_batch", "{bundle}");
    assert_eq!(bundle["scope_count"], 2, "{bundle}");
    let page = run(
        &mut host,
        "patchdiff_observe_scope",
        bind(
            &observe[3],
            &[(PLACEHOLDER_TARGET, &a), (PLACEHOLDER_O1, &o1)],
            0,
        ),
    );
    assert_eq!(
        (&page["status"], &page["offset"], &page["truncated"]),
        (&json!("observed"), &json!(4000), &json!(false)),
        "{page}"
    );
    assert!(
        page["text"]
            .as_str()
            .unwrap()
            .ends_with("return self.send(buffer[:limit])"),
        "{page}"
    );
    let single = bind(
        &submit[0],
        &[
            (PLACEHOLDER_TARGET, &a),
            (PLACEHOLDER_O1, &o1),
            (PLACEHOLDER_HASH, &a_hash),
        ],
        0,
    );
    let accepted = run(
        &mut host,
        "patchdiff_submit_observed_operations",
        single.clone(),
    );
    assert_eq!(
        (&accepted["status"], &accepted["version"]),
        (&json!("accepted"), &json!(1)),
        "{accepted}"
    );
    let again = run(&mut host, "patchdiff_submit_observed_operations", single);
    assert_eq!(
        (&again["deduplicated"], &again["pdcp_log_id"]),
        (&json!(true), &accepted["pdcp_log_id"])
    );

    // Target B: the batch-form submission over the bundle observe[2] issued.
    let scopes = bundle["scopes"].as_array().unwrap();
    let batch = bind(
        &submit[1],
        &[
            (PLACEHOLDER_TARGET, &b),
            (PLACEHOLDER_BUNDLE, &bundle["observation_bundle_id"]),
            (PLACEHOLDER_O1, &scopes[0]["observation_id"]),
            (PLACEHOLDER_O2, &scopes[1]["observation_id"]),
            (PLACEHOLDER_HASH, &b_hash),
        ],
        0,
    );
    let accepted = run(&mut host, "patchdiff_submit_observed_operations", batch);
    assert_eq!(
        (&accepted["status"], &accepted["version"]),
        (&json!("accepted"), &json!(1)),
        "{accepted}"
    );
    let (now, _) = host.call("patchdiff_get_target", json!({"target_file_id": b}));
    let text = now["current_content"].as_str().unwrap();
    assert!(
        text.contains("FRAME_SYNC_STREAM = \"frames-v2\"")
            && text.contains("        limit = 128\n"),
        "{text}"
    );

    // observed_v2 on target C: list, observe, commit.
    let mut ed = editor();
    let list = advertised(&mut ed, "patchdiff_list_scopes");
    let select = advertised(&mut ed, "patchdiff_observe_scopes");
    let commit = advertised(&mut ed, "patchdiff_commit_bundle");
    assert_eq!((list.len(), select.len(), commit.len()), (1, 1, 1));
    let (c, _) = init(&mut host);
    let ids_c = [(PLACEHOLDER_TARGET, &c)];
    let listed = run(&mut ed, "patchdiff_list_scopes", bind(&list[0], &ids_c, 0));
    assert_eq!(listed["status"], "candidates", "{listed}");
    assert!(
        listed["total_candidates"].as_u64().unwrap() >= 1,
        "{listed}"
    );
    let selected = run(
        &mut ed,
        "patchdiff_observe_scopes",
        bind(&select[0], &ids_c, 0),
    );
    assert_eq!(selected["status"], "observed_batch", "{selected}");
    let scopes = selected["scopes"].as_array().unwrap();
    let snapshot = &selected["snapshot"];
    let bound = bind(
        &commit[0],
        &[
            (PLACEHOLDER_TARGET, &snapshot["target_file_id"]),
            (PLACEHOLDER_BUNDLE, &snapshot["observation_bundle_id"]),
            (PLACEHOLDER_HASH, &snapshot["expected_current_hash"]),
            (PLACEHOLDER_O1, &scopes[0]["observation_id"]),
            (PLACEHOLDER_O2, &scopes[1]["observation_id"]),
        ],
        snapshot["expected_target_version"].as_i64().unwrap(),
    );
    assert_eq!(&bound["snapshot"], snapshot);
    let receipt = run(&mut ed, "patchdiff_commit_bundle", bound);
    assert_eq!(receipt["status"], "accepted", "{receipt}");
    assert_eq!(
        (
            &receipt["transaction"]["before"]["version"],
            &receipt["transaction"]["after"]["version"],
            &receipt["transaction"]["group_count"],
            &receipt["transaction"]["operation_count"],
        ),
        (&json!(0), &json!(1), &json!(2), &json!(2)),
        "{receipt}"
    );
    assert!(ascii_len(&receipt) <= RECEIPT_MAX_BYTES);
}
