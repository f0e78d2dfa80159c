//! Guarded unobserved submissions (tx/1, tx/2, tx/3) and their read-only preview.

use super::schema::{
    GUARD_RULE, PARENT, T, guard_any_of, guards, nonempty, status_output, string,
    submission_options, submission_output, target_id,
};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::{Value, json};

/// A submission tool's parameters: target, intent, its proposal, both guards, the options.
pub(super) fn submission_params(
    intent: (&'static str, Value, bool),
    proposal: (&'static str, Value, bool),
) -> Vec<(&'static str, Value, bool)> {
    let mut params = vec![target_id(), intent, proposal];
    params.extend(guards());
    params.extend(submission_options());
    params
}

pub(super) fn edit_item() -> Value {
    json!({
        "type": "object",
        "properties": {
            "match": {"type": "string", "minLength": 1, "description": "Exact text to replace (canonical LF)."},
            "replace": {"type": "string", "description": "Replacement; empty deletes."},
            "change_id": {"type": ["string", "null"], "description": "Your label; default chg_001, chg_002, ..."},
            "rationale": {"type": ["string", "null"]},
            "risk": {"enum": ["low", "medium", "high", null]},
            "occurrence_index": {"type": ["integer", "null"], "minimum": 1, "description": "1-based, counted in the text this edit sees (after earlier edits)."},
            "anchor_before": {"type": ["string", "null"], "description": "Must occur anywhere before the match."},
            "anchor_after": {"type": ["string", "null"], "description": "Must occur anywhere after the match."}
        },
        "required": ["match", "replace"],
        "additionalProperties": false
    })
}

pub(super) fn operation_item() -> Value {
    json!({
        "type": "object",
        "properties": {
            "op": {"enum": ["match", "span"]},
            "match": {"type": "string", "minLength": 1},
            "replace": {"type": "string"},
            "start": {"type": "integer", "minimum": 0, "description": "Span start, code points, in the text after earlier operations."},
            "end": {"type": "integer", "minimum": 0, "description": "Span end, exclusive; start == end inserts."},
            "expected_text": {"type": "string", "description": "Exact current text of [start, end); empty for an insertion."},
            "expected_before": {"type": ["string", "null"], "minLength": 1, "description": "Exact text immediately before start."},
            "expected_after": {"type": ["string", "null"], "minLength": 1, "description": "Exact text immediately after end."},
            "change_id": {"type": ["string", "null"]},
            "rationale": {"type": ["string", "null"]},
            "risk": {"enum": ["low", "medium", "high", null]},
            "occurrence_index": {"type": ["integer", "null"], "minimum": 1},
            "anchor_before": {"type": ["string", "null"]},
            "anchor_after": {"type": ["string", "null"]}
        },
        "required": ["op", "replace"],
        "additionalProperties": false
    })
}

/// `x-patchdiff-capabilities` of patchdiff_submit_operations, from the engine's constants:
/// protocol, immutable runtime, operations, coordinates, insertion and span context.
pub(super) fn operations_capabilities() -> (&'static str, Value) {
    use patchdiff_engine::wire::{limits, tx2};
    (
        "x-patchdiff-capabilities",
        json!({
            "protocol": tx2::PROTOCOL,
            "runtime": tx2::RUNTIME,
            "runtime_immutable": true,
            "operations": ["match", "span"],
            "coordinates": "unicode_code_points_sequential_buffer",
            "span_end": "exclusive",
            "insertion": {"supported": true, "form": "start == end with expected_text \"\""},
            "span_context": {
                "fields": ["expected_before", "expected_after"],
                "runtime": tx2::RUNTIME_SPAN_CONTEXT,
                "actual_text_max_chars": limits::SPAN_ACTUAL_TEXT_CHARS,
            },
        }),
    )
}

/// `x-patchdiff-capabilities` of patchdiff_submit_replacement: protocol, immutable runtime,
/// the one operation and the fresh admission limits.
pub(super) fn replacement_capabilities() -> (&'static str, Value) {
    use patchdiff_engine::wire::{limits, tx3};
    (
        "x-patchdiff-capabilities",
        json!({
            "protocol": tx3::PROTOCOL,
            "runtime": tx3::RUNTIME,
            "runtime_immutable": true,
            "operations": ["replace_all"],
            "limits": {
                "max_code_points": limits::REPLACEMENT_MAX_CODE_POINTS,
                "max_utf8_bytes": limits::REPLACEMENT_MAX_UTF8_BYTES,
                "inclusive": true,
                "checked": ["raw_code_points", "raw_utf8_bytes", "canonical_code_points", "canonical_utf8_bytes"],
            },
        }),
    )
}

pub(super) fn tools() -> Vec<Declaration> {
    let id = target_id;
    let intent = || {
        (
            "intent",
            nonempty("What this transaction is for (recorded; never used for matching)."),
            true,
        )
    };
    let submit_edits = submission_params(
        intent(),
        (
            "edits",
            json!({"type": "array", "minItems": 1, "items": edit_item(), "description": "Ordered edits; each sees the text after the earlier ones; all apply or none."}),
            true,
        ),
    );
    let submit_ops = submission_params(
        intent(),
        (
            "operations",
            json!({"type": "array", "minItems": 1, "items": operation_item(), "description": "Ordered match/span operations; send spans from one read in descending start order."}),
            true,
        ),
    );
    let submit_replacement = submission_params(
        intent(),
        (
            "replacement",
            string(
                "The whole new document (at most 1,000,000 code points and 1,048,576 UTF-8 bytes); empty is valid.",
            ),
            true,
        ),
    );
    let mut preview = vec![
        id(),
        (
            "format",
            json!({"enum": ["patchdiff-tx/1", "patchdiff-tx/2", "patchdiff-tx/3"], "description": "Which proposal fields follow: edits (tx/1), operations (tx/2) or replacement (tx/3)."}),
            true,
        ),
    ];
    preview.extend(guards());
    preview.extend([
        ("intent", nonempty("The proposal's intent."), false),
        (
            "edits",
            json!({"type": "array", "items": edit_item(), "description": "tx/1 edits."}),
            false,
        ),
        (
            "operations",
            json!({"type": "array", "items": operation_item(), "description": "tx/2 operations."}),
            false,
        ),
        ("replacement", string("tx/3 replacement text."), false),
    ]);
    vec![
        Declaration {
            tool: Tool::SubmitEdits,
            meta: None,
            title: "Submit edits",
            description: format!("Guarded typed edits (patchdiff-tx/1): exact match/replace, applied in order, all or nothing; every attempt is logged. {GUARD_RULE} A match found more than once needs occurrence_index or anchors."),
            kind: Kind::Submit,
            params: submit_edits,
            root: vec![guard_any_of()],
            forms: &[],
            output: submission_output(),
            examples: vec![
                json!({"target_file_id": T, "expected_target_version": 0, "intent": "Rename the second alpha", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-001"}),
                json!({"target_file_id": T, "expected_target_version": 1, "intent": "Rename delta", "edits": [{"match": "delta", "replace": "epsilon"}], "client_request_id": "req-002"}),
                json!({"target_file_id": T, "expected_target_version": 1, "intent": "Rename gamma", "edits": [{"match": "gamma", "replace": "delta"}], "parent_pdcp_log_id": PARENT, "attempt": 2, "client_request_id": "req-003"}),
            ],
        },
        Declaration {
            tool: Tool::SubmitOperations,
            meta: None,
            title: "Submit operations",
            description: format!("Guarded ordered match/span operations (patchdiff-tx/2), all or nothing. Spans use code points in the text after earlier operations and must carry the exact expected_text; start == end with empty expected_text inserts (verify with expected_before/expected_after). {GUARD_RULE}"),
            kind: Kind::Submit,
            params: submit_ops,
            root: vec![guard_any_of(), operations_capabilities()],
            forms: &[],
            output: submission_output(),
            examples: vec![json!({"target_file_id": T, "expected_target_version": 2, "intent": "Add a heading marker", "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "# ", "expected_after": "alpha"}]})],
        },
        Declaration {
            tool: Tool::SubmitReplacement,
            meta: None,
            title: "Submit replacement",
            description: format!("Guarded replacement of the whole document (patchdiff-tx/3); only when the whole document is meant to change. {GUARD_RULE}"),
            kind: Kind::Submit,
            params: submit_replacement,
            root: vec![guard_any_of(), replacement_capabilities()],
            forms: &[],
            output: submission_output(),
            examples: vec![json!({"target_file_id": T, "expected_target_version": 3, "intent": "Replace the document", "replacement": "Final text\n"})],
        },
        Declaration {
            tool: Tool::Preview,
            meta: None,
            title: "Preview",
            description: "Read-only advisory evaluation of a tx/1, tx/2 or tx/3 proposal: verdict, facts and warnings; writes nothing and reserves nothing. A guard is required; submission re-checks.".into(),
            kind: Kind::Read,
            params: preview,
            root: vec![guard_any_of()],
            forms: &[],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "format": "patchdiff-tx/3", "expected_target_version": 4, "intent": "Propose a reviewed text", "replacement": "Reviewed text\n"})],
        },
    ]
}
