//! Issue 17, "Evidence an agent can act on": on a whitespace-drift miss, the `match_absent`
//! refusal carries the exact current text of the intended region with its code-point span
//! (`near_misses.whitespace_candidates`), and on a block with a changed line, the closest region
//! with its per-line differences (`near_misses.block_near_miss`). Real-world shapes, over SQL on
//! a real database and over the real `patchdiff-mcp` process on stdio.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and, for the stdio cases, `PATCHDIFF_MCP_BIN` (default target/debug).

use patchdiff_tests::stdio::{Pipes, mcp_bin};
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio_postgres::Client;

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN must be set")
}

async fn client() -> Client {
    connect(&dsn())
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN")
}

fn edit(target: &str, matched: &str, key: Option<&str>) -> Value {
    let mut v = json!({
        "target_file_id": target,
        "expected_target_version": 0,
        "intent": "Change the block",
        "edits": [{"match": matched, "replace": "changed"}],
    });
    if let Some(k) = key {
        v["client_request_id"] = json!(k);
    }
    v
}

/// The code-point span of the one occurrence of `region` in the canonical `content`.
fn span(content: &str, region: &str) -> (usize, usize) {
    let content = content.replace("\r\n", "\n");
    let mut it = content.match_indices(region);
    let (b, _) = it.next().expect("the region is in the content");
    assert!(it.next().is_none(), "the region is unique in the content");
    let start = content[..b].chars().count();
    (start, start + region.chars().count())
}

/// A region's text, whether it came as `text` or as `lines`.
fn region_text(r: &Value) -> String {
    match (&r["text"], &r["lines"]) {
        (Value::String(s), _) => s.clone(),
        (_, Value::Array(a)) => a
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => panic!("no text in {r}"),
    }
}

/// Asserts that `nm` has exactly one whitespace candidate, for `region` of `content`, with
/// `kinds`, and that the whole near-miss object stays within the contract's 8,192 bytes.
fn assert_candidate(nm: &Value, content: &str, region: &str, kinds: &[&str]) -> Value {
    assert!(
        patchdiff_engine::wire::ascii_len(nm) <= 8_192,
        "near_misses over budget"
    );
    let list = &nm["whitespace_candidates"]["candidates"];
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{nm}");
    let c = &list[0];
    assert_eq!(region_text(c), region, "{nm}");
    let (s, e) = span(content, region);
    assert_eq!((&c["start"], &c["end"]), (&json!(s), &json!(e)), "{c}");
    assert_eq!(c["kinds"], json!(kinds), "{c}");
    assert_eq!(
        nm["block_near_miss"],
        json!({"omission_reason": "whitespace_candidate_found"})
    );
    c.clone()
}

async fn rejected(c: &Client, name: &str, content: &str, matched: &str) -> Value {
    let t = initialize_target(c, name, content).await.unwrap();
    let r = call(c, "patchdiff_submit_edits", &edit(&t, matched, None))
        .await
        .unwrap();
    assert_eq!(r["failure_reason"], "match_absent", "{r}");
    r
}

const PYTHON: &str = "class Store:\n    def __init__(self):\n        self.items = []\n\n    def add(self, item):\n        if item is None:\n            raise ValueError(\"item\")\n        self.items.append(item)\n        return len(self.items)\n";

/// A Python method sent one level less indented: the whole method, indentation included, with
/// a uniform +4 delta.
#[tokio::test]
async fn python_block_sent_one_level_less_indented() {
    let c = client().await;
    let sent = "def add(self, item):\n    if item is None:\n        raise ValueError(\"item\")\n    self.items.append(item)\n    return len(self.items)";
    let r = rejected(&c, "store.py", PYTHON, sent).await;
    let region = "    def add(self, item):\n        if item is None:\n            raise ValueError(\"item\")\n        self.items.append(item)\n        return len(self.items)";
    let cand = assert_candidate(&r["near_misses"], PYTHON, region, &["indentation"]);
    assert_eq!(cand["indentation_delta"], 4);
    assert_eq!(
        (&cand["start_line"], &cand["end_line"]),
        (&json!(5), &json!(9))
    );
    // Additive: over 64 code points the contract's omission stays exactly as it was.
    assert_eq!(r["near_misses"]["omission_reason"], "match_too_large");
    assert_eq!(
        r["diagnostic"]["near_miss_query"],
        json!({"omission_reason": "match_too_large"})
    );
}

/// A Makefile recipe sent with spaces where the file has tabs.
#[tokio::test]
async fn makefile_recipe_sent_with_spaces() {
    let c = client().await;
    let mk = "CC ?= cc\n\napp: main.o util.o\n\t$(CC) -o app main.o util.o\n\tstrip app\n\nclean:\n\trm -f app *.o\n";
    let r = rejected(
        &c,
        "Makefile2",
        mk,
        "app: main.o util.o\n    $(CC) -o app main.o util.o\n    strip app",
    )
    .await;
    let cand = assert_candidate(
        &r["near_misses"],
        mk,
        "app: main.o util.o\n\t$(CC) -o app main.o util.o\n\tstrip app",
        &["tabs_spaces"],
    );
    assert_eq!(
        (&cand["indentation_delta"], &cand["tab_width"]),
        (&json!(0), &json!(4))
    );
}

/// Rust sent with tabs where the file has four spaces per level; a short line (under 64 code
/// points) gets the candidate next to the contract's near-miss list.
#[tokio::test]
async fn rust_sent_with_tabs() {
    let c = client().await;
    let rs = "impl Parser {\n    fn next(&mut self) -> Option<Token> {\n        let t = self.peek()?;\n        self.pos += 1;\n        Some(t)\n    }\n}\n";
    let r = rejected(
        &c,
        "parser.rs",
        rs,
        "\tfn next(&mut self) -> Option<Token> {\n\t\tlet t = self.peek()?;\n\t\tself.pos += 1;\n\t\tSome(t)\n\t}",
    )
    .await;
    let cand = assert_candidate(
        &r["near_misses"],
        rs,
        "    fn next(&mut self) -> Option<Token> {\n        let t = self.peek()?;\n        self.pos += 1;\n        Some(t)\n    }",
        &["tabs_spaces"],
    );
    assert_eq!(
        (&cand["indentation_delta"], &cand["tab_width"]),
        (&json!(0), &json!(4))
    );
    // One line, 27 code points: the Levenshtein list is computed too, and stays as it was.
    let r = rejected(&c, "parser2.rs", rs, "\t\tself.pos += 1;").await;
    let nm = &r["near_misses"];
    assert_eq!(nm["scan_source"], "failing_buffer");
    assert_candidate(nm, rs, "        self.pos += 1;", &["tabs_spaces"]);
}

/// YAML whose nested block was sent with two spaces where the file has four.
#[tokio::test]
async fn yaml_with_shifted_indentation() {
    let c = client().await;
    let yaml = "services:\n    web:\n        image: nginx:1.27\n        ports:\n            - \"80:80\"\n    db:\n        image: postgres:15\n";
    let r = rejected(
        &c,
        "compose.yaml",
        yaml,
        "  web:\n    image: nginx:1.27\n    ports:\n      - \"80:80\"",
    )
    .await;
    let cand = assert_candidate(
        &r["near_misses"],
        yaml,
        "    web:\n        image: nginx:1.27\n        ports:\n            - \"80:80\"",
        &["indentation"],
    );
    // 2 -> 4, 4 -> 8, 6 -> 12: not uniform, so no delta is claimed.
    assert_eq!(cand["indentation_delta"], Value::Null);
}

/// A CRLF batch file: uploaded and sent with CRLF (canonicalized to LF on both sides), the block
/// sent without its indentation; the span is in canonical (LF) coordinates.
#[tokio::test]
async fn crlf_batch_file() {
    let c = client().await;
    let bat = "@echo off\r\nif exist build (\r\n    rmdir /s /q build\r\n    echo cleaned\r\n)\r\nmkdir build\r\n";
    let r = rejected(
        &c,
        "build.bat",
        bat,
        "if exist build (\r\nrmdir /s /q build\r\necho cleaned\r\n)",
    )
    .await;
    assert_candidate(
        &r["near_misses"],
        bat,
        "if exist build (\n    rmdir /s /q build\n    echo cleaned\n)",
        &["indentation"],
    );
}

/// Trailing spaces in the file that the MATCH text lacks (and blank lines it dropped).
#[tokio::test]
async fn trailing_spaces_and_blank_lines() {
    let c = client().await;
    let md = "# Notes   \n\nFirst point.  \n\n\nSecond point.\n";
    let r = rejected(&c, "notes.md", md, "# Notes\nFirst point.\nSecond point.").await;
    assert_candidate(
        &r["near_misses"],
        md,
        "# Notes   \n\nFirst point.  \n\n\nSecond point.",
        &["trailing_space", "blank_lines"],
    );
}

fn module(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("    result_{i} = compute(table, {i}, \"entry number {i}\")\n"))
        .collect()
}

/// A 30-line block (over 1,024 code points) with one changed line and its indentation dropped:
/// no whitespace candidate, and the block near miss gives the exact current lines, the span and
/// the one changed line.
#[tokio::test]
async fn thirty_line_block_with_one_changed_line() {
    let c = client().await;
    let content = format!("def run(table):\n{}    return table\n", module(120));
    let region: String = module(120)
        .lines()
        .skip(40)
        .take(30)
        .collect::<Vec<_>>()
        .join("\n");
    let sent = region
        .lines()
        .map(|l| {
            l.trim_start()
                .replace("compute(table, 55,", "compute(table, 505,")
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(region.chars().count() > 1_024);
    let r = rejected(&c, "run.py", &content, &sent).await;
    let nm = &r["near_misses"];
    assert!(patchdiff_engine::wire::ascii_len(nm) <= 8_192);
    assert_eq!(nm["whitespace_candidates"]["candidates"], json!([]), "{nm}");
    let b = &nm["block_near_miss"]["region"];
    assert_eq!(b["text"], Value::Null, "over 1,024 code points: lines");
    assert_eq!(region_text(b), region);
    let (s, e) = span(&content, &region);
    assert_eq!((&b["start"], &b["end"]), (&json!(s), &json!(e)));
    assert_eq!((&b["start_line"], &b["end_line"]), (&json!(42), &json!(71)));
    assert_eq!(
        (&b["match_lines"], &b["equal_lines"], &b["changed_lines"]),
        (&json!(30), &json!(29), &json!(1))
    );
    assert_eq!(b["kinds"], json!(["indentation"]));
    assert_eq!(b["indentation_delta"], 4);
    assert_eq!(
        b["line_differences"],
        json!([{"kind": "changed", "match_line": 16, "line": 57,
                "expected": "result_55 = compute(table, 505, \"entry number 55\")",
                "current": "    result_55 = compute(table, 55, \"entry number 55\")",
                "truncated": false}])
    );
    assert!(nm["block_near_miss"]["comparison_cells"].as_u64().unwrap() > 0);

    // Preview: the same region, and its per-field limit (1,024 code points) cuts nothing.
    let t = initialize_target(&c, "run-preview.py", &content)
        .await
        .unwrap();
    let p = call(
        &c,
        "patchdiff_preview",
        &json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0,
                "intent": "x", "edits": [{"match": sent, "replace": "y"}]}),
    )
    .await
    .unwrap();
    assert_eq!(p["evidence_omissions"], json!([]), "{p}");
    assert_eq!(p["near_misses"]["block_near_miss"], nm["block_near_miss"]);
}

/// Preview returns the same members as a submission; exact recovery recomputes them over the
/// stored failure context when the MATCH text was stored (at most 64 code points), and names
/// `query_not_stored` when it was not.
#[tokio::test]
async fn preview_and_exact_recovery() {
    let c = client().await;
    let t = initialize_target(&c, "p.py", PYTHON).await.unwrap();
    let sent = "def add(self, item):\n    if item is None:";
    let p = call(
        &c,
        "patchdiff_preview",
        &json!({"target_file_id": t, "format": "patchdiff-tx/1", "expected_target_version": 0,
                "intent": "x", "edits": [{"match": sent, "replace": "y"}]}),
    )
    .await
    .unwrap();
    let region = "    def add(self, item):\n        if item is None:";
    assert_candidate(&p["near_misses"], PYTHON, region, &["indentation"]);
    let first = call(
        &c,
        "patchdiff_submit_edits",
        &edit(&t, sent, Some("drift-1")),
    )
    .await
    .unwrap();
    assert_candidate(&first["near_misses"], PYTHON, region, &["indentation"]);
    let again = call(
        &c,
        "patchdiff_submit_edits",
        &edit(&t, sent, Some("drift-1")),
    )
    .await
    .unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(
        again["near_misses"]["scan_source"],
        "stored_failure_context"
    );
    assert_candidate(&again["near_misses"], PYTHON, region, &["indentation"]);

    let long = "def add(self, item):\n    if item is None:\n        raise ValueError(\"item\")";
    let first = call(
        &c,
        "patchdiff_submit_edits",
        &edit(&t, long, Some("drift-2")),
    )
    .await
    .unwrap();
    assert_eq!(first["near_misses"]["omission_reason"], "match_too_large");
    assert_eq!(
        first["near_misses"]["whitespace_candidates"]["candidates"][0]["text"],
        "    def add(self, item):\n        if item is None:\n            raise ValueError(\"item\")"
    );
    let again = call(
        &c,
        "patchdiff_submit_edits",
        &edit(&t, long, Some("drift-2")),
    )
    .await
    .unwrap();
    assert_eq!(
        again["near_misses"],
        json!({"omission_reason": "match_too_large",
               "whitespace_candidates": {"omission_reason": "query_not_stored"},
               "block_near_miss": {"omission_reason": "query_not_stored"}})
    );
}

/// Inside a caller's transaction nothing is searched: the contract's omission stays as it was,
/// and over 64 code points the new members say why they are missing.
#[tokio::test]
async fn caller_transaction_searches_nothing() {
    let c = client().await;
    let t = initialize_target(&c, "tx.py", PYTHON).await.unwrap();
    let mut c = patchdiff_tests::caller_transaction_client(&dsn(), &t, c).await;
    let tx = c.transaction().await.unwrap();
    let short = call(
        &tx,
        "patchdiff_submit_edits",
        &edit(&t, "def add(self, item):\n  if", None),
    )
    .await
    .unwrap();
    let long = call(
        &tx,
        "patchdiff_submit_edits",
        &edit(
            &t,
            &format!("def add(self, item):\n{}", " ".repeat(70)),
            None,
        ),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        short["near_misses"],
        json!({"omission_reason": "caller_transaction"})
    );
    assert_eq!(
        long["near_misses"],
        json!({"omission_reason": "match_too_large",
               "whitespace_candidates": {"omission_reason": "caller_transaction"},
               "block_near_miss": {"omission_reason": "caller_transaction"}})
    );
}

/// Text that is really absent, even after normalization, gets no region.
#[tokio::test]
async fn absent_text_gets_no_region() {
    let c = client().await;
    let r = rejected(
        &c,
        "absent.py",
        PYTHON,
        "def remove(self, item):\n    self.items.remove(item)\n    return True",
    )
    .await;
    let nm = &r["near_misses"];
    assert_eq!(nm["whitespace_candidates"]["candidates"], json!([]));
    assert_eq!(nm["block_near_miss"]["region"], Value::Null, "{nm}");
}

const REPLY: Duration = Duration::from_secs(20);

fn mcp_call(p: &mut Pipes, id: i64, name: &str, arguments: Value) -> Value {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": {"name": name, "arguments": arguments}});
    p.send(format!("{msg}\n").as_bytes());
    let line = p.line(REPLY).expect("a reply");
    assert!(line.is_ascii());
    let r: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(r["id"], id, "{r}");
    serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
}

/// Over MCP stdio (the default profile): the Python and Makefile refusals carry the same exact
/// regions, in the submission's and the preview's tool results.
#[test]
fn over_mcp_stdio() {
    let mut cmd = Command::new(mcp_bin());
    cmd.env("PATCHDIFF_DATABASE_URL", dsn())
        .stderr(Stdio::null());
    let mut p = Pipes::spawn(cmd);
    p.send(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"drift\",\"version\":\"1\"}}}\n");
    p.line(REPLY).expect("initialize reply");
    p.send(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    let t = mcp_call(
        &mut p,
        1,
        "patchdiff_initialize_target",
        json!({"filename": "store.py", "content": PYTHON}),
    );
    let t = t["target_file_id"].as_str().unwrap().to_owned();
    let sent = "def add(self, item):\n    if item is None:\n        raise ValueError(\"item\")\n    self.items.append(item)";
    let region = "    def add(self, item):\n        if item is None:\n            raise ValueError(\"item\")\n        self.items.append(item)";
    let r = mcp_call(&mut p, 2, "patchdiff_submit_edits", edit(&t, sent, None));
    assert_eq!(r["failure_reason"], "match_absent", "{r}");
    let cand = assert_candidate(&r["near_misses"], PYTHON, region, &["indentation"]);
    assert_eq!(cand["indentation_delta"], 4);

    let mk = "app: main.o\n\t$(CC) -o app main.o\n\tstrip app\n";
    let m = mcp_call(
        &mut p,
        3,
        "patchdiff_initialize_target",
        json!({"filename": "Makefile", "content": mk}),
    );
    let m = m["target_file_id"].as_str().unwrap().to_owned();
    let r = mcp_call(
        &mut p,
        4,
        "patchdiff_preview",
        json!({"target_file_id": m, "format": "patchdiff-tx/1", "expected_target_version": 0,
               "intent": "x", "edits": [{"match": "app: main.o\n    $(CC) -o app main.o", "replace": "y"}]}),
    );
    assert_eq!(r["failure_reason"], "match_absent", "{r}");
    assert_candidate(
        &r["near_misses"],
        mk,
        "app: main.o\n\t$(CC) -o app main.o",
        &["tabs_spaces"],
    );
    p.kill();
}
