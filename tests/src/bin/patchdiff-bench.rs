//! patchdiff-bench: latency of pg_patchdiff's hot calls against plain-SQL baselines, measured
//! on the same server in the same run.
//!
//! ```text
//! cargo run --release -p patchdiff-tests --bin patchdiff-bench -- --dsn 'host=... dbname=...' \
//!     [--iterations 200] [--large-iterations 50] [--out docs-table.md]
//! ```
//!
//! Each benchmark runs twice: once timing the client round trip of the real statement, once
//! under `EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON)` reading the server's
//! "Execution Time". EXPLAIN ANALYZE really executes the statement (and, in autocommit,
//! commits it), so both passes do the same work; only the clock differs. Execution Time
//! excludes parsing, planning, commit (WAL flush) and the network, which the client time
//! includes.

use std::fmt::Write as _;
use std::time::Instant;

use patchdiff_tests::{call, call_sql, connect, initialize_target};
use serde_json::{Value, json};
use tokio_postgres::Client;
use tokio_postgres::types::ToSql;

const SMALL_BYTES: usize = 64 * 1024;
const LARGE_BYTES: usize = 1024 * 1024;
/// Unmeasured calls before each pass: fills caches and the plan cache.
const WARMUP: usize = 5;
/// A word placed in every `NEEDLE_EVERY`-th sentence, so a 1 MiB text holds a few hundred.
const NEEDLE: &str = "lighthouse";
const NEEDLE_EVERY: usize = 32;
/// The ordinary table the plain-UPDATE baselines write (same lz4 compression as
/// patchdiff.targets.current_content, so the ratio is not about the compressor).
const BASELINE_TABLE: &str = "patchdiff_bench_baseline";

type Err = Box<dyn std::error::Error>;

const WORDS: &[&str] = &[
    "the", "a", "of", "and", "to", "in", "that", "river", "morning", "quietly", "window", "paper",
    "stone", "across", "under", "garden", "letter", "before", "winter", "light", "north", "small",
    "harbour", "kept", "found", "turned", "bright", "old", "road", "between", "silver", "after",
    "market", "slowly", "voice", "table", "field", "returned", "clock", "along", "bridge", "heavy",
    "summer", "open", "measure", "careful", "engine", "story", "valley", "answer", "grain",
    "distant",
];

/// Deterministic prose-like text of exactly `bytes` bytes (ASCII). Sentence `i` carries the
/// marker `ref-{i:05}` (fixed width, so no marker is a substring of another); the benchmark
/// toggles one marker's case per submission, so every submit finds exactly one match and is
/// accepted while the size stays constant.
fn generate_text(bytes: usize) -> (String, usize) {
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |n: usize| {
        // xorshift64*: fixed seed, same text on every run and machine.
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    };
    let mut text = String::with_capacity(bytes + 256);
    let mut sentence = 0;
    while text.len() < bytes {
        let mut words: Vec<&str> = (0..8 + next(10))
            .map(|_| WORDS[next(WORDS.len())])
            .collect();
        if sentence % NEEDLE_EVERY == 0 {
            let at = next(words.len());
            words[at] = NEEDLE;
        }
        let mut s = words.join(" ");
        s[..1].make_ascii_uppercase();
        write!(s, " (ref-{sentence:05}).").unwrap();
        s.push(if sentence % 6 == 5 { '\n' } else { ' ' });
        text.push_str(&s);
        sentence += 1;
    }
    // Cut at the last complete sentence inside the budget, then pad to the exact size.
    let cut = text[..bytes].rfind(['\n', ' ']).map_or(0, |i| i + 1);
    text.truncate(cut);
    let markers = text.matches("(ref-").count();
    while text.len() < bytes - 1 {
        text.push(' ');
    }
    text.push('\n');
    (text, markers)
}

/// The `k`-th submission of a run: toggles marker `k mod markers` between `ref-` and `REF-`.
fn toggle_edit(k: usize, markers: usize) -> (String, String) {
    let (n, round) = (k % markers, k / markers);
    let (lower, upper) = (format!("ref-{n:05}"), format!("REF-{n:05}"));
    if round % 2 == 0 {
        (lower, upper)
    } else {
        (upper, lower)
    }
}

#[derive(Default)]
struct Samples {
    client_ms: Vec<f64>,
    server_ms: Vec<f64>,
}

/// Median and nearest-rank p90 of `v`.
fn stats(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let median = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    let p90 = s[((n as f64 * 0.9).ceil() as usize).clamp(1, n) - 1];
    (median, p90)
}

/// Runs `sql` with the parameters `params_for(i)` for `WARMUP + n` iterations per pass, timing
/// the client round trip in the first pass and the server's Execution Time in the second.
/// `check` sees each first-pass result row, so a benchmark can verify what it measured.
async fn measure<F, C>(
    c: &Client,
    sql: &str,
    n: usize,
    mut params_for: F,
    mut check: C,
) -> Result<Samples, Err>
where
    F: FnMut(usize) -> Vec<Box<dyn ToSql + Sync + Send>>,
    C: FnMut(&tokio_postgres::Row) -> Result<(), Err>,
{
    let mut out = Samples::default();
    let stmt = c.prepare(sql).await?;
    let mut call_no = 0;
    for i in 0..WARMUP + n {
        let p = params_for(call_no);
        call_no += 1;
        let refs: Vec<&(dyn ToSql + Sync)> = p
            .iter()
            .map(|b| b.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let start = Instant::now();
        let rows = c.query(&stmt, &refs).await?;
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        if let Some(row) = rows.first() {
            check(row)?;
        }
        if i >= WARMUP {
            out.client_ms.push(elapsed);
        }
    }
    let explain = c
        .prepare(&format!(
            "EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON, FORMAT JSON) {sql}"
        ))
        .await?;
    for i in 0..WARMUP + n {
        let p = params_for(call_no);
        call_no += 1;
        let refs: Vec<&(dyn ToSql + Sync)> = p
            .iter()
            .map(|b| b.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let plan: Value = c.query_one(&explain, &refs).await?.get(0);
        let ms = plan[0]["Execution Time"]
            .as_f64()
            .ok_or("EXPLAIN output has no Execution Time")?;
        if i >= WARMUP {
            out.server_ms.push(ms);
        }
    }
    Ok(out)
}

/// Total calls `measure` makes for `n` measured iterations.
const fn calls(n: usize) -> usize {
    2 * (WARMUP + n)
}

/// Benchmarks one-edit submissions on a fresh target holding `text`, tracking the version
/// guard: the first pass checks every result is accepted with the expected version; the
/// EXPLAIN pass cannot see results, so it relies on the toggle always matching and checks the
/// final version afterwards.
async fn bench_submit(
    c: &Client,
    name: &str,
    text: &str,
    markers: usize,
    n: usize,
) -> Result<Samples, Err> {
    let target = initialize_target(c, name, text).await?;
    let t = target.clone();
    let params = move |k: usize| -> Vec<Box<dyn ToSql + Sync + Send>> {
        let (from, to) = toggle_edit(k, markers);
        let args = json!({
            "target_file_id": t,
            "expected_target_version": k,
            "intent": "benchmark: one edit",
            "edits": [{"match": from, "replace": to}],
        });
        vec![Box::new(args.to_string())]
    };
    let mut expected = 1;
    let check = |row: &tokio_postgres::Row| -> Result<(), Err> {
        let r: Value = serde_json::from_str(row.get::<_, &str>(0))?;
        if r["status"] != "accepted" || r["version"] != expected {
            return Err(format!("submit {expected} not accepted: {r}").into());
        }
        expected += 1;
        Ok(())
    };
    let samples = measure(c, &call_sql("patchdiff_submit_edits"), n, params, check).await?;
    let end = call(
        c,
        "patchdiff_get_target",
        &json!({"target_file_id": target}),
    )
    .await?;
    if end["version"] != calls(n) {
        return Err(format!(
            "expected version {} after the EXPLAIN pass, target says {end}",
            calls(n)
        )
        .into());
    }
    Ok(samples)
}

/// Plain `UPDATE` of one text row, alternating between two bodies that differ in one marker,
/// as the submissions do.
async fn bench_update(c: &Client, id: i32, text: &str, n: usize) -> Result<Samples, Err> {
    let (from, to) = toggle_edit(0, 1);
    let bodies = [text.to_owned(), text.replacen(&from, &to, 1)];
    let sql = format!("UPDATE {BASELINE_TABLE} SET body = $1 WHERE id = $2");
    let params = |k: usize| -> Vec<Box<dyn ToSql + Sync + Send>> {
        vec![Box::new(bodies[k % 2].clone()), Box::new(id)]
    };
    measure(c, &sql, n, params, |_| Ok(())).await
}

struct Row {
    name: &'static str,
    samples: Samples,
    /// Index of the row this one is compared with.
    baseline: Option<usize>,
    note: String,
}

fn table(rows: &[Row], markdown: bool) -> String {
    let head = [
        "benchmark",
        "n",
        "client median ms",
        "client p90 ms",
        "server median ms",
        "server p90 ms",
        "baseline",
        "× baseline (client / server)",
    ];
    let mut lines = vec![head.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for r in rows {
        let (cm, cp) = stats(&r.samples.client_ms);
        let (sm, sp) = stats(&r.samples.server_ms);
        let (base, ratio) = match r.baseline {
            Some(b) => {
                let (bcm, _) = stats(&rows[b].samples.client_ms);
                let (bsm, _) = stats(&rows[b].samples.server_ms);
                (
                    rows[b].name.to_owned(),
                    format!("{:.1} / {:.1}", cm / bcm, sm / bsm),
                )
            }
            None => ("-".into(), "-".into()),
        };
        let name = if r.note.is_empty() {
            r.name.to_owned()
        } else {
            format!("{} ({})", r.name, r.note)
        };
        lines.push(vec![
            name,
            r.samples.client_ms.len().to_string(),
            format!("{cm:.3}"),
            format!("{cp:.3}"),
            format!("{sm:.3}"),
            format!("{sp:.3}"),
            base,
            ratio,
        ]);
    }
    let mut s = String::new();
    if markdown {
        for (i, l) in lines.iter().enumerate() {
            writeln!(s, "| {} |", l.join(" | ")).unwrap();
            if i == 0 {
                writeln!(s, "|{}", "---|".repeat(l.len())).unwrap();
            }
        }
    } else {
        let widths: Vec<usize> = (0..head.len())
            .map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap())
            .collect();
        for l in &lines {
            let cells: Vec<String> = l
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            writeln!(s, "{}", cells.join("  ").trim_end()).unwrap();
        }
    }
    s
}

struct Options {
    dsn: String,
    iterations: usize,
    large_iterations: usize,
    out: Option<String>,
}

fn options() -> Result<Options, Err> {
    let usage = "usage: patchdiff-bench --dsn CONNSTR [--iterations N (default 200)] \
                 [--large-iterations N (1 MiB rows, default 50)] [--out FILE.md]";
    let mut o = Options {
        dsn: std::env::var("PATCHDIFF_TEST_DSN").unwrap_or_default(),
        iterations: 200,
        large_iterations: 50,
        out: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{usage}"))
        };
        match flag.as_str() {
            "--dsn" => o.dsn = value()?,
            "--iterations" => o.iterations = value()?.parse()?,
            "--large-iterations" => o.large_iterations = value()?.parse()?,
            "--out" => o.out = Some(value()?),
            "-h" | "--help" => {
                println!("{usage}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {flag}\n{usage}").into()),
        }
    }
    if o.dsn.is_empty() {
        return Err(format!("no --dsn (or PATCHDIFF_TEST_DSN)\n{usage}").into());
    }
    if o.iterations == 0 || o.large_iterations == 0 {
        return Err("iterations must be at least 1".into());
    }
    Ok(o)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let o = options()?;
    let c = connect(&o.dsn).await?;
    let (small, small_markers) = generate_text(SMALL_BYTES);
    let (large, large_markers) = generate_text(LARGE_BYTES);

    c.batch_execute(&format!(
        "DROP TABLE IF EXISTS {BASELINE_TABLE};
         CREATE TABLE {BASELINE_TABLE} (id int PRIMARY KEY, body text COMPRESSION lz4 NOT NULL);"
    ))
    .await?;
    c.execute(
        &format!("INSERT INTO {BASELINE_TABLE} VALUES (1, $1), (2, $2)"),
        &[&small, &large],
    )
    .await?;

    let (n, nl) = (o.iterations, o.large_iterations);
    eprintln!("SELECT 1 ...");
    let select1 = measure(&c, "SELECT 1", n, |_| vec![], |_| Ok(())).await?;
    eprintln!("UPDATE 64 KiB ...");
    let update_small = bench_update(&c, 1, &small, n).await?;
    eprintln!("UPDATE 1 MiB ...");
    let update_large = bench_update(&c, 2, &large, nl).await?;
    eprintln!("submit_edits 64 KiB ...");
    let submit_small = bench_submit(&c, "bench-64k.md", &small, small_markers, n).await?;
    eprintln!("submit_edits 1 MiB ...");
    let large_target = initialize_target(&c, "bench-1m-find.md", &large).await?;
    let submit_large = bench_submit(&c, "bench-1m.md", &large, large_markers, nl).await?;

    eprintln!("find_occurrences 1 MiB ...");
    let find_args = json!({"target_file_id": large_target, "text": NEEDLE}).to_string();
    let mut found = Value::Null;
    let find = measure(
        &c,
        &call_sql("patchdiff_find_occurrences"),
        nl,
        |_| vec![Box::new(find_args.clone())],
        |row| {
            found = serde_json::from_str(row.get::<_, &str>(0))?;
            Ok(())
        },
    )
    .await?;
    // Plain-SQL counterpart: count the same word in the same 1 MiB text (detoast + scan).
    let count_sql = format!(
        "SELECT (length(body) - length(replace(body, $1, ''))) / length($1) FROM {BASELINE_TABLE} WHERE id = 2"
    );
    let sql_count = measure(&c, &count_sql, nl, |_| vec![Box::new(NEEDLE)], |_| Ok(())).await?;

    let occurrences = found["occurrence_count"].clone();
    let returned = found
        .get("occurrences")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let rows = vec![
        Row {
            name: "SELECT 1",
            samples: select1,
            baseline: None,
            note: String::new(),
        },
        Row {
            name: "UPDATE 64 KiB text row",
            samples: update_small,
            baseline: Some(0),
            note: String::new(),
        },
        Row {
            name: "UPDATE 1 MiB text row",
            samples: update_large,
            baseline: Some(0),
            note: String::new(),
        },
        Row {
            name: "submit_edits, 1 edit, 64 KiB",
            samples: submit_small,
            baseline: Some(1),
            note: String::new(),
        },
        Row {
            name: "submit_edits, 1 edit, 1 MiB",
            samples: submit_large,
            baseline: Some(2),
            note: String::new(),
        },
        Row {
            name: "SQL count of a word, 1 MiB",
            samples: sql_count,
            baseline: Some(0),
            note: String::new(),
        },
        Row {
            name: "find_occurrences, 1 MiB",
            samples: find,
            baseline: Some(5),
            note: format!("{occurrences} occurrences, {returned} returned"),
        },
    ];
    let version: String = c
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_patchdiff'",
            &[],
        )
        .await?
        .get(0);
    let server: String = c.query_one("SHOW server_version", &[]).await?.get(0);
    println!("pg_patchdiff {version} on PostgreSQL {server}; warm-up {WARMUP} calls per pass\n");
    print!("{}", table(&rows, false));
    if let Some(path) = o.out {
        std::fs::write(&path, table(&rows, true))?;
        eprintln!("wrote {path}");
    }
    c.batch_execute(&format!("DROP TABLE {BASELINE_TABLE}"))
        .await?;
    Ok(())
}
