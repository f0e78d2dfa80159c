//! The attempt log: parent and keyed lookups, the attempt write (with its ledger rows and the
//! new target state), log pages, stored records and replay batches.

use super::access::tiered;
use super::{
    Caller, Deformed, Need, Row, access_args, committed_since_snapshot, fault, fresh, read,
    read_rows, rows_since_snapshot, write,
};
use crate::json_text::JsonText;
use patchdiff_engine::api::feed::{Event, Kind};
use patchdiff_engine::api::limits::HISTORY_PAGE_TEXT_BYTES;
use patchdiff_engine::api::observation::{LinkedObservation, ObservationRow};
use patchdiff_engine::api::submit::{Attempt, AttemptRow, Parent};
use patchdiff_engine::api::words::Status;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use serde_json::Value;

/// What the log knows of a parent attempt: nothing, when it belongs to a target the caller may
/// not read.
pub fn parent(client: &mut SpiClient, id: &str, caller: Caller) -> Parent {
    macro_rules! parent_select {
        ($pred:expr) => {
            concat!(
                "SELECT p.target_file_id::text, p.status FROM patchdiff.pdcp_logs p ",
                "JOIN patchdiff.targets t ON t.target_file_id = p.target_file_id ",
                "WHERE p.pdcp_log_id = $1::uuid AND ",
                $pred
            )
        };
    }
    const SQL: [&str; 3] = tiered!(parent_select, "t");
    let [a, n] = access_args(caller, Need::Read);
    let args = [id.into(), a, n];
    let rows = fresh(
        client,
        SQL[caller.widest()],
        &args,
        "reading parent attempt",
    );
    let row = rows.first();
    if row.is_empty() {
        if rows_since_snapshot(SQL[caller.widest()], &args, "reading parent attempt")
            .is_some_and(|n| n > 0)
        {
            committed_since_snapshot("the attempt parent_pdcp_log_id names");
        }
        return Parent::NotFound;
    }
    let (t, s) = row
        .get_two::<String, String>()
        .unwrap_or_else(|e| fault("reading parent attempt", e));
    Parent::Found {
        target_file_id: t.unwrap_or_default(),
        status: s.as_deref().and_then(Status::parse),
    }
}

macro_rules! keyed_attempt_select {
    ($pred:expr) => {
        concat!(
            "SELECT p.pdcp_log_id::text, p.status, p.request_fingerprint, p.request_envelope::text, p.pdcp_content, ",
            "p.before_hash, p.after_version, p.after_hash, p.failure_reason, p.failure_detail, p.failed_change_id, ",
            "p.diagnostic::text, p.validity::text, p.before_version, p.changeset_id::text ",
            "FROM (SELECT t.target_file_id FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred,
            " OFFSET 0) t JOIN patchdiff.pdcp_logs p ON p.target_file_id = t.target_file_id ",
            "AND p.client_request_id = $4"
        )
    };
}
const KEYED_ATTEMPT_SQL: [&str; 3] = tiered!(keyed_attempt_select, "t");

fn json_col(s: Option<String>) -> Option<Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

/// The attempt stored under a request key on a target, with its ledger facts.
///
/// Two statements, the ledger's read only for an accepted attempt found: every keyed submission
/// looks its key up, and almost all find nothing. A primary-key style lookup's estimated cost
/// stays the same as the tables grow, so PostgreSQL's plan cache settles on one generic plan
/// after five custom ones. With the ledger's subquery in the same statement, its estimate grew
/// with the ledger, the average of the earlier (cheaper) custom plans always lagged behind the
/// generic plan's cost, and the lookup was planned again at almost every call while the tables
/// grew: 11,806 plans in 14,184 calls, 0.083 ms each, in a 10 s stress run from an empty
/// database (docs/benchmarks.md, "Keyed resends").
///
/// Only on a target the caller may write: the lookup joins its target row under the caller's
/// widest tier ([`tiered!`]), so a role that may not write the target finds no attempt under any
/// key, and neither reads nor parses another tenant's row. It used to look the key up on the ID
/// alone and leave the access check to the statement after it: a role without any grant that
/// resent another tenant's key got `target_not_found` as for an unknown ID, but only after its
/// backend had read, parsed and answered from that tenant's attempt (helper-87: 94 ms and 103 MB
/// for a 6.6 MB record with 10,000 ledger rows, against 0.6 ms for an unused key): a timing
/// channel that told whether a key was used, and another tenant's work done on demand. The
/// target's access is checked first (`OFFSET 0` keeps the planner from starting at the log), so
/// a caller that may not write the target never reaches the log at all: its call costs the same
/// whether the key was used or not (helper-89 measured 0.137 against 0.012 ms in the statement
/// when the log's row was found first and the target checked after it). One statement of the
/// widest tier, not the tiers in turn: almost every lookup finds no row, and each tier tried
/// would be another statement.
pub fn keyed_attempt(
    client: &mut SpiClient,
    target_file_id: &str,
    key: &str,
    caller: Caller,
) -> Option<AttemptRow> {
    let [a, n] = access_args(caller, Need::Write);
    let rows = fresh(
        client,
        KEYED_ATTEMPT_SQL[caller.widest()],
        &[target_file_id.into(), a, n, key.into()],
        "reading keyed attempt",
    );
    let row = rows.first();
    if row.is_empty() {
        return None;
    }
    let s = |i: usize| {
        row.get::<String>(i)
            .unwrap_or_else(|e| fault("reading keyed attempt", e))
    };
    let pdcp_log_id = s(1).unwrap_or_default();
    let mut attempt = AttemptRow {
        status: s(2).unwrap_or_default(),
        request_fingerprint: s(3).unwrap_or_default(),
        request_envelope: json_col(s(4)).unwrap_or(Value::Null),
        pdcp_content: s(5).unwrap_or_default(),
        before_hash: s(6).unwrap_or_default(),
        after_version: row
            .get::<i64>(7)
            .unwrap_or_else(|e| fault("reading keyed attempt", e)),
        after_hash: s(8),
        failure_reason: s(9),
        failure_detail: s(10),
        failed_change_id: s(11),
        diagnostic: json_col(s(12)),
        validity: json_col(s(13)).unwrap_or(Value::Null),
        before_version: row
            .get::<i64>(14)
            .unwrap_or_else(|e| fault("reading keyed attempt", e))
            .unwrap_or_default(),
        changeset_id: s(15),
        ..AttemptRow::default()
    };
    // Only an acceptance has ledger rows (`write_attempt`).
    if attempt.status == Status::Accepted.as_str() {
        let changes = fresh(
            client,
            "SELECT pg_catalog.json_agg(l.derived ORDER BY l.change_index)::text \
               FROM patchdiff.manifest_ledger l WHERE l.pdcp_log_id = $1::uuid",
            &[pdcp_log_id.as_str().into()],
            "reading keyed attempt",
        )
        .first()
        .get_one::<String>()
        .unwrap_or_else(|e| fault("reading keyed attempt", e));
        attempt.changes = json_col(changes)
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
    }
    attempt.pdcp_log_id = pdcp_log_id;
    Some(attempt)
}

/// The statement that writes an attempt, its ledger rows (when accepted) and the target's new
/// state (when accepted), with `$on_conflict` between the attempt's VALUES and its RETURNING.
macro_rules! write_attempt_sql {
    ($on_conflict:literal) => {
        concat!(
            "WITH log AS ( \
               INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
                 runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, client_request_id, \
                 conflicts_with_pdcp_log_id, before_version, before_hash, after_version, after_hash, failure_reason, \
                 failure_detail, failure_stage, failed_change_id, diagnostic, validity, parent_pdcp_log_id, attempt, source, intent, \
                 changeset_id, acting_role) \
               VALUES ($1::uuid, $2::uuid, $3::uuid, $4, $5, $6, $7, $8, $9, $10::json, $11, $12::uuid, $13, $14, $15, $16, \
                 $17, $18, $19, $20, $21::json, $22::json, $23::uuid, $24, $25, $27, $29::uuid, \
                 pg_catalog.pg_get_userbyid($34::oid)::text) ",
            $on_conflict,
            "RETURNING pdcp_log_id, log_sequence), \
             ledger AS ( \
               INSERT INTO patchdiff.manifest_ledger (ledger_entry_id, pdcp_log_id, log_sequence, target_file_id, \
                 editing_cycle_id, before_version, after_version, change_index, change_id, origin, intent, rationale, risk, derived) \
               SELECT pg_catalog.gen_random_uuid(), log.pdcp_log_id, log.log_sequence, $2::uuid, $3::uuid, $13, $15, \
                 c.change_index, c.change_id, 'typed', COALESCE(c.rationale, $27), c.rationale, c.risk, c.derived \
               FROM log, ROWS FROM (pg_catalog.unnest($26::int4[]), pg_catalog.unnest($30::text[]), \
                 pg_catalog.unnest($31::text[]), pg_catalog.unnest($32::text[]), pg_catalog.unnest($33::json[])) \
                 AS c(change_index, change_id, rationale, risk, derived) \
               WHERE $4 = 'accepted'), \
             target AS ( \
               UPDATE patchdiff.targets SET current_content = $28, current_hash = $16, version = $15, \
                 updated_at = pg_catalog.clock_timestamp() \
               WHERE target_file_id = $2::uuid AND $4 = 'accepted' AND EXISTS (SELECT FROM log)) \
             SELECT log_sequence FROM log"
        )
    };
}

/// A keyed attempt: the key's partial unique index is its arbiter, so a key recorded by a
/// concurrent transaction that this one's snapshot cannot see writes nothing (see below).
const WRITE_KEYED: &str = write_attempt_sql!(
    "ON CONFLICT (target_file_id, client_request_id) WHERE client_request_id IS NOT NULL DO NOTHING "
);
/// An attempt without a key, which that index does not hold: a plain INSERT. (With ON CONFLICT
/// every attempt was a speculative insertion: a lock on its speculative token, a check of the
/// arbiter index, and a second WAL record to confirm the tuple.)
const WRITE_UNKEYED: &str = write_attempt_sql!("");

/// Writes an attempt row, its ledger rows and, for an acceptance, the new target state
/// (`new_content`), in one statement, and queues an acceptance's announcement
/// ([`super::feed`]). Returns nothing: the caller chose the attempt's ID. `acting_role` is the
/// role the attempt is made as ([`super::Caller::role`]); the row records its name.
pub fn write_attempt(
    client: &mut SpiClient,
    a: &Attempt,
    new_content: Option<String>,
    pdcp_log_id: &str,
    target_file_id: &str,
    cycle_id: &str,
    acting_role: pgrx::pg_sys::Oid,
) {
    use patchdiff_engine::wire::{LITERAL, to_string};
    let text = |v: &Value| to_string(v, LITERAL);
    let diagnostic = a.diagnostic.as_ref().map(text);
    let envelope = text(&a.request_envelope);
    let validity = text(&a.validity);
    // The ledger rows' columns, one array each, unnested in the statement. (They used to cross
    // as one JSON array of objects taken apart by json_to_recordset: PostgreSQL parsed it, and
    // each `derived` again, on every acceptance.)
    let n = a.changes.len();
    let (mut indexes, mut ids, mut rationales, mut risks, mut derived) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for c in &a.changes {
        indexes.push(i32::try_from(c.change_index).unwrap_or_else(|e| fault("writing attempt", e)));
        ids.push(c.change_id.as_str());
        rationales.push(c.rationale.as_deref());
        risks.push(c.risk.as_deref());
        derived.push(JsonText(text(&c.to_json())));
    }
    // The new text is copied into a `text` datum and let go at once: while the statement runs,
    // PostgreSQL holds the datum, the row it forms and the compressed value, and this call held
    // a fourth copy on top (docs/reliability.md, "Resource bounds").
    let content: DatumWithOid = new_content.as_deref().into();
    drop(new_content);
    // The JSON the engine's writer made from values crosses typed `json` (JsonText), so
    // PostgreSQL's input function, which only validates and copies, is not run on it again.
    let args: [DatumWithOid; 34] = [
        pdcp_log_id.into(),
        target_file_id.into(),
        cycle_id.into(),
        a.status.as_str().into(),
        a.protocol_version.into(),
        a.runtime_version.into(),
        (&*a.pdcp_content).into(),
        a.pdcp_content_hash.as_str().into(),
        a.request_fingerprint.as_str().into(),
        JsonText(envelope).into(),
        a.client_request_id.as_deref().into(),
        a.conflicts_with_pdcp_log_id.as_deref().into(),
        a.before_version.into(),
        a.before_hash.as_str().into(),
        a.after_version.into(),
        a.after_hash.as_deref().into(),
        a.failure_reason.map(|r| r.as_str()).into(),
        a.failure_detail.as_deref().into(),
        a.failure_stage.map(|s| s.as_str()).into(),
        a.failed_change_id.as_deref().into(),
        diagnostic.map(JsonText).into(),
        JsonText(validity).into(),
        a.parent_pdcp_log_id.as_deref().into(),
        a.attempt.into(),
        a.source.as_str().into(),
        indexes.into(),
        a.intent.as_deref().into(),
        content,
        a.changeset_id.as_deref().into(),
        ids.into(),
        rationales.into(),
        risks.into(),
        derived.into(),
        acting_role.into(),
    ];
    let sql = if a.client_request_id.is_some() {
        WRITE_KEYED
    } else {
        WRITE_UNKEYED
    };
    let written = write(client, sql, &args, "writing attempt");
    // Every keyed write holds the target's lock and looks the key up first, so the key can only
    // be taken already when that lookup ran on an older snapshot: a REPEATABLE READ or
    // SERIALIZABLE transaction that waited for the lock while another one recorded the key.
    // PostgreSQL itself raises 40001 for that under REPEATABLE READ (ON CONFLICT meets a row its
    // snapshot cannot see); this is the same answer for any other path. Nothing was written.
    if written.is_empty() {
        pgrx::ereport!(
            ERROR,
            pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            "could not serialize access: client_request_id was recorded by a concurrent transaction",
            "Retry the transaction; the identical call then recovers the recorded outcome."
        );
    }
    if a.status == Status::Accepted {
        let log_sequence = written
            .first()
            .get_one::<i64>()
            .unwrap_or_else(|e| fault("writing attempt", e));
        super::feed::announce(
            client,
            &Event {
                kind: Kind::Accepted,
                target_file_id,
                version: a.after_version.unwrap_or_default(),
                pdcp_log_id: Some(pdcp_log_id),
                log_sequence,
                snapshot_id: None,
            },
        );
    }
}

// ---------------------------------------------------------------------------------------------
// patchdiff_replay

/// At most this many bytes of stored records are held at once; a larger record is read alone.
const REPLAY_BATCH_BYTES: i64 = 4 << 20;

/// Both read one range of the (target_file_id, status, log_sequence) index: see [`read`].
pub(crate) const REPLAY_SIZES_SQL: &str = "SELECT log_sequence, pg_catalog.octet_length(pdcp_content)::int8 \
     FROM patchdiff.pdcp_logs \
     WHERE (target_file_id, status, log_sequence) > ($1::uuid, 'accepted', $2) \
       AND (target_file_id, status, log_sequence) <= ($1::uuid, 'accepted', 9223372036854775807) \
     ORDER BY target_file_id, status, log_sequence LIMIT 512";

pub(crate) const REPLAY_ROWS_SQL: &str = "SELECT log_sequence, pdcp_log_id::text, protocol_version, runtime_version, pdcp_content, \
       before_version, before_hash, after_version, after_hash, editing_cycle_id::text, \
       (SELECT pg_catalog.json_agg(pg_catalog.json_build_object( \
            'observation_id', o.observation_id, 'target_file_id', o.target_file_id, \
            'editing_cycle_id', o.editing_cycle_id, 'observation_bundle_id', o.observation_bundle_id, \
            'bundle_ordinal', o.bundle_ordinal, 'symbol_name', o.symbol_name, 'symbol_kind', o.symbol_kind, \
            'target_version', o.target_version, 'target_current_hash', o.target_current_hash, \
            'scope_start', o.scope_start, 'scope_end', o.scope_end, 'observed_scope_hash', o.observed_scope_hash, \
            'consumed_by', c.pdcp_log_id, 'group_index', c.group_index))::text \
          FROM patchdiff.observation_consumptions c \
          JOIN patchdiff.target_scope_observations o ON o.observation_id = c.observation_id \
         WHERE c.pdcp_log_id = pdcp_logs.pdcp_log_id) \
     FROM patchdiff.pdcp_logs \
     WHERE (target_file_id, status, log_sequence) > ($1::uuid, 'accepted', $2) \
       AND (target_file_id, status, log_sequence) <= ($1::uuid, 'accepted', $3) \
     ORDER BY target_file_id, status, log_sequence";

/// The consumed observations of one attempt, from the json_agg of [`REPLAY_ROWS_SQL`].
fn linked_observations(json: Option<String>) -> Vec<LinkedObservation> {
    let Some(v) = json.and_then(|j| serde_json::from_str::<Value>(&j).ok()) else {
        return Vec::new();
    };
    let text = |o: &Value, k: &str| o[k].as_str().map(str::to_owned);
    let int = |o: &Value, k: &str| o[k].as_i64();
    let size = |o: &Value, k: &str| {
        o[k].as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0)
    };
    v.as_array()
        .into_iter()
        .flatten()
        .map(|o| LinkedObservation {
            row: ObservationRow {
                observation_id: text(o, "observation_id").unwrap_or_default(),
                target_file_id: text(o, "target_file_id").unwrap_or_default(),
                editing_cycle_id: text(o, "editing_cycle_id").unwrap_or_default(),
                observation_bundle_id: text(o, "observation_bundle_id"),
                bundle_ordinal: int(o, "bundle_ordinal"),
                symbol_path: text(o, "symbol_name").unwrap_or_default(),
                kind: text(o, "symbol_kind").unwrap_or_default(),
                target_version: int(o, "target_version").unwrap_or(-1),
                target_current_hash: text(o, "target_current_hash").unwrap_or_default(),
                scope_start: size(o, "scope_start"),
                scope_end: size(o, "scope_end"),
                observed_scope_hash: text(o, "observed_scope_hash").unwrap_or_default(),
                consumed_by_pdcp_log_id: text(o, "consumed_by"),
            },
            group_index: o["group_index"]
                .as_u64()
                .and_then(|n| usize::try_from(n).ok()),
        })
        .collect()
}

/// Sequence ranges `(after, upto]` of the next accepted rows, each holding at most
/// `REPLAY_BATCH_BYTES` of records (or one larger record). Empty at the end of the log.
pub fn next_batches(id: &str, after: i64) -> Vec<(i64, i64)> {
    Spi::connect(|c| {
        let mut out = Vec::new();
        let (mut start, mut bytes, mut last) = (after, 0i64, None::<i64>);
        for t in read(
            c,
            REPLAY_SIZES_SQL,
            &[id.into(), after.into()],
            "reading log sizes",
        ) {
            let r = Row(&t, "reading log sizes");
            let (seq, len) = (r.int(1), r.int(2));
            if let Some(l) = last
                && bytes + len > REPLAY_BATCH_BYTES
            {
                out.push((start, l));
                (start, bytes) = (l, 0);
            }
            bytes += len;
            last = Some(seq);
        }
        if let Some(l) = last {
            out.push((start, l));
        }
        out
    })
}

/// The accepted rows in `(after, upto]`, in their own SPI connection so that their memory is
/// released when the batch has been replayed.
pub fn batch(id: &str, after: i64, upto: i64) -> Vec<AttemptRow> {
    Spi::connect(|c| {
        read(
            c,
            REPLAY_ROWS_SQL,
            &[id.into(), after.into(), upto.into()],
            "reading accepted attempts",
        )
        .map(|t| {
            let r = Row(&t, "reading accepted attempts");
            AttemptRow {
                log_sequence: r.int(1),
                pdcp_log_id: r.text(2),
                protocol_version: r.text(3),
                runtime_version: r.text(4),
                pdcp_content: r.text(5),
                before_version: r.int(6),
                before_hash: r.text(7),
                after_version: r.opt(8),
                after_hash: r.opt(9),
                editing_cycle_id: r.text(10),
                observations: linked_observations(r.opt(11)),
                ..AttemptRow::default()
            }
        })
        .collect()
    })
}

// ---------------------------------------------------------------------------------------------
// patchdiff_get_pdcp_log

macro_rules! log_page_sql {
    ($where:literal) => {
        concat!(
            "SELECT p.log_sequence, p.pdcp_log_id::text, p.target_file_id::text, p.editing_cycle_id::text, p.status, ",
            "p.protocol_version, p.runtime_version, p.pdcp_content_hash, p.request_fingerprint, p.client_request_id, ",
            "p.conflicts_with_pdcp_log_id::text, p.before_version, p.before_hash, p.after_version, p.after_hash, ",
            "p.failure_reason, p.failure_detail, p.failure_stage, p.failed_change_id, p.parent_pdcp_log_id::text, ",
            "p.attempt, p.source, p.diagnostic::text, pg_catalog.left(p.intent, 257), ",
            "pg_catalog.octet_length(p.pdcp_content)::int8, p.created_at, ",
            // The text a page shows whole, by its stored size (no text read: [`PAGE_BYTES`]).
            // Every text column it shows, though only the first few hold a sender's text: the
            // others are the engine's words and hashes, long only in a row written by hand.
            "(COALESCE(pg_catalog.octet_length(p.failure_detail), 0) ",
            "+ COALESCE(pg_catalog.octet_length(p.diagnostic::text), 0) + pg_catalog.octet_length(p.source) ",
            "+ COALESCE(pg_catalog.octet_length(p.failed_change_id), 0) ",
            "+ COALESCE(pg_catalog.octet_length(p.client_request_id), 0) + pg_catalog.octet_length(p.status) ",
            "+ pg_catalog.octet_length(p.protocol_version) + pg_catalog.octet_length(p.runtime_version) ",
            "+ pg_catalog.octet_length(p.pdcp_content_hash) + pg_catalog.octet_length(p.request_fingerprint) ",
            "+ pg_catalog.octet_length(p.before_hash) + COALESCE(pg_catalog.octet_length(p.after_hash), 0) ",
            "+ COALESCE(pg_catalog.octet_length(p.failure_reason), 0) ",
            "+ COALESCE(pg_catalog.octet_length(p.failure_stage), 0))::int8 ",
            "FROM patchdiff.pdcp_logs p WHERE ",
            $where,
            " LIMIT $6"
        )
    };
}

/// One statement per leading filter, each one range of the index that matches it (see
/// [`read`]): (target, client_request_id) is unique, so a key names at most one row;
/// (target, pdcp_content_hash, log_sequence), (target, status, log_sequence) and
/// (target, log_sequence) are ordered by sequence within the filter. Every statement takes the
/// same six parameters: $1 target, $2 highest sequence allowed, $3 status, $4 content hash,
/// $5 request key, $6 rows to fetch.
// No ORDER BY: the unique index gives at most one row, and with sorting disabled an ORDER BY
// would make the planner walk a sequence index instead (measured: 22,769 rows, 24 ms).
pub(crate) const LOG_BY_KEY_SQL: &str = log_page_sql!(
    "p.target_file_id = $1::uuid AND p.client_request_id = $5 AND p.log_sequence <= $2 \
     AND ($3::text IS NULL OR p.status = $3) AND ($4::text IS NULL OR p.pdcp_content_hash = $4)"
);
pub(crate) const LOG_BY_HASH_SQL: &str = log_page_sql!(
    "(p.target_file_id, p.pdcp_content_hash, p.log_sequence) <= ($1::uuid, $4, $2) \
     AND (p.target_file_id, p.pdcp_content_hash, p.log_sequence) > ($1::uuid, $4, 0) \
     AND ($3::text IS NULL OR p.status = $3) \
     ORDER BY p.target_file_id DESC, p.pdcp_content_hash DESC, p.log_sequence DESC"
);
pub(crate) const LOG_BY_STATUS_SQL: &str = log_page_sql!(
    "(p.target_file_id, p.status, p.log_sequence) <= ($1::uuid, $3, $2) \
     AND (p.target_file_id, p.status, p.log_sequence) > ($1::uuid, $3, 0) \
     ORDER BY p.target_file_id DESC, p.status DESC, p.log_sequence DESC"
);
pub(crate) const LOG_ALL_SQL: &str = log_page_sql!(
    "(p.target_file_id, p.log_sequence) <= ($1::uuid, $2) AND (p.target_file_id, p.log_sequence) > ($1::uuid, 0) \
     ORDER BY p.target_file_id DESC, p.log_sequence DESC"
);

fn log_row(r: &Row<Deformed>) -> AttemptRow {
    AttemptRow {
        log_sequence: r.int(1),
        pdcp_log_id: r.text(2),
        target_file_id: r.text(3),
        editing_cycle_id: r.text(4),
        status: r.text(5),
        protocol_version: r.text(6),
        runtime_version: r.text(7),
        pdcp_content_hash: r.text(8),
        request_fingerprint: r.text(9),
        client_request_id: r.opt(10),
        conflicts_with_pdcp_log_id: r.opt(11),
        before_version: r.int(12),
        before_hash: r.text(13),
        after_version: r.opt(14),
        after_hash: r.opt(15),
        failure_reason: r.opt(16),
        failure_detail: r.opt(17),
        failure_stage: r.opt(18),
        failed_change_id: r.opt(19),
        parent_pdcp_log_id: r.opt(20),
        attempt: r.opt(21),
        source: r.text(22),
        diagnostic_text: r.json_literal(23),
        intent_head: r.opt(24),
        pdcp_content_bytes: r.int(25),
        created_at_us: r.unix_micros(26),
        ..AttemptRow::default()
    }
}

/// The column of a log page's row with the stored size of the text it shows whole, and the most
/// a page reads of it ([`patchdiff_engine::api::limits::HISTORY_PAGE_TEXT_BYTES`]).
const PAGE_BYTES: (usize, i64) = (27, HISTORY_PAGE_TEXT_BYTES as i64);

/// A page of `q.target_file_id`'s attempts: at most `q.page.fetch()` rows, newest first, read
/// by the statement of the query's leading filter; `true` when its text budget ended it early.
pub fn log_page(
    c: &SpiClient,
    q: &patchdiff_engine::api::history::LogQuery,
) -> (Vec<AttemptRow>, bool) {
    let sql = if q.client_request_id.is_some() {
        LOG_BY_KEY_SQL
    } else if q.content_hash.is_some() {
        LOG_BY_HASH_SQL
    } else if q.status.is_some() {
        LOG_BY_STATUS_SQL
    } else {
        LOG_ALL_SQL
    };
    read_rows(
        c,
        sql,
        &[
            q.target_file_id.as_str().into(),
            q.page.max_sequence.into(),
            q.status.into(),
            q.content_hash.as_deref().into(),
            q.client_request_id.as_deref().into(),
            q.page.fetch().into(),
        ],
        "reading log page",
        PAGE_BYTES,
        log_row,
    )
}

/// One stored record, read only when it fits the page.
pub fn record(c: &SpiClient, pdcp_log_id: &str) -> String {
    read(
        c,
        "SELECT pdcp_content FROM patchdiff.pdcp_logs WHERE pdcp_log_id = $1::uuid",
        &[pdcp_log_id.into()],
        "reading record",
    )
    .first()
    .get_one::<String>()
    .unwrap_or_else(|e| fault("reading record", e))
    .unwrap_or_default()
}
