//! JSON as the contract counts it: compact, optionally ASCII-escaped, optionally with sorted keys.
//!
//! Byte budgets are measured on compact ASCII-escaped JSON (Python's `ensure_ascii=True,
//! separators=(",", ":")`); stored records and fingerprints use sorted keys so that wire
//! whitespace, key order and escape spelling never change an identity.

use crate::contract::interrupt;
use crate::contract::utf8::decode_wide;
use serde_json::{Map, Value};
use std::fmt::Write;

/// How to write a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Escape every non-ASCII character as `\uXXXX` (surrogate pairs above U+FFFF).
    pub ascii: bool,
    /// Write object keys in code-point order instead of insertion order.
    pub sorted: bool,
}

/// Compact, literal UTF-8, insertion order: what SQL callers read.
pub const LITERAL: Style = Style {
    ascii: false,
    sorted: false,
};
/// Compact ASCII-escaped, insertion order: what byte budgets count.
pub const ASCII: Style = Style {
    ascii: true,
    sorted: false,
};
/// Compact ASCII-escaped with sorted keys: stored records and hashed identities.
pub const CANONICAL: Style = Style {
    ascii: true,
    sorted: true,
};

pub fn to_string(v: &Value, style: Style) -> String {
    let mut out = String::with_capacity(128);
    write_value(v, style, &mut out);
    out
}

/// [`to_string`] of an object that is not wrapped in a [`Value`] (no copy of its contents).
pub fn object_to_string(m: &Map<String, Value>, style: Style) -> String {
    let mut out = String::with_capacity(128);
    write_object(m, style, &mut out);
    out
}

/// Byte length of `v` as compact ASCII-escaped JSON.
pub fn ascii_len(v: &Value) -> usize {
    to_string(v, ASCII).len()
}

/// Byte length of the string `s` as an ASCII-escaped JSON string literal, quotes included.
pub fn ascii_str_len(s: &str) -> usize {
    let mut n = 2;
    for c in s.chars() {
        n += match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c if c.is_ascii() => 1,
            c if (c as u32) > 0xFFFF => 12,
            _ => 6,
        };
    }
    n
}

/// Byte length of the string `s` as a [`LITERAL`] JSON string literal, quotes included: quotes,
/// backslashes and the five named controls take two bytes, other controls six, every other byte
/// one (non-ASCII stays as it is).
pub fn literal_str_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..0x20 => 6,
            _ => 1,
        })
        .sum::<usize>()
}

pub fn write_value(v: &Value, style: Style, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str(s, style.ascii, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(x, style, out);
            }
            out.push(']');
        }
        Value::Object(m) => write_object(m, style, out),
    }
}

fn write_object(m: &Map<String, Value>, style: Style, out: &mut String) {
    out.push('{');
    let mut first = true;
    let mut emit = |k: &str, x: &Value, out: &mut String| {
        if !first {
            out.push(',');
        }
        first = false;
        write_str(k, style.ascii, out);
        out.push(':');
        write_value(x, style, out);
    };
    if style.sorted {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort_unstable();
        for k in keys {
            emit(k, &m[k], out);
        }
    } else {
        for (k, x) in m {
            emit(k, x, out);
        }
    }
    out.push('}');
}

/// Lowercase hexadecimal digits, as `\uXXXX` escapes spell them.
const HEX: &[u8; 16] = b"0123456789abcdef";

/// Bytes that end a run of characters copied as they are: controls, `"`, `\\`, and (in ASCII
/// mode) every byte of a non-ASCII character.
fn needs_escape(b: u8, ascii: bool) -> bool {
    b < 0x20 || b == b'"' || b == b'\\' || (ascii && b >= 0x80)
}

/// The bytes of `w` (little-endian, byte 0 lowest) that need [`needs_escape`], as the high bit
/// of each such byte. Each test is the "some byte is zero / below n" word test: a borrow starts
/// only at such a byte, so the lowest set bit is exact (higher ones may be false; only the
/// lowest is used), and the mask is zero exactly when no byte needs escaping.
fn escapes_in(w: u64, ascii: bool) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    let high = if ascii { w & HIGH } else { 0 };
    below_space
        | zero_bytes(w ^ (ONES * u64::from(b'"')))
        | zero_bytes(w ^ (ONES * u64::from(b'\\')))
        | high
}

/// How many bytes of `b` are 0x80 or above, eight at a time.
fn high_bytes(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let mut words = b.chunks_exact(8);
    let mut n: usize = 0;
    for w in words.by_ref() {
        let w = u64::from_le_bytes(w.try_into().unwrap_or_default());
        // One bit per high byte, summed into the top byte (at most 8, no carry out).
        n += (((w >> 7) & ONES).wrapping_mul(ONES) >> 56) as usize;
    }
    n + words.remainder().iter().filter(|&&x| x >= 0x80).count()
}

/// `\u` and the four hex digits of one UTF-16 code unit.
fn push_unit(u: u16, buf: &mut Vec<u8>) {
    buf.extend_from_slice(&[
        b'\\',
        b'u',
        HEX[usize::from(u >> 12)],
        HEX[usize::from((u >> 8) & 15)],
        HEX[usize::from((u >> 4) & 15)],
        HEX[usize::from(u & 15)],
    ]);
}

/// Writes `s` as a JSON string literal. Runs of plain characters are found eight bytes at a
/// time, the first byte to escape in a word by its bit, and copied in one piece; an escape is
/// spelled without `core::fmt` and a non-ASCII character is decoded in place (a 1 MiB
/// replacement with 48,576 `é` used to spend more time formatting `\u00e9` than everything else
/// in its stored record). In ASCII mode the output's size is bounded before it is written, so a
/// megabyte of text is not copied again when the buffer would have grown.
pub fn write_str(s: &str, ascii: bool, out: &mut String) {
    /// Plain bytes between two interrupt checks (a millisecond or two of this loop).
    const PLAIN_CHECK_BYTES: usize = 1 << 20;
    // The bytes are appended to `out`'s own buffer: whole characters of `s` and ASCII escapes
    // only. What was appended is checked once at the end (for the all-ASCII output of ASCII
    // mode, the word-at-a-time ASCII check); what `out` held before is not checked again.
    let mut buf = std::mem::take(out).into_bytes();
    let start = buf.len();
    let bytes = s.as_bytes();
    // Every non-ASCII byte adds at most two (a character of n bytes becomes 6 or 12); quotes,
    // backslashes and controls, rarer, grow the buffer as usual.
    let widened = if ascii { 2 * high_bytes(bytes) } else { 0 };
    buf.reserve(bytes.len() + widened + 2);
    buf.push(b'"');
    // `bytes[run..i]` are plain bytes not yet copied; they go in one piece before an escape.
    let (mut run, mut i) = (0, 0);
    // Escapes are counted for interrupt checks: a 64 MiB text of control characters is 64
    // million of them (2.5 s for `patchdiff_get_target`, which a cancel could not stop:
    // helper-58). Plain runs go eight bytes a step and are checked every `PLAIN_CHECK_BYTES`:
    // a 64 MiB run is tens of milliseconds, which with the other passes over a text that size
    // (its detoasting, copies, the answer's datum) held a cancel for 0.45 s (helper-86).
    let mut ticks = interrupt::Every::new(interrupt::SEARCH_INTERVAL);
    let mut next_check = PLAIN_CHECK_BYTES;
    while i < bytes.len() {
        let b = match bytes.get(i..i + 8) {
            Some(w) => {
                let mask = escapes_in(u64::from_le_bytes(w.try_into().unwrap_or_default()), ascii);
                if mask == 0 {
                    i += 8;
                    if i >= next_check {
                        interrupt::check();
                        next_check = i + PLAIN_CHECK_BYTES;
                    }
                    continue;
                }
                i += (mask.trailing_zeros() / 8) as usize;
                bytes[i]
            }
            None => {
                let b = bytes[i];
                if !needs_escape(b, ascii) {
                    i += 1;
                    continue;
                }
                b
            }
        };
        buf.extend_from_slice(&bytes[run..i]);
        ticks.tick();
        if b < 0x80 {
            match b {
                b'"' => buf.extend_from_slice(b"\\\""),
                b'\\' => buf.extend_from_slice(b"\\\\"),
                b'\n' => buf.extend_from_slice(b"\\n"),
                b'\r' => buf.extend_from_slice(b"\\r"),
                b'\t' => buf.extend_from_slice(b"\\t"),
                0x08 => buf.extend_from_slice(b"\\b"),
                0x0c => buf.extend_from_slice(b"\\f"),
                _ => push_unit(u16::from(b), &mut buf),
            }
            i += 1;
        } else {
            // `i` is a character boundary: every earlier byte was consumed whole.
            let (c, len) = decode_wide(bytes, i);
            if let Ok(u) = u16::try_from(c) {
                push_unit(u, &mut buf);
            } else {
                let c = c - 0x1_0000;
                push_unit(0xd800 | (c >> 10) as u16, &mut buf);
                push_unit(0xdc00 | (c & 0x3ff) as u16, &mut buf);
            }
            i += len;
        }
        run = i;
    }
    buf.extend_from_slice(&bytes[run..]);
    buf.push(b'"');
    *out = match std::str::from_utf8(&buf[start..]) {
        // SAFETY: `buf[..start]` are the bytes of a `String`, and `buf[start..]` was just
        // checked to be UTF-8; both end and begin on character boundaries.
        Ok(_) => unsafe { String::from_utf8_unchecked(buf) },
        // Unreachable (only whole characters and ASCII were appended); never unsound.
        Err(_) => String::from_utf8_lossy(&buf).into_owned(),
    };
}

/// The implementation [`write_str`] replaced, kept as its oracle.
#[cfg(test)]
pub(crate) fn write_str_fmt(s: &str, ascii: bool, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    let mut run = 0;
    for (i, c) in s.char_indices() {
        let plain = c != '"' && c != '\\' && (c as u32) >= 0x20 && (!ascii || c.is_ascii());
        if plain {
            continue;
        }
        out.push_str(&s[run..i]);
        run = i + c.len_utf8();
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
        }
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// A non-bool JSON integer that fits in i64.
pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64(),
        _ => None,
    }
}

/// What [`shape_within`] found past its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooComplex {
    Values,
    Objects,
}

/// Whether JSON `text` holds at most `max_values` values and `max_objects` objects, read from
/// the text without parsing it (so that a request is refused before it is built in memory). A
/// value is counted at each `,`, `:`, `[` and `{` outside strings, and once for the top value:
/// every array element and object member name and value, or one more (an empty container).
/// Malformed text is counted as far as it goes; the parser refuses it after.
pub fn shape_within(text: &str, max_values: usize, max_objects: usize) -> Result<(), TooComplex> {
    let b = text.as_bytes();
    let (mut values, mut objects) = (1usize, 0usize);
    if values > max_values {
        return Err(TooComplex::Values);
    }
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                // To the closing quote: the next quote after an even run of backslashes (an odd
                // run escapes it). Jumping from quote to quote, where stopping at every escape
                // cost a 1 MB replacement with a line break every 20 bytes 0.36 ms.
                i += 1;
                loop {
                    let Some(j) = memchr::memchr(b'"', &b[i..]) else {
                        return Ok(());
                    };
                    let quote = i + j;
                    i = quote + 1;
                    let escapes = b[..quote].iter().rev().take_while(|&&c| c == b'\\').count();
                    if escapes % 2 == 0 {
                        break;
                    }
                }
                continue;
            }
            b'{' => {
                objects += 1;
                values += 1;
                if objects > max_objects {
                    return Err(TooComplex::Objects);
                }
            }
            b',' | b':' | b'[' => values += 1,
            _ => {}
        }
        if values > max_values {
            return Err(TooComplex::Values);
        }
        i += 1;
    }
    Ok(())
}

/// Whether a JSON integer is present but exceeds i64 (still "an integer" to a caller).
pub fn is_big_int(v: &Value) -> bool {
    matches!(v, Value::Number(n) if n.is_u64() && n.as_i64().is_none())
}

/// Stored JSON text (a `json` column) as [`LITERAL`] writes the value it parses to: the text
/// itself when it is already in that form ([`is_literal_form`]), which is how this extension
/// writes every column; otherwise parsed (serde_json, so duplicate keys and number spellings
/// resolve exactly as they always did) and written again. A page can then embed the result as it
/// is, byte for byte what parsing and serialising it would have produced.
pub fn stored_literal(text: String) -> Result<String, serde_json::Error> {
    if is_literal_form(&text) {
        return Ok(text);
    }
    let v: Value = serde_json::from_str(&text)?;
    Ok(to_string(&v, LITERAL))
}

/// Containers nested deeper than this are never taken as literal form; serde_json refuses 128.
const LITERAL_MAX_DEPTH: usize = 100;

/// Whether `text` is exactly what [`LITERAL`] writes for the value serde_json parses it to, so
/// that `to_string(&serde_json::from_str(text)?, LITERAL) == text`: one JSON value with no
/// whitespace outside strings; strings escaped exactly as [`write_str`] escapes them (only `\"`,
/// `\\`, `\n`, `\r`, `\t`, `\b`, `\f` and lowercase `\u00XX` for the other control characters;
/// everything else literal); integers without a sign on zero, a leading zero, a fraction or an
/// exponent, within i64/u64 (any other number is refused, since serde_json reads it as a float
/// and prints it its own way); no object with a repeated key (serde_json keeps the first key's
/// place and the last value); at most 100 levels deep. It may refuse a text that would
/// round-trip; it never accepts one that would not.
pub fn is_literal_form(text: &str) -> bool {
    let mut r = Literal {
        b: text.as_bytes(),
        i: 0,
    };
    r.value(0) && r.i == r.b.len()
}

struct Literal<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Literal<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.i += 1;
        }
        hit
    }

    fn word(&mut self, w: &[u8]) -> bool {
        let hit = self.b[self.i..].starts_with(w);
        if hit {
            self.i += w.len();
        }
        hit
    }

    fn value(&mut self, depth: usize) -> bool {
        match self.peek() {
            Some(b'n') => self.word(b"null"),
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'"') => self.string().is_some(),
            Some(b'-' | b'0'..=b'9') => self.integer(),
            Some(b'[') if depth < LITERAL_MAX_DEPTH => {
                self.i += 1;
                if self.eat(b']') {
                    return true;
                }
                loop {
                    if !self.value(depth + 1) {
                        return false;
                    }
                    if self.eat(b']') {
                        return true;
                    }
                    if !self.eat(b',') {
                        return false;
                    }
                }
            }
            Some(b'{') if depth < LITERAL_MAX_DEPTH => {
                self.i += 1;
                if self.eat(b'}') {
                    return true;
                }
                let mut keys: Vec<&'a [u8]> = Vec::new();
                loop {
                    // Keys in literal form spell each string one way only, so equal strings
                    // are equal bytes.
                    let Some(k) = self.string() else {
                        return false;
                    };
                    if keys.contains(&k) {
                        return false;
                    }
                    keys.push(k);
                    if !self.eat(b':') || !self.value(depth + 1) {
                        return false;
                    }
                    if self.eat(b'}') {
                        return true;
                    }
                    if !self.eat(b',') {
                        return false;
                    }
                }
            }
            _ => false,
        }
    }

    /// A string in [`write_str`]'s spelling (non-ASCII literal); its bytes between the quotes.
    fn string(&mut self) -> Option<&'a [u8]> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.i;
        loop {
            let rest = &self.b[self.i..];
            let n = rest
                .iter()
                .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
            self.i += n;
            match rest[n] {
                b'"' => {
                    self.i += 1;
                    return Some(&self.b[start..self.i - 1]);
                }
                b'\\' => {
                    let esc = self.b.get(self.i + 1..self.i + 6);
                    match self.b.get(self.i + 1) {
                        Some(b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f') => self.i += 2,
                        Some(b'u') => {
                            // Only the control characters without a short escape.
                            let [_, b'0', b'0', hi @ (b'0' | b'1'), lo] = esc? else {
                                return None;
                            };
                            let lo = match lo {
                                b'0'..=b'9' => lo - b'0',
                                b'a'..=b'f' => lo - b'a' + 10,
                                _ => return None,
                            };
                            let code = (hi - b'0') * 16 + lo;
                            if matches!(code, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                                return None;
                            }
                            self.i += 6;
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            }
        }
    }

    /// An integer as serde_json reads into i64/u64 and prints back unchanged.
    fn integer(&mut self) -> bool {
        let negative = self.eat(b'-');
        let start = self.i;
        let digits = self.b[start..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.i += digits;
        let text = &self.b[start..self.i];
        if digits == 0
            || (digits > 1 && text[0] == b'0')
            || matches!(self.peek(), Some(b'.' | b'e' | b'E'))
        {
            return false;
        }
        let mut n: u64 = 0;
        for &d in text {
            let Some(m) = n
                .checked_mul(10)
                .and_then(|m| m.checked_add(u64::from(d - b'0')))
            else {
                return false;
            };
            n = m;
        }
        // serde_json reads "-0" and anything below i64::MIN as floats.
        !negative || (1..=1u64 << 63).contains(&n)
    }
}

/// A short name of the JSON type of `v`, for error details.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `shape_within` counts from the text exactly what the parsed value holds: every value and
    /// object member name, plus one for each empty container; and the objects. Random values,
    /// with strings full of the structural characters and escapes, written compactly and
    /// pretty-printed (whitespace is not counted).
    #[test]
    fn the_shape_is_counted_from_the_text_as_the_value_holds_it() {
        fn count(v: &Value) -> (usize, usize) {
            match v {
                Value::Array(a) if a.is_empty() => (2, 0),
                Value::Object(m) if m.is_empty() => (2, 1),
                Value::Array(a) => a
                    .iter()
                    .map(count)
                    .fold((1, 0), |x, y| (x.0 + y.0, x.1 + y.1)),
                Value::Object(m) => m
                    .values()
                    .map(count)
                    .fold((1 + m.len(), 1), |x, y| (x.0 + y.0, x.1 + y.1)),
                _ => (1, 0),
            }
        }
        fn value(r: &mut crate::contract::rng::XorShift, depth: usize) -> Value {
            let text = |r: &mut crate::contract::rng::XorShift| -> String {
                (0..r.below(6))
                    .map(|_| ['a', ',', ':', '[', '{', '"', '\\', '}', 'é'][r.below(9)])
                    .collect()
            };
            match (depth, r.below(5)) {
                (0, _) | (_, 0) => json!(text(r)),
                (_, 1) => json!(r.below(1000)),
                (_, 2) => Value::Array((0..r.below(4)).map(|_| value(r, depth - 1)).collect()),
                _ => Value::Object(
                    (0..r.below(4))
                        .map(|_| (text(r), value(r, depth - 1)))
                        .collect(),
                ),
            }
        }
        let mut r = crate::contract::rng::XorShift(0x5eed_cafe_f00d_0001);
        for _ in 0..3_000 {
            let v = value(&mut r, 4);
            let (values, objects) = count(&v);
            for text in [
                serde_json::to_string(&v).unwrap(),
                serde_json::to_string_pretty(&v).unwrap(),
            ] {
                assert_eq!(shape_within(&text, values, objects), Ok(()), "{text}");
                assert_eq!(
                    shape_within(&text, values - 1, objects),
                    Err(TooComplex::Values),
                    "{text}"
                );
                if objects > 0 {
                    assert_eq!(
                        shape_within(&text, values, objects - 1),
                        Err(TooComplex::Objects),
                        "{text}"
                    );
                }
            }
        }
    }

    /// DESIGN.md, "Every loop whose length depends on input checks for interrupts": writing a
    /// string of escapes (a text of control characters or line feeds) checks, in both modes, so
    /// a cancel stops `patchdiff_get_target` of such a text (helper-58); a plain string checks
    /// once a MiB.
    #[test]
    fn a_long_run_of_escapes_checks_for_interrupts() {
        for text in ["\u{1}", "\n", "é"] {
            let long = text.repeat(1 << 20);
            for ascii in [false, true] {
                if text == "é" && !ascii {
                    continue; // not escaped in literal mode
                }
                assert!(
                    crate::contract::interrupt::testing::interrupted_after(3, || {
                        let mut out = String::new();
                        write_str(&long, ascii, &mut out);
                    }),
                    "{text:?}, ascii {ascii}"
                );
            }
        }
        // A plain run checks once a MiB (helper-86: a 64 MiB one held a cancel), a shorter
        // string never.
        for (len, checks) in [((1 << 20) - 8, 0), (8 << 20, 8)] {
            let plain = "a".repeat(len);
            for ascii in [false, true] {
                crate::contract::interrupt::testing::arm(None);
                let mut out = String::new();
                write_str(&plain, ascii, &mut out);
                assert_eq!(
                    crate::contract::interrupt::testing::calls(),
                    checks,
                    "{len}"
                );
            }
        }
    }

    #[test]
    fn ascii_escapes_like_python_ensure_ascii() {
        let v = json!({"b": "🌍 中\u{2028}\"\\\n\u{1}", "a": 1});
        assert_eq!(
            to_string(&v, ASCII),
            r#"{"b":"\ud83c\udf0d \u4e2d\u2028\"\\\n\u0001","a":1}"#
        );
        assert_eq!(to_string(&v, CANONICAL).find("\"a\""), Some(1));
        assert_eq!(
            ascii_str_len("🌍 中\u{2028}\"\\\n\u{1}"),
            to_string(&v["b"], ASCII).len()
        );
        assert_eq!(to_string(&json!("中"), LITERAL), "\"中\"");
    }

    /// `literal_str_len` is the length of the LITERAL string, for every byte that escapes
    /// differently (the files profile's size check counts with it, mcp-frontend/src/files.rs).
    #[test]
    fn literal_str_len_is_the_written_length() {
        let mut all: String = (0u8..0x80).map(char::from).collect();
        all.push_str("é€😀\u{7f}\u{2028}\r\n");
        for s in ["", "plain", "\"q\" \\ \u{1}\u{8}\u{c}\t", all.as_str()] {
            assert_eq!(
                literal_str_len(s),
                to_string(&json!(s), LITERAL).len(),
                "{s:?}"
            );
        }
    }

    /// Issue 21, item 3: the stored record's bytes do not change with the faster escaping.
    /// Every string, in both modes, is written exactly as the `core::fmt` version wrote it.
    #[test]
    fn write_str_equals_the_fmt_version() {
        let check = |s: &str| {
            for ascii in [false, true] {
                let (mut a, mut b) = (String::from("x é "), String::from("x é "));
                write_str(s, ascii, &mut a);
                write_str_fmt(s, ascii, &mut b);
                assert_eq!(a, b, "{s:?} ascii={ascii}");
            }
        };
        for s in [
            "",
            "plain",
            "é",
            "🌍",
            "\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}\u{10ffff}",
            "\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f} ",
            "a\u{2028}b\u{fffd}",
            "ends with é",
        ] {
            check(s);
        }
        proptest::proptest!(|(s in ".{0,64}", t in "[\\x00-\\x7f]{0,64}")| {
            check(&s);
            check(&t);
            check(&format!("{s}{t}{s}"));
        });
        let big: String = (0..200_000u32)
            .filter_map(|i| char::from_u32((i * 7919) % 0x11_0000))
            .collect();
        check(&big);
    }

    /// [`write_str`]'s size bound counts the bytes of non-ASCII characters word by word.
    #[test]
    fn high_bytes_counts_every_byte_from_0x80() {
        proptest::proptest!(|(s in ".{0,80}", t in proptest::collection::vec(proptest::num::u8::ANY, 0..80))| {
            proptest::prop_assert_eq!(high_bytes(s.as_bytes()), s.bytes().filter(|&b| b >= 0x80).count());
            proptest::prop_assert_eq!(high_bytes(&t), t.iter().filter(|&&b| b >= 0x80).count());
        });
        assert_eq!(high_bytes(&[0xff; 4096]), 4096);
    }

    /// The old way of showing a stored column: parse, then write [`LITERAL`].
    fn reparsed(text: &str) -> Option<String> {
        serde_json::from_str::<Value>(text)
            .ok()
            .map(|v| to_string(&v, LITERAL))
    }

    /// Issue 21, item 4 (pages embed stored JSON as it is): texts this extension writes are in
    /// literal form, and the odd spellings a `json` column may hold are not, and come out of
    /// [`stored_literal`] exactly as parsing and serialising them did.
    #[test]
    fn literal_form_and_odd_stored_texts() {
        let own = json!({"b": "é\u{0}\u{1f}\u{7f}\"\\\n\r\t\u{8}\u{c}🌍", "a": [1, -2, u64::MAX, i64::MIN, null, true, false, {}, []], "c": {"d": 0}});
        let text = to_string(&own, LITERAL);
        assert!(is_literal_form(&text), "{text}");
        for (odd, literal) in [
            (r#"{"a": 1}"#, false),
            (" 1", false),
            ("1 ", false),
            ("[1 ,2]", false),
            (r#""\u00e9""#, false),
            (r#""\u0041""#, false),
            (r#""\u001F""#, false),
            (r#""\u000a""#, false),
            (r#""\/""#, false),
            (r#""\u001f""#, true),
            (r#""\u0000""#, true),
            (r#"{"a":1,"a":2}"#, false),
            (r#"{"a":1,"b":{"a":2}}"#, true),
            ("1.0", false),
            ("1e2", false),
            ("-0", false),
            ("0", true),
            ("01", false),
            ("-9223372036854775808", true),
            ("-9223372036854775809", false),
            ("18446744073709551615", true),
            ("18446744073709551616", false),
            ("123456789012345678901234567890", false),
            (r#""\ud83c\udf0d""#, false),
            (r#""\ud800""#, false),
            ("", false),
            ("nul", false),
            ("[1,]", false),
            (r#"{"a":}"#, false),
        ] {
            assert_eq!(is_literal_form(odd), literal, "{odd}");
            assert_eq!(stored_literal(odd.to_owned()).ok(), reparsed(odd), "{odd}");
            if literal {
                assert_eq!(reparsed(odd).as_deref(), Some(odd));
            }
        }
        let deep = format!("{}{}", "[".repeat(101), "]".repeat(101));
        assert!(!is_literal_form(&deep));
        assert_eq!(stored_literal(deep.clone()).ok(), reparsed(&deep));
        let too_deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(stored_literal(too_deep).is_err());
    }

    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "[a-c\u{0}-\u{1f}\"\\\\/é🌍\u{7f}\u{2028}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                proptest::collection::vec(("[a-d\"é\u{1}]{0,2}", inner), 0..5)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the spelling (literal, ASCII-escaped, pretty, serde_json's own), the text a
        /// page embeds equals the old parse-and-serialise text byte for byte, and the texts this
        /// extension writes are taken as they are unless they hold a float.
        #[test]
        fn stored_literal_equals_reparsing(v in any_value()) {
            let literal = to_string(&v, LITERAL);
            fn has_float(v: &Value) -> bool {
                match v {
                    Value::Number(n) => n.is_f64(),
                    Value::Array(a) => a.iter().any(has_float),
                    Value::Object(m) => m.values().any(has_float),
                    _ => false,
                }
            }
            proptest::prop_assert_eq!(is_literal_form(&literal), !has_float(&v));
            for text in [
                literal,
                to_string(&v, ASCII),
                to_string(&v, CANONICAL),
                serde_json::to_string_pretty(&v).unwrap(),
                serde_json::to_string(&v).unwrap(),
            ] {
                proptest::prop_assert_eq!(stored_literal(text.clone()).ok(), reparsed(&text));
            }
        }

        /// Soundness of the checker on arbitrary near-JSON text: whatever it accepts parses and
        /// prints back to itself.
        #[test]
        fn literal_form_round_trips(text in r#"[\[\]{}",:0-9\-.eE \\unrtbf/aé]{0,24}"#) {
            if is_literal_form(&text) {
                proptest::prop_assert_eq!(reparsed(&text), Some(text.clone()));
            }
            proptest::prop_assert_eq!(stored_literal(text.clone()).ok(), reparsed(&text));
        }
    }

    #[test]
    fn integers_are_not_bools_or_floats() {
        assert_eq!(as_int(&json!(3)), Some(3));
        assert_eq!(as_int(&json!(true)), None);
        assert_eq!(as_int(&json!(1.0)), None);
        assert_eq!(as_int(&json!(u64::MAX)), None);
        assert!(is_big_int(&json!(u64::MAX)));
    }
}
