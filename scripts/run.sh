#!/usr/bin/env bash
# The main job: the embedded default database, a private PostgreSQL 15 cluster under
# $PATCHDIFF_DATA (default ./.pgdata) with pg_patchdiff created in database "patchdiff".
# Until the MCP front end lands, it runs a short SQL demo there and leaves the cluster running.
# Does all of its own set-up on a fresh Debian 12 machine (as root); safe to run again.
#   bash scripts/run.sh          set up, start, demo
#   bash scripts/run.sh stop     stop the cluster
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DATA="${PATCHDIFF_DATA:-$ROOT/.pgdata}"
PORT="${PATCHDIFF_PORT:-54329}"

if [ "${1:-}" = stop ]; then
  stop_cluster "$DATA"
  exit 0
fi

setup_all
start_cluster "$DATA" "$PORT"
create_database "$DATA" "$PORT" patchdiff
cluster_psql "$DATA" "$PORT" -d patchdiff -f "$ROOT/docs/demo.sql"
cat <<MSG

pg_patchdiff is running: psql -h $DATA -p $PORT -U postgres patchdiff
(also on 127.0.0.1:$PORT). Stop it with: bash scripts/run.sh stop
MSG
