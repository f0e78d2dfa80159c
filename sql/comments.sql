-- Documentation of the SQL API, shown by \df+ and \dd. One json argument, the MCP tool's
-- arguments; one json result, the tool's response as the contract describes it.

COMMENT ON FUNCTION @extschema@.patchdiff_initialize_target(json) IS
'Create a target from inline content. args: filename (string, required), content (string, required), content_type (string, default text/plain), project_id (UUID string or null), from_workspace (boolean; served by patchdiff-mcp only). Line endings are recorded as source_line_endings, then normalized to LF; version 0, an active editing cycle and the initial snapshot are written.';

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
