//! The real `patchdiff-mcp` process over real pipes against a real PostgreSQL.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required, a superuser connection string to a database
//! with pg_patchdiff) and `PATCHDIFF_MCP_BIN` (the built server; default target/debug).

use patchdiff_engine::wire::ascii_len;
use patchdiff_tests::stdio::{Pipes, mcp_bin};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const REPLY_TIMEOUT: Duration = Duration::from_secs(20);

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

/// A running server with its pipes.
struct Mcp {
    pipes: Pipes,
    next_id: i64,
}

impl Mcp {
    fn start(env: &[(&str, &str)]) -> Mcp {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Mcp::spawn(cmd)
    }

    fn spawn(cmd: Command) -> Mcp {
        Mcp {
            pipes: Pipes::spawn(cmd),
            next_id: 1,
        }
    }

    fn send_raw(&mut self, bytes: &[u8]) {
        self.pipes.send(bytes);
    }

    /// The next stdout line, checked to be pure ASCII and one JSON value.
    fn reply(&self) -> Value {
        let line = self
            .pipes
            .line(REPLY_TIMEOUT)
            .expect("no reply from patchdiff-mcp");
        assert!(
            line.is_ascii(),
            "stdout line is not ASCII: {}",
            String::from_utf8_lossy(&line)
        );
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        serde_json::from_slice(&line).expect("stdout line is not JSON")
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send_raw(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            )
            .as_bytes(),
        );
        let r = self.reply();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn initialize(&mut self, revision: Option<&str>) -> Value {
        let mut params =
            json!({"capabilities": {}, "clientInfo": {"name": "stdio-test", "version": "1"}});
        if let Some(r) = revision {
            params["protocolVersion"] = json!(r);
        }
        let r = self.request("initialize", params);
        self.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        r
    }

    /// tools/call; returns (the parsed tool text, the whole result).
    fn call(&mut self, name: &str, arguments: Value) -> (Value, Value) {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}));
        let result = r["result"].clone();
        assert!(result.is_object(), "{r}");
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        (text, result)
    }
}

fn initialize_target(m: &mut Mcp, content: &str) -> String {
    let (t, _) = m.call(
        "patchdiff_initialize_target",
        json!({"filename": "doc.md", "content": content}),
    );
    assert_eq!(t["status"], "ok", "{t}");
    t["target_file_id"].as_str().unwrap().to_owned()
}

/// Contract "MCP negotiation and startup": each supported revision is echoed, an unsupported
/// one is offered 2025-11-25, an omitted one gets 2024-11-05; only the newer revisions declare
/// outputSchema and annotations and return structuredContent.
#[test]
fn handshake_per_revision_and_declarations() {
    for (asked, got) in [
        (Some("2024-11-05"), "2024-11-05"),
        (Some("2025-06-18"), "2025-06-18"),
        (Some("2025-11-25"), "2025-11-25"),
        (Some("1999-01-01"), "2025-11-25"),
        (None, "2024-11-05"),
    ] {
        let mut m = Mcp::start(&[]);
        let r = m.initialize(asked);
        assert_eq!(r["result"]["protocolVersion"], got, "{asked:?}");
        assert_eq!(r["result"]["serverInfo"]["name"], "patchdiff-mcp");
        let tools = m.request("tools/list", json!({}))["result"]["tools"].clone();
        let modern = got != "2024-11-05";
        for t in tools.as_array().unwrap() {
            assert_eq!(t["inputSchema"]["type"], "object");
            assert_eq!(
                t.get("outputSchema").is_some(),
                modern,
                "{got} {}",
                t["name"]
            );
            assert_eq!(t.get("annotations").is_some(), modern);
        }
        let target = initialize_target(&mut m, "x\n");
        let (_, result) = m.call("patchdiff_get_target", json!({"target_file_id": target}));
        assert_eq!(result.get("structuredContent").is_some(), modern, "{got}");
        if modern {
            let text: Value =
                serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(result["structuredContent"], text);
        }
        // The connection keeps its revision: a second initialize is refused.
        let again = m.request("initialize", json!({"protocolVersion": "2025-06-18"}));
        assert_eq!(again["error"]["code"], -32600);
    }
    // An invalid initialize is rejected, and the connection still serves a valid one.
    let mut m = Mcp::start(&[]);
    let bad = m.request("initialize", json!({"protocolVersion": 20250618}));
    assert_eq!(bad["error"]["code"], -32602);
    assert_eq!(
        m.initialize(Some("2025-06-18"))["result"]["protocolVersion"],
        "2025-06-18"
    );
}

/// The server reads and writes pipes on its own thread (docs/benchmarks.md, "The stdio front
/// end's own time"); anything else keeps blocking stdio. Every other test of this file talks over
/// two pipes. Here: a request file on stdin with a file on stdout, and the same requests with
/// stdout and stderr one pipe (`2>&1`, whose logs must stay blocking writes). Each answers the
/// handshake and `tools/list`, then exits at the end of its input.
#[test]
fn stdio_that_is_not_two_pipes_is_served_too() {
    let dir = std::env::temp_dir().join(format!("pd-stdio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let requests = dir.join("requests.jsonl");
    std::fs::write(
        &requests,
        concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#,
            "\n"
        ),
    )
    .unwrap();
    let check = |out: &str, how: &str| {
        let replies: Vec<Value> = out
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{how}: {e}: {l}")))
            .collect();
        assert_eq!(replies.len(), 2, "{how}: {out}");
        assert_eq!(
            replies[0]["result"]["protocolVersion"], "2025-06-18",
            "{how}"
        );
        let tools = replies[1]["result"]["tools"].as_array();
        assert!(
            tools.is_some_and(|t| !t.is_empty()),
            "{how}: {}",
            replies[1]
        );
    };
    let command = || {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn())
            .stdin(std::fs::File::open(&requests).unwrap());
        cmd
    };

    let written = dir.join("replies.jsonl");
    let status = command()
        .stdout(std::fs::File::create(&written).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "files: {status}");
    check(&std::fs::read_to_string(&written).unwrap(), "files");

    let (mut reader, writer) = std::io::pipe().unwrap();
    let mut child = command()
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut reader, &mut out).unwrap();
    assert!(child.wait().unwrap().success(), "2>&1");
    check(&out, "stdout and stderr one pipe");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Contract "Discovery, argument errors and examples": every stdout line is ASCII, and the
/// parsed tool text carries the literal characters, U+2028/U+2029/U+0085 included.
#[test]
fn lines_are_ascii_and_text_is_literal() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let content = "🌍 中\u{2028}line\u{2029}para\u{85}next\n";
    let target = initialize_target(&mut m, content);
    let (t, result) = m.call("patchdiff_get_target", json!({"target_file_id": target}));
    assert_eq!(t["current_content"], content);
    let raw_text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        raw_text.contains('🌍') && raw_text.contains('中'),
        "tool text must be literal, not escaped"
    );
    // Raw UTF-8 in a request is accepted as well as \u escapes.
    m.send_raw(format!("{{\"jsonrpc\":\"2.0\",\"id\":900,\"method\":\"tools/call\",\"params\":{{\"name\":\"patchdiff_find_occurrences\",\"arguments\":{{\"target_file_id\":\"{target}\",\"text\":\"中\"}}}}}}\n").as_bytes());
    let r = m.reply();
    let found: Value =
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(found["occurrence_count"], 1);
    let (found, _) = m.call(
        "patchdiff_find_occurrences",
        json!({"target_file_id": target, "text": "\u{2028}"}),
    );
    assert_eq!(found["occurrences"][0]["start"], 3);
}

/// Malformed UTF-8 is a -32700 parse error, never repaired, and the process keeps serving;
/// ids may be 0 or strings, a null id is invalid, unknown methods are -32601.
/// docs/profiles.md, "Exit status": a client that stops reading (its end of stdout closed)
/// makes the server exit 1, not 0, since an answer was lost; the end of input alone exits 0.
#[test]
fn a_lost_stdout_is_an_error_exit() {
    use std::io::Write;
    let start = || {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        cmd.spawn().expect("starting patchdiff-mcp")
    };
    let ping = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n";
    let mut clean = start();
    clean.stdin.take().unwrap().write_all(ping).unwrap();
    let out = clean.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "end of input");
    assert!(out.stdout.ends_with(b"\"result\":{}}\n"));

    let mut lost = start();
    drop(lost.stdout.take());
    let mut stdin = lost.stdin.take().unwrap();
    // The write may fail once the server has gone; either way it must not exit 0.
    let _ = stdin.write_all(ping);
    drop(stdin);
    assert_eq!(lost.wait().unwrap().code(), Some(1), "a lost answer");
}

#[test]
fn malformed_input_is_answered_and_serving_continues() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-06-18"));
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\",\"x\":\"\xc3\x28\"}\n");
    let r = m.reply();
    assert_eq!(
        (r["error"]["code"].as_i64(), &r["id"]),
        (Some(-32700), &Value::Null)
    );
    m.send_raw(b"{not json\n");
    assert_eq!(m.reply()["error"]["code"], -32700);
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}\n");
    assert_eq!(m.reply()["error"]["code"], -32600);
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n");
    assert_eq!(m.reply(), json!({"jsonrpc": "2.0", "id": 0, "result": {}}));
    // JSON-RPC 2.0: the response has the same id as the request. Numbers are echoed as read,
    // so only 64-bit integers are taken; `1E2` would come back as `100.0`.
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":18446744073709551615,\"method\":\"ping\"}\n");
    assert_eq!(m.reply()["id"], json!(18446744073709551615u64));
    for id in ["1E2", "-0", "1.5", "18446744073709551616"] {
        m.send_raw(format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\"}}\n").as_bytes());
        let r = m.reply();
        assert_eq!(
            (&r["id"], &r["error"]["code"]),
            (&Value::Null, &json!(-32600)),
            "{id}: {r}"
        );
    }
    // A response sent to the server (it sends no requests) is ignored, never answered: an
    // error under its id would be a second response to one of the client's own ids.
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":77,\"result\":{}}\n");
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":78,\"error\":{\"code\":-1,\"message\":\"x\"}}\n");
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":79,\"method\":\"ping\"}\n");
    assert_eq!(m.reply(), json!({"jsonrpc": "2.0", "id": 79, "result": {}}));
    m.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"s-1\",\"method\":\"server/discover\"}\n");
    let r = m.reply();
    assert_eq!(
        (r["id"].as_str(), r["error"]["code"].as_i64()),
        (Some("s-1"), Some(-32601))
    );
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

/// Unknown and missing argument names never reach SQL: isError with the contract's payload and
/// no structuredContent; a tool outside the profile is refused.
#[test]
fn argument_names_and_profiles_are_enforced() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let (t, result) = m.call(
        "patchdiff_read_target",
        json!({"target_file_id": "11111111-1111-4111-8111-111111111111", "surprise": 1, "also": 2}),
    );
    assert_eq!(result["isError"], true);
    assert!(result.get("structuredContent").is_none());
    assert_eq!(
        t,
        json!({"status": "invalid_argument", "code": "unknown_argument", "tool": "patchdiff_read_target",
               "failure_detail": "unknown argument(s) for patchdiff_read_target: also, surprise", "unknown_arguments": ["also", "surprise"]})
    );
    let (t, result) = m.call(
        "patchdiff_submit_edits",
        json!({"target_file_id": "11111111-1111-4111-8111-111111111111"}),
    );
    assert_eq!(result["isError"], true);
    assert_eq!(
        (&t["code"], &t["missing_arguments"]),
        (&json!("missing_argument"), &json!(["intent", "edits"]))
    );
    // A domain rejection is a normal result, with structuredContent.
    let target = initialize_target(&mut m, "alpha beta alpha\n");
    let (t, result) = m.call("patchdiff_submit_edits", json!({"target_file_id": target, "expected_target_version": 0, "intent": "x", "edits": [{"match": "alpha", "replace": "gamma"}]}));
    assert_eq!(
        (&t["status"], &t["failure_reason"], &result["isError"]),
        (&json!("rejected"), &json!("match_ambiguous"), &json!(false))
    );
    assert_eq!(result["structuredContent"], t);

    let mut editor = Mcp::start(&[("PATCHDIFF_MCP_PROFILE", "editor")]);
    editor.initialize(Some("2025-11-25"));
    let names: Vec<String> = editor.request("tools/list", json!({}))["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !names.contains(&"patchdiff_initialize_target".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"patchdiff_read_target".to_owned()));
    let r = editor.request("tools/call", json!({"name": "patchdiff_initialize_target", "arguments": {"filename": "a", "content": "b"}}));
    assert_eq!(r["error"]["code"], -32602);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not available in profile editor")
    );
}

/// Contract "External response representations" and issue 3: unknown profiles and response
/// modes stop start-up with a clear message.
#[test]
fn bad_configuration_stops_start_up() {
    for (k, v, expect) in [
        (
            "PATCHDIFF_MCP_PROFILE",
            "everything",
            "PATCHDIFF_MCP_PROFILE",
        ),
        (
            "PATCHDIFF_MCP_RESPONSE_MODE",
            "terse",
            "PATCHDIFF_MCP_RESPONSE_MODE",
        ),
    ] {
        let out = Command::new(mcp_bin())
            .env("PATCHDIFF_DATABASE_URL", dsn())
            .env(k, v)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expect), "{err}");
        assert!(out.stdout.is_empty(), "nothing but MCP may go to stdout");
    }
}

/// Contract "Bounded Wire & Context Budgets": tools/list at most 65,536 bytes and its
/// examples at most 8,192, as compact ASCII JSON, on every revision and profile.
#[test]
fn discovery_stays_within_budget() {
    for profile in [
        "full",
        "workspace",
        "editor",
        "observed_workspace",
        "observed_editor",
        "observed_v2",
    ] {
        for revision in ["2024-11-05", "2025-11-25"] {
            // The workspace profiles need a root to start (docs/workspace.md).
            let root = std::env::temp_dir().display().to_string();
            let mut m = Mcp::start(&[
                ("PATCHDIFF_MCP_PROFILE", profile),
                ("PATCHDIFF_WORKSPACE_ROOT", &root),
            ]);
            m.initialize(Some(revision));
            let list = m.request("tools/list", json!({}))["result"].clone();
            let n = ascii_len(&list);
            assert!(n <= 65_536, "{profile} {revision}: {n}");
            let examples: serde_json::Map<String, Value> = list["tools"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|t| {
                    t["inputSchema"]
                        .get("examples")
                        .map(|e| (t["name"].as_str().unwrap().to_owned(), e.clone()))
                })
                .collect();
            assert!(ascii_len(&Value::Object(examples)) <= 8_192);
        }
    }
}

/// A database failure during a call is outcome_unknown, never a claimed rejection; the next
/// call reconnects.
#[test]
fn database_failure_is_outcome_unknown() {
    let url = format!("{} application_name=mcp-stdio-outcome-test", dsn());
    let mut m = Mcp::start(&[("PATCHDIFF_DATABASE_URL", &url)]);
    m.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut m, "abc\n");
    // Hold the target's row lock so that the submission is in flight when its backend dies.
    let mut holder = postgres_admin_for(&target);
    holder(&format!(
        "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
    ));
    let call = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {"name": "patchdiff_submit_edits",
        "arguments": {"target_file_id": target, "expected_target_version": 0, "intent": "x", "edits": [{"match": "abc", "replace": "xyz"}]}}});
    m.send_raw(format!("{call}\n").as_bytes());
    std::thread::sleep(Duration::from_millis(500));
    postgres_admin()(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'mcp-stdio-outcome-test'",
    );
    end_lock_waiters_behind_router(&target);
    let r = m.reply();
    let result = &r["result"];
    let t: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&t["status"], &result["isError"]),
        (&json!("outcome_unknown"), &json!(true)),
        "{t}"
    );
    assert!(
        t["failure_detail"]
            .as_str()
            .unwrap()
            .contains("whether it committed is unknown")
    );
    holder("ROLLBACK");
    let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(t["text"], "abc\n", "{t}");
}

/// Issue 14 item 5, "the front end bounds every call": patchdiff-mcp sets statement_timeout
/// (here PATCHDIFF_MCP_STATEMENT_TIMEOUT=200ms) on its session. A submission stuck behind another
/// transaction's row lock is cancelled by PostgreSQL (57014) and answered `cancelled`, with
/// failure_reason statement_timeout, retryable and nothing_written, as an error — never
/// `outcome_unknown`. The clauses proved: (1) the answer's shape; (2) no attempt row was written;
/// (3) the same server, on the same session, answers the next call; (4) resending the identical
/// keyed call after the lock is gone is a fresh acceptance (nothing was recorded to recover).
#[test]
fn statement_timeout_is_a_retryable_cancel_with_nothing_written() {
    let url = format!("{} application_name=mcp-stdio-timeout-test", dsn());
    let mut m = Mcp::start(&[
        ("PATCHDIFF_DATABASE_URL", &url),
        ("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "200ms"),
    ]);
    m.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut m, "abc\n");
    let attempts =
        format!("SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = '{target}'");
    let mut count = postgres_count_for(&target);
    assert_eq!(count(&attempts), 0);
    // The submission waits on this row lock until its statement_timeout expires.
    let mut holder = postgres_admin_for(&target);
    holder(&format!(
        "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
    ));
    let submit = json!({"target_file_id": target, "expected_target_version": 0, "intent": "x",
        "edits": [{"match": "abc", "replace": "xyz"}], "client_request_id": "statement-timeout-1"});
    let routed = through_a_router();
    let started = std::time::Instant::now();
    let (t, result) = m.call("patchdiff_submit_edits", submit.clone());
    let waited = started.elapsed();
    if routed {
        // (1') Through a router the cancel is the router's: PL/Proxy runs the call in a
        // transaction of its own on the shard, which may have committed before the cancel got
        // there, so the answer is `outcome_unknown` (docs/scale-out.md, "When a call's outcome
        // is unknown"), never "nothing was written".
        assert_eq!(
            (&t["status"], &result["isError"]),
            (&json!("outcome_unknown"), &json!(true)),
            "{t}"
        );
        assert_ne!(t["nothing_written"], json!(true), "{t}");
    } else {
        // (1) cancelled, retryable, nothing written; an error result with no structuredContent.
        assert_eq!(
            (&t["status"], &result["isError"]),
            (&json!("cancelled"), &json!(true)),
            "{t}"
        );
        assert_eq!(t["failure_reason"], "statement_timeout", "{t}");
        assert_eq!(t["code"], "statement_timeout", "{t}");
        assert_eq!(
            (&t["retryable"], &t["nothing_written"]),
            (&json!(true), &json!(true)),
            "{t}"
        );
        assert!(
            t["failure_detail"]
                .as_str()
                .unwrap()
                .contains("nothing was written"),
            "{t}"
        );
    }
    assert!(result.get("structuredContent").is_none(), "{result}");
    assert!(waited >= Duration::from_millis(200), "{waited:?}");
    // (2) the statement and its transaction rolled back: no attempt row.
    assert_eq!(count(&attempts), 0);
    // (3) the server still serves, on the same session (the target is still locked, so a read,
    // which takes no lock, answers).
    let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(t["text"], "abc\n", "{t}");
    // (4) once the lock is gone, the identical keyed call is a fresh acceptance.
    holder("ROLLBACK");
    let (t, result) = m.call("patchdiff_submit_edits", submit);
    assert_eq!(
        (&t["status"], &t["deduplicated"], &result["isError"]),
        (&json!("accepted"), &json!(false), &json!(false)),
        "{t}"
    );
    assert_eq!(count(&attempts), 1);
    let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(t["text"], "xyz\n", "{t}");
}

/// How many sessions wait for a lock that the session with backend `holder` holds, on the
/// database of `target`'s rows.
fn waiting_behind(target: &str, holder: i32) -> impl FnMut() -> i64 {
    let mut count = postgres_count_for(target);
    move || {
        count(&format!(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE {holder} = ANY(pg_catalog.pg_blocking_pids(pid))"
        ))
    }
}

/// The backend of a connection made by `postgres_admin_for`-like helpers: the holder's own pid,
/// read with the same connection.
fn holding_session(target: &str) -> (impl FnMut(&str), i32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(patchdiff_tests::tables_for(&dsn(), target));
    let pid: i32 = rt
        .block_on(client.query_one("SELECT pg_catalog.pg_backend_pid()", &[]))
        .unwrap()
        .get(0);
    (
        move |sql: &str| {
            rt.block_on(client.batch_execute(sql)).unwrap();
        },
        pid,
    )
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < until,
            "{what}: not within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// helper-62 F1, helper-64 F5; docs/profiles.md "Exit status": an input that ends while a call
/// runs lets the call finish and be answered (a host may close stdin and still read: `printf ...
/// | patchdiff-mcp`), but once nobody can read the answer (the host died: stdout's pipe has no
/// reader, whether stdin closed with it or before), the call is cancelled within about a second:
/// a submission waiting for a row lock then never commits, and the server exits 1.
#[test]
fn a_call_whose_host_is_gone_is_cancelled_one_whose_input_ended_is_answered() {
    use std::io::{BufRead, Write};
    let mut setup = Mcp::start(&[]);
    setup.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut setup, "abc\n");
    drop(setup);
    let mut version = postgres_count_for(&target);
    let current =
        format!("SELECT version FROM patchdiff.targets WHERE target_file_id = '{target}'");
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Host {
        /// Closes stdin and goes on reading.
        EndsInput,
        /// Closes both at once.
        Dies,
        /// Closes stdin, then stdout half a second later.
        EndsInputThenDies,
    }
    for host in [Host::EndsInput, Host::Dies, Host::EndsInputThenDies] {
        let (mut holder, holder_pid) = holding_session(&target);
        holder(&format!(
            "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
        ));
        let mut waiting = waiting_behind(&target, holder_pid);
        let (mut child, mut stdin, mut stdout) =
            patchdiff_tests::stdio::spawn_unread(&[("PATCHDIFF_DATABASE_URL", &dsn())]);
        let v = version(&current);
        for line in [
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "patchdiff_submit_edits", "arguments":
                {"target_file_id": target, "expected_target_version": v, "intent": "x",
                 "edits": [{"match": if v % 2 == 0 { "abc" } else { "xyz" }, "replace": if v % 2 == 0 { "xyz" } else { "abc" }}]}}}),
        ] {
            stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        }
        stdin.flush().unwrap();
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        wait_until(
            "the submission waits for the lock",
            Duration::from_secs(20),
            || waiting() == 1,
        );
        drop(stdin);
        if host == Host::EndsInput {
            // The host still reads: the call waits on, then commits and is answered.
            std::thread::sleep(Duration::from_millis(1500));
            assert_eq!(waiting(), 1, "still waiting for the lock");
            holder("ROLLBACK");
            let mut answer = String::new();
            stdout.read_line(&mut answer).unwrap();
            let r: Value = serde_json::from_str(&answer).unwrap();
            let t: Value =
                serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
            assert_eq!(
                (&r["id"], &t["status"]),
                (&json!(2), &json!("accepted")),
                "{r}"
            );
            assert_eq!(version(&current), v + 1);
            assert_eq!(child.wait().unwrap().code(), Some(0));
            continue;
        }
        if host == Host::EndsInputThenDies {
            std::thread::sleep(Duration::from_millis(500));
            assert_eq!(waiting(), 1, "still waiting while the host reads");
        }
        drop(stdout);
        wait_until(
            &format!("{host:?}: the call of a host that is gone is cancelled"),
            Duration::from_secs(15),
            || waiting() == 0,
        );
        holder("ROLLBACK");
        assert_eq!(version(&current), v, "{host:?}: nothing was committed");
        let status = child.wait().unwrap();
        assert_eq!(
            status.code(),
            Some(1),
            "{host:?}: its answer was lost: {status:?}"
        );
    }
}

/// MCP "Cancellation" (2025-11-25 basic/utilities/cancellation; docs/profiles.md,
/// "Cancellation"): a `notifications/cancelled` naming the running tool call cancels it and it
/// is not answered; a submission waiting for a row lock commits nothing, the requests sent after
/// the notification are answered in order, and one it names that has not started yet is never
/// run. Then the race helper-64 found when cancellation was first tried (2026-12-06): a call, its
/// cancellation and a second call written back to back, a hundred times; the second call is
/// never the one cancelled.
#[test]
fn notifications_cancelled_cancels_the_running_call_and_only_it() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut m, "abc\n");
    let mut version = postgres_count_for(&target);
    let current =
        format!("SELECT version FROM patchdiff.targets WHERE target_file_id = '{target}'");
    let (mut holder, holder_pid) = holding_session(&target);
    holder(&format!(
        "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
    ));
    let mut waiting = waiting_behind(&target, holder_pid);
    let line = |v: Value| format!("{v}\n");
    let submit = json!({"jsonrpc": "2.0", "id": 70, "method": "tools/call", "params": {"name": "patchdiff_submit_edits",
        "arguments": {"target_file_id": target, "expected_target_version": 0, "intent": "x",
                      "edits": [{"match": "abc", "replace": "xyz"}]}}});
    m.send_raw(line(submit).as_bytes());
    wait_until(
        "the submission waits for the lock",
        Duration::from_secs(20),
        || waiting() == 1,
    );
    let read = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "patchdiff_read_target",
            "arguments": {"target_file_id": target}}})
    };
    let cancel = |id: Value| json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id, "reason": "the user pressed stop"}});
    // A read sent behind the submission, cancelled before it starts; then a ping, then the
    // submission's own cancellation, with an id of another type that must not match it first.
    m.send_raw(
        [
            line(read(71)),
            line(cancel(json!(71))),
            line(json!({"jsonrpc": "2.0", "id": 72, "method": "ping"})),
            line(cancel(json!("70"))),
            line(cancel(json!(70))),
            line(json!({"jsonrpc": "2.0", "id": 73, "method": "ping"})),
        ]
        .concat()
        .as_bytes(),
    );
    let r = m.reply();
    assert_eq!(r["id"], 72, "only the ping is answered first: {r}");
    let r = m.reply();
    assert_eq!(r["id"], 73, "{r}");
    assert_eq!(waiting(), 0, "the cancelled submission no longer waits");
    holder("ROLLBACK");
    assert_eq!(version(&current), 0, "nothing was committed");
    let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(
        (&t["version"], &t["text"]),
        (&json!(0), &json!("abc\n")),
        "{t}"
    );
    assert!(
        m.pipes.line(Duration::from_millis(500)).is_err(),
        "the cancelled requests are never answered"
    );

    // A hundred rounds of (call, its cancellation, another call) in one write.
    let mut answered_first = 0;
    for round in 0..100i64 {
        let (a, b) = (1000 + 2 * round, 1001 + 2 * round);
        m.send_raw(
            [line(read(a)), line(cancel(json!(a))), line(read(b))]
                .concat()
                .as_bytes(),
        );
        let mut r = m.reply();
        if r["id"] == a {
            answered_first += 1;
            r = m.reply();
        }
        assert_eq!(r["id"], b, "round {round}: {r}");
        let t: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            t["status"], "ok",
            "round {round}: the call after a cancelled one was not hit by its cancel: {t}"
        );
    }
    eprintln!("{answered_first} of 100 calls finished before their cancellation was read");
}

/// docs/profiles.md "Cancelled calls" (helper-66 F1, F3, F4): a cancellation written together
/// with a fresh server's first tool call, which the server reads while it still prepares that
/// call's statement (a cancel request then finds the session idle and is dropped), still stops
/// it: the statement is refused, or cancelled by the request sent again while the call runs. The
/// same with a connection string naming its server twice (the cancel request goes to the address
/// the session connected to) and with an address alone (`hostaddr`). Either way a submission
/// waiting for a row lock commits nothing, the ping behind it is answered, and the next call is
/// served (on a new session).
#[test]
fn a_cancelled_first_call_commits_nothing_whatever_the_connection_string() {
    let mut setup = Mcp::start(&[]);
    setup.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut setup, "abc\n");
    drop(setup);
    let mut version = postgres_count_for(&target);
    let current =
        format!("SELECT version FROM patchdiff.targets WHERE target_file_id = '{target}'");
    let others = {
        let d = dsn();
        let word = |key: &str| {
            d.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .map(str::to_owned)
        };
        match (word("host="), word("port=")) {
            (Some(h), Some(p)) if !h.starts_with('/') => vec![
                d.replace(&format!("host={h}"), &format!("host={h},{h}"))
                    .replace(&format!("port={p}"), &format!("port={p},{p}")),
                d.replace(&format!("host={h}"), &format!("hostaddr={h}")),
            ],
            _ => Vec::new(),
        }
    };
    for url in std::iter::once(dsn()).chain(others) {
        for round in 0..3 {
            let (mut holder, holder_pid) = holding_session(&target);
            holder(&format!(
                "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
            ));
            let mut waiting = waiting_behind(&target, holder_pid);
            let mut m = Mcp::start(&[("PATCHDIFF_DATABASE_URL", &url)]);
            m.initialize(Some("2025-11-25"));
            let lines = [
                json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "patchdiff_submit_edits",
                    "arguments": {"target_file_id": target, "expected_target_version": 0, "intent": "x",
                                  "edits": [{"match": "abc", "replace": "xyz"}]}}}),
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}),
                json!({"jsonrpc": "2.0", "id": 6, "method": "ping"}),
            ];
            m.send_raw(
                lines
                    .iter()
                    .map(|l| format!("{l}\n"))
                    .collect::<String>()
                    .as_bytes(),
            );
            let r = m.reply();
            assert_eq!(
                r["id"], 6,
                "{url} round {round}: only the ping is answered: {r}"
            );
            wait_until(
                &format!("{url} round {round}: the cancelled submission no longer waits"),
                Duration::from_secs(10),
                || waiting() == 0,
            );
            holder("ROLLBACK");
            assert_eq!(
                version(&current),
                0,
                "{url} round {round}: nothing committed"
            );
            let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
            assert_eq!(
                t["version"], 0,
                "{url} round {round}: the next call is served: {t}"
            );
        }
    }
}

/// Issue 14 item 5: a PATCHDIFF_MCP_STATEMENT_TIMEOUT that is not a duration stops start-up
/// with a message naming the variable, before serving anything.
#[test]
fn bad_statement_timeout_stops_start_up() {
    let out = Command::new(mcp_bin())
        .env("PATCHDIFF_DATABASE_URL", dsn())
        .env("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "thirty seconds")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PATCHDIFF_MCP_STATEMENT_TIMEOUT"), "{err}");
    assert!(out.stdout.is_empty(), "nothing but MCP may go to stdout");
}

/// Issue 15: a database whose pg_patchdiff objects predate target ownership (simulated by
/// removing `patchdiff_list_targets` from a fresh one) cannot be served by this build, whose
/// library would fail every call there: start-up stops with a message that says what to do.
#[test]
fn storage_from_before_ownership_stops_start_up() {
    let db = format!("patchdiff_pre_owner_{}", std::process::id());
    let mut admin = postgres_admin();
    admin(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    admin(&format!(
        "CREATE DATABASE {db} ENCODING 'UTF8' TEMPLATE template0"
    ));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let old = format!("{} dbname={db}", dsn());
    rt.block_on(async {
        let c = patchdiff_tests::connect(&old).await.unwrap();
        c.batch_execute(
            "CREATE EXTENSION pg_patchdiff; \
             ALTER EXTENSION pg_patchdiff DROP FUNCTION patchdiff_list_targets(json); \
             DROP FUNCTION patchdiff_list_targets(json);",
        )
        .await
        .unwrap();
    });
    let out = Command::new(mcp_bin())
        .env("PATCHDIFF_DATABASE_URL", &old)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    admin(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("predate target ownership"), "{err}");
    assert!(out.stdout.is_empty(), "nothing but MCP may go to stdout");
}

/// Runs a `SELECT count(*) ...` as the test superuser on one connection of its own to the
/// database that holds `target`'s rows (through a router, its partition).
fn postgres_count_for(target: &str) -> impl FnMut(&str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(patchdiff_tests::tables_for(&dsn(), target));
    move |sql: &str| {
        let row = rt.block_on(client.query_one(sql, &[])).unwrap();
        row.get::<_, i64>(0)
    }
}

/// Whether the test database is a PL/Proxy router.
fn through_a_router() -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let c = patchdiff_tests::connect(&dsn()).await.unwrap();
            patchdiff_tests::is_router(&c).await
        })
}

/// Runs SQL as the test superuser on one connection of its own.
fn postgres_admin() -> impl FnMut(&str) {
    admin_on(|| async { patchdiff_tests::connect(&dsn()).await.unwrap() })
}

/// Runs SQL as the test superuser on one connection of its own to the database that holds
/// `target`'s rows (through a router, its partition).
fn postgres_admin_for(target: &str) -> impl FnMut(&str) {
    let target = target.to_owned();
    admin_on(move || async move { patchdiff_tests::tables_for(&dsn(), &target).await })
}

fn admin_on<F: Future<Output = tokio_postgres::Client>>(
    connect: impl FnOnce() -> F,
) -> impl FnMut(&str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(connect());
    move |sql: &str| {
        rt.block_on(client.batch_execute(sql)).unwrap();
    }
}

/// Through a router, ends the session of the call on the target's partition as well.
fn end_lock_waiters_behind_router(target: &str) {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(patchdiff_tests::end_lock_waiters_behind_router(
            &dsn(),
            target,
        ));
}

/// Issue 3, "The embedded default database": without PATCHDIFF_DATABASE_URL the server creates a
/// private cluster on first use (as `postgres` when run as root), serves on its unix socket only,
/// and reuses it on the next start. Three servers started at once on a new folder all serve
/// (all but one used to fail creating the database, 23505); the start lock is the owner's alone
/// (0600: any local user could take a 0644 one and hang every start); the cluster's own
/// configuration keeps it socket-only, and its TCP lines reject, so a start by hand is as closed
/// as the server's (helper-44).
#[test]
fn embedded_database_is_created_then_reused() {
    let base = std::env::temp_dir().join(format!("patchdiff-embedded-{}", std::process::id()));
    let data = base.join("pg15");
    let _ = std::fs::remove_dir_all(&base);
    let start = || {
        let mut cmd = Command::new(mcp_bin());
        cmd.env_remove("PATCHDIFF_DATABASE_URL")
            .env("PATCHDIFF_DATA_DIR", &data)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        cmd
    };
    let mut together: Vec<Mcp> = (0..3).map(|_| Mcp::spawn(start())).collect();
    for m in &mut together {
        m.initialize(Some("2025-11-25"));
    }
    let mut first = together.pop().unwrap();
    let target = initialize_target(&mut first, "embedded\n");
    for mut m in together {
        let (t, _) = m.call("patchdiff_read_target", json!({"target_file_id": target}));
        assert_eq!(
            t["text"], "embedded\n",
            "every server started at once serves"
        );
    }
    drop(first);
    assert!(data.join("PG_VERSION").exists());
    let conf = std::fs::read_to_string(data.join("postmaster.opts")).unwrap();
    assert!(conf.contains("listen_addresses="), "{conf}");
    {
        use std::os::unix::fs::PermissionsExt;
        let lock = std::fs::metadata(base.join(".pg15.lock")).unwrap();
        assert_eq!(lock.permissions().mode() & 0o777, 0o600);
    }
    let auto = std::fs::read_to_string(data.join("postgresql.auto.conf")).unwrap();
    assert!(
        auto.contains("listen_addresses = ''")
            && auto.contains(&format!(
                "unix_socket_directories = '\"{}\"'",
                data.display()
            ))
            && auto.contains("unix_socket_permissions = '0700'"),
        "{auto}"
    );
    let hba = std::fs::read_to_string(data.join("pg_hba.conf")).unwrap();
    assert!(
        hba.lines()
            .filter(|l| l.starts_with("host"))
            .all(|l| l.trim_end().ends_with("reject")),
        "{hba}"
    );
    let mut second = Mcp::spawn(start());
    second.initialize(Some("2025-11-25"));
    let (t, _) = second.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(t["text"], "embedded\n");
    drop(second);
    let pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl";
    let dir = data.to_str().unwrap();
    let stop = || {
        let stopped = if is_root() {
            Command::new("runuser")
                .args([
                    "-u", "postgres", "--", pg_ctl, "-D", dir, "-m", "fast", "stop",
                ])
                .status()
        } else {
            Command::new(pg_ctl)
                .args(["-D", dir, "-m", "fast", "stop"])
                .status()
        };
        assert!(stopped.unwrap().success());
    };
    stop();
    // After a crash, postmaster.pid can name a process that now has the same number but is not
    // the server (helper-44 F9): the start says so and how to recover, instead of failing to
    // connect with "error connecting to server".
    // A process of the cluster's owner: PostgreSQL takes one it may not signal for gone.
    let mut other = {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::process::CommandExt;
        Command::new("sleep")
            .arg("60")
            .uid(std::fs::metadata(&data).unwrap().uid())
            .spawn()
            .unwrap()
    };
    let lock = data.join("postmaster.pid");
    std::fs::write(&lock, format!("{}\n", other.id())).unwrap();
    let out = start()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let _ = other.kill();
    let _ = other.wait();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "{} names process {}, which is running",
            lock.display(),
            other.id()
        )) && err.contains(&format!("remove {} and start again", lock.display())),
        "{err}"
    );
    std::fs::remove_file(&lock).unwrap();
    let mut third = Mcp::spawn(start());
    third.initialize(Some("2025-11-25"));
    let (t, _) = third.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert_eq!(t["text"], "embedded\n");
    drop(third);
    stop();
    let _ = std::fs::remove_dir_all(&base);
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Host guide "Discovery example sequence": every advertised example runs over real stdio and
/// PostgreSQL once its placeholders are bound — four accepted facts and five attempts, the
/// original rejection immutable, and history paged to exhaustion through the cursor examples.
#[test]
fn discovery_examples_run_in_sequence() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let tools = m.request("tools/list", json!({}))["result"]["tools"].clone();
    let examples = |name: &str| -> Vec<Value> {
        let t = tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed"));
        t["inputSchema"]["examples"].as_array().unwrap().clone()
    };
    let target = initialize_target(&mut m, "alpha alpha\n🌟 中\n");
    let bind = |mut e: Value, parent: Option<&str>| {
        e["target_file_id"] = json!(target);
        if let (Some(p), true) = (parent, e.get("parent_pdcp_log_id").is_some()) {
            e["parent_pdcp_log_id"] = json!(p);
        }
        e
    };
    let run = |m: &mut Mcp, name: &str, args: Value| {
        let (t, result) = m.call(name, args);
        assert_eq!(result["isError"], false, "{name}: {t}");
        t
    };
    let read = run(
        &mut m,
        "patchdiff_read_target",
        bind(examples("patchdiff_read_target")[0].clone(), None),
    );
    assert_eq!(read["text"], "alpha alpha\n🌟 中\n");
    let found = run(
        &mut m,
        "patchdiff_find_occurrences",
        bind(examples("patchdiff_find_occurrences")[0].clone(), None),
    );
    assert_eq!(found["occurrence_count"], 2);
    let typed = examples("patchdiff_submit_edits");
    let first = run(
        &mut m,
        "patchdiff_submit_edits",
        bind(typed[0].clone(), None),
    );
    assert_eq!(
        (&first["status"], &first["version"]),
        (&json!("accepted"), &json!(1)),
        "{first}"
    );
    let again = run(
        &mut m,
        "patchdiff_submit_edits",
        bind(typed[0].clone(), None),
    );
    assert_eq!(
        (&again["deduplicated"], &again["pdcp_log_id"]),
        (&json!(true), &first["pdcp_log_id"])
    );
    let missing = run(
        &mut m,
        "patchdiff_submit_edits",
        bind(typed[1].clone(), None),
    );
    assert_eq!(
        (&missing["status"], &missing["failure_reason"]),
        (&json!("rejected"), &json!("match_absent")),
        "{missing}"
    );
    let parent = missing["pdcp_log_id"].as_str().unwrap().to_owned();
    let retry = run(
        &mut m,
        "patchdiff_submit_edits",
        bind(typed[2].clone(), Some(&parent)),
    );
    assert_eq!(
        (&retry["status"], &retry["version"]),
        (&json!("accepted"), &json!(2)),
        "{retry}"
    );
    let span = run(
        &mut m,
        "patchdiff_submit_operations",
        bind(examples("patchdiff_submit_operations")[0].clone(), None),
    );
    assert_eq!(
        (&span["status"], &span["version"]),
        (&json!("accepted"), &json!(3)),
        "{span}"
    );
    let replaced = run(
        &mut m,
        "patchdiff_submit_replacement",
        bind(examples("patchdiff_submit_replacement")[0].clone(), None),
    );
    assert_eq!(
        (&replaced["status"], &replaced["version"]),
        (&json!("accepted"), &json!(4)),
        "{replaced}"
    );
    let line = run(
        &mut m,
        "patchdiff_read_lines",
        bind(examples("patchdiff_read_lines")[0].clone(), None),
    );
    assert_eq!(line["text"], "Final text\n");
    let preview = run(
        &mut m,
        "patchdiff_preview",
        bind(examples("patchdiff_preview")[0].clone(), None),
    );
    assert_eq!(
        (&preview["preview"], &preview["status"]),
        (&json!(true), &json!("accepted")),
        "{preview}"
    );
    let (now, _) = m.call("patchdiff_get_target", json!({"target_file_id": target}));
    assert_eq!(
        (&now["current_content"], &now["version"]),
        (&json!("Final text\n"), &json!(4))
    );
    // History: the first example, then its continuation bound to next_sequence until the end.
    for (tool, expected) in [
        ("patchdiff_get_pdcp_log", 5),
        ("patchdiff_get_manifest_ledger", 4),
    ] {
        let ex = examples(tool);
        let mut page = run(&mut m, tool, bind(ex[0].clone(), None));
        let mut seen: Vec<i64> = vec![];
        loop {
            let key = if tool == "patchdiff_get_pdcp_log" {
                "sequence"
            } else {
                "ledger_sequence"
            };
            seen.extend(page["entries"].as_array().unwrap().iter().map(|e| {
                e[key]
                    .as_i64()
                    .or_else(|| e["log_sequence"].as_i64())
                    .unwrap()
            }));
            if page["has_more"] != json!(true) {
                assert_eq!(page["next_sequence"], Value::Null);
                break;
            }
            let mut next = bind(ex[1].clone(), None);
            next["before_sequence"] = page["next_sequence"].clone();
            page = run(&mut m, tool, next);
        }
        assert_eq!(seen.len(), expected, "{tool}: {seen:?}");
    }
    // The original rejection is immutable: recovering it returns the same diagnostic.
    let recovered = run(
        &mut m,
        "patchdiff_submit_edits",
        bind(typed[1].clone(), None),
    );
    assert_eq!(
        (&recovered["deduplicated"], &recovered["diagnostic"]),
        (&json!(true), &missing["diagnostic"])
    );
}

/// Contract "Common input and request-key rules", through the real front end: `\u0000` and an
/// escaped lone surrogate in a submission reach SQL untouched and come back as an audited
/// target_encoding_invalid rejection; in search arguments they are invalid_argument.
#[test]
fn invalid_text_arrives_through_the_front_end() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut m, "abc\n");
    for (n, text) in [(1, r"a\u0000"), (2, r"a\ud800")] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{{"name":"patchdiff_submit_edits","arguments":{{"target_file_id":"{target}","expected_target_version":0,"intent":"x","edits":[{{"match":"abc","replace":"{text}"}}]}}}}}}"#
        );
        m.send_raw(format!("{line}\n").as_bytes());
        let r = m.reply();
        let t: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            (&t["status"], &t["failure_reason"]),
            (&json!("rejected"), &json!("target_encoding_invalid")),
            "{t}"
        );
        assert!(t["pdcp_log_id"].is_string());
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"patchdiff_find_occurrences","arguments":{{"target_file_id":"{target}","text":"{text}"}}}}}}"#,
            n + 10
        );
        m.send_raw(format!("{line}\n").as_bytes());
        let r = m.reply();
        let t: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(t["status"], "invalid_argument", "{t}");
        assert_eq!(r["result"]["isError"], true);
    }
    let (t, _) = m.call("patchdiff_get_target", json!({"target_file_id": target}));
    assert_eq!(
        (&t["version"], &t["current_content"]),
        (&json!(0), &json!("abc\n"))
    );
}

/// Resource bounds (issue 9): a line over PATCHDIFF_MCP_MAX_LINE_BYTES is discarded without being
/// buffered and answered with -32600 (id null); the next request is served.
#[test]
fn oversized_lines_are_refused_and_serving_continues() {
    let mut m = Mcp::start(&[("PATCHDIFF_MCP_MAX_LINE_BYTES", "4096")]);
    m.initialize(Some("2025-11-25"));
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(1_000_000)
    );
    m.send_raw(format!("{big}\n").as_bytes());
    let r = m.reply();
    assert_eq!(
        (&r["id"], &r["error"]["code"]),
        (&Value::Null, &json!(-32600)),
        "{r}"
    );
    assert!(r["error"]["message"].as_str().unwrap().contains("4096"));
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    // A line just under the limit is read as usual.
    let fits = format!(
        r#"{{"jsonrpc":"2.0","id":10,"method":"ping","params":{{"pad":"{}"}}}}"#,
        "x".repeat(3_000)
    );
    m.send_raw(format!("{fits}\n").as_bytes());
    assert_eq!(m.reply()["id"], 10);
}

/// A line is never built into more than it holds: a 16 MiB line whose `id` is an array of
/// zeros is refused (-32600, id null, as for any id that is not a string or a number) with the
/// server's peak memory well under ten times the line. Before, every member but `params` was
/// parsed into `serde_json::Value`s: a 32 MiB such line took the process to 2.4 GB (helper-44).
#[test]
fn a_line_is_not_amplified_into_values() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let zeros = vec!["0"; 8 << 20].join(",");
    let line = format!(r#"{{"jsonrpc":"2.0","method":"tools/list","id":[{zeros}]}}"#);
    assert!(line.len() > 16 << 20);
    m.send_raw(format!("{line}\n").as_bytes());
    let r = m.reply();
    assert_eq!(
        (&r["id"], &r["error"]["code"]),
        (&Value::Null, &json!(-32600)),
        "{r}"
    );
    let peak_kib = patchdiff_tests::proc_status_bytes(m.pipes.pid(), "VmHWM:") / 1024;
    assert!(
        peak_kib < 160 * 1024,
        "the server's peak memory was {peak_kib} kB for a 16 MiB line"
    );
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

/// Contract "Discovery, argument errors and examples" ("A call with unknown or missing argument
/// names never reaches the tool ... {status: "invalid_argument", code: "missing_argument", tool,
/// failure_detail, missing_arguments}") for the names "patchdiff_submit_observed_operations"
/// marks required: observation_id, operations and both guards; and, for the batch form,
/// observation_bundle_id, groups and the mandatory client_request_id. Each call missing one of
/// them gets exactly that payload and writes nothing; a null value is sent on to the service's
/// audited OBSERVATION_REQUIRED. observed-editor-v2 "patchdiff_commit_bundle ... requires
/// intent, client_request_id and groups" (and the snapshot), the same way.
#[test]
fn missing_observed_arguments_never_reach_the_tool() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let target = initialize_target(&mut m, "def f():\n    return 1\n");
    let hash = "0".repeat(64);
    let o = "33333333-3333-4333-8333-333333333333";
    let ops = json!([{"op": "match", "match": "1", "replace": "2"}]);
    let single = json!({"target_file_id": target, "intent": "x", "observation_id": o,
        "operations": ops, "expected_target_version": 0, "expected_current_hash": hash});
    let batch = json!({"target_file_id": target, "intent": "x", "observation_bundle_id": o,
        "groups": [{"observation_id": o, "operations": ops}], "expected_target_version": 0,
        "expected_current_hash": hash, "client_request_id": "req-1"});
    let written = format!(
        "SELECT (SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = '{target}') \
         + (SELECT count(*) FROM patchdiff.target_scope_observations WHERE target_file_id = '{target}')"
    );
    let mut count = postgres_count_for(&target);
    let tool = "patchdiff_submit_observed_operations";
    for (form, full) in [("single", &single), ("batch", &batch)] {
        for name in full.as_object().unwrap().keys() {
            let mut args = full.clone();
            args.as_object_mut().unwrap().remove(name);
            let (t, result) = m.call(tool, args);
            assert_eq!(result["isError"], true, "{form} without {name}");
            assert_eq!(
                t,
                json!({"status": "invalid_argument", "code": "missing_argument", "tool": tool,
                       "failure_detail": format!("missing required argument(s) for {tool}: {name}"),
                       "missing_arguments": [name]}),
                "{form} without {name}"
            );
        }
    }
    // Neither form named: the contract's own list of required names.
    let (t, _) = m.call(
        tool,
        json!({"target_file_id": target, "intent": "x", "expected_target_version": 0}),
    );
    assert_eq!(
        t["missing_arguments"],
        json!(["observation_id", "operations", "expected_current_hash"])
    );
    assert_eq!(count(&written), 0);
    // A name sent with null reaches the service, which audits the missing observation.
    let mut null = single.clone();
    null["observation_id"] = Value::Null;
    let (t, result) = m.call(tool, null);
    assert_eq!(
        (&t["status"], &t["code"], &result["isError"]),
        (
            &json!("rejected"),
            &json!("OBSERVATION_REQUIRED"),
            &json!(false)
        ),
        "{t}"
    );
    assert_eq!(count(&written), 1);

    let mut v2 = Mcp::start(&[("PATCHDIFF_MCP_PROFILE", "observed_v2")]);
    v2.initialize(Some("2025-11-25"));
    let commit = json!({"snapshot": {"target_file_id": target, "expected_target_version": 0,
        "expected_current_hash": hash, "observation_bundle_id": o}, "intent": "x",
        "client_request_id": "req-2", "groups": [{"observation_id": o, "operations": ops}]});
    let cases = [
        ("patchdiff_commit_bundle", commit),
        (
            "patchdiff_observe_scopes",
            json!({"target_file_id": target, "selections": [{"symbol_name": "f"}]}),
        ),
        ("patchdiff_list_scopes", json!({"target_file_id": target})),
    ];
    for (tool, full) in cases {
        for name in full.as_object().unwrap().keys() {
            let mut args = full.clone();
            args.as_object_mut().unwrap().remove(name);
            let (t, result) = v2.call(tool, args);
            assert_eq!(result["isError"], true, "{tool} without {name}");
            // The commit answers with the v2 receipt, whose diagnostics carry the payload's
            // own members; the other tools with the payload itself.
            let names = match tool {
                "patchdiff_commit_bundle" => &t["diagnostics"]["missing_arguments"],
                _ => &t["missing_arguments"],
            };
            assert_eq!(
                (&t["status"], &t["code"], names),
                (
                    &json!("invalid_argument"),
                    &json!("missing_argument"),
                    &json!([name])
                ),
                "{tool} without {name}: {t}"
            );
        }
    }
    assert_eq!(count(&written), 1);
}

/// Contract "Discovery, argument errors and examples": the unknown_argument payload the SQL
/// functions give, `unknown_arguments_truncated` included, also comes from the front end when
/// it cuts the quoted names (at most 32 names of at most 128 code points each).
#[test]
fn unknown_argument_lists_say_when_they_were_cut() {
    let mut m = Mcp::start(&[]);
    m.initialize(Some("2025-11-25"));
    let target = "11111111-1111-4111-8111-111111111111";
    let mut args = json!({"target_file_id": target});
    for i in 0..40 {
        args[format!("junk_{i:02}")] = json!(i);
    }
    let (t, result) = m.call("patchdiff_read_target", args);
    assert_eq!(result["isError"], true);
    assert_eq!(t["code"], "unknown_argument");
    assert_eq!(t["unknown_arguments"].as_array().unwrap().len(), 32);
    assert_eq!(t["unknown_arguments_truncated"], true);
    let (t, _) = m.call(
        "patchdiff_read_target",
        json!({"target_file_id": target, "x".repeat(200): 1}),
    );
    assert_eq!(
        t["unknown_arguments"],
        json!([format!("{}...", "x".repeat(128))])
    );
    assert_eq!(t["unknown_arguments_truncated"], true);
    // Nothing cut, no flag (the payload the argument_names test pins whole).
    let (t, _) = m.call(
        "patchdiff_read_target",
        json!({"target_file_id": target, "y": 1}),
    );
    assert!(t.get("unknown_arguments_truncated").is_none(), "{t}");
}
