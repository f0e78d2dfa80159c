//! The `observed_v2` profile (observed-editor-v2.txt): five tools, each exactly one call of an
//! existing SQL function. What the profile adds is here, as pure functions the server applies:
//!
//! - [`route_commit_bundle`]: `patchdiff_commit_bundle` arguments become the batch form of
//!   `patchdiff_submit_observed_operations` by unwrapping the snapshot, and nothing else;
//! - [`add_snapshot`]: a selection result carries the snapshot the commit accepts;
//! - [`commit_receipt`]: the bounded v2 commit receipt (8,192 bytes);
//! - [`is_definitive_failure`]: which statuses set `isError`.
//!
//! `patchdiff_list_scopes` and `patchdiff_observe_scopes` need no argument rewriting: each
//! declares only the names of one `patchdiff_observe_scope` mode (candidates; selections), and
//! the server refuses every other name before SQL.

use crate::tool::Tool;
use patchdiff_engine::wire::{LITERAL, ascii_len, quoted_names, sha256_hex, to_string};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use std::fmt;

/// The commit's wire name, which its refusals name.
pub const COMMIT_BUNDLE: &str = Tool::CommitBundle.name();

/// "Selection returns snapshot with exactly target_file_id, expected_target_version,
/// expected_current_hash, and observation_bundle_id."
pub const SNAPSHOT_FIELDS: [&str; 4] = [
    "target_file_id",
    "expected_target_version",
    "expected_current_hash",
    "observation_bundle_id",
];

/// "The entire logical commit/error JSON is capped at 8,192 UTF-8 bytes when serialized
/// compactly, including metadata, diagnostics and all collections." Measured as compact
/// ASCII-escaped JSON (the project's budget measure, `json::ascii_len`), which is never shorter
/// than the literal UTF-8 text the result carries, so the cap holds for both.
pub const RECEIPT_MAX_BYTES: usize = 8_192;

/// "Oversized invalid identity echoes become null with byte/hash omission metadata, never a
/// shortened string pretending to be an authentic ID." An identity whose compact ASCII JSON is
/// longer than this cannot be authentic: a quoted UUID is 38 bytes, a hash 66, a request key at
/// most 130, a change ID at most 66.
pub const IDENTITY_ECHO_MAX_BYTES: usize = 256;

/// observed-editor-v2 "Commit receipts": "Definitive tool failures set isError: true";
/// "Infrastructure exceptions return status: outcome_unknown". A call PostgreSQL cancelled
/// (`cancelled`, nothing written) is a failure too, and so is one a sharded router could not
/// take to its partition (`unavailable`, nothing written; docs/scale-out.md) or whose shard refused
/// its role (`refused`). Accepted transactions (with or without
/// warnings), candidates and issued observations are successes.
pub fn is_definitive_failure(status: Option<&str>) -> bool {
    matches!(
        status,
        Some(
            "rejected"
                | "invalid_argument"
                | "not_found"
                | "unsupported"
                | "structure_unavailable"
                | "ambiguous"
                | "outcome_unknown"
                | crate::server::CANCELLED
                | crate::server::PERMISSION_DENIED
                | crate::server::UNAVAILABLE
                | crate::server::REFUSED
        )
    )
}

// ---------------------------------------------------------------------------------------------
// The commit route.

/// A JSON object's members in the order sent, each value exactly as sent (escapes, spacing and
/// number spelling included): nothing is decoded that the route does not need.
struct RawObject(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = RawObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(RawObject(members))
            }
        }
        d.deserialize_map(Members)
    }
}

/// The JSON type of raw JSON text, from its first byte.
fn raw_type(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    }
}

fn invalid(code: &str, detail: String) -> Value {
    json!({"status": "invalid_argument", "code": code, "tool": COMMIT_BUNDLE, "failure_detail": detail})
}

/// `patchdiff_commit_bundle` arguments as the `patchdiff_submit_observed_operations` arguments
/// of the batch form: the four snapshot fields, then every other argument, each value exactly
/// as sent. Normalization "only selects the named route and unwraps supplied fields": no guard
/// is refilled, no UUID respelled, no value coerced, so malformed operational values reach the
/// service's audited admission, and the SQL call equals what a client would send to the
/// underlying tool (keyed recovery works across both).
///
/// An `invalid_argument` answer (nothing reaches SQL) for what cannot be routed: arguments that
/// are not an object; no snapshot, or one given twice; a snapshot that is not an object, has a
/// member given twice, an unknown member (`unknown_snapshot_field`) or a missing one
/// (`missing_snapshot_field`), or whose `target_file_id` is not a string (no target to route
/// to); a snapshot field also given at the top level.
pub fn route_commit_bundle(raw: &str) -> Result<String, Value> {
    let Ok(RawObject(args)) = serde_json::from_str::<RawObject>(raw) else {
        return Err(invalid(
            "invalid_arguments",
            "arguments must be a JSON object".into(),
        ));
    };
    let loose: Vec<&str> = args
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| SNAPSHOT_FIELDS.contains(k))
        .collect();
    if !loose.is_empty() {
        let (names, _) = quoted_names(loose.iter().copied());
        let mut e = invalid(
            "unknown_argument",
            format!(
                "unknown argument(s) for {COMMIT_BUNDLE}: {}; these travel inside snapshot, unchanged",
                names.join(", ")
            ),
        );
        e["unknown_arguments"] = json!(names);
        return Err(e);
    }
    let mut snapshots = args.iter().filter(|(k, _)| k == "snapshot");
    let snapshot = match (snapshots.next(), snapshots.next()) {
        (Some((_, s)), None) => s,
        (None, _) => {
            let mut e = invalid(
                "missing_argument",
                format!("missing required argument(s) for {COMMIT_BUNDLE}: snapshot"),
            );
            e["missing_arguments"] = json!(["snapshot"]);
            return Err(e);
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "invalid_snapshot",
                "snapshot is given more than once".into(),
            ));
        }
    };
    let Ok(RawObject(fields)) = serde_json::from_str::<RawObject>(snapshot.get()) else {
        return Err(invalid(
            "invalid_snapshot",
            format!(
                "snapshot must be the object patchdiff_observe_scopes returned, {{target_file_id, expected_target_version, expected_current_hash, observation_bundle_id}}, not {}",
                raw_type(snapshot)
            ),
        ));
    };
    let unknown: Vec<&str> = fields
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !SNAPSHOT_FIELDS.contains(k))
        .collect();
    if !unknown.is_empty() {
        let (names, _) = quoted_names(unknown.iter().copied());
        let mut e = invalid(
            "unknown_snapshot_field",
            format!(
                "snapshot has unknown field(s) {}: pass the snapshot patchdiff_observe_scopes returned, unchanged",
                names.join(", ")
            ),
        );
        e["unknown_snapshot_fields"] = json!(names);
        return Err(e);
    }
    let mut ordered: Vec<&RawValue> = Vec::with_capacity(SNAPSHOT_FIELDS.len());
    let mut missing = Vec::new();
    for name in SNAPSHOT_FIELDS {
        let mut given = fields.iter().filter(|(k, _)| k == name);
        match (given.next(), given.next()) {
            (Some((_, v)), None) => ordered.push(v),
            (None, _) => missing.push(name),
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "invalid_snapshot",
                    format!("snapshot.{name} is given more than once"),
                ));
            }
        }
    }
    if !missing.is_empty() {
        let mut e = invalid(
            "missing_snapshot_field",
            format!(
                "snapshot lacks {}: pass the snapshot patchdiff_observe_scopes returned, unchanged",
                missing.join(", ")
            ),
        );
        e["missing_snapshot_fields"] = json!(missing);
        return Err(e);
    }
    if raw_type(ordered[0]) != "string" {
        return Err(invalid(
            "invalid_snapshot",
            format!(
                "snapshot.target_file_id must be a string, not {}: the commit cannot be routed to a target",
                raw_type(ordered[0])
            ),
        ));
    }
    let mut out = String::with_capacity(raw.len() + 64);
    out.push('{');
    let rest = args.iter().filter(|(k, _)| k != "snapshot");
    let members = SNAPSHOT_FIELDS
        .into_iter()
        .zip(ordered.iter().copied())
        .chain(rest.map(|(k, v)| (k.as_str(), &**v)));
    for (i, (k, v)) in members.enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Names are declared argument names; serde_json writes them as JSON strings.
        out.push_str(&serde_json::to_string(k).expect("a string serializes"));
        out.push(':');
        out.push_str(v.get());
    }
    out.push('}');
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The selection snapshot.

/// An `observed_batch` result carries `snapshot`: exactly the four fields, in their order. The
/// extension returns it; when it does not (or returns more), it is rebuilt from the result's
/// own fields. Other results are unchanged.
pub fn add_snapshot(result: &mut Value) {
    let Some(m) = result.as_object_mut() else {
        return;
    };
    if m.get("status").and_then(Value::as_str) != Some("observed_batch") {
        return;
    }
    let given = m.get("snapshot").and_then(Value::as_object);
    let from_result = [
        "target_file_id",
        "target_version",
        "target_current_hash",
        "observation_bundle_id",
    ];
    let mut snapshot = Map::new();
    for (field, fallback) in SNAPSHOT_FIELDS.iter().zip(from_result) {
        let v = given
            .and_then(|s| s.get(*field))
            .or_else(|| m.get(fallback))
            .cloned()
            .unwrap_or(Value::Null);
        snapshot.insert((*field).into(), v);
    }
    let snapshot = Value::Object(snapshot);
    match m.get_mut("snapshot") {
        Some(s) => *s = snapshot,
        None => {
            // Where the extension puts it: before the scope count and the scopes.
            let at = m
                .keys()
                .position(|k| k == "scope_count" || k == "scopes")
                .unwrap_or(m.len());
            m.shift_insert(at, "snapshot".into(), snapshot);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The commit receipt.

/// Result members the receipt carries in its own fields; on a failure, every other member joins
/// `diagnostics`.
const RECEIPT_SOURCES: &[&str] = &[
    "status",
    "code",
    "target_file_id",
    "observation_bundle_id",
    "pdcp_log_id",
    "client_request_id",
    "deduplicated",
    "before_version",
    "before_hash",
    "version",
    "after_version",
    "after_hash",
    "current_version",
    "current_hash",
    "group_count",
    "operation_count",
    "groups",
    "warnings",
    "warning_count",
    "warnings_truncated",
    "validity",
    "failure_reason",
    "failure_detail",
    "failed_change_id",
    "correlation_id",
    "diagnostic",
];

/// Diagnostic members dropped first, in this order, when a failure receipt is over the cap:
/// the largest response-only enrichment before the stored failure context.
const DIAGNOSTIC_DROP_ORDER: &[&str] = &[
    "near_misses",
    "exact_candidates",
    "current_context",
    "failure_context",
];

/// Identity fields, by path: over [`IDENTITY_ECHO_MAX_BYTES`] they become null with
/// `<field>_omitted: {bytes, sha256}` beside them; they are never shortened.
const IDENTITY_PATHS: &[&[&str]] = &[
    &["target_file_id"],
    &["observation_bundle_id"],
    &["correlation_id"],
    &["code"],
    &["failure_reason"],
    &["failed_change_id"],
    &["transaction", "pdcp_log_id"],
    &["transaction", "client_request_id"],
    &["transaction", "before", "hash"],
    &["transaction", "after", "hash"],
    &["current", "hash"],
];

/// The v2 commit receipt of one `patchdiff_commit_bundle` outcome (accepted, rejected,
/// recovered, or an error of SQL or of this front end), within [`RECEIPT_MAX_BYTES`]:
///
/// ```text
/// {status, code?, transaction: {pdcp_log_id, client_request_id, deduplicated,
///    before: {version, hash}, after: {version, hash}, group_count, operation_count},
///  current: {version, hash}, target_file_id, observation_bundle_id, correlation_id?,
///  scopes: {items: [{group_index, observation_id, symbol_name, operation_count}], total, truncated} | null,
///  warnings: {items: [line, ...], total, truncated} | null,
///  validity,
///  failure_reason?, failure_detail?, failed_change_id?, diagnostics?,   (every status but accepted)
///  presentation: {truncated, omitted_fields}}
/// ```
///
/// `transaction` is the original transaction's (also on keyed recovery), `current` the target
/// now. `scopes` and `warnings` exist on an acceptance. `diagnostics` is the stored
/// `diagnostic` with the failure-only response members (`current_context`, `near_misses`; an
/// argument error's own members such as `unknown_arguments`), or null.
///
/// Over the cap, in this order until it fits, each step named in `presentation.omitted_fields`
/// with totals kept: scope items from the last (`scopes.items`); warning items from the last
/// (`warnings.items`); diagnostics members `near_misses`, `exact_candidates`, `current_context`,
/// `failure_context` (`diagnostics.<member>`), then all of `diagnostics`; `validity`; then
/// `failure_detail` is shortened (prose, not an identity). Identities are never shortened: an
/// identity echo over [`IDENTITY_ECHO_MAX_BYTES`] is null with `<field>_omitted: {bytes,
/// sha256}` (of its UTF-8 text) beside it, whatever the total size.
pub fn commit_receipt(result: &Value) -> Value {
    let field = |k: &str| result.get(k).cloned().unwrap_or(Value::Null);
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("outcome_unknown");
    let accepted = status == "accepted";
    let mut m = Map::new();
    m.insert("status".into(), json!(status));
    if !accepted {
        m.insert("code".into(), field("code"));
    }
    let after_version = match result.get("after_version") {
        Some(v) if !v.is_null() => v.clone(),
        _ if accepted => field("version"),
        _ => Value::Null,
    };
    m.insert(
        "transaction".into(),
        json!({
            "pdcp_log_id": field("pdcp_log_id"),
            "client_request_id": field("client_request_id"),
            "deduplicated": field("deduplicated"),
            "before": {"version": field("before_version"), "hash": field("before_hash")},
            "after": {"version": after_version, "hash": field("after_hash")},
            "group_count": field("group_count"),
            "operation_count": field("operation_count"),
        }),
    );
    m.insert(
        "current".into(),
        json!({"version": field("current_version"), "hash": field("current_hash")}),
    );
    m.insert("target_file_id".into(), field("target_file_id"));
    m.insert(
        "observation_bundle_id".into(),
        field("observation_bundle_id"),
    );
    if let Some(c) = result.get("correlation_id") {
        m.insert("correlation_id".into(), c.clone());
    }
    if accepted {
        m.insert("scopes".into(), scope_summaries(result));
        m.insert("warnings".into(), warning_summary(result));
    } else {
        m.insert("scopes".into(), Value::Null);
        m.insert("warnings".into(), Value::Null);
    }
    m.insert("validity".into(), field("validity"));
    if !accepted {
        m.insert("failure_reason".into(), field("failure_reason"));
        m.insert("failure_detail".into(), field("failure_detail"));
        m.insert("failed_change_id".into(), field("failed_change_id"));
        m.insert("diagnostics".into(), diagnostics(result));
    }
    let mut receipt = Receipt {
        value: m,
        omitted: Vec::new(),
    };
    receipt.omit_oversized_identities();
    receipt.fit();
    receipt.finish()
}

fn scope_summaries(result: &Value) -> Value {
    let groups: Vec<Value> = result
        .get("groups")
        .and_then(Value::as_array)
        .map(|gs| {
            gs.iter()
                .map(|g| {
                    let f = |k: &str| g.get(k).cloned().unwrap_or(Value::Null);
                    json!({
                        "group_index": f("group_index"),
                        "observation_id": f("observation_id"),
                        "symbol_name": f("symbol_name"),
                        "operation_count": f("operation_count"),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let total = result
        .get("group_count")
        .and_then(Value::as_u64)
        .map_or(groups.len() as u64, |n| n.max(groups.len() as u64));
    json!({"items": groups, "total": total, "truncated": (groups.len() as u64) < total})
}

fn warning_summary(result: &Value) -> Value {
    let items: Vec<Value> = result
        .get("warnings")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let total = result
        .get("warning_count")
        .and_then(Value::as_u64)
        .map_or(items.len() as u64, |n| n.max(items.len() as u64));
    let truncated = result.get("warnings_truncated") == Some(&Value::Bool(true))
        || (items.len() as u64) < total;
    json!({"items": items, "total": total, "truncated": truncated})
}

/// A failure's diagnostics: the `diagnostic` object's members, then every result member the
/// receipt does not carry elsewhere; null when there are none.
fn diagnostics(result: &Value) -> Value {
    let mut d = match result.get("diagnostic") {
        Some(Value::Object(o)) => o.clone(),
        _ => Map::new(),
    };
    if let Some(m) = result.as_object() {
        for (k, v) in m {
            if !RECEIPT_SOURCES.contains(&k.as_str()) && !d.contains_key(k) {
                d.insert(k.clone(), v.clone());
            }
        }
    }
    if d.is_empty() {
        Value::Null
    } else {
        Value::Object(d)
    }
}

/// `{bytes, sha256}` of an omitted value: its UTF-8 text (a string's own text, anything else's
/// compact JSON).
fn omission_metadata(v: &Value) -> Value {
    let text = match v {
        Value::String(s) => s.clone(),
        other => to_string(other, LITERAL),
    };
    json!({"bytes": text.len(), "sha256": sha256_hex(&text)})
}

#[derive(Serialize)]
struct Presentation<'a> {
    truncated: bool,
    omitted_fields: &'a [String],
}

struct Receipt {
    value: Map<String, Value>,
    omitted: Vec<String>,
}

impl Receipt {
    fn note(&mut self, what: &str) {
        if !self.omitted.iter().any(|o| o == what) {
            self.omitted.push(what.to_owned());
        }
    }

    /// The receipt as it would be sent now, presentation included.
    fn current(&self) -> Value {
        let mut m = self.value.clone();
        m.insert(
            "presentation".into(),
            serde_json::to_value(Presentation {
                truncated: !self.omitted.is_empty(),
                omitted_fields: &self.omitted,
            })
            .expect("presentation serializes"),
        );
        Value::Object(m)
    }

    fn size(&self) -> usize {
        ascii_len(&self.current())
    }

    fn fits(&self) -> bool {
        self.size() <= RECEIPT_MAX_BYTES
    }

    fn finish(self) -> Value {
        self.current()
    }

    fn omit_oversized_identities(&mut self) {
        for path in IDENTITY_PATHS {
            let (last, parents) = path.split_last().expect("paths are nonempty");
            let Some(obj) = object_at(&mut self.value, parents) else {
                continue;
            };
            if let Some(v) = obj.get(*last).filter(|v| oversized_identity(v)) {
                let meta = omission_metadata(v);
                let at = obj
                    .keys()
                    .position(|k| k == last)
                    .map_or(obj.len(), |i| i + 1);
                obj.insert((*last).into(), Value::Null);
                obj.shift_insert(at, format!("{last}_omitted"), meta);
                self.note(&path.join("."));
            }
        }
        // Scope summaries echo each group's observation ID.
        let mut noted = false;
        if let Some(Value::Array(items)) = self
            .value
            .get_mut("scopes")
            .and_then(|s| s.get_mut("items"))
        {
            for item in items.iter_mut().filter_map(Value::as_object_mut) {
                if let Some(v) = item.get("observation_id").filter(|v| oversized_identity(v)) {
                    let meta = omission_metadata(v);
                    item.insert("observation_id".into(), Value::Null);
                    let at = item
                        .keys()
                        .position(|k| k == "observation_id")
                        .map_or(item.len(), |i| i + 1);
                    item.shift_insert(at, "observation_id_omitted".into(), meta);
                    noted = true;
                }
            }
        }
        if noted {
            self.note("scopes.items.observation_id");
        }
    }

    /// Drops the last item of `collection.items`; false when there is none.
    fn pop_item(&mut self, collection: &str) -> bool {
        let Some(Value::Object(c)) = self.value.get_mut(collection) else {
            return false;
        };
        let Some(Value::Array(items)) = c.get_mut("items") else {
            return false;
        };
        if items.pop().is_none() {
            return false;
        }
        c.insert("truncated".into(), Value::Bool(true));
        self.note(&format!("{collection}.items"));
        true
    }

    /// Applies the omission order until the receipt fits.
    fn fit(&mut self) {
        for collection in ["scopes", "warnings"] {
            while !self.fits() && self.pop_item(collection) {}
        }
        for member in DIAGNOSTIC_DROP_ORDER {
            if self.fits() {
                return;
            }
            if let Some(Value::Object(d)) = self.value.get_mut("diagnostics")
                && d.shift_remove(*member).is_some()
            {
                self.note(&format!("diagnostics.{member}"));
            }
        }
        for field in ["diagnostics", "validity"] {
            if self.fits() {
                return;
            }
            if self.value.get(field).is_some_and(|v| !v.is_null()) {
                self.value.insert(field.into(), Value::Null);
                self.note(field);
            }
        }
        if !self.fits() {
            self.shorten_failure_detail();
        }
        // Nothing above can leave the receipt over the cap with identities bounded; should a
        // future field break that, the remaining members go rather than the cap.
        let keys: Vec<String> = self.value.keys().cloned().collect();
        for k in keys.into_iter().rev() {
            if self.fits() {
                return;
            }
            if k != "status" && self.value.get(&k).is_some_and(|v| !v.is_null()) {
                self.value.insert(k.clone(), Value::Null);
                self.note(&k);
            }
        }
    }

    /// The longest prefix of `failure_detail` that fits, marked as shortened.
    fn shorten_failure_detail(&mut self) {
        let Some(Value::String(detail)) = self.value.get("failure_detail").cloned() else {
            return;
        };
        self.note("failure_detail");
        let chars: Vec<char> = detail.chars().collect();
        let with = |n: usize| format!("{}... (shortened)", chars[..n].iter().collect::<String>());
        let (mut lo, mut hi) = (0usize, chars.len());
        // The largest n whose shortened text fits; n = 0 may still not fit.
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            self.value
                .insert("failure_detail".into(), Value::String(with(mid)));
            if self.fits() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        self.value
            .insert("failure_detail".into(), Value::String(with(lo)));
        if !self.fits() {
            self.value.insert("failure_detail".into(), Value::Null);
        }
    }
}

/// The object at `path` below `m`, if every step is an object.
fn object_at<'a>(
    m: &'a mut Map<String, Value>,
    path: &[&str],
) -> Option<&'a mut Map<String, Value>> {
    match path.split_first() {
        None => Some(m),
        Some((first, rest)) => match m.get_mut(*first) {
            Some(Value::Object(o)) => object_at(o, rest),
            _ => None,
        },
    }
}

fn oversized_identity(v: &Value) -> bool {
    !v.is_null() && ascii_len(v) > IDENTITY_ECHO_MAX_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0f0e0d0c-0b0a-4908-8706-050403020100";
    const B: &str = "b0b0b0b0-b0b0-4b0b-8b0b-b0b0b0b0b0b0";
    const H: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const H2: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    fn snapshot() -> Value {
        json!({"target_file_id": T, "expected_target_version": 3, "expected_current_hash": H, "observation_bundle_id": B})
    }

    fn refused(raw: &str) -> Value {
        route_commit_bundle(raw).expect_err(raw)
    }

    /// observed-editor-v2 "Unknown envelope fields and unrouteable snapshots fail explicitly":
    /// an invalid_argument answer, and no SQL call (no routed arguments).
    #[test]
    fn unrouteable_snapshots_are_refused_before_sql() {
        let ops = r#""intent":"x","client_request_id":"k","groups":[]"#;
        let e = refused(&format!(
            r#"{{"snapshot":{{"target_file_id":"{T}","expected_target_version":3,"expected_current_hash":"{H}","observation_bundle_id":"{B}","extra":1}},{ops}}}"#
        ));
        assert_eq!(
            (&e["status"], &e["code"]),
            (&json!("invalid_argument"), &json!("unknown_snapshot_field"))
        );
        assert_eq!(e["unknown_snapshot_fields"], json!(["extra"]));
        assert_eq!(e["tool"], COMMIT_BUNDLE);

        let e = refused(&format!(
            r#"{{"snapshot":{{"target_file_id":"{T}","expected_target_version":3,"observation_bundle_id":"{B}"}},{ops}}}"#
        ));
        assert_eq!(e["code"], "missing_snapshot_field");
        assert_eq!(
            e["missing_snapshot_fields"],
            json!(["expected_current_hash"])
        );

        for not_object in ["null", "[]", "\"snap\"", "7", "true"] {
            let e = refused(&format!(r#"{{"snapshot":{not_object},{ops}}}"#));
            assert_eq!(e["code"], "invalid_snapshot", "{not_object}");
            assert!(e["failure_detail"].as_str().unwrap().contains("not "));
        }
        // No target to route to.
        let e = refused(&format!(
            r#"{{"snapshot":{{"target_file_id":42,"expected_target_version":3,"expected_current_hash":"{H}","observation_bundle_id":"{B}"}},{ops}}}"#
        ));
        assert_eq!(e["code"], "invalid_snapshot");
        // A member twice, a snapshot twice, a snapshot field loose at the top level.
        let e = refused(&format!(
            r#"{{"snapshot":{{"target_file_id":"{T}","target_file_id":"{T}","expected_target_version":3,"expected_current_hash":"{H}","observation_bundle_id":"{B}"}},{ops}}}"#
        ));
        assert_eq!(e["code"], "invalid_snapshot");
        let s = snapshot().to_string();
        assert_eq!(
            refused(&format!(r#"{{"snapshot":{s},"snapshot":{s},{ops}}}"#))["code"],
            "invalid_snapshot"
        );
        assert_eq!(
            refused(&format!(
                r#"{{"snapshot":{s},"target_file_id":"{T}",{ops}}}"#
            ))["code"],
            "unknown_argument"
        );
        assert_eq!(
            refused(&format!(r#"{{{ops}}}"#))["code"],
            "missing_argument"
        );
        assert_eq!(refused("[1]")["code"], "invalid_arguments");
    }

    /// "Normalization only selects the named route and unwraps supplied fields. It does not
    /// refill guards, reinterpret coordinates, normalize UUID spelling, derive operations":
    /// the routed arguments are the batch form, every value byte for byte as sent.
    #[test]
    fn a_valid_snapshot_routes_to_the_exact_batch_arguments() {
        // Odd but routeable values: an upper-case UUID, a version as a string, a short hash,
        // escapes, spacing and a lone surrogate in the operations, all passed through as sent.
        let upper = T.to_uppercase();
        let groups = r#"[ {"observation_id" : "X", "operations":[{"op":"match","match":"\u00e9\ud800","replace":"1e2","start":1.0E0}]} ]"#;
        let raw = format!(
            r#"{{"intent":"edit \"it\"","snapshot":{{"observation_bundle_id":"{B}","expected_current_hash":"abc","expected_target_version":"3","target_file_id":"{upper}"}},"client_request_id":"key-1","groups":{groups},"attempt":2,"source":null}}"#
        );
        let routed = route_commit_bundle(&raw).unwrap();
        assert_eq!(
            routed,
            format!(
                r#"{{"target_file_id":"{upper}","expected_target_version":"3","expected_current_hash":"abc","observation_bundle_id":"{B}","intent":"edit \"it\"","client_request_id":"key-1","groups":{groups},"attempt":2,"source":null}}"#
            )
        );
        // The same request a client sends to patchdiff_submit_observed_operations.
        let ordinary = route_commit_bundle(&format!(
            r#"{{"snapshot":{},"intent":"x","client_request_id":"k","groups":[]}}"#,
            snapshot()
        ))
        .unwrap();
        let v: Value = serde_json::from_str(&ordinary).unwrap();
        assert_eq!(
            v,
            json!({"target_file_id": T, "expected_target_version": 3, "expected_current_hash": H,
                   "observation_bundle_id": B, "intent": "x", "client_request_id": "k", "groups": []})
        );
    }

    /// "Selection returns snapshot with exactly target_file_id, expected_target_version,
    /// expected_current_hash, and observation_bundle_id."
    #[test]
    fn selections_carry_exactly_the_snapshot() {
        let mut built = json!({"status": "observed_batch", "target_file_id": T, "observation_bundle_id": B,
            "editing_cycle_id": "c", "target_version": 3, "target_current_hash": H, "scopes": []});
        add_snapshot(&mut built);
        assert_eq!(built["snapshot"], snapshot());
        let keys: Vec<&String> = built.as_object().unwrap().keys().collect();
        assert_eq!(keys[6..], ["snapshot", "scopes"]);
        let mut given = built.clone();
        given["snapshot"]["extra"] = json!(1);
        add_snapshot(&mut given);
        assert_eq!(given["snapshot"], snapshot());
        let mut other = json!({"status": "candidates", "candidates": []});
        add_snapshot(&mut other);
        assert!(other.get("snapshot").is_none());
    }

    fn accepted(warnings: Vec<String>) -> Value {
        json!({
            "status": "accepted", "target_file_id": T, "observation_bundle_id": B,
            "before_hash": H, "after_hash": H2, "before_version": 3, "version": 4, "after_version": 4,
            "current_version": 4, "current_hash": H2,
            "pdcp_log_id": "c0c0c0c0-c0c0-4c0c-8c0c-c0c0c0c0c0c0",
            "manifest_entries_added": 2, "operation_count": 2, "group_count": 2,
            "warnings": warnings.clone(), "warning_details": [], "warning_count": warnings.len(),
            "warnings_truncated": false, "validity": {"task": "not_evaluated"},
            "evidence": {"changes": [{"change_id": "chg_001"}]},
            "groups": [
                {"group_index": 1, "observation_id": "d1d1d1d1-d1d1-4d1d-8d1d-d1d1d1d1d1d1", "symbol_name": "Uploader.flush", "symbol_name_truncated": false, "kind": "method", "operation_count": 1, "scope_start": 10, "scope_end": 40, "scope_end_after": 41},
                {"group_index": 2, "observation_id": "d2d2d2d2-d2d2-4d2d-8d2d-d2d2d2d2d2d2", "symbol_name": "FRAME_SYNC_STREAM", "symbol_name_truncated": false, "kind": "variable", "operation_count": 1, "scope_start": 50, "scope_end": 60, "scope_end_after": 60}
            ],
            "deduplicated": false, "client_request_id": "req-1"
        })
    }

    /// observed-editor-v2 "Commit receipts": transaction before/after, current, scopes and
    /// warnings with totals, validity; the SQL evidence and group spans stay out.
    #[test]
    fn an_acceptance_becomes_the_v2_receipt() {
        let r = commit_receipt(&accepted(vec!["W: one".into()]));
        assert_eq!(
            r,
            json!({
                "status": "accepted",
                "transaction": {"pdcp_log_id": "c0c0c0c0-c0c0-4c0c-8c0c-c0c0c0c0c0c0", "client_request_id": "req-1",
                    "deduplicated": false, "before": {"version": 3, "hash": H}, "after": {"version": 4, "hash": H2},
                    "group_count": 2, "operation_count": 2},
                "current": {"version": 4, "hash": H2},
                "target_file_id": T, "observation_bundle_id": B,
                "scopes": {"items": [
                    {"group_index": 1, "observation_id": "d1d1d1d1-d1d1-4d1d-8d1d-d1d1d1d1d1d1", "symbol_name": "Uploader.flush", "operation_count": 1},
                    {"group_index": 2, "observation_id": "d2d2d2d2-d2d2-4d2d-8d2d-d2d2d2d2d2d2", "symbol_name": "FRAME_SYNC_STREAM", "operation_count": 1}
                ], "total": 2, "truncated": false},
                "warnings": {"items": ["W: one"], "total": 1, "truncated": false},
                "validity": {"task": "not_evaluated"},
                "presentation": {"truncated": false, "omitted_fields": []}
            })
        );
        // "keeping the editor receipt compact (~800 bytes)": two scopes, one warning.
        assert!(ascii_len(&r) < 1_100, "{}", ascii_len(&r));
        // A recovery: the original transaction, the target now.
        let mut recovered = accepted(vec![]);
        recovered["deduplicated"] = json!(true);
        recovered["current_version"] = json!(9);
        let r = commit_receipt(&recovered);
        assert_eq!(r["transaction"]["after"]["version"], 4);
        assert_eq!(r["transaction"]["deduplicated"], true);
        assert_eq!(r["current"]["version"], 9);
    }

    /// A rejection keeps its failure fields and diagnostic; errors of any origin keep theirs.
    #[test]
    fn failures_keep_their_domain_data() {
        let rejected = json!({
            "status": "rejected", "code": "STALE_OBSERVATION_VERSION", "target_file_id": T,
            "observation_bundle_id": B, "failure_reason": "target_version_mismatch",
            "failure_detail": "stale", "failed_change_id": null, "before_hash": H, "after_hash": null,
            "current_version": 5, "current_hash": H2, "pdcp_log_id": "e0e0e0e0-e0e0-4e0e-8e0e-e0e0e0e0e0e0",
            "diagnostic": {"code": "STALE_OBSERVATION_VERSION", "failure_context": {"text": "x"}},
            "current_context": {"text": "y"}, "near_misses": null,
            "validity": {"task": "not_evaluated"}, "deduplicated": false, "client_request_id": "k"
        });
        let r = commit_receipt(&rejected);
        assert_eq!(r["code"], "STALE_OBSERVATION_VERSION");
        assert_eq!(r["failure_reason"], "target_version_mismatch");
        assert_eq!(r["transaction"]["pdcp_log_id"], rejected["pdcp_log_id"]);
        assert_eq!(
            r["transaction"]["after"],
            json!({"version": null, "hash": null})
        );
        assert_eq!(r["current"], json!({"version": 5, "hash": H2}));
        assert_eq!(
            r["diagnostics"],
            json!({"code": "STALE_OBSERVATION_VERSION", "failure_context": {"text": "x"},
                   "current_context": {"text": "y"}, "near_misses": null})
        );
        assert_eq!(r["scopes"], Value::Null);
        let invalid = refused("{}");
        let r = commit_receipt(&invalid);
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("invalid_argument"), &json!("missing_argument"))
        );
        assert_eq!(
            r["diagnostics"],
            json!({"tool": COMMIT_BUNDLE, "missing_arguments": ["snapshot"]})
        );
        assert_eq!(r["transaction"]["pdcp_log_id"], Value::Null);
        for s in [
            "rejected",
            "invalid_argument",
            "not_found",
            "unsupported",
            "structure_unavailable",
            "ambiguous",
            "outcome_unknown",
            "permission_denied",
            "cancelled",
            "unavailable",
            "refused",
        ] {
            assert!(is_definitive_failure(Some(s)), "{s}");
        }
        for s in ["accepted", "candidates", "observed", "observed_batch", "ok"] {
            assert!(!is_definitive_failure(Some(s)), "{s}");
        }
    }

    /// The receipt of `warnings` lines each `len` bytes long.
    fn receipt_with_warning(len: usize) -> Value {
        commit_receipt(&accepted(vec!["w".repeat(len)]))
    }

    /// "The entire logical commit/error JSON is capped at 8,192 UTF-8 bytes when serialized
    /// compactly": exactly at the cap nothing is omitted; one byte over, the omission is
    /// disclosed and the total kept.
    #[test]
    fn the_receipt_cap_at_its_edge() {
        let base = ascii_len(&receipt_with_warning(0));
        let at_cap = RECEIPT_MAX_BYTES - base;
        let r = receipt_with_warning(at_cap);
        assert_eq!(ascii_len(&r), RECEIPT_MAX_BYTES);
        assert_eq!(
            r["presentation"],
            json!({"truncated": false, "omitted_fields": []})
        );
        assert_eq!(r["scopes"]["items"].as_array().unwrap().len(), 2);

        let r = receipt_with_warning(at_cap + 1);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES, "{}", ascii_len(&r));
        assert_eq!(r["presentation"]["truncated"], true);
        // Scope items go first, from the last, and only as many as needed; totals stay.
        assert_eq!(r["presentation"]["omitted_fields"], json!(["scopes.items"]));
        assert_eq!(r["scopes"]["items"].as_array().unwrap().len(), 1);
        assert_eq!(r["scopes"]["items"][0]["group_index"], 1);
        assert_eq!(
            (&r["scopes"]["total"], &r["scopes"]["truncated"]),
            (&json!(2), &json!(true))
        );
        assert_eq!(
            r["warnings"]["items"][0].as_str().unwrap().len(),
            at_cap + 1
        );
        // A warning that cannot fit with everything else goes after all scope items.
        let r = receipt_with_warning(RECEIPT_MAX_BYTES);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES);
        assert_eq!(
            r["presentation"]["omitted_fields"],
            json!(["scopes.items", "warnings.items"])
        );
        assert_eq!(
            r["scopes"],
            json!({"items": [], "total": 2, "truncated": true})
        );
        assert_eq!(
            r["warnings"],
            json!({"items": [], "total": 1, "truncated": true})
        );
        // Literal UTF-8 text is never longer than the measure.
        assert!(to_string(&r, LITERAL).len() <= RECEIPT_MAX_BYTES);
    }

    /// Sixteen long warnings: as many as fit are kept, in order, with the total.
    #[test]
    fn many_warnings_keep_their_total() {
        let lines: Vec<String> = (0..16)
            .map(|i| format!("W{i:02}: {}", "é".repeat(200)))
            .collect();
        let mut result = accepted(lines.clone());
        result["warning_count"] = json!(40);
        result["warnings_truncated"] = json!(true);
        let r = commit_receipt(&result);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES);
        let kept = r["warnings"]["items"].as_array().unwrap();
        assert!(!kept.is_empty() && kept.len() < 16, "{}", kept.len());
        assert_eq!(
            kept[..],
            lines[..kept.len()]
                .iter()
                .map(|l| json!(l))
                .collect::<Vec<_>>()[..]
        );
        assert_eq!(r["warnings"]["total"], 40);
        assert_eq!(r["warnings"]["truncated"], true);
        assert_eq!(
            r["presentation"]["omitted_fields"],
            json!(["scopes.items", "warnings.items"])
        );
    }

    /// "Oversized invalid identity echoes become null with byte/hash omission metadata, never a
    /// shortened string pretending to be an authentic ID."
    #[test]
    fn an_oversized_identity_echo_becomes_null_with_metadata() {
        let key = "k".repeat(10 * 1024);
        let result = json!({"status": "rejected", "code": null, "target_file_id": T,
            "observation_bundle_id": B, "failure_reason": "protocol_validation_failed",
            "failure_detail": "client_request_id must be 1 to 128 printable ASCII characters",
            "pdcp_log_id": "e0e0e0e0-e0e0-4e0e-8e0e-e0e0e0e0e0e0", "before_hash": H,
            "after_hash": null, "current_version": 3, "current_hash": H, "diagnostic": null,
            "validity": null, "deduplicated": false, "client_request_id": key});
        let r = commit_receipt(&result);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES);
        assert_eq!(r["transaction"]["client_request_id"], Value::Null);
        assert_eq!(
            r["transaction"]["client_request_id_omitted"],
            json!({"bytes": 10_240, "sha256": sha256_hex(&key)})
        );
        assert_eq!(
            r["presentation"],
            json!({"truncated": true, "omitted_fields": ["transaction.client_request_id"]})
        );
        // A short, even if invalid, echo is kept as sent; a 5 KB target echo is not.
        let mut short = result.clone();
        short["client_request_id"] = json!("not a key");
        assert_eq!(
            commit_receipt(&short)["transaction"]["client_request_id"],
            "not a key"
        );
        let target = "t".repeat(5 * 1024);
        let e = json!({"status": "not_found", "code": "target_not_found", "target_file_id": target,
            "failure_detail": "No target."});
        let r = commit_receipt(&e);
        assert_eq!(r["target_file_id"], Value::Null);
        assert_eq!(r["target_file_id_omitted"]["bytes"], 5 * 1024);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES);
    }

    /// Diagnostics shrink in the documented order, then go; a long detail is shortened last.
    #[test]
    fn oversized_diagnostics_are_dropped_in_order() {
        let blob = |n: usize| json!({"text": "x".repeat(n)});
        let result = json!({"status": "rejected", "code": "C", "target_file_id": T,
            "failure_reason": "match_ambiguous", "failure_detail": "d".repeat(3_000),
            "pdcp_log_id": null, "before_hash": H, "after_hash": null, "current_version": 1, "current_hash": H,
            "diagnostic": {"code": "C", "exact_candidates": blob(3_000), "failure_context": blob(2_000), "retryable": true},
            "current_context": blob(2_000), "near_misses": blob(3_000),
            "validity": {"v": "y".repeat(2_000)}, "deduplicated": false, "client_request_id": null});
        let r = commit_receipt(&result);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES);
        assert_eq!(
            r["presentation"]["omitted_fields"],
            json!([
                "diagnostics.near_misses",
                "diagnostics.exact_candidates",
                "diagnostics.current_context"
            ])
        );
        assert_eq!(r["diagnostics"]["failure_context"], blob(2_000));
        assert_eq!(r["failure_detail"].as_str().unwrap().len(), 3_000);

        let mut huge = result.clone();
        huge["failure_detail"] = json!("é".repeat(1_024));
        huge["validity"] = json!({"v": "y".repeat(6_000)});
        let r = commit_receipt(&huge);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES, "{}", ascii_len(&r));
        assert_eq!(r["diagnostics"], Value::Null);
        assert_eq!(r["validity"], Value::Null);
        let omitted = r["presentation"]["omitted_fields"].as_array().unwrap();
        assert!(omitted.contains(&json!("diagnostics")) && omitted.contains(&json!("validity")));
        assert_eq!(r["code"], "C");
        assert_eq!(r["failure_detail"], huge["failure_detail"]);

        // A detail that cannot fit on its own is shortened (it is prose, not an identity).
        let mut longest = huge.clone();
        longest["failure_detail"] = json!("\u{1F600}".repeat(1_024));
        let r = commit_receipt(&longest);
        assert!(ascii_len(&r) <= RECEIPT_MAX_BYTES, "{}", ascii_len(&r));
        let detail = r["failure_detail"].as_str().unwrap();
        assert!(detail.ends_with("... (shortened)") && detail.len() > 1_000);
        assert!(ascii_len(&r) > RECEIPT_MAX_BYTES - 12);
        assert_eq!(
            r["presentation"]["omitted_fields"]
                .as_array()
                .unwrap()
                .last(),
            Some(&json!("failure_detail"))
        );
    }
}
