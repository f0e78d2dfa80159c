//! Incremental outlines (issue 21, item 2) without a database: on the 1 MiB Python module of
//! `patchdiff-structural-bench`, a fresh outline next to the outline of the same module after a
//! 32-group commit (one `retries = 0` changed in each of 32 functions spread over the file),
//! parsed incrementally from the kept tree; with the phases of the incremental one, the
//! resident memory a kept tree takes, and the cost of versions with a syntax error that stays.
//!
//!     cargo run --release -p patchdiff-waymark --example incremental_bench [iterations]
//!
//! With `INCREMENTAL_ONLY=1` it runs the incremental outlines alone (for a profiler).

use patchdiff_waymark::incremental::{Made, Trees, diff, input_edits};
use patchdiff_waymark::{Language, outline, tree_sitter_language};
use std::time::Instant;

/// The module of `patchdiff-structural-bench` (tests/src/bin/patchdiff-structural-bench.rs).
fn module(bytes: usize) -> (String, usize) {
    let mut s = String::from("\"\"\"Generated benchmark module.\"\"\"\nRETRY_LIMIT = 3\n\n");
    let mut n = 0;
    while s.len() < bytes {
        s.push_str(&format!(
            "class Handler{n}:\n    def handle(self, event):\n        retries = 0\n        return dispatch(event, retries)\n\n\ndef handler_{n}(event):\n    retries = 0\n    return dispatch(event, retries)\n\n\n"
        ));
        n += 1;
    }
    (s, n)
}

/// The text after one 32-group commit: in 32 functions `handler_{k * step + shift}`, the first
/// `retries = ...` line of the body set to `retries = {round}`.
fn commit(text: &str, functions: usize, shift: usize, round: usize) -> String {
    let step = functions / 32;
    let mut out = text.to_owned();
    for k in 0..32 {
        let f = format!(
            "def handler_{}(event):\n    retries = ",
            (k * step + shift) % functions
        );
        let at = out.find(&f).expect("the function") + f.len();
        let end = at + out[at..].find('\n').unwrap();
        out.replace_range(at..end, &round.to_string());
    }
    out
}

fn rss_kib() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // A median needs a round: anything but a whole number of at least 1 is refused (exit 2).
    let n: usize = std::env::args().nth(1).map_or(15, |a| {
        a.parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
            eprintln!("iterations must be a whole number of at least 1, not {a:?}");
            std::process::exit(2)
        })
    });
    let (mut text, functions) = module(1 << 20);
    println!("{} bytes of python, {n} rounds", text.len());
    let mut trees = Trees::new(4, 64 << 20);
    let before = rss_kib();
    let (first, made) = trees.outline_made(b"bench", Language::Python, text.clone());
    assert_eq!(made, Made::Fresh);
    let held = rss_kib();
    println!(
        "resident growth with one kept tree (+ its text): {} KiB, {:.1} x the text",
        held.saturating_sub(before),
        (held.saturating_sub(before) * 1024) as f64 / text.len() as f64
    );
    drop(first);
    let (mut fresh, mut incr) = (Vec::new(), Vec::new());
    let mut made_region = 0usize;
    let (mut t_diff, mut t_edit, mut t_reparse, mut t_collect, mut t_fresh_parse) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    if std::env::var_os("INCREMENTAL_ONLY").is_some() {
        // For a profiler: the incremental outlines alone.
        for round in 1..=n {
            let next = commit(&text, functions, round, round);
            let t = Instant::now();
            let (_, made) = trees.outline_made(b"bench", Language::Python, next.clone());
            incr.push(ms(t));
            assert!(matches!(made, Made::Incremental | Made::Region), "{made:?}");
            made_region += usize::from(made == Made::Region);
            text = next;
        }
        println!(
            "incremental median {:.2} ms ({made_region} of {n} region outlines)",
            median(incr)
        );
        return;
    }
    for round in 1..=n {
        let next = commit(&text, functions, round, round);
        // A/B in the same round: the fresh outline, then the incremental one.
        let t = Instant::now();
        let want = outline(Language::Python, &next);
        fresh.push(ms(t));
        let t = Instant::now();
        let (got, made) = trees.outline_made(b"bench", Language::Python, next.clone());
        incr.push(ms(t));
        assert!(matches!(made, Made::Incremental | Made::Region), "{made:?}");
        made_region += usize::from(made == Made::Region);
        assert_eq!(got, want, "round {round}: the incremental outline differs");
        // The phases, on a tree of the old text parsed for the purpose.
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&tree_sitter_language(Language::Python))
            .unwrap();
        let mut old_tree = parser.parse(&text, None).unwrap();
        let t = Instant::now();
        let changes = diff(&text, &next);
        t_diff.push(ms(t));
        assert_eq!(changes.len(), 32, "one change per group");
        let t = Instant::now();
        for e in input_edits(&text, &next, &changes) {
            old_tree.edit(&e);
        }
        t_edit.push(ms(t));
        let t = Instant::now();
        let tree = parser.parse(&next, Some(&old_tree)).unwrap();
        t_reparse.push(ms(t));
        let t = Instant::now();
        let fresh_tree = parser.parse(&next, None).unwrap();
        t_fresh_parse.push(ms(t));
        drop(fresh_tree);
        let t = Instant::now();
        let again = outline(Language::Python, &next);
        t_collect.push(ms(t));
        drop((tree, again));
        text = next;
    }
    println!("{made_region} of {n} outlines were region outlines (the rest: tree-sitter reparses)");
    println!("| outline of 1 MiB after a 32-group commit | median ms |");
    println!("| --- | ---: |");
    println!(
        "| fresh parse + outline (today) | {:.2} |",
        median(fresh.clone())
    );
    println!(
        "| incremental (diff + edit + reparse + outline) | {:.2} |",
        median(incr.clone())
    );
    println!("| - diff of the two texts | {:.2} |", median(t_diff));
    println!("| - Tree::edit x 32 | {:.3} |", median(t_edit));
    println!(
        "| - reparse with the edited tree | {:.2} |",
        median(t_reparse)
    );
    println!(
        "ratio fresh / incremental: {:.1} x",
        median(fresh) / median(incr)
    );
    println!(
        "fresh, same text: parse alone {:.2} ms; outline() (parse + walk) {:.2} ms",
        median(t_fresh_parse),
        median(t_collect)
    );
    // Two probes: 32 changes in the first 32 functions, and none.
    let next = commit(&text, 32, 0, 99);
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&tree_sitter_language(Language::Python))
        .unwrap();
    let mut old_tree = parser.parse(&text, None).unwrap();
    let changes = diff(&text, &next);
    for e in input_edits(&text, &next, &changes) {
        old_tree.edit(&e);
    }
    let t = Instant::now();
    let tree = parser.parse(&next, Some(&old_tree)).unwrap();
    println!(
        "reparse after {} changes clustered at the start: {:.2} ms",
        changes.len(),
        ms(t)
    );
    let t = Instant::now();
    let tree2 = parser.parse(&next, Some(&tree)).unwrap();
    println!("reparse with no change at all: {:.2} ms", ms(t));
    drop(tree2);
    // A syntax error that stays (helper-113): `(` and a line break put before the module, then
    // 32-group commits with the error still there. The first text with the error is parsed
    // incrementally (the result has errors, so it is thrown away) and then afresh, which is what
    // every such version cost until 2026-12-07; the later ones are parsed afresh only.
    let mut trees = Trees::new(4, 64 << 20);
    let (_, made) = trees.outline_made(b"broken", Language::Python, text.clone());
    assert_eq!(made, Made::Fresh);
    let mut broken = format!("(\n{text}");
    let (mut first, mut later, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=n {
        let t = Instant::now();
        let (got, _) = trees.outline_made(b"broken", Language::Python, broken.clone());
        let took = ms(t);
        if round == 1 {
            first.push(took);
        } else {
            later.push(took);
        }
        let t = Instant::now();
        let want = outline(Language::Python, &broken);
        fresh.push(ms(t));
        assert_eq!(
            got, want,
            "round {round}: the outline with an error differs"
        );
        broken = format!(
            "(\n{}",
            commit(&broken[2..], functions, round, round + 1000)
        );
    }
    println!(
        "a syntax error that stays: first version {:.2} ms (an incremental parse thrown away, then a fresh one), later versions median {:.2} ms, a fresh outline median {:.2} ms",
        first[0],
        if later.is_empty() {
            f64::NAN
        } else {
            median(later)
        },
        median(fresh)
    );
}
