//! Manifest ledger pages. Ledger rows are written with their attempt
//! ([`super::attempts::write_attempt`]).

use super::{Deformed, Row, read_rows};
use patchdiff_engine::api::history::LedgerRow;
use pgrx::spi::SpiClient;

macro_rules! ledger_page_sql {
    ($scope:literal) => {
        concat!(
            "SELECT l.ledger_sequence, l.pdcp_log_id::text, l.log_sequence, l.before_version, l.after_version, ",
            "l.editing_cycle_id::text, l.change_index::int8, l.change_id, l.intent, p.intent, l.rationale, l.risk, ",
            "l.origin, l.derived::text, l.created_at ",
            "FROM patchdiff.manifest_ledger l LEFT JOIN patchdiff.pdcp_logs p ON p.pdcp_log_id = l.pdcp_log_id ",
            "WHERE (l.", $scope, ", l.ledger_sequence) <= ($1::uuid, $2) AND (l.", $scope, ", l.ledger_sequence) > ($1::uuid, 0) ",
            "ORDER BY l.", $scope, " DESC, l.ledger_sequence DESC LIMIT $3"
        )
    };
}

/// $1 is the active editing cycle (default) or the target (include_previous_cycles); each reads
/// one range of the (editing_cycle_id | target_file_id, ledger_sequence) index (see [`read`]).
pub(crate) const LEDGER_CYCLE_SQL: &str = ledger_page_sql!("editing_cycle_id");
pub(crate) const LEDGER_ALL_SQL: &str = ledger_page_sql!("target_file_id");

fn ledger_row(r: &Row<Deformed>) -> LedgerRow {
    LedgerRow {
        ledger_sequence: r.int(1),
        pdcp_log_id: r.text(2),
        log_sequence: r.int(3),
        before_version: r.int(4),
        after_version: r.int(5),
        editing_cycle_id: r.text(6),
        change_index: r.int(7),
        change_id: r.text(8),
        intent: r.opt(9),
        transaction_intent: r.opt(10),
        rationale: r.opt(11),
        risk: r.opt(12),
        origin: r.text(13),
        derived: r.json_literal(14),
        created_at_us: r.unix_micros(15),
    }
}

/// A page of ledger entries, newest first: at most `fetch` rows at or below `max_sequence` of
/// the editing cycle `scope` or, with `all_cycles`, of the target `scope`.
pub fn ledger_page(
    c: &SpiClient,
    scope: &str,
    all_cycles: bool,
    max_sequence: i64,
    fetch: i64,
) -> Vec<LedgerRow> {
    let sql = if all_cycles {
        LEDGER_ALL_SQL
    } else {
        LEDGER_CYCLE_SQL
    };
    read_rows(
        c,
        sql,
        &[scope.into(), max_sequence.into(), fetch.into()],
        "reading ledger page",
        ledger_row,
    )
}
