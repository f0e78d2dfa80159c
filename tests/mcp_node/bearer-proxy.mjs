#!/usr/bin/env node
// `bearer-proxy.mjs UPSTREAM_URL TOKEN_FILE [LOG]`: listens on 127.0.0.1 (an ephemeral port, printed
// as the first line of stdout) and forwards every request to UPSTREAM_URL's origin unchanged —
// method, path, headers (Host and Origin included, so the server's own checks see what the
// client sent) and a streamed body both ways (SSE too) — adding `Authorization: Bearer <token>`
// when the request carries no Authorization of its own.
//
// Why: the MCP conformance suite's server mode takes only a URL and has no way to send a bearer
// token (scripts/conformance.sh); patchdiff-mcp's HTTP endpoint requires one. The token is read
// from a file so that it never appears in a process list.
//
// With LOG, it also appends each JSON-RPC message to LOG as recorder.mjs does for stdio
// ({"dir": "sent" | "got", "msg": ...}: request bodies, and responses whether JSON or the
// `data:` lines of an SSE stream), so the tests read an HTTP conversation as they read a stdio one.
import http from "node:http";
import { appendFileSync, readFileSync } from "node:fs";

const [upstreamUrl, tokenFile, log] = process.argv.slice(2);
if (!upstreamUrl || !tokenFile) {
  console.error("usage: bearer-proxy.mjs UPSTREAM_URL TOKEN_FILE");
  process.exit(2);
}
const upstream = new URL(upstreamUrl);
const token = readFileSync(tokenFile, "utf8").trim();

function record(dir, text) {
  if (!log || text.trim() === "") return;
  for (const value of [].concat(JSON.parse(text))) appendFileSync(log, JSON.stringify({ dir, msg: value }) + "\n");
}

// Taps a body stream: JSON as a whole at its end, SSE event by event.
function tap(stream, dir, contentType) {
  if (!log) return;
  let pending = "";
  const sse = (contentType || "").includes("text/event-stream");
  stream.on("data", (c) => {
    pending += c.toString("utf8");
    if (!sse) return;
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const event = pending.slice(0, end);
      pending = pending.slice(end + 2);
      const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      try {
        record(dir, data);
      } catch {}
    }
  });
  stream.on("end", () => {
    if (sse) return;
    try {
      record(dir, pending);
    } catch {}
  });
}

const server = http.createServer((req, res) => {
  const headers = { ...req.headers };
  if (!headers.authorization) headers.authorization = `Bearer ${token}`;
  const out = http.request(
    { host: upstream.hostname, port: upstream.port || 80, method: req.method, path: req.url, headers },
    (up) => {
      res.writeHead(up.statusCode, up.statusMessage, up.rawHeaders);
      res.flushHeaders();
      tap(up, "got", up.headers["content-type"]);
      up.pipe(res);
    },
  );
  out.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`bearer-proxy: ${e.message}\n`);
  });
  tap(req, "sent", req.headers["content-type"]);
  req.pipe(out);
  res.on("close", () => out.destroy());
});
server.listen(0, "127.0.0.1", () => {
  console.log(server.address().port);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
