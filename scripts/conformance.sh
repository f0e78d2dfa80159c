#!/usr/bin/env bash
# The MCP conformance suite (@modelcontextprotocol/conformance, pinned in tests/mcp_node) against
# a running Streamable HTTP endpoint, once per revision it requires, each at its own wire
# (2026-07-28 stateless, 2025-11-25 with the initialize handshake). docs/clients.md.
#
#   scripts/conformance.sh URL [TOKEN_FILE] [-- extra `conformance server` options]
#
# URL: the endpoint, e.g. http://127.0.0.1:8080/mcp. TOKEN_FILE: a file holding a bearer token
# (patchdiff-mcp serve's tokens map to PostgreSQL roles). The suite itself cannot send a token,
# so with TOKEN_FILE it talks to tests/mcp_node/bearer-proxy.mjs, which adds the header and
# passes everything else through unchanged. PATCHDIFF_CONFORMANCE_REVISIONS picks the
# revisions (default "2026-07-28 2025-11-25"); tests/mcp_node/conformance-<revision>.yml, when
# present, is that revision's baseline of failures that are the contract's choice (each entry
# explained there). Results: PATCHDIFF_CONFORMANCE_OUT (default target/conformance).
# Exit status: non-zero when any revision has an unexpected failure.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

url="${1:?usage: scripts/conformance.sh URL [TOKEN_FILE] [-- options]}"
shift
token_file=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  token_file="$1"
  shift
fi
[ "${1:-}" = "--" ] && shift

setup_node
out="${PATCHDIFF_CONFORMANCE_OUT:-$ROOT/target/conformance}"
mkdir -p "$out"

proxy_pid=""
cleanup() { if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi; }
trap cleanup EXIT
target="$url"
if [ -n "$token_file" ]; then
  [ -r "$token_file" ] || { echo "cannot read token file $token_file" >&2; exit 2; }
  port_file="$(mktemp)"
  "$NODE_BIN" tests/mcp_node/bearer-proxy.mjs "$url" "$token_file" >"$port_file" &
  proxy_pid=$!
  for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
  port="$(head -1 "$port_file")"
  rm -f "$port_file"
  [ -n "$port" ] || { echo "bearer-proxy did not start" >&2; exit 1; }
  path="/${url#*://*/}"
  [ "$path" = "/$url" ] && path="/"
  target="http://127.0.0.1:$port$path"
  log "conformance: $url through the bearer proxy at $target"
fi

status=0
for revision in ${PATCHDIFF_CONFORMANCE_REVISIONS:-2026-07-28 2025-11-25}; do
  log "conformance suite, requirements $revision, against $url"
  baseline=()
  if [ -f "tests/mcp_node/conformance-$revision.yml" ]; then
    baseline=(--expected-failures "tests/mcp_node/conformance-$revision.yml")
  fi
  if "$NODE_BIN" "$NODE_PREFIX/node_modules/@modelcontextprotocol/conformance/dist/index.js" server \
       --url "$target" --requirements "$revision" -o "$out/$revision" "${baseline[@]}" "$@" \
       2>&1 | tee "$out/$revision.log"; then
    log "conformance $revision: no unexpected failure"
  else
    log "conformance $revision: unexpected failures (see $out/$revision.log)"
    status=1
  fi
done
exit "$status"
