"""patchdiff-mcp driven by an MCP client this project did not write: the official Python SDK
(`mcp` on PyPI), over stdio, against a real PostgreSQL.

Environment: PATCHDIFF_MCP_BIN (the built server) and PATCHDIFF_TEST_DSN (a database with
pg_patchdiff).
"""

import asyncio
import json
import os

import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

SERVER = StdioServerParameters(
    command=os.environ["PATCHDIFF_MCP_BIN"],
    env={"PATCHDIFF_DATABASE_URL": os.environ["PATCHDIFF_TEST_DSN"], "PATH": os.environ.get("PATH", "")},
)

# Hosts validate with either draft; the schemas must mean the same under both.
DRAFTS = [jsonschema.Draft7Validator, jsonschema.Draft202012Validator]


def run(coro):
    return asyncio.run(coro)


async def session_do(fn):
    async with stdio_client(SERVER) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            return await fn(session, init)


def tool_json(result):
    assert result.content and result.content[0].type == "text"
    return json.loads(result.content[0].text)


def test_sdk_lists_tools_whose_schemas_and_examples_hold_in_both_drafts():
    """Contract "Discovery": schema roots are objects, schemas and examples valid under
    draft-07 and 2020-12; newer revisions declare outputSchema and annotations."""

    async def body(session, init):
        assert init.protocol_version in ("2025-06-18", "2025-11-25")
        listed = await session.list_tools()
        names = [t.name for t in listed.tools]
        for expected in ["patchdiff_initialize_target", "patchdiff_read_target", "patchdiff_find_occurrences", "patchdiff_submit_edits"]:
            assert expected in names
        examples = 0
        for tool in listed.tools:
            schema = tool.input_schema if hasattr(tool, "input_schema") else tool.inputSchema
            assert schema["type"] == "object"
            output = tool.output_schema if hasattr(tool, "output_schema") else tool.outputSchema
            assert output["type"] == "object"
            for draft in DRAFTS:
                draft.check_schema(schema)
                draft.check_schema(output)
                for example in schema.get("examples", []):
                    draft(schema).validate(example)
            examples += len(schema.get("examples", []))
        assert examples >= 5
        return names

    run(session_do(body))


def test_sdk_calls_tools_and_structured_content_matches_output_schema():
    """Contract "Tool results": literal JSON text and the same object as structuredContent,
    valid against the declared outputSchema; the SDK itself also validates it."""

    async def body(session, init):
        schemas = {t.name: (t.output_schema if hasattr(t, "output_schema") else t.outputSchema) for t in (await session.list_tools()).tools}

        async def call(name, args):
            result = await session.call_tool(name, args)
            is_error = result.is_error if hasattr(result, "is_error") else result.isError
            structured = result.structured_content if hasattr(result, "structured_content") else result.structuredContent
            text = tool_json(result)
            if not is_error:
                assert structured == text
                for draft in DRAFTS:
                    draft(schemas[name]).validate(structured)
            else:
                assert structured is None
            return text, is_error

        created, _ = await call("patchdiff_initialize_target", {"filename": "doc.md", "content": "alpha beta alpha\r\n🌍 中\n"})
        assert created["status"] == "ok"
        assert created["source_line_endings"]["style"] == "mixed"
        target = created["target_file_id"]
        read, _ = await call("patchdiff_read_target", {"target_file_id": target})
        assert read["text"] == "alpha beta alpha\n🌍 中\n"
        found, _ = await call("patchdiff_find_occurrences", {"target_file_id": target, "text": "alpha"})
        assert found["occurrence_count"] == 2
        rejected, is_error = await call("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma"}]})
        assert (rejected["status"], rejected["failure_reason"], is_error) == ("rejected", "match_ambiguous", False)
        accepted, _ = await call("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "sdk-1"})
        assert (accepted["status"], accepted["version"]) == ("accepted", 1)
        again, _ = await call("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "sdk-1"})
        assert (again["deduplicated"], again["pdcp_log_id"]) == (True, accepted["pdcp_log_id"])
        unknown, is_error = await call("patchdiff_get_target", {"target_file_id": target, "bogus": True})
        assert (unknown["code"], is_error) == ("unknown_argument", True)
        final, _ = await call("patchdiff_get_target", {"target_file_id": target})
        assert final["current_content"] == "alpha beta gamma\n🌍 中\n"

    run(session_do(body))
