//! Who may touch what (issue 15; docs/security.md).
//!
//! Every target belongs to the role that created it: the current role of the statement that
//! called the function (`current_user`: `SET ROLE` honoured, and a SECURITY DEFINER function or a
//! maintenance operation acting as its owner, as everywhere in PostgreSQL; [`Caller::enter`]).
//! Roles that have the owner's
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
    /// Enters a call: the caller is the current role as the function was called (the functions
    /// are SECURITY INVOKER), and from here until the returned guard is dropped the call's
    /// statements run as the owner of schema `patchdiff`, which owns the tables, as a SECURITY
    /// DEFINER function's would. The security context is kept (a security-restricted operation
    /// stays restricted) and marked as a local user change, so `SET ROLE` is refused inside.
    ///
    /// The caller used to be PostgreSQL's "outer" user (`GetOuterUserId`), which skips every
    /// user change below `SET ROLE`: a SECURITY DEFINER function of one role, called by another,
    /// acted with the second role's targets, and an index expression that autovacuum or a
    /// superuser's `ANALYZE` ran as the table's owner acted as the superuser, so any role could
    /// grant itself every target. Now each acts as the role PostgreSQL runs it as.
    pub fn enter() -> Entered {
        // Every call's first step: its memory reserve (`crate::memory`).
        crate::memory::begin_call();
        // SAFETY: reads and sets the backend's user and security context, as fmgr does around a
        // SECURITY DEFINER call; the guard restores them on every return and unwinding, and an
        // error's abort restores them for its (sub)transaction.
        unsafe {
            let mut role = pg_sys::InvalidOid;
            let mut context: std::ffi::c_int = 0;
            pg_sys::GetUserIdAndSecContext(&mut role, &mut context);
            let owner = tables_owner();
            if role == owner
                && context & pg_sys::SECURITY_LOCAL_USERID_CHANGE as std::ffi::c_int != 0
            {
                refuse_definer_install();
            }
            let admin = pg_sys::superuser_arg(role) || {
                let admins = pg_sys::get_role_oid(ADMIN_ROLE.as_ptr(), true);
                admins != pg_sys::InvalidOid && pg_sys::has_privs_of_role(role, admins)
            };
            pg_sys::SetUserIdAndSecContext(
                owner,
                context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as std::ffi::c_int,
            );
            Entered {
                caller: Caller { role, admin },
                role,
                context,
            }
        }
    }
}

/// A call that arrives as the extension's owner from inside a SECURITY DEFINER function is either
/// a wrapper of the owner's (which acts as the owner, rightly) or this library under SQL objects
/// of an earlier build of 0.2.0, whose API functions were still SECURITY DEFINER: there every call
/// would arrive as the owner and so act as an administrator for every role. This rare path asks
/// the catalog which, and refuses the second with an error rather than let every tenant see every
/// target (docs/security.md, "Who a call acts for").
fn refuse_definer_install() {
    let stale = pgrx::Spi::get_one::<bool>(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_proc p \
           JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass \
                AND d.objid = p.oid AND d.deptype = 'e' \
           JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid \
          WHERE e.extname = 'pg_patchdiff' AND p.prosecdef)",
    );
    if stale != Ok(Some(false)) {
        pgrx::error!(
            "pg_patchdiff: this database's pg_patchdiff functions are SECURITY DEFINER (installed by an earlier build of this version), which this library would run as the extension's owner for every caller; nothing was done. As a superuser, make them SECURITY INVOKER: SELECT pg_catalog.format('ALTER FUNCTION %s SECURITY INVOKER', p.oid::regprocedure) FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_depend d ON d.objid = p.oid AND d.deptype = 'e' JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid WHERE e.extname = 'pg_patchdiff' AND p.prosecdef \\gexec"
        );
    }
}

/// A call entered by [`Caller::enter`]: who it acts for, and the user and security context to
/// restore when it ends.
pub struct Entered {
    pub caller: Caller,
    role: pg_sys::Oid,
    context: std::ffi::c_int,
}

impl Drop for Entered {
    fn drop(&mut self) {
        // SAFETY: restores what `enter` read.
        unsafe { pg_sys::SetUserIdAndSecContext(self.role, self.context) }
    }
}

/// The owner of schema `patchdiff` (the role that created the extension, which owns its tables),
/// from the catalog cache on every call, so an `ALTER SCHEMA ... OWNER TO` is followed.
fn tables_owner() -> pg_sys::Oid {
    // SAFETY: catalog cache lookups; the tuple is released before returning.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"patchdiff".as_ptr(), false);
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::NAMESPACEOID as std::ffi::c_int,
            pg_sys::Datum::from(schema),
        );
        if tuple.is_null() {
            pgrx::error!("pg_patchdiff: schema patchdiff has no catalog entry");
        }
        let owner =
            (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_namespace>(tuple)).nspowner;
        pg_sys::ReleaseSysCache(tuple);
        owner
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
            crate::storage::access::owns!($t),
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
            $m!(crate::storage::access::owns!($t) $(, $arg)*),
            $m!(crate::storage::access::owns_or_granted!($t) $(, $arg)*),
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
