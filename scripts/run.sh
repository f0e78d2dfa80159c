#!/usr/bin/env bash
# The main job: the patchdiff-mcp server on stdin/stdout, on the embedded default database (a
# private PostgreSQL 15 cluster it creates on first use under /var/lib/patchdiff/pg15 as root,
# or $PATCHDIFF_DATA_DIR; PATCHDIFF_DATABASE_URL selects another server instead).
# Does all of its own set-up on a fresh Debian 12 machine (as root); safe to run again. All
# set-up output goes to stderr: stdout carries nothing but MCP.
#   bash scripts/run.sh          set up, then serve MCP on stdio
#   bash scripts/run.sh stop     stop the embedded cluster
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [ "${1:-}" = stop ]; then
  stop_cluster "${PATCHDIFF_DATA_DIR:-/var/lib/patchdiff/pg15}"
  exit 0
fi

{
  setup_all
  log "building patchdiff-mcp"
  (cd "$ROOT" && cargo build --release --locked -p patchdiff-mcp)
  install -m 0755 "$BUILD_DIR/release/patchdiff-mcp" /usr/local/bin/patchdiff-mcp
  # `patchdiff-mcp finalize` runs the finalizer installed beside it.
  install -m 0755 "$BUILD_DIR/release/patchdiff-finalize" /usr/local/bin/patchdiff-finalize
  log "serving MCP on stdio (/usr/local/bin/patchdiff-mcp); logs on stderr"
} >&2
exec /usr/local/bin/patchdiff-mcp
