//! Advisory warnings on accepted transactions (contract "Accepted responses, current state and
//! warnings"). They never change the verdict, and replay ignores them.

use crate::contract::limits::WARNINGS_MAX;
use serde_json::{Map, Value, json};

pub const NO_OP_CHANGE: &str = "no_op_change";
pub const NO_OP_TRANSACTION: &str = "no_op_transaction";
pub const OCCURRENCE_INDEX_BASIS_SHIFT: &str = "occurrence_index_basis_shift";
pub const GRAPHEME_BOUNDARY_SPLIT: &str = "grapheme_boundary_split";

/// One warning: its code, a one-line detail and the structured fields of `warning_details`.
#[derive(Debug, Clone, PartialEq)]
pub struct Warning {
    pub code: &'static str,
    pub detail: String,
    /// Members after `code` and `detail` (`change_id`, `change_index`, ...), in order.
    pub fields: Map<String, Value>,
}

impl Warning {
    pub fn new(code: &'static str, detail: String) -> Self {
        Warning {
            code,
            detail,
            fields: Map::new(),
        }
    }

    pub fn field(mut self, k: &str, v: Value) -> Self {
        self.fields.insert(k.to_owned(), v);
        self
    }

    /// The `warnings` string: `"<code>: <detail>"`.
    pub fn line(&self) -> String {
        format!("{}: {}", self.code, self.detail)
    }

    /// The `warning_details` object: `{code, detail, change_id?, change_index?, ...}`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), json!(self.code));
        m.insert("detail".into(), json!(self.detail));
        for (k, v) in &self.fields {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

/// The four response members, in the contract's order: `warnings`, `warning_details` (at most
/// 16 each), `warning_count` and `warnings_truncated`.
pub fn response_fields(ws: &[Warning]) -> [(&'static str, Value); 4] {
    let kept = &ws[..ws.len().min(WARNINGS_MAX)];
    [
        (
            "warnings",
            Value::Array(kept.iter().map(|w| json!(w.line())).collect()),
        ),
        (
            "warning_details",
            Value::Array(kept.iter().map(Warning::to_json).collect()),
        ),
        ("warning_count", json!(ws.len())),
        ("warnings_truncated", json!(ws.len() > kept.len())),
    ]
}

/// The accepted row's stored diagnostic: `{warnings, warning_count, warnings_truncated}` when
/// there is at least one warning, otherwise none (the column stays NULL).
pub fn stored_diagnostic(ws: &[Warning]) -> Option<Value> {
    if ws.is_empty() {
        return None;
    }
    let [(_, lines), _, (_, count), (_, truncated)] = response_fields(ws);
    Some(json!({ "warnings": lines, "warning_count": count, "warnings_truncated": truncated }))
}

/// The response members recovered from a stored accepted diagnostic. Rows without warnings, and
/// rows recorded before warnings existed, recover with none. The stored row keeps the strings
/// only, so each recovered detail is `{code, detail}` split from its string.
pub fn recovered_fields(stored: Option<&Value>) -> [(&'static str, Value); 4] {
    let lines: Vec<Value> = stored
        .and_then(|d| d.get("warnings"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let details: Vec<Value> = lines
        .iter()
        .filter_map(Value::as_str)
        .map(|s| match s.split_once(": ") {
            Some((code, detail)) => json!({ "code": code, "detail": detail }),
            None => json!({ "code": s, "detail": "" }),
        })
        .collect();
    let get = |k: &str, default: Value| stored.and_then(|d| d.get(k)).cloned().unwrap_or(default);
    let count = get("warning_count", json!(lines.len()));
    let truncated = get("warnings_truncated", json!(false));
    [
        ("warnings", Value::Array(lines)),
        ("warning_details", Value::Array(details)),
        ("warning_count", count),
        ("warnings_truncated", truncated),
    ]
}

/// Why a boundary falls inside a likely grapheme cluster, or `None`.
///
/// A deterministic, conservative approximation of UAX #29: a boundary before a combining mark,
/// ZWJ, variation selector, emoji modifier or tag character, after a ZWJ, between the two halves
/// of a regional-indicator pair, or inside a Hangul jamo sequence. `at` is a byte offset on a
/// character boundary of `text`.
pub fn grapheme_split(text: &str, at: usize) -> Option<&'static str> {
    let (Some(prev), Some(next)) = (text[..at].chars().next_back(), text[at..].chars().next())
    else {
        return None;
    };
    let n = next as u32;
    if n == 0x200D {
        return Some("before a zero width joiner");
    }
    if (0xFE00..=0xFE0F).contains(&n) || (0xE0100..=0xE01EF).contains(&n) {
        return Some("before a variation selector");
    }
    if (0x1F3FB..=0x1F3FF).contains(&n) {
        return Some("before an emoji modifier");
    }
    if (0xE0020..=0xE007F).contains(&n) {
        return Some("before a tag character");
    }
    if unicode_normalization::char::is_combining_mark(next) {
        return Some("before a combining mark");
    }
    if prev == '\u{200D}' {
        return Some("after a zero width joiner");
    }
    if is_regional_indicator(prev) && is_regional_indicator(next) {
        let run = text[..at]
            .chars()
            .rev()
            .take_while(|&c| is_regional_indicator(c))
            .count();
        if run % 2 == 1 {
            return Some("between the two halves of a regional-indicator pair");
        }
    }
    use Jamo::*;
    let joined = matches!(
        (jamo(prev), jamo(next)),
        (Some(L), Some(L | V | Lv | Lvt)) | (Some(Lv | V), Some(V | T)) | (Some(Lvt | T), Some(T))
    );
    joined.then_some("inside a Hangul jamo sequence")
}

fn is_regional_indicator(c: char) -> bool {
    ('\u{1F1E6}'..='\u{1F1FF}').contains(&c)
}

#[derive(Clone, Copy)]
enum Jamo {
    L,
    V,
    T,
    Lv,
    Lvt,
}

/// Hangul_Syllable_Type.
fn jamo(c: char) -> Option<Jamo> {
    let u = c as u32;
    match u {
        0x1100..=0x115F | 0xA960..=0xA97C => Some(Jamo::L),
        0x1160..=0x11A7 | 0xD7B0..=0xD7C6 => Some(Jamo::V),
        0x11A8..=0x11FF | 0xD7CB..=0xD7FB => Some(Jamo::T),
        0xAC00..=0xD7A3 if (u - 0xAC00).is_multiple_of(28) => Some(Jamo::Lv),
        0xAC00..=0xD7A3 => Some(Jamo::Lvt),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_at_cp(s: &str, cp: usize) -> Option<&'static str> {
        let b = s.char_indices().nth(cp).map_or(s.len(), |(i, _)| i);
        grapheme_split(s, b)
    }

    /// Contract "grapheme_boundary_split": each conservative rule, and boundaries that are fine.
    #[test]
    fn conservative_grapheme_rules() {
        // Combining mark: e + U+0301.
        assert_eq!(split_at_cp("e\u{301}x", 1), Some("before a combining mark"));
        assert_eq!(split_at_cp("e\u{301}x", 2), None);
        // ZWJ sequence 👨‍👩: before and after the joiner.
        let family = "\u{1F468}\u{200D}\u{1F469}";
        assert_eq!(split_at_cp(family, 1), Some("before a zero width joiner"));
        assert_eq!(split_at_cp(family, 2), Some("after a zero width joiner"));
        // Variation selector ❤️ and emoji modifier 👍🏽 and a tag sequence.
        assert_eq!(
            split_at_cp("\u{2764}\u{FE0F}", 1),
            Some("before a variation selector")
        );
        assert_eq!(
            split_at_cp("\u{1F44D}\u{1F3FD}", 1),
            Some("before an emoji modifier")
        );
        assert_eq!(
            split_at_cp("\u{1F3F4}\u{E0067}\u{E007F}", 1),
            Some("before a tag character")
        );
        // Regional indicators: 🇩🇪🇫🇷 splits at 1 and 3, not at 2.
        let flags = "\u{1F1E9}\u{1F1EA}\u{1F1EB}\u{1F1F7}";
        assert!(split_at_cp(flags, 1).is_some());
        assert_eq!(split_at_cp(flags, 2), None);
        assert!(split_at_cp(flags, 3).is_some());
        // Hangul jamo: L V T, and a precomposed LV followed by T.
        let jamo = "\u{1100}\u{1161}\u{11A8}";
        assert!(split_at_cp(jamo, 1).is_some());
        assert!(split_at_cp(jamo, 2).is_some());
        assert!(split_at_cp("\u{AC00}\u{11A8}", 1).is_some());
        assert_eq!(split_at_cp("\u{AC00}\u{AC00}", 1), None);
        // Ends of the buffer and plain text never split; canonical text has no CR.
        assert_eq!(split_at_cp("ab", 0), None);
        assert_eq!(split_at_cp("ab", 2), None);
        assert_eq!(split_at_cp("a\nb", 1), None);
    }

    #[test]
    fn at_most_sixteen_warnings_are_listed() {
        let ws: Vec<Warning> = (0..17)
            .map(|i| Warning::new(NO_OP_CHANGE, format!("w{i}")).field("change_index", json!(i)))
            .collect();
        let [w, d, c, t] = response_fields(&ws);
        assert_eq!(w.1.as_array().unwrap().len(), 16);
        assert_eq!(d.1.as_array().unwrap().len(), 16);
        assert_eq!(
            d.1[0],
            json!({"code": "no_op_change", "detail": "w0", "change_index": 0})
        );
        assert_eq!((c.1, t.1), (json!(17), json!(true)));
        let stored = stored_diagnostic(&ws).unwrap();
        assert_eq!(
            stored.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["warnings", "warning_count", "warnings_truncated"]
        );
        let [w2, d2, c2, t2] = recovered_fields(Some(&stored));
        assert_eq!((w2.1, c2.1, t2.1), (w.1, json!(17), json!(true)));
        assert_eq!(d2.1[0], json!({"code": "no_op_change", "detail": "w0"}));
        assert!(stored_diagnostic(&ws[..0]).is_none());
        let [w3, _, c3, _] = recovered_fields(None);
        assert_eq!((w3.1, c3.1), (json!([]), json!(0)));
    }
}
