#!/usr/bin/env bash
# What the row rules of targets, pdcp_logs and manifest_ledger cost the edit throughput
# (docs/benchmarks.md, "Issue 21, item 1", "The row rules"): target/release/patchdiff-stress, edits
# only (8 connections, its own pgbench -N, invariants checked), on a fresh database per run, arms
# interleaved:
#   trigger      the schema as installed: the rules in patchdiff.check_row()
#   constraints  the same rules as the CHECK constraints they were before (trigger dropped)
#   none         neither (the ceiling: no rule checked at all; never a schema to ship)
#   bash scripts/bench/row_rules.sh [ROUNDS [SECONDS [ARMS [MIX]]]]
#     default 3 rounds of 12 s, all arms, MIX edits; MIX default runs the stress tool's default mix
#     (reads, saves, shared targets, keyed resends, one MCP connection) instead of edits only.
# It needs a running cluster with pg_patchdiff installed, reached as superuser postgres on
# 127.0.0.1:$PATCHDIFF_BENCH_PORT (default 54395); it makes and drops the database rulesbench.
set -u
ROUNDS="${1:-3}" SECS="${2:-12}" ARMS="${3:-trigger constraints none}" MIX="${4:-edits}"
PORT="${PATCHDIFF_BENCH_PORT:-54395}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PSQL=(psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT" -U postgres)
DROP_TRIGGERS="DROP TRIGGER row_rules ON patchdiff.targets;
  DROP TRIGGER row_rules ON patchdiff.pdcp_logs;
  DROP TRIGGER row_rules ON patchdiff.manifest_ledger;"
# The constraints as sql/releases/pg_patchdiff--0.1.0.sql declares them, under their names.
CONSTRAINTS="ALTER TABLE patchdiff.targets
  ADD CONSTRAINT targets_current_hash_check CHECK (current_hash ~ '^[0-9a-f]{64}\$'),
  ADD CONSTRAINT targets_version_check CHECK (version >= 0),
  ADD CONSTRAINT targets_workspace_root_device_check CHECK (workspace_root_device >= 0),
  ADD CONSTRAINT targets_workspace_root_inode_check CHECK (workspace_root_inode >= 0),
  ADD CONSTRAINT targets_workspace_baseline_sha256_check CHECK (workspace_baseline_sha256 ~ '^[0-9a-f]{64}\$'),
  ADD CONSTRAINT targets_workspace_baseline_bytes_check CHECK (workspace_baseline_bytes >= 0),
  ADD CONSTRAINT targets_workspace_binding_nonce_check CHECK (workspace_binding_nonce ~ '^[0-9a-f]{32}\$'),
  ADD CONSTRAINT targets_workspace_binding_proof_check CHECK (workspace_binding_proof ~ '^[0-9a-f]{64}\$'),
  ADD CONSTRAINT targets_check CHECK (num_nulls(workspace_root_device, workspace_root_inode,
    workspace_relative_path, workspace_baseline_sha256, workspace_baseline_bytes) IN (0, 5)),
  ADD CONSTRAINT targets_check1 CHECK (num_nulls(workspace_binding_nonce, workspace_binding_proof) IN (0, 2)),
  ADD CONSTRAINT targets_check2 CHECK (workspace_binding_nonce IS NULL OR workspace_root_device IS NOT NULL);
ALTER TABLE patchdiff.pdcp_logs
  ADD CONSTRAINT pdcp_logs_status_check CHECK (status IN ('accepted', 'rejected')),
  ADD CONSTRAINT pdcp_logs_failure_stage_check CHECK (failure_stage IN ('PROTOCOL_VALIDATION',
    'PRECONDITION_GUARD', 'TRANSACTION_APPLICABILITY')),
  ADD CONSTRAINT pdcp_logs_attempt_check CHECK (attempt >= 1),
  ADD CONSTRAINT pdcp_logs_check CHECK ((status = 'accepted') = (after_version IS NOT NULL AND failure_reason IS NULL));
ALTER TABLE patchdiff.manifest_ledger ADD CONSTRAINT manifest_ledger_change_index_check CHECK (change_index >= 1);"
cd "$ROOT"
case "$MIX" in
  edits) LOAD=(--mcp-connections 0 --read-percent 0 --save-percent 0 --shared-percent 0 --keyed-percent 0) ;;
  default) LOAD=(--mcp-bin target/release/patchdiff-mcp --mcp-connections 1) ;;
  *) echo "unknown mix $MIX" >&2; exit 2 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/settings.sh"
bench_server_settings "${PSQL[@]}"
for round in $(seq 1 "$ROUNDS"); do
  for arm in $ARMS; do
    "${PSQL[@]}" -d postgres -c "DROP DATABASE IF EXISTS rulesbench WITH (FORCE)" -c "CREATE DATABASE rulesbench" >/dev/null
    "${PSQL[@]}" -d rulesbench -c "CREATE EXTENSION pg_patchdiff" >/dev/null
    case "$arm" in
      trigger) ;;
      constraints) "${PSQL[@]}" -d rulesbench -c "$DROP_TRIGGERS $CONSTRAINTS" >/dev/null ;;
      none) "${PSQL[@]}" -d rulesbench -c "$DROP_TRIGGERS" >/dev/null ;;
      *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    printf '%s | %-11s | load %s | ' "$round" "$arm" "$(cut -d' ' -f1 /proc/loadavg)"
    target/release/patchdiff-stress --dsn "host=127.0.0.1 port=$PORT user=postgres dbname=rulesbench" \
      --connections 8 --seconds "$SECS" --pgbench-seconds "$SECS" "${LOAD[@]}" 2>&1 \
      | sed -nE 's/.* ([0-9.]+) accepted\/s$/\1 accepted\/s | /p; s/^accepted submissions \/ pgbench tps = ([0-9.]+).*/\1 of pgbench -N | /p; s/^invariants: (all held|.*violation.*).*/invariants \1/p' \
      | tr -d '\n'
    echo
  done
done
"${PSQL[@]}" -d postgres -c "DROP DATABASE rulesbench WITH (FORCE)" >/dev/null
