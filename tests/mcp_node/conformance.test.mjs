// The MCP conformance suite (@modelcontextprotocol/conformance) judges patchdiff-mcp's
// 2026-07-28 era over stdio. The suite speaks only HTTP, so it talks to stdio-http-bridge.mjs,
// which hands each POST to a fresh patchdiff-mcp process over stdio. Every requirement of
// 2026-07-28 runs; the expected failures are the contract's choices
// (conformance-2026-07-28.yml, shared with scripts/conformance.sh) plus the few checks below
// that judge what only an HTTP endpoint can do. The suite fails the run on any other failure,
// on a message that breaks the 2026-07-28 JSON schema (wire-schema-valid), and on a listed
// failure that passes.
import assert from "node:assert/strict";
import { spawn, execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test, after } from "node:test";
import { once } from "node:events";
import { promisify } from "node:util";
import { BIN, DSN, PREFIX, transcriptPath } from "./common.mjs";

const HERE = import.meta.dirname;

// Checks that judge the bridge, not patchdiff-mcp. On stdio a connection's first request picks
// its era (2026-07-28 "stdio: Backward Compatibility"): a request without
// _meta["io.modelcontextprotocol/protocolVersion"] is legacy, where server/discover is
// -32601 (the contract) and initialize is the handshake. Over HTTP the MCP-Protocol-Version
// header marks the request modern, and the endpoint must answer -32602 / 404 there. Header
// validation (-32020) and Host/Origin checks are the HTTP endpoint's; the bridge has neither.
const BRIDGE_ONLY = [
  "server-stateless:sep-2575-request-meta-invalid-missing-meta",
  "server-stateless:sep-2575-request-meta-invalid-missing-protocol-version",
  "server-stateless:sep-2575-http-server-meta-invalid-400",
  "server-stateless:sep-2575-http-server-method-not-found-404-initialize",
  "server-stateless:sep-2575-http-server-header-mismatch-400",
  "dns-rebinding-protection:localhost-host-rebinding-rejected",
];

const bridge = spawn(process.execPath, [join(HERE, "stdio-http-bridge.mjs"), BIN], {
  stdio: ["ignore", "pipe", "inherit"],
  env: { ...process.env, PATCHDIFF_DATABASE_URL: DSN },
});
after(() => bridge.kill());
const [firstChunk] = await once(bridge.stdout, "data");
const port = Number(firstChunk.toString().split("\n")[0]);

test("MCP conformance suite, requirements 2026-07-28, over stdio through a one-request-per-process bridge: no failure beyond the contract's choices (issue 18 item 3)", async () => {
  const baseline = transcriptPath("conformance-baseline").replace(/\.jsonl$/, ".yml");
  writeFileSync(
    baseline,
    readFileSync(join(HERE, "conformance-2026-07-28.yml"), "utf8") + BRIDGE_ONLY.map((e) => `  - ${e}\n`).join(""),
  );
  const out = baseline.replace(/\.yml$/, "");
  const suite = join(PREFIX, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js");
  let result;
  try {
    result = await promisify(execFile)(
      process.execPath,
      [suite, "server", "--url", `http://127.0.0.1:${port}/mcp`, "--requirements", "2026-07-28", "--expected-failures", baseline, "-o", out],
      { timeout: 120_000, maxBuffer: 64 << 20 },
    );
  } catch (e) {
    assert.fail(`conformance exit ${e.code}; results in ${out}\n${(e.stdout || "").split("=== SUMMARY ===").pop()}`);
  }
  const summary = result.stdout.split("=== SUMMARY ===").pop();
  // The scenarios that exercise patchdiff-mcp's own 2026-07-28 handling pass in full.
  for (const scenario of ["tools-list", "input-required-result-unsupported-methods"]) {
    assert.match(summary, new RegExp(`✓ ${scenario}: [1-9]\\d* passed, 0 failed`), scenario);
  }
});
