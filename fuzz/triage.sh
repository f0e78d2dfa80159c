#!/usr/bin/env bash
# Sorts the crashes afl-fuzz saved for TARGET (fuzz/out/TARGET/default/crashes) by what the
# target printed when run on each directly (an afl.rs binary reads one input from stdin outside
# afl-fuzz): tree-sitter's `length <= 1024` assertion (the known abort of deeply nested YAML or
# Python, contained by the Waymark helper process) or anything else (a real defect).
#
#   fuzz/triage.sh TARGET
set -uo pipefail
cd "$(dirname "$0")"
t=${1:?usage: triage.sh TARGET}
known=0 other=0
for f in out/"$t"/default/crashes/id*; do
    [ -e "$f" ] || continue
    err=$(timeout 10 "target/release/$t" < "$f" 2>&1 >/dev/null)
    if grep -q "length <= 1024" <<<"$err"; then
        known=$((known + 1))
    else
        other=$((other + 1))
        echo "OTHER: $f"
        head -c 600 <<<"$err"
        echo
    fi
done
echo "$t: $known known tree-sitter 'length <= 1024' aborts, $other other crashes"
