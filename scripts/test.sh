#!/usr/bin/env bash
# Every test: engine unit and property tests, the SQL API inside PostgreSQL (cargo pgrx test),
# and end-to-end tests over real connections to a private PostgreSQL 15 cluster.
# Does all of its own set-up on a fresh Debian 12 machine (as root); safe to run again.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

setup_system
setup_pgrx

# The clusters, sockets, logs and HTTP tokens of this run live under one directory, which root
# hands to the postgres user. In /tmp any local user could make it first (or make it a symlink)
# and then plant a cluster's configuration, which its server would run, or swap files under it.
# So the directory and every directory above it must be real directories, not symlinks (the
# path is taken as written: no component may be a symlink), and each owned by root, postgres or
# this user, and writable by no one else, unless sticky and root's, like /tmp (helper-56: another
# user's parent directory let that user move the test directory aside and put a symlink there).
TEST_DIR="${PATCHDIFF_TEST_DIR:-/tmp/patchdiff-test}"
case "$TEST_DIR" in
  /*) ;;
  *) TEST_DIR="$PWD/$TEST_DIR" ;;
esac
mkdir -p "$(dirname "$TEST_DIR")" && mkdir -m 0755 "$TEST_DIR" 2>/dev/null || true
test_dir_refused() {
  log "refusing PATCHDIFF_TEST_DIR $TEST_DIR: $1. Every directory on its path must be a real directory (not a symlink) owned by root, postgres or $(id -un), and writable by no one else (unless sticky and root's, like /tmp). Choose another directory."
  exit 1
}
test_dir_path=""
IFS=/ read -r -a test_dir_parts <<< "${TEST_DIR#/}"
for test_dir_part in "${test_dir_parts[@]}"; do
  [ -n "$test_dir_part" ] || continue
  test_dir_path="$test_dir_path/$test_dir_part"
  [ -L "$test_dir_path" ] && test_dir_refused "$test_dir_path is a symlink"
  [ -d "$test_dir_path" ] || test_dir_refused "$test_dir_path is not a directory"
  read -r test_dir_owner test_dir_mode < <(stat -c '%U %a' "$test_dir_path")
  case "$test_dir_owner" in
    root | postgres | "$(id -un)") ;;
    *) test_dir_refused "$test_dir_path belongs to $test_dir_owner" ;;
  esac
  if (( 8#$test_dir_mode & 8#022 )) && ! { (( 8#$test_dir_mode & 8#1000 )) && [ "$test_dir_owner" = root ] && [ "$test_dir_path" != "$TEST_DIR" ]; }; then
    test_dir_refused "$test_dir_path is writable by others (mode $test_dir_mode)"
  fi
done

# Every cargo test run is also copied here, so the closing line can count them all.
RESULTS="$(mktemp)"
counted() { "$@" 2>&1 | tee -a "$RESULTS"; }

log "release gates: formatting and clippy (warnings are errors)"
cargo fmt --all --check
cargo fmt --manifest-path fuzz/Cargo.toml --check
cargo clippy --locked --workspace --all-targets -- -D warnings
cargo clippy --locked --manifest-path fuzz/Cargo.toml --all-targets -- -D warnings

log "engine, Waymark and front-end tests (cargo test)"
counted cargo test --locked -p patchdiff-engine -p patchdiff-waymark -p patchdiff-mcp

log "fuzz targets over their corpus (fuzz/run.sh smoke: the AFL++ targets without AFL++)"
counted bash fuzz/run.sh smoke

log "SQL API tests inside PostgreSQL (cargo pgrx test)"
# Structural observation starts the parser helper from PostgreSQL's $libdir.
install_parser_helper
# pgrx's own cluster, owned by the unprivileged postgres user because initdb refuses root.
PGRX_TEST_DATA="$TEST_DIR/pgrx"
mkdir -p "$PGRX_TEST_DATA"
chown -R postgres:postgres "$(dirname "$PGRX_TEST_DATA")"
# `cargo pgrx test` installs its test build where pg_config says, by writing into the installed
# files (pgrx has no other way): a backend of any running cluster that has pg_patchdiff.so
# mapped (the embedded database's, for one) would run changed bytes or fault, and PostgreSQL
# would restart every session of that server. As root it therefore runs in a mount namespace of
# its own, where PostgreSQL's library and extension folders are private copies in target/: the
# test build and the cluster pgrx starts for it see the copies, every other process the
# system's files, unchanged (checked below). Elsewhere it falls back to installing in place.
pgrx_test() {
  local libdir sharedir copy="$ROOT/target/pgrx-test-install"
  libdir="$("$PG_CONFIG" --pkglibdir)"
  sharedir="$("$PG_CONFIG" --sharedir)/extension"
  if [ "$PGRX_PRIVATE" = 1 ]; then
    # Under the lock: two runs of one clone would replace each other's copies.
    flock "$PGRX_LOCK" bash -c '
      copy="$1" libdir="$2" sharedir="$3"
      shift 3
      rm -rf "$copy" && mkdir -p "$copy" && cp -a "$libdir" "$copy/lib" &&
        cp -a "$sharedir" "$copy/extension" &&
        exec unshare --mount --propagation private bash -c \
          "mount --bind \"\$1\" \"\$2\" && mount --bind \"\$3\" \"\$4\" && shift 4 && exec \"\$@\"" \
          pgrx-test "$copy/lib" "$libdir" "$copy/extension" "$sharedir" "$@"' \
      pgrx-test "$copy" "$libdir" "$sharedir" \
      cargo pgrx test pg15 -p pg_patchdiff --runas postgres --pgdata "$PGRX_TEST_DATA"
  else
    log "no private mount namespace here (needs root): cargo pgrx test installs its build into $libdir in place"
    flock "$PGRX_LOCK" cargo pgrx test pg15 -p pg_patchdiff --runas postgres --pgdata "$PGRX_TEST_DATA"
  fi
}
installed_library() {
  local lib
  lib="$("$PG_CONFIG" --pkglibdir)/pg_patchdiff.so"
  if [ -e "$lib" ]; then
    echo "$(stat -c '%i %s %Y' "$lib") $(sha256sum <"$lib")"
  fi
}
PGRX_PRIVATE=0
if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  PGRX_PRIVATE=1
fi
BEFORE_PGRX_TEST="$(installed_library)"
counted pgrx_test
if [ "$PGRX_PRIVATE" = 1 ] && [ "$(installed_library)" != "$BEFORE_PGRX_TEST" ]; then
  echo "test command: cargo pgrx test changed the installed pg_patchdiff.so in place" >&2
  exit 1
fi

# The end-to-end suite runs the release build, installed by renaming (lib.sh, replace_files).
install_extension

log "end-to-end tests against a private cluster"
E2E_DATA="$TEST_DIR/e2e"
E2E_PORT="${PATCHDIFF_TEST_PORT:-54330}"
stop_cluster "$E2E_DATA"
rm -rf "$E2E_DATA"
start_cluster "$E2E_DATA" "$E2E_PORT"
# A PL/Proxy router over two shard clusters (issue 20; docs/scale-out.md): tests/tests/shards.rs
# and the suites below that run through it.
export PATCHDIFF_SHARDS_DIR="$TEST_DIR/shards"
export PATCHDIFF_SHARDS_PORT="${PATCHDIFF_TEST_SHARDS_PORT:-$((E2E_PORT + 100))}"
bash "$ROOT/scripts/shards.sh" down 2>/dev/null || true
rm -rf "$PATCHDIFF_SHARDS_DIR"
trap 'stop_cluster "$E2E_DATA"; bash "$ROOT/scripts/shards.sh" down' EXIT
create_database "$E2E_DATA" "$E2E_PORT" patchdiff_test
log "a router and two shard clusters (scripts/shards.sh up 2)"
PATCHDIFF_ROUTER_DSN="$(PATCHDIFF_SHARDS_SKIP_INSTALL=1 bash "$ROOT/scripts/shards.sh" up 2)"
export PATCHDIFF_ROUTER_DSN
log "documented SQL examples against tests/sql/expected (docs/demo.sql and the sql blocks of docs/{sql-api,operations,history}.md)"
bash "$ROOT/scripts/sql-golden.sh" "$E2E_DATA" "$E2E_PORT"
export PATCHDIFF_TEST_DSN="host=127.0.0.1 port=$E2E_PORT user=postgres dbname=patchdiff_test"
export PATCHDIFF_TEST_SERVER_LOG="$E2E_DATA/server.log"
cargo build --locked -p patchdiff-mcp
export PATCHDIFF_MCP_BIN="$BUILD_DIR/debug/patchdiff-mcp"
# The benchmark examples (scripts/bench.sh runs them), each run once with its smallest counts by
# tests/tests/benchmark_commands.rs.
cargo build --locked -p patchdiff-engine -p patchdiff-waymark -p patchdiff-mcp --examples
export PATCHDIFF_EXAMPLES_DIR="$BUILD_DIR/debug/examples"
# Every suite of tests/tests, among them issue 19's: changesets.rs (atomic changesets over SQL
# and over MCP in the extended profile), diffs.rs (patchdiff_diff against GNU diff, which Debian
# always installs), files.rs (the files profile), shards.rs (a changeset through the router) and
# http_feed.rs (subscriptions/listen over HTTP as an SSE stream; also through the router below,
# where the front end listens on every partition's database).
# changesets.rs spans partitions and diffs.rs makes a database of its own for its tenancy proof,
# so neither is among the router's suites below.
counted cargo test --locked -p patchdiff-tests

# The Streamable HTTP endpoint (docs/http.md), once on the test database and once on the router,
# with a token for the superuser: the official SDKs, the Inspector CLI and the conformance suite
# drive it below.
log "patchdiff-mcp serve: Streamable HTTP endpoints on the test database and on the router"
HTTP_DIR="$TEST_DIR/http"
rm -rf "$HTTP_DIR"
mkdir -p "$HTTP_DIR"
(umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$HTTP_DIR/token")
(umask 077; printf '%s postgres\n' "$(cat "$HTTP_DIR/token")" > "$HTTP_DIR/tokens")
HTTP_PIDS=()
# Each endpoint listens on a port the system picks (127.0.0.1:0) unless PATCHDIFF_TEST_HTTP_PORT
# names one (and the next, for the router's): a fixed port in the ephemeral range can be held by
# any client connection of the suites that ran before (CI once found 54530 taken). The URL is
# read from the endpoint's first line on stderr into the variable named by the first argument.
start_http() {
  local var="$1" dsn="$2" port="$3" log="$HTTP_DIR/serve-$1.log" url
  # Made before the server starts: the background job's own redirection may come after the
  # first sed below, which then failed (and with it the whole command, under pipefail).
  : >"$log"
  PATCHDIFF_DATABASE_URL="$dsn" "$PATCHDIFF_MCP_BIN" serve --listen "127.0.0.1:$port" \
    --tokens "$HTTP_DIR/tokens" 2>"$log" &
  HTTP_PIDS+=($!)
  for _ in $(seq 100); do
    url="$(sed -n 's/^patchdiff-mcp: listening on //p' "$log" | head -n 1)"
    if [ -n "$url" ]; then
      printf -v "$var" '%s' "$url"
      return 0
    fi
    sleep 0.1
  done
  cat "$log" >&2
  return 1
}
HTTP_PORT="${PATCHDIFF_TEST_HTTP_PORT:-0}"
start_http HTTP_URL "$PATCHDIFF_TEST_DSN" "$HTTP_PORT"
start_http ROUTER_HTTP_URL "$PATCHDIFF_ROUTER_DSN" "$(( HTTP_PORT == 0 ? 0 : HTTP_PORT + 1 ))"
trap 'kill "${HTTP_PIDS[@]}" 2>/dev/null || true; stop_cluster "$E2E_DATA"; bash "$ROOT/scripts/shards.sh" down' EXIT
export PATCHDIFF_TEST_MCP_TOKEN_FILE="$HTTP_DIR/token"

# tests/mcp_sdk/test_feed.py (issue 19, the change feed) subscribes over stdio in both eras, here
# and through the router below (where the front end listens on every partition's database).
log "patchdiff-mcp under the official MCP Python SDK (stdio, and its Streamable HTTP client)"
setup_python
PATCHDIFF_TEST_MCP_URL="$HTTP_URL" \
  counted "$PY_ENV/bin/python" -m pytest -q -p no:cacheprovider tests/mcp_sdk

log "patchdiff-mcp under the MCP Inspector CLI, the official TypeScript SDK and the MCP conformance suite (docs/clients.md)"
setup_node
# files.test.mjs is the files profile's task suite (issue 19 item 4, docs/files.md); that profile
# serves stdio only, so it skips itself in the HTTP run below.
counted "$NODE_BIN" --test --test-reporter=spec tests/mcp_node/*.test.mjs
log "the same Inspector CLI and TypeScript SDK tests over Streamable HTTP"
PATCHDIFF_TEST_MCP_URL="$HTTP_URL" \
  counted "$NODE_BIN" --test --test-reporter=spec tests/mcp_node/inspector.test.mjs tests/mcp_node/sdk.test.mjs
log "the MCP conformance suite against the Streamable HTTP endpoint (2026-07-28 and 2025-11-25)"
PATCHDIFF_CONFORMANCE_OUT="$HTTP_DIR/conformance" \
  bash "$ROOT/scripts/conformance.sh" "$HTTP_URL" "$HTTP_DIR/token"

# The end-to-end suites again, through the router: they read tables, hold row locks and run
# callers' own transactions on the target's partition (patchdiff_tests::tables_for), as
# docs/scale-out.md tells applications to; the golden transcripts, byte for byte, through fresh
# routers of one partition each. Not here: the suites that make databases or clusters of their
# own (upgrade, released_scripts, privileges, tenancy, reliability_crash), and shards.rs, which
# ran above against both.
log "through the PL/Proxy router: the end-to-end suites, the golden transcripts, and the official Python SDK"
PATCHDIFF_TEST_DSN="$PATCHDIFF_ROUTER_DSN" counted cargo test --locked -p patchdiff-tests \
  --test contract_fidelity --test drift_evidence --test eras --test finalize --test fuzz_sql \
  --test golden \
  --test feed --test fuzz_stdio --test hostile_input --test http --test http_feed --test incremental_observation \
  --test files --test mcp_stdio --test near_misses --test reliability_concurrency --test sql_concurrency \
  --test structural --test workspace
PATCHDIFF_TEST_DSN="$PATCHDIFF_ROUTER_DSN" PATCHDIFF_TEST_MCP_URL="$ROUTER_HTTP_URL" \
  counted "$PY_ENV/bin/python" -m pytest -q -p no:cacheprovider tests/mcp_sdk

# cargo's "test result: ok. N passed; M failed", pytest's "N passed, M failed in 1.2s" and
# node --test's "ℹ pass N" / "ℹ fail N".
awk '/^test result:/ || /^[0-9]+ (passed|failed)/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     /^ℹ (pass|fail) [0-9]+$/ { if ($2 == "pass") p += $3; else f += $3 }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$RESULTS"
