//! Issued observations (authority rows) and the consumptions that spend them.

use super::access::tiered;
use super::{
    Caller, Need, access_args, committed_since_snapshot, fault, fresh, rows_since_snapshot, write,
};
use patchdiff_engine::api::store::{NewObservation, StoredObservation};
use pgrx::datum::DatumWithOid;
use pgrx::spi::{SpiClient, SpiTupleTable};

/// Persists one observation (an authority row).
pub fn insert_observation(client: &mut SpiClient, o: &NewObservation) {
    let s = o.scope;
    let as_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let as_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let args: [DatumWithOid; 20] = [
        o.observation_id.into(),
        o.target_file_id.into(),
        o.editing_cycle_id.into(),
        o.bundle.map(|b| b.0).into(),
        o.bundle.map(|b| b.1).into(),
        o.target_version.into(),
        o.target_current_hash.into(),
        s.symbol_name.as_str().into(),
        s.kind.as_str().into(),
        s.parent.as_deref().into(),
        o.requested_name.into(),
        o.requested_kind.into(),
        o.language.into(),
        o.engine.into(),
        o.grammar.into(),
        as_i64(s.scope_start).into(),
        as_i64(s.scope_end).into(),
        as_i32(s.scope_start_line).into(),
        as_i32(s.scope_end_line).into(),
        s.observed_scope_hash.as_str().into(),
    ];
    write(
        client,
        "INSERT INTO patchdiff.target_scope_observations (observation_id, target_file_id, editing_cycle_id, \
           observation_bundle_id, bundle_ordinal, target_version, target_current_hash, symbol_name, symbol_kind, parent, \
           requested_name, requested_kind, language, engine, grammar, scope_start, scope_end, scope_start_line, \
           scope_end_line, observed_scope_hash) \
         VALUES ($1::uuid, $2::uuid, $3::uuid, $4::uuid, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, \
           $18, $19, $20)",
        &args,
        "writing observation",
    );
}

macro_rules! observation_select {
    ($($tail:tt)+) => {
        concat!(
            "SELECT o.observation_id::text, o.target_file_id::text, o.editing_cycle_id::text, ",
            "o.observation_bundle_id::text, o.bundle_ordinal::bigint, o.symbol_name, o.symbol_kind, o.target_version, ",
            "o.target_current_hash, o.scope_start, o.scope_end, o.observed_scope_hash, c.pdcp_log_id::text, ",
            "o.parent, o.language, o.engine, o.grammar, o.scope_start_line::bigint, o.scope_end_line::bigint ",
            "FROM patchdiff.target_scope_observations o ",
            "LEFT JOIN patchdiff.observation_consumptions c ON c.observation_id = o.observation_id ",
            $($tail)+
        )
    };
}

/// [`observation_select!`] of observations of targets the caller ($2, $3) may read: one of a
/// target it may not read is, to it, no observation at all.
macro_rules! visible_observation_select {
    ($pred:expr, $where:literal, $tail:literal) => {
        observation_select!(concat!(
            "JOIN patchdiff.targets t ON t.target_file_id = o.target_file_id ",
            $where,
            " AND ",
            $pred,
            $tail
        ))
    };
}

const OBSERVATION_SQL: [&str; 3] = tiered!(
    visible_observation_select,
    "t",
    "WHERE o.observation_id = $1::uuid",
    ""
);
const LOCK_OBSERVATIONS_SQL: [&str; 3] = tiered!(
    visible_observation_select,
    "t",
    "WHERE o.observation_id = ANY ($1::text[]::uuid[]) AND o.target_file_id = $4::uuid",
    " FOR UPDATE OF o"
);
/// The named observations the caller may read, on any target.
const VISIBLE_OBSERVATIONS_SQL: [&str; 3] = tiered!(
    visible_observation_select,
    "t",
    "WHERE o.observation_id = ANY ($1::text[]::uuid[])",
    ""
);
const OTHER_TARGETS_OBSERVATIONS_SQL: [&str; 3] = tiered!(
    visible_observation_select,
    "t",
    "WHERE o.observation_id = ANY ($1::text[]::uuid[]) AND o.target_file_id <> $4::uuid",
    ""
);

fn observation_rows(rows: SpiTupleTable, what: &str) -> Vec<StoredObservation> {
    let mut out = Vec::new();
    for row in rows {
        let s = |i: usize| row.get::<String>(i).unwrap_or_else(|e| fault(what, e));
        let n = |i: usize| {
            row.get::<i64>(i)
                .unwrap_or_else(|e| fault(what, e))
                .unwrap_or(0)
        };
        let u = |i: usize| usize::try_from(n(i)).unwrap_or(0);
        out.push(StoredObservation {
            row: patchdiff_engine::api::observation::ObservationRow {
                observation_id: s(1).unwrap_or_default(),
                target_file_id: s(2).unwrap_or_default(),
                editing_cycle_id: s(3).unwrap_or_default(),
                observation_bundle_id: s(4),
                bundle_ordinal: row.get::<i64>(5).unwrap_or_else(|e| fault(what, e)),
                symbol_path: s(6).unwrap_or_default(),
                kind: s(7).unwrap_or_default(),
                target_version: n(8),
                target_current_hash: s(9).unwrap_or_default(),
                scope_start: u(10),
                scope_end: u(11),
                observed_scope_hash: s(12).unwrap_or_default(),
                consumed_by_pdcp_log_id: s(13),
            },
            parent: s(14),
            language: s(15).unwrap_or_default(),
            engine: s(16).unwrap_or_default(),
            grammar: s(17).unwrap_or_default(),
            scope_start_line: u(18),
            scope_end_line: u(19),
        });
    }
    out
}

/// Reads one observation (for its pages).
pub fn observation(client: &mut SpiClient, id: &str, caller: Caller) -> Option<StoredObservation> {
    let [a, n] = access_args(caller, Need::Read);
    let rows = write(
        client,
        OBSERVATION_SQL[caller.widest()],
        &[id.into(), a, n],
        "reading observation",
    );
    observation_rows(rows, "reading observation").pop()
}

/// Reads the named observations, in no particular order, locking (`FOR UPDATE`) those of
/// `target_file_id`, the target the calling transaction has locked for writing. Those of other
/// targets the caller may read are read without a lock (read in a second statement, only when
/// the first did not find every one): they only make the submission `OBSERVATION_TARGET_MISMATCH`,
/// and a lock on them would let a role with a read grant hold up the owner's submissions for as
/// long as its own transaction stays open (helper-58).
pub fn lock_observations(
    client: &mut SpiClient,
    target_file_id: &str,
    ids: &[String],
    caller: Caller,
) -> Vec<patchdiff_engine::api::observation::ObservationRow> {
    let [a, n] = access_args(caller, Need::Read);
    let rows = write(
        client,
        LOCK_OBSERVATIONS_SQL[caller.widest()],
        &[ids.to_vec().into(), a, n, target_file_id.into()],
        "locking observations",
    );
    let mut out: Vec<_> = observation_rows(rows, "locking observations")
        .into_iter()
        .map(|o| o.row)
        .collect();
    if out.len() < ids.len() {
        let [a, n] = access_args(caller, Need::Read);
        let rows = write(
            client,
            OTHER_TARGETS_OBSERVATIONS_SQL[caller.widest()],
            &[ids.to_vec().into(), a, n, target_file_id.into()],
            "reading observations",
        );
        out.extend(
            observation_rows(rows, "reading observations")
                .into_iter()
                .map(|o| o.row),
        );
    }
    if out.len() < ids.len() {
        let [a, n] = access_args(caller, Need::Read);
        if rows_since_snapshot(
            VISIBLE_OBSERVATIONS_SQL[caller.widest()],
            &[ids.to_vec().into(), a, n],
            "reading observations",
        )
        .is_some_and(|n| n > out.len())
        {
            committed_since_snapshot("an observation observation_id names");
        }
    }
    out
}

/// The observations an accepted attempt consumed, in group order (single form: one row).
pub fn consumed_by(
    client: &mut SpiClient,
    pdcp_log_id: &str,
) -> Vec<patchdiff_engine::api::observation::ObservationRow> {
    let rows = fresh(
        client,
        observation_select!(
            "WHERE c.pdcp_log_id = $1::uuid ORDER BY c.group_index NULLS FIRST, o.observation_id"
        ),
        &[pdcp_log_id.into()],
        "reading consumed observations",
    );
    observation_rows(rows, "reading consumed observations")
        .into_iter()
        .map(|o| o.row)
        .collect()
}

/// Records that an accepted attempt consumed observations.
pub fn write_consumptions(
    client: &mut SpiClient,
    pdcp_log_id: &str,
    links: &[patchdiff_engine::api::observation::ObservationLink],
) {
    for l in links {
        let group = l.group_index.map(|g| i32::try_from(g).unwrap_or(i32::MAX));
        write(
            client,
            "INSERT INTO patchdiff.observation_consumptions (observation_id, pdcp_log_id, group_index) \
             VALUES ($1::uuid, $2::uuid, $3)",
            &[
                l.observation_id.as_str().into(),
                pdcp_log_id.into(),
                group.into(),
            ],
            "writing observation consumption",
        );
    }
}
