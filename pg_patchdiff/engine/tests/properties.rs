//! Property tests: the engine against naive reference implementations over code-point vectors,
//! on text mixing ASCII, astral characters, combining marks and line breaks.

use patchdiff_engine::api::format::Edit;
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::text::{
    SourceLineEndings, byte_offset, canonicalize, char_len, find_all, slice_chars,
};
use patchdiff_engine::api::tx1;
use patchdiff_engine::wire::{ASCII, CANONICAL, to_string};
use proptest::prelude::*;
use serde_json::Value;

/// Small alphabets make repeated and overlapping matches likely.
fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just('b'),
            Just('🌍'),
            Just('e'),
            Just('\u{301}'),
            Just('\n'),
            Just('中')
        ],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

fn raw_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![Just('a'), Just('\r'), Just('\n'), Just('é')],
        0..max,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// Overlapping occurrences by brute force over code points.
fn naive_find(hay: &[char], needle: &[char]) -> Vec<(usize, usize)> {
    if needle.is_empty() || needle.len() > hay.len() {
        return vec![];
    }
    (0..=hay.len() - needle.len())
        .filter(|&i| hay[i..i + needle.len()] == *needle)
        .map(|i| (i, i + needle.len()))
        .collect()
}

fn contains(hay: &[char], needle: &[char]) -> bool {
    !naive_find(hay, needle).is_empty()
}

/// The tx/1 selection rules, restated over code-point vectors: Some(new buffer) or None (reject).
fn naive_apply(original: &str, edits: &[Edit]) -> Option<String> {
    let mut buf: Vec<char> = original.chars().collect();
    for e in edits {
        let m: Vec<char> = e.match_text.chars().collect();
        let occ = naive_find(&buf, &m);
        let holds = |&(s, t): &(usize, usize)| {
            e.anchor_before
                .as_ref()
                .is_none_or(|a| contains(&buf[..s], &a.chars().collect::<Vec<_>>()))
                && e.anchor_after
                    .as_ref()
                    .is_none_or(|a| contains(&buf[t..], &a.chars().collect::<Vec<_>>()))
        };
        let chosen = match e.occurrence_index {
            Some(n) => *occ.get(n - 1).filter(|o| holds(o))?,
            None => {
                let ok: Vec<_> = occ.iter().filter(|o| holds(o)).collect();
                if ok.len() != 1 {
                    return None;
                }
                *ok[0]
            }
        };
        buf.splice(chosen.0..chosen.1, e.replace.chars());
    }
    Some(buf.into_iter().collect())
}

fn edit(
    m: String,
    r: String,
    idx: Option<usize>,
    before: Option<String>,
    after: Option<String>,
    i: usize,
) -> Edit {
    Edit {
        match_raw_chars: 0,
        change_id: format!("chg_{:03}", i + 1),
        match_text: m,
        replace: r,
        rationale: None,
        risk: None,
        occurrence_index: idx,
        anchor_before: before.filter(|s| !s.is_empty()),
        anchor_after: after.filter(|s| !s.is_empty()),
    }
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(
        (
            text(3).prop_filter("non-empty", |s| !s.is_empty()),
            text(3),
            proptest::option::of(1usize..4),
            proptest::option::of(text(2)),
            proptest::option::of(text(2)),
        ),
        1..4,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (m, r, idx, b, a))| edit(m, r, idx, b, a, i))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Sequential application equals the naive reference: same acceptance, same text, and the
    /// recorded spans replay onto the start text.
    #[test]
    fn apply_matches_naive_reference(content in text(24), edits in edits()) {
        let view = TargetView { target_file_id: "t", version: 0, current_hash: "h", content: &content };
        let got = tx1::apply(&view, &edits);
        let want = naive_apply(&content, &edits);
        prop_assert_eq!(got.as_ref().ok().map(|a| a.content.clone()), want);
        if let Ok(applied) = got {
            let mut buf: Vec<char> = content.chars().collect();
            for (fact, e) in applied.changes.iter().zip(&edits) {
                prop_assert_eq!(fact.matched_chars, char_len(&e.match_text));
                buf.splice(fact.span_start..fact.span_end, e.replace.chars());
            }
            prop_assert_eq!(buf.into_iter().collect::<String>(), applied.content);
        }
    }

    #[test]
    fn find_all_matches_naive(hay in text(40), needle in text(3).prop_filter("non-empty", |s| !s.is_empty())) {
        let h: Vec<char> = hay.chars().collect();
        let n: Vec<char> = needle.chars().collect();
        prop_assert_eq!(find_all(&hay, &needle), naive_find(&h, &n));
    }

    #[test]
    fn code_point_offsets_agree(s in text(40), a in 0usize..45, b in 0usize..45) {
        let chars: Vec<char> = s.chars().collect();
        prop_assert_eq!(char_len(&s), chars.len());
        prop_assert_eq!(byte_offset(&s, a).is_some(), a <= chars.len());
        let (lo, hi) = (a.min(b).min(chars.len()), a.max(b).min(chars.len()));
        prop_assert_eq!(slice_chars(&s, lo, hi), chars[lo..hi].iter().collect::<String>());
    }

    /// Canonical text has no CR, canonicalization is idempotent, and the recorded facts count
    /// each line break once.
    #[test]
    fn canonicalization_and_line_ending_facts(raw in raw_text(30)) {
        let c = canonicalize(&raw);
        prop_assert!(!c.contains('\r'));
        let again = canonicalize(&c).into_owned();
        prop_assert_eq!(again.as_str(), c.as_ref());
        let f = SourceLineEndings::of(&raw);
        prop_assert_eq!((f.lf + f.crlf + f.cr) as usize, c.matches('\n').count());
        prop_assert_eq!(f.crlf as usize, raw.matches("\r\n").count());
        prop_assert_eq!(f.source_code_points as usize, raw.chars().count());
    }

    /// ASCII-escaped JSON is pure ASCII and parses back to the same value, in either key order.
    #[test]
    fn ascii_json_round_trips(s in "\\PC{0,20}", k in "[a-z\\u{e9}]{1,4}") {
        let v = serde_json::json!({ k.clone(): s, "z": [1, null, true] });
        for style in [ASCII, CANONICAL] {
            let out = to_string(&v, style);
            prop_assert!(out.is_ascii());
            prop_assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), v.clone());
        }
    }
}
