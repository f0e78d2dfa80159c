//! patchdiff-block-near-miss-bench: times the drift evidence of a `match_absent` rejection
//! (issue 17: whitespace-insensitive candidates and the block near miss,
//! `patchdiff_engine::api::drift::attach`, JSON and byte budget included) on 65,536-code-point
//! buffers of source code and of adversarial line shapes, with MATCH blocks of 10-40 lines
//! (and blocks of about 4,096 code points) taken from the buffer, re-indented, and given one
//! changed line, so that the whitespace search finds nothing and the block search runs every
//! time. Prints a markdown
//! table of median and p95 per corpus and query shape against the goal (< 2 ms median),
//! and how often the region returned was exactly the block the query was made from (without
//! blank lines at its ends, which a region never includes).
//!
//! A benchmark command, not a test: `cargo run --release -p patchdiff-tests --bin
//! patchdiff-block-near-miss-bench [-- --queries N --iters N]`.

use patchdiff_engine::api::drift::attach;
use patchdiff_tests::bench::{XorShift as Rng, arg, percentile};
use serde_json::{Value, json};
use std::hint::black_box;
use std::time::Instant;

const CHARS: usize = 65_536;
const GOAL_MS: f64 = 2.0;

const NAMES: &[&str] = &[
    "buffer", "count", "offset", "target", "record", "window", "limit", "cursor", "result",
    "config", "handle", "stream", "parser", "token", "entry", "index", "value", "state",
];

fn name(r: &mut Rng) -> String {
    format!("{}_{}", NAMES[r.below(NAMES.len())], r.below(1000))
}

/// Rust-like source: functions of 4-space-indented statements.
fn rust(r: &mut Rng) -> String {
    let mut s = String::new();
    while s.chars().count() < CHARS {
        s.push_str(&format!("fn {}(input: &str) -> usize {{\n", name(r)));
        for _ in 0..3 + r.below(12) {
            match r.below(4) {
                0 => s.push_str(&format!(
                    "    let {} = {}.len() + {};\n",
                    name(r),
                    name(r),
                    r.below(100)
                )),
                1 => s.push_str(&format!(
                    "    if {} > {} {{\n        return {};\n    }}\n",
                    name(r),
                    r.below(50),
                    name(r)
                )),
                2 => s.push_str(&format!("    {}.push({});\n", name(r), name(r))),
                _ => s.push_str(&format!("    // {} {}\n", name(r), name(r))),
            }
        }
        s.push_str("    0\n}\n\n");
    }
    s.chars().take(CHARS).collect()
}

/// Python-like source: classes of methods, 4 spaces per level.
fn python(r: &mut Rng) -> String {
    let mut s = String::new();
    while s.chars().count() < CHARS {
        s.push_str(&format!("class C{}:\n", r.below(100_000)));
        for _ in 0..2 + r.below(4) {
            s.push_str(&format!("    def {}(self, {}):\n", name(r), name(r)));
            for _ in 0..2 + r.below(8) {
                match r.below(3) {
                    0 => s.push_str(&format!(
                        "        {} = self.{}({})\n",
                        name(r),
                        name(r),
                        r.below(100)
                    )),
                    1 => s.push_str(&format!(
                        "        if {}:\n            return {}\n",
                        name(r),
                        name(r)
                    )),
                    _ => s.push_str(&format!("        self.{}.append({})\n", name(r), name(r))),
                }
            }
            s.push('\n');
        }
    }
    s.chars().take(CHARS).collect()
}

/// The same 12-line function over and over with one number changing: every line but one is
/// common, so anchors come from the least common lines.
fn repetitive(r: &mut Rng) -> String {
    let mut s = String::new();
    while s.chars().count() < CHARS {
        s.push_str(&format!(
            "fn handler() {{\n    let a = open();\n    let b = read(a);\n    if b.is_empty() {{\n        return;\n    }}\n    write(b, {});\n    close(a);\n    log();\n    flush();\n    done();\n}}\n",
            r.below(1_000_000)
        ));
    }
    s.chars().take(CHARS).collect()
}

/// A block of whole lines from `buf` of `lines` lines (or up to about `chars` code points),
/// and the query made from it: indentation removed one level, one line changed.
fn query(r: &mut Rng, buf: &str, lines: usize, chars: Option<usize>) -> (String, String) {
    let all: Vec<&str> = buf.lines().collect();
    let want = chars.map_or(lines, |c| c / 40);
    let start = r.below(all.len().saturating_sub(want + 2));
    let mut block: Vec<&str> = Vec::new();
    let mut size = 0;
    for l in &all[start..] {
        let n = l.chars().count() + 1;
        if chars.is_some_and(|c| size + n > c) || (chars.is_none() && block.len() == lines) {
            break;
        }
        size += n;
        block.push(l);
    }
    let original = block.join("\n");
    let changed = 1 + r.below(block.len().saturating_sub(2).max(1));
    let sent: Vec<String> = block
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let l = l.strip_prefix("    ").unwrap_or(l);
            if i == changed {
                format!("{l} // edited")
            } else {
                l.to_owned()
            }
        })
        .collect();
    (original, sent.join("\n"))
}

fn main() {
    let queries = arg("--queries", 50);
    let iters = arg("--iters", 9);
    let mut r = Rng(0x5DEE_CE66_D1CE_4E5B);
    let only = std::env::var("BENCH_ONLY").ok();
    let corpora: Vec<(&str, String)> = vec![
        ("Rust source", rust(&mut r)),
        ("Python source", python(&mut r)),
        ("repetitive source", repetitive(&mut r)),
        // The most lines a buffer can have, all alike.
        ("one-character lines (`x`)", "x\n".repeat(CHARS / 2)),
        // Many short lines, each occurring twice: the most anchors and alignment rows.
        (
            "short numbered lines (`0` to `9999`, twice)",
            (0..20_000)
                .map(|i| format!("{}\n", i % 10_000))
                .collect::<String>()
                .chars()
                .take(CHARS)
                .collect(),
        ),
        // Every line alike: no line can say where a block is (by design no region).
        (
            "homogeneous (every line `    x = 1;`)",
            "    x = 1;\n"
                .repeat(CHARS / 11 + 1)
                .chars()
                .take(CHARS)
                .collect(),
        ),
    ];
    println!(
        "drift evidence (whitespace candidates + block near miss) on {CHARS}-code-point buffers, \
         {queries} queries per row, {iters} runs per query\n"
    );
    println!("| corpus | MATCH block | median (ms) | p95 (ms) | goal (ms) | region = the block |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    for (label, buf) in &corpora {
        if only.as_deref().is_some_and(|o| !label.contains(o)) {
            continue;
        }
        assert_eq!(buf.chars().count(), CHARS);
        for (shape, lines, chars) in [
            ("10-40 lines, 1 changed, re-indented", 0usize, None),
            (
                "about 4,096 code points, 1 changed, re-indented",
                0,
                Some(4_000),
            ),
        ] {
            let mut times = Vec::new();
            let mut exact = 0;
            for _ in 0..queries {
                let n = if lines == 0 { 10 + r.below(31) } else { lines };
                let (original, sent) = query(&mut r, buf, n, chars);
                let mut per = Vec::new();
                let mut last = Value::Null;
                for _ in 0..iters {
                    let mut v = json!({"candidates": []});
                    let t = Instant::now();
                    attach(black_box(&mut v), black_box(buf), black_box(&sent), 0);
                    per.push(t.elapsed().as_secs_f64() * 1e3);
                    last = v;
                }
                per.sort_by(f64::total_cmp);
                times.push(percentile(&per, 0.5));
                let region = &last["block_near_miss"]["region"];
                let text = match (&region["text"], &region["lines"]) {
                    (Value::String(s), _) => Some(s.clone()),
                    (_, Value::Array(a)) => Some(
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("\n"),
                    ),
                    _ => None,
                };
                // A region is whole non-blank lines (with the last one's LF when the MATCH text
                // ends with a line break): blank lines at the block's ends are not part of it.
                let ends = |t: &str| t.trim_start_matches('\n').trim_end().to_owned();
                if text.as_deref().map(ends) == Some(ends(&original)) {
                    exact += 1;
                } else if std::env::var_os("BENCH_DEBUG").is_some() {
                    eprintln!("--- want\n{original:?}\n--- got\n{text:?}\n--- sent\n{sent:?}");
                }
            }
            times.sort_by(f64::total_cmp);
            let median = percentile(&times, 0.5);
            let over = if median < GOAL_MS { "" } else { " (over)" };
            println!(
                "| {label} | {shape} | {median:.3}{over} | {:.3} | < {GOAL_MS} | {exact} / {queries} |",
                percentile(&times, 0.95)
            );
        }
    }
}
