//! Who may touch what (issue 15; docs/security.md): the arguments and answers of
//! `patchdiff_grant`, `patchdiff_revoke` and `patchdiff_list_targets`. The checks themselves run
//! in the database, in the statement that finds a target; this module only parses and shapes.

use crate::contract::args::{ArgError, Args};
use crate::contract::json::{as_int, is_big_int, type_name};
use crate::contract::limits::FILENAME_MAX_BYTES;
use crate::contract::time::rfc3339_utc;
use crate::contract::uuid::canonical_uuid;
use crate::contract::words::Status;
use serde_json::{Map, Value, json};

pub const GRANT_ARGS: &[&str] = &["target_file_id", "role", "privilege"];
pub const REVOKE_ARGS: &[&str] = &["target_file_id", "role", "privilege"];
pub const LIST_TARGETS_ARGS: &[&str] = &["limit", "cursor", "filename_prefix"];

/// A PostgreSQL role name is at most NAMEDATALEN - 1 bytes.
pub const ROLE_NAME_MAX_BYTES: usize = 63;
/// `patchdiff_list_targets`: rows per page by default, and at most.
pub const LIST_DEFAULT_LIMIT: usize = 50;
pub const LIST_MAX_LIMIT: usize = 500;

/// What a grant gives: `write` includes `read`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Privilege {
    Read,
    Write,
}

impl Privilege {
    pub fn as_str(self) -> &'static str {
        match self {
            Privilege::Read => "read",
            Privilege::Write => "write",
        }
    }

    fn parse(v: &Value) -> Result<Privilege, ArgError> {
        match v.as_str() {
            Some("read") => Ok(Privilege::Read),
            Some("write") => Ok(Privilege::Write),
            _ => Err(ArgError::new(
                "invalid_privilege",
                "privilege must be \"read\" or \"write\"",
            )),
        }
    }
}

/// A parsed grant or revoke. For a revoke, `privilege` is what is taken away: `Write` leaves
/// `read`, `Read` or `None` takes every grant the role has on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRequest {
    pub target_file_id: String,
    pub role: String,
    pub privilege: Option<Privilege>,
}

fn role(a: &Args) -> Result<String, ArgError> {
    match a.get("role") {
        Some(Value::String(r))
            if !r.is_empty() && r.len() <= ROLE_NAME_MAX_BYTES && !r.contains('\0') =>
        {
            Ok(r.clone())
        }
        v => Err(ArgError::new(
            "invalid_role",
            format!(
                "role must be a role name of 1 to {ROLE_NAME_MAX_BYTES} bytes, as written in pg_roles.rolname, not {}",
                v.map_or("nothing".into(), |v| type_name(v).to_string())
            ),
        )),
    }
}

/// `patchdiff_grant {target_file_id, role, privilege}`: all three required.
pub fn parse_grant(text: &str) -> Result<GrantRequest, ArgError> {
    let a = Args::parse(text, GRANT_ARGS, &["target_file_id", "role", "privilege"])?;
    let target_file_id = a.target_file_id()?;
    let role = role(&a)?;
    let privilege = Privilege::parse(a.get("privilege").unwrap_or(&Value::Null))?;
    Ok(GrantRequest {
        target_file_id,
        role,
        privilege: Some(privilege),
    })
}

/// `patchdiff_revoke {target_file_id, role, privilege?}`.
pub fn parse_revoke(text: &str) -> Result<GrantRequest, ArgError> {
    let a = Args::parse(text, REVOKE_ARGS, &["target_file_id", "role"])?;
    let target_file_id = a.target_file_id()?;
    let role = role(&a)?;
    let privilege = match a.get("privilege") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Privilege::parse(v)?),
    };
    Ok(GrantRequest {
        target_file_id,
        role,
        privilege,
    })
}

/// The answer to a caller who may read a target but not do what it asked (write, or grant).
/// Nothing was written.
fn permission_denied(target_file_id: &str, code: &str, detail: &str) -> Value {
    json!({
        "status": Status::PermissionDenied.as_str(),
        "code": code,
        "target_file_id": target_file_id,
        "failure_detail": detail,
    })
}

/// A write (a submission, a SAVE, an observation) by a role that may only read the target.
pub fn write_not_granted(target_file_id: &str) -> Value {
    permission_denied(
        target_file_id,
        "write_not_granted",
        "Your role may read this target but not write it; its owner can grant write with patchdiff_grant. Nothing was written.",
    )
}

/// A grant or revoke by a role that may read the target but does not own it.
pub fn not_owner(target_file_id: &str) -> Value {
    permission_denied(
        target_file_id,
        "not_target_owner",
        "Only the target's owner (a role with the owning role's privileges) or a patchdiff_admin can grant or revoke access to it. Nothing was changed.",
    )
}

pub fn unknown_role(role: &str) -> ArgError {
    ArgError::new(
        "unknown_role",
        format!("no role is named {role:?}; nothing was granted or revoked"),
    )
}

/// The answer to a grant or a revoke: the role's access to the target now (`null`: none beyond
/// what ownership or administration gives it).
pub fn grant_response(target_file_id: &str, role: &str, now: Option<Privilege>) -> Value {
    json!({
        "status": Status::Ok.as_str(),
        "target_file_id": target_file_id,
        "role": role,
        "privilege": now.map(Privilege::as_str),
    })
}

/// A parsed `patchdiff_list_targets` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    pub limit: usize,
    /// The page starts after this (created_at in microseconds, target_file_id).
    pub after: Option<(i64, String)>,
    pub filename_prefix: Option<String>,
}

/// The opaque cursor: `<created_at microseconds>.<target_file_id>` of the last row shown.
fn cursor(created_at_us: i64, id: &str) -> String {
    format!("{created_at_us}.{id}")
}

/// The microseconds a cursor may hold: from PostgreSQL's first `timestamptz` (4714-11-24 BC) to
/// 2^62 (about year 148,000), where the page query's `$5::int8 * interval '1 microsecond'` (a
/// `float8` product) and `'epoch' + ...` stay in range. Every cursor a page hands out is inside;
/// a forged one outside used to end the call, and the caller's transaction, with SQL error 22008
/// (interval or timestamp out of range) instead of `invalid_cursor`.
const CURSOR_MICROSECONDS: std::ops::RangeInclusive<i64> = -210_866_803_200_000_000..=1 << 62;

fn parse_cursor(s: &str) -> Option<(i64, String)> {
    let (us, id) = s.split_once('.')?;
    let us: i64 = us
        .parse()
        .ok()
        .filter(|us| CURSOR_MICROSECONDS.contains(us))?;
    let id = canonical_uuid(id)?;
    // Only the spelling a page hands out: not `+5`, `05` or an upper-case ID (helper-61).
    (cursor(us, &id) == s).then_some((us, id))
}

pub fn parse_list_targets(text: &str) -> Result<ListQuery, ArgError> {
    let a = Args::parse(text, LIST_TARGETS_ARGS, &[])?;
    let limit = match a.get("limit") {
        None | Some(Value::Null) => LIST_DEFAULT_LIMIT,
        Some(v) => match as_int(v) {
            Some(n) if n >= 1 => (n as u64).min(LIST_MAX_LIMIT as u64) as usize,
            None if is_big_int(v) => LIST_MAX_LIMIT,
            _ => {
                return Err(ArgError::new(
                    "invalid_limit",
                    format!(
                        "limit must be a positive non-boolean integer or null (at most {LIST_MAX_LIMIT} rows are returned)"
                    ),
                ));
            }
        },
    };
    let after = match a.opt_str("cursor", true, "invalid_cursor")? {
        None => None,
        Some(c) => Some(parse_cursor(c).ok_or_else(|| {
            ArgError::new(
                "invalid_cursor",
                "cursor must be a next_cursor value from an earlier patchdiff_list_targets page",
            )
        })?),
    };
    let filename_prefix = match a.opt_str("filename_prefix", true, "invalid_filename_prefix")? {
        Some(p) if p.len() > FILENAME_MAX_BYTES || p.contains('\0') => {
            return Err(ArgError::new(
                "invalid_filename_prefix",
                format!("filename_prefix must be at most {FILENAME_MAX_BYTES} bytes, without NUL"),
            ));
        }
        p => p.map(str::to_owned),
    };
    Ok(ListQuery {
        limit,
        after,
        filename_prefix,
    })
}

/// One listed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTarget {
    pub target_file_id: String,
    pub filename: String,
    pub target_type: String,
    pub version: i64,
    pub current_hash: String,
    /// Bytes of the canonical (LF) text.
    pub size_bytes: i64,
    pub created_at_us: i64,
    pub updated_at_us: i64,
    pub owner: String,
    /// How the caller reaches it: `owner` (it has the owning role's privileges), `write` or
    /// `read` (a grant), or `admin`.
    pub access: String,
}

/// A page, newest first. `rows` holds up to `limit + 1` rows; the extra one only says that a
/// next page exists.
pub fn list_page(mut rows: Vec<ListedTarget>, limit: usize) -> Value {
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = if more {
        rows.last()
            .map(|r| Value::String(cursor(r.created_at_us, &r.target_file_id)))
            .unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let targets: Vec<Value> = rows
        .into_iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("target_file_id".into(), json!(r.target_file_id));
            m.insert("filename".into(), json!(r.filename));
            m.insert("target_type".into(), json!(r.target_type));
            m.insert("version".into(), json!(r.version));
            m.insert("current_hash".into(), json!(r.current_hash));
            m.insert("size_bytes".into(), json!(r.size_bytes));
            m.insert("created_at".into(), json!(rfc3339_utc(r.created_at_us)));
            m.insert(
                "last_changed_at".into(),
                json!(rfc3339_utc(r.updated_at_us)),
            );
            m.insert("owner".into(), json!(r.owner));
            m.insert("access".into(), json!(r.access));
            Value::Object(m)
        })
        .collect();
    json!({
        "status": Status::Ok.as_str(),
        "count": targets.len(),
        "targets": targets,
        "next_cursor": next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0b8e7a8e-6f63-4d5a-9b7e-3f1d2c4b5a69";

    fn code<T: std::fmt::Debug>(r: Result<T, ArgError>) -> &'static str {
        r.unwrap_err().code
    }

    /// Issue 15 item 1: grant needs a target, a role name and read|write; revoke's privilege is
    /// optional.
    #[test]
    fn grant_and_revoke_arguments() {
        let g = parse_grant(&format!(
            r#"{{"target_file_id":"{ID}","role":"tenant_b","privilege":"write"}}"#
        ))
        .unwrap();
        assert_eq!(g.privilege, Some(Privilege::Write));
        assert_eq!(g.role, "tenant_b");
        assert_eq!(
            code(parse_grant(&format!(
                r#"{{"target_file_id":"{ID}","role":"b"}}"#
            ))),
            "missing_argument"
        );
        assert_eq!(
            code(parse_grant(&format!(
                r#"{{"target_file_id":"{ID}","role":"b","privilege":"admin"}}"#
            ))),
            "invalid_privilege"
        );
        assert_eq!(
            code(parse_grant(&format!(
                r#"{{"target_file_id":"{ID}","role":"","privilege":"read"}}"#
            ))),
            "invalid_role"
        );
        assert_eq!(
            code(parse_grant(&format!(
                r#"{{"target_file_id":"{ID}","role":"{}","privilege":"read"}}"#,
                "r".repeat(64)
            ))),
            "invalid_role"
        );
        let r = parse_revoke(&format!(r#"{{"target_file_id":"{ID}","role":"b"}}"#)).unwrap();
        assert_eq!(r.privilege, None);
        // docs/security.md: a reader's write and a non-owner's grant are refused, unwritten.
        for (v, code) in [
            (write_not_granted(ID), "write_not_granted"),
            (not_owner(ID), "not_target_owner"),
        ] {
            assert_eq!(
                (&v["status"], &v["code"], &v["target_file_id"]),
                (&json!("permission_denied"), &json!(code), &json!(ID))
            );
        }
        assert_eq!(
            grant_response(ID, "b", None),
            json!({"status": "ok", "target_file_id": ID, "role": "b", "privilege": null})
        );
    }

    /// Issue 15 item 2: pages are bounded, the cursor round-trips, a forged cursor is refused.
    #[test]
    fn list_pages_and_cursors() {
        let q = parse_list_targets("{}").unwrap();
        assert_eq!(
            (q.limit, q.after, q.filename_prefix),
            (LIST_DEFAULT_LIMIT, None, None)
        );
        assert_eq!(
            parse_list_targets(r#"{"limit":100000}"#).unwrap().limit,
            LIST_MAX_LIMIT
        );
        assert_eq!(code(parse_list_targets(r#"{"limit":0}"#)), "invalid_limit");
        assert_eq!(
            code(parse_list_targets(r#"{"cursor":"x"}"#)),
            "invalid_cursor"
        );
        // Microseconds outside what the page query can turn into a timestamp: refused here, not
        // left to end the statement with an SQL error (pg_patchdiff/src/tests.rs runs them in SQL).
        let uuid = "00000000-0000-0000-0000-000000000000";
        for us in [
            "9223372036854775807",
            "4611686018427387905",
            "-210866803200000001",
        ] {
            let forged = json!({ "cursor": format!("{us}.{uuid}") }).to_string();
            assert_eq!(code(parse_list_targets(&forged)), "invalid_cursor", "{us}");
        }
        for us in ["4611686018427387904", "-210866803200000000", "0"] {
            let edge = json!({ "cursor": format!("{us}.{uuid}") }).to_string();
            assert!(parse_list_targets(&edge).is_ok(), "{us}");
        }
        // Only the spelling a page hands out (helper-61).
        let upper = "0000000A-0000-0000-0000-000000000000";
        for c in [
            format!("+5.{uuid}"),
            format!("05.{uuid}"),
            format!("-0.{uuid}"),
            format!("5.{upper}"),
        ] {
            let forged = json!({ "cursor": c }).to_string();
            assert_eq!(code(parse_list_targets(&forged)), "invalid_cursor", "{c}");
        }
        assert_eq!(
            code(parse_list_targets(r#"{"filename_prefix":7}"#)),
            "invalid_filename_prefix"
        );
        let row = |n: i64| ListedTarget {
            target_file_id: ID.into(),
            filename: format!("f{n}"),
            target_type: "text/plain".into(),
            version: n,
            current_hash: "0".repeat(64),
            size_bytes: 1,
            created_at_us: n,
            updated_at_us: n,
            owner: "a".into(),
            access: "owner".into(),
        };
        let page = list_page(vec![row(3), row(2), row(1)], 2);
        assert_eq!(page["count"], 2);
        let next = page["next_cursor"].as_str().unwrap();
        assert_eq!(next, format!("2.{ID}"));
        let q = parse_list_targets(&format!(r#"{{"cursor":"{next}"}}"#)).unwrap();
        assert_eq!(q.after, Some((2, ID.to_string())));
        assert_eq!(list_page(vec![row(1)], 2)["next_cursor"], Value::Null);
    }
}
