//! Target-identity failures of the submission tools and preview (issue 17; contract "Bounded
//! rejection context" and "Retryable rejections").
//!
//! The contract's rejection context names `unavailable_reason: "invalid_target_id" |
//! "target_not_found"`, and its retryable rule counts target-identity failures among the
//! non-retryable rejections. So a submission or preview whose `target_file_id` is not a UUID
//! string, or names no target the caller may see, is answered as a rejection, in the shape of
//! every other one: `status: "rejected"`, `failure_reason: "context_invalid"`, a `diagnostic`
//! with `code`, `retryable: false` and an unavailable `failure_context`, and an unavailable
//! `current_context`.
//!
//! Nothing is stored, and `pdcp_log_id` is null. The attempt log is per target: every row
//! references its target and the target's editing cycle, and the append-only log of a target
//! that does not exist has nowhere to be. Writing one under some other target would let anyone
//! fill a log they cannot read; the contract audits invalid input "for a known target" only.
//! Whatever can be audited is: a target the caller may read but not write still answers
//! `permission_denied` / `write_not_granted` (docs/security.md), and a target the caller may not
//! see answers exactly as an unknown one.

use crate::contract::args::MalformedTarget;
use crate::contract::words::{FailureReason, Status};
use crate::evidence::rejection::{Stage, unavailable_context};
use crate::submission::submit::valid_request_key;
use crate::text::sha256_hex;
use serde_json::{Map, Value, json};

/// `diagnostic.code` and `unavailable_reason` of a `target_file_id` that is not a UUID string.
pub const INVALID_TARGET_ID: &str = "invalid_target_id";
/// `diagnostic.code` and `unavailable_reason` of a UUID that names no target the caller may see.
pub const TARGET_NOT_FOUND: &str = "target_not_found";

/// A `target_file_id` echo longer than this many UTF-8 bytes cannot be an authentic ID (a UUID
/// is 36): it is answered as null with `target_file_id_omitted: {bytes, sha256}`, never
/// shortened into a different identity (contract "patchdiff_preview"; observed-editor-v2
/// "Oversized invalid identity echoes become null with byte/hash omission metadata").
pub const TARGET_ID_ECHO_MAX_BYTES: usize = 256;

/// Which target-identity failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// `target_file_id` is not a hyphenated UUID string.
    InvalidTargetId,
    /// A well-formed UUID that names no target the caller may see.
    TargetNotFound,
}

impl Failure {
    pub const fn code(self) -> &'static str {
        match self {
            Failure::InvalidTargetId => INVALID_TARGET_ID,
            Failure::TargetNotFound => TARGET_NOT_FOUND,
        }
    }

    /// A malformed ID fails the request's shape; a well-formed one that names nothing fails
    /// the target precondition, like a request-key conflict.
    pub const fn stage(self) -> Stage {
        match self {
            Failure::InvalidTargetId => Stage::ProtocolValidation,
            Failure::TargetNotFound => Stage::PreconditionGuard,
        }
    }

    fn detail(self, sent: &Value) -> String {
        match (self, sent) {
            (Failure::InvalidTargetId, Value::String(_)) => {
                "target_file_id must be a hyphenated UUID string. Nothing was written: there is no target to log the attempt on.".into()
            }
            (Failure::InvalidTargetId, v) => format!(
                "target_file_id must be a UUID string, not {}. Nothing was written: there is no target to log the attempt on.",
                crate::contract::json::type_name(v)
            ),
            (Failure::TargetNotFound, v) => format!(
                "No target with target_file_id {}. Nothing was written: there is no target to log the attempt on.",
                v.as_str().unwrap_or_default()
            ),
        }
    }
}

/// The `target_file_id` member (and, for an oversized echo, `target_file_id_omitted`) of the
/// answer: a string as sent when it is short enough to be an identity, else null.
fn echo(m: &mut Map<String, Value>, sent: &Value) {
    match sent {
        Value::String(s) if s.len() > TARGET_ID_ECHO_MAX_BYTES => {
            m.insert("target_file_id".into(), Value::Null);
            m.insert(
                "target_file_id_omitted".into(),
                json!({"bytes": s.len(), "sha256": sha256_hex(s)}),
            );
        }
        Value::String(s) => {
            m.insert("target_file_id".into(), json!(s));
        }
        _ => {
            m.insert("target_file_id".into(), Value::Null);
        }
    }
}

fn diagnostic(f: Failure, format: &str) -> Value {
    json!({
        "format": format,
        "code": f.code(),
        "retryable": FailureReason::ContextInvalid.retryable(),
        "requires_new_submission": true,
        "validation_stage": f.stage().diagnostic(),
        "failure_context": unavailable_context(f.code()),
    })
}

/// What a target-identity answer takes from the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    pub failure: Failure,
    /// `target_file_id` as sent (the canonical UUID for [`Failure::TargetNotFound`]).
    pub target_file_id: &'a Value,
    /// The tool's protocol (`diagnostic.format`).
    pub format: &'a str,
    /// `client_request_id` as sent; echoed when its syntax is valid, as every rejection does.
    pub client_request_id: &'a Value,
    pub correlation_id: Option<&'a str>,
}

/// The answer of a submission tool: a rejection with nothing written.
pub fn rejection(c: &Call) -> Value {
    let f = c.failure;
    let mut m = Map::new();
    m.insert("status".into(), json!(Status::Rejected.as_str()));
    // As the observed tools and strict-mode refusals do: the diagnostic's code at the top, so a
    // host reading the former not_found / invalid_argument `code` finds it where it was.
    m.insert("code".into(), json!(f.code()));
    echo(&mut m, c.target_file_id);
    m.insert(
        "failure_reason".into(),
        json!(FailureReason::ContextInvalid.as_str()),
    );
    m.insert("failure_detail".into(), json!(f.detail(c.target_file_id)));
    for k in [
        "failed_change_id",
        "before_hash",
        "after_hash",
        "current_version",
        "current_hash",
        "pdcp_log_id",
    ] {
        m.insert(k.into(), Value::Null);
    }
    m.insert("diagnostic".into(), diagnostic(f, c.format));
    m.insert("current_context".into(), unavailable_context(f.code()));
    m.insert("validity".into(), f.stage().validity());
    m.insert("deduplicated".into(), json!(false));
    m.insert(
        "client_request_id".into(),
        json!(valid_request_key(c.client_request_id)),
    );
    if let Some(id) = c.correlation_id {
        m.insert("correlation_id".into(), json!(id));
    }
    Value::Object(m)
}

/// The answer of `patchdiff_preview`, in a rejected preview's shape (before
/// [`crate::submission::preview::bound`]): no observation, so every version and hash is null.
pub fn preview_rejection(c: &Call, runtime_version: &str) -> Value {
    let f = c.failure;
    let mut m = Map::new();
    m.insert("preview".into(), json!(true));
    m.insert("advisory".into(), json!(true));
    m.insert("status".into(), json!(Status::Rejected.as_str()));
    m.insert("code".into(), json!(f.code()));
    m.insert("stage".into(), json!(f.stage().diagnostic()));
    m.insert("validity".into(), f.stage().validity());
    echo(&mut m, c.target_file_id);
    m.insert("format".into(), json!(c.format));
    m.insert("runtime_version".into(), json!(runtime_version));
    for k in [
        "current_version",
        "current_hash",
        "before_version",
        "before_hash",
        "after_hash",
    ] {
        m.insert(k.into(), Value::Null);
    }
    m.insert(
        "failure_reason".into(),
        json!(FailureReason::ContextInvalid.as_str()),
    );
    m.insert("failure_detail".into(), json!(f.detail(c.target_file_id)));
    m.insert("failed_change_id".into(), Value::Null);
    m.insert("diagnostic".into(), diagnostic(f, c.format));
    m.insert("current_context".into(), unavailable_context(f.code()));
    m.insert("evidence_omissions".into(), json!([]));
    Value::Object(m)
}

/// The [`Call`] of a malformed target ID, from what the parser kept of the arguments.
pub fn malformed<'a>(m: &'a MalformedTarget, correlation_id: Option<&'a str>) -> Call<'a> {
    Call {
        failure: Failure::InvalidTargetId,
        target_file_id: &m.sent,
        format: m.format,
        client_request_id: &m.client_request_id,
        correlation_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract "Retryable rejections" ("false for ... target-identity failures") and "Bounded
    /// rejection context" (`unavailable_reason: "invalid_target_id" | "target_not_found"`, null
    /// for every other field): the shape of both answers.
    #[test]
    fn identity_rejections_follow_the_contract_shape() {
        let id = json!("44444444-4444-4444-8444-444444444444");
        let r = rejection(&Call {
            failure: Failure::TargetNotFound,
            target_file_id: &id,
            format: "patchdiff-tx/1",
            client_request_id: &json!("req-1"),
            correlation_id: None,
        });
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["failure_reason"], "context_invalid");
        assert_eq!(r["pdcp_log_id"], Value::Null);
        assert_eq!(r["diagnostic"]["retryable"], false);
        assert_eq!(r["diagnostic"]["code"], "target_not_found");
        assert_eq!(r["diagnostic"]["validation_stage"], "precondition_guard");
        assert_eq!(
            r["diagnostic"]["failure_context"],
            unavailable_context("target_not_found")
        );
        assert_eq!(
            r["current_context"],
            unavailable_context("target_not_found")
        );
        assert_eq!(r["client_request_id"], "req-1");
        assert_eq!(r["validity"]["protocol_valid"], true);
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "code",
                "target_file_id",
                "failure_reason",
                "failure_detail",
                "failed_change_id",
                "before_hash",
                "after_hash",
                "current_version",
                "current_hash",
                "pdcp_log_id",
                "diagnostic",
                "current_context",
                "validity",
                "deduplicated",
                "client_request_id"
            ]
        );

        let long = json!("x".repeat(TARGET_ID_ECHO_MAX_BYTES + 1));
        let r = rejection(&Call {
            failure: Failure::InvalidTargetId,
            target_file_id: &long,
            format: "patchdiff-tx/2",
            client_request_id: &json!("has space"),
            correlation_id: Some("c"),
        });
        assert_eq!(r["target_file_id"], Value::Null);
        assert_eq!(
            r["target_file_id_omitted"]["bytes"],
            TARGET_ID_ECHO_MAX_BYTES + 1
        );
        assert_eq!(r["diagnostic"]["validation_stage"], "protocol_validation");
        assert_eq!(
            r["current_context"]["unavailable_reason"],
            "invalid_target_id"
        );
        assert_eq!(r["validity"]["protocol_valid"], false);
        assert_eq!(r["client_request_id"], Value::Null);
        assert_eq!(r["correlation_id"], "c");
        let r = rejection(&Call {
            failure: Failure::InvalidTargetId,
            target_file_id: &json!(42),
            format: "patchdiff-tx/3",
            client_request_id: &Value::Null,
            correlation_id: None,
        });
        assert_eq!(r["target_file_id"], Value::Null);
        assert!(
            r["failure_detail"]
                .as_str()
                .unwrap()
                .contains("not integer"),
            "{r}"
        );
    }

    /// The same clauses for `patchdiff_preview` ("Verdict, stage, validity ... are always
    /// retained"): a malformed target ID is marked by the parser after the format is checked,
    /// and answered as a rejected preview of that format; a format error still wins.
    #[test]
    fn preview_identity_rejection() {
        use crate::submission::preview::{bound, parse_preview};
        let args = json!({"target_file_id": "nope", "format": "patchdiff-tx/2", "intent": "i",
                          "expected_target_version": 0,
                          "operations": [{"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "x", "expected_before": null}]});
        let e = parse_preview(&args.to_string()).unwrap_err();
        let m = e.malformed_target.as_deref().expect("marked");
        assert_eq!(
            (m.format, m.runtime_version),
            ("patchdiff-tx/2", "patchdiff-mvp-0.5.0")
        );
        let r = bound(preview_rejection(&malformed(m, None), m.runtime_version));
        assert_eq!(
            (&r["preview"], &r["status"], &r["stage"], &r["code"]),
            (
                &json!(true),
                &json!("rejected"),
                &json!("protocol_validation"),
                &json!("invalid_target_id")
            )
        );
        assert_eq!(r["target_file_id"], "nope");
        assert_eq!(r["runtime_version"], "patchdiff-mvp-0.5.0");
        assert_eq!(r["diagnostic"]["retryable"], false);
        assert_eq!(
            r["current_context"]["unavailable_reason"],
            "invalid_target_id"
        );
        assert_eq!(r["evidence_omissions"], json!([]));
        let mut bad_format = args.clone();
        bad_format["format"] = json!("patchdiff-tx/9");
        let e = parse_preview(&bad_format.to_string()).unwrap_err();
        assert_eq!(
            (e.code, e.malformed_target.is_none()),
            ("invalid_format", true)
        );
    }
}
