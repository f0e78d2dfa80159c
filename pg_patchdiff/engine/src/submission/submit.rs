//! The submission pipeline shared by every submission tool: the argument envelope, the stored
//! record and its identity, guards, lineage, keyed recovery and the response shapes.
//!
//! The extension calls, in order and under the target's row lock: a parser
//! ([`parse_submit_edits`], [`parse_submit_operations`], [`parse_submit_replacement`]),
//! [`prepare`], [`recover_or_conflict`] when the request key is already stored, else
//! [`admission`] (sole replacement only) and [`evaluate`]; it writes the returned [`Attempt`]
//! and answers with [`respond`]. Preview ([`crate::submission::preview`]) runs the same [`judge`].

use crate::contract::args::{ArgError, Args};
use crate::contract::invalid_text::{self, Defect};
use crate::contract::json::{CANONICAL, as_int, object_to_string, to_string, type_name};
use crate::contract::limits::{
    CLIENT_REQUEST_ID_MAX, INTENT_MAX_BYTES, METADATA_VALUE_MAX_BYTES, RATIONALE_MAX_BYTES,
    RECORD_MAX_BYTES, SOURCE_MAX_CHARS, TX1_MAX_EDITS, TX2_MAX_OPERATIONS,
};
use crate::contract::uuid::{canonical_uuid, is_sha256_hex};
use crate::contract::words::{DiagnosticCode, FailureReason, Status};
use crate::evidence::drift;
use crate::evidence::near_miss::{self, ScanSource};
use crate::evidence::rejection::{NearMissInput, Rejection, Stage, current_context, validity};
use crate::format::common::{self, ChangeFact};
use crate::format::protocol::Protocol;
use crate::format::tx1;
use crate::format::{sequential, tx2, tx3};
use crate::scope::observation::{LinkedObservation, ObservationLink};
use crate::submission::respond::{
    self, AcceptedResponse, Evidence, RejectedResponse, ReplacementTooLarge, SubmissionResponse,
};
use crate::target::TargetView;
use crate::text::warnings::{self, Warning};
use crate::text::{char_len, head_chars, sha256_hex};
use serde_json::{Map, Value, json};
use std::rc::Rc;

pub const SUBMIT_EDITS_ARGS: &[&str] = &[
    "target_file_id",
    "intent",
    "edits",
    "expected_target_version",
    "expected_current_hash",
    "source",
    "parent_pdcp_log_id",
    "attempt",
    "client_request_id",
    "include_correlation_id",
];
pub const SUBMIT_EDITS_REQUIRED: &[&str] = &["target_file_id", "intent", "edits"];
pub const SUBMIT_OPERATIONS_ARGS: &[&str] = &[
    "target_file_id",
    "intent",
    "operations",
    "expected_target_version",
    "expected_current_hash",
    "source",
    "parent_pdcp_log_id",
    "attempt",
    "client_request_id",
    "include_correlation_id",
];
pub const SUBMIT_OPERATIONS_REQUIRED: &[&str] = &["target_file_id", "intent", "operations"];
pub const SUBMIT_REPLACEMENT_ARGS: &[&str] = &[
    "target_file_id",
    "intent",
    "replacement",
    "expected_target_version",
    "expected_current_hash",
    "source",
    "parent_pdcp_log_id",
    "attempt",
    "client_request_id",
    "include_correlation_id",
];
pub const SUBMIT_REPLACEMENT_REQUIRED: &[&str] = &["target_file_id", "intent", "replacement"];
pub const DEFAULT_SOURCE: &str = "model_response";
/// A submitted-key preview in a diagnostic is bounded; it is evidence, not an identity.
pub const KEY_PREVIEW_CHARS: usize = 64;
/// Contract "Request-key diagnostics": at most 10 differing record paths.
pub const DIFFERING_FIELDS_MAX: usize = 10;

/// A parsed submission, before it meets its target.
#[derive(Debug, Clone)]
pub struct Submission {
    pub target_file_id: String,
    pub protocol_version: &'static str,
    pub runtime_version: &'static str,
    /// The proposal as sent (intent, edits), omitted fields staying omitted.
    pub record: Map<String, Value>,
    pub expected_target_version: Value,
    pub expected_current_hash: Value,
    pub client_request_id: Value,
    pub parent_pdcp_log_id: Value,
    pub attempt: Value,
    pub source: String,
    pub include_correlation_id: bool,
    /// Text PostgreSQL cannot store (NUL, lone surrogates) in the record or its metadata: the
    /// attempt is an audited `target_encoding_invalid` rejection.
    pub invalid_text: Vec<Defect>,
    /// `pdcp_content`: the record as compact ASCII-escaped JSON with sorted keys, or for invalid
    /// text the reversible `patchdiff-invalid-input/1` evidence envelope.
    /// Shared with the attempt made from it: a sole replacement's record is over a megabyte.
    pub pdcp_content: Rc<str>,
    pub pdcp_content_hash: String,
}

/// Parses `patchdiff_submit_edits` arguments. Only what cannot be audited against a target
/// is an `invalid_argument`: the object itself, names, the target ID, `source` and
/// `include_correlation_id`. Everything else is judged, and logged, by [`evaluate`].
pub fn parse_submit_edits(text: &str) -> Result<Submission, ArgError> {
    parse_submit_edits_within(text, invalid_text::INVALID_TEXT_PATHS_MAX_BYTES)
}

/// [`parse_submit_edits`] with `paths_left` bytes for its invalid-text locations' paths: a
/// changeset member's share of the one budget all its members have together.
pub(crate) fn parse_submit_edits_within(
    text: &str,
    paths_left: usize,
) -> Result<Submission, ArgError> {
    let mut a = Args::parse_proposal(text, SUBMIT_EDITS_ARGS, SUBMIT_EDITS_REQUIRED)?;
    let record = record_of(&mut a, tx1::PROTOCOL, "edits");
    envelope_within(&a, record, tx1::PROTOCOL, tx1::RUNTIME, paths_left)
}

/// Parses `patchdiff_submit_operations` arguments (patchdiff-tx/2). The runtime is fixed by the
/// record: 0.5.0 when a span carries context keys, otherwise 0.3.0.
pub fn parse_submit_operations(text: &str) -> Result<Submission, ArgError> {
    parse_submit_operations_within(text, invalid_text::INVALID_TEXT_PATHS_MAX_BYTES)
}

/// [`parse_submit_operations`] with `paths_left` bytes for its locations' paths, as
/// [`parse_submit_edits_within`].
pub(crate) fn parse_submit_operations_within(
    text: &str,
    paths_left: usize,
) -> Result<Submission, ArgError> {
    let mut a = Args::parse_proposal(text, SUBMIT_OPERATIONS_ARGS, SUBMIT_OPERATIONS_REQUIRED)?;
    let record = record_of(&mut a, tx2::PROTOCOL, "operations");
    let runtime = tx2::runtime_for(record.get("operations"));
    envelope_within(&a, record, tx2::PROTOCOL, runtime, paths_left)
}

/// Parses `patchdiff_submit_replacement` arguments (patchdiff-tx/3, runtime 0.4.0).
pub fn parse_submit_replacement(text: &str) -> Result<Submission, ArgError> {
    let mut a = Args::parse_proposal(text, SUBMIT_REPLACEMENT_ARGS, SUBMIT_REPLACEMENT_REQUIRED)?;
    let record = record_of(&mut a, tx3::PROTOCOL, "replacement");
    envelope(&a, record, tx3::PROTOCOL, tx3::RUNTIME)
}

/// The stored record: `protocol_version`, `intent` and the format's proposal field, as sent
/// (moved out of the arguments, which nothing reads them from afterwards).
pub(crate) fn record_of(a: &mut Args, protocol: &str, proposal: &str) -> Map<String, Value> {
    let mut record = Map::new();
    record.insert("protocol_version".into(), json!(protocol));
    for k in ["intent", proposal] {
        if let Some(v) = a.take(k) {
            record.insert(k.into(), v);
        }
    }
    record
}

pub(crate) fn envelope(
    a: &Args,
    record: Map<String, Value>,
    protocol: &'static str,
    runtime: &'static str,
) -> Result<Submission, ArgError> {
    let paths_left = invalid_text::INVALID_TEXT_PATHS_MAX_BYTES;
    envelope_within(a, record, protocol, runtime, paths_left)
}

/// [`envelope`], the paths of the invalid-text locations refused past `paths_left` bytes.
fn envelope_within(
    a: &Args,
    record: Map<String, Value>,
    protocol: &'static str,
    runtime: &'static str,
    paths_left: usize,
) -> Result<Submission, ArgError> {
    let target_file_id = a.proposal_target_file_id(protocol, runtime)?;
    let include_correlation_id = a.bool_or(
        "include_correlation_id",
        false,
        "invalid_include_correlation_id",
    )?;
    check_caps(a, &record)?;
    // Invalid text first: it is audited against the target, whatever else is wrong.
    let mut invalid_text = Vec::new();
    let too_widespread = |_| {
        ArgError::new(
            "invalid_text_too_widespread",
            format!(
                "the locations of the text PostgreSQL cannot store (NUL, lone surrogates) would take over {} bytes of paths; send valid Unicode text",
                invalid_text::INVALID_TEXT_PATHS_MAX_BYTES
            ),
        )
        .with("limit", json!(invalid_text::INVALID_TEXT_PATHS_MAX_BYTES))
    };
    invalid_text::find_in_object(&record, "record", a.sentinel, &mut invalid_text, paths_left)
        .map_err(too_widespread)?;
    let metadata_keys = [
        "expected_current_hash",
        "client_request_id",
        "parent_pdcp_log_id",
        "source",
    ];
    for k in metadata_keys {
        if let Some(v) = a.get(k) {
            invalid_text::find(v, k, a.sentinel, &mut invalid_text, paths_left)
                .map_err(too_widespread)?;
        }
    }
    // Identity must not depend on key order or escape spelling: list defects by path.
    invalid_text.sort_by(|x, y| (&x.path, x.kind).cmp(&(&y.path, y.kind)));
    invalid_text.dedup();
    // Contract: `source (string, default "model_response")`. Any string is stored as sent; its
    // size was bounded by `check_caps`.
    let source = match a.opt_str("source", true, "invalid_source")? {
        // An unstorable source is evidence in the envelope; the row keeps the default.
        _ if invalid_text.iter().any(|d| d.path == "source") => DEFAULT_SOURCE.to_owned(),
        None => DEFAULT_SOURCE.to_owned(),
        Some(s) => s.to_owned(),
    };
    let take = |k: &str| a.get(k).cloned().unwrap_or(Value::Null);
    let pdcp_content = if invalid_text.is_empty() {
        object_to_string(&record, CANONICAL)
    } else {
        let mut metadata = Map::new();
        for k in [
            "expected_target_version",
            "expected_current_hash",
            "client_request_id",
            "parent_pdcp_log_id",
            "attempt",
            "source",
        ] {
            if let Some(v) = a.get(k) {
                metadata.insert(k.into(), v.clone());
            }
        }
        invalid_text::evidence_envelope(protocol, &record, metadata, &invalid_text, a.sentinel)
    };
    // The stored record's cap; a sole replacement over its own contract limit is left to the
    // contract's `replacement_too_large` (see `admission`), which writes nothing either.
    let oversized_replacement = protocol == tx3::PROTOCOL
        && invalid_text.is_empty()
        && record
            .get("replacement")
            .and_then(Value::as_str)
            .is_some_and(|r| tx3::admission(r).is_err());
    if pdcp_content.len() > RECORD_MAX_BYTES && !oversized_replacement {
        return Err(too_large(
            "record_too_large",
            format!(
                "the stored record (pdcp_content, compact ASCII-escaped JSON) would be {} bytes, over the limit of {RECORD_MAX_BYTES} bytes; nothing was written",
                pdcp_content.len()
            ),
            pdcp_content.len(),
            RECORD_MAX_BYTES,
        ));
    }
    Ok(Submission {
        target_file_id,
        protocol_version: protocol,
        runtime_version: runtime,
        pdcp_content_hash: sha256_hex(&pdcp_content),
        pdcp_content: pdcp_content.into(),
        invalid_text,
        record,
        expected_target_version: take("expected_target_version"),
        expected_current_hash: take("expected_current_hash"),
        client_request_id: take("client_request_id"),
        parent_pdcp_log_id: take("parent_pdcp_log_id"),
        attempt: take("attempt"),
        source,
        include_correlation_id,
    })
}

/// An `invalid_argument` for a documented resource cap (`limits.rs`), with `limit` and `actual`.
fn too_large(code: &'static str, detail: String, actual: usize, limit: usize) -> ArgError {
    ArgError::new(code, detail)
        .with("limit", json!(limit))
        .with("actual", json!(actual))
}

/// The resource caps the contract leaves to the implementation (`limits.rs`), checked before
/// any other work on the proposal: the number of edits or operations, the intent's size and
/// the size of each stored metadata value.
fn check_caps(a: &Args, record: &Map<String, Value>) -> Result<(), ArgError> {
    for (list, cap, code, what) in [
        ("edits", TX1_MAX_EDITS, "too_many_edits", "edits"),
        (
            "operations",
            TX2_MAX_OPERATIONS,
            "too_many_operations",
            "operations",
        ),
    ] {
        if let Some(Value::Array(items)) = record.get(list)
            && items.len() > cap
        {
            return Err(too_large(
                code,
                format!(
                    "{} {what} in one transaction, over the limit of {cap}; split the change into several transactions",
                    items.len()
                ),
                items.len(),
                cap,
            ));
        }
    }
    if let Some(Value::String(intent)) = record.get("intent")
        && intent.len() > INTENT_MAX_BYTES
    {
        return Err(too_large(
            "intent_too_large",
            format!(
                "intent is {} UTF-8 bytes, over the limit of {INTENT_MAX_BYTES}; it is a summary, send a shorter one",
                intent.len()
            ),
            intent.len(),
            INTENT_MAX_BYTES,
        ));
    }
    if let Some((path, n)) = oversized_rationale(record) {
        return Err(too_large(
            "rationale_too_large",
            format!(
                "{path}.rationale is {n} UTF-8 bytes, over the limit of {RATIONALE_MAX_BYTES}; it explains one change, send a shorter one"
            ),
            n,
            RATIONALE_MAX_BYTES,
        )
        .with("path", json!(path)));
    }
    if let Some(Value::String(source)) = a.get("source") {
        let n = char_len(source);
        if n > SOURCE_MAX_CHARS {
            return Err(too_large(
                "source_too_large",
                format!(
                    "source is {n} code points, over the limit of {SOURCE_MAX_CHARS}; it names who proposed the edit (\"model_response\", \"Claude Code\"), send a shorter one"
                ),
                n,
                SOURCE_MAX_CHARS,
            ));
        }
    }
    for k in [
        "expected_target_version",
        "expected_current_hash",
        "parent_pdcp_log_id",
        "attempt",
        "client_request_id",
    ] {
        let Some(v) = a.get(k) else { continue };
        let n = crate::contract::json::to_string(v, CANONICAL).len();
        if n > METADATA_VALUE_MAX_BYTES {
            return Err(too_large(
                "metadata_too_large",
                format!("{k} is {n} bytes of JSON, over the limit of {METADATA_VALUE_MAX_BYTES}"),
                n,
                METADATA_VALUE_MAX_BYTES,
            )
            .with("argument", json!(k)));
        }
    }
    Ok(())
}

/// The first change whose `rationale` is a string over [`RATIONALE_MAX_BYTES`], with its path
/// (`edits[i]`, `operations[i]`, `groups[g].operations[i]`) and size. Any other rationale is left
/// to the format's own checks.
fn oversized_rationale(record: &Map<String, Value>) -> Option<(String, usize)> {
    let over = |items: Option<&Value>, path: &dyn Fn(usize) -> String| {
        let Some(Value::Array(items)) = items else {
            return None;
        };
        items
            .iter()
            .enumerate()
            .find_map(|(i, c)| match c.get("rationale") {
                Some(Value::String(r)) if r.len() > RATIONALE_MAX_BYTES => Some((path(i), r.len())),
                _ => None,
            })
    };
    over(record.get("edits"), &|i| format!("edits[{i}]"))
        .or_else(|| over(record.get("operations"), &|i| format!("operations[{i}]")))
        .or_else(|| {
            let Some(Value::Array(groups)) = record.get("groups") else {
                return None;
            };
            groups.iter().enumerate().find_map(|(g, group)| {
                over(group.get("operations"), &|i| {
                    format!("groups[{g}].operations[{i}]")
                })
            })
        })
}

/// Contract "Common input and request-key rules": 1..128 printable ASCII, no whitespace.
pub fn valid_request_key(v: &Value) -> Option<&str> {
    match v {
        Value::String(s)
            if (1..=CLIENT_REQUEST_ID_MAX).contains(&s.len())
                && s.bytes().all(|c| c.is_ascii_graphic()) =>
        {
            Some(s)
        }
        _ => None,
    }
}

impl Submission {
    /// The request key when one was supplied with valid syntax.
    pub fn request_key(&self) -> Option<&str> {
        valid_request_key(&self.client_request_id)
    }

    /// The parent to look up, when one was supplied as a UUID string.
    pub fn parent_uuid(&self) -> Option<String> {
        self.parent_pdcp_log_id.as_str().and_then(canonical_uuid)
    }
}

/// What the database knows of a supplied `parent_pdcp_log_id`.
#[derive(Debug, Clone, PartialEq)]
pub enum Parent {
    /// None was supplied, or it is not a UUID string (judged in [`evaluate`]).
    NotLookedUp,
    NotFound,
    Found {
        target_file_id: String,
        /// `None`: a stored word this engine does not know. The table's CHECK allows only
        /// `accepted` and `rejected`; an unknown word is neither, as the string comparison was.
        status: Option<Status>,
    },
}

/// The request identity: a fingerprint over the envelope, which names the record by its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    pub fingerprint: String,
    /// The fingerprinted envelope, stored so that a conflict can name what differs.
    pub envelope: Value,
    /// The parent to store: only an eligible same-target rejected parent.
    pub parent: Option<String>,
}

/// Computes the request identity. An eligible parent canonicalizes; any other keeps its spelling.
pub fn prepare(sub: &Submission, parent: &Parent) -> Identity {
    let eligible = match parent {
        Parent::Found {
            target_file_id,
            status,
        } if *target_file_id == sub.target_file_id && *status == Some(Status::Rejected) => {
            sub.parent_uuid()
        }
        _ => None,
    };
    let parent_identity = eligible
        .clone()
        .map_or_else(|| sub.parent_pdcp_log_id.clone(), Value::String);
    let envelope = json!({
        "protocol_version": sub.protocol_version,
        "target_file_id": sub.target_file_id,
        "pdcp_content_hash": sub.pdcp_content_hash,
        "expected_target_version": sub.expected_target_version,
        "expected_current_hash": sub.expected_current_hash,
        "parent_pdcp_log_id": parent_identity,
    });
    Identity {
        fingerprint: sha256_hex(&to_string(&envelope, CANONICAL)),
        envelope,
        parent: eligible,
    }
}

/// One attempt row, with the ledger rows and new content of an acceptance.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub status: Status,
    pub protocol_version: &'static str,
    pub runtime_version: &'static str,
    pub pdcp_content: Rc<str>,
    pub pdcp_content_hash: String,
    pub request_fingerprint: String,
    pub request_envelope: Value,
    pub client_request_id: Option<String>,
    pub conflicts_with_pdcp_log_id: Option<String>,
    pub before_version: i64,
    pub before_hash: String,
    pub after_version: Option<i64>,
    pub after_hash: Option<String>,
    pub failure_reason: Option<FailureReason>,
    pub failure_detail: Option<String>,
    pub failure_stage: Option<Stage>,
    pub failed_change_id: Option<String>,
    pub diagnostic: Option<Value>,
    pub validity: Value,
    pub parent_pdcp_log_id: Option<String>,
    pub attempt: Option<i64>,
    pub source: String,
    /// The transaction intent when the record has a valid one (ledger rows repeat it).
    pub intent: Option<String>,
    pub new_content: Option<String>,
    pub changes: Vec<ChangeFact>,
    /// Advisory warnings of an acceptance; `diagnostic` stores them when there is one.
    pub warnings: Vec<Warning>,
    /// A `match_absent` rejection's near-miss search input; never stored.
    pub near_miss_input: Option<NearMissInput>,
    /// The observations an accepted observed submission consumes, to write with it in group
    /// order ([`crate::submission::scoped`]); empty for every other attempt.
    pub observations: Vec<ObservationLink>,
    /// The changeset this attempt is a member of (`patchdiff_submit_changeset`), if any.
    pub changeset_id: Option<String>,
}

fn protocol(code: DiagnosticCode, reason: FailureReason, detail: String) -> Rejection {
    Rejection::coded(reason, Stage::ProtocolValidation, code, detail)
}

fn key_preview(v: &Value) -> Value {
    match v {
        Value::String(s) => json!(head_chars(s, KEY_PREVIEW_CHARS)),
        other => json!(format!("<{}>", type_name(other))),
    }
}

/// A rejected attempt row for `sub` with no failure filled in yet.
pub(crate) fn base_attempt(sub: &Submission, id: &Identity, start: &TargetView) -> Attempt {
    Attempt {
        status: Status::Rejected,
        protocol_version: sub.protocol_version,
        runtime_version: sub.runtime_version,
        pdcp_content: sub.pdcp_content.clone(),
        pdcp_content_hash: sub.pdcp_content_hash.clone(),
        request_fingerprint: id.fingerprint.clone(),
        request_envelope: id.envelope.clone(),
        client_request_id: sub.request_key().map(str::to_owned),
        conflicts_with_pdcp_log_id: None,
        before_version: start.version,
        before_hash: start.current_hash.to_owned(),
        after_version: None,
        after_hash: None,
        failure_reason: None,
        failure_detail: None,
        failure_stage: None,
        failed_change_id: None,
        diagnostic: None,
        validity: validity(true, true),
        parent_pdcp_log_id: id.parent.clone(),
        attempt: as_int(&sub.attempt).filter(|n| *n >= 1),
        source: sub.source.clone(),
        intent: sub
            .record
            .get("intent")
            .and_then(Value::as_str)
            .filter(|_| sub.invalid_text.is_empty())
            .map(str::to_owned),
        new_content: None,
        changes: Vec::new(),
        warnings: Vec::new(),
        near_miss_input: None,
        observations: Vec::new(),
        changeset_id: None,
    }
}

/// Judges a fresh submission against the locked target state.
pub fn evaluate(sub: &Submission, id: &Identity, parent: &Parent, start: &TargetView) -> Attempt {
    let base = base_attempt(sub, id, start);
    let verdict = judge(sub, parent, start, base.attempt);
    match verdict {
        Ok(applied) => {
            let after_hash = applied.content_sha256();
            Attempt {
                status: Status::Accepted,
                after_version: Some(start.version + 1),
                after_hash: Some(after_hash),
                new_content: Some(applied.content),
                changes: applied.changes,
                diagnostic: warnings::stored_diagnostic(&applied.warnings),
                warnings: applied.warnings,
                ..base
            }
        }
        Err(r) => rejected(base, &r, sub.protocol_version, start),
    }
}

pub(crate) fn rejected(base: Attempt, r: &Rejection, format: &str, start: &TargetView) -> Attempt {
    Attempt {
        failure_reason: Some(r.reason),
        failure_detail: Some(r.detail.clone()),
        failure_stage: Some(r.stage),
        failed_change_id: r.failed_change_id.clone(),
        diagnostic: Some(r.diagnostic(format, start)),
        validity: r.stage.validity(),
        near_miss_input: r.near_miss_input.clone(),
        ..base
    }
}

/// Fresh admission (contract "patchdiff_submit_replacement"): after keyed recovery or conflict
/// and before anything is written, a valid oversized sole replacement is answered with
/// `invalid_argument` / `replacement_too_large` and no row. Other formats have no admission cap.
pub fn admission(sub: &Submission, correlation_id: Option<&str>) -> Option<Value> {
    if Protocol::parse(sub.protocol_version) != Some(Protocol::Tx3) {
        return None;
    }
    // Invalid text is classified first, through the audited path of `evaluate`: NUL and
    // marked lone surrogates alike (`Submission::invalid_text`).
    if !sub.invalid_text.is_empty() {
        return None;
    }
    let raw = sub.record.get("replacement")?.as_str()?;
    let d = tx3::admission(raw).err()?;
    Some(respond::to_value(&ReplacementTooLarge {
        status: Status::InvalidArgument,
        code: "replacement_too_large",
        target_file_id: &sub.target_file_id,
        failure_detail: tx3::too_large_detail(&d),
        pdcp_log_id: None,
        diagnostic: d,
        correlation_id,
    }))
}

/// The verdict on a proposal against one observation of its target: protocol checks, guards,
/// then application. Shared by submission and preview; writes nothing.
pub fn judge(
    sub: &Submission,
    parent: &Parent,
    start: &TargetView,
    attempt_no: Option<i64>,
) -> Result<sequential::Applied, Rejection> {
    let guards = preflight(sub, parent, attempt_no, Required::default())?;
    let proposal = Proposal::parse(sub)?;
    check_guards(&guards, start)?;
    proposal.apply(start)
}

/// The guards a submission supplied, validated.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Guards<'a> {
    pub version: Option<i64>,
    pub hash: Option<&'a str>,
}

/// What a format requires beyond the common rules (observed submissions: both guards, and for a
/// batch the request key).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Required {
    pub both_guards: bool,
    pub request_key: bool,
}

/// PROTOCOL_VALIDATION before the record: invalid text, request key, guards, attempt, lineage.
pub(crate) fn preflight<'s>(
    sub: &'s Submission,
    parent: &Parent,
    attempt_no: Option<i64>,
    required: Required,
) -> Result<Guards<'s>, Rejection> {
    // PROTOCOL_VALIDATION: invalid text, request key, guards, lineage; the caller then parses
    // the record.
    if !sub.invalid_text.is_empty() {
        return Err(invalid_text_rejection(&sub.invalid_text));
    }
    if !sub.client_request_id.is_null() && sub.request_key().is_none() {
        return Err(protocol(
            DiagnosticCode::InvalidClientRequestId,
            FailureReason::ContextInvalid,
            "client_request_id must be 1 to 128 printable ASCII characters without whitespace."
                .into(),
        )
        .field(
            "submitted_client_request_id_preview",
            key_preview(&sub.client_request_id),
        ));
    }
    if required.request_key && sub.client_request_id.is_null() {
        return Err(protocol(
            DiagnosticCode::ClientRequestIdRequired,
            FailureReason::ContextMissing,
            "client_request_id is required for a batch of observed operations.".into(),
        ));
    }
    let version = &sub.expected_target_version;
    let hash = &sub.expected_current_hash;
    if required.both_guards && (version.is_null() || hash.is_null()) {
        let missing: Vec<&str> = [
            ("expected_target_version", version),
            ("expected_current_hash", hash),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k)
        .collect();
        return Err(protocol(
            DiagnosticCode::ObservedGuardsRequired,
            FailureReason::ContextMissing,
            format!(
                "Both guards are required for observed operations: expected_target_version and expected_current_hash; missing: {}.",
                missing.join(", ")
            ),
        )
        .field("missing_guards", json!(missing)));
    }
    if version.is_null() && hash.is_null() {
        return Err(Rejection::new(
            FailureReason::ContextMissing,
            Stage::ProtocolValidation,
            "At least one guard is required: expected_target_version or expected_current_hash.",
        ));
    }
    let expected_version = match version {
        Value::Null => None,
        v => match as_int(v) {
            Some(n) if n >= 0 => Some(n),
            _ => {
                return Err(protocol(
                    DiagnosticCode::InvalidExpectedTargetVersion,
                    FailureReason::ContextInvalid,
                    "expected_target_version must be a non-negative, non-boolean integer or null."
                        .into(),
                ));
            }
        },
    };
    let expected_hash = match hash {
        Value::Null => None,
        Value::String(s) if is_sha256_hex(s) => Some(s.as_str()),
        _ => {
            return Err(protocol(
                DiagnosticCode::InvalidExpectedCurrentHash,
                FailureReason::ContextInvalid,
                "expected_current_hash must be 64 lowercase hexadecimal characters or null.".into(),
            ));
        }
    };
    if !sub.attempt.is_null() && attempt_no.is_none() {
        return Err(protocol(
            DiagnosticCode::InvalidAttempt,
            FailureReason::ContextInvalid,
            "attempt must be a positive, non-boolean integer or null.".into(),
        ));
    }
    check_parent(sub, parent)?;
    Ok(Guards {
        version: expected_version,
        hash: expected_hash,
    })
}

/// PRECONDITION_GUARD: every supplied guard must hold.
pub(crate) fn check_guards(guards: &Guards, start: &TargetView) -> Result<(), Rejection> {
    if let Some(v) = guards.version.filter(|v| *v != start.version) {
        return Err(Rejection::new(
            FailureReason::TargetVersionMismatch,
            Stage::PreconditionGuard,
            format!(
                "expected_target_version {v} does not match current version {}.",
                start.version
            ),
        )
        .field("expected_target_version", json!(v))
        .field("current_version", json!(start.version)));
    }
    if let Some(h) = guards.hash.filter(|h| *h != start.current_hash) {
        return Err(Rejection::new(
            FailureReason::TargetHashMismatch,
            Stage::PreconditionGuard,
            "expected_current_hash does not match the current target hash.",
        )
        .field("expected_current_hash", json!(h))
        .field("current_hash", json!(start.current_hash)));
    }
    Ok(())
}

/// Contract "Common input and request-key rules": text PostgreSQL cannot store is an audited
/// rejection; the diagnostic names where, never the text itself.
fn invalid_text_rejection(defects: &[Defect]) -> Rejection {
    let first = &defects[0];
    let what = if first.kind == "nul" {
        "U+0000 (NUL)"
    } else {
        "an escaped lone surrogate"
    };
    Rejection::new(
        FailureReason::TargetEncodingInvalid,
        Stage::ProtocolValidation,
        format!(
            "The proposal contains text PostgreSQL cannot store: {what} at {}{}. Send valid Unicode text as a new proposal with a new request key; the stored pdcp_content is evidence ({}), not a proposal to resend.",
            invalid_text::shown_path(&first.path),
            match defects.len() {
                1 => String::new(),
                n => format!(" and {} more location(s)", n - 1),
            },
            invalid_text::INVALID_INPUT_FORMAT,
        ),
    )
    .field("evidence_format", json!(invalid_text::INVALID_INPUT_FORMAT))
    .field("invalid_text", invalid_text::locations(defects))
    .field("invalid_text_count", json!(defects.len()))
    .field(
        "invalid_text_truncated",
        json!(defects.len() > invalid_text::INVALID_TEXT_LOCATIONS_MAX),
    )
}

/// A validated record of any submission format.
enum Proposal {
    Edits(Vec<common::Edit>),
    Operations(Vec<tx2::Operation>),
    Replacement(String),
}

impl Proposal {
    fn parse(sub: &Submission) -> Result<Proposal, Rejection> {
        let r = &sub.record;
        Ok(match Protocol::parse(sub.protocol_version) {
            Some(Protocol::Tx2) => Proposal::Operations(
                tx2::parse(r.get("intent"), r.get("operations"), sub.runtime_version)?.1,
            ),
            Some(Protocol::Tx3) => {
                Proposal::Replacement(tx3::parse(r.get("intent"), r.get("replacement"))?.1)
            }
            _ => Proposal::Edits(tx1::parse(r.get("intent"), r.get("edits"))?.1),
        })
    }

    fn apply(self, start: &TargetView) -> Result<sequential::Applied, Rejection> {
        match self {
            Proposal::Edits(e) => tx1::apply(start, &e),
            Proposal::Operations(o) => tx2::apply(start, &o),
            Proposal::Replacement(r) => Ok(tx3::apply(start, r)),
        }
    }
}

fn check_parent(sub: &Submission, parent: &Parent) -> Result<(), Rejection> {
    let raw = &sub.parent_pdcp_log_id;
    if raw.is_null() {
        return Ok(());
    }
    let reject = |code: DiagnosticCode, detail: &str| {
        Err(protocol(code, FailureReason::ContextInvalid, detail.into()))
    };
    match (sub.parent_uuid(), parent) {
        (None, _) => reject(
            DiagnosticCode::InvalidParentPdcpLogId,
            "parent_pdcp_log_id must be a UUID string or null.",
        ),
        (Some(_), Parent::NotFound | Parent::NotLookedUp) => reject(
            DiagnosticCode::ParentNotFound,
            "parent_pdcp_log_id names no attempt.",
        ),
        (Some(_), Parent::Found { target_file_id, .. })
            if *target_file_id != sub.target_file_id =>
        {
            reject(
                DiagnosticCode::ParentTargetMismatch,
                "parent_pdcp_log_id names an attempt on another target.",
            )
        }
        (Some(_), Parent::Found { status, .. }) if *status != Some(Status::Rejected) => reject(
            DiagnosticCode::ParentNotRejected,
            "parent_pdcp_log_id must name a rejected attempt; continue from an accepted one instead.",
        ),
        _ => Ok(()),
    }
}

/// The answer to a freshly written attempt. `current` is the target after this attempt.
pub fn respond(
    a: &Attempt,
    sub: &Submission,
    pdcp_log_id: &str,
    current: &TargetView,
    correlation_id: Option<&str>,
) -> Value {
    response(a, sub, pdcp_log_id, current, correlation_id).to_value()
}

/// [`respond`] as its type, which the observed tools extend.
pub fn response(
    a: &Attempt,
    sub: &Submission,
    pdcp_log_id: &str,
    current: &TargetView,
    correlation_id: Option<&str>,
) -> SubmissionResponse {
    let echo_key = if a.conflicts_with_pdcp_log_id.is_some() {
        sub.request_key().map(str::to_owned)
    } else {
        a.client_request_id.clone()
    };
    let answer = Answer {
        target: &sub.target_file_id,
        current,
        pdcp_log_id,
        deduplicated: false,
        client_request_id: echo_key,
        correlation_id,
    };
    if a.status == Status::Accepted {
        let facts = a.changes.iter().map(ChangeFact::to_json).collect();
        let ws = warnings::response_fields(&a.warnings);
        SubmissionResponse::Accepted(answer.accepted(
            &a.before_hash,
            a.after_version,
            a.after_hash.as_deref(),
            facts,
            ws,
            a.validity.clone(),
        ))
    } else {
        SubmissionResponse::Rejected(answer.rejected(&RejectedFacts {
            reason: a.failure_reason.map(FailureReason::as_str),
            detail: a.failure_detail.as_deref(),
            failed_change_id: a.failed_change_id.as_deref(),
            before_hash: &a.before_hash,
            diagnostic: a.diagnostic.as_ref(),
            validity: &a.validity,
        }))
    }
}

/// What an answer takes from the call rather than from the attempt.
struct Answer<'a> {
    target: &'a str,
    /// The target now: after a fresh attempt, or as locked for a recovery.
    current: &'a TargetView<'a>,
    pdcp_log_id: &'a str,
    deduplicated: bool,
    client_request_id: Option<String>,
    correlation_id: Option<&'a str>,
}

impl Answer<'_> {
    fn accepted(
        self,
        before: &str,
        version: Option<i64>,
        after: Option<&str>,
        facts: Vec<Value>,
        ws: [(&str, Value); 4],
        validity: Value,
    ) -> AcceptedResponse {
        let [
            (_, warnings),
            (_, warning_details),
            (_, warning_count),
            (_, warnings_truncated),
        ] = ws;
        AcceptedResponse {
            status: Status::Accepted,
            target_file_id: self.target.to_owned(),
            observation_id: None,
            observation_bundle_id: None,
            before_hash: before.to_owned(),
            after_hash: after.map(str::to_owned),
            before_version: None,
            version,
            after_version: None,
            current_version: self.current.version,
            current_hash: self.current.current_hash.to_owned(),
            pdcp_log_id: self.pdcp_log_id.to_owned(),
            manifest_entries_added: facts.len(),
            operation_count: None,
            group_count: None,
            warnings,
            warning_details,
            warning_count,
            warnings_truncated,
            validity,
            evidence: Evidence { changes: facts },
            groups: None,
            deduplicated: self.deduplicated,
            client_request_id: self.client_request_id,
            correlation_id: self.correlation_id.map(str::to_owned),
        }
    }

    fn rejected(self, a: &RejectedFacts) -> RejectedResponse {
        RejectedResponse {
            status: Status::Rejected,
            code: None,
            target_file_id: self.target.to_owned(),
            observation_id: None,
            observation_bundle_id: None,
            failure_reason: a.reason.map(str::to_owned),
            failure_detail: a.detail.map(str::to_owned),
            failed_change_id: a.failed_change_id.map(str::to_owned),
            before_hash: a.before_hash.to_owned(),
            after_hash: None,
            before_version: None,
            current_version: self.current.version,
            current_hash: self.current.current_hash.to_owned(),
            pdcp_log_id: self.pdcp_log_id.to_owned(),
            operation_count: None,
            group_count: None,
            diagnostic: a.diagnostic.cloned().unwrap_or(Value::Null),
            current_context: current_context(self.current),
            near_misses: None,
            validity: a.validity.clone(),
            deduplicated: self.deduplicated,
            client_request_id: self.client_request_id,
            correlation_id: self.correlation_id.map(str::to_owned),
        }
    }
}

/// The stored facts a rejected response repeats.
struct RejectedFacts<'a> {
    reason: Option<&'a str>,
    detail: Option<&'a str>,
    failed_change_id: Option<&'a str>,
    before_hash: &'a str,
    diagnostic: Option<&'a Value>,
    validity: &'a Value,
}

/// One row of `patchdiff.pdcp_logs` as read back: by its request key (exact recovery or a
/// conflict), on a log page, or in a replay batch. [`Attempt`] is the verdict the row is written
/// from.
///
/// Each read fetches only what its answer needs (a page never reads a record it does not
/// return, nor a ledger), and leaves every other field at its default:
/// - under a request key: `pdcp_log_id`, `status`, `request_fingerprint`, `request_envelope`,
///   `pdcp_content`, `before_version`, `before_hash`, `after_version`, `after_hash`, `failure_reason`,
///   `failure_detail`, `failed_change_id`, `diagnostic`, `validity` and `changes`;
/// - on a log page: every column but `pdcp_content`, `request_envelope` and `validity`, with
///   `pdcp_content_bytes` and `intent_head` instead of the record and its intent, and
///   `diagnostic_text` instead of `diagnostic`;
/// - in a replay batch: what [`crate::history::replay::Accepted`] holds, with `observations`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptRow {
    pub log_sequence: i64,
    pub pdcp_log_id: String,
    pub target_file_id: String,
    pub editing_cycle_id: String,
    /// Kept as stored, since log pages repeat it verbatim; [`AttemptRow::status`] reads it as a
    /// word (the table's CHECK allows only `accepted` and `rejected`).
    pub status: String,
    pub protocol_version: String,
    pub runtime_version: String,
    pub pdcp_content: String,
    /// The record's size in bytes (log pages, which read the record itself only when it fits).
    pub pdcp_content_bytes: i64,
    pub pdcp_content_hash: String,
    pub request_fingerprint: String,
    pub request_envelope: Value,
    pub client_request_id: Option<String>,
    pub conflicts_with_pdcp_log_id: Option<String>,
    pub before_version: i64,
    pub before_hash: String,
    pub after_version: Option<i64>,
    pub after_hash: Option<String>,
    /// Kept as stored: the column has no CHECK, and recovery repeats the word verbatim.
    pub failure_reason: Option<String>,
    pub failure_detail: Option<String>,
    pub failure_stage: Option<String>,
    pub failed_change_id: Option<String>,
    /// The stored diagnostic (JSON), null for accepted rows without warnings.
    pub diagnostic: Option<Value>,
    /// On a log page, the stored diagnostic instead as literal-form JSON text
    /// ([`crate::contract::json::stored_literal`]), which the page embeds as it is.
    pub diagnostic_text: Option<String>,
    pub validity: Value,
    pub parent_pdcp_log_id: Option<String>,
    pub attempt: Option<i64>,
    pub source: String,
    /// At most `LOG_INTENT_MAX_CHARS + 1` leading code points of the record's transaction
    /// intent, so that truncation is visible without reading the rest.
    pub intent_head: Option<String>,
    /// Microseconds since the Unix epoch, UTC.
    pub created_at_us: i64,
    /// The ledger's `derived` facts of an accepted attempt, in change order.
    pub changes: Vec<Value>,
    /// The observations this attempt consumed (observed submissions only).
    pub observations: Vec<LinkedObservation>,
    /// The changeset the attempt was a member of (read under a request key only).
    pub changeset_id: Option<String>,
}

impl AttemptRow {
    /// The stored status as a word; `None` for a word this engine does not know, which recovery
    /// answers as a rejection.
    pub fn status(&self) -> Option<Status> {
        Status::parse(&self.status)
    }

    /// An attempt the engine just made, as the extension reads it back under its request key:
    /// for recovering it without a database (tests, fuzzing).
    pub fn of(a: &Attempt, log_id: &str) -> Self {
        AttemptRow {
            pdcp_log_id: log_id.to_owned(),
            status: a.status.as_str().to_owned(),
            request_fingerprint: a.request_fingerprint.clone(),
            request_envelope: a.request_envelope.clone(),
            pdcp_content: a.pdcp_content.to_string(),
            before_version: a.before_version,
            before_hash: a.before_hash.clone(),
            after_version: a.after_version,
            after_hash: a.after_hash.clone(),
            failure_reason: a.failure_reason.map(|r| r.as_str().to_owned()),
            failure_detail: a.failure_detail.clone(),
            failed_change_id: a.failed_change_id.clone(),
            diagnostic: a.diagnostic.clone(),
            validity: a.validity.clone(),
            changes: a.changes.iter().map(ChangeFact::to_json).collect(),
            changeset_id: a.changeset_id.clone(),
            ..AttemptRow::default()
        }
    }
}

/// Adds the response-only `near_misses` of a rejected response (contract "Exact candidates,
/// consumed matches and near misses"), right after `current_context`:
/// - `sequential_match_invalid`: omitted, `sequential_match_consumed`;
/// - `match_absent` whose stored `near_miss_query` omitted the query: `match_too_large`, or
///   `historical_context_unavailable` for a row stored without one;
/// - inside a transaction the caller owns: `caller_transaction` (the search would hold the
///   caller's target lock longer; the caller can search after committing);
/// - a fresh rejection: the first 65,536 code points of the region the match was searched in
///   (`input`): the failing buffer, or the running scope of a single-form observed submission;
/// - an exact recovery (`input` is `None`): only the stored failure context, and of it only the
///   part inside the observed scope when the diagnostic names one in absolute coordinates.
///
/// Every `match_absent` list that is searched (and a `match_too_large` one) also gets the drift
/// evidence of issue 17 (`evidence/drift.rs`), from the same text and within the same 8,192
/// bytes; on exact recovery of a MATCH text that was not stored, and in a caller's transaction,
/// its members name why they are missing.
///
/// Other responses are left as they are. Near misses never change the verdict: a search that
/// fails answers `near_miss_search_failed` (see [`near_miss::contained`]).
pub fn add_near_misses(response: &mut Value, input: Option<&NearMissInput>, caller_owned: bool) {
    let Some(m) = response.as_object_mut() else {
        return;
    };
    let reason = m
        .get("failure_reason")
        .and_then(Value::as_str)
        .and_then(FailureReason::parse);
    let value = match reason {
        Some(FailureReason::SequentialMatchInvalid) => {
            near_miss::omitted("sequential_match_consumed")
        }
        Some(FailureReason::MatchAbsent) => {
            let d = &m["diagnostic"];
            match d["near_miss_query"]["query"].as_str() {
                None if d["near_miss_query"]["omission_reason"].is_string() => {
                    let mut v = near_miss::omitted(near_miss::MATCH_TOO_LARGE);
                    // Issue 17: the drift evidence has no 64-code-point limit of its own.
                    match input {
                        _ if caller_owned => {
                            drift::attach_unavailable(&mut v, "caller_transaction")
                        }
                        Some(i) => attach_drift(&mut v, &i.buffer, &i.query, i.offset),
                        None => drift::attach_unavailable(&mut v, drift::QUERY_NOT_STORED),
                    }
                    v
                }
                None => near_miss::omitted("historical_context_unavailable"),
                Some(_) if caller_owned => near_miss::omitted("caller_transaction"),
                Some(query) => match input {
                    Some(i) => {
                        let mut v = near_miss::contained(|| {
                            near_miss::try_search_in(
                                &i.buffer,
                                &i.query,
                                ScanSource::FailingBuffer,
                                i.offset,
                                (i.offset, Some(i.region_end)),
                            )
                            .map(|n| n.to_json())
                        });
                        attach_drift(&mut v, &i.buffer, &i.query, i.offset);
                        v
                    }
                    None => recovered_near_misses(d, query),
                },
            }
        }
        _ => return,
    };
    let at = m
        .keys()
        .position(|k| k == "current_context")
        .map_or(m.len(), |i| i + 1);
    m.shift_insert(at, "near_misses".into(), value);
}

/// Exact recovery's near misses: a search of the stored failure context. A single-form observed
/// rejection (`scope_start`/`scope_end` in absolute coordinates, no `span_basis`) searches only
/// the part of the context inside its scope, so that recovery never suggests text the match
/// could not have matched. The running scope is known from the stored row only before the
/// transaction's first change (`prior_changes` 0); after earlier changes its end has moved by
/// an amount the row does not record, and the answer is `historical_context_unavailable`.
fn recovered_near_misses(d: &Value, query: &str) -> Value {
    let fc = &d["failure_context"];
    let (Some(text), Some(start)) = (fc["text"].as_str(), as_int(&fc["start"])) else {
        return near_miss::omitted("historical_context_unavailable");
    };
    if fc["available"] != true {
        return near_miss::omitted("historical_context_unavailable");
    }
    // The stored row's numbers are the engine's own, but a row is data: any that is negative
    // or out of order is answered as unavailable history, never wrapped (helper-61).
    let Ok(start) = usize::try_from(start) else {
        return near_miss::omitted("historical_context_unavailable");
    };
    let total = match as_int(&fc["total_chars"]).map(usize::try_from) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return near_miss::omitted("historical_context_unavailable"),
    };
    let scope = match (as_int(&d["scope_start"]), as_int(&d["scope_end"])) {
        (Some(s), Some(e)) if d.get("span_basis").is_none() => {
            if as_int(&fc["prior_changes"]) != Some(0) {
                return near_miss::omitted("historical_context_unavailable");
            }
            match (usize::try_from(s), usize::try_from(e)) {
                (Ok(s), Ok(e)) if s <= e => Some((s, e)),
                _ => return near_miss::omitted("historical_context_unavailable"),
            }
        }
        _ => None,
    };
    let (text, offset, region) = match scope {
        None => (text, start, (0, total)),
        Some((lo, hi)) => {
            // The context's code points [from, to) that lie inside the scope.
            let len = text.chars().count();
            let end = start.saturating_add(len);
            let from = lo.clamp(start, end) - start;
            let to = hi.clamp(start + from, end) - start;
            let b0 = text.char_indices().nth(from).map_or(text.len(), |(b, _)| b);
            let b1 = text.char_indices().nth(to).map_or(text.len(), |(b, _)| b);
            (&text[b0..b1], start + from, (lo, Some(hi)))
        }
    };
    let mut v = near_miss::contained(|| {
        near_miss::try_search_in(
            text,
            query,
            ScanSource::StoredFailureContext,
            offset,
            region,
        )
        .map(|n| n.to_json())
    });
    attach_drift(&mut v, text, query, offset);
    v
}

/// Adds the drift evidence (`evidence/drift.rs`) to the near-miss object `v`, contained like the
/// near-miss search itself: a fault inside it (a panic, an allocation refused) leaves `v` as it
/// is and names `near_miss_search_failed` in both drift members, so it can neither roll back the
/// audited attempt nor take away the contract's near misses. An interrupt still passes through.
fn attach_drift(v: &mut Value, text: &str, query: &str, offset: usize) {
    let base = v.clone();
    let out = near_miss::contained(|| {
        let mut w = base;
        drift::attach(&mut w, text, query, offset);
        Ok(w)
    });
    let failed = out.as_object().is_some_and(|o| o.len() == 1)
        && out["omission_reason"] == near_miss::SEARCH_FAILED;
    if failed {
        drift::attach_unavailable(v, near_miss::SEARCH_FAILED);
    } else {
        *v = out;
    }
}

pub enum KeyOutcome {
    /// The recorded outcome; nothing is written.
    Recovered(Box<SubmissionResponse>),
    /// A different proposal under a used key: a new rejected attempt to write.
    Conflict(Box<Attempt>),
}

/// Exact recovery (same fingerprint) or an audited `request_key_conflict`.
pub fn recover_or_conflict(
    sub: &Submission,
    id: &Identity,
    stored: &AttemptRow,
    current: &TargetView,
    correlation_id: Option<&str>,
) -> KeyOutcome {
    if stored.request_fingerprint != id.fingerprint {
        return KeyOutcome::Conflict(Box::new(conflict(sub, id, stored, current)));
    }
    let answer = Answer {
        target: &sub.target_file_id,
        current,
        pdcp_log_id: &stored.pdcp_log_id,
        deduplicated: true,
        client_request_id: sub.request_key().map(str::to_owned),
        correlation_id,
    };
    let recovered = if stored.status() == Some(Status::Accepted) {
        let ws = warnings::recovered_fields(stored.diagnostic.as_ref());
        SubmissionResponse::Accepted(answer.accepted(
            &stored.before_hash,
            stored.after_version,
            stored.after_hash.as_deref(),
            stored.changes.clone(),
            ws,
            stored.validity.clone(),
        ))
    } else {
        SubmissionResponse::Rejected(answer.rejected(&RejectedFacts {
            reason: stored.failure_reason.as_deref(),
            detail: stored.failure_detail.as_deref(),
            failed_change_id: stored.failed_change_id.as_deref(),
            before_hash: &stored.before_hash,
            diagnostic: stored.diagnostic.as_ref(),
            validity: &stored.validity,
        }))
    };
    KeyOutcome::Recovered(Box::new(recovered))
}

const ENVELOPE_COMPONENTS: &[&str] = &[
    "protocol_version",
    "pdcp_content_hash",
    "expected_target_version",
    "expected_current_hash",
    "parent_pdcp_log_id",
];

fn conflict(sub: &Submission, id: &Identity, stored: &AttemptRow, start: &TargetView) -> Attempt {
    let components: Vec<&str> = ENVELOPE_COMPONENTS
        .iter()
        .copied()
        .filter(|k| stored.request_envelope.get(k) != id.envelope.get(k))
        .collect();
    let old: Value = serde_json::from_str(&stored.pdcp_content).unwrap_or(Value::Null);
    let mut paths = Vec::new();
    diff_paths(
        &old,
        &Value::Object(sub.record.clone()),
        String::new(),
        &mut paths,
    );
    let mut truncated = paths.len() > DIFFERING_FIELDS_MAX;
    paths.truncate(DIFFERING_FIELDS_MAX);
    // A path is made of the sender's keys: quoted as an unknown field's name is, at most 128
    // code points (a megabyte-long key made a megabyte-long path, stored in the conflict's
    // diagnostic and shown on every log page).
    for p in &mut paths {
        let (quoted, cut) = crate::contract::args::quoted_name(p);
        if cut {
            let quoted = quoted.into_owned();
            *p = quoted;
            truncated = true;
        }
    }
    let r = Rejection::coded(
        FailureReason::ContextInvalid,
        Stage::PreconditionGuard,
        DiagnosticCode::RequestKeyConflict,
        "client_request_id was already used for a different proposal on this target.",
    )
    .field("existing_pdcp_log_id", json!(stored.pdcp_log_id))
    .field("differing_components", json!(components))
    .field("differing_fields", json!(paths))
    .field("differing_fields_truncated", json!(truncated))
    .field(
        "submitted_client_request_id_preview",
        key_preview(&sub.client_request_id),
    );
    let base = Attempt {
        client_request_id: None,
        conflicts_with_pdcp_log_id: Some(stored.pdcp_log_id.clone()),
        ..base_attempt(sub, id, start)
    };
    rejected(base, &r, sub.protocol_version, start)
}

/// Record paths (`edits[0].rationale`) whose values differ, depth first, in key order.
fn diff_paths(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
    if out.len() > DIFFERING_FIELDS_MAX {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => diff_paths(u, v, p, out),
                    _ => out.push(p),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{at}[{i}]");
                match (x.get(i), y.get(i)) {
                    (Some(u), Some(v)) => diff_paths(u, v, p, out),
                    _ => out.push(p),
                }
            }
        }
        _ if a != b => out.push(at),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored diagnostic is data: a recovered near-miss search on one whose numbers are
    /// negative or out of order is `historical_context_unavailable`, not a wrapped offset or a
    /// panic (helper-61: start -1 with a scope overflowed `start + len`).
    #[test]
    fn recovered_near_misses_refuse_impossible_stored_numbers() {
        let unavailable = near_miss::omitted("historical_context_unavailable");
        for d in [
            r#"{"failure_context":{"text":"abc","start":-1,"available":true,"prior_changes":0},"scope_start":0,"scope_end":2}"#,
            r#"{"failure_context":{"text":"abc","start":-1,"available":true}}"#,
            r#"{"failure_context":{"text":"abc","start":0,"total_chars":-3,"available":true}}"#,
            r#"{"failure_context":{"text":"abc","start":0,"available":true,"prior_changes":0},"scope_start":-1,"scope_end":2}"#,
            r#"{"failure_context":{"text":"abc","start":0,"available":true,"prior_changes":0},"scope_start":3,"scope_end":2}"#,
        ] {
            let d: Value = serde_json::from_str(d).unwrap();
            assert_eq!(recovered_near_misses(&d, "abd"), unavailable, "{d}");
        }
        // The largest start a row can hold still answers (the scope is clamped to the context).
        let d: Value = serde_json::from_str(&format!(
            r#"{{"failure_context":{{"text":"abc","start":{},"available":true,"prior_changes":0}},"scope_start":0,"scope_end":2}}"#,
            i64::MAX
        ))
        .unwrap();
        assert_ne!(recovered_near_misses(&d, "abd"), unavailable);
    }

    /// Contract "patchdiff_submit_replacement" ordering: invalid text first, then admission. An
    /// oversized replacement holding an escaped lone surrogate or NUL is not answered
    /// replacement_too_large: it goes on to the audited target_encoding_invalid rejection.
    #[test]
    fn invalid_text_precedes_replacement_admission() {
        let big = "x".repeat(crate::contract::limits::REPLACEMENT_MAX_UTF8_BYTES + 1);
        let args = |tail: &str| {
            format!(
                r#"{{"target_file_id":"11111111-1111-4111-8111-111111111111","expected_target_version":0,"intent":"i","replacement":"{big}{tail}"}}"#
            )
        };
        let plain = parse_submit_replacement(&args("")).unwrap();
        assert_eq!(
            admission(&plain, None).unwrap()["code"],
            "replacement_too_large"
        );
        for tail in [r"\ud800", r"\u0000"] {
            let sub = parse_submit_replacement(&args(tail)).unwrap();
            assert!(!sub.invalid_text.is_empty(), "{tail}");
            assert!(admission(&sub, None).is_none(), "{tail}");
        }
    }

    /// Contract "Fresh admission limits" and issue 16 ("every response stays byte for byte"):
    /// the replacement_too_large answer (not in the golden corpora, whose replacements are
    /// small) keeps its keys and bytes: status, code, target_file_id, failure_detail,
    /// pdcp_log_id (null), diagnostic, then correlation_id when asked for.
    #[test]
    fn replacement_too_large_answer_bytes() {
        let over = "a".repeat(1_000_001);
        let sub = parse_submit_replacement(&format!(
            r#"{{"target_file_id":"{TARGET}","expected_target_version":0,"intent":"i","replacement":"{over}"}}"#
        ))
        .unwrap();
        let d = tx3::admission(&over).unwrap_err();
        let detail = serde_json::to_string(&tx3::too_large_detail(&d)).unwrap();
        let expected = |tail: &str| {
            format!(
                r#"{{"status":"invalid_argument","code":"replacement_too_large","target_file_id":"{TARGET}","failure_detail":{detail},"pdcp_log_id":null,"diagnostic":{}{tail}}}"#,
                serde_json::to_string(&d).unwrap()
            )
        };
        assert_eq!(
            serde_json::to_string(&admission(&sub, None).unwrap()).unwrap(),
            expected("")
        );
        assert_eq!(
            serde_json::to_string(&admission(&sub, Some("c")).unwrap()).unwrap(),
            expected(r#","correlation_id":"c""#)
        );
    }

    const TARGET: &str = "11111111-1111-4111-8111-111111111111";

    fn edits_args(n: usize, intent: &str) -> String {
        let edits: Vec<Value> = (0..n)
            .map(|_| json!({"match": "a", "replace": "b", "occurrence_index": 1}))
            .collect();
        json!({"target_file_id": TARGET, "intent": intent, "edits": edits,
               "expected_target_version": 0})
        .to_string()
    }

    fn code(r: Result<Submission, ArgError>) -> Option<&'static str> {
        r.err().map(|e| e.code)
    }

    /// limits::TX1_MAX_EDITS and TX2_MAX_OPERATIONS: at the cap accepted, one over refused as
    /// invalid_argument with limit and actual, before anything else is read.
    #[test]
    fn edit_and_operation_counts_at_their_caps() {
        use crate::contract::limits::{TX1_MAX_EDITS, TX2_MAX_OPERATIONS};
        assert_eq!(
            code(parse_submit_edits(&edits_args(TX1_MAX_EDITS, "i"))),
            None
        );
        let e = parse_submit_edits(&edits_args(TX1_MAX_EDITS + 1, "i")).unwrap_err();
        assert_eq!(e.code, "too_many_edits");
        assert_eq!(e.to_json("t")["status"], "invalid_argument");
        assert_eq!(e.extra["limit"], TX1_MAX_EDITS);
        assert_eq!(e.extra["actual"], TX1_MAX_EDITS + 1);
        let ops = |n: usize| {
            let ops: Vec<Value> = (0..n)
                .map(|i| json!({"op": "span", "start": i, "end": i + 1, "expected_text": "a", "replace": "b"}))
                .collect();
            json!({"target_file_id": TARGET, "intent": "i", "operations": ops,
                   "expected_target_version": 0})
            .to_string()
        };
        assert_eq!(
            code(parse_submit_operations(&ops(TX2_MAX_OPERATIONS))),
            None
        );
        assert_eq!(
            code(parse_submit_operations(&ops(TX2_MAX_OPERATIONS + 1))),
            Some("too_many_operations")
        );
    }

    /// limits::ARGUMENT_VALUES_MAX / ARGUMENT_OBJECTS_MAX (docs/sql-api.md, "Work is bounded
    /// where the contract is silent"): the largest requests the caps allow hold under a fifth of
    /// each; many small values or objects are refused as `arguments_too_complex` from the text,
    /// before it is parsed (16 MiB of one-member objects took a backend 930 MB to parse).
    #[test]
    fn arguments_are_refused_by_their_shape_before_they_are_parsed() {
        use crate::contract::json::{TooComplex, shape_within};
        use crate::contract::limits::{ARGUMENT_OBJECTS_MAX, ARGUMENT_VALUES_MAX, TX1_MAX_EDITS};
        let edits: Vec<Value> = (0..TX1_MAX_EDITS)
            .map(|i| json!({"match": "a", "replace": "b", "occurrence_index": 1, "rationale": "r",
                            "change_id": format!("c{i}"), "context_before": "x", "context_after": "y"}))
            .collect();
        let largest = json!({"target_file_id": TARGET, "intent": "i", "edits": edits,
                             "expected_target_version": 0, "client_request_id": "k"})
        .to_string();
        assert_eq!(
            shape_within(&largest, ARGUMENT_VALUES_MAX / 5, ARGUMENT_OBJECTS_MAX / 5),
            Ok(())
        );
        let many = |unit: &str, n: usize| {
            format!(
                r#"{{"target_file_id":"{TARGET}","x":[{}0]}}"#,
                unit.repeat(n)
            )
        };
        for (text, counted, limit) in [
            (
                many(r#"{"a":0},"#, ARGUMENT_OBJECTS_MAX),
                "objects",
                ARGUMENT_OBJECTS_MAX,
            ),
            (
                many("0,", ARGUMENT_VALUES_MAX),
                "values",
                ARGUMENT_VALUES_MAX,
            ),
            (
                many("[],", ARGUMENT_VALUES_MAX),
                "values",
                ARGUMENT_VALUES_MAX,
            ),
        ] {
            let e = parse_submit_edits(&text).unwrap_err();
            assert_eq!(
                (e.code, &e.extra["counted"]),
                ("arguments_too_complex", &json!(counted))
            );
            assert_eq!(e.extra["limit"], limit);
            let read = crate::contract::args::Args::parse(&text, &["target_file_id"], &[]);
            assert_eq!(read.err().map(|e| e.code), Some("arguments_too_complex"));
        }
        // Strings are text, however many structural characters they hold.
        let one_string = format!(
            r#"{{"intent":"{}"}}"#,
            "{\"a\":0},".repeat(ARGUMENT_OBJECTS_MAX + 1)
        );
        assert_eq!(shape_within(&one_string, 3, 1), Ok(()));
        assert_eq!(shape_within(&one_string, 2, 1), Err(TooComplex::Values));
    }

    /// limits::INTENT_MAX_BYTES counts UTF-8 bytes, inclusive.
    #[test]
    fn intent_at_its_cap() {
        use crate::contract::limits::INTENT_MAX_BYTES;
        let at = "x".repeat(INTENT_MAX_BYTES - 2) + "é";
        assert_eq!(at.len(), INTENT_MAX_BYTES);
        assert_eq!(code(parse_submit_edits(&edits_args(1, &at))), None);
        let over = "x".repeat(INTENT_MAX_BYTES - 1) + "é";
        assert_eq!(
            code(parse_submit_edits(&edits_args(1, &over))),
            Some("intent_too_large")
        );
    }

    /// limits::RATIONALE_MAX_BYTES counts UTF-8 bytes, inclusive, on an edit and an operation,
    /// and the refusal names the change (helper-77: ledger pages of 700 MB from 7 MB rationales).
    #[test]
    fn rationale_at_its_cap() {
        use crate::contract::limits::RATIONALE_MAX_BYTES;
        let at = "x".repeat(RATIONALE_MAX_BYTES - 2) + "é";
        let over = "x".repeat(RATIONALE_MAX_BYTES - 1) + "é";
        let edits = |r: &str| {
            json!({"target_file_id": TARGET, "intent": "i", "expected_target_version": 0,
                   "edits": [{"match": "a", "replace": "b"},
                             {"match": "c", "replace": "d", "rationale": r}]})
            .to_string()
        };
        assert_eq!(code(parse_submit_edits(&edits(&at))), None);
        let e = parse_submit_edits(&edits(&over)).unwrap_err();
        assert_eq!(e.code, "rationale_too_large");
        assert_eq!(e.extra["path"], "edits[1]");
        assert_eq!(e.extra["actual"], RATIONALE_MAX_BYTES + 1);
        let ops = |r: &str| {
            json!({"target_file_id": TARGET, "intent": "i", "expected_target_version": 0,
                   "operations": [{"op": "span", "start": 0, "end": 1, "expected_text": "a",
                                   "replace": "b", "rationale": r}]})
            .to_string()
        };
        assert_eq!(code(parse_submit_operations(&ops(&at))), None);
        let e = parse_submit_operations(&ops(&over)).unwrap_err();
        assert_eq!(
            (e.code, e.extra["path"].clone()),
            ("rationale_too_large", json!("operations[0]"))
        );
        // An observed batch's groups (patchdiff_submit_observed_operations, commit_bundle).
        let batch = |r: &str| {
            json!({"target_file_id": TARGET, "intent": "i", "expected_target_version": 0,
                   "observation_bundle_id": TARGET, "groups": [
                       {"observation_id": TARGET, "operations": [
                           {"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "b"}]},
                       {"observation_id": TARGET, "operations": [
                           {"op": "span", "start": 0, "end": 0, "expected_text": "", "replace": "c"},
                           {"op": "span", "start": 1, "end": 1, "expected_text": "", "replace": "d",
                            "rationale": r}]}]})
            .to_string()
        };
        use crate::submission::scoped::parse_submit_observed_operations as observed;
        assert_eq!(code(observed(&batch(&at))), None);
        let e = observed(&batch(&over)).unwrap_err();
        assert_eq!(
            (e.code, e.extra["path"].clone()),
            ("rationale_too_large", json!("groups[1].operations[1]"))
        );
    }

    /// limits::RECORD_MAX_BYTES bounds the stored pdcp_content exactly; a sole replacement over
    /// its own contract limit still answers replacement_too_large, whatever its record's size.
    #[test]
    fn stored_record_at_its_cap() {
        use crate::contract::limits::RECORD_MAX_BYTES;
        let args = |pad: usize| {
            json!({"target_file_id": TARGET, "intent": "i", "expected_target_version": 0,
                   "edits": [{"match": "a", "replace": "y".repeat(pad)}]})
            .to_string()
        };
        let base = parse_submit_edits(&args(0)).unwrap().pdcp_content.len();
        let at = parse_submit_edits(&args(RECORD_MAX_BYTES - base)).unwrap();
        assert_eq!(at.pdcp_content.len(), RECORD_MAX_BYTES);
        let e = parse_submit_edits(&args(RECORD_MAX_BYTES - base + 1)).unwrap_err();
        assert_eq!(e.code, "record_too_large");
        assert_eq!(e.extra["actual"], RECORD_MAX_BYTES + 1);
        // 1.5M control characters: 9 MB escaped, and over the replacement limit.
        let big = "\u{1}".repeat(1_500_000);
        let sub = parse_submit_replacement(
            &json!({"target_file_id": TARGET, "intent": "i", "expected_target_version": 0,
                    "replacement": big})
            .to_string(),
        )
        .unwrap();
        assert!(sub.pdcp_content.len() > RECORD_MAX_BYTES);
        assert_eq!(
            admission(&sub, None).unwrap()["code"],
            "replacement_too_large"
        );
        // The replacement the contract admits with the longest escaped record (6 bytes for each
        // control character, 12 for each astral one, within both limits), with the longest
        // escaped intent, fits the record cap.
        let max = "\u{1}".repeat(983_808) + &"\u{1F30D}".repeat(16_192);
        assert_eq!(
            max.len(),
            crate::contract::limits::REPLACEMENT_MAX_UTF8_BYTES
        );
        assert_eq!(
            max.chars().count(),
            crate::contract::limits::REPLACEMENT_MAX_CODE_POINTS
        );
        let intent = "\u{1}".repeat(crate::contract::limits::INTENT_MAX_BYTES);
        let sub = parse_submit_replacement(
            &json!({"target_file_id": TARGET, "intent": intent, "expected_target_version": 0,
                    "replacement": max})
            .to_string(),
        )
        .unwrap();
        assert!(admission(&sub, None).is_none());
        assert!(
            sub.pdcp_content.len() > 6_400_000,
            "{}",
            sub.pdcp_content.len()
        );
    }

    /// limits::METADATA_VALUE_MAX_BYTES: each stored metadata value, as compact JSON.
    #[test]
    fn metadata_values_at_their_cap() {
        use crate::contract::limits::METADATA_VALUE_MAX_BYTES;
        for k in [
            "expected_current_hash",
            "parent_pdcp_log_id",
            "client_request_id",
        ] {
            let with = |n: usize| {
                let mut v: Value = serde_json::from_str(&edits_args(1, "i")).unwrap();
                v[k] = json!("h".repeat(n));
                parse_submit_edits(&v.to_string())
            };
            // Two bytes of quotes.
            assert_eq!(code(with(METADATA_VALUE_MAX_BYTES - 2)), None, "{k}");
            let e = with(METADATA_VALUE_MAX_BYTES - 1).unwrap_err();
            assert_eq!(
                (e.code, &e.extra["argument"]),
                ("metadata_too_large", &json!(k))
            );
        }
        let mut v: Value = serde_json::from_str(&edits_args(1, "i")).unwrap();
        v["expected_target_version"] = json!(vec![0; 600]);
        assert_eq!(
            code(parse_submit_edits(&v.to_string())),
            Some("metadata_too_large")
        );
    }

    /// The caps hold for preview too (it parses through the same envelope).
    #[test]
    fn preview_refuses_over_the_caps() {
        let edits: Vec<Value> = (0..=crate::contract::limits::TX1_MAX_EDITS)
            .map(|_| json!({"match": "a", "replace": "b"}))
            .collect();
        let args = json!({"target_file_id": TARGET, "format": "patchdiff-tx/1", "intent": "i",
                          "edits": edits, "expected_target_version": 0});
        let e = crate::submission::preview::parse_preview(&args.to_string()).unwrap_err();
        assert_eq!(e.code, "too_many_edits");
    }

    /// Issue 14: a long application stops at an interrupt check (the hook's ERROR unwinds).
    #[test]
    fn long_applications_check_for_interrupts() {
        use crate::contract::interrupt::testing::interrupted_after;
        let text = "a".repeat(20_000);
        let t = TargetView {
            target_file_id: TARGET,
            version: 0,
            current_hash: "h",
            content: &text,
        };
        let edits: Vec<common::Edit> = (0..2_000)
            .map(|i| common::Edit {
                change_id: format!("c{i}"),
                match_text: "a".into(),
                match_raw_chars: 1,
                replace: "b".into(),
                rationale: None,
                risk: None,
                occurrence_index: Some(1),
                anchor_before: None,
                anchor_after: None,
            })
            .collect();
        assert!(interrupted_after(100, || tx1::apply(&t, &edits)));
        // Unarmed, the same application completes.
        assert!(tx1::apply(&t, &edits).is_ok());
    }
}
