//! `patchdiff_export_target`: the target's text in an explicit line-ending format. Glue only;
//! the engine's `export` module decides the format and shapes the answer.

use crate::json_text::JsonText;
use crate::with_store;
use patchdiff_engine::api::drive;
use pgrx::prelude::*;

/// Exports canonical target text as original_text (default), canonical_lf, crlf or
/// original_eol, with content_eol and content_sha256. Reads without a lock.
#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_export_target(args: JsonText) -> JsonText {
    with_store(|s| drive::export_target(s, &args.0))
}
