//! The drift evidence of `match_absent` rejections (issue 17, "Evidence an agent can act on"),
//! as properties over random texts and whitespace-drifted MATCH texts taken from them:
//! - every region's span is its text: the scanned text's code points `[start, end)` are exactly
//!   the region's `text` (or its `lines` joined with LF), and its line numbers are the lines
//!   that span covers;
//! - a whitespace candidate normalizes to the MATCH text, and none comes back when the
//!   normalized MATCH text is absent from the normalized scanned text (it is never fuzzy);
//! - a block near miss's counts add up to the MATCH text's non-blank lines;
//! - the whole `near_misses` object stays within the contract's 8,192 bytes;
//! - a MATCH text made from the text by whitespace drift alone always gets its region back.

use patchdiff_engine::api::drift::attach;
use patchdiff_engine::api::whitespace::normalize;
use patchdiff_engine::wire::ascii_len;
use proptest::prelude::*;
use serde_json::{Value, json};

const PIECES: &[&str] = &[
    "fn", "x", "=", "1;", "}", "{", "return", "é", "中", "a  b", "\t", "  ", "    ", "",
];

/// A text of lines made of pieces, some indented with spaces or tabs, some with trailing
/// spaces, some blank.
fn text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            0usize..4,
            proptest::collection::vec(0..PIECES.len(), 0..6),
            0usize..3,
        ),
        1..60,
    )
    .prop_map(|lines| {
        lines
            .into_iter()
            .map(|(indent, words, trail)| {
                let lead = ["", "    ", "\t", "  "][indent];
                let body: Vec<&str> = words.iter().map(|&w| PIECES[w]).collect();
                format!("{lead}{}{}", body.join(" "), " ".repeat(trail))
            })
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// The MATCH text: lines `from..to` of `t`, each re-indented, with its trailing spaces changed
/// and blank lines dropped or doubled, per `how`.
fn drifted(t: &str, from: usize, len: usize, how: u8) -> String {
    let lines: Vec<&str> = t.split('\n').collect();
    let from = from % lines.len();
    let to = (from + 1 + len % 12).min(lines.len());
    let mut out = Vec::new();
    for l in &lines[from..to] {
        let core = l.trim_matches([' ', '\t']);
        if core.is_empty() {
            if how & 1 == 0 {
                out.push(String::new());
                out.push("  ".into());
            }
            continue;
        }
        let lead = &l[..l.len() - l.trim_start_matches([' ', '\t']).len()];
        let lead = match how >> 1 & 3 {
            0 => lead.replace('\t', "    "),
            1 => lead.replace("    ", "\t"),
            2 => format!("  {lead}"),
            _ => lead.trim_start_matches(' ').to_owned(),
        };
        let trail = if how & 8 != 0 { " " } else { "" };
        out.push(format!("{lead}{core}{trail}"));
    }
    out.join("\n")
}

fn region_text(r: &Value) -> Option<String> {
    match (&r["text"], &r["lines"]) {
        (Value::String(s), _) => Some(s.clone()),
        (_, Value::Array(a)) => Some(
            a.iter()
                .map(|l| l.as_str().unwrap())
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The span's code points and line numbers hold the region's text.
fn check_span(t: &str, r: &Value) -> Result<(), TestCaseError> {
    let chars: Vec<char> = t.chars().collect();
    let (s, e) = (
        r["start"].as_u64().unwrap() as usize,
        r["end"].as_u64().unwrap() as usize,
    );
    let slice: String = chars[s..e].iter().collect();
    if let Some(text) = region_text(r) {
        prop_assert_eq!(&slice, &text);
    }
    let line_at = |cp: usize| chars[..cp].iter().filter(|&&c| c == '\n').count() + 1;
    prop_assert_eq!(r["start_line"].as_u64().unwrap() as usize, line_at(s));
    let last = if slice.ends_with('\n') { e - 1 } else { e };
    prop_assert_eq!(r["end_line"].as_u64().unwrap() as usize, line_at(last));
    Ok(())
}

fn evidence(t: &str, q: &str) -> Value {
    let mut v = json!({"candidates": []});
    attach(&mut v, t, q, 0);
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    #[test]
    fn whitespace_drift_comes_back_exactly(
        t in text(), from in 0usize..60, len in 0usize..12, how in 0u8..16,
    ) {
        let q = drifted(&t, from, len, how);
        prop_assume!(!normalize(&q).is_empty() && !t.contains(&q));
        let v = evidence(&t, &q);
        prop_assert!(ascii_len(&v) <= 8_192);
        let list = v["whitespace_candidates"]["candidates"].as_array().unwrap();
        prop_assert!(!list.is_empty(), "no candidate for {:?} in {:?}: {}", q, t, v);
        for c in list {
            check_span(&t, c)?;
            let text = region_text(c).unwrap();
            prop_assert_eq!(normalize(&text), normalize(&q));
            prop_assert!(!c["kinds"].as_array().unwrap().is_empty(), "{}", c);
        }
    }

    #[test]
    fn never_a_region_for_absent_text(t in text(), q in text()) {
        prop_assume!(!normalize(&q).is_empty() && !t.contains(&q));
        let v = evidence(&t, &q);
        prop_assert!(ascii_len(&v) <= 8_192);
        let list = v["whitespace_candidates"]["candidates"].as_array().unwrap();
        if !normalize(&t).contains(&normalize(&q)) {
            prop_assert!(list.is_empty(), "{}", v);
        }
        for c in list {
            check_span(&t, c)?;
            prop_assert_eq!(normalize(&region_text(c).unwrap()), normalize(&q));
        }
        let region = &v["block_near_miss"]["region"];
        if region.is_object() {
            check_span(&t, region)?;
            let lines = |k: &str| region[k].as_u64().unwrap();
            prop_assert_eq!(
                lines("equal_lines") + lines("changed_lines") + lines("missing_lines"),
                lines("match_lines")
            );
            prop_assert!(2 * lines("equal_lines") >= lines("match_lines"));
        }
    }

    /// A block with one changed line among drifted ones.
    #[test]
    fn a_block_with_one_changed_line_is_found(
        t in text(), from in 0usize..60, len in 2usize..12, how in 0u8..16, at in 0usize..12,
    ) {
        let q = drifted(&t, from, len, how);
        let mut lines: Vec<String> = q.split('\n').map(str::to_owned).collect();
        let content: Vec<usize> =
            (0..lines.len()).filter(|&i| !lines[i].trim().is_empty()).collect();
        prop_assume!(content.len() >= 3);
        let k = content[at % content.len()];
        lines[k] = format!("{} changed_here", lines[k]);
        let q = lines.join("\n");
        let v = evidence(&t, &q);
        prop_assert!(ascii_len(&v) <= 8_192);
        if v["block_near_miss"]["omission_reason"] == "whitespace_candidate_found" {
            // The changed line exists elsewhere: the whitespace candidate is the evidence.
            return Ok(());
        }
        let region = &v["block_near_miss"]["region"];
        prop_assert!(region.is_object(), "no region for {:?} in {:?}: {}", q, t, v);
        check_span(&t, region)?;
        prop_assert!(region["changed_lines"].as_u64().unwrap()
            + region["missing_lines"].as_u64().unwrap() >= 1);
    }
}
