//! Issue 19, item 2: the change feed.
//!
//! 1. In SQL: every acceptance and every SAVE is announced with `NOTIFY patchdiff` at COMMIT
//!    (a listener on a second connection hears it), with the documented payload; a rolled-back
//!    attempt, a rejection and a keyed resend are never announced; a transaction with several
//!    acceptances announces each of them, in order, only when it commits;
//!    `patchdiff.notify = off` announces nothing, and only a superuser may set it.
//!    With `listened` (the default, issue 21 item 1) a change is announced only while a listener
//!    is registered, and a registration waits for writers that announced nothing.
//! 2. Over MCP, in the `extended` profile: targets are resources (`resources/list`,
//!    `resources/templates/list`, `resources/read`), and the real `patchdiff-mcp` process sends
//!    `notifications/resources/updated` on stdout to a subscriber in both eras: legacy
//!    `resources/subscribe` and 2026-07-28 `subscriptions/listen` (acknowledged, tagged with its
//!    subscription ID, ended by `notifications/cancelled`). The contract's profiles offer none
//!    of it.
//! 3. Tenancy: a subscriber never hears about a target it may not see: subscribing to one is
//!    refused as for an unknown target, and once a grant is revoked, its changes are no longer
//!    announced to it.
//! 4. A full notification queue never fails a commit: over `patchdiff.notify_queue_limit`, a
//!    change commits unannounced, with a warning.
//!
//! Needs PATCHDIFF_TEST_DSN (a superuser connection string) and PATCHDIFF_MCP_BIN.

use patchdiff_engine::api::feed::{
    LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2, MAX_PAYLOAD_BYTES, POSTGRES_PAYLOAD_LIMIT,
};
use patchdiff_tests::roles::{config_for, dsn, open, recipe, unique};
use patchdiff_tests::stdio::{Pipes, mcp_bin};
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls};

/// How long "nothing is announced" waits: far above the delivery time on a local server.
const QUIET: Duration = Duration::from_millis(400);

/// A second connection that LISTENs on the channel and registers as a listener (holds the
/// feed's lock, as `patchdiff-mcp`'s listening sessions do), and the payloads it hears.
async fn listener(dsn: &str) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (client, rx) = raw_listener(dsn).await;
    client
        .batch_execute(&format!(
            "SELECT pg_advisory_lock_shared({LISTENER_LOCK_KEY1}, {LISTENER_LOCK_KEY2})"
        ))
        .await
        .expect("registering the listener");
    (client, rx)
}

/// A second connection that only LISTENs on the channel (it does not register), and the
/// payloads it hears.
async fn raw_listener(dsn: &str) -> (Client, mpsc::UnboundedReceiver<String>) {
    let (client, mut connection) = tokio_postgres::connect(dsn, NoTls)
        .await
        .expect("connecting the listener");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match m {
                Ok(AsyncMessage::Notification(n)) if n.channel() == "patchdiff" => {
                    let _ = tx.send(n.payload().to_owned());
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    client
        .batch_execute("LISTEN patchdiff")
        .await
        .expect("LISTEN patchdiff");
    (client, rx)
}

/// The next announcement about one of `ours` (other tests run at the same time, and any
/// change in the database is announced to every listener).
async fn heard(rx: &mut mpsc::UnboundedReceiver<String>, ours: &[&str]) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let payload = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .expect("no announcement within 10 s")
            .expect("the listener ended");
        assert!(
            payload.len() <= MAX_PAYLOAD_BYTES && MAX_PAYLOAD_BYTES < POSTGRES_PAYLOAD_LIMIT,
            "{payload}"
        );
        let v: Value = serde_json::from_str(&payload).expect("the payload is JSON");
        if ours.iter().any(|id| v["target_file_id"] == *id) {
            return v;
        }
    }
}

/// No announcement about one of `ours` for a while.
async fn silent(rx: &mut mpsc::UnboundedReceiver<String>, ours: &[&str], what: &str) {
    let deadline = tokio::time::Instant::now() + QUIET;
    while let Ok(Some(p)) = tokio::time::timeout_at(deadline, rx.recv()).await {
        let v: Value = serde_json::from_str(&p).expect("the payload is JSON");
        assert!(
            !ours.iter().any(|id| v["target_file_id"] == *id),
            "{what}: announced {p}"
        );
    }
}

fn edit(id: &str, version: i64, from: &str, to: &str) -> Value {
    json!({"target_file_id": id, "expected_target_version": version, "intent": "feed",
           "edits": [{"match": from, "replace": to}]})
}

async fn log_sequence(c: &Client, log_id: &str) -> i64 {
    c.query_one(
        "SELECT log_sequence FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::text::uuid",
        &[&log_id],
    )
    .await
    .expect("reading the log sequence")
    .get(0)
}

/// Item 1: what is announced, when, and with which payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_listeners_hear_commits_never_rollbacks_or_rejections() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(
        &dsn,
        "NOTIFY is one database's: each shard announces its own commits, in its callers' transactions",
    )
    .await
    {
        return;
    }
    let (_l, mut rx) = listener(&dsn).await;
    let mut w = connect(&dsn).await.expect("connecting the writer");
    let a = initialize_target(&w, "feed-a.md", "alpha beta\n")
        .await
        .unwrap();
    let b = initialize_target(&w, "feed-b.md", "gamma delta\n")
        .await
        .unwrap();
    let ours = [a.as_str(), b.as_str()];
    let ours = &ours[..];
    silent(&mut rx, ours, "initialization").await;

    // An acceptance in autocommit: the documented payload, keys in order. No hash of the text:
    // any role may LISTEN, and a hash lets one that may not read the target confirm a guess of
    // its text (docs/security.md, "The change feed").
    let r = call(&w, "patchdiff_submit_edits", &edit(&a, 0, "alpha", "ALPHA"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let log_id = r["pdcp_log_id"].as_str().unwrap();
    let p = heard(&mut rx, ours).await;
    let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "kind",
            "target_file_id",
            "version",
            "pdcp_log_id",
            "log_sequence",
            "snapshot_id"
        ]
    );
    assert_eq!(
        p,
        json!({"kind": "accepted", "target_file_id": a, "version": 1,
               "pdcp_log_id": log_id, "log_sequence": log_sequence(&w, log_id).await, "snapshot_id": null})
    );

    // A rejection changes nothing and is not announced; nor is a keyed resend's recovery.
    let r = call(&w, "patchdiff_submit_edits", &edit(&a, 0, "beta", "BETA"))
        .await
        .unwrap();
    assert_eq!(r["status"], "rejected", "{r}");
    silent(&mut rx, ours, "a rejection").await;
    let mut keyed = edit(&a, 1, "beta", "BETA");
    keyed["client_request_id"] = json!(unique("feed-key"));
    let first = call(&w, "patchdiff_submit_edits", &keyed).await.unwrap();
    assert_eq!(first["status"], "accepted", "{first}");
    assert_eq!(heard(&mut rx, ours).await["version"], 2);
    let again = call(&w, "patchdiff_submit_edits", &keyed).await.unwrap();
    assert_eq!(again["pdcp_log_id"], first["pdcp_log_id"], "{again}");
    silent(&mut rx, ours, "a keyed resend").await;

    // Rolled back: never announced.
    let t = w.transaction().await.unwrap();
    let r = call(&t, "patchdiff_submit_edits", &edit(&a, 2, "ALPHA", "x"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    t.rollback().await.unwrap();
    silent(&mut rx, ours, "a rolled-back acceptance").await;

    // The caller's transaction with several acceptances: nothing before COMMIT, then each, in
    // commit order.
    let t = w.transaction().await.unwrap();
    let mut expected = Vec::new();
    for (id, v, from, to) in [
        (&a, 2, "ALPHA", "one"),
        (&b, 0, "gamma", "two"),
        (&a, 3, "one", "three"),
    ] {
        let r = call(&t, "patchdiff_submit_edits", &edit(id, v, from, to))
            .await
            .unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        expected.push((id.clone(), v + 1, r["pdcp_log_id"].clone()));
    }
    silent(&mut rx, ours, "an uncommitted transaction").await;
    t.commit().await.unwrap();
    for (id, version, log_id) in expected {
        let p = heard(&mut rx, ours).await;
        assert_eq!(
            (&p["target_file_id"], &p["version"], &p["pdcp_log_id"]),
            (&json!(id), &json!(version), &log_id)
        );
    }

    // SAVE: kind saved, with its snapshot.
    let s = call(&w, "patchdiff_save", &json!({"target_file_id": a}))
        .await
        .unwrap();
    assert_eq!(s["status"], "saved", "{s}");
    let p = heard(&mut rx, ours).await;
    assert_eq!(
        p,
        json!({"kind": "saved", "target_file_id": a, "version": 4,
               "pdcp_log_id": null, "log_sequence": null, "snapshot_id": s["snapshot_id"]})
    );
    // A SAVE rolled back is not announced either.
    let t = w.transaction().await.unwrap();
    call(&t, "patchdiff_save", &json!({"target_file_id": a}))
        .await
        .unwrap();
    t.rollback().await.unwrap();
    silent(&mut rx, ours, "a rolled-back SAVE").await;

    // patchdiff.notify = off (a superuser's setting): nothing is announced.
    w.batch_execute("SET patchdiff.notify = off").await.unwrap();
    let r = call(&w, "patchdiff_submit_edits", &edit(&b, 1, "two", "2"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    silent(&mut rx, ours, "patchdiff.notify = off").await;
    w.batch_execute("RESET patchdiff.notify").await.unwrap();
    call(&w, "patchdiff_submit_edits", &edit(&b, 2, "2", "two"))
        .await
        .unwrap();
    assert_eq!(heard(&mut rx, ours).await["version"], 3);
}

/// docs/sql-api.md "The change feed" and docs/security.md: a full notification queue never
/// fails a commit. Any role can stop PostgreSQL's queue from draining (LISTEN inside an open
/// transaction) and fill it with its own NOTIFYs in about 30 s; every transaction that notifies
/// then fails at COMMIT, and every acceptance and SAVE used to. At or above
/// `patchdiff.notify_queue_limit` of the queue (superuser-only), a change commits without its
/// announcement and the writer is warned. The limit at 0 stands for a queue over it here (filling
/// 8 GB is a manual run: docs/reliability.md). Each such change is counted in
/// `patchdiff.feed_silences`, which every role may read. On a database of its own: listeners
/// of other tests would hear the count move (and resync their subscribers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_notification_queue_never_fails_a_commit() {
    if patchdiff_tests::not_through_a_router(&dsn(), "NOTIFY is one database's").await {
        return;
    }
    let (result, _) = own_database("feed_full", |db| async move {
        full_queue(format!("{} dbname={db}", dsn())).await
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn full_queue(dsn: String) {
    connect(&dsn)
        .await
        .unwrap()
        .batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let (_l, mut rx) = listener(&dsn).await;
    // The writer's connection, keeping the notices (warnings) it is sent.
    let (w, mut connection) = tokio_postgres::connect(&dsn, NoTls)
        .await
        .expect("connecting the writer");
    let (tx, mut notices) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            match m {
                Ok(AsyncMessage::Notice(n)) => {
                    let _ = tx.send((
                        n.severity().to_owned(),
                        n.message().to_owned(),
                        n.detail().map(str::to_owned),
                    ));
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    let a = initialize_target(&w, "feed-full.md", "alpha beta\n")
        .await
        .unwrap();
    let ours = [a.as_str()];
    let ours = &ours[..];

    // Every role may read how many changes went unannounced (and only that), as listeners do:
    // here one that may do nothing else.
    let reader = unique("feed_silences_reader");
    w.batch_execute(&format!("CREATE ROLE {reader} LOGIN"))
        .await
        .unwrap();
    let dbname = tokio_postgres::Config::from_str(&dsn)
        .unwrap()
        .get_dbname()
        .unwrap()
        .to_owned();
    let r = open(&config_for(&dbname, Some((&reader, "unused"))))
        .await
        .unwrap();
    let silences = async || {
        r.query_one(
            "SELECT pg_catalog.pg_sequence_last_value(c.oid) FROM pg_catalog.pg_class c \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'patchdiff' AND c.relname = 'feed_silences'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, Option<i64>>(0)
        .unwrap_or(0)
    };
    let before = silences().await;
    w.batch_execute("SET patchdiff.notify_queue_limit = 0")
        .await
        .unwrap();
    let r = call(&w, "patchdiff_submit_edits", &edit(&a, 0, "alpha", "ALPHA"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let (severity, message, detail) = tokio::time::timeout(Duration::from_secs(5), notices.recv())
        .await
        .expect("a warning within 5 s")
        .expect("the writer's connection ended");
    assert_eq!(severity, "WARNING");
    assert!(
        message.contains(&format!(
            "change of target {a} (version 1) is committed without its announcement"
        )) && message.contains("notification queue is"),
        "{message}"
    );
    assert!(
        detail.is_some_and(|d| d.contains("A session that listens is not reading")),
        "{message}"
    );
    silent(&mut rx, ours, "a change over the queue limit").await;
    let saved = call(&w, "patchdiff_save", &json!({"target_file_id": a}))
        .await
        .unwrap();
    assert_eq!(
        saved["status"], "saved",
        "a SAVE over the limit commits: {saved}"
    );
    silent(&mut rx, ours, "a SAVE over the queue limit").await;
    assert_eq!(
        w.query_one(
            "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            &[&a]
        )
        .await
        .unwrap()
        .get::<_, i64>(0),
        1,
        "the acceptance committed"
    );
    assert_eq!(silences().await, before + 2, "both changes were counted");

    // Under the limit (the default, half the queue), changes are announced again.
    w.batch_execute("RESET patchdiff.notify_queue_limit")
        .await
        .unwrap();
    let r = call(&w, "patchdiff_submit_edits", &edit(&a, 1, "ALPHA", "alpha"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(heard(&mut rx, ours).await["version"], 2);
    assert_eq!(
        silences().await,
        before + 2,
        "an announced change is not counted"
    );
    let context: String = w
        .query_one(
            "SELECT context FROM pg_catalog.pg_settings WHERE name = 'patchdiff.notify_queue_limit'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(context, "superuser", "a writer cannot raise or lower it");
}

/// The feed's key as `pg_locks` shows it: (pid, mode, granted) of each holder or waiter.
async fn key_holders(c: &Client) -> Vec<(i32, String, bool)> {
    c.query(
        "SELECT pid, mode, granted FROM pg_catalog.pg_locks
          WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_catalog.pg_database
                                                       WHERE datname = current_database())
            AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 2
          ORDER BY pid, mode",
        &[
            &i64::from(LISTENER_LOCK_KEY1),
            &i64::from(LISTENER_LOCK_KEY2),
        ],
    )
    .await
    .expect("reading pg_locks")
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

async fn pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// docs/sql-api.md "The change feed": a session that is registered hears its own changes too,
/// also when it is the only listener of the database (a database of its own here, so that no
/// other test's listener is registered). Before, its writes tried the key, which a session's own
/// share lock never blocks, and announced nothing (helper-112).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_session_hears_its_own_changes() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "it makes a database of its own (a registration is one database's, as NOTIFY is)",
    )
    .await
    {
        return;
    }
    let (result, _) = own_database("feed_own", |db| async move {
        let db_dsn = format!("{} dbname={db}", dsn());
        let su = connect(&db_dsn).await.unwrap();
        su.batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .unwrap();
        let (own, mut rx) = listener(&db_dsn).await;
        let id = initialize_target(&own, "own.md", "alpha\n").await.unwrap();
        let r = call(
            &own,
            "patchdiff_submit_edits",
            &edit(&id, 0, "alpha", "beta"),
        )
        .await
        .unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(heard(&mut rx, &[id.as_str()]).await["version"], 1);
        // And in a transaction of its own, at its commit.
        own.batch_execute("BEGIN").await.unwrap();
        let r = call(
            &own,
            "patchdiff_submit_edits",
            &edit(&id, 1, "beta", "gamma"),
        )
        .await
        .unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        own.batch_execute("COMMIT").await.unwrap();
        assert_eq!(heard(&mut rx, &[id.as_str()]).await["version"], 2);
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Issue 21, item 1: with `patchdiff.notify = listened` (the default) a change is announced only
/// while a listener is registered (holds or awaits the feed's lock), so commits that nobody
/// listens to take no notify-queue lock; and a registration cannot miss a change: a writer that
/// announced nothing holds the key until it ends, and the registration waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listened_announces_only_to_registered_listeners_and_misses_nothing() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "it makes a database of its own (a registration is one database's, as NOTIFY is)",
    )
    .await
    {
        return;
    }
    let (result, _) = own_database("feed_listened", |db| async move {
        listened(&format!("{} dbname={db}", dsn())).await
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Runs `body` in a task, on a database of its own (`prefix` and a unique suffix, created from
/// template0 and dropped afterwards whatever happened); the task's outcome, and a superuser
/// connection for any other cleaning up.
async fn own_database<F, Fut>(prefix: &str, body: F) -> (Result<(), tokio::task::JoinError>, Client)
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let server = connect(&dsn()).await.unwrap();
    let db = unique(prefix);
    server
        .batch_execute(&format!(
            "CREATE DATABASE {db} ENCODING 'UTF8' TEMPLATE template0"
        ))
        .await
        .unwrap();
    let result = tokio::spawn(body(db.clone())).await;
    let _ = server
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await;
    (result, server)
}

async fn listened(db_dsn: &str) {
    let keys = format!("{LISTENER_LOCK_KEY1}, {LISTENER_LOCK_KEY2}");
    let su = connect(db_dsn).await.unwrap();
    su.batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let shown: String = su
        .query_one("SHOW patchdiff.notify", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "listened", "the default");
    let a = initialize_target(&su, "listened-a.md", "v0\n")
        .await
        .unwrap();
    let b = initialize_target(&su, "listened-b.md", "w0\n")
        .await
        .unwrap();
    let ours = [a.as_str(), b.as_str()];
    let ours = &ours[..];
    // A session that only LISTENs hears every NOTIFY there is, so it shows what was announced.
    let (_raw, mut raw) = raw_listener(db_dsn).await;

    // Nobody registered: nothing is announced, and the writer holds the key in RowExclusiveLock
    // until its transaction ends.
    let mut w = connect(db_dsn).await.unwrap();
    let w_pid = pid(&w).await;
    let t = w.transaction().await.unwrap();
    let r = call(&t, "patchdiff_submit_edits", &edit(&a, 0, "v0", "v1"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(
        key_holders(&su).await,
        [(w_pid, "RowExclusiveLock".to_owned(), true)]
    );
    t.commit().await.unwrap();
    assert_eq!(key_holders(&su).await, [], "released at COMMIT");
    silent(&mut raw, ours, "an acceptance nobody registered for").await;
    // A change made in a subtransaction that rolls back releases the key with it.
    let t = w.transaction().await.unwrap();
    t.batch_execute("SAVEPOINT s").await.unwrap();
    call(&t, "patchdiff_submit_edits", &edit(&a, 1, "v1", "x"))
        .await
        .unwrap();
    assert_eq!(key_holders(&su).await.len(), 1);
    t.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    assert_eq!(
        key_holders(&su).await,
        [],
        "released with the subtransaction"
    );
    t.rollback().await.unwrap();

    // A writer that announced nothing is still open when a listener registers: the try fails,
    // and the listener's wait for the key ends only once the writer has committed, so what it
    // reads then includes the writer's change.
    let t = w.transaction().await.unwrap();
    let r = call(&t, "patchdiff_submit_edits", &edit(&a, 1, "v1", "v2"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let (g, mut heard_by_g) = raw_listener(db_dsn).await;
    let g_pid = pid(&g).await;
    let got: bool = g
        .query_one(
            &format!("SELECT pg_catalog.pg_try_advisory_lock_shared({keys})"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!got, "an open writer that announced nothing holds the key");
    let waiting = tokio::spawn({
        let keys = keys.clone();
        async move {
            g.batch_execute(&format!(
                "SELECT pg_catalog.pg_advisory_lock_shared({keys})"
            ))
            .await
            .expect("registering");
            g
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !key_holders(&su)
        .await
        .contains(&(g_pid, "ShareLock".to_owned(), false))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the registration never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While the registration waits, another writer announces (the try sees the waiter).
    let w2 = connect(db_dsn).await.unwrap();
    let r = call(&w2, "patchdiff_submit_edits", &edit(&b, 0, "w0", "w1"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    assert_eq!(heard(&mut raw, ours).await["target_file_id"], json!(b));
    tokio::time::sleep(QUIET).await;
    assert!(
        !waiting.is_finished(),
        "registered before the open writer ended"
    );
    t.commit().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the registration still waits after the writer's COMMIT")
        .unwrap();
    let version: i64 = g
        .query_one(
            "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
            &[&a],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        version, 2,
        "the registered listener's read sees the silent writer's change"
    );
    silent(&mut raw, &[a.as_str()], "the writer that held the key").await;
    // Registered: every change is announced.
    call(&w, "patchdiff_submit_edits", &edit(&a, 2, "v2", "v3"))
        .await
        .unwrap();
    // The listener LISTENed before it asked for the key: it heard the writer that announced
    // while it waited, then this one.
    let first = heard(&mut heard_by_g, ours).await;
    assert_eq!(
        (&first["target_file_id"], &first["version"]),
        (&json!(b), &json!(1))
    );
    assert_eq!(heard(&mut heard_by_g, ours).await["version"], 3);
    assert_eq!(heard(&mut raw, ours).await["version"], 3);

    // `off` announces nothing even to a registered listener; `on` announces with nobody
    // registered.
    su.batch_execute("SET patchdiff.notify = off")
        .await
        .unwrap();
    call(&su, "patchdiff_submit_edits", &edit(&a, 3, "v3", "v4"))
        .await
        .unwrap();
    silent(&mut raw, ours, "patchdiff.notify = off").await;
    g.batch_execute(&format!(
        "SELECT pg_catalog.pg_advisory_unlock_shared({keys})"
    ))
    .await
    .unwrap();
    su.batch_execute("SET patchdiff.notify = on").await.unwrap();
    call(&su, "patchdiff_submit_edits", &edit(&a, 4, "v4", "v5"))
        .await
        .unwrap();
    assert_eq!(heard(&mut raw, ours).await["version"], 5);
    su.batch_execute("RESET patchdiff.notify").await.unwrap();
    call(&su, "patchdiff_submit_edits", &edit(&a, 5, "v5", "v6"))
        .await
        .unwrap();
    silent(&mut raw, ours, "listened again, nobody registered").await;

    // The spellings of the boolean this setting was keep their meaning; others are refused.
    for (value, shown) in [
        ("true", "on"),
        ("yes", "on"),
        ("1", "on"),
        ("false", "off"),
        ("no", "off"),
        ("0", "off"),
        ("LISTENED", "listened"),
    ] {
        su.batch_execute(&format!("SET patchdiff.notify = '{value}'"))
            .await
            .unwrap();
        let s: String = su
            .query_one("SHOW patchdiff.notify", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(s, shown, "{value}");
    }
    let e = su
        .batch_execute("SET patchdiff.notify = maybe")
        .await
        .expect_err("an unknown value");
    assert_eq!(e.code().map(|c| c.code()), Some("22023"), "{e}");
    su.batch_execute("RESET patchdiff.notify").await.unwrap();

    // patchdiff-mcp registers its listening session. A subscription made while a writer that
    // announced nothing is open waits for that writer 2 s at most; other writers' changes reach
    // the subscriber meanwhile (a second session waits for the key, the listening one is idle);
    // and the open writer's change reaches it once it commits: the session is then granted the
    // key and resyncs.
    let t = w.transaction().await.unwrap();
    let r = call(&t, "patchdiff_submit_edits", &edit(&a, 6, "v6", "v7"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let (mut m, _) = Mcp::legacy(db_dsn, "extended");
    let asked = std::time::Instant::now();
    for target in [&a, &b] {
        let s = m.request("resources/subscribe", json!({"uri": uri(target)}));
        assert_eq!(s["result"], json!({}), "{s}");
    }
    let took = asked.elapsed();
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(10),
        "answered after the 2 s bound, not when the open writer ends: {took:?}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !key_holders(&su)
        .await
        .iter()
        .any(|(p, mode, granted)| *p != w_pid && mode == "ShareLock" && !granted)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the front end's session never waited for the key"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = call(&w2, "patchdiff_submit_edits", &edit(&b, 1, "w1", "w2"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let n = m.notification();
    assert_eq!(
        (&n["method"], &n["params"]["uri"]),
        (&json!("notifications/resources/updated"), &json!(uri(&b))),
        "another writer's change is heard while the open writer still holds the key: {n}"
    );
    m.quiet("before the open writer commits");
    t.commit().await.unwrap();
    // The resync tells of every watched target; `a` is among them.
    let mut told = Vec::new();
    while !told.contains(&json!(uri(&a))) {
        let n = m.notification();
        assert_eq!(n["method"], "notifications/resources/updated", "{n}");
        told.push(n["params"]["uri"].clone());
        assert!(told.len() <= 2, "{told:?}");
    }
    silent(
        &mut raw,
        &[a.as_str()],
        "the writer that held the key, again",
    )
    .await;
    // Registered now: the next change is announced and heard as any other.
    while m.next(QUIET).is_some() {}
    call(&w, "patchdiff_submit_edits", &edit(&a, 7, "v7", "v8"))
        .await
        .unwrap();
    assert_eq!(heard(&mut raw, ours).await["version"], 8);
    let n = m.notification();
    assert_eq!(n["params"]["uri"], json!(uri(&a)), "{n}");
}

/// Issue 21, item 1, the rare path: a session that asks for the feed's key in exclusive mode
/// (any role may) while `patchdiff-mcp` registers. The front end's second session is granted the
/// key once the open writer ends, but its listening session then cannot take it (the exclusive
/// request waits ahead of it), so the second session keeps holding it: writers still announce,
/// and the subscriber hears them. If that second session is lost, the listener starts again and
/// resyncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_kept_by_the_second_session_still_hears_every_change() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "it makes a database of its own (a registration is one database's, as NOTIFY is)",
    )
    .await
    {
        return;
    }
    let (result, _) = own_database("feed_holder", |db| async move {
        kept_by_the_second_session(&format!("{} dbname={db}", dsn())).await
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn kept_by_the_second_session(db_dsn: &str) {
    let keys = format!("{LISTENER_LOCK_KEY1}, {LISTENER_LOCK_KEY2}");
    let su = connect(db_dsn).await.unwrap();
    su.batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    let a = initialize_target(&su, "holder-a.md", "v0\n").await.unwrap();
    let mut w = connect(db_dsn).await.unwrap();
    let w_pid = pid(&w).await;
    let t = w.transaction().await.unwrap();
    call(&t, "patchdiff_submit_edits", &edit(&a, 0, "v0", "v1"))
        .await
        .unwrap();
    let (mut m, _) = Mcp::legacy(db_dsn, "extended");
    let s = m.request("resources/subscribe", json!({"uri": uri(&a)}));
    assert_eq!(s["result"], json!({}), "{s}");
    let waiting_share = |holders: &[(i32, String, bool)]| {
        holders
            .iter()
            .any(|(p, mode, granted)| *p != w_pid && mode == "ShareLock" && !granted)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !waiting_share(&key_holders(&su).await) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no session waited for the key"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A session asks for the key in exclusive mode, behind the front end's waiting one.
    let hostile = connect(db_dsn).await.unwrap();
    let hostile_pid = pid(&hostile).await;
    let exclusive = tokio::spawn({
        let keys = keys.clone();
        async move {
            let _ = hostile
                .batch_execute(&format!("SELECT pg_catalog.pg_advisory_lock({keys})"))
                .await;
            hostile
        }
    });
    while !key_holders(&su)
        .await
        .contains(&(hostile_pid, "ExclusiveLock".to_owned(), false))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the exclusive request never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.commit().await.unwrap();
    // The second session is granted the key and keeps it; the resync tells of `a`.
    let n = m.notification();
    assert_eq!(n["params"]["uri"], json!(uri(&a)), "{n}");
    let granted: Vec<i32> = key_holders(&su)
        .await
        .into_iter()
        .filter(|(_, mode, granted)| mode == "ShareLock" && *granted)
        .map(|(p, _, _)| p)
        .collect();
    assert_eq!(
        granted.len(),
        1,
        "one front-end session holds the key: {granted:?}"
    );
    let last: String = su
        .query_one(
            "SELECT query FROM pg_stat_activity WHERE pid = $1",
            &[&granted[0]],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        last.contains("pg_advisory_lock_shared") && !last.contains("try"),
        "the second session holds it, not the listening one: {last}"
    );
    // Writers announce while it holds the key, and the subscriber hears them.
    call(&w, "patchdiff_submit_edits", &edit(&a, 1, "v1", "v2"))
        .await
        .unwrap();
    let n = m.notification();
    assert_eq!(n["params"]["uri"], json!(uri(&a)), "{n}");
    // The exclusive request goes away; the holding session is lost: the listener starts again,
    // registers its listening session itself, and resyncs.
    su.query_one("SELECT pg_cancel_backend($1)", &[&hostile_pid])
        .await
        .unwrap();
    let _hostile = exclusive.await.unwrap();
    let lost = granted[0];
    su.query_one("SELECT pg_terminate_backend($1)", &[&lost])
        .await
        .unwrap();
    let n = m.notification();
    assert_eq!(
        n["params"]["uri"],
        json!(uri(&a)),
        "the resync after the loss: {n}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let holders = key_holders(&su).await;
        if holders
            .iter()
            .any(|(p, mode, held)| *p != lost && mode == "ShareLock" && *held)
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never registered again: {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    call(&w, "patchdiff_submit_edits", &edit(&a, 2, "v2", "v3"))
        .await
        .unwrap();
    let n = m.notification();
    assert_eq!(n["params"]["uri"], json!(uri(&a)), "{n}");
}

// ---------------------------------------------------------------------------------------------
// Over MCP

/// A real `patchdiff-mcp` over pipes, whose lines may be responses or notifications.
struct Mcp {
    pipes: Pipes,
    id: i64,
}

const LEGACY: &str = "2025-11-25";
const MODERN: &str = "2026-07-28";

fn modern_meta() -> Value {
    json!({"io.modelcontextprotocol/protocolVersion": MODERN,
           "io.modelcontextprotocol/clientCapabilities": {},
           "io.modelcontextprotocol/clientInfo": {"name": "feed-test", "version": "1"}})
}

impl Mcp {
    fn start(dsn: &str, profile: &str) -> Mcp {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_MCP_PROFILE", profile)
            .stderr(Stdio::null());
        Mcp {
            pipes: Pipes::spawn(cmd),
            id: 0,
        }
    }

    fn legacy(dsn: &str, profile: &str) -> (Mcp, Value) {
        let mut m = Mcp::start(dsn, profile);
        let r = m.request(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "feed-test", "version": "1"}}),
        );
        m.pipes
            .send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
        (m, r)
    }

    fn send(&mut self, method: &str, mut params: Value, modern: bool) -> i64 {
        self.id += 1;
        if modern {
            params["_meta"] = modern_meta();
        }
        let line = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        self.pipes.send(format!("{line}\n").as_bytes());
        self.id
    }

    fn notify(&mut self, method: &str, params: Value) {
        let line = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.pipes.send(format!("{line}\n").as_bytes());
    }

    fn next(&self, timeout: Duration) -> Option<Value> {
        let line = self.pipes.line(timeout).ok()?;
        assert!(line.is_ascii(), "stdout line is not ASCII");
        Some(serde_json::from_slice(&line).expect("a JSON line"))
    }

    /// The response to request `id`; no other line may come first.
    fn response(&self, id: i64) -> Value {
        let v = self
            .next(Duration::from_secs(30))
            .expect("no line from patchdiff-mcp");
        assert_eq!(v["id"], id, "expected the response to {id}, got {v}");
        v
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params, false);
        self.response(id)
    }

    fn modern_request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params, true);
        self.response(id)
    }

    /// The next line, which must be a notification, within 10 s.
    fn notification(&self) -> Value {
        let v = self
            .next(Duration::from_secs(10))
            .expect("no notification within 10 s");
        assert!(v.get("id").is_none(), "expected a notification, got {v}");
        v
    }

    /// No line at all for a while.
    fn quiet(&self, what: &str) {
        if let Some(v) = self.next(QUIET) {
            panic!("{what}: got {v}");
        }
    }
}

fn uri(id: &str) -> String {
    format!("patchdiff://targets/{id}")
}

/// Item 2, legacy era: resources, resources/subscribe, the update on stdout, unsubscribe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_subscribers_hear_updates_over_stdio() {
    let dsn = dsn();
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-legacy.md", "one two\n")
        .await
        .unwrap();

    // The contract's profiles: no resources capability, no resource methods.
    let (mut full, init) = Mcp::legacy(&dsn, "full");
    assert_eq!(
        init["result"]["capabilities"],
        json!({"tools": {"listChanged": false}})
    );
    for method in [
        "resources/list",
        "resources/read",
        "resources/subscribe",
        "resources/templates/list",
    ] {
        let r = full.request(method, json!({"uri": uri(&id)}));
        assert_eq!(r["error"]["code"], -32601, "{method}: {r}");
    }

    let (mut m, init) = Mcp::legacy(&dsn, "extended");
    assert_eq!(
        init["result"]["capabilities"]["resources"],
        json!({"subscribe": true, "listChanged": false})
    );
    let t = m.request("resources/templates/list", json!({}));
    assert_eq!(
        t["result"]["resourceTemplates"][0]["uriTemplate"],
        "patchdiff://targets/{target_file_id}"
    );
    // resources/list pages through the targets (newest first: ours is on the first page).
    let l = m.request("resources/list", json!({}));
    let listed = l["result"]["resources"].as_array().expect("resources");
    let ours = listed
        .iter()
        .find(|r| r["uri"] == uri(&id))
        .expect("the new target is listed");
    assert_eq!(
        (&ours["name"], &ours["mimeType"]),
        (&json!("feed-legacy.md"), &json!("text/plain"))
    );
    if let Some(next) = l["result"]["nextCursor"].as_str() {
        let page = m.request("resources/list", json!({"cursor": next}));
        assert!(page["result"]["resources"].is_array(), "{page}");
    }
    let bad = m.request("resources/list", json!({"cursor": "nonsense"}));
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    let read = m.request("resources/read", json!({"uri": uri(&id)}));
    assert_eq!(read["result"]["contents"][0]["text"], "one two\n", "{read}");
    assert_eq!(
        read["result"]["contents"][0]["_meta"]["patchdiff/version"],
        0
    );
    for unknown in [
        uri("00000000-0000-4000-8000-000000000000"),
        "patchdiff://targets/../x".into(),
    ] {
        let r = m.request("resources/read", json!({"uri": unknown}));
        assert_eq!(r["error"]["code"], -32002, "{r}");
        let r = m.request("resources/subscribe", json!({"uri": unknown}));
        assert_eq!(r["error"]["code"], -32002, "{r}");
        assert_eq!(r["error"]["data"]["uri"], json!(unknown), "{r}");
    }
    // A long URI is echoed cut to 256 code points (helper-106: a 10 MB URI, a 10 MB answer).
    let long = format!("patchdiff://targets/{}", "é".repeat(100_000));
    let r = m.request("resources/read", json!({"uri": long}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let echoed = r["error"]["data"]["uri"].as_str().unwrap();
    assert_eq!(
        echoed,
        format!("{}...", long.chars().take(256).collect::<String>())
    );

    let s = m.request("resources/subscribe", json!({"uri": uri(&id)}));
    assert_eq!(s["result"], json!({}), "{s}");
    let r = call(&w, "patchdiff_submit_edits", &edit(&id, 0, "one", "ONE"))
        .await
        .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let n = m.notification();
    assert_eq!(
        n,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": uri(&id)}})
    );
    let read = m.request("resources/read", json!({"uri": uri(&id)}));
    assert_eq!(read["result"]["contents"][0]["text"], "ONE two\n");
    // A SAVE is announced too; a rejection is not.
    call(&w, "patchdiff_save", &json!({"target_file_id": id}))
        .await
        .unwrap();
    assert_eq!(m.notification()["params"]["uri"], uri(&id));
    call(&w, "patchdiff_submit_edits", &edit(&id, 0, "two", "TWO"))
        .await
        .unwrap();
    m.quiet("a rejection");

    let u = m.request("resources/unsubscribe", json!({"uri": uri(&id)}));
    assert_eq!(u["result"], json!({}));
    call(&w, "patchdiff_submit_edits", &edit(&id, 1, "two", "TWO"))
        .await
        .unwrap();
    m.quiet("after unsubscribe");
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
}

/// docs/sql-api.md "The change feed": a change committed without its announcement (the queue at
/// or over `patchdiff.notify_queue_limit`; 0 stands for that here) is counted, and a subscriber
/// of `patchdiff-mcp` hears that its target may have changed: at once, and again after the
/// writer's transaction has ended, for the change was still uncommitted the first time. The
/// writer is the newest transaction (a snapshot does not list it: helper-47 found the second
/// telling sent before such a writer's COMMIT, and none after), stays open longer than the
/// spacing between resyncs, and another transaction stays open across its COMMIT (waiting for
/// every transaction of that moment let one left open hold back the news). Other tests'
/// transactions may add resyncs meanwhile; what must hold is one after the COMMIT. On a
/// database of its own (the count is the database's; other tests' subscribers would hear it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_hear_of_changes_committed_unannounced() {
    if patchdiff_tests::not_through_a_router(&dsn(), "it makes a database of its own").await {
        return;
    }
    let (result, _) = own_database("feed_unannounced", |db| async move {
        let dsn = format!("{} dbname={db}", dsn());
        let w = connect(&dsn).await.unwrap();
        w.batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .unwrap();
        let id = initialize_target(&w, "feed-unannounced.md", "one two\n")
            .await
            .unwrap();
        let mut m = tokio::task::spawn_blocking({
            let dsn = dsn.clone();
            let id = id.clone();
            move || {
                let (mut m, _) = Mcp::legacy(&dsn, "extended");
                let s = m.request("resources/subscribe", json!({"uri": uri(&id)}));
                assert_eq!(s["result"], json!({}), "{s}");
                m
            }
        })
        .await
        .unwrap();
        let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                             "params": {"uri": uri(&id)}});
        let open = connect(&dsn).await.unwrap();
        open.batch_execute("BEGIN; SELECT pg_catalog.pg_current_xact_id()")
            .await
            .unwrap();
        w.batch_execute("BEGIN; SET LOCAL patchdiff.notify_queue_limit = 0")
            .await
            .unwrap();
        let r = call(&w, "patchdiff_submit_edits", &edit(&id, 0, "one", "ONE"))
            .await
            .unwrap();
        assert_eq!(r["status"], "accepted", "{r}");
        m = tokio::task::spawn_blocking({
            let (updated, id) = (updated.clone(), id.clone());
            move || {
                // At once (within the 1 s poll), though the change is not committed yet.
                assert_eq!(m.notification(), updated, "the count moved");
                // Longer than the 5 s between resyncs: whatever comes meanwhile, the text is old.
                let until = std::time::Instant::now() + Duration::from_secs(7);
                while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
                    if let Some(n) = m.next(left) {
                        assert_eq!(n, updated);
                    }
                }
                let read = m.request("resources/read", json!({"uri": uri(&id)}));
                assert_eq!(read["result"]["contents"][0]["text"], "one two\n");
                m
            }
        })
        .await
        .unwrap();
        w.batch_execute("COMMIT").await.unwrap();
        tokio::task::spawn_blocking(move || {
            let n = m
                .next(Duration::from_secs(30))
                .expect("no notification within 30 s of the writer's COMMIT");
            assert_eq!(n, updated, "once the writer has ended");
            let read = m.request("resources/read", json!({"uri": uri(&id)}));
            assert_eq!(read["result"]["contents"][0]["text"], "ONE two\n");
        })
        .await
        .unwrap();
        open.batch_execute("ROLLBACK").await.unwrap();
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// helper-63: a host that stops reading its stdout while its subscribed targets change
/// thousands of times must not stall the server's listening session. Waiting for the host, the
/// session stopped reading its connection; its backend then waited to send (`ClientWrite`) and
/// stopped taking notifications, and PostgreSQL's notification queue, one for the whole
/// cluster, stopped draining behind it (toward `patchdiff.notify_queue_limit`, past which every
/// tenant's changes commit unannounced). The session now drops what its listener has no room
/// for and owes it a resync: its backend keeps reading, and once the host reads again it hears
/// of every target and reads its last text. (48,000 announcements: on the test machine the
/// server before the fix stalled after 20,000 to 32,000, once the socket's buffers were full.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_reading_never_holds_the_notification_queue() {
    use std::io::{BufRead, BufReader, Write};
    if patchdiff_tests::not_through_a_router(&dsn(), "it makes a database of its own").await {
        return;
    }
    const WRITERS: usize = 4;
    const EDITS: usize = 12_000;
    let (result, _) = own_database("feed_unread", |db| async move {
        let dsn = format!("{} dbname={db}", dsn());
        let su = connect(&dsn).await.unwrap();
        su.batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .unwrap();
        let mut ids = Vec::new();
        for k in 0..WRITERS {
            ids.push(
                initialize_target(&su, &format!("unread-{k}.md"), "aaa\n")
                    .await
                    .unwrap(),
            );
        }
        // The host: subscribes to every target, then reads nothing more.
        let (mut child, mut stdin, mut stdout) = patchdiff_tests::stdio::spawn_unread(&[
            ("PATCHDIFF_DATABASE_URL", &dsn),
            ("PATCHDIFF_MCP_PROFILE", "extended"),
        ]);
        let mut say = move |line: Value| {
            stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
            stdin.flush().unwrap();
        };
        let hear = |stdout: &mut BufReader<std::process::ChildStdout>| -> Value {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            serde_json::from_str(&line).expect("a JSON line")
        };
        say(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
            {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "feed-test", "version": "1"}}}));
        assert_eq!(hear(&mut stdout)["id"], 0);
        say(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        for (k, id) in ids.iter().enumerate() {
            say(json!({"jsonrpc": "2.0", "id": k + 1, "method": "resources/subscribe", "params": {"uri": uri(id)}}));
            let r = hear(&mut stdout);
            assert_eq!((&r["id"], &r["result"]), (&json!(k + 1), &json!({})), "{r}");
        }
        // The listening session: the feed's key holder in this database.
        let listening: i32 = su
            .query_one(
                "SELECT pid FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted
                   AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
                   AND classid = $1::int8::oid AND objid = $2::int8::oid AND objsubid = 2",
                &[&i64::from(LISTENER_LOCK_KEY1), &i64::from(LISTENER_LOCK_KEY2)],
            )
            .await
            .unwrap()
            .get(0);
        // Thousands of accepted edits, each announced, while the host reads nothing.
        let mut writers = Vec::new();
        for id in &ids {
            let (dsn, id) = (dsn.clone(), id.clone());
            writers.push(tokio::spawn(async move {
                let w = connect(&dsn).await.unwrap();
                w.batch_execute(&format!(
                    "DO $$ DECLARE r json; BEGIN
                       FOR v IN 0..{last} LOOP
                         r := patchdiff_submit_edits(json_build_object('target_file_id', '{id}',
                           'expected_target_version', v, 'intent', 'storm', 'edits', json_build_array(
                             json_build_object('match', CASE WHEN v % 2 = 0 THEN 'aaa' ELSE 'ccc' END,
                                               'replace', CASE WHEN v % 2 = 0 THEN 'ccc' ELSE 'aaa' END))));
                         IF r->>'status' IS DISTINCT FROM 'accepted' THEN RAISE EXCEPTION '%', r; END IF;
                         COMMIT;
                       END LOOP;
                     END $$",
                    last = EDITS - 1
                ))
                .await
                .unwrap();
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        // Given a moment, the listening backend is reading, not stuck sending to a session that
        // waits for the host (it stayed in ClientWrite until the host read again).
        tokio::time::sleep(Duration::from_secs(1)).await;
        for _ in 0..10 {
            let (state, wait): (Option<String>, Option<String>) = {
                let r = su
                    .query_one(
                        "SELECT state, wait_event FROM pg_catalog.pg_stat_activity WHERE pid = $1",
                        &[&listening],
                    )
                    .await
                    .unwrap();
                (r.get(0), r.get(1))
            };
            assert_ne!(
                wait.as_deref(),
                Some("ClientWrite"),
                "the listening session stopped reading (state {state:?})"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The host reads again: it hears of every target, and their last text is read.
        tokio::task::spawn_blocking(move || {
            let (tx, lines) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                while stdout.read_line(&mut line).unwrap_or(0) > 0 {
                    if tx.send(std::mem::take(&mut line)).is_err() {
                        break;
                    }
                }
            });
            let mut unheard: std::collections::BTreeSet<String> =
                ids.iter().map(|id| uri(id)).collect();
            let until = std::time::Instant::now() + Duration::from_secs(60);
            while !unheard.is_empty() {
                let left = until
                    .checked_duration_since(std::time::Instant::now())
                    .unwrap_or_else(|| panic!("no update within 60 s for {unheard:?}"));
                let n: Value = serde_json::from_str(&lines.recv_timeout(left).unwrap()).unwrap();
                assert_eq!(n["method"], "notifications/resources/updated", "{n}");
                unheard.remove(n["params"]["uri"].as_str().unwrap());
            }
            say(json!({"jsonrpc": "2.0", "id": 100, "method": "resources/read", "params": {"uri": uri(&ids[0])}}));
            loop {
                let v: Value =
                    serde_json::from_str(&lines.recv_timeout(Duration::from_secs(60)).unwrap())
                        .unwrap();
                if v["id"] == 100 {
                    let last = if EDITS.is_multiple_of(2) { "aaa\n" } else { "ccc\n" };
                    assert_eq!(v["result"]["contents"][0]["text"], last, "{v}");
                    break;
                }
                assert_eq!(v["method"], "notifications/resources/updated", "{v}");
            }
            let _ = child.kill();
            let _ = child.wait();
        })
        .await
        .unwrap();
    })
    .await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Item 2, the 2026-07-28 era: subscriptions/listen, its acknowledgment, tagged updates,
/// notifications/cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_listen_streams_hear_updates_over_stdio() {
    let dsn = dsn();
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-modern.md", "red green\n")
        .await
        .unwrap();
    let other = initialize_target(&w, "feed-modern-2.md", "blue\n")
        .await
        .unwrap();

    let mut contract = Mcp::start(&dsn, "full");
    let d = contract.modern_request("server/discover", json!({}));
    assert_eq!(d["result"]["capabilities"], json!({"tools": {}}), "{d}");
    let r = contract.modern_request(
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri(&id)]}}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");

    let mut m = Mcp::start(&dsn, "extended");
    let d = m.modern_request("server/discover", json!({}));
    assert_eq!(
        d["result"]["capabilities"],
        json!({"tools": {}, "resources": {"subscribe": true}}),
        "{d}"
    );
    let l = m.modern_request("resources/list", json!({}));
    assert_eq!(l["result"]["resultType"], "complete", "{l}");
    assert_eq!(
        (&l["result"]["ttlMs"], &l["result"]["cacheScope"]),
        (&json!(0), &json!("private"))
    );
    let read = m.modern_request("resources/read", json!({"uri": uri(&id)}));
    assert_eq!(read["result"]["contents"][0]["text"], "red green\n");
    let missing = m.modern_request(
        "resources/read",
        json!({"uri": uri("00000000-0000-4000-8000-000000000000")}),
    );
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    let gone = m.modern_request("resources/subscribe", json!({"uri": uri(&id)}));
    assert_eq!(gone["error"]["code"], -32601, "{gone}");

    // The listen request is answered by its acknowledgment, which honors only real targets.
    let unknown = uri("00000000-0000-4000-8000-000000000000");
    let listen = m.send(
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri(&id), unknown, "file:///etc/passwd"], "toolsListChanged": true}}),
        true,
    );
    let ack = m.notification();
    assert_eq!(
        ack,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": listen},
                          "notifications": {"resourceSubscriptions": [uri(&id)]}}})
    );
    let second = m.send(
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri(&other), uri(&id)]}}),
        true,
    );
    assert_eq!(
        m.notification()["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        second
    );

    call(&w, "patchdiff_submit_edits", &edit(&id, 0, "red", "RED"))
        .await
        .unwrap();
    let mut got = [m.notification(), m.notification()];
    got.sort_by_key(|n| n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].as_i64());
    for (n, sub) in got.iter().zip([listen, second]) {
        assert_eq!(
            n,
            &json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                    "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": sub}, "uri": uri(&id)}})
        );
    }
    call(
        &w,
        "patchdiff_submit_edits",
        &edit(&other, 0, "blue", "BLUE"),
    )
    .await
    .unwrap();
    let n = m.notification();
    assert_eq!(
        (
            &n["params"]["uri"],
            &n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        ),
        (&json!(uri(&other)), &json!(second))
    );

    // Cancelling one stream stops its notifications, not the other's.
    m.notify("notifications/cancelled", json!({"requestId": second}));
    call(
        &w,
        "patchdiff_submit_edits",
        &edit(&other, 1, "BLUE", "blue"),
    )
    .await
    .unwrap();
    m.quiet("a cancelled stream");
    call(
        &w,
        "patchdiff_submit_edits",
        &edit(&id, 1, "green", "GREEN"),
    )
    .await
    .unwrap();
    assert_eq!(
        m.notification()["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        listen
    );
    m.notify("notifications/cancelled", json!({"requestId": listen}));
    call(
        &w,
        "patchdiff_submit_edits",
        &edit(&id, 2, "GREEN", "green"),
    )
    .await
    .unwrap();
    m.quiet("every stream cancelled");
    let tools = m.modern_request("tools/list", json!({}));
    assert!(tools["result"]["tools"].is_array());
}

/// docs/profiles.md, "Subscriptions" (hostile input): one stdio connection holds at most 16
/// listen streams, and a listen `id` (kept while its stream is open and echoed in every
/// notification) is at most 256 bytes of JSON; both are refused with nothing subscribed, the
/// open streams keep working, and an ended stream frees its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_per_connection_and_their_ids_are_bounded() {
    let dsn = dsn();
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-caps.md", "one\n")
        .await
        .unwrap();
    let mut m = Mcp::start(&dsn, "extended");
    m.modern_request("server/discover", json!({}));
    let watch = json!({"notifications": {"resourceSubscriptions": [uri(&id)]}});
    let mut open = Vec::new();
    for _ in 0..16 {
        open.push(m.send("subscriptions/listen", watch.clone(), true));
        m.notification();
    }
    let over = m.modern_request("subscriptions/listen", watch.clone());
    assert_eq!(over["error"]["code"], -32603, "{over}");
    assert!(
        over["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Subscription limit reached"),
        "{over}"
    );
    // A long id: refused before anything is subscribed, answered under its own id.
    let long = "x".repeat(300);
    let mut params = watch.clone();
    params["_meta"] = modern_meta();
    let line =
        json!({"jsonrpc": "2.0", "id": long, "method": "subscriptions/listen", "params": params});
    m.pipes.send(format!("{line}\n").as_bytes());
    let r = m.next(Duration::from_secs(30)).unwrap();
    assert_eq!(
        (&r["id"], &r["error"]["code"]),
        (&json!(long), &json!(-32600)),
        "{r}"
    );
    // One change: one line per open stream, no more.
    call(&w, "patchdiff_submit_edits", &edit(&id, 0, "one", "two"))
        .await
        .unwrap();
    let mut heard: Vec<i64> = (0..16)
        .map(|_| {
            m.notification()["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
                .as_i64()
                .unwrap()
        })
        .collect();
    heard.sort_unstable();
    assert_eq!(heard, open);
    m.quiet("one line per open stream");
    // Ending one frees its place.
    m.notify("notifications/cancelled", json!({"requestId": open[0]}));
    m.send("subscriptions/listen", watch, true);
    let ack = m.notification();
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
}

/// docs/profiles.md "Cancelled calls" (helper-66 F2): a `notifications/cancelled` that arrives
/// while its `subscriptions/listen` is still being set up does not leave the stream open: only
/// tool calls are stopped by a cancellation, so the listen finishes (it is acknowledged) and the
/// cancellation then ends it. Twenty listens cancelled at once leave none open: a new one is
/// accepted (not "Subscription limit reached" at 16), and a change is told to it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_cancelled_as_it_starts_leaves_no_stream() {
    let dsn = dsn();
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-cancelled-listen.md", "one\n")
        .await
        .unwrap();
    let mut m = Mcp::start(&dsn, "extended");
    m.modern_request("server/discover", json!({}));
    let watch = json!({"notifications": {"resourceSubscriptions": [uri(&id)]}});
    for _ in 0..20 {
        let listen = m.send("subscriptions/listen", watch.clone(), true);
        m.notify("notifications/cancelled", json!({"requestId": listen}));
        let next = m.send("server/discover", json!({}), true);
        let ack = m.notification();
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        assert!(m.response(next)["result"].is_object());
    }
    let kept = m.send("subscriptions/listen", watch, true);
    let ack = m.notification();
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], kept,
        "{ack}"
    );
    call(&w, "patchdiff_submit_edits", &edit(&id, 0, "one", "two"))
        .await
        .unwrap();
    let n = m.notification();
    assert_eq!(
        n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], kept,
        "{n}"
    );
    m.quiet("only the stream that was not cancelled hears the change");
}

/// MCP "Cancellation" (docs/profiles.md, "notifications/cancelled over stdio"): a running
/// `resources/read` or `resources/list` is stopped by a `notifications/cancelled` naming it, as a
/// tool call is: its statement is cancelled, it is never answered, and the request behind it is.
/// helper-106 found a read of a 64 MiB target ran on to its end. Here each waits on a lock of the
/// targets table that only the test releases, so nothing but the cancel can end it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_resource_read_or_listing_is_cancelled() {
    let dsn = dsn();
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-cancelled-read.md", "one\n")
        .await
        .unwrap();
    let holder = patchdiff_tests::tables_for(&dsn, &id).await;
    let holder_pid = pid(&holder).await;
    let watcher = patchdiff_tests::tables_for(&dsn, &id).await;
    let mut m = Mcp::start(&dsn, "extended");
    m.modern_request("server/discover", json!({}));
    for (method, params) in [
        ("resources/read", json!({"uri": uri(&id)})),
        ("resources/list", json!({})),
    ] {
        holder
            .batch_execute("BEGIN; LOCK TABLE patchdiff.targets IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let running = m.send(method, params.clone(), true);
        patchdiff_tests::wait_until_blocked_by(&watcher, holder_pid, method).await;
        m.notify("notifications/cancelled", json!({"requestId": running}));
        let next = m.send("server/discover", json!({}), true);
        let r = m.response(next);
        assert!(r["result"].is_object(), "{method}: {r}");
        assert_eq!(
            patchdiff_tests::blocked_by(&watcher, holder_pid).await,
            0,
            "{method}: the cancelled request still waits"
        );
        holder.batch_execute("ROLLBACK").await.unwrap();
        m.quiet(&format!("{method}: a cancelled request is never answered"));
        let again = m.modern_request(method, params);
        assert!(again["result"].is_object(), "{method} again: {again}");
    }
    let read = m.modern_request("resources/read", json!({"uri": uri(&id)}));
    assert_eq!(read["result"]["contents"][0]["text"], "one\n", "{read}");
}

/// The same, for a cancellation that arrives once the read's statement has returned, while the
/// front end decodes the answer and makes its line (about 0.35 s for a 64 MiB target): it is read
/// before the answer is written, and the answer is dropped. helper-108: the cancellation was read
/// only once the whole answer had been written, and a read cancelled 0.3 to 0.7 s into its 0.9 s
/// was answered in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_cancelled_while_its_answer_is_made_is_not_answered() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(
        &dsn,
        "it watches the front end's own session in pg_stat_activity",
    )
    .await
    {
        return;
    }
    let w = connect(&dsn).await.unwrap();
    let id: String = w
        .query_one(
            "SELECT set_config('patchdiff.max_argument_bytes', '100000000', false), \
             (patchdiff_initialize_target(json_build_object('filename', 'feed-large.txt', \
               'content', repeat(E'abcdefg\\n', 8000000)))::json ->> 'target_file_id')",
            &[],
        )
        .await
        .unwrap()
        .get(1);
    let app = unique("feed_made");
    let mut m = Mcp::start(&format!("{dsn} application_name={app}"), "extended");
    m.modern_request("server/discover", json!({}));
    let state = || async {
        let r = w
            .query_opt(
                "SELECT state, strpos(query, 'patchdiff_get_target') > 0 FROM pg_catalog.pg_stat_activity \
                 WHERE application_name = $1",
                &[&app],
            )
            .await
            .unwrap();
        r.map(|r| (r.get::<_, Option<String>>(0), r.get::<_, Option<bool>>(1)))
    };
    let read = m.send("resources/read", json!({"uri": uri(&id)}), true);
    // The statement has returned: the session is idle after the read's query.
    patchdiff_tests::eventually(
        "the read's statement returns",
        Duration::from_secs(60),
        Duration::from_millis(2),
        || async { state().await == Some((Some("idle".to_owned()), Some(true))) },
    )
    .await;
    m.notify("notifications/cancelled", json!({"requestId": read}));
    let next = m.send("server/discover", json!({}), true);
    let r = m
        .next(Duration::from_secs(60))
        .expect("no line from patchdiff-mcp");
    assert_eq!(
        r["id"], next,
        "the cancelled read was answered (its answer was made when the cancellation came)"
    );
}

/// docs/http.md "Cost" ("at most `--connections` sessions plus its listening session(s)"):
/// while another session holds the feed's key, a listening session registers through a second
/// session that waits for it (docs/sql-api.md "The change feed"). When the front end gives that
/// wait up, its backend ends too: at once when the last stream closes (a cancel request), and
/// within seconds when the front end dies (the server's check that its client is still there).
/// helper-110: each such wait stayed, waiting for the key, after its front end had closed it, one
/// more backend each time a listening session opened while any role held the key, until no role
/// could connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_the_feeds_key_that_the_front_end_gives_up_ends_in_the_server() {
    let dsn = dsn();
    if patchdiff_tests::not_through_a_router(
        &dsn,
        "it holds the key in the database the front end listens on",
    )
    .await
    {
        return;
    }
    let w = connect(&dsn).await.unwrap();
    let id = initialize_target(&w, "feed-key-held.md", "one\n")
        .await
        .unwrap();
    let holder = patchdiff_tests::holding_the_feed_key(&dsn).await;
    let app = unique("feed_waits");
    let waiting = || async {
        w.query_one(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity \
             WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
            &[&app],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    let watch = json!({"notifications": {"resourceSubscriptions": [uri(&id)]}});
    // The last stream ends (its cancellation), then the front end dies.
    for ends in ["the stream is cancelled", "the front end is killed"] {
        let mut m = Mcp::start(&format!("{dsn} application_name={app}"), "extended");
        m.modern_request("server/discover", json!({}));
        let listen = m.send("subscriptions/listen", watch.clone(), true);
        let ack = m.notification();
        assert_eq!(
            ack["method"], "notifications/subscriptions/acknowledged",
            "{ack}"
        );
        patchdiff_tests::eventually(
            "a session waits for the key",
            Duration::from_secs(20),
            Duration::from_millis(20),
            || async { waiting().await > 0 },
        )
        .await;
        if ends == "the front end is killed" {
            drop(m);
        } else {
            m.notify("notifications/cancelled", json!({"requestId": listen}));
            m.modern_request("server/discover", json!({}));
        }
        patchdiff_tests::eventually(
            &format!("{ends}: its wait for the key ends in the server"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            || async { waiting().await == 0 },
        )
        .await;
    }
    drop(holder);
}

/// Item 2, tenancy: a subscriber never hears about a target it may not see.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_hear_only_targets_they_may_see() {
    if patchdiff_tests::not_through_a_router(
        &dsn(),
        "it makes a database of its own; shards.rs proves tenancy of the feed through a router",
    )
    .await
    {
        return;
    }
    let (a, b) = (unique("feed_a"), unique("feed_b"));
    let password = "feed-test-password";
    let (result, server) = own_database("feed_tenancy", {
        let (a, b) = (a.clone(), b.clone());
        |db| async move { tenancy(&db, &a, &b, password).await }
    })
    .await;
    for r in [&a, &b] {
        let _ = server
            .batch_execute(&format!("DROP ROLE IF EXISTS {r}"))
            .await;
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn tenancy(db: &str, a: &str, b: &str, password: &str) {
    let su = open(&config_for(db, None)).await.unwrap();
    su.batch_execute("CREATE EXTENSION pg_patchdiff")
        .await
        .unwrap();
    for role in [a, b] {
        su.batch_execute(&recipe(db, role, password)).await.unwrap();
    }
    let bc = open(&config_for(db, Some((b, password)))).await.unwrap();
    // Only a superuser may turn the feed off: a writer cannot hide its changes from it. Before
    // the library is loaded the setting is a placeholder, which PostgreSQL discards (with a
    // WARNING) when the library defines it, since the role may not set it; once loaded, SET
    // is refused outright.
    bc.batch_execute("SET patchdiff.notify = off")
        .await
        .expect("a placeholder setting");
    let (_l, mut rx) = listener(&format!("{} dbname={db}", dsn())).await;
    let secret = initialize_target(&bc, "b-secret.md", "b b b\n")
        .await
        .unwrap();
    let e = bc
        .batch_execute("SET patchdiff.notify = off")
        .await
        .expect_err("a tenant set patchdiff.notify");
    assert_eq!(e.code().map(|c| c.code()), Some("42501"), "{e}");
    let on: String = bc
        .query_one("SELECT current_setting('patchdiff.notify')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(on, "listened");
    call(
        &bc,
        "patchdiff_submit_edits",
        &edit(&secret, 0, "b b b", "b b"),
    )
    .await
    .unwrap();
    assert_eq!(heard(&mut rx, &[&secret]).await["version"], 1);
    let shared = initialize_target(&bc, "b-shared.md", "s s s\n")
        .await
        .unwrap();
    patchdiff_tests::share_read(&bc, &shared, a, true).await;

    let a_dsn = format!("{} dbname={db} user={a} password={password}", dsn());
    let (mut legacy, _) = Mcp::legacy(&a_dsn, "extended");
    let mut modern = Mcp::start(&a_dsn, "extended");

    // Another tenant's target is an unknown one: not listed, not readable, not subscribable.
    let l = legacy.request("resources/list", json!({}));
    let uris: Vec<&Value> = l["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["uri"])
        .collect();
    assert_eq!(uris, [&json!(uri(&shared))], "{l}");
    // Marked as another role's, shared with this one (docs/profiles.md, resources/list).
    assert_eq!(
        l["result"]["resources"][0]["description"],
        format!("Another role's target: owned by role {b}; this role has read access to it."),
        "{l}"
    );
    let r = legacy.request("resources/subscribe", json!({"uri": uri(&secret)}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let r = legacy.request("resources/read", json!({"uri": uri(&secret)}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
    let r = legacy.request("resources/subscribe", json!({"uri": uri(&shared)}));
    assert_eq!(r["result"], json!({}), "{r}");
    let listen = modern.send(
        "subscriptions/listen",
        json!({"notifications": {"resourceSubscriptions": [uri(&secret), uri(&shared)]}}),
        true,
    );
    let ack = modern.notification();
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourceSubscriptions": [uri(&shared)]}),
        "{ack}"
    );

    // B's change to the secret target: nobody in A hears of it; to the shared one: both do.
    call(&bc, "patchdiff_submit_edits", &edit(&secret, 1, "b b", "B"))
        .await
        .unwrap();
    call(
        &bc,
        "patchdiff_submit_edits",
        &edit(&shared, 0, "s s s", "S"),
    )
    .await
    .unwrap();
    assert_eq!(legacy.notification()["params"]["uri"], uri(&shared));
    let n = modern.notification();
    assert_eq!(
        (
            &n["params"]["uri"],
            &n["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"]
        ),
        (&json!(uri(&shared)), &json!(listen))
    );
    legacy.quiet("B's secret target");
    modern.quiet("B's secret target");

    // Revoked: the subscriptions remain, but the server checks access before each
    // notification, so A hears nothing more of it.
    patchdiff_tests::share_read(&bc, &shared, a, false).await;
    call(&bc, "patchdiff_submit_edits", &edit(&shared, 1, "S", "s"))
        .await
        .unwrap();
    legacy.quiet("a revoked target");
    modern.quiet("a revoked target");
    let r = legacy.request("resources/read", json!({"uri": uri(&shared)}));
    assert_eq!(r["error"]["code"], -32002, "{r}");
}

/// Item 2 over HTTP (docs/http.md): resources are served as the token's role; the legacy
/// subscription needs an HTTP session, which the endpoint does not keep, so it is refused and
/// the legacy capabilities say so, while 2026-07-28 advertises `subscriptions/listen` (answered
/// with an SSE stream: tests/tests/http_feed.rs), refused 406 when `Accept` does not allow one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_resources_and_subscribes_only_in_2026_07_28() {
    let w = connect(&dsn()).await.unwrap();
    let id = initialize_target(&w, "feed-http.md", "over http\n")
        .await
        .unwrap();
    let token = "feed-test-token-0123456789";
    let served =
        patchdiff_tests::http::Served::start("extended", &[(token, "postgres")], &[], &dsn());
    let url = served.url.clone();
    let post = |headers: &[(&str, &str)], body: Value| -> (u16, Value) {
        let mut r = ureq::post(&url)
            .set("Content-Type", "application/json")
            .set("Authorization", &format!("Bearer {token}"));
        for (k, v) in headers {
            r = r.set(k, v);
        }
        patchdiff_tests::http::send(r, &body.to_string())
    };
    let legacy = |method: &str, params: Value| {
        post(
            &[("MCP-Protocol-Version", LEGACY)],
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
    };
    let modern = |method: &str, mut params: Value, name: Option<&str>| {
        params["_meta"] = modern_meta();
        let mut headers = vec![("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)];
        if let Some(n) = name {
            headers.push(("Mcp-Name", n));
        }
        post(
            &headers,
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        )
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (_, init) = post(
            &[],
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params":
                   {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        );
        assert_eq!(
            init["result"]["capabilities"]["resources"],
            json!({"subscribe": false, "listChanged": false}),
            "{init}"
        );
        let (_, read) = legacy("resources/read", json!({"uri": uri(&id)}));
        assert_eq!(
            read["result"]["contents"][0]["text"], "over http\n",
            "{read}"
        );
        let (_, sub) = legacy("resources/subscribe", json!({"uri": uri(&id)}));
        assert_eq!(sub["error"]["code"], -32601, "{sub}");
        assert!(
            sub["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Mcp-Session-Id"),
            "{sub}"
        );
        let (_, d) = modern("server/discover", json!({}), None);
        assert_eq!(
            d["result"]["capabilities"],
            json!({"tools": {}, "resources": {"subscribe": true}}),
            "{d}"
        );
        let u = uri(&id);
        let (status, read) = modern("resources/read", json!({"uri": u}), Some(&u));
        assert_eq!(status, 200, "{read}");
        assert_eq!(read["result"]["contents"][0]["text"], "over http\n");
        let (status, mismatch) = modern("resources/read", json!({"uri": u}), Some("x"));
        assert_eq!(
            (status, &mismatch["error"]["code"]),
            (400, &json!(-32020)),
            "{mismatch}"
        );
        // An Accept that does not allow an SSE response.
        let mut params = json!({"notifications": {"resourceSubscriptions": [u]}});
        params["_meta"] = modern_meta();
        let (status, listen) = post(
            &[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "subscriptions/listen"),
                ("Accept", "application/json"),
            ],
            json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": params}),
        );
        assert_eq!(
            (status, &listen["error"]["code"]),
            (406, &json!(-32600)),
            "{listen}"
        );
    }));
    drop(served);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
