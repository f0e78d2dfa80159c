//! The change feed (issue 19, item 2): the payload of `NOTIFY patchdiff`, which the extension
//! issues at every acceptance and every SAVE, and which a listener (patchdiff-mcp) reads back.
//!
//! The payload names only IDs and a version: a listener that wants more asks the API, which
//! checks access. Any role that may connect can LISTEN, so the payload carries nothing derived
//! from a target's text: until 2026-12-07 it carried the new `current_hash`, a SHA-256 of the
//! whole text, with which a role that may not read the target could confirm a guess of it (a
//! short configuration file, a value among a few). Every field has a fixed shape (a UUID is 36
//! characters, an integer at most 20 characters), so the payload has a fixed upper bound,
//! [`MAX_PAYLOAD_BYTES`], far below PostgreSQL's limit of 8,000 bytes; [`payload`] refuses a
//! field of any other shape rather than announce it.

use crate::contract::uuid::{canonical_uuid, is_sha256_hex};
use serde::Deserialize;
use serde_json::json;

/// The channel every announcement is sent on: `LISTEN patchdiff`.
pub const CHANNEL: &str = "patchdiff";

/// The advisory lock key `(LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2)` (the two-`int4` form,
/// "pdif" and "feed" in ASCII) that registers a listener of this database's feed: a listening
/// session holds `pg_advisory_lock_shared(LISTENER_LOCK_KEY1, LISTENER_LOCK_KEY2)` for as long as
/// it listens. With `patchdiff.notify = listened` (the default) an acceptance or SAVE tries that
/// key in `RowExclusiveLock` mode, without waiting, until its transaction ends: it announces
/// itself only when the try fails (a listener holds or awaits the key), and otherwise holds the
/// key so that a listener arriving later waits for its COMMIT before it reads
/// (docs/sql-api.md "The change feed").
pub const LISTENER_LOCK_KEY1: i32 = 0x7064_6966;
/// See [`LISTENER_LOCK_KEY1`].
pub const LISTENER_LOCK_KEY2: i32 = 0x6665_6564;

/// PostgreSQL's NOTIFY payload must be shorter than this many bytes (`NOTIFY_PAYLOAD_MAX_LENGTH`
/// in commands/async.c).
pub const POSTGRES_PAYLOAD_LIMIT: usize = 8000;

/// The longest payload a listener reads: [`payload`]'s longest is a SAVE with every field at its
/// longest, and an earlier build's (with its `hash`) is 75 bytes longer (the `longest_payloads_fit`
/// test builds both). Well under [`POSTGRES_PAYLOAD_LIMIT`].
pub const MAX_PAYLOAD_BYTES: usize = 400;
const _: () = assert!(MAX_PAYLOAD_BYTES < POSTGRES_PAYLOAD_LIMIT);

/// What happened to a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A submission was accepted: a new version.
    Accepted,
    /// A SAVE closed the editing cycle at the current version (a checkpoint).
    Saved,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Accepted => "accepted",
            Kind::Saved => "saved",
        }
    }
}

/// One announcement, as the extension writes it.
#[derive(Clone, Copy, Debug)]
pub struct Event<'a> {
    pub kind: Kind,
    pub target_file_id: &'a str,
    /// The target's version after the change.
    pub version: i64,
    /// The accepted attempt (`None` for a SAVE).
    pub pdcp_log_id: Option<&'a str>,
    /// The accepted attempt's `log_sequence` (`None` for a SAVE).
    pub log_sequence: Option<i64>,
    /// The SAVE's snapshot (`None` for an acceptance).
    pub snapshot_id: Option<&'a str>,
}

/// The NOTIFY payload of `e`: compact JSON, keys in a fixed order, every key always present
/// (null where it does not apply), IDs in their canonical lowercase form. `None` when a field is
/// not of its fixed shape, which no stored row is; the caller then announces nothing rather
/// than something unbounded.
pub fn payload(e: &Event) -> Option<String> {
    written(e, None)
}

/// [`payload`], or with `hash` after `version` as builds before 2026-12-07 wrote it (which a
/// listener still reads: a front end may serve a database whose extension is older).
fn written(e: &Event, hash: Option<&str>) -> Option<String> {
    let id = |s: &str| canonical_uuid(s);
    let target = id(e.target_file_id)?;
    let log = match e.pdcp_log_id {
        Some(l) => Some(id(l)?),
        None => None,
    };
    let snapshot = match e.snapshot_id {
        Some(s) => Some(id(s)?),
        None => None,
    };
    let mut v = serde_json::Map::new();
    v.insert("kind".into(), json!(e.kind.as_str()));
    v.insert("target_file_id".into(), json!(target));
    v.insert("version".into(), json!(e.version));
    if let Some(h) = hash {
        if !is_sha256_hex(h) {
            return None;
        }
        v.insert("hash".into(), json!(h));
    }
    v.insert("pdcp_log_id".into(), json!(log));
    v.insert("log_sequence".into(), json!(e.log_sequence));
    v.insert("snapshot_id".into(), json!(snapshot));
    let text = serde_json::Value::Object(v).to_string();
    (text.len() <= MAX_PAYLOAD_BYTES).then_some(text)
}

/// Whether `id` is a target ID in its canonical form (a hyphenated UUID in lowercase), as the
/// payload names it and a resource URI must (patchdiff-mcp's `patchdiff://targets/{id}`).
pub fn is_canonical_id(id: &str) -> bool {
    canonical_uuid(id).is_some_and(|c| c == id)
}

/// An announcement as a listener reads it back.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Announcement {
    pub kind: String,
    pub target_file_id: String,
    pub version: i64,
    /// Only in an earlier build's payload (see [`written`]); never used.
    #[serde(default)]
    pub hash: Option<String>,
    pub pdcp_log_id: Option<String>,
    pub log_sequence: Option<i64>,
    pub snapshot_id: Option<String>,
}

/// Reads a payload of the channel; `None` for anything that is not one of ours, byte for byte
/// as [`payload`] writes it (or an earlier build, with a 64-digit `hash` after `version`): every
/// key present and in order, IDs in their canonical lowercase form, and the fields of its kind (an acceptance names its attempt, a SAVE its
/// snapshot). Any role may NOTIFY on any channel, so a listener trusts nothing it did not check,
/// and still checks access through the API before it tells anyone.
pub fn parse(text: &str) -> Option<Announcement> {
    if text.len() > MAX_PAYLOAD_BYTES {
        return None;
    }
    let a: Announcement = serde_json::from_str(text).ok()?;
    let kind = match a.kind.as_str() {
        "accepted" if a.snapshot_id.is_none() && a.pdcp_log_id.is_some() => Kind::Accepted,
        "saved" if a.pdcp_log_id.is_none() && a.log_sequence.is_none() => Kind::Saved,
        _ => return None,
    };
    let back = written(
        &Event {
            kind,
            target_file_id: &a.target_file_id,
            version: a.version,
            pdcp_log_id: a.pdcp_log_id.as_deref(),
            log_sequence: a.log_sequence,
            snapshot_id: a.snapshot_id.as_deref(),
        },
        a.hash.as_deref(),
    )?;
    (back == text).then_some(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0f";

    /// Issue 19 item 2: "a small JSON payload ... always under 8,000 bytes". Every field has a
    /// fixed shape, so the longest payload is the one with every field at its longest: both
    /// integers at i64::MIN (20 characters), every optional field present; and an earlier
    /// build's, with its hash, which a listener still reads.
    #[test]
    fn longest_payloads_fit() {
        let hash = "f".repeat(64);
        let (mut longest, mut longest_earlier) = (0, 0);
        for kind in [Kind::Accepted, Kind::Saved] {
            for n in [i64::MIN, i64::MAX, 0] {
                let e = Event {
                    kind,
                    target_file_id: ID,
                    version: n,
                    pdcp_log_id: Some(ID),
                    log_sequence: Some(n),
                    snapshot_id: Some(ID),
                };
                longest = longest.max(payload(&e).expect("a well-formed event").len());
                longest_earlier = longest_earlier.max(written(&e, Some(&hash)).unwrap().len());
                // Read back in the shape of its kind, the one the extension announces.
                let e = match kind {
                    Kind::Accepted => Event {
                        snapshot_id: None,
                        ..e
                    },
                    Kind::Saved => Event {
                        pdcp_log_id: None,
                        log_sequence: None,
                        ..e
                    },
                };
                for text in [payload(&e).unwrap(), written(&e, Some(&hash)).unwrap()] {
                    let back = parse(&text).unwrap();
                    assert_eq!((back.version, back.log_sequence), (n, e.log_sequence));
                    assert_eq!(back.kind, kind.as_str());
                }
            }
        }
        assert_eq!(longest_earlier, longest + r#","hash":""#.len() + 64 + 1);
        assert!(longest_earlier <= MAX_PAYLOAD_BYTES, "{longest_earlier}");
        // The bound is tight enough to notice a new field.
        assert!(
            longest_earlier > MAX_PAYLOAD_BYTES - 100,
            "{longest_earlier}"
        );
    }

    /// A field of any other shape is never announced, so nothing unbounded reaches NOTIFY.
    #[test]
    fn malformed_fields_are_not_announced() {
        let ok = Event {
            kind: Kind::Accepted,
            target_file_id: ID,
            version: 1,
            pdcp_log_id: Some(ID),
            log_sequence: Some(7),
            snapshot_id: None,
        };
        assert!(payload(&ok).is_some());
        for bad in [
            Event {
                target_file_id: "x",
                ..ok
            },
            Event {
                pdcp_log_id: Some("0f0f0f0f-0f0f-4f0f-8f0f-0f0f0f0f0f0\""),
                ..ok
            },
        ] {
            assert_eq!(payload(&bad), None);
        }
        assert_eq!(written(&ok, Some(&"a".repeat(9000))), None);
    }

    /// A listener ignores what is not an announcement: other JSON, an oversized text, a
    /// target that is not a UUID. The payload names IDs and a version, nothing derived from the
    /// target's text (docs/security.md, "The change feed").
    #[test]
    fn listeners_read_only_announcements() {
        assert_eq!(parse("hello"), None);
        assert_eq!(parse("{}"), None);
        let e = Event {
            kind: Kind::Saved,
            target_file_id: ID,
            version: 3,
            pdcp_log_id: None,
            log_sequence: None,
            snapshot_id: Some(ID),
        };
        let p = payload(&e).unwrap();
        assert_eq!(
            p,
            format!(
                r#"{{"kind":"saved","target_file_id":"{ID}","version":3,"pdcp_log_id":null,"log_sequence":null,"snapshot_id":"{ID}"}}"#
            )
        );
        assert_eq!(parse(&p).unwrap().snapshot_id.as_deref(), Some(ID));
        assert_eq!(parse(&p.replace(ID, "../etc")), None);
        // An earlier build's payload, with the hash, is read (its hash is never used).
        let hash = "a".repeat(64);
        let earlier = written(&e, Some(&hash)).unwrap();
        assert_eq!(
            earlier,
            p.replace(
                r#""version":3,"#,
                &format!(r#""version":3,"hash":"{hash}","#)
            )
        );
        assert_eq!(parse(&earlier).unwrap().snapshot_id.as_deref(), Some(ID));
        // Only what the extension writes (helper-48: these were read as announcements): IDs in
        // their canonical form, a hash of 64 hexadecimal digits where there is one, no other
        // key, the fields of the kind, compact and in order.
        for forged in [
            p.replace(ID, &ID.to_ascii_uppercase()),
            earlier.replace(&hash, "x"),
            p.replace(r#""version":3,"#, r#""version":3,"hash":null,"#),
            p.replace(
                r#""pdcp_log_id":null,"#,
                &format!(r#""pdcp_log_id":null,"hash":"{hash}","#),
            ),
            p.replace('}', r#","extra":1}"#),
            p.replace(r#""pdcp_log_id":null"#, &format!(r#""pdcp_log_id":"{ID}""#)),
            p.replace(r#""snapshot_id":"#, r#" "snapshot_id":"#),
            p.replace(r#""kind":"saved""#, r#""kind":"accepted""#),
        ] {
            assert_eq!(parse(&forged), None, "{forged}");
        }
        assert_eq!(
            parse(&format!("{p}{}", " ".repeat(MAX_PAYLOAD_BYTES))),
            None
        );
    }
}
