//! Issue 17, section 1 (contract fidelity), over SQL: `source`, strict observation mode's
//! place in the contract's order, target identity on submissions and preview, and the full
//! `current_context` of the service result. Each test names the clause it proves.

use crate::tests::{call, init, scalar};
use pgrx::prelude::*;
use serde_json::{Value, json};

fn all_log_rows() -> i64 {
    Spi::get_one("SELECT count(*) FROM patchdiff.pdcp_logs")
        .unwrap()
        .unwrap()
}

fn call_text(function: &str, args: &str) -> Value {
    let q = format!("SELECT {function}($1::json)::text");
    let text: String = Spi::get_one_with_args(&q, &[args.into()]).unwrap().unwrap();
    serde_json::from_str(&text).unwrap()
}

#[pg_schema]
mod tests {
    use super::*;

    /// Contract "patchdiff_submit_edits": `source (string, default "model_response")`. Any string
    /// of at most 256 code points is stored exactly as sent and read back through
    /// patchdiff_get_pdcp_log; the typed patchdiff_submit binds it as a value too.
    #[pg_test]
    fn source_is_stored_as_sent() {
        let t = init("a\n");
        let sources = [
            "Claude Code",
            "user edit",
            "\u{7de8}\u{96c6}\u{8005} \u{1f916} \u{00e9}t\u{00e9}",
        ];
        for (v, s) in sources.iter().enumerate() {
            let r = call(
                "patchdiff_submit_edits",
                json!({"target_file_id": t, "expected_target_version": v, "intent": "i",
                       "edits": [{"match": if v % 2 == 0 { "a" } else { "b" }, "replace": if v % 2 == 0 { "b" } else { "a" }}],
                       "source": s}),
            );
            assert_eq!(r["status"], "accepted", "{r}");
        }
        let page = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "limit": 3}),
        );
        let logged: Vec<&str> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .map(|e| e["source"].as_str().unwrap())
            .collect();
        assert_eq!(logged, sources);
        let stored: String = scalar(
            "SELECT string_agg(source, '|' ORDER BY log_sequence) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(stored, sources.join("|"));
        let typed: String = Spi::get_one_with_args(
            "SELECT patchdiff_submit($1::uuid, 'i', '[{\"match\": \"b\", \"replace\": \"c\"}]'::json, expected_target_version => 3, source => $2)::text",
            &[t.as_str().into(), "user edit \u{2014} v2".into()],
        )
        .unwrap()
        .unwrap();
        assert!(typed.contains("\"accepted\""), "{typed}");
        let last: String = scalar(
            "SELECT source FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid ORDER BY log_sequence DESC LIMIT 1",
            &t,
        );
        assert_eq!(last, "user edit \u{2014} v2");
    }

    /// The same clause's documented bound (docs/sql-api.md): over 256 code points is
    /// invalid_argument / source_too_large, with nothing written, on every submission tool.
    #[pg_test]
    fn over_long_source_writes_nothing() {
        let t = init("a\n");
        let long = "\u{00e9}".repeat(257);
        let before = all_log_rows();
        for (f, extra) in [
            (
                "patchdiff_submit_edits",
                json!({"edits": [{"match": "a", "replace": "b"}]}),
            ),
            (
                "patchdiff_submit_operations",
                json!({"operations": [{"op": "match", "match": "a", "replace": "b"}]}),
            ),
            ("patchdiff_submit_replacement", json!({"replacement": "b"})),
            (
                "patchdiff_submit_observed_operations",
                json!({"observation_id": "aaaaaaaa-aaaa-4aaa-8aaa-000000000001", "operations": [], "expected_current_hash": "0".repeat(64)}),
            ),
        ] {
            let mut a = json!({"target_file_id": t, "intent": "i", "expected_target_version": 0, "source": long});
            for (k, v) in extra.as_object().unwrap() {
                a[k] = v.clone();
            }
            let r = call(f, a);
            assert_eq!(
                (&r["status"], &r["code"], &r["limit"], &r["actual"]),
                (
                    &json!("invalid_argument"),
                    &json!("source_too_large"),
                    &json!(256),
                    &json!(257)
                ),
                "{f}: {r}"
            );
        }
        assert_eq!(all_log_rows(), before);
    }

    /// Contract "Common input and request-key rules" / "patchdiff_submit_replacement"
    /// ordering under strict observation mode: invalid text is classified first (the audited
    /// target_encoding_invalid, not OBSERVATION_REQUIRED); fresh admission runs before any row
    /// (replacement_too_large, nothing written).
    #[pg_test]
    fn strict_mode_keeps_the_contracts_order() {
        let t = init("a\n");
        Spi::run("SET LOCAL patchdiff.strict_observation_mode = on").unwrap();
        let before = all_log_rows();
        let r = call_text(
            "patchdiff_submit_edits",
            &format!(
                r#"{{"target_file_id":"{t}","expected_target_version":0,"intent":"i","edits":[{{"match":"a\u0000","replace":"b"}}]}}"#
            ),
        );
        assert_eq!(r["failure_reason"], "target_encoding_invalid", "{r}");
        assert_eq!(r.get("code"), None, "{r}");
        assert_eq!(all_log_rows(), before + 1);
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "i", "replacement": "y".repeat(1_000_001)}),
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
        assert_eq!(all_log_rows(), before + 1);
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "i", "replacement": "y"}),
        );
        assert_eq!(r["code"], "OBSERVATION_REQUIRED", "{r}");
        assert_eq!(all_log_rows(), before + 2);
    }

    /// Contract "Bounded rejection context" (`unavailable_reason: "invalid_target_id" |
    /// "target_not_found"`) and "Retryable rejections" (false for target-identity failures):
    /// the five submission tools and preview answer a malformed or unknown target with that
    /// rejection, `pdcp_log_id: null`, and write nothing (docs/sql-api.md says why).
    #[pg_test]
    fn target_identity_failures_are_unstored_rejections() {
        let unknown = "11111111-1111-4111-8111-111111111111";
        let hash = "0".repeat(64);
        let tools = [
            (
                "patchdiff_submit_edits",
                "patchdiff-tx/1",
                json!({"edits": [{"match": "a", "replace": "b"}]}),
            ),
            (
                "patchdiff_submit_operations",
                "patchdiff-tx/2",
                json!({"operations": [{"op": "match", "match": "a", "replace": "b"}]}),
            ),
            (
                "patchdiff_submit_replacement",
                "patchdiff-tx/3",
                json!({"replacement": "b"}),
            ),
            (
                "patchdiff_submit_observed_operations",
                "patchdiff-observed-batch/1",
                json!({"observation_bundle_id": unknown, "groups": [], "client_request_id": "k-1", "expected_current_hash": hash}),
            ),
            (
                "patchdiff_preview",
                "patchdiff-tx/1",
                json!({"format": "patchdiff-tx/1", "edits": [{"match": "a", "replace": "b"}]}),
            ),
        ];
        let before = all_log_rows();
        for (id, code) in [
            (json!("not-a-uuid"), "invalid_target_id"),
            (json!(7), "invalid_target_id"),
            (json!(unknown), "target_not_found"),
        ] {
            for (f, format, extra) in &tools {
                let mut a =
                    json!({"target_file_id": id, "intent": "i", "expected_target_version": 0});
                for (k, v) in extra.as_object().unwrap() {
                    a[k] = v.clone();
                }
                let r = call(f, a);
                assert_eq!(
                    (&r["status"], &r["code"]),
                    (&json!("rejected"), &json!(code)),
                    "{f} {id}: {r}"
                );
                assert_eq!(r["failure_reason"], "context_invalid", "{f}: {r}");
                let d = &r["diagnostic"];
                assert_eq!(
                    (&d["code"], &d["retryable"], &d["format"]),
                    (&json!(code), &json!(false), &json!(format)),
                    "{f}: {r}"
                );
                assert_eq!(d["failure_context"]["unavailable_reason"], code);
                assert_eq!(r["current_context"]["unavailable_reason"], code);
                assert_eq!(r["current_context"]["available"], false);
                assert_eq!(
                    r["target_file_id"],
                    if id.is_string() {
                        id.clone()
                    } else {
                        Value::Null
                    }
                );
                if *f == "patchdiff_preview" {
                    assert_eq!(
                        (&r["preview"], &r["stage"]),
                        (&json!(true), &d["validation_stage"])
                    );
                } else {
                    assert_eq!(r["pdcp_log_id"], Value::Null);
                }
            }
        }
        // The typed entry point takes a uuid: only an unknown one reaches it.
        let typed: String = Spi::get_one_with_args(
            "SELECT patchdiff_submit($1::uuid, 'i', '[{\"match\": \"a\", \"replace\": \"b\"}]'::json, expected_target_version => 0)::text",
            &[unknown.into()],
        )
        .unwrap()
        .unwrap();
        let typed: Value = serde_json::from_str(&typed).unwrap();
        assert_eq!(
            (&typed["status"], &typed["code"]),
            (&json!("rejected"), &json!("target_not_found")),
            "{typed}"
        );
        assert_eq!(all_log_rows(), before);
    }

    /// Contract "Bounded rejection context": "The Python service result keeps the full
    /// object". SQL answers are that result: a rejection (and a keyed recovery of it, and a
    /// rejected preview) carries the full current_context, even when it repeats
    /// diagnostic.failure_context key for key.
    #[pg_test]
    fn sql_keeps_the_full_current_context() {
        let t = init("alpha beta alpha\n");
        let args = json!({"target_file_id": t, "expected_target_version": 0, "intent": "i",
                          "edits": [{"match": "alpha", "replace": "gamma"}], "client_request_id": "cc-1"});
        for r in [
            call("patchdiff_submit_edits", args.clone()),
            call("patchdiff_submit_edits", args),
        ] {
            assert_eq!(r["status"], "rejected");
            assert_eq!(
                r["current_context"], r["diagnostic"]["failure_context"],
                "{r}"
            );
            assert_eq!(r["current_context"]["text"], "alpha beta alpha\n");
        }
        let p = call(
            "patchdiff_preview",
            json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0, "intent": "i",
                   "edits": [{"match": "alpha", "replace": "gamma"}]}),
        );
        assert_eq!(
            p["current_context"], p["diagnostic"]["failure_context"],
            "{p}"
        );
        assert_eq!(p["current_context"]["available"], true);
    }
}
