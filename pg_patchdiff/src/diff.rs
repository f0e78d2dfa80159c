//! `patchdiff_diff` (issue 19, item 3): the unified diff between two versions of one target.
//! Glue only: the engine (`drive::diff`) checks arguments and access order, rebuilds each
//! version from its newest snapshot plus the accepted log, diffs and pages; this file supplies
//! the rows through [`SpiHistory`].

use crate::json_text::JsonText;
use crate::out;
use crate::storage::Caller;
use crate::storage::port::SpiHistory;
use patchdiff_engine::api::drive;
use pgrx::prelude::*;

/// One page of the unified diff (GNU `diff -U<context>` hunks) between `from_version` and
/// `to_version` (default: current) of a target the caller may read. Never writes.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_diff(args: JsonText) -> JsonText {
    // As replay: without a transaction ID every statement runs in the calling statement's
    // snapshot. Versions are immutable history, so a fresh snapshot per statement (a transaction
    // that has written) still rebuilds the same texts; no lock is taken.
    let entered = Caller::enter();
    let mut history = SpiHistory {
        caller: entered.caller,
    };
    let answer = out(&drive::diff(&mut history, &args.0));
    crate::memory::settle();
    answer
}

// Planner settings, as for replay: the accepted log is read in sequence order from its index.
pgrx::extension_sql!(
    r#"
ALTER FUNCTION @extschema@.patchdiff_diff(json) SET enable_sort = off SET enable_incremental_sort = off;
"#,
    name = "diff_planner_settings",
    requires = [patchdiff_diff]
);
