//! Storage through SPI: the only place that knows table and column names.
//!
//! Every statement names its schema (`patchdiff.`) because the API functions run as SECURITY
//! DEFINER with `search_path = pg_catalog, pg_temp`. IDs cross as text and are cast in SQL.

use crate::access::{Caller, Need, tiered};
use patchdiff_engine::api::submit::{Attempt, Parent, StoredAttempt};
use patchdiff_engine::api::words::Status;
use pgrx::PgOid;
use pgrx::datum::DatumWithOid;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    /// Plans kept for the life of the backend (SPI_keepplan): parsing and planning the
    /// attempt-writing statement every call would cost more than the edit itself. PostgreSQL's
    /// plan cache revalidates them after DDL.
    static PLANS: RefCell<HashMap<&'static str, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

/// Runs `sql` as a kept prepared statement whose parameter types are those of `args`.
fn run<'c>(
    client: &mut SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    let plan = PLANS
        .with(|p| p.borrow().get(sql).cloned())
        .unwrap_or_else(|| {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let plan = Rc::new(
                client
                    .prepare_mut(sql, &types)
                    .unwrap_or_else(|e| fault(what, e))
                    .keep(),
            );
            PLANS.with(|p| p.borrow_mut().insert(sql, plan.clone()));
            plan
        });
    client
        .update(&*plan, None, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// A target's committed row, as read by the locking or the plain read.
pub struct TargetRow {
    pub version: i64,
    pub current_hash: String,
    pub content: String,
    pub active_editing_cycle_id: String,
    pub filename: String,
    pub target_type: String,
    pub source_line_endings: Option<String>,
}

fn fault(what: &str, e: impl std::fmt::Display) -> ! {
    // Infrastructure faults are SQL errors: they roll back, and the front end reports them as
    // outcome_unknown, never as a rejection.
    pgrx::error!("pg_patchdiff: {what}: {e}")
}

macro_rules! target_select {
    ($pred:expr, $tail:literal) => {
        concat!(
            "SELECT version, current_hash, current_content, active_editing_cycle_id::text, filename, target_type, ",
            "source_line_endings::text FROM patchdiff.targets t WHERE target_file_id = $1::uuid AND ",
            $pred,
            $tail
        )
    };
}

const TARGET_SQL: [&str; 3] = tiered!(target_select, "t", "");
const LOCK_TARGET_SQL: [&str; 3] = tiered!(target_select, "t", " FOR UPDATE");

/// The access parameters ($2 caller, $3 need) of a [`tiered!`] statement.
pub fn access_args<'a>(caller: Caller, need: Need) -> [DatumWithOid<'a>; 2] {
    [caller.role.into(), need.as_str().into()]
}

/// Reads a target the caller may `need`.
pub fn target(client: &SpiClient, id: &str, caller: Caller, need: Need) -> Option<TargetRow> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, need);
        let rows = client
            .select(TARGET_SQL[tier], Some(1), &[id.into(), a, n])
            .unwrap_or_else(|e| fault("reading target", e));
        target_row(rows)
    })
}

/// Takes the row lock (`FOR UPDATE`) of a target the caller may write, and reads it. A target it
/// may not write is neither read nor locked. From here on, every statement of this SPI
/// connection runs read-write and sees the latest committed state.
pub fn lock_target(client: &mut SpiClient, id: &str, caller: Caller) -> Option<TargetRow> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, Need::Write);
        let rows = run(
            client,
            LOCK_TARGET_SQL[tier],
            &[id.into(), a, n],
            "locking target",
        );
        target_row(rows)
    })
}

/// The answer for a target the caller could not `need`: `not_found`, exactly as for an unknown
/// ID, unless it may read the target and asked to write it.
pub fn unavailable(client: &SpiClient, id: &str, caller: Caller, need: Need) -> Value {
    if need == Need::Write && target(client, id, caller, Need::Read).is_some() {
        patchdiff_engine::api::tenancy::write_not_granted(id)
    } else {
        patchdiff_engine::api::args::not_found(id)
    }
}

fn target_row(rows: SpiTupleTable) -> Option<TargetRow> {
    let row = rows.first();
    if row.is_empty() {
        return None;
    }
    let get = |i: usize| {
        row.get::<String>(i)
            .unwrap_or_else(|e| fault("reading target", e))
    };
    Some(TargetRow {
        version: row
            .get::<i64>(1)
            .unwrap_or_else(|e| fault("reading target", e))
            .unwrap_or(0),
        current_hash: get(2).unwrap_or_default(),
        content: get(3).unwrap_or_default(),
        active_editing_cycle_id: get(4).unwrap_or_default(),
        filename: get(5).unwrap_or_default(),
        target_type: get(6).unwrap_or_default(),
        source_line_endings: get(7),
    })
}

/// Inserts a target owned by `owner` with its first editing cycle and its initial snapshot.
/// Returns false, having written nothing, when the workspace binding's nonce already binds
/// another target (a copied proof).
pub fn insert_target(
    client: &mut SpiClient,
    t: &patchdiff_engine::api::target::NewTarget,
    target_file_id: &str,
    cycle_id: &str,
    snapshot_id: &str,
    owner: pgrx::pg_sys::Oid,
) -> bool {
    let facts = patchdiff_engine::wire::to_string(
        &t.source_line_endings.to_json(),
        patchdiff_engine::wire::LITERAL,
    );
    let w = t.workspace.as_ref();
    let proof = w.and_then(|w| w.proof.as_ref());
    let args: [DatumWithOid; 17] = [
        target_file_id.into(),
        t.project_id.as_deref().into(),
        t.filename.as_str().into(),
        t.target_type.as_str().into(),
        t.canonical.as_str().into(),
        t.current_hash.as_str().into(),
        cycle_id.into(),
        facts.as_str().into(),
        snapshot_id.into(),
        w.map(|w| w.root_device).into(),
        w.map(|w| w.root_inode).into(),
        w.map(|w| w.relative_path.as_str()).into(),
        w.map(|w| w.baseline_sha256.as_str()).into(),
        owner.into(),
        proof.map(|p| p.nonce.as_str()).into(),
        proof.map(|p| p.proof.as_str()).into(),
        w.map(|w| w.baseline_bytes).into(),
    ];
    let rows = client
        .update(
            "WITH d AS (INSERT INTO patchdiff.target_directory (target_file_id, created_at, workspace_binding_nonce) \
                 VALUES ($1::uuid, pg_catalog.clock_timestamp(), $15) \
                 ON CONFLICT (workspace_binding_nonce) DO NOTHING RETURNING created_at), \
             t AS (INSERT INTO patchdiff.targets (target_file_id, project_id, filename, target_type, current_content, \
                 current_hash, version, active_editing_cycle_id, source_line_endings, workspace_root_device, \
                 workspace_root_inode, workspace_relative_path, workspace_baseline_sha256, owner_role, \
                 workspace_binding_nonce, workspace_binding_proof, workspace_baseline_bytes, created_at, updated_at) \
                 SELECT $1::uuid, $2::uuid, $3, $4, $5, $6, 0, $7::uuid, $8::json, $10, $11, $12, $13, $14::regrole, \
                   $15, $16, $17, d.created_at, d.created_at FROM d \
                 RETURNING target_file_id), \
             c AS (INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version) \
                 SELECT $7::uuid, target_file_id, 0 FROM t RETURNING editing_cycle_id) \
             INSERT INTO patchdiff.snapshots (snapshot_id, target_file_id, editing_cycle_id, snapshot_reason, version, content_hash, content) \
                 SELECT $9::uuid, t.target_file_id, c.editing_cycle_id, 'initial', 0, $6, $5 FROM t, c \
                 RETURNING snapshot_id",
            None,
            &args,
        )
        .unwrap_or_else(|e| fault("initializing target", e));
    rows.len() == 1
}

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
    let rows = run(
        client,
        SQL[caller.widest()],
        &[id.into(), a, n],
        "reading parent attempt",
    );
    let row = rows.first();
    if row.is_empty() {
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

fn json_col(s: Option<String>) -> Option<Value> {
    s.and_then(|s| serde_json::from_str(&s).ok())
}

/// The attempt stored under a request key on a target, with its ledger facts.
pub fn keyed_attempt(
    client: &mut SpiClient,
    target_file_id: &str,
    key: &str,
) -> Option<StoredAttempt> {
    let rows = run(
        client,
        "SELECT p.pdcp_log_id::text, p.status, p.request_fingerprint, p.request_envelope::text, p.pdcp_content, \
                    p.before_hash, p.after_version, p.after_hash, p.failure_reason, p.failure_detail, p.failed_change_id, \
                    p.diagnostic::text, p.validity::text, \
                    (SELECT pg_catalog.json_agg(l.derived ORDER BY l.change_index)::text \
                       FROM patchdiff.manifest_ledger l WHERE l.pdcp_log_id = p.pdcp_log_id) \
               FROM patchdiff.pdcp_logs p WHERE p.target_file_id = $1::uuid AND p.client_request_id = $2",
        &[target_file_id.into(), key.into()],
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
    Some(StoredAttempt {
        pdcp_log_id: s(1).unwrap_or_default(),
        status: s(2).as_deref().and_then(Status::parse),
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
        changes: json_col(s(14))
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default(),
    })
}

/// Writes an attempt row, its ledger rows and, for an acceptance, the new target state, in
/// one statement. Returns nothing: the caller chose the attempt's ID.
pub fn write_attempt(
    client: &mut SpiClient,
    a: &Attempt,
    pdcp_log_id: &str,
    target_file_id: &str,
    cycle_id: &str,
) {
    use patchdiff_engine::wire::{LITERAL, to_string};
    let text = |v: &Value| to_string(v, LITERAL);
    let diagnostic = a.diagnostic.as_ref().map(text);
    let changes: Value = a
        .changes
        .iter()
        .map(|c| {
            serde_json::json!({
                "change_index": c.change_index,
                "change_id": c.change_id,
                "rationale": c.rationale,
                "risk": c.risk,
                "derived": c.to_json(),
            })
        })
        .collect();
    let envelope = text(&a.request_envelope);
    let validity = text(&a.validity);
    let changes = text(&changes);
    let args: [DatumWithOid; 28] = [
        pdcp_log_id.into(),
        target_file_id.into(),
        cycle_id.into(),
        a.status.as_str().into(),
        a.protocol_version.into(),
        a.runtime_version.into(),
        a.pdcp_content.as_str().into(),
        a.pdcp_content_hash.as_str().into(),
        a.request_fingerprint.as_str().into(),
        envelope.as_str().into(),
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
        diagnostic.as_deref().into(),
        validity.as_str().into(),
        a.parent_pdcp_log_id.as_deref().into(),
        a.attempt.into(),
        a.source.as_str().into(),
        changes.as_str().into(),
        a.intent.as_deref().into(),
        a.new_content.as_deref().into(),
    ];
    let written = run(
        client,
        "WITH log AS ( \
               INSERT INTO patchdiff.pdcp_logs (pdcp_log_id, target_file_id, editing_cycle_id, status, protocol_version, \
                 runtime_version, pdcp_content, pdcp_content_hash, request_fingerprint, request_envelope, client_request_id, \
                 conflicts_with_pdcp_log_id, before_version, before_hash, after_version, after_hash, failure_reason, \
                 failure_detail, failure_stage, failed_change_id, diagnostic, validity, parent_pdcp_log_id, attempt, source, intent) \
               VALUES ($1::uuid, $2::uuid, $3::uuid, $4, $5, $6, $7, $8, $9, $10::json, $11, $12::uuid, $13, $14, $15, $16, \
                 $17, $18, $19, $20, $21::json, $22::json, $23::uuid, $24, $25, $27) \
               ON CONFLICT (target_file_id, client_request_id) WHERE client_request_id IS NOT NULL DO NOTHING \
               RETURNING pdcp_log_id, log_sequence), \
             ledger AS ( \
               INSERT INTO patchdiff.manifest_ledger (ledger_entry_id, pdcp_log_id, log_sequence, target_file_id, \
                 editing_cycle_id, before_version, after_version, change_index, change_id, origin, intent, rationale, risk, derived) \
               SELECT pg_catalog.gen_random_uuid(), log.pdcp_log_id, log.log_sequence, $2::uuid, $3::uuid, $13, $15, \
                 c.change_index, c.change_id, 'typed', COALESCE(c.rationale, $27), c.rationale, c.risk, c.derived \
               FROM log, pg_catalog.json_to_recordset($26::json) \
                 AS c(change_index integer, change_id text, rationale text, risk text, derived json) \
               WHERE $4 = 'accepted'), \
             target AS ( \
               UPDATE patchdiff.targets SET current_content = $28, current_hash = $16, version = $15, \
                 updated_at = pg_catalog.clock_timestamp() \
               WHERE target_file_id = $2::uuid AND $4 = 'accepted' AND EXISTS (SELECT FROM log)) \
             SELECT log_sequence FROM log",
        &args,
        "writing attempt",
    );
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
}

/// An observation to persist.
pub struct NewObservation<'a> {
    pub observation_id: &'a str,
    pub target_file_id: &'a str,
    pub editing_cycle_id: &'a str,
    pub bundle: Option<(&'a str, i32)>,
    pub target_version: i64,
    pub target_current_hash: &'a str,
    pub scope: &'a patchdiff_engine::api::observation::ScopeView,
    pub requested_name: &'a str,
    pub requested_kind: Option<&'a str>,
    pub language: &'a str,
    pub engine: &'a str,
    pub grammar: &'a str,
}

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
    run(
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

/// A stored observation with what its pages repeat.
pub struct StoredObservation {
    pub row: patchdiff_engine::api::observation::ObservationRow,
    pub parent: Option<String>,
    pub language: String,
    pub engine: String,
    pub grammar: String,
    pub scope_start_line: usize,
    pub scope_end_line: usize,
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
    "WHERE o.observation_id = ANY ($1::text[]::uuid[])",
    " FOR UPDATE OF o"
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
    let rows = run(
        client,
        OBSERVATION_SQL[caller.widest()],
        &[id.into(), a, n],
        "reading observation",
    );
    observation_rows(rows, "reading observation").pop()
}

/// Locks and reads the named observations (`FOR UPDATE`), in no particular order.
pub fn lock_observations(
    client: &mut SpiClient,
    ids: &[String],
    caller: Caller,
) -> Vec<patchdiff_engine::api::observation::ObservationRow> {
    let [a, n] = access_args(caller, Need::Read);
    let rows = run(
        client,
        LOCK_OBSERVATIONS_SQL[caller.widest()],
        &[ids.to_vec().into(), a, n],
        "locking observations",
    );
    observation_rows(rows, "locking observations")
        .into_iter()
        .map(|o| o.row)
        .collect()
}

/// The observations an accepted attempt consumed, in group order (single form: one row).
pub fn consumed_by(
    client: &mut SpiClient,
    pdcp_log_id: &str,
) -> Vec<patchdiff_engine::api::observation::ObservationRow> {
    let rows = run(
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
        run(
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
