"""What the official-SDK suites share: the server under test over stdio, and a tool's JSON."""

import json
import os

from mcp import StdioServerParameters


def server(profile):
    """patchdiff-mcp (PATCHDIFF_MCP_BIN) on PATCHDIFF_TEST_DSN in `profile`, over stdio."""
    return StdioServerParameters(
        command=os.environ["PATCHDIFF_MCP_BIN"],
        env={
            "PATCHDIFF_DATABASE_URL": os.environ["PATCHDIFF_TEST_DSN"],
            "PATCHDIFF_MCP_PROFILE": profile,
            "PATH": os.environ.get("PATH", ""),
        },
    )


def tool_json(result):
    """A tool result's JSON text (every tool answers one text content)."""
    assert result.content and result.content[0].type == "text"
    return json.loads(result.content[0].text)
