//! Grants, revokes and the directory of targets (issue 15; docs/security.md).

use super::access::tiered;
use super::{
    Caller, Need, committed_since_snapshot, fault, read_once, rows_since_snapshot, write_once,
};
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
///
/// A target the caller may read only in the latest committed state (made, or granted to it,
/// after a REPEATABLE READ or SERIALIZABLE snapshot) is 40001, not `target_not_found`
/// (helper-105).
pub fn owns(c: &SpiClient, id: &str, caller: Caller) -> Option<bool> {
    let args = || -> [DatumWithOid; 4] {
        [
            id.into(),
            caller.role.into(),
            Need::Read.as_str().into(),
            caller.admin.into(),
        ]
    };
    let owns = caller.first(|tier| {
        let rows = read_once(c, OWNS_SQL[tier], Some(1), &args(), "reading target");
        (!rows.is_empty()).then(|| {
            rows.first()
                .get_one::<bool>()
                .unwrap_or_else(|e| fault("reading target", e))
                .unwrap_or(false)
        })
    });
    if owns.is_none()
        && rows_since_snapshot(OWNS_SQL[caller.widest()], &args(), "reading target")
            .is_some_and(|n| n > 0)
    {
        committed_since_snapshot("the target, or the grant that lets this role read it,");
    }
    owns
}

/// The role named `name`, if it exists now: looked up in the catalog's cache, as `GRANT` looks up
/// its grantee. Read through SPI in the caller's snapshot, a REPEATABLE READ or SERIALIZABLE
/// transaction found a role dropped after its snapshot (a grant row for a role that no longer
/// exists), or the old holder of a name renamed and taken by a new role since (a write grant to a
/// role the owner did not name; helper-101).
///
/// The role found is then locked as `GRANT` locks its grantee when it records the dependency (a
/// share lock on the role until the transaction ends; `DROP ROLE` takes it exclusively), and looked
/// up again: a `DROP ROLE` committed while this call waited for the lock leaves no role of that
/// name (`None`), and one that comes later waits for this transaction. Without the lock, a drop
/// committed between the lookup and this transaction's commit left a grant row for no role
/// (helper-105).
pub fn role(name: &str) -> Option<pg_sys::Oid> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: `name` is NUL-terminated; `missing_ok` answers InvalidOid instead of an ERROR.
    let lookup = || unsafe { pg_sys::get_role_oid(name.as_ptr(), true) };
    let mut oid = lookup();
    // A name dropped and taken by a new role while this waited is looked up once more; a name
    // that keeps changing hands is answered as unknown.
    for _ in 0..3 {
        if oid == pg_sys::InvalidOid {
            return None;
        }
        // SAFETY: a lock on a shared object by its catalog and OID; it takes in the invalidation
        // messages of what committed meanwhile, so the lookup after it sees the catalog as it is.
        unsafe {
            pg_sys::LockSharedObject(
                pg_sys::AuthIdRelationId,
                oid,
                0,
                pg_sys::AccessShareLock as pg_sys::LOCKMODE,
            )
        };
        let now = lookup();
        if now == oid {
            return Some(oid);
        }
        oid = now;
    }
    None
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
        // target_created_at is the directory's, set by the trigger grant_creation.
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

/// "Row `$row`'s (created_at, target_file_id) comes after the cursor ($5/$6)."
macro_rules! after_cursor {
    ($created:literal, $id:literal) => {
        concat!(
            "($5::int8 IS NULL OR (",
            $created,
            ", ",
            $id,
            ") < ('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) "
        )
    };
}

/// $1 admin, $2 caller, $3 'read', $4 filename prefix, $5/$6 the cursor (created_at
/// microseconds, id), $7 rows to fetch (every listing statement takes these and uses some).
/// Administrators: every target, in the order of the directory's index by creation, `owner` on
/// their own and `admin` on every other.
pub(crate) const LIST_ALL_SQL: &str = concat!(
    "SELECT t.target_file_id::text, t.filename, t.target_type, t.version, t.current_hash, ",
    "pg_catalog.octet_length(t.current_content)::int8, ",
    "(EXTRACT(epoch FROM d.created_at) * 1000000)::int8, (EXTRACT(epoch FROM t.updated_at) * 1000000)::int8, ",
    "t.owner_role::text, CASE WHEN t.owner_role::oid = $2::oid THEN 'owner' ELSE 'admin' END ",
    "FROM patchdiff.target_directory d JOIN patchdiff.targets t ON t.target_file_id = d.target_file_id ",
    "WHERE ",
    after_cursor!("d.created_at", "d.target_file_id"),
    "AND ($4::text IS NULL OR pg_catalog.starts_with(t.filename, $4)) ",
    "ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7"
);

/// The roles whose privileges `$1` has: itself and the roles it inherits, found by walking its
/// memberships as PostgreSQL 15 does for privileges (a role that does not inherit passes on
/// none of its own memberships), and `pg_database_owner`, whose one member, the database's
/// owner, is implied rather than stored (helper-79: its targets were missed); each confirmed by
/// `pg_has_role`. Walking the memberships reads the caller's own (about 0.2 ms per call);
/// testing every role of the cluster with `pg_has_role` grew with every other tenant's role
/// (0.12 ms among 263 roles).
const ROLES_OF_SQL: &str = "WITH RECURSIVE mine(oid) AS (\
     SELECT $1::oid UNION SELECT 'pg_database_owner'::pg_catalog.regrole::oid UNION \
     SELECT m.roleid FROM mine JOIN pg_catalog.pg_auth_members m ON m.member = mine.oid \
     WHERE (SELECT r.rolinherit FROM pg_catalog.pg_roles r WHERE r.oid = mine.oid)) \
     SELECT oid FROM mine WHERE pg_catalog.pg_has_role($1::oid, oid, 'USAGE')";

/// The most roles a listing names one by one, each a constant of its statement; beyond them
/// the roles go in one array ([`list_mine_sql`]).
pub(crate) const ROLES_APART: usize = 4;

/// The two branches of role `role` (an SQL expression: a parameter, or the lateral's `r.oid`):
/// at most $7 of the directory rows it owns and $7 of the grants it holds, newest first after
/// the cursor, each read by its own index (directory: `(owner_role, created_at,
/// target_file_id)`, grants: `(grantee, target_created_at, target_file_id)`), as `(created_at,
/// id, reach)`. Neither branch joins `targets`: each row's target is read by its key in a
/// scalar subquery, which PostgreSQL runs per row and never turns into a join. With a join, a
/// prefix let the planner scan every tenant's targets and test the prefix on their names
/// (helper-80: 109,031 rows read, all of `targets`, to list 5 of a role's 2,000). An owned row
/// also needs its target to name the same owner, before the limit, so a directory row changed by
/// hand hides its target and nothing else (helper-80: checked after the limit, it cut the
/// listing short).
fn branches(role: &str) -> String {
    format!(
        "(SELECT d.created_at, d.target_file_id AS id, 3 AS reach \
         FROM patchdiff.target_directory d \
         WHERE d.owner_role::oid = {role} AND {cursor_d}\
         AND (SELECT t.owner_role::oid = {role} AND ($4::text IS NULL OR pg_catalog.starts_with(t.filename, $4)) \
              FROM patchdiff.targets t WHERE t.target_file_id = d.target_file_id) \
         ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7) \
         UNION ALL \
         (SELECT g.target_created_at, g.target_file_id, CASE WHEN g.privilege = 'write' THEN 2 ELSE 1 END \
         FROM patchdiff.target_grants g \
         WHERE g.grantee::oid = {role} AND {cursor_g}\
         AND ($4::text IS NULL OR (SELECT pg_catalog.starts_with(t.filename, $4) \
              FROM patchdiff.targets t WHERE t.target_file_id = g.target_file_id)) \
         ORDER BY g.target_created_at DESC, g.target_file_id DESC LIMIT $7)",
        cursor_d = after_cursor!("d.created_at", "d.target_file_id"),
        cursor_g = after_cursor!("g.target_created_at", "g.target_file_id"),
    )
}

/// The listing of every caller but an administrator, reading only the rows it may see: for each
/// role whose privileges it has, [`branches`]; of all their rows one per target, with the widest
/// way the caller reaches it; the newest $7 of those; and only then their targets, by key.
///
/// Up to [`ROLES_APART`] roles are parameters of their own ($8 onward), which PostgreSQL plans
/// as constants (one-shot statements), knowing how many rows each role has. More go in one
/// array ($8), read by one lateral subquery over it, so that planning does not grow with the
/// roles: a branch per role took PostgreSQL a time quadratic in the roles to plan (helper-79:
/// 63 ms and 105 MB per call at 100 roles, 7 s and 1.4 GB at 2,000; helper-80: 6-10 ms at 16).
///
/// So another tenant's targets and grants are never read, their number costs nothing
/// (helper-77: 0.26-0.56 s per call among 100,000 targets of another role, when this scanned the
/// whole directory and checked each row), and a prefix is only ever tested on the caller's own
/// rows (the timing of other tenants' filenames, helper-71, cannot arise).
pub(crate) fn list_mine_sql(roles: usize) -> String {
    let seen = if roles > ROLES_APART {
        format!(
            "SELECT o.* FROM pg_catalog.unnest($8::oid[]) AS r(oid) CROSS JOIN LATERAL ({}) o",
            branches("r.oid")
        )
    } else {
        (8..8 + roles)
            .map(|r| branches(&format!("${r}::oid")))
            .collect::<Vec<_>>()
            .join(" UNION ALL ")
    };
    format!(
        "WITH seen(created_at, id, reach) AS ({seen}), \
         best AS (SELECT DISTINCT ON (id) created_at, id, reach FROM seen ORDER BY id, reach DESC), \
         page AS (SELECT created_at, id, reach FROM best ORDER BY created_at DESC, id DESC LIMIT $7) \
         SELECT t.target_file_id::text, t.filename, t.target_type, t.version, t.current_hash, \
         pg_catalog.octet_length(t.current_content)::int8, \
         (EXTRACT(epoch FROM p.created_at) * 1000000)::int8, (EXTRACT(epoch FROM t.updated_at) * 1000000)::int8, \
         t.owner_role::text, CASE p.reach WHEN 3 THEN 'owner' WHEN 2 THEN 'write' ELSE 'read' END \
         FROM page p JOIN patchdiff.targets t ON t.target_file_id = p.id \
         ORDER BY p.created_at DESC, p.id DESC"
    )
}

/// Bitmap and sequential scans off while it lives, as a function's `SET` clause does it: a GUC
/// nest level of its own, whose values PostgreSQL restores when it ends (and an error's abort
/// restores them too). Each branch of a listing reads its index in order and stops after a
/// page; without statistics (after a restore, before ANALYZE) PostgreSQL instead read all of a
/// role's rows through a bitmap scan and sorted them (helper-81: 639 ms and 200,000 rows read
/// for a page of 500 of a role's 100,000 targets; 20 ms with these off). Only around the
/// non-administrators' statement: set on the whole function they also changed the
/// administrators' plan (helper-82: a prefix matching nothing read all of `targets_pkey`,
/// 57-94 ms against 14-19 ms), and a `SET LOCAL` made inside a function outlives it unless the
/// function's own `SET` clause names the variable.
struct IndexScansOnly {
    level: std::ffi::c_int,
}

impl IndexScansOnly {
    fn set() -> IndexScansOnly {
        // SAFETY: plain GUC calls in a backend, as PostgreSQL's own RI_Initial_Check makes them.
        unsafe {
            let level = pg_sys::NewGUCNestLevel();
            for name in [c"enable_bitmapscan", c"enable_seqscan"] {
                pg_sys::set_config_option(
                    name.as_ptr(),
                    c"off".as_ptr(),
                    pg_sys::GucContext::PGC_USERSET,
                    pg_sys::GucSource::PGC_S_SESSION,
                    pg_sys::GucAction::GUC_ACTION_SAVE,
                    true,
                    0,
                    false,
                );
            }
            IndexScansOnly { level }
        }
    }
}

impl Drop for IndexScansOnly {
    fn drop(&mut self) {
        // SAFETY: the nest level this value opened, closed once: after the statement, or while
        // an ERROR of it unwinds, before the abort that would restore every level anyway.
        unsafe { pg_sys::AtEOXact_GUC(true, self.level) }
    }
}

/// The targets the caller may read, newest first: at most `q.limit + 1` of them.
pub fn list_targets(c: &SpiClient, caller: Caller, q: &ListQuery) -> Vec<ListedTarget> {
    let mut args: Vec<DatumWithOid> = vec![
        caller.admin.into(),
        caller.role.into(),
        Need::Read.as_str().into(),
        q.filename_prefix.as_deref().into(),
        q.after.as_ref().map(|a| a.0).into(),
        q.after.as_ref().map(|a| a.1.as_str()).into(),
        i64::try_from(q.limit + 1).unwrap_or(i64::MAX).into(),
    ];
    let rows = if caller.admin {
        read_once(c, LIST_ALL_SQL, None, &args, "listing targets")
    } else {
        let roles: Vec<pg_sys::Oid> = read_once(
            c,
            ROLES_OF_SQL,
            None,
            &[caller.role.into()],
            "listing targets",
        )
        .map(|r| {
            r.get::<pg_sys::Oid>(1)
                .unwrap_or_else(|e| fault("listing targets", e))
                .unwrap_or(pg_sys::InvalidOid)
        })
        .collect();
        if roles.is_empty() {
            // Not seen: a role has its own privileges, so the walk finds at least the caller.
            return Vec::new();
        }
        let sql = list_mine_sql(roles.len());
        if roles.len() > ROLES_APART {
            args.push(roles.into());
        } else {
            args.extend(roles.into_iter().map(DatumWithOid::from));
        }
        let _scans = IndexScansOnly::set();
        read_once(c, &sql, None, &args, "listing targets")
    };
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
