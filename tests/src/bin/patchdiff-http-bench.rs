//! Issue 18's goals for `patchdiff-mcp serve` (docs/http.md), in one run against one server:
//!
//! 1. latency: the same SQL function called directly and as an HTTP tools/call (2026-07-28),
//!    interleaved call by call, for a read of 4,000 code points and a one-edit submission; the
//!    median HTTP round trip minus the SQL one (goal: under 0.5 ms);
//! 2. 200 concurrent sessions, each reading and editing its own target for the same time, over
//!    HTTP and then over SQL through a pool of as many connections as the endpoint's: errors and
//!    calls per second (goal: no error, HTTP within 20% of SQL);
//! 3. with `--pg-data DIR`, PostgreSQL restarted (`pg_ctl restart -m fast`) under the HTTP load:
//!    what the clients got during the outage, and whether the same endpoint serves afterwards.
//!
//! The endpoint is started here: `patchdiff-mcp serve` with a token for the DSN's user.
//!
//! cargo run --release -p patchdiff-tests --bin patchdiff-http-bench -- --dsn CONNSTR \
//!     --mcp-bin target/release/patchdiff-mcp [--iterations 2000] [--sessions 200] \
//!     [--seconds 10] [--connections 16] [--pg-data DIR]

use patchdiff_tests::bench::{count, marker_edit as edit, marker_text as body, percentile};
use patchdiff_tests::{call_sql, connect, initialize_target};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

type Err = Box<dyn std::error::Error + Send + Sync>;

const MODERN: &str = "2026-07-28";
const TOKEN: &str = "bench-token-0123456789abcdef";

struct Endpoint {
    child: Child,
    url: String,
    agent: ureq::Agent,
}

impl Endpoint {
    fn start(bin: &str, dsn: &str, connections: usize) -> Result<Endpoint, Err> {
        let dir = std::env::temp_dir().join(format!("patchdiff-http-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let tokens = dir.join("tokens");
        let user = dsn
            .parse::<tokio_postgres::Config>()?
            .get_user()
            .unwrap_or("postgres")
            .to_owned();
        std::fs::write(&tokens, format!("{TOKEN} {user}\n"))?;
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600))?;
        let mut child = Command::new(bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--connections"])
            .arg(connections.to_string())
            .arg("--tokens")
            .arg(&tokens)
            .env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let mut stderr = BufReader::new(child.stderr.take().ok_or("no stderr")?);
        stderr.read_line(&mut line)?;
        // The rest of the server's log, kept for a look after the run.
        let log = dir.join("serve.log");
        eprintln!(
            "patchdiff-http-bench: the endpoint's log is {}",
            log.display()
        );
        std::thread::spawn(move || {
            let mut out = std::fs::File::create(log).expect("the log file");
            let _ = std::io::copy(&mut stderr, &mut out);
        });
        let url = line
            .trim()
            .strip_prefix("patchdiff-mcp: listening on ")
            .ok_or_else(|| format!("no address line: {line:?}"))?
            .to_owned();
        let agent = ureq::AgentBuilder::new()
            .max_idle_connections_per_host(512)
            .build();
        Ok(Endpoint { child, url, agent })
    }

    /// A 2026-07-28 tools/call; (HTTP status, the tool's JSON or the error body).
    fn tool(&self, name: &str, arguments: &Value) -> (u16, Value) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments,
                       "_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                 "io.modelcontextprotocol/clientCapabilities": {}}}});
        let r = self
            .agent
            .post(&self.url)
            .set("Authorization", &format!("Bearer {TOKEN}"))
            .set("MCP-Protocol-Version", MODERN)
            .set("Mcp-Method", "tools/call")
            .set("Mcp-Name", name)
            .send_string(&body.to_string());
        let (status, text) = match r {
            Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
            Err(ureq::Error::Status(s, r)) => (s, r.into_string().unwrap_or_default()),
            Err(e) => (0, e.to_string()),
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        let tool = v["result"]["content"][0]["text"]
            .as_str()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(v);
        (status, tool)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.95))
}

async fn new_target(sql: &tokio_postgres::Client, name: &str) -> Result<String, Err> {
    Ok(initialize_target(sql, name, &body()).await?)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    errors: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Err> {
    let mut args = std::env::args().skip(1);
    let (mut dsn, mut bin, mut n, mut sessions, mut seconds, mut connections, mut pg_data) = (
        std::env::var("PATCHDIFF_TEST_DSN").unwrap_or_default(),
        String::from("target/release/patchdiff-mcp"),
        2000usize,
        200usize,
        10u64,
        16usize,
        None::<String>,
    );
    while let Some(a) = args.next() {
        let mut v = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--dsn" => dsn = v()?,
            "--mcp-bin" => bin = v()?,
            "--iterations" => n = count(&a, Some(v()?))?,
            "--sessions" => sessions = count(&a, Some(v()?))?,
            "--seconds" => seconds = count(&a, Some(v()?))? as u64,
            "--connections" => connections = count(&a, Some(v()?))?,
            "--pg-data" => pg_data = Some(v()?),
            _ => return Err(format!("unknown option {a}").into()),
        }
    }
    let sql = connect(&dsn).await?;
    let endpoint = Arc::new(Endpoint::start(&bin, &dsn, connections)?);

    // 1. Latency, interleaved.
    let target = new_target(&sql, "http-bench.txt").await?;
    let read_args = json!({"target_file_id": target, "start": 0, "length": 4000});
    let (read_stmt, submit_stmt) = (
        sql.prepare(&call_sql("patchdiff_read_target")).await?,
        sql.prepare(&call_sql("patchdiff_submit_edits")).await?,
    );
    let (mut rs, mut rh, mut ss, mut sh) = (vec![], vec![], vec![], vec![]);
    let mut version = 0i64;
    for i in 0..n + 20 {
        let t = Instant::now();
        let _: String = sql
            .query_one(&read_stmt, &[&read_args.to_string()])
            .await?
            .get(0);
        let a = t.elapsed().as_secs_f64() * 1e3;
        let e = endpoint.clone();
        let ra = read_args.clone();
        let (b, r) = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let r = e.tool("patchdiff_read_target", &ra);
            (t.elapsed().as_secs_f64() * 1e3, r)
        })
        .await?;
        if r.0 != 200 || r.1["status"] != "ok" {
            return Err(format!("an HTTP read failed: {r:?}").into());
        }
        let t = Instant::now();
        let out: String = sql
            .query_one(&submit_stmt, &[&edit(&target, version).to_string()])
            .await?
            .get(0);
        let c = t.elapsed().as_secs_f64() * 1e3;
        if !out.contains("\"status\":\"accepted\"") {
            return Err(format!("a SQL submission was not accepted: {out}").into());
        }
        version += 1;
        let e = endpoint.clone();
        let args = edit(&target, version);
        let (d, r) = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let r = e.tool("patchdiff_submit_edits", &args);
            (t.elapsed().as_secs_f64() * 1e3, r)
        })
        .await?;
        if r.1["status"] != "accepted" {
            return Err(format!("an HTTP submission was not accepted: {r:?}").into());
        }
        version += 1;
        if i >= 20 {
            rs.push(a);
            rh.push(b);
            ss.push(c);
            sh.push(d);
        }
    }
    println!("## 1. latency: {n} interleaved calls of each kind, client-side round trips (ms)\n");
    println!("| call | SQL median | SQL p95 | HTTP median | HTTP p95 | added median |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, s, h) in [
        ("read_target, 4,000 code points", rs, rh),
        ("one-edit submission (accepted)", ss, sh),
    ] {
        let ((sm, sp), (hm, hp)) = (median(s), median(h));
        println!(
            "| {name} | {sm:.3} | {sp:.3} | {hm:.3} | {hp:.3} | **{:.3}** |",
            hm - sm
        );
    }

    // 2. Sessions: each reads its target and edits it, in turn, for `seconds`.
    let mut targets = Vec::new();
    for i in 0..sessions {
        targets.push(new_target(&sql, &format!("session-{i}.txt")).await?);
    }
    let http = {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let mut threads = Vec::new();
        for t in targets.clone() {
            let (e, stop, tally) = (endpoint.clone(), stop.clone(), tally.clone());
            threads.push(std::thread::spawn(move || {
                let mut v = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let (s1, r1) = e.tool(
                        "patchdiff_read_target",
                        &json!({"target_file_id": t, "length": 4000}),
                    );
                    let (s2, r2) = e.tool("patchdiff_submit_edits", &edit(&t, v));
                    v += 1;
                    let good = s1 == 200
                        && r1["status"] == "ok"
                        && s2 == 200
                        && r2["status"] == "accepted";
                    let counter = if good { &tally.ok } else { &tally.errors };
                    counter.fetch_add(2, Ordering::Relaxed);
                    if !good {
                        eprintln!("http session error: {s1} {r1} / {s2} {r2}");
                        break;
                    }
                }
            }));
        }
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        for th in threads {
            let _ = th.join();
        }
        let secs = started.elapsed().as_secs_f64();
        (
            tally.ok.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed),
            secs,
        )
    };
    let over_sql = {
        let mut pool = Vec::new();
        for _ in 0..connections {
            pool.push(connect(&dsn).await?);
        }
        let pool = Arc::new(tokio::sync::Mutex::new(pool));
        let slots = Arc::new(tokio::sync::Semaphore::new(connections));
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let mut tasks = Vec::new();
        for t in targets.clone() {
            let (pool, slots, stop, tally) =
                (pool.clone(), slots.clone(), stop.clone(), tally.clone());
            // The HTTP sessions moved every target to an even version count; read it back.
            tasks.push(tokio::spawn(async move {
                let mut v: Option<i64> = None;
                while !stop.load(Ordering::Relaxed) {
                    let _slot = slots.acquire().await.expect("semaphore");
                    let c = pool.lock().await.pop().expect("a pooled connection");
                    let read: Result<String, _> = c
                        .query_one(
                            &call_sql("patchdiff_read_target"),
                            &[&json!({"target_file_id": t, "length": 4000}).to_string()],
                        )
                        .await
                        .map(|r| r.get(0));
                    let read: Value = read
                        .ok()
                        .and_then(|r| serde_json::from_str(&r).ok())
                        .unwrap_or(Value::Null);
                    let version = *v.get_or_insert(read["version"].as_i64().unwrap_or(0));
                    let out: Result<String, _> = c
                        .query_one(
                            &call_sql("patchdiff_submit_edits"),
                            &[&edit(&t, version).to_string()],
                        )
                        .await
                        .map(|r| r.get(0));
                    pool.lock().await.push(c);
                    let good = read["status"] == "ok"
                        && out
                            .as_deref()
                            .is_ok_and(|o| o.contains("\"status\":\"accepted\""));
                    v = Some(version + 1);
                    let counter = if good { &tally.ok } else { &tally.errors };
                    counter.fetch_add(2, Ordering::Relaxed);
                    if !good {
                        eprintln!("sql session error: {read} / {out:?}");
                        break;
                    }
                }
            }));
        }
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = t.await;
        }
        let secs = started.elapsed().as_secs_f64();
        (
            tally.ok.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed),
            secs,
        )
    };
    println!(
        "\n## 2. {sessions} concurrent sessions for {seconds} s, each reading and editing its own 4 KiB target; {connections} database connections\n"
    );
    println!("| over | calls answered | errors | calls / s | x SQL |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let sql_rate = over_sql.0 as f64 / over_sql.2;
    for (name, (ok, errors, secs)) in [
        ("HTTP (patchdiff-mcp serve)", http),
        ("SQL (a pool of as many connections)", over_sql),
    ] {
        let rate = ok as f64 / secs;
        println!(
            "| {name} | {ok} | {errors} | {rate:.1} | {:.2} |",
            rate / sql_rate
        );
    }

    // 3. A PostgreSQL restart under the HTTP load.
    if let Some(data) = pg_data {
        let stop = Arc::new(AtomicBool::new(false));
        let outcomes = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
            String,
            u64,
        >::new()));
        let mut threads = Vec::new();
        for t in targets.iter().take(16) {
            let t = t.clone();
            let (e, stop, outcomes) = (endpoint.clone(), stop.clone(), outcomes.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let (s, r) = e.tool(
                        "patchdiff_read_target",
                        &json!({"target_file_id": t, "length": 100}),
                    );
                    let what = match (s, r["status"].as_str()) {
                        (200, Some(st)) => format!("200 {st}"),
                        (s, _) => format!("{s}"),
                    };
                    *outcomes.lock().unwrap().entry(what).or_default() += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t = Instant::now();
        let ok = Command::new("runuser")
            .args([
                "-u",
                "postgres",
                "--",
                "/usr/lib/postgresql/15/bin/pg_ctl",
                "-D",
                &data,
                "-m",
                "fast",
                "-w",
                "restart",
            ])
            .stdout(Stdio::null())
            .status()?
            .success();
        let restart = t.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.store(true, Ordering::Relaxed);
        for th in threads {
            let _ = th.join();
        }
        let (s, r) = endpoint.tool(
            "patchdiff_read_target",
            &json!({"target_file_id": targets[0], "length": 100}),
        );
        println!(
            "\n## 3. PostgreSQL restarted under 16 HTTP sessions (pg_ctl restart -m fast: {ok}, {restart:.2} s)\n"
        );
        println!("| answer | calls |\n| --- | ---: |");
        for (what, count) in outcomes.lock().unwrap().iter() {
            println!("| {what} | {count} |");
        }
        println!(
            "\nafter the restart, the same endpoint: HTTP {s}, status {}",
            r["status"]
        );
    }
    Ok(())
}
