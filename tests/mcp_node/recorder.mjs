#!/usr/bin/env node
// A transparent stdio pass-through that records an MCP conversation: `recorder.mjs LOG CMD ARGS...`
// runs CMD with its stdin and stdout piped through, and appends every newline-delimited message
// to LOG as one JSON line {"dir": "sent" | "got", "msg": <the message>}. The tests use it to see
// which era a client chose (server/discover or initialize first) and what the server answered.
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";

const [log, cmd, ...args] = process.argv.slice(2);
const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });

function tap(dir) {
  let pending = "";
  return (chunk) => {
    pending += chunk.toString("utf8");
    let nl;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, nl);
      pending = pending.slice(nl + 1);
      if (line.trim() === "") continue;
      let msg;
      try {
        msg = JSON.parse(line);
      } catch {
        msg = { unparsed: line };
      }
      appendFileSync(log, JSON.stringify({ dir, msg }) + "\n");
    }
  };
}

const sent = tap("sent");
const got = tap("got");
process.stdin.on("data", (c) => {
  sent(c);
  child.stdin.write(c);
});
process.stdin.on("end", () => child.stdin.end());
child.stdin.on("error", () => {});
child.stdout.on("data", (c) => {
  got(c);
  process.stdout.write(c);
});
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(sig, () => child.kill(sig));
}
child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
