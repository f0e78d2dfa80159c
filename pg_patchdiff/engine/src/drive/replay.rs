//! One replay over a [`History`]: the stored target and its initial snapshot, then the accepted
//! attempts in bounded batches, then the comparison with the stored target.

use crate::contract::args::{Args, not_found};
use crate::drive::store::History;
use crate::history::replay::{self, Failure, Replay};
use crate::target::TargetView;
use serde_json::Value;

/// `patchdiff_replay`: reconstructs the target from its initial snapshot plus its accepted
/// attempts, batch by batch, and compares the result with the stored target. Never writes.
pub fn replay(store: &mut impl History, args: &str) -> Value {
    const TOOL: &str = "patchdiff_replay";
    let id = match Args::parse(args, replay::REPLAY_ARGS, &["target_file_id"])
        .and_then(|a| a.target_file_id())
    {
        Ok(id) => id,
        Err(e) => return e.to_json(TOOL),
    };
    let id = id.as_str();
    let Some((stored, base)) = store.replay_start(id) else {
        return not_found(id);
    };
    let stored = TargetView {
        target_file_id: id,
        version: stored.version,
        current_hash: &stored.hash,
        content: &stored.content,
    };
    let replay = match base {
        None => Err(Failure::base_missing()),
        Some(b) => Replay::start(id, b.version, &b.hash, b.content),
    };
    let mut replay = match replay {
        Ok(r) => r,
        Err(f) => return f.to_json(&stored, 0),
    };
    let mut after = 0i64;
    'log: loop {
        let ranges = store.next_batches(id, after);
        if ranges.is_empty() {
            break;
        }
        for (from, upto) in ranges {
            for row in store.accepted(id, from, upto) {
                if row
                    .after_version
                    .is_some_and(|v| v > stored.version && moved_on(store, id, v))
                {
                    break 'log;
                }
                if let Err(f) = replay.step(&row.accepted()) {
                    return f.to_json(&stored, replay.replayed());
                }
            }
            after = upto;
        }
    }
    replay.finish(&stored)
}

/// Whether the target has moved on to `version` since replay read it: an acceptance committed
/// meanwhile, which a transaction that has written sees in its later statements' fresh
/// snapshots. Such rows are not this replay's, which reconstructs the version it read; versions
/// grow in the log's order, so every row after that one is newer still. This needs no lock on
/// the target (a reader holding one until its transaction ended could stop the owner's edits).
/// An accepted row past a target that has not moved on is the log's own divergence: replay
/// goes on and reports it, as in one snapshot. A target the caller may no longer read (its grant
/// revoked meanwhile) counts as moved on: replay reports the version it read, rather than a
/// divergence made of rows committed after it (helper-43).
fn moved_on(store: &mut impl History, id: &str, version: i64) -> bool {
    store.version_now(id).is_none_or(|now| now >= version)
}

/// A stored state of `content` at `version`, as the replay and diff drivers' tests store it.
#[cfg(test)]
pub(crate) fn stored_state(version: i64, content: &str) -> crate::drive::store::StoredState {
    crate::drive::store::StoredState {
        version,
        hash: crate::text::sha256_hex(content),
        content: content.into(),
    }
}

/// Accepted tx/1 attempts of `edits` (match, replace), one per version from `doc` at version 0,
/// as their rows are stored (log_sequence 10, 20, ...), and the text at every version: what the
/// replay and diff drivers' tests read back.
#[cfg(test)]
pub(crate) fn accepted_tx1_rows(
    target: &str,
    doc: &str,
    edits: &[(&str, &str)],
) -> (Vec<crate::submission::submit::AttemptRow>, Vec<String>) {
    use crate::submission::submit::{self, AttemptRow, Parent};
    let mut docs = vec![doc.to_owned()];
    let mut rows = Vec::new();
    for (v, (from, to)) in edits.iter().enumerate() {
        let v = v as i64;
        let args = serde_json::json!({"target_file_id": target, "intent": "i", "expected_target_version": v,
                          "edits": [{"match": from, "replace": to}]});
        let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let doc = docs.last().unwrap();
        let hash = crate::text::sha256_hex(doc);
        let view = crate::target::TargetView {
            target_file_id: target,
            version: v,
            current_hash: &hash,
            content: doc,
        };
        let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, &view);
        assert_eq!(a.status, crate::contract::words::Status::Accepted);
        rows.push(AttemptRow {
            log_sequence: 10 * (v + 1),
            pdcp_log_id: format!("log-{v}"),
            protocol_version: a.protocol_version.into(),
            runtime_version: a.runtime_version.into(),
            pdcp_content: a.pdcp_content.to_string(),
            before_version: a.before_version,
            before_hash: a.before_hash.clone(),
            after_version: a.after_version,
            after_hash: a.after_hash.clone(),
            ..AttemptRow::default()
        });
        docs.push(a.new_content.unwrap());
    }
    (rows, docs)
}

#[cfg(test)]
mod tests {
    //! Issue 16 item 3: the replay sequence over an in-memory [`History`] that records every
    //! read. The same clauses run on real PostgreSQL in the extension's tests.

    use super::*;
    use crate::drive::store::StoredState;
    use crate::submission::submit::AttemptRow;
    use crate::text::sha256_hex;
    use serde_json::json;

    const T: &str = "11111111-1111-4111-8111-111111111111";

    struct Memory {
        base: StoredState,
        stored: StoredState,
        rows: Vec<AttemptRow>,
        reads: Vec<String>,
        /// The target's version as later statements see it, when it has moved on since
        /// `stored` was read.
        now: Option<i64>,
        /// Later statements no longer see the target (the caller's grant was revoked).
        revoked: bool,
    }

    impl History for Memory {
        fn replay_start(&mut self, id: &str) -> Option<(StoredState, Option<StoredState>)> {
            self.reads.push("start".into());
            (id == T).then(|| (self.stored.clone(), Some(self.base.clone())))
        }
        fn next_batches(&mut self, _: &str, after: i64) -> Vec<(i64, i64)> {
            self.reads.push(format!("batches>{after}"));
            // One row per batch, two batches per call.
            let rest: Vec<i64> = self
                .rows
                .iter()
                .map(|r| r.log_sequence)
                .filter(|s| *s > after)
                .take(2)
                .collect();
            let mut from = after;
            rest.into_iter()
                .map(|s| {
                    let range = (from, s);
                    from = s;
                    range
                })
                .collect()
        }
        fn accepted(&mut self, _: &str, after: i64, upto: i64) -> Vec<AttemptRow> {
            self.reads.push(format!("rows({after},{upto}]"));
            self.rows
                .iter()
                .filter(|r| r.log_sequence > after && r.log_sequence <= upto)
                .cloned()
                .collect()
        }
        fn version_now(&mut self, _: &str) -> Option<i64> {
            self.reads.push("version_now".into());
            if self.revoked {
                return None;
            }
            Some(self.now.unwrap_or(self.stored.version))
        }
    }

    use super::stored_state as state;

    /// Three accepted tx/1 edits of "a\n", as their rows are stored.
    fn history() -> Memory {
        let (rows, docs) = accepted_tx1_rows(T, "a\n", &[("a", "b"), ("b", "c"), ("c", "d")]);
        Memory {
            base: state(0, "a\n"),
            stored: state(3, &docs[3]),
            rows,
            reads: Vec::new(),
            now: None,
            revoked: false,
        }
    }

    /// Contract "patchdiff_replay": every accepted row, batch after batch, in sequence order,
    /// until the store has no more batches; then the comparison with the stored target.
    #[test]
    fn replay_reads_every_batch_in_order_then_compares() {
        let mut h = history();
        let r = replay(&mut h, &json!({"target_file_id": T}).to_string());
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["accepted_transactions_replayed"], 3);
        assert_eq!(r["materialized_state_matches"], true);
        assert_eq!(
            h.reads,
            [
                "start",
                "batches>0",
                "rows(0,10]",
                "rows(10,20]",
                "batches>20",
                "rows(20,30]",
                "batches>30"
            ]
        );
    }

    /// A row that does not reproduce itself stops replay there: nothing after it is read.
    #[test]
    fn replay_stops_reading_at_the_first_divergent_row() {
        let mut h = history();
        h.rows[0].after_hash = Some(sha256_hex("other"));
        let r = replay(&mut h, &json!({"target_file_id": T}).to_string());
        assert_eq!(r["status"], "failed", "{r}");
        assert_eq!(r["failure_reason"], "replay_divergence");
        assert_eq!(h.reads, ["start", "batches>0", "rows(0,10]"]);
    }

    /// Contract "patchdiff_replay" (one consistent state) without a lock: an acceptance that
    /// committed after the stored target was read (seen by a transaction that has written, whose
    /// statements each read a fresh snapshot) is not replayed; the replay reconstructs the
    /// version it read, and reads no further.
    #[test]
    fn replay_reconstructs_the_version_it_read_when_the_target_moves_on() {
        let mut h = history();
        let (_, docs) = accepted_tx1_rows(T, "a\n", &[("a", "b"), ("b", "c"), ("c", "d")]);
        h.stored = state(2, &docs[2]);
        h.now = Some(3);
        let r = replay(&mut h, &json!({"target_file_id": T}).to_string());
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["accepted_transactions_replayed"], 2);
        assert_eq!(r["reconstructed_version"], 2);
        assert_eq!(r["materialized_state_matches"], true);
        assert_eq!(
            h.reads,
            [
                "start",
                "batches>0",
                "rows(0,10]",
                "rows(10,20]",
                "batches>20",
                "rows(20,30]",
                "version_now"
            ]
        );
    }

    /// A target the caller may no longer read when replay meets a row past the version it read
    /// (a grant revoked meanwhile, with an acceptance): replay reports the version it read, not a
    /// divergence made of the newer rows (helper-43).
    #[test]
    fn a_target_that_became_invisible_counts_as_moved_on() {
        let mut h = history();
        let (_, docs) = accepted_tx1_rows(T, "a\n", &[("a", "b"), ("b", "c"), ("c", "d")]);
        h.stored = state(2, &docs[2]);
        h.revoked = true;
        let r = replay(&mut h, &json!({"target_file_id": T}).to_string());
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["accepted_transactions_replayed"], 2);
        assert_eq!(r["materialized_state_matches"], true);
    }

    /// An accepted row past a stored target that has not moved on is the log's divergence, as
    /// in one snapshot: replay applies it and reports the versions that do not match.
    #[test]
    fn a_log_ahead_of_a_target_that_has_not_moved_on_is_reported() {
        let mut h = history();
        let (_, docs) = accepted_tx1_rows(T, "a\n", &[("a", "b"), ("b", "c"), ("c", "d")]);
        h.stored = state(2, &docs[2]);
        let r = replay(&mut h, &json!({"target_file_id": T}).to_string());
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["accepted_transactions_replayed"], 3);
        assert_eq!(r["materialized_state_matches"], false);
        assert_eq!(r["materialized_state_checks"]["version_matches"], false);
    }

    /// A target the caller may not read is not_found, and no attempt is read.
    #[test]
    fn replay_of_an_invisible_target_reads_no_attempt() {
        let mut h = history();
        let other = json!({"target_file_id": "22222222-2222-4222-8222-222222222222"});
        let r = replay(&mut h, &other.to_string());
        assert_eq!(r["status"], "not_found", "{r}");
        assert_eq!(h.reads, ["start"]);
    }
}
