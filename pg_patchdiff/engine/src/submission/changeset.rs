//! `patchdiff_submit_changeset` (issue 19 item 1): the arguments of an ordered list of per-target
//! proposals, each exactly the arguments of `patchdiff_submit_edits` (tx/1, it has `edits`) or
//! `patchdiff_submit_operations` (tx/2, it has `operations`), parsed by those tools' own parsers.
//!
//! Everything here is checked before any target is locked: the caps (members, bytes), each
//! member's arguments, one request key for the whole changeset (a member carries none of its
//! own), and no target twice.

use crate::contract::args::{ArgError, Args};
use crate::contract::invalid_text::{self, INVALID_TEXT_PATHS_MAX_BYTES};
use crate::contract::json::{CANONICAL, LITERAL, to_string, type_name};
use crate::contract::limits::{CHANGESET_MAX_BYTES, CHANGESET_MAX_CHANGES, CHANGESET_MAX_MEMBERS};
use crate::submission::submit::{self, Submission, valid_request_key};
use crate::text::sha256_hex;
use serde_json::{Value, json};

pub const TOOL: &str = "patchdiff_submit_changeset";

/// A member format's parser: one of the single submission tools' own, with the bytes the
/// member's invalid-text locations' paths may take.
type Parser = fn(&str, usize) -> Result<Submission, ArgError>;
pub const SUBMIT_CHANGESET_ARGS: &[&str] = &["members", "client_request_id"];
pub const SUBMIT_CHANGESET_REQUIRED: &[&str] = &["members"];

/// One member: its position in `members` (0-based), the tool whose arguments it holds, and
/// those arguments as that tool parsed them.
#[derive(Debug, Clone)]
pub struct Member {
    pub index: usize,
    pub tool: &'static str,
    pub sub: Submission,
}

/// A parsed changeset, before any target is locked.
#[derive(Debug, Clone)]
pub struct Changeset {
    pub members: Vec<Member>,
    /// The one request key of the whole changeset, stored on every member's attempt.
    pub client_request_id: Option<String>,
}

fn member_error(index: usize, e: &ArgError) -> ArgError {
    let mut out = ArgError::new(e.code, format!("members[{index}]: {}", e.detail));
    out.extra = e.extra.clone();
    out.with("member_index", json!(index))
}

/// `invalid_argument` / `changeset_targets_too_large` (`patchdiff.max_changeset_target_bytes`,
/// ours), with `limit` and `actual`, when the texts of a changeset's targets hold over `limit`
/// bytes together: checked from the targets' sizes before any is locked or read, and again on
/// the texts locked (a target may have grown in between). Nothing is written.
pub fn targets_too_large(bytes: usize, limit: usize) -> Option<ArgError> {
    (bytes > limit).then(|| {
        ArgError::new(
            "changeset_targets_too_large",
            format!(
                "the changeset's targets hold {bytes} bytes of text together, over patchdiff.max_changeset_target_bytes ({limit} bytes); nothing was written. Send the members in several changesets, or edit the largest targets with single submissions"
            ),
        )
        .with("limit", json!(limit))
        .with("actual", json!(bytes))
    })
}

/// Parses the arguments; every refusal here writes nothing and locks nothing.
pub fn parse(text: &str) -> Result<Changeset, ArgError> {
    crate::contract::args::oversized(text)?;
    if text.len() > CHANGESET_MAX_BYTES {
        return Err(ArgError::new(
            "changeset_too_large",
            format!(
                "the changeset is {} bytes, over the limit of {CHANGESET_MAX_BYTES}; nothing was read or written",
                text.len()
            ),
        )
        .with("limit", json!(CHANGESET_MAX_BYTES))
        .with("actual", json!(text.len())));
    }
    let mut a = Args::parse(text, SUBMIT_CHANGESET_ARGS, SUBMIT_CHANGESET_REQUIRED)?;
    let client_request_id = match a.get("client_request_id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(valid_request_key(v).map(str::to_owned).ok_or_else(|| {
            ArgError::new(
                "invalid_client_request_id",
                "client_request_id must be 1 to 128 printable ASCII characters without whitespace",
            )
        })?),
    };
    let members = match a.take("members") {
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(Value::Array(_)) => {
            return Err(ArgError::new(
                "invalid_members",
                "members must hold at least one proposal",
            ));
        }
        Some(v) => {
            return Err(ArgError::new(
                "invalid_members",
                format!("members must be an array, not {}", type_name(&v)),
            ));
        }
        None => unreachable!("members is required"),
    };
    if members.len() > CHANGESET_MAX_MEMBERS {
        return Err(ArgError::new(
            "too_many_members",
            format!(
                "the changeset has {} members, over the limit of {CHANGESET_MAX_MEMBERS}",
                members.len()
            ),
        )
        .with("limit", json!(CHANGESET_MAX_MEMBERS))
        .with("actual", json!(members.len())));
    }
    // Counted before any member is parsed (a member's own parser refuses what is not an array).
    let changes: usize = members
        .iter()
        .filter_map(|m| match m.get("edits").or_else(|| m.get("operations")) {
            Some(Value::Array(a)) => Some(a.len()),
            _ => None,
        })
        .sum();
    if changes > CHANGESET_MAX_CHANGES {
        return Err(ArgError::new(
            "too_many_changes",
            format!(
                "the changeset's members hold {changes} edits and operations in all, over the limit of {CHANGESET_MAX_CHANGES} (one submission's)"
            ),
        )
        .with("limit", json!(CHANGESET_MAX_CHANGES))
        .with("actual", json!(changes)));
    }
    let mut out: Vec<Member> = Vec::with_capacity(members.len());
    // The members share one budget for the paths of their invalid-text locations, the one a
    // single submission has: each had a whole one, so 32 members could hold 128 MiB of paths
    // while the changeset was parsed (helper-85: a 418 KB request took 174 MB of its backend).
    let mut paths_left = INVALID_TEXT_PATHS_MAX_BYTES;
    for (index, m) in members.into_iter().enumerate() {
        let Value::Object(mut args) = m else {
            let e = ArgError::new(
                "invalid_member",
                format!(
                    "a member must be the arguments object of patchdiff_submit_edits or patchdiff_submit_operations, not {}",
                    type_name(&m)
                ),
            );
            return Err(member_error(index, &e));
        };
        let (tool, parse): (&'static str, Parser) = match (
            args.contains_key("edits"),
            args.contains_key("operations"),
        ) {
            (true, false) => ("patchdiff_submit_edits", submit::parse_submit_edits_within),
            (false, true) => (
                "patchdiff_submit_operations",
                submit::parse_submit_operations_within,
            ),
            _ => {
                let e = ArgError::new(
                    "invalid_member",
                    "a member has exactly one of edits (patchdiff-tx/1) or operations (patchdiff-tx/2)",
                );
                return Err(member_error(index, &e));
            }
        };
        if args.contains_key("client_request_id") {
            let e = ArgError::new(
                "member_request_key",
                "a member carries no client_request_id: the changeset's one key covers every member",
            );
            return Err(member_error(index, &e));
        }
        if let Some(k) = &client_request_id {
            args.insert("client_request_id".into(), json!(k));
        }
        let sub = parse(&to_string(&Value::Object(args), LITERAL), paths_left)
            .map_err(|e| member_error(index, &e))?;
        paths_left = paths_left.saturating_sub(invalid_text::paths_bytes(&sub.invalid_text));
        if let Some(first) = out
            .iter()
            .find(|o| o.sub.target_file_id == sub.target_file_id)
        {
            return Err(ArgError::new(
                "duplicate_target",
                format!(
                    "members[{}] and members[{index}] both name target {}; a changeset edits each target at most once (merge the edits into one member)",
                    first.index, sub.target_file_id
                ),
            )
            .with("member_indexes", json!([first.index, index]))
            .with("target_file_id", json!(sub.target_file_id)));
        }
        out.push(Member { index, tool, sub });
    }
    Ok(Changeset {
        members: out,
        client_request_id,
    })
}

/// The changeset's request identity: SHA-256 over its members' request fingerprints with their
/// targets, in member order, and the changeset's `salt`. Two changesets have the same one exactly
/// when every member has the same identity at the same position and the salt is the same.
///
/// The salt is a random value chosen when the changeset is first written and kept in every
/// member's stored envelope (`changeset_salt`), which no page shows; a keyed resend takes it from
/// the rows its key finds. Without it, a member's `request_fingerprint`, which every reader of that
/// member's target sees on a log page, was a function of the other members' proposals alone, and
/// such a reader could test guesses of them (a password's new value, a flag) against it offline,
/// for targets it may not read (helper-75; docs/security.md, "The rules").
pub fn fingerprint(member_fingerprints: &[(&str, &str)], salt: &str) -> String {
    let members: Vec<Value> = member_fingerprints
        .iter()
        .map(|(t, f)| json!({"target_file_id": t, "request_fingerprint": f}))
        .collect();
    let v = json!({"format": "patchdiff-changeset/1", "members": members, "salt": salt});
    sha256_hex(&to_string(&v, CANONICAL))
}

/// A member's stored request identity: its own envelope, plus the changeset's fingerprint and
/// salt, so that the key on its target recovers it only as a member of this very changeset (a
/// single submission, or another changeset, under the same key is a conflict).
pub fn member_identity(
    own: &submit::Identity,
    changeset_fingerprint: &str,
    salt: &str,
) -> submit::Identity {
    let mut envelope = own.envelope.clone();
    if let Value::Object(m) = &mut envelope {
        m.insert("changeset_fingerprint".into(), json!(changeset_fingerprint));
        m.insert("changeset_salt".into(), json!(salt));
    }
    submit::Identity {
        fingerprint: sha256_hex(&to_string(&envelope, CANONICAL)),
        envelope,
        parent: own.parent.clone(),
    }
}

/// The salt of the changeset whose member rows a keyed resend found: the one every row names, when
/// there is one for every member. `None` otherwise (nothing found, a single submission's row, or
/// rows of different changesets under the key): the resend cannot be that changeset, and a fresh
/// salt makes every member's identity differ from what is stored, which is a key conflict.
pub fn stored_salt<'a>(envelopes: impl IntoIterator<Item = Option<&'a Value>>) -> Option<String> {
    let mut salt: Option<&str> = None;
    for e in envelopes {
        let s = e?.get("changeset_salt")?.as_str()?;
        match salt {
            Some(first) if first != s => return None,
            _ => salt = Some(s),
        }
    }
    salt.map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paths of a changeset's invalid-text locations have one budget for all its members,
    /// a single submission's (docs/sql-api.md, "Work is bounded where the contract is
    /// silent"): two members that each fit alone are refused together, at the member where
    /// the budget ran out, as `invalid_text_too_widespread` with nothing read or written.
    #[test]
    fn members_share_one_budget_for_their_locations_paths() {
        let key = "k".repeat(16 << 10);
        let path_len = "record.edits[0].".len() + key.len() + "[100]".len();
        let half = INVALID_TEXT_PATHS_MAX_BYTES / path_len / 2 + 1;
        let member = |target: &str| {
            json!({"target_file_id": target, "expected_target_version": 0, "intent": "x",
                   "edits": [{"match": "a", "replace": "b", key.clone(): vec!["\u{0}"; half]}]})
        };
        let t1 = "00000000-0000-4000-8000-000000000001";
        let t2 = "00000000-0000-4000-8000-000000000002";
        let one = parse(&json!({"members": [member(t1)]}).to_string()).unwrap();
        assert_eq!(one.members[0].sub.invalid_text.len(), half);
        let e = parse(&json!({"members": [member(t1), member(t2)]}).to_string()).unwrap_err();
        assert_eq!(e.code, "invalid_text_too_widespread", "{}", e.detail);
        assert!(e.detail.starts_with("members[1]: "), "{}", e.detail);
        assert_eq!(e.extra.get("member_index"), Some(&json!(1)));
        // Members whose locations fit together are parsed as before.
        let small = |target: &str| {
            json!({"target_file_id": target, "expected_target_version": 0, "intent": "x",
                   "edits": [{"match": "a", "replace": "\u{0}"}]})
        };
        let both = parse(&json!({"members": [small(t1), small(t2)]}).to_string()).unwrap();
        for m in &both.members {
            assert_eq!(m.sub.invalid_text[0].path, "record.edits[0].replace");
        }
    }
}
