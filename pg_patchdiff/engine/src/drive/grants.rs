//! Grants, revokes and the target directory over [`Grants`] (issue 15; docs/security.md).

use crate::contract::args::{ArgError, not_found};
use crate::drive::store::Grants;
use crate::target::tenancy::{self, GrantRequest, Privilege};
use serde_json::Value;

/// Runs a grant or a revoke: the target must be one the caller may read (else `not_found`) and
/// own (else `permission_denied` / `not_target_owner`), and the role must exist.
fn change_grant<G: Grants>(
    store: &mut G,
    tool: &str,
    parsed: Result<GrantRequest, ArgError>,
    apply: impl FnOnce(&mut G, &GrantRequest, G::Role),
) -> Value {
    let req = match parsed {
        Ok(r) => r,
        Err(e) => return e.to_json(tool),
    };
    let id = req.target_file_id.as_str();
    let Some(owns) = store.owns(id) else {
        return not_found(id);
    };
    if !owns {
        return tenancy::not_owner(id);
    }
    let Some(role) = store.role(&req.role) else {
        return tenancy::unknown_role(&req.role).to_json(tool);
    };
    apply(store, &req, role);
    let now = store.current_grant(id, role);
    tenancy::grant_response(id, &req.role, now)
}

/// `patchdiff_grant`: gives a role `read` or `write` (which includes read) on a target the
/// caller owns. A second grant to the same role replaces the first.
pub fn grant(store: &mut impl Grants, args: &str) -> Value {
    change_grant(
        store,
        "patchdiff_grant",
        tenancy::parse_grant(args),
        |s, req, role| {
            let privilege = req.privilege.unwrap_or(Privilege::Read);
            s.grant(&req.target_file_id, role, privilege);
        },
    )
}

/// `patchdiff_revoke`: `privilege: "write"` leaves read; `"read"`, null or omitted remove the
/// role's grant on the target. Ownership and administration are not grants and stay.
pub fn revoke(store: &mut impl Grants, args: &str) -> Value {
    change_grant(
        store,
        "patchdiff_revoke",
        tenancy::parse_revoke(args),
        |s, req, role| {
            let write_only = req.privilege == Some(Privilege::Write);
            s.revoke(&req.target_file_id, role, write_only);
        },
    )
}

/// `patchdiff_list_targets`: the targets the caller may read, newest first, in bounded pages.
pub fn list_targets(store: &mut impl Grants, args: &str) -> Value {
    let q = match tenancy::parse_list_targets(args) {
        Ok(q) => q,
        Err(e) => return e.to_json("patchdiff_list_targets"),
    };
    let listed = store.list_targets(&q);
    tenancy::list_page(listed, q.limit)
}
