//! Schema builders every family shares: JSON Schema fragments, the target id, guards,
//! submission options, output shapes and the example placeholders.

use serde_json::{Value, json};

pub(super) const UUID_RE: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
pub(super) const HASH_RE: &str = "^[0-9a-f]{64}$";
pub(super) const GUARD_RULE: &str = "At least one guard is required: expected_target_version and/or expected_current_hash from the read this edit is based on; every supplied guard is checked.";

pub(super) fn described(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

pub(super) fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

pub(super) fn nonempty(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": description})
}

pub(super) fn strict(pattern: &str) -> Value {
    json!({"type": "string", "pattern": pattern, "not": {"pattern": "\\n$"}})
}

pub(super) fn nullable(schema: Value, description: &str) -> Value {
    json!({"anyOf": [schema, {"type": "null"}], "description": description})
}

pub(super) fn integer(minimum: i64, description: &str) -> Value {
    json!({"type": "integer", "minimum": minimum, "description": description})
}

pub(super) fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

pub(super) fn target_id() -> (&'static str, Value, bool) {
    (
        "target_file_id",
        described(
            strict(UUID_RE),
            "Target UUID, from patchdiff_initialize_target.",
        ),
        true,
    )
}

pub(super) fn guards() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "expected_target_version",
            nullable(
                json!({"type": "integer", "minimum": 0}),
                "Version guard: the version your read returned (preferred: it detects no-op and ABA changes).",
            ),
            false,
        ),
        (
            "expected_current_hash",
            nullable(
                strict(HASH_RE),
                "Hash guard: the 64-hex SHA-256 current_hash your read returned.",
            ),
            false,
        ),
    ]
}

pub(super) fn submission_options() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "source",
            string(
                "Who proposed this (recorded, outside request identity); default model_response.",
            ),
            false,
        ),
        (
            "parent_pdcp_log_id",
            nullable(
                strict(UUID_RE),
                "On a retry: the pdcp_log_id of the rejected attempt this corrects.",
            ),
            false,
        ),
        (
            "attempt",
            nullable(
                json!({"type": "integer", "minimum": 1}),
                "Your retry counter, 1-based (recorded, outside request identity).",
            ),
            false,
        ),
        (
            "client_request_id",
            nullable(
                json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$", "not": {"pattern": "\\n$"}}),
                "Request key, 1-128 printable ASCII without spaces: resend the identical call to recover a lost response.",
            ),
            false,
        ),
        (
            "include_correlation_id",
            boolean(
                "Return a fresh correlation_id UUID for your logs (never stored); default false.",
            ),
            false,
        ),
    ]
}

pub(super) fn guard_any_of() -> (&'static str, Value) {
    (
        "anyOf",
        json!([{"required": ["expected_target_version"]}, {"required": ["expected_current_hash"]}]),
    )
}

pub(super) fn output(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

pub(super) fn status_output() -> Value {
    output(json!({"status": {"type": "string"}, "target_file_id": {"type": "string"}}))
}

pub(super) fn submission_output() -> Value {
    output(json!({
        "status": {"type": "string", "description": "accepted or rejected"},
        "pdcp_log_id": {"type": ["string", "null"]},
        "version": {"type": "integer"},
        "current_version": {"type": "integer"},
        "current_hash": {"type": "string"},
        "failure_reason": {"type": "string"},
        "deduplicated": {"type": "boolean"}
    }))
}

/// Placeholders in examples: hosts bind real IDs, guards, parents and cursors.
pub(super) const T: &str = "11111111-1111-4111-8111-111111111111";
pub(super) const PARENT: &str = "22222222-2222-4222-8222-222222222222";
