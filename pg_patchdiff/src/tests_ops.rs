//! SQL API tests for guarded operations (tx/2), sole replacement (tx/3), line reads, preview,
//! warnings and include_correlation_id. Each calls the SQL functions through SPI and names the
//! contract clause it proves.

use crate::tests::{call, content as text_of, init, scalar};
use pgrx::prelude::*;
use serde_json::{Value, json};

fn ops(target: &str, version: i64, operations: Value) -> Value {
    call(
        "patchdiff_submit_operations",
        json!({"target_file_id": target, "expected_target_version": version, "intent": "test", "operations": operations}),
    )
}

fn replace(target: &str, version: i64, replacement: &str) -> Value {
    call(
        "patchdiff_submit_replacement",
        json!({"target_file_id": target, "expected_target_version": version, "intent": "rewrite", "replacement": replacement}),
    )
}

fn json_scalar(q: &str, target: &str) -> Value {
    let s: Option<String> = Spi::get_one_with_args(q, &[target.into()]).unwrap();
    s.map_or(Value::Null, |s| serde_json::from_str(&s).unwrap())
}

/// (attempt rows, ledger rows, target version) of one target.
fn counts(target: &str) -> (i64, i64, i64) {
    (
        scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            target,
        ),
        scalar(
            "SELECT count(*) FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            target,
        ),
        scalar(
            "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::uuid",
            target,
        ),
    )
}

fn is_uuid_v4(v: &Value) -> bool {
    let s = v.as_str().unwrap_or("");
    s.len() == 36
        && s.as_bytes()[14] == b'4'
        && matches!(s.as_bytes()[19], b'8' | b'9' | b'a' | b'b')
}

#[pg_schema]
mod tests {
    use super::*;

    /// Contract "patchdiff_submit_operations": spans from one read in descending order, at the
    /// buffer end and at 0, recorded under patchdiff-mvp-0.3.0 with span facts carrying
    /// operation "span" in the response and in the ledger's derived facts.
    #[pg_test]
    fn descending_spans_from_one_read_at_0_and_the_end() {
        let t = init("alpha beta gamma\n");
        let r = ops(
            &t,
            0,
            json!([
                {"op": "span", "start": 17, "end": 17, "expected_text": "", "replace": "delta\n"},
                {"op": "span", "start": 6, "end": 10, "expected_text": "beta", "replace": "BETA"},
                {"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "# "}
            ]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(text_of(&t), "# alpha BETA gamma\ndelta\n");
        assert_eq!(r["manifest_entries_added"], 3);
        assert_eq!(
            (&r["warnings"], &r["warning_count"]),
            (&json!([]), &json!(0))
        );
        let c = &r["evidence"]["changes"];
        assert_eq!(
            (&c[0]["span_start"], &c[0]["span_end"]),
            (&json!(17), &json!(17))
        );
        assert_eq!(
            (
                &c[1]["span_start"],
                &c[1]["span_end"],
                &c[1]["matched_chars"]
            ),
            (&json!(6), &json!(10), &json!(4))
        );
        assert_eq!(c[1]["operation"], "span");
        let derived = json_scalar(
            "SELECT json_agg(derived ORDER BY change_index)::text FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(&derived, c);
        let stored: String = scalar(
            "SELECT protocol_version || ' ' || runtime_version || ' ' || (diagnostic IS NULL) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(stored, "patchdiff-tx/2 patchdiff-mvp-0.3.0 true");
        let origin: String = scalar(
            "SELECT string_agg(DISTINCT origin, ',') FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(origin, "typed");
    }

    /// Contract "Span context": a span carrying expected_before or expected_after, even null,
    /// records runtime patchdiff-mvp-0.5.0; a mismatch rejects with the actual adjacent text.
    #[pg_test]
    fn span_context_selects_0_5_0_and_verifies_insertions() {
        let t = init("line one\nline two\n");
        let r = ops(
            &t,
            0,
            json!([{"op": "span", "start": 9, "end": 9, "expected_text": "", "replace": "inserted\n",
                    "expected_before": "one\n", "expected_after": null}]),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(text_of(&t), "line one\ninserted\nline two\n");
        let rt: String = scalar(
            "SELECT runtime_version FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(rt, "patchdiff-mvp-0.5.0");
        // An off-by-one insertion point (a miscounted line) rejects and shows what is there.
        let r = ops(
            &t,
            1,
            json!([{"op": "span", "start": 17, "end": 17, "expected_text": "", "replace": "x",
                    "expected_before": "inserted\n"}]),
        );
        assert_eq!(r["failure_reason"], "span_expected_text_mismatch", "{r}");
        let d = &r["diagnostic"];
        assert_eq!(
            (&d["span_check"], &d["buffer_length"], &d["actual_text"]),
            (&json!("expected_before"), &json!(27), &json!("\ninserted"))
        );
        assert_eq!(
            (
                &d["actual_text_truncated"],
                &d["expected_chars"],
                &d["actual_chars"]
            ),
            (&json!(false), &json!(9), &json!(9))
        );
        assert_eq!(
            (&d["retryable"], &d["format"]),
            (&json!(true), &json!("patchdiff-tx/2"))
        );
        assert_eq!(counts(&t), (2, 1, 1));
    }

    /// Contract "Mixed match/span transactions are atomic": a later failing span rejects the
    /// whole transaction with no facts or ledger rows; span_out_of_bounds names the buffer end.
    #[pg_test]
    fn mixed_transactions_are_atomic() {
        let t = init("abc");
        let r = ops(
            &t,
            0,
            json!([{"op": "match", "match": "abc", "replace": "a"},
                   {"op": "span", "start": 1, "end": 2, "expected_text": "b", "replace": ""}]),
        );
        assert_eq!(r["failure_reason"], "span_out_of_bounds", "{r}");
        assert_eq!(r["failed_change_id"], "chg_002");
        let d = &r["diagnostic"];
        assert_eq!(
            (&d["span_check"], &d["buffer_length"]),
            (&json!("bounds"), &json!(1))
        );
        assert_eq!(d["failure_context"]["buffer_stage"], "intermediate_buffer");
        assert_eq!(d["failure_context"]["prior_changes"], 1);
        assert_eq!(r.get("evidence"), None);
        assert_eq!(counts(&t), (1, 0, 0));
        assert_eq!(text_of(&t), "abc");
        // Selectors on a span reject the record at protocol validation.
        let r = ops(
            &t,
            0,
            json!([{"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": "", "occurrence_index": 1}]),
        );
        assert_eq!(
            (&r["failure_reason"], &r["diagnostic"]["code"]),
            (&json!("block_malformed"), &json!("invalid_operation"))
        );
        assert_eq!(r["validity"]["protocol_valid"], false);
    }

    /// Contract "grapheme_boundary_split": a UTF-16 offset sent as a code-point offset lands
    /// inside an emoji cluster; the transaction is accepted with the warning, which the row
    /// stores and keyed recovery returns.
    #[pg_test]
    fn utf16_offset_inside_an_emoji_warns_and_recovers() {
        let t = init("\u{1F600}\u{1F44D}\u{1F3FD}!");
        let args = json!({"target_file_id": t, "expected_target_version": 0, "intent": "Insert after the smiley",
                          "client_request_id": "emoji-1",
                          "operations": [{"op": "span", "start": 2, "end": 2, "expected_text": "", "replace": " "}]});
        let r = call("patchdiff_submit_operations", args.clone());
        assert_eq!(r["status"], "accepted", "{r}");
        let line = "grapheme_boundary_split: chg_001 span insertion at sequential offset 2 falls inside a likely grapheme cluster (before an emoji modifier)";
        assert_eq!(r["warnings"], json!([line]));
        assert_eq!(
            (&r["warning_count"], &r["warnings_truncated"]),
            (&json!(1), &json!(false))
        );
        assert_eq!(r["warning_details"][0]["offset"], 2);
        let stored = json_scalar(
            "SELECT diagnostic::text FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(
            stored,
            json!({"warnings": [line], "warning_count": 1, "warnings_truncated": false})
        );
        let again = call("patchdiff_submit_operations", args);
        assert_eq!(again["deduplicated"], true);
        assert_eq!(
            (&again["warnings"], &again["warning_count"]),
            (&json!([line]), &json!(1))
        );
        assert_eq!(
            again["warning_details"][0]["code"],
            "grapheme_boundary_split"
        );
    }

    /// Contract "no_op_change" / "no_op_transaction", on a sole replacement that changes nothing.
    #[pg_test]
    fn identical_replacement_warns_no_op() {
        let t = init("same\n");
        let r = replace(&t, 0, "same\r\n");
        assert_eq!(r["status"], "accepted", "{r}");
        let codes: Vec<&Value> = r["warning_details"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["code"])
            .collect();
        assert_eq!(codes, [&json!("no_op_change"), &json!("no_op_transaction")]);
        assert_eq!(
            (&r["before_hash"], &r["version"]),
            (&r["after_hash"], &json!(1))
        );
    }

    /// Contract "patchdiff_submit_replacement": runtime 0.4.0; an empty replacement is valid; one
    /// ledger row with operation "replace_all" covering the whole original span.
    #[pg_test]
    fn replacement_writes_one_replace_all_row() {
        let t = init("a🌍\nb\n");
        let r = replace(&t, 0, "");
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(text_of(&t), "");
        let derived = json_scalar(
            "SELECT json_agg(json_build_object('change_id', change_id, 'intent', intent, 'rationale', rationale, 'derived', derived))::text FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(derived.as_array().unwrap().len(), 1);
        let d = &derived[0]["derived"];
        assert_eq!(
            (
                &d["span_start"],
                &d["span_end"],
                &d["matched_chars"],
                &d["replacement_chars"],
                &d["operation"]
            ),
            (
                &json!(0),
                &json!(5),
                &json!(5),
                &json!(0),
                &json!("replace_all")
            )
        );
        assert_eq!(
            (
                &derived[0]["change_id"],
                &derived[0]["intent"],
                &derived[0]["rationale"]
            ),
            (&json!("chg_001"), &json!("rewrite"), &Value::Null)
        );
        let rt: String = scalar(
            "SELECT protocol_version || ' ' || runtime_version FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(rt, "patchdiff-tx/3 patchdiff-mvp-0.4.0");
        // Guards are required and checked like every submission.
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "intent": "x", "replacement": "y"}),
        );
        assert_eq!(r["failure_reason"], "context_missing");
        let r = replace(&t, 0, "y");
        assert_eq!(r["failure_reason"], "target_version_mismatch");
    }

    /// Contract "Fresh admission limits": 1,000,000 code points is admitted; one more returns
    /// invalid_argument / replacement_too_large with pdcp_log_id null and writes no row.
    #[pg_test]
    fn replacement_admission_limits_write_no_row() {
        let t = init("x");
        let at = "a".repeat(1_000_000);
        let over = format!("{at}a");
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "big", "replacement": over, "include_correlation_id": true}),
        );
        assert_eq!(
            (&r["status"], &r["code"], &r["pdcp_log_id"]),
            (
                &json!("invalid_argument"),
                &json!("replacement_too_large"),
                &Value::Null
            )
        );
        assert_eq!(
            r["diagnostic"],
            json!({"code": "replacement_too_large", "limit_exceeded": "raw_code_points", "actual": 1_000_001,
                   "limit": 1_000_000, "canonical_code_points": 1_000_001, "canonical_utf8_bytes": 1_000_001,
                   "canonical_would_fit": false})
        );
        assert!(is_uuid_v4(&r["correlation_id"]));
        assert_eq!(counts(&t), (0, 0, 0));
        // CRLF only: canonical_would_fit tells the host to send LF.
        let r = replace(&t, 0, &"\r\n".repeat(500_001));
        assert_eq!(
            (&r["code"], &r["diagnostic"]["canonical_would_fit"]),
            (&json!("replacement_too_large"), &json!(true))
        );
        assert_eq!(counts(&t), (0, 0, 0));
        let r = replace(&t, 0, &at);
        assert_eq!(r["status"], "accepted");
        assert_eq!(counts(&t), (1, 1, 1));
    }

    /// Contract "Ordering": key recovery and conflict precede fresh admission, so a conflict row
    /// stores the complete oversized record; exact recovery still returns the original.
    #[pg_test]
    fn key_conflict_precedes_replacement_admission() {
        let t = init("x");
        let args = json!({"target_file_id": t, "expected_target_version": 0, "intent": "small", "replacement": "y", "client_request_id": "rk-1"});
        assert_eq!(
            call("patchdiff_submit_replacement", args.clone())["status"],
            "accepted"
        );
        let mut big = args.clone();
        big["replacement"] = json!("b".repeat(1_000_001));
        let r = call("patchdiff_submit_replacement", big);
        assert_eq!(
            (&r["failure_reason"], &r["diagnostic"]["code"]),
            (&json!("context_invalid"), &json!("request_key_conflict")),
            "{}",
            r["status"]
        );
        assert_eq!(r["diagnostic"]["differing_fields"], json!(["replacement"]));
        let stored: i64 = scalar(
            "SELECT length(pdcp_content) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND conflicts_with_pdcp_log_id IS NOT NULL",
            &t,
        );
        assert!(stored > 1_000_001, "{stored}");
        let again = call("patchdiff_submit_replacement", args);
        assert_eq!(
            (&again["deduplicated"], &again["version"]),
            (&json!(true), &json!(1))
        );
        assert_eq!(again["evidence"]["changes"][0]["operation"], "replace_all");
        assert_eq!(counts(&t), (2, 1, 1));
    }

    /// Contract "include_correlation_id": every submission tool returns a fresh UUIDv4 per
    /// invocation, recovery included; never stored; a non-boolean is invalid before admission.
    #[pg_test]
    fn correlation_ids_on_every_submission_tool() {
        let t = init("one two");
        let o = json!({"target_file_id": t, "expected_target_version": 0, "intent": "x", "client_request_id": "c-1",
                       "operations": [{"op": "match", "match": "one", "replace": "1"}], "include_correlation_id": true});
        let a = call("patchdiff_submit_operations", o.clone());
        let b = call("patchdiff_submit_operations", o.clone());
        assert!(is_uuid_v4(&a["correlation_id"]) && is_uuid_v4(&b["correlation_id"]));
        assert_ne!(a["correlation_id"], b["correlation_id"]);
        assert_eq!(b["deduplicated"], true);
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": "x", "replacement": "z", "include_correlation_id": true}),
        );
        assert!(is_uuid_v4(&r["correlation_id"]));
        let without = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 2, "intent": "x", "replacement": "w"}),
        );
        assert_eq!(without.get("correlation_id"), None);
        for tool in [
            "patchdiff_submit_operations",
            "patchdiff_submit_replacement",
        ] {
            let r = call(
                tool,
                json!({"target_file_id": t, "expected_target_version": 3, "intent": "x", "operations": [], "replacement": "", "include_correlation_id": "yes"}),
            );
            // Unknown names are checked first; send only the tool's own.
            let mut args = json!({"target_file_id": t, "expected_target_version": 3, "intent": "x", "include_correlation_id": "yes"});
            if tool.ends_with("operations") {
                args["operations"] = json!([]);
            } else {
                args["replacement"] = json!("");
            }
            assert_eq!(r["code"], "unknown_argument");
            let r = call(tool, args);
            assert_eq!(
                (&r["status"], &r["code"]),
                (
                    &json!("invalid_argument"),
                    &json!("invalid_include_correlation_id")
                )
            );
        }
        let stored: i64 = scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND (request_envelope::text LIKE '%correlation%' OR pdcp_content LIKE '%correlation%')",
            &t,
        );
        assert_eq!(stored, 0);
        assert_eq!(counts(&t).0, 3);
    }

    /// Contract "patchdiff_read_lines": pages, continuation, line starts, and every
    /// invalid_argument case; an unknown target is not_found; nothing is written.
    #[pg_test]
    fn read_lines_pages_and_rejects_bad_arguments() {
        let t = init(&format!("first\n{}\nlast\n", "y".repeat(9_000)));
        let r = call(
            "patchdiff_read_lines",
            json!({"target_file_id": t, "start_line": 2, "end_line": 3, "include_line_starts": true}),
        );
        assert_eq!(
            (
                &r["total_lines"],
                &r["range_start"],
                &r["range_end"],
                &r["start"],
                &r["end"]
            ),
            (
                &json!(4),
                &json!(6),
                &json!(9_012),
                &json!(6),
                &json!(4_006)
            )
        );
        assert_eq!(
            (&r["next_offset"], &r["next_start"], &r["truncated"]),
            (&json!(4_000), &json!(4_006), &json!(true))
        );
        assert_eq!(r["line_starts"], json!([{"line": 2, "start": 6}]));
        // Continue range-relative, and absolute through read_target: the same text.
        let n = call(
            "patchdiff_read_lines",
            json!({"target_file_id": t, "start_line": 2, "end_line": 3, "offset": 4_000, "max_chars": 8_000, "include_line_starts": true}),
        );
        assert_eq!(
            (&n["start"], &n["end"], &n["next_offset"]),
            (&json!(4_006), &json!(9_012), &Value::Null)
        );
        assert_eq!(n["line_starts"], json!([{"line": 3, "start": 9_007}]));
        let via = call(
            "patchdiff_read_target",
            json!({"target_file_id": t, "start": 4_006, "length": 8_000}),
        );
        assert!(
            via["text"]
                .as_str()
                .unwrap()
                .starts_with(n["text"].as_str().unwrap())
        );
        let last = call(
            "patchdiff_read_lines",
            json!({"target_file_id": t, "start_line": 4}),
        );
        assert_eq!(
            (&last["text"], &last["range_start"]),
            (&json!(""), &json!(9_012))
        );
        for (args, code) in [
            (json!({"start_line": true}), "invalid_start_line"),
            (json!({"start_line": 0}), "invalid_start_line"),
            (json!({"start_line": 1.5}), "invalid_start_line"),
            (json!({"end_line": -1}), "invalid_end_line"),
            (json!({"offset": -1}), "invalid_offset"),
            (json!({"max_chars": 0}), "invalid_max_chars"),
            (
                json!({"include_line_starts": "true"}),
                "invalid_include_line_starts",
            ),
            (json!({"start_line": 5}), "start_line_out_of_range"),
            (json!({"end_line": 5}), "end_line_out_of_range"),
            (
                json!({"start_line": 3, "end_line": 2}),
                "invalid_line_range",
            ),
            (json!({"start_line": 4, "offset": 1}), "offset_out_of_range"),
            (json!({"lines": 1}), "unknown_argument"),
        ] {
            let mut a = args.clone();
            a["target_file_id"] = json!(t);
            let r = call("patchdiff_read_lines", a);
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!("invalid_argument"), &json!(code)),
                "{args}"
            );
        }
        let r = call(
            "patchdiff_read_lines",
            json!({"target_file_id": "11111111-1111-4111-8111-111111111111"}),
        );
        assert_eq!(r["status"], "not_found");
        assert_eq!(counts(&t), (0, 0, 0));
    }

    /// Contract "patchdiff_preview": no row, no lock, no key; the same verdict, facts and
    /// warnings a submission would return; after_hash kept; never the proposed text. The lock
    /// is checked by making the transaction read-only, where SELECT ... FOR UPDATE fails.
    #[pg_test]
    fn preview_writes_nothing_and_takes_no_lock() {
        let t = init("Calcly 1, Calcly 2, Calcly 3.");
        let edits = json!([{"match": "Calcly", "replace": "Numra", "occurrence_index": 1},
                           {"match": "Calcly", "replace": "Numra", "occurrence_index": 2}]);
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0, "intent": "Rename", "edits": edits}),
        );
        assert_eq!(
            (&p["preview"], &p["advisory"], &p["status"]),
            (&json!(true), &json!(true), &json!("accepted")),
            "{p}"
        );
        assert_eq!(
            (&p["stage"], &p["format"]),
            (&json!("accepted"), &json!("patchdiff-tx/1"))
        );
        assert_eq!(
            (&p["before_version"], &p["current_version"]),
            (&json!(0), &json!(0))
        );
        assert_eq!(p["warning_count"], 1);
        assert!(!p.to_string().contains("Numra 1"));
        assert_eq!(counts(&t), (0, 0, 0));
        let s = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "Rename", "edits": edits}),
        );
        assert_eq!(
            (&s["status"], &s["after_hash"]),
            (&json!("accepted"), &p["after_hash"])
        );
        assert_eq!(s["evidence"]["changes"], p["change_facts"]);
        assert_eq!(s["warnings"], p["warnings"]);
        assert_eq!(s["warning_details"], p["warning_details"]);
        assert_eq!(counts(&t), (1, 2, 1));
        // A stale guard previews as rejected; no request key or lineage exists.
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/3", "expected_target_version": 0, "intent": "x", "replacement": "y"}),
        );
        assert_eq!(
            (&p["status"], &p["stage"], &p["failure_reason"]),
            (
                &json!("rejected"),
                &json!("precondition_guard"),
                &json!("target_version_mismatch")
            )
        );
        assert_eq!(p["after_hash"], Value::Null);
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/3", "expected_target_version": 1, "intent": "x", "replacement": "y", "client_request_id": "k"}),
        );
        assert_eq!(
            (&p["code"], &p["detail"]),
            (&json!("unknown_argument"), &p["failure_detail"])
        );
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/2", "expected_target_version": 1, "intent": "x", "operations": [], "edits": null}),
        );
        assert_eq!(p["code"], "field_not_in_format");
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/3", "expected_target_version": 1, "intent": "x", "replacement": "y".repeat(1_000_001)}),
        );
        assert_eq!(p["code"], "replacement_too_large");
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": "11111111-1111-4111-8111-111111111111", "format": "patchdiff-tx/3", "expected_target_version": 1, "intent": "x", "replacement": "y"}),
        );
        assert_eq!(
            (&p["status"], &p["code"]),
            (&json!("rejected"), &json!("target_not_found"))
        );
        assert_eq!(counts(&t), (1, 2, 1));
        // No lock: in a read-only transaction preview still answers, a submission cannot lock.
        Spi::run(
            "CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS \
             $$ BEGIN EXECUTE q; RETURN 'ok'; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE; END $$",
        )
        .unwrap();
        Spi::run("SET LOCAL transaction_read_only = on").unwrap();
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/3", "expected_target_version": 1, "intent": "x", "replacement": "y"}),
        );
        assert_eq!(p["status"], "accepted", "{p}");
        let submit = json!({"target_file_id": t, "expected_target_version": 1, "intent": "x", "replacement": "y"});
        let state: String = Spi::get_one_with_args(
            "SELECT pg_temp.sqlstate_of(pg_catalog.format('SELECT patchdiff_submit_replacement(%L::json)', $1::text))",
            &[submit.to_string().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            state, "25006",
            "read_only_sql_transaction: the submission's FOR UPDATE"
        );
    }

    /// Contract "Preview evidence is bounded": 33 changes return a prefix of 32 whole facts with
    /// the totals, the truncation and its reason; 32 return all.
    #[pg_test]
    fn preview_fact_prefix_at_its_edge() {
        let t = init(&"a".repeat(33));
        for (n, truncated) in [(32usize, false), (33, true)] {
            let ops: Vec<Value> = (0..n)
                .rev()
                .map(|i| json!({"op": "span", "start": i, "end": i + 1, "expected_text": "a", "replace": "b"}))
                .collect();
            let p = call(
                "patchdiff_preview",
                json!({"target_file_id": t, "format": "patchdiff-tx/2", "expected_target_version": 0, "intent": "x", "operations": ops}),
            );
            assert_eq!(
                (&p["total_change_count"], &p["returned_fact_count"]),
                (&json!(n), &json!(n.min(32))),
                "{p}"
            );
            assert_eq!(p["change_facts"].as_array().unwrap().len(), n.min(32));
            assert_eq!(p["change_facts_truncated"], truncated);
            let reason = if truncated {
                json!("fact_count_limit")
            } else {
                Value::Null
            };
            assert_eq!(p["change_facts_omission_reason"], reason);
            assert!(p.to_string().len() <= 32_768);
        }
        assert_eq!(counts(&t), (0, 0, 0));
    }

    /// Host guide "Discovery example sequence", with the front end's advertised examples bound
    /// to a real target: initialize, read, find, typed edits with a recovery and a linked retry,
    /// a span, a sole replacement, a line read and a preview that does not commit. Four accepted
    /// facts and five attempts; the original rejection stays as it was.
    #[pg_test]
    fn discovery_example_sequence() {
        let t = init("alpha alpha\n🌟 中\n");
        let read = call(
            "patchdiff_read_target",
            json!({"target_file_id": t, "start": 0, "length": 200}),
        );
        assert_eq!(read["total_chars"], 16);
        let found = call(
            "patchdiff_find_occurrences",
            json!({"target_file_id": t, "text": "alpha", "context_chars": 20}),
        );
        assert_eq!(found["occurrence_count"], 2);
        let ex0 = json!({"target_file_id": t, "expected_target_version": 0, "intent": "Rename the second alpha",
                         "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-001"});
        assert_eq!(
            call("patchdiff_submit_edits", ex0.clone())["status"],
            "accepted"
        );
        assert_eq!(call("patchdiff_submit_edits", ex0)["deduplicated"], true);
        let ex1 = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": "Rename delta",
                                                        "edits": [{"match": "delta", "replace": "epsilon"}], "client_request_id": "req-002"}),
        );
        assert_eq!(ex1["failure_reason"], "match_absent");
        let ex2 = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": "Rename gamma",
                                                        "edits": [{"match": "gamma", "replace": "delta"}], "parent_pdcp_log_id": ex1["pdcp_log_id"],
                                                        "attempt": 2, "client_request_id": "req-003"}),
        );
        assert_eq!(ex2["status"], "accepted", "{ex2}");
        let span = call(
            "patchdiff_submit_operations",
            json!({"target_file_id": t, "expected_target_version": 2, "intent": "Add a heading marker",
                                                             "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "# ", "expected_after": "alpha"}]}),
        );
        assert_eq!(span["status"], "accepted", "{span}");
        assert_eq!(text_of(&t), "# alpha delta\n🌟 中\n");
        let replaced = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 3, "intent": "Replace the document", "replacement": "Final text\n"}),
        );
        assert_eq!(replaced["status"], "accepted", "{replaced}");
        let line = call(
            "patchdiff_read_lines",
            json!({"target_file_id": t, "start_line": 1, "end_line": 1}),
        );
        assert_eq!(
            (&line["text"], &line["version"]),
            (&json!("Final text\n"), &json!(4))
        );
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/3", "expected_target_version": 4,
                                                 "intent": "Propose a reviewed text", "replacement": "Reviewed text\n"}),
        );
        assert_eq!(p["status"], "accepted");
        assert_eq!(text_of(&t), "Final text\n");
        assert_eq!(counts(&t), (5, 4, 4));
        let original: String = scalar(
            "SELECT diagnostic::text FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND client_request_id = 'req-002'",
            &t,
        );
        assert_eq!(
            serde_json::from_str::<Value>(&original).unwrap(),
            ex1["diagnostic"]
        );
        let linked: i64 = scalar(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND parent_pdcp_log_id IS NOT NULL AND attempt = 2",
            &t,
        );
        assert_eq!(linked, 1);
    }
}
