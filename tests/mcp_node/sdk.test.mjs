// patchdiff-mcp under the official TypeScript SDK client (@modelcontextprotocol/client, the v2
// SDK), over stdio (or the HTTP endpoint: common.mjs), against a real PostgreSQL: each of its version negotiation modes
// (`{pin: "2026-07-28"}`, `auto`, `legacy`) lists the tools and runs the contract's
// `alpha beta alpha` example; the recorded wire shows which era each mode used.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  MODERN,
  SERVER_ENV,
  TRANSPORT,
  recordedEndpoint,
  TOOLS,
  EXAMPLE,
  AMBIGUOUS,
  SELECTED,
  load,
  recordedServer,
  transcriptPath,
  toolJson,
  assertAmbiguityRejection,
  assertAccepted,
  assertModernConversation,
  assertLegacyConversation,
} from "./common.mjs";

const { Client, StreamableHTTPClientTransport } = await load("@modelcontextprotocol/client");
const { StdioClientTransport } = await load("@modelcontextprotocol/client/stdio");

async function withClient(mode, fn) {
  const log = transcriptPath(`sdk-${JSON.stringify(mode)}`);
  let transport;
  if (TRANSPORT === "http") {
    transport = new StreamableHTTPClientTransport(new URL(await recordedEndpoint(log)));
  } else {
    const [command, ...args] = recordedServer(log);
    transport = new StdioClientTransport({ command, args, env: SERVER_ENV, stderr: "ignore" });
  }
  const client = new Client({ name: "patchdiff-node-tests", version: "1" }, { versionNegotiation: { mode } });
  await client.connect(transport);
  try {
    await fn(client);
  } finally {
    await client.close();
  }
  return log;
}

// The contract example; the SDK itself validates structuredContent against the outputSchema
// tools/list declared, so a schema the SDK rejects fails the call.
async function contractExample(client) {
  const listed = await client.listTools();
  const names = listed.tools.map((t) => t.name);
  for (const name of TOOLS) assert.ok(names.includes(name), name);
  for (const tool of listed.tools) {
    assert.equal(tool.inputSchema.type, "object");
    assert.equal(tool.outputSchema.type, "object");
  }
  const created = toolJson(await client.callTool({ name: "patchdiff_initialize_target", arguments: { filename: "a.md", content: EXAMPLE } }));
  assert.equal(created.version, 0);
  const target = created.target_file_id;
  assertAmbiguityRejection(await client.callTool({ name: "patchdiff_submit_edits", arguments: AMBIGUOUS(target) }));
  assertAccepted(await client.callTool({ name: "patchdiff_submit_edits", arguments: SELECTED(target) }));
  const final = toolJson(await client.callTool({ name: "patchdiff_get_target", arguments: { target_file_id: target } }));
  assert.equal(final.current_content, "alpha beta gamma\n");
  return listed;
}

test(`TypeScript SDK (${TRANSPORT}) pinned to 2026-07-28: server/discover, no initialize, resultType and cache hints on the wire (2026-07-28 basic/lifecycle, basic/utilities/caching; issue 18 item 3)`, async () => {
  let listed;
  const log = await withClient({ pin: MODERN }, async (client) => {
    assert.equal(client.getProtocolEra(), "modern");
    assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
    assert.equal(client.getServerVersion().name, "patchdiff-mcp");
    assert.match(client.getInstructions(), /guard/);
    assert.deepEqual(client.getDiscoverResult().supportedVersions, [MODERN]);
    listed = await contractExample(client);
  });
  // The SDK keeps the list's cache hints for its caller.
  assert.ok(Number.isInteger(listed.ttlMs));
  assert.equal(listed.cacheScope, "public");
  const ex = assertModernConversation(log, ["server/discover", "tools/list", "tools/call"]);
  assert.equal(ex[0].request.method, "server/discover");
});

test(`TypeScript SDK (${TRANSPORT}) auto mode: its server/discover probe finds 2026-07-28 and the connection stays modern (2026-07-28 stdio backward compatibility; issue 18 item 3)`, async () => {
  const log = await withClient("auto", async (client) => {
    assert.equal(client.getProtocolEra(), "modern");
    assert.equal(client.getNegotiatedProtocolVersion(), MODERN);
    await contractExample(client);
  });
  // The SDK probes on a sibling process; the session's own process then opens with tools/list.
  assertModernConversation(log, ["server/discover", "tools/list", "tools/call"]);
});

test(`TypeScript SDK (${TRANSPORT}) legacy mode: initialize negotiates 2025-11-25, served exactly as the contract's revisions (issue 18 item 1: legacy unchanged)`, async () => {
  let legacyTools;
  const log = await withClient("legacy", async (client) => {
    assert.equal(client.getProtocolEra(), "legacy");
    assert.equal(client.getNegotiatedProtocolVersion(), "2025-11-25");
    legacyTools = (await contractExample(client)).tools;
  });
  assertLegacyConversation(log, ["tools/list", "tools/call"]);
  // docs/eras.md: every tool appears in 2026-07-28 as in 2025-11-25.
  let modernTools;
  await withClient({ pin: MODERN }, async (client) => {
    modernTools = (await client.listTools()).tools;
  });
  assert.deepEqual(modernTools, legacyTools);
});
