#!/usr/bin/env bash
# Issue 20's benchmark (docs/scale-out.md): the load of patchdiff-stress through a PL/Proxy router
# over 1, 2 and 4 shard clusters, next to the same load on one cluster directly, each followed by
# patchdiff-router-bench (what the router adds to a read and to a one-edit submission). Prints
# accepted transactions per second, every invariant's check, and the router's added latency.
#
#   bash scripts/scale-bench.sh [SECONDS_PER_RUN (default 20)] [ITERATIONS (default 2000)]
#
# Needs the extension installed (bash scripts/run.sh or scripts/test.sh did it). Clusters live
# in /tmp/patchdiff-scale and are stopped and removed at the end.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

RUN_SECONDS="${1:-20}"
ITERATIONS="${2:-2000}"
BASE=/tmp/patchdiff-scale
setup_system
cargo build --locked --release -p patchdiff-mcp -p patchdiff-tests \
  --bin patchdiff-mcp --bin patchdiff-stress --bin patchdiff-router-bench >&2
STRESS=(target/release/patchdiff-stress --mcp-bin target/release/patchdiff-mcp --seconds "$RUN_SECONDS")

cleanup() {
  stop_cluster "$BASE/direct"
  for n in 1 2 4; do
    PATCHDIFF_SHARDS_DIR="$BASE/s$n" bash scripts/shards.sh down 2>/dev/null || true
  done
  rm -rf "$BASE"
}
trap cleanup EXIT
cleanup
mkdir -p "$BASE"

echo "## one cluster, directly (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
start_cluster "$BASE/direct" 54460
create_database "$BASE/direct" 54460 patchdiff_scale >&2
"${STRESS[@]}" --no-pgbench --dsn "host=127.0.0.1 port=54460 user=postgres dbname=patchdiff_scale"
stop_cluster "$BASE/direct"

for n in 1 2 4; do
  port=$((54470 + 10 * (n / 2)))
  echo
  echo "## router over $n shard cluster(s), 8 partitions (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  dsn="$(PATCHDIFF_SHARDS_SKIP_INSTALL=1 PATCHDIFF_SHARDS_DIR="$BASE/s$n" PATCHDIFF_SHARDS_PORT=$port \
    bash scripts/shards.sh up "$n" 2>/dev/null)"
  "${STRESS[@]}" --router --dsn "$dsn"
  echo
  target/release/patchdiff-router-bench --router "$dsn" --iterations "$ITERATIONS"
  PATCHDIFF_SHARDS_DIR="$BASE/s$n" bash scripts/shards.sh down 2>/dev/null
done
