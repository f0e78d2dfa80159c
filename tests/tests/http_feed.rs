//! Issue 19 item 2 over HTTP (docs/http.md "Subscriptions"): in the 2026-07-28 era,
//! `subscriptions/listen` POSTed to `patchdiff-mcp serve` is answered with an SSE stream, the
//! real process over real HTTP against a real PostgreSQL: the acknowledgment honors only targets
//! the token's role may read, a commit in another session arrives as
//! `notifications/resources/updated` within a bound and a rolled-back one never does, another
//! tenant's target is neither acknowledged nor announced, a revoked grant goes silent, the
//! stream caps refuse before anything is held, closing the connection releases the stream's
//! LISTEN session at once, SIGTERM ends the stream with its result, and the contract's profiles
//! and the legacy eras still refuse to subscribe over HTTP. Through a PL/Proxy router the same
//! tests run: the front end listens on every partition's database (docs/scale-out.md).
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and `PATCHDIFF_MCP_BIN`.

use patchdiff_engine::api::feed::{LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2};
use patchdiff_tests::http::{ListenRequest, ListenStream, Served};
use patchdiff_tests::roles::unique;
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

const MODERN: &str = "2026-07-28";
const ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";
/// How long an update may take to arrive (the feed's median is about a millisecond).
const BOUND: Duration = Duration::from_secs(10);
/// How long a stream must stay silent to count as not announcing something.
const QUIET: Duration = Duration::from_millis(1500);

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN")
}

fn uri(id: &str) -> String {
    format!("patchdiff://targets/{id}")
}

/// A running `patchdiff-mcp serve`, logged in as the superuser with an `application_name` of its
/// own (its LISTEN sessions are counted by it).
struct Endpoint {
    served: Served,
    url: String,
    app: String,
}

impl Endpoint {
    fn start(profile: &str, tokens: &[(&str, &str)], args: &[&str]) -> Endpoint {
        let app = unique("http_feed");
        let served = Served::start(
            profile,
            tokens,
            args,
            &format!("{} application_name={app}", dsn()),
        );
        Endpoint {
            url: served.url.clone(),
            served,
            app,
        }
    }

    fn listen(
        &self,
        token: &str,
        id: Value,
        targets: &[&str],
    ) -> Result<ListenStream, (u16, Value)> {
        let uris: Vec<String> = targets.iter().map(|t| uri(t)).collect();
        ListenRequest {
            url: &self.url,
            token,
            accept: Some("application/json, text/event-stream"),
            id,
            resource_subscriptions: &uris,
        }
        .open()
    }

    /// A POST of one JSON-RPC request; (status, body).
    fn post(&self, token: &str, era: &str, method: &str, params: Value) -> (u16, Value) {
        let mut params = params;
        let mut r = ureq::post(&self.url)
            .set("Content-Type", "application/json")
            .set("Accept", "application/json, text/event-stream")
            .set("Authorization", &format!("Bearer {token}"))
            .set("MCP-Protocol-Version", era);
        if era == MODERN {
            params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                                     "io.modelcontextprotocol/clientCapabilities": {}});
            r = r.set("Mcp-Method", method);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        patchdiff_tests::http::send(r, &body.to_string())
    }

    /// The sessions of this endpoint that LISTEN (and hold or await the feed's key, which
    /// registers them), in every cluster (through a router the
    /// front end listens on each partition's database: [`per_endpoint`] sessions in all).
    async fn listening_sessions(&self) -> i64 {
        self.on_listening_sessions("count(*)").await
    }

    /// `aggregate` over this endpoint's LISTEN sessions, summed over every cluster.
    async fn on_listening_sessions(&self, aggregate: &str) -> i64 {
        let mut n = 0;
        for cluster in clusters().await {
            n += connect(&cluster)
                .await
                .unwrap()
                .query_one(
                    &format!(
                        "SELECT {aggregate} FROM pg_stat_activity WHERE application_name = $1
                            AND pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory'
                                          AND classid = {LISTENER_LOCK_KEY1} AND objid = {LISTENER_LOCK_KEY2}
                                          AND objsubid = 2 AND mode = 'ShareLock')"
                    ),
                    &[&self.app],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
        }
        n
    }

    /// Waits up to 5 s for `n` listening sessions; the count last seen.
    async fn await_listening_sessions(&self, n: i64) -> i64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let seen = self.listening_sessions().await;
            if seen == n || Instant::now() > deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The test database's cluster and, behind a router, every shard cluster.
async fn clusters() -> Vec<String> {
    let mut all = vec![dsn()];
    all.extend(patchdiff_tests::shard_clusters(&dsn()).await);
    all
}

/// The LISTEN sessions an endpoint holds while any of its streams is open (its streams share
/// them): one, or behind a router one per partition database.
async fn per_endpoint() -> i64 {
    let c = connect(&dsn()).await.unwrap();
    if !patchdiff_tests::is_router(&c).await {
        return 1;
    }
    c.query_one(
        "SELECT count(*) FROM patchdiff_router.partition_conninfos()",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

/// Roles that exist everywhere a call as them may run (behind a router, on every shard
/// cluster too, where PL/Proxy logs in as them: docs/scale-out.md "Roles").
async fn tenant_roles(names: &[&str]) {
    let su = connect(&dsn()).await.unwrap();
    for n in names {
        su.batch_execute(&format!("CREATE ROLE {n} NOLOGIN"))
            .await
            .unwrap();
    }
    for cluster in patchdiff_tests::shard_clusters(&dsn()).await {
        let c = connect(&cluster).await.unwrap();
        for n in names {
            c.batch_execute(&format!("CREATE ROLE {n} LOGIN"))
                .await
                .unwrap();
        }
    }
}

/// A superuser session and a new target of it.
async fn superuser_target(name: &str, text: &str) -> (Client, String) {
    let su = connect(&dsn()).await.unwrap();
    let target = initialize_target(&su, name, text).await.unwrap();
    (su, target)
}

/// The token every test endpoint of one test gives the superuser.
const SU_TOKEN: &str = "sse-superuser-token-0123456789";

/// An `extended` endpoint with [`SU_TOKEN`] and an acknowledged stream `id` watching `target`.
fn acknowledged_stream(target: &str, id: Value) -> (Endpoint, ListenStream) {
    let e = Endpoint::start("extended", &[(SU_TOKEN, "postgres")], &[]);
    let s = e.listen(SU_TOKEN, id, &[target]).expect("a stream");
    let ack = s.next(BOUND).expect("the acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    (e, s)
}

/// A session of the superuser acting as `role` (`SET ROLE`), as the endpoint's requests do.
async fn as_role(role: &str) -> Client {
    let c = connect(&dsn()).await.unwrap();
    c.batch_execute(&format!("SET ROLE {role}")).await.unwrap();
    c
}

fn edit(target: &str, version: i64, old: &str, new: &str) -> Value {
    json!({"target_file_id": target, "expected_target_version": version, "intent": "http feed",
           "edits": [{"match": old, "replace": new}]})
}

async fn submit(c: &Client, target: &str, version: i64, old: &str, new: &str) {
    let r = call(
        c,
        "patchdiff_submit_edits",
        &edit(target, version, old, new),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
}

/// An update of `target` on stream `id`, within [`BOUND`]; how long it took.
fn expect_update(s: &ListenStream, id: &Value, target: &str, since: Instant) -> Duration {
    let n = s
        .next(BOUND)
        .unwrap_or_else(|| panic!("no update of {target} within {BOUND:?}"));
    let took = since.elapsed();
    assert_eq!(n["method"], "notifications/resources/updated", "{n}");
    assert_eq!(n["params"]["uri"], uri(target), "{n}");
    assert_eq!(&n["params"]["_meta"][ID_KEY], id, "{n}");
    took
}

fn expect_quiet(s: &ListenStream, what: &str) {
    if let Some(n) = s.next(QUIET) {
        panic!("announced {what}: {n}");
    }
}

/// Item 2 over HTTP: acknowledgment, an update per commit of another session within a bound,
/// none for a rollback, none of another tenant's target, none once the grant is revoked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_over_http_announces_commits_the_tokens_role_may_see() {
    let (alice, bob) = (unique("sse_alice"), unique("sse_bob"));
    tenant_roles(&[&alice, &bob]).await;
    let (a, b) = (as_role(&alice).await, as_role(&bob).await);
    let mine = initialize_target(&a, "sse-mine.md", "one two\n")
        .await
        .unwrap();
    let secret = initialize_target(&b, "sse-secret.md", "b b b\n")
        .await
        .unwrap();
    let shared = initialize_target(&b, "sse-shared.md", "s s s\n")
        .await
        .unwrap();
    patchdiff_tests::share_read(&b, &shared, &alice, true).await;
    let token = "sse-alice-token-0123456789";
    let e = Endpoint::start("extended", &[(token, &alice)], &[]);
    let (status, d) = e.post(token, MODERN, "server/discover", json!({}));
    assert_eq!(status, 200, "{d}");
    assert_eq!(
        d["result"]["capabilities"]["resources"],
        json!({"subscribe": true}),
        "{d}"
    );

    let id = json!("alice-1");
    let s = e
        .listen(token, id.clone(), &[&mine, &shared, &secret, "not-a-uuid"])
        .expect("a stream");
    assert!(
        s.headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "text/event-stream"),
        "{:?}",
        s.headers
    );
    let ack = s.next(BOUND).expect("the acknowledgment");
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(&ack["params"]["_meta"][ID_KEY], &id, "{ack}");
    // Bob's secret (and the malformed URI) are left out, as unknown targets are.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [uri(&mine), uri(&shared)]}),
        "{ack}"
    );

    // A commit in another session: one update, within the bound.
    let t = Instant::now();
    submit(&a, &mine, 0, "one", "ONE").await;
    let took = expect_update(&s, &id, &mine, t);
    eprintln!("update after commit: {took:?}");
    // A rolled-back acceptance announces nothing (NOTIFY is delivered at COMMIT only). Through
    // a router the caller's transaction runs on the target's partition.
    let tx =
        patchdiff_tests::caller_transaction_client(&dsn(), &mine, connect(&dsn()).await.unwrap())
            .await;
    tx.batch_execute(&format!("SET ROLE {alice}; BEGIN"))
        .await
        .unwrap();
    let r = call(&tx, "patchdiff_submit_edits", &edit(&mine, 1, "two", "TWO"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    tx.batch_execute("ROLLBACK").await.unwrap();
    expect_quiet(&s, "a rolled-back acceptance");
    // Another tenant's target: nothing; a target shared with alice: announced.
    submit(&b, &secret, 0, "b b b", "b b").await;
    expect_quiet(&s, "another tenant's target");
    let t = Instant::now();
    submit(&b, &shared, 0, "s s s", "S").await;
    expect_update(&s, &id, &shared, t);
    // Revoked: checked as the token's role before each update, so silent from now on.
    patchdiff_tests::share_read(&b, &shared, &alice, false).await;
    submit(&b, &shared, 1, "S", "s").await;
    expect_quiet(&s, "a target whose grant was revoked");
    // ... while its own target is still heard.
    let t = Instant::now();
    submit(&a, &mine, 1, "two", "2").await;
    expect_update(&s, &id, &mine, t);
}

/// A raw connection to `e` that has sent a 2026-07-28 `subscriptions/listen` (`id`, watching
/// `target`, as [`SU_TOKEN`]) and reads nothing: its client hangs up when it is dropped.
fn raw_listen(e: &Endpoint, target: &str, id: i64) -> std::net::TcpStream {
    use std::io::Write;
    let (host, path) = e
        .url
        .strip_prefix("http://")
        .and_then(|r| r.split_once('/'))
        .expect("an http:// URL with a path");
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                             "io.modelcontextprotocol/clientCapabilities": {}},
                   "notifications": {"resourceSubscriptions": [uri(target)]}}})
    .to_string();
    let mut socket = std::net::TcpStream::connect(host).unwrap();
    write!(
        socket,
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {SU_TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    socket
}

/// docs/http.md "Subscriptions" and "Cost": a listen whose client hangs up while its
/// acknowledgment's statement waits (here on a table lock an administrator holds) has that
/// statement cancelled, so its backend ends. Before, its connection was dropped and its permit
/// given back at once while the backend went on waiting, which does not notice its client's
/// close: 120 listens cut at 50 ms left 95 of the login's backends and filled the cluster's
/// connection slots (helper-119).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_cut_while_its_acknowledgment_waits_leaves_no_backend() {
    if patchdiff_tests::not_through_a_router(&dsn(), "it holds a table lock on one server").await {
        return;
    }
    let (su, target) = superuser_target("http-feed-cut-lock.md", "one\n").await;
    let e = Endpoint::start(
        "extended",
        &[(SU_TOKEN, "postgres")],
        &["--connections", "2"],
    );
    let holder = patchdiff_tests::connect(&dsn()).await.unwrap();
    holder
        .batch_execute("BEGIN; LOCK TABLE patchdiff.targets IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let app = e.app.clone();
    let waiting = || {
        let (su, app) = (&su, &app);
        async move {
            su.query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 \
                 AND wait_event_type = 'Lock'",
                &[app],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    for n in 0..6 {
        let socket = raw_listen(&e, &target, n);
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(socket);
    }
    patchdiff_tests::eventually(
        "no backend of the endpoint still waits on the lock",
        Duration::from_secs(5),
        Duration::from_millis(50),
        || async { waiting().await == 0 },
    )
    .await;
    holder.batch_execute("ROLLBACK").await.unwrap();
    // The endpoint serves again.
    let (status, body) = e.post(
        SU_TOKEN,
        "2025-11-25",
        "tools/call",
        json!({"name": "patchdiff_read_target", "arguments": {"target_file_id": target}}),
    );
    assert_eq!(status, 200, "{body}");
}

/// docs/http.md "Subscriptions" and "Cost": a listen whose client hangs up before it is
/// acknowledged stops there, holding no pooled connection and starting no listening session.
/// Here the feed's key is held by another session, so each acknowledgment would take 2 s (the
/// wait of a registration): helper-111 found that streams closed by their clients ran on, one
/// after another, each holding a connection of the role's share, so the role's next calls were
/// answered 503, and listening sessions went on starting for tens of seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_whose_client_hangs_up_before_its_acknowledgment_holds_nothing() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "it holds the feed's key in the database the endpoint listens on",
    )
    .await
    {
        return;
    }
    let (su, target) = superuser_target("http-feed-hung-up.md", "one\n").await;
    let holder = patchdiff_tests::holding_the_feed_key(&dsn()).await;
    let e = Endpoint::start(
        "extended",
        &[(SU_TOKEN, "postgres")],
        &["--connections", "2"],
    );
    for n in 0..20 {
        let socket = raw_listen(&e, &target, n);
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(socket);
    }
    // A call of the same role is served at once (it was 503 after --queue-ms, 5 s).
    let started = Instant::now();
    let (status, body) = e.post(
        SU_TOKEN,
        "2025-11-25",
        "tools/call",
        json!({"name": "patchdiff_read_target", "arguments": {"target_file_id": target}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["result"]["structuredContent"]["text"], "one\n",
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the call waited {:?} for a connection",
        started.elapsed()
    );
    // No listening session is started for the streams that are gone.
    let app = e.app.clone();
    let starting = || {
        let (su, app) = (&su, &app);
        async move {
            su.query_one(
                "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 \
                 AND strpos(query, 'advisory_lock') > 0 AND state = 'active'",
                &[app],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
        }
    };
    patchdiff_tests::eventually(
        "no listening session registers for streams that are gone",
        Duration::from_secs(3),
        Duration::from_millis(50),
        || async { starting().await == 0 },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        starting().await,
        0,
        "a listening session registered after its streams were gone"
    );
    drop(holder);
}

/// Item 2 bounds over HTTP (docs/http.md "Subscriptions"): an open stream keeps the endpoint's
/// LISTEN sessions open; beyond `--max-streams-per-role` a listen is refused 429 and beyond `--max-streams` 503, both
/// with a JSON-RPC error and nothing held; closing a connection releases its session at once;
/// an `Accept` without `text/event-stream` is refused 406; SIGTERM ends a stream with its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_released_on_close_and_ended_by_sigterm() {
    let (_su, target) = superuser_target("sse-caps.md", "caps\n").await;
    let token = SU_TOKEN;

    // Per role: 1.
    let e = Endpoint::start(
        "extended",
        &[(token, "postgres")],
        &["--max-streams-per-role", "1"],
    );
    let first = e.listen(token, json!(1), &[&target]).expect("a stream");
    assert_eq!(
        first.next(BOUND).expect("the acknowledgment")["method"],
        "notifications/subscriptions/acknowledged"
    );
    let per = per_endpoint().await;
    assert_eq!(e.await_listening_sessions(per).await, per);
    let Err((status, refused)) = e.listen(token, json!(2), &[&target]) else {
        panic!("a second stream of the role was served");
    };
    assert_eq!(status, 429, "{refused}");
    assert_eq!(refused["id"], 2, "{refused}");
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-streams-per-role"),
        "{refused}"
    );
    // Nothing held by the refusal.
    assert_eq!(e.listening_sessions().await, per);
    // Closing the connection ends the stream, and with the last stream the endpoint's LISTEN
    // sessions, at once; the place is free.
    first.close();
    assert_eq!(e.await_listening_sessions(0).await, 0);
    let again = e
        .listen(token, json!(3), &[&target])
        .expect("a stream after the close");
    assert!(again.next(BOUND).is_some());
    again.close();
    assert_eq!(e.await_listening_sessions(0).await, 0);
    // Accept must allow the SSE response.
    let Err((status, refused)) = ListenRequest {
        url: &e.url,
        token,
        accept: Some("application/json"),
        id: json!(4),
        resource_subscriptions: &[uri(&target)],
    }
    .open() else {
        panic!("a stream without text/event-stream in Accept");
    };
    assert_eq!(
        (status, &refused["error"]["code"]),
        (406, &json!(-32600)),
        "{refused}"
    );
    drop(e);

    // In all: 1, and SIGTERM.
    let mut e = Endpoint::start("extended", &[(token, "postgres")], &["--max-streams", "1"]);
    let s = e.listen(token, json!("x"), &[&target]).expect("a stream");
    assert!(s.next(BOUND).is_some());
    let Err((status, refused)) = e.listen(token, json!("y"), &[&target]) else {
        panic!("a stream over the server's cap was served");
    };
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-streams"),
        "{refused}"
    );
    assert_eq!(e.listening_sessions().await, per);
    let ok = Command::new("kill")
        .args(["-TERM", &e.served.child.id().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -TERM");
    let end = s.next(BOUND).expect("the stream's last message");
    assert_eq!(end["id"], "x", "{end}");
    assert_eq!(end["result"]["_meta"][ID_KEY], "x", "{end}");
    assert!(s.next(BOUND).is_none(), "the stream did not end");
    let deadline = Instant::now() + Duration::from_secs(10);
    while e.served.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(e.served.child.try_wait().unwrap().unwrap().success());
    assert_eq!(e.await_listening_sessions(0).await, 0);
}

/// Item 2 bounds over HTTP (docs/http.md "Subscriptions"): the endpoint's streams share its
/// LISTEN sessions (one per database), so that a writer's commit signals one listening backend
/// however many streams are open; each stream still hears only its own targets; the sessions
/// close with the last stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_share_the_endpoints_listening_sessions() {
    let (su, a) = superuser_target("sse-share-a.md", "a0\n").await;
    let b = initialize_target(&su, "sse-share-b.md", "b0\n")
        .await
        .unwrap();
    let e = Endpoint::start("extended", &[(SU_TOKEN, "postgres")], &[]);
    let per = per_endpoint().await;
    let mut streams = Vec::new();
    for (k, target) in [&a, &a, &b, &b, &b].into_iter().enumerate() {
        let id = json!(format!("share-{k}"));
        let s = e.listen(SU_TOKEN, id.clone(), &[target]).expect("a stream");
        let ack = s.next(BOUND).expect("the acknowledgment");
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        streams.push((id, target.clone(), s));
    }
    assert_eq!(
        e.await_listening_sessions(per).await,
        per,
        "five streams, shared sessions"
    );
    let t = Instant::now();
    submit(&su, &a, 0, "a0", "a1").await;
    for (id, target, s) in &streams {
        if *target == a {
            expect_update(s, id, &a, t);
        }
    }
    for (_, target, s) in &streams {
        if *target == b {
            expect_quiet(s, "another target's commit");
        }
    }
    let t = Instant::now();
    submit(&su, &b, 0, "b0", "b1").await;
    for (id, target, s) in &streams {
        if *target == b {
            expect_update(s, id, &b, t);
        }
    }
    // Closing all but one keeps the sessions for it; closing the last closes them.
    let (last_id, _, last) = streams.pop().unwrap();
    for (_, _, s) in streams {
        s.close();
    }
    std::thread::sleep(QUIET);
    assert_eq!(e.listening_sessions().await, per);
    let t = Instant::now();
    submit(&su, &b, 1, "b1", "b2").await;
    expect_update(&last, &last_id, &b, t);
    last.close();
    assert_eq!(e.await_listening_sessions(0).await, 0);
}

/// Item 2 over HTTP, a lost listening session: as over stdio, it reconnects and the stream is
/// told that its targets may have changed (an update of each), then hears commits again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_session_reconnects_and_resyncs_the_stream() {
    let (su, target) = superuser_target("sse-lost.md", "lost\n").await;
    let id = json!("lost");
    let (e, s) = acknowledged_stream(&target, id.clone());
    let per = per_endpoint().await;
    assert_eq!(e.await_listening_sessions(per).await, per);
    let ended = e
        .on_listening_sessions("count(pg_terminate_backend(pid))")
        .await;
    assert_eq!(ended, per);
    // The resync: nothing was committed, but the gap might have hidden a change.
    expect_update(&s, &id, &target, Instant::now());
    assert_eq!(e.await_listening_sessions(per).await, per);
    let t = Instant::now();
    submit(&su, &target, 0, "lost", "found").await;
    expect_update(&s, &id, &target, t);
}

/// Item 2 bounds over HTTP: an idle stream gets an SSE comment every 15 s (so a client that
/// vanished is noticed when a write fails, and a proxy keeps the stream open), and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_streams_get_a_keep_alive_comment_every_15_s() {
    let (_su, target) = superuser_target("sse-idle.md", "idle\n").await;
    let (_e, s) = acknowledged_stream(&target, json!(1));
    let comments = || s.comments.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(comments(), 0);
    assert!(s.next(Duration::from_secs(14)).is_none());
    assert_eq!(comments(), 0, "a keep-alive before 15 s");
    let deadline = Instant::now() + Duration::from_secs(5);
    while comments() == 0 {
        assert!(Instant::now() < deadline, "no keep-alive within 19 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        s.next(Duration::from_millis(100)).is_none(),
        "a message with it"
    );
}

/// Item 2 and the contract over HTTP: the six contract profiles answer `subscriptions/listen`
/// and `server/discover` as before (no resources), and the legacy eras' subscriptions, which
/// need an HTTP session, stay refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_profiles_and_legacy_eras_still_refuse_to_subscribe_over_http() {
    let (_su, target) = superuser_target("sse-contract.md", "c\n").await;
    let token = SU_TOKEN;
    for profile in ["full", "editor", "observed_v2"] {
        let e = Endpoint::start(profile, &[(token, "postgres")], &[]);
        let (_, d) = e.post(token, MODERN, "server/discover", json!({}));
        assert_eq!(d["result"]["capabilities"], json!({"tools": {}}), "{d}");
        let Err((status, r)) = e.listen(token, json!(1), &[&target]) else {
            panic!("the {profile} profile served a listen stream");
        };
        assert_eq!((status, &r["error"]["code"]), (404, &json!(-32601)), "{r}");
        assert_eq!(e.listening_sessions().await, 0);
    }
    let e = Endpoint::start("extended", &[(token, "postgres")], &[]);
    let (_, init) = e.post(
        token,
        "2025-11-25",
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(
        init["result"]["capabilities"]["resources"],
        json!({"subscribe": false, "listChanged": false}),
        "{init}"
    );
    let (status, r) = e.post(
        token,
        "2025-11-25",
        "resources/subscribe",
        json!({"uri": uri(&target)}),
    );
    assert_eq!((status, &r["error"]["code"]), (200, &json!(-32601)), "{r}");
    let m = r["error"]["message"].as_str().unwrap();
    assert!(
        m.contains("Mcp-Session-Id") && m.contains("subscriptions/listen"),
        "{r}"
    );
}
