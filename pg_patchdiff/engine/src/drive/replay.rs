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
    loop {
        let ranges = store.next_batches(id, after);
        if ranges.is_empty() {
            break;
        }
        for (from, upto) in ranges {
            for row in store.accepted(id, from, upto) {
                if let Err(f) = replay.step(&row.accepted()) {
                    return f.to_json(&stored, replay.replayed());
                }
            }
            after = upto;
        }
    }
    replay.finish(&stored)
}
