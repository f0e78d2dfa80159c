//! Hostile-input benchmark (issue 14, "hostile input never takes the database down").
//!
//! For each worst shape the issue measured, the median time of the hostile call next to a plain
//! call on the same text, and their ratio, measured in the same run:
//!
//! ```text
//! cargo run --release -p patchdiff-engine --example hostile_bench
//! ```
//!
//! `HOSTILE_BENCH_RUNS` (default 5) sets the runs per median. `before` is the hostile median
//! the same shape took before issue 14's fixes (commit 9f56355, release build, 3 runs, on the
//! 2-core development machine while other builds shared it, so they are approximate). Shapes stay at the documented caps
//! (10,000 edits / operations), so every call here is one a caller may legally make.

use patchdiff_engine::api::preview::{parse_preview, preview};
use patchdiff_engine::api::read::{FIND_ARGS, find_occurrences, parse_find};
use patchdiff_engine::api::replay::{Accepted, Replay};
use patchdiff_engine::api::submit::{self, Attempt, Parent};
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::text::sha256_hex;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const ID: &str = "11111111-1111-4111-8111-111111111111";
/// Edits / operations per hostile transaction: the documented cap.
const MANY: usize = 10_000;

/// `HOSTILE_BENCH_RUNS`, default 5. A median needs a run, so anything but a whole number of at
/// least 1 is refused (exit 2) rather than taken as the default or left to panic.
fn runs() -> usize {
    let Ok(value) = std::env::var("HOSTILE_BENCH_RUNS") else {
        return 5;
    };
    value.parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
        eprintln!("HOSTILE_BENCH_RUNS must be a whole number of at least 1, not {value:?}");
        std::process::exit(2)
    })
}

fn median(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..runs())
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn report(shape: &str, hostile: Duration, plain: Duration, before_ms: f64, note: &str) {
    println!(
        "{shape:<44} hostile {:>9.1} ms   plain {:>7.3} ms   ratio {:>7.1}   before {:>8.0} ms   {note}",
        hostile.as_secs_f64() * 1e3,
        plain.as_secs_f64() * 1e3,
        hostile.as_secs_f64() / plain.as_secs_f64().max(1e-9),
        before_ms,
    );
}

/// The target at version 0; its hash is leaked so the view can borrow it (a bench, not a server).
fn view(content: &str) -> TargetView<'_> {
    TargetView {
        target_file_id: ID,
        version: 0,
        current_hash: Box::leak(sha256_hex(content).into_boxed_str()),
        content,
    }
}

/// Parses, evaluates and answers one submission of `list` (`edits` or `operations`), as the
/// extension does; the attempt and the answer's size.
fn submit(
    t: &TargetView,
    list: &str,
    items: Value,
    parse: fn(&str) -> Result<submit::Submission, patchdiff_engine::api::args::ArgError>,
) -> (Attempt, usize) {
    let mut args = json!({"target_file_id": ID, "intent": "bench",
                          "expected_target_version": t.version});
    args[list] = items;
    let sub = parse(&args.to_string()).unwrap();
    let id = submit::prepare(&sub, &Parent::NotLookedUp);
    let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, t);
    assert_eq!(a.status.as_str(), "accepted", "{:?}", a.failure_detail);
    let after = a.new_content.clone().unwrap();
    let now = view(&after);
    let bytes = submit::respond(&a, &sub, "p", &now, None).to_string().len();
    (a, bytes)
}

fn submit_edits(t: &TargetView, edits: Value) -> (Attempt, usize) {
    submit(t, "edits", edits, submit::parse_submit_edits)
}

fn submit_ops(t: &TargetView, ops: Value) -> (Attempt, usize) {
    submit(t, "operations", ops, submit::parse_submit_operations)
}

fn replay(base: &str, a: &Attempt) {
    let mut r = Replay::start(ID, 0, &sha256_hex(base), base.to_owned()).unwrap();
    r.step(&Accepted::of(a, 1, "p")).unwrap();
}

fn main() {
    println!("runs per median: {}", runs());

    // 1. Overlapping search: `a` x N/2 in `a` x N (N/2 + 1 overlapping matches) against a search
    //    for a needle of the same length that never matches.
    let n = 256 * 1024;
    let text = "a".repeat(n);
    let t = view(&text);
    let find = |needle: &str| {
        let args = json!({"target_file_id": ID, "text": needle}).to_string();
        let a = patchdiff_engine::api::args::Args::parse(&args, FIND_ARGS, &[]).unwrap();
        let r = parse_find(&a).unwrap();
        find_occurrences(&t, &r)
    };
    let overlapping = "a".repeat(n / 2);
    let absent = format!("{}b", "a".repeat(n / 2 - 1));
    assert_eq!(find(&overlapping)["occurrence_count"], n / 2 + 1);
    report(
        "find_occurrences a*128K in a*256K",
        median(|| drop(find(&overlapping))),
        median(|| drop(find(&absent))),
        18_327.0,
        "plain: same-length needle, no match",
    );

    // 2. tx/1: 10,000 one-character edits (`a` -> `b`, occurrence_index 1) on 100,000 `a`s,
    //    against one such edit on the same text.
    let text = "a".repeat(100_000);
    let t = view(&text);
    let many: Value = (0..MANY)
        .map(|_| json!({"match": "a", "replace": "b", "occurrence_index": 1}))
        .collect();
    let one = json!([{"match": "a", "replace": "b", "occurrence_index": 1}]);
    let (big, bytes) = submit_edits(&t, many.clone());
    report(
        "tx/1 10,000 one-char edits, 100K text",
        median(|| drop(submit_edits(&t, many.clone()))),
        median(|| drop(submit_edits(&t, one.clone()))),
        26_668.0,
        &format!("response {bytes} bytes"),
    );
    let (small, _) = submit_edits(&t, one.clone());
    report(
        "replay of that tx/1 attempt",
        median(|| replay(&text, &big)),
        median(|| replay(&text, &small)),
        37_865.0,
        "plain: replay of the one-edit attempt",
    );

    // 3. tx/2: 10,000 one-character spans, ascending, on 100,000 lines of `a\n`, against one.
    let text = "a\n".repeat(100_000);
    let t = view(&text);
    let spans: Value = (0..MANY)
        .map(|i| json!({"op": "span", "start": 20 * i, "end": 20 * i + 1, "expected_text": "a", "replace": "b"}))
        .collect();
    let one = json!([{"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": "b"}]);
    let (big, bytes) = submit_ops(&t, spans.clone());
    report(
        "tx/2 10,000 spans ascending, 200K text",
        median(|| drop(submit_ops(&t, spans.clone()))),
        median(|| drop(submit_ops(&t, one.clone()))),
        753.0,
        &format!("response {bytes} bytes"),
    );
    let desc: Value = (0..MANY)
        .rev()
        .map(|i| json!({"op": "span", "start": 20 * i, "end": 20 * i + 1, "expected_text": "a", "replace": "bb"}))
        .collect();
    report(
        "tx/2 10,000 spans descending, 200K text",
        median(|| drop(submit_ops(&t, desc.clone()))),
        median(|| drop(submit_ops(&t, one.clone()))),
        675.0,
        "",
    );
    let (small, _) = submit_ops(&t, one.clone());
    report(
        "replay of the ascending tx/2 attempt",
        median(|| replay(&text, &big)),
        median(|| replay(&text, &small)),
        778.0,
        "plain: replay of the one-span attempt",
    );

    // 4. Preview of the 10,000 spans against a preview of one.
    let pv = |ops: &Value| {
        let args = json!({"target_file_id": ID, "format": "patchdiff-tx/2", "intent": "bench",
                          "operations": ops, "expected_target_version": 0});
        let sub = parse_preview(&args.to_string()).unwrap();
        preview(&sub, &t)
    };
    assert_eq!(pv(&spans)["status"], "accepted");
    report(
        "preview 10,000 spans, 200K text",
        median(|| drop(pv(&spans))),
        median(|| drop(pv(&one))),
        1_148.0,
        "",
    );

    // 5. A rejected tx/1 whose last match an earlier edit consumed (helper-70): 9,998 edits that
    //    rewrite `Z` as itself, one that deletes every `a`, then a match of `a`, on `Z` and
    //    100,000 `a`s: `sequential_match_invalid`, which names the first consumed occurrences of
    //    `a` in the transaction-start text and the change that consumed each. Against the same
    //    rejection after one edit. `before` is this shape on the engine of bfb6e1d.
    let text = format!("Z{}", "a".repeat(100_000));
    let t = view(&text);
    let consumed = |zs: usize| -> Value {
        let mut edits: Vec<Value> = (0..zs)
            .map(|_| json!({"match": "Z", "replace": "Z", "occurrence_index": 1}))
            .collect();
        edits.push(json!({"match": "a".repeat(100_000), "replace": ""}));
        edits.push(json!({"match": "a", "replace": "b"}));
        Value::Array(edits)
    };
    let rejected = |edits: &Value| {
        let args = json!({"target_file_id": ID, "intent": "bench",
                          "expected_target_version": 0, "edits": edits});
        let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &t);
        assert_eq!(
            a.failure_reason.map(|r| r.as_str()),
            Some("sequential_match_invalid")
        );
        submit::respond(&a, &sub, "p", &t, None).to_string().len()
    };
    let (many, few) = (consumed(MANY - 2), consumed(0));
    let bytes = rejected(&many);
    report(
        "tx/1 consumed match after 10,000 edits, 100K",
        median(|| {
            rejected(&many);
        }),
        median(|| {
            rejected(&few);
        }),
        BEFORE_CONSUMED_MS,
        &format!("response {bytes} bytes; plain: after one edit"),
    );
}

/// Shape 5 on the engine before helper-70's fix (bfb6e1d, this bench, release, medians of 3).
const BEFORE_CONSUMED_MS: f64 = 2_409.0;
