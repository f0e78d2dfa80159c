//! Structural observation and scoped submission: patchdiff_observe_scope and
//! patchdiff_submit_observed_operations (contract "Structural Observation and Scoped
//! Submission"), and the parameter and output shapes the observed_v2 aliases share with them.

use super::schema::{
    HASH_RE, T, UUID_RE, boolean, described, integer, nonempty, nullable, output, strict,
    submission_options, submission_output, target_id,
};
use super::submissions::operation_item;
use super::{Declaration, Form, Kind};
use crate::tool::Tool;
use serde_json::{Value, json};

/// Placeholders of the structural examples: observation, second observation, bundle, hash.
pub(super) const O1: &str = "33333333-3333-4333-8333-333333333333";
pub(super) const O2: &str = "44444444-4444-4444-8444-444444444444";
pub(super) const BUNDLE: &str = "55555555-5555-4555-8555-555555555555";
pub(super) const H: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The guard rule of observed submissions: unlike the unobserved tools, both guards.
pub(super) const OBSERVED_GUARD_RULE: &str = "Both guards are required: expected_target_version and expected_current_hash, the target_version and target_current_hash of the observation; both are checked.";
/// The same rule as patchdiff_commit_bundle states it: the snapshot carries both guards.
pub(super) const SNAPSHOT_GUARD_RULE: &str = "Both guards are required and travel in the snapshot (expected_target_version, expected_current_hash); both are checked.";

/// Insertion and scope rules shared by both observed submission tools.
pub(super) const OBSERVED_SCOPE_RULES: &str = "Nonempty edits stay inside the running scope (its end moves with earlier operations); a whole-scope replacement is allowed. An insertion (start == end, expected_text \"\") must lie strictly inside the scope, never at either boundary, and carry nonempty expected_before and expected_after matching the adjacent text inside the scope (OBSERVED_INSERTION_GUARDS_REQUIRED, OPERATION_OUTSIDE_OBSERVED_SCOPE otherwise): derive later guards from the buffer after earlier operations.";

/// patchdiff_submit_observed_operations' exclusive forms. The contract's argument list marks
/// observation_id and operations required; its batch paragraph names the alternative, "with
/// observation_bundle_id, groups, intent, both target guards and mandatory client_request_id"
/// (docs/structural.md, "Required arguments").
pub(super) const OBSERVED_FORMS: &[Form] = &[
    Form {
        names: &["observation_id", "operations"],
        required: &["observation_id", "operations"],
    },
    Form {
        names: &["observation_bundle_id", "groups"],
        required: &["observation_bundle_id", "groups", "client_request_id"],
    },
];

pub(super) fn observed_guards() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "expected_target_version",
            json!({"type": "integer", "minimum": 0, "description": "Required version guard: the observation's target_version."}),
            true,
        ),
        (
            "expected_current_hash",
            described(
                strict(HASH_RE),
                "Required hash guard: the observation's 64-hex target_current_hash.",
            ),
            true,
        ),
    ]
}

pub(super) fn operations_list(description: &str) -> Value {
    json!({"type": "array", "minItems": 1, "items": operation_item(), "description": description})
}

/// `groups` of a batch: one observation of the bundle with its ordered operations.
pub(super) fn groups_param() -> (&'static str, Value, bool) {
    (
        "groups",
        json!({
            "type": "array", "minItems": 1, "maxItems": 32,
            "items": {
                "type": "object",
                "properties": {
                    "observation_id": {"type": "string", "pattern": UUID_RE, "not": {"pattern": "\\n$"}, "description": "A scope's observation_id from the bundle."},
                    "operations": {"type": "array", "minItems": 1, "items": operation_item(), "description": "Ordered match/span operations in scope-local coordinates."}
                },
                "required": ["observation_id", "operations"],
                "additionalProperties": false
            },
            "description": "Batch: 1-32 groups {observation_id, operations}, each observation at most once, at most 128 operations in all; coordinates are scope-local."
        }),
        false,
    )
}

pub(super) fn selections_param(required: bool) -> (&'static str, Value, bool) {
    (
        "selections",
        json!({
            "type": "array", "minItems": 1, "maxItems": 32,
            "items": {
                "type": "object",
                "properties": {
                    "symbol_name": {"type": "string", "minLength": 1, "description": "Exact symbol name or parent.name path, as returned."},
                    "kind": {"type": ["string", "null"], "minLength": 1, "description": "Optional kind that narrows this selection."}
                },
                "required": ["symbol_name"],
                "additionalProperties": false
            },
            "description": "1-32 exact {symbol_name, kind?} selections issued together from one snapshot; unique, disjoint scopes."
        }),
        required,
    )
}

pub(super) fn max_chars_param() -> (&'static str, Value, bool) {
    (
        "max_chars",
        nullable(
            json!({"type": "integer", "minimum": 1}),
            "Page size per scope in code points; default 4000, capped at 8000.",
        ),
        false,
    )
}

pub(super) fn line_starts_param() -> (&'static str, Value, bool) {
    (
        "include_line_starts",
        boolean(
            "Add line_starts: absolute start offsets of the lines that start on each page; default false.",
        ),
        false,
    )
}

pub(super) fn nonblank_filter(
    name: &'static str,
    description: &str,
) -> (&'static str, Value, bool) {
    (
        name,
        nullable(json!({"type": "string", "minLength": 1}), description),
        false,
    )
}

pub(super) fn observe_output() -> Value {
    output(json!({
        "status": {"type": "string", "description": "candidates, observed, observed_batch, not_found, ambiguous, unsupported, rejected or invalid_argument"},
        "target_file_id": {"type": ["string", "null"]},
        "observation_id": {"type": ["string", "null"]},
        "observation_bundle_id": {"type": ["string", "null"]},
        "candidates": {"type": "array"},
        "scopes": {"type": "array"},
        "snapshot": {"type": "object"}
    }))
}

pub(super) fn snapshot_schema(description: &str) -> Value {
    json!({
        "type": "object",
        "properties": {
            "target_file_id": {"type": "string"},
            "expected_target_version": {"type": "integer", "minimum": 0},
            "expected_current_hash": {"type": "string"},
            "observation_bundle_id": {"type": "string"}
        },
        "required": ["target_file_id", "expected_target_version", "expected_current_hash", "observation_bundle_id"],
        "additionalProperties": false,
        "description": description
    })
}

/// The v2 commit receipt (crate::observed_v2::commit_receipt).
pub(super) fn receipt_output() -> Value {
    let state = json!({"type": ["object", "null"], "properties": {"version": {"type": ["integer", "null"]}, "hash": {"type": ["string", "null"]}}});
    let collection = json!({"type": ["object", "null"], "properties": {"items": {"type": "array"}, "total": {"type": ["integer", "null"]}, "truncated": {"type": "boolean"}}});
    json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "description": "accepted, rejected, invalid_argument, not_found or outcome_unknown"},
            "code": {"type": ["string", "null"]},
            "transaction": {"type": ["object", "null"], "properties": {
                "pdcp_log_id": {"type": ["string", "null"]},
                "client_request_id": {"type": ["string", "null"]},
                "deduplicated": {"type": ["boolean", "null"]},
                "before": state.clone(),
                "after": state.clone(),
                "group_count": {"type": ["integer", "null"]},
                "operation_count": {"type": ["integer", "null"]}
            }},
            "current": state,
            "target_file_id": {"type": ["string", "null"]},
            "observation_bundle_id": {"type": ["string", "null"]},
            "scopes": collection.clone(),
            "warnings": collection,
            "validity": {},
            "failure_reason": {"type": ["string", "null"]},
            "failure_detail": {"type": ["string", "null"]},
            "failed_change_id": {"type": ["string", "null"]},
            "diagnostics": {"type": ["object", "null"]},
            "presentation": {"type": "object", "properties": {"truncated": {"type": "boolean"}, "omitted_fields": {"type": "array", "items": {"type": "string"}}}}
        },
        "required": ["status", "presentation"]
    })
}

/// patchdiff_observe_scope and patchdiff_submit_observed_operations (contract "Structural
/// Observation and Scoped Submission").
pub(super) fn tools() -> Vec<Declaration> {
    let mut submit = vec![
        target_id(),
        (
            "intent",
            nonempty("What this transaction is for (recorded; never used for matching)."),
            true,
        ),
        (
            "observation_id",
            nullable(
                strict(UUID_RE),
                "Single form: the observation_id patchdiff_observe_scope issued.",
            ),
            false,
        ),
        (
            "operations",
            operations_list(
                "Single form: ordered match/span operations; spans are absolute code points of the sequential buffer.",
            ),
            false,
        ),
        (
            "observation_bundle_id",
            nullable(
                strict(UUID_RE),
                "Batch form: the observation_bundle_id of a selections call.",
            ),
            false,
        ),
        groups_param(),
    ];
    submit.extend(observed_guards());
    submit.extend(submission_options());
    vec![
        Declaration {
            tool: Tool::ObserveScope,
            meta: None,
            title: "Observe scope",
            description: "Discover structural symbols of a .py, .ts, .js, .json, .md, .yaml, .toml or .sh target, or issue the server-persisted observations patchdiff_submit_observed_operations requires. Exclusive modes: candidate discovery (no symbol_name, observation_id or selections; optional query and kind filters; issues nothing; at most 200 candidates in document order); exact selection (symbol_name, optional kind: one match is status observed with observation_id, target_version, target_current_hash, scope_start, scope_end, observed_scope_hash and the scope text; none is not_found SCOPE_NOT_FOUND; several is ambiguous AMBIGUOUS_SCOPE_SELECTION, never a guess); observation page (observation_id with offset = next_offset); bundle (selections: 1-32 exact, unique, disjoint scopes from one snapshot, all issued or none: status observed_batch with observation_bundle_id, both guards, snapshot and one receipt per selection; failures name selection_index). Pages are 4,000 code points by default, at most 8,000; a bundle's scopes total at most 65,536 code points and its returned text at most 32,768 (BUNDLE_RESPONSE_TOO_LARGE: lower max_chars or select fewer). A catalog first is optional: select known names directly, exactly as returned, punctuation included (tenants[ten_013], row:CHK-14-C, fence:L7). A SAVE closes the observation's editing cycle: observe again after it.".into(),
            kind: Kind::Observe,
            params: vec![
                target_id(),
                nonblank_filter("query", "Candidate discovery only: case-insensitive substring of symbol names and paths; nonblank, never trimmed."),
                nonblank_filter("symbol_name", "Exact symbol name or parent.name path to select and observe; nonblank, never trimmed."),
                nonblank_filter("kind", "Symbol kind filter: function, class, method, variable, config_item, object, section, table_row, code_block, ..."),
                ("observation_id", nullable(strict(UUID_RE), "An issued observation to page (mode scope_page), with offset = next_offset."), false),
                ("offset", integer(0, "Code-point offset within [scope_start, scope_end); nonzero only when paging an observation_id; default 0."), false),
                max_chars_param(),
                line_starts_param(),
                selections_param(false),
            ],
            root: vec![],
            forms: &[],
            output: observe_output(),
            examples: vec![
                json!({"target_file_id": T, "query": "flush", "kind": "method"}),
                json!({"target_file_id": T, "symbol_name": "Uploader.flush", "kind": "method"}),
                json!({"target_file_id": T, "selections": [{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM", "kind": "variable"}]}),
                json!({"target_file_id": T, "observation_id": O1, "offset": 4000, "max_chars": 4000}),
            ],
        },
        Declaration {
            tool: Tool::SubmitObservedOperations,
            meta: None,
            title: "Submit observed operations",
            description: format!("Guarded patchdiff-tx/2 match/span operations confined to observations from patchdiff_observe_scope, all or nothing; every attempt is logged. Exclusive forms: single (observation_id + operations: spans are absolute code points inside [scope_start, scope_end); match counts only inside the scope) or batch (observation_bundle_id + groups [{{observation_id, operations}}], 1-32 groups, at most 128 operations, any nonempty subset of the bundle, client_request_id required: each group's spans, match counts and anchors are scope-local, from 0 at its scope's start in its own buffer after its earlier operations; success advances the version once). {OBSERVED_GUARD_RULE} {OBSERVED_SCOPE_RULES} An accepted attempt consumes its observations; any commit or SAVE makes the rest stale: observe again. Resend the identical keyed call to recover a lost response: recovery precedes guard and observation checks."),
            kind: Kind::Submit,
            params: submit,
            root: vec![],
            forms: OBSERVED_FORMS,
            output: submission_output(),
            examples: vec![
                json!({"target_file_id": T, "observation_id": O1, "intent": "Raise the flush limit", "expected_target_version": 3, "expected_current_hash": H, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}], "client_request_id": "req-101"}),
                json!({"target_file_id": T, "observation_bundle_id": BUNDLE, "intent": "Two scoped edits", "expected_target_version": 3, "expected_current_hash": H, "client_request_id": "req-102", "groups": [{"observation_id": O1, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}]}, {"observation_id": O2, "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v1", "replace": "v2"}]}]}),
            ],
        },
    ]
}
