//! SQL tests of checkpoints, replay, history pages and export, run inside PostgreSQL by
//! `cargo pgrx test`. Each calls the SQL functions through SPI, as a DBA would, and names the
//! contract clause it proves.

use crate::tests::call;
use pgrx::prelude::*;
use serde_json::{Value, json};

fn init_raw(content: &str) -> Value {
    let r = call(
        "patchdiff_initialize_target",
        json!({"filename": "doc.md", "content": content, "content_type": "text/markdown"}),
    );
    assert_eq!(r["status"], "ok", "{r}");
    r
}

fn init(content: &str) -> String {
    init_raw(content)["target_file_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn edit(target: &str, version: i64, intent: &str, edits: Value) -> Value {
    call(
        "patchdiff_submit_edits",
        json!({"target_file_id": target, "expected_target_version": version, "intent": intent, "edits": edits}),
    )
}

fn target(id: &str) -> Value {
    call("patchdiff_get_target", json!({"target_file_id": id}))
}

fn count(q: &str, id: &str) -> i64 {
    Spi::get_one_with_args::<i64>(q, &[id.into()])
        .unwrap()
        .unwrap()
}

fn snapshots(id: &str) -> i64 {
    count(
        "SELECT count(*) FROM patchdiff.snapshots WHERE target_file_id = $1::uuid",
        id,
    )
}

fn seqs(page: &Value, key: &str) -> Vec<i64> {
    page["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {page}"))
        .iter()
        .map(|e| e[key].as_i64().unwrap())
        .collect()
}

/// `SELECT <sequence> ... ORDER BY 1 DESC` as a vector: the independent expectation.
fn sql_seqs(q: &str, id: &str) -> Vec<i64> {
    Spi::connect(|c| {
        c.select(q, None, &[id.into()])
            .unwrap()
            .map(|r| r.get::<i64>(1).unwrap().unwrap())
            .collect()
    })
}

const RFC3339_MICROS: &str = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$";

fn is_rfc3339(s: &Value) -> bool {
    Spi::get_one_with_args::<bool>(
        "SELECT $1 ~ $2",
        &[s.as_str().unwrap_or("").into(), RFC3339_MICROS.into()],
    )
    .unwrap()
    .unwrap()
}

#[pg_schema]
mod tests {
    use super::*;

    // -----------------------------------------------------------------------------------
    // patchdiff_export_target

    /// Contract "Line endings and export formats": an unedited CRLF upload exported with
    /// original_eol has content_sha256 == source_line_endings.source_sha256; the default
    /// original_text and canonical_lf are canonical LF; crlf writes every LF as CRLF; hash and
    /// current_hash stay canonical; the response has the contract's keys in order.
    #[pg_test]
    fn export_formats_and_original_eol_round_trip() {
        let raw = "alpha beta alpha\r\nsecond line\r\n";
        let up = init_raw(raw);
        let t = up["target_file_id"].as_str().unwrap();
        let e = call(
            "patchdiff_export_target",
            json!({"target_file_id": t, "format": "original_eol"}),
        );
        assert_eq!(e["status"], "ok", "{e}");
        assert_eq!(e["content"], raw);
        assert_eq!(e["content_eol"], "crlf");
        assert_eq!(
            e["content_sha256"],
            up["source_line_endings"]["source_sha256"]
        );
        assert_eq!(e["source_line_endings"], up["source_line_endings"]);
        assert_eq!(
            (&e["hash"], &e["current_hash"]),
            (&up["current_hash"], &up["current_hash"])
        );
        let keys: Vec<&String> = e.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "filename",
                "content_type",
                "target_type",
                "content",
                "version",
                "hash",
                "current_hash",
                "format",
                "content_eol",
                "content_sha256",
                "source_line_endings"
            ]
        );
        assert_eq!(
            (&e["filename"], &e["content_type"], &e["target_type"]),
            (
                &json!("doc.md"),
                &json!("text/markdown"),
                &json!("text/markdown")
            )
        );
        let d = call("patchdiff_export_target", json!({"target_file_id": t}));
        assert_eq!(d["format"], "original_text");
        assert_eq!(d["content"], "alpha beta alpha\nsecond line\n");
        assert_eq!(d["content_eol"], "lf");
        assert_eq!(d["content_sha256"], up["current_hash"]);
        let lf = call(
            "patchdiff_export_target",
            json!({"target_file_id": t, "format": "canonical_lf"}),
        );
        assert_eq!(lf["content"], d["content"]);
        // Lines added by edits take the recorded style too.
        let r = edit(
            t,
            0,
            "add",
            json!([{"match": "second line\n", "replace": "second line\nthird\n"}]),
        );
        assert_eq!(r["status"], "accepted");
        let e = call(
            "patchdiff_export_target",
            json!({"target_file_id": t, "format": "original_eol"}),
        );
        assert_eq!(e["content"], "alpha beta alpha\r\nsecond line\r\nthird\r\n");
        assert_eq!(e["version"], 1);
        let c = call(
            "patchdiff_export_target",
            json!({"target_file_id": t, "format": "crlf"}),
        );
        assert_eq!(c["content"], e["content"]);
    }

    /// original_eol_unrecoverable for a mixed upload, source_line_endings_unknown for a target
    /// without recorded facts, unsupported_export_format with allowed_formats, not_found.
    #[pg_test]
    fn export_refusals() {
        let mixed = init("a\nb\r\n");
        let r = call(
            "patchdiff_export_target",
            json!({"target_file_id": mixed, "format": "original_eol"}),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (
                &json!("invalid_argument"),
                &json!("original_eol_unrecoverable")
            )
        );
        let ok = call(
            "patchdiff_export_target",
            json!({"target_file_id": mixed, "format": "crlf"}),
        );
        assert_eq!(ok["content"], "a\r\nb\r\n");
        // A target created before line endings were recorded.
        let old = init("x\n");
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET source_line_endings = NULL WHERE target_file_id = $1::uuid",
            &[old.as_str().into()],
        )
        .unwrap();
        let r = call(
            "patchdiff_export_target",
            json!({"target_file_id": old, "format": "original_eol"}),
        );
        assert_eq!(r["code"], "source_line_endings_unknown");
        assert_eq!(
            call("patchdiff_export_target", json!({"target_file_id": old}))["source_line_endings"],
            Value::Null
        );
        let r = call(
            "patchdiff_export_target",
            json!({"target_file_id": old, "format": "lf"}),
        );
        assert_eq!(r["code"], "unsupported_export_format");
        assert_eq!(
            r["allowed_formats"],
            json!(["original_text", "canonical_lf", "crlf", "original_eol"])
        );
        let r = call(
            "patchdiff_export_target",
            json!({"target_file_id": "00000000-0000-4000-8000-000000000000"}),
        );
        assert_eq!(r["status"], "not_found");
    }

    // -----------------------------------------------------------------------------------
    // patchdiff_save

    /// Contract "patchdiff_save": a save_checkpoint snapshot; the active cycle is closed
    /// (closed_version, closed_at) and a new one opened and made active; content, version and
    /// hash unchanged; both guards checked; export_after_save adds the default export.
    #[pg_test]
    fn save_checkpoints_and_rotates_the_cycle() {
        let t = init("alpha beta alpha\n");
        assert_eq!(
            edit(
                &t,
                0,
                "Rename alpha",
                json!([{"match": "beta", "replace": "gamma"}])
            )["status"],
            "accepted"
        );
        let before = target(&t);
        let r = call(
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": 1, "expected_current_hash": before["current_hash"]}),
        );
        assert_eq!(r["status"], "saved", "{r}");
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "snapshot_id",
                "closed_editing_cycle_id",
                "new_editing_cycle_id",
                "current_hash",
                "version"
            ]
        );
        assert_eq!(
            r["closed_editing_cycle_id"],
            before["active_editing_cycle_id"]
        );
        assert_ne!(r["new_editing_cycle_id"], r["closed_editing_cycle_id"]);
        assert_eq!(
            (&r["current_hash"], &r["version"]),
            (&before["current_hash"], &json!(1))
        );
        let after = target(&t);
        assert_eq!(after["active_editing_cycle_id"], r["new_editing_cycle_id"]);
        for k in [
            "current_content",
            "current_hash",
            "version",
            "source_line_endings",
        ] {
            assert_eq!(after[k], before[k], "{k}");
        }
        let snap: i64 = Spi::get_one_with_args(
            "SELECT count(*) FROM patchdiff.snapshots s JOIN patchdiff.targets t USING (target_file_id) \
             WHERE s.snapshot_id = $1::uuid AND s.snapshot_reason = 'save_checkpoint' AND s.version = 1 \
               AND s.content_hash = t.current_hash AND s.content = t.current_content AND s.editing_cycle_id = $2::uuid",
            &[r["snapshot_id"].as_str().unwrap().into(), r["closed_editing_cycle_id"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(snap, 1);
        let closed: i64 = Spi::get_one_with_args(
            "SELECT count(*) FROM patchdiff.editing_cycles WHERE editing_cycle_id = $1::uuid \
             AND closed_version = 1 AND closed_at IS NOT NULL",
            &[r["closed_editing_cycle_id"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(closed, 1);
        let opened: i64 = Spi::get_one_with_args(
            "SELECT count(*) FROM patchdiff.editing_cycles WHERE editing_cycle_id = $1::uuid \
             AND opened_version = 1 AND closed_at IS NULL AND target_file_id = $2::uuid",
            &[
                r["new_editing_cycle_id"].as_str().unwrap().into(),
                t.as_str().into(),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(opened, 1);
        // Later attempts belong to the new cycle.
        let a = edit(
            &t,
            1,
            "again",
            json!([{"match": "gamma", "replace": "delta"}]),
        );
        let cycle: String = Spi::get_one_with_args(
            "SELECT editing_cycle_id::text FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
            &[a["pdcp_log_id"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(json!(cycle), r["new_editing_cycle_id"]);
        // A save without guards, with export_after_save: the default-format export is added.
        let s = call(
            "patchdiff_save",
            json!({"target_file_id": t, "export_after_save": true, "sync_workspace": false, "workspace_eol_format": null}),
        );
        assert_eq!(s["status"], "saved");
        let e = call("patchdiff_export_target", json!({"target_file_id": t}));
        assert_eq!(s["export"], e);
        assert_eq!(s["export"]["format"], "original_text");
        assert_eq!(snapshots(&t), 3);
    }

    /// Contract "patchdiff_save": a stale version is target_version_mismatch, a stale hash
    /// target_hash_mismatch, an invalid version context_invalid; none writes a snapshot or
    /// rotates the cycle. Workspace publication is refused over SQL; unknown targets not_found.
    #[pg_test]
    fn save_guards_reject_without_writing() {
        let t = init("one two\n");
        assert_eq!(
            edit(&t, 0, "x", json!([{"match": "one", "replace": "1"}]))["status"],
            "accepted"
        );
        let before = target(&t);
        let hash = before["current_hash"].clone();
        let stale_hash = "0".repeat(64);
        let cases = [
            (
                json!({"expected_target_version": 0}),
                "target_version_mismatch",
            ),
            (
                json!({"expected_target_version": 0, "expected_current_hash": hash}),
                "target_version_mismatch",
            ),
            (
                json!({"expected_current_hash": stale_hash}),
                "target_hash_mismatch",
            ),
            (
                json!({"expected_target_version": 1, "expected_current_hash": stale_hash}),
                "target_hash_mismatch",
            ),
            (json!({"expected_target_version": -1}), "context_invalid"),
            (json!({"expected_target_version": true}), "context_invalid"),
            (json!({"expected_target_version": 1.0}), "context_invalid"),
            (json!({"expected_target_version": "1"}), "context_invalid"),
            (json!({"expected_current_hash": "ABC"}), "context_invalid"),
        ];
        for (mut args, reason) in cases {
            args["target_file_id"] = json!(t);
            let r = call("patchdiff_save", args.clone());
            assert_eq!(
                (&r["status"], &r["failure_reason"]),
                (&json!("rejected"), &json!(reason)),
                "{args}"
            );
            assert_eq!(
                (&r["current_version"], &r["current_hash"]),
                (&json!(1), &hash)
            );
        }
        let r = call(
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": -1}),
        );
        assert_eq!(r["code"], "invalid_expected_target_version");
        assert_eq!(snapshots(&t), 1);
        assert_eq!(
            target(&t)["active_editing_cycle_id"],
            before["active_editing_cycle_id"]
        );
        let cycles = count(
            "SELECT count(*) FROM patchdiff.editing_cycles WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(cycles, 1);
        for (args, code) in [
            (
                json!({"target_file_id": t, "sync_workspace": true}),
                "workspace_requires_owned_transaction",
            ),
            (
                json!({"target_file_id": t, "workspace_eol_format": "crlf"}),
                "workspace_not_configured",
            ),
            (
                json!({"target_file_id": t, "export_after_save": "yes"}),
                "invalid_export_after_save",
            ),
            (json!({"target_file_id": t, "bogus": 1}), "unknown_argument"),
            (json!({"target_file_id": "nope"}), "invalid_target_file_id"),
        ] {
            let r = call("patchdiff_save", args);
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!("invalid_argument"), &json!(code))
            );
        }
        assert_eq!(snapshots(&t), 1);
        let r = call(
            "patchdiff_save",
            json!({"target_file_id": "00000000-0000-4000-8000-000000000000", "expected_target_version": 0}),
        );
        assert_eq!(r["status"], "not_found");
    }

    // -----------------------------------------------------------------------------------
    // patchdiff_replay

    /// Contract "patchdiff_replay": the success response over a history with rejected attempts,
    /// a SAVE and a CRLF payload; rejected attempts are not replayed.
    #[pg_test]
    fn replay_reconstructs_accepted_history() {
        let t = init("alpha beta alpha\r\n");
        assert_eq!(
            edit(
                &t,
                0,
                "a",
                json!([{"match": "alpha", "replace": "gamma", "occurrence_index": 2}])
            )["status"],
            "accepted"
        );
        assert_eq!(
            edit(&t, 1, "b", json!([{"match": "nope", "replace": "x"}]))["status"],
            "rejected"
        );
        assert_eq!(
            edit(&t, 0, "stale", json!([{"match": "beta", "replace": "x"}]))["status"],
            "rejected"
        );
        assert_eq!(
            call("patchdiff_save", json!({"target_file_id": t}))["status"],
            "saved"
        );
        assert_eq!(
            edit(
                &t,
                1,
                "c",
                json!([{"match": "beta", "replace": "b1\r\nb2"}, {"match": "gamma", "replace": ""}])
            )["status"],
            "accepted"
        );
        let now = target(&t);
        assert_eq!(now["current_content"], "alpha b1\nb2 \n");
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(
            r,
            json!({
                "status": "success",
                "target_file_id": t,
                "reconstructed_hash": now["current_hash"],
                "current_hash": now["current_hash"],
                "reconstructed_version": 2,
                "current_version": 2,
                "accepted_transactions_replayed": 2,
                "materialized_state_matches": true,
                "materialized_state_checks": {
                    "content_matches": true,
                    "stored_hash_matches": true,
                    "recomputed_hash_matches": true,
                    "version_matches": true
                }
            })
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "reconstructed_hash",
                "current_hash",
                "reconstructed_version",
                "current_version",
                "accepted_transactions_replayed",
                "materialized_state_matches",
                "materialized_state_checks"
            ]
        );
        // A target with no accepted history reconstructs its initial snapshot.
        let fresh = init("only\n");
        let r = call("patchdiff_replay", json!({"target_file_id": fresh}));
        assert_eq!(
            (
                &r["accepted_transactions_replayed"],
                &r["materialized_state_matches"]
            ),
            (&json!(0), &json!(true))
        );
        let r = call(
            "patchdiff_replay",
            json!({"target_file_id": "00000000-0000-4000-8000-000000000000"}),
        );
        assert_eq!(r["status"], "not_found");
        let r = call("patchdiff_replay", json!({"target_file_id": t, "x": 1}));
        assert_eq!(r["code"], "unknown_argument");
    }

    /// Issue "Checkpoints, replay and history": replay dispatches every accepted format on its
    /// recorded pair: tx/1 (0.2.2), tx/2 without (0.3.0) and with span context (0.5.0), and
    /// tx/3 (0.4.0). History pages show each attempt's intent and the replacement's ledger row
    /// takes its transaction intent with a null rationale.
    #[pg_test]
    fn replay_dispatches_every_accepted_format() {
        let t = init("alpha beta\n");
        assert_eq!(
            edit(&t, 0, "tx1", json!([{"match": "beta", "replace": "gamma"}]))["status"],
            "accepted"
        );
        let ops = |v: i64, intent: &str, op: Value| {
            call(
                "patchdiff_submit_operations",
                json!({"target_file_id": t, "expected_target_version": v, "intent": intent, "operations": [op]}),
            )
        };
        let r = ops(
            1,
            "tx2 span",
            json!({"op": "span", "start": 0, "end": 5, "expected_text": "alpha", "replace": "ALPHA"}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        let r = ops(
            2,
            "tx2 context",
            json!({"op": "span", "start": 5, "end": 5, "expected_text": "", "replace": ",", "expected_before": "ALPHA"}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        let r = call(
            "patchdiff_submit_replacement",
            json!({"target_file_id": t, "expected_target_version": 3, "intent": "tx3", "replacement": "Final text\r\n"}),
        );
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(
            ops(
                4,
                "after",
                json!({"op": "match", "match": "Final", "replace": "Last"})
            )["status"],
            "accepted"
        );
        let runtimes = sql_seqs(
            "SELECT count(DISTINCT runtime_version) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
            &t,
        );
        assert_eq!(runtimes, [4]);
        let now = target(&t);
        assert_eq!(now["current_content"], "Last text\n");
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["accepted_transactions_replayed"], 5);
        assert_eq!(r["reconstructed_hash"], now["current_hash"]);
        assert_eq!(r["materialized_state_matches"], true);
        let p = call("patchdiff_get_pdcp_log", json!({"target_file_id": t}));
        let intents: Vec<&Value> = p["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| &e["intent"])
            .collect();
        assert_eq!(
            intents,
            [
                &json!("after"),
                &json!("tx3"),
                &json!("tx2 context"),
                &json!("tx2 span"),
                &json!("tx1")
            ]
        );
        let l = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t}),
        );
        let e = &l["entries"].as_array().unwrap()[3];
        assert_eq!(
            (&e["transaction_intent"], &e["intent"], &e["rationale"]),
            (&json!("tx3"), &json!("tx3"), &Value::Null)
        );
        assert_eq!(e["derived"]["operation"], "replace_all");
    }

    /// Issue "Checkpoints, replay and history": storage corruption injected by a superuser is
    /// reported by the matching check and left unrepaired. CRLF in stored content shows only in
    /// content_matches (the canonical hashes agree); a wrong stored hash only in
    /// stored_hash_matches; a wrong version only in version_matches.
    #[pg_test]
    fn replay_reports_storage_corruption_and_repairs_nothing() {
        let t = init("one\ntwo\n");
        assert_eq!(
            edit(&t, 0, "x", json!([{"match": "two", "replace": "2"}]))["status"],
            "accepted"
        );
        let good = target(&t);
        let checks = |r: &Value| r["materialized_state_checks"].clone();
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET current_content = replace(current_content, E'\\n', E'\\r\\n') WHERE target_file_id = $1::uuid",
            &[t.as_str().into()],
        )
        .unwrap();
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(r["status"], "success");
        assert_eq!(r["materialized_state_matches"], false);
        assert_eq!(
            checks(&r),
            json!({"content_matches": false, "stored_hash_matches": true, "recomputed_hash_matches": true, "version_matches": true})
        );
        assert_eq!(
            target(&t)["current_content"],
            "one\r\n2\r\n",
            "replay must not repair"
        );
        // Bare CR as well.
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET current_content = replace(current_content, E'\\r\\n', E'\\r') WHERE target_file_id = $1::uuid",
            &[t.as_str().into()],
        )
        .unwrap();
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(checks(&r)["content_matches"], false);
        assert_eq!(checks(&r)["recomputed_hash_matches"], true);
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET current_content = $2, current_hash = $3 WHERE target_file_id = $1::uuid",
            &[t.as_str().into(), "one\n2\n".into(), "f".repeat(64).as_str().into()],
        )
        .unwrap();
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(
            checks(&r),
            json!({"content_matches": true, "stored_hash_matches": false, "recomputed_hash_matches": true, "version_matches": true})
        );
        assert_eq!(r["current_hash"], "f".repeat(64));
        assert_eq!(r["reconstructed_hash"], good["current_hash"]);
        assert_eq!(
            target(&t)["current_hash"],
            "f".repeat(64),
            "replay must not repair"
        );
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET current_hash = $2, version = 5 WHERE target_file_id = $1::uuid",
            &[t.as_str().into(), good["current_hash"].as_str().unwrap().into()],
        )
        .unwrap();
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(
            checks(&r),
            json!({"content_matches": true, "stored_hash_matches": true, "recomputed_hash_matches": true, "version_matches": false})
        );
        assert_eq!(
            (&r["reconstructed_version"], &r["current_version"]),
            (&json!(1), &json!(5))
        );
        // Different text with a matching stored hash: content and recomputed hash disagree.
        Spi::run_with_args(
            "UPDATE patchdiff.targets SET current_content = 'tampered', version = 1 WHERE target_file_id = $1::uuid",
            &[t.as_str().into()],
        )
        .unwrap();
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(
            checks(&r),
            json!({"content_matches": false, "stored_hash_matches": true, "recomputed_hash_matches": false, "version_matches": true})
        );
    }

    /// Replay dispatches on the recorded (protocol_version, runtime_version) and refuses
    /// unsupported pairs with replay_protocol_invalid; a row whose recorded hashes the
    /// reconstruction does not reproduce stops it with replay_divergence.
    #[pg_test]
    fn replay_refuses_unsupported_pairs_and_divergent_rows() {
        let t = init("abc\n");
        let a = edit(&t, 0, "x", json!([{"match": "b", "replace": "B"}]));
        assert_eq!(a["status"], "accepted");
        // Copy the accepted row (superuser; the log is append-only, not insert-proof) as a
        // second accepted attempt under another pair.
        let forge = |protocol: &str, before_hash: &str, after_hash: &str| {
            Spi::run_with_args(
                "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
                   runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, before_version, \
                   before_hash, after_version, after_hash, validity, source) \
                 SELECT gen_random_uuid(), target_file_id, editing_cycle_id, 'accepted', $2, runtime_version, \
                   replace(pdcp_content, '\"match\":\"b\",\"replace\":\"B\"', '\"match\":\"B\",\"replace\":\"C\"'), pdcp_content_hash, request_fingerprint, request_envelope, 1, $3, 2, $4, validity, source \
                 FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
                &[a["pdcp_log_id"].as_str().unwrap().into(), protocol.into(), before_hash.into(), after_hash.into()],
            )
            .unwrap();
        };
        let h1 = a["after_hash"].as_str().unwrap().to_owned();
        let h2: String = Spi::get_one("SELECT encode(sha256('aCc\n'), 'hex')")
            .unwrap()
            .unwrap();
        let wrong = "e".repeat(64);
        forge("patchdiff-tx/9", &h1, &h2);
        let r = call("patchdiff_replay", json!({"target_file_id": t}));
        assert_eq!(
            (&r["status"], &r["failure_reason"]),
            (&json!("failed"), &json!("replay_protocol_invalid")),
            "{r}"
        );
        assert_eq!(r["accepted_transactions_replayed"], 1);
        assert_eq!(r["protocol_version"], "patchdiff-tx/9");
        let t2 = init("abc\n");
        let a2 = edit(&t2, 0, "x", json!([{"match": "b", "replace": "B"}]));
        let forge2 = |before_hash: &str, after_hash: &str| {
            Spi::run_with_args(
                "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
                   runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, before_version, \
                   before_hash, after_version, after_hash, validity, source) \
                 SELECT gen_random_uuid(), target_file_id, editing_cycle_id, 'accepted', protocol_version, runtime_version, \
                   replace(pdcp_content, '\"match\":\"b\",\"replace\":\"B\"', '\"match\":\"B\",\"replace\":\"C\"'), pdcp_content_hash, request_fingerprint, request_envelope, 1, $2, 2, $3, validity, source \
                 FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
                &[a2["pdcp_log_id"].as_str().unwrap().into(), before_hash.into(), after_hash.into()],
            )
            .unwrap();
        };
        forge2(&h1, &wrong);
        let r = call("patchdiff_replay", json!({"target_file_id": t2}));
        assert_eq!(r["failure_reason"], "replay_divergence", "{r}");
        assert_eq!(r["diagnostic"]["check"], "after_hash");
        assert_eq!(r["diagnostic"]["reconstructed"], h2);
        // Nothing was written by replay: the target is as the submissions left it.
        assert_eq!(target(&t2)["version"], 1);
    }

    // -----------------------------------------------------------------------------------
    // patchdiff_get_pdcp_log and patchdiff_get_manifest_ledger

    /// Contract "patchdiff_get_manifest_ledger", ordering and cursor example, on a target whose
    /// ten attempts and ten ledger rows interleave with another target's (sequences are global,
    /// so one target's have gaps): with limit 3 attempts are [10,9,8], the ledger [8,9,10],
    /// both next_sequence 8; the ledger page before 8 is [5,6,7]. Here n denotes the target's
    /// n-th sequence.
    #[pg_test]
    fn paging_example_attempts_10_9_8_ledger_8_9_10() {
        let t = init("x0\n");
        let other = init("y0\n");
        for i in 0..10 {
            let r = edit(
                &t,
                i,
                &format!("step {i}"),
                json!([{"match": format!("x{i}"), "replace": format!("x{}", i + 1)}]),
            );
            assert_eq!(r["status"], "accepted");
            let o = edit(
                &other,
                i,
                "other",
                json!([{"match": format!("y{i}"), "replace": format!("y{}", i + 1)}]),
            );
            assert_eq!(o["status"], "accepted");
        }
        let log: Vec<i64> = sql_seqs(
            "SELECT log_sequence FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid ORDER BY 1",
            &t,
        );
        let led: Vec<i64> = sql_seqs(
            "SELECT ledger_sequence FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid ORDER BY 1",
            &t,
        );
        assert_eq!((log.len(), led.len()), (10, 10));
        assert!(
            log.windows(2).all(|w| w[1] > w[0] + 1),
            "the target's sequences have gaps"
        );
        let n = |v: &[i64], i: usize| v[i - 1];
        let p = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "limit": 3}),
        );
        assert_eq!(
            seqs(&p, "log_sequence"),
            [n(&log, 10), n(&log, 9), n(&log, 8)]
        );
        assert_eq!(
            (&p["has_more"], &p["next_sequence"]),
            (&json!(true), &json!(n(&log, 8)))
        );
        let l = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t, "limit": 3}),
        );
        assert_eq!(
            seqs(&l, "ledger_sequence"),
            [n(&led, 8), n(&led, 9), n(&led, 10)]
        );
        assert_eq!(
            (&l["has_more"], &l["next_sequence"]),
            (&json!(true), &json!(n(&led, 8)))
        );
        let l2 = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t, "limit": 3, "before_sequence": l["next_sequence"]}),
        );
        assert_eq!(
            seqs(&l2, "ledger_sequence"),
            [n(&led, 5), n(&led, 6), n(&led, 7)]
        );
        assert_eq!(l2["next_sequence"], json!(n(&led, 5)));
        let p2 = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "limit": 3, "before_sequence": p["next_sequence"]}),
        );
        assert_eq!(
            seqs(&p2, "log_sequence"),
            [n(&log, 7), n(&log, 6), n(&log, 5)]
        );
        // Each ledger row joins its attempt by pdcp_log_id and log_sequence.
        for e in l["entries"].as_array().unwrap() {
            let joined = count(
                &format!(
                    "SELECT count(*) FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid AND log_sequence = {} AND status = 'accepted'",
                    e["log_sequence"]
                ),
                e["pdcp_log_id"].as_str().unwrap(),
            );
            assert_eq!(joined, 1);
        }
        // Rows inserted after a cursor was issued stay above it.
        edit(&t, 10, "later", json!([{"match": "x10", "replace": "x11"}]));
        let again = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "limit": 3, "before_sequence": p["next_sequence"]}),
        );
        assert_eq!(seqs(&again, "log_sequence"), seqs(&p2, "log_sequence"));
    }

    /// Paging to exhaustion with every filter and several limits: the union of the pages is
    /// exactly the independent SQL answer, newest first, without duplicates; the last page has
    /// has_more false and next_sequence null. Filters apply before the extra row is counted.
    #[pg_test]
    fn log_pages_to_exhaustion_with_every_filter() {
        let t = init("a0\n");
        let mut v = 0;
        let mut keyed = Vec::new();
        let repeated = json!([{"match": "zzz", "replace": "q"}]);
        for i in 0..9 {
            // An accepted edit, a rejected one (same record each time: repeated hash), and
            // every third time a keyed edit.
            let r = edit(
                &t,
                v,
                "acc",
                json!([{"match": format!("a{v}"), "replace": format!("a{}", v + 1)}]),
            );
            assert_eq!(r["status"], "accepted");
            v += 1;
            assert_eq!(edit(&t, v, "rej", repeated.clone())["status"], "rejected");
            if i % 3 == 0 {
                let key = format!("req-{i}");
                let r = call(
                    "patchdiff_submit_edits",
                    json!({"target_file_id": t, "expected_target_version": v, "intent": "k", "client_request_id": key,
                           "edits": [{"match": format!("a{v}"), "replace": format!("a{}", v + 1)}]}),
                );
                assert_eq!(r["status"], "accepted");
                v += 1;
                keyed.push(key);
            }
        }
        // Another target's attempts must never show.
        let other = init("zzz");
        edit(&other, 0, "rej", repeated.clone());
        let repeated_hash: String = Spi::get_one_with_args(
            "SELECT pdcp_content_hash FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND status = 'rejected' LIMIT 1",
            &[t.as_str().into()],
        )
        .unwrap()
        .unwrap();
        let q = |filter: &str| {
            format!(
                "SELECT log_sequence FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid {filter} ORDER BY 1 DESC"
            )
        };
        let cases: Vec<(Value, String)> = vec![
            (json!({}), q("")),
            (json!({"status": "accepted"}), q("AND status = 'accepted'")),
            (json!({"status": "rejected"}), q("AND status = 'rejected'")),
            (
                json!({"content_hash": repeated_hash}),
                q(&format!("AND pdcp_content_hash = '{repeated_hash}'")),
            ),
            (
                json!({"content_hash": repeated_hash, "status": "accepted"}),
                q("AND false"),
            ),
            (
                json!({"client_request_id": keyed[1]}),
                q(&format!("AND client_request_id = '{}'", keyed[1])),
            ),
            (
                json!({"client_request_id": keyed[1], "status": "rejected"}),
                q("AND false"),
            ),
            (json!({"client_request_id": "req-unknown"}), q("AND false")),
            (
                json!({"status": "rejected", "include_content": true}),
                q("AND status = 'rejected'"),
            ),
        ];
        for (filters, sql) in cases {
            let expected = sql_seqs(&sql, &t);
            for limit in [1, 2, 3, 7, 50] {
                let mut got: Vec<i64> = Vec::new();
                let mut cursor = Value::Null;
                let mut pages = 0;
                loop {
                    let mut args = filters.clone();
                    args["target_file_id"] = json!(t);
                    args["limit"] = json!(limit);
                    args["before_sequence"] = cursor.clone();
                    let p = call("patchdiff_get_pdcp_log", args);
                    let s = seqs(&p, "log_sequence");
                    assert!(s.len() <= limit);
                    assert!(s.windows(2).all(|w| w[0] > w[1]), "newest first");
                    pages += 1;
                    got.extend(&s);
                    if p["has_more"] == json!(false) {
                        assert_eq!(p["next_sequence"], Value::Null);
                        break;
                    }
                    assert_eq!(s.len(), limit, "a full page before another");
                    assert_eq!(p["next_sequence"], json!(s.last().unwrap()));
                    cursor = p["next_sequence"].clone();
                    assert!(pages < 100);
                }
                assert_eq!(got, expected, "{filters} limit {limit}");
            }
        }
        // A legacy key that new submissions could not use is still found exactly.
        Spi::run_with_args(
            "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
               runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, before_version, \
               before_hash, failure_reason, validity, source, client_request_id) \
             SELECT gen_random_uuid(), target_file_id, editing_cycle_id, status, protocol_version, runtime_version, \
               pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, before_version, before_hash, \
               failure_reason, validity, source, 'legacy key with spaces' \
             FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND status = 'rejected' LIMIT 1",
            &[t.as_str().into()],
        )
        .unwrap();
        let p = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "client_request_id": "legacy key with spaces"}),
        );
        assert_eq!(p["entries"].as_array().unwrap().len(), 1);
        assert_eq!(
            p["entries"][0]["client_request_id"],
            "legacy key with spaces"
        );
    }

    /// The ledger pages to exhaustion, with and without include_previous_cycles: after a SAVE
    /// the default call returns only the new, possibly empty, active cycle. Another target's
    /// edits take sequence numbers in between. The active cycle is read above its
    /// `ledger_floor` (issue 21, item 1), which a SAVE sets to the largest sequence the target
    /// had when the cycle opened.
    #[pg_test]
    fn ledger_pages_by_cycle_to_exhaustion() {
        let t = init("a0 b0\n");
        let other = init("o0\n");
        let mut v = 0;
        for round in 0..3 {
            for _ in 0..4 {
                let o = edit(
                    &other,
                    v,
                    "between",
                    json!([{"match": format!("o{v}"), "replace": format!("o{}", v + 1)}]),
                );
                assert_eq!(o["status"], "accepted");
                let r = edit(
                    &t,
                    v,
                    "two changes",
                    json!([{"match": format!("a{v}"), "replace": format!("a{}", v + 1), "rationale": "bump a"},
                           {"match": format!("b{v}"), "replace": format!("b{}", v + 1)}]),
                );
                assert_eq!(r["status"], "accepted");
                v += 1;
            }
            if round < 2 {
                assert_eq!(
                    call("patchdiff_save", json!({"target_file_id": t}))["status"],
                    "saved"
                );
            }
        }
        let cycle = target(&t)["active_editing_cycle_id"].clone();
        let all = sql_seqs(
            "SELECT ledger_sequence FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid ORDER BY 1",
            &t,
        );
        let active = sql_seqs(
            "SELECT ledger_sequence FROM patchdiff.manifest_ledger WHERE editing_cycle_id = $1::uuid ORDER BY 1",
            cycle.as_str().unwrap(),
        );
        assert_eq!((all.len(), active.len()), (24, 8));
        for (flag, expected) in [
            (json!(true), &all),
            (json!(false), &active),
            (Value::Null, &active),
        ] {
            for limit in [1, 3, 5, 200] {
                let mut pages: Vec<Vec<i64>> = Vec::new();
                let mut cursor = Value::Null;
                loop {
                    let p = call(
                        "patchdiff_get_manifest_ledger",
                        json!({"target_file_id": t, "include_previous_cycles": flag, "limit": limit, "before_sequence": cursor}),
                    );
                    let s = seqs(&p, "ledger_sequence");
                    assert!(
                        s.windows(2).all(|w| w[0] < w[1]),
                        "oldest first within the page"
                    );
                    pages.push(s.clone());
                    if p["has_more"] == json!(false) {
                        assert_eq!(p["next_sequence"], Value::Null);
                        break;
                    }
                    assert_eq!(p["next_sequence"], json!(s[0]));
                    cursor = p["next_sequence"].clone();
                }
                let got: Vec<i64> = pages.into_iter().rev().flatten().collect();
                assert_eq!(
                    &got, expected,
                    "include_previous_cycles {flag} limit {limit}"
                );
            }
        }
        // Right after a SAVE the active cycle is empty.
        assert_eq!(
            call("patchdiff_save", json!({"target_file_id": t}))["status"],
            "saved"
        );
        let p = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t}),
        );
        assert_eq!(
            p,
            json!({"entries": [], "has_more": false, "next_sequence": null})
        );
        // Every cycle's floor, the first's 0 included, is the largest sequence among the
        // target's rows at or below the version the cycle opened at (what the upgrade from
        // 0.1.0 gives a cycle: tests/tests/upgrade.rs).
        let floors = sql_seqs(
            "SELECT c.ledger_floor FROM patchdiff.editing_cycles c WHERE c.target_file_id = $1::uuid \
             AND c.ledger_floor = COALESCE((SELECT max(l.ledger_sequence) FROM patchdiff.manifest_ledger l \
               WHERE l.target_file_id = c.target_file_id AND l.after_version <= c.opened_version), 0) \
             ORDER BY c.opened_version",
            &t,
        );
        assert_eq!(floors, [0, all[7], all[15], all[23]]);
    }

    /// Contract "patchdiff_get_manifest_ledger": typed rows carry transaction_intent and the
    /// edit's rationale, intent keeps its stored meaning, the four prose fields are null,
    /// derived holds the runtime facts the submission returned, created_at is RFC 3339 UTC.
    #[pg_test]
    fn ledger_rows_are_typed_with_derived_facts() {
        let t = init("alpha beta alpha\n");
        let r = edit(
            &t,
            0,
            "Rename alpha",
            json!([{"match": "alpha", "replace": "gamma", "occurrence_index": 2},
                   {"match": "beta", "replace": "delta", "rationale": "b to d", "risk": "low"}]),
        );
        assert_eq!(r["status"], "accepted");
        let l = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t}),
        );
        let e = l["entries"].as_array().unwrap();
        assert_eq!(e.len(), 2);
        let keys: Vec<&String> = e[0].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "ledger_sequence",
                "pdcp_log_id",
                "log_sequence",
                "before_version",
                "after_version",
                "editing_cycle_id",
                "change_index",
                "change_id",
                "intent",
                "transaction_intent",
                "rationale",
                "input_state",
                "output_state",
                "affected_region",
                "user_visible_change",
                "risk",
                "origin",
                "derived",
                "created_at"
            ]
        );
        assert_eq!(
            (
                &e[0]["intent"],
                &e[0]["transaction_intent"],
                &e[0]["rationale"],
                &e[0]["risk"]
            ),
            (
                &json!("Rename alpha"),
                &json!("Rename alpha"),
                &Value::Null,
                &Value::Null
            )
        );
        assert_eq!(
            (
                &e[1]["intent"],
                &e[1]["transaction_intent"],
                &e[1]["rationale"],
                &e[1]["risk"]
            ),
            (
                &json!("b to d"),
                &json!("Rename alpha"),
                &json!("b to d"),
                &json!("low")
            )
        );
        for (i, x) in e.iter().enumerate() {
            for k in [
                "input_state",
                "output_state",
                "affected_region",
                "user_visible_change",
            ] {
                assert_eq!(x[k], Value::Null);
            }
            assert_eq!(x["origin"], "typed");
            assert_eq!(x["derived"], r["evidence"]["changes"][i]);
            assert_eq!(x["pdcp_log_id"], r["pdcp_log_id"]);
            assert_eq!(
                (&x["before_version"], &x["after_version"]),
                (&json!(0), &json!(1))
            );
            assert_eq!(x["change_index"], i + 1);
            assert!(is_rfc3339(&x["created_at"]), "{}", x["created_at"]);
        }
        assert_eq!(e[0]["derived"]["span_start"], 11);
        let p = call("patchdiff_get_pdcp_log", json!({"target_file_id": t}));
        assert_eq!(p["entries"][0]["log_sequence"], e[0]["log_sequence"]);
        assert!(is_rfc3339(&p["entries"][0]["created_at"]));
    }

    /// Contract "patchdiff_get_pdcp_log": entries carry the attempt's identity, hashes,
    /// versions, failure, lineage (parent_pdcp_log_id, regeneration_attempt and attempt), key,
    /// fingerprint, diagnostic and the transaction intent, at most 256 code points with
    /// intent_truncated, null when the record has none.
    #[pg_test]
    fn log_entries_carry_lineage_and_bounded_intent() {
        let t = init("one two\n");
        let long: String = "🌍".repeat(300);
        let rejected = edit(&t, 0, &long, json!([{"match": "zzz", "replace": "y"}]));
        assert_eq!(rejected["status"], "rejected");
        let retry = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 0, "intent": "é".repeat(256),
                   "parent_pdcp_log_id": rejected["pdcp_log_id"], "attempt": 2, "client_request_id": "req-7",
                   "edits": [{"match": "one", "replace": "1"}]}),
        );
        assert_eq!(retry["status"], "accepted");
        let no_intent = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": t, "expected_target_version": 1, "intent": 5, "edits": [{"match": "two", "replace": "2"}]}),
        );
        assert_eq!(no_intent["failure_reason"], "manifest_malformed");
        let p = call("patchdiff_get_pdcp_log", json!({"target_file_id": t}));
        let e = p["entries"].as_array().unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(
            (&e[0]["intent"], &e[0]["intent_truncated"]),
            (&Value::Null, &Value::Null)
        );
        assert_eq!(e[0]["failure_reason"], "manifest_malformed");
        assert_eq!(e[1]["intent"], "é".repeat(256));
        assert_eq!(e[1]["intent_truncated"], false);
        assert_eq!(e[2]["intent"], "🌍".repeat(256));
        assert_eq!(e[2]["intent_truncated"], true);
        let a = &e[1];
        assert_eq!(
            (
                &a["pdcp_log_id"],
                &a["status"],
                &a["parent_pdcp_log_id"],
                &a["regeneration_attempt"],
                &a["attempt"],
                &a["client_request_id"]
            ),
            (
                &retry["pdcp_log_id"],
                &json!("accepted"),
                &rejected["pdcp_log_id"],
                &json!(2),
                &json!(2),
                &json!("req-7")
            )
        );
        assert_eq!(
            (
                &a["before_version"],
                &a["after_version"],
                &a["before_hash"],
                &a["after_hash"]
            ),
            (
                &json!(0),
                &json!(1),
                &rejected["before_hash"],
                &retry["after_hash"]
            )
        );
        assert_eq!(
            (&a["protocol_version"], &a["runtime_version"]),
            (&json!("patchdiff-tx/1"), &json!("patchdiff-mvp-0.2.2"))
        );
        assert_eq!(a["diagnostic"], Value::Null);
        let r = &e[2];
        assert_eq!(r["failure_reason"], "match_absent");
        assert_eq!(r["failure_stage"], "TRANSACTION_APPLICABILITY");
        assert_eq!(r["diagnostic"], rejected["diagnostic"]);
        assert_eq!(r["after_version"], Value::Null);
        let fp: String = Spi::get_one_with_args(
            "SELECT request_fingerprint FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
            &[retry["pdcp_log_id"].as_str().unwrap().into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(a["request_fingerprint"], fp);
        assert!(a.get("pdcp_content").is_none());
        // Filtering by the stored record hash finds the attempt.
        let h = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "content_hash": a["pdcp_content_hash"]}),
        );
        assert_eq!(
            seqs(&h, "log_sequence"),
            [a["log_sequence"].as_i64().unwrap()]
        );
    }

    /// Contract "patchdiff_get_pdcp_log", content budget: with include_content the first entry
    /// is whole even over 1,048,576 bytes; later entries over the budget have pdcp_content null
    /// and pdcp_content_omitted "page_byte_budget" (a later one that still fits is kept); limit 1
    /// with before_sequence one above an omitted entry's log_sequence fetches it whole.
    #[pg_test]
    fn content_budget_and_the_limit_1_follow_up() {
        let big = "abcdefghi\n".repeat(110_000); // 1,100,000 bytes; its record is larger.
        let t = init(&big);
        let first = edit(
            &t,
            0,
            "first",
            json!([{"match": "abcdefghi", "replace": "ABCDEFGHI", "occurrence_index": 1}]),
        );
        assert_eq!(first["status"], "accepted");
        let whole = target(&t)["current_content"].as_str().unwrap().to_owned();
        let huge = edit(
            &t,
            1,
            "replace all",
            json!([{"match": whole, "replace": "small\n"}]),
        );
        assert_eq!(huge["status"], "accepted");
        let record = |id: &Value| -> String {
            Spi::get_one_with_args(
                "SELECT pdcp_content FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
                &[id.as_str().unwrap().into()],
            )
            .unwrap()
            .unwrap()
        };
        let stored = record(&huge["pdcp_log_id"]);
        assert!(stored.len() > 1_048_576);
        for (i, w) in ["one", "two"].iter().enumerate() {
            let r = edit(
                &t,
                2 + i as i64,
                w,
                json!([{"match": "small", "replace": format!("small {w}")}]),
            );
            assert_eq!(r["status"], "accepted");
            assert_eq!(
                edit(&t, 0, "stale", json!([{"match": "x", "replace": "y"}]))["status"],
                "rejected"
            );
        }
        let p = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "include_content": true}),
        );
        let e = p["entries"].as_array().unwrap();
        assert_eq!(e.len(), 6);
        for x in e[..4].iter().chain(&e[5..]) {
            assert_eq!(x["pdcp_content"], json!(record(&x["pdcp_log_id"])));
            assert_eq!(x["pdcp_content_omitted"], Value::Null);
        }
        assert_eq!(e[4]["pdcp_log_id"], huge["pdcp_log_id"]);
        assert_eq!(e[4]["pdcp_content"], Value::Null);
        assert_eq!(e[4]["pdcp_content_omitted"], "page_byte_budget");
        let seq = e[4]["log_sequence"].as_i64().unwrap();
        let one = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "include_content": true, "limit": 1, "before_sequence": seq + 1}),
        );
        assert_eq!(seqs(&one, "log_sequence"), [seq]);
        assert_eq!(one["entries"][0]["pdcp_content"], stored);
        assert_eq!(one["entries"][0]["pdcp_content_omitted"], Value::Null);
        assert_eq!(one["has_more"], true);
        // First on its page, the large record is whole and the next one is over the budget.
        let p = call(
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t, "include_content": true, "before_sequence": seq + 1}),
        );
        let e = p["entries"].as_array().unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0]["pdcp_content"], stored);
        assert_eq!(e[1]["pdcp_log_id"], first["pdcp_log_id"]);
        assert_eq!(e[1]["pdcp_content_omitted"], "page_byte_budget");
    }

    /// "A page's cost does not grow with history length": every page and replay statement,
    /// planned under the settings its functions are declared with, reads its composite index
    /// in order: no Sort node and no walk of a global sequence index, with custom and generic
    /// plans alike; the key lookup uses its unique index.
    #[pg_test]
    fn history_statements_read_one_index_range() {
        use crate::storage::attempts::*;
        use crate::storage::ledger::*;
        let t = init("a0\n");
        for v in 0..30 {
            edit(
                &t,
                v,
                "n",
                json!([{"match": format!("a{v}\n"), "replace": format!("a{}\n", v + 1)}]),
            );
            edit(&t, v + 1, "miss", json!([{"match": "zzz", "replace": "q"}]));
        }
        let config: Vec<i64> = sql_seqs(
            "SELECT count(*) FROM pg_proc WHERE proname IN ('patchdiff_get_pdcp_log', 'patchdiff_get_manifest_ledger', 'patchdiff_replay') \
             AND proconfig @> ARRAY['enable_sort=off', 'enable_incremental_sort=off'] AND $1 IS NOT NULL",
            &t,
        );
        assert_eq!(config, [3]);
        Spi::run("SET LOCAL enable_sort = off").unwrap();
        Spi::run("SET LOCAL enable_incremental_sort = off").unwrap();
        let cycle = target(&t)["active_editing_cycle_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let log_types = "text, int8, text, text, text, int8";
        let cases = [
            (
                "log_all",
                LOG_ALL_SQL,
                log_types,
                format!("'{t}', 40, NULL, NULL, NULL, 51"),
                "pdcp_logs_target_file_id_log_sequence_idx",
            ),
            (
                "log_status",
                LOG_BY_STATUS_SQL,
                log_types,
                format!("'{t}', 40, 'rejected', NULL, NULL, 51"),
                "pdcp_logs_target_file_id_status_log_sequence_idx",
            ),
            (
                "log_hash",
                LOG_BY_HASH_SQL,
                log_types,
                format!("'{t}', 40, NULL, 'h', NULL, 51"),
                "pdcp_logs_target_file_id_pdcp_content_hash_log_sequence_idx",
            ),
            (
                "log_key",
                LOG_BY_KEY_SQL,
                log_types,
                format!("'{t}', 40, NULL, NULL, 'k', 51"),
                "pdcp_logs_target_file_id_client_request_id_idx",
            ),
            (
                "ledger_cycle",
                LEDGER_CYCLE_SQL,
                "text, int8, int8, text",
                format!("'{t}', 40, 51, '{cycle}'"),
                "manifest_ledger_target_file_id_ledger_sequence_idx",
            ),
            (
                "ledger_all",
                LEDGER_ALL_SQL,
                "text, int8, int8",
                format!("'{t}', 40, 51"),
                "manifest_ledger_target_file_id_ledger_sequence_idx",
            ),
            (
                "replay_sizes",
                REPLAY_SIZES_SQL,
                "text, int8",
                format!("'{t}', 0"),
                "pdcp_logs_target_file_id_status_log_sequence_idx",
            ),
            (
                "replay_rows",
                REPLAY_ROWS_SQL,
                "text, int8, int8",
                format!("'{t}', 0, 40"),
                "pdcp_logs_target_file_id_status_log_sequence_idx",
            ),
        ];
        for (name, sql, types, args, index) in cases {
            Spi::run(&format!("PREPARE {name}({types}) AS {sql}")).unwrap();
            for mode in ["force_custom_plan", "force_generic_plan"] {
                Spi::run(&format!("SET LOCAL plan_cache_mode = {mode}")).unwrap();
                let plan: String = Spi::connect(|c| {
                    c.select(
                        &format!("EXPLAIN (FORMAT JSON) EXECUTE {name}({args})"),
                        None,
                        &[],
                    )
                    .unwrap()
                    .first()
                    .get_one::<pgrx::datum::JsonString>()
                    .unwrap()
                    .unwrap()
                    .0
                });
                assert!(plan.contains(index), "{name} {mode}: {plan}");
                assert!(!plan.contains("Sort"), "{name} {mode}: {plan}");
                assert!(!plan.contains("_sequence_key"), "{name} {mode}: {plan}");
            }
            Spi::run(&format!("DEALLOCATE {name}")).unwrap();
        }
    }

    /// Contract "patchdiff_get_pdcp_log" and the ledger: limit default 50, cap 200; zero,
    /// negative, boolean, float and string limits, and invalid cursors, are invalid_argument;
    /// empty, not-found and invalid answers all have entries [], has_more false and
    /// next_sequence null.
    #[pg_test]
    fn history_arguments_and_empty_shapes() {
        let t = init("a0\n");
        for v in 0..205 {
            let r = edit(
                &t,
                v,
                "n",
                json!([{"match": format!("a{v}\n"), "replace": format!("a{}\n", v + 1)}]),
            );
            assert_eq!(r["status"], "accepted");
        }
        for tool in ["patchdiff_get_pdcp_log", "patchdiff_get_manifest_ledger"] {
            let len = |args: Value| {
                let mut a = args;
                a["target_file_id"] = json!(t);
                call(tool, a)["entries"].as_array().map(Vec::len)
            };
            assert_eq!(len(json!({})), Some(50));
            assert_eq!(len(json!({"limit": null})), Some(50));
            assert_eq!(len(json!({"limit": 200})), Some(200));
            assert_eq!(len(json!({"limit": 201})), Some(200));
            assert_eq!(len(json!({"limit": 1_000_000_000_000i64})), Some(200));
            for (k, bad) in [
                ("limit", json!(0)),
                ("limit", json!(-1)),
                ("limit", json!(true)),
                ("limit", json!(2.5)),
                ("limit", json!(3.0)),
                ("limit", json!("3")),
                ("before_sequence", json!(0)),
                ("before_sequence", json!(-3)),
                ("before_sequence", json!(false)),
                ("before_sequence", json!(1.5)),
                ("before_sequence", json!("9")),
            ] {
                let r = call(tool, json!({"target_file_id": t, k: bad}));
                assert_eq!(r["status"], "invalid_argument", "{tool} {k} {bad}");
                assert_eq!(r["code"], format!("invalid_{k}"));
                assert_eq!(
                    (&r["entries"], &r["has_more"], &r["next_sequence"]),
                    (&json!([]), &json!(false), &Value::Null)
                );
            }
            let r = call(tool, json!({"target_file_id": t, "bogus": 1}));
            assert_eq!(
                (&r["code"], &r["entries"]),
                (&json!("unknown_argument"), &json!([]))
            );
            let r = call(tool, json!({"target_file_id": "not-a-uuid"}));
            assert_eq!(
                (&r["status"], &r["next_sequence"]),
                (&json!("invalid_argument"), &Value::Null)
            );
            let r = call(
                tool,
                json!({"target_file_id": "00000000-0000-4000-8000-000000000000"}),
            );
            assert_eq!(
                (
                    &r["status"],
                    &r["entries"],
                    &r["has_more"],
                    &r["next_sequence"]
                ),
                (&json!("not_found"), &json!([]), &json!(false), &Value::Null)
            );
            // The oldest cursor gives the empty page.
            let r = call(tool, json!({"target_file_id": t, "before_sequence": 1}));
            assert_eq!(
                r,
                json!({"entries": [], "has_more": false, "next_sequence": null})
            );
        }
        let empty = init("nothing yet");
        for tool in ["patchdiff_get_pdcp_log", "patchdiff_get_manifest_ledger"] {
            assert_eq!(
                call(tool, json!({"target_file_id": empty})),
                json!({"entries": [], "has_more": false, "next_sequence": null})
            );
        }
        for (args, code) in [
            (json!({"status": "ok"}), "invalid_status"),
            (json!({"include_content": "yes"}), "invalid_include_content"),
            (json!({"content_hash": 1}), "invalid_content_hash"),
            (
                json!({"client_request_id": ["a"]}),
                "invalid_client_request_id",
            ),
        ] {
            let mut a = args;
            a["target_file_id"] = json!(t);
            assert_eq!(call("patchdiff_get_pdcp_log", a)["code"], code);
        }
        let r = call(
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t, "include_previous_cycles": 1}),
        );
        assert_eq!(r["code"], "invalid_include_previous_cycles");
    }

    /// Issue 21, item 4 (no behaviour change): pages embed stored `json` text as it is, so a
    /// spelling this extension never writes (whitespace, `\u00e9`, `\/`, a repeated key, floats,
    /// a number past u64) must still show exactly as parsing and serialising it did; and
    /// `created_at`, now read from the timestamp itself, is what
    /// `(EXTRACT(epoch FROM created_at) * 1000000)::int8` gave, before 1970 and at the ends of
    /// years 1 to 9999 included.
    #[pg_test]
    fn pages_show_odd_stored_json_and_timestamps_as_before() {
        use patchdiff_engine::api::time::rfc3339_utc;
        use patchdiff_engine::wire::{LITERAL, to_string};
        let t = init("a0\n");
        let r = edit(&t, 0, "acc", json!([{"match": "a0", "replace": "a1"}]));
        assert_eq!(r["status"], "accepted");
        let odd = [
            (
                r#"{"b": 1, "a":"\u00e9", "a": [1.0, -0, 1e2, 0.1]}"#,
                "1969-12-31 23:59:59.999999+00",
            ),
            (
                r#" {"k":"v\/\u001F\u000a"} "#,
                "0001-01-01 00:00:00.000001+00",
            ),
            (
                "[18446744073709551616,-9223372036854775809]",
                "9999-12-31 23:59:59.999999+00",
            ),
            (r#"{"é":"é","n":-5}"#, "2026-10-22 23:28:20.5+00"),
        ];
        for (i, (text, at)) in odd.iter().enumerate() {
            Spi::run_with_args(
                "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
                   runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, before_version, \
                   before_hash, failure_reason, failure_detail, diagnostic, validity, source, created_at) \
                 SELECT pg_catalog.gen_random_uuid(), target_file_id, editing_cycle_id, 'rejected', protocol_version, \
                   runtime_version, pdcp_content, 'odd', request_fingerprint, request_envelope, before_version, before_hash, \
                   'TEST', $4, $2::json, validity, source, $3::timestamptz \
                 FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid AND status = 'accepted'",
                &[t.as_str().into(), (*text).into(), (*at).into(), format!("odd {i}").into()],
            )
            .unwrap();
            Spi::run_with_args(
                "INSERT INTO patchdiff.manifest_ledger (ledger_entry_id, pdcp_log_id, log_sequence, target_file_id, \
                   editing_cycle_id, before_version, after_version, change_index, change_id, origin, derived, created_at) \
                 SELECT pg_catalog.gen_random_uuid(), pdcp_log_id, log_sequence, target_file_id, editing_cycle_id, \
                   before_version, after_version, $4, 'chg_odd', 'typed', $2::json, $3::timestamptz \
                 FROM patchdiff.manifest_ledger WHERE target_file_id = $1::uuid AND change_index = 1",
                &[t.as_str().into(), (*text).into(), (*at).into(), (i as i32 + 2).into()],
            )
            .unwrap();
        }
        let page = |f: &str| -> String {
            Spi::get_one_with_args::<String>(
                &format!("SELECT {f}($1::json)::text"),
                &[json!({"target_file_id": t}).to_string().into()],
            )
            .unwrap()
            .unwrap()
        };
        let (log, ledger) = (
            page("patchdiff_get_pdcp_log"),
            page("patchdiff_get_manifest_ledger"),
        );
        for (text, at) in odd {
            let shown = to_string(&serde_json::from_str(text).unwrap(), LITERAL);
            let micros = Spi::get_one_with_args::<i64>(
                "SELECT (EXTRACT(epoch FROM $1::timestamptz) * 1000000)::int8",
                &[at.into()],
            )
            .unwrap()
            .unwrap();
            let time = rfc3339_utc(micros);
            let in_log = format!(
                r#""diagnostic":{shown},"intent":null,"intent_truncated":null,"created_at":"{time}""#
            );
            let in_ledger = format!(r#""derived":{shown},"created_at":"{time}""#);
            assert!(log.contains(&in_log), "{in_log} not in {log}");
            assert!(ledger.contains(&in_ledger), "{in_ledger} not in {ledger}");
        }
    }
}
