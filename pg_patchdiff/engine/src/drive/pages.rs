//! The history pages over [`Reads`]: `patchdiff_get_pdcp_log` and
//! `patchdiff_get_manifest_ledger`. Each answers its JSON text, compact and literal (issue 21,
//! item 4: a page is written straight into one string).

use crate::contract::json::{LITERAL, to_string};
use crate::drive::store::Reads;
use crate::history::pages as history;

/// A bounded newest-first page of the target's attempts, accepted and rejected; each record
/// read only when it fits the page.
pub fn log_page(store: &mut impl Reads, args: &str) -> String {
    const TOOL: &str = "patchdiff_get_pdcp_log";
    let q = match history::parse_log(args) {
        Ok(q) => q,
        Err(e) => return to_string(&history::invalid(&e, TOOL), LITERAL),
    };
    let id = q.target_file_id.as_str();
    if store.readable_cycle(id).is_none() {
        return to_string(&history::not_found(id), LITERAL);
    }
    let (rows, cut) = store.log_page(&q);
    let shown = rows.len().min(q.page.limit);
    let contents = if q.include_content {
        history::content_plan(&rows[..shown])
            .into_iter()
            .zip(&rows)
            .map(|(keep, r)| keep.then(|| store.record(&r.pdcp_log_id)))
            .collect()
    } else {
        Vec::new()
    };
    history::log_page(&q.page, rows, cut, q.include_content, contents)
}

/// Accepted manifest ledger entries: the newest page of the active cycle (or of every cycle),
/// displayed oldest first.
pub fn ledger_page(store: &mut impl Reads, args: &str) -> String {
    const TOOL: &str = "patchdiff_get_manifest_ledger";
    let q = match history::parse_ledger(args) {
        Ok(q) => q,
        Err(e) => return to_string(&history::invalid(&e, TOOL), LITERAL),
    };
    let id = q.target_file_id.as_str();
    let Some(cycle) = store.readable_cycle(id) else {
        return to_string(&history::not_found(id), LITERAL);
    };
    let (rows, cut) = store.ledger_page(
        id,
        (!q.include_previous_cycles).then_some(cycle.as_str()),
        q.page.max_sequence,
        q.page.fetch(),
    );
    history::ledger_page(&q.page, rows, cut)
}
