//! patchdiff-tx/1: typed edits under runtime patchdiff-mvp-0.2.2.
//!
//! Each edit selects exactly one exact occurrence of its `match` in the buffer it sees (the text
//! after every earlier edit of the transaction) and replaces it. Every supplied selector must
//! hold; anchors mean anywhere before/after the match, not adjacent.

use crate::json::{as_int, is_big_int, type_name};
use crate::limits::CHANGE_ID_MAX;
use crate::rejection::{Rejection, Stage, exact_candidates};
use crate::target::TargetView;
use crate::text::{canonicalize, char_len, sha256_hex, text_defect};
use memchr::memmem;
use serde_json::{Map, Value, json};

pub const PROTOCOL: &str = "patchdiff-tx/1";
pub const RUNTIME: &str = "patchdiff-mvp-0.2.2";

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
pub const RISKS: &[&str] = &["low", "medium", "high"];

/// One validated edit, its strings canonicalized (LF) for matching.
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub change_id: String,
    pub match_text: String,
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
}

impl ChangeFact {
    pub fn to_json(&self) -> Value {
        json!({
            "change_id": self.change_id,
            "change_index": self.change_index,
            "span_start": self.span_start,
            "span_end": self.span_end,
            "matched_chars": self.matched_chars,
            "replacement_chars": self.replacement_chars,
            "matched_sha256": self.matched_sha256,
            "replacement_sha256": self.replacement_sha256,
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub content: String,
    pub changes: Vec<ChangeFact>,
}

fn malformed(reason: &'static str, code: &str, detail: String) -> Rejection {
    Rejection::coded(reason, Stage::ProtocolValidation, code, detail)
}

/// Validates `intent` and `edits` of a tx/1 record.
pub fn parse(
    intent: Option<&Value>,
    edits: Option<&Value>,
) -> Result<(String, Vec<Edit>), Rejection> {
    let intent = match intent {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        Some(Value::String(_)) => {
            return Err(malformed(
                "manifest_malformed",
                "invalid_intent",
                "intent must be a non-blank string.".into(),
            ));
        }
        Some(v) => {
            return Err(malformed(
                "manifest_malformed",
                "invalid_intent",
                format!("intent must be a string, not {}.", type_name(v)),
            ));
        }
        None => {
            return Err(malformed(
                "manifest_missing",
                "missing_intent",
                "intent is required.".into(),
            ));
        }
    };
    if let Some(why) = text_defect(intent) {
        return Err(malformed(
            "manifest_malformed",
            "invalid_intent",
            format!("intent {why}."),
        ));
    }
    let list = match edits {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(malformed(
                "manifest_missing",
                "empty_edits",
                "edits must contain at least one edit.".into(),
            ));
        }
        Some(Value::Null) | None => {
            return Err(malformed(
                "manifest_missing",
                "missing_edits",
                "edits is required.".into(),
            ));
        }
        Some(v) => {
            return Err(malformed(
                "manifest_malformed",
                "invalid_edits",
                format!("edits must be an array, not {}.", type_name(v)),
            ));
        }
    };
    let mut out: Vec<Edit> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let edit = parse_edit(i, raw)?;
        if out.iter().any(|e| e.change_id == edit.change_id) {
            return Err(block(
                i,
                "change_id",
                format!("duplicate change_id {:?}", edit.change_id),
            ));
        }
        out.push(edit);
    }
    Ok((intent.clone(), out))
}

fn block(i: usize, field: &str, what: String) -> Rejection {
    Rejection::coded(
        "block_malformed",
        Stage::ProtocolValidation,
        "invalid_edit",
        format!("edits[{i}].{field}: {what}."),
    )
    .field("edit_index", json!(i))
    .field("field", json!(field))
}

fn opt_text(
    i: usize,
    o: &Map<String, Value>,
    k: &str,
    allow_empty: bool,
) -> Result<Option<String>, Rejection> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() && !allow_empty => {
            Err(block(i, k, "must not be empty".into()))
        }
        Some(Value::String(s)) => match text_defect(s) {
            Some(why) => Err(block(i, k, why.into())),
            None => Ok(Some(canonicalize(s).into_owned())),
        },
        Some(v) => Err(block(
            i,
            k,
            format!("must be a string or null, not {}", type_name(v)),
        )),
    }
}

fn parse_edit(i: usize, raw: &Value) -> Result<Edit, Rejection> {
    let Value::Object(o) = raw else {
        return Err(block(
            i,
            "*",
            format!("an edit must be an object, not {}", type_name(raw)),
        ));
    };
    if let Some(k) = o.keys().find(|k| !EDIT_FIELDS.contains(&k.as_str())) {
        return Err(block(i, k, "unknown field".into()));
    }
    let match_text = match o.get("match") {
        Some(Value::String(_)) => opt_text(i, o, "match", false)?.unwrap_or_default(),
        Some(v) => {
            return Err(block(
                i,
                "match",
                format!("must be a non-empty string, not {}", type_name(v)),
            ));
        }
        None => return Err(block(i, "match", "is required".into())),
    };
    let replace = match o.get("replace") {
        Some(Value::String(_)) => opt_text(i, o, "replace", true)?.unwrap_or_default(),
        Some(v) => {
            return Err(block(
                i,
                "replace",
                format!("must be a string, not {}", type_name(v)),
            ));
        }
        None => return Err(block(i, "replace", "is required".into())),
    };
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
                i,
                "risk",
                "must be \"low\", \"medium\", \"high\" or null".into(),
            ));
        }
    };
    let occurrence_index = match o.get("occurrence_index") {
        None | Some(Value::Null) => None,
        Some(v) => match as_int(v) {
            Some(n) if n >= 1 => Some(n as usize),
            _ if is_big_int(v) => Some(usize::MAX),
            _ => {
                return Err(block(
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
        replace,
        rationale: opt_text(i, o, "rationale", true)?,
        risk,
        occurrence_index,
        anchor_before: opt_text(i, o, "anchor_before", false)?,
        anchor_after: opt_text(i, o, "anchor_after", false)?,
    })
}

/// An occurrence in the current buffer: code-point span and byte span.
#[derive(Debug, Clone, Copy)]
struct Occ {
    s: usize,
    e: usize,
    bs: usize,
    be: usize,
}

fn occurrences(buf: &str, needle: &str) -> Vec<Occ> {
    let finder = memmem::Finder::new(needle.as_bytes());
    let n_chars = char_len(needle);
    let bytes = buf.as_bytes();
    let (mut out, mut pos, mut pos_cp) = (Vec::new(), 0usize, 0usize);
    while let Some(rel) = finder.find(&bytes[pos..]) {
        let at = pos + rel;
        pos_cp += char_len(&buf[pos..at]);
        out.push(Occ {
            s: pos_cp,
            e: pos_cp + n_chars,
            bs: at,
            be: at + needle.len(),
        });
        let step = buf[at..].chars().next().map_or(1, char::len_utf8);
        pos = at + step;
        pos_cp += 1;
    }
    out
}

/// One applied change, kept to map later spans back to transaction-start coordinates.
struct Step {
    start: usize,
    old_end: usize,
    new_len: usize,
}

/// Maps a position of the buffer after `steps` back to transaction-start coordinates.
/// A position inside text an earlier change produced maps to that change's original start
/// (`right == false`) or end (`right == true`).
fn to_original(steps: &[Step], mut p: usize, right: bool) -> usize {
    for st in steps.iter().rev() {
        if p < st.start {
            continue;
        }
        if p >= st.start + st.new_len && !(st.new_len == 0 && p == st.start && !right) {
            p = p - st.new_len + (st.old_end - st.start);
        } else {
            p = if right { st.old_end } else { st.start };
        }
    }
    p
}

/// Applies `edits` to `original` sequentially, all or nothing.
pub fn apply(start: &TargetView, edits: &[Edit]) -> Result<Applied, Rejection> {
    let original = start.content;
    let mut buf = original.to_owned();
    let mut steps: Vec<Step> = Vec::with_capacity(edits.len());
    // Transaction-start intervals each change consumed, for sequential_match_invalid.
    let mut consumed: Vec<(usize, usize)> = Vec::with_capacity(edits.len());
    let mut changes = Vec::with_capacity(edits.len());
    for (k, edit) in edits.iter().enumerate() {
        let prior = k;
        let occ = occurrences(&buf, &edit.match_text);
        let fail = |reason: &'static str, detail: String| {
            let mut r = Rejection::new(reason, Stage::TransactionApplicability, detail);
            r.failed_change_id = Some(edit.change_id.clone());
            if prior > 0 {
                r.intermediate = Some((buf.clone(), prior));
            }
            r
        };
        let stage = if prior > 0 {
            "intermediate_buffer"
        } else {
            "canonical_target"
        };
        let with_candidates = |mut r: Rejection| {
            let spans: Vec<(usize, usize)> = occ.iter().map(|o| (o.s, o.e)).collect();
            if prior > 0 {
                r.detail.push_str(&format!(
                    " Selectors count the sequential buffer after {prior} simulated change{}.",
                    if prior == 1 { "" } else { "s" }
                ));
            }
            r.location = spans.first().map(|s| s.0);
            r.fields
                .insert("occurrence_count".into(), json!(spans.len()));
            r.fields.insert(
                "exact_candidates".into(),
                exact_candidates(&buf, &edit.match_text, &spans, stage, prior, start),
            );
            r
        };
        if occ.is_empty() {
            if prior > 0 {
                let originals = occurrences(original, &edit.match_text);
                let hit: Vec<(Occ, usize)> = originals
                    .iter()
                    .filter_map(|o| {
                        consumed
                            .iter()
                            .position(|&(cs, ce)| {
                                if cs == ce {
                                    o.s < cs && cs < o.e
                                } else {
                                    o.s < ce && cs < o.e
                                }
                            })
                            .map(|j| (*o, j))
                    })
                    .collect();
                if !hit.is_empty() {
                    let listed: Vec<Value> = hit
                        .iter()
                        .take(crate::limits::CANDIDATES_MAX)
                        .map(|(o, j)| {
                            json!({
                                "start": o.s, "end": o.e,
                                "consumed_by_change_id": edits[*j].change_id,
                                "consumed_by_change_index": j + 1,
                            })
                        })
                        .collect();
                    let mut r = fail(
                        "sequential_match_invalid",
                        "MATCH text was consumed by earlier change in this transaction.".into(),
                    );
                    r.fields
                        .insert("original_occurrence_count".into(), json!(originals.len()));
                    r.fields
                        .insert("original_occurrences".into(), json!(listed));
                    return Err(r);
                }
            }
            return Err(fail(
                "match_absent",
                "MATCH text not found in target.".into(),
            ));
        }
        let holds = |o: &Occ| {
            edit.anchor_before
                .as_deref()
                .is_none_or(|a| memmem::find(&buf.as_bytes()[..o.bs], a.as_bytes()).is_some())
                && edit
                    .anchor_after
                    .as_deref()
                    .is_none_or(|a| memmem::find(&buf.as_bytes()[o.be..], a.as_bytes()).is_some())
        };
        let anchored = edit.anchor_before.is_some() || edit.anchor_after.is_some();
        let chosen: Occ = match edit.occurrence_index {
            Some(n) if n > occ.len() => {
                return Err(with_candidates(fail(
                    "disambiguation_invalid",
                    format!(
                        "occurrence_index {n} exceeds the {} exact occurrence(s) of MATCH text in the buffer this edit sees.",
                        occ.len()
                    ),
                )));
            }
            Some(n) if !holds(&occ[n - 1]) => {
                return Err(with_candidates(fail(
                    "disambiguation_invalid",
                    format!(
                        "occurrence_index {n} selects an occurrence that does not satisfy the anchors."
                    ),
                )));
            }
            Some(n) => occ[n - 1],
            None if anchored => {
                let ok: Vec<&Occ> = occ.iter().filter(|o| holds(o)).collect();
                if ok.len() != 1 {
                    return Err(with_candidates(fail(
                        "disambiguation_invalid",
                        format!(
                            "Anchors select {} of {} exact occurrences of MATCH text; they must select exactly one.",
                            ok.len(),
                            occ.len()
                        ),
                    )));
                }
                *ok[0]
            }
            None if occ.len() > 1 => {
                return Err(with_candidates(fail(
                    "match_ambiguous",
                    "MATCH text appears multiple times without disambiguation.".into(),
                )));
            }
            None => occ[0],
        };
        let new_len = char_len(&edit.replace);
        consumed.push((
            to_original(&steps, chosen.s, false),
            to_original(&steps, chosen.e, true),
        ));
        changes.push(ChangeFact {
            change_id: edit.change_id.clone(),
            change_index: k + 1,
            span_start: chosen.s,
            span_end: chosen.e,
            matched_chars: chosen.e - chosen.s,
            replacement_chars: new_len,
            matched_sha256: sha256_hex(&edit.match_text),
            replacement_sha256: sha256_hex(&edit.replace),
            rationale: edit.rationale.clone(),
            risk: edit.risk.clone(),
        });
        steps.push(Step {
            start: chosen.s,
            old_end: chosen.e,
            new_len,
        });
        buf.replace_range(chosen.bs..chosen.be, &edit.replace);
    }
    Ok(Applied {
        content: buf,
        changes,
    })
}
