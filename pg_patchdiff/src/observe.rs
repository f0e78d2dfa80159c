//! `patchdiff_observe_scope`: the outline of a target version (parsed once per backend, the
//! "resident" mode), candidate discovery, and the observations it persists.

use crate::json_text::JsonText as JsonString;
use crate::storage::{self, Caller, Need};
use crate::{new_id, out, parser};
use patchdiff_engine::api::args::Args;
use patchdiff_engine::api::drive;
use patchdiff_engine::api::observation::{
    self as observe, EngineFacts, OBSERVE_ARGS, ObserveRequest, Page, ScopeView,
};
use patchdiff_engine::api::scope::{Language, Outline, language_for};
use patchdiff_engine::api::target::TargetView;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;
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

type OutlineKey = (String, i64, String);

thread_local! {
    static RESIDENT: RefCell<Vec<(OutlineKey, Rc<Outline>, usize)>> =
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

/// The outline of this target version: from the backend's resident cache, or made now by the
/// parser helper (crate::parser). Parsing holds no lock: other targets, and readers of this
/// one, go on meanwhile.
fn outline_of(t: &TargetView, language: Language) -> Result<Rc<Outline>, parser::Unavailable> {
    let key: OutlineKey = (
        t.target_file_id.to_owned(),
        t.version,
        t.current_hash.to_owned(),
    );
    if let Some(hit) = RESIDENT.with(|r| {
        let mut r = r.borrow_mut();
        let at = r.iter().position(|(k, _, _)| *k == key)?;
        let entry = r.remove(at);
        let o = entry.1.clone();
        r.push(entry);
        Some(o)
    }) {
        return Ok(hit);
    }
    let o = Rc::new(parser::outline(language, t.content)?);
    let size = outline_bytes(&o);
    if size <= RESIDENT_MAX_BYTES {
        RESIDENT.with(|r| {
            let mut r = r.borrow_mut();
            while !r.is_empty()
                && (r.len() >= RESIDENT_OUTLINES
                    || r.iter().map(|e| e.2).sum::<usize>() + size > RESIDENT_MAX_BYTES)
            {
                r.remove(0);
            }
            r.push((key, o.clone(), size));
        });
    }
    Ok(o)
}

fn facts(o: &Outline) -> EngineFacts<'_> {
    EngineFacts {
        language: o.language,
        engine: o.engine,
        grammar: o.grammar,
    }
}

const TOOL: &str = "patchdiff_observe_scope";

/// Structural observation: candidates, an exact selection, a page of an observation, or a bundle.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_observe_scope(args: JsonString) -> JsonString {
    let parsed = Args::parse(&args.0, OBSERVE_ARGS, &["target_file_id"])
        .and_then(|a| Ok((a.target_file_id()?, observe::parse_observe(&a)?)));
    let (id, request) = match parsed {
        Ok(p) => p,
        Err(e) => return out(&e.to_json(TOOL)),
    };
    // Candidates and pages only read; a selection or a bundle issues observations, the authority
    // an observed write needs, so it needs write.
    let need = match request {
        ObserveRequest::Candidates { .. } | ObserveRequest::Page { .. } => Need::Read,
        ObserveRequest::Select { .. } | ObserveRequest::Bundle { .. } => Need::Write,
    };
    let caller = Caller::current();
    let answer = Spi::connect_mut(|c| {
        let Some(t) = storage::targets::target(c, &id, caller, need) else {
            return drive::unavailable(&id, need == Need::Write, || {
                storage::targets::readable(c, &id, caller)
            });
        };
        let v = t.view();
        let cycle = t.active_editing_cycle_id.as_str();
        if let ObserveRequest::Page {
            observation_id,
            page,
        } = &request
        {
            return scope_page(c, &v, cycle, observation_id, *page, caller);
        }
        let Some(language) = language_for(&t.filename, &t.target_type) else {
            return observe::unsupported(&v, &t.filename, &t.target_type);
        };
        let o = match outline_of(&v, language) {
            Ok(o) => o,
            Err(why) => {
                let why = match &why {
                    parser::Unavailable::Crashed(detail) => {
                        pgrx::warning!(
                            "pg_patchdiff: {detail} (target {id}, {})",
                            language.grammar()
                        );
                        observe::Unavailable::ParserCrashed
                    }
                    parser::Unavailable::Limit(l) => observe::Unavailable::ParserLimit(*l),
                    parser::Unavailable::NotStarted(e) => observe::Unavailable::ParserNotStarted(e),
                };
                return observe::structure_unavailable(&v, language, why);
            }
        };
        match request {
            ObserveRequest::Candidates { query, kind } => {
                observe::candidates(&v, &o, query.as_deref(), kind.as_deref())
            }
            ObserveRequest::Select { selection, page } => {
                let symbol = match observe::select_one(&v, &o, &selection) {
                    Ok(s) => s,
                    Err(answer) => return answer,
                };
                let hash = observe::scope_hashes(v.content, &[symbol]).remove(0);
                let scope = ScopeView::of(symbol, new_id(), None, hash);
                // The page is checked before the observation is written: a bad offset writes nothing.
                let answer =
                    match observe::observed(&v, facts(&o), cycle, &scope, page, "selection") {
                        Ok(a) => a,
                        Err(e) => return e.to_json(TOOL),
                    };
                issue(c, &v, &o, cycle, &scope, &selection, None);
                answer
            }
            ObserveRequest::Bundle { selections, page } => {
                let symbols = match observe::select_bundle(&v, &o, &selections, page) {
                    Ok(s) => s,
                    Err(answer) => return answer,
                };
                let hashes = observe::scope_hashes(v.content, &symbols);
                let bundle_id = new_id();
                let scopes: Vec<ScopeView> = symbols
                    .iter()
                    .zip(hashes)
                    .enumerate()
                    .map(|(i, (s, h))| ScopeView::of(s, new_id(), Some(i + 1), h))
                    .collect();
                for (scope, sel) in scopes.iter().zip(&selections) {
                    let ordinal = scope.ordinal.map_or(0, |n| i32::try_from(n).unwrap_or(0));
                    issue(c, &v, &o, cycle, scope, sel, Some((&bundle_id, ordinal)));
                }
                observe::observed_batch(&v, &o, cycle, &bundle_id, &scopes, page)
            }
            ObserveRequest::Page { .. } => unreachable!("answered above"),
        }
    });
    out(&answer)
}

/// Persists one observation of `scope`, selected by `sel`, from outline `o` of `v`.
fn issue(
    c: &mut SpiClient,
    v: &TargetView,
    o: &Outline,
    cycle: &str,
    scope: &ScopeView,
    sel: &observe::Selection,
    bundle: Option<(&str, i32)>,
) {
    storage::observations::insert_observation(
        c,
        &storage::observations::NewObservation {
            observation_id: &scope.observation_id,
            target_file_id: v.target_file_id,
            editing_cycle_id: cycle,
            bundle,
            target_version: v.version,
            target_current_hash: v.current_hash,
            scope,
            requested_name: &sel.symbol_name,
            requested_kind: sel.kind.as_deref(),
            language: o.language,
            engine: o.engine,
            grammar: o.grammar,
        },
    );
}

/// A page of an issued observation: only while its cycle is active and its version current.
fn scope_page(
    c: &mut SpiClient,
    v: &TargetView,
    active_cycle: &str,
    observation_id: &str,
    page: Page,
    caller: Caller,
) -> Value {
    let Some(stored) = storage::observations::observation(c, observation_id, caller) else {
        return observe::unknown_observation(observation_id);
    };
    let r = &stored.row;
    if let Some(refusal) = observe::page_refusal(
        v,
        observation_id,
        active_cycle,
        &r.target_file_id,
        &r.editing_cycle_id,
        r.target_version,
        &r.target_current_hash,
    ) {
        return refusal;
    }
    let scope = ScopeView {
        observation_id: r.observation_id.clone(),
        ordinal: r.bundle_ordinal.and_then(|n| usize::try_from(n).ok()),
        symbol_name: r.symbol_path.clone(),
        kind: r.kind.clone(),
        parent: stored.parent.clone(),
        scope_start: r.scope_start,
        scope_end: r.scope_end,
        scope_start_line: stored.scope_start_line,
        scope_end_line: stored.scope_end_line,
        observed_scope_hash: r.observed_scope_hash.clone(),
    };
    let facts = EngineFacts {
        language: &stored.language,
        engine: &stored.engine,
        grammar: &stored.grammar,
    };
    observe::observed(v, facts, &r.editing_cycle_id, &scope, page, "scope_page")
        .unwrap_or_else(|e| e.to_json(TOOL))
}
