//! Contract "patchdiff_submit_observed_operations": observed submissions in the single and the
//! batch form, their audited rejections, responses, keyed recovery, replay and strict mode.

use patchdiff_engine::api::observation::{LinkedObservation, ObservationRow};
use patchdiff_engine::api::replay::{Accepted, Replay};
use patchdiff_engine::api::scoped::{
    self, BATCH_PROTOCOL, BATCH_RUNTIME, parse_submit_observed_operations,
};
use patchdiff_engine::api::submit::{self, Attempt, AttemptRow, KeyOutcome, Parent, Submission};
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::text::{char_len, sha256_hex, slice_chars};
use patchdiff_engine::api::tx2;
use proptest::prelude::*;
use serde_json::{Value, json};

const T: &str = "11111111-1111-4111-8111-111111111111";
const OTHER_TARGET: &str = "22222222-2222-4222-8222-222222222222";
const CYCLE: &str = "33333333-3333-4333-8333-333333333333";
const OLD_CYCLE: &str = "33333333-3333-4333-8333-000000000000";
const BUNDLE: &str = "44444444-4444-4444-8444-444444444444";
const OTHER_BUNDLE: &str = "44444444-4444-4444-8444-000000000000";
const LOG: &str = "55555555-5555-4555-8555-555555555555";
const VERSION: i64 = 3;

/// A repeated string ("hello") in three functions, with astral characters so that code points
/// and bytes differ.
const DOC: &str = "def alpha():\n    return \"hello 🌍\"\n\ndef beta():\n    greeting = \"hello\"\n    return greeting + \"hello\"\n\ndef gamma():\n    return \"hello\" # 中\n";

fn oid(n: u8) -> String {
    format!("aaaaaaaa-aaaa-4aaa-8aaa-{n:012}")
}

/// Code point of the first `needle` in `hay`.
fn cp(hay: &str, needle: &str) -> usize {
    char_len(&hay[..hay.find(needle).unwrap()])
}

/// The scope of `def <name>`: up to the blank line after it (or the end).
fn func_scope(doc: &str, name: &str) -> (usize, usize) {
    let b = doc.find(&format!("def {name}")).unwrap();
    let e = doc[b..].find("\n\n").map_or(doc.len(), |i| b + i);
    (char_len(&doc[..b]), char_len(&doc[..e]))
}

struct Fx {
    text: String,
    hash: String,
}

impl Fx {
    fn new(text: &str) -> Fx {
        Fx {
            text: text.to_owned(),
            hash: sha256_hex(text),
        }
    }

    fn view(&self) -> TargetView<'_> {
        TargetView {
            target_file_id: T,
            version: VERSION,
            current_hash: &self.hash,
            content: &self.text,
        }
    }

    fn row(&self, n: u8, (start, end): (usize, usize)) -> ObservationRow {
        ObservationRow {
            observation_id: oid(n),
            target_file_id: T.into(),
            editing_cycle_id: CYCLE.into(),
            observation_bundle_id: None,
            bundle_ordinal: None,
            symbol_path: format!("symbol{n}"),
            kind: "function".into(),
            target_version: VERSION,
            target_current_hash: self.hash.clone(),
            scope_start: start,
            scope_end: end,
            observed_scope_hash: sha256_hex(slice_chars(&self.text, start, end)),
            consumed_by_pdcp_log_id: None,
        }
    }

    fn bundle_row(&self, n: u8, scope: (usize, usize)) -> ObservationRow {
        ObservationRow {
            observation_bundle_id: Some(BUNDLE.into()),
            bundle_ordinal: Some(n as i64),
            ..self.row(n, scope)
        }
    }

    fn single(&self, obs: &str, ops: Value) -> Value {
        json!({
            "target_file_id": T, "observation_id": obs, "intent": "edit",
            "operations": ops, "expected_target_version": VERSION,
            "expected_current_hash": self.hash,
        })
    }

    fn batch(&self, groups: Value) -> Value {
        json!({
            "target_file_id": T, "observation_bundle_id": BUNDLE, "intent": "edit",
            "groups": groups, "expected_target_version": VERSION,
            "expected_current_hash": self.hash, "client_request_id": "req-1",
        })
    }

    fn judge(&self, args: &Value, rows: &[ObservationRow]) -> (Submission, Attempt) {
        let sub = parse_submit_observed_operations(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let a = scoped::evaluate(&sub, &id, &Parent::NotLookedUp, &self.view(), CYCLE, rows);
        (sub, a)
    }
}

fn diag(a: &Attempt) -> &Value {
    a.diagnostic.as_ref().unwrap()
}

/// A rejection with nothing to write but the attempt.
#[track_caller]
fn assert_rejected(a: &Attempt, reason: &str, stage: &str, code: &str) {
    assert_eq!(a.status.as_str(), "rejected", "{:?}", a.failure_detail);
    assert_eq!(
        a.failure_reason.map(|r| r.as_str()),
        Some(reason),
        "{:?}",
        a.failure_detail
    );
    assert_eq!(
        a.failure_stage.map(|s| s.as_str()),
        Some(stage),
        "{:?}",
        a.failure_detail
    );
    assert_eq!(diag(a)["code"], code, "{:?}", a.failure_detail);
    assert!(a.new_content.is_none() && a.after_hash.is_none());
    assert!(a.changes.is_empty() && a.observations.is_empty());
}

#[track_caller]
fn accepted(a: &Attempt) -> &str {
    assert_eq!(
        a.status.as_str(),
        "accepted",
        "{:?} {:?}",
        a.failure_detail,
        a.diagnostic
    );
    a.new_content.as_deref().unwrap()
}

/// "match operations ... search only within [scope_start, scope_end), automatically
/// disambiguating strings that repeat outside the observed scope": a match that is ambiguous in
/// the whole text changes only the observed scope, and occurrence indexes count the scope.
#[test]
fn observed_match_searches_only_the_scope() {
    let fx = Fx::new(DOC);
    let gamma = func_scope(DOC, "gamma");
    let row = fx.row(1, gamma);
    let ops = json!([{"op": "match", "match": "\"hello\"", "replace": "\"bye\""}]);
    // Unobserved, the same operation is ambiguous.
    let plain = json!({"target_file_id": T, "intent": "edit", "operations": ops,
                       "expected_target_version": VERSION});
    let sub = submit::parse_submit_operations(&plain.to_string()).unwrap();
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let p = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &fx.view());
    assert_eq!(
        p.failure_reason.map(|r| r.as_str()),
        Some("match_ambiguous")
    );

    let (_, a) = fx.judge(&fx.single(&oid(1), ops), std::slice::from_ref(&row));
    let out = accepted(&a);
    assert_eq!(out, DOC.replace("return \"hello\" #", "return \"bye\" #"));
    // Absolute facts: the span of gamma's "hello" in the whole text.
    let at = cp(DOC, "\"hello\" #");
    assert_eq!(
        (a.changes[0].span_start, a.changes[0].span_end),
        (at, at + 7)
    );
    assert_eq!(a.changes[0].to_json().get("span_basis"), None);
    assert_eq!(a.observations.len(), 1);
    assert_eq!(a.observations[0].observation_id, oid(1));
    assert_eq!(a.observations[0].group_index, None);
    assert_eq!(
        (a.protocol_version, a.runtime_version),
        (tx2::PROTOCOL, tx2::RUNTIME)
    );

    // beta holds two "hello": occurrence_index 2 is beta's second, not the file's second.
    let beta = func_scope(DOC, "beta");
    let row = fx.row(2, beta);
    let ops = json!([{"op": "match", "match": "hello", "replace": "HELLO", "occurrence_index": 2}]);
    let (_, a) = fx.judge(&fx.single(&oid(2), ops), std::slice::from_ref(&row));
    assert_eq!(
        accepted(&a),
        DOC.replace("greeting + \"hello\"", "greeting + \"HELLO\"")
    );
    // Anchors see the scope only: "alpha" precedes beta in the file, not in the scope.
    let ops = json!([{"op": "match", "match": "hello", "replace": "x", "anchor_before": "alpha"}]);
    let (_, a) = fx.judge(&fx.single(&oid(2), ops), std::slice::from_ref(&row));
    assert_eq!(
        a.failure_reason.map(|r| r.as_str()),
        Some("disambiguation_invalid")
    );
    // A match of text only outside the scope is absent.
    let ops = json!([{"op": "match", "match": "🌍", "replace": "x"}]);
    let (_, a) = fx.judge(&fx.single(&oid(2), ops), std::slice::from_ref(&row));
    assert_eq!(a.failure_reason.map(|r| r.as_str()), Some("match_absent"));
    assert!(
        a.failure_detail
            .as_deref()
            .unwrap()
            .contains("observed scope")
    );
}

/// "Rejects and logs ... missing (OBSERVATION_REQUIRED), malformed (INVALID_OBSERVATION_ID),
/// unknown (UNKNOWN_OBSERVATION_ID), cross-target (OBSERVATION_TARGET_MISMATCH), closed-cycle
/// (OBSERVATION_CYCLE_MISMATCH), already-consumed (OBSERVATION_ALREADY_CONSUMED), or stale
/// (STALE_OBSERVATION_VERSION, STALE_OBSERVATION_HASH) observation."
#[test]
fn observation_rejections_are_audited() {
    let fx = Fx::new(DOC);
    let good = fx.row(1, func_scope(DOC, "beta"));
    let ops = json!([{"op": "match", "match": "greeting =", "replace": "g ="}]);
    let pv = "PROTOCOL_VALIDATION";
    let pg = "PRECONDITION_GUARD";
    // Missing: omitted and null.
    let mut args = fx.single(&oid(1), ops.clone());
    args.as_object_mut().unwrap().remove("observation_id");
    let (sub, a) = fx.judge(&args, std::slice::from_ref(&good));
    assert_rejected(&a, "context_missing", pv, "OBSERVATION_REQUIRED");
    assert!(!sub.record.contains_key("observation_id"));
    args["observation_id"] = Value::Null;
    let (_, a) = fx.judge(&args, std::slice::from_ref(&good));
    assert_rejected(&a, "context_missing", pv, "OBSERVATION_REQUIRED");
    for bad in [
        json!("not-a-uuid"),
        json!(7),
        json!(oid(1).replace('-', "")),
    ] {
        args["observation_id"] = bad;
        let (_, a) = fx.judge(&args, std::slice::from_ref(&good));
        assert_rejected(&a, "context_invalid", pv, "INVALID_OBSERVATION_ID");
    }
    let (_, a) = fx.judge(&fx.single(&oid(1), ops.clone()), &[]);
    assert_rejected(&a, "context_invalid", pv, "UNKNOWN_OBSERVATION_ID");
    let cases: Vec<(ObservationRow, &str, &str, &str)> = vec![
        (
            ObservationRow {
                target_file_id: OTHER_TARGET.into(),
                ..good.clone()
            },
            "context_invalid",
            pv,
            "OBSERVATION_TARGET_MISMATCH",
        ),
        (
            ObservationRow {
                editing_cycle_id: OLD_CYCLE.into(),
                ..good.clone()
            },
            "context_invalid",
            pv,
            "OBSERVATION_CYCLE_MISMATCH",
        ),
        (
            ObservationRow {
                consumed_by_pdcp_log_id: Some(LOG.into()),
                ..good.clone()
            },
            "context_invalid",
            pv,
            "OBSERVATION_ALREADY_CONSUMED",
        ),
        (
            ObservationRow {
                target_version: VERSION - 1,
                ..good.clone()
            },
            "target_version_mismatch",
            pg,
            "STALE_OBSERVATION_VERSION",
        ),
        (
            ObservationRow {
                target_current_hash: "0".repeat(64),
                ..good.clone()
            },
            "target_hash_mismatch",
            pg,
            "STALE_OBSERVATION_HASH",
        ),
    ];
    for (row, reason, stage, code) in cases {
        let (_, a) = fx.judge(&fx.single(&oid(1), ops.clone()), &[row]);
        assert_rejected(&a, reason, stage, code);
        assert_eq!(diag(&a)["observation_id"], oid(1));
    }
    // The uppercase spelling of a known ID names it; the good row is accepted.
    let (_, a) = fx.judge(
        &fx.single(&oid(1).to_uppercase(), ops),
        std::slice::from_ref(&good),
    );
    accepted(&a);
    assert_eq!(a.observations[0].observation_id, oid(1));
}

/// "checks in this order": with several faults the first of the contract's order is named;
/// protocol checks (both guards) precede every observation check, and stale observations
/// precede the explicit guards.
#[test]
fn observation_check_order_is_the_contracts() {
    let fx = Fx::new(DOC);
    let ops = json!([{"op": "match", "match": "greeting =", "replace": "g ="}]);
    let mut row = ObservationRow {
        target_file_id: OTHER_TARGET.into(),
        editing_cycle_id: OLD_CYCLE.into(),
        consumed_by_pdcp_log_id: Some(LOG.into()),
        target_version: 1,
        target_current_hash: "0".repeat(64),
        ..fx.row(1, func_scope(DOC, "beta"))
    };
    let order = [
        "OBSERVATION_TARGET_MISMATCH",
        "OBSERVATION_CYCLE_MISMATCH",
        "OBSERVATION_ALREADY_CONSUMED",
        "STALE_OBSERVATION_VERSION",
        "STALE_OBSERVATION_HASH",
    ];
    for code in order {
        let (_, a) = fx.judge(&fx.single(&oid(1), ops.clone()), std::slice::from_ref(&row));
        assert_eq!(diag(&a)["code"], code);
        match code {
            "OBSERVATION_TARGET_MISMATCH" => row.target_file_id = T.into(),
            "OBSERVATION_CYCLE_MISMATCH" => row.editing_cycle_id = CYCLE.into(),
            "OBSERVATION_ALREADY_CONSUMED" => row.consumed_by_pdcp_log_id = None,
            "STALE_OBSERVATION_VERSION" => row.target_version = VERSION,
            _ => row.target_current_hash = fx.hash.clone(),
        }
    }
    accepted(
        &fx.judge(&fx.single(&oid(1), ops.clone()), std::slice::from_ref(&row))
            .1,
    );

    // Missing observation and a missing guard: the guard (protocol) first.
    let mut args = fx.single(&oid(1), ops.clone());
    args.as_object_mut().unwrap().remove("observation_id");
    args.as_object_mut()
        .unwrap()
        .remove("expected_current_hash");
    let (_, a) = fx.judge(&args, &[]);
    assert_rejected(
        &a,
        "context_missing",
        "PROTOCOL_VALIDATION",
        "OBSERVED_GUARDS_REQUIRED",
    );
    assert_eq!(diag(&a)["missing_guards"], json!(["expected_current_hash"]));
    // A malformed record precedes the observation checks.
    let mut args = fx.single("nope", json!([]));
    let (_, a) = fx.judge(&args, &[]);
    assert_eq!(diag(&a)["code"], "empty_operations");
    // Stale observation and a mismatching explicit guard: the observation first; then, with a
    // fresh observation, the explicit guard exactly as unobserved submissions.
    args = fx.single(&oid(1), ops);
    args["expected_target_version"] = json!(VERSION + 5);
    let stale = ObservationRow {
        target_version: VERSION - 1,
        ..row.clone()
    };
    let (_, a) = fx.judge(&args, &[stale]);
    assert_eq!(diag(&a)["code"], "STALE_OBSERVATION_VERSION");
    let (_, a) = fx.judge(&args, &[row]);
    assert_eq!(
        a.failure_reason.map(|r| r.as_str()),
        Some("target_version_mismatch")
    );
    assert_eq!(diag(&a).get("code"), None);
}

/// "Zero-width insertions ... require scope_start < start < scope_end. Both boundaries reject,
/// including with otherwise matching guards. Both nonempty expected_before and expected_after
/// are mandatory ... Out-of-scope spans, boundary insertions and guards crossing the scope
/// reject with span_out_of_bounds / OPERATION_OUTSIDE_OBSERVED_SCOPE."
#[test]
fn spans_and_insertions_stay_inside_the_running_scope() {
    let fx = Fx::new(DOC);
    let (s, e) = func_scope(DOC, "beta");
    let row = fx.row(1, (s, e));
    let text: Vec<char> = DOC.chars().collect();
    let at = |i: usize| text[i].to_string();
    let run = |ops: Value| {
        fx.judge(&fx.single(&oid(1), ops), std::slice::from_ref(&row))
            .1
    };
    let ta = "TRANSACTION_APPLICABILITY";
    let outside = |a: &Attempt| {
        assert_rejected(
            a,
            "span_out_of_bounds",
            ta,
            "OPERATION_OUTSIDE_OBSERVED_SCOPE",
        );
        assert_eq!(a.failed_change_id.as_deref(), Some("chg_001"));
    };
    // A span beginning before the scope (its text matches the whole target).
    let before = slice_chars(DOC, s - 2, s + 3);
    outside(&run(json!([{"op": "span", "start": s - 2, "end": s + 3,
                               "expected_text": before, "replace": "x"}])));
    // A span past the scope end.
    let past = slice_chars(DOC, e - 2, e + 1);
    let a = run(
        json!([{"op": "span", "start": e - 2, "end": e + 1, "expected_text": past, "replace": "x"}]),
    );
    outside(&a);
    // Its failure context is absolute: it shows the whole text around the scope end.
    let fc = &diag(&a)["failure_context"];
    assert_eq!(fc["buffer_stage"], "canonical_target");
    assert_eq!(fc["total_chars"], text.len());
    assert_eq!(diag(&a)["scope_start"], s);
    assert_eq!(diag(&a)["running_scope_end"], e);
    // Insertions at either boundary, with matching guards.
    let ins = |p: usize| {
        json!([{"op": "span", "start": p, "end": p, "expected_text": "", "replace": "#",
                "expected_before": at(p - 1), "expected_after": at(p)}])
    };
    outside(&run(ins(s)));
    outside(&run(ins(e)));
    // Strictly inside, the same insertion is accepted.
    let mid = s + 4;
    let a = run(ins(mid));
    let mut want = text.clone();
    want.insert(mid, '#');
    assert_eq!(accepted(&a), want.iter().collect::<String>());
    // Missing guards: either one.
    for drop in ["expected_before", "expected_after"] {
        let mut ops = ins(mid);
        ops[0].as_object_mut().unwrap().remove(drop);
        let a = run(ops);
        assert_rejected(
            &a,
            "span_expected_text_mismatch",
            ta,
            "OBSERVED_INSERTION_GUARDS_REQUIRED",
        );
        assert_eq!(diag(&a)["missing_guards"], json!([drop]));
    }
    // Guards crossing the scope: expected_before reaching before scope_start, expected_after
    // past the end, both matching the whole text.
    let p = s + 1;
    let cross_before = json!([{"op": "span", "start": p, "end": p, "expected_text": "", "replace": "#",
        "expected_before": slice_chars(DOC, s - 2, p), "expected_after": at(p)}]);
    outside(&run(cross_before));
    let p = e - 1;
    let cross_after = json!([{"op": "span", "start": p, "end": p, "expected_text": "", "replace": "#",
        "expected_before": at(p - 1), "expected_after": slice_chars(DOC, p, e + 2)}]);
    outside(&run(cross_after));
    // Mismatching guards are span_expected_text_mismatch (no observed code).
    let mut ops = ins(mid);
    ops[0]["expected_after"] = json!("Q");
    let a = run(ops);
    assert_eq!(
        a.failure_reason.map(|r| r.as_str()),
        Some("span_expected_text_mismatch")
    );
    assert_eq!(diag(&a)["span_check"], "expected_after");
    assert_eq!(diag(&a).get("code"), None);
}

/// "a full-scope replacement is allowed. The running scope end adjusts after each sequential
/// operation."
#[test]
fn full_scope_replacement_and_running_scope_end() {
    let fx = Fx::new(DOC);
    let (s, e) = func_scope(DOC, "beta");
    let row = fx.row(1, (s, e));
    let scope = slice_chars(DOC, s, e);
    let run = |ops: Value| {
        fx.judge(&fx.single(&oid(1), ops), std::slice::from_ref(&row))
            .1
    };
    let a = run(
        json!([{"op": "span", "start": s, "end": e, "expected_text": scope, "replace": "def beta(): pass"}]),
    );
    assert_eq!(accepted(&a), DOC.replace(scope, "def beta(): pass"));
    // A whole-scope match is as good.
    let a = run(json!([{"op": "match", "match": scope, "replace": ""}]));
    assert_eq!(accepted(&a), DOC.replace(scope, ""));

    // Growing: +3 code points at the start; the end moves to e + 3.
    let grow = json!({"op": "span", "start": s, "end": s + 3, "expected_text": "def", "replace": "def   "});
    let tail_after_growth = slice_chars(DOC, e - 3, e);
    let ok = run(json!([grow, {"op": "span", "start": e, "end": e + 3,
                              "expected_text": tail_after_growth, "replace": "!"}]));
    let grown = DOC.replacen("def beta", "def    beta", 1);
    let want = format!(
        "{}!{}",
        slice_chars(&grown, 0, e),
        slice_chars(&grown, e + 3, char_len(&grown))
    );
    assert_eq!(accepted(&ok), want);
    // ... but not past e + 3, and an insertion exactly at e + 3 is a boundary insertion.
    let past = slice_chars(&grown, e + 1, e + 4);
    let a = run(
        json!([grow, {"op": "span", "start": e + 1, "end": e + 4, "expected_text": past, "replace": ""}]),
    );
    assert_eq!(diag(&a)["code"], "OPERATION_OUTSIDE_OBSERVED_SCOPE");
    assert_eq!(a.failed_change_id.as_deref(), Some("chg_002"));
    assert_eq!(diag(&a)["running_scope_end"], e + 3);
    // Later failures keep absolute coordinates: the intermediate buffer is the whole text.
    let fc = &diag(&a)["failure_context"];
    assert_eq!(fc["buffer_stage"], "intermediate_buffer");
    assert_eq!(fc["total_chars"], char_len(&grown));
    let boundary = json!({"op": "span", "start": e + 3, "end": e + 3, "expected_text": "", "replace": "#",
                          "expected_before": "\"", "expected_after": "\n"});
    let a = run(json!([grow, boundary]));
    assert_eq!(diag(&a)["code"], "OPERATION_OUTSIDE_OBSERVED_SCOPE");

    // Shrinking: -3 at the start; a span ending at the original end is now outside.
    let shrink =
        json!({"op": "span", "start": s, "end": s + 4, "expected_text": "def ", "replace": "d"});
    let end_text = slice_chars(DOC, e - 4, e);
    let a = run(
        json!([shrink, {"op": "span", "start": e - 4, "end": e, "expected_text": end_text, "replace": ""}]),
    );
    assert_eq!(diag(&a)["code"], "OPERATION_OUTSIDE_OBSERVED_SCOPE");
    let a = run(
        json!([shrink, {"op": "span", "start": e - 7, "end": e - 3, "expected_text": end_text, "replace": ""}]),
    );
    accepted(&a);
    // Facts are absolute sequential coordinates.
    assert_eq!(
        (a.changes[1].span_start, a.changes[1].span_end),
        (e - 7, e - 3)
    );
}

/// Contract: "Batch spans and match selectors use each group's own scope-local sequential
/// buffer" ... "Success assembles descending original spans, writes one accepted log and
/// advances version once".
fn three_groups(fx: &Fx) -> (Value, Vec<ObservationRow>) {
    let rows = vec![
        fx.bundle_row(1, func_scope(DOC, "alpha")),
        fx.bundle_row(2, func_scope(DOC, "beta")),
        fx.bundle_row(3, func_scope(DOC, "gamma")),
    ];
    // Submitted out of document order: gamma, alpha, beta.
    let groups = json!([
        {"observation_id": oid(3), "operations": [
            {"op": "match", "match": "hello", "replace": "HELLO"},
            {"op": "span", "start": 0, "end": 3, "expected_text": "def", "replace": "async def"}]},
        {"observation_id": oid(1), "operations": [
            {"op": "span", "start": 4, "end": 9, "expected_text": "alpha", "replace": "a"}]},
        {"observation_id": oid(2), "operations": [
            {"op": "match", "match": "hello", "replace": "bye", "occurrence_index": 2},
            {"op": "span", "start": 11, "end": 11, "expected_text": "", "replace": "\n    pass",
             "expected_before": ":", "expected_after": "\n"},
            {"op": "match", "match": "greeting", "replace": "g", "occurrence_index": 1, "change_id": "rename"}]},
    ]);
    (groups, rows)
}

/// The naive reference: each group's edits on a char vector of its scope, the pieces
/// concatenated in ascending order.
fn naive_batch(doc: &str, rows: &[ObservationRow], groups: &Value) -> String {
    let mut pieces: Vec<(usize, usize, String)> = Vec::new();
    for g in groups.as_array().unwrap() {
        let row = rows
            .iter()
            .find(|r| r.observation_id == g["observation_id"])
            .unwrap();
        let mut buf: Vec<char> = slice_chars(doc, row.scope_start, row.scope_end)
            .chars()
            .collect();
        for op in g["operations"].as_array().unwrap() {
            let replace: Vec<char> = op["replace"].as_str().unwrap().chars().collect();
            let (s, e) = if op["op"] == "span" {
                (
                    op["start"].as_u64().unwrap() as usize,
                    op["end"].as_u64().unwrap() as usize,
                )
            } else {
                let m: Vec<char> = op["match"].as_str().unwrap().chars().collect();
                let n = op["occurrence_index"].as_u64().unwrap_or(1) as usize;
                let s = (0..=buf.len() - m.len())
                    .filter(|&i| buf[i..i + m.len()] == m[..])
                    .nth(n - 1)
                    .unwrap();
                (s, s + m.len())
            };
            buf.splice(s..e, replace);
        }
        pieces.push((row.scope_start, row.scope_end, buf.into_iter().collect()));
    }
    pieces.sort();
    let chars: Vec<char> = doc.chars().collect();
    let mut out = String::new();
    let mut at = 0;
    for (s, e, text) in pieces {
        out.extend(&chars[at..s]);
        out.push_str(&text);
        at = e;
    }
    out.extend(&chars[at..]);
    out
}

/// Batch: three groups in non-document order, scope-local spans and matches, one Applied whose
/// descending assembly equals the naive reference; facts count 1..N across the batch.
#[test]
fn batch_applies_scope_local_groups_in_one_transaction() {
    let fx = Fx::new(DOC);
    let (groups, rows) = three_groups(&fx);
    let (sub, a) = fx.judge(&fx.batch(groups.clone()), &rows);
    assert_eq!(
        (sub.protocol_version, sub.runtime_version),
        (BATCH_PROTOCOL, BATCH_RUNTIME)
    );
    let out = accepted(&a);
    assert_eq!(out, naive_batch(DOC, &rows, &groups));
    assert!(out.contains("async def gamma():\n    return \"HELLO\""));
    assert!(out.contains("def a():\n    return \"hello 🌍\""));
    assert!(
        out.contains("def beta():\n    pass\n    g = \"hello\"\n    return greeting + \"bye\"")
    );
    assert_eq!(a.after_version, Some(VERSION + 1));
    let idx: Vec<usize> = a.changes.iter().map(|f| f.change_index).collect();
    assert_eq!(idx, [1, 2, 3, 4, 5, 6]);
    let ids: Vec<&str> = a.changes.iter().map(|f| f.change_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "chg_001", "chg_002", "chg_003", "chg_004", "chg_005", "rename"
        ]
    );
    let f = a.changes[2].to_json();
    assert_eq!(f["group_index"], 2);
    assert_eq!(f["observation_id"], oid(1));
    assert_eq!(f["span_basis"], "scope_local");
    assert_eq!(f["scope_start"], rows[0].scope_start);
    assert_eq!((&f["span_start"], &f["span_end"]), (&json!(4), &json!(9)));
    let links: Vec<(String, Option<usize>)> = a
        .observations
        .iter()
        .map(|l| (l.observation_id.clone(), l.group_index))
        .collect();
    assert_eq!(
        links,
        [(oid(3), Some(1)), (oid(1), Some(2)), (oid(2), Some(3))]
    );
    assert_eq!(
        scoped::requested_observations(&sub),
        [oid(3), oid(1), oid(2)]
    );

    // The response: versions, counts, bounded summaries in group order.
    let now = TargetView {
        version: VERSION + 1,
        current_hash: a.after_hash.as_deref().unwrap(),
        content: out,
        ..fx.view()
    };
    let v = scoped::respond(&a, &sub, LOG, &now, None, &rows);
    assert_eq!(v["status"], "accepted");
    assert_eq!(v["observation_bundle_id"], BUNDLE);
    assert_eq!(
        (&v["before_version"], &v["after_version"]),
        (&json!(VERSION), &json!(VERSION + 1))
    );
    assert_eq!(
        (&v["group_count"], &v["operation_count"]),
        (&json!(3), &json!(6))
    );
    let g1 = &v["groups"][0];
    let (gs, ge) = func_scope(DOC, "gamma");
    assert_eq!(
        g1,
        &json!({"group_index": 1, "observation_id": oid(3), "symbol_name": "symbol3",
                "symbol_name_truncated": false, "kind": "function", "operation_count": 2,
                "scope_start": gs, "scope_end": ge, "scope_end_after": ge + 6})
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert!(keys.iter().position(|k| *k == "groups") > keys.iter().position(|k| *k == "evidence"));

    // Keyed recovery repeats the observed fields from the stored record and facts; without rows
    // the summaries' symbol names are null.
    let stored = AttemptRow::of(&a, LOG);
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let KeyOutcome::Recovered(mut r) = submit::recover_or_conflict(&sub, &id, &stored, &now, None)
    else {
        panic!("not recovered")
    };
    scoped::recovered_fields(&mut r, &stored.pdcp_content, &rows, stored.before_version);
    let r = r.to_value();
    for k in [
        "observation_bundle_id",
        "before_version",
        "after_version",
        "operation_count",
        "group_count",
        "groups",
    ] {
        assert_eq!(r[k], v[k], "{k}");
    }
    let KeyOutcome::Recovered(mut bare) =
        submit::recover_or_conflict(&sub, &id, &stored, &now, None)
    else {
        panic!("not recovered")
    };
    scoped::recovered_fields(&mut bare, &stored.pdcp_content, &[], stored.before_version);
    let bare = bare.to_value();
    assert_eq!(bare["groups"][0]["symbol_name"], Value::Null);
    assert_eq!(bare["groups"][0]["scope_start"], gs);
    assert_eq!(bare["groups"][0]["operation_count"], 2);
}

/// observed-editor-v2 "Commit receipts": `transaction.before` and the operation/group counts are
/// "taken from the service result, including on recovery", so the observed service's rejections
/// carry them too: `before_version` from the attempt row (as recorded, on a recovery after the
/// target moved on), `operation_count` and `group_count` from the stored record, null when the
/// record holds no list to count.
#[test]
fn batch_rejections_carry_before_version_and_counts() {
    let fx = Fx::new(DOC);
    let (mut groups, rows) = three_groups(&fx);
    // The last operation of the third group misses: the whole batch rejects.
    groups[2]["operations"][2]["match"] = json!("absent text");
    let (sub, a) = fx.judge(&fx.batch(groups), &rows);
    assert_eq!(a.status.as_str(), "rejected");
    let v = scoped::respond(&a, &sub, LOG, &fx.view(), None, &rows);
    assert_eq!(
        (
            &v["before_version"],
            &v["operation_count"],
            &v["group_count"]
        ),
        (&json!(VERSION), &json!(6), &json!(3)),
        "{v}"
    );
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    let at = |k: &str| keys.iter().position(|x| *x == k).unwrap();
    assert!(
        at("after_hash") < at("before_version") && at("before_version") < at("current_version")
    );
    assert!(at("pdcp_log_id") < at("operation_count") && at("group_count") < at("diagnostic"));

    // Keyed recovery, with the target two versions on: the recorded before version.
    let later = fx.view();
    let now = TargetView {
        version: VERSION + 2,
        ..later
    };
    let stored = AttemptRow::of(&a, LOG);
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let KeyOutcome::Recovered(mut r) = submit::recover_or_conflict(&sub, &id, &stored, &now, None)
    else {
        panic!("not recovered")
    };
    scoped::recovered_fields(&mut r, &stored.pdcp_content, &[], stored.before_version);
    let r = r.to_value();
    assert_eq!(r["deduplicated"], true);
    assert_eq!(
        (
            &r["before_version"],
            &r["current_version"],
            &r["operation_count"],
            &r["group_count"]
        ),
        (&json!(VERSION), &json!(VERSION + 2), &json!(6), &json!(3)),
        "{r}"
    );

    // Uncountable records: `groups` not a list; a group without an operations list.
    let (sub, a) = fx.judge(&fx.batch(json!("nope")), &rows);
    let v = scoped::respond(&a, &sub, LOG, &fx.view(), None, &rows);
    assert_eq!(
        (&v["operation_count"], &v["group_count"]),
        (&Value::Null, &Value::Null),
        "{v}"
    );
    let (sub, a) = fx.judge(&fx.batch(json!([{"observation_id": oid(1)}])), &rows);
    let v = scoped::respond(&a, &sub, LOG, &fx.view(), None, &rows);
    assert_eq!(
        (&v["operation_count"], &v["group_count"]),
        (&Value::Null, &json!(1)),
        "{v}"
    );

    // The single form: before_version and operation_count, no group_count.
    let args = fx.single(
        &oid(9),
        json!([{"op": "match", "match": "x", "replace": "y"}]),
    );
    let (sub, a) = fx.judge(&args, &rows);
    let v = scoped::respond(&a, &sub, LOG, &fx.view(), None, &rows);
    assert_eq!(
        (&v["before_version"], &v["operation_count"]),
        (&json!(VERSION), &json!(1)),
        "{v}"
    );
    assert_eq!(v.get("group_count"), None);
}

/// "groups (1..32 ...; at most 128 operations total" and unique observation and change IDs; a
/// failing later group rejects the whole batch, naming its group, in scope-local coordinates.
#[test]
fn batch_shapes_and_limits_reject() {
    let fx = Fx::new(DOC);
    let (groups, rows) = three_groups(&fx);
    let code = |groups: Value| {
        let (_, a) = fx.judge(&fx.batch(groups), &rows);
        assert_eq!(a.status.as_str(), "rejected");
        assert_eq!(
            a.failure_stage.map(|s| s.as_str()),
            Some("PROTOCOL_VALIDATION")
        );
        assert!(a.new_content.is_none());
        diag(&a)["code"].as_str().unwrap().to_owned()
    };
    let op = json!({"op": "match", "match": "hello", "replace": "x"});
    assert_eq!(code(json!([])), "empty_groups");
    let many: Vec<Value> = (0..33)
        .map(|i| json!({"observation_id": oid(i), "operations": [op]}))
        .collect();
    assert_eq!(code(json!(many)), "too_many_groups");
    let ops: Vec<Value> = (0..65).map(|_| op.clone()).collect();
    let big = json!([{"observation_id": oid(1), "operations": ops},
                     {"observation_id": oid(2), "operations": ops}]);
    assert_eq!(code(big), "too_many_operations");
    let dup = json!([{"observation_id": oid(1), "operations": [op]},
                     {"observation_id": oid(1).to_uppercase(), "operations": [op]}]);
    assert_eq!(code(dup), "invalid_group");
    let dup_change = json!([{"observation_id": oid(1), "operations": [{"op": "match", "match": "a", "replace": "b", "change_id": "c"}]},
                            {"observation_id": oid(2), "operations": [{"op": "match", "match": "a", "replace": "b", "change_id": "c"}]}]);
    assert_eq!(code(dup_change), "invalid_operation");
    assert_eq!(
        code(json!([{"observation_id": oid(1), "operations": []}])),
        "empty_operations"
    );
    assert_eq!(
        code(json!([{"observation_id": oid(1), "operations": [op], "x": 1}])),
        "invalid_group"
    );
    // The bundle: missing, malformed, other; a batch without request key.
    let mut args = fx.batch(groups.clone());
    args["observation_bundle_id"] = Value::Null;
    let (_, a) = fx.judge(&args, &rows);
    assert_rejected(
        &a,
        "context_missing",
        "PROTOCOL_VALIDATION",
        "OBSERVATION_REQUIRED",
    );
    args["observation_bundle_id"] = json!("bundle");
    let (_, a) = fx.judge(&args, &rows);
    assert_rejected(
        &a,
        "context_invalid",
        "PROTOCOL_VALIDATION",
        "INVALID_OBSERVATION_ID",
    );
    args["observation_bundle_id"] = json!(OTHER_BUNDLE);
    let (_, a) = fx.judge(&args, &rows);
    assert_rejected(
        &a,
        "context_invalid",
        "PROTOCOL_VALIDATION",
        "OBSERVATION_BUNDLE_MISMATCH",
    );
    assert_eq!(diag(&a)["group_index"], 1);
    let mut args = fx.batch(groups.clone());
    args.as_object_mut().unwrap().remove("client_request_id");
    let (_, a) = fx.judge(&args, &rows);
    assert_rejected(
        &a,
        "context_missing",
        "PROTOCOL_VALIDATION",
        "CLIENT_REQUEST_ID_REQUIRED",
    );
    // A stale third group names itself.
    let mut stale = rows.clone();
    stale[1].target_version = 0;
    let (_, a) = fx.judge(&fx.batch(groups.clone()), &stale);
    assert_rejected(
        &a,
        "target_version_mismatch",
        "PRECONDITION_GUARD",
        "STALE_OBSERVATION_VERSION",
    );
    assert_eq!(diag(&a)["group_index"], 3);
    // Overlapping scopes (never issued by one bundle) and a scope whose hash is wrong.
    let mut overlap = rows.clone();
    overlap[1].scope_start = rows[0].scope_end - 2;
    overlap[1].observed_scope_hash = sha256_hex(slice_chars(
        DOC,
        overlap[1].scope_start,
        overlap[1].scope_end,
    ));
    let (_, a) = fx.judge(&fx.batch(groups.clone()), &overlap);
    assert_rejected(
        &a,
        "context_invalid",
        "PRECONDITION_GUARD",
        "OBSERVED_SCOPES_OVERLAP",
    );
    let mut wrong = rows.clone();
    wrong[2].observed_scope_hash = "0".repeat(64);
    let (_, a) = fx.judge(&fx.batch(groups.clone()), &wrong);
    assert_rejected(
        &a,
        "context_invalid",
        "PRECONDITION_GUARD",
        "OBSERVED_SCOPE_MISMATCH",
    );
    assert_eq!(diag(&a)["group_index"], 1);

    // The third group fails: nothing applies, and the failure is scope-local.
    let mut bad = groups.clone();
    bad[2]["operations"][1]["start"] = json!(0);
    bad[2]["operations"][1]["end"] = json!(0);
    let (sub, a) = fx.judge(&fx.batch(bad), &rows);
    assert_rejected(
        &a,
        "span_out_of_bounds",
        "TRANSACTION_APPLICABILITY",
        "OPERATION_OUTSIDE_OBSERVED_SCOPE",
    );
    let d = diag(&a);
    assert_eq!(
        (&d["group_index"], &d["span_basis"]),
        (&json!(3), &json!("scope_local"))
    );
    assert_eq!(d["scope_start"], rows[1].scope_start);
    assert_eq!(a.failed_change_id.as_deref(), Some("chg_005"));
    let fc = &d["failure_context"];
    assert_eq!(fc["buffer_stage"], "intermediate_buffer");
    assert_eq!(fc["prior_changes"], 1);
    let beta = slice_chars(DOC, rows[1].scope_start, rows[1].scope_end);
    assert_eq!(
        fc["text"],
        beta.replace("greeting + \"hello\"", "greeting + \"bye\"")
    );
    let v = scoped::respond(&a, &sub, LOG, &fx.view(), None, &rows);
    assert_eq!(v["code"], "OPERATION_OUTSIDE_OBSERVED_SCOPE");
    assert_eq!(v["observation_bundle_id"], BUNDLE);
    assert_eq!(v.get("groups"), None);
}

/// "Single and batch fields are mutually exclusive": an invalid_argument with no row; the
/// record is the identity (a changed observation changes the fingerprint).
#[test]
fn forms_and_records() {
    let fx = Fx::new(DOC);
    let mut args = fx.single(
        &oid(1),
        json!([{"op": "match", "match": "a", "replace": "b"}]),
    );
    args["groups"] = json!([]);
    let e = parse_submit_observed_operations(&args.to_string()).unwrap_err();
    assert_eq!(e.code, "observed_form_conflict");
    assert_eq!(e.to_json("t")["status"], "invalid_argument");
    args.as_object_mut().unwrap().remove("groups");
    args["observation_bundle_id"] = Value::Null;
    assert_eq!(
        parse_submit_observed_operations(&args.to_string())
            .unwrap_err()
            .code,
        "observed_form_conflict"
    );
    args.as_object_mut()
        .unwrap()
        .remove("observation_bundle_id");
    let sub = parse_submit_observed_operations(&args.to_string()).unwrap();
    assert_eq!(
        &*sub.pdcp_content,
        &format!(
            r#"{{"intent":"edit","observation_id":"{}","operations":[{{"match":"a","op":"match","replace":"b"}}],"protocol_version":"patchdiff-tx/2"}}"#,
            oid(1)
        )
    );
    let other = parse_submit_observed_operations(
        &fx.single(&oid(2), args["operations"].clone()).to_string(),
    )
    .unwrap();
    let fp = |s: &Submission| submit::prepare(s, &Parent::NotLookedUp).fingerprint;
    assert_ne!(fp(&sub), fp(&other));
    for (drop, missing) in [("operations", "operations"), ("intent", "intent")] {
        let mut a = args.clone();
        a.as_object_mut().unwrap().remove(drop);
        let e = parse_submit_observed_operations(&a.to_string()).unwrap_err();
        assert_eq!(
            (e.code, &e.extra["missing_arguments"]),
            ("missing_argument", &json!([missing]))
        );
    }
    let (groups, _) = three_groups(&fx);
    let sub = parse_submit_observed_operations(&fx.batch(groups).to_string()).unwrap();
    let record: Value = serde_json::from_str(&sub.pdcp_content).unwrap();
    let keys: Vec<&String> = record.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "groups",
            "intent",
            "observation_bundle_id",
            "protocol_version"
        ]
    );
    assert_eq!(record["protocol_version"], BATCH_PROTOCOL);
}

/// "When PATCHDIFF_STRICT_OBSERVATION_MODE=1 is enabled, all unobserved write tools ... are
/// rejected and logged with code: OBSERVATION_REQUIRED."
#[test]
fn strict_mode_rejects_unobserved_writes() {
    let fx = Fx::new(DOC);
    let args = json!({"target_file_id": T, "intent": "i", "edits": [{"match": "alpha", "replace": "a"}],
                      "expected_target_version": VERSION});
    let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let a = scoped::observation_required(&sub, &id, &fx.view());
    assert_rejected(
        &a,
        "context_missing",
        "PROTOCOL_VALIDATION",
        "OBSERVATION_REQUIRED",
    );
    assert!(
        a.failure_detail
            .as_deref()
            .unwrap()
            .contains("patchdiff_submit_observed_operations")
    );
    let mut r = submit::response(&a, &sub, LOG, &fx.view(), None);
    scoped::add_code(&mut r);
    assert_eq!(r.to_value()["code"], "OBSERVATION_REQUIRED");
}

fn replay_one(
    fx: &Fx,
    a: &Attempt,
    links: &[LinkedObservation],
    cycle: &str,
) -> Result<String, (String, Value)> {
    let mut r = Replay::start(T, VERSION, &fx.hash, fx.text.clone()).unwrap();
    r.step(&Accepted {
        editing_cycle_id: cycle,
        observations: links,
        ..Accepted::of(a, 9, LOG)
    })
    .map_err(|f| (f.reason.as_str().to_owned(), f.diagnostic))?;
    Ok(r.content().to_owned())
}

/// The rows as the extension links them after the acceptance: consumed by this log, with the
/// consumption's group_index.
fn linked(a: &Attempt, rows: &[ObservationRow]) -> Vec<LinkedObservation> {
    a.observations
        .iter()
        .map(|l| LinkedObservation {
            row: ObservationRow {
                consumed_by_pdcp_log_id: Some(LOG.into()),
                ..rows
                    .iter()
                    .find(|r| r.observation_id == l.observation_id)
                    .unwrap()
                    .clone()
            },
            group_index: l.group_index,
        })
        .collect()
}

/// "replay requires every exact authoritative link, scope hash, bundle and ordered group
/// mapping without invoking Waymark"; "missing or altered evidence fails with
/// replay_protocol_invalid".
#[test]
fn replay_requires_exact_observation_evidence() {
    let fx = Fx::new(DOC);
    let (groups, rows) = three_groups(&fx);
    let (_, a) = fx.judge(&fx.batch(groups), &rows);
    let out = accepted(&a).to_owned();
    let links = linked(&a, &rows);
    assert_eq!(replay_one(&fx, &a, &links, CYCLE), Ok(out));

    let invalid = |links: &[LinkedObservation], cycle: &str, check: &str| {
        let (reason, d) = replay_one(&fx, &a, links, cycle).unwrap_err();
        assert_eq!(reason, "replay_protocol_invalid", "{check}");
        assert_eq!(d["check"], check);
    };
    invalid(&links[..2], CYCLE, "linked_observations");
    invalid(&[], CYCLE, "linked_observations");
    invalid(&links, OLD_CYCLE, "editing_cycle_id");
    let alter = |i: usize, f: &dyn Fn(&mut LinkedObservation)| {
        let mut l = links.clone();
        f(&mut l[i]);
        l
    };
    invalid(
        &alter(0, &|l| l.row.consumed_by_pdcp_log_id = None),
        CYCLE,
        "consumed_by_pdcp_log_id",
    );
    invalid(
        &alter(1, &|l| {
            l.row.consumed_by_pdcp_log_id = Some(OTHER_TARGET.into())
        }),
        CYCLE,
        "consumed_by_pdcp_log_id",
    );
    invalid(
        &alter(2, &|l| l.row.editing_cycle_id = OLD_CYCLE.into()),
        CYCLE,
        "editing_cycle_id",
    );
    invalid(
        &alter(0, &|l| l.row.target_file_id = OTHER_TARGET.into()),
        CYCLE,
        "target_file_id",
    );
    invalid(
        &alter(0, &|l| l.row.target_version = 0),
        CYCLE,
        "target_version",
    );
    invalid(
        &alter(0, &|l| l.row.target_current_hash = "0".repeat(64)),
        CYCLE,
        "target_current_hash",
    );
    invalid(
        &alter(1, &|l| l.row.observed_scope_hash = "0".repeat(64)),
        CYCLE,
        "observed_scope_hash",
    );
    invalid(
        &alter(1, &|l| l.row.scope_end += 1),
        CYCLE,
        "observed_scope_hash",
    );
    invalid(
        &alter(1, &|l| l.row.scope_end = 100_000),
        CYCLE,
        "scope_bounds",
    );
    invalid(
        &alter(2, &|l| {
            l.row.observation_bundle_id = Some(OTHER_BUNDLE.into())
        }),
        CYCLE,
        "observation_bundle_id",
    );
    invalid(
        &alter(2, &|l| l.row.observation_bundle_id = None),
        CYCLE,
        "observation_bundle_id",
    );
    // Swapped group order: groups 1 and 2 linked the other way round.
    let mut swapped = links.clone();
    swapped[0].group_index = Some(2);
    swapped[1].group_index = Some(1);
    invalid(&swapped, CYCLE, "group_mapping");
    let mut twice = links.clone();
    twice[2].group_index = Some(1);
    invalid(&twice, CYCLE, "group_index");

    // The single form replays through the same confined path, with its one row.
    let row = fx.row(7, func_scope(DOC, "gamma"));
    let ops = json!([{"op": "match", "match": "hello", "replace": "HELLO"},
                     {"op": "span", "start": row.scope_start + 3, "end": row.scope_start + 3,
                      "expected_text": "", "replace": "_x", "expected_before": "f", "expected_after": " "}]);
    let (_, s) = fx.judge(&fx.single(&oid(7), ops), std::slice::from_ref(&row));
    let out = accepted(&s).to_owned();
    assert_eq!(s.runtime_version, tx2::RUNTIME_SPAN_CONTEXT);
    let links = linked(&s, std::slice::from_ref(&row));
    assert_eq!(replay_one(&fx, &s, &links, CYCLE), Ok(out));
    let (reason, d) = replay_one(&fx, &s, &[], CYCLE).unwrap_err();
    assert_eq!(
        (reason.as_str(), &d["check"]),
        ("replay_protocol_invalid", &json!("linked_observations"))
    );
    let two = [links[0].clone(), links[0].clone()];
    assert_eq!(
        replay_one(&fx, &s, &two, CYCLE).unwrap_err().0,
        "replay_protocol_invalid"
    );
    let mut g = links.clone();
    g[0].group_index = Some(1);
    assert_eq!(
        replay_one(&fx, &s, &g, CYCLE).unwrap_err().1["check"],
        "observation_id"
    );
    let mut h = links.clone();
    h[0].row.observed_scope_hash = "f".repeat(64);
    assert_eq!(
        replay_one(&fx, &s, &h, CYCLE).unwrap_err().1["check"],
        "observed_scope_hash"
    );

    // Observations linked to an unobserved record are not evidence of anything.
    let plain = json!({"target_file_id": T, "intent": "i", "operations": [{"op": "match", "match": "alpha", "replace": "a"}],
                       "expected_target_version": VERSION});
    let sub = submit::parse_submit_operations(&plain.to_string()).unwrap();
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let p = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &fx.view());
    assert!(replay_one(&fx, &p, &[], CYCLE).is_ok());
    assert_eq!(
        replay_one(&fx, &p, &links, CYCLE).unwrap_err().0,
        "replay_protocol_invalid"
    );
}

/// Small alphabets make repeated text likely.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just('a'), Just('b'), Just('🌍'), Just('\n'), Just('中')],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn replacement() -> impl Strategy<Value = String> {
    proptest::collection::vec(prop_oneof![Just('x'), Just('🌍'), Just('\n')], 0..4)
        .prop_map(|v| v.into_iter().collect())
}

/// Descending, gapped operations inside `[s, e)`: spans, and insertions with one-code-point
/// guards when strictly inside.
fn ops_inside(chars: &[char], s: usize, e: usize, cuts: &[usize], reps: &[String]) -> Value {
    let mut points: Vec<usize> = cuts.iter().map(|c| s + c % (e - s + 1)).collect();
    points.sort();
    points.dedup();
    let mut ops = Vec::new();
    for (k, pair) in points.chunks(2).enumerate() {
        let replace = &reps[k % reps.len()];
        let a = pair[0];
        let b = pair.get(1).copied().unwrap_or(a);
        if a == b || (k % 3 == 2 && a > s && a < e) {
            if a > s && a < e {
                ops.push(json!({"op": "span", "start": a, "end": a, "expected_text": "", "replace": format!("{replace}i"),
                                "expected_before": chars[a - 1].to_string(), "expected_after": chars[a].to_string()}));
            }
        } else {
            let t: String = chars[a..b].iter().collect();
            ops.push(
                json!({"op": "span", "start": a, "end": b, "expected_text": t, "replace": replace}),
            );
        }
    }
    ops.reverse();
    for (i, op) in ops.iter_mut().enumerate() {
        op["change_id"] = json!(format!("c{i}"));
    }
    Value::Array(ops)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Property: single-form acceptance equals applying the same operations with tx/2 to the
    /// whole text when they lie inside the scope (content and facts), and the text outside the
    /// scope never changes.
    #[test]
    fn single_form_equals_tx2_inside_the_scope(
        doc in text(48),
        a in 0usize..64,
        b in 0usize..64,
        cuts in proptest::collection::vec(0usize..64, 0..8),
        reps in proptest::collection::vec(replacement(), 1..4),
    ) {
        let fx = Fx::new(&doc);
        let chars: Vec<char> = doc.chars().collect();
        let n = chars.len();
        let s = a % (n + 1);
        let e = s + b % (n - s + 1);
        let ops = ops_inside(&chars, s, e, &cuts, &reps);
        prop_assume!(!ops.as_array().unwrap().is_empty());
        let row = fx.row(1, (s, e));
        let (_, got) = fx.judge(&fx.single(&oid(1), ops.clone()), std::slice::from_ref(&row));
        let rt = tx2::runtime_for(Some(&ops));
        let (_, parsed) = tx2::parse(Some(&json!("i")), Some(&ops), rt).unwrap();
        let want = tx2::apply(&fx.view(), &parsed).unwrap();
        prop_assert_eq!(got.status.as_str(), "accepted", "{:?}", got.failure_detail);
        let out = got.new_content.as_deref().unwrap();
        prop_assert_eq!(out, want.content.as_str());
        prop_assert_eq!(&got.changes, &want.changes);
        let out_chars: Vec<char> = out.chars().collect();
        prop_assert_eq!(&out_chars[..s], &chars[..s]);
        prop_assert_eq!(&out_chars[out_chars.len() - (n - e)..], &chars[e..]);
    }

    /// Property: a single replacement span anywhere, its text exact, is accepted exactly when it
    /// lies inside the scope (then as tx/2 applies it); outside it is refused
    /// OPERATION_OUTSIDE_OBSERVED_SCOPE.
    #[test]
    fn spans_are_accepted_exactly_inside_the_scope(
        doc in text(40),
        a in 0usize..64, b in 0usize..64, x in 0usize..64, y in 1usize..64,
        rep in replacement(),
    ) {
        let fx = Fx::new(&doc);
        let chars: Vec<char> = doc.chars().collect();
        let n = chars.len();
        prop_assume!(n > 0);
        let s = a % (n + 1);
        let e = s + b % (n - s + 1);
        let x = x % n;
        let y = x + 1 + (y - 1) % (n - x);
        let t: String = chars[x..y].iter().collect();
        let ops = json!([{"op": "span", "start": x, "end": y, "expected_text": t, "replace": rep}]);
        let (_, got) = fx.judge(&fx.single(&oid(1), ops.clone()), &[fx.row(1, (s, e))]);
        if s <= x && y <= e {
            let (_, parsed) = tx2::parse(Some(&json!("i")), Some(&ops), tx2::RUNTIME).unwrap();
            let want = tx2::apply(&fx.view(), &parsed).unwrap();
            prop_assert_eq!(got.new_content, Some(want.content));
        } else {
            prop_assert_eq!(got.failure_reason.map(|r| r.as_str()), Some("span_out_of_bounds"));
            prop_assert_eq!(&got.diagnostic.as_ref().unwrap()["code"], "OPERATION_OUTSIDE_OBSERVED_SCOPE");
        }
    }
}

/// "warnings as the sequential engine produces them; the no-op transaction warning judged on
/// the whole text": batch warnings carry their batch-wide change_index and group_index.
#[test]
fn batch_warnings_count_across_the_batch() {
    let fx = Fx::new(DOC);
    let (_, rows) = three_groups(&fx);
    let groups = json!([
        {"observation_id": oid(1), "operations": [{"op": "match", "match": "alpha", "replace": "A"}]},
        {"observation_id": oid(2), "operations": [{"op": "match", "match": "beta", "replace": "beta"}]},
    ]);
    let (_, a) = fx.judge(&fx.batch(groups), &rows);
    accepted(&a);
    let ws: Vec<Value> = a.warnings.iter().map(|w| w.to_json()).collect();
    assert_eq!(ws.len(), 1, "{ws:?}");
    assert_eq!(ws[0]["code"], "no_op_change");
    assert_eq!(
        (&ws[0]["change_index"], &ws[0]["group_index"]),
        (&json!(2), &json!(2))
    );
    // Every group a no-op: one no_op_transaction for the whole text.
    let groups = json!([
        {"observation_id": oid(1), "operations": [{"op": "match", "match": "alpha", "replace": "alpha"}]},
        {"observation_id": oid(2), "operations": [{"op": "match", "match": "beta", "replace": "beta"}]},
    ]);
    let (_, a) = fx.judge(&fx.batch(groups), &rows);
    let codes: Vec<&str> = a.warnings.iter().map(|w| w.code).collect();
    assert_eq!(codes, ["no_op_change", "no_op_change", "no_op_transaction"]);
    assert_eq!(accepted(&a), DOC);
}

/// requested_observations: canonical, deduplicated, valid UUIDs only.
#[test]
fn requested_observations_are_canonical() {
    let fx = Fx::new(DOC);
    let op = json!({"op": "match", "match": "a", "replace": "b"});
    let groups = json!([
        {"observation_id": oid(1).to_uppercase(), "operations": [op]},
        {"observation_id": "junk", "operations": [op]},
        {"observation_id": oid(1), "operations": [op]},
        {"observation_id": oid(2), "operations": [op]},
    ]);
    let sub = parse_submit_observed_operations(&fx.batch(groups).to_string()).unwrap();
    assert_eq!(scoped::requested_observations(&sub), [oid(1), oid(2)]);
    let sub = parse_submit_observed_operations(&fx.single("x", json!([op])).to_string()).unwrap();
    assert!(scoped::requested_observations(&sub).is_empty());
}

/// A fresh single-form rejection's answer, near misses included, as drive::run builds it.
fn fresh_answer(fx: &Fx, sub: &Submission, a: &Attempt, rows: &[ObservationRow]) -> Value {
    let mut v = scoped::response(a, sub, LOG, &fx.view(), None, rows).to_value();
    submit::add_near_misses(&mut v, a.near_miss_input.as_ref(), false);
    v
}

/// Issue 17 on contract "Exact candidates, consumed matches and near misses" ("Each has
/// absolute start/end in failing-buffer coordinates") in the single observed form, where a
/// match is searched only in the running scope: the near misses are searched in the scope's own
/// text, so a scope that starts past code point 65,536 of the text gets its near miss, in
/// absolute coordinates, and the scanned range is the scope.
#[test]
fn single_form_near_misses_search_a_scope_past_65536() {
    let doc = format!(
        "{}def late():\n    BATCH_SIZE = 64\n    return BATCH_SIZE\n",
        "x = 1\n".repeat(12_000)
    );
    let fx = Fx::new(&doc);
    let (s, e) = (cp(&doc, "def late"), char_len(&doc));
    assert!(s > 65_536);
    let row = fx.row(1, (s, e));
    let ops = json!([{"op": "match", "match": "BATCH_SIZ = 64", "replace": "BATCH_SIZE = 65"}]);
    let (sub, a) = fx.judge(&fx.single(&oid(1), ops), std::slice::from_ref(&row));
    assert_eq!(a.failure_reason.map(|r| r.as_str()), Some("match_absent"));
    let nm = &fresh_answer(&fx, &sub, &a, std::slice::from_ref(&row))["near_misses"];
    let at = cp(&doc, "BATCH_SIZE = 64");
    assert_eq!(
        nm["candidates"][0],
        json!({"start": at, "end": at + 15, "distance": 1, "text": "BATCH_SIZE = 64",
               "context_before": "def late():\n    ", "context_after": "\n    return BATC"}),
        "{nm}"
    );
    assert_eq!(
        (&nm["scanned_start"], &nm["scanned_end"]),
        (&json!(s), &json!(e))
    );
    assert_eq!(
        (&nm["scope_truncated"], &nm["truncated"]),
        (&json!(false), &json!(false))
    );

    // A scope longer than 65,536 code points is scanned over its first 65,536, and says so
    // (clause "scope_truncated is true when that range does not cover the whole failing
    // buffer", the buffer being the scope the match was confined to).
    let row = fx.row(2, (6, e));
    let ops = json!([{"op": "match", "match": "BATCH_SIZ = 64", "replace": "BATCH_SIZE = 65"}]);
    let (sub, a) = fx.judge(&fx.single(&oid(2), ops), std::slice::from_ref(&row));
    let nm = &fresh_answer(&fx, &sub, &a, std::slice::from_ref(&row))["near_misses"];
    assert_eq!(
        (
            &nm["scanned_start"],
            &nm["scanned_end"],
            &nm["scope_truncated"]
        ),
        (&json!(6), &json!(6 + 65_536), &json!(true)),
        "{nm}"
    );
    assert_eq!(nm["candidates"], json!([]));
}

/// Issue 17 ("A suggestion can then lie outside the scope"): text within the distance bound
/// that lies outside the observed scope is never suggested, fresh or on exact recovery; text
/// inside it is.
#[test]
fn single_form_near_misses_never_leave_the_scope() {
    let fx = Fx::new(DOC);
    let gamma = func_scope(DOC, "gamma");
    let row = fx.row(1, gamma);
    let rows = std::slice::from_ref(&row);
    // "return \"hellp" is one substitution from alpha's and gamma's "return \"hello".
    let ops = json!([{"op": "match", "match": "return \"hellp", "replace": "x"}]);
    let (sub, a) = fx.judge(&fx.single(&oid(1), ops), rows);
    assert_eq!(a.failure_reason.map(|r| r.as_str()), Some("match_absent"));
    let v = fresh_answer(&fx, &sub, &a, rows);
    let nm = &v["near_misses"];
    let in_gamma = cp(DOC, "return \"hello\" #");
    let starts: Vec<&Value> = nm["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["start"])
        .collect();
    assert_eq!(starts, [&json!(in_gamma)], "{nm}");
    assert_eq!(
        (&nm["scanned_start"], &nm["scanned_end"]),
        (&json!(gamma.0), &json!(gamma.1))
    );

    // Exact recovery searches the stored failure context (the whole text's prefix here), but
    // only where it overlaps the scope.
    let stored = AttemptRow::of(&a, LOG);
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let KeyOutcome::Recovered(r) =
        submit::recover_or_conflict(&sub, &id, &stored, &fx.view(), None)
    else {
        panic!("not recovered")
    };
    let mut r = r.to_value();
    submit::add_near_misses(&mut r, None, false);
    let nm = &r["near_misses"];
    assert_eq!(nm["scan_source"], "stored_failure_context", "{nm}");
    assert_eq!(nm["candidates"][0]["start"], json!(in_gamma), "{nm}");
    assert_eq!(nm["candidates"].as_array().unwrap().len(), 1, "{nm}");
    assert_eq!(
        (&nm["scanned_start"], &nm["scanned_end"]),
        (&json!(gamma.0), &json!(gamma.1))
    );

    // Outside the scope only: nothing is suggested, and the hint says so.
    let beta = func_scope(DOC, "beta");
    let row = fx.row(2, beta);
    let ops = json!([{"op": "match", "match": "return \"hellp", "replace": "x"}]);
    let (sub, a) = fx.judge(&fx.single(&oid(2), ops), std::slice::from_ref(&row));
    let nm = &fresh_answer(&fx, &sub, &a, std::slice::from_ref(&row))["near_misses"];
    assert_eq!(nm["candidates"], json!([]), "{nm}");
    assert!(nm["hint"].is_string());
}

/// Issue 17, the running scope: after an earlier change of the same transaction the scope's end
/// has moved, and the fresh search covers the scope as it now runs. Exact recovery cannot know
/// how far it moved (the stored row does not record it) and answers
/// historical_context_unavailable rather than risk a suggestion outside the scope (contract
/// "historical outcomes without stored inputs return historical_context_unavailable").
#[test]
fn single_form_near_misses_follow_the_running_scope() {
    let fx = Fx::new(DOC);
    let gamma = func_scope(DOC, "gamma");
    let row = fx.row(1, gamma);
    let rows = std::slice::from_ref(&row);
    let ops = json!([
        {"op": "match", "match": "\"hello\" #", "replace": "\"hello there\" #"},
        {"op": "match", "match": "return \"hellp", "replace": "x"},
    ]);
    let (sub, a) = fx.judge(&fx.single(&oid(1), ops), rows);
    assert_eq!(a.failure_reason.map(|r| r.as_str()), Some("match_absent"));
    let nm = &fresh_answer(&fx, &sub, &a, rows)["near_misses"];
    assert_eq!(
        (&nm["scanned_start"], &nm["scanned_end"]),
        (&json!(gamma.0), &json!(gamma.1 + 6)),
        "{nm}"
    );
    assert_eq!(
        nm["candidates"][0]["start"],
        json!(cp(DOC, "return \"hello\" #"))
    );
    assert_eq!(nm["candidates"].as_array().unwrap().len(), 1, "{nm}");

    let stored = AttemptRow::of(&a, LOG);
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let KeyOutcome::Recovered(r) =
        submit::recover_or_conflict(&sub, &id, &stored, &fx.view(), None)
    else {
        panic!("not recovered")
    };
    let mut r = r.to_value();
    submit::add_near_misses(&mut r, None, false);
    assert_eq!(
        r["near_misses"],
        json!({"omission_reason": "historical_context_unavailable"})
    );
}
