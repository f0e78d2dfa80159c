//! `patchdiff_diff`: the unified diff between two versions of one target (issue 19, item 3).
//!
//! Both versions are reconstructed from the newest snapshot at or below them (the initial one
//! or a SAVE's) plus the accepted log, through the replay checks ([`crate::history::replay`]);
//! the current version is the stored target itself. The texts compared are the canonical LF
//! texts (what `hash` names); the hunks are [`unified::hunks`], byte-identical to GNU
//! `diff -U<context>`'s on the same two texts. The answer is one page of the hunk text, cut at
//! a line end (or, for a line longer than a page, at a code point boundary), with a cursor to
//! the next page; concatenating the pages gives the whole hunk text.

use crate::contract::args::{ArgError, Args};
use crate::contract::json::as_int;
use crate::contract::words::Status;
use crate::history::unified::{self, Budget, DiffError};
use serde_json::{Value, json};

pub const DIFF_ARGS: &[&str] = &[
    "target_file_id",
    "from_version",
    "to_version",
    "context",
    "max_page_bytes",
    "cursor",
];

/// `context`: default 3 (like `diff -u`), at most 1,000 lines.
pub const DIFF_DEFAULT_CONTEXT: usize = 3;
pub const DIFF_MAX_CONTEXT: usize = 1_000;
/// `max_page_bytes`: default 65,536, between 1,024 and 1,048,576 (the history pages' budget).
pub const DIFF_DEFAULT_PAGE_BYTES: usize = 65_536;
pub const DIFF_MIN_PAGE_BYTES: usize = 1_024;
pub const DIFF_MAX_PAGE_BYTES: usize = 1_048_576;
/// Each compared version: at most 8,388,608 UTF-8 bytes and 200,000 lines.
pub const DIFF_MAX_TEXT_BYTES: usize = 8_388_608;
pub const DIFF_MAX_TEXT_LINES: usize = 200_000;
/// The search: at most 1,000,000,000 steps (diagonal extensions plus snake steps).
pub const DIFF_MAX_STEPS: u64 = 1_000_000_000;

/// A parsed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffQuery {
    pub target_file_id: String,
    pub from_version: i64,
    /// `None`: the current version.
    pub to_version: Option<i64>,
    pub context: usize,
    pub max_page_bytes: usize,
    /// The byte offset the cursor names, checked against the versions and context later.
    pub cursor: Option<Cursor>,
}

/// `next_cursor`: `d2:<target>:<from>:<to>:<context>:<offset>`, opaque to callers; valid only
/// with the same target, versions and context. `target` is the first eight hex digits of the
/// target's ID: a cursor of another target was applied to this one's diff (helper-92; `d1:`
/// cursors had none), and is refused now but for one chance in four billion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub target: u32,
    pub from: i64,
    pub to: i64,
    pub context: usize,
    pub offset: usize,
}

/// The part of a target's ID its cursors carry (the ID is canonical: lowercase hex).
fn target_tag(target_file_id: &str) -> u32 {
    target_file_id
        .get(..8)
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or_default()
}

impl Cursor {
    fn encode(&self) -> String {
        format!(
            "d2:{:08x}:{}:{}:{}:{}",
            self.target, self.from, self.to, self.context, self.offset
        )
    }

    fn decode(s: &str) -> Option<Cursor> {
        let mut it = s.strip_prefix("d2:")?.split(':');
        let c = Cursor {
            target: u32::from_str_radix(it.next()?, 16).ok()?,
            from: it.next()?.parse().ok()?,
            to: it.next()?.parse().ok()?,
            context: it.next()?.parse().ok()?,
            offset: it.next()?.parse().ok()?,
        };
        // Only the spelling `encode` gives: not `+1`, `01` or `-0` (helper-61).
        (it.next().is_none() && c.encode() == s).then_some(c)
    }
}

fn bounded(
    a: &Args,
    k: &str,
    default: usize,
    min: usize,
    max: usize,
    code: &'static str,
) -> Result<usize, ArgError> {
    match a.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match as_int(v) {
            Some(n) if n >= min as i64 && n <= max as i64 => Ok(n as usize),
            _ => Err(ArgError::new(
                code,
                format!("{k} must be an integer from {min} to {max}"),
            )),
        },
    }
}

pub fn parse(text: &str) -> Result<DiffQuery, ArgError> {
    let a = Args::parse(text, DIFF_ARGS, &["target_file_id", "from_version"])?;
    let target_file_id = a.target_file_id()?;
    let from_version = a
        .opt_int("from_version", 0, false, "invalid_from_version")?
        .unwrap_or(0);
    let to_version = a.opt_int("to_version", 0, true, "invalid_to_version")?;
    let context = bounded(
        &a,
        "context",
        DIFF_DEFAULT_CONTEXT,
        0,
        DIFF_MAX_CONTEXT,
        "invalid_context",
    )?;
    let max_page_bytes = bounded(
        &a,
        "max_page_bytes",
        DIFF_DEFAULT_PAGE_BYTES,
        DIFF_MIN_PAGE_BYTES,
        DIFF_MAX_PAGE_BYTES,
        "invalid_max_page_bytes",
    )?;
    let cursor = match a.opt_str("cursor", true, "invalid_cursor")? {
        None => None,
        Some(s) => Some(Cursor::decode(s).ok_or_else(|| {
            ArgError::new(
                "invalid_cursor",
                "cursor must be a next_cursor this tool returned, or null",
            )
        })?),
    };
    // What the arguments alone contradict is refused before any version is rebuilt (helper-92:
    // 3.2 s of replay on a 6.6 MB target before the refusal).
    if let Some(c) = cursor
        && (c.target != target_tag(&target_file_id)
            || c.from != from_version
            || c.context != context
            || to_version.is_some_and(|to| to != c.to))
    {
        return Err(other_cursor());
    }
    Ok(DiffQuery {
        target_file_id,
        from_version,
        to_version,
        context,
        max_page_bytes,
        cursor,
    })
}

/// `unknown_version`: a version the target never had, with the range it has.
pub fn unknown_version(key: &str, version: i64, first: i64, current: i64) -> ArgError {
    ArgError::new(
        "unknown_version",
        format!(
            "{key} {version} is not a version of this target; its versions are {first} to {current}"
        ),
    )
    .with("first_version", json!(first))
    .with("current_version", json!(current))
}

/// `diff_input_too_large` when a compared text is over the caps.
pub fn check_size(version: i64, text: &str) -> Result<(), ArgError> {
    let lines = memchr::memchr_iter(b'\n', text.as_bytes()).count()
        + usize::from(!text.is_empty() && !text.ends_with('\n'));
    if text.len() > DIFF_MAX_TEXT_BYTES || lines > DIFF_MAX_TEXT_LINES {
        return Err(ArgError::new(
            "diff_input_too_large",
            format!(
                "version {version} has {} bytes and {lines} lines; a diff compares texts of at most {DIFF_MAX_TEXT_BYTES} bytes and {DIFF_MAX_TEXT_LINES} lines",
                text.len()
            ),
        )
        .with("max_text_bytes", json!(DIFF_MAX_TEXT_BYTES))
        .with("max_text_lines", json!(DIFF_MAX_TEXT_LINES)));
    }
    Ok(())
}

/// One compared version.
pub struct Version<'a> {
    pub version: i64,
    pub hash: &'a str,
    pub content: &'a str,
}

/// The answer: one page of the hunks of `from` -> `to`.
fn other_cursor() -> ArgError {
    ArgError::new(
        "invalid_cursor",
        "the cursor belongs to another target, from_version, to_version or context; send those again with it",
    )
}

pub fn answer(
    q: &DiffQuery,
    filename: &str,
    current_version: i64,
    from: &Version,
    to: &Version,
) -> Result<Value, ArgError> {
    if let Some(c) = q.cursor
        && (c.from != from.version || c.to != to.version || c.context != q.context)
    {
        return Err(other_cursor());
    }
    check_size(from.version, from.content)?;
    check_size(to.version, to.content)?;
    let mut budget = Budget::new(DIFF_MAX_STEPS);
    let text = unified::hunks(from.content, to.content, q.context, &mut budget).map_err(
        |DiffError::TooExpensive { steps }| {
            ArgError::new(
                "diff_too_expensive",
                format!(
                    "the diff of versions {} and {} needs more than {DIFF_MAX_STEPS} search steps (stopped at {steps}); compare closer versions",
                    from.version, to.version
                ),
            )
            .with("max_steps", json!(DIFF_MAX_STEPS))
        },
    )?;
    let offset = q.cursor.map_or(0, |c| c.offset);
    // A page starts after a line end, or inside a line only when the page before it held no
    // line end: at least a minimum page (less a code point) into that line. Any other offset
    // was never handed out (helper-92: a forged one started a page inside a hunk's `@@`).
    let line_start = text
        .get(..offset)
        .and_then(|head| memchr::memrchr(b'\n', head.as_bytes()))
        .map_or(0, |nl| nl + 1);
    if offset > text.len()
        || !text.is_char_boundary(offset)
        || (offset > line_start && offset - line_start < DIFF_MIN_PAGE_BYTES - 3)
    {
        return Err(ArgError::new(
            "invalid_cursor",
            "the cursor does not point into this diff",
        ));
    }
    let end = page_end(&text, offset, q.max_page_bytes);
    let (mut hunk_count, mut removed, mut added) = (0u64, 0u64, 0u64);
    for line in text.split_inclusive('\n') {
        match line.as_bytes().first() {
            Some(b'@') => hunk_count += 1,
            Some(b'-') => removed += 1,
            Some(b'+') => added += 1,
            _ => {}
        }
    }
    let has_more = end < text.len();
    let next_cursor = has_more.then(|| {
        Cursor {
            target: target_tag(&q.target_file_id),
            from: from.version,
            to: to.version,
            context: q.context,
            offset: end,
        }
        .encode()
    });
    Ok(json!({
        "status": Status::Ok.as_str(),
        "target_file_id": q.target_file_id,
        "from_version": from.version,
        "to_version": to.version,
        "current_version": current_version,
        "from_hash": from.hash,
        "to_hash": to.hash,
        "context": q.context,
        "identical": text.is_empty(),
        "header": header(filename, from.version, to.version),
        "hunks": &text[offset..end],
        "offset": offset,
        "total_bytes": text.len(),
        "hunk_count": hunk_count,
        "lines_removed": removed,
        "lines_added": added,
        "has_more": has_more,
        "next_cursor": next_cursor,
    }))
}

/// The two header lines: GNU's `--- label<TAB>timestamp`, with the version in place of the
/// timestamp.
pub fn header(filename: &str, from: i64, to: i64) -> String {
    format!("--- {filename}\tversion {from}\n+++ {filename}\tversion {to}\n")
}

/// Where a page starting at `offset` ends: after the last line end within `max` bytes; a line
/// longer than that is cut at the last code point boundary within `max` bytes.
pub fn page_end(text: &str, offset: usize, max: usize) -> usize {
    if text.len() - offset <= max {
        return text.len();
    }
    let limit = offset + max;
    if let Some(nl) = memchr::memrchr(b'\n', &text.as_bytes()[offset..limit]) {
        return offset + nl + 1;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(args: Value) -> Result<DiffQuery, ArgError> {
        parse(&args.to_string())
    }

    const T: &str = "11111111-1111-4111-8111-111111111111";

    /// Issue 19 item 3: context bounded (default 3 like diff -u), versions non-negative,
    /// page size bounded, cursors only as returned.
    #[test]
    fn arguments_are_bounded() {
        let d = q(json!({"target_file_id": T, "from_version": 0})).unwrap();
        assert_eq!(
            (d.context, d.max_page_bytes, d.to_version),
            (3, 65_536, None)
        );
        for (args, code) in [
            (
                json!({"target_file_id": T, "from_version": -1}),
                "invalid_from_version",
            ),
            (
                json!({"target_file_id": T, "from_version": true}),
                "invalid_from_version",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "to_version": "1"}),
                "invalid_to_version",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "context": 1001}),
                "invalid_context",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "context": -1}),
                "invalid_context",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "max_page_bytes": 10}),
                "invalid_max_page_bytes",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "max_page_bytes": 2_000_000}),
                "invalid_max_page_bytes",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "cursor": "x"}),
                "invalid_cursor",
            ),
            (
                json!({"target_file_id": T, "from_version": 0, "cursor": 3}),
                "invalid_cursor",
            ),
            (json!({"target_file_id": T}), "missing_argument"),
            (
                json!({"target_file_id": T, "from_version": 0, "nope": 1}),
                "unknown_argument",
            ),
        ] {
            assert_eq!(q(args.clone()).unwrap_err().code, code, "{args}");
        }
    }

    /// Pages: concatenated, they are the whole hunk text; each ends at a line end unless one
    /// line is longer than a page, and then at a code point boundary; every page is valid UTF-8.
    #[test]
    fn pages_concatenate_to_the_hunks_and_never_split_a_code_point() {
        let old: String = (0..300).map(|i| format!("line {i} é\n")).collect();
        let mut new = old.replace("line 7 é", &"日本語".repeat(1_000));
        new = new.replace("line 200 é", "changed");
        let mut query =
            q(json!({"target_file_id": T, "from_version": 1, "max_page_bytes": 1024})).unwrap();
        let (from, to) = (
            Version {
                version: 1,
                hash: "a",
                content: &old,
            },
            Version {
                version: 2,
                hash: "b",
                content: &new,
            },
        );
        let whole = unified::hunks(&old, &new, 3, &mut Budget::new(u64::MAX)).unwrap();
        let mut got = String::new();
        let mut pages = 0;
        loop {
            let a = answer(&query, "f.txt", 2, &from, &to).unwrap();
            let page = a["hunks"].as_str().unwrap();
            assert!(page.len() <= 1024);
            assert_eq!(a["offset"], got.len());
            got.push_str(page);
            pages += 1;
            match a["next_cursor"].as_str() {
                Some(c) => query.cursor = Cursor::decode(c),
                None => break,
            }
        }
        assert_eq!(got, whole);
        assert!(pages > 3, "{pages}");
    }

    /// A cursor of another version pair is refused, not silently applied.
    #[test]
    fn a_cursor_of_other_versions_is_refused() {
        let mut query = q(json!({"target_file_id": T, "from_version": 1})).unwrap();
        query.cursor = Some(Cursor {
            target: target_tag(T),
            from: 0,
            to: 2,
            context: 3,
            offset: 0,
        });
        let v = |version| Version {
            version,
            hash: "h",
            content: "a\n",
        };
        let e = answer(&query, "f", 2, &v(1), &v(2)).unwrap_err();
        assert_eq!(e.code, "invalid_cursor");
    }

    /// helper-92: a cursor of another target, or one the arguments contradict, is refused when
    /// the arguments are read, before any version is rebuilt; an offset inside a short line
    /// (one no page of at least the minimum size could have ended in) is refused too, where a
    /// page cut inside a line longer than a page is still served.
    #[test]
    fn a_cursor_of_another_target_or_a_forged_offset_is_refused() {
        let cursor = |target: &str, from: i64, to: i64, offset: usize| {
            Cursor {
                target: target_tag(target),
                from,
                to,
                context: 3,
                offset,
            }
            .encode()
        };
        let other = "ffffffff-0000-4000-8000-000000000000";
        for (c, to) in [
            (cursor(other, 0, 1, 0), json!(null)),
            (cursor(T, 1, 2, 0), json!(null)),
            (cursor(T, 0, 2, 0), json!(1)),
        ] {
            let e =
                q(json!({"target_file_id": T, "from_version": 0, "to_version": to, "cursor": c}))
                    .unwrap_err();
            assert_eq!(e.code, "invalid_cursor", "{c}");
        }
        let v = |version, content| Version {
            version,
            hash: "h",
            content,
        };
        let long = "x".repeat(3_000);
        let (a, b) = (format!("a\n{long}\nb\n"), format!("A\n{long}y\nB\n"));
        let mut query = q(
            json!({"target_file_id": T, "from_version": 0, "to_version": 1,
                                 "max_page_bytes": 1024}),
        )
        .unwrap();
        let mut offsets = vec![];
        loop {
            let page = answer(&query, "f", 1, &v(0, &a), &v(1, &b)).unwrap();
            offsets.push(page["offset"].as_u64().unwrap() as usize);
            match page["next_cursor"].as_str() {
                Some(c) => query.cursor = Cursor::decode(c),
                None => break,
            }
        }
        assert!(offsets.len() > 3, "{offsets:?}");
        for forged in [5, 1_000] {
            query.cursor = Some(Cursor::decode(&cursor(T, 0, 1, forged)).unwrap());
            let e = answer(&query, "f", 1, &v(0, &a), &v(1, &b)).unwrap_err();
            assert_eq!(e.code, "invalid_cursor", "{forged}");
        }
    }

    /// A cursor is read only in the spelling this tool hands out (helper-61: `+1` was read).
    #[test]
    fn only_the_spelling_of_a_handed_out_cursor_is_read() {
        let c = Cursor {
            target: 0x00ab_cdef,
            from: 1,
            to: 2,
            context: 3,
            offset: 0,
        };
        assert_eq!(c.encode(), "d2:00abcdef:1:2:3:0");
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for forged in [
            "d2:00abcdef:+1:2:3:0",
            "d2:00abcdef:01:2:3:0",
            "d2:00abcdef:1:2:3:-0",
            "d2:00abcdef:1:2:3:+0",
            "d2:00abcdef:1:2:3:0:",
            "d2:00ABCDEF:1:2:3:0",
            "d2:abcdef:1:2:3:0",
            "d1:1:2:3:0",
        ] {
            assert_eq!(Cursor::decode(forged), None, "{forged}");
        }
    }

    /// Bounded work: texts over the caps are refused before any search.
    #[test]
    fn oversized_texts_are_refused() {
        let big = "x\n".repeat(DIFF_MAX_TEXT_LINES + 1);
        assert_eq!(
            check_size(1, &big).unwrap_err().code,
            "diff_input_too_large"
        );
        assert!(check_size(1, &"x\n".repeat(DIFF_MAX_TEXT_LINES)).is_ok());
    }
}
