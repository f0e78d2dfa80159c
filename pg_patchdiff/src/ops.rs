//! Guarded operations (patchdiff-tx/2), sole replacement (patchdiff-tx/3), line reads and
//! preview: glue only. The submission tools run the engine's locked sequence
//! (`crate::run_submission`); line reads and preview read one observation of the target without
//! a lock and write nothing.

use crate::json_text::JsonText;
use crate::{Route, run_submission, with_store};
use patchdiff_engine::api::{drive, submit};
use pgrx::prelude::*;

/// Guarded ordered match/span operations (patchdiff-tx/2; runtime patchdiff-mvp-0.3.0, or
/// patchdiff-mvp-0.5.0 when a span carries expected_before/expected_after).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_operations(args: JsonText) -> JsonText {
    run_submission(
        "patchdiff_submit_operations",
        submit::parse_submit_operations(&args.0),
        Route::Unobserved,
    )
}

/// Guarded sole whole-target replacement (patchdiff-tx/3, runtime patchdiff-mvp-0.4.0).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_replacement(args: JsonText) -> JsonText {
    run_submission(
        "patchdiff_submit_replacement",
        submit::parse_submit_replacement(&args.0),
        Route::Unobserved,
    )
}

/// Bounded inclusive LF line ranges with range-relative and absolute continuation.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_read_lines(args: JsonText) -> JsonText {
    with_store(|s| drive::read_lines(s, &args.0))
}

/// Read-only advisory evaluation: one plain read of the target (no `FOR UPDATE`), the
/// submission evaluator, no row.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_preview(args: JsonText) -> JsonText {
    with_store(|s| drive::preview(s, &args.0, crate::max_target_bytes()))
}
