//! The tools this front end serves, one typed word each. A request's tool name is parsed once
//! into a [`Tool`]; everything after that (the profile check, the front end's own steps around
//! the SQL call, the presentation) matches on the variant, never on the name.

/// Which part of the contract a tool belongs to. The catalog declares each family in a module
/// of its own (crate::catalog), in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Creating and fetching whole targets.
    Targets,
    /// Authoritative reads of a target's text.
    Reads,
    /// Guarded unobserved submissions and their read-only preview.
    Submissions,
    /// The checkpoint (SAVE), which the workspace profiles also publish through.
    Save,
    /// Replay and the history pages.
    History,
    /// Structural observation and scoped submission.
    Observed,
    /// The observed_v2 aliases (observed-editor-v2.txt): each routes to one mode of an
    /// Observed tool's SQL function, and no other profile lists them.
    ObservedV2,
    /// Beyond the contract (issue 19), listed only by the `extended` profile: calls across
    /// targets (changesets) and across versions (diffs).
    Extended,
    /// Beyond the contract (issue 19), listed only by the `files` profile: the reference
    /// filesystem server's tool names and argument shapes.
    Files,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tool {
    InitializeTarget,
    HandleUpload,
    GetTarget,
    ExportTarget,
    ReadTarget,
    ReadLines,
    FindOccurrences,
    SubmitEdits,
    SubmitOperations,
    SubmitReplacement,
    Preview,
    Save,
    Replay,
    GetPdcpLog,
    GetManifestLedger,
    ObserveScope,
    SubmitObservedOperations,
    ListScopes,
    ObserveScopes,
    CommitBundle,
    SubmitChangeset,
    /// Issue 19, item 3: `patchdiff_diff` (Family::Extended).
    Diff,
    /// The `files` profile (issue 19 item 4): the reference filesystem server's tools.
    ReadFile,
    EditFile,
    WriteFile,
}

impl Tool {
    /// Every tool, in catalog order (the order of `tools/list`).
    pub const ALL: [Tool; 25] = [
        Tool::InitializeTarget,
        Tool::HandleUpload,
        Tool::GetTarget,
        Tool::ExportTarget,
        Tool::ReadTarget,
        Tool::ReadLines,
        Tool::FindOccurrences,
        Tool::SubmitEdits,
        Tool::SubmitOperations,
        Tool::SubmitReplacement,
        Tool::Preview,
        Tool::Save,
        Tool::Replay,
        Tool::GetPdcpLog,
        Tool::GetManifestLedger,
        Tool::ObserveScope,
        Tool::SubmitObservedOperations,
        Tool::ListScopes,
        Tool::ObserveScopes,
        Tool::CommitBundle,
        Tool::SubmitChangeset,
        Tool::Diff,
        Tool::ReadFile,
        Tool::EditFile,
        Tool::WriteFile,
    ];

    /// The tool's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            Tool::InitializeTarget => "patchdiff_initialize_target",
            Tool::HandleUpload => "patchdiff_handle_upload",
            Tool::GetTarget => "patchdiff_get_target",
            Tool::ExportTarget => "patchdiff_export_target",
            Tool::ReadTarget => "patchdiff_read_target",
            Tool::ReadLines => "patchdiff_read_lines",
            Tool::FindOccurrences => "patchdiff_find_occurrences",
            Tool::SubmitEdits => "patchdiff_submit_edits",
            Tool::SubmitOperations => "patchdiff_submit_operations",
            Tool::SubmitReplacement => "patchdiff_submit_replacement",
            Tool::Preview => "patchdiff_preview",
            Tool::Save => "patchdiff_save",
            Tool::Replay => "patchdiff_replay",
            Tool::GetPdcpLog => "patchdiff_get_pdcp_log",
            Tool::GetManifestLedger => "patchdiff_get_manifest_ledger",
            Tool::ObserveScope => "patchdiff_observe_scope",
            Tool::SubmitObservedOperations => "patchdiff_submit_observed_operations",
            Tool::ListScopes => "patchdiff_list_scopes",
            Tool::ObserveScopes => "patchdiff_observe_scopes",
            Tool::CommitBundle => "patchdiff_commit_bundle",
            Tool::SubmitChangeset => "patchdiff_submit_changeset",
            Tool::ReadFile => "read_file",
            Tool::EditFile => "edit_file",
            Tool::WriteFile => "write_file",
            Tool::Diff => "patchdiff_diff",
        }
    }

    /// The tool a wire name names, if any.
    pub fn parse(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub const fn family(self) -> Family {
        match self {
            Tool::InitializeTarget | Tool::HandleUpload | Tool::GetTarget | Tool::ExportTarget => {
                Family::Targets
            }
            Tool::ReadTarget | Tool::ReadLines | Tool::FindOccurrences => Family::Reads,
            Tool::SubmitEdits
            | Tool::SubmitOperations
            | Tool::SubmitReplacement
            | Tool::Preview => Family::Submissions,
            Tool::Save => Family::Save,
            Tool::Replay | Tool::GetPdcpLog | Tool::GetManifestLedger => Family::History,
            Tool::ObserveScope | Tool::SubmitObservedOperations => Family::Observed,
            Tool::ListScopes | Tool::ObserveScopes | Tool::CommitBundle => Family::ObservedV2,
            Tool::SubmitChangeset => Family::Extended,
            Tool::ReadFile | Tool::EditFile | Tool::WriteFile => Family::Files,
            Tool::Diff => Family::Extended,
        }
    }

    /// The tool whose SQL function a call of this one makes: itself, except for the observed_v2
    /// aliases, whose results are also presented as that tool's.
    pub const fn routes_to(self) -> Tool {
        match self {
            Tool::ListScopes | Tool::ObserveScopes => Tool::ObserveScope,
            Tool::CommitBundle => Tool::SubmitObservedOperations,
            t => t,
        }
    }

    /// The SQL function one call of this tool makes. A file tool (docs/files.md) makes
    /// several, inside one transaction; this names the one that does its work, which must be
    /// installed for the tool to be listed.
    pub const fn function(self) -> &'static str {
        match self {
            Tool::ReadFile => "patchdiff_initialize_target",
            Tool::EditFile => "patchdiff_submit_edits",
            Tool::WriteFile => "patchdiff_submit_replacement",
            t => t.routes_to().name(),
        }
    }

    /// An observed_v2 selection whose result gains its `snapshot`.
    pub const fn returns_snapshot(self) -> bool {
        matches!(self, Tool::ObserveScopes)
    }

    /// A commit that answers with its own bounded receipt, the same in both response modes
    /// (observed-editor-v2.txt).
    pub const fn answers_with_receipt(self) -> bool {
        matches!(self, Tool::CommitBundle)
    }

    /// Compact mode projects this tool's successful results (contract "External response
    /// representations"): the observed tools, and the observed_v2 selections that route to one;
    /// not a commit that answers with its receipt.
    pub const fn compact_projected(self) -> bool {
        matches!(
            self.routes_to(),
            Tool::ObserveScope | Tool::SubmitObservedOperations
        ) && !self.answers_with_receipt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 16 item 4: a name parses to exactly one tool and back; unknown names parse to none.
    #[test]
    fn names_parse_to_their_tool() {
        for t in Tool::ALL {
            assert_eq!(Tool::parse(t.name()), Some(t));
        }
        let mut names: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Tool::ALL.len());
        for n in [
            "",
            "patchdiff_nope",
            "PATCHDIFF_SAVE",
            "patchdiff_save ",
            "save",
        ] {
            assert_eq!(Tool::parse(n), None, "{n:?}");
        }
    }

    /// The aliases call the SQL functions observed-editor-v2.txt routes them to; every other
    /// tool calls the function of its own name.
    #[test]
    fn functions() {
        for t in Tool::ALL {
            let expected = match t {
                Tool::ListScopes | Tool::ObserveScopes => "patchdiff_observe_scope",
                Tool::CommitBundle => "patchdiff_submit_observed_operations",
                Tool::ReadFile => "patchdiff_initialize_target",
                Tool::EditFile => "patchdiff_submit_edits",
                Tool::WriteFile => "patchdiff_submit_replacement",
                t => t.name(),
            };
            assert_eq!(t.function(), expected, "{t:?}");
            assert_eq!(t.family() == Family::ObservedV2, t.routes_to() != t);
        }
        let projected: Vec<Tool> = Tool::ALL
            .into_iter()
            .filter(|t| t.compact_projected())
            .collect();
        assert_eq!(
            projected,
            [
                Tool::ObserveScope,
                Tool::SubmitObservedOperations,
                Tool::ListScopes,
                Tool::ObserveScopes
            ]
        );
    }
}
