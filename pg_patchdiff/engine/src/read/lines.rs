//! `patchdiff_read_lines`: bounded reads of inclusive LF line ranges (contract
//! "patchdiff_read_lines").
//!
//! Lines are one-based and LF-only; each line includes its trailing LF, a trailing LF makes a
//! final empty line and an empty target has one empty line. Pages are code-point ranges inside
//! the selected line range: `next_offset` continues relative to `range_start`, `next_start` is
//! absolute (for `patchdiff_read_target`).

use crate::contract::args::{ArgError, Args};
use crate::contract::interrupt;
use crate::contract::json::{as_int, is_big_int, type_name};
use crate::contract::limits::{READ_DEFAULT_CHARS, READ_MAX_CHARS};
use crate::contract::words::Status;
use crate::target::TargetView;
use crate::text::{byte_offset, char_len};
use serde_json::{Value, json};

pub const READ_LINES_ARGS: &[&str] = &[
    "target_file_id",
    "start_line",
    "end_line",
    "offset",
    "max_chars",
    "include_line_starts",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinesRequest {
    pub start_line: usize,
    pub end_line: Option<usize>,
    pub offset: usize,
    pub max_chars: usize,
    pub include_line_starts: bool,
}

/// A positive (or, for `offset`, non-negative) non-bool integer; huge values saturate so that
/// they reach the range checks as out of range.
fn int_arg(
    a: &Args,
    k: &str,
    min: i64,
    nullable: bool,
    code: &'static str,
) -> Result<Option<usize>, ArgError> {
    let what = if min > 0 {
        "a positive"
    } else {
        "a non-negative"
    };
    match a.get(k) {
        None => Ok(None),
        Some(Value::Null) if nullable => Ok(None),
        Some(v) if is_big_int(v) => Ok(Some(usize::MAX)),
        Some(v) => match as_int(v) {
            Some(n) if n >= min => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
            Some(n) => Err(ArgError::new(
                code,
                format!("{k} must be {what} integer, not {n}"),
            )),
            None => Err(ArgError::new(
                code,
                format!(
                    "{k} must be {what} non-boolean integer{}, not {}",
                    if nullable { " or null" } else { "" },
                    type_name(v)
                ),
            )),
        },
    }
}

/// `start_line` (>= 1, default 1), `end_line` (>= 1 or null, default the last line), `offset`
/// (>= 0, default 0), `max_chars` (>= 1 or null; default 4,000, capped at 8,000) and
/// `include_line_starts` (boolean, default false).
pub fn parse_read_lines(a: &Args) -> Result<LinesRequest, ArgError> {
    let start_line = int_arg(a, "start_line", 1, false, "invalid_start_line")?.unwrap_or(1);
    let end_line = int_arg(a, "end_line", 1, true, "invalid_end_line")?;
    let offset = int_arg(a, "offset", 0, false, "invalid_offset")?.unwrap_or(0);
    let max_chars = int_arg(a, "max_chars", 1, true, "invalid_max_chars")?
        .map_or(READ_DEFAULT_CHARS, |n| n.min(READ_MAX_CHARS));
    let include_line_starts = match a.get("include_line_starts") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ArgError::new(
                "invalid_include_line_starts",
                format!(
                    "include_line_starts must be a boolean, not {}",
                    type_name(v)
                ),
            ));
        }
    };
    if let Some(e) = end_line.filter(|e| *e < start_line) {
        return Err(ArgError::new(
            "invalid_line_range",
            format!("end_line {e} is before start_line {start_line}"),
        ));
    }
    Ok(LinesRequest {
        start_line,
        end_line,
        offset,
        max_chars,
        include_line_starts,
    })
}

pub fn read_lines(t: &TargetView, r: LinesRequest) -> Result<Value, ArgError> {
    let content = t.content;
    // One pass over the LFs (memchr), keeping only what the answer needs: the totals, the code
    // point starts of the selected range's first line and of the line after it, and, for
    // `include_line_starts`, the starts that can fall on the page (at most `max_chars` + 1).
    // Not every line's start: a page of a text of 67 million empty lines held a 512 MiB vector
    // of them (helper-58).
    // Checked: an `end_line` of usize::MAX is refused as past the last line after this pass.
    let end_line_after = r.end_line.and_then(|e| e.checked_add(1));
    let (mut range_start, mut range_end_start) = (None, None);
    let mut page_starts: Vec<(usize, usize)> = Vec::new();
    let mut line_starts_at = |line: usize, at: usize| {
        if line == r.start_line {
            range_start = Some(at);
        }
        if Some(line) == end_line_after {
            range_end_start = Some(at);
        }
        if r.include_line_starts
            && line >= r.start_line
            && r.end_line.is_none_or(|e| line <= e)
            && let Some(rs) = range_start
            // Saturating: `offset` is checked against the range only after this pass, and
            // may be as large as usize (helper-60).
            && (rs.saturating_add(r.offset)..=rs.saturating_add(r.offset).saturating_add(r.max_chars))
                .contains(&at)
        {
            page_starts.push((line, at));
        }
    };
    line_starts_at(1, 0);
    let (mut cp, mut from, mut total_lines) = (0usize, 0usize, 1usize);
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    for at in memchr::memchr_iter(b'\n', content.as_bytes()) {
        ticks.tick();
        cp += char_len(&content[from..at]) + 1;
        from = at + 1;
        total_lines += 1;
        line_starts_at(total_lines, cp);
    }
    let total_chars = cp + char_len(&content[from..]);
    if r.start_line > total_lines {
        return Err(ArgError::new(
            "start_line_out_of_range",
            format!(
                "start_line {} is past the last line ({total_lines})",
                r.start_line
            ),
        )
        .with("total_lines", json!(total_lines)));
    }
    let end_line = r.end_line.unwrap_or(total_lines);
    if end_line > total_lines {
        return Err(ArgError::new(
            "end_line_out_of_range",
            format!("end_line {end_line} is past the last line ({total_lines})"),
        )
        .with("total_lines", json!(total_lines)));
    }
    let range_start = range_start.expect("start_line is a line of the text");
    let range_end = range_end_start.unwrap_or(total_chars);
    let range_len = range_end - range_start;
    if r.offset > range_len {
        return Err(ArgError::new(
            "offset_out_of_range",
            format!(
                "offset {} is past the end of the selected range ({range_len} code points)",
                r.offset
            ),
        )
        .with("range_length", json!(range_len)));
    }
    let start = range_start + r.offset;
    let end = (start + r.max_chars.min(range_len - r.offset)).min(range_end);
    let b0 = byte_offset(content, start).unwrap_or(content.len());
    let b1 = b0 + byte_offset(&content[b0..], end - start).unwrap_or(content.len() - b0);
    let truncated = end < range_end;
    let mut out = json!({
        "status": Status::Ok.as_str(),
        "target_file_id": t.target_file_id,
        "version": t.version,
        "current_hash": t.current_hash,
        "total_chars": total_chars,
        "total_lines": total_lines,
        "start_line": r.start_line,
        "end_line": end_line,
        "range_start": range_start,
        "range_end": range_end,
        "start": start,
        "end": end,
        "text": &content[b0..b1],
        "truncated": truncated,
        "next_offset": if truncated { json!(end - range_start) } else { Value::Null },
        "next_start": if truncated { json!(end) } else { Value::Null },
    });
    if r.include_line_starts {
        // Selected lines that begin inside the page; on the last page also one that begins at
        // its end (the final empty line), so an insertion point there is one call away.
        let lines: Vec<Value> = page_starts
            .into_iter()
            .filter(|&(_, s)| (start <= s && s < end) || (!truncated && s == end))
            .map(|(l, s)| json!({ "line": l, "start": s }))
            .collect();
        out["line_starts"] = Value::Array(lines);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "t",
            version: 2,
            current_hash: "h",
            content,
        }
    }

    /// The implementation before 2026-12-06, which kept every line's start: the oracle of
    /// [`pages_equal_those_of_the_vector_of_every_line_start`].
    fn oracle(t: &TargetView, r: LinesRequest) -> Result<Value, ArgError> {
        let content = t.content;
        // Code-point start of every line: one pass, LF positions by memchr.
        let mut starts: Vec<usize> = vec![0];
        let (mut cp, mut from) = (0usize, 0usize);
        let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
        for at in memchr::memchr_iter(b'\n', content.as_bytes()) {
            ticks.tick();
            cp += char_len(&content[from..at]) + 1;
            from = at + 1;
            starts.push(cp);
        }
        let total_chars = cp + char_len(&content[from..]);
        let total_lines = starts.len();
        if r.start_line > total_lines {
            return Err(ArgError::new(
                "start_line_out_of_range",
                format!(
                    "start_line {} is past the last line ({total_lines})",
                    r.start_line
                ),
            )
            .with("total_lines", json!(total_lines)));
        }
        let end_line = r.end_line.unwrap_or(total_lines);
        if end_line > total_lines {
            return Err(ArgError::new(
                "end_line_out_of_range",
                format!("end_line {end_line} is past the last line ({total_lines})"),
            )
            .with("total_lines", json!(total_lines)));
        }
        let range_start = starts[r.start_line - 1];
        let range_end = starts.get(end_line).copied().unwrap_or(total_chars);
        let range_len = range_end - range_start;
        if r.offset > range_len {
            return Err(ArgError::new(
                "offset_out_of_range",
                format!(
                    "offset {} is past the end of the selected range ({range_len} code points)",
                    r.offset
                ),
            )
            .with("range_length", json!(range_len)));
        }
        let start = range_start + r.offset;
        let end = (start + r.max_chars.min(range_len - r.offset)).min(range_end);
        let b0 = byte_offset(content, start).unwrap_or(content.len());
        let b1 = b0 + byte_offset(&content[b0..], end - start).unwrap_or(content.len() - b0);
        let truncated = end < range_end;
        let mut out = json!({
            "status": Status::Ok.as_str(),
            "target_file_id": t.target_file_id,
            "version": t.version,
            "current_hash": t.current_hash,
            "total_chars": total_chars,
            "total_lines": total_lines,
            "start_line": r.start_line,
            "end_line": end_line,
            "range_start": range_start,
            "range_end": range_end,
            "start": start,
            "end": end,
            "text": &content[b0..b1],
            "truncated": truncated,
            "next_offset": if truncated { json!(end - range_start) } else { Value::Null },
            "next_start": if truncated { json!(end) } else { Value::Null },
        });
        if r.include_line_starts {
            // Selected lines that begin inside the page; on the last page also one that begins at
            // its end (the final empty line), so an insertion point there is one call away.
            let lines: Vec<Value> = (r.start_line..=end_line)
                .filter(|&l| {
                    let s = starts[l - 1];
                    (start <= s && s < end) || (!truncated && s == end)
                })
                .map(|l| json!({ "line": l, "start": starts[l - 1] }))
                .collect();
            out["line_starts"] = Value::Array(lines);
        }
        Ok(out)
    }

    proptest::proptest! {
        /// helper-58: a page no longer keeps every line's start, and answers exactly as it did
        /// (the same page, totals, range, refusals and `line_starts`) on texts of empty, short
        /// and multibyte lines, with and without a final LF, for any request.
        #[test]
        fn pages_equal_those_of_the_vector_of_every_line_start(
            lines in proptest::collection::vec("(|a|é|🌍x|abc)", 0..12),
            last_lf in proptest::bool::ANY,
            start_line in proptest::prop_oneof![1usize..15, (usize::MAX - 2)..=usize::MAX],
            end in proptest::option::of(proptest::prop_oneof![0usize..15, (usize::MAX - 2)..=usize::MAX]),
            offset in proptest::prop_oneof![0usize..20, proptest::strategy::Just(usize::MAX), (usize::MAX - 30)..=usize::MAX],
            max_chars in proptest::prop_oneof![1usize..12, (usize::MAX - 2)..=usize::MAX],
            include_line_starts in proptest::bool::ANY,
        ) {
            let mut content = lines.join("\n");
            if last_lf {
                content.push('\n');
            }
            let r = LinesRequest {
                start_line,
                end_line: end.map(|e| start_line.saturating_add(e)),
                offset,
                max_chars,
                include_line_starts,
            };
            let (new, old) = (read_lines(&view(&content), r), oracle(&view(&content), r));
            proptest::prop_assert_eq!(
                new.map_err(|e| format!("{e:?}")),
                old.map_err(|e| format!("{e:?}"))
            );
        }
    }

    fn read(content: &str, args: &str) -> Result<Value, ArgError> {
        let a = Args::parse(args, READ_LINES_ARGS, &[]).unwrap();
        read_lines(&view(content), parse_read_lines(&a)?)
    }

    /// Contract "patchdiff_read_lines": one-based LF lines with their LF, inclusive end_line,
    /// a trailing LF makes a final empty line.
    #[test]
    fn lines_are_one_based_inclusive_with_their_lf() {
        let v = read("one\ntwo🌍\nthree\n", r#"{"start_line":2,"end_line":3}"#).unwrap();
        assert_eq!(v["text"], "two🌍\nthree\n");
        assert_eq!(
            (&v["total_lines"], &v["total_chars"]),
            (&json!(4), &json!(15))
        );
        assert_eq!(
            (&v["range_start"], &v["range_end"]),
            (&json!(4), &json!(15))
        );
        assert_eq!(
            (&v["start"], &v["end"], &v["truncated"]),
            (&json!(4), &json!(15), &json!(false))
        );
        assert_eq!(
            (&v["next_offset"], &v["next_start"]),
            (&Value::Null, &Value::Null)
        );
        let v = read("one\ntwo\n", r#"{"start_line":3}"#).unwrap();
        assert_eq!(
            (&v["text"], &v["range_start"], &v["end_line"]),
            (&json!(""), &json!(8), &json!(3))
        );
        let v = read("", "{}").unwrap();
        assert_eq!(
            (&v["total_lines"], &v["text"], &v["end_line"]),
            (&json!(1), &json!(""), &json!(1))
        );
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "version",
                "current_hash",
                "total_chars",
                "total_lines",
                "start_line",
                "end_line",
                "range_start",
                "range_end",
                "start",
                "end",
                "text",
                "truncated",
                "next_offset",
                "next_start"
            ]
        );
    }

    /// Pages default to 4,000 and cap at 8,000 code points; next_offset is range-relative and
    /// next_start absolute; an offset equal to the range length is an empty final page.
    #[test]
    fn pages_continue_by_offset_and_start() {
        let text = format!("head\n{}\ntail\n", "x".repeat(9000));
        let v = read(&text, r#"{"start_line":2}"#).unwrap();
        assert_eq!((&v["start"], &v["end"]), (&json!(5), &json!(4005)));
        assert_eq!(
            (&v["next_offset"], &v["next_start"]),
            (&json!(4000), &json!(4005))
        );
        let v = read(&text, r#"{"start_line":2,"max_chars":100000}"#).unwrap();
        assert_eq!(v["end"], 8005);
        let v = read(
            &text,
            r#"{"start_line":2,"end_line":2,"offset":8000,"max_chars":null}"#,
        )
        .unwrap();
        assert_eq!(
            (&v["text"], &v["truncated"], &v["next_offset"]),
            (&json!("x".repeat(1000) + "\n"), &json!(false), &Value::Null)
        );
        let v = read(&text, r#"{"start_line":2,"end_line":2,"offset":9001}"#).unwrap();
        assert_eq!(
            (&v["text"], &v["start"], &v["truncated"]),
            (&json!(""), &json!(9006), &json!(false))
        );
        assert_eq!(
            read(&text, r#"{"start_line":2,"end_line":2,"offset":9002}"#)
                .unwrap_err()
                .code,
            "offset_out_of_range"
        );
    }

    /// include_line_starts: absolute starts of the selected lines beginning inside the page.
    #[test]
    fn line_starts_are_absolute() {
        let v = read(
            "a\nbb\nccc\n",
            r#"{"start_line":2,"include_line_starts":true}"#,
        )
        .unwrap();
        assert_eq!(
            v["line_starts"],
            json!([{"line": 2, "start": 2}, {"line": 3, "start": 5}, {"line": 4, "start": 9}])
        );
        let v = read(
            "a\nbb\nccc\n",
            r#"{"start_line":2,"max_chars":3,"include_line_starts":true}"#,
        )
        .unwrap();
        assert_eq!(v["line_starts"], json!([{"line": 2, "start": 2}]));
        assert_eq!(v["next_offset"], 3);
        let v = read(
            "a\nbb\nccc\n",
            r#"{"start_line":2,"offset":3,"max_chars":3,"include_line_starts":true}"#,
        )
        .unwrap();
        assert_eq!(v["line_starts"], json!([{"line": 3, "start": 5}]));
        let v = read("", r#"{"include_line_starts":true}"#).unwrap();
        assert_eq!(v["line_starts"], json!([{"line": 1, "start": 0}]));
    }

    /// Every invalid_argument case: booleans, non-integers, non-positive line numbers and
    /// sizes, a negative offset, a non-boolean include_line_starts, out-of-range coordinates.
    #[test]
    fn invalid_arguments() {
        let code = |args: &str| read("a\nb\n", args).unwrap_err().code;
        for (args, want) in [
            (r#"{"start_line":true}"#, "invalid_start_line"),
            (r#"{"start_line":0}"#, "invalid_start_line"),
            (r#"{"start_line":-1}"#, "invalid_start_line"),
            (r#"{"start_line":1.5}"#, "invalid_start_line"),
            (r#"{"start_line":"1"}"#, "invalid_start_line"),
            (r#"{"start_line":null}"#, "invalid_start_line"),
            (r#"{"end_line":0}"#, "invalid_end_line"),
            (r#"{"end_line":false}"#, "invalid_end_line"),
            (r#"{"end_line":2.0}"#, "invalid_end_line"),
            (r#"{"offset":-1}"#, "invalid_offset"),
            (r#"{"offset":true}"#, "invalid_offset"),
            (r#"{"offset":null}"#, "invalid_offset"),
            (r#"{"max_chars":0}"#, "invalid_max_chars"),
            (r#"{"max_chars":-5}"#, "invalid_max_chars"),
            (r#"{"max_chars":true}"#, "invalid_max_chars"),
            (r#"{"max_chars":"10"}"#, "invalid_max_chars"),
            (
                r#"{"include_line_starts":1}"#,
                "invalid_include_line_starts",
            ),
            (
                r#"{"include_line_starts":null}"#,
                "invalid_include_line_starts",
            ),
            (r#"{"start_line":2,"end_line":1}"#, "invalid_line_range"),
            (r#"{"start_line":4}"#, "start_line_out_of_range"),
            (
                r#"{"start_line":18446744073709551615}"#,
                "start_line_out_of_range",
            ),
            (r#"{"end_line":4}"#, "end_line_out_of_range"),
            (r#"{"offset":5}"#, "offset_out_of_range"),
        ] {
            assert_eq!(code(args), want, "{args}");
        }
        // At the edges: the last line and an offset equal to the range length are fine.
        assert!(read("a\nb\n", r#"{"start_line":3,"end_line":3,"offset":0}"#).is_ok());
        assert!(read("a\nb\n", r#"{"offset":4}"#).is_ok());
    }
}
