//! Guarded operations (patchdiff-tx/2), sole replacement (patchdiff-tx/3), line reads and
//! preview: glue only. The submission tools run the shared locked pipeline
//! (`crate::run_submission`); line reads and preview read one observation of the target without
//! a lock and write nothing.

use crate::json_text::JsonText;
use crate::storage::{self, Caller, Need};
use crate::{Route, out, run_submission, with_target};
use patchdiff_engine::api::args::not_found;
use patchdiff_engine::api::{lines, preview, submit};
use pgrx::prelude::*;

/// Guarded ordered match/span operations (patchdiff-tx/2; runtime patchdiff-mvp-0.3.0, or
/// patchdiff-mvp-0.5.0 when a span carries expected_before/expected_after).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_operations(args: JsonText) -> JsonText {
    run_submission(
        "patchdiff_submit_operations",
        submit::parse_submit_operations(&args.0),
        Route::Unobserved,
    )
}

/// Guarded sole whole-target replacement (patchdiff-tx/3, runtime patchdiff-mvp-0.4.0).
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_replacement(args: JsonText) -> JsonText {
    run_submission(
        "patchdiff_submit_replacement",
        submit::parse_submit_replacement(&args.0),
        Route::Unobserved,
    )
}

/// Bounded inclusive LF line ranges with range-relative and absolute continuation.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_read_lines(args: JsonText) -> JsonText {
    with_target(
        "patchdiff_read_lines",
        &args.0,
        lines::READ_LINES_ARGS,
        lines::parse_read_lines,
        |r, v, _| lines::read_lines(&v, r),
    )
}

/// Read-only advisory evaluation: one plain read of the target (no `FOR UPDATE`), the
/// submission evaluator, no row.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_preview(args: JsonText) -> JsonText {
    let sub = match preview::parse_preview(&args.0) {
        Ok(s) => s,
        Err(e) => return out(&preview::arg_error(&e)),
    };
    let id = sub.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect(
        |c| match storage::targets::target(c, id, caller, Need::Read) {
            None => not_found(id),
            Some(t) => preview::preview(&sub, &t.view()),
        },
    );
    out(&answer)
}
