// patchdiff-mcp under the MCP Inspector CLI (@modelcontextprotocol/inspector, `inspector --cli`),
// over stdio (or the HTTP endpoint: common.mjs), against a real PostgreSQL, in each of its protocol eras: `modern` pins 2026-07-28,
// `auto` probes server/discover and falls back to initialize, `legacy` sends initialize only.
// Each CLI run is one connection: tools/list, then the contract's `alpha beta alpha` example
// as three tools/call runs, and the tool schemas pass its --strict portability check. The recorded wire shows which era each mode used.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { promisify } from "node:util";
import {
  DSN,
  TRANSPORT,
  recordedEndpoint,
  TOOLS,
  EXAMPLE,
  AMBIGUOUS,
  SELECTED,
  bin,
  recordedServer,
  transcriptPath,
  toolJson,
  assertAmbiguityRejection,
  assertAccepted,
  assertModernConversation,
  assertLegacyConversation,
} from "./common.mjs";

const run = promisify(execFile);
const INSPECTOR = bin("mcp-inspector");

// One `inspector --cli` run: its JSON result (`--format json -q` prints {"result": ...}).
async function inspector(era, log, method, extra = []) {
  const target = TRANSPORT === "http" ? ["--transport", "http", await recordedEndpoint(log)] : ["-e", `PATCHDIFF_DATABASE_URL=${DSN}`, ...recordedServer(log)];
  const args = ["--cli", "--protocol-era", era, "--format", "json", "-q", "--method", method, ...extra, ...target];
  let out;
  try {
    out = await run(process.execPath, [INSPECTOR, ...args], { timeout: 60_000, maxBuffer: 16 << 20 });
  } catch (e) {
    assert.fail(`inspector --cli --protocol-era ${era} --method ${method} failed (exit ${e.code}):\n${e.stderr}\n${e.stdout}`);
  }
  return JSON.parse(out.stdout).result;
}

async function callTool(era, log, name, args) {
  return inspector(era, log, "tools/call", ["--tool-name", name, "--tool-args-json", JSON.stringify(args)]);
}

async function contractExample(era, log) {
  // --strict: the CLI exits 6 on any error-severity schema portability problem. Measured: none;
  // 48 warnings, all nullable fields written as a `type` array (the contract's schemas).
  const listed = await inspector(era, log, "tools/list", ["--strict"]);
  const names = listed.tools.map((t) => t.name);
  for (const name of TOOLS) assert.ok(names.includes(name), name);
  const created = toolJson(await callTool(era, log, "patchdiff_initialize_target", { filename: "a.md", content: EXAMPLE }));
  const target = created.target_file_id;
  assertAmbiguityRejection(await callTool(era, log, "patchdiff_submit_edits", AMBIGUOUS(target)));
  assertAccepted(await callTool(era, log, "patchdiff_submit_edits", SELECTED(target)));
  return listed;
}

test(`Inspector CLI (${TRANSPORT}) --protocol-era modern: server/discover offers 2026-07-28, every result is complete with cache hints on lists (issue 18 Why: the pinned-version failure; 2026-07-28 basic/lifecycle)`, async () => {
  const log = transcriptPath("inspector-modern");
  await contractExample("modern", log);
  const ex = assertModernConversation(log, ["server/discover", "tools/list", "tools/call"]);
  assert.equal(ex[0].request.method, "server/discover");
  assert.equal(ex.filter((e) => e.request.method === "server/discover").length, 4, "one connection per CLI run");
});

test(`Inspector CLI (${TRANSPORT}) --protocol-era auto: its server/discover probe succeeds and it stays modern (2026-07-28 stdio backward compatibility; issue 18 item 3)`, async () => {
  const log = transcriptPath("inspector-auto");
  await contractExample("auto", log);
  assertModernConversation(log, ["server/discover", "tools/list", "tools/call"]);
});

test(`Inspector CLI (${TRANSPORT}) --protocol-era legacy: initialize to 2025-11-25, the contract's revision unchanged (issue 18 item 1)`, async () => {
  const log = transcriptPath("inspector-legacy");
  const listed = await contractExample("legacy", log);
  assertLegacyConversation(log, ["tools/list", "tools/call"]);
  // docs/eras.md: the same tools in both eras.
  const modern = await inspector("modern", transcriptPath("inspector-modern-list"), "tools/list");
  assert.deepEqual(modern.tools, listed.tools);
});
