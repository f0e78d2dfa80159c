//! The tool catalog: declarations (`tools/list`), argument names, profiles and examples.
//!
//! Schemas use only keywords that mean the same in JSON Schema draft-07 and 2020-12, patterns
//! that RE2 accepts, and a root `type: "object"`. Strict end-of-string identifier patterns pair
//! `$` with `not: {pattern: "\n$"}`, because `$` also matches before a final LF in some engines.

use crate::config::Profile;
use serde_json::{Map, Value, json};

/// Revisions of MCP this server speaks, newest last.
pub const REVISIONS: [&str; 3] = ["2024-11-05", "2025-06-18", "2025-11-25"];

const UUID_RE: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
const HASH_RE: &str = "^[0-9a-f]{64}$";
const GUARD_RULE: &str = "At least one guard is required: expected_target_version and/or expected_current_hash from the read this edit is based on; every supplied guard is checked.";

/// What a tool does to state, for annotations and for compact projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Read,
    Create,
    Submit,
    Checkpoint,
}

pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: String,
    pub kind: Kind,
    /// Argument name, schema, required.
    pub params: Vec<(&'static str, Value, bool)>,
    /// Extra root keywords of the input schema (anyOf for guards, capabilities).
    pub root: Vec<(&'static str, Value)>,
    pub output: Value,
    pub examples: Vec<Value>,
}

impl Tool {
    pub fn allowed(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params.iter().map(|p| p.0)
    }

    pub fn required(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.params.iter().filter(|p| p.2).map(|p| p.0)
    }

    pub fn input_schema(&self) -> Value {
        let mut props = Map::new();
        for (name, schema, _) in &self.params {
            props.insert((*name).into(), schema.clone());
        }
        let mut s = Map::new();
        s.insert("type".into(), json!("object"));
        s.insert("properties".into(), Value::Object(props));
        let required: Vec<&str> = self.required().collect();
        if !required.is_empty() {
            s.insert("required".into(), json!(required));
        }
        s.insert("additionalProperties".into(), json!(false));
        for (k, v) in &self.root {
            s.insert((*k).into(), v.clone());
        }
        if !self.examples.is_empty() {
            s.insert("examples".into(), json!(self.examples));
        }
        Value::Object(s)
    }

    pub fn annotations(&self) -> Value {
        let (read_only, destructive, idempotent) = match self.kind {
            Kind::Read => (true, false, true),
            Kind::Create => (false, false, false),
            Kind::Submit => (false, true, false),
            Kind::Checkpoint => (false, false, false),
        };
        json!({
            "title": self.title,
            "readOnlyHint": read_only,
            "destructiveHint": destructive,
            "idempotentHint": idempotent,
            "openWorldHint": false,
        })
    }

    /// The declaration for a connection on `revision`; newer revisions add outputSchema and
    /// annotations.
    pub fn declaration(&self, revision: &str) -> Value {
        let mut d = Map::new();
        d.insert("name".into(), json!(self.name));
        d.insert("description".into(), json!(self.description));
        d.insert("inputSchema".into(), self.input_schema());
        if revision != REVISIONS[0] {
            d.insert("title".into(), json!(self.title));
            d.insert("outputSchema".into(), self.output.clone());
            d.insert("annotations".into(), self.annotations());
        }
        Value::Object(d)
    }
}

fn described(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

fn string(description: &str) -> Value {
    json!({"type": "string", "description": description})
}

fn nonempty(description: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": description})
}

fn strict(pattern: &str) -> Value {
    json!({"type": "string", "pattern": pattern, "not": {"pattern": "\\n$"}})
}

fn nullable(schema: Value, description: &str) -> Value {
    json!({"anyOf": [schema, {"type": "null"}], "description": description})
}

fn integer(minimum: i64, description: &str) -> Value {
    json!({"type": "integer", "minimum": minimum, "description": description})
}

fn boolean(description: &str) -> Value {
    json!({"type": "boolean", "description": description})
}

fn target_id() -> (&'static str, Value, bool) {
    (
        "target_file_id",
        described(
            strict(UUID_RE),
            "Target UUID, from patchdiff_initialize_target.",
        ),
        true,
    )
}

fn guards() -> Vec<(&'static str, Value, bool)> {
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

fn submission_options() -> Vec<(&'static str, Value, bool)> {
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
                json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"}),
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

/// A submission tool's parameters: target, intent, its proposal, both guards, the options.
fn submission_params(
    intent: (&'static str, Value, bool),
    proposal: (&'static str, Value, bool),
) -> Vec<(&'static str, Value, bool)> {
    let mut params = vec![target_id(), intent, proposal];
    params.extend(guards());
    params.extend(submission_options());
    params
}

fn guard_any_of() -> (&'static str, Value) {
    (
        "anyOf",
        json!([{"required": ["expected_target_version"]}, {"required": ["expected_current_hash"]}]),
    )
}

fn output(props: Value) -> Value {
    json!({"type": "object", "properties": props})
}

fn status_output() -> Value {
    output(json!({"status": {"type": "string"}, "target_file_id": {"type": "string"}}))
}

fn submission_output() -> Value {
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

fn history_output() -> Value {
    output(
        json!({"entries": {"type": "array"}, "has_more": {"type": "boolean"}, "next_sequence": {"type": ["integer", "null"]}}),
    )
}

/// Placeholders in examples: hosts bind real IDs, guards, parents and cursors.
const T: &str = "11111111-1111-4111-8111-111111111111";
const PARENT: &str = "22222222-2222-4222-8222-222222222222";

fn edit_item() -> Value {
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

fn operation_item() -> Value {
    json!({
        "type": "object",
        "properties": {
            "op": {"enum": ["match", "span"]},
            "match": {"type": "string", "minLength": 1},
            "replace": {"type": "string"},
            "start": {"type": "integer", "minimum": 0, "description": "Span start, code points, in the text after earlier operations."},
            "end": {"type": "integer", "minimum": 0, "description": "Span end, exclusive; start == end inserts."},
            "expected_text": {"type": "string", "description": "Exact current text of [start, end); empty for an insertion."},
            "expected_before": {"type": ["string", "null"], "description": "Exact text immediately before start."},
            "expected_after": {"type": ["string", "null"], "description": "Exact text immediately after end."},
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
fn operations_capabilities() -> (&'static str, Value) {
    use patchdiff_engine::{limits, tx2};
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
fn replacement_capabilities() -> (&'static str, Value) {
    use patchdiff_engine::{limits, tx3};
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

/// Every tool this front end can serve, in catalog order.
pub fn all_tools() -> Vec<Tool> {
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
    let mut save = vec![id()];
    save.extend(guards());
    save.extend([
        ("export_after_save", boolean("Add a default-format export of the saved content."), false),
        ("sync_workspace", nullable(json!({"type": "boolean"}), "Publish the file to the workspace (workspace profiles)."), false),
        ("workspace_eol_format", json!({"enum": ["original_eol", "canonical_lf", "crlf"], "description": "Line endings of a published file; default original_eol."}), false),
    ]);
    let limit = || {
        (
            "limit",
            nullable(
                json!({"type": "integer", "minimum": 1}),
                "Page size; default 50, capped at 200.",
            ),
            false,
        )
    };
    let before = || {
        (
            "before_sequence",
            nullable(
                json!({"type": "integer", "minimum": 1}),
                "Exclusive cursor: pass next_sequence from the previous page.",
            ),
            false,
        )
    };
    vec![
        Tool {
            name: "patchdiff_initialize_target",
            title: "Initialize target",
            description: "Create a managed target from text: line endings are recorded (source_line_endings) and normalized to LF; version 0.".into(),
            kind: Kind::Create,
            params: vec![
                ("filename", nonempty("Document filename (a label; with from_workspace, a path relative to the workspace root)."), true),
                ("content", nullable(json!({"type": "string"}), "Full document text; required unless from_workspace."), false),
                ("from_workspace", boolean("Read filename from the configured workspace instead of content."), false),
                ("content_type", string("MIME type or language, e.g. text/markdown; default text/plain."), false),
                ("project_id", nullable(strict(UUID_RE), "Optional project UUID."), false),
            ],
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_handle_upload",
            title: "Upload target",
            description: "Upload alias of patchdiff_initialize_target.".into(),
            kind: Kind::Create,
            params: vec![
                ("filename", nonempty("Document filename."), true),
                ("content", string("Full document text; line endings are recorded then normalized to LF."), true),
                ("content_type", string("MIME type or language, e.g. text/markdown."), true),
                ("project_id", nullable(strict(UUID_RE), "Optional project UUID."), false),
            ],
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_get_target",
            title: "Get target",
            description: "Current canonical content, current_hash, version, active editing cycle and recorded source line endings.".into(),
            kind: Kind::Read,
            params: vec![id()],
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_export_target",
            title: "Export target",
            description: "Target text in an explicit line-ending format, with content_sha256 of the returned bytes.".into(),
            kind: Kind::Read,
            params: vec![id(), ("format", json!({"enum": ["original_text", "canonical_lf", "crlf", "original_eol"], "description": "original_text (default) and canonical_lf give LF; crlf; original_eol restores the recorded uniform style."}), false)],
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_read_target",
            title: "Read target",
            description: "Authoritative read of a code-point slice with version and current_hash; continue with start = next_start.".into(),
            kind: Kind::Read,
            params: vec![id(), ("start", integer(0, "Start offset in Unicode code points; default 0."), false), ("length", nullable(json!({"type": "integer", "minimum": 1}), "Code points to read; default 4000, capped at 8000."), false)],
            root: vec![],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "start": 0, "length": 200})],
        },
        Tool {
            name: "patchdiff_read_lines",
            title: "Read lines",
            description: "Read an inclusive range of 1-based LF lines; continue with offset = next_offset (relative to the range) or read_target start = next_start (absolute).".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                ("start_line", integer(1, "First line, 1-based; default 1."), false),
                ("end_line", nullable(json!({"type": "integer", "minimum": 1}), "Last line, inclusive; default the last line."), false),
                ("offset", integer(0, "Code-point offset within the selected range (a next_offset); default 0."), false),
                ("max_chars", nullable(json!({"type": "integer", "minimum": 1}), "Page size in code points; default 4000, capped at 8000."), false),
                ("include_line_starts", boolean("Add line_starts: absolute start offset of each selected line on the page."), false),
            ],
            root: vec![],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "start_line": 1, "end_line": 1})],
        },
        Tool {
            name: "patchdiff_find_occurrences",
            title: "Find occurrences",
            description: "Exact occurrences of text (overlapping ones counted) with code-point spans and context; indexes describe the current target.".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                ("text", nonempty("Exact text to find (case- and whitespace-sensitive)."), true),
                ("context_chars", integer(0, "Context code points on each side; default 40, capped at 400."), false),
                ("start_occurrence", integer(1, "1-based occurrence to start from (a next_occurrence_index); default 1."), false),
                ("max_results", integer(1, "Occurrences to return; default and cap 200."), false),
            ],
            root: vec![],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "text": "alpha", "context_chars": 20})],
        },
        Tool {
            name: "patchdiff_submit_edits",
            title: "Submit edits",
            description: format!("Guarded typed edits (patchdiff-tx/1): exact match/replace, applied in order, all or nothing; every attempt is logged. {GUARD_RULE} A match found more than once needs occurrence_index or anchors."),
            kind: Kind::Submit,
            params: submit_edits,
            root: vec![guard_any_of()],
            output: submission_output(),
            examples: vec![
                json!({"target_file_id": T, "expected_target_version": 0, "intent": "Rename the second alpha", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-001"}),
                json!({"target_file_id": T, "expected_target_version": 1, "intent": "Rename delta", "edits": [{"match": "delta", "replace": "epsilon"}], "client_request_id": "req-002"}),
                json!({"target_file_id": T, "expected_target_version": 1, "intent": "Rename gamma", "edits": [{"match": "gamma", "replace": "delta"}], "parent_pdcp_log_id": PARENT, "attempt": 2, "client_request_id": "req-003"}),
            ],
        },
        Tool {
            name: "patchdiff_submit_operations",
            title: "Submit operations",
            description: format!("Guarded ordered match/span operations (patchdiff-tx/2), all or nothing. Spans use code points in the text after earlier operations and must carry the exact expected_text; start == end with empty expected_text inserts (verify with expected_before/expected_after). {GUARD_RULE}"),
            kind: Kind::Submit,
            params: submit_ops,
            root: vec![guard_any_of(), operations_capabilities()],
            output: submission_output(),
            examples: vec![json!({"target_file_id": T, "expected_target_version": 2, "intent": "Add a heading marker", "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "# ", "expected_after": "alpha"}]})],
        },
        Tool {
            name: "patchdiff_submit_replacement",
            title: "Submit replacement",
            description: format!("Guarded replacement of the whole document (patchdiff-tx/3); only when the whole document is meant to change. {GUARD_RULE}"),
            kind: Kind::Submit,
            params: submit_replacement,
            root: vec![guard_any_of(), replacement_capabilities()],
            output: submission_output(),
            examples: vec![json!({"target_file_id": T, "expected_target_version": 3, "intent": "Replace the document", "replacement": "Final text\n"})],
        },
        Tool {
            name: "patchdiff_preview",
            title: "Preview",
            description: "Read-only advisory evaluation of a tx/1, tx/2 or tx/3 proposal: verdict, facts and warnings; writes nothing and reserves nothing. A guard is required; submission re-checks.".into(),
            kind: Kind::Read,
            params: preview,
            root: vec![guard_any_of()],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "format": "patchdiff-tx/3", "expected_target_version": 4, "intent": "Propose a reviewed text", "replacement": "Reviewed text\n"})],
        },
        Tool {
            name: "patchdiff_save",
            title: "Save checkpoint",
            description: "Snapshot the target and start a new editing cycle; content, version and hash are unchanged. Optional guards are all checked.".into(),
            kind: Kind::Checkpoint,
            params: save,
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_replay",
            title: "Replay",
            description: "Reconstruct the target from its initial snapshot and accepted history; read materialized_state_matches and its four checks.".into(),
            kind: Kind::Read,
            params: vec![id()],
            root: vec![],
            output: status_output(),
            examples: vec![],
        },
        Tool {
            name: "patchdiff_get_pdcp_log",
            title: "Attempt log",
            description: "Newest-first page of accepted and rejected attempts; continue with before_sequence = next_sequence while has_more.".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                limit(),
                before(),
                ("status", nullable(json!({"enum": ["accepted", "rejected"]}), "Only accepted or only rejected attempts."), false),
                ("content_hash", nullable(json!({"type": "string"}), "Only attempts whose stored record has this SHA-256."), false),
                ("client_request_id", nullable(json!({"type": "string"}), "Only the attempt stored under this request key."), false),
                ("include_content", boolean("Include each stored record (1 MiB page budget); default false."), false),
            ],
            root: vec![],
            output: history_output(),
            examples: vec![json!({"target_file_id": T, "limit": 3}), json!({"target_file_id": T, "limit": 3, "before_sequence": 8})],
        },
        Tool {
            name: "patchdiff_get_manifest_ledger",
            title: "Manifest ledger",
            description: "Accepted changes of the newest page, shown oldest-first, with origin, derived facts and their attempt; active editing cycle unless include_previous_cycles.".into(),
            kind: Kind::Read,
            params: vec![id(), ("include_previous_cycles", boolean("Include cycles closed by patchdiff_save; default false."), false), limit(), before()],
            root: vec![],
            output: history_output(),
            examples: vec![json!({"target_file_id": T, "limit": 3}), json!({"target_file_id": T, "limit": 3, "before_sequence": 8})],
        },
    ]
}

/// The tools each profile advertises and accepts.
pub fn in_profile(tool: &str, profile: Profile) -> bool {
    const WORKSPACE: &[&str] = &[
        "patchdiff_initialize_target",
        "patchdiff_read_target",
        "patchdiff_find_occurrences",
        "patchdiff_submit_edits",
        "patchdiff_save",
    ];
    const EDITOR: &[&str] = &[
        "patchdiff_get_target",
        "patchdiff_read_target",
        "patchdiff_read_lines",
        "patchdiff_find_occurrences",
        "patchdiff_submit_edits",
        "patchdiff_submit_operations",
        "patchdiff_preview",
    ];
    const OBSERVED_WORKSPACE: &[&str] = &[
        "patchdiff_initialize_target",
        "patchdiff_read_target",
        "patchdiff_read_lines",
        "patchdiff_find_occurrences",
        "patchdiff_observe_scope",
        "patchdiff_submit_observed_operations",
        "patchdiff_save",
    ];
    const OBSERVED_EDITOR: &[&str] = &[
        "patchdiff_read_target",
        "patchdiff_read_lines",
        "patchdiff_find_occurrences",
        "patchdiff_observe_scope",
        "patchdiff_submit_observed_operations",
    ];
    const OBSERVED_V2: &[&str] = &[
        "patchdiff_read_target",
        "patchdiff_find_occurrences",
        "patchdiff_list_scopes",
        "patchdiff_observe_scopes",
        "patchdiff_commit_bundle",
    ];
    match profile {
        Profile::Full => true,
        Profile::Workspace => WORKSPACE.contains(&tool),
        Profile::Editor => EDITOR.contains(&tool),
        Profile::ObservedWorkspace => OBSERVED_WORKSPACE.contains(&tool),
        Profile::ObservedEditor => OBSERVED_EDITOR.contains(&tool),
        Profile::ObservedV2 => OBSERVED_V2.contains(&tool),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use patchdiff_engine::json::ascii_len;

    fn full_list(revision: &str) -> Value {
        json!({"tools": all_tools().iter().map(|t| t.declaration(revision)).collect::<Vec<_>>()})
    }

    /// Contract "Bounded Wire & Context Budgets": the complete tools/list payload is at most
    /// 65,536 bytes and the examples map at most 8,192, counted as compact ASCII JSON.
    #[test]
    fn discovery_fits_its_budgets() {
        for r in REVISIONS {
            let n = ascii_len(&full_list(r));
            assert!(n <= 65_536, "{r}: {n} bytes");
        }
        let examples: Map<String, Value> = all_tools()
            .iter()
            .filter(|t| !t.examples.is_empty())
            .map(|t| (t.name.to_owned(), json!(t.examples)))
            .collect();
        let n = ascii_len(&Value::Object(examples.clone()));
        assert!(n <= 8_192, "examples: {n} bytes");
        // Contract "Discovery": 13 examples across nine tools.
        assert_eq!(examples.len(), 9);
        assert_eq!(
            examples
                .values()
                .map(|e| e.as_array().unwrap().len())
                .sum::<usize>(),
            13
        );
    }

    /// Every top-level parameter has a one-line description; roots are objects; submission
    /// tools repeat the guard rule in prose.
    #[test]
    fn declarations_are_self_describing() {
        for t in all_tools() {
            let s = t.input_schema();
            assert_eq!(s["type"], "object", "{}", t.name);
            for (name, p) in s["properties"].as_object().unwrap() {
                let d = p["description"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}.{name} has no description", t.name));
                assert!(!d.is_empty() && !d.contains('\n'), "{}.{name}", t.name);
            }
            if t.kind == Kind::Submit {
                assert!(t.description.contains(GUARD_RULE), "{}", t.name);
            }
            assert_eq!(t.output["type"], "object");
        }
    }

    /// The argument names a tool declares are the names the SQL function accepts.
    #[test]
    fn declared_arguments_match_the_sql_api() {
        use patchdiff_engine::{
            checkpoint, export, history, lines, preview, read, replay, submit, target,
        };
        let engine: [(&str, &[&str]); 15] = [
            ("patchdiff_initialize_target", target::INITIALIZE_ARGS),
            ("patchdiff_handle_upload", target::UPLOAD_ARGS),
            ("patchdiff_get_target", &["target_file_id"]),
            ("patchdiff_export_target", export::EXPORT_ARGS),
            ("patchdiff_read_target", read::READ_TARGET_ARGS),
            ("patchdiff_read_lines", lines::READ_LINES_ARGS),
            ("patchdiff_find_occurrences", read::FIND_ARGS),
            ("patchdiff_submit_edits", submit::SUBMIT_EDITS_ARGS),
            (
                "patchdiff_submit_operations",
                submit::SUBMIT_OPERATIONS_ARGS,
            ),
            (
                "patchdiff_submit_replacement",
                submit::SUBMIT_REPLACEMENT_ARGS,
            ),
            ("patchdiff_preview", preview::PREVIEW_ARGS),
            ("patchdiff_save", checkpoint::SAVE_ARGS),
            ("patchdiff_replay", replay::REPLAY_ARGS),
            ("patchdiff_get_pdcp_log", history::LOG_ARGS),
            ("patchdiff_get_manifest_ledger", history::LEDGER_ARGS),
        ];
        assert_eq!(engine.len(), all_tools().len());
        for (name, args) in engine {
            let tool = all_tools().into_iter().find(|t| t.name == name).unwrap();
            let mut declared: Vec<&str> = tool.allowed().collect();
            let mut accepted = args.to_vec();
            declared.sort();
            accepted.sort();
            assert_eq!(declared, accepted, "{name}");
        }
        // Required arguments: what the SQL function reports missing is what the schema requires.
        let required: [(&str, &[&str]); 4] = [
            ("patchdiff_submit_edits", submit::SUBMIT_EDITS_REQUIRED),
            (
                "patchdiff_submit_operations",
                submit::SUBMIT_OPERATIONS_REQUIRED,
            ),
            (
                "patchdiff_submit_replacement",
                submit::SUBMIT_REPLACEMENT_REQUIRED,
            ),
            ("patchdiff_preview", preview::PREVIEW_REQUIRED),
        ];
        for (name, args) in required {
            let tool = all_tools().into_iter().find(|t| t.name == name).unwrap();
            let mut declared: Vec<&str> = tool.required().collect();
            let mut accepted = args.to_vec();
            declared.sort();
            accepted.sort();
            assert_eq!(declared, accepted, "{name}");
        }
    }

    /// Contract "Discovery": both newer submission tools advertise x-patchdiff-capabilities
    /// taken from the runtime constants.
    #[test]
    fn capabilities_come_from_the_runtime_constants() {
        use patchdiff_engine::{limits, tx2, tx3};
        let tools = all_tools();
        let schema = |n: &str| tools.iter().find(|t| t.name == n).unwrap().input_schema();
        let ops = &schema("patchdiff_submit_operations")["x-patchdiff-capabilities"];
        assert_eq!(ops["protocol"], tx2::PROTOCOL);
        assert_eq!(ops["runtime"], tx2::RUNTIME);
        assert_eq!(ops["span_context"]["runtime"], tx2::RUNTIME_SPAN_CONTEXT);
        assert_eq!(ops["operations"], json!(["match", "span"]));
        let rep = &schema("patchdiff_submit_replacement")["x-patchdiff-capabilities"];
        assert_eq!(rep["protocol"], tx3::PROTOCOL);
        assert_eq!(rep["runtime"], tx3::RUNTIME);
        assert_eq!(
            rep["limits"]["max_code_points"],
            limits::REPLACEMENT_MAX_CODE_POINTS
        );
        assert_eq!(
            rep["limits"]["max_utf8_bytes"],
            limits::REPLACEMENT_MAX_UTF8_BYTES
        );
    }
}
