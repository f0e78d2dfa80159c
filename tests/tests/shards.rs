//! Issue 20: pg_patchdiff sharded by target behind a PL/Proxy router (docs/scale-out.md), on
//! real clusters started by `bash scripts/shards.sh up N`: new targets live on the partition
//! their IDs route to, every call answers through the router as a shard answers it (through
//! the real `patchdiff-mcp` too), the list of targets is merged from every partition in order,
//! tenancy holds, and a shard that is down makes only its own targets unavailable, with a clear
//! retryable error, until it is back.
//!
//! Environment: `PATCHDIFF_ROUTER_DSN` (the router, as `shards.sh up` prints it),
//! `PATCHDIFF_SHARDS_DIR` (default /tmp/patchdiff-shards, to stop and start a shard),
//! `PATCHDIFF_TEST_DSN` (a database with pg_patchdiff, to compare answers with), and
//! `PATCHDIFF_MCP_BIN`.

use patchdiff_tests::stdio::{Pipes, mcp_bin};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_postgres::{Client, NoTls};

/// Tests take this for reading; the one that stops a shard takes it for writing.
static SHARDS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

fn router_dsn() -> String {
    std::env::var("PATCHDIFF_ROUTER_DSN")
        .expect("PATCHDIFF_ROUTER_DSN must name the router (bash scripts/shards.sh up 2 prints it)")
}

fn shards_dir() -> String {
    std::env::var("PATCHDIFF_SHARDS_DIR").unwrap_or_else(|_| "/tmp/patchdiff-shards".into())
}

async fn connect(dsn: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(dsn, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {dsn}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    c
}

/// The deployment as the router's configuration describes it.
struct Layout {
    /// The connection string of each partition (as the postgres superuser).
    partitions: Vec<String>,
    /// How many shard clusters there are (shards.sh: partition p on shard p mod n).
    shards: usize,
}

async fn layout(router: &Client) -> Layout {
    let row = router
        .query_one(
            "SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'patchdiff'",
            &[],
        )
        .await
        .unwrap();
    let options: Vec<String> = row.get(0);
    let mut partitions: Vec<(usize, String)> = options
        .iter()
        .filter_map(|o| {
            let (k, v) = o.split_once('=')?;
            let p: usize = k.strip_prefix('p')?.parse().ok()?;
            Some((p, format!("{} user=postgres", patchdiff_tests::direct(v))))
        })
        .collect();
    partitions.sort();
    let text = std::fs::read_to_string(format!("{}/shards", shards_dir())).unwrap();
    let shards = text.split_whitespace().next().unwrap().parse().unwrap();
    Layout {
        partitions: partitions.into_iter().map(|(_, d)| d).collect(),
        shards,
    }
}

/// The partition of a target ID: its first 32 bits masked by the partition count.
fn partition_of(id: &str, count: usize) -> usize {
    u32::from_str_radix(&id[..8], 16).unwrap() as usize & (count - 1)
}

async fn call(c: &Client, function: &str, args: &Value) -> Value {
    let row = c
        .query_one(
            &format!("SELECT {function}($1::text::json)::text"),
            &[&args.to_string()],
        )
        .await
        .unwrap_or_else(|e| panic!("{function}: {e:?}"));
    serde_json::from_str(&row.get::<_, String>(0)).unwrap()
}

/// A call with arguments given as JSON text, exactly as written.
async fn raw_call(c: &Client, function: &str, args: &str) -> Value {
    let row = c
        .query_one(
            &format!("SELECT {function}($1::text::json)::text"),
            &[&args],
        )
        .await
        .unwrap_or_else(|e| panic!("{function} {args}: {e}"));
    serde_json::from_str(&row.get::<_, String>(0)).unwrap()
}

async fn create(c: &Client, filename: &str, content: &str) -> String {
    let r = call(
        c,
        "patchdiff_initialize_target",
        &json!({"filename": filename, "content": content}),
    )
    .await;
    assert_eq!(r["status"], "ok", "{r}");
    r["target_file_id"].as_str().unwrap().to_owned()
}

/// A role of this test on the router and on every shard cluster (roles are per cluster).
async fn role_everywhere(layout: &Layout, name: &str) -> String {
    let mut dsns: Vec<String> = vec![router_dsn().replace("dbname=patchdiff", "dbname=postgres")];
    dsns.extend(layout.partitions.iter().map(|d| {
        let mut d = d.clone();
        let db = d
            .split_whitespace()
            .find(|w| w.starts_with("dbname="))
            .unwrap()
            .to_owned();
        d = d.replace(&db, "dbname=postgres");
        d
    }));
    for dsn in BTreeSet::<String>::from_iter(dsns) {
        let c = connect(&dsn).await;
        c.batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ))
        .await
        .unwrap();
    }
    router_dsn().replace("user=postgres", &format!("user={name}"))
}

/// docs/scale-out.md "Target IDs": every new target is created on the partition its ID routes
/// to, and only there; creations spread over the shards.
#[tokio::test]
async fn new_targets_live_where_their_ids_route() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let n = layout.partitions.len();
    let mut shards_used = BTreeSet::new();
    for i in 0..24 {
        let id = create(&router, &format!("route-{i}.md"), "x\n").await;
        let p = partition_of(&id, n);
        shards_used.insert(p % layout.shards);
        for (q, dsn) in layout.partitions.iter().enumerate() {
            let c = connect(dsn).await;
            let here = c
                .query_one(
                    "SELECT count(*) FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
                    &[&id],
                )
                .await
                .unwrap()
                .get::<_, i64>(0);
            assert_eq!(
                here,
                i64::from(q == p),
                "{id} on partition {q} (routes to {p})"
            );
        }
        let read = call(
            &router,
            "patchdiff_read_target",
            &json!({"target_file_id": id}),
        )
        .await;
        assert_eq!(read["text"], "x\n", "{read}");
    }
    assert_eq!(
        shards_used.len(),
        layout.shards,
        "24 new targets used only shards {shards_used:?}"
    );
    // Settings that do not fit together stop the creation before anything is written.
    // Counted by a name only this check uses: the other tests create targets meanwhile.
    let bad = format!("{}.md", patchdiff_tests::roles::unique("bad"));
    let shard = connect(&layout.partitions[0]).await;
    let count = "SELECT count(*) FROM patchdiff.targets WHERE filename = $1";
    let before: i64 = shard.query_one(count, &[&bad]).await.unwrap().get(0);
    for (p, n) in [(3, 48), (8, 8), (0, 0)] {
        let e = shard
            .batch_execute(&format!(
                "SET patchdiff.target_partition = {p}; SET patchdiff.target_partitions = {n}; \
                 SELECT patchdiff_initialize_target('{{\"filename\": \"{bad}\", \"content\": \"x\"}}')"
            ))
            .await;
        let e = e.expect_err("a creation under settings that do not fit");
        let msg = e
            .as_db_error()
            .map(|d| d.message().to_owned())
            .unwrap_or_default();
        assert!(msg.contains("patchdiff.target_partition"), "{p}/{n}: {e}");
    }
    shard
        .batch_execute("RESET patchdiff.target_partition; RESET patchdiff.target_partitions")
        .await
        .unwrap();
    let after: i64 = shard.query_one(count, &[&bad]).await.unwrap().get(0);
    assert_eq!((before, after), (0, 0), "nothing written");
}

/// A running `patchdiff-mcp` on `dsn`, after initialize.
fn mcp(dsn: &str) -> Pipes {
    let mut cmd = Command::new(mcp_bin());
    cmd.env("PATCHDIFF_DATABASE_URL", dsn)
        .env("PATCHDIFF_MCP_PROFILE", "full")
        .stderr(Stdio::null());
    let mut p = Pipes::spawn(cmd);
    p.send(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}\n");
    p.line(Duration::from_secs(20)).expect("initialize");
    p
}

fn tool(p: &mut Pipes, name: &str, arguments: Value) -> Value {
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    p.send(format!("{line}\n").as_bytes());
    let r: Value = serde_json::from_slice(&p.line(Duration::from_secs(20)).unwrap()).unwrap();
    let text = r["result"]["content"][0]["text"].as_str();
    serde_json::from_str(text.unwrap_or_else(|| panic!("{name}: {r}"))).unwrap()
}

fn list(p: &mut Pipes) -> Value {
    p.send(b"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n");
    serde_json::from_slice(&p.line(Duration::from_secs(20)).unwrap()).unwrap()
}

/// Ids, times and what derives from them differ between two runs of the same calls; sequences
/// are per database (per partition through the router: the contract lets them have gaps).
fn masked(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match v {
                        Value::String(_)
                            if k.ends_with("_id")
                                || k.ends_with("_at")
                                || k == "request_fingerprint" =>
                        {
                            json!("*")
                        }
                        Value::Number(_) if k.ends_with("_sequence") => json!("*"),
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

/// Issue 20 goal "Nothing in the contract changes through it": the real `patchdiff-mcp` lists
/// the same tools on the router as on a database with pg_patchdiff, and the contract's
/// `alpha beta alpha` sequence (ambiguity, selection, stale guard, keyed resend, read, SAVE,
/// history pages, replay) answers the same, ids and times aside.
#[tokio::test]
async fn the_contract_answers_the_same_through_the_router() {
    let _turn = SHARDS.read().await;
    let plain = std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN");
    let mut answers = Vec::new();
    for dsn in [router_dsn(), plain] {
        let mut p = mcp(&dsn);
        let tools = list(&mut p)["result"]["tools"].clone();
        let init = tool(
            &mut p,
            "patchdiff_initialize_target",
            json!({"filename": "a.md", "content": "alpha beta alpha\n"}),
        );
        let t = init["target_file_id"].as_str().unwrap().to_owned();
        let edit = |m: &str, occurrence: Option<i64>, version: i64, key: &str| {
            let mut e = json!({"match": m, "replace": "gamma"});
            if let Some(o) = occurrence {
                e["occurrence_index"] = json!(o);
            }
            json!({"target_file_id": t, "intent": "rename", "expected_target_version": version,
                   "client_request_id": key, "edits": [e]})
        };
        let mut seq = vec![init.clone()];
        seq.push(tool(
            &mut p,
            "patchdiff_submit_edits",
            edit("alpha", None, 0, "k1"),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_submit_edits",
            edit("alpha", Some(2), 0, "k2"),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_submit_edits",
            edit("alpha", Some(2), 0, "k2"),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_submit_edits",
            edit("beta", None, 0, "k3"),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_read_target",
            json!({"target_file_id": t}),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_save",
            json!({"target_file_id": t, "expected_target_version": 1}),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_get_pdcp_log",
            json!({"target_file_id": t}),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_get_manifest_ledger",
            json!({"target_file_id": t}),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_replay",
            json!({"target_file_id": t}),
        ));
        seq.push(tool(
            &mut p,
            "patchdiff_read_target",
            json!({"target_file_id": "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69"}),
        ));
        assert_eq!(seq[2]["status"], "accepted", "{}", seq[2]);
        assert_eq!(seq[3]["deduplicated"], true, "{}", seq[3]);
        assert_eq!(seq[9]["materialized_state_matches"], true, "{}", seq[9]);
        answers.push((tools, seq.iter().map(masked).collect::<Vec<_>>()));
    }
    assert_eq!(
        answers[0].0, answers[1].0,
        "tools/list differs through the router"
    );
    for (i, (a, b)) in answers[0].1.iter().zip(&answers[1].1).enumerate() {
        assert_eq!(a, b, "answer {i} differs through the router");
    }
}

/// docs/scale-out.md "Calls across targets": patchdiff_list_targets pages through the targets of
/// every partition, newest first, each exactly once, as one database would list them.
#[tokio::test]
async fn the_list_of_targets_is_merged_from_every_partition() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let lister = patchdiff_tests::roles::unique("shards_lister");
    let dsn = role_everywhere(&layout, &lister).await;
    let me = connect(&dsn).await;
    let mut made = Vec::new();
    for i in 0..11 {
        made.push(create(&me, &format!("list-{i}.md"), "x\n").await);
    }
    let mut seen: Vec<Value> = Vec::new();
    let mut cursor = Value::Null;
    loop {
        let page = call(
            &me,
            "patchdiff_list_targets",
            &json!({"limit": 3, "cursor": cursor}),
        )
        .await;
        assert_eq!(page["status"], "ok", "{page}");
        let targets = page["targets"].as_array().unwrap();
        assert!(targets.len() <= 3);
        assert_eq!(page["count"], targets.len());
        seen.extend(targets.iter().cloned());
        cursor = page["next_cursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    let ids: Vec<&str> = seen
        .iter()
        .map(|t| t["target_file_id"].as_str().unwrap())
        .collect();
    let mut expected = made.clone();
    expected.reverse();
    assert_eq!(ids, expected, "newest first, each once");
    // The same list, page by page, as each partition answers it directly, merged by hand.
    let mut direct: Vec<(String, String)> = Vec::new();
    for d in &layout.partitions {
        let c = connect(&d.replace("user=postgres", &format!("user={lister}"))).await;
        let page = call(&c, "patchdiff_list_targets", &json!({"limit": 500})).await;
        for t in page["targets"].as_array().unwrap() {
            direct.push((
                t["created_at"].as_str().unwrap().to_owned(),
                t["target_file_id"].as_str().unwrap().to_owned(),
            ));
        }
    }
    direct.sort();
    direct.reverse();
    let direct: Vec<&str> = direct.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids, direct);
    // A refusal is the shards' own.
    let bad = call(&me, "patchdiff_list_targets", &json!({"limit": 0})).await;
    assert_eq!(bad["code"], "invalid_limit", "{bad}");
}

/// docs/security.md through the router: each call reaches its shard as the calling role, so a
/// role sees and changes only what it may on the shard (another role's target answers like an
/// unknown one), SET ROLE included.
#[tokio::test]
async fn tenancy_holds_through_the_router() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let (alice_role, bob_role) = (
        patchdiff_tests::roles::unique("shards_alice"),
        patchdiff_tests::roles::unique("shards_bob"),
    );
    let alice = connect(&role_everywhere(&layout, &alice_role).await).await;
    let bob_dsn = role_everywhere(&layout, &bob_role).await;
    let bob = connect(&bob_dsn).await;
    let id = create(&alice, "secret.md", "alpha\n").await;
    let mine = call(
        &alice,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    assert_eq!(mine["text"], "alpha\n");
    let theirs = call(
        &bob,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    let unknown = call(
        &bob,
        "patchdiff_read_target",
        &json!({"target_file_id": "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69"}),
    )
    .await;
    const UNKNOWN: &str = "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69";
    assert_eq!(
        theirs.to_string().replace(&id, UNKNOWN),
        unknown.to_string()
    );
    let listed = call(&bob, "patchdiff_list_targets", &json!({"limit": 500})).await;
    assert!(!listed.to_string().contains(&id));
    // SET ROLE on the router is the role the shard sees.
    router
        .batch_execute(&format!("SET ROLE {bob_role}"))
        .await
        .unwrap();
    let as_bob = call(
        &router,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    router.batch_execute("RESET ROLE").await.unwrap();
    assert_eq!(as_bob["status"], theirs["status"], "{as_bob}");
    let granted = call(
        &alice,
        "patchdiff_grant",
        &json!({"target_file_id": id, "role": bob_role, "privilege": "read"}),
    )
    .await;
    assert_eq!(granted["status"], "ok", "{granted}");
    let now = call(
        &bob,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    assert_eq!(now["text"], "alpha\n", "{now}");
    // PL/Proxy reaches the shards as the user of the caller's user mapping, and PostgreSQL lets
    // a role that may use the server make its own: bob could have named postgres, or alice, and
    // read her target (helper-45). Only a superuser may change mappings in the router database.
    for ddl in [
        format!("CREATE USER MAPPING FOR {bob_role} SERVER patchdiff OPTIONS (user 'postgres')"),
        format!(
            "CREATE USER MAPPING FOR CURRENT_USER SERVER patchdiff OPTIONS (user '{alice_role}')"
        ),
        format!("ALTER USER MAPPING FOR {bob_role} SERVER patchdiff OPTIONS (ADD user 'postgres')"),
        format!("DROP USER MAPPING IF EXISTS FOR {bob_role} SERVER patchdiff"),
        // It drops the role's mappings too (helper-47).
        "DROP OWNED BY CURRENT_USER".to_owned(),
    ] {
        let e = bob.batch_execute(&ddl).await.expect_err(&ddl);
        assert_eq!(
            e.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{ddl}: {e:?}"
        );
        assert!(
            e.as_db_error()
                .is_some_and(|d| d.message().contains("only a superuser may")),
            "{ddl}: {e:?}"
        );
    }
    // A role whose type of its own named `bool` comes first on its search_path still sends a
    // boolean: strict_mode() is inlined into the caller's expression (helper-47).
    bob.batch_execute(
        "CREATE DOMAIN pg_temp.bool AS text; SET search_path = pg_temp, pg_catalog; \
         SET patchdiff.strict_observation_mode = garbage",
    )
    .await
    .unwrap();
    let e = bob
        .query_one("SELECT patchdiff_router.strict_mode()", &[])
        .await
        .expect_err("not a boolean");
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_TEXT_REPRESENTATION),
        "{e:?}"
    );
    let mappings: i64 = router
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_user_mappings WHERE srvname = 'patchdiff' AND usename <> 'public'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(mappings, 0, "no role has a mapping of its own");
}

/// Starts a stopped shard again when dropped, whatever the test did in between.
struct Restart {
    dir: String,
    port: String,
}

impl Drop for Restart {
    fn drop(&mut self) {
        let dir = &self.dir;
        pg_ctl(&[
            "-D",
            dir,
            "-l",
            &format!("{dir}/server.log"),
            "-w",
            "-o",
            &format!("-p {} -k {dir} -c listen_addresses=127.0.0.1", self.port),
            "start",
        ]);
    }
}

/// Stops shard cluster 1 (partition 1 lives there); it starts again when the result is dropped.
fn stop_shard_1(layout: &Layout) -> Restart {
    let dir = format!("{}/shard1", shards_dir());
    let port = layout.partitions[1]
        .split_whitespace()
        .find_map(|w| w.strip_prefix("port="))
        .unwrap()
        .to_owned();
    pg_ctl(&["-D", &dir, "-m", "fast", "stop"]);
    Restart { dir, port }
}

/// `pg_ctl` as postgres. The server it starts must not inherit this process's descriptors
/// above 2 (a caller's `flock` on a lock file would stay held for the server's whole life), so
/// they are closed first, as scripts/lib.sh's start_cluster does.
fn pg_ctl(args: &[&str]) {
    let ok = Command::new("bash")
        .args([
            "-c",
            r#"for fd in $(ls /proc/$$/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
               exec runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl "$@""#,
            "pg_ctl",
        ])
        .args(args)
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "pg_ctl {args:?}");
}

/// Issue 20 item 2: with one shard down, its targets get a clear, retryable error naming their
/// partition (SQLSTATE 08001 over SQL; status `unavailable` over MCP, never `outcome_unknown`),
/// nothing is written, every other target keeps working, new targets go to the shards that are
/// up, and once the shard is back its targets answer again with no restart of the router or of
/// patchdiff-mcp.
#[tokio::test]
async fn a_shard_that_is_down_makes_only_its_targets_unavailable() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    assert!(layout.shards >= 2, "this test needs two shards at least");
    let n = layout.partitions.len();
    // A target on shard 1 and one on shard 0.
    let (mut down_id, mut up_id) = (None, None);
    while down_id.is_none() || up_id.is_none() {
        let id = create(&router, "down.md", "alpha\n").await;
        match partition_of(&id, n) % layout.shards {
            1 => down_id = Some(id),
            0 => up_id = Some(id),
            _ => {}
        }
    }
    let (down_id, up_id) = (down_id.unwrap(), up_id.unwrap());
    let down_partition = partition_of(&down_id, n);
    let mut m = mcp(&router_dsn());
    // Open the router's connections to every partition first (the list runs on all of them),
    // and patchdiff-mcp's to both targets' partitions: when the shard stops, these are the
    // connections it closes under the router, which calls must survive (CI found one).
    let listed = call(&router, "patchdiff_list_targets", &json!({"limit": 1})).await;
    assert_eq!(listed["status"], "ok", "{listed}");
    for id in [&down_id, &up_id] {
        assert_eq!(
            tool(
                &mut m,
                "patchdiff_read_target",
                json!({"target_file_id": id})
            )["status"],
            "ok"
        );
    }
    let restart = stop_shard_1(&layout);
    // The router's connection to the partition was open when the shard stopped: a keyed write
    // (safe to send again) is tried once more, which finds the shard unavailable.
    let e = router
        .query_one(
            "SELECT patchdiff_submit_edits($1::text::json)::text",
            &[
                &json!({"target_file_id": down_id, "intent": "x", "expected_target_version": 0,
                      "client_request_id": "while-down",
                      "edits": [{"match": "alpha", "replace": "beta"}]})
                .to_string(),
            ],
        )
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "08001", "{db:?}");
    assert!(
        db.message().starts_with(&format!(
            "patchdiff: partition {down_partition} is unavailable"
        )),
        "{}",
        db.message()
    );
    let over_mcp = tool(
        &mut m,
        "patchdiff_read_target",
        json!({"target_file_id": down_id}),
    );
    assert_eq!(
        (
            &over_mcp["status"],
            &over_mcp["retryable"],
            &over_mcp["nothing_written"]
        ),
        (&json!("unavailable"), &json!(true), &json!(true)),
        "{over_mcp}"
    );
    let fine = tool(
        &mut m,
        "patchdiff_read_target",
        json!({"target_file_id": up_id}),
    );
    assert_eq!(fine["text"], "alpha\n", "{fine}");
    for i in 0..6 {
        let id = create(&router, &format!("while-down-{i}.md"), "x\n").await;
        assert_eq!(
            partition_of(&id, n) % layout.shards,
            0,
            "created on the shard that is down"
        );
    }
    // The list needs every partition: it names the one it could not reach.
    let e = router
        .query_one("SELECT patchdiff_list_targets('{}')::text", &[])
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "08001", "{db:?}");
    assert!(db.message().contains("is unavailable"), "{}", db.message());
    drop(restart);
    // Back: the same patchdiff-mcp and router serve the shard's targets; nothing was written.
    let back = tool(
        &mut m,
        "patchdiff_read_target",
        json!({"target_file_id": down_id}),
    );
    assert_eq!(
        (&back["version"], &back["text"]),
        (&json!(0), &json!("alpha\n")),
        "{back}"
    );
}

/// docs/scale-out.md, "What differs through the router": a workspace publication runs on
/// patchdiff-mcp's own session on the target's partition. With that partition's shard down, the
/// SAVE answers `unavailable` (retryable, nothing written): the file and the target stay as they
/// were. Once the shard is back, the same process publishes.
#[tokio::test]
async fn a_publication_whose_shard_is_down_is_unavailable_and_writes_nothing() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let n = layout.partitions.len();
    let root = std::env::temp_dir().join(format!("patchdiff-shards-ws-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let key = root.with_extension("key");
    let mut cmd = Command::new(mcp_bin());
    cmd.env("PATCHDIFF_DATABASE_URL", router_dsn())
        .env("PATCHDIFF_MCP_PROFILE", "workspace")
        .env("PATCHDIFF_WORKSPACE_ROOT", &root)
        .env("PATCHDIFF_WORKSPACE_KEY_FILE", &key)
        .stderr(Stdio::null());
    let mut m = Pipes::spawn(cmd);
    m.send(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}\n");
    m.line(Duration::from_secs(20)).expect("initialize");
    // Files until one is bound on shard 1 (its nonce chooses the partition).
    let (name, id) = (0..64)
        .find_map(|i| {
            let name = format!("doc{i}.md");
            std::fs::write(root.join(&name), "alpha\n").unwrap();
            let t = tool(
                &mut m,
                "patchdiff_initialize_target",
                json!({"filename": name, "from_workspace": true}),
            );
            let id = t["target_file_id"].as_str().unwrap().to_owned();
            (partition_of(&id, n) % layout.shards == 1).then_some((name, id))
        })
        .expect("a file bound on shard 1");
    let edited = tool(
        &mut m,
        "patchdiff_submit_edits",
        json!({"target_file_id": id, "expected_target_version": 0, "intent": "x",
               "edits": [{"match": "alpha", "replace": "beta"}]}),
    );
    assert_eq!(edited["status"], "accepted", "{edited}");
    let restart = stop_shard_1(&layout);
    let save = json!({"target_file_id": id, "sync_workspace": true});
    let r = tool(&mut m, "patchdiff_save", save.clone());
    assert_eq!(
        (&r["status"], &r["retryable"], &r["nothing_written"]),
        (&json!("unavailable"), &json!(true), &json!(true)),
        "{r}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join(&name)).unwrap(),
        "alpha\n"
    );
    drop(restart);
    let r = tool(&mut m, "patchdiff_save", save);
    assert_eq!(r["status"], "saved", "{r}");
    assert_eq!(std::fs::read_to_string(root.join(&name)).unwrap(), "beta\n");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_file(&key);
}

/// Issue 20 with the hostile-input rule: arguments PostgreSQL's json operators cannot decode
/// (`\u0000`, lone surrogates, in any field, the target's ID included) never fail in the router;
/// they reach a shard, which answers them exactly as one database does (its audited rejection or
/// invalid_argument).
#[tokio::test]
async fn hostile_arguments_are_answered_as_one_database_answers_them() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let plain = connect(&std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN")).await;
    let on_router = create(&router, "hostile.md", "alpha beta\n").await;
    let on_plain = create(&plain, "hostile.md", "alpha beta\n").await;
    let cases: Vec<(&str, String)> = vec![
        ("patchdiff_read_target", r#"{"target_file_id":"\u0000"}"#.into()),
        ("patchdiff_read_target", r#"{"target_file_id":"\ud800"}"#.into()),
        ("patchdiff_save", r#"{"target_file_id":"TARGET","workspace_eol_format":"\u0000"}"#.into()),
        ("patchdiff_submit_edits", r#"{"target_file_id":"TARGET","intent":"\udc00x","expected_target_version":0,"edits":[{"match":"alpha","replace":"\u0000"}]}"#.into()),
        ("patchdiff_submit_edits", r#"{"target_file_id":"TARGET","intent":"x","expected_target_version":0,"client_request_id":"\ud83d","edits":[{"match":"alpha","replace":"b"}]}"#.into()),
        ("patchdiff_find_occurrences", r#"{"target_file_id":"TARGET","text":"\ud800\u0000"}"#.into()),
        ("patchdiff_list_targets", r#"{"filename_prefix":"\u0000"}"#.into()),
        ("patchdiff_initialize_target", r#"{"filename":"\ud800.md","content":"x"}"#.into()),
    ];
    for (function, args) in cases {
        let routed = raw_call(&router, function, &args.replace("TARGET", &on_router)).await;
        let direct = raw_call(&plain, function, &args.replace("TARGET", &on_plain)).await;
        assert_eq!(
            masked(&routed).to_string().replace(&on_router, "T"),
            masked(&direct).to_string().replace(&on_plain, "T"),
            "{function} {args}"
        );
    }
}

/// The router's copy of the arguments (sql/router/patchdiff_router.sql, `readable`): what it
/// routes by is read exactly as PostgreSQL's json operators decode it, whatever escapes the rest
/// holds. The oracle is the regular expression the copy was made with before (which cost about
/// 1.3-1.9 µs an escape, docs/benchmarks.md, "The router's copy of the arguments"): on texts mixing
/// every escape that matters here (`\u0000`, lone and paired surrogates in either case, Hangul
/// `\ud55c`, escaped backslashes before all of these, escaped hex digits and an escaped key),
/// both copies give the same target partition, key presence, `limit`, workspace nonce and
/// changeset members, and the router's own `partition_of` and `field` agree with the oracle.
/// And a string with none of the escapes the copy rewrites keeps its value exactly. Near misses
/// (`\\ud800`: an escaped backslash, then text) are among the hostile fragments: a copy that
/// took their second backslash for the start of an escape would not be JSON.
#[tokio::test]
async fn the_router_reads_what_it_routes_by_whatever_escapes_the_arguments_hold() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    router
        .batch_execute(
            &(patchdiff_tests::FORMER_ROUTER_READABLE_SQL.to_owned()
                + r#"
               CREATE FUNCTION pg_temp.facts(r json) RETURNS text LANGUAGE sql IMMUTABLE AS $$
                 SELECT concat_ws(' | ',
                   patchdiff_router.partition_of_id(CASE WHEN json_typeof(r->'target_file_id') = 'string'
                                                         THEN r->>'target_file_id' END),
                   json_typeof(r->'client_request_id') = 'string',
                   CASE WHEN json_typeof(r->'limit') = 'number' THEN r->>'limit' END,
                   CASE WHEN json_typeof(r->'workspace_binding'->'nonce') = 'string'
                             AND (r->'workspace_binding'->>'nonce') ~ '^[0-9a-f]{32}$'
                        THEN r->'workspace_binding'->>'nonce' END,
                   CASE WHEN json_typeof(r->'members') = 'array' THEN
                     (SELECT string_agg(coalesce(patchdiff_router.partition_of_id(
                                CASE WHEN json_typeof(m->'target_file_id') = 'string'
                                     THEN m->>'target_file_id' END)::text, '-'), ',')
                        FROM json_array_elements(r->'members') m) END)
               $$;"#),
        )
        .await
        .unwrap();
    // Fragments of JSON string text (each valid inside a string, alone or in any sequence).
    const HOSTILE: &[&str] = &[
        r"\u0000",
        r"\ud800",
        r"\uDBFF",
        r"\udc00",
        r"\uDc0F",
        r"\ud83d\ude00",
        r"\uD83D\uDE00",
        r"\ud55c",
        r"\uD55C",
        r"\\",
        r"\\u0000",
        r"\\ud800",
        r"\\\ud800",
        r"\\\\u0000",
        r#"\""#,
        r"\n",
        r"\u005c",
        r"\u005cud800",
        "ud800",
        "u0000",
        "x",
        "\u{d55c}",
        "é",
    ];
    // Hex digits as they may be spelled in an ID or a nonce.
    fn hex_digit(seed: &mut u64) -> String {
        let d = b"0123456789abcdef"[(next(seed) % 16) as usize] as char;
        if next(seed).is_multiple_of(4) {
            format!("\\u{:04x}", d as u32)
        } else {
            d.to_string()
        }
    }
    fn next(seed: &mut u64) -> u64 {
        // xorshift64*: deterministic, so a failure names a case that can be run again.
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn hostile(seed: &mut u64) -> String {
        (0..next(seed) % 6)
            .map(|_| HOSTILE[(next(seed) % HOSTILE.len() as u64) as usize])
            .collect()
    }
    fn id(seed: &mut u64) -> String {
        let head: String = (0..8).map(|_| hex_digit(seed)).collect();
        format!("{head}{}", hostile(seed))
    }
    // Fragments with no escape the copy rewrites (no escaped backslash, no \u0000, no \ud...):
    // a string made of these keeps its value exactly in the copy. Near misses spelled with
    // \u005c among them.
    const KEPT: &[&str] = &[
        r"\u005cud800",
        r"\u005cu0000",
        r"\u005c",
        r#"x\"y"#,
        "é",
        r"\u00e9",
        "ud800",
        r"\u0030",
        r"\n",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut texts = Vec::new();
    let mut kept = Vec::new();
    for _ in 0..4000 {
        let exact: String = (0..1 + next(&mut seed) % 4)
            .map(|_| KEPT[(next(&mut seed) % KEPT.len() as u64) as usize])
            .collect();
        let mut fields = vec![format!(r#""exact":"{exact}""#)];
        kept.push(exact);
        for _ in 0..1 + next(&mut seed) % 5 {
            let field = match next(&mut seed) % 8 {
                0 | 1 => format!(r#""target_file_id":"{}""#, id(&mut seed)),
                2 => format!(r#""target\u005ffile_id":"{}""#, id(&mut seed)),
                3 => format!(r#""client_request_id":"{}""#, hostile(&mut seed)),
                4 => format!(r#""limit":{}"#, next(&mut seed) % 600),
                5 => {
                    let nonce: String = (0..32).map(|_| hex_digit(&mut seed)).collect();
                    let tail = if next(&mut seed).is_multiple_of(3) {
                        hostile(&mut seed)
                    } else {
                        String::new()
                    };
                    format!(
                        r#""workspace_binding":{{"nonce":"{nonce}{tail}","x":"{}"}}"#,
                        hostile(&mut seed)
                    )
                }
                6 => {
                    let members: Vec<String> = (0..next(&mut seed) % 4)
                        .map(|_| {
                            format!(
                                r#"{{"target_file_id":"{}","t":"{}"}}"#,
                                id(&mut seed),
                                hostile(&mut seed)
                            )
                        })
                        .collect();
                    format!(r#""members":[{}]"#, members.join(","))
                }
                _ => format!(r#""{}":"{}""#, hostile(&mut seed), hostile(&mut seed)),
            };
            fields.push(field);
        }
        texts.push(format!("{{{}}}", fields.join(",")));
    }
    let escapes_seen = |needle: &str| texts.iter().filter(|t| t.contains(needle)).count();
    for needle in [
        r"\u0000", r"\ud800", r"\\ud800", r"\ud55c", r"\uD83D", r"\u005f",
    ] {
        assert!(
            escapes_seen(needle) > 100,
            "{needle} in only {} texts",
            escapes_seen(needle)
        );
    }
    for (chunk, kept) in texts.chunks(500).zip(kept.chunks(500)) {
        let (chunk, kept): (Vec<String>, Vec<String>) = (chunk.to_vec(), kept.to_vec());
        let rows = router
            .query(
                "SELECT a, pg_temp.facts(pg_temp.readable_regexp(a::json)),
                        pg_temp.facts(patchdiff_router.readable(a::json)),
                        patchdiff_router.partition_of(a::json) IS NOT DISTINCT FROM
                          patchdiff_router.partition_of_id(
                            CASE WHEN json_typeof(pg_temp.readable_regexp(a::json)->'target_file_id') = 'string'
                                 THEN pg_temp.readable_regexp(a::json)->>'target_file_id' END),
                        (patchdiff_router.field(a::json, 'client_request_id') IS NULL) =
                          (json_typeof(pg_temp.readable_regexp(a::json)->'client_request_id')
                             IS DISTINCT FROM 'string'),
                        patchdiff_router.readable(a::json)->>'exact' =
                          (chr(34) || e || chr(34))::json #>> '{}'
                   FROM unnest($1::text[], $2::text[]) AS x(a, e)",
                &[&chunk, &kept],
            )
            .await
            .unwrap();
        for row in rows {
            let (text, old, new): (String, String, String) = (row.get(0), row.get(1), row.get(2));
            assert_eq!(new, old, "{text}");
            assert!(row.get::<_, bool>(3), "partition_of of {text}");
            assert!(row.get::<_, bool>(4), "field client_request_id of {text}");
            assert!(
                row.get::<_, bool>(5),
                "the value of \"exact\" in the copy of {text}"
            );
        }
    }
}

/// A session with `standard_conforming_strings = off` (an old application's setting, or a role's)
/// is routed as any other: the router's literals with backslashes are E'' strings. Every routed
/// call used to fail there ("invalid Unicode escape" in `partition_of`). So is `patchdiff-mcp`
/// on such sessions.
#[tokio::test]
async fn a_session_without_standard_conforming_strings_is_routed_too() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let id = create(&router, "scs.md", "alpha beta\n").await;
    let args = [
        format!(r#"{{"target_file_id":"{id}"}}"#),
        format!(r#"{{"target_file_id":"{id}","text":"\u0000"}}"#),
    ];
    let mut answers = Vec::new();
    for setting in ["on", "off"] {
        router
            .batch_execute(&format!("SET standard_conforming_strings = {setting}"))
            .await
            .unwrap();
        for a in &args {
            answers.push(
                raw_call(&router, "patchdiff_read_target", a)
                    .await
                    .to_string(),
            );
        }
        let list = raw_call(&router, "patchdiff_list_targets", r#"{"limit":1}"#).await;
        assert_eq!(list["status"], "ok", "{list}");
    }
    assert_eq!(answers[0], answers[2]);
    assert_eq!(answers[1], answers[3]);
    assert!(answers[0].contains(r#""status":"ok""#), "{}", answers[0]);
    // patchdiff-mcp on a connection whose sessions start with the setting off: the same tools,
    // and a tool call through the router is answered.
    let tools = |p: &mut Pipes| list(p)["result"]["tools"].as_array().unwrap().len();
    let mut on = mcp(&router_dsn());
    let mut off = mcp(&format!(
        "{} options='-c standard_conforming_strings=off'",
        router_dsn()
    ));
    assert_eq!(tools(&mut off), tools(&mut on));
    let read = tool(
        &mut off,
        "patchdiff_read_target",
        json!({"target_file_id": id}),
    );
    assert_eq!(read["text"], "alpha beta\n", "{read}");
}

/// docs/scale-out.md, "What a role can do with the router's own functions": strict observation
/// mode reaches the shard as a boolean. The router has no pg_patchdiff, so any value may be SET
/// there; one that is not a boolean used to reach a fresh shard session before the library was
/// loaded, where it was dropped with a WARNING and the edit went through unobserved (helper-45).
/// Now it is refused on the router and nothing is written; `on` holds; a RESET (which leaves
/// the empty string) sends nothing, with no warning.
#[tokio::test]
async fn strict_mode_reaches_the_shard_as_a_boolean() {
    let _turn = SHARDS.read().await;
    let setup = connect(&router_dsn()).await;
    let id = create(&setup, "strict.md", "alpha\n").await;
    let edit = |v: i64| {
        json!({"target_file_id": id, "intent": "strict", "expected_target_version": v,
               "edits": [{"match": if v == 0 { "alpha" } else { "omega" },
                          "replace": if v == 0 { "omega" } else { "alpha" }}]})
    };
    // A fresh router session: fresh shard sessions, whose library is not loaded yet.
    let (router, mut connection) = tokio_postgres::connect(&router_dsn(), NoTls).await.unwrap();
    let (tx, mut notices) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notice(n) = m {
                let _ = tx.send(n.message().to_owned());
            }
        }
    });
    router
        .batch_execute("SET patchdiff.strict_observation_mode = maybe")
        .await
        .unwrap();
    let e = router
        .query_one(
            "SELECT patchdiff_submit_edits($1::text::json)::text",
            &[&edit(0).to_string()],
        )
        .await
        .expect_err("a value that is not a boolean is refused");
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::INVALID_TEXT_REPRESENTATION),
        "{e:?}"
    );
    let read = call(
        &setup,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    assert_eq!(read["version"], 0, "nothing was written: {read}");
    router
        .batch_execute("SET patchdiff.strict_observation_mode = on")
        .await
        .unwrap();
    let r = call(&router, "patchdiff_submit_edits", &edit(0)).await;
    assert_eq!(r["code"], "OBSERVATION_REQUIRED", "{r}");
    router
        .batch_execute("RESET patchdiff.strict_observation_mode")
        .await
        .unwrap();
    let r = call(&router, "patchdiff_submit_edits", &edit(0)).await;
    assert_eq!(r["status"], "accepted", "{r}");
    let mut warned = Vec::new();
    while let Ok(n) = notices.try_recv() {
        warned.push(n);
    }
    assert!(warned.is_empty(), "{warned:?}");
}

/// Issue 19 item 1 through the router (docs/scale-out.md, "Changesets"): a changeset whose
/// targets all live on one partition runs there, all or nothing; one whose targets live on two
/// partitions is refused by the router with SQLSTATE 0A000 naming them, and nothing is written.
#[tokio::test]
async fn changesets_run_on_one_partition_and_are_refused_across_partitions() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let n = layout(&router).await.partitions.len();
    let mut by_partition: Vec<Vec<String>> = vec![Vec::new(); n];
    let mut made = 0;
    while by_partition.iter().filter(|p| p.len() >= 2).count() < 2 && made < 200 {
        let id = create(&router, &format!("cs-{made}.md"), "alpha\n").await;
        by_partition[partition_of(&id, n)].push(id);
        made += 1;
    }
    let pairs: Vec<&Vec<String>> = by_partition.iter().filter(|p| p.len() >= 2).collect();
    let edit = |id: &str| {
        json!({"target_file_id": id, "intent": "c", "expected_target_version": 0,
               "edits": [{"match": "alpha", "replace": "beta"}]})
    };
    let same = json!({"members": [edit(&pairs[0][0]), edit(&pairs[0][1])]});
    let r = call(&router, "patchdiff_submit_changeset", &same).await;
    assert_eq!(r["status"], "accepted", "{r}");
    let across = json!({"members": [edit(&pairs[1][0]), edit(&pairs[0][0])]});
    let e = router
        .query_one(
            "SELECT patchdiff_submit_changeset($1::text::json)::text",
            &[&across.to_string()],
        )
        .await
        .unwrap_err();
    let db = e.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), "0A000", "{db:?}");
    assert!(
        db.message()
            .contains("cannot commit several partitions atomically"),
        "{}",
        db.message()
    );
    let untouched = call(
        &router,
        "patchdiff_get_target",
        &json!({"target_file_id": pairs[1][0]}),
    )
    .await;
    assert_eq!(untouched["version"], 0, "{untouched}");
}

/// Issue 19 item 2 through the router (docs/scale-out.md, "The change feed"): each shard
/// announces its own commits, and `patchdiff-mcp` on the router listens on every partition's
/// database, so a subscriber hears the changes of targets on any shard. A shard that is down
/// when the feed starts does not keep the others' subscribers from hearing; once it is back, its
/// session listens again, every subscriber is told that its targets may have changed (the
/// resync), and its targets' changes are heard, with no restart of anything.
#[tokio::test]
async fn the_change_feed_is_heard_from_every_shard() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let n = layout.partitions.len();
    // A target on shard 0 and one on shard 1.
    let mut ids: Vec<Option<String>> = vec![None; 2];
    while ids.iter().any(Option::is_none) {
        let id = create(&router, "feed.md", "v0\n").await;
        let shard = partition_of(&id, n) % layout.shards;
        if shard < 2 && ids[shard].is_none() {
            ids[shard] = Some(id);
        }
    }
    let ids: Vec<String> = ids.into_iter().map(Option::unwrap).collect();
    let uri = |id: &str| format!("patchdiff://targets/{id}");
    let mut versions = [0i64; 2];
    let mut edit = async |i: usize| {
        let v = versions[i];
        let r = call(
            &router,
            "patchdiff_submit_edits",
            // Keyed: the router sends a keyed write once more when its connection to the
            // partition was lost (shard 1 restarts below).
            &json!({"target_file_id": ids[i], "intent": "feed", "expected_target_version": v,
                    "client_request_id": format!("feed-{}-{v}", ids[i]),
                    "edits": [{"match": format!("v{v}"), "replace": format!("v{}", v + 1)}]}),
        )
        .await;
        assert_eq!(r["status"], "accepted", "{r}");
        versions[i] += 1;
    };
    let restart = stop_shard_1(&layout);
    let mut cmd = Command::new(mcp_bin());
    cmd.env("PATCHDIFF_DATABASE_URL", router_dsn())
        .env("PATCHDIFF_MCP_PROFILE", "extended")
        .stderr(Stdio::null());
    let mut m = Pipes::spawn(cmd);
    let mut id = 0;
    let mut request = |m: &mut Pipes, method: &str, params: Value| -> Value {
        id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        m.send(format!("{line}\n").as_bytes());
        loop {
            let v: Value =
                serde_json::from_slice(&m.line(Duration::from_secs(20)).expect(method)).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    request(
        &mut m,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "shards", "version": "1"}}),
    );
    m.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    // Reads lines until the update of `target`, within 15 s (the resync may add others).
    let heard = |m: &mut Pipes, target: &str, what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = m
                .line(left)
                .unwrap_or_else(|e| panic!("{what}: no update of {target} ({e})"));
            let v: Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(v["method"], "notifications/resources/updated", "{v}");
            if v["params"]["uri"] == uri(target) {
                return;
            }
        }
    };

    // Shard 1 is down: the feed starts on the partitions that are up.
    let s = request(&mut m, "resources/subscribe", json!({"uri": uri(&ids[0])}));
    assert_eq!(s["result"], json!({}), "{s}");
    edit(0).await;
    heard(&mut m, &ids[0], "shard 0 while shard 1 is down");

    // Shard 1 is back: its targets are heard (by their own announcement, or by the resync if
    // the edit committed before the partition's session listened again).
    drop(restart);
    let s = request(&mut m, "resources/subscribe", json!({"uri": uri(&ids[1])}));
    assert_eq!(s["result"], json!({}), "{s}");
    edit(1).await;
    heard(&mut m, &ids[1], "shard 1 after it is back");
    edit(0).await;
    heard(&mut m, &ids[0], "shard 0 after shard 1 is back");

    // A listening session lost and back: the resync tells the subscriber of shard 1's target
    // with no edit at all. (First, whatever the reconnections above still send: every session
    // retries each second, so 3 s without a line means they all listen.)
    while m.line(Duration::from_secs(3)).is_ok() {}
    drop(stop_shard_1(&layout));
    heard(
        &mut m,
        &ids[1],
        "the resync after shard 1's sessions were lost",
    );
}

/// What a hostile role plants in the router database's `public` (helper-49): operators and
/// functions of exactly the argument types the router's functions pass where pg_catalog's are
/// polymorphic or need a coercion (`unnest`, `to_json`, `float8 * int4`), and, for a caller whose
/// search_path puts `public` first, ones of pg_catalog's own types (`~`, `||` of text). Each
/// records who ran it, then does what pg_catalog's would.
const PLANTED_IN_ROUTER: &str = r#"
CREATE TABLE public.planted_ran (who text, what text);
GRANT INSERT ON public.planted_ran TO PUBLIC;
CREATE FUNCTION public.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'unnest(text[])');
      RETURN QUERY SELECT * FROM pg_catalog.unnest($1); END $$;
CREATE FUNCTION public.to_json(text) RETURNS json LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'to_json(text)');
      RETURN pg_catalog.to_json($1); END $$;
CREATE FUNCTION public.planted_mul(float8, int4) RETURNS float8 LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '*(float8,int4)');
      RETURN $1 OPERATOR(pg_catalog.*) $2::float8; END $$;
CREATE OPERATOR public.* (LEFTARG = float8, RIGHTARG = int4, FUNCTION = public.planted_mul);
CREATE FUNCTION public.planted_match(text, text) RETURNS bool LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '~(text,text)');
      RETURN $1 OPERATOR(pg_catalog.~) $2; END $$;
CREATE OPERATOR public.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = public.planted_match);
CREATE FUNCTION public.planted_cat(text, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, '||(text,text)');
      RETURN $1 OPERATOR(pg_catalog.||) $2; END $$;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = public.planted_cat);
"#;

/// What a hostile role plants in each partition's `public`: a domain `json` and an overload of
/// the API taking it, which a routed call would resolve to with `public` first on its path.
const PLANTED_ON_SHARD: &str = r#"
CREATE TABLE public.planted_ran (who text, what text);
GRANT INSERT ON public.planted_ran TO PUBLIC;
CREATE DOMAIN public.json AS pg_catalog.json;
CREATE FUNCTION public.patchdiff_read_target(args public.json) RETURNS pg_catalog.json
LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'patchdiff_read_target(public.json)');
      RETURN '{"status": "ok", "text": "forged"}'; END $$;
"#;

/// docs/scale-out.md "Roles": objects planted in the router database's `public` (where every
/// role may create in a database made before PostgreSQL 15) never run in a tenant's call
/// through the router, and the router's script refuses to install over a function of the
/// router's names that such a role made first (CREATE OR REPLACE would keep that role its owner).
#[tokio::test]
async fn objects_planted_in_the_router_database_never_run() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let planter_role = patchdiff_tests::roles::unique("shards_planter");
    let tenant_role = patchdiff_tests::roles::unique("shards_planted");
    let planter = connect(&role_everywhere(&layout, &planter_role).await).await;
    let tenant_dsn = role_everywhere(&layout, &tenant_role).await;
    router
        .batch_execute(&format!(
            "GRANT CREATE ON SCHEMA public TO {planter_role}; \
             ALTER ROLE {tenant_role} IN DATABASE patchdiff SET search_path = public, pg_catalog"
        ))
        .await
        .unwrap();
    planter.batch_execute(PLANTED_IN_ROUTER).await.unwrap();
    // On every partition: a domain `json` and an overload of the API taking it, where PL/Proxy's
    // remote query (`SELECT public.patchdiff_read_target($1::json)`) would meet them with a
    // search_path that puts `public` first (helper-51). The partitions' connection strings pin it.
    let mut partitions = Vec::new();
    for dsn in &layout.partitions {
        let admin = connect(dsn).await;
        admin
            .batch_execute(&format!(
                "GRANT CREATE ON SCHEMA public TO {planter_role}; \
                 ALTER ROLE {tenant_role} SET search_path = public, pg_catalog"
            ))
            .await
            .unwrap();
        let p = connect(&dsn.replace("user=postgres", &format!("user={planter_role}"))).await;
        p.batch_execute(PLANTED_ON_SHARD).await.unwrap();
        partitions.push(admin);
    }
    let ran = || async {
        router
            .query("SELECT who, what FROM public.planted_ran", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
            .collect::<Vec<_>>()
    };
    // Not vacuous: the tenant's own statements reach the planted objects.
    let tenant = connect(&tenant_dsn).await;
    tenant
        .batch_execute("SELECT 'a' ~ 'a', pg_catalog.random() * 2")
        .await
        .unwrap();
    assert_eq!(ran().await.len(), 2, "{:?}", ran().await);
    router
        .batch_execute("TRUNCATE public.planted_ran")
        .await
        .unwrap();
    // Every kind of call through the router, as the tenant.
    let id = create(&tenant, "planted.md", "one\n").await;
    let edited = call(
        &tenant,
        "patchdiff_submit_edits",
        &json!({"target_file_id": id, "expected_target_version": 0, "intent": "planted",
                "edits": [{"match": "one", "replace": "two"}]}),
    )
    .await;
    assert_eq!(edited["status"], "accepted", "{edited}");
    let listed = call(&tenant, "patchdiff_list_targets", &json!({"limit": 1})).await;
    assert_eq!(listed["count"], 1, "{listed}");
    let read = call(
        &tenant,
        "patchdiff_read_target",
        &json!({"target_file_id": id, "client_request_id": "\u{0}"}),
    )
    .await;
    assert!(read.get("status").is_some(), "{read}");
    for sql in [
        "SELECT * FROM patchdiff_router.publication_partition('{\"workspace_binding\": {\"nonce\": \"n\"}}'::json)",
        "SELECT patchdiff_router.partition_conninfos()",
        "SELECT patchdiff_router.changeset_partition('{\"members\": []}'::json)",
    ] {
        tenant.batch_execute(sql).await.unwrap();
    }
    let seen = ran().await;
    assert!(seen.is_empty(), "the router ran planted objects: {seen:?}");
    let read = call(
        &tenant,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    assert_eq!(read["text"], "two\n", "{read}");
    for shard in &partitions {
        let n: i64 = shard
            .query_one("SELECT count(*) FROM public.planted_ran", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 0, "a shard ran the planted overload");
    }
    // A routed name that another role made in the router's `public`, and the router's own
    // start-up function owned by such a role: patchdiff-mcp neither advertises nor calls the one,
    // and refuses to start on the other (helper-51).
    router
        .batch_execute("DROP FUNCTION public.patchdiff_diff(json)")
        .await
        .unwrap();
    planter
        .batch_execute(
            "CREATE FUNCTION public.patchdiff_diff(args json) RETURNS json LANGUAGE plpgsql AS $$ \
             BEGIN INSERT INTO public.planted_ran VALUES (current_user, 'patchdiff_diff'); \
             RETURN '{\"status\": \"ok\"}'; END $$",
        )
        .await
        .unwrap();
    let listed_tools = || {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", router_dsn())
            .env("PATCHDIFF_MCP_PROFILE", "extended")
            .stderr(Stdio::null());
        let mut p = Pipes::spawn(cmd);
        p.send(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"}}\n");
        p.line(Duration::from_secs(20)).expect("initialize");
        list(&mut p).to_string()
    };
    let advertised = |tools: &str, name: &str| tools.contains(&format!("\"name\":\"{name}\""));
    let tools = listed_tools();
    assert!(advertised(&tools, "patchdiff_read_target"), "{tools}");
    assert!(!advertised(&tools, "patchdiff_diff"), "{tools}");
    // A router function, or the foreign server (whose owner may rewrite where calls go), given
    // to another role: start-up refuses, naming it.
    for (give, back, named) in [
        (
            format!(
                "ALTER FUNCTION patchdiff_router.partition_conninfos() OWNER TO {planter_role}"
            ),
            "ALTER FUNCTION patchdiff_router.partition_conninfos() OWNER TO postgres".to_owned(),
            "function patchdiff_router.partition_conninfos()",
        ),
        (
            format!(
                "GRANT USAGE ON FOREIGN DATA WRAPPER plproxy TO {planter_role}; \
                 ALTER SERVER patchdiff OWNER TO {planter_role}"
            ),
            format!(
                "ALTER SERVER patchdiff OWNER TO postgres; \
                 REVOKE USAGE ON FOREIGN DATA WRAPPER plproxy FROM {planter_role}"
            ),
            "foreign server patchdiff",
        ),
    ] {
        router.batch_execute(&give).await.unwrap();
        let out = Command::new(mcp_bin())
            .env("PATCHDIFF_DATABASE_URL", router_dsn())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        router.batch_execute(&back).await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("owned by a role that is not a superuser: {named}")),
            "{err}"
        );
    }
    let seen = ran().await;
    assert!(
        seen.is_empty(),
        "patchdiff-mcp ran planted objects: {seen:?}"
    );
    // A function of the router's names made first by a role that is not a superuser: the
    // script stops before it changes anything.
    planter
        .batch_execute(
            "CREATE FUNCTION public.patchdiff_read_target(args json, planted int4) RETURNS json \
             LANGUAGE sql AS $$ SELECT args $$",
        )
        .await
        .unwrap();
    // An overload of the name that another role added takes no tool away (helper-53: it used to
    // stop start-up): the front end's typed call still reaches the router's function.
    assert!(advertised(&listed_tools(), "patchdiff_read_target"));
    let script = format!(
        "{}/../sql/router/patchdiff_router.sql",
        env!("CARGO_MANIFEST_DIR")
    );
    let run_script = || {
        Command::new("psql")
            .args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &router_dsn(),
                "-f",
                &script,
            ])
            .output()
            .unwrap()
    };
    let out = run_script();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the script ran over a planted function: {err}"
    );
    assert!(
        err.contains("owned by a role that is not a superuser")
            && err.contains("public.patchdiff_read_target(json,integer)")
            && err.contains(&planter_role),
        "{err}"
    );
    router
        .batch_execute(&format!(
            "DROP OWNED BY {planter_role}; REVOKE CREATE ON SCHEMA public FROM {planter_role}; \
             ALTER ROLE {tenant_role} IN DATABASE patchdiff RESET search_path"
        ))
        .await
        .unwrap();
    for shard in &partitions {
        shard
            .batch_execute(&format!(
                "DROP OWNED BY {planter_role}; REVOKE CREATE ON SCHEMA public FROM {planter_role}; \
                 ALTER ROLE {tenant_role} RESET search_path"
            ))
            .await
            .unwrap();
    }
    // And runs again once it is gone.
    let out = run_script();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The router's own patchdiff_diff is back, and advertised (the check above is not vacuous).
    let tools = listed_tools();
    assert!(advertised(&tools, "patchdiff_diff"), "{tools}");
    assert!(advertised(&tools, "patchdiff_read_target"), "{tools}");
}

/// The router server's `query_timeout` as scripts/shards.sh sets it (seconds): twice
/// patchdiff-mcp's default `statement_timeout`, so that it never ends a call patchdiff-mcp lets run.
const QUERY_TIMEOUT: &str = "60";

/// What a TCP proxy in front of a shard does to the shard's answers once a call's text has gone
/// through it ([`proxy`]).
#[derive(Clone, Copy)]
enum Fault {
    /// Nothing: the proxy is only another address of the shard.
    Pass,
    /// Nothing the shard sends ever arrives, from the first byte (a database that takes a
    /// connection and never answers).
    Silent,
    /// The shard's answers are held this long each.
    Delay(Duration),
    /// The shard's answer is dropped, the connection closed 0.7 s later, and the proxy takes no
    /// connection after that (a connection refused).
    Cut,
}

/// A TCP proxy on a free port in front of the shard at `shard_port`, for the router's
/// connections to one partition (its `p<k>` option pointed at the proxy). Traffic passes as it
/// is until the client has sent `marker` (a call's text); then `fault` happens to what the
/// shard sends back on that connection. The shard runs the call as it would without the proxy.
/// The proxy's port, and what stops it: dropped (or sent `true`), it takes no connection and
/// closes every one it carries.
struct Proxy {
    port: u16,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn proxy(shard_port: u16, marker: &'static [u8], fault: Fault) -> Proxy {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let refuse = Arc::new(tokio::sync::Notify::new());
        let mut told = stopped.clone();
        loop {
            let (client, _) = tokio::select! {
                _ = refuse.notified() => return,
                _ = told.changed() => return,
                r = listener.accept() => r.unwrap(),
            };
            let refuse = refuse.clone();
            let mut told = stopped.clone();
            tokio::spawn(async move {
                let server = TcpStream::connect(("127.0.0.1", shard_port)).await.unwrap();
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let seen = Arc::new(AtomicBool::new(false));
                let sent = seen.clone();
                let up = async move {
                    let mut buf = vec![0u8; 65_536];
                    loop {
                        let n = cr.read(&mut buf).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        if !marker.is_empty() && buf[..n].windows(marker.len()).any(|w| w == marker)
                        {
                            sent.store(true, Ordering::SeqCst);
                        }
                        sw.write_all(&buf[..n]).await?;
                    }
                };
                let down = async move {
                    let mut buf = vec![0u8; 65_536];
                    loop {
                        let n = sr.read(&mut buf).await?;
                        if n == 0 {
                            return Ok::<_, std::io::Error>(());
                        }
                        if matches!(fault, Fault::Silent) {
                            continue;
                        }
                        if seen.load(Ordering::SeqCst) {
                            match fault {
                                Fault::Pass | Fault::Silent => {}
                                Fault::Delay(d) => tokio::time::sleep(d).await,
                                Fault::Cut => {
                                    tokio::time::sleep(Duration::from_millis(700)).await;
                                    refuse.notify_one();
                                    return Ok(());
                                }
                            }
                        }
                        cw.write_all(&buf[..n]).await?;
                    }
                };
                // Either direction ending ends both: dropping the halves closes both sockets.
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                    _ = told.changed() => {}
                }
            });
        }
    });
    Proxy { port, _stop: stop }
}

/// The router's connection option of partition `p`, and sets it (superuser, on the router).
async fn partition_option(router: &Client, p: usize) -> String {
    let row = router
        .query_one(
            "SELECT substr(o, strpos(o, '=') + 1) FROM pg_foreign_server s, unnest(s.srvoptions) o \
             WHERE s.srvname = 'patchdiff' AND o LIKE $1",
            &[&format!("p{p}=%")],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn set_partition_option(router: &Client, p: usize, value: &str) {
    router
        .batch_execute(&format!(
            "ALTER SERVER patchdiff OPTIONS (SET p{p} '{}')",
            value.replace('\'', "''")
        ))
        .await
        .unwrap();
}

/// The same connection option with another port.
fn with_port(option: &str, port: u16) -> String {
    option
        .split_whitespace()
        .map(|w| {
            if w.starts_with("port=") {
                format!("port={port}")
            } else {
                w.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn port_of(option: &str) -> u16 {
    option
        .split_whitespace()
        .find_map(|w| w.strip_prefix("port="))
        .expect("a port in the partition's option")
        .parse()
        .unwrap()
}

/// docs/scale-out.md, "When a call's outcome is unknown": PL/Proxy runs a call in a transaction
/// of its own on the shard, so a write cancelled on the router (its `statement_timeout`), or whose
/// connection broke during the call and whose partition could not be reached again, may have
/// committed there. Both are SQLSTATE 40003 (`outcome_unknown` from patchdiff-mcp), never
/// "cancelled ... nothing was written" or `unavailable`, and the shard holds the acceptance, which
/// a resend with the same key recovers. (helper-59: both used to say that nothing was written.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_shard_may_have_committed_is_never_answered_nothing_written() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let id = create(&router, "unknown.md", "alpha beta gamma delta\n").await;
    let p = partition_of(&id, layout.partitions.len());
    let original = partition_option(&router, p).await;
    let shard = connect(&layout.partitions[p]).await;
    let body = {
        let (id, original) = (id.clone(), original.clone());
        tokio::spawn(async move {
            let router = connect(&router_dsn()).await;
            let submit = |key: &str, version: i64, from: &str, to: &str| {
                json!({"target_file_id": id, "intent": "x", "expected_target_version": version,
                       "client_request_id": key, "edits": [{"match": from, "replace": to}]})
                .to_string()
            };
            // 1. Cancelled on the router while the shard has already committed: the answer is
            // held 3 s, the router's statement_timeout is 1 s.
            let held = proxy(
                port_of(&original),
                b"patchdiff_submit_edits",
                Fault::Delay(Duration::from_secs(3)),
            )
            .await;
            set_partition_option(&router, p, &with_port(&original, held.port)).await;
            let session = connect(&router_dsn()).await;
            session
                .batch_execute("SET statement_timeout = '1s'")
                .await
                .unwrap();
            let e = session
                .query_one(
                    "SELECT patchdiff_submit_edits($1::text::json)::text",
                    &[&submit("cancelled-here", 0, "alpha", "ALPHA")],
                )
                .await
                .unwrap_err();
            let db = e.as_db_error().expect("a server error");
            assert_eq!(db.code().code(), "40003", "{db:?}");
            assert!(
                db.message().starts_with(&format!(
                    "patchdiff: the call on partition {p} may have run and committed there"
                )),
                "{}",
                db.message()
            );
            drop(held);
            drop(session);
            // patchdiff-mcp reads partition 0's facts as it starts: the partition must answer
            // (it failed to start whenever the target lived on partition 0, 1 run in 8).
            set_partition_option(&router, p, &original).await;

            // 2. The connection breaks after the shard committed, and the partition refuses
            // the second try: over SQL, and through patchdiff-mcp.
            let mut m = tokio::task::block_in_place(|| mcp(&router_dsn()));
            for (key, version, from, to) in [
                ("cut-sql", 1, "beta", "BETA"),
                ("cut-mcp", 2, "gamma", "GAMMA"),
            ] {
                let cut = proxy(port_of(&original), b"patchdiff_submit_edits", Fault::Cut).await;
                set_partition_option(&router, p, &with_port(&original, cut.port)).await;
                if key == "cut-sql" {
                    let session = connect(&router_dsn()).await;
                    let e = session
                        .query_one(
                            "SELECT patchdiff_submit_edits($1::text::json)::text",
                            &[&submit(key, version, from, to)],
                        )
                        .await
                        .unwrap_err();
                    let db = e.as_db_error().expect("a server error");
                    assert_eq!(db.code().code(), "40003", "{db:?}");
                    assert!(
                        db.message()
                            .contains("its connection broke during the call"),
                        "{}",
                        db.message()
                    );
                } else {
                    let args: Value =
                        serde_json::from_str(&submit(key, version, from, to)).unwrap();
                    // The pipes block: off the runtime's workers, which run the proxy.
                    let r = tokio::task::block_in_place(|| {
                        tool(&mut m, "patchdiff_submit_edits", args)
                    });
                    assert_eq!(r["status"], "outcome_unknown", "{r}");
                    assert_ne!(r["nothing_written"], true, "{r}");
                }
                drop(cut);
            }

            // 3. A shard whose answer never comes: the router's statement_timeout cannot end the
            // call (PL/Proxy waits for the shard to answer its cancel); the server's
            // query_timeout does (scripts/shards.sh sets one; 3 s here). Its outcome is unknown.
            let silent = proxy(
                port_of(&original),
                b"public.patchdiff_submit",
                Fault::Delay(Duration::from_secs(600)),
            )
            .await;
            set_partition_option(&router, p, &with_port(&original, silent.port)).await;
            router
                .batch_execute("ALTER SERVER patchdiff OPTIONS (SET query_timeout '3')")
                .await
                .unwrap();
            let session = connect(&router_dsn()).await;
            session
                .batch_execute("SET statement_timeout = '1s'")
                .await
                .unwrap();
            let started = std::time::Instant::now();
            let e = session
                .query_one(
                    "SELECT patchdiff_submit_edits($1::text::json)::text",
                    &[&submit("never-answered", 3, "delta", "DELTA")],
                )
                .await
                .unwrap_err();
            let waited = started.elapsed();
            // The typed function too (helper-60: it raised PL/Proxy's XX000).
            let typed = session
                .query_one(
                    "SELECT patchdiff_submit($1::text::uuid, 'x', $2::text::json, 4, NULL, 'typed-never-answered')::text",
                    &[&id, &r#"[{"match": "ALPHA", "replace": "Alpha"}]"#],
                )
                .await
                .unwrap_err();
            let typed = typed.as_db_error().expect("a server error");
            assert_eq!(typed.code().code(), "40003", "{typed:?}");
            router
                .batch_execute(&format!(
                    "ALTER SERVER patchdiff OPTIONS (SET query_timeout '{QUERY_TIMEOUT}')"
                ))
                .await
                .unwrap();
            drop(silent);
            let db = e.as_db_error().expect("a server error");
            assert!(
                waited < Duration::from_secs(15),
                "the call ended after {waited:?}: {db:?}"
            );
            assert_eq!(db.code().code(), "40003", "{db:?}");
            assert!(
                db.message()
                    .contains("did not answer within the router's query_timeout"),
                "{}",
                db.message()
            );
            eprintln!(
                "a shard that never answers: {} after {waited:?} ({})",
                db.code().code(),
                db.message()
            );
            set_partition_option(&router, p, &original).await;

            // Each committed on the shard, and a resend with its key recovers it.
            for (key, version, from, to) in [
                ("cancelled-here", 0, "alpha", "ALPHA"),
                ("cut-sql", 1, "beta", "BETA"),
                ("cut-mcp", 2, "gamma", "GAMMA"),
            ] {
                let again = raw_call(
                    &router,
                    "patchdiff_submit_edits",
                    &submit(key, version, from, to),
                )
                .await;
                assert_eq!(
                    (&again["status"], &again["deduplicated"]),
                    (&json!("accepted"), &json!(true)),
                    "{key}: {again}"
                );
            }
            let again = raw_call(
                &router,
                "patchdiff_submit_edits",
                &submit("never-answered", 3, "delta", "DELTA"),
            )
            .await;
            assert_eq!(
                (&again["status"], &again["deduplicated"]),
                (&json!("accepted"), &json!(true)),
                "never-answered: {again}"
            );
            let read = call(
                &router,
                "patchdiff_read_target",
                &json!({"target_file_id": id}),
            )
            .await;
            assert_eq!(read["text"], "Alpha BETA GAMMA DELTA\n", "{read}");
        })
        .await
    };
    // Whatever happened, the partition's option is the real one again.
    set_partition_option(&router, p, &original).await;
    let accepted: i64 = shard
        .query_one(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid AND status = 'accepted'",
            &[&id],
        )
        .await
        .unwrap()
        .get(0);
    if let Err(e) = body {
        std::panic::resume_unwind(e.into_panic());
    }
    assert_eq!(
        accepted, 5,
        "the shard holds the five acceptances, once each"
    );
}

/// docs/scale-out.md, "Splitting a shard": a partition that moves to another address is
/// listened to there. patchdiff-mcp subscribes to a target while its partition's address is a
/// proxy of the shard; then the partition is pointed back at the shard and the proxy closed (the
/// old address refuses). Within the feed's layout check (10 s) the subscriber hears a resync of
/// the target, and the next edit. (helper-59: the listening sessions kept the old address, and
/// the partition's commits went unheard for as long as the subscription stayed open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_partition_is_listened_to_at_its_new_address() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let id = create(&router, "moved.md", "v0\n").await;
    let p = partition_of(&id, layout.partitions.len());
    let original = partition_option(&router, p).await;
    let old_address = proxy(port_of(&original), b"", Fault::Pass).await;
    set_partition_option(&router, p, &with_port(&original, old_address.port)).await;
    let body = {
        let (id, original) = (id.clone(), original.clone());
        tokio::spawn(async move {
            let router = connect(&router_dsn()).await;
            let uri = format!("patchdiff://targets/{id}");
            let mut m = subscriber(&[&id]);
            let heard =
                |m: &mut Pipes, within: Duration, what: &str| updated(m, &uri, within, what);
            let edit = |v: i64| {
                json!({"target_file_id": id, "intent": "moved", "expected_target_version": v,
                       "client_request_id": format!("moved-{v}"),
                       "edits": [{"match": format!("v{v}"), "replace": format!("v{}", v + 1)}]})
            };
            let r = call(&router, "patchdiff_submit_edits", &edit(0)).await;
            assert_eq!(r["status"], "accepted", "{r}");
            heard(&mut m, Duration::from_secs(15), "at the old address");

            // The move: the router points at the shard itself, and the old address is gone.
            set_partition_option(&router, p, &original).await;
            drop(old_address);
            heard(&mut m, Duration::from_secs(25), "the resync after the move");
            let r = call(&router, "patchdiff_submit_edits", &edit(1)).await;
            assert_eq!(r["status"], "accepted", "{r}");
            heard(&mut m, Duration::from_secs(15), "an edit after the move");
        })
        .await
    };
    set_partition_option(&router, p, &original).await;
    if let Err(e) = body {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A patchdiff-mcp (stdio, extended profile) on the router, subscribed to `targets`.
fn subscriber(targets: &[&str]) -> Pipes {
    tokio::task::block_in_place(|| {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", router_dsn())
            .env("PATCHDIFF_MCP_PROFILE", "extended")
            .stderr(Stdio::null());
        let mut m = Pipes::spawn(cmd);
        m.send(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"shards\",\"version\":\"1\"}}}\n");
        m.line(Duration::from_secs(20)).expect("initialize");
        m.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        for (k, id) in targets.iter().enumerate() {
            let line = json!({"jsonrpc": "2.0", "id": 2 + k, "method": "resources/subscribe",
                              "params": {"uri": format!("patchdiff://targets/{id}")}});
            m.send(format!("{line}\n").as_bytes());
            let v: Value =
                serde_json::from_slice(&m.line(Duration::from_secs(20)).unwrap()).unwrap();
            assert_eq!(v["result"], json!({}), "{v}");
        }
        m
    })
}

/// Reads `m`'s lines until an update of `uri`, within `within`.
fn updated(m: &mut Pipes, uri: &str, within: Duration, what: &str) {
    tokio::task::block_in_place(|| {
        let deadline = std::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = m
                .line(left)
                .unwrap_or_else(|e| panic!("{what}: no update of {uri} ({e})"));
            let v: Value = serde_json::from_slice(&line).unwrap();
            if v["params"]["uri"] == uri {
                return;
            }
        }
    })
}

/// A partition moved to an address that takes connections and never answers costs only its own
/// changes: patchdiff-mcp's feed notices the move, gives that partition's session 15 s, and
/// listens on the others again (with a resync), so a target on another partition is still heard.
/// (helper-60: the restarted feed waited for that session without end, and heard nothing at all.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_that_never_answers_costs_only_its_own_changes() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let n = layout.partitions.len();
    let silent_id = create(&router, "silent.md", "s0\n").await;
    let ps = partition_of(&silent_id, n);
    let heard_id = loop {
        let id = create(&router, "heard.md", "v0\n").await;
        if partition_of(&id, n) != ps {
            break id;
        }
    };
    let original = partition_option(&router, ps).await;
    let body = {
        let (heard_id, original) = (heard_id.clone(), original.clone());
        tokio::spawn(async move {
            let router = connect(&router_dsn()).await;
            let uri = format!("patchdiff://targets/{heard_id}");
            // Subscribed to the healthy partition's target only: a resync checks each watched
            // target's access through the router, which would wait on the silent partition for
            // the front end's statement_timeout.
            let mut m = subscriber(&[&heard_id]);
            let edit = |v: i64| {
                json!({"target_file_id": heard_id, "intent": "heard",
                       "expected_target_version": v, "client_request_id": format!("heard-{v}"),
                       "edits": [{"match": format!("v{v}"), "replace": format!("v{}", v + 1)}]})
            };
            let r = call(&router, "patchdiff_submit_edits", &edit(0)).await;
            assert_eq!(r["status"], "accepted", "{r}");
            updated(&mut m, &uri, Duration::from_secs(15), "before the move");

            let silent = proxy(port_of(&original), b"", Fault::Silent).await;
            set_partition_option(&router, ps, &with_port(&original, silent.port)).await;
            // The layout check (10 s), the silent partition's 15 s, then the resync.
            updated(
                &mut m,
                &uri,
                Duration::from_secs(45),
                "the resync after the move",
            );
            let r = call(&router, "patchdiff_submit_edits", &edit(1)).await;
            assert_eq!(r["status"], "accepted", "{r}");
            updated(
                &mut m,
                &uri,
                Duration::from_secs(15),
                "an edit after the move",
            );
            drop(silent);
        })
        .await
    };
    set_partition_option(&router, ps, &original).await;
    if let Err(e) = body {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// docs/scale-out.md, "Sessions on the shards": a call through the router whose
/// `patchdiff-mcp` was killed while its statement on the shard waited for a row lock commits
/// nothing, however long the lock is held. The router's session checks every second that its
/// client is still there (patchdiff-mcp sets `client_connection_check_interval` on its sessions)
/// and ends, which closes PL/Proxy's session on the shard; that session checks too (the setting
/// on each partition database, scripts/shards.sh) and its statement is cancelled while the lock
/// is still held. Without the shard's setting it waited for the lock and then committed an edit
/// nobody would hear of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_front_end_was_killed_commits_nothing_on_its_shard() {
    let _shards = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let id = create(&router, "orphan.md", "alpha beta\n").await;
    let partition = &layout.partitions[partition_of(&id, layout.partitions.len())];
    let shard = connect(partition).await;
    let holder = connect(partition).await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{id}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let mut m = mcp(&router_dsn());
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "patchdiff_submit_edits", "arguments": {"target_file_id": id, "intent": "orphan",
        "expected_target_version": 0, "edits": [{"match": "alpha", "replace": "ALPHA"}]}}});
    m.send(format!("{request}\n").as_bytes());
    let waiter = "SELECT pid FROM pg_stat_activity \
                   WHERE datname = current_database() AND $1 = ANY (pg_blocking_pids(pid))";
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let orphan: i32 = loop {
        if let Some(row) = shard.query_opt(waiter, &[&holder_pid]).await.unwrap() {
            break row.get(0);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the call never waited for the lock on its shard"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    m.kill();
    // The lock stays held until the shard's session has ended.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while shard
        .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&orphan])
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the shard's session of a killed front end's call still waits for the lock 15 s later"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    holder.batch_execute("ROLLBACK").await.unwrap();
    let r = call(
        &router,
        "patchdiff_read_target",
        &json!({"target_file_id": id}),
    )
    .await;
    assert_eq!(
        (&r["version"], &r["text"]),
        (&json!(0), &json!("alpha beta\n")),
        "{r}"
    );
    assert_eq!(
        patchdiff_tests::logged_attempts(&shard, &id).await,
        0,
        "nothing was written for the killed call"
    );
}

/// The answer of `function` to arguments given as JSON text, as the text the database wrote.
async fn answer_text(c: &Client, function: &str, args: &str) -> String {
    c.query_one(
        &format!("SELECT {function}($1::text::json)::text"),
        &[&args],
    )
    .await
    .unwrap_or_else(|e| panic!("{function}: {e:?}"))
    .get(0)
}

/// helper-88, finding 1: arguments over `patchdiff.max_argument_bytes` are refused by the router
/// before it reads them (no parse, no partition function, no call of any shard), with exactly the
/// answer a shard gives, byte for byte, by every public function of the router that takes
/// arguments (the typed `patchdiff_submit` too, measured as the shard measures it). The router's
/// limit is its own setting: a session's lower one is honoured (which proves that the router
/// answered: the shards keep their default), its default is the extension's (16 MiB), and a
/// session cannot raise it above 16 MiB for itself, while ALTER ROLE ... SET (a superuser's) can.
/// Before, a 64 MiB argument took a router backend to 677 MB (942 MB for the list of targets,
/// which also sent it to every partition).
#[tokio::test]
async fn arguments_over_the_limit_are_refused_by_the_router_as_a_shard_refuses_them() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    let id = create(&router, "too-large.md", "alpha\n").await;
    let shard = connect(&layout.partitions[partition_of(&id, layout.partitions.len())]).await;
    let limited = connect(&router_dsn()).await;
    for c in [&limited, &shard] {
        c.batch_execute("SET patchdiff.max_argument_bytes = '2kB'")
            .await
            .unwrap();
    }
    let args = json!({"target_file_id": id, "intent": "x".repeat(3000)}).to_string();
    let functions = [
        "patchdiff_export_target",
        "patchdiff_find_occurrences",
        "patchdiff_get_manifest_ledger",
        "patchdiff_get_pdcp_log",
        "patchdiff_get_target",
        "patchdiff_preview",
        "patchdiff_read_lines",
        "patchdiff_read_target",
        "patchdiff_replay",
        "patchdiff_diff",
        "patchdiff_grant",
        "patchdiff_observe_scope",
        "patchdiff_revoke",
        "patchdiff_save",
        "patchdiff_submit_edits",
        "patchdiff_submit_observed_operations",
        "patchdiff_submit_operations",
        "patchdiff_submit_replacement",
        "patchdiff_submit_changeset",
        "patchdiff_list_targets",
        "patchdiff_initialize_target",
        "patchdiff_handle_upload",
    ];
    for function in functions {
        let routed = answer_text(&limited, function, &args).await;
        let direct = answer_text(&shard, function, &args).await;
        assert_eq!(routed, direct, "{function}");
        assert!(
            routed.contains("\"code\":\"arguments_too_large\"")
                && routed.contains("limit of 2048 bytes"),
            "{function}: {routed}"
        );
    }
    // The typed submission: `edits` alone over the limit, and the texts together.
    let typed = "SELECT patchdiff_submit($1::text::uuid, $2, $3::text::json, 0, NULL, $4)::text";
    let edits = json!([{"match": "alpha", "replace": "x".repeat(2100)}]).to_string();
    let small = json!([{"match": "alpha", "replace": "beta"}]).to_string();
    let intent = "i".repeat(1100);
    let key = "k".repeat(1000);
    for (intent, edits, key) in [
        ("x", edits.as_str(), "key"),
        (intent.as_str(), small.as_str(), key.as_str()),
    ] {
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [&id, &intent, &edits, &key];
        let routed: String = limited.query_one(typed, &params).await.unwrap().get(0);
        let direct: String = shard.query_one(typed, &params).await.unwrap().get(0);
        assert_eq!(routed, direct, "patchdiff_submit");
        assert!(routed.contains("arguments_too_large"), "{routed}");
    }
    // The router's default is the extension's: 16 MiB, whatever the session says above it.
    let over = |bytes: usize| {
        let empty = json!({"target_file_id": id, "intent": ""})
            .to_string()
            .len();
        json!({"target_file_id": id, "intent": "x".repeat(bytes - empty)}).to_string()
    };
    let args = over(16 * 1_048_576 + 10);
    let direct = connect(&layout.partitions[partition_of(&id, layout.partitions.len())]).await;
    let expected = answer_text(&direct, "patchdiff_read_target", &args).await;
    assert!(expected.contains("limit of 16777216 bytes"), "{expected}");
    assert_eq!(
        answer_text(&router, "patchdiff_read_target", &args).await,
        expected
    );
    let layout_role = patchdiff_tests::roles::unique("too_large");
    let dsn = role_everywhere(&layout, &layout_role).await;
    let tenant = connect(&dsn).await;
    tenant
        .batch_execute("SET patchdiff.max_argument_bytes = '64MB'")
        .await
        .unwrap();
    let args = over(21 * 1_048_576);
    let held = answer_text(&tenant, "patchdiff_read_target", &args).await;
    assert!(
        held.contains("over this server's limit of 16777216 bytes"),
        "a session's own raise is held at 16 MiB: {held}"
    );
    // A superuser's ALTER ROLE ... SET raises it (the router then refuses at 20 MiB).
    router
        .batch_execute(&format!(
            "ALTER ROLE {layout_role} IN DATABASE patchdiff SET patchdiff.max_argument_bytes = '20MB'"
        ))
        .await
        .unwrap();
    let tenant = connect(&dsn).await;
    let raised = answer_text(&tenant, "patchdiff_read_target", &args).await;
    router
        .batch_execute(&format!(
            "ALTER ROLE {layout_role} IN DATABASE patchdiff RESET patchdiff.max_argument_bytes"
        ))
        .await
        .unwrap();
    assert!(
        raised.contains("over this server's limit of 20971520 bytes"),
        "{raised}"
    );
}

/// Locks the partition's table of targets (every read of its targets waits) for 4 s; the
/// handle ends once it is released.
async fn hold_targets(partition: &str) -> tokio::task::JoinHandle<()> {
    let holder = connect(partition).await;
    holder
        .batch_execute("BEGIN; LOCK TABLE patchdiff.targets IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(4)).await;
        holder.batch_execute("ROLLBACK").await.unwrap();
    })
}

/// helper-88, finding 2: PL/Proxy checks the server's `query_timeout` whenever a connection of
/// the call shows activity, so a read whose answer arrives in several reads after a wait longer
/// than `query_timeout` is ended ("query timeout"). Here an export of a 4 MB target waits on
/// its partition for a table lock held longer than a `query_timeout` of 2 s. The read is
/// answered SQLSTATE 57014 with a message that says nothing was written (it was PL/Proxy's
/// XX000, unclassified), and patchdiff-mcp answers it `cancelled`, nothing written. The default
/// of scripts/shards.sh is twice patchdiff-mcp's statement timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_ended_by_the_query_timeout_is_answered_nothing_written() {
    let _turn = SHARDS.write().await;
    let router = connect(&router_dsn()).await;
    let option: String = router
        .query_one(
            "SELECT o FROM pg_foreign_server s, unnest(s.srvoptions) o \
             WHERE s.srvname = 'patchdiff' AND o LIKE 'query_timeout=%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(option, format!("query_timeout={QUERY_TIMEOUT}"));
    let layout = layout(&router).await;
    let line = format!("{}\n", "abcdefghij".repeat(10));
    let id = create(&router, "timeout.md", &line.repeat(40_000)).await;
    let partition = layout.partitions[partition_of(&id, layout.partitions.len())].clone();
    let body = {
        let (id, partition) = (id.clone(), partition.clone());
        tokio::spawn(async move {
            let router = connect(&router_dsn()).await;
            router
                .batch_execute("ALTER SERVER patchdiff OPTIONS (SET query_timeout '2')")
                .await
                .unwrap();
            let session = connect(&router_dsn()).await;
            let released = hold_targets(&partition).await;
            let started = std::time::Instant::now();
            let e = session
                .query_one(
                    "SELECT patchdiff_export_target($1::text::json)::text",
                    &[&json!({"target_file_id": id}).to_string()],
                )
                .await
                .expect_err("an export cut by the query_timeout");
            released.await.unwrap();
            let db = e.as_db_error().expect("a server error");
            assert_eq!(db.code().code(), "57014", "{db:?}");
            assert!(
                db.message().contains("query_timeout")
                    && db.message().contains("nothing was written"),
                "{}",
                db.message()
            );
            eprintln!(
                "a read cut by the query_timeout: {} after {:?} ({})",
                db.code().code(),
                started.elapsed(),
                db.message()
            );
            // Through patchdiff-mcp: `cancelled`, nothing written.
            let mut m = tokio::task::block_in_place(|| mcp(&router_dsn()));
            let released = hold_targets(&partition).await;
            let args = json!({"target_file_id": id});
            let r = tokio::task::block_in_place(|| tool(&mut m, "patchdiff_export_target", args));
            released.await.unwrap();
            assert_eq!(
                (&r["status"], &r["nothing_written"], &r["retryable"]),
                (&json!("cancelled"), &json!(true), &json!(true)),
                "{r}"
            );
        })
        .await
    };
    router
        .batch_execute(&format!(
            "ALTER SERVER patchdiff OPTIONS (SET query_timeout '{QUERY_TIMEOUT}')"
        ))
        .await
        .unwrap();
    if let Err(e) = body {
        std::panic::resume_unwind(e.into_panic());
    }
    // Under the default, the same export waits out the lock and answers.
    let released = hold_targets(&partition).await;
    let exported = call(
        &router,
        "patchdiff_export_target",
        &json!({"target_file_id": id}),
    )
    .await;
    released.await.unwrap();
    assert_eq!(exported["status"], "ok", "{}", exported["status"]);
}

/// helper-88, finding 3: a role the router knows but a shard does not (or one the shard's
/// authentication refuses) is not an outage. The router raises SQLSTATE 28000 naming the role
/// and the partition, with no hint to retry (it raised 08001 "unavailable ... Retry later", which
/// patchdiff-mcp answered as retryable for ever), for a call of one target, the list and a new
/// target; patchdiff-mcp does not answer it as retryable.
#[tokio::test]
async fn a_role_a_shard_refuses_is_not_an_outage() {
    let _turn = SHARDS.read().await;
    let router = connect(&router_dsn()).await;
    let layout = layout(&router).await;
    assert!(layout.shards >= 2, "this test needs two shards at least");
    let role = patchdiff_tests::roles::unique("router_only");
    // On the router and on shard cluster 0 (partition 0's, which patchdiff-mcp reads as it
    // starts), not on shard cluster 1 (partition 1's).
    for dsn in [
        router_dsn().replace("dbname=patchdiff", "dbname=postgres"),
        layout.partitions[0].replace("dbname=patchdiff_p0", "dbname=postgres"),
    ] {
        connect(&dsn)
            .await
            .batch_execute(&format!("CREATE ROLE {role} LOGIN"))
            .await
            .unwrap();
    }
    let dsn = router_dsn().replace("user=postgres", &format!("user={role}"));
    let tenant = connect(&dsn).await;
    let on_shard_1 = "00000001-0000-4000-8000-000000000000";
    assert_eq!(
        partition_of(on_shard_1, layout.partitions.len()) % layout.shards,
        1
    );
    let refused = |e: tokio_postgres::Error, what: &str| {
        let db = e.as_db_error().expect("a server error").clone();
        assert_eq!(db.code().code(), "28000", "{what}: {db:?}");
        assert!(
            db.message().starts_with(&format!(
                "patchdiff: role {role} cannot log in on partition "
            )) && db.message().contains("nothing was written"),
            "{what}: {}",
            db.message()
        );
        assert!(
            !db.hint()
                .unwrap_or_default()
                .to_lowercase()
                .contains("retry"),
            "{what}: {:?}",
            db.hint()
        );
        db
    };
    let e = tenant
        .query_one(
            "SELECT patchdiff_read_target($1::text::json)::text",
            &[&json!({"target_file_id": on_shard_1}).to_string()],
        )
        .await
        .unwrap_err();
    let db = refused(e, "read");
    assert!(db.message().contains("on partition 1:"), "{}", db.message());
    let e = tenant
        .query_one(
            "SELECT patchdiff_submit_edits($1::text::json)::text",
            &[
                &json!({"target_file_id": on_shard_1, "intent": "x", "expected_target_version": 0,
                     "client_request_id": "k", "edits": [{"match": "a", "replace": "b"}]})
                .to_string(),
            ],
        )
        .await
        .unwrap_err();
    refused(e, "keyed write");
    let e = tenant
        .query_one("SELECT patchdiff_list_targets('{}')::text", &[])
        .await
        .unwrap_err();
    refused(e, "list");
    // A new target lands on a random partition: made on shard 0, refused on shard 1, never
    // `unavailable` after trying every partition.
    let mut refusals = 0;
    for i in 0..24 {
        match tenant
            .query_one(
                "SELECT patchdiff_initialize_target($1::text::json)::text",
                &[&json!({"filename": format!("r{i}.md"), "content": "x"}).to_string()],
            )
            .await
        {
            Ok(_) => {}
            Err(e) => {
                refused(e, "creation");
                refusals += 1;
            }
        }
    }
    assert!(refusals > 0, "no creation of 24 was sent to shard 1");
    // patchdiff-mcp as that role: `refused` / `login_refused`, nothing written, not retryable.
    let mut m = mcp(&dsn);
    let r = tool(
        &mut m,
        "patchdiff_read_target",
        json!({"target_file_id": on_shard_1}),
    );
    assert_eq!(
        (
            &r["status"],
            &r["code"],
            &r["retryable"],
            &r["nothing_written"]
        ),
        (
            &json!("refused"),
            &json!("login_refused"),
            &json!(false),
            &json!(true)
        ),
        "{r}"
    );
    assert!(
        r["failure_detail"]
            .as_str()
            .is_some_and(|d| d.contains("cannot log in on partition 1")),
        "{r}"
    );
}
