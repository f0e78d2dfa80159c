//! Helpers for `patchdiff-mcp serve` (Streamable HTTP, docs/http.md) in tests.

use std::io::{BufRead, BufReader};
use std::process::ChildStderr;

/// The endpoint's URL, from the first line `patchdiff-mcp serve` writes on stderr (with
/// `--listen 127.0.0.1:0`, the port the system chose).
pub fn listening_url(stderr: &mut BufReader<ChildStderr>) -> String {
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix("patchdiff-mcp: listening on ")
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .to_owned()
}

/// A running `patchdiff-mcp serve --listen 127.0.0.1:0` with a token file of its own; killed,
/// and its token file removed, when dropped.
pub struct Served {
    pub child: std::process::Child,
    pub url: String,
    dir: std::path::PathBuf,
    /// Kept open: the endpoint logs every call to stderr.
    _stderr: BufReader<ChildStderr>,
}

impl Served {
    /// `profile` on `database_url`, with `tokens` (token, role) and the extra `args`.
    pub fn start(
        profile: &str,
        tokens: &[(&str, &str)],
        args: &[&str],
        database_url: &str,
    ) -> Served {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(crate::roles::unique("patchdiff-served"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens");
        let text: String = tokens.iter().map(|(t, r)| format!("{t} {r}\n")).collect();
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut child = std::process::Command::new(crate::stdio::mcp_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(&file)
            .args(args)
            .env("PATCHDIFF_DATABASE_URL", database_url)
            .env("PATCHDIFF_MCP_PROFILE", profile)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("patchdiff-mcp serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let url = listening_url(&mut stderr);
        Served {
            child,
            url,
            dir,
            _stderr: stderr,
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends a prepared request with `body`: its status and its body as JSON (`Null` when it is not
/// JSON), an error status included.
pub fn send(request: ureq::Request, body: &str) -> (u16, serde_json::Value) {
    let resp = match request.send_string(body) {
        Ok(resp) => resp,
        Err(ureq::Error::Status(_, resp)) => resp,
        Err(e) => panic!("{e}"),
    };
    let status = resp.status();
    let text = resp.into_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// A 2026-07-28 `subscriptions/listen` POST to `patchdiff-mcp serve` read as it streams (issue 19
/// item 2, docs/http.md "Subscriptions"): the SSE events' JSON-RPC messages arrive on a channel
/// as the server writes them; [`ListenStream::close`] (or dropping it) closes the connection,
/// which is how a client cancels on this transport.
pub struct ListenStream {
    socket: std::net::TcpStream,
    /// Every JSON-RPC message of the stream, in order, stamped when it was read; closed when the
    /// server ends the response.
    pub events: std::sync::mpsc::Receiver<(std::time::Instant, serde_json::Value)>,
    /// The response's headers, names in lowercase.
    pub headers: Vec<(String, String)>,
    /// The SSE comment lines (keep-alives) read so far.
    pub comments: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// What a listen POST sends besides its body: the token, the `Accept` header (or none).
pub struct ListenRequest<'a> {
    pub url: &'a str,
    pub token: &'a str,
    pub accept: Option<&'a str>,
    /// The request's JSON-RPC id.
    pub id: serde_json::Value,
    pub resource_subscriptions: &'a [String],
}

impl ListenRequest<'_> {
    /// Posts it: the open stream on 200, else the status and the JSON body of the refusal.
    pub fn open(&self) -> Result<ListenStream, (u16, serde_json::Value)> {
        use std::io::{Read, Write};
        let rest = self.url.strip_prefix("http://").expect("an http:// URL");
        let (host, path) = rest.split_once('/').expect("a URL with a path");
        let body = serde_json::json!({"jsonrpc": "2.0", "id": self.id, "method": "subscriptions/listen",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {},
                                 "io.modelcontextprotocol/clientInfo": {"name": "listen-test", "version": "1"}},
                       "notifications": {"resourceSubscriptions": self.resource_subscriptions}}})
        .to_string();
        let mut socket = std::net::TcpStream::connect(host).expect("connecting to the endpoint");
        let accept = self
            .accept
            .map(|a| format!("Accept: {a}\r\n"))
            .unwrap_or_default();
        write!(
            socket,
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\n{accept}MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
            self.token,
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::new(socket.try_clone().unwrap());
        let mut status_line = String::new();
        reader.read_line(&mut status_line).unwrap();
        let status: u16 = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no HTTP status line: {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        if status != 200 {
            let length: usize = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .and_then(|(_, v)| v.parse().ok())
                .unwrap_or(0);
            let mut text = vec![0; length];
            reader.read_exact(&mut text).unwrap();
            return Err((
                status,
                serde_json::from_slice(&text).unwrap_or(serde_json::Value::Null),
            ));
        }
        let (tx, events) = std::sync::mpsc::channel();
        let comments = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = comments.clone();
        std::thread::spawn(move || {
            // Chunk-size lines of the chunked encoding are not `data:` lines; each event is
            // written as one chunk, so no `data:` line is split.
            for line in reader.lines() {
                let Ok(line) = line else { return };
                if line.starts_with(':') {
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                if let Some(data) = line.strip_prefix("data: ") {
                    let v = serde_json::from_str(data).expect("an SSE data line of JSON");
                    if tx.send((std::time::Instant::now(), v)).is_err() {
                        return;
                    }
                }
            }
        });
        Ok(ListenStream {
            socket,
            events,
            headers,
            comments,
        })
    }
}

impl ListenStream {
    /// The next message within `within`.
    pub fn next(&self, within: std::time::Duration) -> Option<serde_json::Value> {
        self.next_stamped(within).map(|(_, v)| v)
    }

    /// The next message within `within`, and when it was read.
    pub fn next_stamped(
        &self,
        within: std::time::Duration,
    ) -> Option<(std::time::Instant, serde_json::Value)> {
        self.events.recv_timeout(within).ok()
    }

    /// Closes the connection.
    pub fn close(self) {}
}

impl Drop for ListenStream {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}
