//! What the MCP front end adds to a call: the median stdio round trip of `patchdiff-mcp` next to
//! the same SQL function called directly on the same server, interleaved call by call, plus the
//! `tools/list` payload size of every profile.
//!
//! cargo run --release -p patchdiff-tests --bin patchdiff-mcp-bench -- --dsn 'host=... dbname=...' \
//!     --mcp-bin target/release/patchdiff-mcp [--iterations 400]

use patchdiff_engine::wire::ascii_len;
use patchdiff_tests::bench::count;
use patchdiff_tests::{call_sql, connect};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

type Err = Box<dyn std::error::Error>;

struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: u64,
}

impl Mcp {
    fn start(bin: &str, dsn: &str, profile: &str, revision: &str) -> Result<Mcp, Err> {
        let mut child = Command::new(bin)
            .env("PATCHDIFF_DATABASE_URL", dsn)
            .env("PATCHDIFF_MCP_PROFILE", profile)
            // The workspace profiles refuse to start without a root; listing needs no files.
            .env("PATCHDIFF_WORKSPACE_ROOT", std::env::temp_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut m = Mcp {
            child,
            stdin,
            stdout,
            id: 0,
        };
        m.request("initialize", json!({"protocolVersion": revision, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}))?;
        m.stdin
            .write_all(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n")?;
        Ok(m)
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, Err> {
        self.id += 1;
        let line = format!(
            "{}\n",
            json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        );
        self.stdin.write_all(line.as_bytes())?;
        self.stdin.flush()?;
        let mut reply = String::new();
        self.stdout.read_line(&mut reply)?;
        let v: Value = serde_json::from_str(&reply)?;
        Ok(v["result"].clone())
    }

    fn tool(&mut self, name: &str, arguments: &Value) -> Result<Value, Err> {
        let r = self.request("tools/call", json!({"name": name, "arguments": arguments}))?;
        Ok(serde_json::from_str(
            r["content"][0]["text"].as_str().ok_or("no text")?,
        )?)
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn median_p90(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[(v.len() * 9).div_ceil(10) - 1])
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Err> {
    let mut args = std::env::args().skip(1);
    let (mut dsn, mut bin, mut n) = (
        std::env::var("PATCHDIFF_TEST_DSN").unwrap_or_default(),
        String::from("target/release/patchdiff-mcp"),
        400usize,
    );
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dsn" => dsn = args.next().ok_or("--dsn needs a value")?,
            "--mcp-bin" => bin = args.next().ok_or("--mcp-bin needs a value")?,
            "--iterations" => n = count(&a, args.next())?,
            _ => return Err(format!("unknown option {a}; usage: patchdiff-mcp-bench --dsn CONNSTR [--mcp-bin PATH] [--iterations N]").into()),
        }
    }
    let sql = connect(&dsn).await?;
    let body: String = (0..152)
        .map(|i| format!("line {i:05} marker-{i:05} ok\n"))
        .collect(); // 4,104 bytes
    let init: String = sql
        .query_one(
            &call_sql("patchdiff_initialize_target"),
            &[&json!({"filename": "mcp-bench.txt", "content": body}).to_string()],
        )
        .await?
        .get(0);
    let target = serde_json::from_str::<Value>(&init)?["target_file_id"]
        .as_str()
        .ok_or("no target")?
        .to_owned();
    let read_stmt = sql.prepare(&call_sql("patchdiff_read_target")).await?;
    let submit_stmt = sql.prepare(&call_sql("patchdiff_submit_edits")).await?;
    let mut mcp = Mcp::start(&bin, &dsn, "full", "2025-11-25")?;

    let read_args = json!({"target_file_id": target, "start": 0, "length": 4000});
    let (mut sql_read, mut mcp_read, mut sql_submit, mut mcp_submit) =
        (vec![], vec![], vec![], vec![]);
    let mut version = 0i64;
    // Each submission swaps one marker's case, so every call is accepted and the size holds.
    let edit = |version: i64| {
        let k = (version as usize) % 128;
        let (from, to) = if (version as usize / 128).is_multiple_of(2) {
            (format!("marker-{k:05}"), format!("MARKER-{k:05}"))
        } else {
            (format!("MARKER-{k:05}"), format!("marker-{k:05}"))
        };
        json!({"target_file_id": target, "expected_target_version": version, "intent": "bench", "edits": [{"match": from, "replace": to}]})
    };
    for i in 0..n + 20 {
        let warm = i < 20;
        let t = Instant::now();
        let _: String = sql
            .query_one(&read_stmt, &[&read_args.to_string()])
            .await?
            .get(0);
        let a = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let r = mcp.tool("patchdiff_read_target", &read_args)?;
        let b = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(r["status"], "ok");
        let t = Instant::now();
        let s: String = sql
            .query_one(&submit_stmt, &[&edit(version).to_string()])
            .await?
            .get(0);
        let c = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(
            serde_json::from_str::<Value>(&s)?["status"],
            "accepted",
            "{s}"
        );
        version += 1;
        let t = Instant::now();
        let r = mcp.tool("patchdiff_submit_edits", &edit(version))?;
        let d = t.elapsed().as_secs_f64() * 1e3;
        assert_eq!(r["status"], "accepted", "{r}");
        version += 1;
        if !warm {
            sql_read.push(a);
            mcp_read.push(b);
            sql_submit.push(c);
            mcp_submit.push(d);
        }
    }
    println!(
        "patchdiff-mcp round trip vs the same SQL call, {n} interleaved calls each, 4 KiB target\n"
    );
    println!(
        "| call | SQL median ms | SQL p90 ms | MCP median ms | MCP p90 ms | added median ms | × SQL |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (name, s, m) in [
        ("patchdiff_read_target", sql_read, mcp_read),
        ("patchdiff_submit_edits, 1 edit", sql_submit, mcp_submit),
    ] {
        let ((sm, sp), (mm, mp)) = (median_p90(s), median_p90(m));
        println!(
            "| {name} | {sm:.3} | {sp:.3} | {mm:.3} | {mp:.3} | {:.3} | {:.2} |",
            mm - sm,
            mm / sm
        );
    }
    println!("\ntools/list payload, compact ASCII JSON bytes (budget 65,536; examples 8,192)\n");
    println!("| profile | tools | 2024-11-05 | 2025-11-25 | examples |");
    println!("|---|---|---|---|---|");
    for profile in [
        "full",
        "workspace",
        "editor",
        "observed_workspace",
        "observed_editor",
        "observed_v2",
    ] {
        let mut sizes = vec![];
        let mut tools = 0;
        let mut examples = 0;
        for revision in ["2024-11-05", "2025-11-25"] {
            let mut m = Mcp::start(&bin, &dsn, profile, revision)?;
            let list = m.request("tools/list", json!({}))?;
            sizes.push(ascii_len(&list));
            let arr = list["tools"].as_array().ok_or("no tools")?;
            tools = arr.len();
            let ex: serde_json::Map<String, Value> = arr
                .iter()
                .filter_map(|t| {
                    t["inputSchema"]
                        .get("examples")
                        .map(|e| (t["name"].as_str().unwrap_or("").to_owned(), e.clone()))
                })
                .collect();
            examples = ascii_len(&Value::Object(ex));
        }
        println!(
            "| {profile} | {tools} | {} | {} | {examples} |",
            sizes[0], sizes[1]
        );
    }
    Ok(())
}
