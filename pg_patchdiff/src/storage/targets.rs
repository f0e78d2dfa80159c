//! Target rows: reads, the write lock, creation, and the checkpoint (SAVE) statements.

use super::access::tiered;
use super::{
    Caller, Need, Row, access_args, committed_since_snapshot, fault, first_row, fresh, read,
    rows_since_snapshot, write, write_once,
};
use patchdiff_engine::api::feed::{Event, Kind};
use patchdiff_engine::api::store::{PublishFacts, SaveLock, StoredState, StoredTarget};
use patchdiff_engine::api::target::{BindingProof, WorkspaceBinding};
use pgrx::datum::DatumWithOid;
use pgrx::spi::{SpiClient, SpiTupleTable};
use serde_json::Value;

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

/// Reads a target the caller may `need`, with a kept plan (a primary-key lookup: at most one
/// row). Planning it per call took about 0.035 ms, a fifth of a small read's time end to end
/// (docs/benchmarks.md, "The row rules").
///
/// One the caller may write only in the latest committed state, when it needs write, is 40001
/// ([`refuse_if_writable_since_snapshot`]): `observe_scope`'s selections issue observations for
/// a write.
pub fn target(client: &SpiClient, id: &str, caller: Caller, need: Need) -> Option<StoredTarget> {
    let found = unlocked_target(client, id, caller, need, read);
    if found.is_none() && need == Need::Write {
        refuse_if_writable_since_snapshot(id, caller);
    }
    found
}

/// The target the caller may write, read without a lock and without a transaction ID, in a
/// snapshot taken now: it includes every commit that an earlier statement of this call saw
/// ([`super::fresh`]). What an exact keyed recovery answers with as the target's current state.
pub fn writable_target(client: &SpiClient, id: &str, caller: Caller) -> Option<StoredTarget> {
    unlocked_target(client, id, caller, Need::Write, fresh)
}

fn unlocked_target<'c>(
    client: &SpiClient<'c>,
    id: &str,
    caller: Caller,
    need: Need,
    run: fn(&SpiClient<'c>, &'static str, &[DatumWithOid], &str) -> SpiTupleTable<'c>,
) -> Option<StoredTarget> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, need);
        target_row(
            id,
            run(
                client,
                TARGET_SQL[tier],
                &[id.into(), a, n],
                "reading target",
            ),
        )
    })
}

/// Takes the row lock (`FOR UPDATE`) of a target the caller may write, and reads it. A target it
/// may not write is neither read nor locked. From here on, every statement of this SPI
/// connection runs read-write and sees the latest committed state.
///
/// In a REPEATABLE READ or SERIALIZABLE transaction, a target the caller may write only in the
/// latest committed state (a grant given, or the target made, after its snapshot) is 40001, as a
/// grant changed or revoked after it is (the lock meets the updated row): the lock's statement
/// never reached that row, so nothing conflicted, and the call answered `target_not_found` or
/// `write_not_granted` for a target the retried transaction may write (helper-101).
pub fn lock_target(client: &mut SpiClient, id: &str, caller: Caller) -> Option<StoredTarget> {
    let locked = caller.first(|tier| {
        let [a, n] = access_args(caller, Need::Write);
        let rows = write(
            client,
            LOCK_TARGET_SQL[tier],
            &[id.into(), a, n],
            "locking target",
        );
        let found = target_row(id, rows)?;
        still_granted(client, id, caller, tier).then_some(found)
    });
    if locked.is_none() {
        refuse_if_writable_since_snapshot(id, caller);
    }
    locked
}

/// 40001 when the caller, which may not write target `id` in its transaction's snapshot (a
/// REPEATABLE READ or SERIALIZABLE one), may in the latest committed state: a grant given, or
/// the target made, after the snapshot. Every lookup of a target to write found nothing there
/// and answered `target_not_found` or `write_not_granted`, which a retry loop gives up on,
/// where the retried transaction may write it (helper-101, helper-105: submissions, then SAVE
/// and `observe_scope`).
pub(super) fn refuse_if_writable_since_snapshot(id: &str, caller: Caller) {
    let [a, n] = access_args(caller, Need::Write);
    // The size, not the row: a header read, where the row's text would be detoasted.
    let sql = TARGET_BYTES_SQL[caller.widest()];
    if rows_since_snapshot(sql, &[id.into(), a, n], "locking target").is_some_and(|n| n > 0) {
        committed_since_snapshot("the target, or the grant that lets this role write it,");
    }
}

/// After a grantee's statement locked a target to write it (the grantees' tier, 2), whether its
/// grant still lets it write, read in a statement of its own: under READ COMMITTED that statement
/// sees every commit up to now, where the locking statement's grants subquery saw its own,
/// older snapshot even after waiting for the row (a revoke that committed while the writer
/// waited for the target's lock let the write through, helper-71). Every change of a grant
/// updates the target's row first ([`super::grants::touch_target`]), so a REPEATABLE READ or
/// SERIALIZABLE writer whose snapshot predates it fails on the lock itself (40001). Owners and
/// administrators (tiers 0 and 1) need no second look.
pub(super) fn still_granted(client: &mut SpiClient, id: &str, caller: Caller, tier: usize) -> bool {
    if tier < 2 {
        return true;
    }
    write(
        client,
        STILL_GRANTED_SQL,
        &[id.into(), caller.role.into()],
        "checking the grant",
    )
    .first()
    .get_one::<bool>()
    .unwrap_or_else(|e| fault("checking the grant", e))
    .unwrap_or(false)
}

const STILL_GRANTED_SQL: &str = "SELECT EXISTS (SELECT FROM patchdiff.target_grants g \
     WHERE g.target_file_id = $1::uuid AND g.privilege = 'write' \
     AND pg_catalog.pg_has_role($2::oid, g.grantee::oid, 'USAGE'))";

macro_rules! target_bytes_select {
    ($pred:expr) => {
        concat!(
            "SELECT pg_catalog.octet_length(current_content)::int8 FROM patchdiff.targets t ",
            "WHERE target_file_id = $1::uuid AND ",
            $pred
        )
    };
}
const TARGET_BYTES_SQL: [&str; 3] = tiered!(target_bytes_select, "t");

/// The size in bytes of the text of a target the caller may write, without a lock and without
/// reading the text: `octet_length` of a TOASTed value reads its header, not its chunks.
pub fn target_bytes(client: &SpiClient, id: &str, caller: Caller) -> Option<usize> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, Need::Write);
        let rows = read(
            client,
            TARGET_BYTES_SQL[tier],
            &[id.into(), a, n],
            "measuring target",
        );
        let row = rows.first();
        if row.is_empty() {
            return None;
        }
        let bytes = row
            .get::<i64>(1)
            .unwrap_or_else(|e| fault("measuring target", e))?;
        Some(usize::try_from(bytes).unwrap_or(usize::MAX))
    })
}

/// Whether the caller may read the target.
pub fn readable(client: &SpiClient, id: &str, caller: Caller) -> bool {
    target(client, id, caller, Need::Read).is_some()
}

fn target_row(id: &str, rows: SpiTupleTable) -> Option<StoredTarget> {
    let row = rows.first();
    if row.is_empty() {
        return None;
    }
    let get = |i: usize| {
        row.get::<String>(i)
            .unwrap_or_else(|e| fault("reading target", e))
    };
    Some(StoredTarget {
        target_file_id: id.to_owned(),
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
    let rows = write_once(
        client,
        "WITH d AS (INSERT INTO patchdiff.target_directory (target_file_id, created_at, workspace_binding_nonce, owner_role) \
             VALUES ($1::uuid, pg_catalog.clock_timestamp(), $15, $14::regrole) \
             ON CONFLICT (workspace_binding_nonce) DO NOTHING RETURNING created_at), \
         t AS (INSERT INTO patchdiff.targets (target_file_id, project_id, filename, target_type, current_content, \
             current_hash, version, active_editing_cycle_id, source_line_endings, workspace_root_device, \
             workspace_root_inode, workspace_relative_path, workspace_baseline_sha256, owner_role, \
             workspace_binding_nonce, workspace_binding_proof, workspace_baseline_bytes, created_at, updated_at) \
             SELECT $1::uuid, $2::uuid, $3, $4, $5, $6, 0, $7::uuid, $8::json, $10, $11, $12, $13, $14::regrole, \
               $15, $16, $17, d.created_at, d.created_at FROM d \
             RETURNING target_file_id), \
         c AS (INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version, ledger_floor) \
             SELECT $7::uuid, target_file_id, 0, 0 FROM t RETURNING editing_cycle_id) \
         INSERT INTO patchdiff.snapshots (snapshot_id, target_file_id, editing_cycle_id, snapshot_reason, version, content_hash, content, \
             acting_role) \
             SELECT $9::uuid, t.target_file_id, c.editing_cycle_id, 'initial', 0, $6, $5, pg_catalog.pg_get_userbyid($14::oid)::text \
             FROM t, c \
             RETURNING snapshot_id",
        None,
        &args,
        "initializing target",
    );
    rows.len() == 1
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
pub fn readable_cycle(c: &SpiClient, id: &str, caller: Caller) -> Option<String> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, Need::Read);
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

// ---------------------------------------------------------------------------------------------
// patchdiff_save

/// Closes the active cycle at the current version, opens the next one (its `ledger_floor` the
/// target's largest `ledger_sequence`: the caller holds the target's row lock, so no ledger row
/// of the target is being written meanwhile, and every later one gets a larger sequence number;
/// the ledger page of the active cycle reads the rows above it), snapshots the current
/// content into the closed cycle and points the target at the new cycle, in one statement.
/// The snapshot copies the stored row, so the content never travels through the function.
const SAVE_SQL: &str = "WITH closed AS ( \
       UPDATE patchdiff.editing_cycles SET closed_version = $4, closed_at = pg_catalog.clock_timestamp() \
       WHERE editing_cycle_id = $2::uuid AND target_file_id = $1::uuid RETURNING editing_cycle_id), \
     opened AS ( \
       INSERT INTO patchdiff.editing_cycles (editing_cycle_id, target_file_id, opened_version, ledger_floor) \
       VALUES ($3::uuid, $1::uuid, $4, COALESCE((SELECT pg_catalog.max(l.ledger_sequence) \
         FROM patchdiff.manifest_ledger l WHERE l.target_file_id = $1::uuid), 0)) \
       RETURNING editing_cycle_id), \
     snap AS ( \
       INSERT INTO patchdiff.snapshots (snapshot_id, target_file_id, editing_cycle_id, snapshot_reason, version, \
         content_hash, content, acting_role) \
       SELECT $5::uuid, t.target_file_id, c.editing_cycle_id, 'save_checkpoint', t.version, t.current_hash, \
         t.current_content, pg_catalog.pg_get_userbyid($6::oid)::text \
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

/// Takes the row lock of a target the caller may write, for a SAVE (`publish`: a publishing one).
pub fn lock_for_save(
    c: &mut SpiClient,
    id: &str,
    caller: Caller,
    publish: bool,
) -> Option<SaveLock> {
    let sql = if publish {
        SAVE_LOCK_PUBLISH_SQL
    } else {
        SAVE_LOCK_SQL
    };
    let Some(tuple) = first_row(c, caller, Need::Write, &sql, id, true) else {
        refuse_if_writable_since_snapshot(id, caller);
        return None;
    };
    let r = Row(&tuple, "locking target");
    Some(SaveLock {
        version: r.int(1),
        current_hash: r.text(2),
        active_editing_cycle_id: r.text(3),
        publish: publish.then(|| PublishFacts {
            content: r.text(4),
            source_line_endings: r.json(5).unwrap_or(Value::Null),
            binding: r.opt::<i64>(6).map(|root_device| WorkspaceBinding {
                root_device,
                root_inode: r.int(7),
                relative_path: r.text(8),
                baseline_sha256: r.text(9),
                baseline_bytes: r.int(12),
                proof: r.opt::<String>(10).map(|nonce| BindingProof {
                    nonce,
                    proof: r.text(11),
                }),
            }),
        }),
    })
}

/// Snapshots the locked target into its active cycle `cycle`, closes it at `version`, opens
/// `new_cycle` and queues the SAVE's announcement ([`super::feed`]). The snapshot records
/// `acting_role`'s name.
pub fn save_checkpoint(
    c: &mut SpiClient,
    id: &str,
    cycle: &str,
    new_cycle: &str,
    version: i64,
    snapshot: &str,
    acting_role: pgrx::pg_sys::Oid,
) {
    let rows = write(
        c,
        SAVE_SQL,
        &[
            id.into(),
            cycle.into(),
            new_cycle.into(),
            version.into(),
            snapshot.into(),
            acting_role.into(),
        ],
        "saving checkpoint",
    );
    if rows.len() != 1 {
        fault(
            "saving checkpoint",
            "the active editing cycle was not found",
        );
    }
    super::feed::announce(
        c,
        &Event {
            kind: Kind::Saved,
            target_file_id: id,
            version,
            pdcp_log_id: None,
            log_sequence: None,
            snapshot_id: Some(snapshot),
        },
    );
}

/// Moves a published target's workspace baseline to the content just installed.
pub fn move_workspace_baseline(c: &mut SpiClient, id: &str, sha256: &str, bytes: i64) {
    write(
        c,
        "UPDATE patchdiff.targets SET workspace_baseline_sha256 = $2, workspace_baseline_bytes = $3 \
         WHERE target_file_id = $1::uuid",
        &[id.into(), sha256.into(), bytes.into()],
        "moving the workspace baseline",
    );
}

// ---------------------------------------------------------------------------------------------
// patchdiff_replay

macro_rules! replay_target {
    ($pred:expr, $tail:literal) => {
        concat!(
            "SELECT version, current_hash, current_content FROM patchdiff.targets t ",
            "WHERE t.target_file_id = $1::uuid AND ",
            $pred,
            $tail
        )
    };
}
const REPLAY_TARGET: [&str; 3] = tiered!(replay_target, "t", "");

macro_rules! version_select {
    ($pred:expr) => {
        concat!(
            "SELECT version FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred
        )
    };
}
const VERSION_NOW: [&str; 3] = tiered!(version_select, "t");

/// The version of a target the caller may read, as this statement sees it: in a transaction
/// that has written, a fresh snapshot's.
pub fn version_now(c: &mut SpiClient, id: &str, caller: Caller) -> Option<i64> {
    let tuple = first_row(c, caller, Need::Read, &VERSION_NOW, id, false)?;
    Some(Row(&tuple, "reading target version").int(1))
}

/// The stored target the caller may read and its initial snapshot, if any. No lock: a reader
/// that held one until its transaction ended would stop the owner's edits for as long
/// (replay's consistency: patchdiff_engine's `drive::replay`).
pub fn replay_start(
    c: &mut SpiClient,
    id: &str,
    caller: Caller,
) -> Option<(StoredState, Option<StoredState>)> {
    let tuple = first_row(c, caller, Need::Read, &REPLAY_TARGET, id, false)?;
    let r = Row(&tuple, "reading target");
    let stored = StoredState {
        version: r.int(1),
        hash: r.text(2),
        content: r.text(3),
    };
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
        StoredState {
            version: r.int(1),
            hash: r.text(2),
            content: r.text(3),
        }
    });
    Some((stored, base))
}

// ---------------------------------------------------------------------------------------------
// patchdiff_diff

/// The version of the target's initial snapshot (read by ID: the caller's access was checked
/// when the target was read).
pub fn first_version(c: &SpiClient, id: &str) -> Option<i64> {
    read(
        c,
        "SELECT version FROM patchdiff.snapshots \
         WHERE target_file_id = $1::uuid AND snapshot_reason = 'initial'",
        &[id.into()],
        "reading initial snapshot",
    )
    .first()
    .get::<i64>(1)
    .unwrap_or_else(|e| fault("reading initial snapshot", e))
}

/// The newest snapshot at or below `version` (one index range of `(target_file_id, version)`)
/// and the `log_sequence` of the accepted attempt that produced its version, 0 when none did
/// (found among the target's accepted rows without reading their records).
pub fn snapshot_at_or_below(c: &SpiClient, id: &str, version: i64) -> Option<(StoredState, i64)> {
    let rows = read(
        c,
        "SELECT s.version, s.content_hash, s.content, \
                COALESCE((SELECT l.log_sequence FROM patchdiff.pdcp_logs l \
                           WHERE l.target_file_id = s.target_file_id AND l.status = 'accepted' \
                             AND l.after_version = s.version), 0) \
           FROM patchdiff.snapshots s \
          WHERE s.target_file_id = $1::uuid AND s.version <= $2 \
          ORDER BY s.target_file_id DESC, s.version DESC LIMIT 1",
        &[id.into(), version.into()],
        "reading snapshot",
    );
    let t = rows
        .first()
        .get_heap_tuple()
        .unwrap_or_else(|e| fault("reading snapshot", e))?;
    let r = Row(&t, "reading snapshot");
    Some((
        StoredState {
            version: r.int(1),
            hash: r.text(2),
            content: r.text(3),
        },
        r.int(4),
    ))
}
