"""Calls of several kinds against two builds of pg_patchdiff at once, interleaved one by one so
that the machine's noise falls on both alike (scripts/ab-bench.sh).

    ab_submit.py BASE_DSN NEW_DSN CALLS SWITCH_CMD

The base connection is opened (and so loads the base build's library) before SWITCH_CMD
installs the new build; the new connection then loads that one. Each call is timed inside the
server by a PL/pgSQL wrapper, as patchdiff-bench times its calls. For each kind it prints the
medians, p95s and the ratio new/base. The kinds:

- submit: a one-edit tx/1 submission on a 64 KiB target, always accepted (CALLS calls);
- rejected: an edit whose match is absent, so the rejection is audited and carries near misses;
- read: patchdiff_read_target of 4,000 code points;
- log_page / ledger_page: a 50-entry page of the attempt log and of the ledger;
- replay: patchdiff_replay of a target with 50 accepted edits;
each of the last five CALLS // 5 times. PATCHDIFF_AB_KINDS (e.g. `read,replay`) runs only
the kinds it names, CALLS times each; without `submit` the log is empty, so the two pages are
then pages of an empty log."""
import json
import os
import statistics
import subprocess
import sys

import psycopg

TIMER = """CREATE FUNCTION pg_temp.timed(fn text, args text, OUT result text, OUT ms float8)
  LANGUAGE plpgsql AS $f$
  DECLARE t0 timestamptz := clock_timestamp();
  BEGIN EXECUTE format('SELECT %I($1::json)::text', fn) INTO result USING args;
        ms := extract(epoch FROM clock_timestamp() - t0) * 1000; END $f$"""


def timed(c, fn, args):
    return c.execute("SELECT result, ms FROM pg_temp.timed(%s, %s)", (fn, json.dumps(args))).fetchone()


def initialize(c, name, body):
    r = c.execute("SELECT patchdiff_initialize_target(%s::json)::text",
                  (json.dumps({"filename": name, "content": body}),)).fetchone()[0]
    return json.loads(r)["target_file_id"]


def open_side(dsn):
    c = psycopg.connect(dsn, autocommit=True)
    c.execute(TIMER)
    lines = (f"line {i:05d} ref-{i:05d} filler text that makes up sixty-four KiB\n" for i in range(1400))
    body = "".join(lines)[:65536]
    small = initialize(c, "replayed.txt", "".join(f"item {i:03d}\n" for i in range(100)))
    for v in range(50):
        r = json.loads(timed(c, "patchdiff_submit_edits", {
            "target_file_id": small, "expected_target_version": v, "intent": "ab",
            "edits": [{"match": f"item {v:03d}", "replace": f"ITEM {v:03d}"}]})[0])
        assert r["status"] == "accepted", r
    return {"c": c, "id": initialize(c, "ab.txt", body), "small": small, "version": 0, "ms": {}}


def submit(side, i):
    # Call i swaps marker i % 1000 between ref- and REF-: always accepted, the size never changes.
    k, upper = i % 1000, (i // 1000) % 2 == 1
    a, b = f"ref-{k:05d}", f"REF-{k:05d}"
    if upper:
        a, b = b, a
    return "patchdiff_submit_edits", {"target_file_id": side["id"], "expected_target_version": side["version"],
                                      "intent": "ab", "edits": [{"match": a, "replace": b}]}, "accepted"


def rejected(side, i):
    return "patchdiff_submit_edits", {"target_file_id": side["id"], "expected_target_version": side["version"],
                                      "intent": "ab", "edits": [{"match": f"ref-{i % 1000:05d} filler txet",
                                                                 "replace": "x"}]}, "rejected"


def read(side, i):
    return "patchdiff_read_target", {"target_file_id": side["id"], "start": (i * 37) % 60000, "length": 4000}, None


def log_page(side, i):
    return "patchdiff_get_pdcp_log", {"target_file_id": side["id"], "limit": 50}, None


def ledger_page(side, i):
    return "patchdiff_get_manifest_ledger", {"target_file_id": side["id"], "limit": 50}, None


def replay(side, i):
    return "patchdiff_replay", {"target_file_id": side["small"]}, None


def call(side, kind, i):
    fn, args, want = kind(side, i)
    text, ms = timed(side["c"], fn, args)
    answer = json.loads(text)
    if want and answer.get("status") != want:
        sys.exit(f"{kind.__name__}: not {want}: {text[:300]}")
    if answer.get("status") in ("invalid_argument", "not_found", "permission_denied"):
        sys.exit(f"{kind.__name__}: {text[:300]}")
    if want == "accepted":
        side["version"] = answer["version"]
    side["ms"].setdefault(kind.__name__, []).append(ms)


def main():
    base_dsn, new_dsn, calls, switch = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    base = open_side(base_dsn)
    subprocess.run(["bash", "-c", switch], check=True)
    new = open_side(new_dsn)
    plan = [(submit, calls)] + [(k, max(calls // 5, 20)) for k in (rejected, read, log_page, ledger_page, replay)]
    # PATCHDIFF_AB_KINDS=read,log_page measures only those kinds, CALLS times each.
    only = [k for k in os.environ.get("PATCHDIFF_AB_KINDS", "").split(",") if k]
    if only:
        plan = [(k, calls) for k, _ in plan if k.__name__ in only]
    p95 = lambda xs: statistics.quantiles(xs, n=20)[18]
    for kind, n in plan:
        for i in range(n):
            first, second = (base, new) if i % 2 == 0 else (new, base)
            call(first, kind, i)
            call(second, kind, i)
        b, w = base["ms"][kind.__name__], new["ms"][kind.__name__]
        mb, mn = statistics.median(b), statistics.median(w)
        print(f"  {kind.__name__:<12} {n:>5} calls each, server ms: base median {mb:.3f} p95 {p95(b):.3f}; "
              f"new median {mn:.3f} p95 {p95(w):.3f}; new/base {mn / mb:.3f}", flush=True)


main()
