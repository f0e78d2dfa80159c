//! What the PL/Proxy router adds to a call (issue 20 goal: under 0.3 ms median): the same SQL
//! function called on the shard database that owns the target and through the router,
//! interleaved call by call on one target, for a read of 4,000 code points and a one-edit
//! submission (every one accepted).
//!
//! Then what the router spends finding the target of large arguments full of the escapes its
//! json operators cannot decode (`patchdiff_router.readable`, docs/benchmarks.md, "The router's
//! copy of the arguments"): `patchdiff_router.partition_of` on texts of `--escape-kib` KiB
//! (default 4,096), next to the regular expression the router used before, installed for the
//! comparison as a temporary function of the bench's own session.
//!
//! bash scripts/shards.sh up 2   # prints the router's connection string
//! cargo run --release -p patchdiff-tests --bin patchdiff-router-bench -- \
//!     --router 'host=127.0.0.1 port=54400 user=postgres dbname=patchdiff' [--iterations 2000] \
//!     [--escape-kib 4096] [--escape-iterations 5]

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
    let (mut escape_kib, mut escape_n) = (4096usize, 5usize);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--router" => router_dsn = args.next().ok_or("--router needs a value")?,
            "--iterations" => n = count(&a, args.next())?,
            "--escape-kib" => escape_kib = count(&a, args.next())?,
            "--escape-iterations" => escape_n = count(&a, args.next())?,
            _ => return Err(format!("unknown option {a}; usage: patchdiff-router-bench --router CONNSTR [--iterations N] [--escape-kib N] [--escape-iterations N]").into()),
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
    escapes(&router, escape_kib, escape_n).await
}

/// The router's search for the target in arguments of `kib` KiB, each shape's string repeated
/// to that size after a valid target ID, against the former regular expression (the functions
/// as they were before, as temporary functions of this session), alternating, `n` calls each.
async fn escapes(router: &tokio_postgres::Client, kib: usize, n: usize) -> Result<(), Err> {
    router
        .batch_execute(
            &(patchdiff_tests::FORMER_ROUTER_READABLE_SQL.to_owned()
                + r#"
               CREATE FUNCTION pg_temp.field_regexp(args json, key text) RETURNS text
               LANGUAGE plpgsql IMMUTABLE AS $$
               DECLARE r json;
               BEGIN
                 IF json_typeof(args) IS DISTINCT FROM 'object' THEN RETURN NULL; END IF;
                 r := pg_temp.readable_regexp(args);
                 IF json_typeof(r->key) = 'string' THEN RETURN r->>key; END IF;
                 RETURN NULL;
               END $$;
               CREATE TEMP TABLE escape_texts (shape text, args json);"#),
        )
        .await?;
    let shapes: [(&str, &str); 5] = [
        (r"\u0000", "\\u0000"),
        (r"\ud83d\ude00 (emoji, escaped)", "\\ud83d\\ude00"),
        (r"\ud55c (Hangul, escaped)", "\\ud55c"),
        (r"\\ud8 (near misses)", "\\\\ud8"),
        ("prose", "lorem ipsum dolor "),
    ];
    let id = "00000000-0000-4000-8000-000000000000";
    for (name, unit) in shapes {
        let text = format!(
            r#"{{"target_file_id":"{id}","text":"{}\u0000"}}"#,
            unit.repeat(kib * 1024 / unit.len())
        );
        router
            .execute(
                "INSERT INTO escape_texts VALUES ($1, $2::text::json)",
                &[&name, &text],
            )
            .await?;
    }
    let now = router
        .prepare(
            "SELECT patchdiff_router.partition_of(args)::text FROM escape_texts WHERE shape = $1",
        )
        .await?;
    let before = router
        .prepare(
            "SELECT patchdiff_router.partition_of_id(pg_temp.field_regexp(args, 'target_file_id'))::text \
               FROM escape_texts WHERE shape = $1",
        )
        .await?;
    println!(
        "\nfinding the target in {kib} KiB of arguments (patchdiff_router.partition_of), {n} calls each, alternating (client-side round trips; the texts are in a temporary table)\n"
    );
    println!(
        "| arguments | router median ms | former regular expression median ms | router / former |"
    );
    println!("| --- | ---: | ---: | ---: |");
    for (name, _) in shapes {
        let (mut a, mut b) = (vec![], vec![]);
        for _ in 0..n {
            let t = Instant::now();
            let p: String = router.query_one(&now, &[&name]).await?.get(0);
            a.push(ms(t));
            let t = Instant::now();
            let q: String = router.query_one(&before, &[&name]).await?.get(0);
            b.push(ms(t));
            if p != q || p != "0" {
                return Err(format!("{name}: partition {p}, formerly {q}; expected 0").into());
            }
        }
        a.sort_by(f64::total_cmp);
        b.sort_by(f64::total_cmp);
        let (a, b) = (percentile(&a, 0.5), percentile(&b, 0.5));
        println!("| {name} | {a:.1} | {b:.1} | {:.2} |", a / b);
    }
    Ok(())
}
