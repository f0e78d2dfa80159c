//! Target creation and the read tools over [`Targets`] and [`Reads`]: arguments (all of them
//! before the target is looked up), the target the caller may read, the answer.

use crate::contract::args::{ArgError, Args, not_found, target_too_large};
use crate::contract::interrupt;
use crate::drive::store::{Reads, StoredTarget, Targets};
use crate::history::export;
use crate::read::{self, lines};
use crate::submission::{identity, preview};
use crate::target::{self, TargetMeta, TargetView};
use serde_json::{Value, json};

/// `patchdiff_initialize_target` (`upload`: `patchdiff_handle_upload`): LF canonicalization,
/// recorded source line endings, version 0, an active editing cycle and the initial snapshot.
/// A canonical text over `max_bytes` (`patchdiff.max_target_bytes`) is `target_too_large`, and
/// nothing is written.
pub fn initialize(
    store: &mut impl Targets,
    tool: &str,
    args: &str,
    upload: bool,
    max_bytes: usize,
) -> Value {
    let t = match target::parse_initialize(args, upload) {
        Ok(t) => t,
        Err(e) => return e.to_json(tool),
    };
    if let Some(e) = target_too_large(t.canonical.len(), 0, max_bytes) {
        return e.to_json(tool);
    }
    let (id, cycle, snapshot) = (store.new_target_id(), store.new_id(), store.new_id());
    if !store.insert_target(&t, &id, &cycle, &snapshot) {
        return target::binding_nonce_taken().to_json(tool);
    }
    target::initialized_response(&t, &id, &cycle)
}

/// Parses a read tool's arguments, all of them before the target is looked up, then runs `f`
/// on the target; or answers `invalid_argument` / `not_found`.
fn with_target<R>(
    store: &mut impl Reads,
    tool: &str,
    args: &str,
    allowed: &[&str],
    parse: impl FnOnce(&Args) -> Result<R, ArgError>,
    f: impl FnOnce(R, TargetView, &StoredTarget) -> Result<Value, ArgError>,
) -> Value {
    let parsed = Args::parse(args, allowed, &["target_file_id"])
        .and_then(|a| Ok((a.target_file_id()?, parse(&a)?)));
    let (id, request) = match parsed {
        Ok(p) => p,
        Err(e) => return e.to_json(tool),
    };
    match store.target(&id) {
        None => not_found(&id),
        Some(t) => {
            // Reading a text of up to 64 MiB (its detoasting and copy) checks for no interrupt
            // inside; a cancel that came meanwhile is served before the answer is built.
            interrupt::check();
            f(request, t.view(), &t).unwrap_or_else(|e| e.to_json(tool))
        }
    }
}

/// `patchdiff_get_target`.
pub fn get_target(store: &mut impl Reads, args: &str) -> Value {
    let allowed = &["target_file_id"];
    with_target(
        store,
        "patchdiff_get_target",
        args,
        allowed,
        |_| Ok(()),
        |(), v, t| {
            let meta = TargetMeta {
                filename: &t.filename,
                target_type: &t.target_type,
                active_editing_cycle_id: &t.active_editing_cycle_id,
                source_line_endings: t.line_endings(),
            };
            Ok(target::get_target_response(&v, &meta))
        },
    )
}

/// `patchdiff_read_target`.
pub fn read_target(store: &mut impl Reads, args: &str) -> Value {
    with_target(
        store,
        "patchdiff_read_target",
        args,
        read::READ_TARGET_ARGS,
        read::parse_read_target,
        |r, v, _| read::read_target(&v, r),
    )
}

/// `patchdiff_find_occurrences`.
pub fn find_occurrences(store: &mut impl Reads, args: &str) -> Value {
    with_target(
        store,
        "patchdiff_find_occurrences",
        args,
        read::FIND_ARGS,
        read::parse_find,
        |r, v, _| Ok(read::find_occurrences(&v, &r)),
    )
}

/// `patchdiff_read_lines`.
pub fn read_lines(store: &mut impl Reads, args: &str) -> Value {
    with_target(
        store,
        "patchdiff_read_lines",
        args,
        lines::READ_LINES_ARGS,
        lines::parse_read_lines,
        |r, v, _| lines::read_lines(&v, r),
    )
}

/// `patchdiff_export_target`.
pub fn export_target(store: &mut impl Reads, args: &str) -> Value {
    with_target(
        store,
        "patchdiff_export_target",
        args,
        export::EXPORT_ARGS,
        export::parse_format,
        |format, _, t| t.export(format),
    )
}

/// `patchdiff_preview`: the submission evaluator over one plain read of the target; no row.
pub fn preview(store: &mut impl Reads, args: &str, max_target_bytes: usize) -> Value {
    let sub = match preview::parse_preview(args) {
        Ok(s) => s,
        Err(e) => {
            return match &e.malformed_target {
                Some(m) => preview::bound(identity::preview_rejection(
                    &identity::malformed(m, None),
                    m.runtime_version,
                )),
                None => preview::arg_error(&e),
            };
        }
    };
    let id = sub.target_file_id.as_str();
    match store.target(id) {
        None => {
            let sent = json!(id);
            let call = identity::Call {
                failure: identity::Failure::TargetNotFound,
                target_file_id: &sent,
                format: sub.protocol_version,
                client_request_id: &Value::Null,
                correlation_id: None,
            };
            preview::bound(identity::preview_rejection(&call, sub.runtime_version))
        }
        Some(t) => preview::preview_within(&sub, &t.view(), max_target_bytes),
    }
}
