//! The change feed (issue 19, item 2): `NOTIFY patchdiff` at every acceptance and every SAVE,
//! issued where the attempt and checkpoint rows are written, in the same transaction.
//!
//! PostgreSQL queues a notification with the transaction and delivers it at COMMIT: a rolled-back
//! attempt (the caller's ROLLBACK, an ERROR, a cancelled statement, a publishing SAVE whose file
//! was refused) is never announced, and a transaction with several acceptances announces each of
//! them once it commits. Rejections are not announced: they change no target, and a listener
//! acts on changes (docs/sql-api.md "The change feed").

use super::{fault, write};
use patchdiff_engine::api::feed::{self, Event};
use pgrx::spi::SpiClient;

/// Queues the announcement of `e`, unless `patchdiff.notify` is off.
pub fn announce(client: &mut SpiClient, e: &Event) {
    if !crate::notify_enabled() {
        return;
    }
    let Some(payload) = feed::payload(e) else {
        // Unreachable with stored rows (UUIDs and SHA-256 hashes); never worth failing an edit.
        pgrx::warning!(
            "pg_patchdiff: change of target {:?} not announced: a field is not of its fixed shape",
            e.target_file_id
        );
        return;
    };
    let rows = write(
        client,
        "SELECT pg_catalog.pg_notify($1, $2)",
        &[feed::CHANNEL.into(), payload.as_str().into()],
        "announcing the change",
    );
    if rows.len() != 1 {
        fault("announcing the change", "pg_notify returned no row");
    }
}
