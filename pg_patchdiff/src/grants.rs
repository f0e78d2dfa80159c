//! `patchdiff_grant`, `patchdiff_revoke` and `patchdiff_list_targets`: glue only. Who may touch
//! what is decided in the statements of [`crate::storage::access`]; the engine parses the
//! arguments, runs each call's sequence and shapes every answer.

use crate::json_text::JsonText;
use crate::with_store;
use patchdiff_engine::api::drive;
use pgrx::prelude::*;

/// Gives a role `read` or `write` (which includes read) on a target the caller owns. A second
/// grant to the same role replaces the first.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_grant(args: JsonText) -> JsonText {
    with_store(|s| drive::grant(s, &args.0))
}

/// Takes a grant back: `privilege: "write"` leaves read; `"read"`, null or omitted remove the
/// role's grant on the target. Ownership and administration are not grants and stay.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_revoke(args: JsonText) -> JsonText {
    with_store(|s| drive::revoke(s, &args.0))
}

/// The targets the caller may read, newest first, in bounded pages.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_list_targets(args: JsonText) -> JsonText {
    with_store(|s| drive::list_targets(s, &args.0))
}

// Never compiled by JIT: a listing reads at most a page per role of the caller, but PostgreSQL
// estimates the statement of a caller with many roles (storage::grants::list_mine_sql) at a
// page's worth of rows for every one of them, past `jit_above_cost`, and then spent 450 ms
// compiling a statement that ran in 8 ms (2,001 roles). (A setting of the function also makes
// PostgreSQL undo at its end whatever it set itself, which storage::grants::list_targets relies
// on.) The upgrade script sets the same.
pgrx::extension_sql!(
    r#"
ALTER FUNCTION @extschema@.patchdiff_list_targets(json) SET jit = off;
"#,
    name = "list_planner_settings",
    requires = [patchdiff_list_targets]
);
