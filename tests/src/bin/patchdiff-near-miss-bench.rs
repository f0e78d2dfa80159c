//! patchdiff-near-miss-bench: times `patchdiff_engine::api::near_miss::search` on 65,536-code-point
//! buffers of four corpora (varied prose, repetitive structured logs, homogeneous text, a
//! periodic adversarial text) with queries of 20-64 code points taken from each buffer and given
//! 1-3 edits, and prints a markdown table of median and p95 per corpus against the goals and the
//! first implementation's figures (contract "Exact candidates, consumed matches and near
//! misses": 1.7 ms prose, 41.9 ms repetitive logs).
//!
//! A benchmark command, not a test: `cargo run --release -p patchdiff-tests --bin
//! patchdiff-near-miss-bench [-- --queries N --iters N]`.

use patchdiff_engine::api::near_miss::search;
use patchdiff_tests::bench::{XorShift as Rng, arg, percentile};
use std::hint::black_box;
use std::time::Instant;

const CHARS: usize = 65_536;

const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "editor",
    "document",
    "proposal",
    "transaction",
    "version",
    "guard",
    "history",
    "replacement",
    "paragraph",
    "section",
    "library",
    "river",
    "mountain",
    "window",
    "garden",
    "question",
    "answer",
    "careful",
    "quickly",
    "silence",
    "morning",
    "evening",
    "thousand",
    "remember",
    "although",
    "because",
    "between",
    "through",
    "without",
    "against",
    "another",
    "important",
    "different",
    "government",
    "development",
    "experience",
    "information",
    "understand",
    "everything",
    "café",
    "naïve",
    "façade",
    "über",
    "señor",
    "déjà",
    "coöperate",
    "résumé",
    "Zürich",
    "München",
    "Ångström",
    "smörgåsbord",
    "jalapeño",
    "crème",
    "brûlée",
    "piñata",
];

/// Varied prose: sentences of random words, capitalised, with punctuation and paragraphs.
fn prose(rng: &mut Rng) -> String {
    let mut out = String::new();
    let mut count = 0;
    while count < CHARS + 64 {
        let words = 6 + rng.below(18);
        for w in 0..words {
            let word = WORDS[rng.below(WORDS.len())];
            let piece = if w == 0 {
                let mut c = word.chars();
                let first = c.next().unwrap().to_uppercase().collect::<String>();
                first + c.as_str()
            } else {
                format!(" {word}")
            };
            count += piece.chars().count();
            out.push_str(&piece);
            if w + 1 < words && rng.below(9) == 0 {
                out.push(',');
                count += 1;
            }
        }
        let end = [". ", "? ", "! ", ".\n\n"][rng.below(4)];
        out.push_str(end);
        count += end.chars().count();
    }
    out.chars().take(CHARS).collect()
}

/// Repetitive structured logs: timestamps, levels, components, request and user ids that repeat.
fn logs(rng: &mut Rng) -> String {
    let levels = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"];
    let comps = ["api", "worker-1", "worker-2", "db-pool", "scheduler"];
    let paths = [
        "/api/v1/items",
        "/api/v1/users",
        "/health",
        "/api/v1/orders",
    ];
    let mut out = String::new();
    let mut ms: u64 = 0;
    while out.chars().count() < CHARS + 200 {
        ms += 1 + rng.below(40) as u64;
        let (h, m, s, milli) = (
            (ms / 3_600_000) % 24,
            (ms / 60_000) % 60,
            (ms / 1000) % 60,
            ms % 1000,
        );
        out.push_str(&format!(
            "2024-05-01T{h:02}:{m:02}:{s:02}.{milli:03}Z {:<5} [{}] request_id=req-{:06} user={} path={} status={} latency_ms={}\n",
            levels[rng.below(levels.len())],
            comps[rng.below(comps.len())],
            rng.below(40),
            1000 + rng.below(12),
            paths[rng.below(paths.len())],
            [200, 200, 200, 201, 404, 500][rng.below(6)],
            rng.below(90),
        ));
    }
    out.chars().take(CHARS).collect()
}

fn homogeneous() -> String {
    "a".repeat(CHARS)
}

/// A periodic adversarial text: a short period with a near-repeat inside, so that the
/// bit-parallel filter admits every end position and every window start has to be verified.
fn periodic() -> String {
    let period = "abcabd";
    period.chars().cycle().take(CHARS).collect()
}

/// A query of 20-64 code points taken from `buf` with 1-3 random edits (substitutions,
/// insertions, deletions drawn from the buffer's own characters and '#').
fn query(buf: &[char], rng: &mut Rng) -> String {
    let m = 20 + rng.below(45);
    let s = rng.below(buf.len() - m);
    let mut q: Vec<char> = buf[s..s + m].to_vec();
    let edits = 1 + rng.below(3);
    for _ in 0..edits {
        let c = if rng.below(4) == 0 {
            '#'
        } else {
            buf[rng.below(buf.len())]
        };
        let at = rng.below(q.len());
        match rng.below(3) {
            0 => q[at] = c,
            1 if q.len() < 64 => q.insert(at, c),
            _ if q.len() > 20 => {
                q.remove(at);
            }
            _ => q[at] = c,
        }
    }
    q.into_iter().collect()
}

/// Periodic texts at large: periods of 1-12 code points over 2-4 letters, every third one with
/// up to 2,000 scattered defects, one query each. These are the inputs on which the filter admits
/// (nearly) every end and verification dominates.
fn periodic_sweep(rng: &mut Rng, count: usize) -> Vec<(String, String)> {
    (0..count)
        .map(|i| {
            let p = 1 + rng.below(12);
            let letters = 2 + rng.below(3) as u8;
            let period: Vec<char> = (0..p)
                .map(|_| (b'a' + rng.below(letters as usize) as u8) as char)
                .collect();
            let mut buf: Vec<char> = (0..CHARS).map(|j| period[j % p]).collect();
            if i % 3 == 0 {
                for _ in 0..rng.below(2_000) {
                    let at = rng.below(CHARS);
                    buf[at] = (b'a' + rng.below(letters as usize + 1) as u8) as char;
                }
            }
            let q = query(&buf, rng);
            (buf.into_iter().collect(), q)
        })
        .collect()
}

/// One table row: its cases (buffer, query), the goal and the first implementation's figure.
struct Row {
    name: &'static str,
    cases: Vec<(String, String)>,
    goal: f64,
    baseline: Option<f64>,
}

fn main() {
    let queries = arg("--queries", 50);
    let iters = arg("--iters", 9);
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let same_buffer = |name: &'static str, buf: String, goal: f64, baseline: Option<f64>| {
        let chars: Vec<char> = buf.chars().collect();
        assert_eq!(chars.len(), CHARS);
        let mut qrng = Rng(0xC0FF_EE00_0000_0001 ^ name.len() as u64);
        let cases = (0..queries)
            .map(|_| (buf.clone(), query(&chars, &mut qrng)))
            .collect();
        Row {
            name,
            cases,
            goal,
            baseline,
        }
    };
    let rows = vec![
        same_buffer("varied prose", prose(&mut rng), 0.3, Some(1.7)),
        same_buffer(
            "repetitive structured logs",
            logs(&mut rng),
            0.3,
            Some(41.9),
        ),
        same_buffer("homogeneous (\"aaaa…\")", homogeneous(), 1.5, None),
        same_buffer("periodic adversarial (\"abcabd…\")", periodic(), 20.0, None),
        Row {
            name: "periodic sweep (periods 1-12, 2-4 letters, ±defects)",
            cases: periodic_sweep(&mut rng, queries),
            goal: 20.0,
            baseline: None,
        },
    ];
    println!(
        "near_miss::search, 65,536-code-point buffers, {queries} queries of 20-64 code points with \
         1-3 edits per row, each timed {iters} times\n"
    );
    println!(
        "| corpus | median (ms) | p95 (ms) | slowest query, its median (ms) | goal (ms) | first implementation (ms) | baseline / median | whole buffer | found / candidates_truncated |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |");
    for row in &rows {
        let mut times = Vec::with_capacity(row.cases.len() * iters);
        let mut slowest: f64 = 0.0;
        let mut whole = true;
        let (mut found, mut cut) = (0, 0);
        for (buf, q) in &row.cases {
            let r = search(buf, q);
            whole &= !r.scope_truncated && r.scanned_end == CHARS;
            found += r.candidates.len();
            cut += usize::from(r.candidates_truncated);
            let mut own: Vec<f64> = (0..iters)
                .map(|_| {
                    let t = Instant::now();
                    black_box(search(black_box(buf), black_box(q)));
                    t.elapsed().as_secs_f64() * 1000.0
                })
                .collect();
            own.sort_by(f64::total_cmp);
            slowest = slowest.max(percentile(&own, 0.5));
            times.extend(own);
        }
        times.sort_by(f64::total_cmp);
        let median = percentile(&times, 0.5);
        let p95 = percentile(&times, 0.95);
        let (base, ratio) = match row.baseline {
            Some(b) => (format!("{b:.1}"), format!("{:.0}×", b / median)),
            None => ("—".into(), "—".into()),
        };
        let over = if median <= row.goal {
            ""
        } else {
            " (over goal)"
        };
        println!(
            "| {} | {median:.3}{over} | {p95:.3} | {slowest:.3} | < {} | {base} | {ratio} | {} | {found} / {cut} of {} |",
            row.name,
            row.goal,
            if whole { "yes" } else { "NO" },
            row.cases.len(),
        );
    }
}
