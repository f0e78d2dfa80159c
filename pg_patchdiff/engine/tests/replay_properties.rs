//! Property test of replay (issue "Checkpoints, replay and history"): random documents and
//! random histories of tx/1 transactions, each judged by the submission pipeline itself
//! (`parse_submit_edits`, `prepare`, `evaluate`), then replayed from the initial text. The
//! reconstruction must equal the final text, hash and version, every row must check out, and
//! rejected attempts must not matter.

use patchdiff_engine::api::replay::{Accepted, Replay};
use patchdiff_engine::api::submit::{self, Parent};
use patchdiff_engine::api::target::{TargetView, parse_initialize};
use patchdiff_engine::api::text::{char_len, find_all, sha256_hex, slice_chars};
use proptest::prelude::*;
use serde_json::{Value, json};

const ID: &str = "11111111-1111-4111-8111-111111111111";

/// Small alphabets make repeated, overlapping and consumed matches likely; CR appears only
/// in raw text, which upload and payload canonicalization turn into LF.
fn chars(max: usize, with_cr: bool) -> impl Strategy<Value = String> {
    let alphabet = if with_cr {
        vec!['a', 'b', '🌍', 'e', '\u{301}', '\n', '\r', '中']
    } else {
        vec!['a', 'b', '🌍', 'e', '\u{301}', '\n', '中']
    };
    proptest::collection::vec(proptest::sample::select(alphabet), 0..max)
        .prop_map(|v| v.into_iter().collect())
}

/// One edit: either derived from the buffer (a slice at a relative position, selected by its
/// occurrence index, so a first edit usually applies) or drawn at random (often rejected).
#[derive(Debug, Clone)]
enum EditPlan {
    Slice {
        at: f64,
        len: usize,
        replace: String,
    },
    Random {
        matched: String,
        replace: String,
        occurrence_index: Option<u8>,
        anchor_before: Option<String>,
    },
}

fn edit_plan() -> impl Strategy<Value = EditPlan> {
    prop_oneof![
        3 => (0.0..1.0f64, 1..4usize, chars(5, true))
            .prop_map(|(at, len, replace)| EditPlan::Slice { at, len, replace }),
        1 => (
            chars(3, false).prop_filter("non-empty", |s| !s.is_empty()),
            chars(4, true),
            proptest::option::of(1..4u8),
            proptest::option::weighted(0.2, chars(2, false).prop_filter("non-empty", |s| !s.is_empty())),
        )
            .prop_map(|(matched, replace, occurrence_index, anchor_before)| EditPlan::Random {
                matched,
                replace,
                occurrence_index,
                anchor_before,
            }),
    ]
}

fn to_json(p: &EditPlan, buffer: &str) -> Option<Value> {
    match p {
        EditPlan::Slice { at, len, replace } => {
            let n = char_len(buffer);
            if n == 0 {
                return None;
            }
            let start = ((*at * n as f64) as usize).min(n - 1);
            let end = (start + len).min(n);
            let m = slice_chars(buffer, start, end);
            let index = find_all(buffer, m).iter().position(|&(s, _)| s == start)? + 1;
            Some(json!({"match": m, "replace": replace, "occurrence_index": index}))
        }
        EditPlan::Random {
            matched,
            replace,
            occurrence_index,
            anchor_before,
        } => {
            let mut e = json!({"match": matched, "replace": replace});
            if let Some(i) = occurrence_index {
                e["occurrence_index"] = json!(i);
            }
            if let Some(a) = anchor_before {
                e["anchor_before"] = json!(a);
            }
            Some(e)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn replay_reconstructs_every_accepted_history(
        upload in chars(60, true),
        history in proptest::collection::vec(proptest::collection::vec(edit_plan(), 1..4), 0..16),
    ) {
        let init = parse_initialize(&json!({"filename": "d", "content": upload}).to_string(), false).unwrap();
        let base = init.canonical.clone();
        let (mut text, mut hash, mut version) = (base.clone(), init.current_hash.clone(), 0i64);
        let mut rows: Vec<(i64, submit::Attempt)> = Vec::new();
        for (seq, plans) in history.iter().enumerate() {
            let edits: Vec<Value> = plans.iter().filter_map(|p| to_json(p, &text)).collect();
            if edits.is_empty() {
                continue;
            }
            let args = json!({"target_file_id": ID, "intent": "prop", "edits": edits, "expected_target_version": version});
            let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
            let id = submit::prepare(&sub, &Parent::NotLookedUp);
            let start = TargetView { target_file_id: ID, version, current_hash: &hash, content: &text };
            let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &start);
            if a.status == "accepted" {
                text = a.new_content.clone().unwrap();
                hash = a.after_hash.clone().unwrap();
                version += 1;
            }
            // Sequences are global and have gaps: another target's rows sit between ours.
            rows.push((3 * seq as i64 + 7, a));
        }
        let mut replay = Replay::start(ID, 0, &sha256_hex(&base), base).unwrap();
        for (seq, a) in rows.iter().filter(|(_, a)| a.status == "accepted") {
            replay.step(&Accepted::of(a, *seq, "p")).unwrap();
        }
        prop_assert_eq!(replay.content(), text.as_str());
        let now = TargetView { target_file_id: ID, version, current_hash: &hash, content: &text };
        let v = replay.finish(&now);
        prop_assert_eq!(&v["status"], "success");
        prop_assert_eq!(&v["materialized_state_matches"], true);
        prop_assert_eq!(&v["reconstructed_version"], version);
        prop_assert_eq!(v["accepted_transactions_replayed"].as_i64(), Some(version));
    }
}

/// The generator is not vacuous: a fixed seed's histories accept most slice-derived edits.
#[test]
fn histories_mostly_accept() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut total) = (0, 0);
    for _ in 0..200 {
        let doc = chars(60, false).new_tree(&mut runner).unwrap().current();
        let plan = (0.0..1.0f64, 1..4usize, chars(5, true))
            .prop_map(|(at, len, replace)| EditPlan::Slice { at, len, replace })
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let Some(edit) = to_json(&plan, &doc) else {
            continue;
        };
        total += 1;
        let h = sha256_hex(&doc);
        let args = json!({"target_file_id": ID, "intent": "p", "edits": [edit], "expected_target_version": 0});
        let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let t = TargetView {
            target_file_id: ID,
            version: 0,
            current_hash: &h,
            content: &doc,
        };
        if submit::evaluate(&sub, &id, &Parent::NotLookedUp, &t).status == "accepted" {
            accepted += 1;
        }
    }
    assert!(
        total > 150 && accepted * 10 >= total * 9,
        "{accepted}/{total}"
    );
}
