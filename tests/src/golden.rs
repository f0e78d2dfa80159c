//! Golden transcripts (issue 16, "How it is proven": every response and every tools/list,
//! recorded before the reshape and byte-identical after it).
//!
//! A transcript is a list of entries, each a label, the request exactly as sent and the
//! response exactly as received, one line each. Before it is written or compared, values that
//! legitimately differ between runs are masked; everything else is compared byte for byte:
//! - each distinct UUID becomes `<uuid-N>`, numbered in order of first appearance in the whole
//!   transcript, so that "this answer names the attempt that call created" stays checked;
//! - ISO-8601 and PostgreSQL timestamps become `<timestamp>`, and the microseconds since the
//!   epoch in a `patchdiff_list_targets` cursor (`<micros>.<uuid>`) become `<epoch_us>`;
//! - hashes whose input includes a random ID (`request_fingerprint` covers the target's UUID,
//!   `pdcp_content_hash` an observed record's observation IDs) become `<key-N>`, numbered like
//!   UUIDs so that equal stays equal.
//!
//! Content hashes, versions and (in a fresh database) log and ledger sequences are
//! deterministic and stay as they are.
//!
//! `PATCHDIFF_GOLDEN_RECORD=1` (re)writes the files under tests/golden/; otherwise a difference
//! fails with a line diff of the first differing entry.

use std::collections::HashMap;
use std::path::PathBuf;

pub struct Entry {
    pub label: String,
    pub request: String,
    pub response: String,
}

#[derive(Default)]
pub struct Transcript {
    pub entries: Vec<Entry>,
}

impl Transcript {
    pub fn push(&mut self, label: impl Into<String>, request: &str, response: &str) {
        let one_line = |s: &str| s.strip_suffix('\n').unwrap_or(s).to_owned();
        let (request, response) = (one_line(request), one_line(response));
        assert!(
            !request.contains('\n') && !response.contains('\n'),
            "a golden entry is one line each way"
        );
        self.entries.push(Entry {
            label: label.into(),
            request,
            response,
        });
    }

    /// The masked file text: `### label`, `> request`, `< response`, blank line.
    pub fn render(&self) -> String {
        let mut masker = Masker::default();
        let mut out = String::new();
        for e in &self.entries {
            out.push_str("### ");
            out.push_str(&e.label);
            out.push_str("\n> ");
            out.push_str(&masker.mask(&e.request));
            out.push_str("\n< ");
            out.push_str(&masker.mask(&e.response));
            out.push_str("\n\n");
        }
        out
    }
}

pub fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/golden")).join(name)
}

pub fn recording() -> bool {
    std::env::var("PATCHDIFF_GOLDEN_RECORD").is_ok_and(|v| v == "1")
}

/// Records `t` as tests/golden/`name` in record mode; otherwise compares and panics with the
/// first differing entry.
pub fn check(name: &str, t: &Transcript) {
    let path = golden_path(name);
    let actual = t.render();
    if recording() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        eprintln!("recorded {} ({} entries)", path.display(), t.entries.len());
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (record it with PATCHDIFF_GOLDEN_RECORD=1)",
            path.display()
        )
    });
    if let Some(report) = first_difference(&expected, &actual) {
        panic!("{} differs from this run:\n{report}", path.display());
    }
}

fn split_entries(text: &str) -> Vec<&str> {
    text.split("\n\n").filter(|e| !e.is_empty()).collect()
}

/// `None` when byte-identical; else the first differing entry as a unified-style diff, with
/// JSON lines pretty-printed (key order kept) so that the diff points at the member.
pub fn first_difference(expected: &str, actual: &str) -> Option<String> {
    if expected == actual {
        return None;
    }
    let (e, a) = (split_entries(expected), split_entries(actual));
    for i in 0..e.len().max(a.len()) {
        let (x, y) = (
            e.get(i).copied().unwrap_or(""),
            a.get(i).copied().unwrap_or(""),
        );
        if x != y {
            let (xl, yl) = (explode(x), explode(y));
            return Some(format!(
                "entry {} of {} expected, {} actual\n--- golden\n+++ this run\n{}",
                i + 1,
                e.len(),
                a.len(),
                unified(&xl, &yl)
            ));
        }
    }
    // Same entries but different bytes elsewhere (e.g. trailing separators).
    Some("the files differ outside any entry (separators)".into())
}

/// An entry as lines, each JSON payload pretty-printed.
fn explode(entry: &str) -> Vec<String> {
    let mut lines = vec![];
    for line in entry.lines() {
        let (prefix, rest) = line.split_at(line.len().min(2));
        match serde_json::from_str::<serde_json::Value>(rest) {
            Ok(v) if prefix == "> " || prefix == "< " => {
                lines.push(prefix.trim_end().to_owned());
                lines.extend(
                    serde_json::to_string_pretty(&v)
                        .unwrap()
                        .lines()
                        .map(str::to_owned),
                );
                // Pretty-printing hides spacing and escaping; keep the raw line when only
                // those differ so the diff is never empty.
                lines.push(format!("raw: {rest}"));
            }
            _ => lines.push(line.to_owned()),
        }
    }
    lines
}

/// A minimal LCS line diff with three lines of context.
fn unified(a: &[String], b: &[String]) -> String {
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut ops: Vec<(char, &str)> = vec![];
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', &a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', &b[j]));
            j += 1;
        } else {
            ops.push(('-', &a[i]));
            i += 1;
        }
    }
    let near: Vec<bool> = (0..ops.len())
        .map(|k| {
            let lo = k.saturating_sub(3);
            let hi = (k + 3).min(ops.len() - 1);
            ops[lo..=hi].iter().any(|(c, _)| *c != ' ')
        })
        .collect();
    let mut out = String::new();
    let mut skipped = false;
    for (k, (c, l)) in ops.iter().enumerate() {
        if near[k] {
            if skipped {
                out.push_str("@@\n");
                skipped = false;
            }
            out.push(*c);
            out.push_str(l);
            out.push('\n');
        } else {
            skipped = true;
        }
    }
    out
}

/// Members whose 64-hex value hashes a random ID, in raw or JSON-in-a-string spelling.
/// `pdcp_content_hash` hashes the stored record, which for observed submissions holds the
/// observation and bundle IDs; the records themselves are compared (masked) where a corpus
/// reads them with `include_content`.
const RANDOM_HASH_KEYS: [&str; 2] = ["request_fingerprint", "pdcp_content_hash"];

/// Masks UUIDs and random-input hashes (stable numbering across one transcript) and
/// timestamps.
#[derive(Default)]
pub struct Masker {
    uuids: HashMap<String, usize>,
    hashes: HashMap<String, usize>,
}

impl Masker {
    pub fn mask(&mut self, s: &str) -> String {
        let b = s.as_bytes();
        let mut out = String::with_capacity(s.len());
        let mut i = 0;
        let mut copied = 0;
        while i < b.len() {
            // Only at a token boundary, so hex runs inside hashes are never taken for a UUID.
            let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
            if boundary && let Some(len) = uuid_at(b, i) {
                out.push_str(&s[copied..i]);
                let key = s[i..i + len].to_ascii_lowercase();
                let next = self.uuids.len() + 1;
                let n = *self.uuids.entry(key).or_insert(next);
                out.push_str(&format!("<uuid-{n}>"));
                i += len;
                copied = i;
            } else if let Some((key, at)) = random_hash_at(b, i) {
                out.push_str(&s[copied..at]);
                let next = self.hashes.len() + 1;
                let n = *self.hashes.entry(s[at..at + 64].to_owned()).or_insert(next);
                out.push_str(&format!("<{key}-{n}>"));
                i = at + 64;
                copied = i;
            } else if boundary && let Some(len) = cursor_micros_at(b, i) {
                out.push_str(&s[copied..i]);
                out.push_str("<epoch_us>");
                i += len;
                copied = i;
            } else if boundary && let Some(len) = timestamp_at(b, i) {
                out.push_str(&s[copied..i]);
                out.push_str("<timestamp>");
                i += len;
                copied = i;
            } else {
                i += 1;
            }
        }
        out.push_str(&s[copied..]);
        out
    }
}

fn hex_run(b: &[u8], i: usize, n: usize) -> bool {
    i + n <= b.len() && b[i..i + n].iter().all(u8::is_ascii_hexdigit)
}

fn digits(b: &[u8], i: usize, n: usize) -> bool {
    i + n <= b.len() && b[i..i + n].iter().all(u8::is_ascii_digit)
}

/// At `i` a member name of RANDOM_HASH_KEYS, its `":"` (or `\\":\\"`) and 64 hex digits:
/// the key and where the digits start.
fn random_hash_at(b: &[u8], i: usize) -> Option<(&'static str, usize)> {
    for key in RANDOM_HASH_KEYS {
        if !b[i..].starts_with(key.as_bytes()) || i == 0 || b[i - 1] != b'"' {
            continue;
        }
        let rest = &b[i + key.len()..];
        for sep in [&b"\":\""[..], &b"\\\":\\\""[..]] {
            if rest.starts_with(sep) {
                let at = i + key.len() + sep.len();
                if hex_run(b, at, 64) && !b.get(at + 64).is_some_and(u8::is_ascii_hexdigit) {
                    return Some((key, at));
                }
            }
        }
    }
    None
}

/// Digits followed by `.` and a UUID: a list cursor's creation time in microseconds.
fn cursor_micros_at(b: &[u8], i: usize) -> Option<usize> {
    let mut k = i;
    while digits(b, k, 1) {
        k += 1;
    }
    (k - i >= 10 && b.get(k) == Some(&b'.') && uuid_at(b, k + 1).is_some()).then_some(k - i)
}

fn uuid_at(b: &[u8], i: usize) -> Option<usize> {
    let mut k = i;
    for (n, group) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if n > 0 {
            if b.get(k) != Some(&b'-') {
                return None;
            }
            k += 1;
        }
        if !hex_run(b, k, group) {
            return None;
        }
        k += group;
    }
    match b.get(k) {
        Some(c) if c.is_ascii_alphanumeric() => None,
        _ => Some(k - i),
    }
}

/// `YYYY-MM-DD[T ]HH:MM:SS[.f+][Z|±HH[:MM]]`.
fn timestamp_at(b: &[u8], i: usize) -> Option<usize> {
    let fixed = digits(b, i, 4)
        && b.get(i + 4) == Some(&b'-')
        && digits(b, i + 5, 2)
        && b.get(i + 7) == Some(&b'-')
        && digits(b, i + 8, 2)
        && matches!(b.get(i + 10), Some(b'T' | b' '))
        && digits(b, i + 11, 2)
        && b.get(i + 13) == Some(&b':')
        && digits(b, i + 14, 2)
        && b.get(i + 16) == Some(&b':')
        && digits(b, i + 17, 2);
    if !fixed {
        return None;
    }
    let mut k = i + 19;
    if b.get(k) == Some(&b'.') && digits(b, k + 1, 1) {
        k += 1;
        while digits(b, k, 1) {
            k += 1;
        }
    }
    match b.get(k) {
        Some(b'Z') => k += 1,
        Some(b'+' | b'-') if digits(b, k + 1, 2) => {
            k += 3;
            if b.get(k) == Some(&b':') && digits(b, k + 1, 2) {
                k += 3;
            } else if digits(b, k, 2) {
                k += 2;
            }
        }
        _ => {}
    }
    Some(k - i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16, golden files: identity relations survive masking, hashes and other hex runs
    /// are kept, and every timestamp spelling the API emits is masked.
    #[test]
    fn masking_keeps_identities_and_hashes() {
        let mut m = Masker::default();
        let a = "6F9619FF-8B86-4011-B42D-00C04FC964FF";
        let b = "11111111-1111-4111-8111-111111111111";
        let hash = "b22ebf77aa0e4c7b3b0f1a1f2cde0c9f6a4b5c6d7e8f90112233445566778899";
        let s = format!(
            r#"{{"a":"{a}","b":"{b}","again":"{}","h":"{hash}","t":"2026-10-22T23:28:20.123456Z","u":"2026-10-22 23:28:20.1+00","v":"2026-10-22T23:28:20+02:00"}}"#,
            a.to_lowercase()
        );
        assert_eq!(
            m.mask(&s),
            format!(
                r#"{{"a":"<uuid-1>","b":"<uuid-2>","again":"<uuid-1>","h":"{hash}","t":"<timestamp>","u":"<timestamp>","v":"<timestamp>"}}"#
            )
        );
        // The numbering is per transcript: a second string continues it.
        assert_eq!(m.mask(b), "<uuid-2>");
        assert_eq!(
            m.mask(&format!(r#""next_cursor":"1796334493234506.{b}""#)),
            r#""next_cursor":"<epoch_us>.<uuid-2>""#
        );
        // Fingerprints are numbered, raw and inside a JSON string.
        let f1 = "f".repeat(64);
        let f2 = "e".repeat(64);
        assert_eq!(
            m.mask(&format!(r#"{{"request_fingerprint":"{f1}","x":"{{\"request_fingerprint\":\"{f2}\",\"y\":\"{f1}\"}}","z":"{f1}"}}"#)),
            format!(r#"{{"request_fingerprint":"<request_fingerprint-1>","x":"{{\"request_fingerprint\":\"<request_fingerprint-2>\",\"y\":\"{f1}\"}}","z":"{f1}"}}"#)
        );
        // Not a UUID: a hex run glued to more hex.
        assert_eq!(m.mask(&format!("x{a}")), format!("x{a}"));
    }

    /// The comparison fails on any byte and names the first differing entry.
    #[test]
    fn a_changed_byte_is_reported() {
        let mut t = Transcript::default();
        t.push("one", r#"{"a":1}"#, r#"{"b":[1,2,3]}"#);
        t.push("two", r#"{"a":2}"#, r#"{"b":"x"}"#);
        let golden = t.render();
        assert_eq!(first_difference(&golden, &golden), None);
        let changed = golden.replace(r#""b":"x""#, r#""b":"y""#);
        let report = first_difference(&golden, &changed).unwrap();
        assert!(report.starts_with("entry 2 of 2"), "{report}");
        assert!(report.contains("-  \"b\": \"x\"") && report.contains("+  \"b\": \"y\""));
        // Spacing alone still differs, via the raw line.
        let spaced = golden.replace(r#"[1,2,3]"#, r#"[1, 2,3]"#);
        assert!(first_difference(&golden, &spaced).unwrap().contains("raw:"));
    }
}
