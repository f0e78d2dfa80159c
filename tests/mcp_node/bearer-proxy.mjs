#!/usr/bin/env node
// `bearer-proxy.mjs UPSTREAM_URL TOKEN_FILE`: listens on 127.0.0.1 (an ephemeral port, printed
// as the first line of stdout) and forwards every request to UPSTREAM_URL's origin unchanged —
// method, path, headers (Host and Origin included, so the server's own checks see what the
// client sent) and a streamed body both ways (SSE too) — adding `Authorization: Bearer <token>`
// when the request carries no Authorization of its own.
//
// Why: the MCP conformance suite's server mode takes only a URL and has no way to send a bearer
// token (scripts/conformance.sh); patchdiff-mcp's HTTP endpoint requires one. The token is read
// from a file so that it never appears in a process list.
import http from "node:http";
import { readFileSync } from "node:fs";

const [upstreamUrl, tokenFile] = process.argv.slice(2);
if (!upstreamUrl || !tokenFile) {
  console.error("usage: bearer-proxy.mjs UPSTREAM_URL TOKEN_FILE");
  process.exit(2);
}
const upstream = new URL(upstreamUrl);
const token = readFileSync(tokenFile, "utf8").trim();

const server = http.createServer((req, res) => {
  const headers = { ...req.headers };
  if (!headers.authorization) headers.authorization = `Bearer ${token}`;
  const out = http.request(
    { host: upstream.hostname, port: upstream.port || 80, method: req.method, path: req.url, headers },
    (up) => {
      res.writeHead(up.statusCode, up.statusMessage, up.rawHeaders);
      res.flushHeaders();
      up.pipe(res);
    },
  );
  out.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`bearer-proxy: ${e.message}\n`);
  });
  req.pipe(out);
  res.on("close", () => out.destroy());
});
server.listen(0, "127.0.0.1", () => {
  console.log(server.address().port);
});
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => server.close(() => process.exit(0)));
