//! Manifest ledger pages. Ledger rows are written with their attempt
//! ([`super::attempts::write_attempt`]).

use super::{Deformed, Row, read_rows};
use patchdiff_engine::api::history::LedgerRow;
use patchdiff_engine::api::limits::HISTORY_PAGE_TEXT_BYTES;
use pgrx::spi::SpiClient;

/// The columns of a ledger page and the attempt's intent beside them.
macro_rules! ledger_page_sql {
    ($range:literal) => {
        concat!(
            "SELECT l.ledger_sequence, l.pdcp_log_id::text, l.log_sequence, l.before_version, l.after_version, ",
            "l.editing_cycle_id::text, l.change_index::int8, l.change_id, l.intent, p.intent, l.rationale, l.risk, ",
            "l.origin, l.derived::text, l.created_at, ",
            // The text a page shows whole, by its stored size (no text read: [`PAGE_BYTES`]).
            "(COALESCE(pg_catalog.octet_length(l.intent), 0) + COALESCE(pg_catalog.octet_length(p.intent), 0) ",
            "+ COALESCE(pg_catalog.octet_length(l.rationale), 0) + COALESCE(pg_catalog.octet_length(l.risk), 0) ",
            "+ pg_catalog.octet_length(l.change_id) + pg_catalog.octet_length(l.origin) ",
            "+ COALESCE(pg_catalog.octet_length(l.derived::text), 0))::int8 ",
            "FROM patchdiff.manifest_ledger l LEFT JOIN patchdiff.pdcp_logs p ON p.pdcp_log_id = l.pdcp_log_id ",
            "WHERE (l.target_file_id, l.ledger_sequence) <= ($1::uuid, $2) AND ", $range,
            " ORDER BY l.target_file_id DESC, l.ledger_sequence DESC LIMIT $3"
        )
    };
}

/// Both read one range of the (target_file_id, ledger_sequence) index (see [`read`]): every
/// cycle's rows ($1 the target), or only the active cycle's ($4), the rows above its
/// `ledger_floor` (sql/schema.sql, `editing_cycles.ledger_floor`). The cycle's own ID is checked
/// on each row as well, so a floor could only ever hide rows, never show another cycle's.
pub(crate) const LEDGER_CYCLE_SQL: &str = ledger_page_sql!(
    "(l.target_file_id, l.ledger_sequence) > ($1::uuid, (SELECT c.ledger_floor FROM patchdiff.editing_cycles c \
     WHERE c.editing_cycle_id = $4::uuid)) AND l.editing_cycle_id = $4::uuid"
);
pub(crate) const LEDGER_ALL_SQL: &str =
    ledger_page_sql!("(l.target_file_id, l.ledger_sequence) > ($1::uuid, 0)");

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

/// The column of a ledger page's row with the stored size of the text it shows whole, and the
/// most a page reads of it.
const PAGE_BYTES: (usize, i64) = (16, HISTORY_PAGE_TEXT_BYTES as i64);

/// A page of ledger entries of the target, newest first: at most `fetch` rows at or below
/// `max_sequence`, of the editing cycle `cycle` or, without one, of every cycle; `true` when its
/// text budget ended it early.
pub fn ledger_page(
    c: &SpiClient,
    target_file_id: &str,
    cycle: Option<&str>,
    max_sequence: i64,
    fetch: i64,
) -> (Vec<LedgerRow>, bool) {
    let mut args = vec![target_file_id.into(), max_sequence.into(), fetch.into()];
    let sql = match cycle {
        Some(cycle) => {
            args.push(cycle.into());
            LEDGER_CYCLE_SQL
        }
        None => LEDGER_ALL_SQL,
    };
    read_rows(c, sql, &args, "reading ledger page", PAGE_BYTES, ledger_row)
}
