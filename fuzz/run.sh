#!/usr/bin/env bash
# The AFL++ campaign of issue 14 item 6, reproducible (docs/reliability.md "Fuzzing (issue 14)").
#
#   fuzz/run.sh smoke                 replay corpus/<target>/* through every target, no AFL++
#                                     (plain `cargo test`, a second once built)
#   fuzz/run.sh [SECONDS] [TARGET..]  build with `cargo afl`, then run afl-fuzz on each target,
#                                     one after the other, SECONDS each (default 180), and print
#                                     its figures; output in fuzz/out/<target>/ (not committed)
#
# Needs `cargo install cargo-afl` (0.18.2 builds AFL++ 4.40c and its runtime on install). One
# afl-fuzz runs at a time, without CPU pinning, so other work keeps the other core.
set -euo pipefail
cd "$(dirname "$0")"
ALL=(args submit canonical near_miss replay wire waymark diff)

if [ "${1:-}" = smoke ]; then
    exec cargo test --quiet --locked
fi

SECONDS_PER_TARGET=${1:-180}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")

cargo afl build --release --features afl

export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_NO_UI=1
# corpus/waymark/abort_* are known aborts of the YAML grammar (contained by the helper process):
# kept as seeds, so afl-fuzz must not refuse them.
export AFL_IGNORE_SEED_PROBLEMS=1
printf '%-10s %8s %12s %10s %8s %8s %6s\n' target seconds executions execs/s corpus crashes hangs
for t in "${TARGETS[@]}"; do
    rm -rf "out/$t"
    mkdir -p out
    # -t 1000: a single input running over one second is a hang.
    cargo afl fuzz -i "corpus/$t" -o "out/$t" -V "$SECONDS_PER_TARGET" -t 1000 -- "target/release/$t" \
        > "out/$t.log" 2>&1 || { echo "afl-fuzz $t failed: see fuzz/out/$t.log"; tail -20 "out/$t.log"; exit 1; }
    s="out/$t/default/fuzzer_stats"
    get() { awk -F' *: *' -v k="$1" '$1 == k {print $2}' "$s"; }
    printf '%-10s %8s %12s %10s %8s %8s %6s\n' "$t" "$(get run_time)" "$(get execs_done)" \
        "$(get execs_per_sec)" "$(get corpus_count)" "$(get saved_crashes)" "$(get saved_hangs)"
done
