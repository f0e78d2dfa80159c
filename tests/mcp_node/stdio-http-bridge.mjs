#!/usr/bin/env node
// `stdio-http-bridge.mjs PATCHDIFF_MCP_BIN`: a throwaway HTTP face for patchdiff-mcp's stdio
// transport, so that the MCP conformance suite (which only speaks HTTP) can judge the
// 2026-07-28 era over stdio before the real endpoint (`patchdiff-mcp serve`) exists.
//
// Each POST /mcp body goes to a fresh `patchdiff-mcp` process as one stdio line, and the first
// line it answers comes back as application/json (the era is stateless: one request per
// connection is a faithful mapping). HTTP status from the JSON-RPC error code as Streamable
// HTTP 2026-07-28 "Error Handling" maps it: -32601 -> 404, other request errors -> 400.
// Notifications get 202. Nothing else of Streamable HTTP is here (no header validation, no
// SSE, no sessions, no Origin checks): conformance checks of those judge this bridge, not
// patchdiff-mcp. Listens on 127.0.0.1, an ephemeral port printed as the first stdout line.
import http from "node:http";
import { spawn } from "node:child_process";

const [bin] = process.argv.slice(2);
const REQUEST_ERRORS = new Set([-32700, -32600, -32602, -32020, -32021, -32022]);

function viaStdio(body) {
  return new Promise((resolve) => {
    const child = spawn(bin, [], { stdio: ["pipe", "pipe", "ignore"], env: process.env });
    let out = "";
    child.stdout.on("data", (c) => {
      out += c.toString("utf8");
      if (out.includes("\n")) child.stdin.end();
    });
    child.on("close", () => resolve(out.split("\n")[0]));
    child.stdin.write(body.replace(/\n/g, " ") + "\n");
    let parsed = null;
    try {
      parsed = JSON.parse(body);
    } catch {}
    if (!parsed || !("id" in parsed)) child.stdin.end();
  });
}

const server = http.createServer(async (req, res) => {
  if (req.method !== "POST") {
    res.writeHead(405, { allow: "POST" }).end();
    return;
  }
  let body = "";
  for await (const c of req) body += c.toString("utf8");
  const line = await viaStdio(body);
  if (line === "") {
    res.writeHead(202).end();
    return;
  }
  let status = 200;
  try {
    const msg = JSON.parse(line);
    if (msg.error) status = msg.error.code === -32601 ? 404 : REQUEST_ERRORS.has(msg.error.code) ? 400 : 200;
  } catch {}
  res.writeHead(status, { "content-type": "application/json" }).end(line);
});
server.listen(0, "127.0.0.1", () => console.log(server.address().port));
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
