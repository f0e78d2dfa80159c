"""patchdiff-mcp serve (Streamable HTTP, docs/http.md) driven by the official Python SDK's
Streamable HTTP client, in both eras, against a real PostgreSQL (issue 18 item 3).

Environment: PATCHDIFF_TEST_MCP_URL (a running `patchdiff-mcp serve` endpoint) and
PATCHDIFF_TEST_MCP_TOKEN_FILE (a file holding one of its bearer tokens); scripts/test.sh
starts the endpoint and sets both.
"""

import asyncio
import json
import os

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["PATCHDIFF_TEST_MCP_URL"]
with open(os.environ["PATCHDIFF_TEST_MCP_TOKEN_FILE"]) as f:
    TOKEN = f.read().strip()


def tool_json(result):
    return json.loads(result.content[0].text)


async def contract_example(session):
    created = tool_json(await session.call_tool("patchdiff_initialize_target", {"filename": "a.md", "content": "alpha beta alpha\n"}))
    target = created["target_file_id"]
    rejected = tool_json(await session.call_tool("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma"}]}))
    assert (rejected["status"], rejected["failure_reason"]) == ("rejected", "match_ambiguous")
    assert [c["start"] for c in rejected["diagnostic"]["exact_candidates"]["candidates"]] == [0, 11]
    accepted = tool_json(await session.call_tool("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}]}))
    assert (accepted["status"], accepted["version"]) == ("accepted", 1)


def run_era(era):
    async def body():
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            async with streamable_http_client(URL, http_client=http, terminate_on_close=False) as streams:
                read, write = streams[0], streams[1]
                async with ClientSession(read, write) as session:
                    if era == "modern":
                        discovered = await session.discover()
                        assert "2026-07-28" in discovered.supported_versions
                        assert session.protocol_version == "2026-07-28"
                    else:
                        init = await session.initialize()
                        assert init.protocol_version == "2025-11-25"
                    names = [t.name for t in (await session.list_tools()).tools]
                    assert "patchdiff_submit_edits" in names
                    await contract_example(session)

    asyncio.run(body())


def test_sdk_over_http_in_the_2026_07_28_era():
    """2026-07-28 streamable HTTP: server/discover, then the contract's alpha beta alpha
    example, through the official SDK's HTTP client with a bearer token."""
    run_era("modern")


def test_sdk_over_http_in_the_2025_11_25_era():
    """2025-11-25 streamable HTTP without sessions: initialize, then the same example."""
    run_era("legacy")
