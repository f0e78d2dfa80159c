"""Issue 19 item 2, the change feed, driven by the official Python SDK (`mcp` on PyPI) over
stdio against a real PostgreSQL: in the `extended` profile a client lists and reads targets as
resources and subscribes to one, in the legacy era (`resources/subscribe`, the update through
`message_handler`) and in 2026-07-28 (`Client.listen`); an acceptance made by another session
reaches it as `notifications/resources/updated`; and the same 2026-07-28 listen over Streamable
HTTP (`patchdiff-mcp serve`, the response an SSE stream: docs/http.md "Subscriptions").

Through a PL/Proxy router (PATCHDIFF_TEST_DSN is the router in the test command's router step)
the front end listens on every partition's database (docs/scale-out.md), and the same tests run.
"""

import asyncio
import os

from mcp import ClientSession
from mcp.client.stdio import stdio_client
from sdk_common import server, tool_json


async def other_session(fn):
    """Another MCP session (profile full), the one that edits."""
    async with stdio_client(server("full")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await fn(session)


async def create(text):
    async def body(session):
        created = tool_json(await session.call_tool("patchdiff_initialize_target", {"filename": "feed.txt", "content": text}))
        return created["target_file_id"]

    return await other_session(body)


async def edit(target, version, old, new):
    async def body(session):
        r = tool_json(await session.call_tool("patchdiff_submit_edits", {
            "target_file_id": target, "expected_target_version": version, "intent": "feed",
            "edits": [{"match": old, "replace": new}]}))
        assert r["status"] == "accepted", r
        return r

    return await other_session(body)


def test_sdk_legacy_client_subscribes_and_hears_an_acceptance():
    """Legacy era: capabilities.resources.subscribe, resources/list and read, resources/subscribe,
    then notifications/resources/updated for another session's acceptance."""

    async def body():
        target = await create("alpha beta\n")
        uri = f"patchdiff://targets/{target}"
        updates = asyncio.Queue()

        async def handler(message):
            m = getattr(message, "root", message)
            if getattr(m, "method", None) == "notifications/resources/updated":
                updates.put_nowait(str(m.params.uri))

        async with stdio_client(server("extended")) as (read, write):
            async with ClientSession(read, write, message_handler=handler) as session:
                init = await session.initialize()
                assert init.capabilities.resources.subscribe is True
                listed = await session.list_resources()
                assert uri in [str(r.uri) for r in listed.resources]
                templates = await session.list_resource_templates()
                assert templates.resource_templates[0].uri_template == "patchdiff://targets/{target_file_id}"
                before = await session.read_resource(uri)
                assert before.contents[0].text == "alpha beta\n"
                await session.subscribe_resource(uri)
                await edit(target, 0, "alpha", "ALPHA")
                assert await asyncio.wait_for(updates.get(), 10) == uri
                after = await session.read_resource(uri)
                assert after.contents[0].text == "ALPHA beta\n"

    asyncio.run(body())


def test_sdk_modern_client_listens_and_hears_an_acceptance():
    """2026-07-28: the SDK's default mode stays modern, server/discover advertises
    resources.subscribe, Client.listen is acknowledged with the URI, and another session's
    acceptance arrives as a ResourceUpdated event."""
    from mcp.client.client import Client
    from mcp.client.subscriptions import ResourceUpdated

    async def body():
        target = await create("one two\n")
        uri = f"patchdiff://targets/{target}"
        async with Client(server("extended"), mode="auto") as client:
            assert client.protocol_version == "2026-07-28"
            assert client.server_capabilities.resources.subscribe is True
            read = await client.read_resource(uri)
            assert read.contents[0].text == "one two\n"
            async with client.listen(resource_subscriptions=[uri]) as sub:
                assert list(sub.honored.resource_subscriptions) == [uri]
                await edit(target, 0, "one", "ONE")
                events = sub.__aiter__()
                event = await asyncio.wait_for(events.__anext__(), 10)
                assert isinstance(event, ResourceUpdated) and str(event.uri) == uri
            read = await client.read_resource(uri)
            assert read.contents[0].text == "ONE two\n"

    asyncio.run(body())


def test_sdk_modern_client_listens_over_http_and_hears_an_acceptance(tmp_path):
    """Issue 19 item 2 over Streamable HTTP (docs/http.md "Subscriptions"): the SDK's HTTP
    client, in 2026-07-28, sees resources.subscribe in server/discover, Client.listen is
    answered with an SSE stream whose acknowledgment names the URI, and another session's
    acceptance arrives as a ResourceUpdated event; closing the listen ends the stream."""
    import subprocess

    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.client.subscriptions import ResourceUpdated

    token = "sdk-listen-token-0123456789"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{token} postgres\n")
    tokens.chmod(0o600)
    proc = subprocess.Popen(
        [os.environ["PATCHDIFF_MCP_BIN"], "serve", "--listen", "127.0.0.1:0", "--tokens", str(tokens)],
        env={"PATCHDIFF_DATABASE_URL": os.environ["PATCHDIFF_TEST_DSN"], "PATCHDIFF_MCP_PROFILE": "extended",
             "PATH": os.environ.get("PATH", "")},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert line.startswith("patchdiff-mcp: listening on "), line
        url = line.strip().removeprefix("patchdiff-mcp: listening on ")

        async def body():
            target = await create("red green\n")
            uri = f"patchdiff://targets/{target}"
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
                transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
                async with Client(transport, mode="auto") as client:
                    assert client.protocol_version == "2026-07-28"
                    assert client.server_capabilities.resources.subscribe is True
                    async with client.listen(resource_subscriptions=[uri]) as sub:
                        assert list(sub.honored.resource_subscriptions) == [uri]
                        await edit(target, 0, "red", "RED")
                        event = await asyncio.wait_for(sub.__aiter__().__anext__(), 10)
                        assert isinstance(event, ResourceUpdated) and str(event.uri) == uri
                    read = await client.read_resource(uri)
                    assert read.contents[0].text == "RED green\n"

        asyncio.run(body())
    finally:
        proc.terminate()
        proc.wait(10)
