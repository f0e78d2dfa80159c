//! patchdiff-engine: the PatchDIFF edit engine.
//!
//! Pure Rust, no PostgreSQL, no I/O, no clock: it takes values and returns values. The
//! `pg_patchdiff` extension parses nothing and decides nothing itself; it locks, reads and
//! writes rows around the calls into this crate.

// A `Rejection` (about 200 bytes: reason, detail, evidence map, contexts) is the expected answer
// to half of all submissions, not an exceptional path, and is built once per call; boxing it
// would add an allocation to every rejection for no measurable gain.
#![allow(clippy::result_large_err)]

mod contract;
mod drive;
mod evidence;
mod format;
mod history;
mod read;
mod scope;
mod submission;
mod target;
mod text;

// The concept tree above is private; what other crates may use is named here, in two places:
// `wire` for the front end and `api` for the extension, the fuzzers, the tests and the
// benchmarks. Each concept folder imports only folders below it (tests/module_cycles.rs).

/// What the front end (patchdiff-mcp) needs from the engine, and nothing else: JSON as the
/// contract counts it, SHA-256 identities, the contract's limits, protocol words, and the
/// argument tables tools/list publishes.
pub mod wire {
    pub use crate::contract::args::quoted_names;
    pub use crate::contract::json::{
        ASCII, CANONICAL, LITERAL, Style, ascii_len, ascii_str_len, is_literal_form,
        literal_str_len, stored_literal, to_string, write_str,
    };
    pub use crate::contract::limits;
    pub use crate::evidence::rejection::collapse_current_context;
    pub use crate::history::checkpoint::WORKSPACE_EOL_FORMATS;
    /// The change feed's payload, as a listener reads it (`LISTEN patchdiff`).
    pub use crate::history::feed;
    pub use crate::text::sha256_hex;

    /// The argument names (and required names) of each tool, by tool family.
    pub mod target {
        pub use crate::target::{INITIALIZE_ARGS, UPLOAD_ARGS};
    }
    pub mod export {
        pub use crate::history::export::EXPORT_ARGS;
    }
    pub mod read {
        pub use crate::read::{FIND_ARGS, READ_TARGET_ARGS};
    }
    pub mod lines {
        pub use crate::read::lines::READ_LINES_ARGS;
    }
    pub mod submit {
        pub use crate::submission::submit::{
            SUBMIT_EDITS_ARGS, SUBMIT_EDITS_REQUIRED, SUBMIT_OPERATIONS_ARGS,
            SUBMIT_OPERATIONS_REQUIRED, SUBMIT_REPLACEMENT_ARGS, SUBMIT_REPLACEMENT_REQUIRED,
        };
    }
    pub mod preview {
        pub use crate::submission::preview::{PREVIEW_ARGS, PREVIEW_REQUIRED};
    }
    pub mod checkpoint {
        pub use crate::history::checkpoint::{SAVE_ARGS, WORKSPACE_EOL_FORMATS};
    }
    pub mod replay {
        pub use crate::history::replay::REPLAY_ARGS;
    }
    pub mod diff {
        pub use crate::history::diff::{
            DIFF_ARGS, DIFF_DEFAULT_CONTEXT, DIFF_DEFAULT_PAGE_BYTES, DIFF_MAX_CONTEXT,
            DIFF_MAX_PAGE_BYTES, DIFF_MIN_PAGE_BYTES,
        };
    }
    pub mod history {
        pub use crate::history::pages::{LEDGER_ARGS, LOG_ARGS};
    }
    /// GNU diff's edit script and hunks, as `patchdiff_diff` prints them: the files profile's
    /// `edit_file` prints them with jsdiff's ranges.
    pub mod unified {
        pub use crate::history::unified::{
            Budget, Change, DiffError, Ranges, changes, lines, print_hunks,
        };
    }
    /// `patchdiff_observe_scope`: issuing observations.
    pub mod observation {
        pub use crate::scope::observation::{
            BUNDLE_SCOPE_MAX_CHARS, BUNDLE_SELECTIONS_MAX, BUNDLE_TEXT_MAX_CHARS, OBSERVE_ARGS,
            SCOPE_CANDIDATES_MAX,
        };
    }
    /// `patchdiff_submit_observed_operations`: scoped submission against observations.
    pub mod scoped {
        pub use crate::submission::scoped::{
            SINGLE_FORM_ARGS, SUBMIT_OBSERVED_ARGS, SUBMIT_OBSERVED_REQUIRED,
        };
    }
    /// `patchdiff_submit_changeset`: its argument names and caps.
    pub mod changeset {
        pub use crate::contract::limits::{
            CHANGESET_MAX_BYTES, CHANGESET_MAX_CHANGES, CHANGESET_MAX_MEMBERS,
        };
        pub use crate::submission::changeset::{SUBMIT_CHANGESET_ARGS, SUBMIT_CHANGESET_REQUIRED};
    }
    /// Protocol words of the formats tools/list describes.
    pub mod tx2 {
        pub use crate::format::tx2::{PROTOCOL, RUNTIME, RUNTIME_SPAN_CONTEXT};
    }
    pub mod tx3 {
        pub use crate::format::tx3::{PROTOCOL, RUNTIME};
    }
}

/// The engine's calls, one namespace per tool family of the SQL API, plus the building blocks
/// the fuzzers, property tests and benchmarks drive directly.
pub mod api {
    pub use crate::contract::{
        args, interrupt, invalid_text, limits, memory, time, utf8, uuid, words,
    };
    pub use crate::evidence::{block, drift, near_miss, rejection, whitespace};
    pub use crate::format::{protocol, sequential, tx1, tx2, tx3};
    pub use crate::history::{checkpoint, diff, export, feed, pages as history, replay, unified};
    pub use crate::read::lines;
    pub use crate::scope::observation;
    pub use crate::submission::{changeset, identity, preview, scoped, submit};
    pub use crate::target::tenancy;

    /// What every transaction format shares (edits, span operations, change facts).
    pub mod format {
        pub use crate::format::common::*;
    }
    /// Canonical text, SHA-256 identities, code-point offsets and exact occurrences.
    pub mod text {
        pub use crate::text::occurrence::{count_occurrences, find_all, for_each_occurrence};
        pub use crate::text::*;
    }
    /// Target lifecycle: initialization facts and metadata responses.
    pub mod target {
        pub use crate::target::*;
    }
    /// `patchdiff_read_target` and `patchdiff_find_occurrences`.
    pub mod read {
        pub use crate::read::*;
    }
    /// Structural scopes: symbols, languages and the parser's pipe protocol (`scope::wire`).
    pub mod scope {
        pub use crate::scope::*;
    }
    /// Every SQL function's sequence, driven over the storage port.
    pub mod drive {
        pub use crate::drive::changeset::submit_changeset;
        pub use crate::drive::diff::diff;
        pub use crate::drive::grants::{grant, list_targets, revoke};
        pub use crate::drive::observation::observe_scope;
        pub use crate::drive::pages::{ledger_page, log_page};
        pub use crate::drive::replay::replay;
        pub use crate::drive::save::save;
        pub use crate::drive::submission::{Route, Settings, TypedEdits, run, unavailable};
        pub use crate::drive::targets::{
            export_target, find_occurrences, get_target, initialize, preview, read_lines,
            read_target,
        };
    }
    /// The storage port: what one call locks, reads and writes, implemented by the extension.
    pub mod store {
        pub use crate::drive::store::*;
    }
}
