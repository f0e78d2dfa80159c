//! Invalid text in a proposal: escaped lone surrogates and NUL (contract "Common input and
//! request-key rules", host guide "Invalid text and safe rejected evidence").
//!
//! Neither can be stored as PostgreSQL text, and a lone surrogate is not even a Rust `char`, so
//! strict JSON parsing refuses the whole request. For a proposal against a known target the
//! contract wants an audited `target_encoding_invalid` rejection whose `pdcp_content` is a
//! reversible ASCII-escaped `patchdiff-invalid-input/1` envelope. So submissions parse leniently:
//! [`mark_lone_surrogates`] rewrites each lone-surrogate escape `\uD8xx` in the JSON text as a
//! *sentinel* noncharacter that does not occur anywhere in the request, followed by the four hex
//! digits. The parsed strings then carry every defect as ordinary text; [`find`] lists where,
//! and [`restore`] turns the sentinel back into the original escape when the evidence envelope
//! is written, so the stored envelope spells exactly what was sent.

use crate::contract::interrupt;
use crate::contract::json::{CANONICAL, to_string};
use crate::contract::utf8;
use serde_json::{Map, Value, json};

/// The `format` of the stored evidence envelope.
pub const INVALID_INPUT_FORMAT: &str = "patchdiff-invalid-input/1";
/// At most this many defect locations are listed in a diagnostic. The count is of distinct
/// locations by path: a NUL in a key and in its value share one, and so (its dots not escaped)
/// do a key `a.b` and a key `b` under a key `a` (helper-85).
pub const INVALID_TEXT_LOCATIONS_MAX: usize = 16;

/// A character absent from the request, to stand for "a lone surrogate escape follows": one of
/// the noncharacters U+FDD0..U+FDEF (reserved for internal use) when one is free, else a private
/// use character U+E000..U+F8FF, else any other character of the Basic Multilingual Plane beyond
/// ASCII and the C1 controls. Only the noncharacters were tried until 2026-12-07, so a request
/// that spelt all 32 (96 bytes) and a lone surrogate was `invalid_json` instead of the audited
/// `target_encoding_invalid` the contract asks for (helper-85); now that takes every one of the
/// 63,328 candidates, about 188 KB of them. Each must be a BMP character: the marker is one
/// `\uXXXX` escape in the canonical text [`restore`] reads.
///
/// The request is read once: every character it holds and every `\uXXXX` it spells, even one
/// whose backslash is itself escaped (counting one too many only skips a candidate), its hex
/// digits in either case, is present. (The noncharacters used to be looked for one by one, each with a
/// byte-by-byte search for its escape.)
fn pick_sentinel(text: &str) -> Option<char> {
    let mut present = vec![0u64; 0x1_0000 / 64];
    let mut mark = |u: u32| {
        if let Some(word) = present.get_mut((u / 64) as usize) {
            *word |= 1 << (u % 64);
        }
    };
    text.chars()
        .filter(|c| !c.is_ascii())
        .for_each(|c| mark(c as u32));
    let b = text.as_bytes();
    for at in memchr::memchr_iter(b'\\', b) {
        if b.get(at + 1) == Some(&b'u')
            && let Some(u) = hex4(&b[at + 2..])
        {
            mark(u32::from(u));
        }
    }
    (0xFDD0..=0xFDEF)
        .chain(0xE000..=0xF8FF)
        .chain((0xA0..=0xD7FF).chain(0xF900..=0xFFFF))
        .find(|&u| present[(u / 64) as usize] & (1 << (u % 64)) == 0)
        .and_then(char::from_u32)
}

fn hex4(b: &[u8]) -> Option<u16> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(s, 16).ok()
}

/// Rewrites every escaped lone surrogate inside JSON strings of `text` as the escaped sentinel
/// followed by the surrogate's four hex digits (lowercase). Returns `None` when there is none
/// (or, for a request that holds every candidate of [`pick_sentinel`], when no sentinel is free).
pub fn mark_lone_surrogates(text: &str) -> Option<(String, char)> {
    let b = text.as_bytes();
    let mut lone: Vec<(usize, u16)> = Vec::new();
    let (mut i, mut in_string) = (0, false);
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    while i < b.len() {
        ticks.tick();
        // Only a quote or a backslash changes anything below: jump to the next one.
        let Some(next) = memchr::memchr2(b'"', b'\\', &b[i..]) else {
            break;
        };
        i += next;
        match (in_string, b[i]) {
            (false, b'"') | (true, b'"') => in_string = !in_string,
            (true, b'\\') => {
                if b.get(i + 1) == Some(&b'u')
                    && let Some(u) = hex4(&b[i + 2..])
                {
                    let low_follows = || {
                        b.get(i + 6) == Some(&b'\\')
                            && b.get(i + 7) == Some(&b'u')
                            && hex4(&b[(i + 8).min(b.len())..])
                                .is_some_and(|l| (0xDC00..=0xDFFF).contains(&l))
                    };
                    if (0xD800..=0xDBFF).contains(&u) && low_follows() {
                        i += 12;
                        continue;
                    }
                    if (0xD800..=0xDFFF).contains(&u) {
                        lone.push((i, u));
                    }
                    i += 6;
                    continue;
                }
                i += 2;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    if lone.is_empty() {
        return None;
    }
    let sentinel = pick_sentinel(text)?;
    let mut out = String::with_capacity(text.len() + lone.len() * 6);
    let mut last = 0;
    for (at, u) in lone {
        out.push_str(&text[last..at]);
        out.push_str(&format!("\\u{:04x}{u:04x}", sentinel as u32));
        last = at + 6;
    }
    out.push_str(&text[last..]);
    Some((out, sentinel))
}

/// One defect: where (a record path such as `edits[0].match`) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defect {
    pub path: String,
    pub kind: &'static str,
}

/// The most bytes the paths of one request's invalid-text locations may take together. Each
/// location names its whole path, so a few long keys above many defects made paths without end
/// (helper-83's case: a 16 KiB key over 20,000 NUL strings, a 196 KB request, took 429 MB of its
/// backend; at the argument limit, terabytes). 10,000 edits with a NUL in both texts take about
/// 600 KB.
pub const INVALID_TEXT_PATHS_MAX_BYTES: usize = 4 << 20;

/// The paths of the locations found would pass [`INVALID_TEXT_PATHS_MAX_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathsTooLarge;

/// Every defect in `v`, depth first in document order, paths rooted at `root`, appended to
/// `out`; refused once the paths in `out` would pass `limit` bytes together
/// ([`INVALID_TEXT_PATHS_MAX_BYTES`], or what a changeset's earlier members left of it).
///
/// A path is written only for a defect, from the steps of the way down to it, each key's segment
/// written once: each node used to format its whole path on the way down, so one long key above
/// many nodes was copied once per node (helper-83: a 2 MiB key over 200,000 array elements and a
/// NUL in `intent` took 12.4 s for a 2.5 MB request; at the argument limit, hours).
pub fn find(
    v: &Value,
    root: &str,
    sentinel: Option<char>,
    out: &mut Vec<Defect>,
    limit: usize,
) -> Result<(), PathsTooLarge> {
    Walk::new(root, sentinel, out, limit)?.value(v)
}

/// [`find`] over an object's members (an object that is not wrapped in a [`Value`]).
pub fn find_in_object(
    m: &Map<String, Value>,
    root: &str,
    sentinel: Option<char>,
    out: &mut Vec<Defect>,
    limit: usize,
) -> Result<(), PathsTooLarge> {
    Walk::new(root, sentinel, out, limit)?.object(m)
}

/// The bytes the paths of `defects` take together, as [`find`] counts them against its limit.
pub fn paths_bytes(defects: &[Defect]) -> usize {
    defects.iter().map(|d| d.path.len()).sum()
}

/// A step of the way down, as its path writes it: `.key` (escaped when it must be) or `[i]`, and
/// the length of the path up to and with it.
struct Step<'a> {
    segment: std::borrow::Cow<'a, str>,
    index: Option<usize>,
    path_len: usize,
}

struct Walk<'a, 'o> {
    root: &'a str,
    sentinel: Option<char>,
    at: Vec<Step<'a>>,
    out: &'o mut Vec<Defect>,
    /// Path bytes still allowed.
    left: usize,
}

impl<'a, 'o> Walk<'a, 'o> {
    fn new(
        root: &'a str,
        sentinel: Option<char>,
        out: &'o mut Vec<Defect>,
        limit: usize,
    ) -> Result<Self, PathsTooLarge> {
        let left = limit.checked_sub(paths_bytes(out)).ok_or(PathsTooLarge)?;
        Ok(Walk {
            root,
            sentinel,
            at: Vec::new(),
            out,
            left,
        })
    }

    fn path_len(&self) -> usize {
        self.at.last().map_or(self.root.len(), |s| s.path_len)
    }

    fn value(&mut self, v: &'a Value) -> Result<(), PathsTooLarge> {
        match v {
            Value::String(s) => self.text(s),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    interrupt::check();
                    let path_len = self.path_len() + 2 + decimal_len(i);
                    self.at.push(Step {
                        segment: std::borrow::Cow::Borrowed(""),
                        index: Some(i),
                        path_len,
                    });
                    self.value(x)?;
                    self.at.pop();
                }
                Ok(())
            }
            Value::Object(m) => self.object(m),
            _ => Ok(()),
        }
    }

    fn object(&mut self, m: &'a Map<String, Value>) -> Result<(), PathsTooLarge> {
        for (k, x) in m {
            interrupt::check();
            let segment = segment(k, self.sentinel);
            let path_len = self.path_len() + 1 + segment.len();
            self.at.push(Step {
                segment,
                index: None,
                path_len,
            });
            // A defect in a key is reported at the key's own path.
            self.text(k)?;
            self.value(x)?;
            self.at.pop();
        }
        Ok(())
    }

    fn text(&mut self, s: &str) -> Result<(), PathsTooLarge> {
        for (kind, found) in [
            (
                "lone_surrogate",
                self.sentinel.is_some_and(|c| s.contains(c)),
            ),
            ("nul", s.contains('\0')),
        ] {
            if found {
                let len = self.path_len();
                self.left = self.left.checked_sub(len).ok_or(PathsTooLarge)?;
                let path = self.path(len);
                debug_assert_eq!(path.len(), len, "{path}");
                self.out.push(Defect { path, kind });
            }
        }
        Ok(())
    }

    /// The path of where the walk is, `len` bytes: `root.key[i]...`.
    fn path(&self, len: usize) -> String {
        let mut p = String::with_capacity(len);
        p.push_str(self.root);
        for step in &self.at {
            match step.index {
                Some(i) => {
                    p.push('[');
                    p.push_str(&i.to_string());
                    p.push(']');
                }
                None => {
                    p.push('.');
                    p.push_str(&step.segment);
                }
            }
        }
        p
    }
}

fn decimal_len(i: usize) -> usize {
    i.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A path segment that is safe to store as text and to show: a key with control characters,
/// or a marked surrogate, is written as its ASCII-escaped JSON string.
fn segment(k: &str, sentinel: Option<char>) -> std::borrow::Cow<'_, str> {
    if k.chars().any(|c| c.is_control() || Some(c) == sentinel) {
        std::borrow::Cow::Owned(restore(&Value::String(k.to_owned()), sentinel))
    } else {
        std::borrow::Cow::Borrowed(k)
    }
}

/// Writes `v` as canonical JSON (sorted keys, ASCII-escaped) with each sentinel + hex turned
/// back into the lone-surrogate escape that was sent. NUL is already written as `\u0000`.
///
/// Only an escape is a marker: the text is read escape by escape, so a backslash that was sent
/// as text and followed by the marker's letters (written `\\ufdd0...`) stays as it was. Before
/// 2026-12-06 the marker was looked for as a substring: a backslash and `ufdd0d800` (sent as
/// `\u005cufdd0d800`, which the sentinel's check of the raw request does not see, and written
/// `\\ufdd0d800`) was stored as `\\ud800`, the text of another request, which then had the
/// same fingerprint and was answered with this one's recorded outcome (helper-54).
pub fn restore(v: &Value, sentinel: Option<char>) -> String {
    let text = to_string(v, CANONICAL);
    let Some(c) = sentinel else {
        return text;
    };
    let marker = format!("u{:04x}", c as u32);
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut last, mut i) = (0, 0);
    while let Some(n) = memchr::memchr(b'\\', &b[i..]) {
        let at = i + n;
        let hex = at + 1 + marker.len();
        if text[at + 1..].starts_with(&marker) && b.get(hex..hex + 4).is_some() {
            out.push_str(&text[last..at]);
            out.push_str("\\u");
            // The four hex digits follow as plain ASCII (the marker's own escape ended before).
            out.push_str(&text[hex..hex + 4]);
            i = hex + 4;
            last = i;
        } else {
            // Any other escape: `\\`, `\"`, `\n`, ... or `\uXXXX`, whose digits hold no
            // backslash.
            i = (at + 2).min(b.len());
        }
    }
    out.push_str(&text[last..]);
    out
}

/// The stored evidence: the original record and metadata, reversible, in ASCII.
pub fn evidence_envelope(
    protocol: &str,
    record: &Map<String, Value>,
    metadata: Map<String, Value>,
    defects: &[Defect],
    sentinel: Option<char>,
) -> String {
    let v = json!({
        "format": INVALID_INPUT_FORMAT,
        "protocol_version": protocol,
        "record": record,
        "metadata": metadata,
        "invalid_text": locations(defects),
    });
    restore(&v, sentinel)
}

/// The longest location path an answer or a stored envelope shows, in code points; a longer
/// one is cut there and ends in `...`. Paths name keys, which can be megabytes: 16 whole paths
/// of a quarter MiB each, from a 262 KB request, stored 4.2 MiB twice in its rejection's row and
/// showed them on every log page (helper-85), as unknown field names did before they were cut
/// the same way (`args::quoted_name`).
pub const INVALID_TEXT_PATH_SHOWN_MAX_CHARS: usize = 256;

/// A location's path as it is shown: at most [`INVALID_TEXT_PATH_SHOWN_MAX_CHARS`] code points.
pub fn shown_path(path: &str) -> std::borrow::Cow<'_, str> {
    utf8::cut_chars(path, INVALID_TEXT_PATH_SHOWN_MAX_CHARS)
}

/// The bounded, safe list of defect locations (paths and kinds, never the text itself).
pub fn locations(defects: &[Defect]) -> Value {
    Value::Array(
        defects
            .iter()
            .take(INVALID_TEXT_LOCATIONS_MAX)
            .map(|d| json!({"path": shown_path(&d.path), "kind": d.kind}))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Value, Option<char>) {
        match mark_lone_surrogates(text) {
            Some((t, c)) => (serde_json::from_str(&t).unwrap(), Some(c)),
            None => (serde_json::from_str(text).unwrap(), None),
        }
    }

    /// "Invalid text": a lone surrogate is found where it was sent, pairs are not defects, and
    /// the envelope spells the escape exactly as sent.
    #[test]
    fn lone_surrogates_are_marked_and_restored() {
        let text = r#"{"intent":"x","edits":[{"match":"a\ud800b","replace":"\ud83c\udf1f"}],"k":"\\ud800"}"#;
        let (v, s) = parse(text);
        assert!(s.is_some());
        let mut d = Vec::new();
        find(
            &v["edits"],
            "edits",
            s,
            &mut d,
            INVALID_TEXT_PATHS_MAX_BYTES,
        )
        .unwrap();
        assert_eq!(
            d,
            vec![Defect {
                path: "edits[0].match".into(),
                kind: "lone_surrogate"
            }]
        );
        // An escaped backslash followed by "ud800" is text, not an escape.
        assert_eq!(v["k"], "\\ud800");
        let back = restore(&v, s);
        assert!(back.contains(r#""match":"a\ud800b""#), "{back}");
        assert!(back.contains(r#""replace":"\ud83c\udf1f""#), "{back}");
    }

    /// helper-54: a backslash sent as text (`\u005c`) and followed by the sentinel's letters is
    /// text, not a marker: the envelope spells it as sent, and differs from the request that
    /// sends the lone surrogate the marker would stand for.
    #[test]
    fn an_escaped_backslash_before_the_markers_letters_is_text() {
        let x = r#"{"i":"\udc00","m":"\u005cufdd0d800"}"#;
        let y = r#"{"i":"\udc00","m":"\\ud800"}"#;
        let (vx, sx) = parse(x);
        let (vy, sy) = parse(y);
        assert_eq!(sx, Some('\u{FDD0}'));
        assert_eq!(vx["m"], "\\ufdd0d800");
        let (rx, ry) = (restore(&vx, sx), restore(&vy, sy));
        assert_eq!(rx, r#"{"i":"\udc00","m":"\\ufdd0d800"}"#);
        assert_eq!(ry, r#"{"i":"\udc00","m":"\\ud800"}"#);
        assert_ne!(rx, ry);
    }

    /// One defect per string location, however many surrogates it holds.
    #[test]
    fn trailing_high_and_lone_low_surrogates() {
        for (text, n) in [
            (r#"["\udc00"]"#, 1),
            (r#"["\ud800"]"#, 1),
            (r#"["\ud800\ud800"]"#, 1),
            (r#"["\ud800x\udc00","\udbff"]"#, 2),
            (r#"["\uD83C\uDF1F"]"#, 0),
        ] {
            let (v, s) = parse(text);
            let mut d = Vec::new();
            find(&v, "$", s, &mut d, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
            assert_eq!(d.len(), n, "{text}");
            if n > 0 {
                assert_eq!(restore(&v, s).to_lowercase(), text.to_lowercase());
            }
        }
    }

    /// The sentinel is never a character the request already uses.
    #[test]
    fn sentinel_avoids_characters_in_the_request() {
        let text = "[\"\u{FDD0}\\ufdd1\\ud800\"]";
        let (t, c) = mark_lone_surrogates(text).unwrap();
        assert_eq!(c, '\u{FDD2}');
        let v: Value = serde_json::from_str(&t).unwrap();
        assert_eq!(restore(&v, Some(c)), "[\"\\ufdd0\\ufdd1\\ud800\"]");
    }

    /// helper-85: a request that holds all 32 noncharacters U+FDD0..U+FDEF (some sent as
    /// escapes, their hex digits in either case) still has a sentinel, the first private use character, so its
    /// lone surrogate is found and restored as sent; the sentinel is the same as before whenever
    /// a noncharacter is free. Only a request holding every one of the 63,328 candidates has
    /// none (and is then strict JSON's to refuse).
    #[test]
    fn a_sentinel_is_free_whatever_noncharacters_the_request_holds() {
        let nonchars: String = (0xFDD0..=0xFDEF_u32)
            .map(|u| match u % 3 {
                0 => char::from_u32(u).unwrap().to_string(),
                1 => format!("\\u{u:04x}"),
                _ => format!("\\u{u:04X}"),
            })
            .collect();
        let text = format!(r#"{{"a":"{nonchars}","b":"x\udc00"}}"#);
        let (v, sentinel) = parse(&text);
        assert_eq!(sentinel, Some('\u{E000}'));
        let mut d = Vec::new();
        find(&v, "r", sentinel, &mut d, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
        assert_eq!(
            d.iter().map(|d| d.path.as_str()).collect::<Vec<_>>(),
            ["r.b"]
        );
        let escaped: String = (0xFDD0..=0xFDEF_u32)
            .map(|u| format!("\\u{u:04x}"))
            .collect();
        assert_eq!(
            restore(&v, sentinel),
            format!(r#"{{"a":"{escaped}","b":"x\udc00"}}"#)
        );
        let mut every: String = (0xFDD0..=0xFDEF)
            .chain(0xE000..=0xF8FF)
            .chain((0xA0..=0xD7FF).chain(0xF900..=0xFFFF))
            .filter_map(char::from_u32)
            .collect();
        assert_eq!(pick_sentinel(&every), None);
        every.pop();
        assert_eq!(pick_sentinel(&every), Some('\u{FFFF}'));
    }

    /// Paths are stored as text: a key holding NUL is spelled escaped.
    #[test]
    fn defect_paths_are_storable_text() {
        let (v, s) = parse(r#"{"a\u0000":"ok","b\ud800":1}"#);
        let mut d = Vec::new();
        find(&v, "r", s, &mut d, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, [r#"r."a\u0000""#, r#"r."b\ud800""#]);
    }

    #[test]
    fn nul_is_a_defect() {
        let (v, s) = parse(r#"{"a":"x\u0000"}"#);
        let mut d = Vec::new();
        find(&v, "record", s, &mut d, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
        assert_eq!(d[0].path, "record.a");
        assert_eq!(d[0].kind, "nul");
    }

    /// The walk before it wrote paths lazily (helper-83), as the oracle of the one now.
    fn eager(v: &Value, root: &str, sentinel: Option<char>, out: &mut Vec<Defect>) {
        match v {
            Value::String(x) => {
                if sentinel.is_some_and(|c| x.contains(c)) {
                    out.push(Defect {
                        path: root.to_owned(),
                        kind: "lone_surrogate",
                    });
                }
                if x.contains('\0') {
                    out.push(Defect {
                        path: root.to_owned(),
                        kind: "nul",
                    });
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    eager(x, &format!("{root}[{i}]"), sentinel, out);
                }
            }
            Value::Object(m) => {
                for (k, x) in m {
                    let path = format!("{root}.{}", segment(k, sentinel));
                    eager(&Value::String(k.clone()), &path, sentinel, out);
                    eager(x, &path, sentinel, out);
                }
            }
            _ => {}
        }
    }

    /// Random nested values whose keys and strings hold NUL, the sentinel, control characters
    /// and plain text: the lazy walk finds exactly the defects, paths and order of the eager one.
    #[test]
    fn lazy_paths_equal_the_eager_walk() {
        fn text(r: &mut crate::contract::rng::XorShift, sentinel: char) -> String {
            (0..r.below(4))
                .map(|_| match r.below(6) {
                    0 => '\0',
                    1 => sentinel,
                    2 => '\u{1}',
                    3 => '.',
                    4 => '[',
                    _ => 'a',
                })
                .collect()
        }
        fn value(r: &mut crate::contract::rng::XorShift, depth: usize, sentinel: char) -> Value {
            match if depth == 0 { r.below(3) } else { r.below(5) } {
                0 => Value::String(text(r, sentinel)),
                1 => json!(r.below(10)),
                2 => Value::Null,
                3 => Value::Array(
                    (0..r.below(4))
                        .map(|_| value(r, depth - 1, sentinel))
                        .collect(),
                ),
                _ => Value::Object(
                    (0..r.below(4))
                        .map(|_| (text(r, sentinel), value(r, depth - 1, sentinel)))
                        .collect(),
                ),
            }
        }
        let sentinel = '\u{fdd0}';
        let mut r = crate::contract::rng::XorShift(0x9e37_79b9_7f4a_7c15);
        for case in 0..3_000 {
            let v = value(&mut r, 4, sentinel);
            for s in [None, Some(sentinel)] {
                let (mut lazy, mut old) = (Vec::new(), Vec::new());
                find(&v, "record", s, &mut lazy, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
                eager(&v, "record", s, &mut old);
                assert_eq!(lazy, old, "case {case}: {v}");
                if let Value::Object(m) = &v {
                    let mut lazy = Vec::new();
                    find_in_object(m, "record", s, &mut lazy, INVALID_TEXT_PATHS_MAX_BYTES)
                        .unwrap();
                    assert_eq!(lazy, old, "case {case}: {v}");
                }
            }
        }
    }

    /// The paths of a request's locations are bounded: a long key above many NUL strings passes
    /// [`INVALID_TEXT_PATHS_MAX_BYTES`] and is refused, where it used to write a path per string
    /// (helper-83); the same shape a little under the limit lists every location.
    #[test]
    fn the_locations_paths_are_bounded() {
        let key = "k".repeat(16 << 10);
        let nuls = |n: usize| json!({ key.clone(): vec!["\u{0}"; n] });
        let path_len = "r.".len() + key.len() + "[100]".len();
        let fits = INVALID_TEXT_PATHS_MAX_BYTES / path_len;
        let mut d = Vec::new();
        assert_eq!(
            find(&nuls(fits), "r", None, &mut d, INVALID_TEXT_PATHS_MAX_BYTES),
            Ok(())
        );
        assert_eq!(d.len(), fits);
        let mut d = Vec::new();
        assert_eq!(
            find(
                &nuls(fits + 1),
                "r",
                None,
                &mut d,
                INVALID_TEXT_PATHS_MAX_BYTES
            ),
            Err(PathsTooLarge)
        );
        // What earlier calls found counts against the same limit.
        let mut d = vec![Defect {
            path: "x".repeat(INVALID_TEXT_PATHS_MAX_BYTES),
            kind: "nul",
        }];
        assert_eq!(
            find(
                &json!("\u{0}"),
                "r",
                None,
                &mut d,
                INVALID_TEXT_PATHS_MAX_BYTES
            ),
            Err(PathsTooLarge)
        );
    }

    /// helper-85: a location's path is shown at most 256 code points long, then `...`, in the
    /// listing (stored in the envelope and the diagnostic); the walk's paths stay whole.
    #[test]
    fn long_paths_are_shown_cut() {
        let key = "é".repeat(1_000);
        let v = json!({ key.clone(): "\u{0}" });
        let mut d = Vec::new();
        find(&v, "r", None, &mut d, INVALID_TEXT_PATHS_MAX_BYTES).unwrap();
        assert_eq!(d[0].path, format!("r.{key}"));
        let shown = locations(&d)[0]["path"].as_str().unwrap().to_owned();
        assert_eq!(shown, format!("r.{}...", "é".repeat(254)));
        assert_eq!(
            locations(&[Defect {
                path: "r.a".into(),
                kind: "nul"
            }])[0]["path"],
            "r.a"
        );
    }
}
