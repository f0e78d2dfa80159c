//! The observed_v2 aliases (observed-editor-v2.txt): each routes to one mode of an Observed
//! tool's SQL function (crate::observed_v2).

use super::observed::{
    BUNDLE, H, O1, O2, OBSERVED_SCOPE_RULES, SNAPSHOT_GUARD_RULE, groups_param, line_starts_param,
    max_chars_param, nonblank_filter, receipt_output, selections_param, snapshot_schema,
};
use super::schema::{T, nonempty, output, submission_options, target_id};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::json;

pub(super) fn tools() -> Vec<Declaration> {
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
            json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$", "not": {"pattern": "\\n$"}, "description": "Required request key, 1-128 printable ASCII without spaces: resend the identical call to recover a lost response."}),
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
        Declaration {
            tool: Tool::ListScopes,
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
            forms: &[],
            output: output(json!({
                "status": {"type": "string"},
                "target_file_id": {"type": ["string", "null"]},
                "candidates": {"type": "array"},
                "total_candidates": {"type": "integer"},
                "candidates_truncated": {"type": "boolean"}
            })),
            examples: vec![json!({"target_file_id": T, "query": "flush", "kind": "method"})],
        },
        Declaration {
            tool: Tool::ObserveScopes,
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
            forms: &[],
            output: output(json!({
                "status": {"type": "string"},
                "target_file_id": {"type": ["string", "null"]},
                "observation_bundle_id": {"type": ["string", "null"]},
                "snapshot": snapshot_schema("Pass to patchdiff_commit_bundle unchanged."),
                "scopes": {"type": "array"}
            })),
            examples: vec![json!({"target_file_id": T, "selections": [{"symbol_name": "Uploader.flush", "kind": "method"}, {"symbol_name": "FRAME_SYNC_STREAM"}]})],
        },
        Declaration {
            tool: Tool::CommitBundle,
            meta: None,
            title: "Commit bundle",
            description: format!("Commit ordered tx/2 match/span operations to observed scopes as one atomic, logged transaction: pass the snapshot from patchdiff_observe_scopes unchanged, with one group {{observation_id, operations}} per edited scope (1-32 groups, at most 128 operations, any subset of the bundle; one scope is one selection and one group). {SNAPSHOT_GUARD_RULE} Coordinates are scope-local: each group's span offsets, match counts and anchors count from 0 at its scope's start, in that group's own buffer after its earlier operations. {OBSERVED_SCOPE_RULES} Any failure rejects everything; success advances the version once. Resend the identical call with the same client_request_id to recover a lost response. The receipt (at most 8,192 bytes) gives transaction before/after, current state, scope and warning summaries; omissions are listed in presentation.omitted_fields."),
            kind: Kind::Submit,
            params: commit,
            root: vec![],
            forms: &[],
            output: receipt_output(),
            examples: vec![json!({"snapshot": snapshot, "intent": "Two scoped edits", "client_request_id": "req-201", "groups": [{"observation_id": O1, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}]}, {"observation_id": O2, "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v1", "replace": "v2"}]}]})],
        },
    ]
}
