//! A real `patchdiff-mcp` process and its pipes, shared by the stdio suites. Stdout lines are
//! read on a thread so that a hung server fails a test instead of hanging it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The binary under test: `PATCHDIFF_MCP_BIN`, else the workspace's debug build.
pub fn mcp_bin() -> String {
    std::env::var("PATCHDIFF_MCP_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/patchdiff-mcp").to_owned()
    })
}

/// A `patchdiff-mcp` whose stdout nothing reads unless the test does (unlike [`Pipes`]): for
/// tests that stop reading, or close an end, on purpose. `env` comes on top of the inherited
/// environment; stderr is discarded.
pub fn spawn_unread(env: &[(&str, &str)]) -> (Child, ChildStdin, BufReader<ChildStdout>) {
    let mut cmd = Command::new(mcp_bin());
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .expect("spawning patchdiff-mcp (build it first: cargo build -p patchdiff-mcp)");
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdin, stdout)
}

pub struct Pipes {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<Vec<u8>>,
}

impl Pipes {
    /// Spawns `cmd` with piped stdin/stdout (stderr discarded unless `cmd` set it).
    pub fn spawn(mut cmd: Command) -> Pipes {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawning patchdiff-mcp (build it first: cargo build -p patchdiff-mcp)");
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            loop {
                let mut line = Vec::new();
                match out.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Pipes {
            child,
            stdin,
            lines,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stdin
            .write_all(bytes)
            .expect("writing to patchdiff-mcp");
        self.stdin.flush().expect("flushing patchdiff-mcp's stdin");
    }

    /// The next stdout line, newline included.
    pub fn line(&self, timeout: Duration) -> Result<Vec<u8>, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(l) => Ok(l),
            Err(RecvTimeoutError::Timeout) => Err("no reply within the timeout".into()),
            Err(RecvTimeoutError::Disconnected) => Err("stdout closed".into()),
        }
    }

    /// `None` while the process runs.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>, String> {
        self.child
            .try_wait()
            .map_err(|e| format!("waiting on patchdiff-mcp: {e}"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        self.child.kill().expect("killing patchdiff-mcp");
        self.child.wait().expect("reaping patchdiff-mcp");
    }
}

impl Drop for Pipes {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A JSON-RPC session with a running `patchdiff-mcp`: requests in order, one reply each.
pub struct Session {
    pub pipes: Pipes,
    next_id: i64,
    timeout: Duration,
}

impl Session {
    /// Starts the server on `dsn` with extra environment, and completes the handshake on
    /// `revision`.
    pub fn start(dsn: &str, env: &[(&str, &str)], revision: &str) -> Session {
        Session::start_logging(dsn, env, revision, Stdio::null())
    }

    /// [`Session::start`], its stderr sent to `stderr`, with the default log filter (the
    /// test's own `PATCHDIFF_LOG` is not passed on).
    pub fn start_logging(
        dsn: &str,
        env: &[(&str, &str)],
        revision: &str,
        stderr: impl Into<Stdio>,
    ) -> Session {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn)
            .env_remove("PATCHDIFF_LOG")
            .stderr(stderr);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut s = Session {
            pipes: Pipes::spawn(cmd),
            next_id: 1,
            timeout: Duration::from_secs(30),
        };
        let r = s.request(
            "initialize",
            serde_json::json!({"protocolVersion": revision, "capabilities": {},
                               "clientInfo": {"name": "patchdiff-tests", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], revision, "{r}");
        s.pipes
            .send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        s
    }

    /// One request; the reply, checked to be one ASCII line answering this id.
    pub fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        let id = self.next_id;
        self.next_id += 1;
        let line =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.pipes.send(format!("{line}\n").as_bytes());
        let reply = self
            .pipes
            .line(self.timeout)
            .expect("no reply from patchdiff-mcp");
        assert!(reply.is_ascii(), "stdout line is not ASCII");
        let v: serde_json::Value = serde_json::from_slice(&reply).expect("reply is not JSON");
        assert_eq!(v["id"], id, "{v}");
        v
    }

    /// tools/call: (the tool's JSON from the text channel, the whole result).
    pub fn call(
        &mut self,
        name: &str,
        arguments: serde_json::Value,
    ) -> (serde_json::Value, serde_json::Value) {
        let r = self.request(
            "tools/call",
            serde_json::json!({"name": name, "arguments": arguments}),
        );
        let result = r["result"].clone();
        assert!(result.is_object(), "{r}");
        let text = result["content"][0]["text"].as_str().expect("text content");
        (
            serde_json::from_str(text).expect("tool text is JSON"),
            result,
        )
    }
}
