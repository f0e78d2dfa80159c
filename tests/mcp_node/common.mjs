// Shared by the Node client tests (docs/clients.md): where the pinned clients are, how to start
// patchdiff-mcp under the transcript recorder, and the contract's `alpha beta alpha` example.
//
// Environment: PATCHDIFF_MCP_BIN (the built server), PATCHDIFF_TEST_DSN (a database with
// pg_patchdiff), and optionally PATCHDIFF_NODE_PREFIX (where scripts/lib.sh setup_node ran
// `npm ci`; default target/node). With PATCHDIFF_TEST_MCP_URL (a running Streamable HTTP
// endpoint, e.g. http://127.0.0.1:8080/mcp) and PATCHDIFF_TEST_MCP_TOKEN_FILE (a file holding
// a bearer token for it), the Inspector and SDK tests talk to that endpoint instead of stdio.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, existsSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
export const ROOT = resolve(HERE, "..", "..");
export const PREFIX = process.env.PATCHDIFF_NODE_PREFIX || join(ROOT, "target", "node");
export const BIN = process.env.PATCHDIFF_MCP_BIN;
export const DSN = process.env.PATCHDIFF_TEST_DSN;
assert.ok(BIN, "PATCHDIFF_MCP_BIN must name the built patchdiff-mcp");
assert.ok(DSN, "PATCHDIFF_TEST_DSN must name a database with pg_patchdiff");

export const MODERN = "2026-07-28";
export const RECORDER = join(HERE, "recorder.mjs");

// The packages live in PREFIX/node_modules, not beside this file: resolve them from there.
const requireFromPrefix = createRequire(join(PREFIX, "node_modules", "resolve-from-here.js"));
export async function load(specifier) {
  return import(pathToFileURL(requireFromPrefix.resolve(specifier)).href);
}
export function bin(name) {
  const path = join(PREFIX, "node_modules", ".bin", name);
  assert.ok(existsSync(path), `${path} is missing: run scripts/lib.sh setup_node`);
  return path;
}

// A fresh file for one conversation's transcript.
// Kept when a test failed (or with PATCHDIFF_KEEP_TRANSCRIPTS=1), to read what was sent.
const scratch = mkdtempSync(join(tmpdir(), "patchdiff-node-clients-"));
process.on("exit", (code) => {
  if (code === 0 && !process.env.PATCHDIFF_KEEP_TRANSCRIPTS) rmSync(scratch, { recursive: true, force: true });
  else console.error(`transcripts and conformance results: ${scratch}`);
});
let transcripts = 0;
export function transcriptPath(label) {
  transcripts += 1;
  return join(scratch, `${transcripts}-${label.replace(/\W+/g, "_")}.jsonl`);
}

export const HTTP_URL = process.env.PATCHDIFF_TEST_MCP_URL;
export const TRANSPORT = HTTP_URL ? "http" : "stdio";
const TOKEN_FILE = process.env.PATCHDIFF_TEST_MCP_TOKEN_FILE;
if (HTTP_URL) assert.ok(TOKEN_FILE, "PATCHDIFF_TEST_MCP_TOKEN_FILE must name a file holding a token for PATCHDIFF_TEST_MCP_URL");

// The endpoint behind a recording bearer-proxy.mjs for one conversation: its URL.
const proxies = [];
process.on("exit", () => proxies.forEach((p) => p.kill()));
export async function recordedEndpoint(log) {
  const proxy = spawn(process.execPath, [join(HERE, "bearer-proxy.mjs"), HTTP_URL, TOKEN_FILE, log], { stdio: ["ignore", "pipe", "inherit"] });
  proxies.push(proxy);
  const [chunk] = await once(proxy.stdout, "data");
  // Nothing more to read; the proxy must not keep this test process alive.
  proxy.stdout.destroy();
  proxy.unref();
  return `http://127.0.0.1:${Number(chunk.toString().split("\n")[0])}${new URL(HTTP_URL).pathname}`;
}

// The command line that runs patchdiff-mcp behind the recorder: [command, ...args].
export function recordedServer(log) {
  return [process.execPath, RECORDER, log, BIN];
}
export const SERVER_ENV = { PATCHDIFF_DATABASE_URL: DSN, PATH: process.env.PATH };

// [{dir: "sent" | "got", msg}] in order; several processes may have appended to one file.
export function transcript(log) {
  return readFileSync(log, "utf8")
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l));
}

// The requests a client sent (not notifications), in order, each with the first response of the
// same id that followed it (one log may hold several connections, which reuse ids).
export function exchanges(log) {
  const out = [];
  const pending = new Map();
  for (const { dir, msg } of transcript(log)) {
    if (!("id" in msg)) continue;
    const id = JSON.stringify(msg.id);
    if (dir === "sent" && msg.method) {
      const e = { request: msg, response: undefined };
      out.push(e);
      pending.set(id, [...(pending.get(id) || []), e]);
    } else if (dir === "got" && pending.get(id)?.length) {
      pending.get(id).shift().response = msg;
    }
  }
  return out;
}

// 2026-07-28 basic/index "Per-request protocol fields" and "ResultType", basic/utilities/caching:
// no initialize; every request carries the version and capabilities in _meta; every result is
// complete with the server's identity; list results carry ttlMs and cacheScope.
export function assertModernConversation(log, methods) {
  const ex = exchanges(log);
  assert.deepEqual([...new Set(ex.map((e) => e.request.method))].sort(), [...methods].sort());
  for (const { request, response } of ex) {
    assert.notEqual(request.method, "initialize");
    assert.equal(request.params._meta["io.modelcontextprotocol/protocolVersion"], MODERN);
    assert.equal(typeof request.params._meta["io.modelcontextprotocol/clientCapabilities"], "object");
    assert.ok(response && response.result, `${request.method}: ${JSON.stringify(response)}`);
    assert.equal(response.result.resultType, "complete", request.method);
    assert.equal(response.result._meta["io.modelcontextprotocol/serverInfo"].name, "patchdiff-mcp");
    if (request.method === "tools/list" || request.method === "server/discover") {
      assert.ok(Number.isInteger(response.result.ttlMs) && response.result.ttlMs >= 0, request.method);
      assert.ok(["public", "private"].includes(response.result.cacheScope), request.method);
    }
    if (request.method === "server/discover") {
      assert.ok(response.result.supportedVersions.includes(MODERN));
    }
  }
  return ex;
}

// The contract's revisions: initialize first, negotiated to 2025-11-25 (the newest), and no
// field of the modern era in any result.
export function assertLegacyConversation(log, methods) {
  const ex = exchanges(log);
  assert.equal(ex[0].request.method, "initialize");
  assert.equal(ex[0].response.result.protocolVersion, "2025-11-25");
  assert.deepEqual([...new Set(ex.map((e) => e.request.method))].sort(), ["initialize", ...methods].sort());
  for (const { request, response } of ex) {
    assert.ok(response && response.result, `${request.method}: ${JSON.stringify(response)}`);
    for (const key of ["resultType", "ttlMs", "cacheScope"]) {
      assert.ok(!(key in response.result), `${request.method} has ${key}`);
    }
    if (request.params && request.params._meta) {
      assert.ok(!("io.modelcontextprotocol/protocolVersion" in request.params._meta));
    }
  }
  return ex;
}

export const TOOLS = ["patchdiff_initialize_target", "patchdiff_read_target", "patchdiff_find_occurrences", "patchdiff_submit_edits"];
export const EXAMPLE = "alpha beta alpha\n";
export const AMBIGUOUS = (target) => ({
  target_file_id: target,
  expected_target_version: 0,
  intent: "rename",
  edits: [{ match: "alpha", replace: "gamma" }],
});
export const SELECTED = (target) => ({
  target_file_id: target,
  expected_target_version: 0,
  intent: "rename",
  edits: [{ match: "alpha", replace: "gamma", occurrence_index: 2 }],
  client_request_id: "req-002",
});

// Contract "Tool results": the text block is the literal JSON of structuredContent.
export function toolJson(result) {
  assert.equal(result.content[0].type, "text");
  const parsed = JSON.parse(result.content[0].text);
  if (!result.isError) assert.deepEqual(result.structuredContent, parsed);
  return parsed;
}

// Contract, patchdiff_submit_edits "Rejected Response": the unselected alpha is ambiguous,
// with both exact candidates, and it is a tool result, not a tool error.
export function assertAmbiguityRejection(result) {
  assert.equal(result.isError, false);
  const r = toolJson(result);
  assert.equal(r.status, "rejected");
  assert.equal(r.failure_reason, "match_ambiguous");
  assert.equal(r.failed_change_id, "chg_001");
  assert.equal(r.after_hash, null);
  assert.equal(r.current_version, 0);
  assert.equal(r.diagnostic.occurrence_count, 2);
  assert.deepEqual(
    r.diagnostic.exact_candidates.candidates.map((c) => [c.occurrence_index, c.start, c.end, c.before, c.match_preview, c.after]),
    [
      [1, 0, 5, "", "alpha", " beta alpha\n"],
      [2, 11, 16, "alpha beta ", "alpha", "\n"],
    ],
  );
  assert.equal(r.diagnostic.retryable, true);
  return r;
}

// Contract, patchdiff_submit_edits "Accepted Response": occurrence_index 2 becomes version 1.
export function assertAccepted(result) {
  assert.equal(result.isError, false);
  const r = toolJson(result);
  assert.equal(r.status, "accepted");
  assert.equal(r.version, 1);
  assert.equal(r.current_version, 1);
  assert.deepEqual([r.evidence.changes[0].span_start, r.evidence.changes[0].span_end], [11, 16]);
  assert.equal(r.client_request_id, "req-002");
  assert.equal(r.deduplicated, false);
  return r;
}
