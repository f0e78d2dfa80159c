//! What the PL/Proxy router adds to a call (issue 20 goal: under 0.3 ms median): the same SQL
//! function called on the shard database that owns the target and through the router,
//! interleaved call by call on one target, for a read of 4,000 code points and a one-edit
//! submission (every one accepted).
//!
//! bash scripts/shards.sh up 2   # prints the router's connection string
//! cargo run --release -p patchdiff-tests --bin patchdiff-router-bench -- \
//!     --router 'host=127.0.0.1 port=54400 user=postgres dbname=patchdiff' [--iterations 2000]

use patchdiff_tests::bench::{count, marker_edit, marker_text, percentile};
use patchdiff_tests::{call_sql, connect, initialize_target};
use serde_json::json;
use std::time::Instant;

type Err = Box<dyn std::error::Error>;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn row(name: &str, direct: &mut [f64], routed: &mut [f64]) {
    direct.sort_by(f64::total_cmp);
    routed.sort_by(f64::total_cmp);
    let (d, r) = (percentile(direct, 0.5), percentile(routed, 0.5));
    println!(
        "| {name} | {d:.3} | {:.3} | {r:.3} | {:.3} | **{:.3}** | {:.2} |",
        percentile(direct, 0.95),
        percentile(routed, 0.95),
        r - d,
        r / d
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let mut args = std::env::args().skip(1);
    let (mut router_dsn, mut n) = (String::new(), 2000usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--router" => router_dsn = args.next().ok_or("--router needs a value")?,
            "--iterations" => n = count(&a, args.next())?,
            _ => return Err(format!("unknown option {a}; usage: patchdiff-router-bench --router CONNSTR [--iterations N]").into()),
        }
    }
    let router = connect(&router_dsn).await?;
    let target = initialize_target(&router, "router-bench.txt", &marker_text()).await?;
    // The partition that owns the target, by the router's own rule and configuration.
    let (partition, shard_dsn): (i32, String) = {
        let r = router
            .query_one(
                "SELECT patchdiff_router.partition_of_id($1) & (patchdiff_router.partitions() - 1)",
                &[&target],
            )
            .await?;
        let p: i32 = r.get(0);
        let options: Vec<String> = router
            .query_one(
                "SELECT srvoptions FROM pg_foreign_server WHERE srvname = 'patchdiff'",
                &[],
            )
            .await?
            .get(0);
        let dsn = options
            .iter()
            .find_map(|o| o.strip_prefix(&format!("p{p}=")))
            .ok_or("no connection string for the target's partition")?;
        (p, format!("{} user=postgres", patchdiff_tests::direct(dsn)))
    };
    let shard = connect(&shard_dsn).await?;
    let read_args = json!({"target_file_id": target, "start": 0, "length": 4000}).to_string();
    let (read_d, read_r) = (
        shard.prepare(&call_sql("patchdiff_read_target")).await?,
        router.prepare(&call_sql("patchdiff_read_target")).await?,
    );
    let (submit_d, submit_r) = (
        shard.prepare(&call_sql("patchdiff_submit_edits")).await?,
        router.prepare(&call_sql("patchdiff_submit_edits")).await?,
    );
    let mut version = 0i64;
    let edit = |version: i64| marker_edit(&target, version).to_string();
    let (mut rd, mut rr, mut sd, mut sr) = (vec![], vec![], vec![], vec![]);
    for i in 0..n + 20 {
        let warm = i < 20;
        let t = Instant::now();
        let _: String = shard.query_one(&read_d, &[&read_args]).await?.get(0);
        let a = ms(t);
        let t = Instant::now();
        let _: String = router.query_one(&read_r, &[&read_args]).await?.get(0);
        let b = ms(t);
        let t = Instant::now();
        let out: String = shard.query_one(&submit_d, &[&edit(version)]).await?.get(0);
        let c = ms(t);
        if !out.contains("\"status\":\"accepted\"") {
            return Err(format!("a direct submission was not accepted: {out}").into());
        }
        version += 1;
        let t = Instant::now();
        let out: String = router.query_one(&submit_r, &[&edit(version)]).await?.get(0);
        let d = ms(t);
        if !out.contains("\"status\":\"accepted\"") {
            return Err(format!("a routed submission was not accepted: {out}").into());
        }
        version += 1;
        if !warm {
            rd.push(a);
            rr.push(b);
            sd.push(c);
            sr.push(d);
        }
    }
    println!(
        "router over its shards; target on partition {partition}; {n} interleaved calls of each kind (client-side round trips)\n"
    );
    println!(
        "| call | direct median ms | direct p95 | routed median ms | routed p95 | added ms | routed / direct |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    row("read_target, 4,000 code points", &mut rd, &mut rr);
    row("one-edit submission (accepted)", &mut sd, &mut sr);
    Ok(())
}
