//! Golden responses (issue 16, "How it is proven": golden files of every response and of
//! tools/list for every profile and revision, recorded before the reshape and byte-identical
//! after it). See tests/src/golden.rs for the file format and masking.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser key=value connection string; each corpus runs
//! in a fresh database created beside it so that log and ledger sequences are deterministic)
//! and `PATCHDIFF_MCP_BIN`. `PATCHDIFF_GOLDEN_RECORD=1` rewrites tests/golden/*.golden.

use patchdiff_tests::golden::{Transcript, check};
use patchdiff_tests::stdio::{Pipes, mcp_bin};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const REVISIONS: [&str; 3] = ["2024-11-05", "2025-06-18", "2025-11-25"];
const PROFILES: [&str; 6] = [
    "full",
    "workspace",
    "editor",
    "observed_workspace",
    "observed_editor",
    "observed_v2",
];
const NO_SUCH_TARGET: &str = "11111111-1111-4111-8111-111111111111";
const STALE_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Drops and recreates database `name` with pg_patchdiff; returns its DSN. A fresh database
/// starts every sequence at 1, so the transcript's log and ledger sequences are its own.
///
/// When PATCHDIFF_TEST_DSN is a sharded deployment's router (docs/scale-out.md), the fresh
/// database is a router of its own, `name`, over one partition, a fresh pg_patchdiff database
/// `name_p0` on the first shard cluster: every call goes through PL/Proxy, and its one partition
/// keeps the sequences those of one database, so the transcripts must match byte for byte.
fn fresh_database(name: &str) -> String {
    let base = dsn();
    assert!(
        !base.contains("://"),
        "PATCHDIFF_TEST_DSN must be key=value for the golden tests"
    );
    let shard = runtime().block_on(async {
        patchdiff_tests::shard_clusters(&base)
            .await
            .into_iter()
            .next()
    });
    match shard {
        Some(shard) => {
            let partition = format!("{name}_p0");
            fresh_pg_patchdiff(&shard, &partition);
            fresh_router(&base, name, &shard, &partition)
        }
        None => fresh_pg_patchdiff(&base, name),
    }
}

/// A router database `name` on `base`'s cluster whose one partition is database `partition` of
/// the cluster `shard` names (its `postgres` database).
fn fresh_router(base: &str, name: &str, shard: &str, partition: &str) -> String {
    let db_dsn = format!("{base} dbname={name}");
    // The partition's host and port; PL/Proxy connects as the calling user.
    let mut conninfo: Vec<&str> = shard
        .split_whitespace()
        .filter(|w| w.starts_with("host=") || w.starts_with("port="))
        .collect();
    let database = format!("dbname={partition}");
    conninfo.push(&database);
    let conninfo = conninfo.join(" ");
    runtime().block_on(async {
        let c = empty_database(base, name).await;
        c.batch_execute(&format!(
            "CREATE EXTENSION plproxy; \
             CREATE SERVER patchdiff FOREIGN DATA WRAPPER plproxy OPTIONS (p0 '{}'); \
             CREATE USER MAPPING FOR PUBLIC SERVER patchdiff; \
             GRANT USAGE ON FOREIGN SERVER patchdiff TO PUBLIC;",
            conninfo.replace('\'', "''")
        ))
        .await
        .expect("configuring the router");
        c.batch_execute(include_str!("../../sql/router/patchdiff_router.sql"))
            .await
            .expect("installing sql/router/patchdiff_router.sql");
    });
    db_dsn
}

/// Drops and recreates database `name` with pg_patchdiff on the cluster of `base`; returns its
/// DSN.
fn fresh_pg_patchdiff(base: &str, name: &str) -> String {
    let db_dsn = format!("{base} dbname={name}");
    runtime().block_on(async {
        let c = empty_database(base, name).await;
        c.batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .expect("CREATE EXTENSION");
    });
    db_dsn
}

/// Drops and recreates database `name` on the cluster of `base`, and connects to it.
async fn empty_database(base: &str, name: &str) -> tokio_postgres::Client {
    let admin = patchdiff_tests::connect(base).await.expect("connecting");
    // Two statements: a multi-statement string would run as one transaction block.
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .expect("DROP DATABASE");
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {name} ENCODING 'UTF8' TEMPLATE template0"
        ))
        .await
        .expect("CREATE DATABASE");
    patchdiff_tests::connect(&format!("{base} dbname={name}"))
        .await
        .expect("connecting")
}

/// A `patchdiff-mcp` process whose every exchange is recorded raw.
struct Mcp {
    pipes: Pipes,
    next_id: i64,
    name: String,
}

impl Mcp {
    fn start(name: &str, db_dsn: &str, env: &[(&str, &str)]) -> Mcp {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", db_dsn)
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        Mcp {
            pipes: Pipes::spawn(cmd),
            next_id: 1,
            name: name.to_owned(),
        }
    }

    /// Sends one request line and records it with its reply line, byte for byte.
    fn exchange(&mut self, t: &mut Transcript, label: &str, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        self.pipes.send(format!("{line}\n").as_bytes());
        let reply = self
            .pipes
            .line(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let reply = String::from_utf8(reply).expect("reply is UTF-8");
        t.push(format!("{} {label}", self.name), &line, &reply);
        serde_json::from_str(&reply).expect("reply is JSON")
    }

    fn initialize(&mut self, t: &mut Transcript, revision: Option<&str>) -> Value {
        let mut params =
            json!({"capabilities": {}, "clientInfo": {"name": "patchdiff-golden", "version": "1"}});
        if let Some(r) = revision {
            params["protocolVersion"] = json!(r);
        }
        let r = self.exchange(t, "initialize", "initialize", params);
        self.pipes
            .send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        r
    }

    /// tools/call; the tool's JSON from the text channel, or the JSON-RPC error.
    fn tool(&mut self, t: &mut Transcript, label: &str, tool: &str, args: Value) -> Value {
        let r = self.exchange(
            t,
            &format!("{tool}: {label}"),
            "tools/call",
            json!({"name": tool, "arguments": args}),
        );
        match r["result"]["content"][0]["text"].as_str() {
            Some(text) => serde_json::from_str(text).expect("tool text is JSON"),
            None => r,
        }
    }
}

/// One way of calling the API: MCP stdio or SQL. The corpus runs over both.
trait Channel {
    fn call(&mut self, t: &mut Transcript, label: &str, tool: &str, args: Value) -> Value;
    fn is_sql(&self) -> bool;
}

impl Channel for Mcp {
    fn call(&mut self, t: &mut Transcript, label: &str, tool: &str, args: Value) -> Value {
        self.tool(t, label, tool, args)
    }
    fn is_sql(&self) -> bool {
        false
    }
}

struct Sql {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Channel for Sql {
    /// `SELECT tool($1::text::json)::text`; the entry's request is the argument text, its
    /// response the result text or `ERROR <sqlstate>: <message>`.
    fn call(&mut self, t: &mut Transcript, label: &str, tool: &str, args: Value) -> Value {
        let text = args.to_string();
        let sql = patchdiff_tests::call_sql(tool);
        let r = self.rt.block_on(self.client.query_one(&sql, &[&text]));
        let (response, value) = match r {
            Ok(row) => {
                let s: String = row.get(0);
                let v = serde_json::from_str(&s).expect("the result is JSON");
                (s, v)
            }
            Err(e) => {
                let db = e.as_db_error().unwrap_or_else(|| panic!("{label}: {e}"));
                let s = format!("ERROR {}: {}", db.code().code(), db.message());
                (s.clone(), json!({"sql_error": s}))
            }
        };
        t.push(format!("sql {tool}: {label}"), &text, &response);
        value
    }
    fn is_sql(&self) -> bool {
        true
    }
}

fn s(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("no string {key} in {v}"))
        .to_owned()
}

/// What the MCP-only follow-ups need from the shared corpus.
struct Ids {
    structural: String,
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/fixtures/structural/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// The shared corpus: every tool on its accepted path and its main rejections, from the
/// contract's own examples (mcp-tool-contracts.txt, host-integration-guide.txt).
fn corpus(c: &mut dyn Channel, t: &mut Transcript) -> Ids {
    // Contract "Ordering and cursor example": sequences 1..10 with limit 3. This target is
    // written first in a fresh database, so its ten accepted attempts are log and ledger
    // sequences 1..10 exactly as the contract's example.
    let paging = c.call(
        t,
        "paging target",
        "patchdiff_initialize_target",
        json!({"filename": "paging.md", "content": "v0\n"}),
    );
    let pt = s(&paging, "target_file_id");
    for v in 0..10 {
        let r = c.call(t, &format!("paging edit {}", v + 1), "patchdiff_submit_edits",
            json!({"target_file_id": pt, "expected_target_version": v, "intent": format!("Step {}", v + 1),
                   "edits": [{"match": format!("v{v}"), "replace": format!("v{}", v + 1)}]}));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    for tool in ["patchdiff_get_pdcp_log", "patchdiff_get_manifest_ledger"] {
        c.call(
            t,
            "newest page, limit 3",
            tool,
            json!({"target_file_id": pt, "limit": 3}),
        );
        c.call(
            t,
            "before_sequence 8",
            tool,
            json!({"target_file_id": pt, "limit": 3, "before_sequence": 8}),
        );
        c.call(
            t,
            "before_sequence 2 (last page)",
            tool,
            json!({"target_file_id": pt, "limit": 3, "before_sequence": 2}),
        );
        c.call(
            t,
            "unknown target",
            tool,
            json!({"target_file_id": NO_SUCH_TARGET}),
        );
        c.call(
            t,
            "limit 0",
            tool,
            json!({"target_file_id": pt, "limit": 0}),
        );
        c.call(
            t,
            "limit true",
            tool,
            json!({"target_file_id": pt, "limit": true}),
        );
        c.call(
            t,
            "limit 500 clamps",
            tool,
            json!({"target_file_id": pt, "limit": 500, "before_sequence": 4}),
        );
    }
    let log = "patchdiff_get_pdcp_log";
    c.call(
        t,
        "status rejected (none)",
        log,
        json!({"target_file_id": pt, "status": "rejected"}),
    );
    c.call(
        t,
        "include_content, limit 1",
        log,
        json!({"target_file_id": pt, "limit": 1, "include_content": true}),
    );
    c.call(
        t,
        "include_content not boolean",
        log,
        json!({"target_file_id": pt, "include_content": "yes"}),
    );
    c.call(
        t,
        "bad status",
        log,
        json!({"target_file_id": pt, "status": "pending"}),
    );

    // The contract's "alpha beta alpha" responses.
    let init = c.call(
        t,
        "alpha beta alpha",
        "patchdiff_initialize_target",
        json!({"filename": "doc.md", "content": "alpha beta alpha\n"}),
    );
    let target = s(&init, "target_file_id");
    c.call(
        t,
        "empty filename",
        "patchdiff_initialize_target",
        json!({"filename": "", "content": "x"}),
    );
    c.call(
        t,
        "content missing",
        "patchdiff_initialize_target",
        json!({"filename": "x.md"}),
    );
    c.call(
        t,
        "CRLF upload",
        "patchdiff_handle_upload",
        json!({"filename": "up.md", "content": "one\r\ntwo\r\n", "content_type": "text/markdown"}),
    );
    c.call(
        t,
        "content_type missing",
        "patchdiff_handle_upload",
        json!({"filename": "up.md", "content": "x"}),
    );

    let get = "patchdiff_get_target";
    c.call(t, "ok", get, json!({"target_file_id": target}));
    c.call(
        t,
        "not_found",
        get,
        json!({"target_file_id": NO_SUCH_TARGET}),
    );
    c.call(t, "not a UUID", get, json!({"target_file_id": "nope"}));
    c.call(
        t,
        "unknown argument",
        get,
        json!({"target_file_id": target, "surprise": 1}),
    );

    let read = "patchdiff_read_target";
    c.call(
        t,
        "start 6 length 4",
        read,
        json!({"target_file_id": target, "start": 6, "length": 4}),
    );
    c.call(t, "whole", read, json!({"target_file_id": target}));
    c.call(
        t,
        "start past the end",
        read,
        json!({"target_file_id": target, "start": 100}),
    );
    c.call(
        t,
        "negative start",
        read,
        json!({"target_file_id": target, "start": -1}),
    );
    c.call(
        t,
        "not_found",
        read,
        json!({"target_file_id": NO_SUCH_TARGET}),
    );

    let lines = "patchdiff_read_lines";
    c.call(
        t,
        "line 1",
        lines,
        json!({"target_file_id": target, "start_line": 1, "end_line": 1}),
    );
    c.call(
        t,
        "line 0",
        lines,
        json!({"target_file_id": target, "start_line": 0, "end_line": 1}),
    );
    c.call(
        t,
        "end before start",
        lines,
        json!({"target_file_id": target, "start_line": 2, "end_line": 1}),
    );
    c.call(
        t,
        "past the last line",
        lines,
        json!({"target_file_id": target, "start_line": 5, "end_line": 6}),
    );

    let find = "patchdiff_find_occurrences";
    c.call(
        t,
        "alpha, context 5",
        find,
        json!({"target_file_id": target, "text": "alpha", "context_chars": 5}),
    );
    c.call(
        t,
        "paged",
        find,
        json!({"target_file_id": target, "text": "alpha", "max_results": 1, "start_occurrence": 2}),
    );
    c.call(
        t,
        "absent",
        find,
        json!({"target_file_id": target, "text": "zeta"}),
    );
    c.call(
        t,
        "empty text",
        find,
        json!({"target_file_id": target, "text": ""}),
    );
    c.call(
        t,
        "not_found",
        find,
        json!({"target_file_id": NO_SUCH_TARGET, "text": "a"}),
    );

    let edits = "patchdiff_submit_edits";
    // Contract "Rejected Response": an unselected alpha.
    let rejected = c.call(
        t,
        "match_ambiguous (req-001)",
        edits,
        json!({"target_file_id": target, "expected_target_version": 0, "intent": "Rename alpha",
               "edits": [{"match": "alpha", "replace": "gamma"}], "client_request_id": "req-001"}),
    );
    let parent = s(&rejected, "pdcp_log_id");
    // Contract "Accepted Response": occurrence_index 2.
    let accepted_args = json!({"target_file_id": target, "expected_target_version": 0, "intent": "Rename the second alpha",
        "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}], "client_request_id": "req-002",
        "parent_pdcp_log_id": parent, "attempt": 2});
    c.call(t, "accepted (req-002)", edits, accepted_args.clone());
    c.call(
        t,
        "keyed recovery: identical resend of req-002",
        edits,
        accepted_args.clone(),
    );
    c.call(
        t,
        "keyed recovery of the rejection req-001",
        edits,
        json!({"target_file_id": target, "expected_target_version": 0, "intent": "Rename alpha",
               "edits": [{"match": "alpha", "replace": "gamma"}], "client_request_id": "req-001"}),
    );
    let mut conflicting = accepted_args.clone();
    conflicting["edits"][0]["replace"] = json!("omega");
    c.call(t, "conflict: req-002 with another body", edits, conflicting);
    c.call(
        t,
        "stale version guard",
        edits,
        json!({"target_file_id": target, "expected_target_version": 0, "intent": "x",
               "edits": [{"match": "beta", "replace": "BETA"}]}),
    );
    c.call(
        t,
        "stale hash guard",
        edits,
        json!({"target_file_id": target, "expected_current_hash": STALE_HASH, "intent": "x",
               "edits": [{"match": "beta", "replace": "BETA"}]}),
    );
    c.call(
        t,
        "near miss",
        edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "x",
               "edits": [{"match": "alpah", "replace": "ALPHA"}]}),
    );
    c.call(t, "no guard", edits,
        json!({"target_file_id": target, "intent": "x", "edits": [{"match": "beta", "replace": "BETA"}]}));
    c.call(
        t,
        "empty edits",
        edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "x", "edits": []}),
    );
    c.call(t, "empty match", edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "x", "edits": [{"match": "", "replace": "y"}]}));
    c.call(
        t,
        "occurrence_index 0",
        edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "x",
               "edits": [{"match": "alpha", "replace": "y", "occurrence_index": 0}]}),
    );
    c.call(
        t,
        "bad client_request_id",
        edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "x",
               "edits": [{"match": "beta", "replace": "y"}], "client_request_id": "has space"}),
    );
    c.call(
        t,
        "not_found",
        edits,
        json!({"target_file_id": NO_SUCH_TARGET, "expected_target_version": 0, "intent": "x",
               "edits": [{"match": "a", "replace": "b"}]}),
    );
    c.call(t, "anchors, correlation id", edits,
        json!({"target_file_id": target, "expected_target_version": 1, "intent": "Anchor",
               "edits": [{"match": "beta", "replace": "beta2", "anchor_before": "alpha", "anchor_after": "gamma",
                          "change_id": "chgA", "rationale": "why", "risk": "low"}],
               "include_correlation_id": true}));

    let ops = "patchdiff_submit_operations";
    c.call(t, "span insertion", ops,
        json!({"target_file_id": target, "expected_target_version": 2, "intent": "Add a heading marker",
               "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "# ", "expected_after": "alpha"}]}));
    c.call(t, "span expected_text mismatch", ops,
        json!({"target_file_id": target, "expected_target_version": 3, "intent": "x",
               "operations": [{"op": "span", "start": 0, "end": 2, "expected_text": "zz", "replace": "y"}]}));
    c.call(
        t,
        "match op",
        ops,
        json!({"target_file_id": target, "expected_target_version": 3, "intent": "Upper gamma",
               "operations": [{"op": "match", "match": "gamma", "replace": "GAMMA"}]}),
    );
    c.call(
        t,
        "unknown op",
        ops,
        json!({"target_file_id": target, "expected_target_version": 4, "intent": "x",
               "operations": [{"op": "rotate"}]}),
    );

    let preview = "patchdiff_preview";
    c.call(
        t,
        "tx/3 accepted preview",
        preview,
        json!({"target_file_id": target, "format": "patchdiff-tx/3", "expected_target_version": 4,
               "intent": "Propose a reviewed text", "replacement": "Reviewed text\n"}),
    );
    c.call(
        t,
        "tx/1 preview rejected",
        preview,
        json!({"target_file_id": target, "format": "patchdiff-tx/1", "expected_target_version": 4,
               "intent": "x", "edits": [{"match": "nothing here", "replace": "y"}]}),
    );
    c.call(
        t,
        "stale preview",
        preview,
        json!({"target_file_id": target, "format": "patchdiff-tx/3", "expected_target_version": 0,
               "intent": "x", "replacement": "y\n"}),
    );
    c.call(t, "unknown format", preview,
        json!({"target_file_id": target, "format": "patchdiff-tx/9", "expected_target_version": 4, "intent": "x"}));

    let repl = "patchdiff_submit_replacement";
    c.call(t, "accepted", repl,
        json!({"target_file_id": target, "expected_target_version": 4, "intent": "Replace the document",
               "replacement": "Final text\n", "client_request_id": "req-003"}));
    c.call(t, "stale", repl,
        json!({"target_file_id": target, "expected_target_version": 4, "intent": "x", "replacement": "y\n"}));
    c.call(
        t,
        "replacement missing",
        repl,
        json!({"target_file_id": target, "expected_target_version": 5, "intent": "x"}),
    );

    let replay = "patchdiff_replay";
    c.call(t, "success", replay, json!({"target_file_id": target}));
    c.call(
        t,
        "not_found",
        replay,
        json!({"target_file_id": NO_SUCH_TARGET}),
    );

    let export = "patchdiff_export_target";
    let crlf = c.call(
        t,
        "CRLF upload target",
        "patchdiff_initialize_target",
        json!({"filename": "crlf.md", "content": "a\r\nb\r\n"}),
    );
    let crlf = s(&crlf, "target_file_id");
    for format in ["original_text", "canonical_lf", "crlf", "original_eol"] {
        c.call(
            t,
            format,
            export,
            json!({"target_file_id": crlf, "format": format}),
        );
    }
    c.call(
        t,
        "default format",
        export,
        json!({"target_file_id": target}),
    );
    c.call(
        t,
        "unknown format",
        export,
        json!({"target_file_id": target, "format": "cr"}),
    );
    c.call(
        t,
        "not_found",
        export,
        json!({"target_file_id": NO_SUCH_TARGET}),
    );

    let save = "patchdiff_save";
    c.call(
        t,
        "stale version",
        save,
        json!({"target_file_id": target, "expected_target_version": 1}),
    );
    c.call(
        t,
        "stale hash",
        save,
        json!({"target_file_id": target, "expected_current_hash": STALE_HASH}),
    );
    c.call(
        t,
        "negative version",
        save,
        json!({"target_file_id": target, "expected_target_version": -1}),
    );
    c.call(
        t,
        "saved, export_after_save",
        save,
        json!({"target_file_id": target, "expected_target_version": 5, "export_after_save": true}),
    );
    c.call(t, "saved again", save, json!({"target_file_id": target}));
    c.call(
        t,
        "not_found",
        save,
        json!({"target_file_id": NO_SUCH_TARGET}),
    );
    let ledger = "patchdiff_get_manifest_ledger";
    c.call(
        t,
        "after SAVE: the new, empty cycle",
        ledger,
        json!({"target_file_id": target}),
    );
    c.call(
        t,
        "include_previous_cycles",
        ledger,
        json!({"target_file_id": target, "include_previous_cycles": true}),
    );
    c.call(
        t,
        "include_previous_cycles not boolean",
        ledger,
        json!({"target_file_id": target, "include_previous_cycles": 1}),
    );
    c.call(
        t,
        "whole history",
        log,
        json!({"target_file_id": target, "include_content": true}),
    );
    c.call(
        t,
        "by client_request_id",
        log,
        json!({"target_file_id": target, "client_request_id": "req-001"}),
    );
    c.call(
        t,
        "replay after SAVE",
        replay,
        json!({"target_file_id": target}),
    );

    // host-integration-guide.txt: Calcly six times, the first three renamed with
    // occurrence_index 1, 2 and 3 — accepted with occurrence_index_basis_shift warnings.
    let calcly = c.call(t, "Calcly README", "patchdiff_initialize_target",
        json!({"filename": "README.md",
               "content": "# Calcly\nCalcly adds.\nCalcly subtracts.\nUse Calcly.\nCalcly is small.\nCalcly ends.\n"}));
    let calcly = s(&calcly, "target_file_id");
    c.call(
        t,
        "Calcly occurrences",
        find,
        json!({"target_file_id": calcly, "text": "Calcly", "context_chars": 3}),
    );
    c.call(t, "three Calcly renames by index", edits,
        json!({"target_file_id": calcly, "expected_target_version": 0, "intent": "Rename the first three",
               "edits": [{"match": "Calcly", "replace": "Sumly", "occurrence_index": 1},
                         {"match": "Calcly", "replace": "Sumly", "occurrence_index": 2},
                         {"match": "Calcly", "replace": "Sumly", "occurrence_index": 3}]}));
    c.call(t, "the other three as descending spans", ops,
        json!({"target_file_id": calcly, "expected_target_version": 1, "intent": "Rename the rest",
               "operations": [{"op": "span", "start": 66, "end": 72, "expected_text": "Calcly", "replace": "Sumly"},
                              {"op": "span", "start": 42, "end": 48, "expected_text": "Calcly", "replace": "Sumly"},
                              {"op": "span", "start": 8, "end": 14, "expected_text": "Calcly", "replace": "Sumly"}]}));
    c.call(t, "Calcly after", get, json!({"target_file_id": calcly}));
    c.call(
        t,
        "Calcly history",
        log,
        json!({"target_file_id": calcly, "include_content": true}),
    );
    c.call(
        t,
        "Calcly ledger",
        ledger,
        json!({"target_file_id": calcly}),
    );

    // Structural observation (telemetry.py, the catalog's own example symbols).
    let tele = c.call(
        t,
        "telemetry.py",
        "patchdiff_initialize_target",
        json!({"filename": "telemetry.py", "content": fixture("telemetry.py")}),
    );
    let tele = s(&tele, "target_file_id");
    let observe = "patchdiff_observe_scope";
    let observed = "patchdiff_submit_observed_operations";
    c.call(
        t,
        "candidates flush/method",
        observe,
        json!({"target_file_id": tele, "query": "flush", "kind": "method"}),
    );
    c.call(
        t,
        "all candidates",
        observe,
        json!({"target_file_id": tele}),
    );
    c.call(
        t,
        "SCOPE_NOT_FOUND",
        observe,
        json!({"target_file_id": tele, "symbol_name": "Nope.nothing"}),
    );
    c.call(
        t,
        "blank query",
        observe,
        json!({"target_file_id": tele, "query": "  "}),
    );
    c.call(t, "mixed modes", observe,
        json!({"target_file_id": tele, "symbol_name": "Uploader.flush", "selections": [{"symbol_name": "FRAME_SYNC_STREAM"}]}));
    let o1 = c.call(t, "Uploader.flush", observe,
        json!({"target_file_id": tele, "symbol_name": "Uploader.flush", "kind": "method", "max_chars": 20, "include_line_starts": true}));
    let (o1_id, h0) = (s(&o1, "observation_id"), s(&o1, "target_current_hash"));
    c.call(
        t,
        "page 2 of Uploader.flush",
        observe,
        json!({"target_file_id": tele, "observation_id": o1_id, "offset": 20, "max_chars": 20}),
    );
    let single = json!({"target_file_id": tele, "observation_id": o1_id, "intent": "Raise the flush limit",
        "expected_target_version": 0, "expected_current_hash": h0,
        "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 128"}], "client_request_id": "req-101"});
    c.call(t, "outside the scope", observed,
        json!({"target_file_id": tele, "observation_id": o1_id, "intent": "x", "expected_target_version": 0,
               "expected_current_hash": h0, "operations": [{"op": "match", "match": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 65"}]}));
    let o1 = c.call(
        t,
        "Uploader.flush again",
        observe,
        json!({"target_file_id": tele, "symbol_name": "Uploader.flush"}),
    );
    let o1_id = s(&o1, "observation_id");
    let mut single = single;
    single["observation_id"] = json!(o1_id);
    c.call(t, "single accepted (req-101)", observed, single.clone());
    c.call(t, "keyed recovery of req-101", observed, single.clone());
    let mut consumed = single.clone();
    consumed["client_request_id"] = json!("req-101b");
    c.call(t, "consumed observation", observed, consumed);
    c.call(t, "unknown observation", observed,
        json!({"target_file_id": tele, "observation_id": NO_SUCH_TARGET, "intent": "x", "expected_target_version": 1,
               "expected_current_hash": h0, "operations": [{"op": "match", "match": "a", "replace": "b"}]}));
    c.call(t, "observation missing", observed,
        json!({"target_file_id": tele, "intent": "x", "expected_target_version": 1,
               "expected_current_hash": h0, "operations": [{"op": "match", "match": "a", "replace": "b"}]}));
    let now = c.call(t, "after the single", get, json!({"target_file_id": tele}));
    let h1 = s(&now, "current_hash");
    let bundle = c.call(t, "bundle of two", observe,
        json!({"target_file_id": tele, "selections": [{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM", "kind": "variable"}]}));
    let b_id = s(&bundle, "observation_bundle_id");
    let scopes = bundle["scopes"].as_array().expect("bundle scopes");
    let (b1, b2) = (
        s(&scopes[0], "observation_id"),
        s(&scopes[1], "observation_id"),
    );
    let batch = json!({"target_file_id": tele, "observation_bundle_id": b_id, "intent": "Two scoped edits",
        "expected_target_version": 1, "expected_current_hash": h1, "client_request_id": "req-102",
        "groups": [{"observation_id": b1, "operations": [{"op": "match", "match": "limit = 128", "replace": "limit = 256"}]},
                   {"observation_id": b2, "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v1", "replace": "v2"}]}]});
    let mut stale_batch = batch.clone();
    stale_batch["expected_target_version"] = json!(0);
    stale_batch["client_request_id"] = json!("req-102-stale");
    c.call(t, "stale batch", observed, stale_batch);
    c.call(t, "batch accepted (req-102)", observed, batch.clone());
    c.call(t, "keyed recovery of req-102", observed, batch.clone());
    let mut conflict = batch.clone();
    conflict["intent"] = json!("Another intent");
    c.call(t, "conflict on req-102", observed, conflict);
    // A stale observation: observe, change the target elsewhere, then submit under it.
    let o3 = c.call(
        t,
        "flush (function)",
        observe,
        json!({"target_file_id": tele, "symbol_name": "flush", "kind": "function"}),
    );
    let o3_id = s(&o3, "observation_id");
    let h2 = s(&o3, "target_current_hash");
    c.call(
        t,
        "an unobserved change",
        edits,
        json!({"target_file_id": tele, "expected_target_version": 2, "intent": "Docstring",
               "edits": [{"match": "Telemetry pipeline.", "replace": "Telemetry."}]}),
    );
    c.call(t, "stale observation", observed,
        json!({"target_file_id": tele, "observation_id": o3_id, "intent": "x", "expected_target_version": 2,
               "expected_current_hash": h2, "operations": [{"op": "match", "match": "limit = 64", "replace": "limit = 1"}]}));
    c.call(
        t,
        "structural history",
        log,
        json!({"target_file_id": tele, "limit": 20, "include_content": true}),
    );
    c.call(
        t,
        "structural ledger",
        ledger,
        json!({"target_file_id": tele}),
    );
    c.call(
        t,
        "structural replay",
        replay,
        json!({"target_file_id": tele}),
    );

    if c.is_sql() {
        // The tenancy functions have no MCP tool.
        let grant = "patchdiff_grant";
        c.call(
            t,
            "read to pg_monitor",
            grant,
            json!({"target_file_id": target, "role": "pg_monitor", "privilege": "read"}),
        );
        c.call(
            t,
            "again (idempotent)",
            grant,
            json!({"target_file_id": target, "role": "pg_monitor", "privilege": "read"}),
        );
        c.call(
            t,
            "write to pg_monitor",
            grant,
            json!({"target_file_id": target, "role": "pg_monitor", "privilege": "write"}),
        );
        c.call(
            t,
            "unknown privilege",
            grant,
            json!({"target_file_id": target, "role": "pg_monitor", "privilege": "admin"}),
        );
        c.call(
            t,
            "unknown role",
            grant,
            json!({"target_file_id": target, "role": "no_such_role_golden", "privilege": "read"}),
        );
        c.call(
            t,
            "not_found",
            grant,
            json!({"target_file_id": NO_SUCH_TARGET, "role": "pg_monitor", "privilege": "read"}),
        );
        let revoke = "patchdiff_revoke";
        c.call(
            t,
            "pg_monitor",
            revoke,
            json!({"target_file_id": target, "role": "pg_monitor"}),
        );
        c.call(
            t,
            "again (nothing to revoke)",
            revoke,
            json!({"target_file_id": target, "role": "pg_monitor"}),
        );
        c.call(
            t,
            "not_found",
            revoke,
            json!({"target_file_id": NO_SUCH_TARGET, "role": "pg_monitor"}),
        );
        let list = "patchdiff_list_targets";
        c.call(t, "all", list, json!({}));
        c.call(t, "limit 2", list, json!({"limit": 2}));
        c.call(
            t,
            "prefix doc",
            list,
            json!({"limit": 5, "filename_prefix": "doc"}),
        );
        c.call(t, "limit 0", list, json!({"limit": 0}));
    }
    Ids { structural: tele }
}

/// Contract "MCP negotiation and startup" and "Profiles": initialize and tools/list for every
/// profile x revision x response mode, plus the negotiation of an unknown and an omitted
/// revision.
#[test]
fn golden_tools_list() {
    let workspace =
        std::env::temp_dir().join(format!("patchdiff-golden-ws-{}", std::process::id()));
    std::fs::create_dir_all(&workspace).unwrap();
    let root = workspace.to_str().unwrap().to_owned();
    let key = format!("{root}/workspace.key");
    // Its own database too: a tool is listed only when its function exists there.
    let db = fresh_database("patchdiff_golden_tools");
    let mut t = Transcript::default();
    for profile in PROFILES {
        for mode in ["detailed", "compact"] {
            for revision in REVISIONS {
                let mut m = Mcp::start(
                    &format!("{profile}/{mode}/{revision}"),
                    &db,
                    &[
                        ("PATCHDIFF_MCP_PROFILE", profile),
                        ("PATCHDIFF_MCP_RESPONSE_MODE", mode),
                        ("PATCHDIFF_WORKSPACE_ROOT", &root),
                        ("PATCHDIFF_WORKSPACE_KEY_FILE", &key),
                    ],
                );
                m.initialize(&mut t, Some(revision));
                m.exchange(&mut t, "tools/list", "tools/list", json!({}));
            }
        }
    }
    for (label, revision) in [
        ("unknown revision", Some("1999-01-01")),
        ("omitted revision", None),
    ] {
        let mut m = Mcp::start(&format!("full/{label}"), &db, &[]);
        m.initialize(&mut t, revision);
        m.exchange(&mut t, "tools/list", "tools/list", json!({}));
    }
    let _ = std::fs::remove_dir_all(&workspace);
    check("tools_list.golden", &t);
}

/// Every tool over MCP stdio (the full JSON-RPC line, so both the text and the structured
/// channel), in a fresh database.
#[test]
fn golden_mcp_corpus() {
    let db = fresh_database("patchdiff_golden_mcp");
    let mut t = Transcript::default();
    let mut m = Mcp::start("full", &db, &[]);
    m.initialize(&mut t, Some("2025-11-25"));
    let ids = corpus(&mut m, &mut t);
    // Front-end-only answers: a tool outside the profile's catalog, an unknown tool.
    m.exchange(
        &mut t,
        "unknown tool",
        "tools/call",
        json!({"name": "patchdiff_nope", "arguments": {}}),
    );
    m.exchange(
        &mut t,
        "tenancy is SQL only",
        "tools/call",
        json!({"name": "patchdiff_grant", "arguments": {}}),
    );

    // The oldest revision: text channel only.
    let mut old = Mcp::start("full/2024-11-05", &db, &[]);
    old.initialize(&mut t, Some("2024-11-05"));
    old.tool(
        &mut t,
        "ok",
        "patchdiff_get_target",
        json!({"target_file_id": ids.structural}),
    );
    old.tool(
        &mut t,
        "not_found",
        "patchdiff_get_target",
        json!({"target_file_id": NO_SUCH_TARGET}),
    );

    // Compact presentation of the projected results.
    let mut compact = Mcp::start(
        "full/compact",
        &db,
        &[("PATCHDIFF_MCP_RESPONSE_MODE", "compact")],
    );
    compact.initialize(&mut t, Some("2025-11-25"));
    let observe = "patchdiff_observe_scope";
    compact.tool(
        &mut t,
        "candidates",
        observe,
        json!({"target_file_id": ids.structural, "query": "flush"}),
    );
    let bundle = compact.tool(&mut t, "bundle", observe,
        json!({"target_file_id": ids.structural, "selections": [{"symbol_name": "Uploader.flush"}, {"symbol_name": "FRAME_SYNC_STREAM"}]}));
    compact.tool(&mut t, "batch accepted", "patchdiff_submit_observed_operations",
        json!({"target_file_id": ids.structural, "observation_bundle_id": bundle["observation_bundle_id"],
               "intent": "Compact batch", "expected_target_version": bundle["target_version"],
               "expected_current_hash": bundle["target_current_hash"], "client_request_id": "req-compact",
               "groups": [{"observation_id": bundle["scopes"][0]["observation_id"], "operations": [{"op": "match", "match": "limit = 256", "replace": "limit = 512"}]}]}));

    // Strict observation mode: the unobserved routes are audited rejections.
    let mut strict = Mcp::start(
        "full/strict",
        &db,
        &[("PATCHDIFF_STRICT_OBSERVATION_MODE", "1")],
    );
    strict.initialize(&mut t, Some("2025-11-25"));
    strict.tool(
        &mut t,
        "OBSERVATION_REQUIRED",
        "patchdiff_submit_edits",
        json!({"target_file_id": ids.structural, "expected_target_version": 4, "intent": "x",
               "edits": [{"match": "BATCH_SIZE = 64", "replace": "BATCH_SIZE = 32"}]}),
    );

    // observed_v2: the three alias tools, their snapshot envelope and receipts.
    let mut v2 = Mcp::start(
        "observed_v2",
        &db,
        &[
            ("PATCHDIFF_MCP_PROFILE", "observed_v2"),
            ("PATCHDIFF_STRICT_OBSERVATION_MODE", "1"),
        ],
    );
    v2.initialize(&mut t, Some("2025-11-25"));
    v2.tool(
        &mut t,
        "candidates",
        "patchdiff_list_scopes",
        json!({"target_file_id": ids.structural, "query": "flush", "kind": "method"}),
    );
    v2.tool(
        &mut t,
        "unknown argument",
        "patchdiff_list_scopes",
        json!({"target_file_id": ids.structural, "symbol_name": "flush"}),
    );
    let scopes = v2.tool(&mut t, "two scopes", "patchdiff_observe_scopes",
        json!({"target_file_id": ids.structural, "selections": [{"symbol_name": "Uploader.flush", "kind": "method"}, {"symbol_name": "FRAME_SYNC_STREAM"}]}));
    let commit = json!({"snapshot": scopes["snapshot"], "intent": "Two scoped edits", "client_request_id": "req-201",
        "groups": [{"observation_id": scopes["scopes"][0]["observation_id"], "operations": [{"op": "match", "match": "limit = 512", "replace": "limit = 1024"}]},
                   {"observation_id": scopes["scopes"][1]["observation_id"], "operations": [{"op": "span", "start": 28, "end": 30, "expected_text": "v2", "replace": "v3"}]}]});
    v2.tool(&mut t, "receipt", "patchdiff_commit_bundle", commit.clone());
    v2.tool(
        &mut t,
        "recovered receipt",
        "patchdiff_commit_bundle",
        commit.clone(),
    );
    let mut bad = commit.clone();
    bad["snapshot"]["extra"] = json!(1);
    v2.tool(
        &mut t,
        "unknown snapshot field",
        "patchdiff_commit_bundle",
        bad,
    );
    let mut stale = commit;
    stale["client_request_id"] = json!("req-202");
    v2.tool(&mut t, "stale snapshot", "patchdiff_commit_bundle", stale);
    v2.tool(
        &mut t,
        "outside the profile",
        "patchdiff_get_target",
        json!({"target_file_id": ids.structural}),
    );
    // The workspace profile's import and publishing SAVE (docs/workspace.md).
    let ws = std::env::temp_dir().join(format!("patchdiff-golden-mcp-ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&ws);
    std::fs::create_dir_all(ws.join("root")).unwrap();
    std::fs::write(ws.join("root/notes.md"), "alpha\r\nbeta\r\n").unwrap();
    let (root, key) = (ws.join("root"), ws.join("workspace.key"));
    let mut w = Mcp::start(
        "workspace",
        &db,
        &[
            ("PATCHDIFF_MCP_PROFILE", "workspace"),
            ("PATCHDIFF_WORKSPACE_ROOT", root.to_str().unwrap()),
            ("PATCHDIFF_WORKSPACE_KEY_FILE", key.to_str().unwrap()),
        ],
    );
    w.initialize(&mut t, Some("2025-11-25"));
    let imported = w.tool(
        &mut t,
        "import",
        "patchdiff_initialize_target",
        json!({"filename": "notes.md", "from_workspace": true}),
    );
    let wt = s(&imported, "target_file_id");
    w.tool(
        &mut t,
        "escape",
        "patchdiff_initialize_target",
        json!({"filename": "../notes.md", "from_workspace": true}),
    );
    w.tool(
        &mut t,
        "missing file",
        "patchdiff_initialize_target",
        json!({"filename": "nope.md", "from_workspace": true}),
    );
    w.tool(&mut t, "edit", "patchdiff_submit_edits",
        json!({"target_file_id": wt, "expected_target_version": 0, "intent": "Beta", "edits": [{"match": "beta", "replace": "BETA"}]}));
    w.tool(
        &mut t,
        "publish",
        "patchdiff_save",
        json!({"target_file_id": wt, "expected_target_version": 1, "sync_workspace": true}),
    );
    w.tool(
        &mut t,
        "published bytes",
        "patchdiff_read_target",
        json!({"target_file_id": wt}),
    );
    std::fs::write(root.join("notes.md"), "changed outside\n").unwrap();
    w.tool(
        &mut t,
        "external drift",
        "patchdiff_save",
        json!({"target_file_id": wt, "expected_target_version": 1, "sync_workspace": true}),
    );
    drop(w);
    let _ = std::fs::remove_dir_all(&ws);
    check("mcp_corpus.golden", &t);
}

/// The same corpus over SQL (`SELECT patchdiff_X($1::json)`), plus the tenancy functions that
/// have no tool, in a fresh database.
#[test]
fn golden_sql_corpus() {
    let db = fresh_database("patchdiff_golden_sql");
    let rt = runtime();
    let client = rt
        .block_on(patchdiff_tests::connect(&db))
        .expect("connecting");
    let mut c = Sql { rt, client };
    let mut t = Transcript::default();
    corpus(&mut c, &mut t);
    check("sql_corpus.golden", &t);
}
