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

pub fn write_str(s: &str, ascii: bool, out: &mut String) {
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

    #[test]
    fn integers_are_not_bools_or_floats() {
        assert_eq!(as_int(&json!(3)), Some(3));
        assert_eq!(as_int(&json!(true)), None);
        assert_eq!(as_int(&json!(1.0)), None);
        assert_eq!(as_int(&json!(u64::MAX)), None);
        assert!(is_big_int(&json!(u64::MAX)));
    }
}
