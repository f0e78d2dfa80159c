SELECT patchdiff_submit_edits(json_build_object('target_file_id', t.target_file_id,
    'expected_target_version', t.version, 'intent', 'toggle', 'edits', json_build_array(
      json_build_object('match', CASE WHEN t.version % 2 = 0 THEN '@A@' ELSE '@B@' END,
                        'replace', CASE WHEN t.version % 2 = 0 THEN '@B@' ELSE '@A@' END),
      json_build_object('match', CASE WHEN t.version % 2 = 0 THEN 'quick' ELSE 'Quick' END,
                        'replace', CASE WHEN t.version % 2 = 0 THEN 'Quick' ELSE 'quick' END,
                        'occurrence_index', 1))))::json ->> 'status'
FROM patchdiff.targets t JOIN bench_t b ON b.id = t.target_file_id WHERE b.n = :client_id + 1;
