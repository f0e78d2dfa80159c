//! Measures the workspace profile (issue 7, "Measured"): the median publishing SAVE of a 64 KiB
//! file and the median whole import-edit-save loop over real stdio, next to a plain `write` +
//! `rename` (+ fsync of file and directory) of the same bytes in the same run, with the ratio.
//!
//! ```text
//! cargo build --release -p patchdiff-mcp --examples
//! PATCHDIFF_TEST_DSN="host=127.0.0.1 port=54347 user=postgres dbname=patchdiff_test" \
//!   target/release/examples/workspace_bench [rounds]
//! ```
//! The server binary is `PATCHDIFF_MCP_BIN` (default `target/release/patchdiff-mcp`). A count of
//! rounds below 1, or a server that does not start, is refused (exit 2).

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

struct Mcp {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    id: i64,
}

impl Mcp {
    fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.id += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments}});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        let mut reply = String::new();
        self.stdout.read_line(&mut reply).unwrap();
        let r: Value = serde_json::from_str(&reply).unwrap();
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A 64 KiB text of 1,024 numbered lines of 64 bytes.
fn document() -> String {
    (0..1024)
        .map(|i| format!("line {i:05} {}\n", "x".repeat(52)))
        .collect()
}

fn plain_write_rename(dir: &std::path::Path, bytes: &[u8]) -> Duration {
    let t = Instant::now();
    let tmp = dir.join(".plain.tmp");
    let mut f = std::fs::File::create(&tmp).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(&tmp, dir.join("plain.txt")).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
    t.elapsed()
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(51, |a| {
        a.parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
            eprintln!("rounds must be a whole number of at least 1, not {a:?}");
            std::process::exit(2)
        })
    });
    let dsn = std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN");
    let bin = std::env::var("PATCHDIFF_MCP_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/release/patchdiff-mcp"
        )
        .to_owned()
    });
    let root = std::env::temp_dir().join(format!("pd-ws-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let mut child = Command::new(&bin)
        .env("PATCHDIFF_DATABASE_URL", dsn)
        .env("PATCHDIFF_MCP_PROFILE", "workspace")
        .env("PATCHDIFF_WORKSPACE_ROOT", &root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("the server {bin:?} does not start: {e}");
            let _ = std::fs::remove_dir_all(&root);
            std::process::exit(2)
        });
    let mut m = Mcp {
        stdin: child.stdin.take().unwrap(),
        stdout: BufReader::new(child.stdout.take().unwrap()),
        child,
        id: 0,
    };
    let doc = document();
    let (mut save, mut whole, mut plain) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        let file = format!("f{round}.txt");
        std::fs::write(root.join(&file), &doc).unwrap();
        let start = Instant::now();
        let t = m.call(
            "patchdiff_initialize_target",
            json!({"filename": file, "from_workspace": true}),
        );
        let target = t["target_file_id"].as_str().unwrap().to_owned();
        let e = m.call(
            "patchdiff_submit_edits",
            json!({"target_file_id": target, "expected_target_version": 0,
            "intent": "bench", "edits": [{"match": "line 00512", "replace": "LINE 00512"}]}),
        );
        assert_eq!(e["status"], "accepted", "{e}");
        let s0 = Instant::now();
        let s = m.call(
            "patchdiff_save",
            json!({"target_file_id": target, "sync_workspace": true}),
        );
        let end = Instant::now();
        assert_eq!(s["status"], "saved", "{s}");
        save.push(end - s0);
        whole.push(end - start);
        plain.push(plain_write_rename(&root, doc.as_bytes()));
    }
    let (s, w, p) = (median(save), median(whole), median(plain));
    println!("workspace publication, 64 KiB file, {rounds} rounds (medians)");
    println!("| measure | median | ratio to write+rename |");
    println!("|---|---|---|");
    let ratio = |d: Duration| d.as_secs_f64() / p.as_secs_f64();
    println!("| write + fsync + rename + fsync dir | {p:?} | 1.0 |");
    println!(
        "| publishing SAVE (sync_workspace) | {s:?} | {:.1} |",
        ratio(s)
    );
    println!(
        "| import + edit + publishing SAVE | {w:?} | {:.1} |",
        ratio(w)
    );
    let _ = m.child.kill();
    let _ = std::fs::remove_dir_all(&root);
}
