//! The change feed (issue 19, item 2): `NOTIFY patchdiff` at every acceptance and every SAVE,
//! issued where the attempt and checkpoint rows are written, in the same transaction.
//!
//! PostgreSQL queues a notification with the transaction and delivers it at COMMIT: a rolled-back
//! attempt (the caller's ROLLBACK, an ERROR, a cancelled statement, a publishing SAVE whose file
//! was refused) is never announced, and a transaction with several acceptances announces each of
//! them once it commits. Rejections are not announced: they change no target, and a listener
//! acts on changes (docs/sql-api.md "The change feed").
//!
//! **Only when someone listens** (issue 21 item 1). PostgreSQL serialises the commits of
//! transactions that notified: each holds the notify queue's global lock until its commit record
//! is flushed, so concurrent writers stop sharing WAL flushes: at eight writers on this
//! project's machine that cost a quarter to three quarters of the accepted submissions per
//! second, the more the busier the machine (docs/benchmarks.md, "Issue 21, item 1"). With `patchdiff.notify = listened` (the default) a change is announced only
//! while a listener is registered, and the registration cannot race with a change it would miss:
//!
//! - A listener LISTENs, then takes `pg_advisory_lock_shared` on the feed's key (a session lock
//!   it holds for as long as it listens), then reads what it watches.
//! - A writer tries the same key in `RowExclusiveLock` mode (which conflicts with `ShareLock`
//!   and with nothing a writer takes), without waiting, at each change it would announce. If the
//!   try fails, a listener holds or awaits the key, and the writer announces. If it succeeds, the
//!   writer announces nothing and keeps the key until its transaction ends (after its commit is
//!   visible), so a listener that asks for the key later is granted it only then, and its read
//!   sees the change.
//!
//! So every change a registered listener could miss is either announced or committed before the
//! listener's read, whatever the writer's isolation level (a lock is not a snapshot). A change
//! made in a subtransaction that rolls back releases the try with the queued announcement.
//!
//! **Never at the price of the commit.** PostgreSQL's notification queue (8 GB) drains only as
//! fast as its slowest listener reads, and a session that LISTENs inside an open transaction
//! reads nothing until that transaction ends. Any role may do that, and fill the rest with its
//! own `pg_notify` calls in well under a minute (17 to 29 s measured); from then on every
//! transaction that notifies fails at COMMIT ("too many notifications in the NOTIFY queue"),
//! and so every other tenant's acceptances and SAVEs did. At or above
//! `patchdiff.notify_queue_limit` of the queue (default half, where PostgreSQL starts warning in
//! the server log), a change is committed without its announcement and the writer gets a
//! WARNING: the feed is a wake-up, the log is the record. Such a change first counts itself in
//! the sequence `patchdiff.feed_silences`, which every role may read: a listener that sees it
//! move tells its subscribers that every target they watch may have changed, at once and again
//! as the transactions then in progress end (patchdiff-mcp's `feed::watch_silences`).

use super::{fault, read, write};
use crate::Notify;
use patchdiff_engine::api::feed::{self, Event, LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2};
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

/// Queues the announcement of `e`: always with `patchdiff.notify = on`, never with `off`, and
/// with `listened` (the default) only if [`someone_listens`].
pub fn announce(client: &mut SpiClient, e: &Event) {
    match crate::notify_mode() {
        Notify::Off => return,
        Notify::On => {}
        Notify::Listened => {
            if !someone_listens() {
                return;
            }
        }
    }
    let usage = read(
        client,
        "SELECT pg_catalog.pg_notification_queue_usage()",
        &[],
        "measuring the notification queue",
    )
    .first()
    .get_one::<f64>()
    .unwrap_or_else(|e| fault("measuring the notification queue", e))
    .unwrap_or(0.0);
    let limit = crate::notify_queue_limit();
    if usage >= limit {
        // Counted, so that listeners learn they may have missed a change (the sequence's
        // comment in sql/schema.sql; patchdiff-mcp's feed resyncs its subscribers). Found
        // through the catalog: a database made by an earlier build of 0.2.0 has no such
        // sequence, and its changes must still commit.
        write(
            client,
            "SELECT pg_catalog.nextval(c.oid::pg_catalog.regclass) FROM pg_catalog.pg_class c \
               JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
              WHERE n.nspname = 'patchdiff' AND c.relname = 'feed_silences' AND c.relkind = 'S'",
            &[],
            "counting an unannounced change",
        );
        let message = format!(
            "pg_patchdiff: change of target {} (version {}) is committed without its announcement: PostgreSQL's notification queue is {:.1}% full, at or over patchdiff.notify_queue_limit ({:.1}%)",
            e.target_file_id,
            e.version,
            usage * 100.0,
            limit * 100.0
        );
        pgrx::ereport!(
            WARNING,
            pgrx::PgSqlErrorCode::ERRCODE_WARNING,
            message,
            "A session that listens is not reading, most likely inside an open transaction; the server log names it. The queue drains once its transaction ends. The change is counted in the sequence patchdiff.feed_silences, from which listeners learn that they may have missed it."
        );
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

/// Whether a listener holds or awaits the feed's lock in this database: this session itself,
/// when it holds the key in share mode (PostgreSQL never makes a session's lock conflict with its
/// own, so the try below would succeed for it: helper-112 found a session that listens and
/// writes heard none of its own changes when it was the only listener); otherwise tries the key
/// (`RowExclusiveLock`, transaction-scoped, no wait) and says yes if that fails. On success the
/// key stays held until the transaction ends; a later try in the same transaction finds it held
/// and says no again, which is right: a listener that arrived meanwhile is still waiting for this
/// transaction to end before it reads.
fn someone_listens() -> bool {
    // SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, key1, key2, 2): the tag of
    // pg_advisory_lock_shared(int4, int4) in this database.
    let tag = pg_sys::LOCKTAG {
        // SAFETY: MyDatabaseId is set for the life of a backend connected to a database, which
        // every caller of the extension's functions is.
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: LISTENER_LOCK_KEY1 as u32,
        locktag_field3: LISTENER_LOCK_KEY2 as u32,
        locktag_field4: 2,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    // SAFETY: a valid tag; this only looks in the backend's own table of the locks it holds.
    if unsafe { pg_sys::LockHeldByMe(&tag, pg_sys::ShareLock as pg_sys::LOCKMODE) } {
        return true;
    }
    // SAFETY: a valid tag of the user lock method; dontWait, so this never sleeps, and a
    // transaction-scoped lock is released by PostgreSQL at the transaction's (or the
    // subtransaction's) end. Errors (out of shared memory for the lock table) are raised as
    // PostgreSQL ERRORs, which pgrx turns into a rollback of the call, as for any statement.
    let got = unsafe {
        pg_sys::LockAcquire(
            &tag,
            pg_sys::RowExclusiveLock as pg_sys::LOCKMODE,
            false,
            true,
        )
    };
    got == pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
}
