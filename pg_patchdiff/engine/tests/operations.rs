//! Property tests for guarded operations: for random documents and random tx/2 operation lists
//! (match and span operations, with and without span context), preview and submission agree on
//! verdict, facts, warnings and `after_hash`, and the committed text equals a naive reference
//! over code-point vectors.

use patchdiff_engine::api::preview;
use patchdiff_engine::api::submit::{self, Parent};
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::text::sha256_hex;
use proptest::prelude::*;
use serde_json::{Value, json};

const TARGET: &str = "11111111-1111-4111-8111-111111111111";

/// Small alphabets make repeated, overlapping and cluster-splitting matches likely.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just('b'),
            Just('🌍'),
            Just('\u{301}'),
            Just('\n'),
            Just('中')
        ],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// Payload text may carry CR, which canonicalizes to LF before application.
fn payload(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just('a'), Just('b'), Just('\r'), Just('\n'), Just('🌍')],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn canonical(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// How one operation is generated; span texts are filled in against the naive buffer, so that
/// most spans are right and some are deliberately wrong.
#[derive(Debug, Clone)]
enum Seed {
    Match {
        m: String,
        r: String,
        idx: Option<usize>,
    },
    Span {
        start: usize,
        len: usize,
        r: String,
        /// A deliberately wrong expected_text.
        text_wrong: bool,
        /// (length, wrong) of expected_before / expected_after, when carried.
        before: Option<(usize, bool)>,
        after: Option<(usize, bool)>,
        null_context: bool,
    },
}

fn seed() -> impl Strategy<Value = Seed> {
    prop_oneof![
        (
            text(3).prop_filter("non-empty", |s| !s.is_empty()),
            payload(3),
            proptest::option::of(1usize..4)
        )
            .prop_map(|(m, r, idx)| Seed::Match { m, r, idx }),
        (
            0usize..14,
            0usize..4,
            payload(3),
            proptest::bool::weighted(0.15),
            proptest::option::of((1usize..3, proptest::bool::weighted(0.2))),
            proptest::option::of((1usize..3, proptest::bool::weighted(0.2))),
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(start, len, r, text_wrong, before, after, null_context)| {
                Seed::Span {
                    start,
                    len,
                    r,
                    text_wrong,
                    before,
                    after,
                    null_context,
                }
            }),
    ]
}

fn find(hay: &[char], needle: &[char]) -> Vec<usize> {
    if needle.is_empty() || needle.len() > hay.len() {
        return vec![];
    }
    (0..=hay.len() - needle.len())
        .filter(|&i| hay[i..i + needle.len()] == *needle)
        .collect()
}

fn slice(buf: &[char], s: usize, e: usize) -> String {
    buf[s.min(buf.len())..e.min(buf.len())].iter().collect()
}

/// Builds the operations from seeds, simulating them on a naive buffer to choose span texts,
/// and returns the naive outcome: Some(final text) or None (rejected).
fn build(doc: &str, seeds: &[Seed]) -> (Vec<Value>, Option<String>) {
    let mut buf: Vec<char> = doc.chars().collect();
    let mut ok = true;
    let mut ops = Vec::new();
    for sd in seeds {
        match sd {
            Seed::Match { m, r, idx } => {
                let mut op = json!({"op": "match", "match": m, "replace": r});
                if let Some(i) = idx {
                    op["occurrence_index"] = json!(i);
                }
                ops.push(op);
                if !ok {
                    continue;
                }
                let needle: Vec<char> = canonical(m).chars().collect();
                let occ = find(&buf, &needle);
                let chosen = match idx {
                    Some(n) => occ.get(n - 1).copied(),
                    None if occ.len() == 1 => Some(occ[0]),
                    None => None,
                };
                match chosen {
                    Some(s) => {
                        buf.splice(s..s + needle.len(), canonical(r).chars());
                    }
                    None => ok = false,
                }
            }
            Seed::Span {
                start,
                len,
                r,
                text_wrong,
                before,
                after,
                null_context,
            } => {
                let (s, e) = (*start, start + len);
                let mut expected = slice(&buf, s, e);
                if *text_wrong {
                    expected.push('x');
                }
                let mut op = json!({"op": "span", "start": s, "end": e, "expected_text": expected, "replace": r});
                // The naive rule: in bounds, the exact text, then the adjacent context.
                let mut holds = ok && e <= buf.len() && slice(&buf, s, e) == expected;
                if let Some((n, wrong)) = before {
                    let mut t = slice(&buf, s.saturating_sub(*n), s);
                    if *wrong || t.is_empty() {
                        t.push('x');
                    }
                    let tl = t.chars().count();
                    holds &= s >= tl && slice(&buf, s - tl, s) == t;
                    op["expected_before"] = json!(t);
                } else if *null_context {
                    op["expected_before"] = Value::Null;
                }
                if let Some((n, wrong)) = after {
                    let mut t = slice(&buf, e, e + n);
                    if *wrong || t.is_empty() {
                        t.push('x');
                    }
                    let tl = t.chars().count();
                    holds &= e + tl <= buf.len() && slice(&buf, e, e + tl) == t;
                    op["expected_after"] = json!(t);
                }
                ops.push(op);
                if holds {
                    buf.splice(s..e, canonical(r).chars());
                } else {
                    ok = false;
                }
            }
        }
    }
    (ops, ok.then(|| buf.into_iter().collect()))
}

fn facts_of(a: &submit::Attempt) -> Vec<Value> {
    a.changes.iter().map(|c| c.to_json()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1500))]

    /// Preview and submission agree, and the committed text equals the naive reference.
    #[test]
    fn preview_and_submission_agree(doc in text(16), seeds in proptest::collection::vec(seed(), 1..5)) {
        let (ops, want) = build(&doc, &seeds);
        let hash = sha256_hex(&doc);
        let view = TargetView { target_file_id: TARGET, version: 7, current_hash: &hash, content: &doc };
        let args = json!({"target_file_id": TARGET, "intent": "prop", "operations": ops, "expected_target_version": 7});
        let sub = submit::parse_submit_operations(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let attempt = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &view);

        let mut pargs = args.clone();
        pargs["format"] = json!("patchdiff-tx/2");
        let psub = preview::parse_preview(&pargs.to_string()).unwrap();
        prop_assert_eq!(psub.runtime_version, sub.runtime_version);
        let p = preview::preview(&psub, &view);

        prop_assert_eq!(p["status"].as_str(), Some(attempt.status));
        prop_assert_eq!(attempt.new_content.clone(), want.clone());
        if let Some(text) = &want {
            prop_assert_eq!(p["after_hash"].as_str(), attempt.after_hash.as_deref());
            prop_assert_eq!(attempt.after_hash.clone(), Some(sha256_hex(text)));
            prop_assert_eq!(&p["change_facts"], &json!(facts_of(&attempt)));
            let lines: Vec<String> = attempt.warnings.iter().map(|w| w.line()).collect();
            prop_assert_eq!(&p["warnings"], &json!(lines));
            prop_assert_eq!(attempt.diagnostic.is_some(), !attempt.warnings.is_empty());
            // The facts replay: each span applied in order onto the start text gives the result.
            let mut buf: Vec<char> = doc.chars().collect();
            for (fact, op) in attempt.changes.iter().zip(&ops) {
                buf.splice(fact.span_start..fact.span_end, canonical(op["replace"].as_str().unwrap()).chars());
            }
            prop_assert_eq!(buf.into_iter().collect::<String>(), text.clone());
        } else {
            prop_assert_eq!(&p["failure_reason"], &json!(attempt.failure_reason));
            prop_assert_eq!(&p["failed_change_id"], &json!(attempt.failed_change_id));
            prop_assert_eq!(&p["diagnostic"], attempt.diagnostic.as_ref().unwrap());
            prop_assert_eq!(&p["after_hash"], &Value::Null);
        }
    }

    /// tx/3: any replacement is accepted with one replace_all fact over the whole original.
    #[test]
    fn replacement_agrees(doc in text(16), r in payload(16)) {
        let hash = sha256_hex(&doc);
        let view = TargetView { target_file_id: TARGET, version: 0, current_hash: &hash, content: &doc };
        let args = json!({"target_file_id": TARGET, "intent": "prop", "replacement": r, "expected_current_hash": hash});
        let sub = submit::parse_submit_replacement(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &view);
        let mut pargs = args.clone();
        pargs["format"] = json!("patchdiff-tx/3");
        let p = preview::preview(&preview::parse_preview(&pargs.to_string()).unwrap(), &view);
        prop_assert_eq!(a.new_content.clone(), Some(canonical(&r)));
        prop_assert_eq!(p["after_hash"].as_str(), a.after_hash.as_deref());
        prop_assert_eq!(&p["change_facts"], &json!(facts_of(&a)));
        prop_assert_eq!(a.changes[0].span_end, doc.chars().count());
    }
}

mod replay_of_operations {
    use super::*;
    use patchdiff_engine::api::replay::{Accepted, Replay};

    /// Replays accepted attempts through the dispatch table, as the extension streams them.
    fn replay(base: &str, attempts: &[submit::Attempt]) -> Result<String, String> {
        let mut r =
            Replay::start(TARGET, 0, &sha256_hex(base), base.to_owned()).map_err(|f| f.detail)?;
        for (i, a) in attempts.iter().enumerate() {
            r.step(&Accepted::of(a, i as i64 + 1, "p"))
                .map_err(|f| format!("{}: {}", f.reason, f.detail))?;
        }
        Ok(r.content().to_owned())
    }

    fn submit_one(doc: &str, version: i64, args: Value) -> submit::Attempt {
        let hash = sha256_hex(doc);
        let view = TargetView {
            target_file_id: TARGET,
            version,
            current_hash: &hash,
            content: doc,
        };
        let sub = if args.get("replacement").is_some() {
            submit::parse_submit_replacement(&args.to_string())
        } else {
            submit::parse_submit_operations(&args.to_string())
        }
        .unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        submit::evaluate(&sub, &id, &Parent::NotLookedUp, &view)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Contract "Replay dispatches on the recorded runtime": accepted tx/2 (0.3.0 and 0.5.0)
        /// and tx/3 histories reconstruct the committed text.
        #[test]
        fn operations_and_replacements_replay(doc in text(16), steps in proptest::collection::vec((proptest::collection::vec(seed(), 1..4), proptest::option::of(payload(8))), 1..5)) {
            let mut current = doc.clone();
            let mut accepted = Vec::new();
            for (seeds, replacement) in steps {
                let v = accepted.len() as i64;
                let args = match replacement {
                    Some(r) => json!({"target_file_id": TARGET, "intent": "r", "replacement": r, "expected_target_version": v}),
                    None => json!({"target_file_id": TARGET, "intent": "o", "operations": build(&current, &seeds).0, "expected_target_version": v}),
                };
                let a = submit_one(&current, v, args);
                if let Some(text) = a.new_content.clone() {
                    current = text;
                    accepted.push(a);
                }
            }
            prop_assert_eq!(replay(&doc, &accepted), Ok(current));
        }
    }

    /// Runtime 0.3.0 still rejects span context keys at replay; the pair is supported.
    #[test]
    fn runtime_0_3_0_rejects_context_keys_on_replay() {
        let a = submit_one(
            "ab",
            0,
            json!({"target_file_id": TARGET, "intent": "o", "expected_target_version": 0,
            "operations": [{"op": "span", "start": 1, "end": 1, "expected_text": "", "replace": "-", "expected_before": "a"}]}),
        );
        assert_eq!(a.runtime_version, "patchdiff-mvp-0.5.0");
        assert_eq!(replay("ab", std::slice::from_ref(&a)), Ok("a-b".into()));
        let relabeled = submit::Attempt {
            runtime_version: "patchdiff-mvp-0.3.0",
            ..a
        };
        let e = replay("ab", &[relabeled]).unwrap_err();
        assert!(e.starts_with("replay_protocol_invalid"), "{e}");
    }
}
