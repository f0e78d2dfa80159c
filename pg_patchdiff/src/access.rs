//! Who may touch what (issue 15; docs/security.md).
//!
//! Every target belongs to the role that created it: the role in effect outside the SECURITY
//! DEFINER function, with `SET ROLE` honoured ([`Caller::current`]). Roles that have the owner's
//! privileges (`pg_has_role(caller, owner, 'USAGE')`) read and write it and may grant others
//! `read` or `write` on it; a grant to a role reaches every role that has that role's
//! privileges. Superusers and roles with the privileges of `patchdiff_admin` (when that role
//! exists) see every target.
//!
//! The check lives in the statement that finds the target ([`tiered!`]), so a target the caller
//! may not see is never read, never locked, and answers exactly like an unknown one.

use pgrx::pg_sys;

/// The optional administrators' role. The extension does not create it (roles are cluster-wide,
/// the extension is per database); a DBA does, and grants it to whoever must see everything.
pub const ADMIN_ROLE: &std::ffi::CStr = c"patchdiff_admin";

/// The role a call acts for, and whether it sees every target.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub role: pg_sys::Oid,
    pub admin: bool,
}

impl Caller {
    /// The role outside this SECURITY DEFINER function: the session's current role as `SET ROLE`
    /// left it (PostgreSQL's "outer" user). A SECURITY DEFINER function of an application that
    /// calls the API acts for its caller's role, never for its own owner, so wrapping the API
    /// can narrow what a role reaches but never widen it.
    pub fn current() -> Caller {
        // SAFETY: plain reads of backend state and the role caches, valid in any function call.
        unsafe {
            let role = pg_sys::GetOuterUserId();
            let admin = pg_sys::superuser_arg(role) || {
                let admins = pg_sys::get_role_oid(ADMIN_ROLE.as_ptr(), true);
                admins != pg_sys::InvalidOid && pg_sys::has_privs_of_role(role, admins)
            };
            Caller { role, admin }
        }
    }
}

/// What a call needs of its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
}

impl Need {
    pub fn as_str(self) -> &'static str {
        match self {
            Need::Read => "read",
            Need::Write => "write",
        }
    }
}

// Every statement that finds a target comes in three tiers, tried in order until one finds it
// ([`Caller::tiers`]): administrators' (no predicate), owners' (the owning role's privileges),
// and grantees' (ownership or a grant). Parameters: $1 the ID looked up, $2 the caller's role
// (oid), $3 what it needs ('read' | 'write'). The owners' tier names no other table, so the
// owner's own calls (every call of a single-role install) plan and run as before ownership
// existed; only a miss pays for the grants lookup. The administrators' tier is a statement of
// its own rather than a `$admin OR ...` arm, which a custom plan would fold away and so make
// PostgreSQL re-plan every call.

/// "The caller has the privileges of target row `t`'s owner."
macro_rules! owns {
    ($t:literal) => {
        concat!(
            "(",
            $t,
            ".owner_role::oid = $2::oid OR pg_catalog.pg_has_role($2::oid, ",
            $t,
            ".owner_role::oid, 'USAGE'))"
        )
    };
}
pub(crate) use owns;

/// "The caller owns target row `t`, or holds a grant on it that gives what it needs."
macro_rules! owns_or_granted {
    ($t:literal) => {
        concat!(
            "(",
            crate::access::owns!($t),
            " OR EXISTS (SELECT FROM patchdiff.target_grants g ",
            "WHERE g.target_file_id = ",
            $t,
            ".target_file_id AND (g.privilege = 'write' OR $3::text = 'read') ",
            "AND pg_catalog.pg_has_role($2::oid, g.grantee::oid, 'USAGE')))"
        )
    };
}
pub(crate) use owns_or_granted;

/// The three tiers of a statement: `$m!(predicate, args...)` for each predicate on row `$t`.
macro_rules! tiered {
    ($m:ident, $t:literal $(, $arg:tt)*) => {
        [
            $m!("TRUE" $(, $arg)*),
            $m!(crate::access::owns!($t) $(, $arg)*),
            $m!(crate::access::owns_or_granted!($t) $(, $arg)*),
        ]
    };
}
pub(crate) use tiered;

impl Caller {
    /// The tiers of [`tiered!`] statements to try, in order.
    pub fn tiers(self) -> std::ops::Range<usize> {
        if self.admin { 0..1 } else { 1..3 }
    }

    /// The one tier that finds everything the caller may see (for lookups of several rows).
    pub fn widest(self) -> usize {
        if self.admin { 0 } else { 2 }
    }

    /// The first answer `find` gives, trying the caller's tiers in order.
    pub fn first<T>(self, mut find: impl FnMut(usize) -> Option<T>) -> Option<T> {
        self.tiers().find_map(&mut find)
    }
}

// ---------------------------------------------------------------------------------------------
// patchdiff_grant, patchdiff_revoke, patchdiff_list_targets

use crate::json_text::JsonText;
use crate::out;
use patchdiff_engine::api::args::{ArgError, not_found};
use patchdiff_engine::api::tenancy::{self, GrantRequest, ListedTarget, Privilege};
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

macro_rules! owns_select {
    ($pred:expr) => {
        concat!(
            "SELECT ($4::bool OR ",
            crate::access::owns!("t"),
            ") ",
            "FROM patchdiff.targets t WHERE t.target_file_id = $1::uuid AND ",
            $pred
        )
    };
}

/// $1 target, $2 caller, $3 'read', $4 admin: whether the caller has the owner's privileges (or
/// is an administrator), for a target it may read.
const OWNS_SQL: [&str; 3] = tiered!(owns_select, "t");

fn fault(what: &str, e: impl std::fmt::Display) -> ! {
    pgrx::error!("pg_patchdiff: {what}: {e}")
}

/// Runs a grant or a revoke: the target must be one the caller may read (else `not_found`) and
/// own (else `permission_denied` / `not_target_owner`), and the role must exist.
fn change_grant(
    tool: &str,
    parsed: Result<GrantRequest, ArgError>,
    apply: impl FnOnce(&mut SpiClient, &GrantRequest, pg_sys::Oid, Caller) -> Option<Privilege>,
) -> JsonText {
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return out(&e.to_json(tool)),
    };
    let caller = Caller::current();
    let id = req.target_file_id.as_str();
    let answer = Spi::connect_mut(|c| {
        let owns = caller.first(|tier| {
            let args: [DatumWithOid; 4] = [
                id.into(),
                caller.role.into(),
                Need::Read.as_str().into(),
                caller.admin.into(),
            ];
            let rows = c
                .select(OWNS_SQL[tier], Some(1), &args)
                .unwrap_or_else(|e| fault("reading target", e));
            (!rows.is_empty()).then(|| {
                rows.first()
                    .get_one::<bool>()
                    .unwrap_or_else(|e| fault("reading target", e))
                    .unwrap_or(false)
            })
        });
        let Some(owns) = owns else {
            return not_found(id);
        };
        if !owns {
            return tenancy::not_owner(id);
        }
        let roles = c
            .select(
                "SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = $1",
                Some(1),
                &[req.role.as_str().into()],
            )
            .unwrap_or_else(|e| fault("looking up the role", e));
        let role = (!roles.is_empty())
            .then(|| {
                roles
                    .first()
                    .get_one::<pg_sys::Oid>()
                    .unwrap_or_else(|e| fault("looking up the role", e))
            })
            .flatten();
        let Some(role) = role else {
            return tenancy::unknown_role(&req.role).to_json(tool);
        };
        let now = apply(c, &req, role, caller);
        tenancy::grant_response(id, &req.role, now)
    });
    out(&answer)
}

fn current_grant(c: &mut SpiClient, id: &str, role: pg_sys::Oid) -> Option<Privilege> {
    let rows = c
        .update(
            "SELECT privilege FROM patchdiff.target_grants WHERE target_file_id = $1::uuid AND grantee = $2::regrole",
            Some(1),
            &[id.into(), role.into()],
        )
        .unwrap_or_else(|e| fault("reading grants", e));
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

/// Gives a role `read` or `write` (which includes read) on a target the caller owns. A second
/// grant to the same role replaces the first.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_grant(args: JsonText) -> JsonText {
    change_grant(
        "patchdiff_grant",
        tenancy::parse_grant(&args.0),
        |c, req, role, caller| {
            let privilege = req.privilege.unwrap_or(Privilege::Read);
            c.update(
                "INSERT INTO patchdiff.target_grants (target_file_id, grantee, privilege, granted_by) \
                 VALUES ($1::uuid, $2::regrole, $3, $4::regrole) \
                 ON CONFLICT (target_file_id, grantee) DO UPDATE \
                 SET privilege = EXCLUDED.privilege, granted_by = EXCLUDED.granted_by, \
                     granted_at = pg_catalog.clock_timestamp()",
                None,
                &[
                    req.target_file_id.as_str().into(),
                    role.into(),
                    privilege.as_str().into(),
                    caller.role.into(),
                ],
            )
            .unwrap_or_else(|e| fault("granting", e));
            current_grant(c, &req.target_file_id, role)
        },
    )
}

/// Takes a grant back: `privilege: "write"` leaves read; `"read"`, null or omitted remove the
/// role's grant on the target. Ownership and administration are not grants and stay.
#[pg_extern(security_definer)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_revoke(args: JsonText) -> JsonText {
    change_grant(
        "patchdiff_revoke",
        tenancy::parse_revoke(&args.0),
        |c, req, role, _| {
            let sql = if req.privilege == Some(Privilege::Write) {
                "UPDATE patchdiff.target_grants SET privilege = 'read' \
                 WHERE target_file_id = $1::uuid AND grantee = $2::regrole"
            } else {
                "DELETE FROM patchdiff.target_grants WHERE target_file_id = $1::uuid AND grantee = $2::regrole"
            };
            c.update(
                sql,
                None,
                &[req.target_file_id.as_str().into(), role.into()],
            )
            .unwrap_or_else(|e| fault("revoking", e));
            current_grant(c, &req.target_file_id, role)
        },
    )
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
            "WHERE ", $pred,
            " AND ($4::text IS NULL OR pg_catalog.starts_with(t.filename, $4)) ",
            "AND ($5::int8 IS NULL OR (d.created_at, d.target_file_id) < ",
            "('epoch'::timestamptz + $5::int8 * interval '1 microsecond', $6::uuid)) ",
            "ORDER BY d.created_at DESC, d.target_file_id DESC LIMIT $7"
        )
    };
}

/// $1 admin, $2 caller, $3 'read', $4 filename prefix, $5/$6 the cursor (created_at
/// microseconds, id), $7 rows to fetch. One tier: every target the caller may read.
const LIST_SQL: [&str; 3] = tiered!(list_select, "t");

/// The targets the caller may read, newest first, in bounded pages.
#[pg_extern(security_definer, stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_list_targets(args: JsonText) -> JsonText {
    const TOOL: &str = "patchdiff_list_targets";
    let q = match tenancy::parse_list_targets(&args.0) {
        Ok(q) => q,
        Err(e) => return out(&e.to_json(TOOL)),
    };
    let caller = Caller::current();
    let answer = Spi::connect(|c| {
        let args: [DatumWithOid; 7] = [
            caller.admin.into(),
            caller.role.into(),
            Need::Read.as_str().into(),
            q.filename_prefix.as_deref().into(),
            q.after.as_ref().map(|a| a.0).into(),
            q.after.as_ref().map(|a| a.1.as_str()).into(),
            i64::try_from(q.limit + 1).unwrap_or(i64::MAX).into(),
        ];
        let rows = c
            .select(LIST_SQL[caller.widest()], None, &args)
            .unwrap_or_else(|e| fault("listing targets", e));
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
        tenancy::list_page(listed, q.limit)
    });
    out(&answer)
}
