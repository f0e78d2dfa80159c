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
}
