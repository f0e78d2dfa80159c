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
        "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by, target_created_at) \
         VALUES ($1::uuid, $2::regrole, $3, $4::regrole, \
                 (SELECT created_at FROM patchdiff.target_directory WHERE target_file_id = $1::uuid)) \
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

/// "The row whose creation time and ID are `$created`, `$id` comes after the cursor ($5/$6),
/// and its target `t` matches the prefix ($4)."
macro_rules! after_cursor_and_prefix {
    ($created:literal, $id:literal) => {
        concat!(
            "($5::int8 IS NULL OR (",
            $created,
            ", ",
            $id,
            ") < ",
            "('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) ",
            "AND ($4::text IS NULL OR pg_catalog.starts_with(t.filename, $4)) "
        )
    };
}

/// The columns a listing reads of target `t`, with `$created` its creation time.
macro_rules! listed {
    ($created:literal) => {
        concat!(
            "t.target_file_id AS id, t.filename, t.target_type, t.version, t.current_hash, ",
            "pg_catalog.octet_length(t.current_content)::int8 AS size, ",
            $created,
            " AS created_at, t.updated_at, t.owner_role, "
        )
    };
}

/// $1 admin, $2 caller, $3 'read', $4 filename prefix, $5/$6 the cursor (created_at
/// microseconds, id), $7 rows to fetch (both statements take the same parameters and use some).
/// Administrators: every target, in the order of the directory's index by creation, `owner` on
/// their own and `admin` on every other.
pub(crate) const LIST_ALL_SQL: &str = concat!(
    "SELECT t.target_file_id::text, t.filename, t.target_type, t.version, t.current_hash, ",
    "pg_catalog.octet_length(t.current_content)::int8, ",
    "(EXTRACT(epoch FROM d.created_at) * 1000000)::int8, (EXTRACT(epoch FROM t.updated_at) * 1000000)::int8, ",
    "t.owner_role::text, CASE WHEN t.owner_role::oid = $2::oid THEN 'owner' ELSE 'admin' END ",
    "FROM patchdiff.target_directory d JOIN patchdiff.targets t ON t.target_file_id = d.target_file_id ",
    "WHERE ",
    after_cursor_and_prefix!("d.created_at", "d.target_file_id"),
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

/// The most roles a listing reads apart, each a constant of its own statement
/// ([`list_mine_sql`]); beyond them, [`LIST_MANY_SQL`].
pub(crate) const ROLES_APART: usize = 16;

/// The same for every other caller, reading only the rows it may see: for each of `roles` (the
/// roles whose privileges it has, $8 onward) at most $7 targets it owns, by the directory's index
/// by owner (each checked against its target's own `owner_role`, so a directory row changed by
/// hand hides a target but never shows one), and at most $7 granted to it, by the grants' index
/// by grantee and creation time (each grant keeps its target's creation time); of those the
/// newest $7, each with the widest way the caller reaches it. Each role is a parameter of its
/// own, which PostgreSQL plans as a constant (one-shot statements): one statement with every
/// role in one parameter was planned for the average owner, and a role with three targets had
/// its listing scan all of a large tenant's directory rows and grants.
///
/// So another tenant's targets and grants are never read, their number costs nothing
/// (helper-77: 0.26-0.56 s per call among 100,000 targets of another role, when this scanned the
/// whole directory and checked each row), and a prefix is only ever tested on the caller's own
/// rows (the timing of other tenants' filenames, helper-71, cannot arise).
pub(crate) fn list_mine_sql(roles: usize) -> String {
    const CURSOR_AND_PREFIX: &str = after_cursor_and_prefix!("d.created_at", "d.target_file_id");
    const LISTED: &str = listed!("d.created_at");
    const GRANT_CURSOR_AND_PREFIX: &str =
        after_cursor_and_prefix!("g.target_created_at", "g.target_file_id");
    const GRANTED: &str = listed!("g.target_created_at");
    let conditions: Vec<String> = (8..8 + roles).map(|r| format!("= ${r}::oid")).collect();
    let mut sql = String::from(
        "SELECT DISTINCT ON (created_at, id) id::text AS target_file_id, filename, \
         target_type, version, current_hash, size, (EXTRACT(epoch FROM created_at) * 1000000)::int8, \
         (EXTRACT(epoch FROM updated_at) * 1000000)::int8, owner_role::text, \
         CASE reach WHEN 3 THEN 'owner' WHEN 2 THEN 'write' ELSE 'read' END FROM (",
    );
    for (n, role) in conditions.iter().enumerate() {
        if n > 0 {
            sql.push_str(" UNION ALL ");
        }
        sql.push_str(&format!(
            "(SELECT {LISTED}3 AS reach \
             FROM patchdiff.target_directory d JOIN patchdiff.targets t ON t.target_file_id = d.target_file_id \
             WHERE d.owner_role::oid {role} AND t.owner_role::oid {role} AND {CURSOR_AND_PREFIX}\
             ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7) \
             UNION ALL \
             (SELECT {GRANTED}CASE WHEN g.privilege = 'write' THEN 2 ELSE 1 END AS reach \
             FROM patchdiff.target_grants g JOIN patchdiff.targets t ON t.target_file_id = g.target_file_id \
             WHERE g.grantee::oid {role} AND {GRANT_CURSOR_AND_PREFIX}\
             ORDER BY g.target_created_at DESC, g.target_file_id DESC LIMIT $7)"
        ));
    }
    sql.push_str(") seen ORDER BY created_at DESC, id DESC, reach DESC LIMIT $7");
    sql
}

/// "Row `$row`'s target matches the prefix ($4)", its filename read by the target's key alone
/// (a subquery per row, which PostgreSQL cannot turn into a scan of every target).
macro_rules! prefix_of {
    ($row:literal) => {
        concat!(
            "($4::text IS NULL OR pg_catalog.starts_with((SELECT t.filename FROM patchdiff.targets t ",
            "WHERE t.target_file_id = ",
            $row,
            ".target_file_id), $4)) "
        )
    };
}

/// The listing of a caller with the privileges of more than [`ROLES_APART`] roles, all of them
/// in one array ($8): for each, at most $7 of the directory rows it owns and of the grants it
/// holds, each read by its own index newest first (one lateral subquery per kind, whose plan
/// does not grow with the roles), then the newest $7 of those, and only then their targets,
/// each checked once more against the target's own `owner_role`. One branch per role here took
/// PostgreSQL a time quadratic in the roles to plan (helper-79: 63 ms and 105 MB per call at
/// 100 roles, 7 s and 1.4 GB at 2,000).
pub(crate) const LIST_MANY_SQL: &str = concat!(
    "WITH r AS MATERIALIZED (SELECT pg_catalog.unnest($8::oid[]) AS oid), ",
    "seen AS (",
    "SELECT o.* FROM r CROSS JOIN LATERAL (SELECT d.created_at, d.target_file_id AS id, 3 AS reach ",
    "FROM patchdiff.target_directory d WHERE d.owner_role::oid = r.oid AND ",
    "($5::int8 IS NULL OR (d.created_at, d.target_file_id) < ",
    "('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) AND ",
    prefix_of!("d"),
    "ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7) o ",
    "UNION ALL ",
    "SELECT o.* FROM r CROSS JOIN LATERAL (SELECT g.target_created_at AS created_at, g.target_file_id AS id, ",
    "CASE WHEN g.privilege = 'write' THEN 2 ELSE 1 END AS reach ",
    "FROM patchdiff.target_grants g WHERE g.grantee::oid = r.oid AND ",
    "($5::int8 IS NULL OR (g.target_created_at, g.target_file_id) < ",
    "('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) AND ",
    prefix_of!("g"),
    "ORDER BY g.target_created_at DESC, g.target_file_id DESC LIMIT $7) o), ",
    "best AS (SELECT DISTINCT ON (created_at, id) created_at, id, reach FROM seen ",
    "ORDER BY created_at DESC, id DESC, reach DESC LIMIT $7) ",
    "SELECT t.target_file_id::text, t.filename, t.target_type, t.version, t.current_hash, ",
    "pg_catalog.octet_length(t.current_content)::int8, ",
    "(EXTRACT(epoch FROM b.created_at) * 1000000)::int8, (EXTRACT(epoch FROM t.updated_at) * 1000000)::int8, ",
    "t.owner_role::text, CASE b.reach WHEN 3 THEN 'owner' WHEN 2 THEN 'write' ELSE 'read' END ",
    "FROM best b JOIN patchdiff.targets t ON t.target_file_id = b.id ",
    "WHERE b.reach < 3 OR t.owner_role::oid = ANY ($8::oid[]) ",
    "ORDER BY b.created_at DESC, b.id DESC"
);

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
        if roles.len() > ROLES_APART {
            args.push(roles.into());
            read_once(c, LIST_MANY_SQL, None, &args, "listing targets")
        } else {
            let sql = list_mine_sql(roles.len());
            args.extend(roles.into_iter().map(DatumWithOid::from));
            read_once(c, &sql, None, &args, "listing targets")
        }
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
