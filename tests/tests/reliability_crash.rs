//! Issue 9, "Crashes": backends terminated (`pg_terminate_backend`) and killed (SIGKILL, which
//! makes the postmaster restart every backend through crash recovery) during submissions,
//! `patchdiff-mcp` killed mid-call, and PostgreSQL stopped with an immediate shutdown under load.
//! Afterwards every target replays to its current state, no transaction is half-applied, and a
//! keyed retry of an interrupted call either recovers its committed outcome (`deduplicated:
//! true`) or commits once.
//!
//! These tests control the server, so they run against a private cluster that they start
//! themselves: the first free port from 25350 (below Linux's ephemeral range, so that no client
//! socket, not even one connecting to itself while the server is down, can hold it), data in
//! /tmp/patchdiff-crash/data, run by the unprivileged `postgres` user when the tests run as root
//! (initdb refuses root). The tests take turns on it; each
//! starts the server, works in a database of its own, and stops the server when done.
//!
//! Environment: `PATCHDIFF_MCP_BIN` (the built server; default target/debug). pg_patchdiff must
//! be installed in the system PostgreSQL 15 (`PATCHDIFF_PG_BIN`, default
//! /usr/lib/postgresql/15/bin).

use patchdiff_tests::backend_pid;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, Once, OnceLock};
use std::time::{Duration, Instant};

use patchdiff_tests::stress::{self, Config, Load, Outcome};
use patchdiff_tests::{call, initialize_target};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_postgres::Client;

/// The first port tried for the private cluster; [`port`] takes the first free one from here.
const FIRST_PORT: u16 = 25350;
const BASE: &str = "/tmp/patchdiff-crash";
const DATA: &str = "/tmp/patchdiff-crash/data";
/// How long the server may take to accept connections again after a crash or a restart.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(60);
const RACE_TIMEOUT: Duration = Duration::from_secs(10);

fn pg_bin(program: &str) -> String {
    let dir =
        std::env::var("PATCHDIFF_PG_BIN").unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".into());
    format!("{dir}/{program}")
}

fn mcp_bin() -> String {
    std::env::var("PATCHDIFF_MCP_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/patchdiff-mcp").to_owned()
    })
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs a server program as the cluster's owner; returns whether it succeeded.
fn as_owner(program: &str, args: &[&str]) -> bool {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &pg_bin(program)]);
        c
    } else {
        Command::new(pg_bin(program))
    };
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The private cluster's port, chosen once per run: the first from [`FIRST_PORT`] that nothing
/// on this machine listens on or is connected from. A fixed port inside the ephemeral range
/// (it was 54350) can be held by any outgoing connection, and the server then cannot start.
fn port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        (FIRST_PORT..FIRST_PORT + 50)
            .find(|&p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
            .expect("no free port for the private cluster in 25350..25400")
    })
}

/// The last lines of the server's log, for a failure message.
fn log_tail(log: &str) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("(unreadable: {e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

static TURN: Mutex<()> = Mutex::new(());
static FRESH: Once = Once::new();

/// The private cluster, running, with a database of this test's own. Dropping it stops the
/// server.
struct Cluster {
    dsn: String,
    _turn: MutexGuard<'static, ()>,
}

impl Cluster {
    async fn start(database: &str) -> Cluster {
        // A test that failed while holding the turn poisons the lock; the cluster is still
        // usable by the next one.
        let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        FRESH.call_once(|| {
            if std::path::Path::new(DATA).join("postmaster.pid").exists() {
                as_owner("pg_ctl", &["-D", DATA, "-m", "immediate", "stop"]);
            }
            let _ = std::fs::remove_dir_all(BASE);
            std::fs::create_dir_all(DATA).expect("creating the data folder");
            if is_root() {
                let ok = Command::new("chown")
                    .args(["postgres:postgres", DATA])
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "chown postgres {DATA}");
            }
            let ok = as_owner(
                "initdb",
                &[
                    "-D",
                    DATA,
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                    "-U",
                    "postgres",
                    "--auth=trust",
                ],
            );
            assert!(ok, "initdb {DATA}");
        });
        let cluster = Cluster {
            dsn: format!(
                "host=127.0.0.1 port={} user=postgres dbname={database}",
                port()
            ),
            _turn: turn,
        };
        cluster.start_server();
        let admin = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            port()
        );
        let c = cluster.client_of(&admin).await;
        c.batch_execute(&format!("DROP DATABASE IF EXISTS {database}"))
            .await
            .unwrap();
        c.batch_execute(&format!(
            "CREATE DATABASE {database} ENCODING 'UTF8' TEMPLATE template0"
        ))
        .await
        .unwrap();
        cluster
            .client()
            .await
            .batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .expect("CREATE EXTENSION pg_patchdiff (is it installed?)");
        cluster
    }

    /// Starts the server; a start that fails is tried twice more, a second apart, and a third
    /// failure panics with the end of the server's log.
    fn start_server(&self) {
        let options = format!(
            "-p {} -k {DATA} -c listen_addresses=127.0.0.1 -c fsync=on",
            port()
        );
        let log = format!("{DATA}/server.log");
        for attempt in 1..=3 {
            if as_owner(
                "pg_ctl",
                &["-D", DATA, "-l", &log, "-w", "-o", &options, "start"],
            ) {
                return;
            }
            eprintln!(
                "pg_ctl start failed (attempt {attempt}):\n{}",
                log_tail(&log)
            );
            std::thread::sleep(Duration::from_secs(1));
        }
        panic!(
            "pg_ctl start failed three times; end of {log}:\n{}",
            log_tail(&log)
        );
    }

    /// `pg_ctl -m immediate stop`: every process exits without a checkpoint, as in a power cut
    /// (the data files are left for crash recovery).
    fn stop_immediately(&self) {
        assert!(
            as_owner("pg_ctl", &["-D", DATA, "-m", "immediate", "stop"]),
            "pg_ctl -m immediate stop"
        );
    }

    /// A new session, once the server accepts connections again.
    async fn client(&self) -> Client {
        self.client_of(&self.dsn).await
    }

    async fn client_of(&self, dsn: &str) -> Client {
        let deadline = Instant::now() + RECOVERY_TIMEOUT;
        loop {
            match connect_quietly(dsn).await {
                Ok(c) => return c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("the server did not come back within {RECOVERY_TIMEOUT:?}: {e}"),
            }
        }
    }

    fn config(&self, name: &str) -> Config {
        let mut c = Config::new(&self.dsn);
        c.mcp_bin = Some(mcp_bin());
        c.application_name = name.into();
        c.faults = true;
        c.shared_targets = 3;
        c.private_targets = 3;
        c.read_percent = 15;
        c.resend_percent = 30;
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        as_owner("pg_ctl", &["-D", DATA, "-m", "fast", "stop"]);
    }
}

async fn connect_quietly(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Waits until a backend is blocked on a heavyweight lock: `pid`, or any session whose
/// application_name is `app`.
async fn blocked_backend(observer: &Client, pid: Option<i32>, app: &str) -> i32 {
    let deadline = Instant::now() + RACE_TIMEOUT;
    loop {
        let row = observer
            .query_opt(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                   AND (pid = $1 OR ($2 <> '' AND application_name = $2)) LIMIT 1",
                &[&pid.unwrap_or(0), &app],
            )
            .await
            .unwrap();
        if let Some(r) = row {
            return r.get(0);
        }
        assert!(
            Instant::now() < deadline,
            "no backend ever waited on the target lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Backends of a load (`application_name` `<name>-c<N>`) that are running a statement.
async fn busy_backends(observer: &Client, name: &str) -> Result<Vec<i32>, tokio_postgres::Error> {
    Ok(observer
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 AND state = 'active' \
               AND pid <> pg_backend_pid()",
            &[&format!("{name}-c%")],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// Sends SIGKILL; false when the process was already gone.
fn sigkill(pid: i32) -> bool {
    Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn replace(target: &str, version: i64, from: &str, to: &str, key: &str) -> Value {
    json!({"target_file_id": target, "expected_target_version": version, "intent": format!("{from} to {to}"),
           "edits": [{"match": from, "replace": to}], "client_request_id": key})
}

/// Attempt rows under a key: (pdcp_log_id, status).
async fn keyed_rows(c: &Client, target: &str, key: &str) -> Vec<(String, String)> {
    c.query(
        "SELECT pdcp_log_id::text, status FROM patchdiff.pdcp_logs \
          WHERE target_file_id = $1::text::uuid AND client_request_id = $2",
        &[&target, &key],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect()
}

/// Sends a keyed call twice: the first answer must be a new commit (`deduplicated: false`), the
/// second its recovery; and the log must hold exactly that one row under the key.
async fn commits_once(c: &Client, target: &str, args: &Value) -> Value {
    let key = args["client_request_id"].as_str().unwrap();
    let first = call(c, "patchdiff_submit_edits", args).await.unwrap();
    assert_eq!(first["deduplicated"], false, "{first}");
    let again = call(c, "patchdiff_submit_edits", args).await.unwrap();
    assert_eq!(
        (
            &again["deduplicated"],
            &again["pdcp_log_id"],
            &again["status"]
        ),
        (&json!(true), &first["pdcp_log_id"], &first["status"]),
        "{again}"
    );
    let rows = keyed_rows(c, target, key).await;
    assert_eq!(
        rows,
        [(
            first["pdcp_log_id"].as_str().unwrap().to_owned(),
            first["status"].as_str().unwrap().to_owned()
        )]
    );
    first
}

/// The replay and log invariants of targets outside a load.
async fn replays(c: &Client, target: &str, version: i64) {
    let r = call(c, "patchdiff_replay", &json!({"target_file_id": target}))
        .await
        .unwrap();
    assert_eq!(
        (
            &r["status"],
            &r["materialized_state_matches"],
            &r["current_version"]
        ),
        (&json!("success"), &json!(true), &json!(version)),
        "{r}"
    );
}

/// Checks a load's invariants on a fresh session and prints what was run.
async fn assert_invariants(cluster: &Cluster, outcome: &Outcome) {
    let c = cluster.client().await;
    let checked = stress::check(&c, outcome).await.expect("checking");
    eprintln!("{}\n{}", outcome.summary(), checked.summary());
    assert!(
        outcome.violations.is_empty() && checked.violations.is_empty(),
        "{}\n{}",
        outcome.violations.join("\n"),
        checked.violations.join("\n")
    );
    assert!(outcome.stats.accepted > 0, "{}", outcome.summary());
}

/// Waits until a load has accepted `n` more submissions, proving it works again.
async fn progress(load: &Load, n: u64) {
    let start = load.accepted();
    let deadline = Instant::now() + RECOVERY_TIMEOUT;
    while load.accepted() < start + n {
        assert!(
            Instant::now() < deadline,
            "the load made no progress after the fault"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// pg_terminate_backend on the session that holds a target's lock in an open transaction with
/// an uncommitted acceptance, and on the session waiting for that lock: both attempts vanish
/// with their transactions, and each keyed retry then commits exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_lock_holder_and_waiter_leave_nothing_and_keyed_retries_commit_once() {
    let cluster = Cluster::start("crash_terminate").await;
    let observer = cluster.client().await;
    let target = initialize_target(&observer, "t.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let hold = replace(&target, 0, "alpha", "ALPHA", "hold-1");
    let wait = replace(&target, 0, "beta", "BETA", "wait-1");

    let mut holder = cluster.client().await;
    let holder_pid = backend_pid(&holder).await;
    let tx = holder.transaction().await.unwrap();
    let r = call(&tx, "patchdiff_submit_edits", &hold).await.unwrap();
    assert_eq!(r["status"], "accepted", "{r}");

    let waiter = cluster.client().await;
    let waiter_pid = backend_pid(&waiter).await;
    let wait_args = wait.clone();
    let w = tokio::spawn(async move {
        call(&waiter, "patchdiff_submit_edits", &wait)
            .await
            .map_err(|e| e.as_db_error().map(|d| d.code().code().to_owned()))
    });
    blocked_backend(&observer, Some(waiter_pid), "").await;
    for pid in [waiter_pid, holder_pid] {
        let r = observer
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        assert!(r.get::<_, bool>(0));
    }
    let waited = w.await.unwrap();
    // 57P01: terminating connection due to administrator command.
    assert_eq!(waited.unwrap_err().as_deref(), Some("57P01"));
    assert!(tx.commit().await.is_err(), "the holder's session is gone");

    // Nothing of either attempt was committed.
    let rows: i64 = observer
        .query_one(
            "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
            &[&target],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, 0);
    let t = call(
        &observer,
        "patchdiff_get_target",
        &json!({"target_file_id": target}),
    )
    .await
    .unwrap();
    assert_eq!(
        (&t["version"], &t["current_content"]),
        (&json!(0), &json!("alpha beta gamma\n"))
    );

    // Each keyed retry commits once: the waiter's first (now it wins), then the holder's,
    // which was proposed against the same version and is now stale.
    let a = commits_once(&observer, &target, &wait_args).await;
    assert_eq!(
        (&a["status"], &a["version"]),
        (&json!("accepted"), &json!(1))
    );
    let b = commits_once(&observer, &target, &hold).await;
    assert_eq!(b["failure_reason"], "target_version_mismatch", "{b}");
    replays(&observer, &target, 1).await;
}

/// pg_terminate_backend, every 100 ms, on a random busy backend of a load of five SQL clients
/// and one `patchdiff-mcp`: every interrupted call is resent with its key until answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_backends_under_load_loses_nothing() {
    let cluster = Cluster::start("crash_terminate_load").await;
    let mut config = cluster.config("term");
    config.sql_clients = 5;
    config.mcp_clients = 1;
    config.duration = Some(Duration::from_secs(8));
    let load = Load::start(config).await.unwrap();
    let observer = cluster.client().await;
    let mut terminated = 0;
    let mut rng = 7usize;
    while load.started().elapsed() < Duration::from_secs(7) {
        let busy = busy_backends(&observer, "term").await.unwrap();
        if !busy.is_empty() {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pid = busy[(rng >> 33) % busy.len()];
            let r = observer
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
            terminated += usize::from(r.get::<_, bool>(0));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outcome = load.finish().await;
    eprintln!("terminated {terminated} backends");
    assert_invariants(&cluster, &outcome).await;
    assert!(terminated >= 10, "{terminated}");
    assert!(outcome.stats.interrupted > 0, "{}", outcome.summary());
    assert!(
        outcome.stats.recovered + outcome.stats.committed_on_retry > 0,
        "no interrupted submission: {}",
        outcome.summary()
    );
}

/// SIGKILL of a backend: the postmaster ends every other backend and runs crash recovery. Killed
/// once while it holds a target's lock with an uncommitted acceptance (another session waiting
/// on that lock), and twice more on random busy backends of a running load. Recovery must bring
/// back every committed attempt and none of the others, and the load must finish intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_a_backend_mid_submission_recovers_to_a_consistent_state() {
    let cluster = Cluster::start("crash_sigkill").await;
    let observer = cluster.client().await;
    let target = initialize_target(&observer, "k.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let mut config = cluster.config("kill");
    config.sql_clients = 4;
    config.mcp_clients = 1;
    // Runs until stopped: however slow recovery is, the load outlives the faults.
    config.duration = None;
    let load = Load::start(config).await.unwrap();
    progress(&load, 50).await;

    // The deterministic case: an open transaction holding the lock, a waiter behind it.
    let hold = replace(&target, 0, "alpha", "ALPHA", "hold-1");
    let wait = replace(&target, 0, "beta", "BETA", "wait-1");
    let mut holder = cluster.client().await;
    let holder_pid = backend_pid(&holder).await;
    let tx = holder.transaction().await.unwrap();
    let r = call(&tx, "patchdiff_submit_edits", &hold).await.unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let waiter = cluster.client().await;
    let waiter_pid = backend_pid(&waiter).await;
    let wait_args = wait.clone();
    let w = tokio::spawn(async move { call(&waiter, "patchdiff_submit_edits", &wait).await });
    blocked_backend(&observer, Some(waiter_pid), "").await;
    assert!(sigkill(holder_pid), "kill -KILL {holder_pid}");
    assert!(w.await.unwrap().is_err(), "the waiter's session ended too");
    assert!(tx.commit().await.is_err());
    drop(observer);

    // Crash recovery, then the load goes on; two more kills mid-load.
    let mut observer = cluster.client().await;
    progress(&load, 50).await;
    let mut kills = 1;
    let deadline = Instant::now() + RECOVERY_TIMEOUT;
    while kills < 3 {
        assert!(Instant::now() < deadline, "no busy backend to kill");
        let busy = match busy_backends(&observer, "kill").await {
            Ok(b) => b,
            Err(_) => {
                // A session opened just before the postmaster's reset ended with it.
                observer = cluster.client().await;
                continue;
            }
        };
        if let Some(&pid) = busy.first()
            && sigkill(pid)
        {
            kills += 1;
            progress(&load, 50).await;
            // The kill ended every session, this one included.
            observer = cluster.client().await;
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    load.stop();
    let outcome = load.finish().await;
    assert_invariants(&cluster, &outcome).await;
    assert!(outcome.stats.interrupted > 0, "{}", outcome.summary());

    let c = cluster.client().await;
    assert!(keyed_rows(&c, &target, "hold-1").await.is_empty());
    assert!(keyed_rows(&c, &target, "wait-1").await.is_empty());
    let a = commits_once(&c, &target, &wait_args).await;
    assert_eq!(a["version"], 1, "{a}");
    let b = commits_once(&c, &target, &hold).await;
    assert_eq!(b["failure_reason"], "target_version_mismatch", "{b}");
    replays(&c, &target, 1).await;
    let log = std::fs::read_to_string(format!("{DATA}/server.log")).unwrap_or_default();
    assert!(
        log.contains("was terminated by signal 9"),
        "the postmaster never saw a backend killed"
    );
}

/// A `patchdiff-mcp` process started for one call, speaking over pipes.
struct McpOnce {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    stdin: tokio::process::ChildStdin,
}

impl McpOnce {
    async fn start(dsn: &str) -> McpOnce {
        let mut child = tokio::process::Command::new(mcp_bin())
            .env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_MCP_PROFILE", "full")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawning patchdiff-mcp (build it first: cargo build -p patchdiff-mcp)");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut m = McpOnce {
            child,
            lines,
            stdin,
        };
        m.send(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "crash-test", "version": "1"}}}))
            .await;
        m.reply().await;
        m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        m
    }

    async fn send(&mut self, v: &Value) {
        self.stdin
            .write_all(format!("{v}\n").as_bytes())
            .await
            .unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn reply(&mut self) -> Value {
        let line = tokio::time::timeout(RACE_TIMEOUT, self.lines.next_line())
            .await
            .expect("no reply from patchdiff-mcp")
            .unwrap()
            .expect("patchdiff-mcp closed stdout");
        serde_json::from_str(&line).unwrap()
    }

    fn request(tool: &str, args: &Value) -> Value {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": args}})
    }

    async fn call(&mut self, tool: &str, args: &Value) -> Value {
        self.send(&McpOnce::request(tool, args)).await;
        let r = self.reply().await;
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    }

    async fn kill(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// Kill `patchdiff-mcp` mid-call, three times, while its submission waits on the target's lock.
/// The first time the lock is released at once: the orphaned backend may carry on and commit
/// before it notices its client is gone, and a new front end's keyed retry then recovers that
/// outcome (`deduplicated: true`), else commits it once. The second time the orphaned backend is
/// terminated too: nothing committed, and the keyed retry commits once. The third time the lock
/// is held 2.5 s longer: the front end's sessions check every second that their client is still
/// there (`client_connection_check_interval`, helper-64), so the orphan's statement is cancelled
/// and nothing commits, where it used to commit once the lock was released. Then a load of three
/// SQL clients and two front ends that kill their `patchdiff-mcp` on a third of their
/// submissions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mcp_mid_call_is_recovered_by_a_keyed_retry() {
    let cluster = Cluster::start("crash_mcp").await;
    let observer = cluster.client().await;
    let target = initialize_target(&observer, "m.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let app = "crash-mcp-once";
    let dsn = stress::with_application_name(&cluster.dsn, app);

    #[derive(Clone, Copy, PartialEq)]
    enum Orphan {
        LockReleasedAtOnce,
        Terminated,
        LockHeldLonger,
    }
    for (round, orphan_fate) in [
        (1, Orphan::LockReleasedAtOnce),
        (2, Orphan::Terminated),
        (3, Orphan::LockHeldLonger),
    ] {
        let version = round - 1;
        let (from, to) = match round {
            1 => ("alpha", "ALPHA"),
            2 => ("beta", "BETA"),
            _ => ("gamma", "GAMMA"),
        };
        let key = format!("mcp-{round}");
        let args = replace(&target, version, from, to, &key);
        let holder = cluster.client().await;
        holder
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
            ))
            .await
            .unwrap();
        let mut m = McpOnce::start(&dsn).await;
        m.send(&McpOnce::request("patchdiff_submit_edits", &args))
            .await;
        let orphan = blocked_backend(&observer, None, app).await;
        m.kill().await;
        match orphan_fate {
            Orphan::Terminated => {
                observer
                    .execute("SELECT pg_terminate_backend($1)", &[&orphan])
                    .await
                    .unwrap();
            }
            Orphan::LockHeldLonger => tokio::time::sleep(Duration::from_millis(2500)).await,
            Orphan::LockReleasedAtOnce => {}
        }
        holder.batch_execute("ROLLBACK").await.unwrap();
        // The orphan finishes its statement (committing it, or not when terminated) and exits.
        let deadline = Instant::now() + RACE_TIMEOUT;
        while observer
            .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&orphan])
            .await
            .unwrap()
            .is_some()
        {
            assert!(
                Instant::now() < deadline,
                "the orphaned backend never ended"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let before = keyed_rows(&observer, &target, &key).await;
        let mut again = McpOnce::start(&dsn).await;
        let r = again.call("patchdiff_submit_edits", &args).await;
        assert_eq!(
            (&r["status"], &r["version"]),
            (&json!("accepted"), &json!(round)),
            "{r}"
        );
        let after = keyed_rows(&observer, &target, &key).await;
        assert_eq!(
            after,
            [(
                r["pdcp_log_id"].as_str().unwrap().to_owned(),
                "accepted".into()
            )]
        );
        if orphan_fate == Orphan::LockReleasedAtOnce && !before.is_empty() {
            assert_eq!(before, after, "the orphan committed");
            assert_eq!(r["deduplicated"], true, "the retry recovers it: {r}");
        } else {
            assert!(
                before.is_empty(),
                "nothing committed for the dead client: {before:?}"
            );
            assert_eq!(r["deduplicated"], false, "the retry is the one commit: {r}");
        }
        again.kill().await;
    }
    replays(&observer, &target, 3).await;

    let mut config = cluster.config("mcpkill");
    config.sql_clients = 3;
    config.mcp_clients = 2;
    config.mcp_kill_percent = 33;
    config.duration = Some(Duration::from_secs(8));
    let outcome = stress::run(config).await.unwrap();
    assert_invariants(&cluster, &outcome).await;
    let s = &outcome.stats;
    assert!(s.mcp_kills >= 10, "{}", outcome.summary());
    assert!(
        s.recovered + s.committed_on_retry > 0,
        "{}",
        outcome.summary()
    );
}

/// `pg_ctl -m immediate stop` and start, twice, under a load of four SQL clients and one
/// `patchdiff-mcp`, with an open transaction holding an uncommitted acceptance at the first
/// stop: crash recovery keeps every committed attempt and drops the open one, whose keyed retry
/// then commits once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_shutdown_under_load_loses_nothing() {
    let cluster = Cluster::start("crash_immediate").await;
    let observer = cluster.client().await;
    let target = initialize_target(&observer, "i.md", "alpha beta gamma\n")
        .await
        .unwrap();
    let mut config = cluster.config("restart");
    config.sql_clients = 4;
    config.mcp_clients = 1;
    config.duration = None;
    let load = Load::start(config).await.unwrap();
    progress(&load, 100).await;

    let hold = replace(&target, 0, "gamma", "GAMMA", "open-1");
    let mut holder = cluster.client().await;
    let tx = holder.transaction().await.unwrap();
    let r = call(&tx, "patchdiff_submit_edits", &hold).await.unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    for _ in 0..2 {
        cluster.stop_immediately();
        tokio::time::sleep(Duration::from_millis(300)).await;
        cluster.start_server();
        progress(&load, 100).await;
    }
    assert!(tx.commit().await.is_err());
    load.stop();
    let outcome = load.finish().await;
    assert_invariants(&cluster, &outcome).await;
    assert!(outcome.stats.interrupted > 0, "{}", outcome.summary());

    let c = cluster.client().await;
    drop(observer);
    assert!(keyed_rows(&c, &target, "open-1").await.is_empty());
    let a = commits_once(&c, &target, &hold).await;
    assert_eq!(a["version"], 1, "{a}");
    replays(&c, &target, 1).await;
}

/// What one HTTP call of [`http_endpoint_serves_again_after_a_postgresql_restart`] got.
#[derive(Debug)]
enum HttpAnswer {
    /// 200 and a tool result that is not an error.
    Served,
    /// 200 and a tool error with this `status` (the database's answer during the outage).
    ToolError(String),
    /// 503 with Retry-After and this text.
    Unavailable(String),
    /// Anything else: another status, no Retry-After on a 503, a connection refused or reset.
    Unclear(String),
}

fn http_read(agent: &ureq::Agent, url: &str, token: &str, target: &str) -> HttpAnswer {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "patchdiff_read_target", "arguments": {"target_file_id": target},
                   "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                             "io.modelcontextprotocol/clientCapabilities": {}}}});
    let sent = agent
        .post(url)
        .set("Authorization", &format!("Bearer {token}"))
        .set("Content-Type", "application/json")
        .set("MCP-Protocol-Version", "2026-07-28")
        .set("Mcp-Method", "tools/call")
        .set("Mcp-Name", "patchdiff_read_target")
        .send_string(&body.to_string());
    let resp = match sent {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return HttpAnswer::Unclear(format!("transport: {e}")),
    };
    let status = resp.status();
    let retry_after = resp.header("Retry-After").map(str::to_owned);
    let text = resp.into_string().unwrap_or_default();
    match status {
        503 if retry_after.is_some() => HttpAnswer::Unavailable(text),
        200 => {
            let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let tool: Value = v["result"]["content"][0]["text"]
                .as_str()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or(Value::Null);
            match v["result"]["isError"].as_bool() {
                Some(false) => HttpAnswer::Served,
                Some(true) => HttpAnswer::ToolError(tool["status"].as_str().unwrap_or("").into()),
                None => HttpAnswer::Unclear(format!("200 without a tool result: {text}")),
            }
        }
        s => HttpAnswer::Unclear(format!("{s}: {text}")),
    }
}

/// Issue 18, Goals: "A restart of PostgreSQL under load gives clear errors during the outage.
/// Afterwards the endpoint serves again without a restart of its own." Four clients read a
/// target over `patchdiff-mcp serve` (a login role that `SET ROLE`s to the token's role) while
/// PostgreSQL stops immediately and starts again: every answer is a result, a tool error the
/// stdio server also gives (docs/reliability.md), or 503 with Retry-After; never a dropped
/// connection or another status. Then every client is served again by the same process, whose
/// pooled connections came back as the token's role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_endpoint_serves_again_after_a_postgresql_restart() {
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let cluster = Cluster::start("crash_http").await;
    let su = cluster.client().await;
    let login = patchdiff_tests::roles::unique("http_restart_login");
    let tenant = patchdiff_tests::roles::unique("http_restart_tenant");
    su.batch_execute(&format!(
        "CREATE ROLE {login} LOGIN NOINHERIT; CREATE ROLE {tenant} NOLOGIN; GRANT {tenant} TO {login}"
    ))
    .await
    .unwrap();
    let dir = std::env::temp_dir().join(patchdiff_tests::roles::unique("patchdiff-http-restart"));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens");
    let token = "token-restart-0123456789";
    std::fs::write(&tokens, format!("{token} {tenant}\n")).unwrap();
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut child = Command::new(mcp_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--connections", "4"])
        .arg("--tokens")
        .arg(&tokens)
        .env(
            "PATCHDIFF_DATABASE_URL",
            format!("{} user={login}", cluster.dsn),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("patchdiff-mcp serve");
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let url = patchdiff_tests::http::listening_url(&mut stderr);
    // Drain the log so the server never blocks on a full pipe.
    let log = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    // The target belongs to the token's role.
    let target: String = {
        let c = cluster.client().await;
        c.batch_execute(&format!("SET ROLE {tenant}"))
            .await
            .unwrap();
        initialize_target(&c, "r.md", "alpha beta gamma\n")
            .await
            .unwrap()
    };

    let stop = Arc::new(AtomicBool::new(false));
    let restarted = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (url, target, stop, restarted) =
                (url.clone(), target.clone(), stop.clone(), restarted.clone());
            std::thread::spawn(move || {
                let agent = ureq::AgentBuilder::new()
                    .timeout(Duration::from_secs(30))
                    .build();
                let mut outage = Vec::new();
                let mut served_after = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let after = restarted.load(Ordering::SeqCst);
                    match http_read(&agent, &url, token, &target) {
                        HttpAnswer::Served if after => served_after += 1,
                        HttpAnswer::Served => {}
                        // Once served again, every pooled connection must be usable again.
                        other if served_after > 0 => outage.push(HttpAnswer::Unclear(format!(
                            "after the restart and a served call: {other:?}"
                        ))),
                        other => outage.push(other),
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                (outage, served_after)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.stop_immediately();
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.start_server();
    let _ = cluster.client().await;
    restarted.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let mut outage = Vec::new();
    for c in clients {
        let (answers, served_after) = c.join().unwrap();
        assert!(
            served_after > 0,
            "a client was never served again after the restart: {:?}",
            answers.last()
        );
        outage.extend(answers);
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the endpoint is the same process"
    );
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let log = log.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let unclear: Vec<&str> = outage
        .iter()
        .filter_map(|a| match a {
            HttpAnswer::Unclear(what) => Some(what.as_str()),
            _ => None,
        })
        .collect();
    assert!(unclear.is_empty(), "{unclear:?}\n{log}");
    let errors: Vec<_> = outage
        .iter()
        .filter(|a| !matches!(a, HttpAnswer::Served))
        .collect();
    assert!(
        !errors.is_empty(),
        "the outage was seen by no client (the restart did not happen under load)"
    );
    let tool_errors: Vec<_> = errors
        .iter()
        .filter_map(|a| match a {
            HttpAnswer::ToolError(status) => Some(status.as_str()),
            _ => None,
        })
        .collect();
    // A read cut by the outage is the stdio server's retryable answer.
    assert!(
        tool_errors
            .iter()
            .all(|s| ["outcome_unknown", "unavailable", "cancelled"].contains(s)),
        "{tool_errors:?}"
    );
    // The 503 says why and that nothing was done, with the server's reason, never a bare
    // "db error".
    for a in &errors {
        if let HttpAnswer::Unavailable(text) = a {
            assert!(
                text.contains("nothing was done") && !text.contains("db error"),
                "{text}"
            );
        }
    }
    eprintln!(
        "during the outage: {} tool errors {tool_errors:?}, {} 503s",
        tool_errors.len(),
        errors.len() - tool_errors.len()
    );
}
