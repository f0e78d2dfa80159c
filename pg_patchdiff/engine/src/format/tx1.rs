//! patchdiff-tx/1: typed edits under runtime patchdiff-mvp-0.2.2.
//!
//! Each edit selects exactly one exact occurrence of its `match` in the buffer it sees (the text
//! after every earlier edit of the transaction) and replaces it. Every supplied selector must
//! hold; anchors mean anywhere before/after the match, not adjacent.

use crate::contract::interrupt;
use crate::contract::json::type_name;
use crate::contract::words::DiagnosticCode;
use crate::evidence::rejection::Rejection;
use crate::format::common::{Edit, List, block, parse_edit, parse_intent, parse_list};
use crate::format::protocol::{Protocol, Runtime};
use crate::format::sequential::{self, Applied, Op};
use crate::target::TargetView;
use serde_json::Value;
use std::collections::HashSet;

pub const PROTOCOL: &str = Protocol::Tx1.as_str();
pub const RUNTIME: &str = Runtime::Mvp0_2_2.as_str();

/// The fields an edit object may carry (TYPED_EDIT_JSON_SCHEMA).
pub const EDIT_FIELDS: &[&str] = &[
    "match",
    "replace",
    "change_id",
    "rationale",
    "risk",
    "occurrence_index",
    "anchor_before",
    "anchor_after",
];

pub(crate) const EDITS: List = List {
    name: "edits",
    item: "edit",
    missing: DiagnosticCode::MissingEdits,
    empty: DiagnosticCode::EmptyEdits,
    not_array: DiagnosticCode::InvalidEdits,
    code: DiagnosticCode::InvalidEdit,
    index_key: "edit_index",
};

/// Validates `intent` and `edits` of a tx/1 record.
pub fn parse(
    intent: Option<&Value>,
    edits: Option<&Value>,
) -> Result<(String, Vec<Edit>), Rejection> {
    let intent = parse_intent(intent)?;
    let list = parse_list(EDITS, edits)?;
    let mut out: Vec<Edit> = Vec::with_capacity(list.len());
    // Membership only (nothing iterates it), so a hash set keeps the answer deterministic and
    // the check linear: replay parses stored records of any length.
    let mut ids: HashSet<String> = HashSet::with_capacity(list.len());
    let mut ticks = interrupt::Every::new(256);
    for (i, raw) in list.iter().enumerate() {
        ticks.tick();
        let Value::Object(o) = raw else {
            return Err(block(
                EDITS,
                i,
                "*",
                format!("an edit must be an object, not {}", type_name(raw)),
            ));
        };
        let edit = parse_edit(EDITS, i, o, EDIT_FIELDS)?;
        if !ids.insert(edit.change_id.clone()) {
            return Err(block(
                EDITS,
                i,
                "change_id",
                format!("duplicate change_id {:?}", edit.change_id),
            ));
        }
        out.push(edit);
    }
    Ok((intent, out))
}

/// Applies `edits` to the target sequentially, all or nothing.
pub fn apply(start: &TargetView, edits: &[Edit]) -> Result<Applied, Rejection> {
    let ops: Vec<Op> = edits.iter().map(Op::Match).collect();
    sequential::apply(start, &ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 item 2 (no behaviour change): the typed list codes spell what
    /// `{missing,empty,invalid}_{name}` spelled before.
    #[test]
    fn edits_list_codes_keep_their_spelling() {
        let l = EDITS;
        assert_eq!(l.missing.as_str(), format!("missing_{}", l.name));
        assert_eq!(l.empty.as_str(), format!("empty_{}", l.name));
        assert_eq!(l.not_array.as_str(), format!("invalid_{}", l.name));
        assert_eq!(l.code.as_str(), format!("invalid_{}", l.item));
    }

    /// Contract, `occurrence_index (integer >= 1 | null)`: every integer from 1 up to 2^64 - 1
    /// is read as sent (sql-api.md, "Integers are JSON integers up to 2^64"), and one past the
    /// occurrences is refused naming it. One past 2^63 - 1 was read as usize::MAX and named so
    /// (helper-103); 0, negative, fractional and boolean ones stay malformed.
    #[test]
    fn an_occurrence_index_is_read_as_sent() {
        use serde_json::json;
        let edits =
            |index: Value| json!([{"match": "hello", "replace": "x", "occurrence_index": index}]);
        for sent in [1u64, 2, i64::MAX as u64, i64::MAX as u64 + 6, u64::MAX] {
            let (_, parsed) = parse(Some(&json!("x")), Some(&edits(json!(sent)))).unwrap();
            assert_eq!(parsed[0].occurrence_index, Some(sent as usize));
        }
        for malformed in [json!(0), json!(-1), json!(1.0), json!(true), json!("1")] {
            let r = parse(Some(&json!("x")), Some(&edits(malformed.clone()))).unwrap_err();
            assert!(
                r.detail.contains("occurrence_index"),
                "{malformed}: {}",
                r.detail
            );
        }
        let text = crate::target::TargetView {
            target_file_id: "t",
            version: 0,
            current_hash: "h",
            content: "hello\n",
        };
        let sent = i64::MAX as u64 + 6;
        let (_, parsed) = parse(Some(&json!("x")), Some(&edits(json!(sent)))).unwrap();
        let r = apply(&text, &parsed).unwrap_err();
        assert!(
            r.detail
                .contains(&format!("occurrence_index {sent} exceeds")),
            "{}",
            r.detail
        );
    }
}
