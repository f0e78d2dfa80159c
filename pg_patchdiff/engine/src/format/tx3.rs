//! patchdiff-tx/3: one guarded sole whole-target replacement (`replace_all`) under runtime
//! patchdiff-mvp-0.4.0.
//!
//! Fresh admission is bounded (a model must produce the whole document in one field); replay and
//! conflict audit rows never apply the bound.

use crate::contract::limits::{REPLACEMENT_MAX_CODE_POINTS, REPLACEMENT_MAX_UTF8_BYTES};
use crate::contract::uuid::is_sha256_hex;
use crate::contract::words::{DiagnosticCode, FailureReason};
use crate::evidence::rejection::Rejection;
use crate::format::common::{self, ChangeFact, malformed};
use crate::format::protocol::{Protocol, Runtime};
use crate::format::sequential::{Applied, no_op_transaction};
use crate::target::TargetView;
use crate::text::warnings::{self, Warning};
use crate::text::{canonicalize, char_len, sha256_hex, text_defect};
use serde_json::{Map, Value, json};
use std::borrow::Cow;

pub const PROTOCOL: &str = Protocol::Tx3.as_str();
pub const RUNTIME: &str = Runtime::Mvp0_4_0.as_str();
/// The change ID of the single change (the record has no change list).
pub const CHANGE_ID: &str = "chg_001";

/// Validates `intent` and `replacement`; returns the canonical replacement.
pub fn parse(
    intent: Option<&Value>,
    replacement: Option<&Value>,
) -> Result<(String, String), Rejection> {
    let intent = common::parse_intent(intent)?;
    let text = match replacement {
        Some(Value::String(s)) => s,
        None | Some(Value::Null) => {
            return Err(malformed(
                FailureReason::ManifestMissing,
                DiagnosticCode::MissingReplacement,
                "replacement is required (an empty string replaces the target with nothing)."
                    .into(),
            ));
        }
        Some(v) => {
            return Err(malformed(
                FailureReason::ManifestMalformed,
                DiagnosticCode::InvalidReplacement,
                format!(
                    "replacement must be a string, not {}.",
                    crate::contract::json::type_name(v)
                ),
            ));
        }
    };
    if let Some(why) = text_defect(text) {
        return Err(malformed(
            FailureReason::ManifestMalformed,
            DiagnosticCode::InvalidReplacement,
            format!("replacement {why}."),
        ));
    }
    Ok((intent, canonicalize(text).into_owned()))
}

/// The fresh admission check, in the contract's order: raw code points, raw bytes, canonical
/// code points, canonical bytes, each inclusive. `Err` is the `replacement_too_large`
/// diagnostic.
pub fn admission(raw: &str) -> Result<(), Value> {
    let raw_cp = char_len(raw);
    // Text without CR is its own canonical form: counted once.
    let (c_cp, c_bytes) = match canonicalize(raw) {
        Cow::Borrowed(_) => (raw_cp, raw.len()),
        Cow::Owned(c) => (char_len(&c), c.len()),
    };
    let checks = [
        ("raw_code_points", raw_cp, REPLACEMENT_MAX_CODE_POINTS),
        ("raw_utf8_bytes", raw.len(), REPLACEMENT_MAX_UTF8_BYTES),
        ("canonical_code_points", c_cp, REPLACEMENT_MAX_CODE_POINTS),
        ("canonical_utf8_bytes", c_bytes, REPLACEMENT_MAX_UTF8_BYTES),
    ];
    match checks.iter().find(|(_, actual, limit)| actual > limit) {
        None => Ok(()),
        Some(&(which, actual, limit)) => Err(json!({
            "code": "replacement_too_large",
            "limit_exceeded": which,
            "actual": actual,
            "limit": limit,
            "canonical_code_points": c_cp,
            "canonical_utf8_bytes": c_bytes,
            "canonical_would_fit": c_cp <= REPLACEMENT_MAX_CODE_POINTS
                && c_bytes <= REPLACEMENT_MAX_UTF8_BYTES,
        })),
    }
}

/// The `failure_detail` of a `replacement_too_large` answer.
pub fn too_large_detail(d: &Value) -> String {
    let mut s = format!(
        "replacement exceeds the fresh admission limit: {} is {}, limit {}.",
        d["limit_exceeded"].as_str().unwrap_or(""),
        d["actual"],
        d["limit"]
    );
    if d["canonical_would_fit"] == json!(true) {
        s.push_str(" Its LF-canonical form fits: send it with LF line endings.");
    } else {
        s.push_str(
            " Sole replacement is for whole-document rewrites; send a set of edits as edits or operations.",
        );
    }
    s
}

/// Replaces the whole target: one `replace_all` fact covering the whole original span. The
/// replacement becomes the new content as it is (no copy), and its hash is the new content's.
pub fn apply(start: &TargetView, replacement: String) -> Applied {
    let original = start.content;
    let original_chars = char_len(original);
    let replacement_sha256 = sha256_hex(&replacement);
    let fact = ChangeFact {
        change_id: CHANGE_ID.to_owned(),
        change_index: 1,
        span_start: 0,
        span_end: original_chars,
        matched_chars: original_chars,
        replacement_chars: char_len(&replacement),
        // The matched text is the whole target, whose hash the target row already holds (every
        // guard compares against it; replay recomputes it from the content and checks it).
        matched_sha256: if is_sha256_hex(start.current_hash) {
            start.current_hash.to_owned()
        } else {
            sha256_hex(original)
        },
        replacement_sha256: replacement_sha256.clone(),
        rationale: None,
        risk: None,
        operation: Some("replace_all"),
        observed: None,
    };
    let mut ws = Vec::new();
    if replacement == original {
        ws.push(
            Warning::new(
                warnings::NO_OP_CHANGE,
                format!("{CHANGE_ID} replaces its matched text with identical text"),
            )
            .field("change_id", json!(CHANGE_ID))
            .field("change_index", json!(1)),
        );
        ws.push(no_op_transaction());
    }
    Applied {
        content: replacement,
        changes: vec![fact],
        warnings: ws,
        content_sha256: Some(replacement_sha256),
    }
}

/// Replays a stored tx/3 record: no admission limits.
pub fn apply_record(start: &TargetView, record: &Map<String, Value>) -> Result<Applied, Rejection> {
    let (_, replacement) = parse(record.get("intent"), record.get("replacement"))?;
    Ok(apply(start, replacement))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract "Fresh admission limits": inclusive, in the order raw code points, raw bytes,
    /// canonical code points, canonical bytes, with canonical_would_fit.
    #[test]
    fn admission_limits_at_and_one_past() {
        let at = "a".repeat(REPLACEMENT_MAX_CODE_POINTS);
        assert_eq!(admission(&at), Ok(()));
        let d = admission(&format!("{at}a")).unwrap_err();
        assert_eq!(
            d,
            json!({"code": "replacement_too_large", "limit_exceeded": "raw_code_points",
                   "actual": 1_000_001, "limit": 1_000_000, "canonical_code_points": 1_000_001,
                   "canonical_utf8_bytes": 1_000_001, "canonical_would_fit": false})
        );
        // CRLF: 500,001 pairs are 1,000,002 raw code points but 500,001 canonical ones.
        let d = admission(&"\r\n".repeat(500_001)).unwrap_err();
        assert_eq!(
            (&d["limit_exceeded"], &d["canonical_would_fit"]),
            (&json!("raw_code_points"), &json!(true))
        );
        // Raw bytes: 524,288 two-byte characters are exactly 1,048,576 bytes; one more is past.
        let two = "é".repeat(524_288);
        assert_eq!(admission(&two), Ok(()));
        let d = admission(&format!("{two}a")).unwrap_err();
        assert_eq!(
            (&d["limit_exceeded"], &d["actual"], &d["limit"]),
            (
                &json!("raw_utf8_bytes"),
                &json!(1_048_577),
                &json!(1_048_576)
            )
        );
        // Raw bytes fail only because of CR: canonical form fits.
        let d = admission(&format!("{}\r\n\r\n", "é".repeat(524_287))).unwrap_err();
        assert_eq!(
            (&d["limit_exceeded"], &d["canonical_would_fit"]),
            (&json!("raw_utf8_bytes"), &json!(true))
        );
        assert_eq!(admission(""), Ok(()));
        assert!(too_large_detail(&d).contains("LF line endings"));
    }

    /// One replace_all fact over the whole original span; an identical replacement warns.
    #[test]
    fn replace_all_covers_the_whole_original() {
        let v = TargetView {
            target_file_id: "t",
            version: 0,
            current_hash: "h",
            content: "a🌍\n",
        };
        let a = apply(&v, String::new());
        assert_eq!(a.content, "");
        let f = a.changes[0].to_json();
        assert_eq!(
            (
                &f["span_start"],
                &f["span_end"],
                &f["matched_chars"],
                &f["replacement_chars"],
                &f["operation"]
            ),
            (
                &json!(0),
                &json!(3),
                &json!(3),
                &json!(0),
                &json!("replace_all")
            )
        );
        assert!(a.warnings.is_empty());
        let same = apply(&v, "a🌍\n".to_owned());
        assert_eq!(same.content_sha256(), sha256_hex("a🌍\n"));
        let codes: Vec<&str> = same.warnings.iter().map(|w| w.code).collect();
        assert_eq!(codes, ["no_op_change", "no_op_transaction"]);
        let mut rec = Map::new();
        rec.insert("intent".into(), json!("x"));
        rec.insert("replacement".into(), json!("b\r\n"));
        assert_eq!(apply_record(&v, &rec).unwrap().content, "b\n");
    }
}
