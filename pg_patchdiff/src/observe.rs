//! `patchdiff_observe_scope`: glue, and the outline of a target version (parsed once per
//! backend, the "resident" mode) that the engine's sequence (`drive::observe_scope`) asks the
//! storage port for.

use crate::json_text::JsonText as JsonString;
use crate::{parser, with_store};
use patchdiff_engine::api::drive;
use patchdiff_engine::api::scope::{Language, Outline};
use patchdiff_engine::api::store::NoOutline;
use patchdiff_engine::api::target::TargetView;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::rc::Rc;

/// Outlines kept per backend: the front end holds one connection, and an agent observes the
/// same version several times (list, select, bundle) before it commits.
const RESIDENT_OUTLINES: usize = 8;

/// ... and at most this many bytes of them (issue 14: memory a backend keeps after a call is
/// bounded). An outline at its caps is about 45 MB; eight of those would be held for the life of
/// the connection. The least recently used go first, and an outline larger than the budget on
/// its own is used for its call and not kept.
const RESIDENT_MAX_BYTES: usize = 64 << 20;

/// A target version and the parser limits its outline was asked for under.
type OutlineKey = (String, i64, String, parser::LimitsKey);

/// What the backend keeps of a version: its outline, or why it has none.
#[derive(Clone)]
enum Kept {
    Outline(Rc<Outline>),
    /// A limit or a crash the text caused (never a helper stopped from outside or that could
    /// not be started, a call that found no parse slot, nor a limit that may be the host's or the
    /// helper's history: [`parser::Unavailable::NotKept`]): the same version under the same limits gives the same
    /// answer, so asking again only spends the parse again (helper-55: 10 s of CPU for each call
    /// on 100 KB of `\` lines of Python).
    Unavailable(parser::Unavailable),
}

/// Whether an answer without an outline was found now or kept from an earlier call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    Now,
    Kept,
}

thread_local! {
    static RESIDENT: RefCell<Vec<(OutlineKey, Kept, usize)>> =
        const { RefCell::new(Vec::new()) };
}

/// The heap an outline holds, near enough: its symbols and their strings.
fn outline_bytes(o: &Outline) -> usize {
    o.symbols.iter().fold(
        o.symbols.capacity() * std::mem::size_of::<patchdiff_engine::api::scope::Symbol>(),
        |n, s| {
            n + s.name.capacity()
                + s.path.capacity()
                + s.parent.as_ref().map_or(0, String::capacity)
        },
    )
}

/// Keeps `kept` for `key`, the least recently used going first past the count or the bytes.
fn keep(key: OutlineKey, kept: Kept, size: usize) {
    if size > RESIDENT_MAX_BYTES {
        return;
    }
    RESIDENT.with(|r| {
        let mut r = r.borrow_mut();
        while !r.is_empty()
            && (r.len() >= RESIDENT_OUTLINES
                || r.iter().map(|e| e.2).sum::<usize>() + size > RESIDENT_MAX_BYTES)
        {
            r.remove(0);
        }
        r.push((key, kept, size));
    });
}

/// The outline of this target version: from the backend's resident cache, or made now by the
/// parser helper (crate::parser). Parsing holds no lock: other targets, and readers of this
/// one, go on meanwhile. A version whose text passed a parser limit or crashed the helper is
/// kept as that answer, and not parsed again while the limits stay as they were.
fn outline_of(
    t: &TargetView,
    language: Language,
    role: pg_sys::Oid,
) -> Result<Rc<Outline>, (parser::Unavailable, Seen)> {
    let key: OutlineKey = (
        t.target_file_id.to_owned(),
        t.version,
        t.current_hash.to_owned(),
        parser::limits_key(),
    );
    if let Some(hit) = RESIDENT.with(|r| {
        let mut r = r.borrow_mut();
        let at = r.iter().position(|(k, _, _)| *k == key)?;
        let entry = r.remove(at);
        let kept = entry.1.clone();
        r.push(entry);
        Some(kept)
    }) {
        return match hit {
            Kept::Outline(o) => Ok(o),
            Kept::Unavailable(why) => Err((why, Seen::Kept)),
        };
    }
    match parser::outline(language, Some(t.target_file_id), t.content, role) {
        Ok(o) => {
            let o = Rc::new(o);
            keep(key, Kept::Outline(o.clone()), outline_bytes(&o));
            Ok(o)
        }
        Err(why) => {
            if !matches!(
                why,
                parser::Unavailable::Stopped(_)
                    | parser::Unavailable::Busy
                    | parser::Unavailable::NotKept(_)
                    | parser::Unavailable::NotStarted(_)
            ) {
                keep(key, Kept::Unavailable(why.clone()), 0);
            }
            Err((why, Seen::Now))
        }
    }
}

/// The outline of this target version as the storage port offers it; a helper that crashed is
/// logged here, with the target and the grammar, and answered as [`NoOutline::Crashed`].
pub(crate) fn outline(
    t: &TargetView,
    language: Language,
    role: pg_sys::Oid,
) -> Result<Rc<Outline>, NoOutline> {
    // Logged once, when it happens: an answer kept with the version is not news (helper-83:
    // one connection logged the same crash 114 times).
    let log = |seen: Seen, detail: &str| {
        if seen == Seen::Now {
            pgrx::warning!(
                "pg_patchdiff: {detail} (target {}, {})",
                t.target_file_id,
                language.grammar()
            );
        }
    };
    outline_of(t, language, role).map_err(|(why, seen)| match why {
        parser::Unavailable::Crashed(detail) => {
            log(seen, &detail);
            NoOutline::Crashed
        }
        parser::Unavailable::Stopped(detail) => {
            log(seen, &detail);
            NoOutline::Stopped
        }
        parser::Unavailable::Limit(l) => NoOutline::Limit(l),
        parser::Unavailable::NotStarted(e) => NoOutline::NotStarted(e),
        parser::Unavailable::Busy => NoOutline::Busy,
        parser::Unavailable::NotKept(l) => NoOutline::Limit(l),
    })
}

/// Structural observation: candidates, an exact selection, a page of an observation, or a bundle.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_observe_scope(args: JsonString) -> JsonString {
    with_store(|s| drive::observe_scope(s, &args.0))
}
