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
use crate::out;
use crate::storage::port::{SpiCheckpoints, SpiHistory};
use crate::storage::{self, Caller};
use patchdiff_engine::api::drive;
use patchdiff_engine::api::history;
use pgrx::prelude::*;

// ---------------------------------------------------------------------------------------------
// patchdiff_save

/// Creates a `save_checkpoint` snapshot, closes the active editing cycle and opens a new one,
/// under the target's row lock; content, version and hash are unchanged. Optional guards
/// `expected_target_version` / `expected_current_hash` are both checked when supplied.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_save(args: JsonText) -> JsonText {
    let owned = crate::workspace_owned_transaction();
    let caller = Caller::current();
    let answer = Spi::connect_mut(|client| {
        drive::save(&mut SpiCheckpoints { client, caller }, &args.0, owned)
    });
    out(&answer)
}

// ---------------------------------------------------------------------------------------------
// patchdiff_replay

/// Reconstructs the target from its initial snapshot plus its accepted attempts, dispatching
/// each on its recorded (protocol_version, runtime_version), and compares the result with the
/// stored target, all from one consistent state (see the body). Never writes.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_replay(args: JsonText) -> JsonText {
    // One consistent state: without a transaction ID (an autocommit call, any read-only
    // transaction, a standby) every statement here runs read-only in the calling statement's
    // snapshot. A transaction that has already written takes a fresh snapshot per statement,
    // so there replay holds a share lock on the target: no submission or SAVE can commit to it
    // between the batches.
    // SAFETY: reads the current transaction's state; no pointers involved.
    let has_xid = unsafe { pg_sys::GetCurrentTransactionIdIfAny() } != pg_sys::InvalidTransactionId;
    let mut history = SpiHistory {
        caller: Caller::current(),
        share: has_xid,
    };
    out(&drive::replay(&mut history, &args.0))
}

// ---------------------------------------------------------------------------------------------
// patchdiff_get_pdcp_log

/// A bounded newest-first page of the target's attempts, accepted and rejected.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_pdcp_log(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_get_pdcp_log";
    let q = match history::parse_log(&args.0) {
        Ok(q) => q,
        Err(e) => return out(&history::invalid(&e, TOOL)),
    };
    let id = q.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect(|c| {
        if storage::targets::readable_cycle(c, id, caller).is_none() {
            return history::not_found(id);
        }
        let rows = storage::attempts::log_page(c, &q);
        let shown = rows.len().min(q.page.limit);
        let contents = if q.include_content {
            history::content_plan(&rows[..shown])
                .into_iter()
                .zip(&rows)
                .map(|(keep, r)| keep.then(|| storage::attempts::record(c, &r.pdcp_log_id)))
                .collect()
        } else {
            Vec::new()
        };
        history::log_page(&q.page, rows, q.include_content, contents)
    });
    out(&answer)
}

// ---------------------------------------------------------------------------------------------
// patchdiff_get_manifest_ledger

/// Accepted manifest ledger entries: the newest page of the active cycle (or of every cycle),
/// displayed oldest first.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_manifest_ledger(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_get_manifest_ledger";
    let q = match history::parse_ledger(&args.0) {
        Ok(q) => q,
        Err(e) => return out(&history::invalid(&e, TOOL)),
    };
    let id = q.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect(|c| {
        let Some(cycle) = storage::targets::readable_cycle(c, id, caller) else {
            return history::not_found(id);
        };
        let scope = if q.include_previous_cycles {
            id
        } else {
            cycle.as_str()
        };
        let rows = storage::ledger::ledger_page(
            c,
            scope,
            q.include_previous_cycles,
            q.page.max_sequence,
            q.page.fetch(),
        );
        history::ledger_page(&q.page, rows)
    });
    out(&answer)
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
