//! Issue 19, item 2, the goal: "an acceptance by one session reaches a subscribed MCP client
//! within 50 ms (median)". A real `patchdiff-mcp` (profile `extended`) over stdio subscribes to
//! a target, in the legacy era (`resources/subscribe`) and in 2026-07-28 (`subscriptions/listen`);
//! another connection submits one-edit acceptances to it in autocommit, one at a time; each is
//! timed from the submission's start, and from its return (the commit done), to the moment
//! the `notifications/resources/updated` line is read from the server's stdout.
//!
//! It also measures what the announcement costs a one-edit submission (`notify_cost`).
//!
//! With `--http` it measures instead the same 2026-07-28 listen over stdio and over Streamable
//! HTTP (`patchdiff-mcp serve`, the response an SSE stream: docs/http.md "Subscriptions"), the
//! same way, to the moment the event's `data:` line is read from the socket.
//!
//! cargo run --release -p patchdiff-tests --bin patchdiff-feed-bench -- --dsn 'host=... dbname=...' \
//!     --mcp-bin target/release/patchdiff-mcp [--iterations 200] [--http [--fanout N]]
//!
//! `--fanout N` adds one arm: N listen streams of one role on one endpoint, all on one target,
//! each acceptance timed to the moment the last stream has its event.
//!
//! The DSN's role must be a superuser (`patchdiff.notify` is superuser-only).

use patchdiff_engine::api::feed;
use patchdiff_tests::bench::count;
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

type Err = Box<dyn std::error::Error>;

struct Mcp {
    child: std::process::Child,
    stdin: ChildStdin,
    lines: Receiver<(Instant, Value)>,
    id: i64,
}

const MODERN: &str = "2026-07-28";

impl Mcp {
    fn start(bin: &str, dsn: &str) -> Result<Mcp, Err> {
        let mut child = Command::new(bin)
            .env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_MCP_PROFILE", "extended")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let (tx, lines) = channel();
        // Each line is stamped the moment it is read, on its own thread.
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    break;
                };
                if tx.send((Instant::now(), v)).is_err() {
                    break;
                }
            }
        });
        Ok(Mcp {
            child,
            stdin,
            lines,
            id: 0,
        })
    }

    fn send(&mut self, method: &str, params: Value) -> Result<i64, Err> {
        self.id += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params});
        self.stdin.write_all(format!("{line}\n").as_bytes())?;
        self.stdin.flush()?;
        Ok(self.id)
    }

    fn next(&self) -> Result<(Instant, Value), Err> {
        Ok(self.lines.recv_timeout(Duration::from_secs(10))?)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(label: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{label:<58} median {:>7.2} ms   p95 {:>7.2} ms   max {:>7.2} ms   (n = {})",
        percentile(&ms, 0.5),
        percentile(&ms, 0.95),
        ms.last().copied().unwrap_or(0.0),
        ms.len()
    );
}

async fn run_era(
    bin: &str,
    dsn: &str,
    iterations: usize,
    modern: bool,
) -> Result<(Vec<f64>, Vec<f64>), Err> {
    let writer = connect(dsn).await?;
    let id = initialize_target(&writer, "feed-bench.txt", "x 0\n").await?;
    let uri = format!("patchdiff://targets/{id}");
    let mut m = Mcp::start(bin, dsn)?;
    if modern {
        let meta = json!({"io.modelcontextprotocol/protocolVersion": MODERN,
                          "io.modelcontextprotocol/clientCapabilities": {}});
        m.send(
            "subscriptions/listen",
            json!({"_meta": meta, "notifications": {"resourceSubscriptions": [uri]}}),
        )?;
        let (_, ack) = m.next()?;
        if ack["params"]["notifications"]["resourceSubscriptions"][0] != json!(uri) {
            return Err(format!("listen not acknowledged: {ack}").into());
        }
    } else {
        m.send(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "feed-bench", "version": "1"}}),
        )?;
        m.next()?;
        m.send("resources/subscribe", json!({"uri": uri}))?;
        let (_, r) = m.next()?;
        if r["result"] != json!({}) {
            return Err(format!("subscribe failed: {r}").into());
        }
    }
    submit_and_time(&writer, &id, &uri, &Feed::Stdio(m), iterations).await
}

/// Where the notifications are read: the stdio server's stdout, or an SSE stream.
enum Feed {
    Stdio(Mcp),
    /// Every stream hears every acceptance; an acceptance counts as heard when the last one has.
    Http(
        Vec<patchdiff_tests::http::ListenStream>,
        std::process::Child,
        std::path::PathBuf,
    ),
}

impl Feed {
    fn next(&self) -> Result<(Instant, Value), Err> {
        match self {
            Feed::Stdio(m) => m.next(),
            Feed::Http(streams, _, _) => {
                let mut last: Option<(Instant, Value)> = None;
                for s in streams {
                    let (t, v) = s
                        .next_stamped(Duration::from_secs(10))
                        .ok_or("no event within 10 s")?;
                    if last.as_ref().is_none_or(|(l, _)| t > *l) {
                        last = Some((t, v));
                    }
                }
                last.ok_or_else(|| "no stream".into())
            }
        }
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        if let Feed::Http(_, child, dir) = self {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `patchdiff-mcp serve` (profile `extended`, one token for the DSN's role) and `streams`
/// 2026-07-28 listen streams on it for `uri`, each acknowledged.
fn listen_over_http(
    bin: &str,
    dsn: &str,
    role: &str,
    uri: &str,
    streams: usize,
) -> Result<Feed, Err> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("feed-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let tokens = dir.join("tokens");
    let token = "feed-bench-token-0123456789";
    std::fs::write(&tokens, format!("{token} {role}\n"))?;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600))?;
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(&tokens)
        .args(["--max-streams", &streams.to_string()])
        .args(["--max-streams-per-role", &streams.to_string()])
        .env("PATCHDIFF_DATABASE_URL", dsn)
        .env("PATCHDIFF_MCP_PROFILE", "extended")
        .env("PATCHDIFF_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stderr = BufReader::new(child.stderr.take().ok_or("no stderr")?);
    let url = patchdiff_tests::http::listening_url(&mut stderr);
    // Kept reading, so the server never blocks on a full stderr pipe.
    std::thread::spawn(move || for _ in stderr.lines() {});
    let mut open = Vec::new();
    for i in 0..streams {
        let stream = patchdiff_tests::http::ListenRequest {
            url: &url,
            token,
            accept: Some("application/json, text/event-stream"),
            id: json!(i),
            resource_subscriptions: &[uri.to_owned()],
        }
        .open()
        .map_err(|(status, body)| format!("listen refused: {status} {body}"))?;
        let ack = stream
            .next(Duration::from_secs(10))
            .ok_or("no acknowledgment")?;
        if ack["params"]["notifications"]["resourceSubscriptions"][0] != json!(uri) {
            return Err(format!("listen not acknowledged: {ack}").into());
        }
        open.push(stream);
    }
    Ok(Feed::Http(open, child, dir))
}

/// 2026-07-28 listen over Streamable HTTP, timed like [`run_era`].
async fn run_http(
    bin: &str,
    dsn: &str,
    iterations: usize,
    streams: usize,
) -> Result<(Vec<f64>, Vec<f64>), Err> {
    let writer = connect(dsn).await?;
    let role: String = writer
        .query_one("SELECT current_user::text", &[])
        .await?
        .get(0);
    let id = initialize_target(&writer, "feed-bench-http.txt", "x 0\n").await?;
    let uri = format!("patchdiff://targets/{id}");
    let feed = listen_over_http(bin, dsn, &role, &uri, streams)?;
    submit_and_time(&writer, &id, &uri, &feed, iterations).await
}

/// `iterations` one-edit acceptances (after 10 to warm up), each timed to its notification.
async fn submit_and_time(
    writer: &tokio_postgres::Client,
    id: &str,
    uri: &str,
    feed: &Feed,
    iterations: usize,
) -> Result<(Vec<f64>, Vec<f64>), Err> {
    let (mut from_submit, mut from_commit) = (Vec::new(), Vec::new());
    for i in 0..iterations + 10 {
        let args = json!({"target_file_id": id, "expected_target_version": i, "intent": "bench",
                          "edits": [{"match": format!("x {i}\n"), "replace": format!("x {}\n", i + 1)}]});
        let t0 = Instant::now();
        let r = call(writer, "patchdiff_submit_edits", &args).await?;
        let t1 = Instant::now();
        if r["status"] != "accepted" {
            return Err(format!("not accepted: {r}").into());
        }
        let (t2, n) = feed.next()?;
        if n["method"] != "notifications/resources/updated" || n["params"]["uri"] != json!(uri) {
            return Err(format!("unexpected message: {n}").into());
        }
        // The first few warm the plans and the listener's connection.
        if i >= 10 {
            from_submit.push(t2.duration_since(t0).as_secs_f64() * 1e3);
            from_commit.push(t2.saturating_duration_since(t1).as_secs_f64() * 1e3);
        }
    }
    Ok((from_submit, from_commit))
}

/// The cost of the announcement on a one-edit acceptance (64 KiB target) in autocommit, the
/// commit included: the same build with `patchdiff.notify` off, `listened` (the default) with
/// nobody registered, on with nobody listening, and `listened` with a registered listener (a
/// session that LISTENs and holds the feed's key), calls interleaved one by one, client-side
/// round trips.
async fn notify_cost(dsn: &str, iterations: usize) -> Result<(), Err> {
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef012345678901234\n";
    let mut text = String::new();
    while text.len() < 64 * 1024 {
        text.push_str(line);
    }
    let mut arms = Vec::new();
    for (label, setting) in [
        ("notify off", "off"),
        ("notify listened, nobody registered", "listened"),
        ("notify on, nobody listening", "on"),
        ("notify listened, a listener registered", "listened"),
    ] {
        let c = connect(dsn).await?;
        c.batch_execute(&format!("SET patchdiff.notify = {setting}"))
            .await?;
        let id = initialize_target(&c, "notify-cost.txt", &format!("v 0\n{text}")).await?;
        arms.push((label, c, id, 0i64, Vec::new()));
    }
    let (listener, mut connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(async move {
        while let Some(Ok(_)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {}
    });
    let keys = format!("{}, {}", feed::LISTENER_LOCK_KEY1, feed::LISTENER_LOCK_KEY2);
    let mut listening = false;
    for i in 0..iterations + 20 {
        for (k, (label, c, id, version, times)) in arms.iter_mut().enumerate() {
            // The listener listens and is registered only while the last arm runs.
            let want = k == 3;
            if want != listening {
                listener
                    .batch_execute(&if want {
                        format!("LISTEN patchdiff; SELECT pg_advisory_lock_shared({keys})")
                    } else {
                        format!("UNLISTEN patchdiff; SELECT pg_advisory_unlock_shared({keys})")
                    })
                    .await?;
                listening = want;
            }
            let args = json!({"target_file_id": id, "expected_target_version": *version, "intent": "bench",
                              "edits": [{"match": format!("v {version}\n"), "replace": format!("v {}\n", *version + 1)}]});
            let t0 = Instant::now();
            let r = call(c, "patchdiff_submit_edits", &args).await?;
            let t = t0.elapsed().as_secs_f64() * 1e3;
            if r["status"] != "accepted" {
                return Err(format!("{label}: not accepted: {r}").into());
            }
            *version += 1;
            if i >= 20 {
                times.push(t);
            }
        }
    }
    let mut base = None;
    for (label, _, _, _, mut times) in arms {
        times.sort_by(f64::total_cmp);
        let median = percentile(&times, 0.5);
        let b = *base.get_or_insert(median);
        println!(
            "one-edit submit, 64 KiB, autocommit, {label:<40} median {median:>6.3} ms   p95 {:>6.3} ms   ratio {:.3}",
            percentile(&times, 0.95),
            median / b
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Err> {
    let mut dsn = std::env::var("PATCHDIFF_TEST_DSN").ok();
    let mut bin = std::env::var("PATCHDIFF_MCP_BIN").ok();
    let mut iterations = 200usize;
    let mut http = false;
    let mut fanout = 0usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dsn" => dsn = args.next(),
            "--mcp-bin" => bin = args.next(),
            "--iterations" => iterations = count(&a, args.next())?,
            "--http" => http = true,
            "--fanout" => fanout = count(&a, args.next())?,
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let dsn = dsn.ok_or("--dsn or PATCHDIFF_TEST_DSN")?;
    let bin = bin.ok_or("--mcp-bin or PATCHDIFF_MCP_BIN")?;
    println!(
        "patchdiff-feed-bench: {iterations} one-edit acceptances per era, each awaited before the next"
    );
    if http {
        // Interleaved twice, so a change in the machine's load falls on both transports.
        for round in 1..=2 {
            let (submit, commit) = run_era(&bin, &dsn, iterations, true).await?;
            summary(
                &format!("round {round}, stdio listen: submit start -> notification"),
                submit,
            );
            summary(
                &format!("round {round}, stdio listen: submit returned -> notification"),
                commit,
            );
            let (submit, commit) = run_http(&bin, &dsn, iterations, 1).await?;
            summary(
                &format!("round {round}, HTTP SSE listen: submit start -> notification"),
                submit,
            );
            summary(
                &format!("round {round}, HTTP SSE listen: submit returned -> notification"),
                commit,
            );
        }
        if fanout > 1 {
            // One endpoint, `fanout` streams of one role on one target: each acceptance is
            // checked once per stream, on the endpoint's pool (16 connections).
            let (submit, commit) = run_http(&bin, &dsn, iterations, fanout).await?;
            summary(
                &format!("HTTP SSE, {fanout} streams: submit start -> the last one's"),
                submit,
            );
            summary(
                &format!("HTTP SSE, {fanout} streams: submit returned -> the last one's"),
                commit,
            );
        }
        return Ok(());
    }
    notify_cost(&dsn, iterations * 5).await?;
    for (modern, era) in [
        (false, "2025-11-25 resources/subscribe"),
        (true, "2026-07-28 subscriptions/listen"),
    ] {
        let (submit, commit) = run_era(&bin, &dsn, iterations, modern).await?;
        summary(&format!("{era}: submit start -> notification"), submit);
        summary(&format!("{era}: submit returned -> notification"), commit);
    }
    Ok(())
}
