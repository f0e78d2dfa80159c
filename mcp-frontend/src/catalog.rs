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
    /// Issues observations: writes authority rows, changes no target.
    Observe,
    Submit,
    Checkpoint,
}

pub struct Tool {
    pub name: &'static str,
    /// The SQL function one call of this tool makes (the tool's own name, except for the
    /// observed_v2 aliases).
    pub function: &'static str,
    /// `_meta` of the declaration on revisions after 2024-11-05 (observed_v2: alwaysLoad).
    pub meta: Option<Value>,
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
            Kind::Observe => (false, false, false),
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
            if let Some(meta) = &self.meta {
                d.insert("_meta".into(), meta.clone());
            }
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
fn replacement_capabilities() -> (&'static str, Value) {
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
    let mut tools = vec![
        Tool {
            name: "patchdiff_initialize_target",
            function: "patchdiff_initialize_target",
            meta: None,
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
            function: "patchdiff_handle_upload",
            meta: None,
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
            function: "patchdiff_get_target",
            meta: None,
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
            function: "patchdiff_export_target",
            meta: None,
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
            function: "patchdiff_read_target",
            meta: None,
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
            function: "patchdiff_read_lines",
            meta: None,
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
            function: "patchdiff_find_occurrences",
            meta: None,
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
            function: "patchdiff_submit_edits",
            meta: None,
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
            function: "patchdiff_submit_operations",
            meta: None,
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
            function: "patchdiff_submit_replacement",
            meta: None,
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
            function: "patchdiff_preview",
            meta: None,
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
            function: "patchdiff_save",
            meta: None,
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
            function: "patchdiff_replay",
            meta: None,
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
            function: "patchdiff_get_pdcp_log",
            meta: None,
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
            function: "patchdiff_get_manifest_ledger",
            meta: None,
            title: "Manifest ledger",
            description: "Accepted changes of the newest page, shown oldest-first, with origin, derived facts and their attempt; active editing cycle unless include_previous_cycles.".into(),
            kind: Kind::Read,
            params: vec![id(), ("include_previous_cycles", boolean("Include cycles closed by patchdiff_save; default false."), false), limit(), before()],
            root: vec![],
            output: history_output(),
            examples: vec![json!({"target_file_id": T, "limit": 3}), json!({"target_file_id": T, "limit": 3, "before_sequence": 8})],
        },
    ];
    tools.extend(structural_tools());
    tools.extend(observed_v2_tools());
    tools
}

/// Placeholders of the structural examples: observation, second observation, bundle, hash.
const O1: &str = "33333333-3333-4333-8333-333333333333";
const O2: &str = "44444444-4444-4444-8444-444444444444";
const BUNDLE: &str = "55555555-5555-4555-8555-555555555555";
const H: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The guard rule of observed submissions: unlike the unobserved tools, both guards.
const OBSERVED_GUARD_RULE: &str = "Both guards are required: expected_target_version and expected_current_hash, the target_version and target_current_hash of the observation; both are checked.";
/// The same rule as patchdiff_commit_bundle states it: the snapshot carries both guards.
const SNAPSHOT_GUARD_RULE: &str = "Both guards are required and travel in the snapshot (expected_target_version, expected_current_hash); both are checked.";

/// Insertion and scope rules shared by both observed submission tools.
const OBSERVED_SCOPE_RULES: &str = "Nonempty edits stay inside the running scope (its end moves with earlier operations); a whole-scope replacement is allowed. An insertion (start == end, expected_text \"\") must lie strictly inside the scope, never at either boundary, and carry nonempty expected_before and expected_after matching the adjacent text inside the scope (OBSERVED_INSERTION_GUARDS_REQUIRED, OPERATION_OUTSIDE_OBSERVED_SCOPE otherwise): derive later guards from the buffer after earlier operations.";

fn observed_guards() -> Vec<(&'static str, Value, bool)> {
    vec![
        (
            "expected_target_version",
            json!({"type": "integer", "minimum": 0, "description": "Required version guard: the observation's target_version."}),
            false,
        ),
        (
            "expected_current_hash",
            described(
                strict(HASH_RE),
                "Required hash guard: the observation's 64-hex target_current_hash.",
            ),
            false,
        ),
    ]
}

fn operations_list(description: &str) -> Value {
    json!({"type": "array", "minItems": 1, "items": operation_item(), "description": description})
}

/// `groups` of a batch: one observation of the bundle with its ordered operations.
fn groups_param() -> (&'static str, Value, bool) {
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

fn selections_param(required: bool) -> (&'static str, Value, bool) {
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

fn max_chars_param() -> (&'static str, Value, bool) {
    (
        "max_chars",
        nullable(
            json!({"type": "integer", "minimum": 1}),
            "Page size per scope in code points; default 4000, capped at 8000.",
        ),
        false,
    )
}

fn line_starts_param() -> (&'static str, Value, bool) {
    (
        "include_line_starts",
        boolean(
            "Add line_starts: absolute start offsets of the lines that start on each page; default false.",
        ),
        false,
    )
}

fn nonblank_filter(name: &'static str, description: &str) -> (&'static str, Value, bool) {
    (
        name,
        nullable(json!({"type": "string", "minLength": 1}), description),
        false,
    )
}

fn observe_output() -> Value {
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

fn snapshot_schema(description: &str) -> Value {
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
fn receipt_output() -> Value {
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
fn structural_tools() -> Vec<Tool> {
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
        Tool {
            name: "patchdiff_observe_scope",
            function: "patchdiff_observe_scope",
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
            output: observe_output(),
            examples: vec![
                json!({"target_file_id": T, "query": "flush", "kind": "method"}),
                json!({"target_file_id": T, "symbol_name": "Uploader.flush", "kind": "method"}),
                json!({"target_file_id": T, "selections": [{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM", "kind": "variable"}]}),
                json!({"target_file_id": T, "observation_id": O1, "offset": 4000, "max_chars": 4000}),
            ],
        },
        Tool {
            name: "patchdiff_submit_observed_operations",
            function: "patchdiff_submit_observed_operations",
            meta: None,
            title: "Submit observed operations",
            description: format!("Guarded patchdiff-tx/2 match/span operations confined to observations from patchdiff_observe_scope, all or nothing; every attempt is logged. Exclusive forms: single (observation_id + operations: spans are absolute code points inside [scope_start, scope_end); match counts only inside the scope) or batch (observation_bundle_id + groups [{{observation_id, operations}}], 1-32 groups, at most 128 operations, any nonempty subset of the bundle, client_request_id required: each group's spans, match counts and anchors are scope-local, from 0 at its scope's start in its own buffer after its earlier operations; success advances the version once). {OBSERVED_GUARD_RULE} {OBSERVED_SCOPE_RULES} An accepted attempt consumes its observations; any commit or SAVE makes the rest stale: observe again. Resend the identical keyed call to recover a lost response: recovery precedes guard and observation checks."),
            kind: Kind::Submit,
            params: submit,
            root: vec![],
            output: submission_output(),
            examples: vec![
                json!({"target_file_id": T, "observation_id": O1, "intent": "Raise the flush limit", "expected_target_version": 3, "expected_current_hash": H, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}], "client_request_id": "req-101"}),
                json!({"target_file_id": T, "observation_bundle_id": BUNDLE, "intent": "Two scoped edits", "expected_target_version": 3, "expected_current_hash": H, "client_request_id": "req-102", "groups": [{"observation_id": O1, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}]}, {"observation_id": O2, "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v1", "replace": "v2"}]}]}),
            ],
        },
    ]
}

/// The observed_v2 aliases (observed-editor-v2.txt): each routes to one mode of an existing
/// SQL function (crate::observed_v2).
fn observed_v2_tools() -> Vec<Tool> {
    let snapshot = json!({"target_file_id": T, "expected_target_version": 3, "expected_current_hash": H, "observation_bundle_id": BUNDLE});
    let mut commit = vec![
        (
            "snapshot",
            snapshot_schema(
                "The snapshot patchdiff_observe_scopes returned, unchanged: exactly target_file_id, expected_target_version, expected_current_hash, observation_bundle_id.",
            ),
            true,
        ),
        (
            "intent",
            nonempty("What this transaction is for (recorded; never used for matching)."),
            true,
        ),
        (
            "client_request_id",
            json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$", "description": "Required request key, 1-128 printable ASCII without spaces: resend the identical call to recover a lost response."}),
            true,
        ),
        {
            let (name, schema, _) = groups_param();
            (name, schema, true)
        },
    ];
    commit.extend(
        submission_options()
            .into_iter()
            .filter(|(name, _, _)| *name != "client_request_id"),
    );
    vec![
        Tool {
            name: "patchdiff_list_scopes",
            function: "patchdiff_observe_scope",
            meta: None,
            title: "List scopes",
            description: "List structural symbol candidates (name, kind, parent, path, span, lines) of a .py, .ts, .js, .json, .md, .yaml, .toml or .sh target in document order, at most 200 (total_candidates, candidates_truncated). Issues no observation and grants no edit authority; optional: select a known exact name directly with patchdiff_observe_scopes.".into(),
            kind: Kind::Read,
            params: vec![
                target_id(),
                nonblank_filter("query", "Case-insensitive substring of symbol names and paths; nonblank, never trimmed."),
                nonblank_filter("kind", "Symbol kind filter: function, class, method, variable, config_item, object, section, table_row, code_block, ..."),
            ],
            root: vec![],
            output: output(json!({
                "status": {"type": "string"},
                "target_file_id": {"type": ["string", "null"]},
                "candidates": {"type": "array"},
                "total_candidates": {"type": "integer"},
                "candidates_truncated": {"type": "boolean"}
            })),
            examples: vec![json!({"target_file_id": T, "query": "flush", "kind": "method"})],
        },
        Tool {
            name: "patchdiff_observe_scopes",
            function: "patchdiff_observe_scope",
            meta: None,
            title: "Observe scopes",
            description: "Issue 1-32 exact, unique, disjoint scopes from one target snapshot, all or none: status observed_batch with snapshot {target_file_id, expected_target_version, expected_current_hash, observation_bundle_id}, to pass unchanged to patchdiff_commit_bundle, and per scope its observation_id, symbol_name, kind, scope_start, scope_end, observed_scope_hash and text (first page: 4,000 code points by default, at most 8,000). Scope contents total at most 65,536 code points and returned text at most 32,768 (BUNDLE_RESPONSE_TOO_LARGE: lower max_chars or select fewer). No match is not_found (SCOPE_NOT_FOUND), several are ambiguous (AMBIGUOUS_SCOPE_SELECTION), naming selection_index. Use names exactly as listed, punctuation included. Continue a truncated scope with patchdiff_read_target at start = scope_start + next_offset. Issuing writes observation rows; a commit or SAVE makes them stale.".into(),
            kind: Kind::Observe,
            params: vec![
                target_id(),
                selections_param(true),
                max_chars_param(),
                line_starts_param(),
            ],
            root: vec![],
            output: output(json!({
                "status": {"type": "string"},
                "target_file_id": {"type": ["string", "null"]},
                "observation_bundle_id": {"type": ["string", "null"]},
                "snapshot": snapshot_schema("Pass to patchdiff_commit_bundle unchanged."),
                "scopes": {"type": "array"}
            })),
            examples: vec![json!({"target_file_id": T, "selections": [{"symbol_name": "Uploader.flush", "kind": "method"}, {"symbol_name": "FRAME_SYNC_STREAM"}]})],
        },
        Tool {
            name: "patchdiff_commit_bundle",
            function: "patchdiff_submit_observed_operations",
            meta: None,
            title: "Commit bundle",
            description: format!("Commit ordered tx/2 match/span operations to observed scopes as one atomic, logged transaction: pass the snapshot from patchdiff_observe_scopes unchanged, with one group {{observation_id, operations}} per edited scope (1-32 groups, at most 128 operations, any subset of the bundle; one scope is one selection and one group). {SNAPSHOT_GUARD_RULE} Coordinates are scope-local: each group's span offsets, match counts and anchors count from 0 at its scope's start, in that group's own buffer after its earlier operations. {OBSERVED_SCOPE_RULES} Any failure rejects everything; success advances the version once. Resend the identical call with the same client_request_id to recover a lost response. The receipt (at most 8,192 bytes) gives transaction before/after, current state, scope and warning summaries; omissions are listed in presentation.omitted_fields."),
            kind: Kind::Submit,
            params: commit,
            root: vec![],
            output: receipt_output(),
            examples: vec![json!({"snapshot": snapshot, "intent": "Two scoped edits", "client_request_id": "req-201", "groups": [{"observation_id": O1, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}]}, {"observation_id": O2, "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v1", "replace": "v2"}]}]})],
        },
    ]
}

/// The observed_v2 aliases: no other profile lists them (full lists the tools they route to).
pub const OBSERVED_V2_ONLY: &[&str] = &[
    "patchdiff_list_scopes",
    "patchdiff_observe_scopes",
    "patchdiff_commit_bundle",
];

/// `_meta` of every observed_v2 declaration (observed-editor-v2.txt: "All five tools carry
/// _meta: {"antigravity/alwaysLoad": true} on modern connections").
pub fn always_load() -> Value {
    json!({"antigravity/alwaysLoad": true})
}

/// The catalog of a profile, in catalog order, before the installed-function filter: the
/// profile's tools, with observed_v2's `_meta`.
pub fn profile_tools(profile: Profile) -> Vec<Tool> {
    let mut tools: Vec<Tool> = all_tools()
        .into_iter()
        .filter(|t| in_profile(t.name, profile))
        .collect();
    if profile == Profile::ObservedV2 {
        for t in &mut tools {
            t.meta = Some(always_load());
        }
    }
    tools
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
        Profile::Full => !OBSERVED_V2_ONLY.contains(&tool),
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
    use patchdiff_engine::wire::ascii_len;

    fn list(tools: &[Tool], revision: &str) -> Value {
        json!({"tools": tools.iter().map(|t| t.declaration(revision)).collect::<Vec<_>>()})
    }

    fn examples(tools: &[Tool]) -> Map<String, Value> {
        tools
            .iter()
            .filter(|t| !t.examples.is_empty())
            .map(|t| (t.name.to_owned(), json!(t.examples)))
            .collect()
    }

    /// Contract "Bounded Wire & Context Budgets": the complete tools/list payload is at most
    /// 65,536 bytes and the examples map at most 8,192, counted as compact ASCII JSON, for
    /// every profile and revision (and for the whole catalog).
    #[test]
    fn discovery_fits_its_budgets() {
        let mut catalogs: Vec<(String, Vec<Tool>)> = vec![("(all)".into(), all_tools())];
        for p in Profile::ALL {
            catalogs.push((p.name().into(), profile_tools(p)));
        }
        for (name, tools) in &catalogs {
            for r in REVISIONS {
                let n = ascii_len(&list(tools, r));
                assert!(n <= 65_536, "{name} {r}: {n} bytes");
            }
            let n = ascii_len(&Value::Object(examples(tools)));
            assert!(n <= 8_192, "{name} examples: {n} bytes");
        }
        // Contract "Discovery": 13 examples across nine of the fifteen core tools.
        let core: Vec<Tool> = all_tools().into_iter().take(15).collect();
        let core = examples(&core);
        assert_eq!(core.len(), 9);
        let count = |m: &Map<String, Value>| {
            m.values()
                .map(|e| e.as_array().unwrap().len())
                .sum::<usize>()
        };
        assert_eq!(count(&core), 13);
        // Structural: "filtered candidate discovery, direct single selection, batch selection,
        // observation paging, and separate single/batch submissions".
        let tools = all_tools();
        let ex = |n: &str| tools.iter().find(|t| t.name == n).unwrap().examples.clone();
        let observe = ex("patchdiff_observe_scope");
        assert!(observe[0].get("query").is_some() && observe[0].get("kind").is_some());
        assert!(observe[1].get("symbol_name").is_some());
        assert!(observe[2].get("selections").is_some());
        assert!(observe[3].get("observation_id").is_some() && observe[3].get("offset").is_some());
        let submit = ex("patchdiff_submit_observed_operations");
        assert!(submit[0].get("observation_id").is_some() && submit[0].get("groups").is_none());
        assert!(submit[1].get("groups").is_some() && submit[1].get("operations").is_none());
    }

    /// Examples use only declared names and include every required one.
    #[test]
    fn examples_use_declared_names() {
        for t in all_tools() {
            for e in &t.examples {
                for k in e.as_object().unwrap().keys() {
                    assert!(t.allowed().any(|a| a == k), "{}: {k}", t.name);
                }
                for r in t.required() {
                    assert!(e.get(r).is_some(), "{}: {r}", t.name);
                }
            }
        }
    }

    /// Every top-level parameter has a one-line description; roots are objects; submission
    /// tools repeat their guard rule in prose (observed submissions need both guards).
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
                let rule = match t.name {
                    "patchdiff_submit_observed_operations" => OBSERVED_GUARD_RULE,
                    "patchdiff_commit_bundle" => SNAPSHOT_GUARD_RULE,
                    _ => GUARD_RULE,
                };
                assert!(t.description.contains(rule), "{}", t.name);
            }
            assert_eq!(t.output["type"], "object");
        }
    }

    /// Contract "Structural Observation and Scoped Submission": the descriptions state the
    /// engine's limits.
    #[test]
    fn structural_descriptions_state_the_limits() {
        use patchdiff_engine::wire::limits::{
            OBSERVED_MAX_BATCH_OPERATIONS, OBSERVED_MAX_GROUPS, READ_DEFAULT_CHARS, READ_MAX_CHARS,
        };
        use patchdiff_engine::wire::observation::{
            BUNDLE_SCOPE_MAX_CHARS, BUNDLE_SELECTIONS_MAX, BUNDLE_TEXT_MAX_CHARS,
            SCOPE_CANDIDATES_MAX,
        };
        let grouped = |n: usize| {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i).is_multiple_of(3) {
                    out.push(',');
                }
                out.push(c);
            }
            out
        };
        let tools = all_tools();
        let d = |n: &str| {
            tools
                .iter()
                .find(|t| t.name == n)
                .unwrap()
                .description
                .clone()
        };
        for (tool, facts) in [
            (
                "patchdiff_observe_scope",
                vec![
                    grouped(SCOPE_CANDIDATES_MAX),
                    format!("1-{BUNDLE_SELECTIONS_MAX}"),
                    grouped(BUNDLE_SCOPE_MAX_CHARS),
                    grouped(BUNDLE_TEXT_MAX_CHARS),
                    grouped(READ_DEFAULT_CHARS),
                    grouped(READ_MAX_CHARS),
                ],
            ),
            (
                "patchdiff_observe_scopes",
                vec![
                    format!("1-{BUNDLE_SELECTIONS_MAX}"),
                    grouped(BUNDLE_SCOPE_MAX_CHARS),
                    grouped(BUNDLE_TEXT_MAX_CHARS),
                    grouped(READ_DEFAULT_CHARS),
                    grouped(READ_MAX_CHARS),
                ],
            ),
            (
                "patchdiff_submit_observed_operations",
                vec![
                    format!("1-{OBSERVED_MAX_GROUPS} groups"),
                    format!("at most {OBSERVED_MAX_BATCH_OPERATIONS} operations"),
                ],
            ),
            (
                "patchdiff_commit_bundle",
                vec![
                    format!("1-{OBSERVED_MAX_GROUPS} groups"),
                    format!("at most {OBSERVED_MAX_BATCH_OPERATIONS} operations"),
                    grouped(crate::observed_v2::RECEIPT_MAX_BYTES),
                ],
            ),
        ] {
            for f in facts {
                assert!(d(tool).contains(&f), "{tool}: {f}");
            }
        }
    }

    /// observed-editor-v2: exactly five tools; `_meta` alwaysLoad, outputSchema and annotations
    /// on 2025-06-18 and 2025-11-25 only; observation writes, commits are destructive.
    #[test]
    fn the_observed_v2_catalog() {
        let tools = profile_tools(Profile::ObservedV2);
        let names: Vec<&str> = tools.iter().map(|t| t.name).collect();
        assert_eq!(
            names,
            [
                "patchdiff_read_target",
                "patchdiff_find_occurrences",
                "patchdiff_list_scopes",
                "patchdiff_observe_scopes",
                "patchdiff_commit_bundle"
            ]
        );
        let routes: Vec<&str> = tools.iter().map(|t| t.function).collect();
        assert_eq!(
            routes,
            [
                "patchdiff_read_target",
                "patchdiff_find_occurrences",
                "patchdiff_observe_scope",
                "patchdiff_observe_scope",
                "patchdiff_submit_observed_operations"
            ]
        );
        for t in &tools {
            let old = t.declaration(REVISIONS[0]);
            for k in ["_meta", "outputSchema", "annotations", "title"] {
                assert!(old.get(k).is_none(), "{} {k}", t.name);
            }
            for r in &REVISIONS[1..] {
                let d = t.declaration(r);
                assert_eq!(
                    d["_meta"],
                    json!({"antigravity/alwaysLoad": true}),
                    "{}",
                    t.name
                );
                assert_eq!(d["outputSchema"]["type"], "object");
                assert_eq!(d["annotations"]["openWorldHint"], false);
            }
        }
        let hints = |n: &str| {
            let a = tools.iter().find(|t| t.name == n).unwrap().annotations();
            (
                a["readOnlyHint"].as_bool().unwrap(),
                a["destructiveHint"].as_bool().unwrap(),
                a["idempotentHint"].as_bool().unwrap(),
            )
        };
        assert_eq!(hints("patchdiff_read_target"), (true, false, true));
        assert_eq!(hints("patchdiff_find_occurrences"), (true, false, true));
        assert_eq!(hints("patchdiff_list_scopes"), (true, false, true));
        assert_eq!(hints("patchdiff_observe_scopes"), (false, false, false));
        assert_eq!(hints("patchdiff_commit_bundle"), (false, true, false));
        let commit = tools
            .iter()
            .find(|t| t.name == "patchdiff_commit_bundle")
            .unwrap();
        let mut required: Vec<&str> = commit.required().collect();
        required.sort_unstable();
        assert_eq!(
            required,
            ["client_request_id", "groups", "intent", "snapshot"]
        );
        let snapshot = &commit.input_schema()["properties"]["snapshot"];
        assert_eq!(
            snapshot["required"],
            json!(crate::observed_v2::SNAPSHOT_FIELDS)
        );
        assert_eq!(snapshot["additionalProperties"], false);
        assert_eq!(commit.output["required"], json!(["status", "presentation"]));
        // The structural tools of the other profiles: observation writes, submission destroys;
        // no other profile's declaration carries _meta.
        let all = all_tools();
        let a = |n: &str| all.iter().find(|t| t.name == n).unwrap().annotations();
        assert_eq!(a("patchdiff_observe_scope")["readOnlyHint"], false);
        assert_eq!(a("patchdiff_observe_scope")["destructiveHint"], false);
        assert_eq!(
            a("patchdiff_submit_observed_operations")["destructiveHint"],
            true
        );
        assert_eq!(
            a("patchdiff_submit_observed_operations")["idempotentHint"],
            false
        );
        for p in Profile::ALL
            .into_iter()
            .filter(|p| *p != Profile::ObservedV2)
        {
            for t in profile_tools(p) {
                assert!(
                    t.declaration(REVISIONS[2]).get("_meta").is_none(),
                    "{}",
                    t.name
                );
            }
        }
    }

    /// docs/profiles.md: which tools each profile lists. The observed profiles offer no
    /// unobserved mutation route; the editor profiles no lifecycle.
    #[test]
    fn profile_membership() {
        let names =
            |p: Profile| -> Vec<&'static str> { profile_tools(p).iter().map(|t| t.name).collect() };
        assert_eq!(names(Profile::Full).len(), 17);
        assert!(
            names(Profile::Full)
                .iter()
                .all(|n| !OBSERVED_V2_ONLY.contains(n))
        );
        assert_eq!(
            names(Profile::ObservedWorkspace),
            [
                "patchdiff_initialize_target",
                "patchdiff_read_target",
                "patchdiff_read_lines",
                "patchdiff_find_occurrences",
                "patchdiff_save",
                "patchdiff_observe_scope",
                "patchdiff_submit_observed_operations"
            ]
        );
        assert_eq!(
            names(Profile::ObservedEditor),
            [
                "patchdiff_read_target",
                "patchdiff_read_lines",
                "patchdiff_find_occurrences",
                "patchdiff_observe_scope",
                "patchdiff_submit_observed_operations"
            ]
        );
        assert_eq!(names(Profile::Workspace).len(), 5);
        assert_eq!(names(Profile::Editor).len(), 7);
        assert_eq!(names(Profile::ObservedV2).len(), 5);
        let unobserved = [
            "patchdiff_submit_edits",
            "patchdiff_submit_operations",
            "patchdiff_submit_replacement",
            "patchdiff_preview",
        ];
        let lifecycle = [
            "patchdiff_initialize_target",
            "patchdiff_handle_upload",
            "patchdiff_get_target",
            "patchdiff_export_target",
            "patchdiff_save",
            "patchdiff_replay",
        ];
        for p in [
            Profile::ObservedWorkspace,
            Profile::ObservedEditor,
            Profile::ObservedV2,
        ] {
            assert!(names(p).iter().all(|n| !unobserved.contains(n)), "{p:?}");
        }
        for p in [Profile::ObservedEditor, Profile::ObservedV2] {
            assert!(names(p).iter().all(|n| !lifecycle.contains(n)), "{p:?}");
        }
    }

    /// The argument names a tool declares are the names the SQL function accepts.
    #[test]
    fn declared_arguments_match_the_sql_api() {
        use patchdiff_engine::wire::{
            checkpoint, export, history, lines, observation as observe, preview, read, replay,
            scoped as observed, submit, target,
        };
        let engine: [(&str, &[&str]); 17] = [
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
            ("patchdiff_observe_scope", observe::OBSERVE_ARGS),
            (
                "patchdiff_submit_observed_operations",
                observed::SUBMIT_OBSERVED_ARGS,
            ),
        ];
        assert_eq!(engine.len() + OBSERVED_V2_ONLY.len(), all_tools().len());
        for (name, args) in engine {
            let tool = all_tools().into_iter().find(|t| t.name == name).unwrap();
            let mut declared: Vec<&str> = tool.allowed().collect();
            let mut accepted = args.to_vec();
            declared.sort();
            accepted.sort();
            assert_eq!(declared, accepted, "{name}");
        }
        // Required arguments: what the SQL function reports missing is what the schema requires.
        let required: [(&str, &[&str]); 5] = [
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
            (
                "patchdiff_submit_observed_operations",
                observed::SUBMIT_OBSERVED_REQUIRED,
            ),
        ];
        for (name, args) in required {
            let tool = all_tools().into_iter().find(|t| t.name == name).unwrap();
            let mut declared: Vec<&str> = tool.required().collect();
            let mut accepted = args.to_vec();
            declared.sort();
            accepted.sort();
            assert_eq!(declared, accepted, "{name}");
        }
        // observed_v2: each alias declares the names of exactly one mode of its function.
        let names = |n: &str| -> Vec<&'static str> {
            let mut v: Vec<&str> = all_tools()
                .into_iter()
                .find(|t| t.name == n)
                .unwrap()
                .allowed()
                .collect();
            v.sort_unstable();
            v
        };
        assert_eq!(
            names("patchdiff_list_scopes"),
            ["kind", "query", "target_file_id"]
        );
        assert_eq!(
            names("patchdiff_observe_scopes"),
            [
                "include_line_starts",
                "max_chars",
                "selections",
                "target_file_id"
            ]
        );
        for n in names("patchdiff_list_scopes")
            .into_iter()
            .chain(names("patchdiff_observe_scopes"))
        {
            assert!(observe::OBSERVE_ARGS.contains(&n), "{n}");
        }
        // The commit's routed names are the batch form's.
        let mut routed: Vec<&str> = names("patchdiff_commit_bundle")
            .into_iter()
            .filter(|n| *n != "snapshot")
            .chain(crate::observed_v2::SNAPSHOT_FIELDS)
            .collect();
        routed.sort_unstable();
        let mut batch: Vec<&str> = observed::SUBMIT_OBSERVED_ARGS
            .iter()
            .copied()
            .filter(|n| !observed::SINGLE_FORM_ARGS.contains(n))
            .collect();
        batch.sort_unstable();
        assert_eq!(routed, batch);
    }

    /// Contract "Discovery": both newer submission tools advertise x-patchdiff-capabilities
    /// taken from the runtime constants.
    #[test]
    fn capabilities_come_from_the_runtime_constants() {
        use patchdiff_engine::wire::{limits, tx2, tx3};
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
