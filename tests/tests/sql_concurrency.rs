//! End-to-end tests of the SQL API's concurrency and audit guarantees, against a real
//! PostgreSQL 15 with pg_patchdiff installed.
//!
//! Environment:
//! - `PATCHDIFF_TEST_DSN` (required): a libpq-style connection string for a superuser (the
//!   extension owner), e.g. `host=127.0.0.1 port=54331 user=postgres dbname=pd_helper`.
//!   `pg_dump_keeps_log_rows` takes host, port, user and dbname from it too.
//! - `PATCHDIFF_PG_BIN` (optional): directory holding `pg_dump`; default
//!   `/usr/lib/postgresql/15/bin`.
//!
//! Every test creates its own targets, so the tests can run in parallel on one database; the
//! ones that truncate or hold a write transaction open run on a database of their own
//! (`on_own_database`).

use patchdiff_tests::backend_pid;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use tokio::sync::Barrier;
use tokio_postgres::Client;

/// How long a test waits for the other side of a race to block before it gives up.
const RACE_TIMEOUT: Duration = Duration::from_secs(10);

fn dsn() -> String {
    // CI always sets it; skipping silently would turn a broken set-up into a green run.
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

async fn client() -> Client {
    connect(&dsn())
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN")
}

/// A version-guarded tx/1 submission that replaces one word.
fn replace_word(target: &str, word: &str, version: i64) -> Value {
    json!({
        "target_file_id": target,
        "expected_target_version": version,
        "intent": format!("uppercase {word}"),
        "edits": [{"match": word, "replace": word.to_uppercase()}],
    })
}

/// Attempt rows per status for one target, from the log itself.
async fn logged_statuses(c: &Client, target: &str) -> Vec<(String, i64)> {
    c.query(
        "SELECT status, count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid GROUP BY status ORDER BY status",
        &[&target],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

async fn logged_ids(c: &Client, target: &str) -> BTreeSet<String> {
    c.query(
        "SELECT pdcp_log_id::text FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
        &[&target],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

async fn current_version(c: &Client, target: &str) -> i64 {
    let t = call(
        c,
        "patchdiff_get_target",
        &json!({"target_file_id": target}),
    )
    .await
    .unwrap();
    t["version"]
        .as_i64()
        .unwrap_or_else(|| panic!("no version in {t}"))
}

/// Waits until backend `pid` is blocked on a heavyweight lock (here: the target's row lock).
/// Returns false if it never is within `RACE_TIMEOUT`.
async fn wait_until_blocked(observer: &Client, pid: i32) -> bool {
    let deadline = tokio::time::Instant::now() + RACE_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        let row = observer
            .query_opt(
                "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'",
                &[&pid],
            )
            .await
            .unwrap();
        if row.is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// One side of the two-transaction race: submit inside `BEGIN`; if accepted, keep the
/// transaction (and so the row lock) open until the peer is seen blocked behind it, then
/// commit. A rejection is a value, not an error, so the loser commits too and its attempt row
/// becomes durable.
async fn submit_in_transaction(
    c: &mut Client,
    observer: &Client,
    peer_pid: i32,
    args: &Value,
) -> (Value, bool) {
    let tx = c.transaction().await.unwrap();
    let r = call(&tx, "patchdiff_submit_edits", args).await.unwrap();
    let saw_peer_blocked =
        r["status"] == "accepted" && wait_until_blocked(observer, peer_pid).await;
    tx.commit().await.unwrap();
    (r, saw_peer_blocked)
}

/// Contract, patchdiff_submit_edits: "Validated deterministically and committed atomically
/// under SELECT ... FOR UPDATE", with `expected_target_version` as the target version guard and
/// every attempt, accepted or rejected, durable in the append-only log. Two submissions with
/// the same guard race: exactly one is accepted, the other waits for the row lock, then sees
/// the new version and is rejected with `target_version_mismatch`; both attempts are logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_version_guard_race_accepts_exactly_one() {
    // Two callers in their own explicit transactions: through a router, on the target's
    // partition (docs/scale-out.md, "What differs through the router").
    let api = client().await;
    let target = initialize_target(&api, "race.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let home = patchdiff_tests::table_dsn_for(&dsn(), &target).await;
    let observer = connect(&home).await.unwrap();
    let (mut a, mut b) = (connect(&home).await.unwrap(), connect(&home).await.unwrap());
    let (pid_a, pid_b) = (backend_pid(&a).await, backend_pid(&b).await);
    let (edit_a, edit_b) = (
        replace_word(&target, "alpha", 0),
        replace_word(&target, "beta", 0),
    );
    // Whichever takes the row lock first wins; the winner holds its transaction open until the
    // loser is visibly waiting on that lock, so the race goes through the lock every time
    // instead of depending on a sleep being long enough.
    let ((ra, a_saw), (rb, b_saw)) = tokio::join!(
        submit_in_transaction(&mut a, &observer, pid_b, &edit_a),
        submit_in_transaction(&mut b, &observer, pid_a, &edit_b),
    );
    let results = [&ra, &rb];
    let accepted: Vec<_> = results
        .iter()
        .filter(|r| r["status"] == "accepted")
        .collect();
    let rejected: Vec<_> = results
        .iter()
        .filter(|r| r["status"] == "rejected")
        .collect();
    assert_eq!(
        (accepted.len(), rejected.len()),
        (1, 1),
        "expected one winner: {ra}\n{rb}"
    );
    assert_eq!(
        rejected[0]["failure_reason"], "target_version_mismatch",
        "{}",
        rejected[0]
    );
    assert!(
        a_saw || b_saw,
        "the loser never waited on the winner's row lock"
    );
    assert_eq!(accepted[0]["version"], 1);
    assert_eq!(
        logged_statuses(&observer, &target).await,
        [("accepted".into(), 1), ("rejected".into(), 1)]
    );
    let ids: BTreeSet<String> = results
        .iter()
        .map(|r| r["pdcp_log_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        logged_ids(&observer, &target).await,
        ids,
        "each response names its own log row"
    );
    assert_eq!(current_version(&observer, &target).await, 1);

    // Autocommit, as the front end calls: N callers released together by a barrier.
    const N: usize = 8;
    let words: Vec<String> = (0..N).map(|i| format!("word{i}")).collect();
    let target = initialize_target(&api, "race8.md", &(words.join(" ") + "\n"))
        .await
        .unwrap();
    let observer = patchdiff_tests::tables_for(&dsn(), &target).await;
    let barrier = Arc::new(Barrier::new(N));
    let mut callers = tokio::task::JoinSet::new();
    for word in words {
        let (c, barrier, args) = (
            client().await,
            barrier.clone(),
            replace_word(&target, &word, 0),
        );
        callers.spawn(async move {
            barrier.wait().await;
            call(&c, "patchdiff_submit_edits", &args).await.unwrap()
        });
    }
    let results = callers.join_all().await;
    let count = |s: &str| results.iter().filter(|r| r["status"] == s).count();
    assert_eq!(
        (count("accepted"), count("rejected")),
        (1, N - 1),
        "{results:#?}"
    );
    for r in results.iter().filter(|r| r["status"] == "rejected") {
        assert_eq!(r["failure_reason"], "target_version_mismatch", "{r}");
    }
    assert_eq!(
        logged_statuses(&observer, &target).await,
        [("accepted".into(), 1), ("rejected".into(), N as i64 - 1)]
    );
    let ids: BTreeSet<String> = results
        .iter()
        .map(|r| r["pdcp_log_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), N);
    assert_eq!(logged_ids(&observer, &target).await, ids);
    assert_eq!(current_version(&observer, &target).await, 1);
}

/// Contract, "client_request_id": "An exact recovery of the original request returns
/// deduplicated: true without a new row", and on recovery "version/after_hash name the recorded
/// outcome and current_version/current_hash name the target's current state". A recovery writes
/// nothing, so it takes neither the target's row lock nor a transaction ID (docs/benchmarks.md,
/// "Keyed resends"): it is answered while another transaction holds that lock, with the state
/// committed before it. "Reusing its key with a different proposal returns ... a fresh durable
/// rejection": that is still decided under the lock, so it waits for the holder.
///
/// On a database of its own: it holds a write transaction open (see [`on_own_database`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_keyed_recovery_takes_no_lock_and_writes_nothing() {
    on_own_database("keyed_resend", keyed_resends).await;
}

/// Runs `body` with the connection string of a new database of its own, with the extension
/// created, and drops the database afterwards, also when `body` panics (the panic is passed on).
///
/// For the tests that take a table's `ACCESS EXCLUSIVE` lock (`TRUNCATE`, refused by a trigger
/// only once the lock is granted) and for those that hold a write transaction open: on the
/// shared database such a `TRUNCATE` queues behind every open transaction of the other tests of
/// this file, and every later statement on the table queues behind the `TRUNCATE`, so a test
/// that waits on its own open transaction would stall.
async fn on_own_database<F, Fut>(name: &str, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let server = client().await;
    let db = format!("{name}_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db} ENCODING 'UTF8' TEMPLATE template0"),
    ] {
        server.batch_execute(&sql).await.unwrap();
    }
    let home = format!("{} dbname={db}", dsn());
    connect(&home)
        .await
        .unwrap()
        .batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let outcome = tokio::spawn(body(home)).await;
    server
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn keyed_resends(home: String) {
    let api = connect(&home).await.unwrap();
    let target = initialize_target(&api, "resend.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let mut keyed = replace_word(&target, "alpha", 0);
    keyed["client_request_id"] = json!("resend-1");
    let first = call(&api, "patchdiff_submit_edits", &keyed).await.unwrap();
    assert_eq!(first["status"], "accepted", "{first}");

    // Another transaction accepts an edit and holds the row lock, uncommitted.
    let mut holder = connect(&home).await.unwrap();
    let held = holder.transaction().await.unwrap();
    let second = call(
        &held,
        "patchdiff_submit_edits",
        &replace_word(&target, "beta", 1),
    )
    .await
    .unwrap();
    assert_eq!(second["status"], "accepted", "{second}");

    // The identical resend is answered at once, as of the last commit, and assigns no
    // transaction ID: a lock wait would end in lock_not_available after 2 s.
    let mut resender = connect(&home).await.unwrap();
    let tx = resender.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL lock_timeout = '2s'")
        .await
        .unwrap();
    let again = call(&tx, "patchdiff_submit_edits", &keyed).await.unwrap();
    assert_eq!(again["status"], "accepted", "{again}");
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(again["pdcp_log_id"], first["pdcp_log_id"]);
    assert_eq!(
        (&again["version"], &again["current_version"]),
        (&json!(1), &json!(1))
    );
    assert_eq!(again["current_hash"], first["after_hash"]);
    let xid: Option<String> = tx
        .query_one("SELECT pg_catalog.txid_current_if_assigned()::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(xid, None, "an exact recovery assigned a transaction ID");
    tx.commit().await.unwrap();

    // The same key with a different proposal is a conflict to audit: it waits for the lock.
    let mut conflicting = keyed.clone();
    conflicting["edits"][0]["replace"] = json!("ALPHA!");
    let tx = resender.transaction().await.unwrap();
    tx.batch_execute("SET LOCAL lock_timeout = '200ms'")
        .await
        .unwrap();
    let waited = call(&tx, "patchdiff_submit_edits", &conflicting)
        .await
        .expect_err("a key conflict was decided without the row lock");
    assert_eq!(
        waited.code(),
        Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE),
        "{waited}"
    );
    tx.rollback().await.unwrap();

    held.commit().await.unwrap();
    let after = call(&api, "patchdiff_submit_edits", &keyed).await.unwrap();
    assert_eq!(after["deduplicated"], true, "{after}");
    assert_eq!(
        (&after["version"], &after["current_version"]),
        (&json!(1), &json!(2))
    );
    assert_eq!(after["current_hash"], second["after_hash"]);
    let conflict = call(&api, "patchdiff_submit_edits", &conflicting)
        .await
        .unwrap();
    assert_eq!(conflict["status"], "rejected", "{conflict}");
    assert_eq!(conflict["diagnostic"]["code"], "request_key_conflict");
    let checker = connect(&home).await.unwrap();
    assert_eq!(
        logged_statuses(&checker, &target).await,
        [("accepted".to_owned(), 2), ("rejected".to_owned(), 1)]
    );
}

/// Runs `sql` and returns its error message; panics if it succeeds.
async fn refused(
    c: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    match c.execute(sql, params).await {
        Ok(n) => panic!("{sql} succeeded ({n} rows)"),
        Err(e) => e
            .as_db_error()
            .map_or_else(|| e.to_string(), |d| d.message().to_owned()),
    }
}

/// A new target with one accepted edit (so that log and ledger rows name it and its cycle).
async fn target_with_one_acceptance(c: &Client, filename: &str) -> String {
    let target = initialize_target(c, filename, "one two three\n")
        .await
        .unwrap();
    let r = call(
        c,
        "patchdiff_submit_edits",
        &replace_word(&target, "two", 0),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    target
}

/// Contract (DESIGN, rules that hold everywhere): "The attempt log and the ledger are
/// append-only, enforced by the database itself (triggers and privileges), not by convention."
/// UPDATE, DELETE and TRUNCATE are refused even for the superuser who owns the tables; an
/// ordinary role cannot write the tables at all, yet can use the API, whose functions run their
/// statements as the extension's owner.
///
/// On a database of its own: it tries `TRUNCATE` (see [`on_own_database`]).
#[tokio::test]
async fn log_and_ledger_refuse_update_delete_truncate_even_for_owner() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "the log's and ledger's privileges and triggers are each shard database's",
    )
    .await
    {
        return;
    }
    on_own_database("append_only", log_and_ledger_stay).await;
}

async fn log_and_ledger_stay(home: String) {
    let c = connect(&home).await.unwrap();
    let target = target_with_one_acceptance(&c, "append-only.md").await;
    let rows_before = logged_ids(&c, &target).await;
    let ledger_rows =
        "SELECT count(*) FROM patchdiff.manifest_ledger WHERE target_file_id = $1::text::uuid";
    let ledger_before: i64 = c.query_one(ledger_rows, &[&target]).await.unwrap().get(0);
    assert_eq!(ledger_before, 1);

    // Row triggers only fire on rows that exist, so UPDATE and DELETE aim at this test's rows.
    // pdcp_logs is referenced by manifest_ledger, so a plain TRUNCATE of it already fails on
    // the foreign key; CASCADE gets past that check, and the trigger must still refuse.
    let owner_attacks = [
        (
            "pdcp_logs",
            "UPDATE patchdiff.pdcp_logs SET failure_detail = 'tampered' WHERE target_file_id = $1::text::uuid",
        ),
        (
            "pdcp_logs",
            "DELETE FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
        ),
        (
            "manifest_ledger",
            "UPDATE patchdiff.manifest_ledger SET intent = 'tampered' WHERE target_file_id = $1::text::uuid",
        ),
        (
            "manifest_ledger",
            "DELETE FROM patchdiff.manifest_ledger WHERE target_file_id = $1::text::uuid",
        ),
    ];
    // Each refusal must come from the table's own trigger: TRUNCATE ... CASCADE would also be
    // stopped by the ledger's trigger, which would hide a missing one on pdcp_logs.
    let append_only =
        |table: &str, msg: &str| msg.contains(&format!("patchdiff.{table} is append-only"));
    for (table, sql) in owner_attacks {
        let msg = refused(&c, sql, &[&target]).await;
        assert!(append_only(table, &msg), "{sql}: {msg}");
    }
    for (table, sql) in [
        ("pdcp_logs", "TRUNCATE patchdiff.pdcp_logs CASCADE"),
        ("manifest_ledger", "TRUNCATE patchdiff.manifest_ledger"),
    ] {
        let msg = refused(&c, sql, &[]).await;
        assert!(append_only(table, &msg), "{sql}: {msg}");
    }
    refused(&c, "TRUNCATE patchdiff.pdcp_logs", &[]).await;
    // Replica mode skips ordinary triggers (it is how logical replication and restores write);
    // the append-only triggers are ENABLE ALWAYS, so it changes nothing.
    c.batch_execute("SET session_replication_role = replica")
        .await
        .unwrap();
    for table in ["pdcp_logs", "manifest_ledger"] {
        let sql = format!("DELETE FROM patchdiff.{table} WHERE target_file_id = $1::text::uuid");
        let msg = refused(&c, &sql, &[&target]).await;
        assert!(append_only(table, &msg), "replica mode, {sql}: {msg}");
    }
    c.batch_execute("RESET session_replication_role")
        .await
        .unwrap();
    assert_eq!(logged_ids(&c, &target).await, rows_before);
    let ledger_after: i64 = c.query_one(ledger_rows, &[&target]).await.unwrap().get(0);
    assert_eq!(ledger_after, ledger_before);

    // An ordinary application role. Creating it may race another run of this test.
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE pd_app LOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$",
    )
    .await
    .unwrap();
    let app = connect(&home).await.unwrap();
    app.batch_execute("SET ROLE pd_app").await.unwrap();
    // A well-formed copy of an existing row, so only privileges can stop it.
    let columns = "target_file_id, editing_cycle_id, status, protocol_version, runtime_version, pdcp_content, \
        pdcp_content_hash, request_fingerprint, request_envelope, client_request_id, conflicts_with_pdcp_log_id, \
        before_version, before_hash, after_version, after_hash, failure_reason, failure_detail, failure_stage, \
        failed_change_id, diagnostic, validity, parent_pdcp_log_id, attempt, source";
    let insert = format!(
        "INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, {columns}) \
         SELECT gen_random_uuid(), {columns} FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid"
    );
    for sql in [insert.as_str(), owner_attacks[0].1, owner_attacks[1].1] {
        let msg = refused(&app, sql, &[&target]).await;
        assert!(msg.contains("permission denied"), "{sql}: {msg}");
    }
    // The target belongs to the superuser that created it (issue 15, docs/security.md): to
    // pd_app it does not exist until its owner grants it write.
    let unknown = call(
        &app,
        "patchdiff_read_target",
        &json!({"target_file_id": target}),
    )
    .await
    .unwrap();
    assert_eq!(unknown["status"], "not_found", "{unknown}");
    let granted = call(
        &c,
        "patchdiff_grant",
        &json!({"target_file_id": target, "role": "pd_app", "privilege": "write"}),
    )
    .await
    .unwrap();
    assert_eq!(granted["privilege"], "write", "{granted}");
    let read = call(
        &app,
        "patchdiff_read_target",
        &json!({"target_file_id": target}),
    )
    .await
    .unwrap();
    assert_eq!(read["text"], "one TWO three\n", "{read}");
    let r = call(
        &app,
        "patchdiff_submit_edits",
        &replace_word(&target, "three", 1),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "pd_app edits through the API: {r}");
}

/// Issue 21, item 1: the attempt log and the ledger name their target and editing cycle without
/// foreign keys (sql/schema.sql). What the keys guaranteed after the insert, that the named rows
/// stay, holds because targets and editing cycles are never removed or renumbered: DELETE,
/// TRUNCATE and a change of the ID are refused for every role, the owner included, and in
/// replica mode too, where foreign keys would not have been checked at all.
///
/// On a database of its own: it tries `TRUNCATE` (see [`on_own_database`]).
#[tokio::test]
async fn targets_and_cycles_are_never_removed_or_renumbered_even_for_owner() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "the targets' triggers are each shard database's",
    )
    .await
    {
        return;
    }
    on_own_database("keep_rows", targets_and_cycles_stay).await;
}

async fn targets_and_cycles_stay(home: String) {
    let c = connect(&home).await.unwrap();
    let target = target_with_one_acceptance(&c, "keep-rows.md").await;
    let rows_before = logged_ids(&c, &target).await;
    let kept = |table: &str, msg: &str| {
        msg.contains(&format!(
            "rows of patchdiff.{table} are never removed or renumbered"
        ))
    };
    for replica in [false, true] {
        if replica {
            c.batch_execute("SET session_replication_role = replica")
                .await
                .unwrap();
        }
        for (table, sql) in [
            (
                "targets",
                "DELETE FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            ),
            (
                "editing_cycles",
                "DELETE FROM patchdiff.editing_cycles WHERE target_file_id = $1::text::uuid",
            ),
            (
                "targets",
                "UPDATE patchdiff.targets SET target_file_id = pg_catalog.gen_random_uuid() \
                 WHERE target_file_id = $1::text::uuid",
            ),
            (
                "editing_cycles",
                "UPDATE patchdiff.editing_cycles SET editing_cycle_id = pg_catalog.gen_random_uuid() \
                 WHERE target_file_id = $1::text::uuid",
            ),
        ] {
            let msg = refused(&c, sql, &[&target]).await;
            // Outside replica mode a remaining foreign key may refuse a renumbering first.
            assert!(
                kept(table, &msg) || (!replica && sql.starts_with("UPDATE")),
                "replica {replica}, {sql}: {msg}"
            );
        }
        for sql in [
            "TRUNCATE patchdiff.targets CASCADE",
            "TRUNCATE patchdiff.editing_cycles CASCADE",
        ] {
            let msg = refused(&c, sql, &[]).await;
            assert!(
                kept("targets", &msg) || kept("editing_cycles", &msg),
                "replica {replica}, {sql}: {msg}"
            );
        }
    }
    c.batch_execute("RESET session_replication_role")
        .await
        .unwrap();
    // A column other than the ID still changes (the accepted edit above did), and nothing was
    // removed.
    assert_eq!(logged_ids(&c, &target).await, rows_before);
    assert_eq!(current_version(&c, &target).await, 1);
}

/// Contract: the attempt log is durable audit evidence, so an ordinary `pg_dump` must carry
/// it. pg_dump skips the data of extension member tables unless the extension registers them
/// with pg_extension_config_dump; this proves pdcp_logs is registered.
#[tokio::test]
async fn pg_dump_keeps_log_rows() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "pg_dump dumps one database; each shard database is dumped on its own",
    )
    .await
    {
        return;
    }
    let c = client().await;
    let target = initialize_target(&c, "dump.md", "keep me\n").await.unwrap();
    let r = call(
        &c,
        "patchdiff_submit_edits",
        &replace_word(&target, "keep", 0),
    )
    .await
    .unwrap();
    let log_id = r["pdcp_log_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no pdcp_log_id in {r}"));

    let config: tokio_postgres::Config = dsn().parse().expect("PATCHDIFF_TEST_DSN");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let bin =
        std::env::var("PATCHDIFF_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    let mut dump = std::process::Command::new(format!("{bin}/pg_dump"));
    dump.args([
        "-h",
        &host,
        "-p",
        &port.to_string(),
        "--data-only",
        "-t",
        "patchdiff.pdcp_logs",
    ]);
    if let Some(user) = config.get_user() {
        dump.args(["-U", user]);
    }
    dump.arg(
        config
            .get_dbname()
            .expect("PATCHDIFF_TEST_DSN names no dbname"),
    );
    let out = dump.output().expect("running pg_dump");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sql = String::from_utf8_lossy(&out.stdout);
    assert!(
        sql.contains("COPY patchdiff.pdcp_logs"),
        "no data section for pdcp_logs"
    );
    assert!(
        sql.contains(log_id),
        "pg_dump output lacks pdcp_log_id {log_id}"
    );
}

/// Resource bounds (issue 9): a statement_timeout set by the operator ends a submission that is
/// waiting for its target, and the call leaves nothing behind: no attempt row, no new version.
#[tokio::test]
async fn statement_timeout_ends_a_call_without_leaving_state() {
    let caller = client().await;
    let target = initialize_target(&caller, "timeout.md", "one two\n")
        .await
        .unwrap();
    // The lock is held where the target's row is (through a router, its partition).
    let holder = patchdiff_tests::tables_for(&dsn(), &target).await;
    holder.batch_execute("BEGIN").await.unwrap();
    holder
        .execute(
            "SELECT 1 FROM patchdiff.targets WHERE target_file_id = $1::text::uuid FOR UPDATE",
            &[&target],
        )
        .await
        .unwrap();
    caller
        .batch_execute("SET statement_timeout = '300ms'")
        .await
        .unwrap();
    let e = call(
        &caller,
        "patchdiff_submit_edits",
        &replace_word(&target, "one", 0),
    )
    .await
    .expect_err("the call must be cancelled while it waits for the lock");
    assert!(patchdiff_tests::is_cancelled(&caller, &e).await, "{e}");
    holder.batch_execute("COMMIT").await.unwrap();
    caller
        .batch_execute("RESET statement_timeout")
        .await
        .unwrap();
    assert!(logged_statuses(&holder, &target).await.is_empty());
    let t = call(
        &caller,
        "patchdiff_get_target",
        &json!({"target_file_id": target}),
    )
    .await
    .unwrap();
    assert_eq!(
        (&t["version"], &t["current_content"]),
        (&json!(0), &json!("one two\n"))
    );
    // The same connection goes on working.
    let r = call(
        &caller,
        "patchdiff_submit_edits",
        &replace_word(&target, "one", 0),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
}

/// Runs `statements` in a transaction that is always rolled back, and returns the SQLSTATE and
/// message of their error, or None if they succeeded.
async fn in_rolled_back_transaction(c: &Client, statements: &str) -> Option<(String, String)> {
    let result = c.batch_execute(&format!("BEGIN; {statements}")).await;
    c.batch_execute("ROLLBACK").await.unwrap();
    result.err().map(|e| {
        let d = e.as_db_error().expect("a database error");
        (d.code().code().to_owned(), d.message().to_owned())
    })
}

/// Issue 21, item 1: the row rules of patchdiff.targets, patchdiff.pdcp_logs and
/// patchdiff.manifest_ledger are checked by the trigger function patchdiff.check_row() instead of
/// CHECK constraints (sql/schema.sql says why). Each of the 16 former constraints still refuses
/// what it refused, under its own name and with check_violation (23514): for the owner, who can
/// write the tables directly, and in replica mode too. Rows that keep the rules are written.
#[tokio::test]
async fn row_rules_refuse_what_the_check_constraints_refused_even_for_owner() {
    if patchdiff_tests::not_through_a_router(&dsn(), "the row rules are each shard database's")
        .await
    {
        return;
    }
    let c = client().await;
    let target = target_with_one_acceptance(&c, "row-rules.md").await;
    let hex64 = "ab".repeat(32);
    let hex32 = "cd".repeat(16);
    let binding = |device: &str, inode: &str, sha: &str, bytes: &str| {
        format!(
            "workspace_root_device = {device}, workspace_root_inode = {inode}, \
             workspace_relative_path = 'a.md', workspace_baseline_sha256 = {sha}, \
             workspace_baseline_bytes = {bytes}"
        )
    };
    let good_binding = binding("1", "2", &format!("'{hex64}'"), "3");
    let update = |set: &str| {
        format!("UPDATE patchdiff.targets SET {set} WHERE target_file_id = '{target}';")
    };
    // A copy of the target's attempt (or ledger row) with one column changed, inserted as a new
    // row: a new ID, a sequence of its own, no request key.
    let attempt = |set: &str| {
        format!(
            "CREATE TEMP TABLE a ON COMMIT DROP AS SELECT * FROM patchdiff.pdcp_logs \
               WHERE target_file_id = '{target}' AND status = 'accepted'; \
             UPDATE a SET pdcp_log_id = gen_random_uuid(), log_sequence = log_sequence + 1000000000, \
               client_request_id = NULL{set}; \
             INSERT INTO patchdiff.pdcp_logs OVERRIDING SYSTEM VALUE SELECT * FROM a;"
        )
    };
    let ledger = |change_index: i32| {
        format!(
            "CREATE TEMP TABLE l ON COMMIT DROP AS SELECT * FROM patchdiff.manifest_ledger \
               WHERE target_file_id = '{target}'; \
             UPDATE l SET ledger_entry_id = gen_random_uuid(), \
               ledger_sequence = ledger_sequence + 1000000000, change_index = {change_index}; \
             INSERT INTO patchdiff.manifest_ledger OVERRIDING SYSTEM VALUE SELECT * FROM l;"
        )
    };
    let new_target = |set: &str| {
        format!(
            "CREATE TEMP TABLE t ON COMMIT DROP AS SELECT * FROM patchdiff.targets \
               WHERE target_file_id = '{target}'; \
             UPDATE t SET target_file_id = gen_random_uuid(), {set}; \
             INSERT INTO patchdiff.targets SELECT * FROM t;"
        )
    };
    let refusals: Vec<(String, &str)> = vec![
        (update("current_hash = 'abc'"), "targets_current_hash_check"),
        (
            update("current_hash = upper(current_hash)"),
            "targets_current_hash_check",
        ),
        (
            update("current_hash = current_hash || E'\\n'"),
            "targets_current_hash_check",
        ),
        (
            new_target("current_hash = 'not hex'"),
            "targets_current_hash_check",
        ),
        (update("version = -1"), "targets_version_check"),
        (new_target("version = -1"), "targets_version_check"),
        (
            update(&binding("-1", "2", &format!("'{hex64}'"), "3")),
            "targets_workspace_root_device_check",
        ),
        (
            update(&binding("1", "-2", &format!("'{hex64}'"), "3")),
            "targets_workspace_root_inode_check",
        ),
        (
            update(&binding("1", "2", "'xyz'", "3")),
            "targets_workspace_baseline_sha256_check",
        ),
        (
            update(&binding("1", "2", &format!("'{hex64}'"), "-3")),
            "targets_workspace_baseline_bytes_check",
        ),
        (
            update(&format!(
                "{good_binding}, workspace_binding_nonce = '{hex64}', workspace_binding_proof = '{hex64}'"
            )),
            "targets_workspace_binding_nonce_check",
        ),
        (
            update(&format!(
                "{good_binding}, workspace_binding_nonce = '{hex32}', workspace_binding_proof = '{hex32}'"
            )),
            "targets_workspace_binding_proof_check",
        ),
        (update("workspace_relative_path = 'a.md'"), "targets_check"),
        (
            update(&format!(
                "{good_binding}, workspace_binding_nonce = '{hex32}'"
            )),
            "targets_check1",
        ),
        (
            update(&format!(
                "workspace_binding_nonce = '{hex32}', workspace_binding_proof = '{hex64}'"
            )),
            "targets_check2",
        ),
        (attempt(", status = 'maybe'"), "pdcp_logs_status_check"),
        (
            attempt(", failure_stage = 'LATER'"),
            "pdcp_logs_failure_stage_check",
        ),
        (attempt(", attempt = 0"), "pdcp_logs_attempt_check"),
        (attempt(", status = 'rejected'"), "pdcp_logs_check"),
        (attempt(", failure_reason = 'x'"), "pdcp_logs_check"),
        (attempt(", after_version = NULL"), "pdcp_logs_check"),
        (ledger(0), "manifest_ledger_change_index_check"),
    ];
    let kept: Vec<String> = vec![
        update(&format!("current_hash = '{hex64}', version = version + 1")),
        update(&format!(
            "{good_binding}, workspace_binding_nonce = '{hex32}', workspace_binding_proof = '{hex64}'"
        )),
        update(&good_binding),
        attempt(""),
        attempt(", attempt = 1, failure_stage = NULL"),
        attempt(
            ", status = 'rejected', after_version = NULL, after_hash = NULL, \
             failure_reason = 'x', failure_stage = 'PRECONDITION_GUARD'",
        ),
        ledger(2),
    ];
    for replica in [false, true] {
        let mode = if replica { "replica" } else { "origin" };
        c.batch_execute(&format!("SET session_replication_role = {mode}"))
            .await
            .unwrap();
        for (sql, rule) in &refusals {
            let (code, message) = in_rolled_back_transaction(&c, sql)
                .await
                .unwrap_or_else(|| panic!("{mode}: {sql} was written"));
            assert_eq!(code, "23514", "{mode}: {sql}: {message}");
            assert!(
                message.ends_with(&format!("violates check rule \"{rule}\"")),
                "{mode}: {sql}: {message}"
            );
        }
        for sql in &kept {
            assert_eq!(
                in_rolled_back_transaction(&c, sql).await,
                None,
                "{mode}: {sql}"
            );
        }
    }
    c.batch_execute("RESET session_replication_role")
        .await
        .unwrap();
    // Nothing was written: the target still replays as stored.
    let replay = call(&c, "patchdiff_replay", &json!({"target_file_id": target}))
        .await
        .unwrap();
    assert_eq!(replay["status"], "success", "{replay}");
    assert_eq!(current_version(&c, &target).await, 1);
}
