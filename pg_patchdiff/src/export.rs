//! `patchdiff_export_target`: the target's text in an explicit line-ending format. Glue only;
//! the engine's `export` module decides the format and shapes the answer.

use crate::json_text::JsonText;
use crate::storage::{self, Caller, Need};
use patchdiff_engine::api::args::{Args, not_found};
use patchdiff_engine::api::export::{EXPORT_ARGS, parse_format};
use patchdiff_engine::wire::{LITERAL, to_string};
use pgrx::prelude::*;

/// Exports canonical target text as original_text (default), canonical_lf, crlf or
/// original_eol, with content_eol and content_sha256. Reads without a lock.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_export_target(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_export_target";
    let parsed = Args::parse(&args.0, EXPORT_ARGS, &["target_file_id"])
        .and_then(|a| Ok((a.target_file_id()?, parse_format(&a)?)));
    let answer = match parsed {
        Err(e) => e.to_json(TOOL),
        Ok((id, format)) => Spi::connect(|c| {
            match storage::targets::target(c, &id, Caller::current(), Need::Read) {
                None => not_found(&id),
                Some(t) => t.export(format).unwrap_or_else(|e| e.to_json(TOOL)),
            }
        }),
    };
    JsonText(to_string(&answer, LITERAL))
}
