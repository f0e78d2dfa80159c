//! `patchdiff_grant`, `patchdiff_revoke` and `patchdiff_list_targets`: glue only. Who may touch
//! what is decided in the statements of [`crate::storage::access`]; the engine's `tenancy`
//! module parses the arguments and shapes every answer.

use crate::json_text::JsonText;
use crate::out;
use crate::storage::{self, Caller};
use patchdiff_engine::api::args::{ArgError, not_found};
use patchdiff_engine::api::tenancy::{self, GrantRequest, Privilege};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

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
        let Some(owns) = storage::grants::owns(c, id, caller) else {
            return not_found(id);
        };
        if !owns {
            return tenancy::not_owner(id);
        }
        let Some(role) = storage::grants::role(c, &req.role) else {
            return tenancy::unknown_role(&req.role).to_json(tool);
        };
        let now = apply(c, &req, role, caller);
        tenancy::grant_response(id, &req.role, now)
    });
    out(&answer)
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
            storage::grants::grant(c, &req.target_file_id, role, privilege, caller.role);
            storage::grants::current_grant(c, &req.target_file_id, role)
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
            let write_only = req.privilege == Some(Privilege::Write);
            storage::grants::revoke(c, &req.target_file_id, role, write_only);
            storage::grants::current_grant(c, &req.target_file_id, role)
        },
    )
}

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
        let listed = storage::grants::list_targets(c, caller, &q);
        tenancy::list_page(listed, q.limit)
    });
    out(&answer)
}
