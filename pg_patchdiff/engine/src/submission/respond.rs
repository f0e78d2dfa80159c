//! The answers of the five submission tools (`patchdiff_submit_edits`,
//! `patchdiff_submit_operations`, `patchdiff_submit_replacement`,
//! `patchdiff_submit_observed_operations` and the SQL `patchdiff_submit`) as types. Each struct's
//! field declaration order is the contract's key order; serde (with serde_json's
//! `preserve_order`) writes the keys in that order, so no code places a key by position.
//!
//! A key the contract omits is an `Option` skipped when `None`; a key the contract shows as null
//! is an `Option` (or a `Value`) written as null. The observed tools' keys are fields of the same
//! structs, left `None` by the unobserved tools. Responses become a `Value` at the boundary
//! ([`SubmissionResponse::to_value`]), where near misses, compact projection and byte budgets
//! take over unchanged.

use crate::contract::words::Status;
use serde::Serialize;
use serde_json::Value;

/// An accepted attempt, fresh or recovered under its request key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AcceptedResponse {
    pub status: Status,
    pub target_file_id: String,
    /// Observed single form: as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_id: Option<Value>,
    /// Observed batch form: as sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_bundle_id: Option<Value>,
    pub before_hash: String,
    pub after_hash: Option<String>,
    /// Observed tools: `version - 1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_version: Option<Option<i64>>,
    pub version: Option<i64>,
    /// Observed tools: `version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_version: Option<Option<i64>>,
    pub current_version: i64,
    pub current_hash: String,
    pub pdcp_log_id: String,
    pub manifest_entries_added: usize,
    /// Observed tools: the operations sent (all groups of a batch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_count: Option<usize>,
    /// Observed batch form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_count: Option<usize>,
    /// The four warning members of `warnings::response_fields` / `warnings::recovered_fields`;
    /// a recovered row repeats its stored values verbatim, whatever their JSON type.
    pub warnings: Value,
    pub warning_details: Value,
    pub warning_count: Value,
    pub warnings_truncated: Value,
    pub validity: Value,
    pub evidence: Evidence,
    /// Observed batch form: one summary per group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupSummary>>,
    pub deduplicated: bool,
    pub client_request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

/// An accepted answer's `evidence`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// The ledger facts, in change order.
    pub changes: Vec<Value>,
}

/// One group of an accepted observed batch; the observation's fields are null when the
/// observation row is not at hand (a recovery without linked rows).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSummary {
    pub group_index: usize,
    pub observation_id: Value,
    pub symbol_name: Option<String>,
    pub symbol_name_truncated: bool,
    pub kind: Option<String>,
    pub operation_count: usize,
    pub scope_start: Value,
    pub scope_end: Option<usize>,
    pub scope_end_after: Option<i64>,
}

/// A rejected attempt, fresh or recovered under its request key (also an audited
/// `request_key_conflict`, which is a fresh rejection).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RejectedResponse {
    pub status: Status,
    /// Observed tools (and strict-mode refusals of the unobserved ones): `diagnostic.code`, or
    /// null when the diagnostic has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Value>,
    pub target_file_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_id: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observation_bundle_id: Option<Value>,
    /// Kept as stored on recovery (the column has no CHECK).
    pub failure_reason: Option<String>,
    pub failure_detail: Option<String>,
    pub failed_change_id: Option<String>,
    pub before_hash: String,
    /// Always null: a rejection changes nothing.
    pub after_hash: Option<String>,
    /// Observed tools: the attempt row's `before_version` (the recorded one on recovery).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_version: Option<i64>,
    pub current_version: i64,
    pub current_hash: String,
    pub pdcp_log_id: String,
    /// Observed tools: the operations sent (all groups of a batch), null when the record holds
    /// no countable list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_count: Option<Option<usize>>,
    /// Observed batch form: the groups sent, null when `groups` is not a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_count: Option<Option<usize>>,
    pub diagnostic: Value,
    pub current_context: Value,
    /// Response-only; `submit::add_near_misses` places it after the answer is a `Value`. The
    /// field keeps its place when an answer is read back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub near_misses: Option<Value>,
    pub validity: Value,
    pub deduplicated: bool,
    pub client_request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
}

/// `patchdiff_submit_replacement`'s fresh admission refusal: no attempt, no row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplacementTooLarge<'a> {
    pub status: Status,
    pub code: &'static str,
    pub target_file_id: &'a str,
    pub failure_detail: String,
    /// Always null: nothing is written.
    pub pdcp_log_id: Option<&'a str>,
    pub diagnostic: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<&'a str>,
}

/// A submission's answer to an attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SubmissionResponse {
    Accepted(AcceptedResponse),
    Rejected(RejectedResponse),
}

impl SubmissionResponse {
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// The answer as the `Value` the rest of the pipeline works on.
pub fn to_value<T: Serialize>(r: &T) -> Value {
    // serde_json fails only on non-string map keys or a failing `Serialize` impl; these types
    // have neither.
    serde_json::to_value(r).expect("a response type serialises to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(v: &Value) -> Vec<&str> {
        v.as_object().unwrap().keys().map(String::as_str).collect()
    }

    fn accepted() -> AcceptedResponse {
        AcceptedResponse {
            status: Status::Accepted,
            target_file_id: "t".into(),
            observation_id: None,
            observation_bundle_id: Some(Value::Null),
            before_hash: "b".into(),
            after_hash: Some("a".into()),
            before_version: Some(None),
            version: None,
            after_version: Some(None),
            current_version: 2,
            current_hash: "c".into(),
            pdcp_log_id: "l".into(),
            manifest_entries_added: 1,
            operation_count: Some(1),
            group_count: Some(1),
            warnings: json!([]),
            warning_details: json!([]),
            warning_count: json!("3"),
            warnings_truncated: json!(false),
            validity: json!({"x": 1}),
            evidence: Evidence {
                changes: vec![json!({"z": 1, "a": 2})],
            },
            groups: Some(vec![GroupSummary {
                group_index: 1,
                observation_id: Value::Null,
                symbol_name: None,
                symbol_name_truncated: false,
                kind: None,
                operation_count: 1,
                scope_start: json!(4),
                scope_end: None,
                scope_end_after: None,
            }]),
            deduplicated: true,
            client_request_id: None,
            correlation_id: None,
        }
    }

    fn rejected() -> RejectedResponse {
        RejectedResponse {
            status: Status::Rejected,
            code: Some(Value::Null),
            target_file_id: "t".into(),
            observation_id: Some(json!(7)),
            observation_bundle_id: None,
            failure_reason: Some("not_a_known_reason".into()),
            failure_detail: None,
            failed_change_id: None,
            before_hash: "b".into(),
            after_hash: None,
            before_version: Some(0),
            current_version: 0,
            current_hash: "c".into(),
            pdcp_log_id: "l".into(),
            operation_count: Some(None),
            group_count: None,
            diagnostic: Value::Null,
            current_context: json!({"available": false}),
            near_misses: Some(Value::Null),
            validity: json!({}),
            deduplicated: false,
            client_request_id: Some("k".into()),
            correlation_id: Some("r".into()),
        }
    }

    /// Contract, response fields of the submission tools: the keys in the contract's order
    /// (observed keys in their places, omitted keys absent, null keys present).
    #[test]
    fn keys_follow_the_contract_order() {
        assert_eq!(
            keys(&to_value(&accepted())),
            [
                "status",
                "target_file_id",
                "observation_bundle_id",
                "before_hash",
                "after_hash",
                "before_version",
                "version",
                "after_version",
                "current_version",
                "current_hash",
                "pdcp_log_id",
                "manifest_entries_added",
                "operation_count",
                "group_count",
                "warnings",
                "warning_details",
                "warning_count",
                "warnings_truncated",
                "validity",
                "evidence",
                "groups",
                "deduplicated",
                "client_request_id",
            ]
        );
        assert_eq!(
            keys(&to_value(&rejected())),
            [
                "status",
                "code",
                "target_file_id",
                "observation_id",
                "failure_reason",
                "failure_detail",
                "failed_change_id",
                "before_hash",
                "after_hash",
                "before_version",
                "current_version",
                "current_hash",
                "pdcp_log_id",
                "operation_count",
                "diagnostic",
                "current_context",
                "near_misses",
                "validity",
                "deduplicated",
                "client_request_id",
                "correlation_id",
            ]
        );
        let too_large = to_value(&ReplacementTooLarge {
            status: Status::InvalidArgument,
            code: "replacement_too_large",
            target_file_id: "t",
            failure_detail: "d".into(),
            pdcp_log_id: None,
            diagnostic: json!({}),
            correlation_id: None,
        });
        assert_eq!(
            serde_json::to_string(&too_large).unwrap(),
            r#"{"status":"invalid_argument","code":"replacement_too_large","target_file_id":"t","failure_detail":"d","pdcp_log_id":null,"diagnostic":{}}"#
        );
    }
}
