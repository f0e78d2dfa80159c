#!/usr/bin/env bash
# What an acceptance's ledger rows cost, and what each kind of call in patchdiff-stress's default
# mix costs (docs/benchmarks.md, "Issue 21, item 1": "Ledger rows folded into their attempt: the
# most it could save"). Measured as the CPU time of the one backend that makes the calls (its
# utime + stime from /proc/self/stat, read through pg_read_file), so that other work on the
# machine moves the figures less than it moves throughput; each call commits on its own.
#   bash scripts/bench/ledger_cost.sh [ROUNDS [CALLS]]       (default 8 rounds of 3000 calls)
# Table 1, arms alternating per round: the two-edit acceptance of scripts/bench/notify_edit.sql
# with its two ledger rows written, and with them discarded by a BEFORE INSERT trigger that
# returns NULL (no heap row, no index entry: what folding the rows into the attempt row could
# save at the most, since the fold would store the same facts in that row instead).
# Table 2: the same acceptance, a rejection for a stale expected_target_version (audited: an
# attempt row with its evidence), a keyed resend answered from the log, and a 4 KiB read.
# It needs a running cluster with pg_patchdiff installed, reached as superuser postgres on
# 127.0.0.1:$PATCHDIFF_BENCH_PORT (default 54395); it makes and drops the databases ledgera and
# ledgerb there.
set -u
ROUNDS="${1:-8}" CALLS="${2:-3000}"
PORT="${PATCHDIFF_BENCH_PORT:-54395}"
PSQL=(psql -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
HZ="$(getconf CLK_TCK)"
export PGOPTIONS="-c ledger.hz=$HZ -c client_min_messages=warning"
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
bench_server_settings "${PSQL[@]}"

SETUP="CREATE EXTENSION pg_patchdiff;
CREATE TABLE bench_t AS SELECT n, (patchdiff_initialize_target(json_build_object(
    'filename', 'f' || n || '.md', 'content_type', 'text/markdown',
    'content', '@A@' || repeat('slot xyz the quick brown fox jumps over the lazy dog ', 80)
  ))::json ->> 'target_file_id')::uuid AS id FROM generate_series(1, 2) n;
-- The backend's own CPU time in clock ticks (fields 14 and 15 of /proc/self/stat).
CREATE FUNCTION cpu_ticks() RETURNS bigint LANGUAGE sql AS \$\$
  SELECT split_part(s, ' ', 12)::bigint + split_part(s, ' ', 13)::bigint
  FROM (SELECT split_part(pg_catalog.pg_read_file('/proc/self/stat'), ') ', 2) AS s) x \$\$;
-- KIND calls, each committed: accept (notify_edit.sql's toggle on target 1), stale (the same
-- toggle on target 2 with expected_target_version one behind), resend (one keyed submission on
-- target 2, sent again), read (patchdiff_get_target of target 2).
CREATE PROCEDURE calls(kind text, n int) LANGUAGE plpgsql AS \$\$
DECLARE t record; a json; s text; want text := CASE WHEN kind = 'accept' THEN 'accepted' ELSE 'rejected' END;
  tid uuid := (SELECT b.id FROM bench_t b WHERE b.n = CASE WHEN kind = 'accept' THEN 1 ELSE 2 END);
BEGIN
  FOR i IN 1..n LOOP
    SELECT target_file_id, version INTO t FROM patchdiff.targets WHERE target_file_id = tid;
    a := json_build_object('target_file_id', t.target_file_id, 'expected_target_version',
      CASE WHEN kind = 'stale' THEN t.version - 1 ELSE t.version END, 'intent', 'toggle',
      'edits', json_build_array(
        json_build_object('match', CASE WHEN t.version % 2 = 0 THEN '@A@' ELSE '@B@' END,
                          'replace', CASE WHEN t.version % 2 = 0 THEN '@B@' ELSE '@A@' END),
        json_build_object('match', CASE WHEN t.version % 2 = 0 THEN 'quick' ELSE 'Quick' END,
                          'replace', CASE WHEN t.version % 2 = 0 THEN 'Quick' ELSE 'quick' END,
                          'occurrence_index', 1)));
    IF kind = 'resend' THEN
      a := json_build_object('target_file_id', t.target_file_id, 'expected_target_version', 0,
        'client_request_id', 'ledger-cost-resend', 'intent', 'resent',
        'edits', json_build_array(json_build_object('match', 'zzz', 'replace', 'y')));
    END IF;
    IF kind = 'read' THEN
      s := patchdiff_get_target(json_build_object('target_file_id', t.target_file_id))::json ->> 'version';
    ELSE
      s := patchdiff_submit_edits(a)::json ->> 'status';
      IF s IS DISTINCT FROM want THEN
        RAISE EXCEPTION '% answered %', kind, s;
      END IF;
    END IF;
    COMMIT;
  END LOOP;
END \$\$;"
for db in ledgera ledgerb; do
  "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db" >/dev/null
  "${PSQL[@]}" -d "$db" -c "$SETUP" >/dev/null
done
"${PSQL[@]}" -d ledgerb -c "CREATE FUNCTION discard() RETURNS trigger LANGUAGE plpgsql AS
  \$\$BEGIN RETURN NULL; END\$\$" -c "CREATE TRIGGER zz_discard BEFORE INSERT ON
  patchdiff.manifest_ledger FOR EACH ROW EXECUTE FUNCTION discard()" >/dev/null

# µs of the backend's CPU per call: DB KIND
per_call() {
  "${PSQL[@]}" -d "$1" -c "CREATE TEMP TABLE c AS SELECT cpu_ticks() t0" -c "CALL calls('$2', $CALLS)" \
    -c "SELECT round((cpu_ticks() - t0) * 1e6 / current_setting('ledger.hz')::int / $CALLS) FROM c" \
    2>&1 | tail -1
}
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "backend CPU per call, µs ($CALLS calls per figure, each committed)"
echo
echo "| round | load (1 min) | acceptance, ledger rows written | ledger rows discarded |"
echo "| --- | ---: | ---: | ---: |"
: > /tmp/ledger_cost.$$.a; : > /tmp/ledger_cost.$$.b
for round in $(seq 1 "$ROUNDS"); do
  a="$(per_call ledgera accept)" b="$(per_call ledgerb accept)"
  echo "$a" >> /tmp/ledger_cost.$$.a; echo "$b" >> /tmp/ledger_cost.$$.b
  echo "| $round | $(cut -d' ' -f1 /proc/loadavg) | $a | $b |"
done
echo "| median | | $(median < /tmp/ledger_cost.$$.a) | $(median < /tmp/ledger_cost.$$.b) |"
rm -f /tmp/ledger_cost.$$.a /tmp/ledger_cost.$$.b
"${PSQL[@]}" -d ledgerb -c "SELECT 'ledger rows kept with the trigger: ' || count(*) FROM patchdiff.manifest_ledger"

echo
echo "| round | load (1 min) | acceptance | stale-version rejection | keyed resend | read (4 KiB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for round in $(seq 1 "$ROUNDS"); do
  line="| $round | $(cut -d' ' -f1 /proc/loadavg)"
  for kind in accept stale resend read; do line="$line | $(per_call ledgera $kind)"; done
  echo "$line |"
done
for db in ledgera ledgerb; do
  "${PSQL[@]}" -d postgres -c "DROP DATABASE $db WITH (FORCE)" >/dev/null
done
