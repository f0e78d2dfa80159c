//! Canonical text: LF line endings, SHA-256 identities and Unicode code-point offsets.
//!
//! Storage is canonical (contract, "Line endings and export formats"): every upload and every
//! payload string is normalized to LF before it is hashed or matched. Offsets and counts that
//! cross the API are code points; Rust strings are UTF-8, so the conversions live here.

pub mod occurrence;
pub mod warnings;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::borrow::Cow;

/// Lowercase hex SHA-256 of the UTF-8 bytes of `s`.
pub fn sha256_hex(s: &str) -> String {
    // In pieces, with an interrupt check before each: SHA-256 of a 64 MiB text (128 MiB when
    // exported with CRLF) is 45 to 90 ms here, which no cancel could end (helper-86).
    const PIECE_BYTES: usize = 4 << 20;
    let mut h = Sha256::new();
    for piece in s.as_bytes().chunks(PIECE_BYTES) {
        crate::contract::interrupt::check();
        h.update(piece);
    }
    hex(&h.finalize())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// CRLF and bare CR become LF; text without CR is returned borrowed.
pub fn canonicalize(s: &str) -> Cow<'_, str> {
    let bytes = s.as_bytes();
    let Some(first) = memchr::memchr(b'\r', bytes) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len());
    out.push_str(&s[..first]);
    let mut i = first;
    let mut ticks =
        crate::contract::interrupt::Every::new(crate::contract::interrupt::SEARCH_INTERVAL);
    while i < bytes.len() {
        ticks.tick();
        match memchr::memchr(b'\r', &bytes[i..]) {
            None => {
                out.push_str(&s[i..]);
                break;
            }
            Some(rel) => {
                let cr = i + rel;
                out.push_str(&s[i..cr]);
                out.push('\n');
                i = if bytes.get(cr + 1) == Some(&b'\n') {
                    cr + 2
                } else {
                    cr + 1
                };
            }
        }
    }
    Cow::Owned(out)
}

/// Number of Unicode code points in `s`.
pub fn char_len(s: &str) -> usize {
    // Every code point has exactly one byte that is not a continuation byte (10xxxxxx): the
    // length minus the continuation bytes, counted eight at a time. In each byte of a word,
    // bit 7 set and bit 6 clear marks a continuation byte; `w << 1` brings each byte's bit 6
    // to its own bit 7 (what crosses into the next byte lands on bit 0 and is masked off).
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let bytes = s.as_bytes();
    let mut words = bytes.chunks_exact(8);
    let mut continuation = 0usize;
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        continuation += (w & !(w << 1) & HIGH).count_ones() as usize;
    }
    continuation += words
        .remainder()
        .iter()
        .filter(|&&b| b & 0xC0 == 0x80)
        .count();
    bytes.len() - continuation
}

/// The text after replacements applied one after the other, each at the code-point span
/// `[start, end)` of the text the earlier ones left (the spans of an acceptance's change facts,
/// in order), or `None` when a span does not fit that text.
///
/// The text is kept as pieces of the original and of the replacements, and each source's code
/// points are indexed once: a span is found by walking the pieces, not the text. Each span used
/// to count code points from the start of the whole text and splice it (`replace_range`), so
/// 1,000 edits of an 8 MB file took the files profile's front end 2.4 s (helper-91).
pub fn apply_spans<'a>(
    before: &'a str,
    replacements: impl IntoIterator<Item = (usize, usize, &'a str)>,
) -> Option<String> {
    let mut sources = vec![Indexed::new(before)];
    // (source, first code point, code points), in text order.
    let mut pieces: Vec<(usize, usize, usize)> = vec![(0, 0, sources[0].chars)];
    for (start, end, new) in replacements {
        if start > end {
            return None;
        }
        let at = split_pieces(&mut pieces, start)?;
        let to = split_pieces(&mut pieces, end)?;
        sources.push(Indexed::new(new));
        let inserted = (sources.len() - 1, 0, sources[sources.len() - 1].chars);
        pieces.splice(at..to, (inserted.2 > 0).then_some(inserted));
    }
    let mut out = String::with_capacity(pieces.iter().map(|p| sources[p.0].text.len()).sum());
    for (src, first, len) in pieces {
        let s = &sources[src];
        out.push_str(&s.text[s.byte_of(first)..s.byte_of(first + len)]);
    }
    Some(out)
}

/// A text with the byte offset of every [`Indexed::STEP`]-th code point.
struct Indexed<'a> {
    text: &'a str,
    chars: usize,
    marks: Vec<usize>,
}

impl<'a> Indexed<'a> {
    const STEP: usize = 1024;

    fn new(text: &'a str) -> Indexed<'a> {
        let mut marks = Vec::with_capacity(text.len() / Self::STEP + 1);
        let mut chars = 0;
        for (i, &b) in text.as_bytes().iter().enumerate() {
            if (b as i8) >= -0x40 {
                if chars % Self::STEP == 0 {
                    marks.push(i);
                }
                chars += 1;
            }
        }
        Indexed { text, chars, marks }
    }

    /// The byte offset of code point `cp` (at most `chars`).
    fn byte_of(&self, cp: usize) -> usize {
        if cp >= self.chars {
            return self.text.len();
        }
        let from = self.marks[cp / Self::STEP];
        from + byte_offset(&self.text[from..], cp % Self::STEP).unwrap_or(self.text.len() - from)
    }
}

/// The index of the first piece that starts at code point `at` of the text the pieces make,
/// splitting the piece `at` falls inside; `None` when `at` is past the end.
fn split_pieces(pieces: &mut Vec<(usize, usize, usize)>, at: usize) -> Option<usize> {
    let mut seen = 0;
    for i in 0..pieces.len() {
        let (src, first, len) = pieces[i];
        if at == seen {
            return Some(i);
        }
        if at < seen + len {
            let head = at - seen;
            pieces[i] = (src, first, head);
            pieces.insert(i + 1, (src, first + head, len - head));
            return Some(i + 1);
        }
        seen += len;
    }
    (at == seen).then_some(pieces.len())
}

/// Byte offset of code point `cp` in `s`, or `None` when `cp` is past the end.
/// `cp == char_len(s)` maps to `s.len()`.
pub fn byte_offset(s: &str, cp: usize) -> Option<usize> {
    if cp == 0 {
        return Some(0);
    }
    let bytes = s.as_bytes();
    let mut seen = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if (b as i8) >= -0x40 {
            if seen == cp {
                return Some(i);
            }
            seen += 1;
        }
    }
    (seen == cp).then_some(bytes.len())
}

/// The code-point slice `[start, end)` of `s`, clamped to its end, as a byte range.
pub fn byte_range(s: &str, start: usize, end: usize) -> (usize, usize) {
    let b0 = byte_offset(s, start).unwrap_or(s.len());
    let b1 = if end <= start {
        b0
    } else {
        b0 + byte_offset(&s[b0..], end - start).unwrap_or(s.len() - b0)
    };
    (b0, b1)
}

/// The code-point slice `[start, end)` of `s`, clamped to its end.
pub fn slice_chars(s: &str, start: usize, end: usize) -> &str {
    let (a, b) = byte_range(s, start, end);
    &s[a..b]
}

/// The last `n` code points of `s`.
pub fn tail_chars(s: &str, n: usize) -> &str {
    match s.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((i, _)) if n > 0 => &s[i..],
        _ if n == 0 => "",
        _ => s,
    }
}

/// The first `n` code points of `s`.
pub fn head_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Why a string cannot be stored as PostgreSQL text. Lone surrogates never reach a Rust `str`;
/// the JSON reader reports them separately.
pub fn text_defect(s: &str) -> Option<&'static str> {
    memchr::memchr(0, s.as_bytes()).map(|_| "contains U+0000, which PostgreSQL text cannot store")
}

/// Line-ending facts of a raw upload, recorded before normalization
/// (contract: `source_line_endings`). A CRLF pair counts once, as `crlf`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLineEndings {
    pub lf: u64,
    pub crlf: u64,
    pub cr: u64,
    pub source_code_points: u64,
    pub source_utf8_bytes: u64,
    pub source_sha256: String,
}

/// The uniform or mixed style of a raw upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEndingStyle {
    None,
    Lf,
    Crlf,
    Cr,
    Mixed,
}

impl LineEndingStyle {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Lf => "lf",
            Self::Crlf => "crlf",
            Self::Cr => "cr",
            Self::Mixed => "mixed",
        }
    }
}

impl SourceLineEndings {
    pub fn of(raw: &str) -> Self {
        let bytes = raw.as_bytes();
        let (mut lf, mut crlf, mut cr) = (0u64, 0u64, 0u64);
        let mut i = 0;
        let mut ticks =
            crate::contract::interrupt::Every::new(crate::contract::interrupt::SEARCH_INTERVAL);
        while let Some(rel) = memchr::memchr2(b'\r', b'\n', &bytes[i..]) {
            ticks.tick();
            let at = i + rel;
            if bytes[at] == b'\n' {
                lf += 1;
                i = at + 1;
            } else if bytes.get(at + 1) == Some(&b'\n') {
                crlf += 1;
                i = at + 2;
            } else {
                cr += 1;
                i = at + 1;
            }
        }
        SourceLineEndings {
            lf,
            crlf,
            cr,
            source_code_points: char_len(raw) as u64,
            source_utf8_bytes: bytes.len() as u64,
            source_sha256: sha256_hex(raw),
        }
    }

    pub fn style(&self) -> LineEndingStyle {
        match (self.lf > 0, self.crlf > 0, self.cr > 0) {
            (false, false, false) => LineEndingStyle::None,
            (true, false, false) => LineEndingStyle::Lf,
            (false, true, false) => LineEndingStyle::Crlf,
            (false, false, true) => LineEndingStyle::Cr,
            _ => LineEndingStyle::Mixed,
        }
    }

    /// The contract's JSON object, in the contract's key order.
    pub fn to_json(&self) -> Value {
        json!({
            "style": self.style().as_str(),
            "lf": self.lf,
            "crlf": self.crlf,
            "cr": self.cr,
            "normalized": self.crlf + self.cr > 0,
            "source_code_points": self.source_code_points,
            "source_utf8_bytes": self.source_utf8_bytes,
            "source_sha256": self.source_sha256,
        })
    }

    /// Reads back a stored object; `None` for anything that is not one.
    pub fn from_json(v: &Value) -> Option<Self> {
        let o: &Map<String, Value> = v.as_object()?;
        Some(SourceLineEndings {
            lf: o.get("lf")?.as_u64()?,
            crlf: o.get("crlf")?.as_u64()?,
            cr: o.get("cr")?.as_u64()?,
            source_code_points: o.get("source_code_points")?.as_u64()?,
            source_utf8_bytes: o.get("source_utf8_bytes")?.as_u64()?,
            source_sha256: o.get("source_sha256")?.as_str()?.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::occurrence::find_all;
    use super::*;

    /// helper-86: SHA-256 of a large text checks for interrupts every 4 MiB (so a cancel ends
    /// the export of a 64 MiB text within milliseconds), and its digest is the one-piece one.
    #[test]
    fn sha256_of_a_large_text_checks_for_interrupts() {
        let text = "a".repeat(16 << 20);
        crate::contract::interrupt::testing::arm(None);
        let digest = sha256_hex(&text);
        assert_eq!(crate::contract::interrupt::testing::calls(), 4);
        assert_eq!(digest, hex(&Sha256::digest(text.as_bytes())));
        assert!(crate::contract::interrupt::testing::interrupted_after(
            1,
            || {
                sha256_hex(&text);
            }
        ));
    }

    /// `apply_spans` (pieces) gives what splicing the text span by span gives, for random
    /// spans anywhere in the evolving text, in any order, over multibyte text; and `None`
    /// exactly when a span does not fit.
    #[test]
    fn pieces_equal_splicing_span_by_span() {
        fn spliced(before: &str, spans: &[(usize, usize, String)]) -> Option<String> {
            let mut text = before.to_owned();
            for (start, end, new) in spans {
                if start > end {
                    return None;
                }
                let from = byte_offset(&text, *start)?;
                let to = from + byte_offset(&text[from..], end - start)?;
                text.replace_range(from..to, new);
            }
            Some(text)
        }
        let mut r = crate::contract::rng::XorShift(0x0dd5_0fa1_1ed5_0001);
        let alphabet = ['a', 'é', '中', '🌍', '\n', ' '];
        let word = |r: &mut crate::contract::rng::XorShift, n: usize| -> String {
            (0..n).map(|_| alphabet[r.below(alphabet.len())]).collect()
        };
        for round in 0..2_000 {
            let n = r.below(3_000);
            let before = word(&mut r, n);
            let mut len = before.chars().count();
            let mut spans = Vec::new();
            for _ in 0..r.below(40) {
                let start = r.below(len + 2);
                let end = start + r.below(6);
                let n = r.below(5);
                let new = word(&mut r, n);
                if end <= len {
                    len = len - (end - start) + new.chars().count();
                }
                spans.push((start, end, new));
            }
            let got = apply_spans(&before, spans.iter().map(|(s, e, n)| (*s, *e, n.as_str())));
            assert_eq!(got, spliced(&before, &spans), "round {round}");
        }
    }

    /// The spans of change facts apply in order, each in the text the earlier ones left, in
    /// code points; a span that does not fit answers `None`.
    #[test]
    fn spans_apply_in_order_in_code_points() {
        let before = "foo bar\nfoo baz\n";
        let after = apply_spans(before, [(12, 15, "qux"), (4, 7, "é")]);
        assert_eq!(after.as_deref(), Some("foo é\nfoo qux\n"));
        // The second span counts "é" as one code point, in the text the first one left.
        let after = apply_spans("aé b", [(1, 2, "ÉÉ"), (3, 4, "_")]);
        assert_eq!(after.as_deref(), Some("aÉÉ_b"));
        assert_eq!(apply_spans("abc", [(2, 4, "x")]), None);
        assert_eq!(apply_spans("abc", [(2, 1, "x")]), None);
        assert_eq!(apply_spans("abc", [(3, 3, "d")]).as_deref(), Some("abcd"));
    }

    #[test]
    fn canonicalize_crlf_and_bare_cr() {
        assert_eq!(canonicalize("a\r\nb\rc\n"), "a\nb\nc\n");
        assert_eq!(canonicalize("\r\r\n\n"), "\n\n\n");
        assert!(matches!(canonicalize("plain\n"), Cow::Borrowed(_)));
    }

    /// Contract "Line endings and export formats": a CRLF pair counts once; style mixed.
    #[test]
    fn source_line_endings_counts_crlf_once() {
        let f = SourceLineEndings::of("one\r\ntwo\r\n");
        assert_eq!((f.lf, f.crlf, f.cr), (0, 2, 0));
        assert_eq!(f.style(), LineEndingStyle::Crlf);
        assert_eq!(
            SourceLineEndings::of("a\nb\r\n").style(),
            LineEndingStyle::Mixed
        );
        assert_eq!(SourceLineEndings::of("a\rb\r").style(), LineEndingStyle::Cr);
        assert_eq!(SourceLineEndings::of("abc").style(), LineEndingStyle::None);
        let g = SourceLineEndings::of("h\u{e9}\r\n");
        assert_eq!((g.source_code_points, g.source_utf8_bytes), (4, 5));
    }

    #[test]
    fn overlapping_occurrences_in_code_points() {
        assert_eq!(find_all("aaaa", "aa"), vec![(0, 2), (1, 3), (2, 4)]);
        // Astral and combining characters count as one code point each.
        assert_eq!(find_all("🌍x🌍x", "x"), vec![(1, 2), (3, 4)]);
        assert_eq!(
            find_all("e\u{301}e\u{301}", "e\u{301}"),
            vec![(0, 2), (2, 4)]
        );
    }

    /// Issue 21, item 3: the word-at-a-time count is the code point count of every string, at
    /// every length and alignment (the contract's offsets and limits are code points).
    #[test]
    fn char_len_counts_code_points() {
        proptest::proptest!(|(s in "\\PC{0,80}", skip in 0usize..8)| {
            let s: String = s.chars().skip(skip).collect();
            proptest::prop_assert_eq!(char_len(&s), s.chars().count());
        });
        let mixed: String = (0..10_000u32)
            .filter_map(|i| char::from_u32((i * 104_729) % 0x11_0000))
            .collect();
        for cut in 0..16 {
            let t: String = mixed.chars().skip(cut).collect();
            assert_eq!(char_len(&t), t.chars().count());
        }
    }

    #[test]
    fn code_point_slicing() {
        let s = "a🌍中b";
        assert_eq!(char_len(s), 4);
        assert_eq!(slice_chars(s, 1, 3), "🌍中");
        assert_eq!(slice_chars(s, 3, 99), "b");
        assert_eq!(byte_offset(s, 4), Some(s.len()));
        assert_eq!(byte_offset(s, 5), None);
        assert_eq!(tail_chars(s, 2), "中b");
        assert_eq!(head_chars(s, 2), "a🌍");
        assert_eq!(tail_chars(s, 0), "");
        assert_eq!(tail_chars(s, 10), s);
    }
}
