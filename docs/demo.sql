-- A short tour of the SQL API, run by scripts/run.sh. Each call is one json in, one json out.
\set ON_ERROR_STOP 1
\pset format unaligned
\pset tuples_only on

\echo '-- initialize a target (a CRLF upload is recorded, then normalized to LF)'
SELECT patchdiff_initialize_target(json_build_object(
    'filename', 'doc.md', 'content', E'alpha beta alpha\r\n', 'content_type', 'text/markdown')) AS init \gset
SELECT :'init'::json ->> 'target_file_id' AS target \gset
SELECT jsonb_pretty(:'init'::jsonb);

\echo '-- an unselected match is ambiguous: rejected, logged, with exact candidates'
SELECT jsonb_pretty(jsonb_build_object('status', r->'status', 'failure_reason', r->'failure_reason',
       'candidates', r->'diagnostic'->'exact_candidates'->'candidates'))
  FROM (SELECT patchdiff_submit(target_file_id => :'target', intent => 'Rename alpha',
        edits => '[{"match": "alpha", "replace": "gamma"}]', expected_target_version => 0)::jsonb AS r) s;

\echo '-- select the second occurrence: accepted, version 1'
SELECT jsonb_pretty(patchdiff_submit(target_file_id => :'target', intent => 'Rename alpha',
       edits => '[{"match": "alpha", "replace": "gamma", "occurrence_index": 2}]',
       expected_target_version => 0, client_request_id => 'demo-1')::jsonb);

\echo '-- read it back'
SELECT patchdiff_read_target(json_build_object('target_file_id', :'target'))::json ->> 'text';

\echo '-- every attempt is in the append-only log'
SELECT log_sequence || ' ' || status || ' ' || coalesce(failure_reason, '-')
  FROM patchdiff.pdcp_logs WHERE target_file_id = :'target' ORDER BY log_sequence;
