//! Who may touch what (issue 15; docs/security.md).
//!
//! Every target belongs to the role that created it: the role in effect outside the SECURITY
//! DEFINER function, with `SET ROLE` honoured ([`Caller::current`]). Roles that have the owner's
//! privileges (`pg_has_role(caller, owner, 'USAGE')`) read and write it and may grant others
//! `read` or `write` on it; a grant to a role reaches every role that has that role's
//! privileges. Superusers and roles with the privileges of `patchdiff_admin` (when that role
//! exists) see every target.
//!
//! The check lives in the statement that finds the target ([`visible!`]), so a target the caller
//! may not see is never read, never locked, and answers exactly like an unknown one.

use pgrx::pg_sys;
use serde_json::{Value, json};

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

/// The SQL predicate "the caller may `need` target row `t`": `$admin` (bool), `$caller` (oid),
/// `$need` ('read' | 'write') are parameter references. OR arms are evaluated left to right, so
/// the owner's own calls (every call of a single-role install) stop at the second arm.
macro_rules! visible {
    ($t:literal, $caller:literal, $admin:literal, $need:literal) => {
        concat!(
            "(",
            $admin,
            "::bool OR ",
            $t,
            ".owner_role::oid = ",
            $caller,
            "::oid ",
            "OR pg_catalog.pg_has_role(",
            $caller,
            "::oid, ",
            $t,
            ".owner_role::oid, 'USAGE') ",
            "OR EXISTS (SELECT FROM patchdiff.target_grants g WHERE g.target_file_id = ",
            $t,
            ".target_file_id ",
            "AND (g.privilege = 'write' OR ",
            $need,
            "::text = 'read') ",
            "AND pg_catalog.pg_has_role(",
            $caller,
            "::oid, g.grantee::oid, 'USAGE')))"
        )
    };
}
pub(crate) use visible;

/// The answer to a caller who may read a target but not do what it asked (write, or grant).
/// Nothing was written.
pub fn denied(target_file_id: &str, need: &str, detail: &str) -> Value {
    json!({
        "status": "permission_denied",
        "code": need,
        "target_file_id": target_file_id,
        "failure_detail": detail,
    })
}

pub const WRITE_NOT_GRANTED: &str = "write_not_granted";
pub const NOT_OWNER: &str = "not_target_owner";

/// `denied` for a write by a role that may only read.
pub fn write_denied(target_file_id: &str) -> Value {
    denied(
        target_file_id,
        WRITE_NOT_GRANTED,
        "Your role may read this target but not write it; its owner can grant write with patchdiff_grant. Nothing was written.",
    )
}
