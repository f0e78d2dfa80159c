//! Rejections as values: failure label, stage, diagnostic and bounded context.

use crate::contract::json::ascii_len;
use crate::contract::limits::*;
use crate::contract::words::{DiagnosticCode, FailureReason};
use crate::target::TargetView;
use crate::text::{byte_offset, char_len, head_chars};
use serde_json::{Map, Value, json};
use std::fmt;

/// Where in the pipeline an attempt was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    ProtocolValidation,
    PreconditionGuard,
    TransactionApplicability,
}

impl Stage {
    pub const ALL: [Stage; 3] = [
        Stage::ProtocolValidation,
        Stage::PreconditionGuard,
        Stage::TransactionApplicability,
    ];

    /// The stored `failure_stage`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Stage::ProtocolValidation => "PROTOCOL_VALIDATION",
            Stage::PreconditionGuard => "PRECONDITION_GUARD",
            Stage::TransactionApplicability => "TRANSACTION_APPLICABILITY",
        }
    }

    /// The stage a stored `failure_stage` names, if any.
    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// `diagnostic.validation_stage`.
    pub fn diagnostic(self) -> &'static str {
        match self {
            Stage::ProtocolValidation => "protocol_validation",
            Stage::PreconditionGuard => "precondition_guard",
            Stage::TransactionApplicability => "transaction_applicability",
        }
    }

    /// The response's `validity` for a rejection at this stage.
    pub fn validity(self) -> Value {
        validity(self != Stage::ProtocolValidation, false)
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub fn validity(protocol_valid: bool, transaction_valid: bool) -> Value {
    json!({
        "protocol_valid": protocol_valid,
        "transaction_valid": transaction_valid,
        "task_correct": "not_evaluated",
        "semantic": "not_evaluated",
    })
}

/// A rejected attempt before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub reason: FailureReason,
    pub detail: String,
    pub stage: Stage,
    pub failed_change_id: Option<String>,
    /// Diagnostic members between `format` and `retryable`, in order.
    pub fields: Map<String, Value>,
    /// A known failure location, in code points of the failing buffer.
    pub location: Option<usize>,
    /// The intermediate buffer and the number of simulated changes, for later-edit failures.
    pub intermediate: Option<(String, usize)>,
    /// For `match_absent`: the query and (a prefix of) the failing buffer its near misses are
    /// searched in after the attempt is written. Never stored.
    pub near_miss_input: Option<NearMissInput>,
}

/// What a response-only near-miss search needs (contract "Exact candidates, consumed matches
/// and near misses"): the canonical query and at most the first 65,536 code points of the
/// region the match was searched in. That region is the whole failing buffer, except for a
/// match confined to an observed scope (the single observed form), where it is the running
/// scope: a near miss outside it could never have matched.
#[derive(Debug, Clone, PartialEq)]
pub struct NearMissInput {
    pub query: String,
    /// The region's first 65,536 code points.
    pub buffer: String,
    /// Where the region starts in the failing buffer (code points): candidates are reported
    /// at `offset +` their position in `buffer`.
    pub offset: usize,
    /// Where the region ends in the failing buffer, so that a cut copy reports
    /// `scope_truncated`.
    pub region_end: usize,
}

impl Rejection {
    pub fn new(reason: FailureReason, stage: Stage, detail: impl Into<String>) -> Self {
        Rejection {
            reason,
            detail: detail.into(),
            stage,
            failed_change_id: None,
            fields: Map::new(),
            location: None,
            intermediate: None,
            near_miss_input: None,
        }
    }

    /// A `context_invalid` (or other) rejection with a stable `diagnostic.code`.
    pub fn coded(
        reason: FailureReason,
        stage: Stage,
        code: DiagnosticCode,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(reason, stage, detail).field("code", json!(code.as_str()))
    }

    pub fn field(mut self, k: &str, v: Value) -> Self {
        self.fields.insert(k.to_owned(), v);
        self
    }

    /// The stored, immutable diagnostic.
    pub fn diagnostic(&self, format: &str, start: &TargetView) -> Value {
        let mut d = Map::new();
        d.insert("format".into(), json!(format));
        for (k, v) in &self.fields {
            d.insert(k.clone(), v.clone());
        }
        d.insert("retryable".into(), json!(self.reason.retryable()));
        d.insert("requires_new_submission".into(), json!(true));
        d.insert("validation_stage".into(), json!(self.stage.diagnostic()));
        let ctx = match &self.intermediate {
            Some((buf, prior)) => context(buf, "intermediate_buffer", *prior, self.location, start),
            None => context(start.content, "canonical_target", 0, self.location, start),
        };
        d.insert("failure_context".into(), ctx);
        Value::Object(d)
    }
}

/// A bounded context object (contract "Bounded rejection context").
///
/// A prefix of at most 256 code points that fits 4,096 bytes; when a failure location is known
/// and fewer than 64 of its code points would show in that prefix, a window around it instead.
pub fn context(
    buf: &str,
    stage: &str,
    prior_changes: usize,
    location: Option<usize>,
    observed: &TargetView,
) -> Value {
    let total = char_len(buf);
    let (mut start, mut end, mut selection) = (0, total.min(CONTEXT_MAX_CHARS), "prefix");
    if let Some(loc) = location.filter(|&l| l <= total) {
        let want = (total - loc).min(CONTEXT_MIN_VISIBLE);
        if end.saturating_sub(loc) < want {
            start = loc.saturating_sub(CONTEXT_MAX_CHARS / 4);
            end = (start + CONTEXT_MAX_CHARS).min(total);
            start = end.saturating_sub(CONTEXT_MAX_CHARS).min(start);
            selection = "failure_window";
        }
    }
    let b0 = byte_offset(buf, start).unwrap_or(buf.len());
    let mut text = head_chars(&buf[b0..], end - start);
    loop {
        let v = context_value(
            selection,
            stage,
            prior_changes,
            start,
            total,
            text,
            observed,
        );
        if ascii_len(&v) <= CONTEXT_MAX_BYTES || text.is_empty() {
            return v;
        }
        // Over budget only with heavily escaped text: drop 16 code points and measure again,
        // keeping a window's location inside it.
        let n = char_len(text).saturating_sub(16);
        text = head_chars(text, n);
    }
}

fn context_value(
    selection: &str,
    stage: &str,
    prior: usize,
    start: usize,
    total: usize,
    text: &str,
    t: &TargetView,
) -> Value {
    let end = start + char_len(text);
    json!({
        "available": true,
        "unavailable_reason": null,
        "selection": selection,
        "buffer_stage": stage,
        "prior_changes": prior,
        "start": start,
        "end": end,
        "total_chars": total,
        "text": text,
        "truncated": end - start < total,
        "observed_target_version": t.version,
        "observed_target_hash": t.current_hash,
    })
}

/// An unavailable context object.
pub fn unavailable_context(reason: &str) -> Value {
    json!({
        "available": false, "unavailable_reason": reason, "selection": null,
        "buffer_stage": null, "prior_changes": null, "start": null, "end": null, "total_chars": null,
        "text": null, "truncated": null, "observed_target_version": null, "observed_target_hash": null,
    })
}

/// Response-only `current_context`: the refreshed canonical target as a prefix, always the full
/// object. Contract "Bounded rejection context": "The Python service result keeps the full
/// object"; only the MCP projection ([`collapse_current_context`]) collapses it.
pub fn current_context(current: &TargetView) -> Value {
    context(current.content, "canonical_target", 0, None, current)
}

/// The MCP projection of a result's `current_context` (contract "Bounded rejection context"):
/// "On MCP responses, including preview, a current_context that would equal
/// diagnostic.failure_context key for key is returned as unavailable_reason:
/// \"same_as_failure_context\"". Replaces it in place (its key keeps its position) and says
/// whether it did; any other result is left as it is.
pub fn collapse_current_context(result: &mut Value) -> bool {
    let Some(m) = result.as_object_mut() else {
        return false;
    };
    let same = match (
        m.get("current_context"),
        m.get("diagnostic").and_then(|d| d.get("failure_context")),
    ) {
        (Some(c @ Value::Object(_)), Some(f)) => c["available"] == true && c == f,
        _ => false,
    };
    if same {
        m.insert(
            "current_context".into(),
            unavailable_context("same_as_failure_context"),
        );
    }
    same
}

/// Exact candidates for an ambiguity failure: at most five, 20 code points of context per side,
/// a match preview of at most 64 code points, 8,192 bytes with the wrapper. `occ` holds the
/// first occurrences (at least the five listed, when there are that many) of the `count` there
/// are.
pub fn exact_candidates(
    buf: &str,
    needle: &str,
    occ: &[(usize, usize)],
    count: usize,
    stage: &str,
    prior: usize,
    observed: &TargetView,
) -> Value {
    let preview = head_chars(needle, CANDIDATE_PREVIEW_CHARS);
    let match_truncated = preview.len() < needle.len();
    let mut list: Vec<Value> = Vec::new();
    let wrap = |list: &[Value]| {
        let cut = list.len() < count;
        json!({
            "kind": "exact_occurrences",
            "occurrence_count": count,
            "returned_count": list.len(),
            "candidates": list,
            "truncated": cut,
            "next_occurrence_index": if cut { json!(list.len() + 1) } else { Value::Null },
            "buffer_stage": stage,
            "prior_changes": prior,
            "observed_target_version": observed.version,
            "observed_target_hash": observed.current_hash,
        })
    };
    for (i, &(s, e)) in occ.iter().take(CANDIDATES_MAX).enumerate() {
        let from = s.saturating_sub(CANDIDATE_CONTEXT_CHARS);
        let b_from = byte_offset(buf, from).unwrap_or(buf.len());
        let b_s = b_from + byte_offset(&buf[b_from..], s - from).unwrap_or(0);
        let b_e = b_s + byte_offset(&buf[b_s..], e - s).unwrap_or(0);
        list.push(json!({
            "occurrence_index": i + 1,
            "start": s,
            "end": e,
            "before": &buf[b_from..b_s],
            "match_preview": preview,
            "match_truncated": match_truncated,
            "after": head_chars(&buf[b_e..], CANDIDATE_CONTEXT_CHARS),
        }));
        if ascii_len(&wrap(&list)) > CANDIDATES_MAX_BYTES {
            list.pop();
            break;
        }
    }
    wrap(&list)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 item 2: every stage serializes to the stored `failure_stage` the table's CHECK
    /// allows (and mcp-tool-contracts.txt names), and to its `diagnostic.validation_stage`.
    #[test]
    fn stages_round_trip_to_the_contract_strings() {
        let stored: Vec<&str> = Stage::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            stored,
            [
                "PROTOCOL_VALIDATION",
                "PRECONDITION_GUARD",
                "TRANSACTION_APPLICABILITY"
            ]
        );
        let diagnostic: Vec<&str> = Stage::ALL.iter().map(|s| s.diagnostic()).collect();
        assert_eq!(
            diagnostic,
            [
                "protocol_validation",
                "precondition_guard",
                "transaction_applicability"
            ]
        );
        for s in Stage::ALL {
            assert_eq!(Stage::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        assert_eq!(Stage::parse("protocol_validation"), None);
    }

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "11111111-1111-4111-8111-111111111111",
            version: 3,
            current_hash: "h",
            content,
        }
    }

    /// Contract "Bounded rejection context": "The Python service result keeps the full object"
    /// (current_context is the refreshed target, whatever failure_context holds), and "On MCP
    /// responses, including preview, a current_context that would equal
    /// diagnostic.failure_context key for key is returned as unavailable_reason:
    /// same_as_failure_context", in place, only when every key is equal.
    #[test]
    fn current_context_is_full_and_collapses_only_for_mcp_when_equal() {
        let t = view("alpha beta alpha\n");
        let fc = context(t.content, "canonical_target", 0, None, &t);
        let cc = current_context(&t);
        assert_eq!(cc, fc);
        let mut r = json!({"status": "rejected", "diagnostic": {"failure_context": fc},
                           "current_context": cc, "validity": {}});
        assert!(collapse_current_context(&mut r));
        assert_eq!(
            r["current_context"],
            unavailable_context("same_as_failure_context")
        );
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["status", "diagnostic", "current_context", "validity"]
        );
        // One differing key (the version moved on, the text did not): kept whole.
        let newer = TargetView {
            version: 4,
            ..view("alpha beta alpha\n")
        };
        let mut r = json!({"diagnostic": {"failure_context": fc}, "current_context": current_context(&newer)});
        assert!(!collapse_current_context(&mut r));
        assert_eq!(r["current_context"]["available"], true);
        // A window failure context never equals the prefix current context.
        let long = "x".repeat(600);
        let t = view(&long);
        let window = context(t.content, "canonical_target", 0, Some(500), &t);
        let mut r = json!({"diagnostic": {"failure_context": window}, "current_context": current_context(&t)});
        assert!(!collapse_current_context(&mut r));
        // Nothing to compare: left alone.
        let mut r = json!({"status": "accepted"});
        assert!(!collapse_current_context(&mut r));
        assert_eq!(r, json!({"status": "accepted"}));
    }
}
