//! SQL API tests, run inside PostgreSQL by `cargo pgrx test`. Each calls the SQL functions
//! through SPI, exactly as a DBA would, and names the contract clause it proves.

use pgrx::prelude::*;
use serde_json::{Value, json};

/// Calls `SELECT <function>($1::json)` and parses the result.
pub(crate) fn call(function: &str, args: Value) -> Value {
    let q = format!("SELECT {function}($1::json)::text");
    let text: String = Spi::get_one_with_args(&q, &[args.to_string().into()])
        .unwrap()
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Calls a function with argument text as sent, for what `serde_json::Value` cannot hold
/// (an escaped lone surrogate).
fn call_text(function: &str, args: &str) -> Value {
    let q = format!("SELECT {function}($1::json)::text");
    let text: String = Spi::get_one_with_args(&q, &[args.into()]).unwrap().unwrap();
    serde_json::from_str(&text).unwrap()
}

pub(crate) fn init(content: &str) -> String {
    let r = call(
        "patchdiff_initialize_target",
        json!({"filename": "doc.md", "content": content}),
    );
    assert_eq!(r["status"], "ok", "{r}");
    r["target_file_id"].as_str().unwrap().to_owned()
}

fn submit(target: &str, version: i64, edits: Value) -> Value {
    call(
        "patchdiff_submit_edits",
        json!({"target_file_id": target, "expected_target_version": version, "intent": "test", "edits": edits}),
    )
}

pub(crate) fn content(target: &str) -> String {
    call("patchdiff_get_target", json!({"target_file_id": target}))["current_content"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub(crate) fn scalar<T: FromDatum + IntoDatum>(q: &str, target: &str) -> T {
    Spi::get_one_with_args::<T>(q, &[target.into()])
        .unwrap()
        .unwrap()
}

fn log_rows(target: &str) -> i64 {
    scalar(
        "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
        target,
    )
}

fn ledger_rows(target: &str) -> i64 {
    scalar(
        "SELECT count(*) FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
        target,
    )
}

const ALPHA_HASH: &str = "b22ebf774cb2d9b12dc23d13ac860581d994ab579f4fb470b6f79d0b43a15ff2";

#[pg_schema]
mod tests {
    use super::*;

    /// Contract "patchdiff_initialize_target": the live output for a one-line CRLF upload —
    /// canonical hash b22ebf77..., source facts crlf 1, 18 code points, source_sha256 0e66cb5c...
    #[pg_test]
    fn initialize_records_crlf_upload_then_normalizes() {
        let r = call(
            "patchdiff_initialize_target",
            json!({"filename": "doc.md", "content": "alpha beta alpha\r\n", "content_type": "text/markdown"}),
        );
        assert_eq!(r["status"], "ok");
        assert_eq!(r["filename"], "doc.md");
        assert_eq!(r["target_type"], "text/markdown");
        assert_eq!(r["version"], 0);
        assert_eq!(r["current_hash"], ALPHA_HASH);
        let f = &r["source_line_endings"];
        assert_eq!(
            (
                &f["style"],
                &f["lf"],
                &f["crlf"],
                &f["cr"],
                &f["normalized"]
            ),
            (
                &json!("crlf"),
                &json!(0),
                &json!(1),
                &json!(0),
                &json!(true)
            )
        );
        assert_eq!(
            (&f["source_code_points"], &f["source_utf8_bytes"]),
            (&json!(18), &json!(18))
        );
        assert!(f["source_sha256"].as_str().unwrap().starts_with("0e66cb5c"));
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "filename",
                "target_type",
                "version",
                "current_hash",
                "active_editing_cycle_id",
                "source_line_endings"
            ]
        );
        let id = r["target_file_id"].as_str().unwrap();
        let g = call("patchdiff_get_target", json!({"target_file_id": id}));
        assert_eq!(g["current_content"], "alpha beta alpha\n");
        assert_eq!(g["active_editing_cycle_id"], r["active_editing_cycle_id"]);
        assert_eq!(g["source_line_endings"], r["source_line_endings"]);
        // The initial snapshot and the active cycle exist.
        let snap: i64 = scalar(
            "SELECT count(*) FROM patchdiff.snapshots WHERE target_file_id = $1::uuid AND snapshot_reason = 'initial' AND version = 0",
            id,
        );
        assert_eq!(snap, 1);
        let open: i64 = scalar(
            "SELECT count(*) FROM patchdiff.editing_cycles c JOIN patchdiff.targets t ON t.active_editing_cycle_id = c.editing_cycle_id \
             WHERE t.target_file_id = $1::uuid AND c.closed_at IS NULL",
            id,
        );
        assert_eq!(open, 1);
        let up = call(
            "patchdiff_handle_upload",
            json!({"filename": "u.txt", "content": "x", "content_type": "text/plain"}),
        );
        assert_eq!(up["status"], "ok");
    }

    /// Contract "patchdiff_submit_edits, Accepted Response": `alpha` with occurrence_index 2 on
    /// `alpha beta alpha` — span 11..16, hashes adf7157c.../8ed3f6ad.../be9d587d..., one ledger row.
    #[pg_test]
    fn alpha_beta_alpha_occurrence_index_2_is_accepted() {
        let t = init("alpha beta alpha\n");
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "Rename alpha",
                   "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-002"}),
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "before_hash",
                "after_hash",
                "version",
                "current_version",
                "current_hash",
                "pdcp_log_id",
                "manifest_entries_added",
                "warnings",
                "warning_details",
                "warning_count",
                "warnings_truncated",
                "validity",
                "evidence",
                "deduplicated",
                "client_request_id"
            ]
        );
        assert_eq!(r["status"], "accepted");
        assert_eq!(r["before_hash"], ALPHA_HASH);
        assert!(r["after_hash"].as_str().unwrap().starts_with("adf7157c"));
        assert_eq!(
            (&r["version"], &r["current_version"]),
            (&json!(1), &json!(1))
        );
        assert_eq!(r["current_hash"], r["after_hash"]);
        assert_eq!(r["manifest_entries_added"], 1);
        assert_eq!(
            (
                &r["warnings"],
                &r["warning_count"],
                &r["warnings_truncated"]
            ),
            (&json!([]), &json!(0), &json!(false))
        );
        assert_eq!(
            r["validity"],
            json!({"protocol_valid": true, "transaction_valid": true, "task_correct": "not_evaluated", "semantic": "not_evaluated"})
        );
        let c = &r["evidence"]["changes"][0];
        assert_eq!(
            (
                &c["change_id"],
                &c["change_index"],
                &c["span_start"],
                &c["span_end"]
            ),
            (&json!("chg_001"), &json!(1), &json!(11), &json!(16))
        );
        assert_eq!(
            (&c["matched_chars"], &c["replacement_chars"]),
            (&json!(5), &json!(5))
        );
        assert!(
            c["matched_sha256"]
                .as_str()
                .unwrap()
                .starts_with("8ed3f6ad")
        );
        assert!(
            c["replacement_sha256"]
                .as_str()
                .unwrap()
                .starts_with("be9d587d")
        );
        assert_eq!(
            (&r["deduplicated"], &r["client_request_id"]),
            (&json!(false), &json!("req-002"))
        );
        assert_eq!(content(&t), "alpha beta gamma\n");
        // The ledger row: origin typed, intent (no rationale) is the transaction intent, derived = the fact.
        let row: String = scalar(
            "SELECT json_build_object('origin', origin, 'intent', intent, 'derived', derived, 'after_version', after_version)::text \
             FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            &t,
        );
        let row: Value = serde_json::from_str(&row).unwrap();
        assert_eq!(row["origin"], "typed");
        assert_eq!(row["intent"], "Rename alpha");
        assert_eq!(row["derived"], *c);
        assert_eq!(row["after_version"], 1);
        let stored: String = scalar(
            "SELECT status || ' ' || runtime_version || ' ' || protocol_version FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(stored, "accepted patchdiff-mvp-0.2.2 patchdiff-tx/1");
    }

    /// The ledger rows of a two-change acceptance, column by column as stored: each change's
    /// index, ID, rationale and risk (NULL when the edit has none, never the text `null`), its
    /// row's intent (the rationale, else the transaction's), and `derived`, byte for byte the
    /// compact text of the response's evidence fact. (The ledger's columns cross to SQL as one
    /// array each; quotes, a line break and non-ASCII text must arrive unchanged.)
    #[pg_test]
    fn ledger_rows_store_each_change_exactly() {
        use patchdiff_engine::wire::{LITERAL, to_string};
        let t = init("alpha beta alpha\n");
        let rationale = "why \"quoted\",\nand é ☃";
        let r = submit(
            &t,
            0,
            json!([
                {"match": "beta", "replace": "BETA", "rationale": rationale, "risk": "low"},
                {"match": "alpha", "replace": "ALPHA", "occurrence_index": 2}
            ]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        let rows: String = scalar(
            "SELECT json_agg(json_build_array(change_index, change_id, rationale, risk, intent, \
                    origin, derived::text) ORDER BY ledger_sequence)::text \
             FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            &t,
        );
        let rows: Value = serde_json::from_str(&rows).unwrap();
        let facts = r["evidence"]["changes"].as_array().unwrap();
        assert_eq!(facts.len(), 2);
        assert_eq!(
            rows,
            json!([
                [
                    1,
                    "chg_001",
                    rationale,
                    "low",
                    rationale,
                    "typed",
                    to_string(&facts[0], LITERAL)
                ],
                [
                    2,
                    "chg_002",
                    null,
                    null,
                    "test",
                    "typed",
                    to_string(&facts[1], LITERAL)
                ]
            ])
        );
    }

    /// Contract "Rejected Response": the unselected `alpha` is match_ambiguous with two exact
    /// candidates, a prefix failure context and (SQL keeps the service result) a full
    /// current_context equal to it.
    #[pg_test]
    fn unselected_alpha_is_match_ambiguous() {
        let t = init("alpha beta alpha\n");
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "Rename alpha",
                   "edits": [{"match": "alpha", "replace": "gamma"}], "client_request_id": "req-001"}),
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "failure_reason",
                "failure_detail",
                "failed_change_id",
                "before_hash",
                "after_hash",
                "current_version",
                "current_hash",
                "pdcp_log_id",
                "diagnostic",
                "current_context",
                "validity",
                "deduplicated",
                "client_request_id"
            ]
        );
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["failure_reason"], "match_ambiguous");
        assert_eq!(
            r["failure_detail"],
            "MATCH text appears multiple times without disambiguation."
        );
        assert_eq!(r["failed_change_id"], "chg_001");
        assert_eq!(
            (&r["before_hash"], &r["after_hash"], &r["current_version"]),
            (&json!(ALPHA_HASH), &Value::Null, &json!(0))
        );
        let d = &r["diagnostic"];
        assert_eq!(
            (&d["format"], &d["occurrence_count"]),
            (&json!("patchdiff-tx/1"), &json!(2))
        );
        let ec = &d["exact_candidates"];
        assert_eq!(
            ec["candidates"],
            json!([
                {"occurrence_index": 1, "start": 0, "end": 5, "before": "", "match_preview": "alpha", "match_truncated": false, "after": " beta alpha\n"},
                {"occurrence_index": 2, "start": 11, "end": 16, "before": "alpha beta ", "match_preview": "alpha", "match_truncated": false, "after": "\n"}
            ])
        );
        assert_eq!(
            (
                &ec["truncated"],
                &ec["next_occurrence_index"],
                &ec["buffer_stage"]
            ),
            (&json!(false), &Value::Null, &json!("canonical_target"))
        );
        assert_eq!(
            (&d["retryable"], &d["requires_new_submission"]),
            (&json!(true), &json!(true))
        );
        assert_eq!(d["validation_stage"], "transaction_applicability");
        let fc = &d["failure_context"];
        assert_eq!(
            (
                &fc["selection"],
                &fc["start"],
                &fc["end"],
                &fc["total_chars"]
            ),
            (&json!("prefix"), &json!(0), &json!(17), &json!(17))
        );
        assert_eq!(fc["text"], "alpha beta alpha\n");
        // Contract "Bounded rejection context": "The Python service result keeps the full
        // object"; the SQL answer is that service result, so current_context repeats
        // failure_context here (only the MCP projection says same_as_failure_context).
        assert_eq!(&r["current_context"], fc);
        assert_eq!(r["current_context"]["text"], "alpha beta alpha\n");
        assert_eq!(r["validity"]["transaction_valid"], false);
        assert_eq!(r["validity"]["protocol_valid"], true);
        assert_eq!(content(&t), "alpha beta alpha\n");
        let stage: String = scalar(
            "SELECT failure_stage FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(stage, "TRANSACTION_APPLICABILITY");
        assert_eq!(ledger_rows(&t), 0);
    }

    /// Host guide "Selector constraints on a single occurrence": `hello` with occurrence_index 2
    /// rejects with disambiguation_invalid and leaves the target unchanged.
    #[pg_test]
    fn hello_occurrence_index_2_is_disambiguation_invalid() {
        let t = init("hello");
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "Replace greeting",
                   "edits": [{"match": "hello", "replace": "goodbye", "occurrence_index": 2}]}),
        );
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["failure_reason"], "disambiguation_invalid");
        assert_eq!(r["diagnostic"]["exact_candidates"]["occurrence_count"], 1);
        assert_eq!(r["diagnostic"]["retryable"], true);
        assert_eq!(content(&t), "hello");
        assert_eq!(r["current_version"], 0);
        assert_eq!(log_rows(&t), 1);
        // An index and anchors are combined constraints: index 1 with an anchor that fails.
        let r = submit(
            &t,
            0,
            json!([{"match": "hello", "replace": "bye", "occurrence_index": 1, "anchor_before": "x"}]),
        );
        assert_eq!(r["failure_reason"], "disambiguation_invalid");
        // Anchors hold anywhere before/after, not adjacent.
        let t2 = init("a X b X c");
        let r = submit(
            &t2,
            0,
            json!([{"match": "X", "replace": "Y", "anchor_before": "b"}]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(content(&t2), "a X b Y c");
    }

    /// Host guide "occurrence_index counts the buffer each edit sees": six Calcly, indexes 1, 2
    /// and 3 rename originals 1, 3 and 5, accepted with occurrence_index_basis_shift warnings.
    #[pg_test]
    fn six_calcly_with_indexes_1_2_3_rename_originals_1_3_5() {
        let t = init("Calcly 1, Calcly 2, Calcly 3, Calcly 4, Calcly 5, Calcly 6.");
        let r = submit(
            &t,
            0,
            json!([
                {"match": "Calcly", "replace": "Numra", "occurrence_index": 1},
                {"match": "Calcly", "replace": "Numra", "occurrence_index": 2},
                {"match": "Calcly", "replace": "Numra", "occurrence_index": 3}
            ]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(
            content(&t),
            "Numra 1, Calcly 2, Numra 3, Calcly 4, Numra 5, Calcly 6."
        );
        let ids: Vec<&Value> = r["evidence"]["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["change_id"])
            .collect();
        assert_eq!(
            ids,
            [&json!("chg_001"), &json!("chg_002"), &json!("chg_003")]
        );
        assert_eq!(r["manifest_entries_added"], 3);
        assert_eq!(ledger_rows(&t), 3);
        // Accepted, with the basis-shift warnings the host guide quotes.
        assert_eq!(
            r["warnings"],
            json!([
                "occurrence_index_basis_shift: chg_002 occurrence_index 2 selected the occurrence that was index 3 at transaction start",
                "occurrence_index_basis_shift: chg_003 occurrence_index 3 selected the occurrence that was index 5 at transaction start"
            ])
        );
        assert_eq!(
            (&r["warning_count"], &r["warnings_truncated"]),
            (&json!(2), &json!(false))
        );
        let d = &r["warning_details"][1];
        assert_eq!(
            (
                &d["change_id"],
                &d["occurrence_index"],
                &d["transaction_start_occurrence_index"]
            ),
            (&json!("chg_003"), &json!(3), &json!(5))
        );
    }

    /// Contract "At least one guard is required": no guard is context_missing, audited at
    /// PROTOCOL_VALIDATION with protocol_valid false; invalid guard syntax is context_invalid.
    #[pg_test]
    fn guards_are_required_and_checked() {
        let t = init("one two");
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "intent": "x", "edits": [{"match": "one", "replace": "1"}]}),
        );
        assert_eq!(
            (&r["status"], &r["failure_reason"]),
            (&json!("rejected"), &json!("context_missing"))
        );
        assert_eq!(r["validity"]["protocol_valid"], false);
        assert_eq!(r["diagnostic"]["validation_stage"], "protocol_validation");
        assert_eq!(r["diagnostic"]["retryable"], false);
        for bad in [json!(-1), json!(true), json!(1.5), json!("0")] {
            let r = call(
                "patchdiff_submit_edits",
                json!({"target_file_id": t, "intent": "x", "expected_target_version": bad, "edits": [{"match": "one", "replace": "1"}]}),
            );
            assert_eq!(
                (&r["failure_reason"], &r["diagnostic"]["code"]),
                (
                    &json!("context_invalid"),
                    &json!("invalid_expected_target_version")
                )
            );
        }
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "intent": "x", "expected_current_hash": "ABC", "edits": [{"match": "one", "replace": "1"}]}),
        );
        assert_eq!(r["diagnostic"]["code"], "invalid_expected_current_hash");
        // Every supplied guard is checked: a right version with a stale hash rejects.
        let stale = "0".repeat(64);
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "intent": "x", "expected_target_version": 0, "expected_current_hash": stale, "edits": [{"match": "one", "replace": "1"}]}),
        );
        assert_eq!(r["failure_reason"], "target_hash_mismatch");
        assert_eq!(r["diagnostic"]["validation_stage"], "precondition_guard");
        assert_eq!(r["validity"]["protocol_valid"], true);
        let r = submit(&t, 7, json!([{"match": "one", "replace": "1"}]));
        assert_eq!(r["failure_reason"], "target_version_mismatch");
        assert_eq!(r["diagnostic"]["retryable"], true);
        let hash =
            call("patchdiff_get_target", json!({"target_file_id": t}))["current_hash"].clone();
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "intent": "x", "expected_current_hash": hash, "edits": [{"match": "one", "replace": "1"}]}),
        );
        assert_eq!(r["status"], "accepted");
        // Every attempt, accepted or rejected, is logged with its stage.
        assert_eq!(log_rows(&t), 9);
        let unstaged: i64 = scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND status = 'rejected' AND failure_stage IS NULL",
            &t,
        );
        assert_eq!(unstaged, 0);
    }

    /// Contract "sequential_match_invalid": an earlier change consumed the text; the diagnostic
    /// names the consuming change in transaction-start coordinates. Nothing is written but the log.
    #[pg_test]
    fn consumed_match_is_sequential_match_invalid_and_nothing_applies() {
        let t = init("foo bar baz");
        let r = submit(
            &t,
            0,
            json!([{"match": "foo bar", "replace": "qux"}, {"match": "bar", "replace": "BAR"}]),
        );
        assert_eq!(r["failure_reason"], "sequential_match_invalid");
        assert_eq!(
            r["failure_detail"],
            "MATCH text was consumed by earlier change in this transaction."
        );
        assert_eq!(r["failed_change_id"], "chg_002");
        let d = &r["diagnostic"];
        assert_eq!(d["original_occurrence_count"], 1);
        assert_eq!(
            d["original_occurrences"],
            json!([{"start": 4, "end": 7, "consumed_by_change_id": "chg_001", "consumed_by_change_index": 1}])
        );
        assert_eq!(d["failure_context"]["buffer_stage"], "intermediate_buffer");
        assert_eq!(d["failure_context"]["prior_changes"], 1);
        assert_eq!(d["failure_context"]["text"], "qux baz");
        // current_context describes the committed canonical target, so it is available here.
        assert_eq!(r["current_context"]["text"], "foo bar baz");
        // All or nothing: the first edit was not applied.
        assert_eq!(content(&t), "foo bar baz");
        assert_eq!(ledger_rows(&t), 0);
        let r = submit(&t, 0, json!([{"match": "nothing", "replace": "x"}]));
        assert_eq!(r["failure_reason"], "match_absent");
        assert_eq!(r["current_version"], 0);
    }

    /// Contract "patchdiff_submit_edits" field rules: malformed records are audited rejections;
    /// change_id defaults chg_001...; CRLF in payloads is canonicalized before matching.
    #[pg_test]
    fn malformed_records_are_audited_and_payloads_canonicalized() {
        let t = init("line one\r\nline two\r\n");
        assert_eq!(content(&t), "line one\nline two\n");
        let cases = [
            (json!([]), "manifest_missing"),
            (json!({"match": "a"}), "manifest_malformed"),
            (json!([{"match": "", "replace": "x"}]), "block_malformed"),
            (json!([{"match": "one"}]), "block_malformed"),
            (
                json!([{"match": "one", "replace": "1", "bogus": 1}]),
                "block_malformed",
            ),
            (
                json!([{"match": "one", "replace": "1", "occurrence_index": 0}]),
                "block_malformed",
            ),
            (
                json!([{"match": "one", "replace": "1", "occurrence_index": true}]),
                "block_malformed",
            ),
            (
                json!([{"match": "one", "replace": "1", "risk": "extreme"}]),
                "block_malformed",
            ),
            (
                json!([{"match": "one", "replace": "1", "change_id": "a"}, {"match": "two", "replace": "2", "change_id": "a"}]),
                "block_malformed",
            ),
        ];
        for (edits, reason) in cases {
            let r = submit(&t, 0, edits.clone());
            assert_eq!(
                (&r["status"], &r["failure_reason"]),
                (&json!("rejected"), &json!(reason)),
                "{edits}"
            );
            assert_eq!(r["validity"]["protocol_valid"], false);
        }
        assert_eq!(log_rows(&t), 9);
        let r = submit(
            &t,
            0,
            json!([{"match": "one\r\nline", "replace": "1\r\nLINE", "change_id": "first"}]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(r["evidence"]["changes"][0]["change_id"], "first");
        assert_eq!(content(&t), "line 1\nLINE two\n");
    }

    /// Contract "Discovery, argument errors": malformed arguments are invalid_argument with a
    /// code and failure_detail and write nothing; an unknown target is not_found for a read.
    #[pg_test]
    fn argument_errors_write_nothing() {
        let before: i64 = Spi::get_one("SELECT count(*) FROM patchdiff.pdcp_logs")
            .unwrap()
            .unwrap();
        let unknown = "11111111-1111-4111-8111-111111111111";
        let cases = [
            ("patchdiff_submit_edits", json!([1]), "invalid_arguments"),
            (
                "patchdiff_submit_edits",
                json!({"target_file_id": unknown, "intent": "x"}),
                "missing_argument",
            ),
            (
                "patchdiff_submit_edits",
                json!({"target_file_id": unknown, "intent": "x", "edits": [], "surprise": 1}),
                "unknown_argument",
            ),
            (
                "patchdiff_submit_edits",
                json!({"target_file_id": unknown, "intent": "x", "edits": [], "include_correlation_id": "yes"}),
                "invalid_include_correlation_id",
            ),
            (
                "patchdiff_read_target",
                json!({"target_file_id": unknown, "length": 0}),
                "invalid_length",
            ),
            (
                "patchdiff_find_occurrences",
                json!({"target_file_id": unknown, "text": "a", "context_chars": null}),
                "invalid_context_chars",
            ),
            (
                "patchdiff_initialize_target",
                json!({"filename": "a", "content": "x\u{0}"}),
                "invalid_text",
            ),
        ];
        for (f, args, code) in cases {
            let r = call(f, args.clone());
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!("invalid_argument"), &json!(code)),
                "{f} {args}"
            );
            assert!(r["failure_detail"].is_string());
        }
        // Issue 17: a malformed or unknown submission target is the contract's target-identity
        // rejection (tests_issue17.rs), written nowhere either.
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": "nope", "intent": "x", "edits": []}),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("rejected"), &json!("invalid_target_id"))
        );
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": unknown, "intent": "x", "edits": [], "expected_target_version": 0}),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("rejected"), &json!("target_not_found"))
        );
        let r = call("patchdiff_read_target", json!({"target_file_id": unknown}));
        assert_eq!(r["status"], "not_found");
        let after: i64 = Spi::get_one("SELECT count(*) FROM patchdiff.pdcp_logs")
            .unwrap()
            .unwrap();
        assert_eq!(before, after);
    }

    /// Contract "patchdiff_read_target" and "patchdiff_find_occurrences" over SQL.
    #[pg_test]
    fn reads_and_search_page_in_code_points() {
        let t = init(&"🌍 alpha ".repeat(1000)); // 8,000 code points, 1,000 occurrences
        let r = call("patchdiff_read_target", json!({"target_file_id": t}));
        assert_eq!(
            (
                &r["start"],
                &r["end"],
                &r["total_chars"],
                &r["truncated"],
                &r["next_start"]
            ),
            (
                &json!(0),
                &json!(4000),
                &json!(8000),
                &json!(true),
                &json!(4000)
            )
        );
        let r = call(
            "patchdiff_read_target",
            json!({"target_file_id": t, "start": 7999, "length": 5}),
        );
        assert_eq!((&r["text"], &r["next_start"]), (&json!(" "), &Value::Null));
        let r = call(
            "patchdiff_find_occurrences",
            json!({"target_file_id": t, "text": "alpha", "context_chars": 2}),
        );
        assert_eq!(
            (
                &r["occurrence_count"],
                &r["returned_count"],
                &r["next_occurrence_index"]
            ),
            (&json!(1000), &json!(200), &json!(201))
        );
        assert_eq!(
            r["occurrences"][0],
            json!({"occurrence_index": 1, "start": 2, "end": 7, "before": "🌍 ", "after": " 🌍"})
        );
        let r = call(
            "patchdiff_find_occurrences",
            json!({"target_file_id": t, "text": "alpha", "start_occurrence": 1000}),
        );
        assert_eq!(
            (
                &r["returned_count"],
                &r["truncated"],
                &r["next_occurrence_index"]
            ),
            (&json!(1), &json!(false), &Value::Null)
        );
        assert_eq!(r["occurrences"][0]["start"], 7994);
    }

    /// Contract "Common input and request-key rules": exact recovery returns the recorded outcome
    /// with deduplicated true and writes no row; another proposal under the key is an audited
    /// request_key_conflict that keeps the original; invalid key syntax is context_invalid.
    #[pg_test]
    fn request_keys_recover_and_conflict() {
        let t = init("alpha beta alpha\n");
        let args = json!({"target_file_id": t, "expected_target_version": 0, "intent": "Rename alpha",
                          "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-002"});
        let first = call("patchdiff_submit_edits", args.clone());
        // Advance the target so that recovery reports the recorded outcome and the current state.
        assert_eq!(
            submit(&t, 1, json!([{"match": "beta", "replace": "delta"}]))["status"],
            "accepted"
        );
        let again = call("patchdiff_submit_edits", args.clone());
        assert_eq!(again["deduplicated"], true);
        assert_eq!(
            (
                &again["pdcp_log_id"],
                &again["version"],
                &again["after_hash"]
            ),
            (&first["pdcp_log_id"], &json!(1), &first["after_hash"])
        );
        assert_eq!(again["current_version"], 2);
        assert_ne!(again["current_hash"], first["after_hash"]);
        assert_eq!(again["evidence"], first["evidence"]);
        assert_eq!(log_rows(&t), 2);
        let mut changed = args.clone();
        changed["edits"][0]["rationale"] = json!("reworded");
        let c = call("patchdiff_submit_edits", changed);
        assert_eq!(
            (&c["failure_reason"], &c["diagnostic"]["code"]),
            (&json!("context_invalid"), &json!("request_key_conflict"))
        );
        assert_eq!(
            c["diagnostic"]["existing_pdcp_log_id"],
            first["pdcp_log_id"]
        );
        assert_eq!(
            c["diagnostic"]["differing_fields"],
            json!(["edits[0].rationale"])
        );
        assert_eq!(c["client_request_id"], "req-002");
        let null_key: i64 = scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND client_request_id IS NULL AND conflicts_with_pdcp_log_id IS NOT NULL",
            &t,
        );
        assert_eq!(null_key, 1);
        // A repeated conflict appends another immutable row; the original stays as it was.
        let mut changed_again = args.clone();
        changed_again["edits"][0]["rationale"] = json!("reworded again");
        let c2 = call("patchdiff_submit_edits", changed_again);
        assert_eq!(c2["diagnostic"]["code"], "request_key_conflict");
        assert_ne!(c2["pdcp_log_id"], c["pdcp_log_id"]);
        let conflicts: i64 = scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND conflicts_with_pdcp_log_id IS NOT NULL",
            &t,
        );
        assert_eq!(conflicts, 2);
        let original_key: String = Spi::get_one_with_args(
            "SELECT client_request_id FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
            &[first["pdcp_log_id"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(original_key, "req-002");
        // The original is still recoverable.
        assert_eq!(call("patchdiff_submit_edits", args)["deduplicated"], true);
        let mut bad = json!({"target_file_id": t, "expected_target_version": 2, "intent": "x", "edits": [{"match": "gamma", "replace": "g"}]});
        bad["client_request_id"] = json!("has space");
        let r = call("patchdiff_submit_edits", bad);
        assert_eq!(r["diagnostic"]["code"], "invalid_client_request_id");
        assert_eq!(content(&t), "alpha delta gamma\n");
    }

    /// The DBA entry point: patchdiff_submit with named arguments is the same submission.
    #[pg_test]
    fn typed_entry_point_submits_with_named_arguments() {
        let t = init("hello world");
        let q = "SELECT patchdiff_submit(target_file_id => $1::uuid, intent => 'greet', \
                 edits => '[{\"match\":\"world\",\"replace\":\"there\"}]', expected_target_version => 0)::text";
        let r: String = Spi::get_one_with_args(q, &[t.as_str().into()])
            .unwrap()
            .unwrap();
        let r: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(content(&t), "hello there");
        let source: String = scalar(
            "SELECT source FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(source, "sql");
    }

    /// Lineage: a same-target rejected parent is stored; an accepted parent rejects.
    #[pg_test]
    fn parent_must_be_a_rejected_attempt_on_the_same_target() {
        let t = init("a b");
        let rejected = submit(&t, 0, json!([{"match": "zzz", "replace": "y"}]));
        let parent = rejected["pdcp_log_id"].as_str().unwrap().to_uppercase();
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "retry",
            "edits": [{"match": "a", "replace": "A"}], "parent_pdcp_log_id": parent, "attempt": 2}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        let stored: String = scalar(
            "SELECT parent_pdcp_log_id::text || ' ' || attempt FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND status = 'accepted'",
            &t,
        );
        assert_eq!(
            stored,
            format!("{} 2", rejected["pdcp_log_id"].as_str().unwrap())
        );
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": "x",
            "edits": [{"match": "b", "replace": "B"}], "parent_pdcp_log_id": r["pdcp_log_id"]}),
        );
        assert_eq!(
            (&r["failure_reason"], &r["diagnostic"]["code"]),
            (&json!("context_invalid"), &json!("parent_not_rejected"))
        );
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": "x",
            "edits": [{"match": "b", "replace": "B"}], "attempt": 0}),
        );
        assert_eq!(r["diagnostic"]["code"], "invalid_attempt");
    }

    /// helper-83: the locations of invalid text name their whole paths, so long keys above many
    /// NUL strings made paths without end (a 16 KiB key over 20,000 of them, a 196 KB request,
    /// took 429 MB of the backend). Past `INVALID_TEXT_PATHS_MAX_BYTES` of paths the submission
    /// is `invalid_argument` / `invalid_text_too_widespread` and writes nothing; under it, the
    /// same shape is the contract's audited `target_encoding_invalid`, every location counted.
    #[pg_test]
    fn invalid_text_whose_locations_would_not_end_is_refused_unwritten() {
        use patchdiff_engine::api::invalid_text::INVALID_TEXT_PATHS_MAX_BYTES;
        let t = init("abc\n");
        let key = "k".repeat(16 << 10);
        let path_len = "record.edits[0].".len() + key.len() + "[100]".len();
        let shape = |n: usize| {
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                   "edits": [{"match": "abc", "replace": "z", key.clone(): vec!["\u{0}"; n]}]})
        };
        let r = call(
            "patchdiff_submit_edits",
            shape(INVALID_TEXT_PATHS_MAX_BYTES / path_len + 1),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (
                &json!("invalid_argument"),
                &json!("invalid_text_too_widespread")
            ),
            "{}",
            &r.to_string()[..300.min(r.to_string().len())]
        );
        assert_eq!(log_rows(&t), 0);
        let fits = INVALID_TEXT_PATHS_MAX_BYTES / path_len;
        let r = call("patchdiff_submit_edits", shape(fits));
        assert_eq!(r["failure_reason"], "target_encoding_invalid");
        assert_eq!(r["diagnostic"]["invalid_text_count"], json!(fits));
        assert_eq!(log_rows(&t), 1);
    }

    /// Contract "Common input and request-key rules" / host guide "Invalid text and safe
    /// rejected evidence": NUL or an escaped lone surrogate in a known-target proposal is an
    /// audited target_encoding_invalid rejection at PROTOCOL_VALIDATION whose pdcp_content is
    /// the reversible ASCII patchdiff-invalid-input/1 envelope; nothing else changes; a keyed
    /// resend recovers it; the same text in read or search arguments is invalid_argument with
    /// no row.
    #[pg_test]
    fn invalid_text_is_an_audited_rejection() {
        let t = init("abc\n");
        let nonchars: String = (0xFDD0..=0xFDEF_u32)
            .map(|u| format!("\\u{u:04x}"))
            .collect();
        let cases = [
            (
                "patchdiff_submit_edits",
                format!(
                    r#"{{"target_file_id":"{t}","expected_target_version":0,"intent":"x","edits":[{{"match":"abc","replace":"a\u0000c"}}],"client_request_id":"bad-nul"}}"#
                ),
                "record.edits[0].replace",
                "nul",
                r#""replace":"a\u0000c""#.to_owned(),
            ),
            (
                "patchdiff_submit_operations",
                format!(
                    r#"{{"target_file_id":"{t}","expected_target_version":0,"intent":"\ud800 intent","operations":[{{"op":"match","match":"abc","replace":"z"}}]}}"#
                ),
                "record.intent",
                "lone_surrogate",
                r#""intent":"\ud800 intent""#.to_owned(),
            ),
            (
                "patchdiff_submit_replacement",
                format!(
                    r#"{{"target_file_id":"{t}","expected_target_version":0,"intent":"x","replacement":"ok\udc00"}}"#
                ),
                "record.replacement",
                "lone_surrogate",
                r#""replacement":"ok\udc00""#.to_owned(),
            ),
            // helper-85: all 32 noncharacters U+FDD0..U+FDEF beside the lone surrogate (they
            // were the only sentinels: the call was invalid_json, nothing audited).
            (
                "patchdiff_submit_replacement",
                format!(
                    r#"{{"target_file_id":"{t}","expected_target_version":0,"intent":"y","replacement":"{nonchars}\udc01"}}"#
                ),
                "record.replacement",
                "lone_surrogate",
                format!(r#""replacement":"{nonchars}\udc01""#),
            ),
        ];
        for (i, (function, args, path, kind, spelled)) in cases.iter().enumerate() {
            let r = call_text(function, args);
            assert_eq!(
                (
                    &r["status"],
                    &r["failure_reason"],
                    &r["diagnostic"]["validation_stage"]
                ),
                (
                    &json!("rejected"),
                    &json!("target_encoding_invalid"),
                    &json!("protocol_validation")
                ),
                "{function}: {r}"
            );
            assert_eq!(
                r["diagnostic"]["invalid_text"][0],
                json!({"path": path, "kind": kind}),
                "{r}"
            );
            assert_eq!(r["current_version"], 0);
            assert_eq!(log_rows(&t), i as i64 + 1);
            let stored: String = Spi::get_one_with_args(
                "SELECT pdcp_content FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
                &[r["pdcp_log_id"].as_str().unwrap().into()],
            )
            .unwrap()
            .unwrap();
            assert!(
                stored.is_ascii() && stored.contains(spelled.as_str()),
                "{stored}"
            );
            assert!(
                stored.contains(r#""format":"patchdiff-invalid-input/1""#),
                "{stored}"
            );
        }
        assert_eq!((content(&t), ledger_rows(&t)), ("abc\n".to_owned(), 0));
        // The keyed resend recovers the recorded rejection without a new row.
        let again = call_text(cases[0].0, &cases[0].1);
        assert_eq!(again["deduplicated"], true, "{again}");
        assert_eq!(log_rows(&t), cases.len() as i64);
        // Reads and search: invalid_argument, no row.
        for (function, args) in [
            (
                "patchdiff_find_occurrences",
                format!(r#"{{"target_file_id":"{t}","text":"a\ud800"}}"#),
            ),
            (
                "patchdiff_find_occurrences",
                format!(r#"{{"target_file_id":"{t}","text":"a\u0000"}}"#),
            ),
        ] {
            let r = call_text(function, &args);
            assert_eq!(r["status"], "invalid_argument", "{r}");
        }
        assert_eq!(log_rows(&t), cases.len() as i64);
        // Unknown target: nothing to audit against (the target-identity rejection, no row).
        let r = call_text(
            "patchdiff_submit_edits",
            r#"{"target_file_id":"00000000-0000-4000-8000-000000000000","expected_target_version":0,"intent":"\u0000","edits":[]}"#,
        );
        assert_eq!(r["code"], "target_not_found", "{r}");
        assert_eq!(r["pdcp_log_id"], Value::Null, "{r}");
    }

    /// Resource bounds (issue 9): an argument over patchdiff.max_argument_bytes is refused with
    /// invalid_argument / arguments_too_large before it is parsed, by every kind of function,
    /// and nothing is written.
    #[pg_test]
    fn oversized_arguments_are_refused_before_parsing() {
        let t = init("abc\n");
        Spi::run("SET patchdiff.max_argument_bytes = 1024").unwrap();
        let big = "x".repeat(2_000);
        for (function, args) in [
            (
                "patchdiff_submit_edits",
                json!({"target_file_id": t, "expected_target_version": 0, "intent": "x", "edits": [{"match": "abc", "replace": big}]}),
            ),
            (
                "patchdiff_find_occurrences",
                json!({"target_file_id": t, "text": big}),
            ),
            (
                "patchdiff_initialize_target",
                json!({"filename": "a.md", "content": big}),
            ),
        ] {
            let r = call(function, args);
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!("invalid_argument"), &json!("arguments_too_large")),
                "{function}: {r}"
            );
        }
        let r: String = Spi::get_one_with_args(
            "SELECT patchdiff_submit(target_file_id => $1::uuid, intent => 'x', edits => $2::json, expected_target_version => 0)::text",
            &[t.as_str().into(), json!([{"match": "abc", "replace": big}]).to_string().into()],
        )
        .unwrap()
        .unwrap();
        assert!(r.contains("arguments_too_large"), "{r}");
        // The typed form's text arguments count too: a small `edits` with a large `intent`.
        let r: String = Spi::get_one_with_args(
            "SELECT patchdiff_submit(target_file_id => $1::uuid, intent => $2, edits => '[{\"match\":\"abc\",\"replace\":\"x\"}]', expected_target_version => 0)::text",
            &[t.as_str().into(), big.as_str().into()],
        )
        .unwrap()
        .unwrap();
        assert!(r.contains("arguments_too_large"), "{r}");
        assert_eq!((log_rows(&t), content(&t)), (0, "abc\n".to_owned()));
        Spi::run("RESET patchdiff.max_argument_bytes").unwrap();
        assert_eq!(
            submit(&t, 0, json!([{"match": "abc", "replace": big}]))["status"],
            "accepted"
        );
    }

    /// docs/sql-api.md, "Rules that hold for every function": `patchdiff.max_target_bytes` bounds a target's text at
    /// creation (`target_too_large`, the LF text counted, no row) and at every acceptance that
    /// would grow it past the limit (no attempt, the target unchanged), for every submission
    /// function and the preview; a rejection is still logged; the setting is a superuser's.
    #[pg_test]
    fn targets_are_bounded_by_max_target_bytes() {
        Spi::run("SET patchdiff.max_target_bytes = 1024").unwrap();
        let targets = || -> i64 {
            Spi::get_one("SELECT count(*) FROM patchdiff.targets")
                .unwrap()
                .unwrap()
        };
        let before = targets();
        let r = call(
            "patchdiff_initialize_target",
            json!({"filename": "big.md", "content": "x".repeat(1_025)}),
        );
        assert_eq!(
            (&r["status"], &r["code"], &r["limit"], &r["actual"]),
            (
                &json!("invalid_argument"),
                &json!("target_too_large"),
                &json!(1_024),
                &json!(1_025)
            ),
            "{r}"
        );
        let r = call(
            "patchdiff_handle_upload",
            json!({"filename": "big.md", "content": "x".repeat(1_025), "content_type": "text/plain"}),
        );
        assert_eq!(r["code"], "target_too_large", "{r}");
        assert_eq!(targets(), before, "no target written");
        // CRLF counts as its LF text: 1,030 bytes raw, 1,024 canonical.
        let crlf = format!("@{}", "x".repeat(1_017)) + &"\r\n".repeat(6);
        let t = call(
            "patchdiff_initialize_target",
            json!({"filename": "at.md", "content": crlf}),
        );
        assert_eq!(t["status"], "ok", "{t}");
        let t = t["target_file_id"].as_str().unwrap().to_owned();

        let grow = json!([{"match": "@", "replace": "@@"}]);
        let r = submit(&t, 0, grow.clone());
        assert_eq!(
            (&r["code"], &r["actual"]),
            (&json!("target_too_large"), &json!(1_025)),
            "{r}"
        );
        let r = call(
            "patchdiff_submit_operations",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "grow",
                   "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "y"}]}),
        );
        assert_eq!(r["code"], "target_too_large", "{r}");
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "grow",
                   "replacement": "z".repeat(1_100)}),
        );
        assert_eq!(r["code"], "target_too_large", "{r}");
        let r = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0,
                   "intent": "grow", "edits": grow}),
        );
        assert_eq!(r["code"], "target_too_large", "{r}");
        assert_eq!(log_rows(&t), 0, "nothing written");
        // A rejection is logged; an edit that keeps the size is accepted.
        assert_eq!(
            submit(&t, 0, json!([{"match": "absent", "replace": "x"}]))["status"],
            "rejected"
        );
        assert_eq!(
            submit(&t, 0, json!([{"match": "@", "replace": "#"}]))["status"],
            "accepted"
        );
        assert_eq!(log_rows(&t), 2);
        Spi::run("RESET patchdiff.max_target_bytes").unwrap();
        let grow = json!([{"match": "#", "replace": "##"}]);
        assert_eq!(submit(&t, 1, grow)["status"], "accepted");
        // The setting is a superuser's: a role cannot raise its own limit.
        let context: String = Spi::get_one(
            "SELECT context::text FROM pg_catalog.pg_settings WHERE name = 'patchdiff.max_target_bytes'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(context, "superuser");
    }

    /// docs/security.md, "Who a call acts for": under SQL objects whose API functions are still
    /// SECURITY DEFINER (an earlier build of this version), every call would arrive as the
    /// extension's owner and act as an administrator for everyone; it is refused instead.
    #[pg_test(
        error = "pg_patchdiff: this database's pg_patchdiff functions are SECURITY DEFINER (installed by an earlier build of this version), which this library would run as the extension's owner for every caller; nothing was done. As a superuser, make them SECURITY INVOKER: SELECT pg_catalog.format('ALTER FUNCTION %s SECURITY INVOKER', p.oid::regprocedure) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_depend d ON d.objid = p.oid AND d.deptype = 'e' JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'pg_patchdiff' AND p.prosecdef \\gexec"
    )]
    fn a_definer_install_is_refused_rather_than_run_as_the_owner() {
        Spi::run("ALTER FUNCTION patchdiff_get_target(json) SECURITY DEFINER").unwrap();
        call(
            "patchdiff_get_target",
            json!({"target_file_id": "00000000-0000-4000-8000-000000000000"}),
        );
    }

    /// docs/sql-api.md, "Submit a changeset": the texts of a changeset's targets together are
    /// bounded by `patchdiff.max_changeset_target_bytes` (`changeset_targets_too_large`, with
    /// `limit` and `actual`, nothing written). The size is the text's, also for a value stored
    /// compressed and out of line (each 100,001-byte text here is a few hundred bytes of lz4);
    /// at the limit the changeset is accepted; the setting is a superuser's.
    #[pg_test]
    fn changesets_are_bounded_by_max_changeset_target_bytes() {
        let (a, b) = (
            init(&format!("A{}\n", "x".repeat(99_999))),
            init(&format!("B{}\n", "y".repeat(99_999))),
        );
        let stored: i64 = Spi::get_one_with_args(
            "SELECT pg_catalog.pg_column_size(current_content)::int8 FROM patchdiff.targets WHERE target_file_id = $1::uuid",
            &[a.as_str().into()],
        )
        .unwrap()
        .unwrap();
        assert!(stored < 10_000, "stored compressed: {stored} bytes");
        let changeset = json!({"members": [
            {"target_file_id": a, "expected_target_version": 0, "intent": "both",
             "edits": [{"match": "A", "replace": "a"}]},
            {"target_file_id": b, "expected_target_version": 0, "intent": "both",
             "edits": [{"match": "B", "replace": "b"}]}]});
        Spi::run("SET patchdiff.max_changeset_target_bytes = 200001").unwrap();
        let r = call("patchdiff_submit_changeset", changeset.clone());
        assert_eq!(
            (&r["status"], &r["code"], &r["limit"], &r["actual"]),
            (
                &json!("invalid_argument"),
                &json!("changeset_targets_too_large"),
                &json!(200_001),
                &json!(200_002)
            ),
            "{r}"
        );
        assert_eq!((log_rows(&a), log_rows(&b)), (0, 0), "nothing written");
        Spi::run("SET patchdiff.max_changeset_target_bytes = 200002").unwrap();
        let r = call("patchdiff_submit_changeset", changeset);
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!((log_rows(&a), log_rows(&b)), (1, 1));
        Spi::run("RESET patchdiff.max_changeset_target_bytes").unwrap();
        let context: String = Spi::get_one(
            "SELECT context::text FROM pg_catalog.pg_settings WHERE name = 'patchdiff.max_changeset_target_bytes'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(context, "superuser");
    }

    /// The submission's own sequence (drive::run over this backend's SPI store) as an autocommit
    /// call runs it, which searches near misses: a pgrx test always runs inside a transaction
    /// block, where the SQL function would answer `caller_transaction` instead.
    fn autocommit_submission(args: Value) -> Value {
        use patchdiff_engine::api::drive::{self, Route, Settings};
        let settings = Settings {
            strict_observation_mode: false,
            caller_owned_transaction: false,
            ..Settings::default()
        };
        let sub = patchdiff_engine::api::submit::parse_submit_edits(&args.to_string());
        let out = crate::with_store(|s| {
            drive::run(
                s,
                "patchdiff_submit_edits",
                sub,
                Route::Unobserved,
                settings,
            )
        });
        serde_json::from_str(&out.0).unwrap()
    }

    fn near_miss_typo(t: &str) -> Value {
        json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
               "edits": [{"match": "lighthuose keeper", "replace": "harbour master"}]})
    }

    /// Issue 17: "A fault inside the near-miss search must not roll back the audited attempt:
    /// return an omission_reason instead." In a real backend, after the attempt row is written,
    /// a search that panics (a bug) or cannot get its memory answers near_miss_search_failed;
    /// the rejection stands and its row is there. The faults are injected through the engine's
    /// test-only hook, which release builds do not contain.
    #[pg_test]
    fn a_failing_near_miss_search_keeps_the_audited_attempt() {
        use patchdiff_engine::api::near_miss::fault::{Fault, inject};
        let t = init("The old lighthouse keeper walked along the shore.\n");
        let r = autocommit_submission(near_miss_typo(&t));
        assert_eq!(
            r["near_misses"]["candidates"][0]["text"],
            "lighthouse keeper"
        );
        for (n, fault) in [Fault::Panic, Fault::Allocation].into_iter().enumerate() {
            inject(Some(fault));
            let r = autocommit_submission(near_miss_typo(&t));
            inject(None);
            assert_eq!(
                (&r["status"], &r["failure_reason"]),
                (&json!("rejected"), &json!("match_absent")),
                "{r}"
            );
            // The contract's list is omitted; the drift evidence is searched apart and stays.
            assert_eq!(
                r["near_misses"]["omission_reason"], "near_miss_search_failed",
                "{fault:?}: {r}"
            );
            assert!(r["near_misses"]["candidates"].is_null(), "{fault:?}");
            assert_eq!(log_rows(&t), 2 + n as i64);
            let logged: i64 = scalar(
                "SELECT count(*) FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
                r["pdcp_log_id"].as_str().unwrap(),
            );
            assert_eq!(logged, 1);
        }
    }

    /// Issue 17, the other side: a query cancel (or statement_timeout) seen by the search's
    /// interrupt check is not contained; it ends the statement as any cancel does, and the
    /// statement's attempt row goes with it (no verdict was returned, so none lacks its row).
    /// The cancel is made pending as StatementCancelHandler would, from inside the search.
    #[pg_test(error = "canceling statement due to user request")]
    fn a_cancel_inside_the_near_miss_search_still_cancels() {
        use patchdiff_engine::api::near_miss::fault::{Fault, inject};
        let t = init("The old lighthouse keeper walked along the shore.\n");
        inject(Some(Fault::Interrupt(|| {
            // SAFETY: what StatementCancelHandler does, in the backend's only thread.
            unsafe {
                pg_sys::QueryCancelPending = 1;
                pg_sys::InterruptPending = 1;
            }
        })));
        let r = std::panic::catch_unwind(|| autocommit_submission(near_miss_typo(&t)));
        inject(None);
        match r {
            Ok(r) => panic!("the search swallowed the cancel: {r}"),
            Err(e) => std::panic::resume_unwind(e),
        }
    }

    /// docs/security.md, "A target you may not read does not exist for you" and "Request keys
    /// belong to one target" (helper-87): a role that resends the owner's request key on a target
    /// it may not write reads nothing of the attempt stored under it. The stranger's answer is the
    /// unknown target's, the reader's `write_not_granted`, and neither reads a ledger row (the
    /// keyed recovery used to read the owner's attempt and aggregate its ledger rows before it
    /// looked at access: a timing channel for whether a key was used, and work sized by another
    /// tenant's attempt). The owner's own resend still recovers.
    #[pg_test]
    fn a_resent_key_on_a_target_the_caller_may_not_write_reads_nothing_of_it() {
        let t = init("abc def\n");
        let args = |id: &str| {
            json!({"target_file_id": id, "expected_target_version": 0, "intent": "x",
                   "client_request_id": "owners-key", "edits": [
                       {"match": "abc", "replace": "abd"}, {"match": "def", "replace": "deg"}]})
        };
        let first = call("patchdiff_submit_edits", args(&t));
        assert_eq!(first["status"], "accepted", "{first}");
        Spi::run("CREATE ROLE patchdiff_key_stranger NOLOGIN").unwrap();
        Spi::run("CREATE ROLE patchdiff_key_reader NOLOGIN").unwrap();
        let g = call(
            "patchdiff_grant",
            json!({"target_file_id": t, "role": "patchdiff_key_reader", "privilege": "read"}),
        );
        assert_eq!(g["status"], "ok", "{g}");
        let ledger_rows_read = || -> i64 {
            // An index scan counts its fetches on the index, a sequential scan on the table.
            Spi::get_one(
                "SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(r) \
                          + pg_catalog.pg_stat_get_xact_tuples_fetched(r))::int8 \
                   FROM (SELECT 'patchdiff.manifest_ledger'::regclass::oid UNION ALL \
                         SELECT indexrelid FROM pg_catalog.pg_index \
                          WHERE indrelid = 'patchdiff.manifest_ledger'::regclass) AS rels(r)",
            )
            .unwrap()
            .unwrap()
        };
        let unknown = "00000000-0000-4000-8000-00000000abcd";
        for (role, code) in [
            ("patchdiff_key_stranger", "target_not_found"),
            ("patchdiff_key_reader", "write_not_granted"),
        ] {
            let before = ledger_rows_read();
            Spi::run(&format!("SET LOCAL ROLE {role}")).unwrap();
            let resent = call("patchdiff_submit_edits", args(&t));
            let elsewhere = call("patchdiff_submit_edits", args(unknown));
            Spi::run("RESET ROLE").unwrap();
            assert_eq!(
                ledger_rows_read(),
                before,
                "{role} read the owner's ledger rows"
            );
            let text = resent.to_string();
            assert!(text.contains(code), "{role}: {text}");
            assert!(
                !text.contains(first["pdcp_log_id"].as_str().unwrap()),
                "{text}"
            );
            if code == "target_not_found" {
                assert_eq!(text.replace(&t, unknown), elsewhere.to_string());
            }
        }
        assert_eq!(log_rows(&t), 1);
        let again = call("patchdiff_submit_edits", args(&t));
        assert_eq!(again["deduplicated"], true, "{again}");
        assert_eq!(again["pdcp_log_id"], first["pdcp_log_id"]);
        assert!(
            ledger_rows_read() > 0,
            "the owner's recovery reads its ledger rows"
        );
    }

    /// A new target `filename` that `owner` owns (made by the test's superuser, then reassigned
    /// by UPDATE as docs/security.md describes, which the directory follows).
    fn target_owned_by(owner: &str, filename: &str) -> String {
        let r = call(
            "patchdiff_initialize_target",
            json!({"filename": filename, "content": "x\n"}),
        );
        let id = r["target_file_id"].as_str().unwrap().to_owned();
        Spi::run(&format!(
            "UPDATE patchdiff.targets SET owner_role = '{owner}' WHERE target_file_id = '{id}'"
        ))
        .unwrap();
        id
    }

    /// `count` new targets named `<prefix><n>.md`, n from 1, made by the test's superuser.
    fn targets_named(prefix: &str, count: usize) {
        Spi::run(&format!(
            "SELECT patchdiff_initialize_target(json_build_object('filename', '{prefix}' || n || '.md', \
             'content', 'x')) FROM generate_series(1, {count}) n"
        ))
        .unwrap();
    }

    /// Each listed target's ID and `access`, in the listing's order.
    fn ids_and_access(listing: &Value) -> Vec<(String, String)> {
        listing["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["target_file_id"].as_str().unwrap().to_owned(),
                    t["access"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// docs/security.md, "Finding your documents": the database's owner, and a role that
    /// inherits from it, have the privileges of `pg_database_owner`, a membership PostgreSQL
    /// implies rather than stores (helper-79: their listings missed what they may read through
    /// it). A target made under `SET ROLE pg_database_owner` is listed to both as `owner`, one
    /// granted to `pg_database_owner` as `read`, as `patchdiff_get_target` reads them.
    #[pg_test]
    fn the_database_owner_lists_what_pg_database_owner_may_read() {
        init("listed\n");
        Spi::run("CREATE ROLE patchdiff_dbo NOLOGIN").unwrap();
        Spi::run("CREATE ROLE patchdiff_dbo_member NOLOGIN").unwrap();
        Spi::run("GRANT patchdiff_dbo TO patchdiff_dbo_member").unwrap();
        Spi::run("CREATE ROLE patchdiff_dbo_other NOLOGIN").unwrap();
        let db: String = Spi::get_one("SELECT current_database()::text")
            .unwrap()
            .unwrap();
        Spi::run(&format!("ALTER DATABASE \"{db}\" OWNER TO patchdiff_dbo")).unwrap();
        let owned = target_owned_by("pg_database_owner", "pdo.md");
        let shared = target_owned_by("patchdiff_dbo_other", "shared.md");
        let g = call(
            "patchdiff_grant",
            json!({"target_file_id": shared, "role": "pg_database_owner", "privilege": "read"}),
        );
        assert_eq!(g["status"], "ok", "{g}");
        for who in ["patchdiff_dbo", "patchdiff_dbo_member"] {
            Spi::run(&format!("SET LOCAL ROLE {who}")).unwrap();
            let l = call("patchdiff_list_targets", json!({}));
            for id in [&owned, &shared] {
                let r = call("patchdiff_get_target", json!({"target_file_id": id}));
                assert_eq!(r["status"], "ok", "{who} reads {id}: {r}");
            }
            Spi::run("RESET ROLE").unwrap();
            let got = ids_and_access(&l);
            assert_eq!(
                got,
                [
                    (shared.clone(), "read".to_owned()),
                    (owned.clone(), "owner".to_owned())
                ],
                "{who}: {l}"
            );
        }
    }

    /// docs/security.md, "Finding your documents": a page reads a page, also without planner
    /// statistics (a restored database before its first ANALYZE; here the tables were never
    /// analyzed). A role with 3,000 targets and 3,000 grants from another lists a page of 500,
    /// reading at most 3,000 rows of the directory, the grants and `targets` together;
    /// with bitmap scans allowed PostgreSQL read all of the role's rows and sorted them
    /// (helper-81: 200,000 rows for a page of 500 among 100,000). The settings that prevent it
    /// end with the call.
    #[pg_test]
    fn a_page_reads_a_page_without_statistics() {
        Spi::run("CREATE ROLE patchdiff_nostats_probe NOLOGIN").unwrap();
        targets_named("n-", 6000);
        Spi::run(
            "UPDATE patchdiff.targets SET owner_role = 'patchdiff_nostats_probe' \
             WHERE filename ~ '^n-[0-9]*[02468]\\.md$'",
        )
        .unwrap();
        Spi::run(
            "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by) \
             SELECT target_file_id, 'patchdiff_nostats_probe', 'read', 'postgres' \
             FROM patchdiff.targets WHERE filename ~ '^n-[0-9]*[13579]\\.md$'",
        )
        .unwrap();
        let analyzed: i64 = Spi::get_one(
            "SELECT count(*) FROM pg_catalog.pg_stats WHERE schemaname = 'patchdiff' \
             AND tablename IN ('target_directory', 'target_grants')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(analyzed, 0, "the tables have no column statistics");
        let read = || -> i64 {
            Spi::get_one(
                "SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(c.oid) \
                          + pg_catalog.pg_stat_get_xact_tuples_fetched(c.oid))::int8 \
                 FROM pg_catalog.pg_class c WHERE c.relnamespace = 'patchdiff'::regnamespace \
                 AND c.relname IN ('target_directory', 'target_grants', 'targets')",
            )
            .unwrap()
            .unwrap_or(0)
        };
        let before = read();
        Spi::run("SET LOCAL ROLE patchdiff_nostats_probe").unwrap();
        let r = call("patchdiff_list_targets", json!({"limit": 500}));
        Spi::run("RESET ROLE").unwrap();
        let n = read() - before;
        assert_eq!(r["count"], 500, "{}", r["count"]);
        assert!(
            n <= 3000,
            "{n} rows read for a page of 500 among 6,000 of the role's"
        );
        // The planner settings the listing took for its statement ended with the call.
        let kept: String = Spi::get_one(
            "SELECT current_setting('enable_seqscan') || current_setting('enable_bitmapscan')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(kept, "onon", "the caller's settings after the call");
    }

    /// docs/security.md, "Finding your documents": each grant's copy of its target's creation
    /// time is the directory's, whoever writes it (a hand-written one listed a target twice,
    /// helper-81), and a creation time is finite ('infinity' set by hand ended every listing
    /// that reached it).
    #[pg_test]
    fn a_grants_creation_time_is_its_targets() {
        let id = init("x\n");
        Spi::run("CREATE ROLE patchdiff_time_probe NOLOGIN").unwrap();
        Spi::run(&format!(
            "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by, target_created_at) \
             VALUES ('{id}', 'patchdiff_time_probe', 'read', 'postgres', '2027-01-01')"
        ))
        .unwrap();
        let same = || -> bool {
            Spi::get_one(
                "SELECT bool_and(g.target_created_at = d.created_at) FROM patchdiff.target_grants g \
                 JOIN patchdiff.target_directory d USING (target_file_id)",
            )
            .unwrap()
            .unwrap()
        };
        assert!(
            same(),
            "an INSERT's own time is replaced by the directory's"
        );
        Spi::run(
            "UPDATE patchdiff.target_grants SET target_created_at = '2027-01-01' \
             WHERE grantee = 'patchdiff_time_probe'::regrole",
        )
        .unwrap();
        assert!(same(), "so is an UPDATE's");
        Spi::run(&format!(
            "UPDATE patchdiff.target_directory SET created_at = created_at - interval '1 day' \
             WHERE target_file_id = '{id}'"
        ))
        .unwrap();
        assert!(same(), "and the directory's change is followed");
        // Refused as a check violation (a subtransaction keeps the test's transaction usable);
        // stored, it fails the test.
        Spi::run(&format!(
            "DO $t$ BEGIN \
               UPDATE patchdiff.target_directory SET created_at = 'infinity' \
                WHERE target_file_id = '{id}'; \
               RAISE EXCEPTION 'an infinite creation time was stored'; \
             EXCEPTION WHEN check_violation THEN NULL; END $t$"
        ))
        .unwrap();
    }

    /// docs/security.md, "Finding your documents" and "Side channels": a `filename_prefix` is
    /// tested on the caller's own rows only, whatever the caller owns or holds. Among 3,000
    /// targets of another role, a probe that owns 300 and holds grants on 300 others lists a
    /// page of 5 with a prefix matching none of its names, some of them, and all of the other
    /// role's names (none of its own), reading at most 700 rows of `targets` each time (its 600
    /// and the page). With `targets` joined in the statement, PostgreSQL scanned all 3,300 of
    /// them and tested the prefix on every tenant's names (helper-80: 109,031 rows of 109,031
    /// to list 5 of a role's 2,000).
    #[pg_test]
    fn a_prefix_is_tested_only_on_the_callers_own_rows() {
        targets_named("other-", 3000);
        Spi::run("CREATE ROLE patchdiff_prefix_probe NOLOGIN").unwrap();
        targets_named("mine-", 300);
        Spi::run(
            "UPDATE patchdiff.targets SET owner_role = 'patchdiff_prefix_probe' \
             WHERE filename LIKE 'mine-%'",
        )
        .unwrap();
        Spi::run(
            "SELECT patchdiff_grant(json_build_object('target_file_id', target_file_id, \
             'role', 'patchdiff_prefix_probe', 'privilege', 'read')) \
             FROM patchdiff.targets WHERE filename ~ '^other-[0-9]*0\\.md$'",
        )
        .unwrap();
        Spi::run("ANALYZE patchdiff.target_directory, patchdiff.targets, patchdiff.target_grants")
            .unwrap();
        for (prefix, listed) in [("zzz", 0), ("mine-1", 5), ("other-1", 5), ("other", 5)] {
            let before: i64 = Spi::get_one(
                "SELECT (pg_catalog.pg_stat_get_xact_tuples_returned('patchdiff.targets'::regclass) \
                       + pg_catalog.pg_stat_get_xact_tuples_fetched('patchdiff.targets'::regclass))::int8",
            )
            .unwrap()
            .unwrap();
            Spi::run("SET LOCAL ROLE patchdiff_prefix_probe").unwrap();
            let r = call(
                "patchdiff_list_targets",
                json!({"limit": 5, "filename_prefix": prefix}),
            );
            Spi::run("RESET ROLE").unwrap();
            let after: i64 = Spi::get_one(
                "SELECT (pg_catalog.pg_stat_get_xact_tuples_returned('patchdiff.targets'::regclass) \
                       + pg_catalog.pg_stat_get_xact_tuples_fetched('patchdiff.targets'::regclass))::int8",
            )
            .unwrap()
            .unwrap();
            assert_eq!(r["count"], listed, "prefix {prefix}: {r}");
            assert!(
                after - before <= 700,
                "prefix {prefix}: {} rows of targets read among 3,300: {r}",
                after - before
            );
        }
    }

    /// docs/security.md, "Finding your documents": a role lists exactly the targets it may read,
    /// newest first, with the widest access it has, whether its roles are read apart (up to
    /// `ROLES_APART`) or together: a probe role that is a member of N group roles, each owning
    /// two targets, one of them also granted write to another group of the probe's (owner wins),
    /// one other target granted read to a group and write to another (write wins), and a target
    /// of a group the probe belongs to without inheriting (not listed). Pages of 7 walk the same
    /// list without repeats.
    #[pg_test]
    fn a_roles_listing_is_exactly_what_it_may_read_however_many_roles_it_has() {
        init("listed\n");
        Spi::run("CREATE ROLE patchdiff_many_probe NOLOGIN").unwrap();
        Spi::run("CREATE ROLE patchdiff_many_noinherit NOLOGIN NOINHERIT").unwrap();
        Spi::run("CREATE ROLE patchdiff_many_hidden NOLOGIN").unwrap();
        Spi::run("GRANT patchdiff_many_noinherit TO patchdiff_many_probe").unwrap();
        Spi::run("GRANT patchdiff_many_hidden TO patchdiff_many_noinherit").unwrap();
        let grant = |id: &str, role: &str, privilege: &str| {
            let g = call(
                "patchdiff_grant",
                json!({"target_file_id": id, "role": role, "privilege": privilege}),
            );
            assert_eq!(g["status"], "ok", "{g}");
        };
        let hidden = target_owned_by("patchdiff_many_hidden", "hidden.md");
        let other = target_owned_by("postgres", "other.md");
        let mut expected: Vec<(String, &str)> = Vec::new();
        let mut roles = 0;
        for n in [1, 10] {
            for k in roles..n {
                let group = format!("patchdiff_many_g{k}");
                Spi::run(&format!(
                    "CREATE ROLE {group} NOLOGIN; GRANT {group} TO patchdiff_many_probe"
                ))
                .unwrap();
                for j in 0..2 {
                    let id = target_owned_by(&group, &format!("g{k}-{j}.md"));
                    if j == 0 {
                        grant(&id, "patchdiff_many_g0", "write");
                    }
                    expected.push((id, "owner"));
                }
            }
            roles = n;
            if n == 10 {
                grant(&other, "patchdiff_many_g1", "read");
                grant(&other, "patchdiff_many_g2", "write");
                expected.push((other.clone(), "write"));
            }
            assert_eq!(
                crate::storage::grants::ROLES_APART.cmp(&(n + 2)),
                if n == 1 {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Less
                },
                "{n} groups, the NOINHERIT group and the probe itself: read apart, then together"
            );
            Spi::run("SET LOCAL ROLE patchdiff_many_probe").unwrap();
            let whole = call("patchdiff_list_targets", json!({"limit": 500}));
            let mut pages = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let mut args = json!({"limit": 7});
                if let Some(c) = &cursor {
                    args["cursor"] = json!(c);
                }
                let page = call("patchdiff_list_targets", args);
                pages.extend(page["targets"].as_array().unwrap().iter().cloned());
                match page["next_cursor"].as_str() {
                    Some(c) => cursor = Some(c.to_owned()),
                    None => break,
                }
            }
            Spi::run("RESET ROLE").unwrap();
            let got = ids_and_access(&whole);
            // The truth, newest first: the directory's order.
            let mut want: Vec<(String, String)> = Vec::new();
            let order: Vec<String> = Spi::connect(|c| {
                c.select(
                    "SELECT target_file_id::text FROM patchdiff.target_directory \
                     ORDER BY created_at DESC, target_file_id DESC",
                    None,
                    &[],
                )
                .unwrap()
                .map(|r| r.get::<String>(1).unwrap().unwrap())
                .collect()
            });
            for id in order {
                if let Some((_, a)) = expected.iter().find(|(e, _)| *e == id) {
                    want.push((id, (*a).to_owned()));
                }
            }
            assert!(!got.iter().any(|(id, _)| *id == hidden), "{whole}");
            assert_eq!(got, want, "{n} groups: {whole}");
            assert_eq!(
                &pages,
                whole["targets"].as_array().unwrap(),
                "{n} groups: pages of 7"
            );
        }
    }

    /// docs/security.md, "Finding your documents" and "Side channels": a role's listing reads only the
    /// rows of the targets it may see, so neither the number of another tenant's targets nor how many
    /// of their filenames start with a prefix changes its work (helper-77: 0.26-0.56 s per call among
    /// 100,000 targets of another role; helper-71: a prefix tested on other tenants' names timed them).
    /// Here 600 targets of another role, each granted to three others, 3 of a probe role (made its own
    /// by a superuser's reassignment, which the directory follows) and one granted to it. The probe's
    /// `patchdiff_list_targets` calls, with and without a prefix that matches all the others, read the
    /// same number of rows of the directory, the targets, the grants and their indexes (as this
    /// backend's own statistics count them, `pg_stat_get_xact_tuples_returned` / `_fetched`, about 100
    /// here, most of them read by PostgreSQL while it plans the statement) before and after the other
    /// role's targets and grants double; scanning the directory, as the listing did before, read at
    /// least 600 of them, and 1,200 after. Then the other role shares 600 of its targets with the
    /// probe, and 600 more: a page of 5 reads about as many rows after the second 600 as after the
    /// first (within what planning reads; ordered by the target's own creation time instead of each
    /// grant's copy of it, 2,449 and 6,048).
    #[pg_test]
    fn a_roles_listing_reads_only_what_it_may_see() {
        init("listed\n");
        targets_named("other-", 600);
        Spi::run("CREATE ROLE patchdiff_list_probe NOLOGIN").unwrap();
        // Grants among others: each of the 600 to three other roles, which the probe's listing
        // must not read (with a few hundred, a sequential scan of the grants is the cheaper plan).
        for other in [
            "patchdiff_list_other1",
            "patchdiff_list_other2",
            "patchdiff_list_other3",
        ] {
            Spi::run(&format!("CREATE ROLE {other} NOLOGIN")).unwrap();
            Spi::run(&format!(
                "SELECT patchdiff_grant(json_build_object('target_file_id', target_file_id, \
                 'role', '{other}', 'privilege', 'write')) \
                 FROM patchdiff.targets WHERE filename LIKE 'other-%'"
            ))
            .unwrap();
        }
        targets_named("mine-", 3);
        Spi::run(
            "UPDATE patchdiff.targets SET owner_role = 'patchdiff_list_probe' \
             WHERE filename LIKE 'mine-%'",
        )
        .unwrap();
        let granted: String = Spi::get_one(
            "SELECT target_file_id::text FROM patchdiff.targets WHERE filename = 'other-7.md'",
        )
        .unwrap()
        .unwrap();
        let g = call(
            "patchdiff_grant",
            json!({"target_file_id": granted, "role": "patchdiff_list_probe", "privilege": "read"}),
        );
        assert_eq!(g["status"], "ok", "{g}");
        let followed: i64 = Spi::get_one(
            "SELECT count(*) FROM patchdiff.target_directory WHERE owner_role = 'patchdiff_list_probe'::regrole",
        )
        .unwrap()
        .unwrap();
        assert_eq!(followed, 3, "the directory follows a reassigned owner");
        Spi::run("ANALYZE patchdiff.target_directory, patchdiff.targets, patchdiff.target_grants")
            .unwrap();
        // Rows this backend has read from the storage tables and their indexes in this
        // transaction (scanned, fetched or returned, kept or filtered away).
        let read = || -> i64 {
            Spi::get_one(
                "SELECT sum(pg_catalog.pg_stat_get_xact_tuples_returned(c.oid) \
                          + pg_catalog.pg_stat_get_xact_tuples_fetched(c.oid))::int8 \
                 FROM pg_catalog.pg_class c \
                 WHERE c.relnamespace = 'patchdiff'::regnamespace \
                   AND c.relname IN ('target_directory', 'targets', 'target_grants', \
                                     'target_directory_owner_role_created_at_target_file_id_idx', \
                                     'target_directory_created_at_target_file_id_idx', \
                                     'target_directory_pkey', 'targets_pkey', 'target_grants_pkey', \
                                     'target_grants_grantee_target_created_at_target_file_id_idx')",
            )
            .unwrap()
            .unwrap_or(0)
        };
        let known: i64 = Spi::get_one(
            "SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = 'patchdiff'::regnamespace \
             AND relname IN ('target_directory_owner_role_created_at_target_file_id_idx', \
                             'target_directory_created_at_target_file_id_idx', 'target_directory_pkey', \
                             'targets_pkey', 'target_grants_pkey', \
                             'target_grants_grantee_target_created_at_target_file_id_idx')",
        )
        .unwrap()
        .unwrap();
        assert_eq!(known, 6, "the indexes this test counts have these names");
        let list = |prefix: Option<&str>| -> (Value, i64) {
            let before = read();
            Spi::run("SET LOCAL ROLE patchdiff_list_probe").unwrap();
            let mut args = json!({"limit": 500});
            if let Some(p) = prefix {
                args["filename_prefix"] = json!(p);
            }
            let r = call("patchdiff_list_targets", args);
            Spi::run("RESET ROLE").unwrap();
            (r, read() - before)
        };
        let mut first = Vec::new();
        for (prefix, listed) in [(None, 4), (Some("other"), 1), (Some("mine"), 3)] {
            let (r, n) = list(prefix);
            assert_eq!(r["count"], listed, "prefix {prefix:?}: {r}");
            first.push(n);
        }
        // 600 more of the other role's targets, each granted to the three others.
        targets_named("other-more-", 600);
        for other in [
            "patchdiff_list_other1",
            "patchdiff_list_other2",
            "patchdiff_list_other3",
        ] {
            Spi::run(&format!(
                "SELECT patchdiff_grant(json_build_object('target_file_id', target_file_id, \
                 'role', '{other}', 'privilege', 'write')) \
                 FROM patchdiff.targets WHERE filename LIKE 'other-more-%'"
            ))
            .unwrap();
        }
        Spi::run("ANALYZE patchdiff.target_directory, patchdiff.targets, patchdiff.target_grants")
            .unwrap();
        for ((prefix, listed), n1) in [(None, 4), (Some("other"), 1), (Some("mine"), 3)]
            .into_iter()
            .zip(first)
        {
            let (r, n2) = list(prefix);
            assert_eq!(r["count"], listed, "prefix {prefix:?}: {r}");
            assert!(
                n1 <= 150 && n2 <= n1 + 10,
                "prefix {prefix:?}: {n1} rows read among 600 targets of another role, {n2} among 1,200"
            );
        }
        // Shares it did not ask for: 600 of the other role's targets granted to the probe, then
        // 600 more. Its first page of 5 reads no more for the second 600 than before them.
        let shared = |which: &str| {
            Spi::run(&format!(
                "SELECT patchdiff_grant(json_build_object('target_file_id', target_file_id, \
                 'role', 'patchdiff_list_probe', 'privilege', 'read')) \
                 FROM patchdiff.targets WHERE {which}"
            ))
            .unwrap();
            Spi::run("ANALYZE patchdiff.target_grants").unwrap();
            let before = read();
            Spi::run("SET LOCAL ROLE patchdiff_list_probe").unwrap();
            let r = call("patchdiff_list_targets", json!({"limit": 5}));
            Spi::run("RESET ROLE").unwrap();
            assert_eq!(r["count"], 5, "{r}");
            read() - before
        };
        let (n1, n2) = (
            shared(r"filename ~ '^other-\d+\.md$'"),
            shared("filename LIKE 'other-more-%'"),
        );
        // (What PostgreSQL reads while planning, at the ends of indexes the grants' writes left
        // dead rows in, varies by a few dozen.)
        assert!(
            n1 <= 150 && n2 <= n1 + 50,
            "a page of 5 read {n1} rows among 600 grants to the probe, {n2} among 1,200"
        );
        // The same listing by the superuser (an administrator) reads every directory row.
        let before = read();
        let r = call("patchdiff_list_targets", json!({"limit": 500}));
        assert_eq!(r["count"], 500, "{r}");
        assert!(
            read() - before >= 500,
            "the counters count this listing's rows"
        );
    }

    /// Issue 15 item 2 ("a forged cursor is refused"), in SQL: a cursor whose microseconds the
    /// page query cannot turn into a timestamp is `invalid_cursor`, not SQL error 22008
    /// (interval or timestamp out of range, which ended the caller's transaction); the edges
    /// of what is accepted run the query and page normally.
    #[pg_test]
    fn list_targets_refuses_a_cursor_beyond_any_timestamp() {
        init("listed\n");
        let uuid = "00000000-0000-0000-0000-000000000000";
        for us in [
            "9223372036854775807",
            "-300000000000000000",
            "4611686018427387905",
        ] {
            let r = call(
                "patchdiff_list_targets",
                json!({"cursor": format!("{us}.{uuid}")}),
            );
            assert_eq!(r["code"], "invalid_cursor", "{us}: {r}");
        }
        // The newest possible cursor pages from the newest target; the oldest finds none.
        for (us, some) in [
            ("4611686018427387904", true),
            ("-210866803200000000", false),
        ] {
            let r = call(
                "patchdiff_list_targets",
                json!({"cursor": format!("{us}.{uuid}")}),
            );
            assert_eq!(r["status"], "ok", "{us}: {r}");
            assert_eq!(r["count"].as_u64().unwrap() > 0, some, "{us}: {r}");
        }
    }
}
