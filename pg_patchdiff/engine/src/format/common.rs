//! What every transaction format shares, below all of them: the typed edit and span operation
//! they parse into, the facts an applied change derives, and the parsing helpers of a record's
//! intent and list of changes. Kept here rather than in `tx1` so that the formats and the
//! sequential buffer import it without importing each other.

use crate::contract::args::quoted_name;
use crate::contract::json::type_name;
use crate::contract::limits::CHANGE_ID_MAX;
use crate::contract::words::{DiagnosticCode, FailureReason};
use crate::evidence::rejection::{Rejection, Stage};
use crate::text::{canonicalize, text_defect};
use serde_json::{Map, Value, json};

pub const RISKS: &[&str] = &["low", "medium", "high"];

/// One validated edit, its strings canonicalized (LF) for matching.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub change_id: String,
    pub match_text: String,
    /// Code points of `match` as sent, before LF canonicalization (near misses search only
    /// queries of at most 64 of them).
    pub match_raw_chars: usize,
    pub replace: String,
    pub rationale: Option<String>,
    pub risk: Option<String>,
    pub occurrence_index: Option<usize>,
    pub anchor_before: Option<String>,
    pub anchor_after: Option<String>,
}

/// What the runtime derived for one applied change: the evidence and the ledger's `derived`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeFact {
    pub change_id: String,
    pub change_index: usize,
    pub span_start: usize,
    pub span_end: usize,
    pub matched_chars: usize,
    pub replacement_chars: usize,
    pub matched_sha256: String,
    pub replacement_sha256: String,
    pub rationale: Option<String>,
    pub risk: Option<String>,
    /// `"span"` (tx/2 spans) or `"replace_all"` (tx/3); match facts carry none.
    pub operation: Option<&'static str>,
    /// A change of an observed batch (patchdiff-observed-batch/1): its group and scope. `None`
    /// for every other format, whose facts serialize exactly as before.
    pub observed: Option<ObservedFact>,
}

/// Where a change of an observed batch applied: its spans are in the coordinates of its group's
/// scope-local sequential buffer (`span_basis: "scope_local"`), which begins at the absolute
/// code point `scope_start` of the transaction-start text.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedFact {
    /// 1-based group of the batch.
    pub group_index: usize,
    /// The group's observation, canonical (lowercase hyphenated).
    pub observation_id: String,
    pub span_basis: &'static str,
    pub scope_start: usize,
}

impl ChangeFact {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "change_id": self.change_id,
            "change_index": self.change_index,
            "span_start": self.span_start,
            "span_end": self.span_end,
            "matched_chars": self.matched_chars,
            "replacement_chars": self.replacement_chars,
            "matched_sha256": self.matched_sha256,
            "replacement_sha256": self.replacement_sha256,
        });
        if let (Some(op), Value::Object(m)) = (self.operation, &mut v) {
            m.insert("operation".into(), json!(op));
        }
        if let (Some(o), Value::Object(m)) = (&self.observed, &mut v) {
            m.insert("group_index".into(), json!(o.group_index));
            m.insert("observation_id".into(), json!(o.observation_id));
            m.insert("span_basis".into(), json!(o.span_basis));
            m.insert("scope_start".into(), json!(o.scope_start));
        }
        v
    }
}

pub(crate) fn malformed(reason: FailureReason, code: DiagnosticCode, detail: String) -> Rejection {
    Rejection::coded(reason, Stage::ProtocolValidation, code, detail)
}

/// The transaction `intent`: a non-blank string.
pub(crate) fn parse_intent(intent: Option<&Value>) -> Result<String, Rejection> {
    let intent = match intent {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        Some(Value::String(_)) => {
            return Err(malformed(
                FailureReason::ManifestMalformed,
                DiagnosticCode::InvalidIntent,
                "intent must be a non-blank string.".into(),
            ));
        }
        Some(v) => {
            return Err(malformed(
                FailureReason::ManifestMalformed,
                DiagnosticCode::InvalidIntent,
                format!("intent must be a string, not {}.", type_name(v)),
            ));
        }
        None => {
            return Err(malformed(
                FailureReason::ManifestMissing,
                DiagnosticCode::MissingIntent,
                "intent is required.".into(),
            ));
        }
    };
    if let Some(why) = text_defect(intent) {
        return Err(malformed(
            FailureReason::ManifestMalformed,
            DiagnosticCode::InvalidIntent,
            format!("intent {why}."),
        ));
    }
    Ok(intent.clone())
}

/// Names of a record's list of changes in its rejections: `edits` (tx/1) or `operations` (tx/2).
#[derive(Debug, Clone, Copy)]
pub(crate) struct List {
    pub name: &'static str,
    /// Singular, for `empty_edits` style messages.
    pub item: &'static str,
    /// `diagnostic.code` of an absent or null list, an empty one, and one that is not an array.
    pub missing: DiagnosticCode,
    pub empty: DiagnosticCode,
    pub not_array: DiagnosticCode,
    /// `diagnostic.code` of a malformed item.
    pub code: DiagnosticCode,
    /// The diagnostic member naming the item's position.
    pub index_key: &'static str,
}

/// The record's non-empty array of changes.
pub(crate) fn parse_list(list: List, v: Option<&Value>) -> Result<&Vec<Value>, Rejection> {
    let n = list.name;
    match v {
        Some(Value::Array(a)) if !a.is_empty() => Ok(a),
        Some(Value::Array(_)) => Err(malformed(
            FailureReason::ManifestMissing,
            list.empty,
            format!("{n} must contain at least one {}.", list.item),
        )),
        Some(Value::Null) | None => Err(malformed(
            FailureReason::ManifestMissing,
            list.missing,
            format!("{n} is required."),
        )),
        Some(v) => Err(malformed(
            FailureReason::ManifestMalformed,
            list.not_array,
            format!("{n} must be an array, not {}.", type_name(v)),
        )),
    }
}

pub(crate) fn block(list: List, i: usize, field: &str, what: String) -> Rejection {
    malformed_field(
        list.code,
        &format!("{}[{i}]", list.name),
        (list.index_key, i),
        field,
        what,
    )
}

/// The `block_malformed` rejection of `field` of the item at `at` (`edits[0]`, `groups[1]`),
/// whose position the diagnostic names as `index`. `field` is quoted at most
/// `UNKNOWN_NAME_MAX_CHARS` code points long (an unknown field's name is the sender's), with
/// `field_truncated: true` when it was cut.
pub(crate) fn malformed_field(
    code: DiagnosticCode,
    at: &str,
    index: (&str, usize),
    field: &str,
    what: String,
) -> Rejection {
    let (field, cut) = quoted_name(field);
    let r = Rejection::coded(
        FailureReason::BlockMalformed,
        Stage::ProtocolValidation,
        code,
        format!("{at}.{field}: {what}."),
    )
    .field(index.0, json!(index.1))
    .field("field", json!(field));
    if cut {
        r.field("field_truncated", json!(true))
    } else {
        r
    }
}

pub(crate) fn opt_text(
    list: List,
    i: usize,
    o: &Map<String, Value>,
    k: &str,
    allow_empty: bool,
) -> Result<Option<String>, Rejection> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() && !allow_empty => {
            Err(block(list, i, k, "must not be empty".into()))
        }
        Some(Value::String(s)) => match text_defect(s) {
            Some(why) => Err(block(list, i, k, why.into())),
            None => Ok(Some(canonicalize(s).into_owned())),
        },
        Some(v) => Err(block(
            list,
            i,
            k,
            format!("must be a string or null, not {}", type_name(v)),
        )),
    }
}

/// A required string field (`replace`, `expected_text`), canonicalized; empty is allowed.
pub(crate) fn required_text(
    list: List,
    i: usize,
    o: &Map<String, Value>,
    k: &str,
) -> Result<String, Rejection> {
    match o.get(k) {
        Some(Value::String(_)) => Ok(opt_text(list, i, o, k, true)?.unwrap_or_default()),
        Some(v) => Err(block(
            list,
            i,
            k,
            format!("must be a string, not {}", type_name(v)),
        )),
        None => Err(block(list, i, k, "is required".into())),
    }
}

/// `change_id` (default `chg_NNN` by position) and `risk`.
pub(crate) fn parse_advisory(
    list: List,
    i: usize,
    o: &Map<String, Value>,
) -> Result<(String, Option<String>), Rejection> {
    let change_id = match o.get("change_id") {
        None | Some(Value::Null) => format!("chg_{:03}", i + 1),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= CHANGE_ID_MAX
                && s.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') =>
        {
            s.clone()
        }
        Some(_) => {
            return Err(block(
                list,
                i,
                "change_id",
                format!("must be 1..{CHANGE_ID_MAX} characters of A-Z, a-z, 0-9, '_' or '-'"),
            ));
        }
    };
    let risk = match o.get("risk") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if RISKS.contains(&s.as_str()) => Some(s.clone()),
        Some(_) => {
            return Err(block(
                list,
                i,
                "risk",
                "must be \"low\", \"medium\", \"high\" or null".into(),
            ));
        }
    };
    Ok((change_id, risk))
}

/// One typed-match edit (a tx/1 edit, or a tx/2 `match` operation whose `fields` add `op`).
pub(crate) fn parse_edit(
    list: List,
    i: usize,
    o: &Map<String, Value>,
    fields: &[&str],
) -> Result<Edit, Rejection> {
    // The smallest unknown name, not the first on the wire: key order never changes an answer.
    if let Some(k) = o.keys().filter(|k| !fields.contains(&k.as_str())).min() {
        return Err(block(list, i, k, "unknown field".into()));
    }
    let match_text = match o.get("match") {
        Some(Value::String(_)) => opt_text(list, i, o, "match", false)?.unwrap_or_default(),
        Some(v) => {
            return Err(block(
                list,
                i,
                "match",
                format!("must be a non-empty string, not {}", type_name(v)),
            ));
        }
        None => return Err(block(list, i, "match", "is required".into())),
    };
    let match_raw_chars = o
        .get("match")
        .and_then(Value::as_str)
        .map_or(0, |s| s.chars().count());
    let replace = required_text(list, i, o, "replace")?;
    let (change_id, risk) = parse_advisory(list, i, o)?;
    let occurrence_index = match o.get("occurrence_index") {
        None | Some(Value::Null) => None,
        // Any integer from 1 to 2^64 - 1, as sent: the refusal of one past the occurrences names
        // it (one past 2^63 - 1 was read as usize::MAX, and named so; helper-103).
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            _ => {
                return Err(block(
                    list,
                    i,
                    "occurrence_index",
                    "must be a non-boolean integer >= 1 or null".into(),
                ));
            }
        },
    };
    Ok(Edit {
        change_id,
        match_text,
        match_raw_chars,
        replace,
        rationale: opt_text(list, i, o, "rationale", true)?,
        risk,
        occurrence_index,
        anchor_before: opt_text(list, i, o, "anchor_before", false)?,
        anchor_after: opt_text(list, i, o, "anchor_after", false)?,
    })
}

/// One validated span operation, its strings canonicalized (LF).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanOp {
    pub change_id: String,
    /// Code points of the sequential buffer, end exclusive, `start <= end`.
    pub start: usize,
    pub end: usize,
    pub expected_text: String,
    pub replace: String,
    pub rationale: Option<String>,
    pub risk: Option<String>,
    /// Non-empty when present; absent and null both give `None`.
    pub expected_before: Option<String>,
    pub expected_after: Option<String>,
}
