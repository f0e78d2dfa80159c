//! Issue 18 item 1: MCP 2026-07-28 (the stateless, "modern" era) over stdio, beside the
//! contract's three revisions, on the real `patchdiff-mcp` process over real pipes against a
//! real PostgreSQL (docs/eras.md).
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and `PATCHDIFF_MCP_BIN` (the built server; default target/debug).

use patchdiff_tests::stdio::{Pipes, mcp_bin};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;

const REPLY_TIMEOUT: Duration = Duration::from_secs(20);
const MODERN: &str = "2026-07-28";
const PROFILES: [&str; 6] = [
    "full",
    "workspace",
    "editor",
    "observed_workspace",
    "observed_editor",
    "observed_v2",
];

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

/// The modern envelope every 2026-07-28 request carries.
fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "eras-test", "version": "1"},
    })
}

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
        Mcp {
            pipes: Pipes::spawn(cmd),
            next_id: 1,
        }
    }

    /// One request; the reply is checked to be one ASCII JSON line with the request's id.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.pipes.send(format!("{line}\n").as_bytes());
        let reply = self.pipes.line(REPLY_TIMEOUT).expect("no reply");
        assert!(reply.is_ascii(), "{}", String::from_utf8_lossy(&reply));
        let r: Value = serde_json::from_slice(&reply).unwrap();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    /// A modern request: `params` with the envelope added.
    fn modern(&mut self, method: &str, mut params: Value) -> Value {
        params["_meta"] = meta();
        self.request(method, params)
    }

    fn legacy(revision: &str, env: &[(&str, &str)]) -> Mcp {
        let mut m = Mcp::start(env);
        let r = m.request(
            "initialize",
            json!({"protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "eras-test", "version": "1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], revision, "{r}");
        m.pipes
            .send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        m
    }
}

/// The tool's JSON text of a tools/call result.
fn text(result: &Value) -> Value {
    serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// A tools/call result without the modern era's additions, to compare with a legacy one.
fn without_era(result: &Value) -> Value {
    let mut r = result.clone();
    let m = r.as_object_mut().unwrap();
    m.remove("resultType");
    m.remove("_meta");
    r
}

/// Ids differ between two runs of the same calls; a tool's JSON text is compared parsed.
fn masked(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("text", Value::String(s)) => serde_json::from_str::<Value>(s)
                            .map_or_else(|_| v.clone(), |inner| masked(&inner)),
                        (k, Value::String(_)) if k.ends_with("_id") => json!("*"),
                        _ => masked(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(masked).collect()),
        other => other.clone(),
    }
}

/// server/discover (2026-07-28 "Discovery"; "Caching"): the supported version, the tools
/// capability, the server's identity and instructions, resultType and caching hints.
#[test]
fn server_discover_describes_the_modern_server() {
    let mut m = Mcp::start(&[]);
    let r = m.modern("server/discover", json!({}));
    let d = &r["result"];
    assert_eq!(d["resultType"], "complete", "{r}");
    assert_eq!(d["supportedVersions"], json!([MODERN]));
    assert_eq!(d["capabilities"], json!({"tools": {}}));
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "patchdiff-mcp"
    );
    assert!(d["instructions"].as_str().unwrap().contains("guard"));
    assert!(d["ttlMs"].as_u64().is_some());
    assert_eq!(d["cacheScope"], "public");
    assert!(d.get("protocolVersion").is_none());
}

/// docs/eras.md "How each tool appears in each era": in every profile, the 2026-07-28 tool
/// list declares exactly what 2025-11-25 declares, in the same order, byte for byte, inside a
/// complete, cacheable result.
#[test]
fn every_profile_lists_the_same_tools_in_both_eras() {
    for profile in PROFILES {
        let env = [("PATCHDIFF_MCP_PROFILE", profile)];
        let mut env = env.to_vec();
        let ws = std::env::temp_dir().join("patchdiff-eras-ws");
        std::fs::create_dir_all(&ws).unwrap();
        let ws = ws.to_str().unwrap().to_owned();
        if profile.contains("workspace") {
            env.push(("PATCHDIFF_WORKSPACE_ROOT", &ws));
        }
        let legacy = Mcp::legacy("2025-11-25", &env).request("tools/list", json!({}));
        let modern = Mcp::start(&env).modern("tools/list", json!({}));
        let (l, r) = (&legacy["result"], &modern["result"]);
        assert_eq!(r["resultType"], "complete", "{profile}");
        assert!(r["ttlMs"].as_u64().is_some(), "{profile}");
        assert_eq!(r["cacheScope"], "public", "{profile}");
        assert_eq!(
            r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
            "patchdiff-mcp"
        );
        assert_eq!(
            serde_json::to_string(&r["tools"]).unwrap(),
            serde_json::to_string(&l["tools"]).unwrap(),
            "{profile}"
        );
        assert!(!l["tools"].as_array().unwrap().is_empty(), "{profile}");
    }
}

/// The contract's `alpha beta alpha` example in the modern era: the ambiguous match is
/// rejected with both candidates, and the occurrence_index 2 edit is accepted with
/// version 1, exactly as a 2025-11-25 connection answers (ids masked), each result complete.
#[test]
fn the_contract_example_answers_alike_in_both_eras() {
    let mut modern = Mcp::start(&[]);
    let mut legacy = Mcp::legacy("2025-11-25", &[]);
    let mut answers = Vec::new();
    for era in ["modern", "legacy"] {
        let m = if era == "modern" {
            &mut modern
        } else {
            &mut legacy
        };
        let mut call = |name: &str, arguments: Value| {
            let params = json!({"name": name, "arguments": arguments});
            let r = if era == "modern" {
                m.modern("tools/call", params)
            } else {
                m.request("tools/call", params)
            };
            r["result"].clone()
        };
        let init = call(
            "patchdiff_initialize_target",
            json!({"filename": "a.md", "content": "alpha beta alpha\n"}),
        );
        let target = text(&init)["target_file_id"].as_str().unwrap().to_owned();
        let ambiguous = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": target, "intent": "rename", "expected_target_version": 0,
                   "client_request_id": "req-001",
                   "edits": [{"match": "alpha", "replace": "gamma"}]}),
        );
        let t = text(&ambiguous);
        assert_eq!(t["status"], "rejected", "{era}: {t}");
        assert_eq!(t["failure_reason"], "match_ambiguous", "{era}: {t}");
        let candidates = t["diagnostic"]["exact_candidates"]["candidates"].as_array();
        let starts: Vec<&Value> = candidates.unwrap().iter().map(|c| &c["start"]).collect();
        assert_eq!(starts, [&json!(0), &json!(11)], "{era}: {t}");
        let accepted = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": target, "intent": "rename", "expected_target_version": 0,
                   "client_request_id": "req-002",
                   "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}]}),
        );
        let t = text(&accepted);
        assert_eq!(
            (&t["status"], &t["version"]),
            (&json!("accepted"), &json!(1))
        );
        assert_eq!(t["evidence"]["changes"][0]["span_start"], 11);
        if era == "modern" {
            for r in [&init, &ambiguous, &accepted] {
                assert_eq!(r["resultType"], "complete", "{r}");
                assert_eq!(
                    r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
                    "patchdiff-mcp"
                );
            }
        }
        answers.push(
            [init, ambiguous, accepted]
                .iter()
                .map(|r| masked(&without_era(r)))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(answers[0], answers[1]);
}

/// 2026-07-28 "Per-request protocol fields" and "Protocol Version Negotiation": a request
/// without the required `_meta` fields is -32602; an unknown version is -32022 naming the
/// supported ones; `initialize`, `ping` and `logging/setLevel` do not exist on a modern
/// connection; nothing of this stops the connection from serving.
#[test]
fn modern_error_rules() {
    let mut m = Mcp::start(&[]);
    assert!(m.modern("tools/list", json!({}))["result"].is_object());
    let r = m.request("tools/list", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let r = m.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("clientCapabilities")
    );
    let r = m.request(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "1900-01-01",
                         "io.modelcontextprotocol/clientCapabilities": {}}}),
    );
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(
        r["error"]["data"],
        json!({"supported": [MODERN], "requested": "1900-01-01"})
    );
    let r = m.request("initialize", json!({"protocolVersion": "2025-11-25"}));
    assert_eq!(r["error"]["code"], -32022, "{r}");
    assert_eq!(r["error"]["data"]["supported"], json!([MODERN]));
    for gone in ["ping", "logging/setLevel", "resources/list"] {
        let r = m.modern(gone, json!({}));
        assert_eq!(r["error"]["code"], -32601, "{gone}: {r}");
    }
    // A tool-level refusal is still a complete result with isError, as in every era.
    let r = m.modern(
        "tools/call",
        json!({"name": "patchdiff_read_target", "arguments": {"nope": 1}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["resultType"], "complete");
    // An unknown tool is a protocol error, as before.
    let r = m.modern(
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Hostile input: arguments nested 100,000 deep get the tool's invalid_json refusal, exactly
    // as on a legacy connection (the envelope check skips them unparsed); a `_meta` nested as
    // deep is a malformed envelope. The connection keeps serving.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let meta = meta().to_string();
    for (params, code) in [
        (
            format!(
                r#"{{"name":"patchdiff_read_target","arguments":{{"target_file_id":{deep}}},"_meta":{meta}}}"#
            ),
            None,
        ),
        (
            format!(r#"{{"name":"x","_meta":{{"a":{deep}}}}}"#),
            Some(-32602),
        ),
        (format!(r#"{{"name":"x","_meta":{deep}}}"#), Some(-32602)),
    ] {
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":"deep","method":"tools/call","params":{params}}}"#);
        m.pipes.send(format!("{line}\n").as_bytes());
        let r: Value = serde_json::from_slice(&m.pipes.line(REPLY_TIMEOUT).unwrap()).unwrap();
        match code {
            Some(code) => assert_eq!(r["error"]["code"], code, "{r}"),
            None => {
                assert_eq!(text(&r["result"])["code"], "invalid_json", "{r}");
                assert_eq!(r["result"]["isError"], true);
            }
        }
    }
    assert!(m.modern("server/discover", json!({}))["result"].is_object());
}

/// 2026-07-28 "stdio: Backward Compatibility": a dual-era client's probe (server/discover
/// with the envelope) is answered with a DiscoverResult, while a legacy client (the contract's
/// clients) still gets -32601 for server/discover and its handshake; a first request that is
/// `initialize` opens a legacy connection even with the envelope, and a legacy connection keeps
/// answering exactly as before when a later request carries one.
#[test]
fn the_first_request_chooses_the_era() {
    let mut m = Mcp::start(&[]);
    let r = m.request("server/discover", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let r = m.request("initialize", json!({"protocolVersion": "2025-06-18"}));
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");

    let mut m = Mcp::start(&[]);
    let r = m.modern("initialize", json!({"protocolVersion": "2025-11-25"}));
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25", "{r}");
    let r = m.modern("server/discover", json!({}));
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let listed = m.modern("tools/list", json!({}));
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}
