// Issue 19 item 4 "Latency goal": a one-edit edit_file on a 64 KiB file through patchdiff-mcp's
// `files` profile, side by side with the reference filesystem server
// (@modelcontextprotocol/server-filesystem, installed from npm here, in the benchmark only),
// both driven by the official TypeScript SDK client over stdio, interleaved round by round.
// Prints each server's median, p90 and the ratio; the goal is a ratio of at most 3.
//
//   PATCHDIFF_MCP_BIN=target/release/patchdiff-mcp PATCHDIFF_TEST_DSN="host=... dbname=..." \
//     target/node/node_modules/.bin/node tests/mcp_node/files-bench.mjs [ROUNDS]
//
// PATCHDIFF_REFERENCE_FS_VERSION pins the reference server's version (default: latest);
// PATCHDIFF_REFERENCE_FS_DIR reuses an npm prefix where it is already installed.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, existsSync, fsyncSync, mkdtempSync, openSync, readFileSync, renameSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BIN, DSN, load } from "./common.mjs";

const { Client } = await load("@modelcontextprotocol/client");
const { StdioClientTransport } = await load("@modelcontextprotocol/client/stdio");

const ROUNDS = Number(process.argv[2] || 51);
const WARMUP = 5;
const LINES = 1024; // 64-byte lines: a 64 KiB file
assert.ok(ROUNDS + WARMUP <= LINES, "one line per round");

const version = process.env.PATCHDIFF_REFERENCE_FS_VERSION || "latest";
const prefix = process.env.PATCHDIFF_REFERENCE_FS_DIR || mkdtempSync(join(tmpdir(), "reference-fs-"));
const pkg = join(prefix, "node_modules", "@modelcontextprotocol", "server-filesystem");
if (!existsSync(pkg)) {
  execFileSync("npm", ["install", "--prefix", prefix, "--no-audit", "--no-fund", "--loglevel=error", `@modelcontextprotocol/server-filesystem@${version}`], { stdio: "inherit" });
}
const installed = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
const referenceMain = join(pkg, "dist", "index.js");

function file(root) {
  let s = "";
  for (let i = 0; i < LINES; i += 1) s += `${`line ${String(i).padStart(4, "0")} original`.padEnd(63, ".")}\n`;
  assert.equal(s.length, 65536);
  const path = join(root, "bench.txt");
  writeFileSync(path, s);
  return path;
}

async function connect(command, args, env) {
  const client = new Client({ name: "files-bench", version: "1" }, { versionNegotiation: { mode: "legacy" } });
  await client.connect(new StdioClientTransport({ command, args, env: { PATH: process.env.PATH, ...env }, stderr: "inherit" }));
  return client;
}

const refRoot = mkdtempSync(join(tmpdir(), "bench-ref-"));
const oursRoot = mkdtempSync(join(tmpdir(), "bench-ours-"));
const refFile = file(refRoot);
const oursFile = file(oursRoot);
const reference = await connect(process.execPath, [referenceMain, refRoot], {});
const ours = await connect(BIN, [], {
  PATCHDIFF_DATABASE_URL: DSN,
  PATCHDIFF_MCP_PROFILE: "files",
  PATCHDIFF_WORKSPACE_ROOT: oursRoot,
  PATCHDIFF_WORKSPACE_KEY_FILE: join(mkdtempSync(join(tmpdir(), "bench-key-")), "workspace.key"),
});

async function timedEdit(client, path, i) {
  const tag = `line ${String(i).padStart(4, "0")} original`;
  const t0 = process.hrtime.bigint();
  const r = await client.callTool({ name: "edit_file", arguments: { path, edits: [{ oldText: tag, newText: tag.replace("original", "edited  ") }] } });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  assert.ok(!r.isError, JSON.stringify(r));
  return ms;
}

// The floor of any durable publication, as docs/workspace.md requires one: the same edit as a
// plain write of a staged file, fsync, rename and fsync of the directory, in this process.
const floorRoot = mkdtempSync(join(tmpdir(), "bench-floor-"));
const floorFile = file(floorRoot);
function durableEdit(i) {
  const tag = `line ${String(i).padStart(4, "0")} original`;
  const t0 = process.hrtime.bigint();
  const next = readFileSync(floorFile, "utf8").replace(tag, tag.replace("original", "edited  "));
  const tmp = `${floorFile}.tmp`;
  const fd = openSync(tmp, "w");
  writeSync(fd, next);
  fsyncSync(fd);
  closeSync(fd);
  renameSync(tmp, floorFile);
  const dir = openSync(floorRoot, "r");
  fsyncSync(dir);
  closeSync(dir);
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

// Both servers read the file once first (ours imports it on first use).
await reference.callTool({ name: "read_file", arguments: { path: refFile } }).catch(() => reference.callTool({ name: "read_text_file", arguments: { path: refFile } }));
await ours.callTool({ name: "read_file", arguments: { path: oursFile } });
const times = { reference: [], ours: [], floor: [] };
for (let i = 0; i < WARMUP + ROUNDS; i += 1) {
  const r = await timedEdit(reference, refFile, i);
  const o = await timedEdit(ours, oursFile, i);
  const f = durableEdit(i);
  if (i >= WARMUP) {
    times.reference.push(r);
    times.ours.push(o);
    times.floor.push(f);
  }
}
await reference.close();
await ours.close();
// Both files were edited the same way.
assert.equal(readFileSync(oursFile, "utf8"), readFileSync(refFile, "utf8"));

const q = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const med = { reference: q(times.reference, 0.5), ours: q(times.ours, 0.5), floor: q(times.floor, 0.5) };
console.log(`edit_file, one edit, 64 KiB file, ${ROUNDS} rounds (after ${WARMUP} warm-up), interleaved`);
console.log(`reference @modelcontextprotocol/server-filesystem ${installed}: median ${med.reference.toFixed(2)} ms, p90 ${q(times.reference, 0.9).toFixed(2)} ms`);
console.log(`patchdiff-mcp files profile:                       median ${med.ours.toFixed(2)} ms, p90 ${q(times.ours, 0.9).toFixed(2)} ms`);
console.log(`durable write floor (write+fsync+rename+fsync dir): median ${med.floor.toFixed(2)} ms, p90 ${q(times.floor, 0.9).toFixed(2)} ms`);
console.log(`ratio (ours / reference, medians): ${(med.ours / med.reference).toFixed(2)} (goal: at most 3)`);
console.log(`ratio (floor / reference, medians): ${(med.floor / med.reference).toFixed(2)}; ours / floor: ${(med.ours / med.floor).toFixed(2)}`);
