#!/usr/bin/env bash
# A/B benchmark (docs/benchmarks.md, "Cost of the access checks" and "The reshape"): the
# extension built from BASE (a commit) next to the working tree's build, in one run: two private
# clusters, calls interleaved one by one, server-side medians and their ratio, for an accepted
# one-edit submission on 64 KiB, an audited rejection with near misses, a read, a log page, a
# ledger page and a replay (scripts/bench/ab_submit.py). Each pairing runs twice with the
# clusters swapped (so a difference between the clusters shows as disagreement), as a
# non-superuser owner and as a superuser.
#   bash scripts/ab-bench.sh BASE [CALLS]      (default CALLS 3000)
# It installs each build in turn over the machine's pg_patchdiff and leaves the working tree's
# build installed.
# PATCHDIFF_AB_DIR (default /tmp/patchdiff-ab) holds its files; PATCHDIFF_AB_PORT_A and
# PATCHDIFF_AB_PORT_B (default 54351 and 54352) are the two clusters' ports; PATCHDIFF_AB_BASE_PKG
# may name a folder holding BASE's build already (pg_patchdiff.so, pg_patchdiff.control and
# pg_patchdiff--*.sql, as "$PATCHDIFF_AB_DIR/base" holds after a run), used instead of building it.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
BASE="${1:?usage: scripts/ab-bench.sh BASE_COMMIT [CALLS]}"
CALLS="${2:-3000}"
WORK="${PATCHDIFF_AB_DIR:-/tmp/patchdiff-ab}"
mkdir -p "$WORK"

setup_system
setup_pgrx
install_extension
log "packaging the working tree's build and $BASE's"
EXT_DIR="$("$PG_CONFIG" --sharedir)/extension"
LIB_DIR="$("$PG_CONFIG" --pkglibdir)"
rm -rf "$WORK/new" && mkdir -p "$WORK/new"
cp "$LIB_DIR/pg_patchdiff.so" "$EXT_DIR"/pg_patchdiff* "$WORK/new/"
if [ -n "${PATCHDIFF_AB_BASE_PKG:-}" ]; then
  if [ "$(realpath "$PATCHDIFF_AB_BASE_PKG")" != "$(realpath -m "$WORK/base")" ]; then
    rm -rf "$WORK/base" && mkdir -p "$WORK/base"
    cp "$PATCHDIFF_AB_BASE_PKG"/pg_patchdiff* "$WORK/base/"
  fi
else
  rm -rf "$WORK/src" && git worktree add -f --detach "$WORK/src" "$BASE" >/dev/null
  (cd "$WORK/src" && CARGO_TARGET_DIR="$WORK/target" cargo pgrx package -p pg_patchdiff \
    --pg-config "$PG_CONFIG" --out-dir "$WORK/pkg" >/dev/null)
  git worktree remove --force "$WORK/src"
  rm -rf "$WORK/base" && mkdir -p "$WORK/base"
  cp "$WORK/pkg$LIB_DIR/pg_patchdiff.so" "$WORK/pkg$EXT_DIR"/pg_patchdiff* "$WORK/base/"
fi

if [ ! -x "$WORK/py/bin/python" ]; then python3 -m venv "$WORK/py"; fi
"$WORK/py/bin/pip" install -q --disable-pip-version-check "psycopg[binary]==3.3.9"

use() { # base | new
  replace_files 0755 "$LIB_DIR" "$WORK/$1/pg_patchdiff.so"
  replace_files 0644 "$EXT_DIR" "$WORK/$1"/pg_patchdiff.control "$WORK/$1"/pg_patchdiff--*.sql
}
prepare() { # dir port build
  use "$3"
  cluster_psql "$1" "$2" -d postgres -c "DROP DATABASE IF EXISTS ab WITH (FORCE)" \
    -c "CREATE DATABASE ab ENCODING 'UTF8' TEMPLATE template0" >/dev/null 2>&1
  cluster_psql "$1" "$2" -d ab -c "CREATE EXTENSION pg_patchdiff" \
    -c "DO \$\$BEGIN CREATE ROLE patchdiff_ab_owner LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END\$\$" >/dev/null
}
A=("$WORK/a" "${PATCHDIFF_AB_PORT_A:-54351}") B=("$WORK/b" "${PATCHDIFF_AB_PORT_B:-54352}")
start_cluster "${A[@]}"; start_cluster "${B[@]}"
trap 'stop_cluster "${A[0]}"; stop_cluster "${B[0]}"; use new' EXIT
for who in patchdiff_ab_owner postgres; do
  for order in ab ba; do
    if [ $order = ab ]; then base=("${A[@]}") new=("${B[@]}"); else base=("${B[@]}") new=("${A[@]}"); fi
    prepare "${base[@]}" base; prepare "${new[@]}" new; use base
    printf '%s, base on :%s, new on :%s:\n' "$who" "${base[1]}" "${new[1]}"
    "$WORK/py/bin/python" scripts/bench/ab_submit.py \
      "host=127.0.0.1 port=${base[1]} user=$who dbname=ab" "host=127.0.0.1 port=${new[1]} user=$who dbname=ab" \
      "$CALLS" "$(declare -f use); WORK='$WORK' LIB_DIR='$LIB_DIR' EXT_DIR='$EXT_DIR' use new"
  done
done
