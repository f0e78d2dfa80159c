//! The parser helper on the shapes of issue 14 and on a plain 1 MiB file: for each, the answer,
//! the helper's peak resident memory (VmHWM) next to the input's size, and the time; then a cold
//! 1 MiB outline through a fresh helper next to the same outline made in this process (what the
//! extension did before parsing moved out of the backend).
//!
//!     cargo build --release -p patchdiff-waymark --bin patchdiff-waymark-helper --example helper_bench
//!     target/release/examples/helper_bench target/release/patchdiff-waymark-helper
//!
//! `HELPER_BENCH_RUNS` (default 7) sets the rounds of the cold outline; a count below 1, or a
//! helper that does not start, is refused (exit 2).

mod common;

use patchdiff_engine::api::scope::{Language, wire};
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn start(helper: &str) -> Child {
    Command::new(helper)
        .args([
            "--memory-bytes",
            &(1u64 << 30).to_string(),
            "--cpu-seconds",
            "60",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            eprintln!("the helper {helper:?} does not start: {e}");
            std::process::exit(2)
        })
}

/// One request: the answer's label and the time.
fn ask(h: &mut Child, language: Language, text: &str) -> (String, Duration) {
    let t = Instant::now();
    let stdin = h.stdin.as_mut().unwrap();
    if stdin.write_all(&wire::request(language, text)).is_err() {
        return ("helper died".into(), t.elapsed());
    }
    let _ = stdin.flush();
    let out = h.stdout.as_mut().unwrap();
    let mut len = [0u8; 8];
    if out.read_exact(&mut len).is_err() {
        let status = h.wait().unwrap();
        return (format!("helper died ({status})"), t.elapsed());
    }
    let mut body = vec![0u8; u64::from_le_bytes(len) as usize];
    out.read_exact(&mut body).unwrap();
    let label = match wire::decode(language, &body) {
        Ok(Ok(o)) => format!("{} symbols", o.symbols.len()),
        Ok(Err(l)) => format!("parser_limit {}", l.label()),
        Err(e) => format!("malformed: {e}"),
    };
    (label, t.elapsed())
}

fn peak(h: &Child) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{}/status", h.id())).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<usize>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn python_1mib() -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 1 << 20 {
        s.push_str(&format!(
            "class Handler{i}:\n    def handle(self, event):\n        total = event.value + {i}\n        return total\n\n\ndef helper_{i}(x):\n    return x * {i}\n\n\n"
        ));
        i += 1;
    }
    s
}

fn main() {
    let helper = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/patchdiff-waymark-helper".into());
    let rounds = common::count_from_env("HELPER_BENCH_RUNS", 7);
    let key = |n: usize| "k".repeat(n);
    let shapes: Vec<(&str, Language, String)> = vec![
        (
            "json {\"<256 KiB key>\": [[] x1000]}",
            Language::Json,
            format!("{{\"{}\": [{}[]]}}", key(256 << 10), "[], ".repeat(1000)),
        ),
        (
            "json {\"<512 KiB key>\": [[] x1000]}",
            Language::Json,
            format!("{{\"{}\": [{}[]]}}", key(512 << 10), "[], ".repeat(1000)),
        ),
        (
            "json {\"<1 MiB key>\": [[] x1000]}",
            Language::Json,
            format!("{{\"{}\": [{}[]]}}", key(1 << 20), "[], ".repeat(1000)),
        ),
        (
            "json 350,000 empty arrays",
            Language::Json,
            format!("{{\"k\": [{}[]]}}", "[],".repeat(350_000)),
        ),
        (
            "yaml '- ' x254 + 'x' (509 bytes)",
            Language::Yaml,
            format!("{}x", "- ".repeat(254)),
        ),
        (
            "yaml 1 MiB of '- a'",
            Language::Yaml,
            "- a\n".repeat(1 << 18),
        ),
        (
            "yaml 256 Ki nested flow '[' (512 KiB)",
            Language::Yaml,
            format!("{}{}", "[".repeat(1 << 18), "]".repeat(1 << 18)),
        ),
        (
            "yaml 40,000 documents '---' (160 KB)",
            Language::Yaml,
            "---\n".repeat(40_000),
        ),
        (
            "yaml 40,000 documents '---' + 'a: 1'",
            Language::Yaml,
            "---\na: 1\n".repeat(40_000),
        ),
        (
            "yaml 40,001 lines under one key",
            Language::Yaml,
            format!(
                "top:\n{}",
                (0..40_000)
                    .map(|i| format!("  k{i}: 1\n"))
                    .collect::<String>()
            ),
        ),
        (
            "python 1 MiB (benchmark module)",
            Language::Python,
            python_1mib(),
        ),
    ];
    println!(
        "{:<40} {:>10} {:>24} {:>12} {:>8} {:>10}",
        "shape", "input", "answer", "peak", "x input", "ms"
    );
    for (name, language, text) in &shapes {
        let mut h = start(&helper);
        let (label, took) = ask(&mut h, *language, text);
        let p = peak(&h);
        println!(
            "{:<40} {:>10} {:>24} {:>12} {:>8.1} {:>10.1}",
            name,
            text.len(),
            label,
            p,
            p as f64 / text.len() as f64,
            took.as_secs_f64() * 1e3
        );
    }
    // Cold outline of 1 MiB: a fresh helper (start-up included) against this process.
    let text = python_1mib();
    let mut through = Vec::new();
    let mut inside = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        let mut h = start(&helper);
        let _ = ask(&mut h, Language::Python, &text);
        through.push(t.elapsed());
        let t = Instant::now();
        let o = patchdiff_waymark::outline(Language::Python, &text).expect("under the caps");
        inside.push(t.elapsed());
        drop(o);
    }
    through.sort();
    inside.sort();
    let (a, b) = (
        through[rounds / 2].as_secs_f64() * 1e3,
        inside[rounds / 2].as_secs_f64() * 1e3,
    );
    println!(
        "\ncold 1 MiB python outline, median of {rounds}: helper {a:.1} ms (start-up included), in process {b:.1} ms, ratio {:.2}",
        a / b
    );
}
