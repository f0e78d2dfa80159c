"""One-edit submissions on a 64 KiB target against two builds of pg_patchdiff at once, calls
interleaved one by one so that the machine's noise falls on both alike (scripts/ab-bench.sh).

    ab_submit.py BASE_DSN NEW_DSN CALLS SWITCH_CMD

The base connection is opened (and so loads the base build's library) before SWITCH_CMD
installs the new build; the new connection then loads that one. Each call is timed inside the
server by a PL/pgSQL wrapper, as patchdiff-bench times its calls. Prints the medians, p95s and
the ratio new/base."""
import json
import statistics
import subprocess
import sys

import psycopg

TIMER = """CREATE FUNCTION pg_temp.timed(args text, OUT result text, OUT ms float8) LANGUAGE plpgsql AS $f$
  DECLARE t0 timestamptz := clock_timestamp();
  BEGIN result := patchdiff_submit_edits(args::json)::text;
        ms := extract(epoch FROM clock_timestamp() - t0) * 1000; END $f$"""


def open_side(dsn):
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(TIMER)
    lines = (f"line {i:05d} ref-{i:05d} filler text that makes up sixty-four KiB\n" for i in range(1400))
    body = "".join(lines)[:65536]
    r = c.execute("SELECT patchdiff_initialize_target(%s::json)::text",
                  (json.dumps({"filename": "ab.txt", "content": body}),)).fetchone()[0]
    return {"c": c, "id": json.loads(r)["target_file_id"], "version": 0, "ms": []}


def call(side, i):
    # Call i swaps marker i % 1000 between ref- and REF-: always accepted, the size never changes.
    k, upper = i % 1000, (i // 1000) % 2 == 1
    a, b = f"ref-{k:05d}", f"REF-{k:05d}"
    if upper:
        a, b = b, a
    args = json.dumps({"target_file_id": side["id"], "expected_target_version": side["version"],
                       "intent": "ab", "edits": [{"match": a, "replace": b}]})
    text, ms = side["c"].execute("SELECT result, ms FROM pg_temp.timed(%s)", (args,)).fetchone()
    answer = json.loads(text)
    if answer.get("status") != "accepted":
        sys.exit(f"not accepted: {text[:300]}")
    side["version"] = answer["version"]
    side["ms"].append(ms)


def main():
    base_dsn, new_dsn, calls, switch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    base = open_side(base_dsn)
    subprocess.run(["bash", "-c", switch], check=True)
    new = open_side(new_dsn)
    for i in range(calls):
        first, second = (base, new) if i % 2 == 0 else (new, base)
        call(first, i)
        call(second, i)
    mb, mn = statistics.median(base["ms"]), statistics.median(new["ms"])
    p95 = lambda xs: statistics.quantiles(xs, n=20)[18]
    print(f"{calls} calls each, server ms: base median {mb:.3f} p95 {p95(base['ms']):.3f}; "
          f"new median {mn:.3f} p95 {p95(new['ms']):.3f}; new/base {mn / mb:.3f}")


main()
