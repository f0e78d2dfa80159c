//! Observed submissions (contract "patchdiff_submit_observed_operations"): tx/2 operations
//! confined to server-issued structural observations, in the single form (absolute spans inside
//! one running scope) and the batch form (patchdiff-observed-batch/1: one group per observed
//! scope, each on its own scope-local sequential buffer), and strict observation mode.

/// An observation row as stored in `patchdiff.target_scope_observations`, with its consumption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationRow {
    pub observation_id: String,
    pub target_file_id: String,
    pub editing_cycle_id: String,
    /// Set for observations issued by a bundle (`selections`), with their 1-based ordinal.
    pub observation_bundle_id: Option<String>,
    pub bundle_ordinal: Option<i64>,
    /// The selected symbol's path and kind.
    pub symbol_path: String,
    pub kind: String,
    /// The target state the observation was issued against.
    pub target_version: i64,
    pub target_current_hash: String,
    /// Code points of that state's canonical text, end exclusive.
    pub scope_start: usize,
    pub scope_end: usize,
    /// SHA-256 of the scope's text.
    pub observed_scope_hash: String,
    /// The accepted attempt that consumed it, if any.
    pub consumed_by_pdcp_log_id: Option<String>,
}

/// An observation an accepted attempt consumes: written with the attempt, in group order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservationLink {
    pub observation_id: String,
    /// 1-based group of a batch; `None` for the single form.
    pub group_index: Option<usize>,
}
