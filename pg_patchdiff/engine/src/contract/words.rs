//! The contract's result words as types: every top-level `status` the engine answers with or
//! stores, and every `failure_reason` of a rejected attempt or a failed replay. Stored rows and
//! responses keep the exact strings (`as_str`); the engine decides on the types.

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
}
