//! The drift evidence of a `match_absent` rejection (issue 17, "Evidence an agent can act on"):
//! two members added to the response-only `near_misses` object, next to the contract's own,
//! which stay exactly as they are:
//!
//! - `whitespace_candidates`: regions whose text equals the MATCH text once whitespace is
//!   normalized (`whitespace.rs`), each with its exact current text, span and what differed;
//! - `block_near_miss`: for a MATCH text of two or more non-blank lines and at most 4,096 code
//!   points, the closest region by a line-level alignment (`block.rs`) with its per-line
//!   differences; omitted (`whitespace_candidate_found`) when a whitespace candidate exists.
//!
//! Both are searched in the same text and coordinates as the near misses (the failing buffer's
//! first 65,536 code points, or on exact recovery the stored failure context), and the whole
//! `near_misses` object, these members included, stays within the contract's 8,192 bytes: the
//! contract's members are built first and never shortened; these take what is left, dropping
//! trailing candidates, then trailing line differences, then a region's text (its span and lines
//! stay), then the member (`omission_reason: "byte_budget"`). A region's text is given whole or
//! not at all, never shortened: as `text` when it has at most 1,024 code points, otherwise as
//! `lines` (its text split at each LF, each at most 1,024 code points), so that the preview's
//! per-field limit never cuts it.

use super::block::{self, BLOCK_QUERY_MAX_CHARS, BlockRegion};
use super::whitespace::{self, Drift, Normalized, WsCandidate};
use crate::contract::json::ascii_len;
use crate::contract::limits::{NEAR_MISSES_MAX_BYTES, PREVIEW_TEXT_MAX_CHARS};
use crate::text::{char_len, head_chars};
use serde_json::{Map, Value, json};

/// At most this many line differences are listed (`line_differences_truncated` says when more
/// exist; the counts are always complete).
pub const LINE_DIFFERENCES_MAX: usize = 8;

/// Each line of a line difference is shown up to this many code points (`truncated` says when
/// one was cut; these lines are for reading, the region's text is the one to resend).
pub const DIFFERENCE_LINE_MAX_CHARS: usize = 160;

/// `omission_reason` of a member: the MATCH text was not stored (exact recovery of a MATCH text
/// over 64 code points).
pub const QUERY_NOT_STORED: &str = "query_not_stored";

/// MATCH texts of more code points than the scanned text can hold get no whitespace search
/// (`omission_reason: "match_too_large"`): describing the drift of each region costs the MATCH
/// text's length, and a longer one is nearly all whitespace.
pub const WHITESPACE_QUERY_MAX_CHARS: usize = crate::contract::limits::NEAR_MISS_SCAN_MAX_CHARS;

/// Adds `whitespace_candidates` and `block_near_miss` to the near-miss object `near_misses`,
/// searched in `text`, which starts at code point `offset` of the failing buffer.
pub fn attach(near_misses: &mut Value, text: &str, query: &str, offset: usize) {
    crate::evidence::near_miss::fault::at_drift();
    let Some(m) = near_misses.as_object_mut() else {
        return;
    };
    let n = Normalized::new(text);
    let qchars = char_len(query);
    let ws = if qchars > WHITESPACE_QUERY_MAX_CHARS {
        None
    } else {
        Some(whitespace::candidates(&n, query))
    };
    let two_lines = whitespace::normalize(query).contains('\n');
    let block = if ws.as_ref().is_some_and(|w| !w.candidates.is_empty()) {
        Err("whitespace_candidate_found")
    } else if qchars > BLOCK_QUERY_MAX_CHARS {
        Err("match_too_large")
    } else if !two_lines {
        Err("single_line_match")
    } else {
        Ok(block::search(&n, query))
    };
    let lines_known = offset == 0;
    let line_no = |l: usize| lines_known.then_some(l + 1);

    // whitespace_candidates
    let Some(ws) = ws else {
        m.insert(
            "whitespace_candidates".into(),
            json!({ "omission_reason": "match_too_large" }),
        );
        if !fits(m) {
            m.remove("whitespace_candidates");
        }
        attach_block(m, &n, query, block, offset);
        return;
    };
    let list: Vec<Map<String, Value>> = ws
        .candidates
        .iter()
        .map(|c| ws_candidate(&n, c, offset, line_no))
        .collect();
    let mut keep = list.len();
    let mut drop_text = false;
    loop {
        let mut items: Vec<Value> = list[..keep].iter().cloned().map(Value::Object).collect();
        if drop_text && let Some(Value::Object(last)) = items.last_mut() {
            omit_text(last);
        }
        let member = json!({
            "candidates": items,
            "candidates_truncated": ws.candidates_truncated || keep < list.len(),
        });
        m.insert("whitespace_candidates".into(), member);
        if fits(m) {
            break;
        }
        if keep > 1 {
            keep -= 1;
        } else if keep == 1 && !drop_text {
            drop_text = true;
        } else {
            omit_member(m, "whitespace_candidates");
            break;
        }
    }

    attach_block(m, &n, query, block, offset);
}

/// Adds `block_near_miss`: the search's outcome, or why it did not run.
fn attach_block(
    m: &mut Map<String, Value>,
    n: &Normalized<'_>,
    query: &str,
    block: Result<block::BlockSearch, &'static str>,
    offset: usize,
) {
    let line_no = |l: usize| (offset == 0).then_some(l + 1);
    match block {
        Err(reason) => {
            m.insert(
                "block_near_miss".into(),
                json!({ "omission_reason": reason }),
            );
            if !fits(m) {
                m.remove("block_near_miss");
            }
        }
        Ok(found) => {
            let region = found
                .region
                .as_ref()
                .map(|r| block_region(n, query, r, offset, line_no));
            let cells = found.comparison_cells;
            let mut diffs = region
                .as_ref()
                .map_or(0, |r| r["line_differences"].as_array().map_or(0, Vec::len));
            let mut drop_text = false;
            loop {
                let mut r = region.clone();
                if let Some(Value::Object(o)) = r.as_mut() {
                    let all = o["line_differences"].as_array().map_or(0, Vec::len);
                    if diffs < all {
                        if let Some(Value::Array(a)) = o.get_mut("line_differences") {
                            a.truncate(diffs);
                        }
                        o.insert("line_differences_truncated".into(), json!(true));
                    }
                    if drop_text {
                        omit_text(o);
                    }
                }
                m.insert(
                    "block_near_miss".into(),
                    json!({ "region": r, "comparison_cells": cells }),
                );
                if fits(m) {
                    break;
                }
                if diffs > 0 {
                    diffs -= 1;
                } else if region.is_some() && !drop_text {
                    drop_text = true;
                } else {
                    omit_member(m, "block_near_miss");
                    break;
                }
            }
        }
    }
}

/// Adds both members as omitted for `reason` (exact recovery without a stored MATCH text).
pub fn attach_unavailable(near_misses: &mut Value, reason: &str) {
    if let Some(m) = near_misses.as_object_mut() {
        for k in ["whitespace_candidates", "block_near_miss"] {
            m.insert(k.into(), json!({ "omission_reason": reason }));
        }
    }
}

fn fits(m: &Map<String, Value>) -> bool {
    ascii_len(&Value::Object(m.clone())) <= NEAR_MISSES_MAX_BYTES
}

fn omit_member(m: &mut Map<String, Value>, key: &str) {
    m.insert(key.into(), json!({ "omission_reason": "byte_budget" }));
    if !fits(m) {
        m.remove(key);
    }
}

fn omit_text(o: &mut Map<String, Value>) {
    o.insert("text".into(), Value::Null);
    o.insert("lines".into(), Value::Null);
    o.insert("text_omitted".into(), json!("byte_budget"));
}

/// `text`, `lines` and `text_omitted` of a region: the text whole when it has at most 1,024
/// code points, else its lines when each has at most 1,024, else neither.
fn region_text(o: &mut Map<String, Value>, text: &str) {
    if char_len(text) <= PREVIEW_TEXT_MAX_CHARS {
        o.insert("text".into(), json!(text));
        o.insert("lines".into(), Value::Null);
        o.insert("text_omitted".into(), Value::Null);
    } else if text
        .split('\n')
        .all(|l| char_len(l) <= PREVIEW_TEXT_MAX_CHARS)
    {
        o.insert("text".into(), Value::Null);
        o.insert("lines".into(), json!(text.split('\n').collect::<Vec<_>>()));
        o.insert("text_omitted".into(), Value::Null);
    } else {
        o.insert("text".into(), Value::Null);
        o.insert("lines".into(), Value::Null);
        o.insert("text_omitted".into(), json!("text_field_limit"));
    }
}

fn drift_fields(o: &mut Map<String, Value>, d: &Drift) {
    o.insert("kinds".into(), json!(d.kinds));
    o.insert("indentation_delta".into(), json!(d.indentation_delta));
    o.insert("tab_width".into(), json!(d.tab_width));
}

fn ws_candidate(
    n: &Normalized<'_>,
    c: &WsCandidate,
    offset: usize,
    line_no: impl Fn(usize) -> Option<usize>,
) -> Map<String, Value> {
    let mut o = Map::new();
    o.insert("start".into(), json!(offset + c.start));
    o.insert("end".into(), json!(offset + c.end));
    o.insert("start_line".into(), json!(line_no(c.first_line)));
    o.insert("end_line".into(), json!(line_no(c.last_line)));
    region_text(&mut o, &n.src[c.byte_start..c.byte_end]);
    drift_fields(&mut o, &c.drift);
    o
}

fn shown(s: &str) -> (String, bool) {
    let h = head_chars(s, DIFFERENCE_LINE_MAX_CHARS);
    (h.to_owned(), h.len() < s.len())
}

fn block_region(
    n: &Normalized<'_>,
    query: &str,
    r: &BlockRegion,
    offset: usize,
    line_no: impl Fn(usize) -> Option<usize>,
) -> Value {
    let mut o = Map::new();
    o.insert("start".into(), json!(offset + n.cp_of(r.byte_start)));
    o.insert("end".into(), json!(offset + n.cp_of(r.byte_end)));
    o.insert("start_line".into(), json!(line_no(r.first_line)));
    o.insert("end_line".into(), json!(line_no(r.last_line)));
    region_text(&mut o, &n.src[r.byte_start..r.byte_end]);
    o.insert("match_lines".into(), json!(r.match_lines));
    o.insert("equal_lines".into(), json!(r.equal_lines));
    o.insert("changed_lines".into(), json!(r.changed_lines));
    o.insert("missing_lines".into(), json!(r.missing_lines));
    o.insert("extra_lines".into(), json!(r.extra_lines));
    drift_fields(&mut o, &r.drift);
    let qlines: Vec<&str> = query.split('\n').collect();
    let diffs: Vec<Value> = r
        .differences
        .iter()
        .take(LINE_DIFFERENCES_MAX)
        .map(|d| {
            let kind = match (d.match_line, d.line) {
                (Some(_), Some(_)) => "changed",
                (Some(_), None) => "missing",
                _ => "extra",
            };
            let (expected, et) = d.match_line.map_or((None, false), |k| {
                let (s, t) = shown(qlines[k - 1]);
                (Some(s), t)
            });
            let (current, ct) = d.line.map_or((None, false), |l| {
                let line = &n.lines[l];
                let (s, t) = shown(&n.src[line.start..line.end]);
                (Some(s), t)
            });
            json!({
                "kind": kind,
                "match_line": d.match_line,
                "line": d.line.and_then(&line_no),
                "expected": expected,
                "current": current,
                "truncated": et || ct,
            })
        })
        .collect();
    o.insert("line_differences".into(), json!(diffs));
    o.insert(
        "line_differences_truncated".into(),
        json!(r.differences.len() > LINE_DIFFERENCES_MAX),
    );
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evidence(buf: &str, q: &str) -> Value {
        let mut v = json!({"candidates": []});
        attach(&mut v, buf, q, 0);
        v
    }

    #[test]
    fn whitespace_candidate_with_span_and_lines() {
        let buf = "a:\n  b: 1\n  c: 2\n";
        let v = evidence(buf, "a:\n    b: 1\n    c: 2");
        let c = &v["whitespace_candidates"]["candidates"][0];
        assert_eq!(c["text"], "a:\n  b: 1\n  c: 2");
        assert_eq!((&c["start"], &c["end"]), (&json!(0), &json!(16)));
        assert_eq!((&c["start_line"], &c["end_line"]), (&json!(1), &json!(3)));
        assert_eq!(c["kinds"], json!(["indentation"]));
        // The first line kept its place, the others moved: no uniform delta.
        assert_eq!(c["indentation_delta"], Value::Null);
        assert_eq!(
            v["block_near_miss"],
            json!({"omission_reason": "whitespace_candidate_found"})
        );
    }

    #[test]
    fn block_region_lists_the_changed_line() {
        let buf = "x = 1\ny = 2\nz = 3\nw = 4\n";
        let v = evidence(buf, "y = 2\nz = 30\nw = 4\n");
        assert_eq!(v["whitespace_candidates"]["candidates"], json!([]));
        let r = &v["block_near_miss"]["region"];
        assert_eq!(r["text"], "y = 2\nz = 3\nw = 4\n");
        assert_eq!((&r["start"], &r["end"]), (&json!(6), &json!(24)));
        assert_eq!(
            r["line_differences"],
            json!([{"kind": "changed", "match_line": 2, "line": 3, "expected": "z = 30",
                    "current": "z = 3", "truncated": false}])
        );
    }

    /// Long regions come as lines; whatever is returned fits the near-miss budget.
    #[test]
    fn long_regions_come_as_lines_within_budget() {
        let body: String = (0..60)
            .map(|i| format!("        step_{i:03}(context);\n"))
            .collect();
        let buf = format!("fn run() {{\n{body}}}\n");
        let sent: String = body
            .lines()
            .map(|l| format!("    {}\n", l.trim()))
            .collect();
        let v = evidence(&buf, &sent[..sent.len().min(4000)]);
        let c = &v["whitespace_candidates"]["candidates"][0];
        assert_eq!(c["text"], Value::Null);
        let lines: Vec<&str> = c["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        assert_eq!(lines.join("\n"), body.trim_end_matches('\n'));
        assert!(ascii_len(&v) <= NEAR_MISSES_MAX_BYTES);
    }

    #[test]
    fn single_lines_and_large_queries_name_their_reason() {
        let v = evidence("abc\n", "abd");
        assert_eq!(
            v["block_near_miss"],
            json!({"omission_reason": "single_line_match"})
        );
        let huge = format!("{}abc", " ".repeat(70_000));
        let v = evidence("abc\n", &huge);
        assert_eq!(
            (&v["whitespace_candidates"], &v["block_near_miss"]),
            (
                &json!({"omission_reason": "match_too_large"}),
                &json!({"omission_reason": "match_too_large"})
            )
        );
        let big = "q\n".repeat(2_100);
        let v = evidence("abc\n", &big);
        assert_eq!(
            v["block_near_miss"],
            json!({"omission_reason": "match_too_large"})
        );
    }
}
