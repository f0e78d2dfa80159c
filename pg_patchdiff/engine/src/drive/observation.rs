//! `patchdiff_observe_scope` over [`Observations`]: candidates, an exact selection, a page of an
//! issued observation, or a bundle.

use crate::contract::args::Args;
use crate::drive::store::{NewObservation, NoOutline, Observations};
use crate::drive::submission::unavailable;
use crate::scope::observation::{
    self as observe, EngineFacts, OBSERVE_ARGS, ObserveRequest, Page, ScopeView, Selection,
};
use crate::scope::{Outline, language_for};
use crate::target::TargetView;
use serde_json::Value;

const TOOL: &str = "patchdiff_observe_scope";

fn facts(o: &Outline) -> EngineFacts<'_> {
    EngineFacts {
        language: o.language,
        engine: o.engine,
        grammar: o.grammar,
    }
}

/// Structural observation: candidates, an exact selection, a page of an observation, or a bundle.
pub fn observe_scope(store: &mut impl Observations, args: &str) -> Value {
    let parsed = Args::parse(args, OBSERVE_ARGS, &["target_file_id"])
        .and_then(|a| Ok((a.target_file_id()?, observe::parse_observe(&a)?)));
    let (id, request) = match parsed {
        Ok(p) => p,
        Err(e) => return e.to_json(TOOL),
    };
    // Candidates and pages only read; a selection or a bundle issues observations, the authority
    // an observed write needs, so it needs write.
    let write = match request {
        ObserveRequest::Candidates { .. } | ObserveRequest::Page { .. } => false,
        ObserveRequest::Select { .. } | ObserveRequest::Bundle { .. } => true,
    };
    let Some(t) = store.target_for(&id, write) else {
        return unavailable(&id, write, || store.readable(&id));
    };
    let v = t.view();
    let cycle = t.active_editing_cycle_id.as_str();
    if let ObserveRequest::Page {
        observation_id,
        page,
    } = &request
    {
        return scope_page(store, &v, cycle, observation_id, *page);
    }
    let Some(language) = language_for(&t.filename, &t.target_type) else {
        return observe::unsupported(&v, &t.filename, &t.target_type);
    };
    let o = match store.outline(&v, language) {
        Ok(o) => o,
        Err(why) => {
            let why = match &why {
                NoOutline::Crashed => observe::Unavailable::ParserCrashed,
                NoOutline::Stopped => observe::Unavailable::ParserStopped,
                NoOutline::Limit(l) => observe::Unavailable::ParserLimit(*l),
                NoOutline::NotStarted(e) => observe::Unavailable::ParserNotStarted(e),
                NoOutline::Busy => observe::Unavailable::ParserBusy,
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
            let scope = ScopeView::of(symbol, store.new_id(), None, hash);
            // The page is checked before the observation is written: a bad offset writes nothing.
            let answer = match observe::observed(&v, facts(&o), cycle, &scope, page, "selection") {
                Ok(a) => a,
                Err(e) => return e.to_json(TOOL),
            };
            issue(store, &v, &o, cycle, &scope, &selection, None);
            answer
        }
        ObserveRequest::Bundle { selections, page } => {
            let symbols = match observe::select_bundle(&v, &o, &selections, page) {
                Ok(s) => s,
                Err(answer) => return answer,
            };
            let hashes = observe::scope_hashes(v.content, &symbols);
            let bundle_id = store.new_id();
            let scopes: Vec<ScopeView> = symbols
                .iter()
                .zip(hashes)
                .enumerate()
                .map(|(i, (s, h))| ScopeView::of(s, store.new_id(), Some(i + 1), h))
                .collect();
            for (scope, sel) in scopes.iter().zip(&selections) {
                let ordinal = scope.ordinal.map_or(0, |n| i32::try_from(n).unwrap_or(0));
                issue(
                    store,
                    &v,
                    &o,
                    cycle,
                    scope,
                    sel,
                    Some((&bundle_id, ordinal)),
                );
            }
            observe::observed_batch(&v, &o, cycle, &bundle_id, &scopes, page)
        }
        ObserveRequest::Page { .. } => unreachable!("answered above"),
    }
}

/// Persists one observation of `scope`, selected by `sel`, from outline `o` of `v`.
fn issue(
    store: &mut impl Observations,
    v: &TargetView,
    o: &Outline,
    cycle: &str,
    scope: &ScopeView,
    sel: &Selection,
    bundle: Option<(&str, i32)>,
) {
    store.insert_observation(&NewObservation {
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
    });
}

/// A page of an issued observation: only while its cycle is active and its version current.
fn scope_page(
    store: &mut impl Observations,
    v: &TargetView,
    active_cycle: &str,
    observation_id: &str,
    page: Page,
) -> Value {
    let Some(stored) = store.observation(observation_id) else {
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
