-- Documentation of the SQL API, shown by \df+ and \dd. One json argument, the MCP tool's
-- arguments; one json result, the tool's response as the contract describes it.

COMMENT ON FUNCTION @extschema@.patchdiff_initialize_target(json) IS
'Create a target from inline content. args: filename (string, required), content (string, required), content_type (string, default text/plain), project_id (UUID string or null), from_workspace (boolean; served by patchdiff-mcp only), workspace_binding ({root_device, root_inode, relative_path}: passed by patchdiff-mcp when it imported content from its workspace; the baseline is the SHA-256 of content). Line endings are recorded as source_line_endings, then normalized to LF; version 0, an active editing cycle and the initial snapshot are written.';

COMMENT ON FUNCTION @extschema@.patchdiff_handle_upload(json) IS
'Upload alias of patchdiff_initialize_target. args: filename, content and content_type (all required), project_id (optional).';

COMMENT ON FUNCTION @extschema@.patchdiff_get_target(json) IS
'Canonical metadata and content of a target. args: target_file_id (UUID string). Returns current_content, current_hash (SHA-256 of the LF text), version, active_editing_cycle_id, source_line_endings.';

COMMENT ON FUNCTION @extschema@.patchdiff_read_target(json) IS
'Authoritative read of a code-point slice. args: target_file_id, start (integer >= 0, default 0), length (integer >= 1 or null; default 4000, capped at 8000). Returns text, end (exclusive), total_chars, truncated and next_start (null on the last page), with version and current_hash.';

COMMENT ON FUNCTION @extschema@.patchdiff_find_occurrences(json) IS
'Exact occurrences of text, overlapping ones counted, in code points. args: target_file_id, text (non-empty), context_chars (integer >= 0, default 40, capped at 400), start_occurrence (>= 1, default 1), max_results (>= 1, default and cap 200). Returns occurrence_count, occurrences[{occurrence_index, start, end, before, after}], truncated, next_occurrence_index.';

COMMENT ON FUNCTION @extschema@.patchdiff_submit_edits(json) IS
'Typed edits, protocol patchdiff-tx/1 (runtime patchdiff-mvp-0.2.2), applied all or nothing under the target row lock in the caller''s transaction. args: target_file_id, intent, edits[{match, replace, change_id?, rationale?, risk?, occurrence_index?, anchor_before?, anchor_after?}], expected_target_version and/or expected_current_hash (at least one guard is required; every supplied guard is checked), client_request_id (1-128 printable ASCII; recovers a recorded outcome), parent_pdcp_log_id (a rejected attempt being retried), attempt, source, include_correlation_id. Every attempt, accepted or rejected, is logged.';

COMMENT ON FUNCTION @extschema@.patchdiff_submit(uuid, text, json, bigint, text, text, uuid, bigint, text, boolean) IS
'Named-argument form of patchdiff_submit_edits for SQL callers: SELECT patchdiff_submit(target_file_id => ..., intent => ..., edits => ''[{"match": "a", "replace": "b"}]'', expected_target_version => 0). Returns the same json result.';

COMMENT ON FUNCTION @extschema@.patchdiff_submit_operations(json) IS
'Guarded ordered operations, protocol patchdiff-tx/2, applied all or nothing under the target row lock. args: target_file_id, intent, operations[{op: "match", match, replace, change_id?, rationale?, risk?, occurrence_index?, anchor_before?, anchor_after?} | {op: "span", start, end, expected_text, replace, change_id?, rationale?, risk?, expected_before?, expected_after?}], expected_target_version and/or expected_current_hash (at least one), source, parent_pdcp_log_id, attempt, client_request_id, include_correlation_id. Span offsets are code points of the sequential buffer (the text after earlier operations), end exclusive; send several spans from one read in descending start order; start = end with empty expected_text inserts. Runtime patchdiff-mvp-0.3.0, or patchdiff-mvp-0.5.0 when any span carries expected_before/expected_after (adjacent context, even null). Span facts carry operation "span".';

COMMENT ON FUNCTION @extschema@.patchdiff_submit_replacement(json) IS
'Guarded sole whole-target replacement, protocol patchdiff-tx/3 (runtime patchdiff-mvp-0.4.0). args: target_file_id, intent, replacement (may be empty), expected_target_version and/or expected_current_hash (at least one), source, parent_pdcp_log_id, attempt, client_request_id, include_correlation_id. A fresh replacement over 1,000,000 code points or 1,048,576 UTF-8 bytes (raw or LF-canonical) returns invalid_argument / replacement_too_large and writes nothing; a key already used is recovered or audited as a conflict first. One ledger row with operation "replace_all" covers the whole original text.';

COMMENT ON FUNCTION @extschema@.patchdiff_read_lines(json) IS
'Bounded read of an inclusive range of one-based LF lines. args: target_file_id, start_line (>= 1, default 1), end_line (>= start_line or null for the last line), offset (code points into the range, default 0), max_chars (default 4000, capped at 8000), include_line_starts (boolean). Each line includes its LF; a trailing LF makes a final empty line. Returns total_lines, range_start/range_end, page start/end, text, truncated, next_offset (relative to range_start) and next_start (absolute, for patchdiff_read_target), and line_starts[{line, start}] on request.';

COMMENT ON FUNCTION @extschema@.patchdiff_preview(json) IS
'Read-only advisory evaluation of a proposal with the submission evaluator: no row, no lock, no request key. args: target_file_id, format (patchdiff-tx/1 | patchdiff-tx/2 | patchdiff-tx/3), expected_target_version and/or expected_current_hash (at least one), intent, and the format''s proposal: edits, operations or replacement (another format''s field rejects even when null). Returns preview: true, advisory: true, status, stage, validity, the observed version/hash, after_hash, change_facts (a prefix of at most 32) and warnings, or the bounded rejection, within 32,768 bytes; evidence_omissions lists what the budget left out. Submission re-locks and rechecks: submit with a version guard.';

COMMENT ON FUNCTION @extschema@.patchdiff_export_target(json) IS
'Target text in an explicit line-ending format. args: target_file_id, format: original_text (default; canonical LF, a legacy alias of canonical_lf), canonical_lf, crlf, original_eol (the upload''s recorded uniform style; original_eol_unrecoverable for a mixed upload, source_line_endings_unknown without recorded facts). Returns content, content_eol, content_sha256 (of the returned content) and hash/current_hash (the canonical identity).';

COMMENT ON FUNCTION @extschema@.patchdiff_save(json) IS
'Checkpoint: a save_checkpoint snapshot, the active editing cycle closed and a new one opened, under the target row lock; content, version and hash unchanged. args: target_file_id, expected_target_version (integer >= 0) and/or expected_current_hash (both checked when supplied; stale -> status rejected, target_version_mismatch / target_hash_mismatch; malformed -> context_invalid; nothing written), export_after_save (boolean: adds export, the default-format export). sync_workspace: true (workspace_eol_format original_eol default, canonical_lf, crlf) is a publishing SAVE: only for a publisher that owns the transaction (BEGIN; SET LOCAL patchdiff.workspace_owned_transaction = on; ...; install the file; COMMIT), else invalid_argument workspace_requires_owned_transaction; a target without a workspace binding is rejected workspace_not_bound. It checks the guards, writes the checkpoint, moves workspace_baseline_sha256 to the published bytes and returns workspace_publication (binding, previous baseline_sha256, binding_nonce and binding_proof for the publisher to check, content, content_eol, content_sha256) for the publisher to install.';

COMMENT ON FUNCTION @extschema@.patchdiff_replay(json) IS
'Reconstructs a target from its initial snapshot plus its accepted attempts in log_sequence order, each by its recorded (protocol_version, runtime_version), and compares with the stored target: materialized_state_checks content_matches (raw stored text), stored_hash_matches, recomputed_hash_matches, version_matches, from one consistent state (inside a transaction that has already written, it holds a share lock on the target). Never writes or repairs. status failed with replay_protocol_invalid, replay_application_failed, replay_divergence or replay_base_missing when the log cannot be replayed.';

COMMENT ON FUNCTION @extschema@.patchdiff_diff(json) IS
'Unified diff between two versions of one target (issue 19), rebuilt from the newest snapshot at or below each version plus the accepted log; never writes. args: target_file_id, from_version (required), to_version (default current; any two versions, either order, across SAVEs), context (lines, default 3, 0..1000), max_page_bytes (default 65536, 1024..1048576), cursor (a next_cursor). The hunks of the canonical LF texts are byte-identical to GNU diff -U<context>; header is ours (--- filename<TAB>version N). Returns one page of hunks (cut at a line end, or inside a longer line at a code point boundary), offset, total_bytes, hunk_count, lines_removed, lines_added, identical, has_more, next_cursor. unknown_version names first_version and current_version; texts over 8 MiB or 200,000 lines are diff_input_too_large, a search over 1,000,000,000 steps diff_too_expensive. See docs/history.md, "Diffs".';

COMMENT ON FUNCTION @extschema@.patchdiff_get_pdcp_log(json) IS
'A newest-first page of attempts, accepted and rejected. args: target_file_id, limit (default 50, cap 200), before_sequence (exclusive cursor), status, content_hash, client_request_id (exact filters), include_content (records up to 1,048,576 bytes per page; the first always whole, later ones over budget pdcp_content_omitted: page_byte_budget). Returns entries, has_more, next_sequence (pass it back as before_sequence).';

COMMENT ON FUNCTION @extschema@.patchdiff_get_manifest_ledger(json) IS
'Accepted manifest ledger entries: the newest page, displayed oldest first. args: target_file_id, include_previous_cycles (default false: the active editing cycle only), limit (default 50, cap 200), before_sequence (exclusive cursor on ledger_sequence). Returns entries (typed rows with transaction_intent, rationale, derived facts, pdcp_log_id/log_sequence), has_more, next_sequence.';

COMMENT ON FUNCTION @extschema@.patchdiff_observe_scope(json) IS
'Structural observation (Waymark: tree-sitter outlines of .py, .ts, .js, .json, .md, .yaml, .toml and .sh targets). args: target_file_id; then one mode: candidate discovery (query: case-insensitive substring, kind; issues nothing), exact selection (symbol_name: a symbol''s path or name, kind?: persists one observation and returns its first page), an observation page (observation_id, offset within the scope, max_chars default 4000 capped at 8000, include_line_starts), or a bundle (selections [{symbol_name, kind?}], 1-32 unique disjoint scopes from one snapshot; at most 65,536 scope code points and 32,768 returned). Returns candidates / observed / observed_batch, or not_found (SCOPE_NOT_FOUND), ambiguous (AMBIGUOUS_SCOPE_SELECTION, up to 200 candidates), unsupported (UNSUPPORTED_LANGUAGE). See docs/structural.md.';

COMMENT ON FUNCTION @extschema@.patchdiff_grant(json) IS
'Gives a role read or write (which includes read) on one target. args: target_file_id, role (a pg_roles.rolname), privilege (read | write). Only roles with the owning role''s privileges, superusers and members of patchdiff_admin may grant; another role that may read the target gets permission_denied / not_target_owner, one that may not gets not_found, exactly as for an unknown target. A second grant replaces the first. Returns status ok with the role''s grant now. See docs/security.md.';

COMMENT ON FUNCTION @extschema@.patchdiff_revoke(json) IS
'Takes back a grant on one target. args: target_file_id, role, privilege (write: leaves read; read, null or omitted: removes the grant). Same rules as patchdiff_grant. Returns status ok with the role''s grant now (null: none). Ownership and administration are not grants and stay. See docs/security.md.';

COMMENT ON FUNCTION @extschema@.patchdiff_list_targets(json) IS
'The targets the caller may read, newest first, in keyset pages. args: limit (1-500, default 50), cursor (next_cursor of the previous page), filename_prefix. Returns targets [{target_file_id, filename, target_type, version, current_hash, size_bytes, created_at, last_changed_at, owner, access: owner | admin | write | read}], count, next_cursor (null on the last page). See docs/security.md.';
