//! A real `patchdiff-mcp` process and its pipes, shared by the stdio suites. Stdout lines are
//! read on a thread so that a hung server fails a test instead of hanging it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

/// The binary under test: `PATCHDIFF_MCP_BIN`, else the workspace's debug build.
pub fn mcp_bin() -> String {
    std::env::var("PATCHDIFF_MCP_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/patchdiff-mcp").to_owned()
    })
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
