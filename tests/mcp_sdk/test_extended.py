"""Issue 19 items 1 and 3 over MCP, driven by the official Python SDK (`mcp` on PyPI) over stdio
against a real PostgreSQL: the `extended` profile lists `patchdiff_submit_changeset` and
`patchdiff_diff` (the contract's `full` profile lists neither); a rename across two targets, in
the shape of the changeset tool's own example (one member tx/1, one tx/2), is accepted whole;
its identical resend is recovered, not applied again; a changeset with one failing member
changes nothing, and names that member; and `patchdiff_diff` answers GNU `diff -u`'s hunks for
the rename, checked against the real `diff` binary.

Runs through the PL/Proxy router too (the test command's router step): a changeset runs there
only when its targets live on one partition, and across partitions the router refuses it with
nothing written (docs/scale-out.md), which this test checks for each caller target it creates
until one lands on the first target's partition.
"""

import asyncio
import os
import subprocess
import tempfile

from mcp import ClientSession
from mcp.client.stdio import stdio_client
from sdk_common import server, tool_json


def gnu_hunks(before, after):
    """GNU diff -u's output for the two texts, without its two header lines."""
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a"), os.path.join(d, "b")
        for path, text in ((a, before), (b, after)):
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        out = subprocess.run(["diff", "-u", a, b], capture_output=True, text=True)
        assert out.returncode == 1, out
        return "".join(out.stdout.splitlines(keepends=True)[2:])


DEF = "def parse(data):\n    return data.split()\n\n\ndef main():\n    pass\n"
CALLER = "import lib\n\nrows = lib.parse(data)\nprint(rows)\n"


def test_sdk_extended_profile_changeset_and_diff():
    async def body():
        async with stdio_client(server("full")) as (read, write):
            async with ClientSession(read, write) as full:
                await full.initialize()
                names = [t.name for t in (await full.list_tools()).tools]
                assert "patchdiff_submit_changeset" not in names and "patchdiff_diff" not in names

        async with stdio_client(server("extended")) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                tools = {t.name: t.input_schema for t in (await s.list_tools()).tools}
                assert tools["patchdiff_submit_changeset"]["required"] == ["members"]
                assert "from_version" in tools["patchdiff_diff"]["properties"]

                async def create(name, text):
                    r = tool_json(await s.call_tool("patchdiff_initialize_target", {"filename": name, "content": text}))
                    return r["target_file_id"]

                d = await create("lib.py", DEF)
                for attempt in range(64):
                    c = await create("main.py", CALLER)
                    rename = {
                        "client_request_id": f"sdk-rename-{d}-{attempt}",
                        "members": [
                            {"target_file_id": d, "expected_target_version": 0, "intent": "Rename parse to parse_header",
                             "edits": [{"match": "def parse(", "replace": "def parse_header("}]},
                            {"target_file_id": c, "expected_target_version": 0, "intent": "Update the caller",
                             "operations": [{"op": "match", "match": "lib.parse(data)", "replace": "lib.parse_header(data)"}]},
                        ],
                    }
                    first = await s.call_tool("patchdiff_submit_changeset", rename)
                    if not (first.is_error and "several partitions" in first.content[0].text):
                        break
                    # Through a router, the two targets landed on two partitions: refused before
                    # any shard is called, with nothing written. Another caller target, then.
                    for t in (d, c):
                        g = tool_json(await s.call_tool("patchdiff_get_target", {"target_file_id": t}))
                        assert g["version"] == 0, g
                r = tool_json(first)
                assert r["status"] == "accepted", r
                assert r["member_count"] == 2 and r["failing_member"] is None, r
                assert [m["version"] for m in r["members"]] == [1, 1], r
                again = tool_json(await s.call_tool("patchdiff_submit_changeset", rename))
                assert again["deduplicated"] is True and again["changeset_id"] == r["changeset_id"], again

                # One member's guard is stale: nothing changes, the answer names it.
                stale = {
                    "members": [
                        {"target_file_id": d, "expected_target_version": 1, "intent": "x",
                         "edits": [{"match": "def main(", "replace": "def run("}]},
                        {"target_file_id": c, "expected_target_version": 0, "intent": "x",
                         "edits": [{"match": "main", "replace": "run"}]},
                    ],
                }
                rej = tool_json(await s.call_tool("patchdiff_submit_changeset", stale))
                assert rej["status"] == "rejected", rej
                assert rej["failing_member"]["member_index"] == 1, rej
                assert rej["failing_member"]["failure_reason"] == "target_version_mismatch", rej
                for t, text in ((d, DEF.replace("def parse(", "def parse_header(")),
                                (c, CALLER.replace("lib.parse(", "lib.parse_header("))):
                    g = tool_json(await s.call_tool("patchdiff_read_target", {"target_file_id": t}))
                    assert (g["version"], g["text"]) == (1, text), g

                # The diff of the rename is GNU diff's.
                diff = tool_json(await s.call_tool("patchdiff_diff", {"target_file_id": d, "from_version": 0}))
                assert diff["to_version"] == 1 and diff["has_more"] is False, diff
                assert diff["header"] == "--- lib.py\tversion 0\n+++ lib.py\tversion 1\n", diff
                assert diff["hunks"] == gnu_hunks(DEF, DEF.replace("def parse(", "def parse_header(")), diff

    asyncio.run(body())
