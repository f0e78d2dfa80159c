//! `patchdiff_preview`: read-only, advisory evaluation of a proposal in an explicit format,
//! with bounded evidence (contract "patchdiff_preview").
//!
//! The verdict comes from [`submit::judge`], the evaluator submission uses, on one observation
//! of the target. Nothing is written, no lock is taken and no request key, lineage or
//! correlation option exists. The answer is then bounded to 32,768 bytes of compact ASCII JSON
//! by [`bound`], which records every omission in `evidence_omissions`.

use crate::contract::args::{ArgError, Args, target_too_large};
use crate::contract::json::{ascii_len, type_name};
use crate::contract::limits::*;
use crate::contract::words::Status;
use crate::evidence::rejection::{current_context, validity};
use crate::format::common::ChangeFact;
use crate::format::protocol::Protocol;
use crate::format::{tx1, tx2, tx3};
use crate::submission::submit::{self, Parent, Submission};
use crate::target::TargetView;
use crate::text::warnings;
use crate::text::{char_len, head_chars};
use serde_json::{Map, Value, json};

pub const PREVIEW_ARGS: &[&str] = &[
    "target_file_id",
    "format",
    "expected_target_version",
    "expected_current_hash",
    "intent",
    "edits",
    "operations",
    "replacement",
];
pub const PREVIEW_REQUIRED: &[&str] = &["target_file_id", "format"];

/// Each format and the argument that carries its proposal.
pub const FORMATS: &[(&str, &str)] = &[
    (tx1::PROTOCOL, "edits"),
    (tx2::PROTOCOL, "operations"),
    (tx3::PROTOCOL, "replacement"),
];

/// Diagnostic members that are not evidence: kept whatever the budget.
const DIAGNOSTIC_CORE: &[&str] = &[
    "format",
    "code",
    "retryable",
    "requires_new_submission",
    "validation_stage",
];

/// What the whole-payload budget omits, in the contract's order, before dropping trailing facts.
/// (An invalid-target echo is never among them: it is at most 256 bytes, or already null with
/// `target_file_id_omitted`, `crate::submission::identity`.)
pub const PAYLOAD_OMISSION_ORDER: &[&str] = &[
    "near_misses",
    "warning_details",
    "warnings",
    "diagnostic",
    "failure_detail",
    "failed_change_id",
    "current_context",
];

/// Parses preview arguments into the same [`Submission`] a submission tool would build, without
/// key, lineage, source or correlation (those names are unknown arguments here).
pub fn parse_preview(text: &str) -> Result<Submission, ArgError> {
    let mut a = Args::parse(text, PREVIEW_ARGS, PREVIEW_REQUIRED)?;
    // The target ID is checked in `envelope`, after the format: a malformed one is answered as
    // a rejected preview of that format (`crate::submission::identity`).
    let allowed: Vec<&str> = FORMATS.iter().map(|f| f.0).collect();
    let (protocol, field) = match a.get("format") {
        Some(Value::String(s)) => FORMATS.iter().find(|f| f.0 == s).copied(),
        _ => None,
    }
    .ok_or_else(|| {
        let got = match a.get("format") {
            Some(Value::String(s)) => format!("{s:?}"),
            Some(v) => type_name(v).to_owned(),
            None => "nothing".to_owned(),
        };
        ArgError::new(
            "invalid_format",
            format!("format must be one of {}, not {got}", allowed.join(", ")),
        )
        .with("allowed_formats", json!(allowed))
    })?;
    // Fields of another format reject even when explicitly null.
    for (other, f) in FORMATS {
        if *f != field && a.has(f) {
            return Err(ArgError::new(
                "field_not_in_format",
                format!("{f} belongs to format {other}, not {protocol}"),
            )
            .with("field", json!(f))
            .with("format", json!(protocol)));
        }
    }
    let record = submit::record_of(&mut a, protocol, field);
    let runtime = match Protocol::parse(protocol) {
        Some(Protocol::Tx2) => tx2::runtime_for(record.get("operations")),
        Some(Protocol::Tx3) => tx3::RUNTIME,
        _ => tx1::RUNTIME,
    };
    submit::envelope(&a, record, protocol, runtime)
}

/// A preview's own `invalid_argument` answer: `code` with both `detail` and `failure_detail`.
pub fn invalid_argument(code: &str, detail: &str, extra: &Map<String, Value>) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!(Status::InvalidArgument.as_str()));
    m.insert("code".into(), json!(code));
    m.insert("detail".into(), json!(detail));
    m.insert("failure_detail".into(), json!(detail));
    for (k, v) in extra {
        m.insert(k.clone(), v.clone());
    }
    fit_argument_error(m)
}

/// "patchdiff_preview": the complete payload is at most 32,768 bytes, argument errors included.
/// Quoted names go first (the list is marked truncated), then the quoted detail is shortened.
fn fit_argument_error(mut m: Map<String, Value>) -> Value {
    let fits = |m: &Map<String, Value>| ascii_len(&Value::Object(m.clone())) <= PREVIEW_MAX_BYTES;
    while !fits(&m) {
        match m.get_mut("unknown_arguments").and_then(Value::as_array_mut) {
            Some(names) if !names.is_empty() => {
                names.pop();
                m.insert("unknown_arguments_truncated".into(), json!(true));
            }
            _ => break,
        }
    }
    if !fits(&m) {
        for k in ["detail", "failure_detail"] {
            if let Some(Value::String(s)) = m.get_mut(k) {
                let cut = head_chars(s, 256).len();
                s.truncate(cut);
                s.push_str("... (truncated)");
            }
        }
    }
    Value::Object(m)
}

pub fn arg_error(e: &ArgError) -> Value {
    let mut extra = e.extra.clone();
    if matches!(e.code, "unknown_argument" | "missing_argument") {
        let mut with_tool = Map::new();
        with_tool.insert("tool".into(), json!("patchdiff_preview"));
        with_tool.append(&mut extra);
        extra = with_tool;
    }
    invalid_argument(e.code, &e.detail, &extra)
}

/// Evaluates `sub` against one observation `start` and answers within the preview budgets.
pub fn preview(sub: &Submission, start: &TargetView) -> Value {
    preview_within(
        sub,
        start,
        crate::contract::limits::TARGET_MAX_BYTES_DEFAULT,
    )
}

/// [`preview`] under `patchdiff.max_target_bytes` = `max_target_bytes`: a proposal whose
/// acceptance a submission would refuse as `target_too_large` is refused alike.
pub fn preview_within(sub: &Submission, start: &TargetView, max_target_bytes: usize) -> Value {
    // A valid oversized replacement: the same no-attempt classification as submission.
    if let Some(Value::Object(mut m)) = submit::admission(sub, None) {
        let d = m.remove("diagnostic").unwrap_or(Value::Null);
        let detail = m["failure_detail"].as_str().unwrap_or_default().to_owned();
        let mut extra = Map::new();
        extra.insert("target_file_id".into(), json!(sub.target_file_id));
        extra.insert("diagnostic".into(), d);
        return invalid_argument("replacement_too_large", &detail, &extra);
    }
    let verdict = submit::judge(sub, &Parent::NotLookedUp, start, None);
    if let Ok(applied) = &verdict
        && let Some(e) =
            target_too_large(applied.content.len(), start.content.len(), max_target_bytes)
    {
        let mut extra = e.extra;
        extra.insert("target_file_id".into(), json!(sub.target_file_id));
        return invalid_argument(e.code, &e.detail, &extra);
    }
    let mut near_miss_input = None;
    let mut m = Map::new();
    m.insert("preview".into(), json!(true));
    m.insert("advisory".into(), json!(true));
    let accepted = verdict.is_ok();
    m.insert(
        "status".into(),
        json!(
            if accepted {
                Status::Accepted
            } else {
                Status::Rejected
            }
            .as_str()
        ),
    );
    let (stage, valid) = match &verdict {
        Ok(_) => ("accepted", validity(true, true)),
        Err(r) => (r.stage.diagnostic(), r.stage.validity()),
    };
    m.insert("stage".into(), json!(stage));
    m.insert("validity".into(), valid);
    m.insert("target_file_id".into(), json!(sub.target_file_id));
    m.insert("format".into(), json!(sub.protocol_version));
    m.insert("runtime_version".into(), json!(sub.runtime_version));
    m.insert("current_version".into(), json!(start.version));
    m.insert("current_hash".into(), json!(start.current_hash));
    m.insert("before_version".into(), json!(start.version));
    m.insert("before_hash".into(), json!(start.current_hash));
    match verdict {
        Ok(applied) => {
            m.insert("after_hash".into(), json!(applied.content_sha256()));
            let facts: Vec<Value> = applied.changes.iter().map(ChangeFact::to_json).collect();
            m.insert("total_change_count".into(), json!(facts.len()));
            m.insert("returned_fact_count".into(), json!(facts.len()));
            m.insert("change_facts_truncated".into(), json!(false));
            m.insert("change_facts_omission_reason".into(), Value::Null);
            m.insert("change_facts".into(), Value::Array(facts));
            for (k, v) in warnings::response_fields(&applied.warnings) {
                m.insert(k.into(), v);
            }
        }
        Err(r) => {
            m.insert("after_hash".into(), Value::Null);
            m.insert("failure_reason".into(), json!(r.reason.as_str()));
            m.insert("failure_detail".into(), json!(r.detail));
            m.insert("failed_change_id".into(), json!(r.failed_change_id));
            let d = r.diagnostic(sub.protocol_version, start);
            let cc = current_context(start);
            m.insert("diagnostic".into(), d);
            m.insert("current_context".into(), cc);
            near_miss_input = r.near_miss_input;
        }
    }
    m.insert("evidence_omissions".into(), json!([]));
    let mut v = Value::Object(m);
    // The same near misses a submission would return; preview holds no lock to keep.
    submit::add_near_misses(&mut v, near_miss_input.as_ref(), false);
    bound(v)
}

fn omission(field: &str, reason: &str) -> Value {
    json!({ "field": field, "reason": reason })
}

/// Applies the preview budgets to an unbounded answer, in order: the accepted-fact prefix, the
/// per-field text limits, the diagnostic wrapper, then the whole payload. Verdict, stage,
/// validity, target ID, observed version/hash and `after_hash` are never touched.
pub fn bound(mut v: Value) -> Value {
    let mut omitted: Vec<Value> = Vec::new();
    let Some(m) = v.as_object_mut() else {
        return v;
    };
    // 1. Accepted evidence: a prefix of at most 32 whole facts, each at most 2,048 bytes, at
    //    most 16,384 bytes with the change_facts wrapper.
    if let Some(Value::Array(facts)) = m.get_mut("change_facts") {
        let mut size = ascii_len(&json!({ "change_facts": [] }));
        let mut keep = 0;
        let mut reason = None;
        for f in facts.iter() {
            let n = ascii_len(f);
            let add = n + usize::from(keep > 0);
            if keep == PREVIEW_FACTS_MAX {
                reason = Some("fact_count_limit");
            } else if n > PREVIEW_FACT_MAX_BYTES {
                reason = Some("fact_byte_limit");
            } else if size + add > PREVIEW_FACTS_MAX_BYTES {
                reason = Some("facts_byte_budget");
            }
            if reason.is_some() {
                break;
            }
            size += add;
            keep += 1;
        }
        if let Some(why) = reason {
            let dropped = facts.len() - keep;
            facts.truncate(keep);
            set_facts(m, why);
            omitted
                .push(json!({ "field": "change_facts", "reason": why, "omitted_facts": dropped }));
        }
    }
    // 2. Textual evidence: at most 1,024 code points and 8,192 wrapper bytes per field. An
    //    identity is omitted whole, never shortened into a different one.
    if let Some(id) = m.get("failed_change_id").and_then(Value::as_str)
        && !text_fits("failed_change_id", id)
    {
        m.insert("failed_change_id".into(), Value::Null);
        omitted.push(omission("failed_change_id", "identity_too_large"));
    }
    for k in [
        "failure_detail",
        "diagnostic",
        "current_context",
        "near_misses",
        "warnings",
        "warning_details",
    ] {
        if let Some(x) = m.get_mut(k) {
            cap_text(x, k, k, &mut omitted);
        }
    }
    // 3. The diagnostic wrapper: at most 16,384 bytes; bounded failure_context is kept if it fits.
    if let Some(d) = m.get_mut("diagnostic").filter(|d| d.is_object()) {
        let fits =
            |d: &Value| ascii_len(&json!({ "diagnostic": d })) <= PREVIEW_DIAGNOSTIC_MAX_BYTES;
        if !fits(d) {
            let o = d.as_object_mut().expect("checked");
            let evidence: Vec<String> = o
                .iter()
                .filter(|(k, x)| {
                    !DIAGNOSTIC_CORE.contains(&k.as_str())
                        && *k != "failure_context"
                        && !x.is_null()
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in evidence {
                o.insert(k.clone(), Value::Null);
                omitted.push(omission(
                    &format!("diagnostic.{k}"),
                    "diagnostic_byte_budget",
                ));
            }
            if !fits(d) {
                d["failure_context"] = Value::Null;
                omitted.push(omission(
                    "diagnostic.failure_context",
                    "diagnostic_byte_budget",
                ));
            }
        }
    }
    // 4. The whole payload: omit in the contract's order, then drop trailing whole facts.
    let size = |m: &Map<String, Value>, omitted: &[Value]| {
        let mut n = ascii_len(&Value::Object(m.clone()));
        // evidence_omissions is written last; measure it as it will be.
        n -= ascii_len(m.get("evidence_omissions").unwrap_or(&json!([])));
        n + ascii_len(&json!(omitted))
    };
    for k in PAYLOAD_OMISSION_ORDER {
        if size(m, &omitted) <= PREVIEW_MAX_BYTES {
            break;
        }
        match m.get_mut(*k) {
            Some(Value::Object(d)) if *k == "diagnostic" => {
                let evidence: Vec<String> = d
                    .iter()
                    .filter(|(k, x)| !DIAGNOSTIC_CORE.contains(&k.as_str()) && !x.is_null())
                    .map(|(k, _)| k.clone())
                    .collect();
                for e in evidence {
                    d.insert(e.clone(), Value::Null);
                    omitted.push(omission(&format!("diagnostic.{e}"), "payload_byte_budget"));
                }
            }
            Some(x) if !x.is_null() => {
                *x = Value::Null;
                omitted.push(omission(k, "payload_byte_budget"));
            }
            _ => {}
        }
    }
    let mut dropped = 0usize;
    while size(m, &omitted) > PREVIEW_MAX_BYTES {
        let Some(Value::Array(facts)) = m.get_mut("change_facts") else {
            break;
        };
        if facts.pop().is_none() {
            break;
        }
        dropped += 1;
        set_facts(m, "payload_byte_budget");
        omitted.retain(|o| o["reason"] != "payload_byte_budget" || o["field"] != "change_facts");
        omitted.push(json!({ "field": "change_facts", "reason": "payload_byte_budget", "omitted_facts": dropped }));
    }
    m.insert("evidence_omissions".into(), Value::Array(omitted));
    v
}

fn set_facts(m: &mut Map<String, Value>, reason: &str) {
    let n = m
        .get("change_facts")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    m.insert("returned_fact_count".into(), json!(n));
    m.insert("change_facts_truncated".into(), json!(true));
    m.insert("change_facts_omission_reason".into(), json!(reason));
}

fn text_fits(key: &str, s: &str) -> bool {
    char_len(s) <= PREVIEW_TEXT_MAX_CHARS && ascii_len(&json!({ key: s })) <= PREVIEW_TEXT_MAX_BYTES
}

/// Shortens every string under `v` to the per-field limits, recording each.
fn cap_text(v: &mut Value, key: &str, path: &str, omitted: &mut Vec<Value>) {
    match v {
        Value::String(s) if !text_fits(key, s) => {
            let chars = char_len(s);
            let mut t = head_chars(s, PREVIEW_TEXT_MAX_CHARS).to_owned();
            while !text_fits(key, &t) {
                let n = char_len(&t).saturating_sub(16);
                t = head_chars(&t, n).to_owned();
            }
            omitted.push(
                json!({ "field": path, "reason": "text_field_limit", "original_chars": chars }),
            );
            *s = t;
        }
        Value::Array(a) => {
            for (i, x) in a.iter_mut().enumerate() {
                cap_text(x, key, &format!("{path}[{i}]"), omitted);
            }
        }
        Value::Object(o) => {
            for (k, x) in o.iter_mut() {
                cap_text(x, k, &format!("{path}.{k}"), omitted);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::json::ascii_len;
    use crate::text::sha256_hex;

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "11111111-1111-4111-8111-111111111111",
            version: 4,
            current_hash: "h",
            content,
        }
    }

    fn run(content: &str, args: Value) -> Value {
        let mut a = args;
        a["target_file_id"] = json!("11111111-1111-4111-8111-111111111111");
        match parse_preview(&a.to_string()) {
            Ok(sub) => preview(&sub, &view(content)),
            Err(e) => arg_error(&e),
        }
    }

    /// Contract "patchdiff_preview": format selects the proposal field; fields of another format
    /// reject even when null; no key, lineage, source or correlation option.
    #[test]
    fn format_and_arguments() {
        let r = run(
            "x",
            json!({"format": "patchdiff-tx/1", "expected_target_version": 4, "intent": "i", "edits": [{"match": "x", "replace": "y"}], "operations": null}),
        );
        assert_eq!(
            (&r["status"], &r["code"], &r["field"]),
            (
                &json!("invalid_argument"),
                &json!("field_not_in_format"),
                &json!("operations")
            )
        );
        assert_eq!(r["detail"], r["failure_detail"]);
        let r = run(
            "x",
            json!({"format": "patchdiff-tx/3", "replacement": "y", "edits": null}),
        );
        assert_eq!(r["code"], "field_not_in_format");
        let r = run("x", json!({"format": "patchdiff-tx/9"}));
        assert_eq!(r["code"], "invalid_format");
        assert_eq!(
            r["allowed_formats"],
            json!(["patchdiff-tx/1", "patchdiff-tx/2", "patchdiff-tx/3"])
        );
        for k in [
            "client_request_id",
            "parent_pdcp_log_id",
            "attempt",
            "include_correlation_id",
            "source",
        ] {
            let mut a = json!({"format": "patchdiff-tx/3", "replacement": "y", "expected_target_version": 4});
            a[k] = json!(null);
            let r = run("x", a);
            assert_eq!(
                (&r["code"], &r["unknown_arguments"]),
                (&json!("unknown_argument"), &json!([k]))
            );
            assert_eq!(r["tool"], "patchdiff_preview");
        }
        // A guard is required: the same evaluator rejects at protocol validation.
        let r = run(
            "x",
            json!({"format": "patchdiff-tx/3", "intent": "i", "replacement": "y"}),
        );
        assert_eq!(
            (&r["status"], &r["stage"], &r["failure_reason"]),
            (
                &json!("rejected"),
                &json!("protocol_validation"),
                &json!("context_missing")
            )
        );
        assert_eq!(r["validity"]["protocol_valid"], false);
    }

    /// Accepted previews: identity of the observation, after_hash, facts and warnings; never
    /// the proposed text.
    #[test]
    fn accepted_preview_shape() {
        let r = run(
            "Final text\n",
            json!({"format": "patchdiff-tx/3", "expected_target_version": 4, "intent": "Review", "replacement": "Reviewed text\n"}),
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "preview",
                "advisory",
                "status",
                "stage",
                "validity",
                "target_file_id",
                "format",
                "runtime_version",
                "current_version",
                "current_hash",
                "before_version",
                "before_hash",
                "after_hash",
                "total_change_count",
                "returned_fact_count",
                "change_facts_truncated",
                "change_facts_omission_reason",
                "change_facts",
                "warnings",
                "warning_details",
                "warning_count",
                "warnings_truncated",
                "evidence_omissions"
            ]
        );
        assert_eq!(
            (&r["preview"], &r["advisory"], &r["status"]),
            (&json!(true), &json!(true), &json!("accepted"))
        );
        assert_eq!(r["after_hash"], json!(sha256_hex("Reviewed text\n")));
        assert_eq!(r["change_facts"][0]["operation"], "replace_all");
        assert_eq!(r["runtime_version"], "patchdiff-mvp-0.4.0");
        assert!(!r.to_string().contains("Reviewed text"));
        // Span context selects 0.5.0 exactly as submission does.
        let r = run(
            "ab",
            json!({"format": "patchdiff-tx/2", "expected_target_version": 4, "intent": "i",
            "operations": [{"op": "span", "start": 1, "end": 1, "expected_text": "", "replace": "-", "expected_after": null}]}),
        );
        assert_eq!(
            (&r["status"], &r["runtime_version"]),
            (&json!("accepted"), &json!("patchdiff-mvp-0.5.0"))
        );
        // A stale guard rejects at precondition_guard with bounded diagnostics.
        let r = run(
            "ab",
            json!({"format": "patchdiff-tx/1", "expected_target_version": 3, "intent": "i", "edits": [{"match": "a", "replace": "b"}]}),
        );
        assert_eq!(
            (&r["stage"], &r["failure_reason"]),
            (
                &json!("precondition_guard"),
                &json!("target_version_mismatch")
            )
        );
        // Contract "Bounded rejection context": the service result keeps the full object, even
        // when it repeats diagnostic.failure_context; only the MCP projection collapses it.
        assert_eq!(r["current_context"], r["diagnostic"]["failure_context"]);
        assert_eq!(r["current_context"]["available"], true);
        let mut mcp = r.clone();
        assert!(crate::evidence::rejection::collapse_current_context(
            &mut mcp
        ));
        assert_eq!(
            mcp["current_context"]["unavailable_reason"],
            "same_as_failure_context"
        );
    }

    /// An oversized replacement: invalid_argument / replacement_too_large, as in submission.
    #[test]
    fn oversized_replacement_is_classified() {
        let r = run(
            "x",
            json!({"format": "patchdiff-tx/3", "expected_target_version": 4, "intent": "i", "replacement": "a".repeat(1_000_001)}),
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("invalid_argument"), &json!("replacement_too_large"))
        );
        assert_eq!(r["diagnostic"]["limit_exceeded"], "raw_code_points");
        assert_eq!(r["detail"], r["failure_detail"]);
        let r = run(
            "x",
            json!({"format": "patchdiff-tx/3", "expected_target_version": 4, "intent": "i", "replacement": "a".repeat(1_000_000)}),
        );
        assert_eq!(r["status"], "accepted");
    }

    /// Accepted evidence: a prefix of at most 32 whole facts.
    #[test]
    fn facts_prefix_at_32() {
        for (n, cut) in [(32usize, false), (33, true)] {
            let text = "a".repeat(n);
            let ops: Vec<Value> = (0..n)
                .rev()
                .map(|i| json!({"op": "span", "start": i, "end": i + 1, "expected_text": "a", "replace": "b"}))
                .collect();
            let r = run(
                &text,
                json!({"format": "patchdiff-tx/2", "expected_target_version": 4, "intent": "i", "operations": ops}),
            );
            assert_eq!(r["total_change_count"], n);
            assert_eq!(r["returned_fact_count"], n.min(32));
            assert_eq!(r["change_facts"].as_array().unwrap().len(), n.min(32));
            assert_eq!(r["change_facts_truncated"], cut);
            assert_eq!(r["after_hash"], json!(sha256_hex(&"b".repeat(n))));
            if cut {
                assert_eq!(r["change_facts_omission_reason"], "fact_count_limit");
                assert_eq!(
                    r["evidence_omissions"],
                    json!([{"field": "change_facts", "reason": "fact_count_limit", "omitted_facts": 1}])
                );
            } else {
                assert_eq!(r["change_facts_omission_reason"], Value::Null);
                assert_eq!(r["evidence_omissions"], json!([]));
            }
        }
    }

    fn fact(id: usize, pad: usize) -> Value {
        json!({"change_id": format!("c{id}"), "change_index": id, "pad": "p".repeat(pad)})
    }

    fn accepted(facts: Vec<Value>) -> Map<String, Value> {
        let mut m = Map::new();
        for (k, v) in [
            ("preview", json!(true)),
            ("status", json!("accepted")),
            ("after_hash", json!("h")),
            ("total_change_count", json!(facts.len())),
            ("returned_fact_count", json!(facts.len())),
            ("change_facts_truncated", json!(false)),
            ("change_facts_omission_reason", Value::Null),
            ("change_facts", Value::Array(facts)),
            ("evidence_omissions", json!([])),
        ] {
            m.insert(k.into(), v);
        }
        m
    }

    /// One fact over 2,048 bytes ends the prefix; the facts wrapper stays within 16,384 bytes.
    #[test]
    fn fact_byte_budgets_at_their_edges() {
        // A fact of exactly 2,048 bytes is kept, one of 2,049 ends the prefix there.
        let base = ascii_len(&fact(1, 0));
        let r = bound(Value::Object(accepted(vec![
            fact(1, 2048 - base),
            fact(2, 0),
        ])));
        assert_eq!(r["returned_fact_count"], 2);
        let r = bound(Value::Object(accepted(vec![
            fact(1, 0),
            fact(2, 2049 - base),
            fact(3, 0),
        ])));
        assert_eq!(
            (
                &r["returned_fact_count"],
                &r["change_facts_omission_reason"]
            ),
            (&json!(1), &json!("fact_byte_limit"))
        );
        // Nine facts that fill the wrapper to exactly 16,384 bytes are kept; one byte more cuts
        // the last.
        let wrapper = ascii_len(&json!({"change_facts": []}));
        let per = 1817;
        let last = PREVIEW_FACTS_MAX_BYTES - wrapper - 8 - 8 * per;
        let sized = |i: usize, n: usize| fact(i, n - ascii_len(&fact(i, 0)));
        let mut facts: Vec<Value> = (0..8).map(|i| sized(i, per)).collect();
        facts.push(sized(8, last));
        assert_eq!(
            ascii_len(&json!({"change_facts": facts})),
            PREVIEW_FACTS_MAX_BYTES
        );
        let r = bound(Value::Object(accepted(facts.clone())));
        assert_eq!(
            (&r["returned_fact_count"], &r["change_facts_truncated"]),
            (&json!(9), &json!(false))
        );
        facts[8] = sized(8, last + 1);
        let r = bound(Value::Object(accepted(facts)));
        assert_eq!(
            (
                &r["returned_fact_count"],
                &r["change_facts_omission_reason"]
            ),
            (&json!(8), &json!("facts_byte_budget"))
        );
    }

    /// Textual evidence is shortened to 1,024 code points; an oversized identity is omitted.
    #[test]
    fn text_fields_are_bounded() {
        let mut m = accepted(vec![]);
        m.insert("failure_detail".into(), json!("d".repeat(1024)));
        m.insert("failed_change_id".into(), json!("i".repeat(1025)));
        m.insert(
            "diagnostic".into(),
            json!({"format": "f", "x": "🌍".repeat(1025)}),
        );
        let r = bound(Value::Object(m));
        assert_eq!(r["failure_detail"], json!("d".repeat(1024)));
        assert_eq!(r["failed_change_id"], Value::Null);
        // 1,024 astral characters escape to 12 bytes each: over 8,192 wrapper bytes, so shorter.
        let x = r["diagnostic"]["x"].as_str().unwrap();
        assert!(char_len(x) < 1024 && ascii_len(&json!({"x": x})) <= PREVIEW_TEXT_MAX_BYTES);
        assert_eq!(
            r["evidence_omissions"],
            json!([{"field": "failed_change_id", "reason": "identity_too_large"},
                   {"field": "diagnostic.x", "reason": "text_field_limit", "original_chars": 1025}])
        );
    }

    /// The diagnostic wrapper: at most 16,384 bytes, keeping failure_context when it fits.
    #[test]
    fn diagnostic_wrapper_budget() {
        let filler = |n: usize| Value::Array(vec![json!("e".repeat(1000)); n]);
        let diag = |n: usize, pad: usize| {
            json!({"format": "f", "code": "c", "evidence": filler(n), "pad": "q".repeat(pad),
                   "retryable": true, "failure_context": {"text": "ctx"}})
        };
        let size = |d: &Value| ascii_len(&json!({"diagnostic": d}));
        let mut n = 1;
        while size(&diag(n + 1, 0)) < PREVIEW_DIAGNOSTIC_MAX_BYTES {
            n += 1;
        }
        let pad = PREVIEW_DIAGNOSTIC_MAX_BYTES - size(&diag(n, 0));
        assert!(pad < 1003);
        let mut m = accepted(vec![]);
        m.insert("diagnostic".into(), diag(n, pad));
        let r = bound(Value::Object(m.clone()));
        assert_eq!(r["evidence_omissions"], json!([]));
        m.insert("diagnostic".into(), diag(n, pad + 1));
        let r = bound(Value::Object(m));
        assert_eq!(r["diagnostic"]["evidence"], Value::Null);
        assert_eq!(r["diagnostic"]["pad"], Value::Null);
        assert_eq!(r["diagnostic"]["failure_context"], json!({"text": "ctx"}));
        assert_eq!(r["diagnostic"]["code"], "c");
        assert_eq!(
            r["evidence_omissions"],
            json!([{"field": "diagnostic.evidence", "reason": "diagnostic_byte_budget"},
                   {"field": "diagnostic.pad", "reason": "diagnostic_byte_budget"}])
        );
    }

    /// The whole payload: at 32,768 bytes nothing is omitted; past it, near_misses,
    /// warning_details, warnings, diagnostic evidence, failure_detail, failed_change_id and
    /// current_context go in that order, then trailing whole facts.
    #[test]
    fn payload_budget_omission_order() {
        let block = |n: usize| Value::Array(vec![json!("z".repeat(1000)); n]);
        let full = |nb: usize, pad: usize, extra: usize| {
            let facts: Vec<Value> = (0..4).map(|i| fact(i, 1000)).collect();
            let mut m = accepted(facts);
            if extra > 0 {
                // Stands for members no budget step may omit.
                m.insert("kept".into(), block(extra));
            }
            m.insert(
                "near_misses".into(),
                json!({"candidates": block(nb), "pad": "n".repeat(pad)}),
            );
            m.insert("warnings".into(), block(3));
            m.insert("warning_details".into(), block(3));
            m.insert("failure_detail".into(), json!("f".repeat(1000)));
            m.insert("failed_change_id".into(), json!("chg_001"));
            m.insert(
                "diagnostic".into(),
                json!({"format": "f", "retryable": true, "exact_candidates": block(8)}),
            );
            m.insert("current_context".into(), json!({"text": "c".repeat(1000)}));
            Value::Object(m)
        };
        let mut nb = 1;
        while ascii_len(&full(nb + 1, 0, 0)) < PREVIEW_MAX_BYTES {
            nb += 1;
        }
        let pad = PREVIEW_MAX_BYTES - ascii_len(&full(nb, 0, 0));
        assert!(pad < 1003, "the fixture is near the budget: {pad}");
        let r = bound(full(nb, pad, 0));
        assert_eq!(ascii_len(&r), PREVIEW_MAX_BYTES);
        assert_eq!(r["evidence_omissions"], json!([]));
        // One byte over: near_misses goes first, and that is enough.
        let r = bound(full(nb, pad + 1, 0));
        assert!(ascii_len(&r) <= PREVIEW_MAX_BYTES);
        assert_eq!(r["near_misses"], Value::Null);
        assert_eq!(r["warning_details"], json!(block(3)));
        assert_eq!(
            r["evidence_omissions"],
            json!([{"field": "near_misses", "reason": "payload_byte_budget"}])
        );
        // Far over: everything in order, then trailing facts; the verdict and identity stay.
        let r = bound(full(nb, pad, 30));
        let fields: Vec<&str> = r["evidence_omissions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["field"].as_str().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "near_misses",
                "warning_details",
                "warnings",
                "diagnostic.exact_candidates",
                "failure_detail",
                "failed_change_id",
                "current_context",
                "change_facts"
            ]
        );
        assert!(ascii_len(&r) <= PREVIEW_MAX_BYTES);
        assert_eq!(
            (&r["status"], &r["after_hash"], &r["preview"]),
            (&json!("accepted"), &json!("h"), &json!(true))
        );
        assert_eq!(r["diagnostic"]["retryable"], true);
        assert_eq!(r["change_facts_omission_reason"], "payload_byte_budget");
        assert_eq!(
            r["returned_fact_count"],
            r["change_facts"].as_array().unwrap().len()
        );
        assert_eq!(r["total_change_count"], 4);
    }
}
