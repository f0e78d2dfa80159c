//! Grants, revokes and the directory of targets (issue 15; docs/security.md).

use super::access::tiered;
use super::{Caller, Need, fault, read_once, write_once};
use patchdiff_engine::api::tenancy::{ListQuery, ListedTarget, Privilege};
use pgrx::datum::DatumWithOid;
use pgrx::pg_sys;
use pgrx::spi::SpiClient;

macro_rules! owns_select {
    ($pred:expr) => {
        concat!(
            "SELECT ($4::bool OR ",
            crate::storage::access::owns!("t"),
            ") ",
            "FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred
        )
    };
}

/// $1 target, $2 caller, $3 'read', $4 admin: whether the caller has the owner's privileges (or
/// is an administrator), for a target it may read.
const OWNS_SQL: [&str; 3] = tiered!(owns_select, "t");

/// Whether the caller owns (or administers) target `id`; `None` when it may not read it.
pub fn owns(c: &SpiClient, id: &str, caller: Caller) -> Option<bool> {
    caller.first(|tier| {
        let args: [DatumWithOid; 4] = [
            id.into(),
            caller.role.into(),
            Need::Read.as_str().into(),
            caller.admin.into(),
        ];
        let rows = read_once(c, OWNS_SQL[tier], Some(1), &args, "reading target");
        (!rows.is_empty()).then(|| {
            rows.first()
                .get_one::<bool>()
                .unwrap_or_else(|e| fault("reading target", e))
                .unwrap_or(false)
        })
    })
}

/// The role named `name`, if it exists.
pub fn role(c: &SpiClient, name: &str) -> Option<pg_sys::Oid> {
    let roles = read_once(
        c,
        "SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = $1",
        Some(1),
        &[name.into()],
        "looking up the role",
    );
    (!roles.is_empty())
        .then(|| {
            roles
                .first()
                .get_one::<pg_sys::Oid>()
                .unwrap_or_else(|e| fault("looking up the role", e))
        })
        .flatten()
}

/// The grant `role` now holds on target `id`.
pub fn current_grant(c: &mut SpiClient, id: &str, role: pg_sys::Oid) -> Option<Privilege> {
    let rows = write_once(
        c,
        "SELECT privilege FROM patchdiff.target_grants WHERE target_file_id = $1::uuid AND grantee = $2::regrole",
        Some(1),
        &[id.into(), role.into()],
        "reading grants",
    );
    let p = (!rows.is_empty())
        .then(|| {
            rows.first()
                .get_one::<String>()
                .unwrap_or_else(|e| fault("reading grants", e))
        })
        .flatten();
    match p.as_deref() {
        Some("write") => Some(Privilege::Write),
        Some("read") => Some(Privilege::Read),
        _ => None,
    }
}

/// Updates target `id`'s row without changing it, before a grant or revoke changes a grant of
/// it: the change then waits for every writer that holds the target's row lock (its write
/// commits first), and a REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates the
/// change fails with a serialization error (40001) when it next locks the target to write,
/// instead of writing by a grant that is gone (helper-71). Writers lock only the target, then
/// look at their grant again ([`super::targets::still_granted`]), so the order is always target
/// then grant: a grantee that keeps writing cannot hold a revoke off for longer than one
/// writer's transaction (a lock on the grant row itself did, helper-72), and an owner's
/// transaction that holds the target and then revokes cannot deadlock with a grantee waiting for
/// the target.
pub fn touch_target(c: &mut SpiClient, id: &str) {
    write_once(
        c,
        "UPDATE patchdiff.targets SET owner_role = owner_role WHERE target_file_id = $1::uuid",
        None,
        &[id.into()],
        "locking target",
    );
}

/// Gives `role` `privilege` on target `id`, replacing any grant it held.
pub fn grant(
    c: &mut SpiClient,
    id: &str,
    role: pg_sys::Oid,
    privilege: Privilege,
    granted_by: pg_sys::Oid,
) {
    touch_target(c, id);
    write_once(
        c,
        "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by) \
         VALUES ($1::uuid, $2::regrole, $3, $4::regrole) \
         ON CONFLICT (target_file_id, grantee) DO UPDATE \
         SET privilege = EXCLUDED.privilege, granted_by = EXCLUDED.granted_by, \
             granted_at = pg_catalog.clock_timestamp()",
        None,
        &[
            id.into(),
            role.into(),
            privilege.as_str().into(),
            granted_by.into(),
        ],
        "granting",
    );
}

/// Takes `role`'s grant on target `id` down to read (`write_only`) or away.
pub fn revoke(c: &mut SpiClient, id: &str, role: pg_sys::Oid, write_only: bool) {
    let sql = if write_only {
        "UPDATE patchdiff.target_grants SET privilege = 'read' \
         WHERE target_file_id = $1::uuid AND grantee = $2::regrole"
    } else {
        "DELETE FROM patchdiff.target_grants WHERE target_file_id = $1::uuid AND grantee = $2::regrole"
    };
    touch_target(c, id);
    write_once(c, sql, None, &[id.into(), role.into()], "revoking");
}

macro_rules! list_select {
    ($pred:expr) => {
        concat!(
            "SELECT t.target_file_id::text, t.filename, t.target_type, t.version, t.current_hash, ",
            "pg_catalog.octet_length(t.current_content)::int8, ",
            "(EXTRACT(epoch FROM d.created_at) * 1000000)::int8, (EXTRACT(epoch FROM t.updated_at) * 1000000)::int8, ",
            "t.owner_role::text, ",
            "CASE WHEN t.owner_role::oid = $2::oid THEN 'owner' WHEN $1::bool THEN 'admin' ",
            "WHEN pg_catalog.pg_has_role($2::oid, t.owner_role::oid, 'USAGE') THEN 'owner' ",
            "WHEN EXISTS (SELECT FROM patchdiff.target_grants g WHERE g.target_file_id = t.target_file_id ",
            "AND g.privilege = 'write' AND pg_catalog.pg_has_role($2::oid, g.grantee::oid, 'USAGE')) THEN 'write' ",
            "ELSE 'read' END ",
            "FROM patchdiff.target_directory d JOIN patchdiff.targets t ON t.target_file_id = d.target_file_id ",
            // The access check first, then the prefix: a CASE fixes the order. Left to the
            // planner, the cheaper prefix test ran first and the access check only on the
            // names that matched, so timing the calls told which prefixes another tenant's
            // filenames start with (helper-71: 0.71 ms against 0.51 for 200 of them).
            "WHERE CASE WHEN ", $pred,
            " THEN ($4::text IS NULL OR pg_catalog.starts_with(t.filename, $4)) ELSE false END ",
            "AND ($5::int8 IS NULL OR (d.created_at, d.target_file_id) < ",
            "('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) ",
            "ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7"
        )
    };
}

/// $1 admin, $2 caller, $3 'read', $4 filename prefix, $5/$6 the cursor (created_at
/// microseconds, id), $7 rows to fetch. One tier: every target the caller may read.
pub(crate) const LIST_SQL: [&str; 3] = tiered!(list_select, "t");

/// The targets the caller may read, newest first: at most `q.limit + 1` of them.
pub fn list_targets(c: &SpiClient, caller: Caller, q: &ListQuery) -> Vec<ListedTarget> {
    let args: [DatumWithOid; 7] = [
        caller.admin.into(),
        caller.role.into(),
        Need::Read.as_str().into(),
        q.filename_prefix.as_deref().into(),
        q.after.as_ref().map(|a| a.0).into(),
        q.after.as_ref().map(|a| a.1.as_str()).into(),
        i64::try_from(q.limit + 1).unwrap_or(i64::MAX).into(),
    ];
    let rows = read_once(c, LIST_SQL[caller.widest()], None, &args, "listing targets");
    let mut listed = Vec::new();
    for row in rows {
        let s = |i: usize| {
            row.get::<String>(i)
                .unwrap_or_else(|e| fault("listing targets", e))
                .unwrap_or_default()
        };
        let n = |i: usize| {
            row.get::<i64>(i)
                .unwrap_or_else(|e| fault("listing targets", e))
                .unwrap_or(0)
        };
        listed.push(ListedTarget {
            target_file_id: s(1),
            filename: s(2),
            target_type: s(3),
            version: n(4),
            current_hash: s(5),
            size_bytes: n(6),
            created_at_us: n(7),
            updated_at_us: n(8),
            owner: s(9),
            access: s(10),
        });
    }
    listed
}
