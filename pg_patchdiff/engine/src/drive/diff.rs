//! `patchdiff_diff` over a [`Versions`] port: the target the caller may read, then each
//! compared version rebuilt from its newest snapshot plus the accepted log. Never writes.

use crate::contract::args::not_found;
use crate::contract::words::Status;
use crate::drive::store::{StoredState, Versions};
use crate::history::diff::{self, Version};
use crate::history::replay::{Failure, Replay};
use serde_json::{Value, json};

const TOOL: &str = "patchdiff_diff";

/// `patchdiff_diff`: one page of the unified diff between two versions of a target.
pub fn diff(store: &mut impl Versions, args: &str) -> Value {
    let q = match diff::parse(args) {
        Ok(q) => q,
        Err(e) => return e.to_json(TOOL),
    };
    let id = q.target_file_id.as_str();
    let Some(target) = store.diff_target(id) else {
        return not_found(id);
    };
    let current = target.version;
    let first = store.first_version(id).unwrap_or(0);
    let to_version = q.to_version.unwrap_or(current);
    for (key, v) in [("from_version", q.from_version), ("to_version", to_version)] {
        if v < first || v > current {
            return diff::unknown_version(key, v, first, current).to_json(TOOL);
        }
    }
    let stored = StoredState {
        version: current,
        hash: target.current_hash.clone(),
        content: target.content.clone(),
    };
    let (from, to) = match states_at(store, id, q.from_version, to_version, &stored) {
        Ok(pair) => pair,
        Err(f) => return unreplayable(id, &f),
    };
    fn view(s: &StoredState) -> Version<'_> {
        Version {
            version: s.version,
            hash: &s.hash,
            content: &s.content,
        }
    }
    match diff::answer(&q, &target.filename, current, &view(&from), &view(&to)) {
        Ok(v) => v,
        Err(e) => e.to_json(TOOL),
    }
}

/// The target at versions `a` and `b`. The current version is the stored row; an older one is
/// the newest snapshot at or below it plus the accepted attempts after that snapshot, replayed
/// with every replay check. When no snapshot lies between two older versions, one replay
/// rebuilds both: it passes the lower on its way to the higher (helper-48: two adjacent
/// versions after 1,500 edits were each rebuilt from the start, 4.4 s).
fn states_at(
    store: &mut impl Versions,
    id: &str,
    a: i64,
    b: i64,
    stored: &StoredState,
) -> Result<(StoredState, StoredState), Failure> {
    let (lo, hi) = (a.min(b), a.max(b));
    let order = |low: StoredState, high: StoredState| {
        if a <= b { (low, high) } else { (high, low) }
    };
    if hi == stored.version {
        let low = if lo == hi {
            stored.clone()
        } else {
            state_at(store, id, lo)?
        };
        return Ok(order(low, stored.clone()));
    }
    let Some((base, mut after)) = store.snapshot_at_or_below(id, hi) else {
        return Err(Failure::base_missing());
    };
    // With a snapshot between them, the lower version starts from an older snapshot.
    let low = (base.version > lo)
        .then(|| state_at(store, id, lo))
        .transpose()?;
    let mut replay = Replay::start(id, base.version, &base.hash, base.content)?;
    let low = match low {
        Some(low) => low,
        None => {
            advance(store, id, &mut replay, &mut after, lo)?;
            state(replay.clone())
        }
    };
    advance(store, id, &mut replay, &mut after, hi)?;
    Ok(order(low, state(replay)))
}

/// An older version of the target: the newest snapshot at or below it plus the accepted
/// attempts after that snapshot, replayed with every replay check.
fn state_at(store: &mut impl Versions, id: &str, version: i64) -> Result<StoredState, Failure> {
    let Some((base, mut after)) = store.snapshot_at_or_below(id, version) else {
        return Err(Failure::base_missing());
    };
    let mut replay = Replay::start(id, base.version, &base.hash, base.content)?;
    advance(store, id, &mut replay, &mut after, version)?;
    Ok(state(replay))
}

fn state(replay: Replay) -> StoredState {
    let (version, hash, content) = replay.into_state();
    StoredState {
        version,
        hash,
        content,
    }
}

/// Replays the accepted attempts after log sequence `after` until `replay` reaches `version`;
/// `after` is left at the last row replayed (or the end of the last batch read whole), so a
/// later call goes on from there. A log that ends before `version` is a divergence.
fn advance(
    store: &mut impl Versions,
    id: &str,
    replay: &mut Replay,
    after: &mut i64,
    version: i64,
) -> Result<(), Failure> {
    'batches: while replay.version() < version {
        let ranges = store.next_batches(id, *after);
        if ranges.is_empty() {
            break;
        }
        for (from, upto) in ranges {
            for row in store.accepted(id, from, upto) {
                if replay.version() >= version {
                    break 'batches;
                }
                replay.step(&row.accepted())?;
                *after = row.log_sequence;
            }
            *after = upto;
        }
    }
    if replay.version() != version {
        return Err(Failure {
            reason: crate::contract::words::FailureReason::ReplayDivergence,
            detail: format!(
                "the accepted log ends at version {}, before version {version} the target reports having had",
                replay.version()
            ),
            row: None,
            diagnostic: Value::Null,
        });
    }
    Ok(())
}

/// `status: "failed"`, `code: "history_unreplayable"`: the stored history does not rebuild the
/// version (storage damage; replay names the row).
fn unreplayable(id: &str, f: &Failure) -> Value {
    json!({
        "status": Status::Failed.as_str(),
        "code": "history_unreplayable",
        "target_file_id": id,
        "failure_reason": f.reason.as_str(),
        "failure_detail": f.detail,
        "log_sequence": f.row.as_ref().map(|r| r.log_sequence),
        "pdcp_log_id": f.row.as_ref().map(|r| &r.pdcp_log_id),
    })
}

#[cfg(test)]
mod tests {
    //! Issue 19 item 3 over an in-memory [`Versions`]: versions across a SAVE snapshot,
    //! unknown versions, an invisible target.

    use super::*;
    use crate::drive::store::{History, StoredTarget};
    use crate::submission::submit::AttemptRow;
    use crate::text::sha256_hex;

    const T: &str = "11111111-1111-4111-8111-111111111111";

    struct Memory {
        target: StoredTarget,
        /// (snapshot, log_sequence that produced its version)
        snapshots: Vec<(StoredState, i64)>,
        rows: Vec<AttemptRow>,
        reads: Vec<String>,
    }

    impl History for Memory {
        fn replay_start(&mut self, _: &str) -> Option<(StoredState, Option<StoredState>)> {
            unreachable!("a diff does not start a replay of the whole log")
        }
        fn next_batches(&mut self, _: &str, after: i64) -> Vec<(i64, i64)> {
            self.reads.push(format!("batches>{after}"));
            self.rows
                .iter()
                .map(|r| r.log_sequence)
                .filter(|s| *s > after)
                .take(1)
                .map(|s| (after, s))
                .collect()
        }
        fn accepted(&mut self, _: &str, after: i64, upto: i64) -> Vec<AttemptRow> {
            self.rows
                .iter()
                .filter(|r| r.log_sequence > after && r.log_sequence <= upto)
                .cloned()
                .collect()
        }
        fn version_now(&mut self, _: &str) -> Option<i64> {
            unreachable!("a diff replays up to a version it names")
        }
    }

    impl Versions for Memory {
        fn diff_target(&mut self, id: &str) -> Option<StoredTarget> {
            (id == T).then(|| self.target.clone())
        }
        fn first_version(&mut self, _: &str) -> Option<i64> {
            Some(0)
        }
        fn snapshot_at_or_below(&mut self, _: &str, v: i64) -> Option<(StoredState, i64)> {
            let s = self
                .snapshots
                .iter()
                .filter(|(s, _)| s.version <= v)
                .max_by_key(|(s, _)| s.version)
                .cloned();
            if let Some((s, _)) = &s {
                self.reads.push(format!("snapshot@{}", s.version));
            }
            s
        }
    }

    use crate::drive::replay::stored_state as state;

    /// Four accepted tx/1 edits of "a\nx\n" ("a" -> "b" -> "c" -> "d" -> "e"), with a SAVE
    /// snapshot at version 2.
    fn history() -> Memory {
        let edits = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")];
        let (rows, docs) = crate::drive::replay::accepted_tx1_rows(T, "a\nx\n", &edits);
        Memory {
            target: StoredTarget {
                target_file_id: T.into(),
                version: 4,
                current_hash: sha256_hex(&docs[4]),
                content: docs[4].clone(),
                active_editing_cycle_id: String::new(),
                filename: "doc.txt".into(),
                target_type: "text/plain".into(),
                source_line_endings: None,
            },
            snapshots: vec![(state(0, &docs[0]), 0), (state(2, &docs[2]), 20)],
            rows,
            reads: Vec::new(),
        }
    }

    fn call(m: &mut Memory, args: Value) -> Value {
        diff(m, &args.to_string())
    }

    /// Two versions across a SAVE: version 1 from the initial snapshot, version 3 from the
    /// SAVE's snapshot at 2 plus one row (the rows before the snapshot are not read again).
    #[test]
    fn versions_across_a_save_are_rebuilt_from_the_newest_snapshot() {
        let mut m = history();
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 1, "to_version": 3}),
        );
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["hunks"], "@@ -1,2 +1,2 @@\n-b\n+d\n x\n");
        assert_eq!(
            r["header"],
            "--- doc.txt\tversion 1\n+++ doc.txt\tversion 3\n"
        );
        assert_eq!(
            m.reads,
            ["snapshot@2", "snapshot@0", "batches>0", "batches>20"]
        );
        // The current version is the stored target; a reverse diff is allowed.
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 4, "to_version": 0}),
        );
        assert_eq!(r["hunks"], "@@ -1,2 +1,2 @@\n-e\n+a\n x\n", "{r}");
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 2, "to_version": 2}),
        );
        assert_eq!(
            (r["identical"].clone(), r["hunks"].clone()),
            (json!(true), json!(""))
        );
    }

    /// Two older versions with no snapshot between them are rebuilt by one replay, which passes
    /// the lower on its way to the higher: one snapshot read, each batch read once (before, each
    /// version was replayed from the snapshot on its own). Either order answers the same pair.
    #[test]
    fn one_replay_rebuilds_two_versions_with_no_snapshot_between() {
        let mut m = history();
        m.snapshots.truncate(1);
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 1, "to_version": 3}),
        );
        assert_eq!(r["hunks"], "@@ -1,2 +1,2 @@\n-b\n+d\n x\n", "{r}");
        assert_eq!(
            m.reads,
            ["snapshot@0", "batches>0", "batches>10", "batches>20"]
        );
        m.reads.clear();
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 3, "to_version": 1}),
        );
        assert_eq!(r["hunks"], "@@ -1,2 +1,2 @@\n-d\n+b\n x\n", "{r}");
        assert_eq!(
            r["header"],
            "--- doc.txt\tversion 3\n+++ doc.txt\tversion 1\n"
        );
        assert_eq!(m.reads.len(), 4, "{:?}", m.reads);
        // The same older version on both sides: one replay, identical.
        m.reads.clear();
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 2, "to_version": 2}),
        );
        assert_eq!(r["identical"], true, "{r}");
        assert_eq!(m.reads, ["snapshot@0", "batches>0", "batches>10"]);
    }

    /// Unknown versions name the range the target has.
    #[test]
    fn unknown_versions_name_the_known_range() {
        let mut m = history();
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 0, "to_version": 5}),
        );
        assert_eq!(r["status"], "invalid_argument", "{r}");
        assert_eq!(r["code"], "unknown_version");
        assert_eq!(
            (r["first_version"].clone(), r["current_version"].clone()),
            (json!(0), json!(4))
        );
    }

    /// A target the caller may not read answers exactly like an unknown one.
    #[test]
    fn an_invisible_target_is_not_found() {
        let mut m = history();
        let other = "22222222-2222-4222-8222-222222222222";
        let r = call(&mut m, json!({"target_file_id": other, "from_version": 0}));
        assert_eq!(r, not_found(other));
        assert!(m.reads.is_empty());
    }

    /// A log that stops short of a version the target reports is a failed answer, not a diff.
    #[test]
    fn a_short_log_is_unreplayable() {
        let mut m = history();
        m.rows.truncate(2);
        m.snapshots.truncate(1);
        let r = call(
            &mut m,
            json!({"target_file_id": T, "from_version": 3, "to_version": 4}),
        );
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["code"], "history_unreplayable");
    }
}
