//! Checkpoints, replay and history: `patchdiff_save`, `patchdiff_replay`,
//! `patchdiff_get_pdcp_log` and `patchdiff_get_manifest_ledger`.
//!
//! Glue only: the engine (`checkpoint`, `replay`, `history`) checks arguments, judges guards,
//! replays records and shapes every answer; this file locks, reads and writes through SPI.
//! A history page is one read-only statement that reads one index range of at most limit + 1
//! rows and never detoasts a stored record it does not return; replay streams accepted records
//! in bounded batches.

use crate::access::{Caller, Need, tiered};
use crate::json_text::JsonText;
use crate::store;
use patchdiff_engine::api::args::{Args, not_found};
use patchdiff_engine::api::checkpoint;
use patchdiff_engine::api::export::{self, ExportFormat, ExportMeta};
use patchdiff_engine::api::history::{self, LedgerRow, LogRow};
use patchdiff_engine::api::observation::{LinkedObservation, ObservationRow};
use patchdiff_engine::api::replay::{self, Accepted, Failure, Replay};
use patchdiff_engine::api::target::{BindingProof, TargetView, WorkspaceBinding};
use patchdiff_engine::wire::{LITERAL, to_string};
use pgrx::PgOid;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiHeapTupleData, SpiTupleTable};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    /// Plans kept for the life of the backend (SPI_keepplan), as in `store`.
    static PLANS: RefCell<HashMap<&'static str, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

fn fault(what: &str, e: impl std::fmt::Display) -> ! {
    // Infrastructure faults are SQL errors, never rejections.
    pgrx::error!("pg_patchdiff: {what}: {e}")
}

fn plan(
    client: &SpiClient,
    sql: &'static str,
    args: &[DatumWithOid],
    mutating: bool,
    what: &str,
) -> Rc<OwnedPreparedStatement> {
    PLANS
        .with(|p| p.borrow().get(sql).cloned())
        .unwrap_or_else(|| {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let prepared = if mutating {
                client.prepare_mut(sql, &types)
            } else {
                client.prepare(sql, &types)
            };
            let plan = Rc::new(prepared.unwrap_or_else(|e| fault(what, e)).keep());
            PLANS.with(|p| p.borrow_mut().insert(sql, plan.clone()));
            plan
        })
}

/// A read-only kept plan: runs in the caller's snapshot and assigns no transaction ID.
///
/// History pages and replay batches read one range of a composite index `(scope..., sequence)`.
/// Each is written as a row-value range, `(scope, seq) <= ($scope, $max) AND (scope, seq) >
/// ($scope, 0)`, ordered by the whole key, never as `scope = $1 ... ORDER BY seq`: with an
/// equality the planner may walk the global `UNIQUE (sequence)` index backward and filter by
/// scope, which visits every newer row of every other target (measured: 11,750 rows, 18 ms, for
/// a 20-row target). Only the composite index returns a row range in key order; the functions
/// that run these statements are declared with `enable_sort = off` and
/// `enable_incremental_sort = off` (`history_planner_settings`)
/// because the planner underestimates row-value ranges and would otherwise sort the whole
/// range. So a page reads at most limit + 1 index entries wherever it lies in the history.
fn read<'c>(
    client: &SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    let p = plan(client, sql, args, false, what);
    client
        .select(&*p, None, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// The row of target `id` that the first of the caller's tiers of `sql` ([`tiered!`]) finds,
/// read-write (`locking`: the statement takes a row lock) or read-only.
fn first_row<'c>(
    c: &mut SpiClient<'c>,
    caller: Caller,
    need: Need,
    sql: &[&'static str; 3],
    id: &str,
    locking: bool,
) -> Option<SpiHeapTupleData<'c>> {
    caller.first(|tier| {
        let [a, n] = store::access_args(caller, need);
        let args = [id.into(), a, n];
        let rows = if locking {
            write(c, sql[tier], &args, "locking target")
        } else {
            read(c, sql[tier], &args, "reading target")
        };
        let row = rows.first();
        if row.is_empty() {
            return None;
        }
        row.get_heap_tuple()
            .unwrap_or_else(|e| fault("reading target", e))
    })
}

/// A read-write kept plan (row locks and writes).
fn write<'c>(
    client: &mut SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    let p = plan(client, sql, args, true, what);
    client
        .update(&*p, None, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// Typed column access that turns a conversion failure into an infrastructure fault.
struct Row<'a, 'c>(&'a SpiHeapTupleData<'c>, &'static str);

impl Row<'_, '_> {
    fn opt<T: FromDatum + IntoDatum>(&self, i: usize) -> Option<T> {
        self.0.get::<T>(i).unwrap_or_else(|e| fault(self.1, e))
    }
    fn text(&self, i: usize) -> String {
        self.opt::<String>(i).unwrap_or_default()
    }
    fn int(&self, i: usize) -> i64 {
        self.opt::<i64>(i).unwrap_or_default()
    }
    fn json(&self, i: usize) -> Option<Value> {
        self.opt::<String>(i)
            .map(|s| serde_json::from_str(&s).unwrap_or_else(|e| fault(self.1, e)))
    }
}

fn out(v: &Value) -> JsonText {
    JsonText(to_string(v, LITERAL))
}

// ---------------------------------------------------------------------------------------------
// patchdiff_save

/// Closes the active cycle at the current version, opens the next one, snapshots the current
/// content into the closed cycle and points the target at the new cycle, in one statement.
/// The snapshot copies the stored row, so the content never travels through the function.
const SAVE_SQL: &str = "WITH closed AS ( \
       UPDATE patchdiff.editing_cycles SET closed_version = $4, closed_at = pg_catalog.clock_timestamp() \
       WHERE editing_cycle_id = $2::uuid AND target_file_id = $1::uuid RETURNING editing_cycle_id), \
     opened AS ( \
       INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version) \
       VALUES ($3::uuid, $1::uuid, $4) RETURNING editing_cycle_id), \
     snap AS ( \
       INSERT INTO patchdiff.snapshots (snapshot_id, target_file_id, editing_cycle_id, snapshot_reason, version, \
         content_hash, content) \
       SELECT $5::uuid, t.target_file_id, c.editing_cycle_id, 'save_checkpoint', t.version, t.current_hash, \
         t.current_content \
       FROM patchdiff.targets t, closed c WHERE t.target_file_id = $1::uuid RETURNING snapshot_id) \
     UPDATE patchdiff.targets t SET active_editing_cycle_id = o.editing_cycle_id \
     FROM opened o, snap s WHERE t.target_file_id = $1::uuid \
     RETURNING s.snapshot_id::text";

macro_rules! save_lock_select {
    ($pred:expr, $columns:literal) => {
        concat!(
            "SELECT version, current_hash, active_editing_cycle_id::text",
            $columns,
            " FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred,
            " FOR UPDATE"
        )
    };
}

const SAVE_LOCK_SQL: [&str; 3] = tiered!(save_lock_select, "t", "");

/// A publishing SAVE also reads the content, its recorded line endings and the binding with its
/// proof.
const SAVE_LOCK_PUBLISH_SQL: [&str; 3] = tiered!(
    save_lock_select,
    "t",
    ", current_content, source_line_endings::text, workspace_root_device, workspace_root_inode, \
     workspace_relative_path, workspace_baseline_sha256, workspace_binding_nonce, workspace_binding_proof, \
     workspace_baseline_bytes"
);

/// Creates a `save_checkpoint` snapshot, closes the active editing cycle and opens a new one,
/// under the target's row lock; content, version and hash are unchanged. Optional guards
/// `expected_target_version` / `expected_current_hash` are both checked when supplied.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_save(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_save";
    let req = match checkpoint::parse_save(&args.0) {
        Ok(r) => r,
        Err(e) => return out(&e.to_json(TOOL)),
    };
    // Refused before anything is read or locked: the publisher installs the file between this
    // call and its own COMMIT, which only a caller owning the transaction can do.
    if req.sync_workspace && !crate::workspace_owned_transaction() {
        return out(&checkpoint::owned_transaction_required().to_json(TOOL));
    }
    let id = req.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect_mut(|c| {
        let sql = if req.sync_workspace {
            SAVE_LOCK_PUBLISH_SQL
        } else {
            SAVE_LOCK_SQL
        };
        let Some(tuple) = first_row(c, caller, Need::Write, &sql, id, true) else {
            return store::unavailable(c, id, caller, Need::Write);
        };
        let r = Row(&tuple, "locking target");
        let (version, hash, cycle) = (r.int(1), r.text(2), r.text(3));
        let content = if req.sync_workspace {
            r.text(4)
        } else {
            String::new()
        };
        let locked = TargetView {
            target_file_id: id,
            version,
            current_hash: &hash,
            content: &content,
        };
        if let Some(rejected) = checkpoint::check_guards(&req, &locked) {
            return rejected;
        }
        let publication = if req.sync_workspace {
            let binding = r.opt::<i64>(6).map(|root_device| WorkspaceBinding {
                root_device,
                root_inode: r.int(7),
                relative_path: r.text(8),
                baseline_sha256: r.text(9),
                baseline_bytes: r.int(12),
                proof: r.opt::<String>(10).map(|nonce| BindingProof {
                    nonce,
                    proof: r.text(11),
                }),
            });
            let facts = r.json(5).unwrap_or(Value::Null);
            match checkpoint::publication(&req, &locked, &facts, binding) {
                Ok(p) => Some(p),
                Err(rejected) => return rejected,
            }
        } else {
            None
        };
        let (new_cycle, snapshot) = (new_id(), new_id());
        let rows = write(
            c,
            SAVE_SQL,
            &[
                id.into(),
                cycle.as_str().into(),
                new_cycle.as_str().into(),
                version.into(),
                snapshot.as_str().into(),
            ],
            "saving checkpoint",
        );
        if rows.len() != 1 {
            fault(
                "saving checkpoint",
                "the active editing cycle was not found",
            );
        }
        if let Some(p) = &publication {
            write(
                c,
                "UPDATE patchdiff.targets SET workspace_baseline_sha256 = $2, workspace_baseline_bytes = $3 \
                 WHERE target_file_id = $1::uuid",
                &[
                    id.into(),
                    p.content_sha256.as_str().into(),
                    i64::try_from(p.content.len()).unwrap_or(i64::MAX).into(),
                ],
                "moving the workspace baseline",
            );
        }
        let export = req.export_after_save.then(|| {
            let t = store::target(c, id, caller, Need::Read)
                .unwrap_or_else(|| fault("exporting", "target vanished"));
            export_response(id, &t, ExportFormat::OriginalText)
                .unwrap_or_else(|e| e.to_json("patchdiff_export_target"))
        });
        let mut saved = checkpoint::saved_response(&locked, &snapshot, &cycle, &new_cycle, export);
        if let (Some(p), Value::Object(m)) = (publication, &mut saved) {
            m.insert("workspace_publication".into(), p.to_json());
        }
        saved
    });
    out(&answer)
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The export answer for a stored target row.
pub(crate) fn export_response(
    id: &str,
    t: &store::TargetRow,
    format: ExportFormat,
) -> Result<Value, patchdiff_engine::api::args::ArgError> {
    let facts = t
        .source_line_endings
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or(Value::Null);
    let view = TargetView {
        target_file_id: id,
        version: t.version,
        current_hash: &t.current_hash,
        content: &t.content,
    };
    let meta = ExportMeta {
        filename: &t.filename,
        target_type: &t.target_type,
        source_line_endings: &facts,
    };
    export::export(&view, &meta, format)
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

struct StoredRow {
    log_sequence: i64,
    pdcp_log_id: String,
    protocol_version: String,
    runtime_version: String,
    pdcp_content: String,
    before_version: i64,
    before_hash: String,
    after_version: Option<i64>,
    after_hash: Option<String>,
    editing_cycle_id: String,
    /// The observations this attempt consumed (observed submissions only).
    observations: Vec<LinkedObservation>,
}

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

impl StoredRow {
    fn accepted(&self) -> Accepted<'_> {
        Accepted {
            log_sequence: self.log_sequence,
            pdcp_log_id: &self.pdcp_log_id,
            protocol_version: &self.protocol_version,
            runtime_version: &self.runtime_version,
            pdcp_content: &self.pdcp_content,
            before_version: self.before_version,
            before_hash: &self.before_hash,
            after_version: self.after_version,
            after_hash: self.after_hash.as_deref(),
            editing_cycle_id: &self.editing_cycle_id,
            observations: &self.observations,
        }
    }
}

/// Sequence ranges `(after, upto]` of the next accepted rows, each holding at most
/// `REPLAY_BATCH_BYTES` of records (or one larger record). Empty at the end of the log.
fn next_batches(id: &str, after: i64) -> Vec<(i64, i64)> {
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
fn batch(id: &str, after: i64, upto: i64) -> Vec<StoredRow> {
    Spi::connect(|c| {
        read(
            c,
            REPLAY_ROWS_SQL,
            &[id.into(), after.into(), upto.into()],
            "reading accepted attempts",
        )
        .map(|t| {
            let r = Row(&t, "reading accepted attempts");
            StoredRow {
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
            }
        })
        .collect()
    })
}

/// Reconstructs the target from its initial snapshot plus its accepted attempts, dispatching
/// each on its recorded (protocol_version, runtime_version), and compares the result with the
/// stored target, all from one consistent state (see the body). Never writes.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_replay(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_replay";
    let id = match Args::parse(&args.0, replay::REPLAY_ARGS, &["target_file_id"])
        .and_then(|a| a.target_file_id())
    {
        Ok(id) => id,
        Err(e) => return out(&e.to_json(TOOL)),
    };
    let id = id.as_str();
    // One consistent state: without a transaction ID (an autocommit call, any read-only
    // transaction, a standby) every statement here runs read-only in the calling statement's
    // snapshot. A transaction that has already written takes a fresh snapshot per statement,
    // so there replay holds a share lock on the target: no submission or SAVE can commit to it
    // between the batches.
    // SAFETY: reads the current transaction's state; no pointers involved.
    let has_xid = unsafe { pg_sys::GetCurrentTransactionIdIfAny() } != pg_sys::InvalidTransactionId;
    let caller = Caller::current();
    let start = Spi::connect_mut(|c| {
        macro_rules! target {
            ($pred:expr, $tail:literal) => {
                concat!(
                    "SELECT version, current_hash, current_content FROM patchdiff.targets t ",
                    "WHERE t.target_file_id = $1::uuid AND ",
                    $pred,
                    $tail
                )
            };
        }
        const TARGET: [&str; 3] = tiered!(target, "t", "");
        const TARGET_FOR_SHARE: [&str; 3] = tiered!(target, "t", " FOR SHARE");
        let sql = if has_xid { &TARGET_FOR_SHARE } else { &TARGET };
        let tuple = first_row(c, caller, Need::Read, sql, id, has_xid)?;
        let r = Row(&tuple, "locking target");
        let stored = (r.int(1), r.text(2), r.text(3));
        let base = read(
            c,
            "SELECT version, content_hash, content FROM patchdiff.snapshots \
             WHERE target_file_id = $1::uuid AND snapshot_reason = 'initial'",
            &[id.into()],
            "reading initial snapshot",
        )
        .first()
        .get_heap_tuple()
        .unwrap_or_else(|e| fault("reading initial snapshot", e))
        .map(|t| {
            let r = Row(&t, "reading initial snapshot");
            (r.int(1), r.text(2), r.text(3))
        });
        Some((stored, base))
    });
    let Some(((version, hash, content), base)) = start else {
        return out(&not_found(id));
    };
    let stored = TargetView {
        target_file_id: id,
        version,
        current_hash: &hash,
        content: &content,
    };
    let replay = match base {
        None => Err(Failure::base_missing()),
        Some((v, h, text)) => Replay::start(id, v, &h, text),
    };
    let mut replay = match replay {
        Ok(r) => r,
        Err(f) => return out(&f.to_json(&stored, 0)),
    };
    let mut after = 0i64;
    loop {
        let ranges = next_batches(id, after);
        if ranges.is_empty() {
            break;
        }
        for (from, upto) in ranges {
            for row in batch(id, from, upto) {
                if let Err(f) = replay.step(&row.accepted()) {
                    return out(&f.to_json(&stored, replay.replayed()));
                }
            }
            after = upto;
        }
    }
    out(&replay.finish(&stored))
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
            "pg_catalog.octet_length(p.pdcp_content)::int8, (EXTRACT(epoch FROM p.created_at) * 1000000)::int8 ",
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

fn log_row(t: &SpiHeapTupleData) -> LogRow {
    let r = Row(t, "reading log page");
    LogRow {
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
        diagnostic: r.json(23),
        intent_head: r.opt(24),
        pdcp_content_bytes: r.int(25),
        created_at_us: r.int(26),
    }
}

macro_rules! target_cycle {
    ($pred:expr) => {
        concat!(
            "SELECT active_editing_cycle_id::text FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred
        )
    };
}

/// The active editing cycle of a target the caller may read.
const TARGET_CYCLE_SQL: [&str; 3] = tiered!(target_cycle, "t");

/// The active editing cycle of the target, if it exists and the caller may read it.
fn readable_cycle(c: &SpiClient, id: &str, caller: Caller) -> Option<String> {
    caller.first(|tier| {
        let [a, n] = store::access_args(caller, Need::Read);
        let rows = read(
            c,
            TARGET_CYCLE_SQL[tier],
            &[id.into(), a, n],
            "reading target",
        );
        (!rows.is_empty()).then(|| {
            rows.first()
                .get_one::<String>()
                .unwrap_or_else(|e| fault("reading target", e))
                .unwrap_or_default()
        })
    })
}

/// A bounded newest-first page of the target's attempts, accepted and rejected.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_pdcp_log(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_get_pdcp_log";
    let q = match history::parse_log(&args.0) {
        Ok(q) => q,
        Err(e) => return out(&history::invalid(&e, TOOL)),
    };
    let id = q.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect(|c| {
        if readable_cycle(c, id, caller).is_none() {
            return history::not_found(id);
        }
        let sql = if q.client_request_id.is_some() {
            LOG_BY_KEY_SQL
        } else if q.content_hash.is_some() {
            LOG_BY_HASH_SQL
        } else if q.status.is_some() {
            LOG_BY_STATUS_SQL
        } else {
            LOG_ALL_SQL
        };
        let rows: Vec<LogRow> = read(
            c,
            sql,
            &[
                id.into(),
                q.page.max_sequence.into(),
                q.status.into(),
                q.content_hash.as_deref().into(),
                q.client_request_id.as_deref().into(),
                q.page.fetch().into(),
            ],
            "reading log page",
        )
        .map(|t| log_row(&t))
        .collect();
        let shown = rows.len().min(q.page.limit);
        let contents = if q.include_content {
            history::content_plan(&rows[..shown])
                .into_iter()
                .zip(&rows)
                .map(|(keep, r)| keep.then(|| record(c, &r.pdcp_log_id)))
                .collect()
        } else {
            Vec::new()
        };
        history::log_page(&q.page, rows, q.include_content, contents)
    });
    out(&answer)
}

/// One stored record, read only when it fits the page.
fn record(c: &SpiClient, pdcp_log_id: &str) -> String {
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

// ---------------------------------------------------------------------------------------------
// patchdiff_get_manifest_ledger

macro_rules! ledger_page_sql {
    ($scope:literal) => {
        concat!(
            "SELECT l.ledger_sequence, l.pdcp_log_id::text, l.log_sequence, l.before_version, l.after_version, ",
            "l.editing_cycle_id::text, l.change_index::int8, l.change_id, l.intent, p.intent, l.rationale, l.risk, ",
            "l.origin, l.derived::text, (EXTRACT(epoch FROM l.created_at) * 1000000)::int8 ",
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

fn ledger_row(t: &SpiHeapTupleData) -> LedgerRow {
    let r = Row(t, "reading ledger page");
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
        derived: r.json(14).unwrap_or(Value::Null),
        created_at_us: r.int(15),
    }
}

/// Accepted manifest ledger entries: the newest page of the active cycle (or of every cycle),
/// displayed oldest first.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_manifest_ledger(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_get_manifest_ledger";
    let q = match history::parse_ledger(&args.0) {
        Ok(q) => q,
        Err(e) => return out(&history::invalid(&e, TOOL)),
    };
    let id = q.target_file_id.as_str();
    let caller = Caller::current();
    let answer = Spi::connect(|c| {
        let Some(cycle) = readable_cycle(c, id, caller) else {
            return history::not_found(id);
        };
        let (sql, scope) = if q.include_previous_cycles {
            (LEDGER_ALL_SQL, id)
        } else {
            (LEDGER_CYCLE_SQL, cycle.as_str())
        };
        let rows: Vec<LedgerRow> = read(
            c,
            sql,
            &[
                scope.into(),
                q.page.max_sequence.into(),
                q.page.fetch().into(),
            ],
            "reading ledger page",
        )
        .map(|t| ledger_row(&t))
        .collect();
        history::ledger_page(&q.page, rows)
    });
    out(&answer)
}

// Planner settings of the functions that page through history (see `read`): a sort could only
// ever serve a page by reading the whole range below its cursor.
pgrx::extension_sql!(
    r#"
ALTER FUNCTION @extschema@.patchdiff_get_pdcp_log(json) SET enable_sort = off SET enable_incremental_sort = off;
ALTER FUNCTION @extschema@.patchdiff_get_manifest_ledger(json) SET enable_sort = off SET enable_incremental_sort = off;
ALTER FUNCTION @extschema@.patchdiff_replay(json) SET enable_sort = off SET enable_incremental_sort = off;
"#,
    name = "history_planner_settings",
    requires = [
        patchdiff_get_pdcp_log,
        patchdiff_get_manifest_ledger,
        patchdiff_replay
    ]
);
