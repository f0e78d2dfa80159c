//! Structural observation and scoped submission through SQL (contract "Structural Observation
//! and Scoped Submission"): one fixture per language, every observation rejection code proved
//! atomic and audited, bundles, strict mode and replay.

use crate::tests::{call, content, scalar};
use pgrx::prelude::*;
use serde_json::{Value, json};

fn init_file(filename: &str, text: &str) -> String {
    let r = call(
        "patchdiff_initialize_target",
        json!({"filename": filename, "content": text}),
    );
    assert_eq!(r["status"], "ok", "{r}");
    r["target_file_id"].as_str().unwrap().to_owned()
}

fn observe(target: &str, args: Value) -> Value {
    let mut a = args;
    a["target_file_id"] = json!(target);
    call("patchdiff_observe_scope", a)
}

fn version(target: &str) -> i64 {
    scalar(
        "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::uuid",
        target,
    )
}

fn ledger_rows(target: &str) -> i64 {
    scalar(
        "SELECT count(*) FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
        target,
    )
}

fn observations(target: &str) -> i64 {
    scalar(
        "SELECT count(*) FROM patchdiff.target_scope_observations WHERE target_file_id = $1::uuid",
        target,
    )
}

/// Submits the single form against the observation's own guards.
fn submit_observed(target: &str, observed: &Value, operations: Value) -> Value {
    call(
        "patchdiff_submit_observed_operations",
        json!({
            "target_file_id": target,
            "observation_id": observed["observation_id"],
            "intent": "scoped edit",
            "operations": operations,
            "expected_target_version": observed["target_version"],
            "expected_current_hash": observed["target_current_hash"],
        }),
    )
}

fn replace(find: &str, with: &str) -> Value {
    json!([{"op": "match", "match": find, "replace": with}])
}

/// "Every rejection is atomic and audited": the answer is a rejection with `code`, the target
/// neither moved nor gained ledger rows, and the newest attempt row stores the same code.
fn assert_audited(target: &str, r: &Value, code: &str, before: (i64, i64)) {
    assert_eq!(r["status"], "rejected", "{r}");
    assert_eq!(r["diagnostic"]["code"], code, "{r}");
    assert_eq!((version(target), ledger_rows(target)), before, "{r}");
    let stored: String = scalar(
        "SELECT diagnostic->>'code' FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid \
         ORDER BY log_sequence DESC LIMIT 1",
        target,
    );
    assert_eq!(stored, code);
    let status: String = scalar(
        "SELECT status FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid \
         ORDER BY log_sequence DESC LIMIT 1",
        target,
    );
    assert_eq!(status, "rejected");
}

fn state(target: &str) -> (i64, i64) {
    (version(target), ledger_rows(target))
}

/// One fixture per language: (filename, text, symbol to observe, repeated text, replacement,
/// expected text after the scoped edit).
const FIXTURES: &[(&str, &str, &str, &str, &str, &str)] = &[
    (
        "svc.py",
        "RETRY_LIMIT = 3\n\ndef fetch(url):\n    timeout = 30\n    return get(url, timeout)\n\nclass Client:\n    def fetch(self, url):\n        timeout = 30\n        return self.get(url, timeout)\n",
        "Client.fetch",
        "timeout = 30",
        "timeout = 60",
        "RETRY_LIMIT = 3\n\ndef fetch(url):\n    timeout = 30\n    return get(url, timeout)\n\nclass Client:\n    def fetch(self, url):\n        timeout = 60\n        return self.get(url, timeout)\n",
    ),
    (
        "app.ts",
        "export const FRAME_SYNC_STREAM = \"frame-sync\";\n\nexport function connect(retries: number): number {\n  const delay = 100;\n  return retries * delay;\n}\n\nclass Pool {\n  connect(retries: number): number {\n    const delay = 100;\n    return retries + delay;\n  }\n}\n",
        "Pool.connect",
        "delay = 100",
        "delay = 250",
        "export const FRAME_SYNC_STREAM = \"frame-sync\";\n\nexport function connect(retries: number): number {\n  const delay = 100;\n  return retries * delay;\n}\n\nclass Pool {\n  connect(retries: number): number {\n    const delay = 250;\n    return retries + delay;\n  }\n}\n",
    ),
    (
        "cache.js",
        "function load(key) {\n  return store.get(key) ?? null;\n}\n\nclass Cache {\n  load(key) {\n    return store.get(key) ?? null;\n  }\n}\n",
        "Cache.load",
        "?? null",
        "?? undefined",
        "function load(key) {\n  return store.get(key) ?? null;\n}\n\nclass Cache {\n  load(key) {\n    return store.get(key) ?? undefined;\n  }\n}\n",
    ),
    (
        "tenants.json",
        "{\n  \"tenants\": [\n    {\"id\": \"ten_012\", \"region\": \"eu\", \"quota\": 10},\n    {\"id\": \"ten_013\", \"region\": \"eu\", \"quota\": 10}\n  ]\n}\n",
        "tenants[ten_013]",
        "\"quota\": 10",
        "\"quota\": 20",
        "{\n  \"tenants\": [\n    {\"id\": \"ten_012\", \"region\": \"eu\", \"quota\": 10},\n    {\"id\": \"ten_013\", \"region\": \"eu\", \"quota\": 20}\n  ]\n}\n",
    ),
    (
        "runbook.md",
        "# Runbook\n\n## Checks (v2.1)\n\n| id | owner | status |\n| --- | --- | --- |\n| CHK-14-B | ops | open |\n| CHK-14-C | ops | open |\n\n```sh\necho open\n```\n",
        "row:CHK-14-C",
        "open",
        "closed",
        "# Runbook\n\n## Checks (v2.1)\n\n| id | owner | status |\n| --- | --- | --- |\n| CHK-14-B | ops | open |\n| CHK-14-C | ops | closed |\n\n```sh\necho open\n```\n",
    ),
    (
        "deploy.yaml",
        "services:\n  api:\n    replicas: 2\n    image: app:1.0\n  worker:\n    replicas: 2\n    image: app:1.0\n",
        "services.worker",
        "replicas: 2",
        "replicas: 4",
        "services:\n  api:\n    replicas: 2\n    image: app:1.0\n  worker:\n    replicas: 4\n    image: app:1.0\n",
    ),
    (
        "cfg.toml",
        "[server]\nport = 8080\ntimeout = 30\n\n[client]\nport = 8080\ntimeout = 30\n",
        "client",
        "timeout = 30",
        "timeout = 45",
        "[server]\nport = 8080\ntimeout = 30\n\n[client]\nport = 8080\ntimeout = 45\n",
    ),
    (
        "run.sh",
        "#!/bin/sh\nRETRIES=3\n\nstart() {\n  echo \"starting\"\n  sleep 1\n}\n\nstop() {\n  echo \"stopping\"\n  sleep 1\n}\n",
        "stop",
        "sleep 1",
        "sleep 2",
        "#!/bin/sh\nRETRIES=3\n\nstart() {\n  echo \"starting\"\n  sleep 1\n}\n\nstop() {\n  echo \"stopping\"\n  sleep 2\n}\n",
    ),
];

#[pg_schema]
mod tests {
    use super::*;

    /// Host guide "Waymark structural observation workflow": per language, a string that
    /// repeats in several symbols is ambiguous target-wide, and an edit observed in one symbol
    /// changes only that symbol.
    #[pg_test]
    fn an_observed_edit_changes_only_its_symbol_in_every_language() {
        for &(file, text, symbol, find, with, expected) in FIXTURES {
            let t = init_file(file, text);
            let plain = call(
                "patchdiff_submit_edits",
                json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                       "edits": [{"match": find, "replace": with}]}),
            );
            assert_eq!(
                plain["failure_reason"], "match_ambiguous",
                "{file}: {plain}"
            );
            let o = observe(&t, json!({"symbol_name": symbol}));
            assert_eq!(o["status"], "observed", "{file}: {o}");
            assert!(o["text"].as_str().unwrap().contains(find), "{file}: {o}");
            let r = submit_observed(&t, &o, replace(find, with));
            assert_eq!(r["status"], "accepted", "{file}: {r}");
            assert_eq!(content(&t), expected, "{file}");
            assert_eq!(r["version"], 1, "{file}");
        }
    }

    /// Candidate discovery issues no observation; a selection persists exactly one row with the
    /// engine that found it.
    #[pg_test]
    fn candidates_issue_nothing_and_selection_persists_one_observation() {
        let (file, text) = (FIXTURES[0].0, FIXTURES[0].1);
        let t = init_file(file, text);
        let c = observe(&t, json!({"query": "FETCH"}));
        assert_eq!(c["status"], "candidates", "{c}");
        assert_eq!(c["observation_id"], Value::Null);
        assert_eq!(c["total_candidates"], 2, "{c}");
        assert_eq!(observations(&t), 0);
        let a = observe(&t, json!({"symbol_name": "fetch"}));
        assert_eq!(
            (a["status"].as_str(), a["code"].as_str()),
            (Some("ambiguous"), Some("AMBIGUOUS_SCOPE_SELECTION"))
        );
        assert_eq!(a["observation_id"], Value::Null);
        let n = observe(&t, json!({"symbol_name": "nope"}));
        assert_eq!(n["code"], "SCOPE_NOT_FOUND");
        assert_eq!(observations(&t), 0);
        let o = observe(&t, json!({"symbol_name": "fetch", "kind": "function"}));
        assert_eq!(o["status"], "observed", "{o}");
        assert_eq!(observations(&t), 1);
        let engine: String = scalar(
            "SELECT engine FROM patchdiff.target_scope_observations WHERE target_file_id = $1::uuid",
            &t,
        );
        assert!(engine.starts_with("patchdiff-waymark@"), "{engine}");
        let u = call(
            "patchdiff_observe_scope",
            json!({"target_file_id": init_file("notes.txt", "plain"), "query": "x"}),
        );
        assert_eq!(u["code"], "UNSUPPORTED_LANGUAGE");
    }

    /// Observation paging: 4,000 default / 8,000 cap, offset within the scope, and
    /// "Observation pagination rejects a closed cycle after SAVE with OBSERVATION_CYCLE_MISMATCH,
    /// even when content, hash and version are unchanged."
    #[pg_test]
    fn observation_pages_continue_until_a_save_closes_the_cycle() {
        let body: String = (0..3000).map(|i| format!("    v{i} = {i}\n")).collect();
        let t = init_file("big.py", &format!("def big():\n{body}"));
        let o = observe(&t, json!({"symbol_name": "big", "max_chars": 9000}));
        assert_eq!(o["max_chars"], 8000);
        assert_eq!(o["truncated"], true);
        let id = o["observation_id"].clone();
        let p = observe(
            &t,
            json!({"observation_id": id, "offset": o["next_offset"], "include_line_starts": true}),
        );
        assert_eq!(p["mode"], "scope_page", "{p}");
        assert_eq!(p["offset"], 8000);
        assert_eq!(p["start"], o["scope_start"].as_u64().unwrap() + 8000);
        assert_eq!(p["text"].as_str().unwrap().chars().count(), 4000);
        assert!(!p["line_starts"].as_array().unwrap().is_empty());
        let saved = call(
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": 0}),
        );
        assert_eq!(saved["status"], "saved", "{saved}");
        assert_eq!(version(&t), 0);
        let p = observe(&t, json!({"observation_id": id}));
        assert_eq!(p["code"], "OBSERVATION_CYCLE_MISMATCH", "{p}");
    }

    /// Every observation rejection code of patchdiff_submit_observed_operations, each atomic
    /// (no ledger row, no version step) and audited (a rejected attempt storing the code).
    #[pg_test]
    fn every_observation_rejection_is_atomic_and_audited() {
        let (file, text) = (FIXTURES[0].0, FIXTURES[0].1);
        let t = init_file(file, text);
        let o = observe(&t, json!({"symbol_name": "Client.fetch"}));
        let guards = |v: &Value| {
            json!({"target_file_id": t, "intent": "x", "operations": replace("timeout = 30", "timeout = 1"),
                   "expected_target_version": v["target_version"], "expected_current_hash": v["target_current_hash"]})
        };
        let submit = |mut a: Value, extra: Value| {
            for (k, v) in extra.as_object().unwrap() {
                a[k] = v.clone();
            }
            call("patchdiff_submit_observed_operations", a)
        };
        let s = state(&t);
        assert_audited(
            &t,
            &submit(guards(&o), json!({})),
            "OBSERVATION_REQUIRED",
            s,
        );
        assert_audited(
            &t,
            &submit(guards(&o), json!({"observation_id": "not-a-uuid"})),
            "INVALID_OBSERVATION_ID",
            s,
        );
        assert_audited(
            &t,
            &submit(
                guards(&o),
                json!({"observation_id": "00000000-0000-4000-8000-000000000000"}),
            ),
            "UNKNOWN_OBSERVATION_ID",
            s,
        );
        let other = init_file("other.py", text);
        let foreign = observe(&other, json!({"symbol_name": "Client.fetch"}));
        assert_audited(
            &t,
            &submit(
                guards(&o),
                json!({"observation_id": foreign["observation_id"]}),
            ),
            "OBSERVATION_TARGET_MISMATCH",
            s,
        );
        // Insertions strictly inside, with both adjacency guards.
        let at = o["scope_start"].as_u64().unwrap();
        let insert = |start: u64, before: Option<&str>, after: Option<&str>| {
            let mut op = json!({"op": "span", "start": start, "end": start, "expected_text": "", "replace": "# note\n"});
            if let Some(b) = before {
                op["expected_before"] = json!(b);
            }
            if let Some(a) = after {
                op["expected_after"] = json!(a);
            }
            submit(
                guards(&o),
                json!({"observation_id": o["observation_id"], "operations": [op]}),
            )
        };
        assert_audited(
            &t,
            &insert(at, None, Some("d")),
            "OPERATION_OUTSIDE_OBSERVED_SCOPE",
            s,
        );
        assert_audited(
            &t,
            &insert(at + 4, None, Some("f")),
            "OBSERVED_INSERTION_GUARDS_REQUIRED",
            s,
        );
        let end = o["scope_end"].as_u64().unwrap();
        assert_audited(
            &t,
            &insert(end, Some(")"), Some("\n")),
            "OPERATION_OUTSIDE_OBSERVED_SCOPE",
            s,
        );
        let span_outside =
            json!([{"op": "span", "start": 0, "end": 3, "expected_text": "RET", "replace": "X"}]);
        assert_audited(
            &t,
            &submit(
                guards(&o),
                json!({"observation_id": o["observation_id"], "operations": span_outside}),
            ),
            "OPERATION_OUTSIDE_OBSERVED_SCOPE",
            s,
        );
        // A stale observation: the target moved on (an unobserved edit elsewhere).
        let moved = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                   "edits": [{"match": "RETRY_LIMIT = 3", "replace": "RETRY_LIMIT = 4"}]}),
        );
        assert_eq!(moved["status"], "accepted", "{moved}");
        let s = state(&t);
        let mut now = guards(&o);
        now["expected_target_version"] = json!(1);
        now["expected_current_hash"] = moved["after_hash"].clone();
        assert_audited(
            &t,
            &submit(now.clone(), json!({"observation_id": o["observation_id"]})),
            "STALE_OBSERVATION_VERSION",
            s,
        );
        // A forged row with the current version and another hash (a superuser test fixture).
        let forged = "11111111-1111-4111-8111-111111111111";
        Spi::run_with_args(
            "INSERT INTO patchdiff.target_scope_observations SELECT $2::uuid, target_file_id, editing_cycle_id, \
               NULL, NULL, 1, repeat('0', 64), symbol_name, symbol_kind, parent, requested_name, requested_kind, \
               language, engine, grammar, scope_start, scope_end, scope_start_line, scope_end_line, observed_scope_hash, \
               now() FROM patchdiff.target_scope_observations WHERE observation_id = $1::uuid",
            &[o["observation_id"].as_str().unwrap().into(), forged.into()],
        )
        .unwrap();
        assert_audited(
            &t,
            &submit(now.clone(), json!({"observation_id": forged})),
            "STALE_OBSERVATION_HASH",
            s,
        );
        // Consumed: a fresh observation accepted once, then used again.
        let fresh = observe(&t, json!({"symbol_name": "Client.fetch"}));
        let ok = submit(
            guards(&fresh),
            json!({"observation_id": fresh["observation_id"]}),
        );
        assert_eq!(ok["status"], "accepted", "{ok}");
        let s = state(&t);
        let mut again = guards(&fresh);
        again["expected_target_version"] = json!(2);
        again["expected_current_hash"] = ok["after_hash"].clone();
        assert_audited(
            &t,
            &submit(again, json!({"observation_id": fresh["observation_id"]})),
            "OBSERVATION_ALREADY_CONSUMED",
            s,
        );
        // Closed cycle: observe, SAVE, submit.
        let last = observe(&t, json!({"symbol_name": "fetch", "kind": "function"}));
        let saved = call(
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": 2}),
        );
        assert_eq!(saved["status"], "saved", "{saved}");
        let s = state(&t);
        assert_audited(
            &t,
            &submit(
                guards(&last),
                json!({"observation_id": last["observation_id"], "operations": replace("timeout = 30", "timeout = 5")}),
            ),
            "OBSERVATION_CYCLE_MISMATCH",
            s,
        );
    }

    /// "When PATCHDIFF_STRICT_OBSERVATION_MODE=1 is enabled, all unobserved write tools ... are
    /// rejected and logged with code: OBSERVATION_REQUIRED" (the session setting in SQL).
    #[pg_test]
    fn strict_mode_rejects_and_logs_every_unobserved_write() {
        let t = init_file("svc.py", FIXTURES[0].1);
        Spi::run("SET LOCAL patchdiff.strict_observation_mode = on").unwrap();
        let s = state(&t);
        let calls = [
            (
                "patchdiff_submit_edits",
                json!({"edits": [{"match": "RETRY_LIMIT = 3", "replace": "RETRY_LIMIT = 4"}]}),
            ),
            (
                "patchdiff_submit_operations",
                json!({"operations": replace("RETRY_LIMIT = 3", "RETRY_LIMIT = 4")}),
            ),
            ("patchdiff_submit_replacement", json!({"replacement": "x"})),
        ];
        for (f, extra) in calls {
            let mut a = json!({"target_file_id": t, "intent": "x", "expected_target_version": 0});
            for (k, v) in extra.as_object().unwrap() {
                a[k] = v.clone();
            }
            assert_audited(&t, &call(f, a), "OBSERVATION_REQUIRED", s);
        }
        let o = observe(&t, json!({"symbol_name": "Client.fetch"}));
        let r = submit_observed(&t, &o, replace("timeout = 30", "timeout = 60"));
        assert_eq!(r["status"], "accepted", "{r}");
    }

    /// A bundle: one snapshot, disjoint scopes, one atomic batch commit with scope-local
    /// coordinates, one version step, keyed recovery before stale guards, and replay with all
    /// four checks true.
    #[pg_test]
    fn a_bundle_commits_once_recovers_by_key_and_replays() {
        let (file, text) = (FIXTURES[7].0, FIXTURES[7].1);
        let t = init_file(file, text);
        let b = observe(
            &t,
            json!({"selections": [{"symbol_name": "stop"}, {"symbol_name": "start"}]}),
        );
        assert_eq!(b["status"], "observed_batch", "{b}");
        let snapshot = b["snapshot"].clone();
        assert_eq!(
            snapshot.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "target_file_id",
                "expected_target_version",
                "expected_current_hash",
                "observation_bundle_id"
            ]
        );
        let stop = &b["scopes"][0];
        let start = &b["scopes"][1];
        let stop_text = stop["text"].as_str().unwrap();
        let local = stop_text.find("sleep 1").unwrap();
        let args = json!({
            "target_file_id": t,
            "observation_bundle_id": snapshot["observation_bundle_id"],
            "expected_target_version": snapshot["expected_target_version"],
            "expected_current_hash": snapshot["expected_current_hash"],
            "intent": "slow both down",
            "client_request_id": "bundle-1",
            "groups": [
                {"observation_id": stop["observation_id"], "operations": [
                    {"op": "span", "start": local, "end": local + 7, "expected_text": "sleep 1", "replace": "sleep 3"}]},
                {"observation_id": start["observation_id"], "operations": replace("sleep 1", "sleep 2")},
            ],
        });
        let r = call("patchdiff_submit_observed_operations", args.clone());
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(
            (r["version"].clone(), r["group_count"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(
            content(&t),
            "#!/bin/sh\nRETRIES=3\n\nstart() {\n  echo \"starting\"\n  sleep 2\n}\n\nstop() {\n  echo \"stopping\"\n  sleep 3\n}\n"
        );
        assert_eq!(ledger_rows(&t), 2);
        // The same request again: recovered, even though its guards and receipts are now stale.
        let again = call("patchdiff_submit_observed_operations", args.clone());
        assert_eq!(again["deduplicated"], true, "{again}");
        assert_eq!(again["pdcp_log_id"], r["pdcp_log_id"]);
        assert_eq!(again["observation_bundle_id"], r["observation_bundle_id"]);
        assert_eq!(version(&t), 1);
        // A changed body under the same key conflicts (audited), writing no ledger row.
        let mut changed = args.clone();
        changed["intent"] = json!("something else");
        let c = call("patchdiff_submit_observed_operations", changed);
        assert_eq!(c["code"], "request_key_conflict", "{c}");
        assert_eq!((version(&t), ledger_rows(&t)), (1, 2));
        let consumed: i64 = scalar(
            "SELECT count(*) FROM patchdiff.observation_consumptions c JOIN patchdiff.pdcp_logs p USING (pdcp_log_id) \
             WHERE p.target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(consumed, 2);
        let replay = call("patchdiff_replay", json!({"target_file_id": t}));
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
    }

    /// "Parsing a 1 MiB file must not block": a query cancel (or statement_timeout) pending
    /// while the parser helper works is raised at once, and the helper is killed, instead of the
    /// backend waiting for the parse of the whole file. The cancel is made pending here as a
    /// signal handler would.
    #[pg_test(error = "canceling statement due to user request")]
    fn a_pending_cancel_interrupts_a_large_parse() {
        let text: String = (0..40_000)
            .map(|i| format!("def handler_{i}(event):\n    return event\n"))
            .collect();
        assert!(text.len() > 1 << 20);
        // SAFETY: what StatementCancelHandler does, in the backend's only thread.
        unsafe {
            pg_sys::QueryCancelPending = 1;
            pg_sys::InterruptPending = 1;
        }
        // Straight into the parse: no statement in between could process the interrupt first.
        let _ = crate::parser::outline(
            patchdiff_engine::api::scope::Language::Python,
            None,
            &text,
            pg_sys::InvalidOid,
        );
    }

    /// Issue 14: "No third-party C parser runs inside a PostgreSQL backend". The 509-byte YAML
    /// file that made tree-sitter-yaml's scanner abort the whole server now ends only the
    /// parser helper: the call answers `structure_unavailable` / `parser_crashed`, writes no
    /// observation, and this backend (the test's own transaction) goes on; the next call
    /// starts a new helper and works.
    #[pg_test]
    fn a_grammar_that_aborts_ends_the_helper_not_the_backend() {
        let bad = init_file("deep.yaml", &format!("{}x", "- ".repeat(254)));
        let r = observe(&bad, json!({}));
        assert_eq!(r["status"], "structure_unavailable", "{r}");
        assert_eq!(r["reason"], "parser_crashed", "{r}");
        assert_eq!(r["code"], "PARSER_CRASHED", "{r}");
        assert_eq!(r["observation_id"], Value::Null, "{r}");
        assert_eq!(r["language"], "yaml", "{r}");
        let r = observe(&bad, json!({"symbol_name": "x"}));
        assert_eq!(r["status"], "structure_unavailable", "{r}");
        assert_eq!(observations(&bad), 0);
        // The same backend, a healthy file: a new helper answers.
        let good = init_file("ok.yaml", "server:\n  port: 8080\n");
        let r = observe(&good, json!({"symbol_name": "server.port"}));
        assert_eq!(r["status"], "observed", "{r}");
    }

    /// helper-84: a helper that cannot set itself up (exit status 2, `wire::EXIT_USAGE`: here a
    /// program that refuses the helper's arguments, as the helper refused to run under a hard
    /// resource limit it could not raise) is not a crash the text caused: the call answers
    /// `parser_not_started`, nothing is kept with the version, and with the real helper back the
    /// same version is parsed and observed in the same backend.
    #[pg_test]
    fn a_helper_that_cannot_set_itself_up_is_not_kept_as_the_texts_crash() {
        let t = init_file("setup.yaml", "server:\n  port: 8080\n");
        let helper: String = Spi::get_one("SELECT current_setting('patchdiff.parser_helper')")
            .unwrap()
            .unwrap();
        // `ls` exits with status 2 on an option it does not know (`--memory-bytes`).
        Spi::run("SET LOCAL patchdiff.parser_helper = '/usr/bin/ls'").unwrap();
        let r = observe(&t, json!({}));
        assert_eq!(
            (r["status"].as_str(), r["reason"].as_str()),
            (Some("structure_unavailable"), Some("parser_not_started")),
            "{r}"
        );
        Spi::run(&format!("SET LOCAL patchdiff.parser_helper = '{helper}'")).unwrap();
        let r = observe(&t, json!({"symbol_name": "server.port"}));
        assert_eq!(r["status"], "observed", "{r}");
    }

    /// helper-55: a version whose text crashed the helper or passed a parser limit is kept as
    /// that answer, like an outline: asking again sends no request to a helper (each call on
    /// 100 KB of `\\` lines of Python cost 10 s of CPU). Changed limits parse again. (A `time`
    /// answer is kept only when the helper had the CPU, which a test cannot promise on a shared
    /// machine; measured instead, docs/structural.md.)
    #[pg_test]
    fn a_version_that_crashed_the_helper_or_passed_a_limit_is_not_parsed_again() {
        use crate::parser::parses_sent;
        let bad = init_file("again.yaml", &format!("{}x", "- ".repeat(254)));
        let wide = init_file(
            "again.json",
            &format!(
                "{{\"{}\": [{}[]]}}",
                "k".repeat(256 * 1024),
                "[], ".repeat(1000)
            ),
        );
        for (t, code) in [(&bad, "PARSER_CRASHED"), (&wide, "PARSER_LIMIT")] {
            let r = observe(t, json!({}));
            assert_eq!(r["code"], code, "{r}");
            let sent = parses_sent();
            for args in [
                json!({}),
                json!({"symbol_name": "x"}),
                json!({"query": "x"}),
            ] {
                let again = observe(t, args);
                assert_eq!(
                    (&again["code"], &again["failure_detail"]),
                    (&r["code"], &r["failure_detail"]),
                    "{again}"
                );
            }
            assert_eq!(parses_sent(), sent, "{code}: not parsed again");
            // Other limits: parsed again (and answered the same).
            Spi::run("SET patchdiff.parser_timeout = 9999").unwrap();
            let again = observe(t, json!({}));
            Spi::run("RESET patchdiff.parser_timeout").unwrap();
            assert_eq!(again["code"], code, "{again}");
            assert_eq!(parses_sent(), sent + 1, "{code}: parsed again");
        }
    }

    /// From a thread of its own: sends `signal` to this backend's parser helper `after` it
    /// appears; true when it appeared within 5 s. Only a child that runs the helper's program:
    /// between fork and exec the child is still a copy of the backend, and stopping it there
    /// would leave the backend waiting in `spawn` for an exec that never comes.
    fn signal_the_helper(signal: i32, after: std::time::Duration) -> std::thread::JoinHandle<bool> {
        let backend = std::process::id();
        std::thread::spawn(move || {
            let children = format!("/proc/{backend}/task/{backend}/children");
            let since = std::time::Instant::now();
            while since.elapsed() < std::time::Duration::from_secs(5) {
                let pids = std::fs::read_to_string(&children).unwrap_or_default();
                let helper = pids.split_whitespace().find(|pid| {
                    std::fs::read_link(format!("/proc/{pid}/exe"))
                        .is_ok_and(|exe| exe.ends_with("patchdiff-waymark-helper"))
                });
                if let Some(pid) = helper {
                    std::thread::sleep(after);
                    let pid: i32 = pid.parse().unwrap();
                    // SAFETY: kill(2) of this backend's own child.
                    unsafe { libc::kill(pid, signal) };
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            false
        })
    }

    /// helper-56: a `time` limit reached while the helper had less than 9/10 of a CPU (a busy
    /// host, here a helper held stopped) is not the text's: answered `time`, but not kept, so
    /// the next call parses again (before, one loaded moment left the version without structure
    /// for the rest of the connection).
    #[pg_test]
    fn a_parse_starved_of_cpu_is_answered_time_but_not_kept() {
        use crate::parser::parses_sent;
        // About 2 s of parsing: not done before the helper is stopped, however soon.
        let t = init_file("starved.sh", &"<<E\n".repeat(10_000));
        let stopper = signal_the_helper(libc::SIGSTOP, std::time::Duration::ZERO);
        Spi::run("SET patchdiff.parser_timeout = 300").unwrap();
        // A helper kept warm from an earlier call is stopped at once; a new one as soon as it
        // runs the helper's program, a few milliseconds into a parse of about two seconds.
        let r = observe(&t, json!({}));
        assert!(stopper.join().unwrap(), "the helper was seen and stopped");
        assert_eq!(r["limit"], "time", "{r}");
        let sent = parses_sent();
        let r = observe(&t, json!({}));
        Spi::run("RESET patchdiff.parser_timeout").unwrap();
        assert_eq!(r["limit"], "time", "{r}");
        assert_eq!(parses_sent(), sent + 1, "parsed again");
    }

    /// helper-55: a helper stopped from outside (SIGKILL, as the kernel's OOM killer sends) is
    /// not the text's fault: the answer says a resend may succeed, and the version is not kept
    /// as unavailable (the next call parses it again).
    #[pg_test]
    fn a_helper_killed_from_outside_is_not_blamed_on_the_text() {
        use crate::parser::parses_sent;
        // About 2 s of tree-sitter-bash's time on this machine (helper-55). (It was 16,000 lines
        // of a lone backslash in Python, which now has no outline without a parse.)
        let t = init_file("killed.sh", &"<<E\n".repeat(10_000));
        let killer = signal_the_helper(libc::SIGKILL, std::time::Duration::from_millis(200));
        let r = observe(&t, json!({}));
        assert!(killer.join().unwrap(), "the helper was seen and killed");
        assert_eq!(r["code"], "PARSER_CRASHED", "{r}");
        let detail = r["failure_detail"].as_str().unwrap();
        assert!(detail.contains("stopped from outside"), "{detail}");
        assert!(detail.contains("resending may succeed"), "{detail}");
        let sent = parses_sent();
        Spi::run("SET patchdiff.parser_timeout = 50").unwrap();
        let r = observe(&t, json!({}));
        Spi::run("RESET patchdiff.parser_timeout").unwrap();
        assert_eq!(r["limit"], "time", "{r}");
        assert_eq!(parses_sent(), sent + 1, "parsed again");
    }

    /// Issue 14: "Outline memory is bounded by the input": a key of 256 KiB above a thousand
    /// arrays would repeat the key in every child's path (gigabytes from 265 KB); the cap on
    /// an outline's name bytes refuses it while it is built, as `parser_limit`.
    #[pg_test]
    fn an_outline_over_its_name_cap_is_a_parser_limit() {
        let key = "k".repeat(256 * 1024);
        let text = format!("{{\"{key}\": [{}[]]}}", "[], ".repeat(1000));
        let t = init_file("wide.json", &text);
        let r = observe(&t, json!({}));
        assert_eq!(r["status"], "structure_unavailable", "{r}");
        assert_eq!(r["reason"], "parser_limit", "{r}");
        assert_eq!(r["limit"], "outline_name_bytes", "{r}");
        assert_eq!(observations(&t), 0);
    }

    /// Issue 14: the helper's limits are superuser settings and answer `parser_limit` with
    /// the limit's name; a limit passed is not a crash.
    #[pg_test]
    fn the_helpers_time_limit_answers_parser_limit() {
        Spi::run("SET patchdiff.parser_timeout = 1").unwrap();
        let text: String = (0..40_000)
            .map(|i| format!("def handler_{i}(event):\n    return event\n"))
            .collect();
        let t = init_file("big.py", &text);
        let r = observe(&t, json!({}));
        Spi::run("RESET patchdiff.parser_timeout").unwrap();
        assert_eq!(r["status"], "structure_unavailable", "{r}");
        assert_eq!(
            (&r["reason"], &r["limit"]),
            (&json!("parser_limit"), &json!("time")),
            "{r}"
        );
        let r = observe(&t, json!({"query": "handler_3999"}));
        assert_eq!(r["status"], "candidates", "{r}");
    }

    /// Issue 14: the helper's path names a program the server runs, and its limits bound what
    /// a hostile file can cost, so a client role can change none of them: only a superuser can.
    #[pg_test]
    fn a_client_role_cannot_point_the_parser_helper_elsewhere_or_raise_its_limits() {
        Spi::run("CREATE ROLE patchdiff_plain_client").unwrap();
        for setting in [
            "patchdiff.parser_helper",
            "patchdiff.parser_memory_limit",
            "patchdiff.parser_cpu_limit",
            "patchdiff.parser_timeout",
        ] {
            let context = Spi::get_one_with_args::<String>(
                "SELECT context FROM pg_settings WHERE name = $1",
                &[setting.into()],
            )
            .unwrap();
            assert_eq!(context.as_deref(), Some("superuser"), "{setting}");
            let may = Spi::get_one_with_args::<bool>(
                "SELECT has_parameter_privilege('patchdiff_plain_client', $1, 'SET')",
                &[setting.into()],
            )
            .unwrap();
            assert_eq!(may, Some(false), "a client role may set {setting}");
        }
    }
}
