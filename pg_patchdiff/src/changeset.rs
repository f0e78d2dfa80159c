//! `patchdiff_submit_changeset` (issue 19 item 1): glue only. The engine parses, locks every
//! member's target in one order, decides every member and writes all or none
//! (`patchdiff_engine::api::drive::submit_changeset`), in the caller's transaction.

use crate::json_text::JsonText;
use crate::{
    Settings, caller_owned_transaction, max_changeset_target_bytes, max_target_bytes,
    strict_observation_mode, with_store,
};
use patchdiff_engine::api::drive;
use pgrx::prelude::*;

/// An ordered list of per-target tx/1 or tx/2 proposals, each with its own guards: every one
/// accepted and applied, or none.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_changeset(args: JsonText) -> JsonText {
    let settings = Settings {
        strict_observation_mode: strict_observation_mode(),
        caller_owned_transaction: caller_owned_transaction(),
        max_target_bytes: max_target_bytes(),
        max_changeset_target_bytes: max_changeset_target_bytes(),
    };
    with_store(|s| drive::submit_changeset(s, &args.0, settings))
}
