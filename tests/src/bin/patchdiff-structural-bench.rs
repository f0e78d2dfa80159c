//! Structural observation benchmark (issue "Structural observation": each median under 20 ms).
//!
//!     patchdiff-structural-bench --dsn CONNSTR [--iterations 50]
//!
//! On a 1 MiB Python target (about 7,000 functions and methods) it measures, server side (an
//! in-run PL/pgSQL timer around the one SQL call) and at the client:
//! - listing candidates (`patchdiff_observe_scope` with `query`);
//! - observing a bundle of 32 scopes (`selections`, 32 functions spread over the file);
//! - committing a 32-group batch (`patchdiff_submit_observed_operations`, one match per group)
//!   on a fresh bundle each time;
//!
//! - observing a bundle of 32 scopes right after each of those commits (a new version, whose
//!   outline the backend's parser helper reparses incrementally, issue 21 item 2), next to the
//!   same bundle observed in a fresh backend (a new connection: a cold full parse), interleaved
//!   and checked to return the same scopes;
//!
//! and, as the floor they are compared with, `patchdiff_read_target` of 4,000 code points of the
//! same target. The first outline of each version is parsed (reported separately as the cold
//! call); later calls on that version use the backend's resident outline.

use patchdiff_tests::bench::count;
use patchdiff_tests::{connect, one_match_per_group, without_ids};
use serde_json::{Value, json};
use std::time::Instant;
use tokio_postgres::Client;

type Err = Box<dyn std::error::Error + Send + Sync>;

const TIMER: &str = "patchdiff_structural_bench_timer";
const GOAL_MS: f64 = 20.0;

fn timer_sql() -> String {
    let calls: String = [
        "patchdiff_observe_scope",
        "patchdiff_submit_observed_operations",
        "patchdiff_read_target",
    ]
    .iter()
    .map(|f| format!("    WHEN '{f}' THEN result := {f}(args::json)::text;\n"))
    .collect();
    format!(
        "CREATE OR REPLACE FUNCTION {TIMER}(fn text, args text, OUT result text, OUT ms float8)
LANGUAGE plpgsql AS $timer$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  CASE fn
{calls}  END CASE;
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END
$timer$"
    )
}

/// One timed call: (answer, server ms, client ms).
async fn timed(c: &Client, f: &str, args: &Value) -> Result<(Value, f64, f64), Err> {
    let t0 = Instant::now();
    let row = c
        .query_one(
            &format!("SELECT result, ms FROM {TIMER}($1, $2)"),
            &[&f, &args.to_string()],
        )
        .await?;
    let client_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let text: String = row.get(0);
    Ok((serde_json::from_str(&text)?, row.get(1), client_ms))
}

/// A Python module of about `bytes` bytes: classes with methods and functions whose bodies
/// repeat the same statements, so that only a scope can disambiguate them.
fn module(bytes: usize) -> (String, usize) {
    let mut s = String::from("\"\"\"Generated benchmark module.\"\"\"\nRETRY_LIMIT = 3\n\n");
    let mut n = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "class Handler{n}:\n    def handle(self, event):\n        retries = 0\n        return dispatch(event, retries)\n\n\ndef handler_{n}(event):\n    retries = 0\n    return dispatch(event, retries)\n\n\n"
        ));
        n += 1;
    }
    (s, n)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn p95(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.95).ceil() as usize).clamp(1, v.len()) - 1]
}

fn expect(v: &Value, status: &str) -> Result<(), Err> {
    if v["status"] != status {
        return Err(format!(
            "expected {status}, got {}",
            &v.to_string()[..v.to_string().len().min(600)]
        )
        .into());
    }
    Ok(())
}

/// 32 selections spread evenly over the module's functions, starting at `shift`.
fn selections(functions: usize, shift: usize) -> Value {
    let step = functions / 32;
    Value::Array(
        (0..32)
            .map(|k| json!({"symbol_name": format!("handler_{}", (k * step + shift) % functions)}))
            .collect(),
    )
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let mut dsn = None;
    let mut n = 50usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dsn" => dsn = args.next(),
            "--iterations" => n = count(&a, args.next())?,
            _ => {
                return Err(
                    "usage: patchdiff-structural-bench --dsn CONNSTR [--iterations 50]".into(),
                );
            }
        }
    }
    let dsn = dsn.ok_or("--dsn is required")?;
    if n < 2 {
        // The bundle right after a commit is timed from the second iteration on: the first
        // has no commit of this run before it.
        return Err("--iterations must be at least 2".into());
    }
    let c = connect(&dsn).await?;
    c.batch_execute(&timer_sql()).await?;
    let (text, functions) = module(1 << 20);
    let init = patchdiff_tests::call(
        &c,
        "patchdiff_initialize_target",
        &json!({"filename": "bench.py", "content": text}),
    )
    .await?;
    let target = init["target_file_id"]
        .as_str()
        .ok_or("no target")?
        .to_owned();
    println!(
        "target: {} bytes, {functions} classes + {functions} functions, python; {n} iterations",
        text.len()
    );

    // Cold: the first outline of this version is parsed.
    let (v, cold_server, cold_client) = timed(
        &c,
        "patchdiff_observe_scope",
        &json!({"target_file_id": target, "query": "handler_1"}),
    )
    .await?;
    expect(&v, "candidates")?;

    let mut rows: Vec<(String, Vec<f64>, Vec<f64>)> = Vec::new();
    let mut run = |name: &str, server: Vec<f64>, client: Vec<f64>| {
        rows.push((name.to_owned(), server, client));
    };

    let (mut s, mut cl) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (v, a, b) = timed(
            &c,
            "patchdiff_read_target",
            &json!({"target_file_id": target, "start": 500_000}),
        )
        .await?;
        expect(&v, "ok")?;
        s.push(a);
        cl.push(b);
    }
    run("read_target 4,000 code points (floor)", s, cl);

    let (mut s, mut cl) = (Vec::new(), Vec::new());
    for k in 0..n {
        let q = format!("handler_{}", 100 + k);
        let (v, a, b) = timed(
            &c,
            "patchdiff_observe_scope",
            &json!({"target_file_id": target, "query": q}),
        )
        .await?;
        expect(&v, "candidates")?;
        s.push(a);
        cl.push(b);
    }
    run("list candidates (query)", s, cl);

    let (mut s, mut cl) = (Vec::new(), Vec::new());
    for k in 0..n {
        let (v, a, b) = timed(
            &c,
            "patchdiff_observe_scope",
            &json!({"target_file_id": target, "selections": selections(functions, k), "max_chars": 1000}),
        )
        .await?;
        expect(&v, "observed_batch")?;
        s.push(a);
        cl.push(b);
    }
    run("observe a bundle of 32 scopes", s, cl);

    let (mut s, mut cl) = (Vec::new(), Vec::new());
    let (mut after_s, mut after_c, mut fresh_s, mut fresh_c) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for k in 0..n {
        // A fresh bundle on the current version: right after the previous iteration's commit,
        // so its outline is that of a new version (issue 21, item 2: reparsed incrementally
        // by this backend's helper from the tree of the version it parsed before).
        let bundle = json!({"target_file_id": target, "selections": selections(functions, 7 + k), "max_chars": 200});
        let (b, a, b2) = timed(&c, "patchdiff_observe_scope", &bundle).await?;
        expect(&b, "observed_batch")?;
        if k > 0 {
            after_s.push(a);
            after_c.push(b2);
        }
        // The same bundle in a fresh backend (a new connection): its helper has no tree, so
        // this is the cold full parse, interleaved with the row above. Same scopes.
        let fresh = connect(&dsn).await?;
        let (f, a, b2) = timed(&fresh, "patchdiff_observe_scope", &bundle).await?;
        drop(fresh);
        fresh_s.push(a);
        fresh_c.push(b2);
        if without_ids(&f["scopes"]) != without_ids(&b["scopes"]) {
            return Err(format!(
                "iteration {k}: the bundle after a commit differs from a fresh backend's"
            )
            .into());
        }
        let request_id = format!(
            "structural-bench-{}-{k}",
            b["snapshot"]["observation_bundle_id"]
                .as_str()
                .unwrap_or("")
        );
        let (v, a, b2) = timed(
            &c,
            "patchdiff_submit_observed_operations",
            &one_match_per_group(
                &target,
                &b,
                "retries = 0",
                &format!("retries = {}", k + 1),
                "bench",
                &request_id,
            ),
        )
        .await?;
        expect(&v, "accepted")?;
        s.push(a);
        cl.push(b2);
    }
    run("commit a 32-group batch", s, cl);
    run(
        "bundle of 32 scopes right after a 32-group commit (new version)",
        after_s,
        after_c,
    );
    run(
        "the same bundle in a fresh backend (cold: full parse)",
        fresh_s,
        fresh_c,
    );

    let floor = median(&mut rows[0].1.clone());
    println!();
    println!(
        "| call | server median ms | server p95 ms | client median ms | x floor | x 20 ms goal |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, mut server, mut client) in rows {
        let m = median(&mut server);
        println!(
            "| {name} | {m:.2} | {:.2} | {:.2} | {:.1} | {:.2} |",
            p95(&mut server),
            median(&mut client),
            m / floor,
            m / GOAL_MS
        );
    }
    println!();
    println!(
        "cold call (first outline of a version: tree-sitter parse of 1 MiB): server {cold_server:.1} ms, client {cold_client:.1} ms"
    );
    c.batch_execute(&format!("DROP FUNCTION {TIMER}(text, text)"))
        .await?;
    Ok(())
}
