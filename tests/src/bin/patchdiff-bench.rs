//! patchdiff-bench: latency of pg_patchdiff's hot calls against plain-SQL baselines, measured
//! on the same server in the same run.
//!
//! ```text
//! cargo run --release -p patchdiff-tests --bin patchdiff-bench -- --dsn 'host=... dbname=...' \
//!     [--only core,ops,history] [--iterations 200] [--large-iterations 50] \
//!     [--ops-iterations 50] [--history-iterations 100] [--replay-iterations 5] \
//!     [--history-scale 10] [--out docs-table.md]
//! ```
//!
//! Sections: `core` (the hot calls), `ops` (issue 4: tx/1, tx/2 with 100 descending spans and
//! tx/3 sole replacements on 1 MiB targets, with the engine's share) and `history` (issue 6:
//! attempt-log and ledger pages and replay over the first implementation's two histories, at 1×
//! and `--history-scale`× their length). All run by default.
//!
//! Each benchmark runs twice: once timing the client round trip of the real statement, once
//! reading the server's time. In `core` that is EXPLAIN (ANALYZE, TIMING OFF, SUMMARY ON,
//! FORMAT JSON)'s "Execution Time": EXPLAIN ANALYZE really executes the statement (and, in
//! autocommit, commits it), so both passes do the same work; only the clock differs. `ops` and
//! `history` must see every answer (each submission is guarded by the previous one and must be
//! accepted), so they read the server's time from a PL/pgSQL timer around the call instead
//! (see `TIMER_FN`). Both server times exclude parsing, planning, commit (WAL flush) and the
//! network, which the client time includes.

use std::fmt::Write as _;
use std::time::Instant;

use patchdiff_engine::api::limits::{REPLACEMENT_MAX_CODE_POINTS, REPLACEMENT_MAX_UTF8_BYTES};
use patchdiff_engine::api::submit::{self, Parent};
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::text::sha256_hex;
use patchdiff_engine::wire::{LITERAL, to_string};
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
/// The append-only table of the tx/3 storage floor (issue 21, item 3): an identity key and an
/// lz4 text column, like the record column of patchdiff.pdcp_logs.
const FLOOR_TABLE: &str = "patchdiff_bench_floor_log";

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
    generate_text_seeded(bytes, 0x9E37_79B9_7F4A_7C15)
}

/// [`generate_text`] from another seed: a different text of the same kind (nonzero seed).
fn generate_text_seeded(bytes: usize, mut seed: u64) -> (String, usize) {
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
    // (Up to `bytes - 1`: the final newline must still fit.)
    let cut = text[..bytes - 1].rfind(['\n', ' ']).map_or(0, |i| i + 1);
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

// ---------------------------------------------------------------------------------------------
// Sections "ops" (issue 4) and "history" (issue 6).
//
// A submission benchmark must measure acceptances, each guarded by the previous answer, so
// these sections cannot read the server's time from EXPLAIN ANALYZE (it hides the result).
// They time the server side with `TIMER_FN` instead: a PL/pgSQL function that reads
// `clock_timestamp()` around one call of the SQL function and returns its answer and the
// elapsed milliseconds, so every answer, in both passes, is checked and feeds the next guard.
// Like EXPLAIN's Execution Time it leaves out parsing, planning, commit and the network.

/// The server-side timer (created for the run, dropped at the end).
const TIMER_FN: &str = "bench_timed_call";
/// Percentile the new sections report beside the median.
const TAIL: f64 = 0.95;
/// Warm-up calls per pass of a replay (each takes up to seconds on the grown histories).
const REPLAY_WARMUP: usize = 1;
/// Spans in one tx/2 transaction (issue 4: "100 descending spans").
const SPANS: usize = 100;
/// A UUID for the engine-only runs' responses (the engine never looks it up).
const ENGINE_LOG_ID: &str = "00000000-0000-4000-8000-000000000000";

fn create_timer_sql() -> String {
    let calls: String = [
        "patchdiff_submit_edits",
        "patchdiff_submit_operations",
        "patchdiff_submit_replacement",
        "patchdiff_get_pdcp_log",
        "patchdiff_get_manifest_ledger",
        "patchdiff_replay",
    ]
    .iter()
    .map(|f| format!("    WHEN '{f}' THEN result := {f}(args::json)::text;\n"))
    .collect();
    format!(
        "CREATE OR REPLACE FUNCTION {TIMER_FN}(fn text, args text, OUT result text, OUT ms float8)
LANGUAGE plpgsql AS $timer$
DECLARE t0 timestamptz;
BEGIN
  t0 := clock_timestamp();
  CASE fn
{calls}    WHEN 'baseline_update' THEN
      UPDATE {BASELINE_TABLE} SET body = args WHERE id = 2;
      result := '{{\"status\":\"accepted\"}}';
    WHEN 'tx3_storage_floor' THEN
      PERFORM args::json;
      INSERT INTO {FLOOR_TABLE} (body) VALUES (args);
      UPDATE {BASELINE_TABLE} SET body = args WHERE id = 2;
      result := '{{\"status\":\"accepted\"}}';
  END CASE;
  ms := extract(epoch FROM clock_timestamp() - t0) * 1000;
END
$timer$"
    )
}

/// Leaves no work behind for the server's background processes before a measurement: the
/// previous benchmark's dead TOAST rows (autovacuum) and dirty buffers (checkpoint) would
/// otherwise compete with it for the same two CPUs. Every measured point starts from a vacuumed,
/// analyzed and checkpointed database.
async fn settle(c: &Client) -> Result<(), Err> {
    // One statement per call: VACUUM cannot run in the implicit transaction of a batch.
    c.batch_execute(
        "VACUUM (ANALYZE) patchdiff.targets, patchdiff.pdcp_logs, patchdiff.manifest_ledger, \
         patchdiff.snapshots",
    )
    .await?;
    c.batch_execute("CHECKPOINT").await?;
    Ok(())
}

/// Nearest-rank percentile `q` of `v`.
fn percentile(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    s[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]
}

fn median(v: &[f64]) -> f64 {
    stats(v).0
}

/// A Markdown table.
fn markdown(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|{}\n", head.join(" | "), "---|".repeat(head.len()));
    for r in rows {
        writeln!(s, "| {} |", r.join(" | ")).unwrap();
    }
    s
}

fn ms(v: f64) -> String {
    format!("{v:.3}")
}

/// What one benchmark sends and how it checks each answer.
trait Workload {
    /// The argument text of the next call.
    fn args(&mut self) -> String;
    /// Checks the answer to the last `args` and advances the state (the guards).
    fn check(&mut self, answer: &Value) -> Result<(), Err>;
}

/// The statement a workload drives.
enum Statement {
    /// `SELECT patchdiff_x($1::text::json)::text`.
    Api(&'static str),
    /// `UPDATE` of the 1 MiB baseline row, the argument being the new body.
    BaselineUpdate,
    /// The storage work a sole replacement cannot avoid with today's schema, in plain SQL: the
    /// argument through the `json` input function, INSERTed as one lz4 row (the record) and
    /// written over the 1 MiB baseline row (the new content).
    Tx3StorageFloor,
}

impl Statement {
    fn client_sql(&self) -> String {
        match self {
            Statement::Api(f) => call_sql(f),
            Statement::BaselineUpdate => {
                format!("UPDATE {BASELINE_TABLE} SET body = $1 WHERE id = 2")
            }
            Statement::Tx3StorageFloor => format!(
                "WITH ins AS (INSERT INTO {FLOOR_TABLE} (body) VALUES ($1::text)), \
                 upd AS (UPDATE {BASELINE_TABLE} SET body = $1::text WHERE id = 2) \
                 SELECT CASE WHEN $1::text::json IS NOT NULL THEN '{{\"status\":\"accepted\"}}' END"
            ),
        }
    }

    fn timer_name(&self) -> &'static str {
        match self {
            Statement::Api(f) => f,
            Statement::BaselineUpdate => "baseline_update",
            Statement::Tx3StorageFloor => "tx3_storage_floor",
        }
    }
}

/// Runs `warmup + n` calls per pass: the client round trip of the real statement, then the
/// server time through `TIMER_FN`. Every answer of both passes goes through `w.check`.
async fn measure_calls(
    c: &Client,
    stmt: &Statement,
    warmup: usize,
    n: usize,
    w: &mut dyn Workload,
) -> Result<Samples, Err> {
    let mut out = Samples::default();
    let client = c.prepare(&stmt.client_sql()).await?;
    for i in 0..warmup + n {
        let args = w.args();
        let start = Instant::now();
        let rows = c.query(&client, &[&args]).await?;
        let elapsed = start.elapsed().as_secs_f64() * 1e3;
        let answer = match rows.first() {
            Some(r) => serde_json::from_str(r.get::<_, &str>(0))?,
            None => Value::Null,
        };
        w.check(&answer)?;
        if i >= warmup {
            out.client_ms.push(elapsed);
        }
    }
    let timed = c
        .prepare(&format!("SELECT result, ms FROM {TIMER_FN}($1, $2)"))
        .await?;
    for i in 0..warmup + n {
        let args = w.args();
        let row = c.query_one(&timed, &[&stmt.timer_name(), &args]).await?;
        w.check(&serde_json::from_str(row.get::<_, &str>(0))?)?;
        if i >= warmup {
            out.server_ms.push(row.get(1));
        }
    }
    Ok(out)
}

/// The version and hash guards of the next submission, taken from the previous answer.
struct Guard {
    version: i64,
    hash: String,
}

impl Guard {
    fn new(content: &str) -> Self {
        Guard {
            version: 0,
            hash: sha256_hex(content),
        }
    }

    /// Requires an acceptance of the guarded version and moves the guards to its result.
    fn advance(&mut self, what: &str, answer: &Value) -> Result<(), Err> {
        if answer["status"] != "accepted" || answer["version"] != self.version + 1 {
            return Err(format!(
                "{what}: submission on version {} not accepted: {}",
                self.version,
                head(answer)
            )
            .into());
        }
        self.version += 1;
        self.hash = answer["current_hash"]
            .as_str()
            .ok_or("accepted answer without current_hash")?
            .to_owned();
        Ok(())
    }

    fn fields(&self, target: &str) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        m.insert("target_file_id".into(), json!(target));
        m.insert("expected_target_version".into(), json!(self.version));
        m.insert("expected_current_hash".into(), json!(self.hash));
        m
    }
}

/// The start of an answer, for error messages.
fn head(v: &Value) -> String {
    let s = v.to_string();
    s.chars().take(600).collect()
}

/// tx/1: one `match`/`replace` edit that toggles one marker (as the core section's 1 MiB row).
struct ToggleEdit {
    target: String,
    guard: Guard,
    markers: usize,
    calls: usize,
}

impl Workload for ToggleEdit {
    fn args(&mut self) -> String {
        let (from, to) = toggle_edit(self.calls, self.markers);
        self.calls += 1;
        let mut m = self.guard.fields(&self.target);
        m.insert("intent".into(), json!("benchmark: one edit"));
        m.insert("edits".into(), json!([{"match": from, "replace": to}]));
        Value::Object(m).to_string()
    }

    fn check(&mut self, answer: &Value) -> Result<(), Err> {
        self.guard.advance("submit_edits", answer)
    }
}

/// tx/2: `SPANS` span operations from one read, in descending order, spread over the whole
/// target; each swaps one `ref-NNNNN` marker's case, so the size never changes and the spans'
/// offsets stay those of the read.
struct DescendingSpans {
    target: String,
    guard: Guard,
    /// Code-point offset (the text is ASCII) and original text of every marker, in order.
    markers: Vec<(usize, String)>,
    upper: Vec<bool>,
    pending: Vec<usize>,
    calls: usize,
}

impl DescendingSpans {
    fn new(target: &str, text: &str) -> Self {
        assert!(text.is_ascii(), "span offsets below are byte offsets");
        let markers: Vec<(usize, String)> = text
            .match_indices("(ref-")
            .map(|(i, _)| (i + 1, text[i + 1..i + 10].to_owned()))
            .collect();
        assert!(markers.len() >= SPANS, "too few markers for {SPANS} spans");
        DescendingSpans {
            target: target.to_owned(),
            guard: Guard::new(text),
            upper: vec![false; markers.len()],
            markers,
            pending: Vec::new(),
            calls: 0,
        }
    }

    fn shown(&self, m: usize, upper: bool) -> String {
        let t = &self.markers[m].1;
        if upper {
            t.to_ascii_uppercase()
        } else {
            t.clone()
        }
    }
}

impl Workload for DescendingSpans {
    fn args(&mut self) -> String {
        let stride = self.markers.len() / SPANS;
        let k = self.calls % stride;
        self.calls += 1;
        self.pending = (0..SPANS).rev().map(|j| j * stride + k).collect();
        let ops: Vec<Value> = self
            .pending
            .iter()
            .map(|&m| {
                let start = self.markers[m].0;
                json!({
                    "op": "span",
                    "start": start,
                    "end": start + self.markers[m].1.len(),
                    "expected_text": self.shown(m, self.upper[m]),
                    "replace": self.shown(m, !self.upper[m]),
                })
            })
            .collect();
        let mut m = self.guard.fields(&self.target);
        m.insert(
            "intent".into(),
            json!("benchmark: 100 descending spans from one read"),
        );
        m.insert("operations".into(), Value::Array(ops));
        Value::Object(m).to_string()
    }

    fn check(&mut self, answer: &Value) -> Result<(), Err> {
        self.guard.advance("submit_operations", answer)?;
        if answer["manifest_entries_added"] != SPANS {
            return Err(format!("expected {SPANS} changes: {}", head(answer)).into());
        }
        for &m in &self.pending {
            self.upper[m] = !self.upper[m];
        }
        Ok(())
    }
}

/// tx/3: the whole target replaced, alternately by `texts[1]` and `texts[0]` (the start).
struct Replacement {
    target: String,
    guard: Guard,
    texts: [String; 2],
    calls: usize,
}

impl Workload for Replacement {
    fn args(&mut self) -> String {
        self.calls += 1;
        let mut m = self.guard.fields(&self.target);
        m.insert("intent".into(), json!("benchmark: sole replacement"));
        m.insert(
            "replacement".into(),
            json!(self.texts[self.calls % 2].as_str()),
        );
        Value::Object(m).to_string()
    }

    fn check(&mut self, answer: &Value) -> Result<(), Err> {
        self.guard.advance("submit_replacement", answer)
    }
}

/// The tx/3 storage floor's arguments: the very argument texts of [`Replacement`], whose
/// answers are not submissions (nothing to check).
struct StorageFloor(Replacement);

impl Workload for StorageFloor {
    fn args(&mut self) -> String {
        self.0.args()
    }

    fn check(&mut self, _: &Value) -> Result<(), Err> {
        Ok(())
    }
}

/// The plain-SQL baseline: the 1 MiB row's body, alternately `bodies[1]` and `bodies[0]`.
struct BaselineBodies {
    bodies: [String; 2],
    calls: usize,
}

impl Workload for BaselineBodies {
    fn args(&mut self) -> String {
        self.calls += 1;
        self.bodies[self.calls % 2].clone()
    }

    fn check(&mut self, _: &Value) -> Result<(), Err> {
        Ok(())
    }
}

/// The same arguments every call, with a check of each answer.
struct Fixed<F: FnMut(&Value) -> Result<(), Err>> {
    args: String,
    check: F,
}

impl<F: FnMut(&Value) -> Result<(), Err>> Workload for Fixed<F> {
    fn args(&mut self) -> String {
        self.args.clone()
    }

    fn check(&mut self, answer: &Value) -> Result<(), Err> {
        (self.check)(answer)
    }
}

/// Engine-only milliseconds per phase of one submission, as `run_submission` calls them.
#[derive(Default)]
struct EngineSamples {
    /// `parse_submit_*`: the argument JSON, the stored record (compact ASCII-escaped, sorted
    /// keys) and its SHA-256.
    parse: Vec<f64>,
    /// `prepare`: the request fingerprint.
    prepare: Vec<f64>,
    /// `admission` and `evaluate`: guards, parsing and applying the proposal, the facts, the
    /// new content's SHA-256.
    evaluate: Vec<f64>,
    /// `respond` and writing the answer as text.
    respond: Vec<f64>,
    total: Vec<f64>,
}

type Parser = fn(&str) -> Result<submit::Submission, patchdiff_engine::api::args::ArgError>;

/// Runs the engine's part of `warmup + n` submissions in this process, on `content`, feeding
/// each answer back to `w` as the server's would be: the split of the server time between the
/// engine (pure Rust, no PostgreSQL) and the rest (the function call, the row lock and read,
/// detoasting, the three writes with their compression and TOAST, WAL).
fn measure_engine(
    parse: Parser,
    target: &str,
    mut content: String,
    warmup: usize,
    n: usize,
    w: &mut dyn Workload,
) -> Result<EngineSamples, Err> {
    let mut out = EngineSamples::default();
    let (mut version, mut hash) = (0i64, sha256_hex(&content));
    for i in 0..warmup + n {
        let args = w.args();
        let t0 = Instant::now();
        let sub = parse(&args).map_err(|e| format!("engine: {}", e.to_json("engine")))?;
        let t1 = Instant::now();
        let identity = submit::prepare(&sub, &Parent::NotLookedUp);
        let t2 = Instant::now();
        if let Some(refused) = submit::admission(&sub, None) {
            return Err(format!("engine: not admitted: {}", head(&refused)).into());
        }
        let start = TargetView {
            target_file_id: target,
            version,
            current_hash: &hash,
            content: &content,
        };
        let mut attempt = submit::evaluate(&sub, &identity, &Parent::NotLookedUp, &start);
        let t3 = Instant::now();
        let (Some(new_content), Some(after_hash), Some(after_version)) = (
            attempt.new_content.take(),
            attempt.after_hash.clone(),
            attempt.after_version,
        ) else {
            return Err(format!("engine: rejected: {:?}", attempt.failure_detail).into());
        };
        let now = TargetView {
            target_file_id: target,
            version: after_version,
            current_hash: &after_hash,
            content: &new_content,
        };
        let text = to_string(
            &submit::respond(&attempt, &sub, ENGINE_LOG_ID, &now, None),
            LITERAL,
        );
        let t4 = Instant::now();
        w.check(&serde_json::from_str(&text)?)?;
        (content, hash, version) = (new_content, after_hash, after_version);
        if i >= warmup {
            let d = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            out.parse.push(d(t0, t1));
            out.prepare.push(d(t1, t2));
            out.evaluate.push(d(t2, t3));
            out.respond.push(d(t3, t4));
            out.total.push(d(t0, t4));
        }
    }
    Ok(out)
}

/// A seed for the `k`-th generated variant (splitmix64; never zero).
fn seed_for(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE5_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) | 1
}

/// The largest text a sole replacement admits that is also 1 MiB: 1,048,576 UTF-8 bytes in
/// 1,000,000 code points (48,576 `e` of a generated ASCII text written `é`, evenly spread).
fn mib_replacement_text(seed: u64) -> String {
    let (ascii, _) = generate_text_seeded(REPLACEMENT_MAX_CODE_POINTS, seed);
    let extra = REPLACEMENT_MAX_UTF8_BYTES - REPLACEMENT_MAX_CODE_POINTS;
    let es = ascii.bytes().filter(|&b| b == b'e').count();
    assert!(es >= extra, "not enough 'e' to widen");
    let mut out = String::with_capacity(REPLACEMENT_MAX_UTF8_BYTES);
    let mut seen = 0;
    for ch in ascii.chars() {
        if ch == 'e' {
            let widen = (seen + 1) * extra / es != seen * extra / es;
            seen += 1;
            out.push(if widen { 'é' } else { 'e' });
        } else {
            out.push(ch);
        }
    }
    assert_eq!(out.len(), REPLACEMENT_MAX_UTF8_BYTES);
    assert_eq!(out.chars().count(), REPLACEMENT_MAX_CODE_POINTS);
    out
}

struct OpsRow {
    name: String,
    samples: Samples,
    engine: Option<EngineSamples>,
}

async fn section_ops(c: &Client, n: usize) -> Result<String, Err> {
    let (large, large_markers) = generate_text(LARGE_BYTES);
    let mut rows = Vec::new();

    eprintln!("ops: UPDATE 1 MiB ...");
    let (from, to) = toggle_edit(0, 1);
    let mut w = BaselineBodies {
        bodies: [large.clone(), large.replacen(&from, &to, 1)],
        calls: 0,
    };
    c.execute(
        &format!("UPDATE {BASELINE_TABLE} SET body = $1 WHERE id = 2"),
        &[&large],
    )
    .await?;
    c.batch_execute(&format!("VACUUM {BASELINE_TABLE}")).await?;
    settle(c).await?;
    rows.push(OpsRow {
        name: "UPDATE 1 MiB text row".into(),
        samples: measure_calls(c, &Statement::BaselineUpdate, WARMUP, n, &mut w).await?,
        engine: None,
    });

    let target = initialize_target(c, "bench-ops-tx1-1m.md", &large).await?;
    settle(c).await?;
    eprintln!("ops: submit_edits, 1 edit, 1 MiB ...");
    let edit = |target: &str| ToggleEdit {
        target: target.to_owned(),
        guard: Guard::new(&large),
        markers: large_markers,
        calls: 0,
    };
    let samples = measure_calls(
        c,
        &Statement::Api("patchdiff_submit_edits"),
        WARMUP,
        n,
        &mut edit(&target),
    )
    .await?;
    let engine = measure_engine(
        submit::parse_submit_edits,
        &target,
        large.clone(),
        WARMUP,
        n,
        &mut edit(&target),
    )?;
    rows.push(OpsRow {
        name: "submit_edits (tx/1), 1 edit, 1 MiB".into(),
        samples,
        engine: Some(engine),
    });

    let target = initialize_target(c, "bench-ops-tx2-1m.md", &large).await?;
    settle(c).await?;
    eprintln!("ops: submit_operations, {SPANS} descending spans, 1 MiB ...");
    let samples = measure_calls(
        c,
        &Statement::Api("patchdiff_submit_operations"),
        WARMUP,
        n,
        &mut DescendingSpans::new(&target, &large),
    )
    .await?;
    let engine = measure_engine(
        submit::parse_submit_operations,
        &target,
        large.clone(),
        WARMUP,
        n,
        &mut DescendingSpans::new(&target, &large),
    )?;
    rows.push(OpsRow {
        name: format!("submit_operations (tx/2), {SPANS} descending spans, 1 MiB"),
        samples,
        engine: Some(engine),
    });

    let mib = [
        mib_replacement_text(seed_for(1)),
        mib_replacement_text(seed_for(2)),
    ];
    let ascii = [
        generate_text_seeded(REPLACEMENT_MAX_CODE_POINTS, seed_for(3)).0,
        generate_text_seeded(REPLACEMENT_MAX_CODE_POINTS, seed_for(4)).0,
    ];
    for (texts, name, file) in [
        (
            mib,
            "submit_replacement (tx/3), 1 MiB by 1 MiB (1,048,576 bytes, 1,000,000 code points)",
            "bench-ops-tx3-1m.md",
        ),
        (
            ascii,
            "submit_replacement (tx/3), 1,000,000 ASCII bytes",
            "bench-ops-tx3-ascii.md",
        ),
    ] {
        let target = initialize_target(c, file, &texts[0]).await?;
        settle(c).await?;
        eprintln!("ops: {name} ...");
        let replacement = |target: &str| Replacement {
            target: target.to_owned(),
            guard: Guard::new(&texts[0]),
            texts: texts.clone(),
            calls: 0,
        };
        let samples = measure_calls(
            c,
            &Statement::Api("patchdiff_submit_replacement"),
            WARMUP,
            n,
            &mut replacement(&target),
        )
        .await?;
        let engine = measure_engine(
            submit::parse_submit_replacement,
            &target,
            texts[0].clone(),
            WARMUP,
            n,
            &mut replacement(&target),
        )?;
        rows.push(OpsRow {
            name: name.into(),
            samples,
            engine: Some(engine),
        });
        settle(c).await?;
        eprintln!("ops: {name}: storage floor ...");
        let floor = measure_calls(
            c,
            &Statement::Tx3StorageFloor,
            WARMUP,
            n,
            &mut StorageFloor(replacement(&target)),
        )
        .await?;
        rows.push(OpsRow {
            name: format!(
                "tx/3 storage floor (plain SQL: json input, INSERT, UPDATE), {}",
                name.strip_prefix("submit_replacement (tx/3), ")
                    .unwrap_or(name)
            ),
            samples: floor,
            engine: None,
        });
    }

    let (base_client, base_server) = (
        median(&rows[0].samples.client_ms),
        median(&rows[0].samples.server_ms),
    );
    let main: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let (cm, sm) = (median(&r.samples.client_ms), median(&r.samples.server_ms));
            let (engine, share) = match &r.engine {
                Some(e) => {
                    let em = median(&e.total);
                    (ms(em), format!("{:.0}%", 100.0 * em / sm))
                }
                None => ("-".into(), "-".into()),
            };
            vec![
                r.name.clone(),
                r.samples.server_ms.len().to_string(),
                ms(cm),
                ms(percentile(&r.samples.client_ms, TAIL)),
                ms(sm),
                ms(percentile(&r.samples.server_ms, TAIL)),
                engine,
                share,
                if i == 0 {
                    "-".into()
                } else {
                    rows[0].name.clone()
                },
                if i == 0 {
                    "-".into()
                } else {
                    format!("{:.1} / {:.1}", cm / base_client, sm / base_server)
                },
            ]
        })
        .collect();
    let phases: Vec<Vec<String>> = rows
        .iter()
        .filter_map(|r| {
            let e = r.engine.as_ref()?;
            Some(vec![
                r.name.clone(),
                ms(median(&e.parse)),
                ms(median(&e.prepare)),
                ms(median(&e.evaluate)),
                ms(median(&e.respond)),
                ms(median(&e.total)),
                ms(median(&r.samples.server_ms) - median(&e.total)),
            ])
        })
        .collect();
    let mut s = String::from("### Operations (issue 4)\n\n");
    s += &markdown(
        &[
            "benchmark",
            "n",
            "client median ms",
            "client p95 ms",
            "server median ms",
            "server p95 ms",
            "engine median ms",
            "engine / server",
            "baseline",
            "× baseline (client / server)",
        ],
        &main,
    );
    s += "\nEngine-only medians per phase (in-process, same arguments and content), and the \
          server median minus the engine total (PostgreSQL's part):\n\n";
    s += &markdown(
        &[
            "benchmark",
            "parse ms",
            "prepare ms",
            "evaluate ms",
            "respond ms",
            "engine ms",
            "server − engine ms",
        ],
        &phases,
    );
    // Issue 21, item 3: each sole replacement against the plain-SQL storage work it cannot
    // avoid (the row after it) and against the plain UPDATE.
    let floors: Vec<Vec<String>> = rows
        .windows(2)
        .filter(|w| w[1].name.starts_with("tx/3 storage floor"))
        .map(|w| {
            let (tx3, floor) = (
                median(&w[0].samples.server_ms),
                median(&w[1].samples.server_ms),
            );
            vec![
                w[0].name.clone(),
                ms(tx3),
                ms(floor),
                format!("{:.2}", tx3 / floor),
                format!("{:.2}", tx3 / base_server),
                format!("{:.2}", floor / base_server),
            ]
        })
        .collect();
    s += "\nSole replacements against their storage floor (server medians):\n\n";
    s += &markdown(
        &[
            "benchmark",
            "tx/3 ms",
            "floor ms",
            "tx/3 / floor",
            "tx/3 / UPDATE",
            "floor / UPDATE",
        ],
        &floors,
    );
    Ok(s)
}

/// One history of issue 6, built through the real submission functions.
#[derive(Clone, Copy)]
enum HistoryKind {
    /// Sole replacements by distinct 400,000-byte texts.
    Tx3,
    /// One-edit tx/1 records of about 1,000,000 bytes: the edit's `match` is the whole
    /// current content (500,000 bytes) and its `replace` the next 500,000-byte text, so the
    /// target stays 500 KB however long the history grows.
    Tx1,
}

const TX3_RECORD_TEXT: usize = 400_000;
const TX1_HALF: usize = 500_000;

impl HistoryKind {
    fn label(self) -> &'static str {
        match self {
            HistoryKind::Tx3 => "400 KB tx/3",
            HistoryKind::Tx1 => "1 MB tx/1",
        }
    }

    fn records(self) -> usize {
        match self {
            HistoryKind::Tx3 => 50,
            HistoryKind::Tx1 => 20,
        }
    }

    /// The first implementation's 50-row page, ms: (log, ledger).
    fn first_implementation(self) -> (f64, f64) {
        match self {
            HistoryKind::Tx3 => (22.85, 14.68),
            HistoryKind::Tx1 => (136.72, 221.59),
        }
    }

    /// The target's content after `k` records.
    fn content(self, k: usize) -> String {
        match self {
            HistoryKind::Tx3 => {
                generate_text_seeded(TX3_RECORD_TEXT, seed_for(10_000 + k as u64)).0
            }
            HistoryKind::Tx1 => generate_text_seeded(TX1_HALF, seed_for(20_000 + k as u64)).0,
        }
    }

    /// Submits records `from + 1 ..= to` (the target holds `from`).
    async fn grow(self, c: &Client, target: &str, from: usize, to: usize) -> Result<(), Err> {
        let mut previous = self.content(from);
        let mut guard = Guard {
            version: from as i64,
            hash: sha256_hex(&previous),
        };
        for k in from + 1..=to {
            let next = self.content(k);
            let mut m = guard.fields(target);
            m.insert(
                "intent".into(),
                json!(format!("benchmark history: record {k}")),
            );
            let function = match self {
                HistoryKind::Tx3 => {
                    m.insert("replacement".into(), json!(next));
                    "patchdiff_submit_replacement"
                }
                HistoryKind::Tx1 => {
                    m.insert(
                        "edits".into(),
                        json!([{"match": previous, "replace": next}]),
                    );
                    "patchdiff_submit_edits"
                }
            };
            let answer = call(c, function, &Value::Object(m)).await?;
            guard.advance(function, &answer)?;
            previous = next;
            if k % 50 == 0 {
                eprintln!("history {}: {k} records", self.label());
            }
        }
        Ok(())
    }
}

/// One history at one length: its size and the three calls' samples.
/// One history at one length: its size and the calls' samples.
struct HistoryPoint {
    records: usize,
    record_bytes: i64,
    stored_bytes: i64,
    /// Per page size: (limit, log page, ledger page).
    pages: Vec<(usize, Samples, Samples)>,
    replay: Samples,
}

/// Times the log and ledger pages of each size in `limits` (default arguments otherwise:
/// `{target_file_id, limit}`), then replay, on a target holding `records` one-change attempts.
async fn measure_history(
    c: &Client,
    target: &str,
    records: usize,
    limits: &[usize],
    n: usize,
    replay_n: usize,
) -> Result<HistoryPoint, Err> {
    settle(c).await?;
    let sizes = c
        .query_one(
            "SELECT count(*), coalesce(sum(octet_length(pdcp_content)), 0)::int8, \
                    coalesce(sum(pg_column_size(pdcp_content)), 0)::int8 \
               FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
            &[&target],
        )
        .await?;
    if sizes.get::<_, i64>(0) != records as i64 {
        return Err(format!(
            "expected {records} attempts, found {}",
            sizes.get::<_, i64>(0)
        )
        .into());
    }
    let mut pages = Vec::new();
    for &limit in limits {
        let args = json!({"target_file_id": target, "limit": limit}).to_string();
        let rows = records.min(limit);
        let entries = move |what: &'static str| {
            move |answer: &Value| -> Result<(), Err> {
                let got = answer["entries"].as_array().map_or(0, Vec::len);
                if got != rows || answer["has_more"] != (records > limit) {
                    return Err(format!("{what}: expected {rows} entries: {}", head(answer)).into());
                }
                Ok(())
            }
        };
        eprintln!("history: {records} records, {limit}-row pages ...");
        let log = measure_calls(
            c,
            &Statement::Api("patchdiff_get_pdcp_log"),
            WARMUP,
            n,
            &mut Fixed {
                args: args.clone(),
                check: entries("log page"),
            },
        )
        .await?;
        let ledger = measure_calls(
            c,
            &Statement::Api("patchdiff_get_manifest_ledger"),
            WARMUP,
            n,
            &mut Fixed {
                args,
                check: entries("ledger page"),
            },
        )
        .await?;
        pages.push((limit, log, ledger));
    }
    eprintln!("history: {records} records, replay ...");
    let replay = measure_calls(
        c,
        &Statement::Api("patchdiff_replay"),
        REPLAY_WARMUP,
        replay_n,
        &mut Fixed {
            args: json!({"target_file_id": target}).to_string(),
            check: |answer: &Value| -> Result<(), Err> {
                if answer["status"] != "success"
                    || answer["materialized_state_matches"] != true
                    || answer["accepted_transactions_replayed"] != records
                {
                    return Err(format!("replay: {}", head(answer)).into());
                }
                Ok(())
            },
        },
    )
    .await?;
    Ok(HistoryPoint {
        records,
        record_bytes: sizes.get(1),
        stored_bytes: sizes.get(2),
        pages,
        replay,
    })
}

fn mb(bytes: i64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// Builds each history of issue 6 through the real submission functions, times its pages and
/// replay, grows the same target to `scale` times as many records and times them again.
async fn section_history(
    c: &Client,
    n: usize,
    replay_n: usize,
    scale: usize,
) -> Result<String, Err> {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for kind in [HistoryKind::Tx3, HistoryKind::Tx1] {
        let (records, grown) = (kind.records(), kind.records() * scale);
        // The issue's 50-row page; when the short history has fewer rows, also a page of its
        // length, so that both lengths are compared on pages of the same size.
        let mut limits = vec![50];
        if records < 50 {
            limits.push(records);
        }
        let file = match kind {
            HistoryKind::Tx3 => "bench-history-tx3.md",
            HistoryKind::Tx1 => "bench-history-tx1.md",
        };
        let target = initialize_target(c, file, &kind.content(0)).await?;
        let t = Instant::now();
        kind.grow(c, &target, 0, records).await?;
        let build_1 = t.elapsed().as_secs_f64();
        let one = measure_history(c, &target, records, &limits, n, replay_n).await?;
        let t = Instant::now();
        kind.grow(c, &target, records, grown).await?;
        let build_n = t.elapsed().as_secs_f64();
        let many = measure_history(c, &target, grown, &limits, n, replay_n).await?;
        sizes.push(format!(
            "- {}: {} records of {} each ({} of records, {} stored compressed), built in {:.1} s; \
             grown to {} records ({} of records, {} stored) in {:.1} s more.",
            kind.label(),
            one.records,
            mb(one.record_bytes / one.records as i64),
            mb(one.record_bytes),
            mb(one.stored_bytes),
            build_1,
            many.records,
            mb(many.record_bytes),
            mb(many.stored_bytes),
            build_n,
        ));
        let (first_log, first_ledger) = kind.first_implementation();
        let mut calls: Vec<(String, Option<f64>, &Samples, &Samples, String)> = Vec::new();
        for (i, &limit) in limits.iter().enumerate() {
            let shown = format!("{} / {}", records.min(limit), grown.min(limit));
            let (_, log1, ledger1) = &one.pages[i];
            let (_, logn, ledgern) = &many.pages[i];
            let first = |f| (limit == 50).then_some(f);
            calls.push((
                format!("get_pdcp_log, limit {limit}"),
                first(first_log),
                log1,
                logn,
                shown.clone(),
            ));
            calls.push((
                format!("get_manifest_ledger, limit {limit}"),
                first(first_ledger),
                ledger1,
                ledgern,
                shown,
            ));
        }
        calls.push((
            "replay".into(),
            None,
            &one.replay,
            &many.replay,
            format!("{records} / {grown} replayed"),
        ));
        for (call_name, first, a, b, shown) in calls {
            let (sa, sb) = (median(&a.server_ms), median(&b.server_ms));
            let (base, speedup, goal) = match first {
                Some(f) => (
                    ms(f),
                    format!("{:.0}× / {:.0}×", f / sa, f / sb),
                    format!(
                        "< {:.2} ms: {}",
                        f / 10.0,
                        if sa <= f / 10.0 && sb <= f / 10.0 {
                            "met"
                        } else {
                            "missed"
                        }
                    ),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            rows.push(vec![
                call_name,
                format!("{records} × {}", kind.label()),
                shown,
                a.server_ms.len().to_string(),
                ms(sa),
                ms(percentile(&a.server_ms, TAIL)),
                ms(median(&a.client_ms)),
                ms(sb),
                ms(percentile(&b.server_ms, TAIL)),
                ms(median(&b.client_ms)),
                format!("{:.2}", sb / sa),
                base,
                speedup,
                goal,
            ]);
        }
    }
    let mut s = format!("### History pages (issue 6), 1× and {scale}× the history\n\n");
    s += &markdown(
        &[
            "call",
            "history (1×)",
            &format!("rows 1× / {scale}×"),
            "n",
            "1× server median ms",
            "1× server p95 ms",
            "1× client median ms",
            &format!("{scale}× server median ms"),
            &format!("{scale}× server p95 ms"),
            &format!("{scale}× client median ms"),
            &format!("{scale}× / 1× (server)"),
            "first implementation ms",
            &format!("× faster, server (1× / {scale}×)"),
            &format!("goal: server median at 1× and {scale}×"),
        ],
        &rows,
    );
    s += "\n";
    for line in sizes {
        s += &line;
        s += "\n";
    }
    Ok(s)
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    Core,
    Ops,
    History,
}

struct Options {
    dsn: String,
    iterations: usize,
    large_iterations: usize,
    ops_iterations: usize,
    history_iterations: usize,
    replay_iterations: usize,
    history_scale: usize,
    sections: Vec<Section>,
    out: Option<String>,
}

fn options() -> Result<Options, Err> {
    let usage = "usage: patchdiff-bench --dsn CONNSTR [--only core,ops,history (default all)] \
                 [--iterations N (default 200)] [--large-iterations N (1 MiB rows, default 50)] \
                 [--ops-iterations N (default 50)] [--history-iterations N (pages, default 100)] \
                 [--replay-iterations N (default 5)] [--history-scale N (default 10)] [--out FILE.md]";
    let mut o = Options {
        dsn: std::env::var("PATCHDIFF_TEST_DSN").unwrap_or_default(),
        iterations: 200,
        large_iterations: 50,
        ops_iterations: 50,
        history_iterations: 100,
        replay_iterations: 5,
        history_scale: 10,
        sections: vec![Section::Core, Section::Ops, Section::History],
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
            "--ops-iterations" => o.ops_iterations = value()?.parse()?,
            "--history-iterations" => o.history_iterations = value()?.parse()?,
            "--replay-iterations" => o.replay_iterations = value()?.parse()?,
            "--history-scale" => o.history_scale = value()?.parse()?,
            "--only" => {
                o.sections = value()?
                    .split(',')
                    .map(|s| match s.trim() {
                        "core" => Ok(Section::Core),
                        "ops" => Ok(Section::Ops),
                        "history" => Ok(Section::History),
                        other => Err(format!("unknown section {other}\n{usage}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
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
    if [
        o.iterations,
        o.large_iterations,
        o.ops_iterations,
        o.history_iterations,
        o.replay_iterations,
    ]
    .contains(&0)
    {
        return Err("iterations must be at least 1".into());
    }
    if o.history_scale < 2 {
        return Err("--history-scale must be at least 2".into());
    }
    Ok(o)
}

/// The original benchmarks: hot calls against plain-SQL baselines (EXPLAIN's server time).
async fn section_core(c: &Client, o: &Options) -> Result<Vec<Row>, Err> {
    let (small, small_markers) = generate_text(SMALL_BYTES);
    let (large, large_markers) = generate_text(LARGE_BYTES);
    let (n, nl) = (o.iterations, o.large_iterations);
    eprintln!("SELECT 1 ...");
    let select1 = measure(c, "SELECT 1", n, |_| vec![], |_| Ok(())).await?;
    eprintln!("UPDATE 64 KiB ...");
    let update_small = bench_update(c, 1, &small, n).await?;
    eprintln!("UPDATE 1 MiB ...");
    let update_large = bench_update(c, 2, &large, nl).await?;
    eprintln!("submit_edits 64 KiB ...");
    let submit_small = bench_submit(c, "bench-64k.md", &small, small_markers, n).await?;
    eprintln!("submit_edits 1 MiB ...");
    let large_target = initialize_target(c, "bench-1m-find.md", &large).await?;
    let submit_large = bench_submit(c, "bench-1m.md", &large, large_markers, nl).await?;

    eprintln!("find_occurrences 1 MiB ...");
    let find_args = json!({"target_file_id": large_target, "text": NEEDLE}).to_string();
    let mut found = Value::Null;
    let find = measure(
        c,
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
    let sql_count = measure(c, &count_sql, nl, |_| vec![Box::new(NEEDLE)], |_| Ok(())).await?;

    let occurrences = found["occurrence_count"].clone();
    let returned = found
        .get("occurrences")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    Ok(vec![
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
    ])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let o = options()?;
    let c = connect(&o.dsn).await?;
    let runs = |s| o.sections.contains(&s);
    // Load the extension's library into this session now: the whole run then measures the
    // build installed at this moment, even if another build (a `cargo pgrx test` debug build)
    // is installed meanwhile, since pgrx replaces the file rather than rewriting it.
    call(
        &c,
        "patchdiff_get_target",
        &json!({"target_file_id": ENGINE_LOG_ID}),
    )
    .await?;
    let pid: i32 = c.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
    eprintln!("pg_patchdiff library loaded (backend pid {pid})");

    if runs(Section::Core) || runs(Section::Ops) {
        let (small, _) = generate_text(SMALL_BYTES);
        let (large, _) = generate_text(LARGE_BYTES);
        c.batch_execute(&format!(
            "DROP TABLE IF EXISTS {BASELINE_TABLE}, {FLOOR_TABLE};
             CREATE TABLE {BASELINE_TABLE} (id int PRIMARY KEY, body text COMPRESSION lz4 NOT NULL);
             CREATE TABLE {FLOOR_TABLE} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
               body text COMPRESSION lz4 NOT NULL);"
        ))
        .await?;
        c.execute(
            &format!("INSERT INTO {BASELINE_TABLE} VALUES (1, $1), (2, $2)"),
            &[&small, &large],
        )
        .await?;
    }
    if runs(Section::Ops) || runs(Section::History) {
        c.batch_execute(&create_timer_sql()).await?;
    }

    let core = if runs(Section::Core) {
        Some(section_core(&c, &o).await?)
    } else {
        None
    };
    let ops = if runs(Section::Ops) {
        Some(section_ops(&c, o.ops_iterations).await?)
    } else {
        None
    };
    let history = if runs(Section::History) {
        Some(
            section_history(
                &c,
                o.history_iterations,
                o.replay_iterations,
                o.history_scale,
            )
            .await?,
        )
    } else {
        None
    };

    let version: String = c
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_patchdiff'",
            &[],
        )
        .await?
        .get(0);
    let server = patchdiff_tests::server_settings(&c).await?;
    println!("pg_patchdiff {version} on {server}; warm-up {WARMUP} calls per pass\n");
    let mut md = Vec::new();
    if let Some(rows) = &core {
        print!("{}", table(rows, false));
        md.push(table(rows, true));
    }
    for s in [&ops, &history].into_iter().flatten() {
        if !md.is_empty() {
            println!();
        }
        print!("{s}");
        md.push(s.clone());
    }
    if let Some(path) = &o.out {
        std::fs::write(path, md.join("\n"))?;
        eprintln!("wrote {path}");
    }
    if runs(Section::Core) || runs(Section::Ops) {
        c.batch_execute(&format!("DROP TABLE {BASELINE_TABLE}, {FLOOR_TABLE}"))
            .await?;
    }
    if runs(Section::Ops) || runs(Section::History) {
        c.batch_execute(&format!("DROP FUNCTION {TIMER_FN}(text, text)"))
            .await?;
    }
    Ok(())
}
