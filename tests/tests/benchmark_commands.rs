//! The benchmark commands of docs/benchmarks.md, each run once with the smallest counts it
//! accepts: every figure in that document comes from one of them, and a command that no longer
//! runs cannot reproduce its table. (`patchdiff-stress` has its own run, in
//! reliability_concurrency.rs.) These are not timing tests: debug builds on a shared machine
//! measure nothing. What they prove is that each command runs to the end against a real
//! server, prints every row of its tables with numbers in them, keeps the checks it makes on
//! the way (an answer's status, a reparse equal to a fresh parse, no error under load), leaves
//! nothing of its own behind in the database, and refuses a count it cannot take a median of,
//! with a message instead of a panic.
//!
//! The benchmark *examples* of the engine, Waymark and the front end (`hostile_bench`,
//! `outline_bench`, `incremental_bench`, `helper_bench`, `workspace_bench`; scripts/bench.sh runs
//! them) are run the same way, from their debug builds.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff), `PATCHDIFF_MCP_BIN` (default target/debug) and, for the router's benchmark,
//! `PATCHDIFF_ROUTER_DSN` (as `scripts/shards.sh up 2` prints it; scripts/test.sh sets it).
//! The examples are read from `PATCHDIFF_EXAMPLES_DIR` (default target/debug/examples: `cargo
//! build -p patchdiff-engine -p patchdiff-waymark -p patchdiff-mcp --examples`, which
//! scripts/test.sh runs) and the parser helper from target/release (`install_parser_helper`).

use patchdiff_tests::stdio::mcp_bin;
use std::process::Command;

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

/// `--dsn` (the test database), `--mcp-bin` (the front end) and then `rest`.
fn with_db_and_mcp(rest: &[&str]) -> Vec<String> {
    let mut args = vec!["--dsn".into(), dsn(), "--mcp-bin".into(), mcp_bin()];
    args.extend(rest.iter().map(|a| a.to_string()));
    args
}

/// Runs the command with `env` added to its environment; its stdout, and a report of both
/// streams for failed assertions.
fn run<S: AsRef<str>>(bin: &str, args: &[S], env: &[(&str, &str)]) -> (bool, String, String) {
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    let out = Command::new(bin)
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let report = format!(
        "{env:?} {bin} {args:?}: {}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), stdout, report)
}

fn succeeds<S: AsRef<str>>(bin: &str, args: &[S]) -> String {
    succeeds_with(bin, args, &[])
}

fn succeeds_with<S: AsRef<str>>(bin: &str, args: &[S], env: &[(&str, &str)]) -> String {
    let (ok, stdout, report) = run(bin, args, env);
    assert!(ok, "{report}");
    stdout
}

/// The debug build of benchmark example `name` (see the module's note on where it is read).
fn example(name: &str) -> String {
    let dir = std::env::var("PATCHDIFF_EXAMPLES_DIR").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/debug/examples").to_owned()
    });
    let path = format!("{dir}/{name}");
    assert!(
        std::path::Path::new(&path).is_file(),
        "{path} is missing: cargo build -p patchdiff-engine -p patchdiff-waymark -p \
         patchdiff-mcp --examples"
    );
    path
}

/// The release build of the parser helper, as scripts/lib.sh's `install_parser_helper` makes it.
fn parser_helper() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/release/patchdiff-waymark-helper"
    );
    assert!(
        std::path::Path::new(path).is_file(),
        "{path} is missing: cargo build --release -p patchdiff-waymark --bin \
         patchdiff-waymark-helper"
    );
    path.to_owned()
}

/// The cells of the markdown table whose header row starts with `header`, one `Vec` per data
/// row (the header and the `---` row left out).
fn table(text: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    assert!(
        lines.next().is_some(),
        "no table headed {header:?} in:\n{text}"
    );
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The leading number of a cell (`16.695 (over goal)`, `**2.608**`, `1.3 / 2.7`, `-0.02`).
fn number(cell: &str) -> f64 {
    let s = cell.trim_start_matches('*');
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || c == ',' || (i == 0 && c == '-')))
        .map_or(s.len(), |(i, _)| i);
    s[..end]
        .replace(',', "")
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {cell:?}"))
}

/// Each row's label (first cell), once its cells `columns` are seen to hold numbers.
fn labels_with_numbers(rows: &[Vec<String>], columns: &[usize]) -> Vec<String> {
    for row in rows {
        for &i in columns {
            let cell = row
                .get(i)
                .unwrap_or_else(|| panic!("no column {i} in {row:?}"));
            assert!(number(cell).is_finite(), "{row:?}");
        }
    }
    rows.iter().map(|r| r[0].clone()).collect()
}

/// The labels of the rows of the table headed `header` in `text`, once their cells `columns`
/// are seen to hold numbers.
fn labels(text: &str, header: &str, columns: &[usize]) -> Vec<String> {
    labels_with_numbers(&table(text, header), columns)
}

/// That each of `prefixes` begins one of `lines`.
fn each_begins_a_line(lines: &[&str], prefixes: &[&str]) {
    for p in prefixes {
        assert!(
            lines.iter().any(|l| l.starts_with(p)),
            "{p:?} in {lines:#?}"
        );
    }
}

/// Which of `names` (tables or functions) exist in the database: what a command made and
/// should have dropped. (By name: the commands here run side by side in one database.)
fn left_behind(names: &[&str]) -> Vec<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let client = patchdiff_tests::connect(&dsn()).await.expect("connecting");
        client
            .query(
                "SELECT relname::text FROM pg_class WHERE relname = ANY ($1) \
                 UNION ALL SELECT proname::text FROM pg_proc WHERE proname = ANY ($1)",
                &[&names],
            )
            .await
            .expect("listing what was left")
            .iter()
            .map(|r| r.get(0))
            .collect()
    })
}

/// Zero samples: a clear refusal (exit status 1 or 2 and a message naming the option), not a
/// panic and not a table of medians of nothing.
fn refuses<S: AsRef<str>>(bin: &str, args: &[S], message: &str) {
    refuses_with(bin, args, &[], message);
}

fn refuses_with<S: AsRef<str>>(bin: &str, args: &[S], env: &[(&str, &str)], message: &str) {
    let (ok, _, report) = run(bin, args, env);
    assert!(!ok, "{report}");
    assert!(report.contains(message), "{report}");
    assert!(!report.contains("panicked"), "{report}");
}

// docs/benchmarks.md, "Running it", "Operations (issue 4)", "History pages (issue 6)" and
// "Issue 21, item 3": the core table, the operations (tx/3 with its storage floor) and the
// history pages, in one run of the command.
#[test]
fn the_bench_command_runs_its_three_sections_and_cleans_up() {
    let out = std::env::temp_dir().join(format!("patchdiff-bench-{}.md", std::process::id()));
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-bench"),
        &[
            "--dsn",
            &dsn(),
            "--iterations",
            "2",
            "--large-iterations",
            "1",
            "--ops-iterations",
            "1",
            "--history-iterations",
            "1",
            "--replay-iterations",
            "1",
            "--history-scale",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    // The figures come with the settings that change them.
    assert!(
        stdout.lines().any(|l| l.starts_with("pg_patchdiff ")
            && l.contains(" on PostgreSQL 15.")
            && l.contains(", shared_preload_libraries = '")),
        "{stdout}"
    );
    let md = std::fs::read_to_string(&out).expect("the --out file");
    let _ = std::fs::remove_file(&out);

    assert_eq!(
        labels(&md, "| benchmark | n | client median ms", &[1, 2, 3, 4, 5]),
        [
            "SELECT 1",
            "UPDATE 64 KiB text row",
            "UPDATE 1 MiB text row",
            "submit_edits, 1 edit, 64 KiB",
            "submit_edits, 1 edit, 1 MiB",
            "SQL count of a word, 1 MiB",
            "find_occurrences, 1 MiB (333 occurrences, 200 returned)",
        ],
        "{md}"
    );

    let ops = labels(
        &md,
        "| benchmark | n | client median ms | client p95 ms",
        &[1, 2, 3, 4, 5],
    );
    let ops: Vec<&str> = ops.iter().map(String::as_str).collect();
    each_begins_a_line(
        &ops,
        &[
            "UPDATE 1 MiB text row",
            "submit_edits (tx/1), 1 edit, 1 MiB",
            "submit_operations (tx/2), 100 descending spans, 1 MiB",
            "submit_replacement (tx/3), 1 MiB by 1 MiB",
            "tx/3 storage floor (plain SQL: json input, INSERT, UPDATE), 1 MiB by 1 MiB",
            "submit_replacement (tx/3), 1,000,000 ASCII bytes",
            "tx/3 storage floor (plain SQL: json input, INSERT, UPDATE), 1,000,000 ASCII bytes",
        ],
    );
    let floors = table(&md, "| benchmark | tx/3 ms | floor ms");
    assert_eq!(floors.len(), 2, "{md}");
    labels_with_numbers(&floors, &[1, 2, 3, 4, 5]);

    let calls = labels(&md, "| call | history (1×)", &[3, 4, 6, 7]);
    for call in [
        "get_pdcp_log, limit 50",
        "get_manifest_ledger, limit 50",
        "replay",
    ] {
        assert!(calls.iter().any(|c| c == call), "{call}: {calls:?}");
    }
    // Its baseline tables and its timer function are dropped at the end.
    let made = [
        "patchdiff_bench_baseline",
        "patchdiff_bench_floor_log",
        "bench_timed_call",
    ];
    assert_eq!(left_behind(&made), Vec::<String>::new());
}

// docs/benchmarks.md, "The MCP front end": the same SQL call and tools/call interleaved, and
// the size of tools/list for every profile.
#[test]
fn the_mcp_bench_command_times_both_calls_and_sizes_every_profile() {
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-mcp-bench"),
        &with_db_and_mcp(&["--iterations", "2"]),
    );
    assert_eq!(
        labels(&stdout, "| call | SQL median ms", &[1, 2, 3, 4]),
        ["patchdiff_read_target", "patchdiff_submit_edits, 1 edit"]
    );
    assert_eq!(
        labels(&stdout, "| profile | tools |", &[1, 2, 3, 4]),
        [
            "full",
            "workspace",
            "editor",
            "observed_workspace",
            "observed_editor",
            "observed_v2"
        ]
    );
}

// docs/benchmarks.md, "Near misses (issue 5)": no database.
#[test]
fn the_near_miss_bench_command_times_every_corpus() {
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-near-miss-bench"),
        &["--queries", "2", "--iters", "1"],
    );
    let corpora = labels(&stdout, "| corpus | median (ms)", &[1, 2, 3]);
    assert_eq!(corpora.len(), 5, "{stdout}");
    assert!(corpora[0] == "varied prose" && corpora[1] == "repetitive structured logs");
}

// docs/benchmarks.md, "Drift evidence (issue 17)": no database.
#[test]
fn the_block_near_miss_bench_command_times_every_corpus_and_block_shape() {
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-block-near-miss-bench"),
        &["--queries", "2", "--iters", "1"],
    );
    let corpora = labels(&stdout, "| corpus | MATCH block |", &[2, 3]);
    assert!(corpora.len() >= 12, "{stdout}");
    for corpus in ["Rust source", "Python source", "repetitive source"] {
        assert_eq!(
            corpora.iter().filter(|c| *c == corpus).count(),
            2,
            "{stdout}"
        );
    }
}

// docs/benchmarks.md, "Structural observation (issue 8)" and "Issue 21, item 2": the bundle
// right after each commit is checked, in the command, to equal a fresh backend's.
#[test]
fn the_structural_bench_command_times_every_call_and_checks_the_reparse() {
    let bin = env!("CARGO_BIN_EXE_patchdiff-structural-bench");
    let stdout = succeeds(bin, &["--dsn", &dsn(), "--iterations", "2"]);
    assert_eq!(
        labels(&stdout, "| call | server median ms", &[1, 2, 3, 4, 5]),
        [
            "read_target 4,000 code points (floor)",
            "list candidates (query)",
            "observe a bundle of 32 scopes",
            "commit a 32-group batch",
            "bundle of 32 scopes right after a 32-group commit (new version)",
            "the same bundle in a fresh backend (cold: full parse)",
        ]
    );
    assert!(
        stdout.contains("\ncold call (first outline of a version"),
        "{stdout}"
    );
    assert_eq!(
        left_behind(&["patchdiff_structural_bench_timer"]),
        Vec::<String>::new()
    );
    // One iteration has no commit before its bundle, so the row after a commit would be empty.
    refuses(
        bin,
        &["--dsn", &dsn(), "--iterations", "1"],
        "--iterations must be at least 2",
    );
}

// docs/benchmarks.md, "Issue 19: change feed" and "subscriptions over HTTP": the
// notification's delay in both eras, the announcement's cost, and over HTTP with a fan-out.
#[test]
fn the_feed_bench_command_times_both_eras_and_http() {
    let bin = env!("CARGO_BIN_EXE_patchdiff-feed-bench");
    let stdout = succeeds(bin, &with_db_and_mcp(&["--iterations", "2"]));
    each_begins_a_line(
        &stdout.lines().collect::<Vec<_>>(),
        &[
            "one-edit submit, 64 KiB, autocommit, notify off ",
            "one-edit submit, 64 KiB, autocommit, notify listened, a listener registered ",
            "2025-11-25 resources/subscribe: submit start -> notification ",
            "2026-07-28 subscriptions/listen: submit returned -> notification ",
        ],
    );
    let stdout = succeeds(
        bin,
        &with_db_and_mcp(&["--iterations", "2", "--http", "--fanout", "2"]),
    );
    each_begins_a_line(
        &stdout.lines().collect::<Vec<_>>(),
        &[
            "round 2, stdio listen: submit start -> notification ",
            "round 2, HTTP SSE listen: submit returned -> notification ",
            "HTTP SSE, 2 streams: submit start -> the last one's ",
        ],
    );
}

// docs/http.md and docs/benchmarks.md, "Issue 18": latency over HTTP against SQL, and
// concurrent sessions over both, where every call must be answered without an error.
#[test]
fn the_http_bench_command_times_calls_and_loads_both_transports_without_error() {
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-http-bench"),
        &with_db_and_mcp(&[
            "--iterations",
            "2",
            "--sessions",
            "2",
            "--seconds",
            "1",
            "--connections",
            "2",
        ]),
    );
    assert_eq!(
        labels(&stdout, "| call | SQL median |", &[1, 2, 3, 4, 5]),
        [
            "read_target, 4,000 code points",
            "one-edit submission (accepted)"
        ]
    );
    let load = table(&stdout, "| over | calls answered | errors |");
    assert_eq!(load.len(), 2, "{stdout}");
    for row in &load {
        assert!(number(&row[1]) > 0.0, "{stdout}");
        assert_eq!(row[2], "0", "errors under load: {stdout}");
    }
}

// docs/scale-out.md and docs/benchmarks.md, "Issue 20": the same calls on the shard and
// through the PL/Proxy router.
#[test]
fn the_router_bench_command_times_calls_on_the_shard_and_through_the_router() {
    let router = std::env::var("PATCHDIFF_ROUTER_DSN").expect(
        "PATCHDIFF_ROUTER_DSN must name the router (bash scripts/shards.sh up 2 prints it)",
    );
    let stdout = succeeds(
        env!("CARGO_BIN_EXE_patchdiff-router-bench"),
        &[
            "--router",
            &router,
            "--iterations",
            "2",
            "--escape-kib",
            "16",
            "--escape-iterations",
            "1",
        ],
    );
    assert_eq!(
        labels(&stdout, "| call | direct median ms", &[1, 2, 3, 4, 5, 6]),
        [
            "read_target, 4,000 code points",
            "one-edit submission (accepted)"
        ]
    );
    // docs/benchmarks.md, "The router's copy of the arguments".
    assert_eq!(
        labels(&stdout, "| arguments | router median ms", &[1, 2, 3]),
        [
            r"\u0000",
            r"\ud83d\ude00 (emoji, escaped)",
            r"\ud55c (Hangul, escaped)",
            r"\\ud8 (near misses)",
            "prose"
        ]
    );
}

/// Every command refuses a count of zero (and one it cannot read) before it connects.
// docs/benchmarks.md, "Listing among another tenant's targets": scripts/bench/list_targets.sh
// prints the median of each of its six listings, drops its database and roles, and refuses a
// count of zero.
#[test]
fn the_list_targets_script_times_every_listing_and_cleans_up() {
    let dsn = dsn();
    let port = dsn
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("port="))
        .expect("PATCHDIFF_TEST_DSN names its port (host=... port=...)")
        .to_owned();
    let script = format!(
        "{}/../scripts/bench/list_targets.sh",
        env!("CARGO_MANIFEST_DIR")
    );
    let env = [("PATCHDIFF_BENCH_PORT", port.as_str())];
    let out = succeeds_with("bash", &[script.as_str(), "30", "3"], &env);
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(" | ")).collect();
    let labels: Vec<&str> = rows
        .iter()
        .map(|l| {
            let (label, ms) = l.split_once(" | ").unwrap();
            assert!(number(ms) >= 0.0, "{out}");
            label
        })
        .collect();
    assert_eq!(
        labels,
        [
            "small: first page",
            "small: prefix matching all of big's names",
            "small: prefix matching none",
            "big: first page",
            "big: a page 30 rows in",
            "superuser: first page",
        ],
        "{out}"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let left: i64 = runtime.block_on(async {
        let client = patchdiff_tests::connect(&dsn).await.expect("connecting");
        client
            .query_one(
                "SELECT (SELECT count(*) FROM pg_database WHERE datname = 'listbench') \
                      + (SELECT count(*) FROM pg_roles WHERE rolname IN ('listbench_big', 'listbench_small'))",
                &[],
            )
            .await
            .expect("looking for what the script left")
            .get(0)
    });
    assert_eq!(left, 0, "the script left its database or roles behind");
    refuses_with(
        "bash",
        &[script.as_str(), "30", "0"],
        &env,
        "must be whole numbers of at least 1",
    );
}

#[test]
fn every_bench_command_refuses_a_count_of_zero() {
    let db = dsn();
    refuses(
        env!("CARGO_BIN_EXE_patchdiff-near-miss-bench"),
        &["--queries", "0"],
        "--queries must be a whole number of at least 1, not \"0\"",
    );
    refuses(
        env!("CARGO_BIN_EXE_patchdiff-block-near-miss-bench"),
        &["--iters", "x"],
        "--iters must be a whole number of at least 1, not \"x\"",
    );
    refuses(
        env!("CARGO_BIN_EXE_patchdiff-bench"),
        &["--dsn", &db, "--only", "core", "--iterations", "0"],
        "iterations must be at least 1",
    );
    let zero =
        |option: &str| format!("{option} must be a whole number of at least 1, not \\\"0\\\"");
    let (mcp, feed, http) = (
        env!("CARGO_BIN_EXE_patchdiff-mcp-bench"),
        env!("CARGO_BIN_EXE_patchdiff-feed-bench"),
        env!("CARGO_BIN_EXE_patchdiff-http-bench"),
    );
    for (bin, option) in [
        (mcp, "--iterations"),
        (feed, "--iterations"),
        (feed, "--fanout"),
        (http, "--iterations"),
        (http, "--sessions"),
        (http, "--seconds"),
        (http, "--connections"),
    ] {
        refuses(bin, &with_db_and_mcp(&[option, "0"]), &zero(option));
    }
    refuses(
        env!("CARGO_BIN_EXE_patchdiff-structural-bench"),
        &["--dsn", &db, "--iterations", "0"],
        &zero("--iterations"),
    );
    refuses(
        env!("CARGO_BIN_EXE_patchdiff-router-bench"),
        &["--router", &db, "--iterations", "0"],
        &zero("--iterations"),
    );
}

// docs/benchmarks.md, "Hostile shapes (issue 14)": each worst shape at the documented caps next
// to a plain call on the same text. The example asserts on the way that the overlapping search
// finds all of its matches and that the 10,000-span preview is accepted.
#[test]
fn the_hostile_bench_example_times_every_shape() {
    let stdout = succeeds_with(
        &example("hostile_bench"),
        &[] as &[&str],
        &[("HOSTILE_BENCH_RUNS", "1")],
    );
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains(" hostile ")).collect();
    each_begins_a_line(
        &rows,
        &[
            "find_occurrences a*128K in a*256K ",
            "tx/1 10,000 one-char edits, 100K text ",
            "replay of that tx/1 attempt ",
            "tx/2 10,000 spans ascending, 200K text ",
            "tx/2 10,000 spans descending, 200K text ",
            "replay of the ascending tx/2 attempt ",
            "preview 10,000 spans, 200K text ",
            "tx/1 consumed match after 10,000 edits, 100K ",
        ],
    );
    assert_eq!(rows.len(), 8, "{stdout}");
    for row in rows {
        // `hostile N ms   plain N ms   ratio N   before N ms`
        let words: Vec<&str> = row.split_whitespace().collect();
        for label in ["hostile", "plain", "ratio", "before"] {
            let at = words.iter().position(|w| *w == label).expect(label);
            assert!(number(words[at + 1]) >= 0.0, "{label} in {row}");
        }
    }
}

// docs/benchmarks.md, "Structural observation (issue 8)": an outline of about 1 MiB in each of
// the eight languages, with no parse error in any of the generated texts.
#[test]
fn the_outline_bench_example_outlines_every_language() {
    let stdout = succeeds_with(
        &example("outline_bench"),
        &[] as &[&str],
        &[("OUTLINE_BENCH_RUNS", "1")],
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let languages: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(
        languages,
        [
            "python",
            "typescript",
            "json",
            "markdown",
            "yaml",
            "toml",
            "shell",
            "javascript"
        ],
        "{stdout}"
    );
    for r in &rows {
        // language, bytes, lines, symbols, errors, outline ms, "ms", parse ms, "ms"
        assert!(number(r[1]) >= 1_048_576.0 && number(r[3]) > 0.0, "{r:?}");
        assert_eq!(r[4], "false", "{r:?}");
        assert!(number(r[5]) > 0.0 && number(r[7]) > 0.0, "{r:?}");
    }
    // One language, as the argument names it.
    let stdout = succeeds_with(
        &example("outline_bench"),
        &["toml"],
        &[("OUTLINE_BENCH_RUNS", "1")],
    );
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("toml ")),
        "{stdout}"
    );
}

// docs/benchmarks.md, "Issue 21, item 2": the outline after a 32-group commit, made from the
// kept tree; the example asserts in each round that it equals a fresh outline.
#[test]
fn the_incremental_bench_example_checks_the_incremental_outline() {
    let stdout = succeeds(&example("incremental_bench"), &["1"]);
    assert_eq!(
        labels(&stdout, "| outline of 1 MiB after a 32-group commit", &[1]),
        [
            "fresh parse + outline (today)",
            "incremental (diff + edit + reparse + outline)",
            "- diff of the two texts",
            "- Tree::edit x 32",
            "- reparse with the edited tree",
        ]
    );
    each_begins_a_line(
        &stdout.lines().collect::<Vec<_>>(),
        &[
            "ratio fresh / incremental: ",
            "reparse after 32 changes clustered at the start: ",
            "reparse with no change at all: ",
        ],
    );
}

// docs/reliability.md, "Hostile input" (issue 14): each shape through the parser helper, its
// answer and peak memory. The 509-byte YAML that once took PostgreSQL down ends only the
// helper; every other shape is answered.
#[test]
fn the_helper_bench_example_answers_every_shape_in_the_helper() {
    let stdout = succeeds_with(
        &example("helper_bench"),
        &[parser_helper()],
        &[("HELPER_BENCH_RUNS", "1")],
    );
    let rows: Vec<&str> = stdout
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert_eq!(rows.len(), 11, "{stdout}");
    // docs/structural.md, "yaml": a text past line 32,768 has no symbols (helper-98, helper-104).
    for (shape, answer) in [
        ("yaml 40,001 lines under one key", " 0 symbols "),
        ("yaml 40,000 documents '---' + 'a: 1'", " 0 symbols "),
    ] {
        let row = rows.iter().find(|r| r.starts_with(shape)).expect(shape);
        assert!(row.contains(answer), "{row}");
    }
    for row in &rows {
        let died = row.contains("helper died");
        assert_eq!(
            died,
            row.starts_with("yaml '- ' x254 + 'x' (509 bytes)"),
            "{row}"
        );
        assert!(
            died || row.contains(" symbols ") || row.contains(" parser_limit "),
            "{row}"
        );
        assert!(
            number(row.split_whitespace().last().unwrap()) > 0.0,
            "{row}"
        );
    }
    assert!(
        stdout.contains("\ncold 1 MiB python outline, median of 1: helper "),
        "{stdout}"
    );
}

// docs/benchmarks.md, "Workspace publication (issue 7)": a publishing save over real stdio next
// to write + rename; every call in it must be accepted or saved.
#[test]
fn the_workspace_bench_example_times_a_publishing_save() {
    let stdout = succeeds_with(
        &example("workspace_bench"),
        &["1"],
        &[
            ("PATCHDIFF_TEST_DSN", &dsn()),
            ("PATCHDIFF_MCP_BIN", &mcp_bin()),
        ],
    );
    assert_eq!(
        table(&stdout, "| measure | median |")
            .iter()
            .map(|r| r[0].as_str())
            .collect::<Vec<_>>(),
        [
            "write + fsync + rename + fsync dir",
            "publishing SAVE (sync_workspace)",
            "import + edit + publishing SAVE",
        ],
        "{stdout}"
    );
}

/// Every example refuses a count of zero, one it cannot read, and a language or program that
/// is not there, with a message instead of a panic.
#[test]
fn every_bench_example_refuses_what_it_cannot_run() {
    let none: &[&str] = &[];
    let zero = |option: &str| format!("{option} must be a whole number of at least 1, not \"0\"");
    for (name, variable) in [
        ("hostile_bench", "HOSTILE_BENCH_RUNS"),
        ("outline_bench", "OUTLINE_BENCH_RUNS"),
        ("helper_bench", "HELPER_BENCH_RUNS"),
    ] {
        refuses_with(&example(name), none, &[(variable, "0")], &zero(variable));
    }
    refuses_with(
        &example("hostile_bench"),
        none,
        &[("HOSTILE_BENCH_RUNS", "five")],
        "HOSTILE_BENCH_RUNS must be a whole number of at least 1, not \"five\"",
    );
    refuses(&example("incremental_bench"), &["0"], &zero("iterations"));
    refuses(&example("workspace_bench"), &["0"], &zero("rounds"));
    refuses(
        &example("outline_bench"),
        &["rust"],
        "no language \"rust\": one of python, typescript",
    );
    refuses(
        &example("helper_bench"),
        &["/nonexistent/helper"],
        "the helper \"/nonexistent/helper\" does not start",
    );
    refuses_with(
        &example("workspace_bench"),
        &["1"],
        &[
            ("PATCHDIFF_TEST_DSN", "host=/nonexistent"),
            ("PATCHDIFF_MCP_BIN", "/nonexistent/mcp"),
        ],
        "the server \"/nonexistent/mcp\" does not start",
    );
}
