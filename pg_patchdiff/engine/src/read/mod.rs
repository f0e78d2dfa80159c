//! Authoritative reads and exact search (`patchdiff_read_target`, `patchdiff_find_occurrences`).

pub mod lines;

use crate::contract::args::{ArgError, Args};
use crate::contract::limits::*;
use crate::contract::words::Status;
use crate::target::TargetView;
use crate::text::occurrence::for_each_occurrence;
use crate::text::{byte_offset, canonicalize, char_len, head_chars, tail_chars, text_defect};
use serde_json::{Value, json};

pub const READ_TARGET_ARGS: &[&str] = &["target_file_id", "start", "length"];
pub const FIND_ARGS: &[&str] = &[
    "target_file_id",
    "text",
    "context_chars",
    "start_occurrence",
    "max_results",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub start: usize,
    pub length: usize,
}

/// `start` (integer >= 0, default 0) and `length` (integer >= 1 or null, default 4,000,
/// clamped to 8,000).
pub fn parse_read_target(a: &Args) -> Result<ReadRequest, ArgError> {
    let start = a.opt_int("start", 0, false, "invalid_start")?.unwrap_or(0);
    let length = a
        .opt_int("length", 1, true, "invalid_length")?
        .map_or(READ_DEFAULT_CHARS, |n| {
            (n as u64).min(READ_MAX_CHARS as u64) as usize
        });
    Ok(ReadRequest {
        start: usize::try_from(start).unwrap_or(usize::MAX),
        length,
    })
}

pub fn read_target(t: &TargetView, r: ReadRequest) -> Result<Value, ArgError> {
    let Some(b0) = byte_offset(t.content, r.start) else {
        return Err(ArgError::new(
            "start_out_of_range",
            format!(
                "start {} is past the end of the target ({} code points)",
                r.start,
                char_len(t.content)
            ),
        ));
    };
    let rest = &t.content[b0..];
    let text = head_chars(rest, r.length);
    let end = r.start + char_len(text);
    let total = r.start + char_len(rest);
    Ok(json!({
        "status": Status::Ok.as_str(),
        "target_file_id": t.target_file_id,
        "version": t.version,
        "current_hash": t.current_hash,
        "start": r.start,
        "end": end,
        "text": text,
        "total_chars": total,
        "truncated": end < total,
        "next_start": if end < total { json!(end) } else { Value::Null },
    }))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindRequest {
    pub text: String,
    pub context_chars: usize,
    pub start_occurrence: usize,
    pub max_results: usize,
}

/// `text` (non-empty, canonicalized like edit payloads), `context_chars` (non-bool integer >= 0,
/// default 40, clamped to 400; null rejects), `start_occurrence` (>= 1, default 1) and
/// `max_results` (>= 1, default and cap 200).
pub fn parse_find(a: &Args) -> Result<FindRequest, ArgError> {
    let text = match a.opt_str("text", false, "invalid_text")? {
        Some(s) if !s.is_empty() => s,
        _ => {
            return Err(ArgError::new(
                "invalid_text",
                "text must be a non-empty string",
            ));
        }
    };
    if let Some(why) = text_defect(text) {
        return Err(ArgError::new("invalid_text", format!("text {why}")));
    }
    let clamp = |n: Option<i64>, default: usize, cap: usize| {
        n.map_or(default, |n| (n as u64).min(cap as u64) as usize)
    };
    Ok(FindRequest {
        text: canonicalize(text).into_owned(),
        context_chars: clamp(
            a.opt_int("context_chars", 0, false, "invalid_context_chars")?,
            SEARCH_CONTEXT_DEFAULT,
            SEARCH_CONTEXT_MAX,
        ),
        start_occurrence: clamp(
            a.opt_int("start_occurrence", 1, true, "invalid_start_occurrence")?,
            1,
            usize::MAX,
        ),
        max_results: clamp(
            a.opt_int("max_results", 1, true, "invalid_max_results")?,
            SEARCH_MAX_RESULTS,
            SEARCH_MAX_RESULTS,
        ),
    })
}

pub fn find_occurrences(t: &TargetView, r: &FindRequest) -> Value {
    let content = t.content;
    let mut found: Vec<(usize, usize)> = Vec::new();
    let first = r.start_occurrence;
    let last = first.saturating_add(r.max_results); // exclusive, 1-based
    let mut index = 0usize;
    let total = for_each_occurrence(content, &r.text, |s, e| {
        index += 1;
        if index >= first && index < last {
            found.push((s, e));
        }
        true
    });
    // Context slices are taken by walking from the previous occurrence, not from the start,
    // so a page of 200 occurrences near the end of 1 MiB stays linear.
    let mut occurrences = Vec::with_capacity(found.len());
    // Slices are located from the previous occurrence, not from the start of the text, so a
    // page of 200 occurrences near the end of 1 MiB stays linear.
    let (mut cur_cp, mut cur_b) = (0usize, 0usize);
    for (i, &(s, e)) in found.iter().enumerate() {
        let from = s.saturating_sub(r.context_chars);
        let b_from = if from >= cur_cp {
            cur_b + byte_offset(&content[cur_b..], from - cur_cp).unwrap_or(content.len() - cur_b)
        } else {
            cur_b - tail_chars(&content[..cur_b], cur_cp - from).len()
        };
        let b_s = b_from + byte_offset(&content[b_from..], s - from).unwrap_or(0);
        let b_e = b_s + byte_offset(&content[b_s..], e - s).unwrap_or(0);
        occurrences.push(json!({
            "occurrence_index": first + i,
            "start": s,
            "end": e,
            "before": &content[b_from..b_s],
            "after": head_chars(&content[b_e..], r.context_chars),
        }));
        (cur_cp, cur_b) = (s, b_s);
    }
    let returned = occurrences.len();
    let next = first.saturating_add(returned);
    let truncated = next <= total;
    json!({
        "status": Status::Ok.as_str(),
        "target_file_id": t.target_file_id,
        "version": t.version,
        "current_hash": t.current_hash,
        "occurrence_count": total,
        "returned_count": returned,
        "start_occurrence": first,
        "occurrences": occurrences,
        "truncated": truncated,
        "next_occurrence_index": if truncated { json!(next) } else { Value::Null },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "t",
            version: 1,
            current_hash: "h",
            content,
        }
    }

    fn args(s: &str, allowed: &[&str]) -> Args {
        Args::parse(s, allowed, &[]).unwrap()
    }

    /// Contract "patchdiff_read_target": code-point slices, next_start continuation.
    #[test]
    fn read_pages_by_code_point() {
        let content = "a🌍".repeat(5000); // 10,000 code points
        let r = parse_read_target(&args("{}", READ_TARGET_ARGS)).unwrap();
        let v = read_target(&view(&content), r).unwrap();
        assert_eq!(
            (
                v["start"].as_u64(),
                v["end"].as_u64(),
                v["total_chars"].as_u64()
            ),
            (Some(0), Some(4000), Some(10000))
        );
        assert_eq!(v["next_start"], 4000);
        let r = parse_read_target(&args(r#"{"start":9999,"length":100000}"#, READ_TARGET_ARGS))
            .unwrap();
        let v = read_target(&view(&content), r).unwrap();
        assert_eq!(v["text"], "🌍");
        assert_eq!(v["truncated"], false);
        assert_eq!(v["next_start"], Value::Null);
        let r = parse_read_target(&args(r#"{"start":10000}"#, READ_TARGET_ARGS)).unwrap();
        assert_eq!(read_target(&view(&content), r).unwrap()["text"], "");
        let r = parse_read_target(&args(r#"{"start":10001}"#, READ_TARGET_ARGS)).unwrap();
        assert_eq!(
            read_target(&view(&content), r).unwrap_err().code,
            "start_out_of_range"
        );
        assert_eq!(
            parse_read_target(&args(r#"{"length":20000}"#, READ_TARGET_ARGS))
                .unwrap()
                .length,
            8000
        );
        for bad in [
            r#"{"length":0}"#,
            r#"{"start":-1}"#,
            r#"{"start":true}"#,
            r#"{"start":null}"#,
            r#"{"length":1.5}"#,
        ] {
            assert!(
                parse_read_target(&args(bad, READ_TARGET_ARGS)).is_err(),
                "{bad}"
            );
        }
    }

    /// Contract "patchdiff_find_occurrences": overlapping occurrences, context, paging.
    #[test]
    fn find_overlapping_with_context_and_paging() {
        let t = view("xaaaay");
        let r = parse_find(&args(
            r#"{"text":"aa","context_chars":1,"max_results":2}"#,
            FIND_ARGS,
        ))
        .unwrap();
        let v = find_occurrences(&t, &r);
        assert_eq!(v["occurrence_count"], 3);
        assert_eq!(v["returned_count"], 2);
        assert_eq!(
            v["occurrences"][0],
            json!({"occurrence_index":1,"start":1,"end":3,"before":"x","after":"a"})
        );
        assert_eq!(
            v["occurrences"][1],
            json!({"occurrence_index":2,"start":2,"end":4,"before":"a","after":"a"})
        );
        assert_eq!(v["truncated"], true);
        assert_eq!(v["next_occurrence_index"], 3);
        let r = parse_find(&args(
            r#"{"text":"aa","context_chars":0,"start_occurrence":3}"#,
            FIND_ARGS,
        ))
        .unwrap();
        let v = find_occurrences(&t, &r);
        assert_eq!(
            v["occurrences"][0],
            json!({"occurrence_index":3,"start":3,"end":5,"before":"","after":""})
        );
        assert_eq!(v["truncated"], false);
        assert_eq!(v["next_occurrence_index"], Value::Null);
        for bad in [
            r#"{"text":"a","context_chars":null}"#,
            r#"{"text":"a","context_chars":-1}"#,
            r#"{"text":"a","context_chars":true}"#,
            r#"{"text":"a","context_chars":"4"}"#,
            r#"{"text":"a","context_chars":1.0}"#,
            r#"{"text":""}"#,
            r#"{"text":"a","max_results":0}"#,
        ] {
            assert!(parse_find(&args(bad, FIND_ARGS)).is_err(), "{bad}");
        }
        // Clamped whatever their size, also past i64 (helper-61: those were refused).
        for big in ["9999", "18446744073709551615"] {
            assert_eq!(
                parse_find(&args(
                    &format!(r#"{{"text":"a","context_chars":{big},"max_results":{big}}}"#),
                    FIND_ARGS
                ))
                .unwrap(),
                FindRequest {
                    text: "a".into(),
                    context_chars: 400,
                    start_occurrence: 1,
                    max_results: 200
                }
            );
        }
    }

    #[test]
    fn find_context_is_in_code_points() {
        let t = view("🌍中ab中🌍");
        let r = parse_find(&args(r#"{"text":"ab","context_chars":2}"#, FIND_ARGS)).unwrap();
        let v = find_occurrences(&t, &r);
        assert_eq!(
            v["occurrences"][0],
            json!({"occurrence_index":1,"start":2,"end":4,"before":"🌍中","after":"中🌍"})
        );
    }
}
