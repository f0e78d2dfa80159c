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


def test_sdk_schemas_hold_the_contract_domains_of_keys_span_context_and_observed_forms():
    """Contract "Discovery, argument errors and examples": "Strict end-of-string constraints
    combine $ with a JSON Schema not constraint against a trailing LF" (Python's re matches
    ^[!-~]+$ against "req-1\\n"); "Span context": expected_before / expected_after are
    "non-empty strings or null"; patchdiff_submit_observed_operations requires observation_id,
    operations and both guards, or the batch form's names with client_request_id."""

    async def body(session, init):
        tools = {t.name: (t.input_schema if hasattr(t, "input_schema") else t.inputSchema) for t in (await session.list_tools()).tools}
        keyed = [n for n in ["patchdiff_submit_edits", "patchdiff_submit_operations", "patchdiff_submit_replacement", "patchdiff_submit_observed_operations"] if n in tools]
        assert len(keyed) == 4
        for name in keyed:
            base = tools[name]["examples"][0] if tools[name].get("examples") else None
            key = tools[name]["properties"]["client_request_id"]
            for draft in DRAFTS:
                assert draft(key).is_valid("req-1")
                assert draft(key).is_valid(None)
                assert not draft(key).is_valid("req-1\n")
                assert not draft(key).is_valid("req 1")
            if base is not None:
                assert not jsonschema.Draft202012Validator(tools[name]).is_valid(dict(base, client_request_id="req-1\n"))
        span = tools["patchdiff_submit_operations"]["examples"][0]
        assert span["operations"][0]["expected_after"] == "alpha"
        for draft in DRAFTS:
            validator = draft(tools["patchdiff_submit_operations"])
            assert validator.is_valid(span)
            for field in ["expected_before", "expected_after"]:
                op = dict(span["operations"][0], **{field: ""})
                assert not validator.is_valid(dict(span, operations=[op]))
                op = dict(span["operations"][0], **{field: None})
                assert validator.is_valid(dict(span, operations=[op]))
        observed = tools["patchdiff_submit_observed_operations"]
        single, batch = observed["examples"]
        for draft in DRAFTS:
            validator = draft(observed)
            assert validator.is_valid(single) and validator.is_valid(batch)
            for example, names in [(single, ["observation_id", "operations", "expected_target_version", "expected_current_hash"]),
                                   (batch, ["observation_bundle_id", "groups", "client_request_id", "expected_target_version", "expected_current_hash"])]:
                for name in names:
                    assert not validator.is_valid({k: v for k, v in example.items() if k != name}), name

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


def test_sdk_drives_the_observed_v2_editor_through_one_bundle():
    """observed-editor-v2: a trusted full connection initializes the target; the five-tool
    observed_v2 editor (strict observation mode) lists scopes, observes a bundle and commits it
    with the returned snapshot; the receipt's structuredContent validates against its
    outputSchema and fits 8,192 bytes; the trusted connection's replay checks all hold."""
    source = "def flush(buf):\n    limit = 64\n    return buf[:limit]\n\n\nclass Uploader:\n    def flush(self, buf):\n        limit = 64\n        return self.send(buf[:limit])\n"

    async def trusted(fn):
        return await session_do(fn)

    async def init_target(session, init):
        return tool_json(await session.call_tool("patchdiff_initialize_target", {"filename": "uploader.py", "content": source}))["target_file_id"]

    target = run(trusted(init_target))
    editor = StdioServerParameters(
        command=SERVER.command,
        env={**SERVER.env, "PATCHDIFF_MCP_PROFILE": "observed_v2", "PATCHDIFF_STRICT_OBSERVATION_MODE": "1"},
    )

    async def edit():
        async with stdio_client(editor) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = (await session.list_tools()).tools
                assert sorted(t.name for t in tools) == [
                    "patchdiff_commit_bundle", "patchdiff_find_occurrences", "patchdiff_list_scopes",
                    "patchdiff_observe_scopes", "patchdiff_read_target"]
                schemas = {t.name: (t.output_schema if hasattr(t, "output_schema") else t.outputSchema) for t in tools}
                listed = tool_json(await session.call_tool("patchdiff_list_scopes", {"target_file_id": target, "query": "flush"}))
                assert [c["name"] for c in listed["candidates"]] == ["flush", "Uploader.flush"]
                observed = tool_json(await session.call_tool("patchdiff_observe_scopes", {
                    "target_file_id": target, "selections": [{"symbol_name": "Uploader.flush"}]}))
                assert observed["status"] == "observed_batch"
                scope = observed["scopes"][0]
                result = await session.call_tool("patchdiff_commit_bundle", {
                    "snapshot": observed["snapshot"], "intent": "raise the uploader limit",
                    "client_request_id": "sdk-v2-1",
                    "groups": [{"observation_id": scope["observation_id"],
                                "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}]}]})
                receipt = tool_json(result)
                structured = result.structured_content if hasattr(result, "structured_content") else result.structuredContent
                assert structured == receipt
                for draft in DRAFTS:
                    draft(schemas["patchdiff_commit_bundle"]).validate(receipt)
                assert receipt["status"] == "accepted"
                assert len(json.dumps(receipt, separators=(",", ":"))) <= 8192
                assert receipt["transaction"]["after"]["version"] == 1

    run(edit())

    async def replay(session, init):
        r = tool_json(await session.call_tool("patchdiff_replay", {"target_file_id": target}))
        assert r["materialized_state_matches"] is True, r
        got = tool_json(await session.call_tool("patchdiff_get_target", {"target_file_id": target}))["current_content"]
        assert got == source.replace("        limit = 64", "        limit = 128")

    run(trusted(replay))


# Issue 18 item 1: MCP 2026-07-28 (the stateless era) beside the contract's revisions.
MODERN = "2026-07-28"


def test_sdk_auto_mode_probes_server_discover_and_stays_modern():
    """2026-07-28 "stdio: Backward Compatibility": the SDK's default mode probes
    server/discover; patchdiff-mcp answers with a DiscoverResult, so the client stays modern
    (no initialize), and the legacy mode still negotiates a handshake revision."""
    from mcp.client.client import Client

    async def body():
        async with Client(SERVER, mode="auto") as client:
            assert client.protocol_version == MODERN
            assert client.server_info.name == "patchdiff-mcp"
            assert "guard" in client.instructions
            assert client.server_capabilities.tools is not None
            names = [t.name for t in (await client.list_tools()).tools]
            assert "patchdiff_submit_edits" in names
        async with Client(SERVER, mode="legacy") as client:
            assert client.protocol_version in ("2025-06-18", "2025-11-25")

    run(body())


def test_sdk_modern_era_runs_the_contract_example_with_schemas_that_hold():
    """docs/eras.md: every tool appears in 2026-07-28 as in 2025-11-25 (same declarations,
    checked by the SDK's own validation of structuredContent against outputSchema); the
    contract's `alpha beta alpha` example answers the same: the ambiguous alpha is rejected
    with both candidates, occurrence_index 2 is accepted as version 1."""

    async def body():
        async with stdio_client(SERVER) as (read, write):
            async with ClientSession(read, write) as session:
                discovered = await session.discover()
                assert MODERN in discovered.supported_versions
                assert session.protocol_version == MODERN
                modern_tools = (await session.list_tools()).tools
        async with stdio_client(SERVER) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                legacy_tools = (await session.list_tools()).tools
        dump = lambda ts: [t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in ts]
        assert dump(modern_tools) == dump(legacy_tools)
        schemas = {t.name: t.output_schema for t in modern_tools}

        async with stdio_client(SERVER) as (read, write):
            async with ClientSession(read, write) as session:
                await session.discover()

                async def call(name, args):
                    result = await session.call_tool(name, args)
                    text = tool_json(result)
                    if not result.is_error:
                        assert result.structured_content == text
                        for draft in DRAFTS:
                            draft(schemas[name]).validate(text)
                    return text

                created = await call("patchdiff_initialize_target", {"filename": "a.md", "content": "alpha beta alpha\n"})
                target = created["target_file_id"]
                rejected = await call("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma"}]})
                assert (rejected["status"], rejected["failure_reason"]) == ("rejected", "match_ambiguous")
                starts = [c["start"] for c in rejected["diagnostic"]["exact_candidates"]["candidates"]]
                assert starts == [0, 11]
                accepted = await call("patchdiff_submit_edits", {"target_file_id": target, "expected_target_version": 0, "intent": "rename", "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-002"})
                assert (accepted["status"], accepted["version"]) == ("accepted", 1)
                final = await call("patchdiff_get_target", {"target_file_id": target})
                assert final["current_content"] == "alpha beta gamma\n"

    run(body())
