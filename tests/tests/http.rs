//! Issue 18 item 2: `patchdiff-mcp serve`, Streamable HTTP at `/mcp` (docs/http.md), the real
//! process over real HTTP against a real PostgreSQL: both eras answer the contract's example,
//! bearer tokens name PostgreSQL roles and the tenancy rules hold as over SQL, a request without
//! a valid token touches nothing, the 2026-07-28 transport's header rules, Origin and Host
//! checks, the body limit, a clear 503 when every connection is busy, and a graceful shutdown
//! that finishes the call in flight.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and `PATCHDIFF_MCP_BIN`.

use patchdiff_tests::stdio::mcp_bin;
use serde_json::{Value, json};
use std::io::BufReader;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const MODERN: &str = "2026-07-28";

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN")
}

async fn superuser() -> Client {
    patchdiff_tests::connect(&dsn()).await.unwrap()
}

/// A login role that may become each tenant role (NOINHERIT: it reaches nothing as itself),
/// and the tenant roles; returns (login, [tenants]).
async fn roles(tag: &str) -> (String, Vec<String>) {
    let login = patchdiff_tests::roles::unique(&format!("http_login_{tag}"));
    let tenants: Vec<String> = ["alice", "bob"]
        .iter()
        .map(|t| patchdiff_tests::roles::unique(&format!("http_{t}_{tag}")))
        .collect();
    let su = superuser().await;
    su.batch_execute(&format!("CREATE ROLE {login} LOGIN NOINHERIT"))
        .await
        .unwrap();
    for t in &tenants {
        su.batch_execute(&format!("CREATE ROLE {t} NOLOGIN; GRANT {t} TO {login}"))
            .await
            .unwrap();
    }
    // Through a router, the same roles on every shard cluster; PL/Proxy reaches a shard as the
    // token's role (current_user), so there it logs in (docs/scale-out.md, "Roles").
    for cluster in patchdiff_tests::shard_clusters(&dsn()).await {
        let c = patchdiff_tests::connect(&cluster).await.unwrap();
        c.batch_execute(&format!("CREATE ROLE {login} LOGIN NOINHERIT"))
            .await
            .unwrap();
        for t in &tenants {
            c.batch_execute(&format!("CREATE ROLE {t} LOGIN; GRANT {t} TO {login}"))
                .await
                .unwrap();
        }
    }
    (login, tenants)
}

/// A running `patchdiff-mcp serve` and its URL.
struct Endpoint {
    child: Child,
    url: String,
    _dir: tempdir::Dir,
    stderr: BufReader<std::process::ChildStderr>,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Endpoint {
    /// `tokens`: (token, role) pairs; `login`: the role the server connects as.
    fn start(
        login: &str,
        tokens: &[(&str, &str)],
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Endpoint {
        let dir = std::env::temp_dir().join(patchdiff_tests::roles::unique("patchdiff-http"));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("tokens");
        let text: String = tokens.iter().map(|(t, r)| format!("{t} {r}\n")).collect();
        std::fs::write(&file, text).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let db = format!("{} user={login}", dsn());
        let mut cmd = Command::new(mcp_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(&file)
            .args(args)
            .env("PATCHDIFF_DATABASE_URL", db)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("patchdiff-mcp serve");
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let url = patchdiff_tests::http::listening_url(&mut stderr);
        Endpoint {
            child,
            url,
            _dir: tempdir::Dir(dir),
            stderr,
        }
    }

    /// A POST; returns (status, body as JSON or Null).
    fn post(&self, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
        let mut r = ureq::post(&self.url).set("Content-Type", "application/json");
        for (k, v) in headers {
            r = r.set(k, v);
        }
        let resp = match r.send_string(body) {
            Ok(resp) => resp,
            Err(ureq::Error::Status(_, resp)) => resp,
            Err(e) => panic!("POST {}: {e}", self.url),
        };
        let status = resp.status();
        let text = resp.into_string().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A 2026-07-28 request with the headers and `_meta` it carries.
    fn modern(&self, token: &str, method: &str, mut params: Value) -> (u16, Value) {
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}});
        let name = params["name"].as_str().unwrap_or("").to_owned();
        let auth = format!("Bearer {token}");
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", method),
        ];
        if method == "tools/call" {
            headers.push(("Mcp-Name", &name));
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.post(&headers, &body.to_string())
    }

    /// A request on a 2025-11-25 connection (after its initialize).
    fn legacy(&self, token: &str, method: &str, params: Value) -> (u16, Value) {
        let auth = format!("Bearer {token}");
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        self.post(
            &[("Authorization", &auth), ("MCP-Protocol-Version", LEGACY)],
            &body.to_string(),
        )
    }

    fn tool(&self, token: &str, name: &str, arguments: Value) -> Value {
        let (status, r) = self.modern(
            token,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        );
        assert_eq!(status, 200, "{r}");
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(r: &Value) -> Value {
    serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// docs/http.md and the contract's `alpha beta alpha` example over HTTP in both eras: the
/// legacy handshake and a 2025-11-25 call, the modern discover and calls with resultType; the
/// ambiguous alpha is rejected with both candidates and occurrence_index 2 is accepted.
#[tokio::test]
async fn both_eras_answer_the_contract_example_over_http() {
    let (login, tenants) = roles("eras").await;
    let token = "token-eras-0123456789";
    let e = Endpoint::start(&login, &[(token, &tenants[0])], &[], &[]);
    let auth = format!("Bearer {token}");
    let (status, init) = e.post(
        &[("Authorization", &auth)],
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string(),
    );
    assert_eq!(
        (status, &init["result"]["protocolVersion"]),
        (200, &json!("2025-11-25")),
        "{init}"
    );
    let (status, listed) = e.legacy(token, "tools/list", json!({}));
    assert_eq!(status, 200);
    assert!(listed["result"].get("resultType").is_none());
    let (status, discovered) = e.modern(token, "server/discover", json!({}));
    assert_eq!(
        (status, &discovered["result"]["supportedVersions"]),
        (200, &json!([MODERN]))
    );
    let (_, modern_list) = e.modern(token, "tools/list", json!({}));
    assert_eq!(modern_list["result"]["tools"], listed["result"]["tools"]);
    for era in ["modern", "legacy"] {
        let call = |name: &str, arguments: Value| {
            let (status, r) = if era == "modern" {
                e.modern(
                    token,
                    "tools/call",
                    json!({"name": name, "arguments": arguments}),
                )
            } else {
                e.legacy(
                    token,
                    "tools/call",
                    json!({"name": name, "arguments": arguments}),
                )
            };
            assert_eq!(status, 200, "{r}");
            assert_eq!(
                r["result"].get("resultType").is_some(),
                era == "modern",
                "{r}"
            );
            text(&r)
        };
        let t = call(
            "patchdiff_initialize_target",
            json!({"filename": "a.md", "content": "alpha beta alpha\n"}),
        );
        let id = t["target_file_id"].as_str().unwrap().to_owned();
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": id, "intent": "x", "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "gamma"}]}),
        );
        assert_eq!(r["failure_reason"], "match_ambiguous", "{r}");
        let starts: Vec<&Value> = r["diagnostic"]["exact_candidates"]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["start"])
            .collect();
        assert_eq!(starts, [&json!(0), &json!(11)]);
        let r = call(
            "patchdiff_submit_edits",
            json!({"target_file_id": id, "intent": "x", "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "gamma", "occurrence_index": 2}]}),
        );
        assert_eq!(
            (&r["status"], &r["version"]),
            (&json!("accepted"), &json!(1)),
            "{r}"
        );
    }
}

/// docs/http.md, "Roles": a token whose role the server cannot take (dropped since the token file
/// was read, or one the login role may not become) is answered `403`, without the `Retry-After`
/// of a passing outage, since no retry helps (helper-76: it was `503` "retry shortly", and every
/// retry opened a new backend); the other tokens are served meanwhile.
#[tokio::test]
async fn a_token_whose_role_cannot_be_taken_is_refused_for_good() {
    let (login, tenants) = roles("gone").await;
    let gone = patchdiff_tests::roles::unique("http_never_created");
    let (good, dropped, foreign) = (
        "token-good-0123456789",
        "token-gone-0123456789",
        "token-other-012345678",
    );
    let e = Endpoint::start(
        &login,
        &[(good, &tenants[0]), (dropped, &gone), (foreign, "postgres")],
        &[],
        &[],
    );
    let read = json!({"name": "patchdiff_get_target",
        "arguments": {"target_file_id": "00000000-0000-4000-8000-000000000000"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                  "io.modelcontextprotocol/clientCapabilities": {}}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": read});
    for (token, sqlstate) in [(dropped, "22023"), (foreign, "42501")] {
        let resp = ureq::post(&e.url)
            .set("Content-Type", "application/json")
            .set("Authorization", &format!("Bearer {token}"))
            .set("MCP-Protocol-Version", MODERN)
            .set("Mcp-Method", "tools/call")
            .set("Mcp-Name", "patchdiff_get_target")
            .send_string(&body.to_string());
        let Err(ureq::Error::Status(403, r)) = resp else {
            panic!("{token}: not refused with 403: {resp:?}");
        };
        assert_eq!(r.header("Retry-After"), None, "{token}");
        let text = r.into_string().unwrap();
        assert!(
            text.contains("this token's role cannot be taken") && text.contains(sqlstate),
            "{token}: {text}"
        );
    }
    let (status, answer) = e.modern(good, "tools/list", json!({}));
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["tools"].is_array(), "{answer}");
    // Refusals reuse the pooled connection: one request at a time keeps one backend (each
    // refusal used to end it and the next request to start another: helper-78).
    let su = superuser().await;
    let backends = || async {
        let pids: Vec<i32> = su
            .query(
                "SELECT pid FROM pg_stat_activity WHERE usename = $1 ORDER BY pid",
                &[&login],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        pids
    };
    let before = backends().await;
    assert!(!before.is_empty());
    for token in [dropped, foreign].repeat(10) {
        let (status, _) = e.modern(token, "tools/list", json!({}));
        assert_eq!(status, 403, "{token}");
    }
    let (status, _) = e.modern(good, "tools/list", json!({}));
    assert_eq!(status, 200);
    assert_eq!(backends().await, before, "refusals started backends");
    // A membership revoked from the login role stops its token within a second, also on the
    // connection already set to that role (helper-78: it went on serving it), and a grant
    // brings it back.
    su.batch_execute(&format!("REVOKE {} FROM {login}", tenants[0]))
        .await
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_100));
    let (status, _) = e.modern(good, "tools/list", json!({}));
    assert_eq!(status, 403, "a revoked membership still served");
    su.batch_execute(&format!("GRANT {} TO {login}", tenants[0]))
        .await
        .unwrap();
    let (status, _) = e.modern(good, "tools/list", json!({}));
    assert_eq!(status, 200);
}

/// Issue 18 item 2 "Authentication": a missing or unknown token is 401 with WWW-Authenticate
/// and touches nothing; each token's calls run as its role, so another tenant's target answers
/// exactly like an unknown one and targets belong to the token's role, as over SQL.
#[tokio::test]
async fn tokens_are_roles_and_tenancy_holds_over_http() {
    let (login, tenants) = roles("tenancy").await;
    let (alice, bob) = ("token-alice-0123456789", "token-bob-01234567890");
    let e = Endpoint::start(
        &login,
        &[(alice, &tenants[0]), (bob, &tenants[1])],
        &[],
        &[],
    );
    // The refused request would create a target of a name no other test uses: its rows, in every
    // database that holds targets (through a router, each partition's). Counting every row would
    // also count the other tests of this file, which run at the same time.
    let filename = format!("{}.md", patchdiff_tests::roles::unique("refused"));
    let count = || async {
        let mut n = 0;
        for d in patchdiff_tests::table_dsns(&dsn()).await {
            n += patchdiff_tests::connect(&d)
                .await
                .unwrap()
                .query_one(
                    "SELECT count(*) FROM patchdiff.targets WHERE filename = $1",
                    &[&filename],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
        }
        n
    };
    let create = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "patchdiff_initialize_target", "arguments": {"filename": filename, "content": "x"},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let before = count().await;
    assert_eq!(before, 0);
    for auth in [
        None,
        Some("Bearer nope-nope-nope-nope"),
        Some("Basic dXNlcjpwYXNz"),
        Some("Bearer token-alice-012345678"),
    ] {
        let mut headers = vec![
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "patchdiff_initialize_target"),
        ];
        if let Some(a) = auth {
            headers.push(("Authorization", a));
        }
        let resp = ureq::post(&e.url);
        let resp = headers
            .iter()
            .fold(resp, |r, (k, v)| r.set(k, v))
            .send_string(&create);
        let Err(ureq::Error::Status(401, r)) = resp else {
            panic!("{auth:?} was not refused with 401");
        };
        assert!(
            r.header("WWW-Authenticate")
                .is_some_and(|h| h.starts_with("Bearer"))
        );
    }
    assert_eq!(count().await, before, "a refused request wrote something");
    let mine = e.tool(
        alice,
        "patchdiff_initialize_target",
        json!({"filename": "secret.md", "content": "alpha\n"}),
    );
    let id = mine["target_file_id"].as_str().unwrap().to_owned();
    let owner: String = patchdiff_tests::tables_for(&dsn(), &id)
        .await
        .query_one(
            "SELECT owner_role::text FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(owner, tenants[0]);
    assert_eq!(
        e.tool(
            alice,
            "patchdiff_read_target",
            json!({"target_file_id": id})
        )["text"],
        "alpha\n"
    );
    let theirs = e.tool(bob, "patchdiff_read_target", json!({"target_file_id": id}));
    let unknown_id = "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69";
    let unknown = e.tool(
        bob,
        "patchdiff_read_target",
        json!({"target_file_id": unknown_id}),
    );
    assert_eq!(
        theirs.to_string().replace(&id, unknown_id),
        unknown.to_string()
    );
    let write = e.tool(bob, "patchdiff_submit_edits", json!({"target_file_id": id, "intent": "x", "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "beta"}]}));
    assert_eq!(write["code"], "target_not_found", "{write}");
    // Alice's reads and Bob's never share a role, though they share the pool's connections.
    for _ in 0..5 {
        assert_eq!(
            e.tool(
                alice,
                "patchdiff_read_target",
                json!({"target_file_id": id})
            )["status"],
            "ok"
        );
        assert_eq!(
            e.tool(bob, "patchdiff_read_target", json!({"target_file_id": id}))["status"],
            "not_found"
        );
    }
}

/// 2026-07-28 streamable-http "Protocol Version Header", "Standard Request Headers", "Server
/// Validation", "Security Warning" (Origin), and the endpoint's own limits.
#[tokio::test]
async fn transport_rules_over_http() {
    let (login, tenants) = roles("rules").await;
    let token = "token-rules-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &[],
        &[("PATCHDIFF_MCP_MAX_LINE_BYTES", "4096")],
    );
    let auth = format!("Bearer {token}");
    let meta = json!({"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}});
    let body = |method: &str, params: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
    };
    // Mcp-Method missing or not the body's method; Mcp-Name missing or not the tool's name.
    let list = body("tools/list", json!({"_meta": meta}));
    let (s, r) = e.post(
        &[("Authorization", &auth), ("MCP-Protocol-Version", MODERN)],
        &list,
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32020)), "{r}");
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "server/discover"),
        ],
        &list,
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32020)), "{r}");
    let call = body(
        "tools/call",
        json!({"name": "patchdiff_read_target", "arguments": {}, "_meta": meta}),
    );
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
        ],
        &call,
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32020)), "{r}");
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "patchdiff_get_target"),
        ],
        &call,
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32020)), "{r}");
    // The body's value as JSON quotes it (it read `Some("...")`, Rust's debug form).
    assert_eq!(
        r["error"]["message"],
        "Header mismatch: Mcp-Name header value \"patchdiff_get_target\" does not match body value \"patchdiff_read_target\"",
        "{r}"
    );
    // The Base64 sentinel form of Mcp-Name is decoded (patchdiff_read_target).
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?cGF0Y2hkaWZmX3JlYWRfdGFyZ2V0?="),
        ],
        &call,
    );
    assert_eq!((s, &r["result"]["isError"]), (200, &json!(true)), "{r}");
    // The header's version and the body's differ; an unknown version; no version header.
    let old_meta = body(
        "tools/list",
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25", "io.modelcontextprotocol/clientCapabilities": {}}}),
    );
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &old_meta,
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32020)), "{r}");
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", "1900-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        &list,
    );
    assert_eq!(
        (s, &r["error"]["code"], &r["error"]["data"]["requested"]),
        (400, &json!(-32022), &json!("1900-01-01")),
        "{r}"
    );
    let (s, r) = e.post(&[("Authorization", &auth)], &list);
    assert_eq!(s, 400, "{r}");
    // A modern request without its _meta is malformed (400, -32602); an unknown method and
    // initialize do not exist in the era (404, -32601).
    let (s, r) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &body("tools/list", json!({})),
    );
    assert_eq!((s, &r["error"]["code"]), (400, &json!(-32602)), "{r}");
    let (s, r) = e.modern(token, "resources/list", json!({}));
    assert_eq!((s, &r["error"]["code"]), (404, &json!(-32601)), "{r}");
    let (s, r) = e.modern(
        token,
        "initialize",
        json!({"protocolVersion": "2025-11-25"}),
    );
    assert_eq!((s, &r["error"]["code"]), (404, &json!(-32601)), "{r}");
    // A notification is accepted with no body.
    let (s, _) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "notifications/cancelled"),
        ],
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{}}"#,
    );
    assert_eq!(s, 202);
    // GET and DELETE: no stream, no session.
    for method in ["GET", "DELETE"] {
        let r = ureq::request(method, &e.url)
            .set("Authorization", &auth)
            .call();
        let Err(ureq::Error::Status(405, r)) = r else {
            panic!("{method} was not 405")
        };
        assert_eq!(r.header("Allow"), Some("POST"));
    }
    // A foreign Origin, and a Host that is not loopback (DNS rebinding), are refused.
    let (s, _) = e.post(
        &[("Authorization", &auth), ("Origin", "https://evil.example")],
        &list,
    );
    assert_eq!(s, 403);
    let (s, _) = e.post(
        &[
            ("Authorization", &auth),
            ("Origin", "http://localhost:3000"),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ],
        &list,
    );
    assert_eq!(s, 200);
    let (s, _) = e.post(&[("Authorization", &auth), ("Host", "evil.example")], &list);
    assert_eq!(s, 403);
    // A body over PATCHDIFF_MCP_MAX_LINE_BYTES is refused unread.
    let big = body(
        "tools/call",
        json!({"name": "patchdiff_read_target", "arguments": {"x": "y".repeat(8000)}, "_meta": meta}),
    );
    let (s, _) = e.post(
        &[
            ("Authorization", &auth),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "patchdiff_read_target"),
        ],
        &big,
    );
    assert_eq!(s, 413);
}

/// docs/http.md "Token file": a file others may read is refused at start-up, nothing served.
#[test]
fn a_token_file_others_may_read_stops_start_up() {
    let dir = std::env::temp_dir().join(patchdiff_tests::roles::unique("patchdiff-http-mode"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tokens");
    std::fs::write(&file, "token-mode-0123456789 postgres\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(mcp_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(&file)
        .env("PATCHDIFF_DATABASE_URL", dsn())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mode 644") && err.contains("chmod 600"),
        "{err}"
    );
}

/// Issue 18 item 2 "Load": with every connection busy (one, held by a call waiting on a row lock
/// taken over SQL), another request waits at most --queue-ms and gets 503 with Retry-After,
/// having touched nothing; SIGTERM then lets the call in flight finish (200, accepted) before
/// the server exits 0.
#[tokio::test]
async fn saturation_is_503_and_shutdown_finishes_the_call_in_flight() {
    let (login, tenants) = roles("load").await;
    let token = "token-load-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "1", "--queue-ms", "200"],
        &[],
    );
    let created = e.tool(
        token,
        "patchdiff_initialize_target",
        json!({"filename": "l.md", "content": "alpha\n"}),
    );
    let id = created["target_file_id"].as_str().unwrap().to_owned();
    let mut holder = patchdiff_tests::tables_for(&dsn(), &id).await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM patchdiff.targets WHERE target_file_id = $1::text::uuid FOR UPDATE",
        &[&id],
    )
    .await
    .unwrap();
    let url = e.url.clone();
    let id_for_lock = id.clone();
    let waiting = std::thread::spawn(move || {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "patchdiff_submit_edits", "arguments": {"target_file_id": id, "intent": "x", "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "beta"}]},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}});
        ureq::post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("MCP-Protocol-Version", MODERN)
            .set("Mcp-Method", "tools/call")
            .set("Mcp-Name", "patchdiff_submit_edits")
            .send_string(&body.to_string())
            .map(|r| (r.status(), r.into_string().unwrap_or_default()))
            .map_err(|e| e.to_string())
    });
    // The endpoint's only connection is busy once its backend waits on the row lock (a fixed
    // sleep was not enough on a loaded machine).
    // Through a router the call waits in the session PL/Proxy opened on the target's partition,
    // as the token's role.
    let observer = superuser().await;
    let (observer, who) = if patchdiff_tests::is_router(&observer).await {
        (
            patchdiff_tests::tables_for(&dsn(), &id_for_lock).await,
            tenants[0].clone(),
        )
    } else {
        (observer, login.clone())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let waiting: i64 = observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'",
                &[&who],
            )
            .await
            .unwrap()
            .get(0);
        if waiting > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the submission never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (s, _) = e.modern(token, "tools/list", json!({}));
    assert_eq!(s, 503, "a second request while the only connection is busy");
    // SIGTERM while the call waits: the server stops accepting, then finishes it.
    let ok = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    tx.rollback().await.unwrap();
    let (status, body) = waiting
        .join()
        .unwrap()
        .expect("the call in flight was answered");
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(text(&answer)["status"], "accepted", "{answer}");
    let mut e = e;
    let status = e.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "exit after a graceful shutdown");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut e.stderr, &mut rest);
    assert!(rest.contains("every call in flight finished"), "{rest}");
}

/// docs/http.md, shutdown: a request whose body never finishes arriving is a call in flight
/// that would hold a graceful shutdown forever; after `--shutdown-grace` (1 s here, 30 s by
/// default) the server exits 0 anyway and says what it abandoned.
#[tokio::test]
async fn an_unfinished_request_holds_up_shutdown_only_for_the_grace() {
    use std::io::Write;
    let (login, tenants) = roles("grace").await;
    let token = "token-grace-0123456789";
    let mut e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--shutdown-grace", "1"],
        &[],
    );
    let address = e
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let mut slow = std::net::TcpStream::connect(&address).unwrap();
    write!(
        slow,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\""
    )
    .unwrap();
    slow.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    let deadline = started + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = e.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still running 15 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = started.elapsed();
    assert_eq!(status.code(), Some(0), "a requested stop");
    assert!(
        took >= Duration::from_millis(900),
        "it waited the grace: {took:?}"
    );
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut e.stderr, &mut rest);
    assert!(rest.contains("were abandoned"), "{rest}");
    drop(slow);
}

/// The endpoint's `host:port` and a raw connection to it, for what no HTTP client sends.
fn raw(e: &Endpoint) -> (String, std::net::TcpStream) {
    let address = e
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let tcp = std::net::TcpStream::connect(&address).unwrap();
    (address, tcp)
}

/// Everything the server sends on `tcp` until it closes it, or `None` if it is still open
/// after `within`.
fn until_closed(tcp: &mut std::net::TcpStream, within: Duration) -> Option<String> {
    use std::io::Read;
    tcp.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    match tcp.read_to_end(&mut got) {
        Ok(_) => Some(String::from_utf8_lossy(&got).into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
            Some(String::from_utf8_lossy(&got).into_owned())
        }
        Err(_) => None,
    }
}

/// An endpoint that serves one tenant, with one token, started with `args` and `env`.
async fn one_tenant(tag: &str, args: &[&str], env: &[(&str, &str)]) -> (Endpoint, String) {
    let (login, tenants) = roles(tag).await;
    let token = format!("token-{tag}-0123456789");
    let e = Endpoint::start(&login, &[(&token, &tenants[0])], args, env);
    (e, token)
}

/// Waits (10 s at most) until `tools/list` is answered 200 again after 503s.
fn served_again(e: &Endpoint, token: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = e.modern(token, "tools/list", json!({}));
        if status == 200 {
            return;
        }
        assert_eq!(status, 503);
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// docs/http.md "Limits": a client that never finishes its headers (one byte now and then, or
/// nothing at all) is disconnected after `--request-timeout`, and one whose body never finishes
/// is answered 408; meanwhile every other client is served. Before, such connections stayed open
/// for good, and a few hundred of them took every file descriptor of the server.
#[tokio::test]
async fn clients_that_never_finish_a_request_are_disconnected() {
    use std::io::Write;
    let (e, token) = one_tenant("slow", &["--request-timeout", "1"], &[]).await;
    let token = token.as_str();
    let (address, mut headers) = raw(&e);
    write!(headers, "POST /mcp HTTP/1.1\r\nHost: {address}\r\nX-a: ").unwrap();
    let (_, mut silent) = raw(&e);
    let (_, mut body) = raw(&e);
    write!(
        body,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {MODERN}\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\""
    )
    .unwrap();
    let (status, r) = e.modern(token, "tools/list", json!({}));
    assert_eq!(status, 200, "served while three connections stall: {r}");
    let started = Instant::now();
    for (what, tcp) in [("headers", &mut headers), ("nothing", &mut silent)] {
        let got = until_closed(tcp, Duration::from_secs(10));
        assert!(got.is_some(), "a connection that sent {what} is still open");
    }
    let got = until_closed(&mut body, Duration::from_secs(10)).expect("closed after its 408");
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains("--request-timeout"), "{got}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// docs/http.md, DNS rebinding: an `Origin` that is not visible ASCII is refused like any other
/// origin that is not allowed (it used to be overlooked, as if absent), an origin or host with
/// more than a port after `localhost` is not loopback, a request with two `Origin`, `Host`
/// or `Authorization` headers is refused 400, and so is an MCP header that is not visible ASCII.
#[tokio::test]
async fn odd_origins_and_hosts_are_refused() {
    use std::io::Write;
    let (e, token) = one_tenant("origin", &[], &[]).await;
    let token = token.as_str();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let send = |origin: &[u8], host: &str| {
        let (address, mut tcp) = raw(&e);
        let host = if host.is_empty() {
            address.as_str()
        } else {
            host
        };
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/list\r\nConnection: close\r\nContent-Length: {}\r\n",
            list.len()
        )
        .into_bytes();
        if !origin.is_empty() {
            request.extend_from_slice(b"Origin: ");
            request.extend_from_slice(origin);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(list.as_bytes());
        tcp.write_all(&request).unwrap();
        until_closed(&mut tcp, Duration::from_secs(10)).unwrap_or_default()
    };
    assert!(send(b"", "").starts_with("HTTP/1.1 200"));
    assert!(send(b"http://localhost:3000", "").starts_with("HTTP/1.1 200"));
    for origin in [
        &b"http://evil.example\xff"[..],
        b"http://localhost:1@evil.example",
        b"http://localhost:evil.example",
    ] {
        let got = send(origin, "");
        assert!(got.starts_with("HTTP/1.1 403"), "{origin:?}: {got}");
    }
    let got = send(b"", "localhost:evil.example");
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    // Twice over, an allowed value first: only the first used to be checked (helper-41).
    let got = send(b"http://localhost:3000\r\nOrigin: http://evil.example", "");
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    assert!(
        got.contains("the origin header must not be sent more than once"),
        "{got}"
    );
    let got = send(b"", "localhost\r\nHost: evil.example");
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    let got = send(b"", "localhost\r\nAuthorization: Bearer another");
    assert!(got.starts_with("HTTP/1.1 400"), "{got}");
    // A header sent with bytes that are not visible ASCII is refused as such; it was refused as
    // missing (helper-96).
    let send_as = |header: &str, value: &str| {
        let (address, mut tcp) = raw(&e);
        let mut request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
            list.len()
        );
        for (h, v) in [
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/list"),
        ] {
            let v = if h == header { value } else { v };
            request.push_str(&format!("{h}: {v}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&list);
        tcp.write_all(request.as_bytes()).unwrap();
        until_closed(&mut tcp, Duration::from_secs(10)).unwrap_or_default()
    };
    for (header, value) in [
        ("Mcp-Method", "tools/listé"),
        ("MCP-Protocol-Version", "2026-07-28é"),
    ] {
        let got = send_as(header, value);
        assert!(got.starts_with("HTTP/1.1 400"), "{got}");
        assert!(
            got.contains(&format!("the {header} header is not visible ASCII text")),
            "{got}"
        );
    }
    // And an MCP header sent twice, as the three above (helper-115: with `MCP-Protocol-Version:
    // 2025-11-25` first, a 2026-07-28 body was served as 2025-11-25, without its header checks).
    for (header, value) in [
        ("Mcp-Method", "tools/call"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Mcp-Name", "patchdiff_submit_edits"),
    ] {
        let got = send(
            b"",
            &format!("localhost\r\n{header}: {value}\r\n{header}: {value}"),
        );
        assert!(got.starts_with("HTTP/1.1 400"), "{header}: {got}");
        assert!(
            got.contains("must not be sent more than once"),
            "{header}: {got}"
        );
    }
}

/// docs/http.md "Limits": connections over `--max-http-connections` are answered 503 and
/// closed, unread; once one of the others ends, a new client is served again.
#[tokio::test]
async fn connections_over_the_cap_are_refused_with_503() {
    let (e, token) = one_tenant("cap", &["--max-http-connections", "2"], &[]).await;
    let token = token.as_str();
    let (_, first) = raw(&e);
    let (_, second) = raw(&e);
    let (_, mut third) = raw(&e);
    let got = until_closed(&mut third, Duration::from_secs(10)).expect("the third is closed");
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("--max-http-connections"), "{got}");
    drop((first, second));
    served_again(&e, token, "no place freed");
}

/// docs/http.md "Limits": one peer holds at most `--max-http-connections-per-peer` connections (2
/// here, of 8): its next one is answered 503, naming the cap, and every loopback address counts as
/// one peer, so a third from 127.0.0.2 is refused too; once one closes, the peer is served again.
/// Before, the cap on all connections was the only one, and one client with no token could hold
/// every place (helper-41: 300 connections that trickle their headers); and counted by exact
/// address, one local process took every place from 127.0.0.2, 127.0.0.3, ... (helper-43).
/// How other addresses are counted (IPv6 by /64, IPv4-mapped as IPv4): the unit test
/// `peers_are_counted_by_what_they_cannot_vary`.
#[tokio::test]
async fn one_peer_holds_at_most_its_share_of_connections() {
    use tokio::io::AsyncReadExt;
    let (e, token) = one_tenant(
        "peer",
        &[
            "--max-http-connections",
            "8",
            "--max-http-connections-per-peer",
            "2",
        ],
        &[],
    )
    .await;
    let token = token.as_str();
    let (address, first) = raw(&e);
    let (_, second) = raw(&e);
    let (_, mut third) = raw(&e);
    let got = until_closed(&mut third, Duration::from_secs(10)).expect("the third is closed");
    assert!(got.starts_with("HTTP/1.1 503"), "{got}");
    assert!(got.contains("--max-http-connections-per-peer"), "{got}");

    // Another loopback address is the same peer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(address.parse().unwrap()).await.unwrap();
    let mut got = String::new();
    tokio::time::timeout(Duration::from_secs(10), other.read_to_string(&mut got))
        .await
        .expect("closed within 10 s")
        .unwrap();
    assert!(got.starts_with("HTTP/1.1 503"), "127.0.0.2: {got}");

    drop((first, second));
    served_again(&e, token, "no place freed for the peer");
}

/// docs/http.md "Limits": bodies being received hold at most four times the largest body in
/// memory, reserved by what each declares before it is read (the largest body at most); a
/// request that finds no room within the queue wait is answered 503, and a body over the
/// largest 413. Before, every connection could pin a whole unfinished body.
#[tokio::test]
async fn request_bodies_in_memory_are_bounded() {
    use std::io::Write;
    let (e, token) = one_tenant(
        "bodies",
        &["--queue-ms", "200"],
        &[("PATCHDIFF_MCP_MAX_LINE_BYTES", "4096")],
    )
    .await;
    let token = token.as_str();
    // Four unfinished bodies of 4 KiB take the whole room of 16 KiB.
    let held = unfinished_bodies(&e, token, 4);
    std::thread::sleep(Duration::from_millis(300));
    let (status, r) = e.modern(token, "tools/list", json!({}));
    assert_eq!(status, 503, "{r}");
    drop(held);
    served_again(&e, token, "the room was not given back");
    let (address, mut big) = raw(&e);
    write!(
        big,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Length: 4097\r\n\r\n{}",
        "x".repeat(4097)
    )
    .unwrap();
    let got = until_closed(&mut big, Duration::from_secs(5));
    let got = got.unwrap_or_default();
    assert!(got.starts_with("HTTP/1.1 413"), "{got}");
}

/// `n` requests of `token` that declare a 4 KiB body and send one byte of it, held open.
fn unfinished_bodies(e: &Endpoint, token: &str, n: usize) -> Vec<std::net::TcpStream> {
    use std::io::Write;
    (0..n)
        .map(|_| {
            let (address, mut tcp) = raw(e);
            write!(
                tcp,
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {MODERN}\r\nContent-Length: 4096\r\n\r\n{{"
            )
            .unwrap();
            tcp
        })
        .collect()
}

/// docs/http.md "Limits": with a token file that names several roles, one role's unfinished
/// bodies hold at most half the room for bodies (8 of 16 KiB here). Alice starts four 4 KiB
/// bodies and finishes none: two get room, and Bob is still served. Before, her four took the
/// whole room and Bob got 503 for as long as she kept them up (helper-41: 30 s per round).
#[tokio::test]
async fn one_role_holds_at_most_its_share_of_the_room_for_bodies() {
    let (login, tenants) = roles("bodyshare").await;
    let (alice, bob) = ("token-bodyshare-alice-0123", "token-bodyshare-bob-012345");
    let e = Endpoint::start(
        &login,
        &[(alice, &tenants[0]), (bob, &tenants[1])],
        &["--queue-ms", "200"],
        &[("PATCHDIFF_MCP_MAX_LINE_BYTES", "4096")],
    );
    let held = unfinished_bodies(&e, alice, 4);
    std::thread::sleep(Duration::from_millis(400));
    let (status, r) = e.modern(alice, "tools/list", json!({}));
    assert_eq!(status, 503, "alice, over her share: {r}");
    let (status, r) = e.modern(bob, "tools/list", json!({}));
    assert_eq!(
        status, 200,
        "bob is served while alice holds her share: {r}"
    );
    drop(held);
    served_again(&e, alice, "alice's room was not given back");
}

/// 2025-06-18 / 2025-11-25 streamable-http "Protocol Version Header" asks for the header on the
/// requests after `initialize`; a client that also stamps it on `initialize` still gets the
/// handshake (the revision it negotiates), never "already initialized". And RFC 9110 section
/// 11.1: the authentication scheme is case-insensitive, so `bearer TOKEN` is the same
/// credential, while another scheme with the same token is refused.
#[tokio::test]
async fn initialize_with_a_version_header_and_the_bearer_scheme_in_any_case() {
    let (login, tenants) = roles("stamp").await;
    let token = "token-stamp-0123456789";
    let e = Endpoint::start(&login, &[(token, &tenants[0])], &[], &[]);
    for revision in ["2025-06-18", "2025-11-25"] {
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": revision, "capabilities": {},
                       "clientInfo": {"name": "stamping-client", "version": "1"}}});
        let (s, r) = e.post(
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("MCP-Protocol-Version", revision),
            ],
            &init.to_string(),
        );
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["result"]["protocolVersion"], revision, "{r}");
    }
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}).to_string();
    let (s, r) = e.post(
        &[
            ("Authorization", &format!("bearer {token}")),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &ping,
    );
    assert_eq!((s, &r["result"]), (200, &json!({})), "{r}");
    let (s, _) = e.post(
        &[
            ("Authorization", &format!("Basic {token}")),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        &ping,
    );
    assert_eq!(s, 401);
}

/// Issue 18 item 2 "Logs": one line on stderr per request with its method, tool, role, HTTP
/// status and milliseconds, refused requests too (a 401 names no role); no token, valid or
/// not, ever appears in the log.
#[tokio::test]
async fn one_log_line_per_request_and_never_a_token() {
    let (login, tenants) = roles("logs").await;
    let token = "token-logs-0123456789-secret";
    let wrong = "token-logs-wrong-987654321";
    let e = Endpoint::start(&login, &[(token, &tenants[0])], &[], &[]);
    let read = e.tool(
        token,
        "patchdiff_initialize_target",
        json!({"filename": "log.md", "content": "alpha\n"}),
    );
    assert_eq!(read["status"], "ok", "{read}");
    let (s, _) = e.modern(wrong, "tools/list", json!({}));
    assert_eq!(s, 401);
    let (s, _) = e.post(
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Origin", "https://evil.example"),
        ],
        "{}",
    );
    assert_eq!(s, 403);
    let ok = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    let mut e = e;
    assert_eq!(e.child.wait().unwrap().code(), Some(0));
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut e.stderr, &mut log);
    let calls: Vec<&str> = log.lines().filter(|l| l.contains("http: call ")).collect();
    assert_eq!(calls.len(), 3, "{log}");
    let role = &tenants[0];
    assert!(
        calls[0].contains("method=\"tools/call\"")
            && calls[0].contains("tool=\"patchdiff_initialize_target\"")
            && calls[0].contains(&format!("role=\"{role}\""))
            && calls[0].contains("status=200")
            && calls[0].contains("ms="),
        "{}",
        calls[0]
    );
    assert!(
        calls[1].contains("status=401") && calls[1].contains("role=\"\" "),
        "{}",
        calls[1]
    );
    assert!(calls[2].contains("status=403"), "{}", calls[2]);
    assert!(!log.contains(token) && !log.contains(wrong), "{log}");
}

/// A new target of `token`'s role, and a superuser session that holds its row lock (`FOR UPDATE`)
/// in a transaction left open: `ROLLBACK` on the session lets it go.
async fn locked_target(e: &Endpoint, token: &str, filename: &str) -> (String, Client) {
    let created = e.tool(
        token,
        "patchdiff_initialize_target",
        json!({"filename": filename, "content": "alpha\n"}),
    );
    let id = created["target_file_id"].as_str().unwrap().to_owned();
    let holder = superuser().await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM patchdiff.targets WHERE target_file_id = $1::text::uuid FOR UPDATE",
            &[&id],
        )
        .await
        .unwrap();
    (id, holder)
}

/// The revision every legacy call of these tests names.
const LEGACY: &str = "2025-11-25";

/// A `patchdiff_submit_edits` of target `id` at version 0 in MCP `revision` (2026-07-28 or a
/// legacy one), sent from a thread of its own by a client that gives up after `give_up` (if any):
/// (status, body), or (0, the error).
fn submit_in_thread(
    e: &Endpoint,
    revision: &'static str,
    token: &'static str,
    id: &str,
    i: usize,
    give_up: Option<Duration>,
) -> std::thread::JoinHandle<(u16, String)> {
    let (url, id) = (e.url.clone(), id.to_owned());
    std::thread::spawn(move || {
        let mut body = json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
            "params": {"name": "patchdiff_submit_edits", "arguments": {"target_file_id": id, "intent": "x",
                       "expected_target_version": 0, "edits": [{"match": "alpha", "replace": format!("beta{i}")}]}}});
        let mut agent = ureq::AgentBuilder::new();
        if let Some(t) = give_up {
            agent = agent.timeout(t);
        }
        let mut request = agent
            .build()
            .post(&url)
            .set("Authorization", &format!("Bearer {token}"))
            .set("MCP-Protocol-Version", revision);
        if revision == MODERN {
            body["params"]["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                                             "io.modelcontextprotocol/clientCapabilities": {}});
            request = request
                .set("Mcp-Method", "tools/call")
                .set("Mcp-Name", "patchdiff_submit_edits");
        }
        let sent = request.send_string(&body.to_string());
        match sent {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        }
    })
}

/// Backends of `login` on the server: `count(*)` of its sessions in `pg_stat_activity`, all of
/// them or (`waiting`) those waiting on a lock.
async fn backends_of(su: &Client, login: &str, waiting: bool) -> i64 {
    su.query_one(
        "SELECT count(*) FROM pg_stat_activity WHERE usename = $1 AND (NOT $2 OR wait_event_type = 'Lock')",
        &[&login, &waiting],
    )
    .await
    .unwrap()
    .get(0)
}

/// docs/http.md "Limits": a client that hangs up mid-call takes no more than `--connections`
/// backends. Twelve submissions of a legacy revision (where a disconnect is not a cancellation),
/// in six waves of two, wait on a row lock another session holds,
/// and each client gives up after 300 ms. The first wave's two calls run on in the server, each
/// holding its connection's permit, so the login role never has more than its two backends (the
/// other ten are refused 503 in the queue); once the lock is let go the two end (one accepted,
/// the other rejected by its version guard, both in the log), the server serves again, and each
/// cut call has its log line (status 499). Before, each hang-up gave its permit and connection
/// back at once while its backend went on waiting, the next request opened another backend, and
/// one tenant filled every connection slot of the database (helper-41: 97 of 100).
#[tokio::test]
async fn clients_that_hang_up_take_no_more_than_the_servers_connections() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "counts the login role's backends on one server")
        .await
    {
        return;
    }
    let (login, tenants) = roles("hangup").await;
    let token = "token-hangup-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "2", "--queue-ms", "100"],
        &[],
    );
    let (id, holder) = locked_target(&e, token, "h.md").await;
    // Six waves of two: each wave is sent once the one before has been cut or refused.
    for wave in 0..6 {
        let cut: Vec<_> = (2 * wave..2 * wave + 2)
            .map(|i| submit_in_thread(&e, LEGACY, token, &id, i, Some(Duration::from_millis(300))))
            .collect();
        for t in cut {
            let (status, text) = t.join().unwrap();
            assert!(
                status == 0 || status == 503,
                "given up or refused: {status} {text}"
            );
        }
    }
    let su = superuser().await;
    let mut most = 0;
    for _ in 0..10 {
        most = most.max(backends_of(&su, &login, false).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        (1..=2).contains(&most),
        "the login role had {most} backends with --connections 2"
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    served_again(&e, token, "serving again once the lock is let go");
    let deadline = Instant::now() + Duration::from_secs(20);
    let statuses = loop {
        let rows = su
            .query(
                "SELECT status FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
                &[&id],
            )
            .await
            .unwrap();
        let statuses: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        if statuses.len() >= 2 || Instant::now() > deadline {
            break statuses;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        statuses.iter().filter(|s| *s == "accepted").count(),
        1,
        "{statuses:?}"
    );
    let ok = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    let mut e = e;
    assert_eq!(e.child.wait().unwrap().code(), Some(0));
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut e.stderr, &mut log);
    let count = |status: &str| {
        log.lines()
            .filter(|l| l.contains("http: call ") && l.contains("tool=\"patchdiff_submit_edits\""))
            .filter(|l| l.contains(&format!("status={status} ")))
            .count()
    };
    assert_eq!(
        (count("499"), count("503")),
        (2, 10),
        "a line per request: the two that ran, cut by their clients, and ten refused in the queue: {log}"
    );
}

/// MCP 2026-07-28, basic/patterns/cancellation, "Transport-Specific Cancellation": over Streamable
/// HTTP "The server MUST treat a client disconnect as cancellation of that request" (docs/http.md
/// "Calls"). With `--connections 1`: a legacy call A waits on a row lock another session holds and
/// keeps the only connection (a legacy disconnect is not a cancellation); a 2026-07-28 call B
/// queues behind it and its client leaves after 300 ms; a 2026-07-28 call C (to a second server)
/// waits on the lock too, and its client closes the connection. Then, with the lock still held,
/// C's backend stops waiting, and once the
/// lock is let go A is accepted and nothing of B or C is in the log (B never started; C was
/// rolled back). Before, C waited on with its connection until the lock was let go, and both B
/// and C ran to their ends after A (rejected by their version guards, in the log).
#[tokio::test]
async fn a_2026_call_whose_client_hangs_up_is_cancelled() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "holds a row lock on one server").await {
        return;
    }
    let (login, tenants) = roles("cut").await;
    let token = "token-cut-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "1", "--queue-ms", "5000"],
        &[],
    );
    let (id, holder) = locked_target(&e, token, "c.md").await;
    let su = superuser().await;
    let waiting = |n: i64, what: &'static str| {
        let (su, login) = (&su, &login);
        patchdiff_tests::eventually(
            what,
            Duration::from_secs(20),
            Duration::from_millis(20),
            move || async move { backends_of(su, login, true).await == n },
        )
    };
    let a = submit_in_thread(&e, LEGACY, token, &id, 1, None);
    waiting(1, "the legacy call waits on the lock").await;
    let b = submit_in_thread(&e, MODERN, token, &id, 2, Some(Duration::from_millis(300)));
    assert_eq!(b.join().unwrap().0, 0, "B's client gave up in the queue");
    // A holds the connection: a second server, where C waits on the lock, then is cut off.
    let e2 = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "1"],
        &[],
    );
    let (address, mut c) = raw(&e2);
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "patchdiff_submit_edits", "arguments": {"target_file_id": id, "intent": "x",
                   "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "beta3"}]},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    // Followed by a stray line break (RFC 9112 asks servers to tolerate one before a request):
    // hyper then stops reading the connection, and its close was not seen (helper-115).
    std::io::Write::write_all(
        &mut c,
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: patchdiff_submit_edits\r\nContent-Length: {}\r\n\r\n{body}\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    waiting(2, "C waits on the lock too").await;
    drop(c);
    waiting(1, "C's statement is cancelled while the lock is held").await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, text) = a.join().unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("accepted"), "{text}");
    // Long enough for B, had it started after A, to be in the log.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = su
        .query(
            "SELECT status, client_request_id FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
            &[&id],
        )
        .await
        .unwrap();
    let statuses: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(statuses, ["accepted"], "only A is in the log");
    served_again(&e, token, "the first server serves again");
    served_again(&e2, token, "the second server serves again");
}

/// docs/http.md "Calls": a 2026-07-28 call whose client hangs up but that ends within a moment
/// (50 ms) ends by itself, and its connection stays pooled. A submission waits on a row lock;
/// its client closes the connection and the lock is let go at once: the submission commits, and
/// the server still has the one backend it had. Before, each such call was cancelled and its
/// connection closed, so a client cutting every call made every other tenant's next call open a
/// session (helper-115: 121 to 134 new sessions a second, another role's reads 25 to 80 times
/// slower).
#[tokio::test]
async fn a_cut_call_that_ends_at_once_keeps_its_connection() {
    use std::io::Write;
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "holds a row lock on one server").await {
        return;
    }
    let (login, tenants) = roles("quickcut").await;
    let token = "token-quickcut-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "1"],
        &[],
    );
    let (id, holder) = locked_target(&e, token, "q.md").await;
    let su = superuser().await;
    let started = async || -> Vec<String> {
        su.query(
            "SELECT backend_start::text FROM pg_stat_activity WHERE usename = $1",
            &[&login],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    let before = started().await;
    assert_eq!(before.len(), 1, "{before:?}");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "patchdiff_submit_edits", "arguments": {"target_file_id": id, "intent": "x",
                   "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "beta"}]},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}})
    .to_string();
    let (address, mut tcp) = raw(&e);
    write!(
        tcp,
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: patchdiff_submit_edits\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    patchdiff_tests::eventually(
        "the submission waits on the lock",
        Duration::from_secs(20),
        Duration::from_millis(10),
        || async { backends_of(&su, &login, true).await == 1 },
    )
    .await;
    drop(tcp);
    holder.batch_execute("ROLLBACK").await.unwrap();
    patchdiff_tests::eventually(
        "the submission commits",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async { patchdiff_tests::stored_version(&su, &id).await == 1 },
    )
    .await;
    served_again(&e, token, "served after the cut call");
    assert_eq!(started().await, before, "the same backend");
}

/// docs/http.md "Limits": with a token file that names several roles, one role runs at most half
/// of `--connections` calls at once. Alice's two submissions wait on a row lock (`--connections 2`:
/// her share is one); her second is answered 503 naming her share, and Bob is served meanwhile.
/// Before, Alice's calls took every connection and Bob waited for her lock (helper-41: 11 s of
/// 503s for the other tenant).
#[tokio::test]
async fn one_role_holds_at_most_its_share_of_the_connections() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "holds a row lock on one server").await {
        return;
    }
    let (login, tenants) = roles("share").await;
    let (alice, bob) = ("token-share-alice-0123456789", "token-share-bob-0123456789");
    let e = Endpoint::start(
        &login,
        &[(alice, &tenants[0]), (bob, &tenants[1])],
        &["--connections", "2", "--queue-ms", "200"],
        &[],
    );
    let (id, holder) = locked_target(&e, alice, "s.md").await;
    let first = submit_in_thread(&e, MODERN, alice, &id, 1, None);
    let su = superuser().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while backends_of(&su, &login, true).await == 0 {
        assert!(Instant::now() < deadline, "alice's first call never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, text) = submit_in_thread(&e, MODERN, alice, &id, 2, None)
        .join()
        .unwrap();
    assert_eq!(status, 503, "alice's second call, over her share: {text}");
    assert!(text.contains("share"), "{text}");
    let (status, r) = e.modern(bob, "tools/list", json!({}));
    assert_eq!(status, 200, "bob is served while alice waits: {r}");
    holder.batch_execute("ROLLBACK").await.unwrap();
    let (status, text) = first.join().unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("accepted"), "{text}");
}

/// docs/http.md "Limits", answers in memory: an answer over 1 MiB holds room in the answer budget
/// (as much as the bodies': four times `PATCHDIFF_MCP_MAX_LINE_BYTES`, 4 MiB here) until it has
/// been handed to its connection. A client asks for a 24 MB target and reads nothing; while its
/// answer is unread, the same read from another connection is answered 503 (its answer dropped,
/// nothing written), small calls are served, and once the first client goes the read is served
/// again. Before, every unread answer was held whole for as long as its connection lasted
/// (helper-41: 64 unread exports of 29.5 MB, 1.7 GB).
#[tokio::test]
async fn unread_large_answers_are_bounded() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "sets a superuser-only limit on one server")
        .await
    {
        return;
    }
    let (login, tenants) = roles("answers").await;
    let token = "token-answers-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--queue-ms", "300"],
        &[("PATCHDIFF_MCP_MAX_LINE_BYTES", "1048576")],
    );
    let id = big_target(&tenants[0], 1_500_000).await;
    let read = json!({"name": "patchdiff_get_target", "arguments": {"target_file_id": id}});

    // The first client: a small receive buffer, and it never reads.
    let unread = unread_call(&e, token, read.clone()).await;

    // The same read from another connection: refused while that answer is unread (it may be
    // served first, while the first one's answer is still being made).
    call_until(
        &e,
        token,
        read.clone(),
        503,
        200,
        "the second read was never refused while the first answer was unread",
    )
    .await;
    let (status, _) = e.modern(token, "tools/list", json!({}));
    assert_eq!(status, 200, "small answers are served meanwhile");
    drop(unread);
    call_until(
        &e,
        token,
        read.clone(),
        200,
        503,
        "the read was not served again after the first client went",
    )
    .await;
}

/// A target of `tenant` whose text is `repeats` times 16 hex digits (made with a 64 MB argument
/// limit, which only a superuser may set).
async fn big_target(tenant: &str, repeats: usize) -> String {
    let su = superuser().await;
    su.batch_execute(&format!(
        "SELECT patchdiff_list_targets('{{}}'::json); SET patchdiff.max_argument_bytes = '64MB'; SET ROLE {tenant}"
    ))
    .await
    .unwrap();
    let id: String = su
        .query_one(
            "SELECT (patchdiff_initialize_target(json_build_object('filename', 'big.txt', \
             'content', repeat('0123456789abcdef', $1::int)))::json) ->> 'target_file_id'",
            &[&i32::try_from(repeats).unwrap()],
        )
        .await
        .unwrap()
        .get(0);
    su.batch_execute("RESET ROLE; RESET patchdiff.max_argument_bytes")
        .await
        .unwrap();
    id
}

/// A connection with a small receive buffer that has sent `tools/call` `params` as `token` and
/// never reads the answer.
async fn unread_call(e: &Endpoint, token: &str, mut params: Value) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let address = e.url.trim_start_matches("http://").trim_end_matches("/mcp");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut unread = socket.connect(address.parse().unwrap()).await.unwrap();
    let name = params["name"].as_str().unwrap().to_owned();
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                             "io.modelcontextprotocol/clientCapabilities": {}});
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\nMcp-Name: {name}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    unread.write_all(request.as_bytes()).await.unwrap();
    unread
}

/// docs/http.md "Answers in memory" (helper-96): when the token file names several roles, one
/// role's unread large answers hold at most half of the answer budget. Its second large read is
/// refused (503) while its first answer is unread, and another role's large reads are served;
/// before, one role's few unread answers held all of it, and every other role's large reads were
/// dropped and answered 503 for as long.
#[tokio::test]
async fn one_roles_unread_answers_hold_at_most_half_the_room() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "sets a superuser-only limit on one server")
        .await
    {
        return;
    }
    let (login, tenants) = roles("answershares").await;
    let (ta, tb) = ("token-answer-share-a-0123", "token-answer-share-b-0123");
    let e = Endpoint::start(
        &login,
        &[(ta, &tenants[0]), (tb, &tenants[1])],
        &["--queue-ms", "300"],
        &[("PATCHDIFF_MCP_MAX_LINE_BYTES", "1048576")],
    );
    let mut ids = Vec::new();
    for tenant in &tenants[..2] {
        ids.push(big_target(tenant, 200_000).await);
    }
    let read =
        |id: &str| json!({"name": "patchdiff_get_target", "arguments": {"target_file_id": id}});
    // Role A's client: a small receive buffer, and it never reads its 3.2 MB answer, which holds
    // all of A's half of the 4 MiB budget.
    let unread = unread_call(&e, ta, read(&ids[0])).await;
    call_until(
        &e,
        ta,
        read(&ids[0]),
        503,
        200,
        "A's second read was never refused while its first answer was unread",
    )
    .await;
    for _ in 0..3 {
        let (status, _) = e.modern(tb, "tools/call", read(&ids[1]));
        assert_eq!(
            status, 200,
            "B's large reads are served while A's answer is unread"
        );
    }
    drop(unread);
}

/// docs/http.md, shutdown: calls whose clients hung up still run (in a legacy revision: in
/// 2026-07-28 they are cancelled), and a graceful shutdown waits
/// for them as for any call in flight, up to `--shutdown-grace` (1 s here), then says how many it
/// abandoned. Before, it counted only connections: with two such calls still waiting on a row
/// lock it logged "every call in flight finished" (helper-43).
#[tokio::test]
async fn shutdown_waits_for_calls_whose_clients_hung_up() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(&dsn, "holds a row lock on one server").await {
        return;
    }
    let (login, tenants) = roles("abandon").await;
    let token = "token-abandon-0123456789";
    let e = Endpoint::start(
        &login,
        &[(token, &tenants[0])],
        &["--connections", "2", "--shutdown-grace", "1"],
        &[],
    );
    let (id, holder) = locked_target(&e, token, "a.md").await;
    let cut: Vec<_> = (0..2)
        .map(|i| submit_in_thread(&e, LEGACY, token, &id, i, Some(Duration::from_millis(300))))
        .collect();
    for t in cut {
        assert_eq!(t.join().unwrap().0, 0, "the client gave up");
    }
    let ok = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    let mut e = e;
    assert_eq!(e.child.wait().unwrap().code(), Some(0));
    holder.batch_execute("ROLLBACK").await.unwrap();
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(&mut e.stderr, &mut log);
    assert!(
        log.contains("were abandoned") && log.contains("calls=2"),
        "{log}"
    );
    assert!(!log.contains("every call in flight finished"), "{log}");
}

/// `tools/call` of `params` as `token`, again every 200 ms while it answers `meanwhile`, until it
/// answers `want`; `what` fails the test after 20 s.
async fn call_until(
    e: &Endpoint,
    token: &str,
    params: Value,
    want: u16,
    meanwhile: u16,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = e.modern(token, "tools/call", params.clone());
        if status == want {
            return;
        }
        assert_eq!(status, meanwhile);
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
