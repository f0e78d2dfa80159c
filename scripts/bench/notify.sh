#!/usr/bin/env bash
# The change feed's cost (docs/benchmarks.md, "Issue 21, item 1": "The change feed's cost"):
# patchdiff.notify's settings A/B on one cluster, arms interleaved.
#   bash scripts/bench/notify.sh pgbench [ROUNDS [SECONDS]]   (default 5 rounds of 5 s)
#     8 pgbench clients running scripts/bench/notify_edit.sql (one 4 KiB target each, two edits
#     per transaction, guarded by version) with notify off, listened (nobody registered), on
#     (nobody listening) and listened with a consuming listener registered (psql LISTENs, holds
#     the feed's key and runs SELECT 1 every 20 ms), then pgbench -N; one line of tps per round.
#   bash scripts/bench/notify.sh stress [ROUNDS [SECONDS]]    (default 2 rounds of 15 s)
#     target/release/patchdiff-stress (8 connections, its own pgbench -N, invariants checked),
#     edits only and the default mix, with notify listened (nobody registered) and on.
# It needs a running cluster with pg_patchdiff installed, reached as superuser postgres on
# 127.0.0.1:$PATCHDIFF_NOTIFY_PORT (default 54395); it makes and drops databases nb, nbpg and
# stress there. The stress mode needs target/release/patchdiff-stress and patchdiff-mcp.
set -u
MODE="${1:?usage: scripts/bench/notify.sh pgbench|stress [ROUNDS [SECONDS]]}"
PORT="${PATCHDIFF_NOTIFY_PORT:-54395}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PG="$(pg_config --bindir)"
PSQL=(psql -X -q -h 127.0.0.1 -p "$PORT" -U postgres)
KEY="1885628774, 1717921124"

fresh_db() { # name
  "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null 2>&1
}

source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
bench_server_settings "${PSQL[@]}"
if [ "$MODE" = pgbench ]; then
  ROUNDS="${2:-5}" SECS="${3:-5}"
  fresh_db nb; fresh_db nbpg
  "$PG/pgbench" -q -i -h 127.0.0.1 -p "$PORT" -U postgres nbpg >/dev/null 2>&1
  "${PSQL[@]}" -d nb -c "CREATE EXTENSION pg_patchdiff" -c "CREATE TABLE bench_t AS SELECT n,
      (patchdiff_initialize_target(json_build_object('filename', 'f' || n || '.md',
        'content_type', 'text/markdown',
        'content', '@A@' || repeat('slot xyz the quick brown fox jumps over the lazy dog ', 80)
      ))::json ->> 'target_file_id')::uuid AS id FROM generate_series(1, 8) n" >/dev/null
  tps() { "$PG/pgbench" -n -c 8 -j 2 -T "$SECS" -h 127.0.0.1 -p "$PORT" -U postgres "$@" 2>&1 \
            | sed -nE 's/^tps = ([0-9]+)\..*/\1/p'; }
  echo "round | load | off | listened, nobody registered | on, nobody listening | listened, a listener registered | pgbench -N"
  for round in $(seq 1 "$ROUNDS"); do
    line="$round | $(cut -d' ' -f1 /proc/loadavg)"
    for arm in off listened on listened+listener; do
      "${PSQL[@]}" -d nb -c "ALTER DATABASE nb SET patchdiff.notify = ${arm%%+*}"
      listener=
      if [ "$arm" = listened+listener ]; then
        (echo "LISTEN patchdiff;"; echo "SELECT pg_advisory_lock_shared($KEY);"
         while sleep 0.02; do echo "SELECT 1;"; done) | "${PSQL[@]}" -d nb >/dev/null 2>&1 &
        listener=$!
        sleep 0.5
      fi
      line="$line | $(tps -f "$HERE/notify_edit.sql" nb)"
      if [ -n "$listener" ]; then
        pkill -P "$listener"; kill "$listener" 2>/dev/null
        "${PSQL[@]}" -d nb -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                                WHERE datname = 'nb' AND pid <> pg_backend_pid()" >/dev/null
      fi
    done
    echo "$line | $(tps -N nbpg)"
  done
  "${PSQL[@]}" -d postgres -c "DROP DATABASE nb WITH (FORCE)" -c "DROP DATABASE nbpg WITH (FORCE)"
elif [ "$MODE" = stress ]; then
  ROUNDS="${2:-2}" SECS="${3:-15}"
  cd "$ROOT"
  for round in $(seq 1 "$ROUNDS"); do
    for mix in edits default; do
      for setting in listened on; do
        fresh_db stress
        "${PSQL[@]}" -d stress -c "CREATE EXTENSION pg_patchdiff" \
          -c "ALTER DATABASE stress SET patchdiff.notify = $setting" >/dev/null
        extra=(--mcp-bin target/release/patchdiff-mcp --mcp-connections 1)
        if [ "$mix" = edits ]; then
          extra=(--mcp-connections 0 --read-percent 0 --save-percent 0 --shared-percent 0 --keyed-percent 0)
        fi
        echo "== round $round, $mix, patchdiff.notify = $setting, load $(cut -d' ' -f1-3 /proc/loadavg)"
        target/release/patchdiff-stress --dsn "host=127.0.0.1 port=$PORT user=postgres dbname=stress" \
          --connections 8 --seconds "$SECS" --pgbench-seconds "$SECS" "${extra[@]}" 2>&1 \
          | grep -E "accepted/s|tps = |invariants" | sed -E 's/^load: .*kills; //'
      done
    done
  done
  "${PSQL[@]}" -d postgres -c "DROP DATABASE stress WITH (FORCE)"
else
  echo "unknown mode $MODE" >&2; exit 2
fi
