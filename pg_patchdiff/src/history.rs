//! Checkpoints, replay and history: `patchdiff_save`, `patchdiff_replay`,
//! `patchdiff_get_pdcp_log` and `patchdiff_get_manifest_ledger`.
//!
//! Glue only: the engine (`checkpoint`, `replay`, `history`) checks arguments, judges guards,
//! replays records and shapes every answer; this file locks, reads and writes through
//! [`crate::storage`].
//! A history page is one read-only statement that reads one index range of at most limit + 1
//! rows and never detoasts a stored record it does not return; replay streams accepted records
//! in bounded batches.

use crate::json_text::JsonText;
use crate::storage::Caller;
use crate::storage::port::SpiHistory;
use crate::{out, with_store};
use patchdiff_engine::api::drive;
use pgrx::prelude::*;

// ---------------------------------------------------------------------------------------------
// patchdiff_save

/// Creates a `save_checkpoint` snapshot, closes the active editing cycle and opens a new one,
/// under the target's row lock; content, version and hash are unchanged. Optional guards
/// `expected_target_version` / `expected_current_hash` are both checked when supplied.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_save(args: JsonText) -> JsonText {
    let owned = crate::workspace_owned_transaction();
    with_store(|s| drive::save(s, &args.0, owned))
}

// ---------------------------------------------------------------------------------------------
// patchdiff_replay

/// Reconstructs the target from its initial snapshot plus its accepted attempts, dispatching
/// each on its recorded (protocol_version, runtime_version), and compares the result with the
/// stored target, all from one consistent state (see the body). Never writes.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_replay(args: JsonText) -> JsonText {
    // One consistent state, without a lock: without a transaction ID (an autocommit call, any
    // read-only transaction, a standby) every statement here runs read-only in the calling
    // statement's snapshot. A transaction that has already written takes a fresh snapshot per
    // statement, so acceptances committed meanwhile can appear among the batches; replay
    // reconstructs the version it read and stops before them (patchdiff_engine's
    // `drive::replay`). It used to hold a share lock on the target there, which a reader could
    // keep until its transaction ended, stopping the owner's edits all that time.
    let entered = Caller::enter();
    let mut history = SpiHistory {
        caller: entered.caller,
    };
    let answer = out(&drive::replay(&mut history, &args.0));
    crate::memory::settle();
    answer
}

// ---------------------------------------------------------------------------------------------
// patchdiff_get_pdcp_log

/// A bounded newest-first page of the target's attempts, accepted and rejected.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_pdcp_log(args: JsonText) -> JsonText {
    with_store(|s| drive::log_page(s, &args.0))
}

// ---------------------------------------------------------------------------------------------
// patchdiff_get_manifest_ledger

/// Accepted manifest ledger entries: the newest page of the active cycle (or of every cycle),
/// displayed oldest first.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_manifest_ledger(args: JsonText) -> JsonText {
    with_store(|s| drive::ledger_page(s, &args.0))
}

// Planner settings of the functions that page through history (see `read`): a sort could only
// ever serve a page by reading the whole range below its cursor.
pgrx::extension_sql!(
    r#"
ALTER FUNCTION @extschema@.patchdiff_get_pdcp_log(json) SET enable_sort = off SET enable_incremental_sort = off;
ALTER FUNCTION @extschema@.patchdiff_get_manifest_ledger(json) SET enable_sort = off SET enable_incremental_sort = off;
ALTER FUNCTION @extschema@.patchdiff_replay(json) SET enable_sort = off SET enable_incremental_sort = off;
"#,
    name = "history_planner_settings",
    requires = [
        patchdiff_get_pdcp_log,
        patchdiff_get_manifest_ledger,
        patchdiff_replay
    ]
);
