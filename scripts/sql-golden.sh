#!/usr/bin/env bash
# The documented SQL examples as golden tests (issue 16, item 5), pg_regress style: docs/demo.sql
# and the ```sql blocks of docs/{sql-api,operations,history}.md each run in a fresh database,
# inside BEGIN ... ROLLBACK (no example needs its own commit: every API call runs in the
# caller's transaction), through psql with every statement echoed (-a). The output, with UUIDs,
# timestamps and a list cursor's epoch microseconds masked, must equal
# tests/sql/expected/<name>.out byte for byte; `diff -u` shows any difference.
#
#   bash scripts/sql-golden.sh CLUSTER_DIR PORT          compare (exit 1 on any difference)
#   PATCHDIFF_GOLDEN_RECORD=1 bash scripts/sql-golden.sh CLUSTER_DIR PORT    (re)write the .out files
#
# CLUSTER_DIR and PORT name a cluster started by lib.sh's start_cluster with pg_patchdiff
# installed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

dir="${1:?usage: sql-golden.sh CLUSTER_DIR PORT}"
port="${2:?usage: sql-golden.sh CLUSTER_DIR PORT}"
expected_dir="$ROOT/tests/sql/expected"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Each distinct UUID becomes <uuid-N> in order of first appearance in the file, so "this row
# names the target that call created" stays checked; hashes of content are kept. psql aligns
# columns on the unmasked text, so only fixed-width values may be masked: UUIDs, the API's
# timestamps (always six fractional digits) and a cursor's epoch microseconds.
mask() {
  perl -pe '
    BEGIN { our %u; our $n = 0 }
    s{(?<![0-9A-Za-z])([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})(?![0-9A-Za-z])}{
      my $k = lc $1; $u{$k} //= ++$n; "<uuid-$u{$k}>" }ge;
    s{(?<![0-9])\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}(?::?\d{2})?)?}{<timestamp>}g;
    s{(?<![0-9])\d{10,}(?=\.<uuid-)}{<epoch_us>}g;
  '
}

# name and SQL of each example file.
examples=(demo sql-api operations history)
extract() {
  case "$1" in
    demo) cat "$ROOT/docs/demo.sql" ;;
    *) awk '/^```sql$/{f=1;next}/^```$/{f=0}f' "$ROOT/docs/$1.md" ;;
  esac
}

drop_database() {
  cluster_psql "$dir" "$port" -d postgres -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $1 WITH (FORCE)"
}

mkdir -p "$expected_dir"
failed=0
for name in "${examples[@]}"; do
  db="patchdiff_golden_${name//-/_}"
  drop_database "$db"
  create_database "$dir" "$port" "$db"
  { echo 'BEGIN;'; extract "$name"; echo 'ROLLBACK;'; } > "$work/$name.sql"
  # From stdin, so that any psql message names <stdin>, not a temporary path.
  if ! cluster_psql "$dir" "$port" -d "$db" -a < "$work/$name.sql" > "$work/$name.raw" 2>&1; then
    cat "$work/$name.raw"
    echo "documented example failed: $name" >&2
    failed=1
  fi
  mask < "$work/$name.raw" > "$work/$name.out"
  drop_database "$db"
  if [ "${PATCHDIFF_GOLDEN_RECORD:-}" = 1 ]; then
    cp "$work/$name.out" "$expected_dir/$name.out"
    log "recorded tests/sql/expected/$name.out"
  elif ! diff -u "$expected_dir/$name.out" "$work/$name.out"; then
    echo "documented example output differs: $name (tests/sql/expected/$name.out)" >&2
    failed=1
  else
    log "documented examples $name: output matches tests/sql/expected/$name.out"
  fi
done
exit "$failed"
