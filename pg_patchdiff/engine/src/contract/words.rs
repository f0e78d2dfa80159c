//! The contract's result words as types: every top-level `status` the engine answers with or
//! stores, every `failure_reason` of a rejected attempt or a failed replay, and every
//! `diagnostic.code` a rejection carries. Stored rows and responses keep the exact strings
//! (`as_str`); the engine decides on the types.

use std::fmt;

/// A response's top-level `status`. Attempt rows store only `Accepted` and `Rejected` (the
/// table's CHECK constraint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Reads, uploads, exports, metadata and tenancy grants.
    Ok,
    Accepted,
    Rejected,
    /// `patchdiff_save_checkpoint`.
    Saved,
    /// `patchdiff_replay` reconstructed the target.
    Success,
    /// `patchdiff_replay` stopped at a row.
    Failed,
    InvalidArgument,
    NotFound,
    /// A tenancy call the caller may not make.
    PermissionDenied,
    /// `patchdiff_observe_scope` candidate discovery.
    Candidates,
    /// `patchdiff_observe_scope`: more than one scope matches.
    Ambiguous,
    /// `patchdiff_observe_scope`: one scope observed.
    Observed,
    /// `patchdiff_observe_scope`: a bundle of scopes observed.
    ObservedBatch,
    /// `patchdiff_observe_scope`: a language without a structural parser.
    Unsupported,
    /// `patchdiff_observe_scope`: the structure of the text could not be read.
    StructureUnavailable,
}

impl Status {
    pub const ALL: [Status; 15] = [
        Status::Ok,
        Status::Accepted,
        Status::Rejected,
        Status::Saved,
        Status::Success,
        Status::Failed,
        Status::InvalidArgument,
        Status::NotFound,
        Status::PermissionDenied,
        Status::Candidates,
        Status::Ambiguous,
        Status::Observed,
        Status::ObservedBatch,
        Status::Unsupported,
        Status::StructureUnavailable,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Accepted => "accepted",
            Status::Rejected => "rejected",
            Status::Saved => "saved",
            Status::Success => "success",
            Status::Failed => "failed",
            Status::InvalidArgument => "invalid_argument",
            Status::NotFound => "not_found",
            Status::PermissionDenied => "permission_denied",
            Status::Candidates => "candidates",
            Status::Ambiguous => "ambiguous",
            Status::Observed => "observed",
            Status::ObservedBatch => "observed_batch",
            Status::Unsupported => "unsupported",
            Status::StructureUnavailable => "structure_unavailable",
        }
    }

    /// The status a stored or answered `status` names, if any.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `failure_reason`: of a rejected attempt (stored in its row) or of a failed replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    ManifestMissing,
    ManifestMalformed,
    BlockMalformed,
    ContextMissing,
    ContextInvalid,
    TargetEncodingInvalid,
    TargetVersionMismatch,
    TargetHashMismatch,
    /// In the contract's retryable list; no path of this engine rejects with it today.
    TargetDiverged,
    MatchAbsent,
    MatchAmbiguous,
    DisambiguationInvalid,
    SequentialMatchInvalid,
    SpanOutOfBounds,
    SpanExpectedTextMismatch,
    /// `patchdiff_replay`: the target has no initial snapshot.
    ReplayBaseMissing,
    /// `patchdiff_replay`: an unsupported format pair, or a record its format cannot read.
    ReplayProtocolInvalid,
    /// `patchdiff_replay`: a valid record that does not apply to the reconstruction.
    ReplayApplicationFailed,
    /// `patchdiff_replay`: a recorded fact the reconstruction does not reproduce.
    ReplayDivergence,
}

impl FailureReason {
    pub const ALL: [FailureReason; 19] = [
        FailureReason::ManifestMissing,
        FailureReason::ManifestMalformed,
        FailureReason::BlockMalformed,
        FailureReason::ContextMissing,
        FailureReason::ContextInvalid,
        FailureReason::TargetEncodingInvalid,
        FailureReason::TargetVersionMismatch,
        FailureReason::TargetHashMismatch,
        FailureReason::TargetDiverged,
        FailureReason::MatchAbsent,
        FailureReason::MatchAmbiguous,
        FailureReason::DisambiguationInvalid,
        FailureReason::SequentialMatchInvalid,
        FailureReason::SpanOutOfBounds,
        FailureReason::SpanExpectedTextMismatch,
        FailureReason::ReplayBaseMissing,
        FailureReason::ReplayProtocolInvalid,
        FailureReason::ReplayApplicationFailed,
        FailureReason::ReplayDivergence,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            FailureReason::ManifestMissing => "manifest_missing",
            FailureReason::ManifestMalformed => "manifest_malformed",
            FailureReason::BlockMalformed => "block_malformed",
            FailureReason::ContextMissing => "context_missing",
            FailureReason::ContextInvalid => "context_invalid",
            FailureReason::TargetEncodingInvalid => "target_encoding_invalid",
            FailureReason::TargetVersionMismatch => "target_version_mismatch",
            FailureReason::TargetHashMismatch => "target_hash_mismatch",
            FailureReason::TargetDiverged => "target_diverged",
            FailureReason::MatchAbsent => "match_absent",
            FailureReason::MatchAmbiguous => "match_ambiguous",
            FailureReason::DisambiguationInvalid => "disambiguation_invalid",
            FailureReason::SequentialMatchInvalid => "sequential_match_invalid",
            FailureReason::SpanOutOfBounds => "span_out_of_bounds",
            FailureReason::SpanExpectedTextMismatch => "span_expected_text_mismatch",
            FailureReason::ReplayBaseMissing => "replay_base_missing",
            FailureReason::ReplayProtocolInvalid => "replay_protocol_invalid",
            FailureReason::ReplayApplicationFailed => "replay_application_failed",
            FailureReason::ReplayDivergence => "replay_divergence",
        }
    }

    /// The reason a stored or answered `failure_reason` names, if any.
    pub fn parse(s: &str) -> Option<FailureReason> {
        FailureReason::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// Contract "Retryable rejections": a new proposal from a fresh read can succeed; resending
    /// the identical request cannot. False for request-shape, encoding, lineage, request-key
    /// and target-identity failures (and replay's, which are not attempts).
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            FailureReason::MatchAbsent
                | FailureReason::MatchAmbiguous
                | FailureReason::DisambiguationInvalid
                | FailureReason::SequentialMatchInvalid
                | FailureReason::SpanOutOfBounds
                | FailureReason::SpanExpectedTextMismatch
                | FailureReason::TargetHashMismatch
                | FailureReason::TargetVersionMismatch
                | FailureReason::TargetDiverged
        )
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rejection's `diagnostic.code`: what the engine stores in a rejected attempt's diagnostic
/// (and answers with, as `diagnostic.code` and, for observed tools, the top-level `code`).
///
/// Not here, because they are not rejection diagnostics: `invalid_argument` codes
/// ([`crate::contract::args::ArgError`], including `replacement_too_large`, whose
/// `diagnostic.code` belongs to an answer that writes no row), `save_checkpoint`'s and tenancy's
/// own `code`s, `patchdiff_observe_scope`'s codes and freshness reasons, and warning codes.
/// Codes read back from stored rows stay strings: they are echoed verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiagnosticCode {
    InvalidClientRequestId,
    /// A batch of observed operations without `client_request_id`.
    ClientRequestIdRequired,
    /// Observed operations without both guards.
    ObservedGuardsRequired,
    InvalidExpectedTargetVersion,
    InvalidExpectedCurrentHash,
    InvalidAttempt,
    InvalidParentPdcpLogId,
    ParentNotFound,
    ParentTargetMismatch,
    ParentNotRejected,
    /// A request key reused for a different proposal (at PRECONDITION_GUARD).
    RequestKeyConflict,
    /// A changeset member that passed its own checks, not applied because another member of
    /// its changeset was rejected (`patchdiff_submit_changeset`, at PRECONDITION_GUARD).
    ChangesetMemberRejected,
    MissingIntent,
    InvalidIntent,
    /// tx/1 `edits`: absent or null, empty, not an array; one malformed edit.
    MissingEdits,
    EmptyEdits,
    InvalidEdits,
    InvalidEdit,
    /// tx/2 `operations` (also of an observed batch's group), as for `edits`.
    MissingOperations,
    EmptyOperations,
    InvalidOperations,
    InvalidOperation,
    /// An observed batch's `groups`, as for `edits`.
    MissingGroups,
    EmptyGroups,
    InvalidGroups,
    InvalidGroup,
    /// An observed batch over its 32 groups or 128 operations.
    TooManyGroups,
    TooManyOperations,
    /// tx/3 `replacement`.
    MissingReplacement,
    InvalidReplacement,
    /// Observed submissions and strict observation mode.
    ObservationRequired,
    InvalidObservationId,
    UnknownObservationId,
    ObservationTargetMismatch,
    ObservationBundleMismatch,
    ObservationCycleMismatch,
    ObservationAlreadyConsumed,
    StaleObservationVersion,
    StaleObservationHash,
    /// Scope re-verification under the lock.
    ObservedScopeMismatch,
    ObservedScopesOverlap,
    /// A confined application's refusals.
    OperationOutsideObservedScope,
    ObservedInsertionGuardsRequired,
}

impl DiagnosticCode {
    pub const ALL: [DiagnosticCode; 43] = [
        DiagnosticCode::InvalidClientRequestId,
        DiagnosticCode::ClientRequestIdRequired,
        DiagnosticCode::ObservedGuardsRequired,
        DiagnosticCode::InvalidExpectedTargetVersion,
        DiagnosticCode::InvalidExpectedCurrentHash,
        DiagnosticCode::InvalidAttempt,
        DiagnosticCode::InvalidParentPdcpLogId,
        DiagnosticCode::ParentNotFound,
        DiagnosticCode::ParentTargetMismatch,
        DiagnosticCode::ParentNotRejected,
        DiagnosticCode::RequestKeyConflict,
        DiagnosticCode::ChangesetMemberRejected,
        DiagnosticCode::MissingIntent,
        DiagnosticCode::InvalidIntent,
        DiagnosticCode::MissingEdits,
        DiagnosticCode::EmptyEdits,
        DiagnosticCode::InvalidEdits,
        DiagnosticCode::InvalidEdit,
        DiagnosticCode::MissingOperations,
        DiagnosticCode::EmptyOperations,
        DiagnosticCode::InvalidOperations,
        DiagnosticCode::InvalidOperation,
        DiagnosticCode::MissingGroups,
        DiagnosticCode::EmptyGroups,
        DiagnosticCode::InvalidGroups,
        DiagnosticCode::InvalidGroup,
        DiagnosticCode::TooManyGroups,
        DiagnosticCode::TooManyOperations,
        DiagnosticCode::MissingReplacement,
        DiagnosticCode::InvalidReplacement,
        DiagnosticCode::ObservationRequired,
        DiagnosticCode::InvalidObservationId,
        DiagnosticCode::UnknownObservationId,
        DiagnosticCode::ObservationTargetMismatch,
        DiagnosticCode::ObservationBundleMismatch,
        DiagnosticCode::ObservationCycleMismatch,
        DiagnosticCode::ObservationAlreadyConsumed,
        DiagnosticCode::StaleObservationVersion,
        DiagnosticCode::StaleObservationHash,
        DiagnosticCode::ObservedScopeMismatch,
        DiagnosticCode::ObservedScopesOverlap,
        DiagnosticCode::OperationOutsideObservedScope,
        DiagnosticCode::ObservedInsertionGuardsRequired,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            DiagnosticCode::InvalidClientRequestId => "invalid_client_request_id",
            DiagnosticCode::ClientRequestIdRequired => "CLIENT_REQUEST_ID_REQUIRED",
            DiagnosticCode::ObservedGuardsRequired => "OBSERVED_GUARDS_REQUIRED",
            DiagnosticCode::InvalidExpectedTargetVersion => "invalid_expected_target_version",
            DiagnosticCode::InvalidExpectedCurrentHash => "invalid_expected_current_hash",
            DiagnosticCode::InvalidAttempt => "invalid_attempt",
            DiagnosticCode::InvalidParentPdcpLogId => "invalid_parent_pdcp_log_id",
            DiagnosticCode::ParentNotFound => "parent_not_found",
            DiagnosticCode::ParentTargetMismatch => "parent_target_mismatch",
            DiagnosticCode::ParentNotRejected => "parent_not_rejected",
            DiagnosticCode::RequestKeyConflict => "request_key_conflict",
            DiagnosticCode::ChangesetMemberRejected => "changeset_member_rejected",
            DiagnosticCode::MissingIntent => "missing_intent",
            DiagnosticCode::InvalidIntent => "invalid_intent",
            DiagnosticCode::MissingEdits => "missing_edits",
            DiagnosticCode::EmptyEdits => "empty_edits",
            DiagnosticCode::InvalidEdits => "invalid_edits",
            DiagnosticCode::InvalidEdit => "invalid_edit",
            DiagnosticCode::MissingOperations => "missing_operations",
            DiagnosticCode::EmptyOperations => "empty_operations",
            DiagnosticCode::InvalidOperations => "invalid_operations",
            DiagnosticCode::InvalidOperation => "invalid_operation",
            DiagnosticCode::MissingGroups => "missing_groups",
            DiagnosticCode::EmptyGroups => "empty_groups",
            DiagnosticCode::InvalidGroups => "invalid_groups",
            DiagnosticCode::InvalidGroup => "invalid_group",
            DiagnosticCode::TooManyGroups => "too_many_groups",
            DiagnosticCode::TooManyOperations => "too_many_operations",
            DiagnosticCode::MissingReplacement => "missing_replacement",
            DiagnosticCode::InvalidReplacement => "invalid_replacement",
            DiagnosticCode::ObservationRequired => "OBSERVATION_REQUIRED",
            DiagnosticCode::InvalidObservationId => "INVALID_OBSERVATION_ID",
            DiagnosticCode::UnknownObservationId => "UNKNOWN_OBSERVATION_ID",
            DiagnosticCode::ObservationTargetMismatch => "OBSERVATION_TARGET_MISMATCH",
            DiagnosticCode::ObservationBundleMismatch => "OBSERVATION_BUNDLE_MISMATCH",
            DiagnosticCode::ObservationCycleMismatch => "OBSERVATION_CYCLE_MISMATCH",
            DiagnosticCode::ObservationAlreadyConsumed => "OBSERVATION_ALREADY_CONSUMED",
            DiagnosticCode::StaleObservationVersion => "STALE_OBSERVATION_VERSION",
            DiagnosticCode::StaleObservationHash => "STALE_OBSERVATION_HASH",
            DiagnosticCode::ObservedScopeMismatch => "OBSERVED_SCOPE_MISMATCH",
            DiagnosticCode::ObservedScopesOverlap => "OBSERVED_SCOPES_OVERLAP",
            DiagnosticCode::OperationOutsideObservedScope => "OPERATION_OUTSIDE_OBSERVED_SCOPE",
            DiagnosticCode::ObservedInsertionGuardsRequired => "OBSERVED_INSERTION_GUARDS_REQUIRED",
        }
    }

    /// The code a stored or answered `diagnostic.code` names, if any.
    pub fn parse(s: &str) -> Option<DiagnosticCode> {
        DiagnosticCode::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl fmt::Display for DiagnosticCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Responses serialise the word as its contract string ([`Status::as_str`]).
impl serde::Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// Issue 16 item 2: every status serializes to its exact contract string and parses back
    /// from it only; the set is what the contract documents plus the project's own documented
    /// extensions, nothing else.
    #[test]
    fn statuses_round_trip_to_the_contract_strings() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert_eq!(s.to_string(), s.as_str());
        }
        // mcp-tool-contracts.txt: reads and uploads ("ok"), submission ("accepted",
        // "rejected"), save_checkpoint ("saved"), replay ("success"), invalid arguments,
        // get_pdcp_log and observe_scope ("not_found"), observe_scope ("candidates",
        // "ambiguous", "observed", "observed_batch").
        let contract = [
            "ok",
            "accepted",
            "rejected",
            "saved",
            "success",
            "invalid_argument",
            "not_found",
            "candidates",
            "ambiguous",
            "observed",
            "observed_batch",
        ];
        // This project's documented additions: docs/history.md (replay "failed"),
        // docs/security.md (tenancy "permission_denied"), docs/structural.md ("unsupported",
        // "structure_unavailable").
        let project = [
            "failed",
            "permission_denied",
            "unsupported",
            "structure_unavailable",
        ];
        let want: BTreeSet<&str> = contract.into_iter().chain(project).collect();
        let got: BTreeSet<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(got, want);
        assert_eq!(
            got.len(),
            Status::ALL.len(),
            "no two statuses share a string"
        );
        assert_eq!(Status::parse("Accepted"), None);
        assert_eq!(Status::parse("outcome_unknown"), None);
    }

    /// Issue 16 item 2: every failure reason serializes to its exact contract string and
    /// parses back from it only; the set is the contract's labels plus replay's, nothing else.
    #[test]
    fn failure_reasons_round_trip_to_the_contract_strings() {
        for r in FailureReason::ALL {
            assert_eq!(FailureReason::parse(r.as_str()), Some(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        // host-integration-guide.txt "Match the label to the action" (manifest_* are the
        // tx/1 and tx/3 manifest labels, "other context_*" is context_missing), and
        // mcp-tool-contracts.txt "Common input and request-key rules" (target_encoding_invalid).
        let contract = [
            "target_version_mismatch",
            "target_hash_mismatch",
            "target_diverged",
            "match_absent",
            "sequential_match_invalid",
            "match_ambiguous",
            "disambiguation_invalid",
            "span_out_of_bounds",
            "span_expected_text_mismatch",
            "context_invalid",
            "context_missing",
            "manifest_missing",
            "manifest_malformed",
            "block_malformed",
            "target_encoding_invalid",
        ];
        // patchdiff_replay's `failed` answer (mcp-tool-contracts.txt names
        // replay_protocol_invalid; docs/history.md the rest).
        let replay = [
            "replay_base_missing",
            "replay_protocol_invalid",
            "replay_application_failed",
            "replay_divergence",
        ];
        let want: BTreeSet<&str> = contract.into_iter().chain(replay).collect();
        let got: BTreeSet<&str> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), FailureReason::ALL.len());
        assert_eq!(FailureReason::parse("workspace_busy"), None);
    }

    /// Contract "Retryable rejections": true for exactly these nine labels, false for
    /// request-shape, encoding, lineage, request-key and target-identity failures.
    #[test]
    fn retryable_is_the_contract_list() {
        let retryable: BTreeSet<&str> = FailureReason::ALL
            .into_iter()
            .filter(|r| r.retryable())
            .map(FailureReason::as_str)
            .collect();
        let want: BTreeSet<&str> = [
            "match_absent",
            "match_ambiguous",
            "disambiguation_invalid",
            "sequential_match_invalid",
            "span_out_of_bounds",
            "span_expected_text_mismatch",
            "target_hash_mismatch",
            "target_version_mismatch",
            "target_diverged",
        ]
        .into_iter()
        .collect();
        assert_eq!(retryable, want);
        for shape in [
            FailureReason::ContextInvalid,
            FailureReason::ContextMissing,
            FailureReason::ManifestMissing,
            FailureReason::ManifestMalformed,
            FailureReason::BlockMalformed,
            FailureReason::TargetEncodingInvalid,
        ] {
            assert!(!shape.retryable(), "{shape}");
        }
    }

    /// Issue 16 item 2: every diagnostic code serializes to its exact stored string and parses
    /// back from it only; the set is the codes the contract and docs/ document plus the ones
    /// only the engine's rejection paths name, nothing else.
    #[test]
    fn diagnostic_codes_round_trip_to_the_stored_strings() {
        for c in DiagnosticCode::ALL {
            assert_eq!(DiagnosticCode::parse(c.as_str()), Some(c));
            assert_eq!(c.to_string(), c.as_str());
        }
        // mcp-tool-contracts.txt (request-key rules; patchdiff_submit_observed_operations'
        // checks) and host-integration-guide.txt ("Match the label to the action"). docs/
        // structural.md's table of observed checks repeats the observed ones and adds none.
        let contract = [
            "request_key_conflict",
            "invalid_client_request_id",
            "OBSERVATION_REQUIRED",
            "INVALID_OBSERVATION_ID",
            "UNKNOWN_OBSERVATION_ID",
            "OBSERVATION_TARGET_MISMATCH",
            "OBSERVATION_CYCLE_MISMATCH",
            "OBSERVATION_ALREADY_CONSUMED",
            "STALE_OBSERVATION_VERSION",
            "STALE_OBSERVATION_HASH",
            "OPERATION_OUTSIDE_OBSERVED_SCOPE",
            "OBSERVED_INSERTION_GUARDS_REQUIRED",
        ];
        // Named by neither the contract nor docs/ as rejection codes (docs/history.md's
        // invalid_expected_* are save_checkpoint's `code`, docs/sql-api.md's
        // too_many_operations the invalid_argument of a tx/2 list): the engine's own, from
        // submission/submit.rs (request, guard and lineage checks), format/common.rs, tx1.rs,
        // tx2.rs and tx3.rs (record parsing), and submission/scoped.rs (observed batches and
        // scope re-verification, described in its module comment).
        let engine = [
            "CLIENT_REQUEST_ID_REQUIRED",
            "OBSERVED_GUARDS_REQUIRED",
            "invalid_expected_target_version",
            "invalid_expected_current_hash",
            "invalid_attempt",
            "invalid_parent_pdcp_log_id",
            "parent_not_found",
            "parent_target_mismatch",
            "parent_not_rejected",
            "missing_intent",
            "invalid_intent",
            "missing_edits",
            "empty_edits",
            "invalid_edits",
            "invalid_edit",
            "missing_operations",
            "empty_operations",
            "invalid_operations",
            "invalid_operation",
            "missing_groups",
            "empty_groups",
            "invalid_groups",
            "invalid_group",
            "too_many_groups",
            "too_many_operations",
            "missing_replacement",
            "invalid_replacement",
            "OBSERVATION_BUNDLE_MISMATCH",
            "OBSERVED_SCOPE_MISMATCH",
            "OBSERVED_SCOPES_OVERLAP",
            // Issue 19 item 1, drive/changeset.rs: a member not applied because another member
            // of its changeset was rejected (docs/codes.md).
            "changeset_member_rejected",
        ];
        let want: BTreeSet<&str> = contract.into_iter().chain(engine).collect();
        let got: BTreeSet<&str> = DiagnosticCode::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(got, want);
        assert_eq!(got.len(), DiagnosticCode::ALL.len());
        assert_eq!(
            contract.len() + engine.len(),
            want.len(),
            "the lists are disjoint"
        );
        // Codes of other families are not rejection codes.
        for other in ["replacement_too_large", "unknown_argument", "no_op_change"] {
            assert_eq!(DiagnosticCode::parse(other), None, "{other}");
        }
        assert_eq!(DiagnosticCode::parse("observation_required"), None);
    }
}
