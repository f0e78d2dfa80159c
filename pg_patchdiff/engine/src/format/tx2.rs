//! patchdiff-tx/2: guarded, ordered `match` and `span` operations in one atomic transaction.
//!
//! Runtime profiles are immutable: a record whose span operations carry no `expected_before` /
//! `expected_after` key runs under patchdiff-mvp-0.3.0, which rejects those keys; a record where
//! any span carries either key, even with a null value, runs under patchdiff-mvp-0.5.0, which
//! adds only span context. Match operations keep the typed-match rules of tx/1.

use crate::contract::interrupt;
use crate::contract::json::{as_int, is_big_int, type_name};
use crate::contract::words::DiagnosticCode;
use crate::evidence::rejection::Rejection;
use crate::format::common::{
    self, Edit, List, SpanOp, block, opt_text, parse_advisory, required_text,
};
use crate::format::protocol::{Protocol, Runtime};
use crate::format::sequential::{self, Applied, Op};
use crate::target::TargetView;
use serde_json::{Map, Value};
use std::collections::HashSet;

pub const PROTOCOL: &str = Protocol::Tx2.as_str();
/// Match and span operations without span context.
pub const RUNTIME: &str = Runtime::Mvp0_3_0.as_str();
/// Adds `expected_before` / `expected_after` on spans, and nothing else.
pub const RUNTIME_SPAN_CONTEXT: &str = Runtime::Mvp0_5_0.as_str();

/// The fields of a `match` operation: a tx/1 edit plus `op`.
pub const MATCH_FIELDS: &[&str] = &[
    "op",
    "match",
    "replace",
    "change_id",
    "rationale",
    "risk",
    "occurrence_index",
    "anchor_before",
    "anchor_after",
];
/// The fields of a `span` operation under 0.3.0.
pub const SPAN_FIELDS: &[&str] = &[
    "op",
    "start",
    "end",
    "expected_text",
    "replace",
    "change_id",
    "rationale",
    "risk",
];
/// Span context, 0.5.0 only.
pub const SPAN_CONTEXT_FIELDS: &[&str] = &["expected_before", "expected_after"];
const SELECTORS: &[&str] = &["match", "occurrence_index", "anchor_before", "anchor_after"];

pub(crate) const OPERATIONS: List = List {
    name: "operations",
    item: "operation",
    missing: DiagnosticCode::MissingOperations,
    empty: DiagnosticCode::EmptyOperations,
    not_array: DiagnosticCode::InvalidOperations,
    code: DiagnosticCode::InvalidOperation,
    index_key: "operation_index",
};

#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    Match(Edit),
    Span(SpanOp),
}

impl Operation {
    pub fn as_op(&self) -> Op<'_> {
        match self {
            Operation::Match(e) => Op::Match(e),
            Operation::Span(s) => Op::Span(s),
        }
    }
}

/// The runtime a tx/2 record is recorded under: 0.5.0 as soon as any span operation carries
/// `expected_before` or `expected_after`, even null; otherwise 0.3.0.
pub fn runtime_for(operations: Option<&Value>) -> &'static str {
    let context = operations.and_then(Value::as_array).is_some_and(|ops| {
        ops.iter().any(|op| {
            op.as_object().is_some_and(|o| {
                o.get("op").and_then(Value::as_str) == Some("span")
                    && SPAN_CONTEXT_FIELDS.iter().any(|k| o.contains_key(*k))
            })
        })
    });
    if context {
        RUNTIME_SPAN_CONTEXT
    } else {
        RUNTIME
    }
}

/// Validates `intent` and `operations` of a tx/2 record under `runtime`.
pub fn parse(
    intent: Option<&Value>,
    operations: Option<&Value>,
    runtime: &str,
) -> Result<(String, Vec<Operation>), Rejection> {
    let intent = common::parse_intent(intent)?;
    let list = common::parse_list(OPERATIONS, operations)?;
    let context = runtime == RUNTIME_SPAN_CONTEXT;
    let mut out: Vec<Operation> = Vec::with_capacity(list.len());
    // Membership only: deterministic, and linear for stored records of any length (replay).
    let mut ids: HashSet<String> = HashSet::with_capacity(list.len());
    let mut ticks = interrupt::Every::new(256);
    for (i, raw) in list.iter().enumerate() {
        ticks.tick();
        let Value::Object(o) = raw else {
            return Err(block(
                OPERATIONS,
                i,
                "*",
                format!("an operation must be an object, not {}", type_name(raw)),
            ));
        };
        let op = match o.get("op") {
            Some(Value::String(s)) if s == "match" => {
                Operation::Match(common::parse_edit(OPERATIONS, i, o, MATCH_FIELDS)?)
            }
            Some(Value::String(s)) if s == "span" => Operation::Span(parse_span(i, o, context)?),
            None => {
                return Err(block(
                    OPERATIONS,
                    i,
                    "op",
                    "is required: \"match\" or \"span\"".into(),
                ));
            }
            Some(_) => {
                return Err(block(
                    OPERATIONS,
                    i,
                    "op",
                    "must be \"match\" or \"span\"".into(),
                ));
            }
        };
        let id = match &op {
            Operation::Match(e) => &e.change_id,
            Operation::Span(s) => &s.change_id,
        };
        if !ids.insert(id.clone()) {
            return Err(block(
                OPERATIONS,
                i,
                "change_id",
                format!("duplicate change_id {id:?}"),
            ));
        }
        out.push(op);
    }
    Ok((intent, out))
}

/// A span offset: a non-bool integer in 0..2^63-1.
fn offset(i: usize, o: &Map<String, Value>, k: &str) -> Result<usize, Rejection> {
    let v = match o.get(k) {
        None => return Err(block(OPERATIONS, i, k, "is required".into())),
        Some(v) => v,
    };
    match as_int(v) {
        Some(n) if n >= 0 => Ok(n as usize),
        got => {
            let what = match got {
                Some(n) => format!("{n}"),
                None if is_big_int(v) => "an integer past 2^63-1".to_owned(),
                None => type_name(v).to_owned(),
            };
            Err(block(
                OPERATIONS,
                i,
                k,
                format!("must be a non-boolean integer in 0..2^63-1, not {what}"),
            ))
        }
    }
}

fn parse_span(i: usize, o: &Map<String, Value>, context: bool) -> Result<SpanOp, Rejection> {
    // In name order, not wire order: key order never changes an answer.
    let mut keys: Vec<&String> = o.keys().collect();
    keys.sort_unstable();
    for k in keys {
        let k = k.as_str();
        if SPAN_FIELDS.contains(&k) || (context && SPAN_CONTEXT_FIELDS.contains(&k)) {
            continue;
        }
        let why = if SELECTORS.contains(&k) {
            "selectors are not allowed on span operations".to_owned()
        } else if SPAN_CONTEXT_FIELDS.contains(&k) {
            format!("span context is not part of runtime {RUNTIME}")
        } else {
            "unknown field".to_owned()
        };
        return Err(block(OPERATIONS, i, k, why));
    }
    let start = offset(i, o, "start")?;
    let end = offset(i, o, "end")?;
    if end < start {
        return Err(block(
            OPERATIONS,
            i,
            "end",
            format!("must be >= start ({end} < {start})"),
        ));
    }
    let expected_text = required_text(OPERATIONS, i, o, "expected_text")?;
    let replace = required_text(OPERATIONS, i, o, "replace")?;
    let (change_id, risk) = parse_advisory(OPERATIONS, i, o)?;
    let rationale = opt_text(OPERATIONS, i, o, "rationale", true)?;
    let context_text = |k: &str| match o.get(k) {
        Some(Value::String(s)) if s.is_empty() => Err(block(
            OPERATIONS,
            i,
            k,
            "must be a non-empty string or null".into(),
        )),
        _ => opt_text(OPERATIONS, i, o, k, false),
    };
    Ok(SpanOp {
        change_id,
        start,
        end,
        expected_text,
        replace,
        rationale,
        risk,
        expected_before: context_text("expected_before")?,
        expected_after: context_text("expected_after")?,
    })
}

/// Applies validated operations sequentially, all or nothing.
pub fn apply(start: &TargetView, ops: &[Operation]) -> Result<Applied, Rejection> {
    let ops: Vec<Op> = ops.iter().map(Operation::as_op).collect();
    sequential::apply(start, &ops)
}

/// Replays a stored tx/2 record under its recorded runtime (0.3.0 or 0.5.0): parse and apply,
/// without warnings mattering. 0.3.0 still rejects span context keys.
pub fn apply_record(
    start: &TargetView,
    record: &Map<String, Value>,
    runtime: &str,
) -> Result<Applied, Rejection> {
    let (_, ops) = parse(record.get("intent"), record.get("operations"), runtime)?;
    apply(start, &ops)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::sha256_hex;
    use serde_json::json;

    /// Issue 16 item 2 (no behaviour change): the typed list codes spell what
    /// `{missing,empty,invalid}_{name}` spelled before.
    #[test]
    fn operations_list_codes_keep_their_spelling() {
        let l = OPERATIONS;
        assert_eq!(l.missing.as_str(), format!("missing_{}", l.name));
        assert_eq!(l.empty.as_str(), format!("empty_{}", l.name));
        assert_eq!(l.not_array.as_str(), format!("invalid_{}", l.name));
        assert_eq!(l.code.as_str(), format!("invalid_{}", l.item));
    }

    fn view(content: &str) -> TargetView<'_> {
        TargetView {
            target_file_id: "t",
            version: 3,
            current_hash: "h",
            content,
        }
    }

    fn run(content: &str, ops: Value) -> Result<Applied, Rejection> {
        let rt = runtime_for(Some(&ops));
        let (_, ops) = parse(Some(&json!("x")), Some(&ops), rt)?;
        apply(&view(content), &ops)
    }

    fn reason(r: Result<Applied, Rejection>) -> (&'static str, Value) {
        let r = r.unwrap_err();
        (r.reason.as_str(), Value::Object(r.fields))
    }

    /// Contract "Runtime profiles are immutable": context keys, even null, select 0.5.0 and only
    /// on span operations; 0.3.0 rejects them.
    #[test]
    fn span_context_selects_runtime_0_5_0() {
        let plain =
            json!([{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "x"}]);
        assert_eq!(runtime_for(Some(&plain)), RUNTIME);
        for ctx in [
            json!({"expected_before": null}),
            json!({"expected_after": "a"}),
        ] {
            let mut op = plain[0].clone();
            op.as_object_mut()
                .unwrap()
                .extend(ctx.as_object().unwrap().clone());
            let ops = json!([{"op": "match", "match": "a", "replace": "b"}, op]);
            assert_eq!(runtime_for(Some(&ops)), RUNTIME_SPAN_CONTEXT);
            let r = parse(Some(&json!("x")), Some(&ops), RUNTIME).unwrap_err();
            assert_eq!(r.reason.as_str(), "block_malformed");
            assert!(
                r.detail.contains("runtime patchdiff-mvp-0.3.0"),
                "{}",
                r.detail
            );
            assert!(parse(Some(&json!("x")), Some(&ops), RUNTIME_SPAN_CONTEXT).is_ok());
        }
        // On a match operation the keys are unknown fields and select nothing.
        let m = json!([{"op": "match", "match": "a", "replace": "b", "expected_before": "x"}]);
        assert_eq!(runtime_for(Some(&m)), RUNTIME);
        assert_eq!(reason(run("a", m)).0, "block_malformed");
    }

    /// Contract: key order on the wire never changes an answer. With two unknown fields, the
    /// rejection names the smaller, whichever came first (found by the arguments fuzzer).
    #[test]
    fn unknown_fields_are_named_whatever_their_order() {
        let detail = |ops: &str| {
            let ops: Value = serde_json::from_str(ops).unwrap();
            parse(Some(&json!("x")), Some(&ops), RUNTIME)
                .unwrap_err()
                .detail
        };
        for (a, b) in [
            (
                r#"[{"op":"match","start":"x","end":0,"expected_text":"","replace":"aa"}]"#,
                r#"[{"replace":"aa","expected_text":"","end":0,"start":"x","op":"match"}]"#,
            ),
            (
                r#"[{"op":"span","start":0,"end":0,"expected_text":"","replace":"","zeta":1,"match":"a"}]"#,
                r#"[{"match":"a","zeta":1,"replace":"","expected_text":"","end":0,"start":0,"op":"span"}]"#,
            ),
        ] {
            assert_eq!(detail(a), detail(b));
        }
        assert_eq!(
            detail(r#"[{"start":"x","op":"match","replace":"aa","end":0}]"#),
            "operations[0].end: unknown field."
        );
    }

    /// docs/sql-api.md, "Work is bounded": an unknown field's name is quoted at most 128 code
    /// points long, in the detail and the diagnostic's `field`, flagged `field_truncated`; a name
    /// at the limit is quoted whole (helper-77: a 1 MB name was stored twice in the rejection and
    /// shown on every log page).
    #[test]
    fn an_unknown_fields_name_is_quoted_at_most_128_code_points_long() {
        use crate::contract::args::UNKNOWN_NAME_MAX_CHARS;
        let rejection = |name: &str| {
            let mut op = json!({"op": "match", "match": "a", "replace": "b"});
            op[name] = json!(1);
            parse(Some(&json!("x")), Some(&json!([op])), RUNTIME).unwrap_err()
        };
        let whole = "é".repeat(UNKNOWN_NAME_MAX_CHARS);
        let r = rejection(&whole);
        assert_eq!(r.detail, format!("operations[0].{whole}: unknown field."));
        assert_eq!(r.fields["field"], json!(whole));
        assert_eq!(r.fields.get("field_truncated"), None);
        let long = "z".repeat(1_000_000);
        let r = rejection(&long);
        let cut = format!("{}...", &long[..UNKNOWN_NAME_MAX_CHARS]);
        assert_eq!(r.detail, format!("operations[0].{cut}: unknown field."));
        assert_eq!(r.fields["field"], json!(cut));
        assert_eq!(r.fields["field_truncated"], json!(true));
    }

    /// Contract "Span": non-bool integers in 0..2^63-1, end >= start, required expected_text,
    /// selectors and unknown fields reject, context strings non-empty or null.
    #[test]
    fn span_shapes_reject() {
        let base =
            json!({"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": "b"});
        let with = |k: &str, v: Value| {
            let mut o = base.clone();
            o[k] = v;
            json!([o])
        };
        let without = |k: &str| {
            let mut o = base.clone();
            o.as_object_mut().unwrap().remove(k);
            json!([o])
        };
        for bad in [
            with("start", json!(true)),
            with("start", json!(-1)),
            with("start", json!(1.0)),
            with("start", json!("0")),
            with("end", json!(u64::MAX)),
            with("end", json!(null)),
            with("start", json!(2)),
            with("occurrence_index", json!(1)),
            with("anchor_before", json!("x")),
            with("match", json!("a")),
            with("extra", json!(1)),
            with("expected_text", json!(null)),
            with("replace", json!(1)),
            with("op", json!("replace")),
            with("expected_before", json!("")),
            with("expected_after", json!(5)),
            without("expected_text"),
            without("replace"),
            without("op"),
            without("end"),
        ] {
            let (r, f) = reason(run("a", bad.clone()));
            assert_eq!(r, "block_malformed", "{bad}");
            assert_eq!(f["code"], "invalid_operation");
            assert_eq!(f["operation_index"], 0);
        }
        // The largest offset parses and is out of bounds at application.
        let big = with("end", json!(i64::MAX));
        assert_eq!(reason(run("a", big)).0, "span_out_of_bounds");
        // Duplicate change IDs across match and span operations.
        let dup = json!([{"op": "match", "match": "a", "replace": "b", "change_id": "x"},
                         {"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "c", "change_id": "x"}]);
        assert_eq!(reason(run("a", dup)).0, "block_malformed");
        assert_eq!(reason(run("a", json!([]))).1["code"], "empty_operations");
    }

    /// Spans at 0 and at the buffer end, insertions, and descending spans from one read.
    #[test]
    fn spans_apply_sequentially() {
        let text = "alpha beta gamma";
        let a = run(
            text,
            json!([
                {"op": "span", "start": 16, "end": 16, "expected_text": "", "replace": "!"},
                {"op": "span", "start": 11, "end": 16, "expected_text": "gamma", "replace": "G"},
                {"op": "span", "start": 6, "end": 10, "expected_text": "beta", "replace": "B"},
                {"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": ">"},
            ]),
        )
        .unwrap();
        assert_eq!(a.content, ">alpha B G!");
        let f = &a.changes[1];
        assert_eq!(
            (
                f.span_start,
                f.span_end,
                f.matched_chars,
                f.replacement_chars
            ),
            (11, 16, 5, 1)
        );
        assert_eq!(f.matched_sha256, sha256_hex("gamma"));
        assert_eq!(f.to_json()["operation"], "span");
        assert!(a.warnings.is_empty());
        // The whole buffer, CRLF payloads canonicalized, emoji counted as one code point.
        let a = run(
            "a🌍\nb",
            json!([{"op": "span", "start": 0, "end": 4, "expected_text": "a🌍\r\nb", "replace": "x\r\ny"}]),
        )
        .unwrap();
        assert_eq!(a.content, "x\ny");
        // Mixed: a match then a span in the buffer the match produced.
        let a = run(
            "one two",
            json!([{"op": "match", "match": "one", "replace": "1"},
                   {"op": "span", "start": 2, "end": 5, "expected_text": "two", "replace": "2"}]),
        )
        .unwrap();
        assert_eq!(a.content, "1 2");
        assert_eq!(a.changes[0].to_json().get("operation"), None);
    }

    /// Contract: span_out_of_bounds and span_expected_text_mismatch diagnostics, including
    /// adjacent context and actual_text of at most 64 code points, the end nearest the span for
    /// expected_before.
    #[test]
    fn span_failures_carry_diagnostics() {
        let (r, f) = reason(run(
            "abc",
            json!([{"op": "span", "start": 3, "end": 4, "expected_text": "x", "replace": ""}]),
        ));
        assert_eq!(r, "span_out_of_bounds");
        assert_eq!(
            (&f["span_check"], &f["buffer_length"]),
            (&json!("bounds"), &json!(3))
        );
        assert_eq!(f.get("actual_text"), None);
        // At the end exactly: an insertion at the buffer end is in bounds.
        assert!(
            run(
                "abc",
                json!([{"op": "span", "start": 3, "end": 3, "expected_text": "", "replace": "d"}])
            )
            .is_ok()
        );

        let long = format!("{}X{}", "b".repeat(100), "a".repeat(100));
        let (r, f) = reason(run(
            &long,
            json!([{"op": "span", "start": 0, "end": 100, "expected_text": "c".repeat(100), "replace": ""}]),
        ));
        assert_eq!(r, "span_expected_text_mismatch");
        assert_eq!(f["span_check"], "expected_text");
        assert_eq!(f["actual_text"], "b".repeat(64));
        assert_eq!(
            (
                &f["actual_text_truncated"],
                &f["expected_chars"],
                &f["actual_chars"]
            ),
            (&json!(true), &json!(100), &json!(100))
        );

        // expected_before: the 64 code points nearest the span (the tail).
        let text = format!("{}{}", "0123456789".repeat(10), "Z");
        let (_, f) = reason(run(
            &text,
            json!([{"op": "span", "start": 100, "end": 100, "expected_text": "", "replace": "!", "expected_before": "q".repeat(80)}]),
        ));
        assert_eq!(f["span_check"], "expected_before");
        let tail: String = text.chars().skip(36).take(64).collect();
        assert_eq!(f["actual_text"], json!(tail));
        assert_eq!(
            (
                &f["actual_chars"],
                &f["expected_chars"],
                &f["actual_text_truncated"]
            ),
            (&json!(80), &json!(80), &json!(true))
        );
        // expected_before longer than what precedes the span: the shorter actual text.
        let (_, f) = reason(run(
            "ab",
            json!([{"op": "span", "start": 1, "end": 1, "expected_text": "", "replace": "!", "expected_before": "xa"}]),
        ));
        assert_eq!(
            (
                &f["actual_text"],
                &f["actual_chars"],
                &f["actual_text_truncated"]
            ),
            (&json!("a"), &json!(1), &json!(false))
        );
        // expected_after: adjacent, not anywhere after.
        let (_, f) = reason(run(
            "a b c",
            json!([{"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": "A", "expected_after": "b"}]),
        ));
        assert_eq!(
            (&f["span_check"], &f["actual_text"]),
            (&json!("expected_after"), &json!(" "))
        );
        assert!(run("a b c", json!([{"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": "A", "expected_after": " b", "expected_before": null}])).is_ok());
        // Later failures name the sequential buffer.
        let r = run("abc", json!([{"op": "span", "start": 0, "end": 1, "expected_text": "a", "replace": ""},
                                  {"op": "span", "start": 2, "end": 3, "expected_text": "c", "replace": ""}])).unwrap_err();
        assert_eq!(r.reason.as_str(), "span_out_of_bounds");
        assert!(
            r.detail.contains("after 1 simulated change."),
            "{}",
            r.detail
        );
        assert_eq!(r.failed_change_id.as_deref(), Some("chg_002"));
        assert_eq!(
            r.intermediate.as_ref().map(|(b, n)| (b.as_str(), *n)),
            Some(("bc", 1))
        );
    }
}
