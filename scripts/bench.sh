#!/usr/bin/env bash
# Benchmarks (docs/benchmarks.md): pg_patchdiff's hot calls against plain-SQL baselines of the
# same size, on a private cluster and a throwaway database, in one run.
#   bash scripts/bench.sh [patchdiff-bench options, e.g. --iterations 400 --out /tmp/bench.md]
# Then patchdiff-mcp-bench: the MCP front end's round trip against the same SQL calls, and
# patchdiff-near-miss-bench: the near-miss search on 65,536-code-point corpora (no database),
# patchdiff-block-near-miss-bench: the drift evidence of issue 17 on the same size (no database), and
# workspace_bench: a publishing SAVE of a 64 KiB workspace file next to write + rename, and
# patchdiff-structural-bench: candidates, a 32-scope bundle and a 32-group commit on 1 MiB;
# hostile_bench: the engine's worst shapes of issue 14 next to a plain call on the same text;
# helper_bench: the parser helper's peak memory and time on those shapes, and a cold 1 MiB
# outline through the helper next to the same outline in process.
# The load test against pgbench is separate: target/release/patchdiff-stress (docs/reliability.md).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
setup_all
DATA="${PATCHDIFF_BENCH_DIR:-/tmp/patchdiff-bench}"
PORT="${PATCHDIFF_BENCH_PORT:-54332}"
start_cluster "$DATA" "$PORT"
trap 'stop_cluster "$DATA"' EXIT
cluster_psql "$DATA" "$PORT" -d postgres -c "DROP DATABASE IF EXISTS patchdiff_bench"
create_database "$DATA" "$PORT" patchdiff_bench
DSN="host=127.0.0.1 port=$PORT user=postgres dbname=patchdiff_bench"
cargo build --release --locked -p patchdiff-tests -p patchdiff-mcp --bins --examples
target/release/patchdiff-near-miss-bench
echo
target/release/patchdiff-block-near-miss-bench
echo
target/release/patchdiff-bench --dsn "$DSN" "$@"
echo
target/release/patchdiff-mcp-bench --dsn "$DSN" --mcp-bin target/release/patchdiff-mcp
echo
PATCHDIFF_TEST_DSN="$DSN" PATCHDIFF_MCP_BIN=target/release/patchdiff-mcp target/release/examples/workspace_bench 51
echo
target/release/patchdiff-structural-bench --dsn "$DSN"
echo
cargo build --release --locked -p patchdiff-waymark --bin patchdiff-waymark-helper --example helper_bench
target/release/examples/helper_bench target/release/patchdiff-waymark-helper
echo
cargo run --release --locked -p patchdiff-engine --example hostile_bench
