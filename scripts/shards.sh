#!/usr/bin/env bash
# A sharded pg_patchdiff on this machine (issue 20; docs/scale-out.md):
#
#   bash scripts/shards.sh up N     a PL/Proxy router and N shard clusters; prints the router's
#                                   connection string on stdout (everything else goes to stderr)
#   bash scripts/shards.sh down     stops them
#
# The router (port $PATCHDIFF_SHARDS_PORT, default 54400) has database `patchdiff` with plproxy
# and the router functions (sql/router/patchdiff_router.sql). There are
# $PATCHDIFF_SHARDS_PARTITIONS partitions (default 8, a power of two, at least N): partition p is
# database patchdiff_p<p> on shard cluster p mod N (ports 54401 .. 54400+N), with pg_patchdiff.
# The router server's query_timeout is $PATCHDIFF_SHARDS_QUERY_TIMEOUT seconds (default 60, twice
# patchdiff-mcp's statement_timeout; docs/scale-out.md). Clusters live in $PATCHDIFF_SHARDS_DIR
# (default /tmp/patchdiff-shards). `up` installs what it
# needs (the postgresql-15-plproxy package among the system's, the extension) unless
# PATCHDIFF_SHARDS_SKIP_INSTALL=1,
# and can be run again: it keeps running clusters and existing databases, and reloads the router.
source "$(dirname "$0")/lib.sh"

DIR="${PATCHDIFF_SHARDS_DIR:-/tmp/patchdiff-shards}"
PORT="${PATCHDIFF_SHARDS_PORT:-54400}"
PARTITIONS="${PATCHDIFF_SHARDS_PARTITIONS:-8}"
QUERY_TIMEOUT="${PATCHDIFF_SHARDS_QUERY_TIMEOUT:-60}"

up() {
  local n="$1"
  if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: bash scripts/shards.sh up N (N shard clusters, N >= 1)" >&2
    exit 2
  fi
  if (( PARTITIONS < n || (PARTITIONS & (PARTITIONS - 1)) != 0 )); then
    echo "PATCHDIFF_SHARDS_PARTITIONS=$PARTITIONS must be a power of two and at least N=$n" >&2
    exit 2
  fi
  if ! [[ "$QUERY_TIMEOUT" =~ ^[1-9][0-9]*$ ]]; then
    echo "PATCHDIFF_SHARDS_QUERY_TIMEOUT=$QUERY_TIMEOUT must be a whole number of seconds, at least 1" >&2
    exit 2
  fi
  if [ -f "$DIR/shards" ] && [ "$(cat "$DIR/shards")" != "$n $PARTITIONS" ]; then
    echo "$DIR holds $(cat "$DIR/shards") (shards partitions); run 'bash scripts/shards.sh down' and remove $DIR first" >&2
    exit 2
  fi
  if [ "${PATCHDIFF_SHARDS_SKIP_INSTALL:-0}" != 1 ]; then
    setup_system
    setup_pgrx
    install_extension
  fi
  mkdir -p "$DIR"
  echo "$n $PARTITIONS" > "$DIR/shards"
  local s p servers=()
  for ((s = 0; s < n; s++)); do
    start_cluster "$DIR/shard$s" $((PORT + 1 + s))
  done
  for ((p = 0; p < PARTITIONS; p++)); do
    s=$((p % n))
    create_database "$DIR/shard$s" $((PORT + 1 + s)) "patchdiff_p$p" >&2
    # A routed call's session on the shard ends its statement once its router session has gone
    # (docs/scale-out.md "Sessions whose router session ended"): otherwise a call whose
    # patchdiff-mcp or router backend died while it waited for a lock commits when it gets it.
    cluster_psql "$DIR/shard$s" $((PORT + 1 + s)) -d postgres >&2 \
      -c "ALTER DATABASE patchdiff_p$p SET client_connection_check_interval = '1s'"
    # The search_path pinned on every routed session: PL/Proxy names argument types unqualified
    # and logs in as the calling role (sql/router/patchdiff_router.sql).
    servers+=("p$p 'host=127.0.0.1 port=$((PORT + 1 + s)) dbname=patchdiff_p$p options=-csearch_path=pg_catalog,pg_temp'")
  done
  start_cluster "$DIR/router" "$PORT"
  cluster_psql "$DIR/router" "$PORT" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'patchdiff'" | grep -q 1 \
    || cluster_psql "$DIR/router" "$PORT" -d postgres -c "CREATE DATABASE patchdiff ENCODING 'UTF8' TEMPLATE template0"
  local options
  options="$(IFS=,; echo "${servers[*]}")"
  # Every call reaches its partition as the calling role: the public user mapping names no user,
  # and PL/Proxy then connects as the current user (docs/scale-out.md "Roles").
  # query_timeout bounds every routed call, not only one after a cancel: PL/Proxy checks it
  # whenever a connection shows activity, so a call still reading its answer past it is ended
  # ("query timeout"; helper-88). 60 s is twice patchdiff-mcp's default statement_timeout (30 s),
  # so it never ends a call patchdiff-mcp lets run; it also bounds the wait, after a cancel, for
  # a shard that no longer answers (docs/scale-out.md "When a call's outcome is unknown").
  # Override with PATCHDIFF_SHARDS_QUERY_TIMEOUT (seconds).
  cluster_psql "$DIR/router" "$PORT" -d patchdiff >&2 <<SQL
CREATE EXTENSION IF NOT EXISTS plproxy;
DROP SERVER IF EXISTS patchdiff CASCADE;
CREATE SERVER patchdiff FOREIGN DATA WRAPPER plproxy
  OPTIONS (connection_lifetime '1800', query_timeout '$QUERY_TIMEOUT', $options);
CREATE USER MAPPING FOR PUBLIC SERVER patchdiff;
GRANT USAGE ON FOREIGN SERVER patchdiff TO PUBLIC;
\i $ROOT/sql/router/patchdiff_router.sql
SQL
  echo "host=127.0.0.1 port=$PORT user=postgres dbname=patchdiff"
}

down() {
  local d
  for d in "$DIR"/router "$DIR"/shard*; do
    [ -f "$d/PG_VERSION" ] && stop_cluster "$d"
  done
  log "stopped the router and the shards in $DIR (their data stays; remove $DIR to start afresh)"
}

case "${1:-}" in
  up) up "${2:-}" ;;
  down) down ;;
  *)
    echo "usage: bash scripts/shards.sh up N | down" >&2
    exit 2
    ;;
esac
