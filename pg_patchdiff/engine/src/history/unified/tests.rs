//! Issue 19, item 3: the hunks are byte-identical to GNU `diff -U<context>`'s, proven against
//! the real `diff` binary on random, real and large texts. `diff` (GNU diffutils) must be on the
//! PATH: these tests fail, never skip, without it.

use super::*;
use crate::contract::rng::XorShift;
use std::path::PathBuf;
use std::process::Command;

/// The engine's deterministic test generator, with a percentage helper.
struct Rng(XorShift);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n)
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("patchdiff-unified-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// GNU diff's hunks: its output without the two header lines.
fn gnu(old: &str, new: &str, context: usize, tag: &str) -> String {
    let dir = scratch();
    let (a, b) = (dir.join(format!("{tag}.a")), dir.join(format!("{tag}.b")));
    std::fs::write(&a, old).unwrap();
    std::fs::write(&b, new).unwrap();
    let out = Command::new("diff")
        .arg(format!("-U{context}"))
        .arg(&a)
        .arg(&b)
        .output()
        .expect("GNU diff must be installed (diffutils) to prove issue 19 item 3");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "diff failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("diff printed UTF-8 for UTF-8 input");
    if text.is_empty() {
        return text;
    }
    let mut rest = text.as_str();
    for _ in 0..2 {
        let nl = rest.find('\n').expect("a header line");
        assert!(rest.starts_with("--- ") || rest.starts_with("+++ "));
        rest = &rest[nl + 1..];
    }
    rest.to_owned()
}

fn ours(old: &str, new: &str, context: usize) -> String {
    hunks(old, new, context, &mut Budget::new(u64::MAX)).unwrap()
}

#[track_caller]
fn same(old: &str, new: &str, context: usize, tag: &str) {
    let expected = gnu(old, new, context, tag);
    let got = ours(old, new, context);
    if expected != got {
        let dir = scratch();
        std::fs::write(dir.join("fail.a"), old).unwrap();
        std::fs::write(dir.join("fail.b"), new).unwrap();
        panic!(
            "hunks differ from GNU diff -U{context} (inputs kept in {}):\n--- GNU\n{expected}\n--- ours\n{got}",
            dir.display()
        );
    }
}

fn join(lines: &[String], final_newline: bool) -> String {
    let mut s = lines.join("\n");
    if final_newline && !lines.is_empty() {
        s.push('\n');
    }
    s
}

/// A random edit of `base`: deletions, insertions, replacements, moved and duplicated blocks.
fn mutate(rng: &mut Rng, base: &[String], pool: &[String], edits: usize) -> Vec<String> {
    let mut v = base.to_vec();
    for _ in 0..edits {
        let at = rng.below(v.len() + 1);
        match rng.below(6) {
            0 if !v.is_empty() => {
                let n = 1 + rng.below(4).min(v.len() - at.min(v.len()));
                let end = (at + n).min(v.len());
                v.drain(at.min(v.len())..end);
            }
            1 | 2 => {
                for k in 0..1 + rng.below(3) {
                    v.insert(at + k, pool[rng.below(pool.len())].clone());
                }
            }
            3 if at < v.len() => v[at] = pool[rng.below(pool.len())].clone(),
            4 if v.len() > 4 => {
                // Move a block.
                let from = rng.below(v.len() - 2);
                let n = 1 + rng.below(3).min(v.len() - from - 1);
                let block: Vec<String> = v.drain(from..from + n).collect();
                let to = rng.below(v.len() + 1);
                for (k, l) in block.into_iter().enumerate() {
                    v.insert(to + k, l);
                }
            }
            _ if !v.is_empty() => {
                let l = v[rng.below(v.len())].clone();
                v.insert(at.min(v.len()), l);
            }
            _ => {}
        }
    }
    v
}

fn small_pool() -> Vec<String> {
    [
        "a", "b", "c", "", "}", "{", "  x", "é", "日本", "a b", "\t", "b",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Many small random pairs over a tiny alphabet (repeated lines are where shifting and the
/// choice among equal edit scripts show), with and without final newlines, contexts 0..=5.
#[test]
fn random_small_texts_match_gnu_diff() {
    let mut rng = Rng(XorShift(0x9e37_79b9_7f4a_7c15));
    let pool = small_pool();
    // PATCHDIFF_DIFF_CASES runs more (or fewer) cases; PATCHDIFF_DIFF_SEED another seed.
    let cases = std::env::var("PATCHDIFF_DIFF_CASES").map_or(1500, |v| v.parse().unwrap());
    if let Ok(seed) = std::env::var("PATCHDIFF_DIFF_SEED") {
        rng = Rng(XorShift(seed.parse().unwrap()));
    }
    for case in 0..cases {
        let n = rng.below(30);
        let base: Vec<String> = (0..n)
            .map(|_| pool[rng.below(pool.len())].clone())
            .collect();
        let edits = rng.below(8);
        let other = if rng.chance(15) {
            (0..rng.below(30))
                .map(|_| pool[rng.below(pool.len())].clone())
                .collect()
        } else {
            mutate(&mut rng, &base, &pool, edits)
        };
        let old = join(&base, !rng.chance(20));
        let new = join(&other, !rng.chance(20));
        let context = rng.below(6);
        same(&old, &new, context, &format!("small{case}"));
    }
}

/// Final-newline corner cases: one side without, both without, empty sides, a last line that
/// differs only by its newline.
#[test]
fn missing_final_newlines_match_gnu_diff() {
    let texts = [
        "", "a", "a\n", "a\nb", "a\nb\n", "b", "b\n", "a\na", "a\na\n", "\n", "\n\n", "x\na\nb",
    ];
    for (i, old) in texts.iter().enumerate() {
        for (j, new) in texts.iter().enumerate() {
            for context in [0, 1, 3] {
                same(old, new, context, &format!("nl{i}-{j}-{context}"));
            }
        }
    }
}

/// Source files of this repository, edited at random, and pairs of unrelated files (where most
/// lines are discarded as matching nothing).
#[test]
fn real_texts_match_gnu_diff() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut stack = vec![root];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    let texts: Vec<String> = files
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let mut rng = Rng(XorShift(42));
    for (k, t) in texts.iter().enumerate().take(60) {
        let lines: Vec<String> = t.lines().map(str::to_owned).collect();
        let pool: Vec<String> = texts[(k + 1) % texts.len()]
            .lines()
            .map(str::to_owned)
            .chain(lines.iter().cloned())
            .collect();
        let edits = 1 + rng.below(40);
        let other = mutate(&mut rng, &lines, &pool, edits);
        let context = [0, 1, 3, 3, 3, 7][rng.below(6)];
        same(t, &join(&other, true), context, &format!("real{k}"));
        let unrelated = &texts[(k * 7 + 3) % texts.len()];
        same(t, unrelated, 3, &format!("unrelated{k}"));
    }
}

/// Large inputs where GNU gives up minimality: random texts over a few hundred distinct lines,
/// so that no line is discarded and the edit distance is far beyond `too_expensive` (4,096),
/// plus large texts with sparse edits. Each case asserts that the heuristic really ran.
#[test]
fn large_texts_where_gnu_gives_up_minimality_match_gnu_diff() {
    let mut rng = Rng(XorShift(7));
    for (case, (n, distinct)) in [(9_000, 300), (12_000, 60), (6_000, 2_000)]
        .into_iter()
        .enumerate()
    {
        let pool: Vec<String> = (0..distinct).map(|i| format!("line {i} ü")).collect();
        let a: Vec<String> = (0..n).map(|_| pool[rng.below(distinct)].clone()).collect();
        let b: Vec<String> = (0..n).map(|_| pool[rng.below(distinct)].clone()).collect();
        let (old, new) = (join(&a, true), join(&b, true));
        same(&old, &new, 3, &format!("large{case}"));
    }
    // Sparse edits of a large text: minimal, but many hunks and long snakes.
    let pool: Vec<String> = (0..5_000).map(|i| format!("row {}", i % 997)).collect();
    let base: Vec<String> = (0..40_000).map(|i| pool[i % pool.len()].clone()).collect();
    let other = mutate(&mut rng, &base, &pool, 400);
    same(&join(&base, true), &join(&other, false), 3, "sparse");
}

/// The heuristic path is really taken on the large random case (so the test above proves it).
#[test]
fn the_too_expensive_heuristic_is_exercised() {
    let mut rng = Rng(XorShift(7));
    let pool: Vec<String> = (0..300).map(|i| format!("line {i} ü")).collect();
    let a: Vec<String> = (0..9_000).map(|_| pool[rng.below(300)].clone()).collect();
    let b: Vec<String> = (0..9_000).map(|_| pool[rng.below(300)].clone()).collect();
    let mut budget = Budget::new(u64::MAX);
    changes(&join(&a, true), &join(&b, true), 3, &mut budget).unwrap();
    // A minimal search of an edit distance over 8,192 would cost far more than 4,096 rounds.
    assert!(budget.used > 4_096 * 4_096, "used {}", budget.used);
}

/// Bounded work: a search past its budget is refused, not finished.
#[test]
fn a_search_past_its_budget_is_refused() {
    let a: String = (0..2_000).map(|i| format!("{}\n", i % 50)).collect();
    let b: String = (0..2_000).map(|i| format!("{}\n", (i * 7) % 50)).collect();
    let r = hunks(&a, &b, 3, &mut Budget::new(10_000));
    assert!(matches!(r, Err(DiffError::TooExpensive { .. })), "{r:?}");
}

/// Identical texts have no hunks, like GNU diff's empty output.
#[test]
fn identical_texts_have_no_hunks() {
    assert_eq!(ours("a\nb\n", "a\nb\n", 3), "");
    assert_eq!(ours("", "", 3), "");
    assert_eq!(ours("a", "a", 0), "");
}

/// Not a test: medians of our diff and of the real `diff -u` binary (which also reads two
/// files and starts a process) on large inputs, for docs/benchmarks.md ("Issue 19: diffs"):
/// `cargo test --release -p patchdiff-engine --lib unified::tests::timings -- --ignored --nocapture`.
#[test]
#[ignore]
fn timings() {
    use std::time::Instant;
    let mut rng = Rng(XorShift(11));
    let pool: Vec<String> = (0..5_000)
        .map(|i| format!("row {} of the text", i % 997))
        .collect();
    let sparse_base: Vec<String> = (0..100_000).map(|i| pool[i % pool.len()].clone()).collect();
    let sparse_other = mutate(&mut rng, &sparse_base, &pool, 200);
    let small: Vec<String> = (0..300).map(|i| format!("line {i} ü")).collect();
    let ra: Vec<String> = (0..10_000).map(|_| small[rng.below(300)].clone()).collect();
    let rb: Vec<String> = (0..10_000).map(|_| small[rng.below(300)].clone()).collect();
    let cases = [
        (
            "100,000 lines, 200 random edits",
            join(&sparse_base, true),
            join(&sparse_other, true),
        ),
        (
            "10,000 vs 10,000 random lines of 300 (too_expensive)",
            join(&ra, true),
            join(&rb, true),
        ),
    ];
    for (name, a, b) in &cases {
        let mut ours_ms = Vec::new();
        let mut gnu_ms = Vec::new();
        let mut steps = 0;
        for _ in 0..5 {
            let t = Instant::now();
            let mut budget = Budget::new(u64::MAX);
            let h = hunks(a, b, 3, &mut budget).unwrap();
            ours_ms.push(t.elapsed().as_secs_f64() * 1e3);
            steps = budget.used;
            let t = Instant::now();
            let g = gnu(a, b, 3, "timing");
            gnu_ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(h, g);
        }
        ours_ms.sort_by(f64::total_cmp);
        gnu_ms.sort_by(f64::total_cmp);
        println!(
            "{name}: ours median {:.1} ms ({steps} steps), GNU diff -u (process, files) median {:.1} ms",
            ours_ms[2], gnu_ms[2]
        );
    }
    // Where the step budget of patchdiff_diff (DIFF_MAX_STEPS) falls on the worst inputs under
    // the size caps: two unrelated texts over 300 distinct lines, no line discarded.
    for n in [20_000, 50_000, 100_000] {
        let a: Vec<String> = (0..n).map(|_| small[rng.below(300)].clone()).collect();
        let b: Vec<String> = (0..n).map(|_| small[rng.below(300)].clone()).collect();
        let t = Instant::now();
        let mut budget = Budget::new(u64::MAX);
        changes(&join(&a, true), &join(&b, true), 3, &mut budget).unwrap();
        println!(
            "{n} vs {n} random lines of 300: {} steps, {:.0} ms",
            budget.used,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
}

/// DESIGN.md "Every loop whose length depends on input checks for interrupts": a long search
/// stops at the hook (statement_timeout, pg_cancel_backend), long before it would finish.
#[test]
fn a_long_diff_stops_at_an_interrupt() {
    let mut rng = Rng(XorShift(5));
    let pool: Vec<String> = (0..300).map(|i| format!("l{i}")).collect();
    let a: Vec<String> = (0..6_000).map(|_| pool[rng.below(300)].clone()).collect();
    let b: Vec<String> = (0..6_000).map(|_| pool[rng.below(300)].clone()).collect();
    let (a, b) = (join(&a, true), join(&b, true));
    assert!(crate::contract::interrupt::testing::interrupted_after(
        3,
        || hunks(&a, &b, 3, &mut Budget::new(u64::MAX))
    ));
}

/// The same for stage 4: a run of changes among repeated lines slides over all of them (up to
/// the first line, then back down to the last), 2 x 100,000 steps here, and those steps check
/// for interrupts as every earlier stage's do. The run ends where GNU diff leaves it.
#[test]
fn sliding_boundaries_check_for_interrupts() {
    use crate::contract::interrupt::{SEARCH_INTERVAL, testing};
    let n: isize = 100_000;
    // Side 0: n equal lines, the last one deleted; side 1: n - 1 of them, unchanged.
    let equivs = vec![1usize; n as usize];
    let mut changed = Flags(vec![false; n as usize + 2]);
    changed.set(n - 1, true);
    let other = Flags(vec![false; n as usize + 1]);
    testing::arm(None);
    shift_boundaries(&mut changed, &other, &equivs);
    assert!(
        testing::calls() >= (2 * n as u64) / u64::from(SEARCH_INTERVAL),
        "{} checks",
        testing::calls()
    );
    let at: Vec<isize> = (0..n).filter(|&i| changed.get(i)).collect();
    assert_eq!(at, [n - 1]);
    assert!(testing::interrupted_after(3, || {
        let mut changed = Flags(vec![false; n as usize + 2]);
        changed.set(n - 1, true);
        shift_boundaries(&mut changed, &other, &equivs);
    }));
}

/// GNU's discard rules at larger sizes: frequent lines ("", braces) that match more than
/// 5·√n lines become provisional discards inside runs of unique lines, on both sides.
#[test]
fn provisional_discards_match_gnu_diff() {
    let mut rng = Rng(XorShift(99));
    for case in 0..40 {
        let n = 500 + rng.below(4_000);
        let base: Vec<String> = (0..n)
            .map(|i| match rng.below(10) {
                0..=2 => String::new(),
                3 => "}".into(),
                4 => "{".into(),
                _ => format!("unique {i} {}", rng.below(50)),
            })
            .collect();
        let pool: Vec<String> = ["", "}", "{", "x"]
            .iter()
            .map(|s| s.to_string())
            .chain((0..200).map(|i| format!("new {i}")))
            .collect();
        let edits = 5 + rng.below(200);
        let other = mutate(&mut rng, &base, &pool, edits);
        let context = [0, 3, 3, 5][rng.below(4)];
        same(
            &join(&base, true),
            &join(&other, true),
            context,
            &format!("prov{case}"),
        );
    }
}
