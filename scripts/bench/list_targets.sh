#!/usr/bin/env bash
# What a role's patchdiff_list_targets costs among many targets of another role (docs/benchmarks.md,
# "Listing among another tenant's targets"; docs/security.md, "Finding your documents").
#   bash scripts/bench/list_targets.sh [OTHERS [CALLS]]     (default 100000 targets, 200 calls)
# In database listbench (made and dropped), listbench_big owns OTHERS targets and listbench_small 3, and
# listbench_small holds a read grant on one of listbench_big's. Each figure is the median wall time of
# CALLS calls of patchdiff_list_targets made from one PL/pgSQL block in one backend (no client
# round trip): listbench_small's first page, with a filename prefix that matches all of
# listbench_big's names and with one that matches none; listbench_big's first page and a page 1,000
# rows in (its cursor; all of them when it has fewer); the superuser's (an administrator's) first page.
# It needs a running cluster with pg_patchdiff installed, reached as superuser postgres on
# 127.0.0.1:$PATCHDIFF_BENCH_PORT (default 54395). The roles listbench_big and listbench_small
# are made anew (NOLOGIN; dropped first if they exist) and dropped again (kept, with the
# database, when PATCHDIFF_BENCH_KEEP=1).
set -eu
OTHERS="${1:-100000}" CALLS="${2:-200}"
case "$OTHERS$CALLS" in *[!0-9]*) ;; *) [ "$OTHERS" -ge 1 ] && [ "$CALLS" -ge 1 ] && ok=1 ;; esac
if [ "${ok:-0}" != 1 ]; then
  echo "list_targets.sh: OTHERS and CALLS must be whole numbers of at least 1 (got '$OTHERS' '$CALLS')" >&2
  exit 2
fi
PORT="${PATCHDIFF_BENCH_PORT:-54395}"
PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
export PGOPTIONS="-c client_min_messages=warning"

"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS listbench" -c "CREATE DATABASE listbench"
"${PSQL[@]}" -d postgres -c "DROP ROLE IF EXISTS listbench_big" -c "DROP ROLE IF EXISTS listbench_small" \
  -c "CREATE ROLE listbench_big NOLOGIN" -c "CREATE ROLE listbench_small NOLOGIN"
[ "${PATCHDIFF_BENCH_KEEP:-0}" = 1 ] || trap '"${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS listbench" -c "DROP ROLE IF EXISTS listbench_big" -c "DROP ROLE IF EXISTS listbench_small"' EXIT

"${PSQL[@]}" -d listbench <<SQL
CREATE EXTENSION pg_patchdiff;
SELECT count(*) FROM (SELECT patchdiff_initialize_target(json_build_object(
  'filename', 'big-' || n || '.md', 'content', 'x')) FROM generate_series(1, $OTHERS) n) x;
UPDATE patchdiff.targets SET owner_role = 'listbench_big';
SELECT count(*) FROM (SELECT patchdiff_initialize_target(json_build_object(
  'filename', 'small-' || n || '.md', 'content', 'x')) FROM generate_series(1, 3) n) x;
UPDATE patchdiff.targets SET owner_role = 'listbench_small' WHERE filename LIKE 'small-%';
SELECT patchdiff_grant(json_build_object('target_file_id', target_file_id, 'role', 'listbench_small',
  'privilege', 'read')) FROM patchdiff.targets WHERE filename = 'big-7.md';
VACUUM ANALYZE;
CREATE TABLE timings (label text, ms float8);
GRANT INSERT ON timings TO PUBLIC;
CREATE PROCEDURE timed(label text, who text, args json, n int) LANGUAGE plpgsql AS \$\$
DECLARE t0 timestamptz; r json; ms float8[] := '{}';
BEGIN
  IF who IS NOT NULL THEN EXECUTE format('SET ROLE %I', who); END IF;
  FOR i IN 1..n LOOP
    t0 := clock_timestamp();
    r := patchdiff_list_targets(args)::json;
    ms := ms || (extract(epoch FROM clock_timestamp() - t0) * 1000)::float8;
  END LOOP;
  IF (r ->> 'status') IS DISTINCT FROM 'ok' THEN RAISE EXCEPTION '%: %', label, r; END IF;
  RESET ROLE;
  INSERT INTO timings SELECT label, unnest(ms);
END \$\$;
SQL

# listbench_big's cursor DEPTH rows in (1,000, or all of them when fewer): that row of its list,
# newest first.
DEPTH=$(( OTHERS < 1000 ? OTHERS : 1000 ))
CURSOR="$("${PSQL[@]}" -d listbench -c "SELECT (EXTRACT(epoch FROM d.created_at) * 1000000)::int8 || '.' || d.target_file_id
  FROM patchdiff.target_directory d JOIN patchdiff.targets t USING (target_file_id)
  WHERE t.owner_role = 'listbench_big'::regrole ORDER BY d.created_at DESC, d.target_file_id DESC OFFSET $((DEPTH - 1)) LIMIT 1")"

"${PSQL[@]}" -d listbench <<SQL
CALL timed('small: first page', 'listbench_small', '{}', $CALLS);
CALL timed('small: prefix matching all of big''s names', 'listbench_small', '{"filename_prefix": "big-"}', $CALLS);
CALL timed('small: prefix matching none', 'listbench_small', '{"filename_prefix": "zzz"}', $CALLS);
CALL timed('big: first page', 'listbench_big', '{}', $CALLS);
CALL timed('big: a page $DEPTH rows in', 'listbench_big', '{"cursor": "$CURSOR"}', $CALLS);
CALL timed('superuser: first page', NULL, '{}', $CALLS);
SQL

echo "patchdiff_list_targets among $OTHERS targets of another role: median ms of $CALLS calls"
"${PSQL[@]}" -d listbench -F ' | ' -c "SELECT label, round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 3)
  FROM timings GROUP BY label ORDER BY min(ctid)"
