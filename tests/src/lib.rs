//! Shared by the end-to-end tests and the benchmark: a connection to a real PostgreSQL with
//! pg_patchdiff installed, and one call of its JSON API.

use serde_json::Value;
use tokio_postgres::{Client, GenericClient, NoTls};

pub mod bench;
pub mod fuzz;
pub mod golden;
pub mod http;
pub mod roles;
pub mod stdio;
pub mod stress;

/// A fresh, empty directory `<tmp>/<prefix>-<pid>-<name>` for one test.
pub fn scratch_dir(prefix: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The workspace binding key file every front end of this test process shares (a target
/// imported by one front end is published by another in some tests), outside every test's
/// root: `<tmp>/<prefix>-<pid>-key/workspace.key`.
pub fn workspace_key_file(prefix: &str) -> std::path::PathBuf {
    std::env::temp_dir()
        .join(format!("{prefix}-{}-key", std::process::id()))
        .join("workspace.key")
}

/// Connects and drives the connection on the current Tokio runtime.
pub async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection error: {e}");
        }
    });
    Ok(client)
}

/// Whether `client` is connected to a sharded deployment's PL/Proxy router
/// (sql/router/patchdiff_router.sql) rather than to a database with pg_patchdiff.
pub async fn is_router(client: &impl GenericClient) -> bool {
    client
        .query_one(
            "SELECT to_regproc('patchdiff_router.publication_partition') IS NOT NULL",
            &[],
        )
        .await
        .expect("inspecting the database")
        .get(0)
}

/// Whether `e` is the error of a call PostgreSQL cancelled (a `statement_timeout`, a cancel
/// request): SQLSTATE 57014, or through a router, for a write, 40003: the router cannot tell
/// whether the shard committed first (docs/scale-out.md, "When a call's outcome is unknown").
pub async fn is_cancelled(client: &impl GenericClient, e: &tokio_postgres::Error) -> bool {
    use tokio_postgres::error::SqlState;
    match e.code() {
        Some(c) if *c == SqlState::QUERY_CANCELED => true,
        Some(c) if *c == SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN => is_router(client).await,
        _ => false,
    }
}

/// The connection strings of the databases that hold targets' rows behind `dsn`: `dsn` itself,
/// or through a router every partition's (as the same user).
pub async fn table_dsns(dsn: &str) -> Vec<String> {
    let c = connect(dsn).await.expect("connecting");
    if !is_router(&c).await {
        return vec![dsn.to_owned()];
    }
    c.query(
        "SELECT substr(o, strpos(o, '=') + 1) FROM pg_foreign_server s, unnest(s.srvoptions) o \
          WHERE s.srvname = 'patchdiff' AND o ~ '^p[0-9]+=' ORDER BY substring(o FROM '^p([0-9]+)')::int",
        &[],
    )
    .await
    .expect("reading the router's partitions")
    .iter()
    .map(|r| as_caller(dsn, &direct(r.get(0))))
    .collect()
}

/// A partition's connection string as a direct client uses it: without the search path that
/// the router's string pins for PL/Proxy's sessions (`options=-csearch_path=...`, docs/scale-out.md
/// "Roles"), under which the API's unqualified names would not be found.
pub fn direct(partition: &str) -> String {
    partition
        .split_whitespace()
        .filter(|w| !w.starts_with("options="))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The server's settings that change what a benchmark or load run measures, for printing with
/// its figures: a preloaded library (`pg_stat_statements` with `track = all`, `auto_explain`)
/// slows every statement, so a figure taken with one is not comparable with one taken without
/// (docs/benchmarks.md, "A check on this VM"); `fsync` and `synchronous_commit` change every
/// commit. Through a router, the router's own server.
pub async fn server_settings(client: &Client) -> Result<String, tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT current_setting('server_version'), current_setting('shared_preload_libraries'), \
                    current_setting('fsync'), current_setting('synchronous_commit'), \
                    current_setting('shared_buffers')",
            &[],
        )
        .await?;
    let get = |i: usize| row.get::<_, String>(i);
    let preload = get(1);
    let mut line = format!(
        "PostgreSQL {}, shared_preload_libraries = '{preload}', fsync = {}, synchronous_commit = {}, shared_buffers = {}",
        get(0),
        get(2),
        get(3),
        get(4)
    );
    if !preload.trim().is_empty() {
        line.push_str(
            " (a preloaded library slows every statement: compare only with runs that had the same)",
        );
    }
    Ok(line)
}

/// Whether a test of one database's own objects and processes (its tables' privileges and
/// triggers, pg_dump, its backends and server log) must not run here because `dsn` is a router,
/// whose database holds no pg_patchdiff: each shard is such a database, and the test command runs
/// these tests against one (scripts/test.sh). Says so on stderr, with the reason.
pub async fn not_through_a_router(dsn: &str, why: &str) -> bool {
    let router = is_router(&connect(dsn).await.expect("connecting")).await;
    if router {
        eprintln!("not applicable through a router: {why}");
    }
    router
}

/// The `postgres` database of each shard cluster behind a router `dsn` (roles are per cluster,
/// so a test's roles must exist there too: docs/scale-out.md, "Roles"); none on one database.
pub async fn shard_clusters(dsn: &str) -> Vec<String> {
    let c = connect(dsn).await.expect("connecting");
    if !is_router(&c).await {
        return Vec::new();
    }
    let clusters: std::collections::BTreeSet<String> = table_dsns(dsn)
        .await
        .iter()
        .map(|d| {
            let mut words: Vec<&str> = d
                .split_whitespace()
                .filter(|w| !w.starts_with("dbname="))
                .collect();
            words.push("dbname=postgres");
            words.join(" ")
        })
        .collect();
    clusters.into_iter().collect()
}

/// The connection string of the database that holds `target`'s rows: `dsn` itself, or through a
/// router (docs/scale-out.md) the partition that owns the target, as the same user.
pub async fn table_dsn_for(dsn: &str, target: &str) -> String {
    let c = connect(dsn).await.expect("connecting");
    if !is_router(&c).await {
        return dsn.to_owned();
    }
    let partition: String = c
        .query_one(
            "SELECT conninfo FROM patchdiff_router.publication_partition(\
               json_build_object('target_file_id', $1::text))",
            &[&target],
        )
        .await
        .expect("asking the router for the target's partition")
        .get(0);
    as_caller(dsn, &direct(&partition))
}

/// A connection to the database that holds `target`'s rows (tables, row locks, sessions):
/// [`table_dsn_for`]. Tests that read or lock tables use it; their API calls still go through
/// `dsn`.
pub async fn tables_for(dsn: &str, target: &str) -> Client {
    connect(&table_dsn_for(dsn, target).await)
        .await
        .expect("connecting to the database of the target's rows")
}

/// Through a router, ends the sessions in `target`'s partition database that wait on a lock held
/// by a session whose query names `target` (a test's `SELECT ... FOR UPDATE` of that target's
/// row): the sessions PL/Proxy opened there for calls whose router sessions the test ended.
/// Ending the router's session alone leaves such a call waiting until its shard session notices
/// (`client_connection_check_interval`, up to a second: docs/scale-out.md), to commit if the lock
/// is released meanwhile. Other tests' waiters, blocked by other holders, are left alone. Nothing to do on one
/// database, where the test ended the call's own session.
pub async fn end_lock_waiters_behind_router(dsn: &str, target: &str) {
    if !is_router(&connect(dsn).await.expect("connecting")).await {
        return;
    }
    tables_for(dsn, target)
        .await
        .execute(
            "SELECT pg_terminate_backend(w.pid, 10000) FROM pg_stat_activity w \
              WHERE w.datname = current_database() AND w.wait_event_type = 'Lock' \
                AND EXISTS (SELECT 1 FROM pg_stat_activity h \
                             WHERE h.pid = ANY (pg_blocking_pids(w.pid)) \
                               AND strpos(h.query, $1) > 0)",
            &[&target],
        )
        .await
        .expect("ending the partition's lock waiters");
}

/// A session of `dsn` that holds the change feed's key exclusively, as any role may: a listening
/// session then registers through a second session that waits for the key (docs/sql-api.md "The
/// change feed"). The key is let go when the session ends.
pub async fn holding_the_feed_key(dsn: &str) -> Client {
    use patchdiff_engine::api::feed::{LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2};
    let holder = connect(dsn).await.expect("connecting");
    holder
        .batch_execute(&format!(
            "SELECT pg_catalog.pg_advisory_lock({LISTENER_LOCK_KEY1}, {LISTENER_LOCK_KEY2})"
        ))
        .await
        .expect("taking the feed's key");
    holder
}

/// Asks `done` every `every` until it says yes; panics with `what` if it has not within
/// `within`.
pub async fn eventually<F, Fut>(
    what: &str,
    within: std::time::Duration,
    every: std::time::Duration,
    mut done: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = std::time::Instant::now() + within;
    while !done().await {
        assert!(
            std::time::Instant::now() < until,
            "{what}: not within {within:?}"
        );
        tokio::time::sleep(every).await;
    }
}

/// Waits up to 20 s until some session waits for a lock that session `holder` holds, read on
/// `observer` (which may be the holder itself, inside its transaction: the activity snapshot is
/// cleared before each look). Panics with `what` if none does.
pub async fn wait_until_blocked_by(observer: &Client, holder: i32, what: &str) {
    eventually(
        what,
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(50),
        || async { blocked_by(observer, holder).await > 0 },
    )
    .await;
}

/// The number of sessions waiting for a lock that session `holder` holds, read on `observer`.
pub async fn blocked_by(observer: &Client, holder: i32) -> i64 {
    observer
        .batch_execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
        .await
        .expect("clearing the activity snapshot");
    observer
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity \
              WHERE $1 = ANY (pg_catalog.pg_blocking_pids(pid))",
            &[&holder],
        )
        .await
        .expect("reading lock waits")
        .get(0)
}

/// Where a caller's own transaction around calls on `target` runs: on `client` (a connection to
/// `dsn`), or through a router on a direct connection to the target's partition, since a
/// transaction cannot span PL/Proxy's calls (docs/scale-out.md, "What differs through the
/// router", which tells applications to do the same).
pub async fn caller_transaction_client(dsn: &str, target: &str, client: Client) -> Client {
    if is_router(&client).await {
        tables_for(dsn, target).await
    } else {
        client
    }
}

/// A partition's connection string with `dsn`'s user and password.
fn as_caller(dsn: &str, partition: &str) -> String {
    let own: tokio_postgres::Config = dsn.parse().expect("PATCHDIFF_TEST_DSN");
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut out = partition.to_owned();
    if let Some(user) = own.get_user() {
        out.push_str(&format!(" user={}", quote(user)));
    }
    if let Some(password) = own.get_password() {
        out.push_str(&format!(
            " password={}",
            quote(&String::from_utf8_lossy(password))
        ));
    }
    out
}

/// The SQL that calls one API function. Arguments cross as text and are cast to `json` in SQL
/// (not `jsonb`), as the front end sends them; the result comes back as text.
pub fn call_sql(function: &str) -> String {
    // The name is spliced into SQL, so only the API's own names are accepted.
    assert!(
        function.starts_with("patchdiff_")
            && function
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_'),
        "not a pg_patchdiff API function: {function}"
    );
    format!("SELECT {function}($1::text::json)::text")
}

/// Calls `function(args::json)` on `client` (a connection or an open transaction).
pub async fn call(
    client: &impl GenericClient,
    function: &str,
    args: &Value,
) -> Result<Value, tokio_postgres::Error> {
    let row = client
        .query_one(&call_sql(function), &[&args.to_string()])
        .await?;
    let text: String = row.get(0);
    Ok(serde_json::from_str(&text).expect("pg_patchdiff returned invalid JSON"))
}

/// Grants `role` read access to `target` (`patchdiff_grant`), or with `read: false` revokes it
/// (`patchdiff_revoke`), as `client`, the target's owner; panics unless it is done.
pub async fn share_read(client: &impl GenericClient, target: &str, role: &str, read: bool) {
    let (function, args) = if read {
        (
            "patchdiff_grant",
            serde_json::json!({"target_file_id": target, "role": role, "privilege": "read"}),
        )
    } else {
        (
            "patchdiff_revoke",
            serde_json::json!({"target_file_id": target, "role": role}),
        )
    };
    let r = call(client, function, &args).await.unwrap();
    assert_eq!(r["status"], "ok", "{function}: {r}");
}

/// The process ID of the backend serving `c` (`pg_backend_pid()`).
pub async fn backend_pid(c: &impl GenericClient) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pg_backend_pid()")
        .get(0)
}

/// Runs `f` on a new connection to `dsn`, on a runtime of its own: for tests that are not async.
pub fn with_sql<T>(dsn: &str, f: impl AsyncFnOnce(&Client) -> T) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let c = connect(dsn).await.expect("connecting");
        f(&c).await
    })
}

/// The version `patchdiff.targets` holds for target `id` (read as `c`, which may read the table).
pub async fn stored_version(c: &impl GenericClient, id: &str) -> i64 {
    c.query_one(
        "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        &[&id],
    )
    .await
    .expect("the target's version")
    .get(0)
}

/// A size field of process `pid`'s `/proc/<pid>/status` (`VmSize:`, `VmHWM:`), in bytes.
pub fn proc_status_bytes(pid: impl std::fmt::Display, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("process {pid} is not on this machine: {e}"));
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} of {pid}"));
    kb * 1024
}

/// How many attempts the log holds for a target, read from its table directly.
pub async fn logged_attempts(c: &impl GenericClient, id: &str) -> i64 {
    c.query_one(
        "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
        &[&id],
    )
    .await
    .expect("the target's attempts")
    .get(0)
}

/// Initializes a target with `content` and returns its `target_file_id`.
pub async fn initialize_target(
    client: &impl GenericClient,
    filename: &str,
    content: &str,
) -> Result<String, tokio_postgres::Error> {
    let r = call(
        client,
        "patchdiff_initialize_target",
        &serde_json::json!({"filename": filename, "content": content}),
    )
    .await?;
    assert_eq!(r["status"], "ok", "initialize failed: {r}");
    Ok(r["target_file_id"]
        .as_str()
        .expect("target_file_id")
        .to_owned())
}

/// An answer without its observation ids, `observation_id` and `observation_bundle_id` (two
/// observations of the same scopes differ only there): what a bundle observed in one backend
/// and in another must agree on.
pub fn without_ids(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "observation_id" | "observation_bundle_id"))
                .map(|(k, v)| (k.clone(), without_ids(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_ids).collect()),
        other => other.clone(),
    }
}

/// Arguments of `patchdiff_submit_observed_operations` that apply one `match` -> `replace` in
/// each scope of the observed bundle `b`, under the bundle's snapshot.
pub fn one_match_per_group(
    target: &str,
    b: &Value,
    find: &str,
    replace: &str,
    intent: &str,
    request_id: &str,
) -> Value {
    let snap = &b["snapshot"];
    let groups: Vec<Value> = b["scopes"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|g| {
            serde_json::json!({"observation_id": g["observation_id"], "operations": [
                {"op": "match", "match": find, "replace": replace}]})
        })
        .collect();
    serde_json::json!({
        "target_file_id": target,
        "observation_bundle_id": snap["observation_bundle_id"],
        "expected_target_version": snap["expected_target_version"],
        "expected_current_hash": snap["expected_current_hash"],
        "intent": intent,
        "client_request_id": request_id,
        "groups": groups,
    })
}

/// The PL/Proxy router's former copy of the arguments (before 2026-12-06: a regular expression
/// that rewrote `\u0000` and surrogate escapes as `\u0020`), as a temporary function
/// `pg_temp.readable_regexp(json)` of the session that runs it: the oracle `shards.rs` compares
/// the router's copy with, and the baseline `patchdiff-router-bench` times it against.
pub const FORMER_ROUTER_READABLE_SQL: &str = r#"CREATE FUNCTION pg_temp.readable_regexp(args json) RETURNS json
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF strpos(args::text, E'\\u') = 0 THEN RETURN args; END IF;
  RETURN regexp_replace(args::text,
    E'\\\\u(0000|[dD][89abcdefABCDEF][0-9a-fA-F]{2})', E'\\\\u0020', 'g')::json;
END $$;"#;
