// Issue 19 item 4 "Proof": real-world edit tasks through the `files` profile (read_file,
// edit_file, write_file; docs/files.md), driven by the official TypeScript SDK client over stdio
// against a real PostgreSQL, with the bytes on disk checked after each task: unique, ambiguous,
// whitespace drift, CRLF, stale, three edits with one failing, Unicode, a 1 MiB file and a
// retried call (in the same connection and from a new one), plus dryRun, non-UTF-8 and
// write_file. The files profile serves stdio only, so this suite skips over HTTP.
import assert from "node:assert/strict";
import { test } from "node:test";
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SERVER_ENV, TRANSPORT, load, recordedServer, transcriptPath } from "./common.mjs";

const { Client } = await load("@modelcontextprotocol/client");
const { StdioClientTransport } = await load("@modelcontextprotocol/client/stdio");

const ROOT = mkdtempSync(join(tmpdir(), "patchdiff-files-"));
const KEY = join(mkdtempSync(join(tmpdir(), "patchdiff-files-key-")), "workspace.key");
const skip = TRANSPORT === "http" ? "the files profile serves stdio only" : false;

async function withClient(fn) {
  const log = transcriptPath("files");
  const [command, ...args] = recordedServer(log);
  const env = { ...SERVER_ENV, PATCHDIFF_MCP_PROFILE: "files", PATCHDIFF_WORKSPACE_ROOT: ROOT, PATCHDIFF_WORKSPACE_KEY_FILE: KEY };
  const transport = new StdioClientTransport({ command, args, env, stderr: "ignore" });
  const client = new Client({ name: "patchdiff-files-tests", version: "1" }, { versionNegotiation: { mode: "legacy" } });
  await client.connect(transport);
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

// A fresh file of the task (a path relative to the root, as absolute, as the reference server takes).
let files = 0;
function task(name, bytes) {
  files += 1;
  const dir = join(ROOT, `t${files}`);
  mkdirSync(dir, { recursive: true });
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
}
const disk = (path) => readFileSync(path);
const text = (r) => r.content[0].text;

async function edit(client, path, edits, extra = {}) {
  return client.callTool({ name: "edit_file", arguments: { path, edits, ...extra } });
}

test("files: the three tools have the reference server's names and argument shapes", { skip }, async () => {
  await withClient(async (client) => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name), ["read_file", "edit_file", "write_file"]);
    const byName = Object.fromEntries(tools.map((t) => [t.name, t.inputSchema]));
    assert.deepEqual(Object.keys(byName.read_file.properties), ["path", "head", "tail"]);
    assert.deepEqual(byName.read_file.required, ["path"]);
    assert.deepEqual(Object.keys(byName.edit_file.properties), ["path", "edits", "dryRun"]);
    assert.deepEqual(byName.edit_file.required, ["path", "edits"]);
    assert.deepEqual(byName.edit_file.properties.edits.items.required, ["oldText", "newText"]);
    assert.deepEqual(Object.keys(byName.write_file.properties), ["path", "content"]);
    assert.deepEqual(byName.write_file.required, ["path", "content"]);
  });
});

test("files: real-world edit tasks, the bytes on disk checked after each", { skip }, async () => {
  await withClient(async (client) => {
    // Unique: one call, one edit; the answer is the reference server's fenced git-style diff.
    const py = task("app.py", "import os\n\n\ndef load(path):\n    with open(path) as f:\n        return f.read()\n\n\ndef main():\n    print(load('config.toml'))\n");
    let r = await edit(client, py, [{ oldText: "def load(path):", newText: "def load(path, encoding='utf-8'):" }]);
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /^```diff\nIndex: .*app\.py\n={67}\n--- .*app\.py\toriginal\n\+\+\+ .*app\.py\tmodified\n@@ -1,8 \+1,8 @@\n/);
    assert.match(text(r), /\n-def load\(path\):\n\+def load\(path, encoding='utf-8'\):\n/);
    assert.equal(r.structuredContent.content, text(r));
    assert.equal(r.structuredContent.status, "accepted");
    assert.equal(disk(py).toString(), "import os\n\n\ndef load(path, encoding='utf-8'):\n    with open(path) as f:\n        return f.read()\n\n\ndef main():\n    print(load('config.toml'))\n");

    // Ambiguous: refused with both candidates, never the first match silently; nothing written.
    const conf = task("settings.ini", "[db]\ntimeout = 30\n\n[http]\ntimeout = 30\n");
    r = await edit(client, conf, [{ oldText: "timeout = 30", newText: "timeout = 60" }]);
    assert.equal(r.isError, true);
    assert.match(text(r), /matches 2 places/);
    assert.equal(r.structuredContent.failure_reason, "match_ambiguous");
    assert.equal(r.structuredContent.diagnostic.exact_candidates.candidates.length, 2);
    assert.ok(r.structuredContent.pdcp_log_id, "the attempt is logged");
    assert.equal(disk(conf).toString(), "[db]\ntimeout = 30\n\n[http]\ntimeout = 30\n");
    r = await edit(client, conf, [{ oldText: "[http]\ntimeout = 30", newText: "[http]\ntimeout = 60" }]);
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(conf).toString(), "[db]\ntimeout = 30\n\n[http]\ntimeout = 60\n");

    // Whitespace drift: oldText indented differently is refused with the near miss, not re-indented.
    const js = task("server.js", "function start() {\n    const port = 8080;\n    listen(port);\n}\n");
    r = await edit(client, js, [{ oldText: "  const port = 8080;\n  listen(port);", newText: "  const port = 9090;\n  listen(port);" }]);
    assert.equal(r.isError, true);
    assert.match(text(r), /Could not find exact match/);
    assert.match(text(r), /Near misses/);
    assert.ok(r.structuredContent.near_misses.whitespace_candidates.candidates.length >= 1);
    assert.equal(disk(js).toString(), "function start() {\n    const port = 8080;\n    listen(port);\n}\n");

    // CRLF: kept byte for byte; oldText may use LF or CRLF.
    const bat = task("build.cmd", "@echo off\r\nset MODE=debug\r\ncall make.cmd %MODE%\r\n");
    r = await edit(client, bat, [{ oldText: "set MODE=debug\n", newText: "set MODE=release\n" }]);
    assert.equal(r.isError, false, text(r));
    assert.deepEqual(disk(bat), Buffer.from("@echo off\r\nset MODE=release\r\ncall make.cmd %MODE%\r\n"));
    r = await edit(client, bat, [{ oldText: "call make.cmd %MODE%\r\n", newText: "call make.cmd %MODE% /v\r\n" }]);
    assert.equal(r.isError, false, text(r));
    assert.deepEqual(disk(bat), Buffer.from("@echo off\r\nset MODE=release\r\ncall make.cmd %MODE% /v\r\n"));

    // Stale: the file changed on disk since it was last read; refused (and logged) until read again.
    const md = task("NOTES.md", "# Notes\n\n- first\n");
    r = await client.callTool({ name: "read_file", arguments: { path: md } });
    assert.equal(text(r), "# Notes\n\n- first\n");
    writeFileSync(md, "# Notes\n\n- first\n- added by a human\n");
    r = await edit(client, md, [{ oldText: "- first\n", newText: "- first (edited)\n" }]);
    assert.equal(r.isError, true);
    assert.match(text(r), /changed on disk since it was last read/);
    assert.equal(r.structuredContent.failure_reason, "target_hash_mismatch");
    assert.equal(disk(md).toString(), "# Notes\n\n- first\n- added by a human\n");
    r = await client.callTool({ name: "read_file", arguments: { path: md } });
    assert.equal(text(r), "# Notes\n\n- first\n- added by a human\n");
    r = await edit(client, md, [{ oldText: "- first\n", newText: "- first (edited)\n" }]);
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(md).toString(), "# Notes\n\n- first (edited)\n- added by a human\n");

    // Three edits, the second failing: none is applied; then all three together.
    const rs = task("lib.rs", "pub fn a() -> u32 { 1 }\npub fn b() -> u32 { 2 }\npub fn c() -> u32 { 3 }\n");
    const three = (second) => [
      { oldText: "fn a() -> u32 { 1 }", newText: "fn a() -> u64 { 1 }" },
      { oldText: second, newText: "fn b() -> u64 { 2 }" },
      { oldText: "fn c() -> u32 { 3 }", newText: "fn c() -> u64 { 3 }" },
    ];
    r = await edit(client, rs, three("fn b() -> i32 { 2 }"));
    assert.equal(r.isError, true);
    assert.match(text(r), /edit 2/);
    assert.equal(r.structuredContent.failed_change_id, "chg_002");
    assert.equal(disk(rs).toString(), "pub fn a() -> u32 { 1 }\npub fn b() -> u32 { 2 }\npub fn c() -> u32 { 3 }\n");
    r = await edit(client, rs, three("fn b() -> u32 { 2 }"));
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(rs).toString(), "pub fn a() -> u64 { 1 }\npub fn b() -> u64 { 2 }\npub fn c() -> u64 { 3 }\n");

    // Unicode: astral characters, combining marks and CJK around the edit.
    const uni = task("greeting.txt", "😀 café (cafe\u0301) — 你好，世界\nŻółć 🇵🇱\n");
    r = await edit(client, uni, [{ oldText: "你好，世界", newText: "こんにちは、世界 🌏" }]);
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(uni).toString(), "😀 café (cafe\u0301) — こんにちは、世界 🌏\nŻółć 🇵🇱\n");

    // A 1 MiB file: one edit near the end; everything else byte for byte.
    let big = "";
    for (let i = 0; big.length < 1024 * 1024; i += 1) big += `line ${String(i).padStart(6, "0")}: ${"x".repeat(48)}\n`;
    const bigPath = task("big.log", big);
    r = await edit(client, bigPath, [{ oldText: "line 016900: ", newText: "LINE 016900: " }]);
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(bigPath).toString(), big.replace("line 016900: ", "LINE 016900: "));
    assert.ok(text(r).length < 2000, "the diff shows the hunk, not the file");

    // dryRun: the diff, nothing written.
    r = await edit(client, py, [{ oldText: "import os\n", newText: "import os\nimport sys\n" }], { dryRun: true });
    assert.equal(r.isError, false, text(r));
    assert.match(text(r), /\n\+import sys\n/);
    assert.equal(r.structuredContent.status, "preview");
    assert.ok(!disk(py).toString().includes("import sys"));
    // dryRun of more edits than a preview's 32 change facts: still the diff (helper-60).
    const many = task("many.txt", Array.from({ length: 40 }, (_, i) => `row ${i};\n`).join(""));
    r = await edit(client, many, Array.from({ length: 40 }, (_, i) => ({ oldText: `row ${i};`, newText: `ROW ${i};` })), { dryRun: true });
    assert.equal(r.isError, false, text(r));
    assert.equal((text(r).match(/^\+ROW \d+;$/gm) || []).length, 40, text(r));
    assert.ok(!disk(many).toString().includes("ROW"));

    // Non-UTF-8: refused clearly, the bytes untouched.
    const latin1 = task("legacy.txt", Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    r = await edit(client, latin1, [{ oldText: "caf", newText: "CAF" }]);
    assert.equal(r.isError, true);
    assert.match(text(r), /not UTF-8/);
    assert.deepEqual(disk(latin1), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));

    // write_file: a new file (in a new directory) and an overwrite, byte for byte, CRLF kept.
    const created = join(ROOT, "new", "dir", "hello.txt");
    r = await client.callTool({ name: "write_file", arguments: { path: created, content: "hello\r\nworld\r\n" } });
    assert.equal(r.isError, false, text(r));
    assert.equal(text(r), `Successfully wrote to ${created}`);
    assert.deepEqual(disk(created), Buffer.from("hello\r\nworld\r\n"));
    r = await client.callTool({ name: "write_file", arguments: { path: created, content: "bye\n" } });
    assert.equal(r.isError, false, text(r));
    assert.deepEqual(disk(created), Buffer.from("bye\n"));
    r = await client.callTool({ name: "read_file", arguments: { path: created, head: 1 } });
    assert.equal(text(r), "bye");
  });
});

test("files: a retried edit_file is applied once, in the same connection and from a new one", { skip }, async () => {
  // "version = 1" still matches after the edit ("version = 10"): a server that applied the
  // resend again would write "version = 100".
  const toml = task("Cargo.toml", "[package]\nname = \"demo\"\nversion = 1\n");
  const call = [{ oldText: "version = 1", newText: "version = 10" }];
  await withClient(async (client) => {
    let r = await edit(client, toml, call);
    assert.equal(r.isError, false, text(r));
    assert.equal(disk(toml).toString(), "[package]\nname = \"demo\"\nversion = 10\n");
    r = await edit(client, toml, call);
    assert.equal(r.isError, false, text(r));
    assert.equal(r.structuredContent.status, "deduplicated");
    assert.match(text(r), /already applied/);
    assert.equal(disk(toml).toString(), "[package]\nname = \"demo\"\nversion = 10\n");
  });
  // A host that lost the answer and restarted the server resends it: found in the attempt log.
  await withClient(async (client) => {
    const r = await edit(client, toml, call);
    assert.equal(r.isError, false, text(r));
    assert.equal(r.structuredContent.status, "deduplicated");
    assert.equal(disk(toml).toString(), "[package]\nname = \"demo\"\nversion = 10\n");
  });
  // After a read, the same edit is a new request (the agent saw the file as it is).
  await withClient(async (client) => {
    await client.callTool({ name: "read_file", arguments: { path: toml } });
    const r = await edit(client, toml, call);
    assert.equal(r.isError, false, text(r));
    assert.equal(r.structuredContent.status, "accepted");
    assert.equal(disk(toml).toString(), "[package]\nname = \"demo\"\nversion = 100\n");
  });
});
