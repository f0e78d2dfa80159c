//! JSON as the contract counts it: compact, optionally ASCII-escaped, optionally with sorted keys.
//!
//! Byte budgets are measured on compact ASCII-escaped JSON (Python's `ensure_ascii=True,
//! separators=(",", ":")`); stored records and fingerprints use sorted keys so that wire
//! whitespace, key order and escape spelling never change an identity.

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

/// Whether none of the eight bytes of `w` needs [`needs_escape`]. Each test is the exact
/// "some byte is zero / below n" word test (a borrow starts only at such a byte).
fn plain_word(w: u64, ascii: bool) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH != 0;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
    !(below_space
        || has_zero(w ^ (ONES * u64::from(b'"')))
        || has_zero(w ^ (ONES * u64::from(b'\\')))
        || (ascii && w & HIGH != 0))
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
/// time and copied in one piece; an escape is spelled without `core::fmt` (a 1 MiB replacement
/// with 48,576 `é` used to spend more time formatting `\u00e9` than everything else in its
/// stored record).
pub fn write_str(s: &str, ascii: bool, out: &mut String) {
    // The bytes are appended to `out`'s own buffer: whole characters of `s` and ASCII escapes
    // only. What was appended is checked once at the end (for the all-ASCII output of ASCII
    // mode, the word-at-a-time ASCII check); what `out` held before is not checked again.
    let mut buf = std::mem::take(out).into_bytes();
    let start = buf.len();
    buf.reserve(s.len() + 2);
    buf.push(b'"');
    let bytes = s.as_bytes();
    let (mut run, mut i) = (0, 0);
    while i < bytes.len() {
        if let Some(w) = bytes.get(i..i + 8)
            && plain_word(u64::from_le_bytes(w.try_into().unwrap_or_default()), ascii)
        {
            i += 8;
            continue;
        }
        let b = bytes[i];
        if !needs_escape(b, ascii) {
            i += 1;
            continue;
        }
        buf.extend_from_slice(&bytes[run..i]);
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
            let c = s[i..].chars().next().unwrap_or_default();
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                push_unit(*u, &mut buf);
            }
            i += c.len_utf8();
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

/// Whether a JSON integer is present but exceeds i64 (still "an integer" to a caller).
pub fn is_big_int(v: &Value) -> bool {
    matches!(v, Value::Number(n) if n.is_u64() && n.as_i64().is_none())
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

    #[test]
    fn integers_are_not_bools_or_floats() {
        assert_eq!(as_int(&json!(3)), Some(3));
        assert_eq!(as_int(&json!(true)), None);
        assert_eq!(as_int(&json!(1.0)), None);
        assert_eq!(as_int(&json!(u64::MAX)), None);
        assert!(is_big_int(&json!(u64::MAX)));
    }
}
