//! One SAVE (`patchdiff_save`) over [`Checkpoints`]: arguments, the owned-transaction rule of a
//! publishing SAVE, the target's row lock, guards, the publication check, the checkpoint and
//! baseline writes, the optional export, the answer.

use crate::contract::args::ArgError;
use crate::drive::store::Checkpoints;
use crate::drive::submission::unavailable;
use crate::history::checkpoint;
use crate::history::export::ExportFormat;
use crate::target::TargetView;
use serde_json::Value;

/// Creates a `save_checkpoint` snapshot, closes the active editing cycle and opens a new one,
/// under the target's row lock. `owned_transaction`: the caller said it owns this transaction
/// (`patchdiff.workspace_owned_transaction`) and is inside a transaction block.
pub fn save(store: &mut impl Checkpoints, args: &str, owned_transaction: bool) -> Value {
    const TOOL: &str = "patchdiff_save";
    let req = match checkpoint::parse_save(args) {
        Ok(r) => r,
        Err(e) => return e.to_json(TOOL),
    };
    // Refused before anything is read or locked: the publisher installs the file between this
    // call and its own COMMIT, which only a caller owning the transaction can do.
    if req.sync_workspace && !owned_transaction {
        return checkpoint::owned_transaction_required().to_json(TOOL);
    }
    let id = req.target_file_id.as_str();
    let Some(lock) = store.lock_for_save(id, req.sync_workspace) else {
        return unavailable(id, true, || store.readable(id));
    };
    let content = lock
        .publish
        .as_ref()
        .map_or(String::new(), |p| p.content.clone());
    let locked = TargetView {
        target_file_id: id,
        version: lock.version,
        current_hash: &lock.current_hash,
        content: &content,
    };
    if let Some(rejected) = checkpoint::check_guards(&req, &locked) {
        return rejected;
    }
    let publication = match lock.publish {
        Some(p) => {
            match checkpoint::publication(&req, &locked, &p.source_line_endings, p.binding) {
                Ok(p) => Some(p),
                Err(rejected) => return rejected,
            }
        }
        None => None,
    };
    let cycle = lock.active_editing_cycle_id.as_str();
    let (new_cycle, snapshot) = (store.new_id(), store.new_id());
    store.save_checkpoint(id, cycle, &new_cycle, lock.version, &snapshot);
    if let Some(p) = &publication {
        let bytes = i64::try_from(p.content.len()).unwrap_or(i64::MAX);
        store.move_workspace_baseline(id, &p.content_sha256, bytes);
    }
    let export = req.export_after_save.then(|| {
        store
            .saved_target(id)
            .export(ExportFormat::OriginalText)
            .unwrap_or_else(|e: ArgError| e.to_json("patchdiff_export_target"))
    });
    let mut saved = checkpoint::saved_response(&locked, &snapshot, cycle, &new_cycle, export);
    if let (Some(p), Value::Object(m)) = (publication, &mut saved) {
        m.insert("workspace_publication".into(), p.to_json());
    }
    saved
}

#[cfg(test)]
mod tests {
    //! Issue 16 item 3: the SAVE sequence over an in-memory [`Checkpoints`] that records every
    //! call. The same clauses run on real PostgreSQL in the extension's tests.

    use super::*;
    use crate::drive::store::{SaveLock, Session, StoredTarget};
    use crate::text::sha256_hex;
    use serde_json::json;

    const T: &str = "11111111-1111-4111-8111-111111111111";

    #[derive(Default)]
    struct Memory {
        calls: Vec<&'static str>,
        ids: u32,
    }

    impl Session for Memory {
        fn new_id(&mut self) -> String {
            self.ids += 1;
            format!("00000000-0000-4000-8000-{:012}", self.ids)
        }
        fn readable(&mut self, _id: &str) -> bool {
            self.calls.push("readable");
            false
        }
    }

    impl Checkpoints for Memory {
        fn lock_for_save(&mut self, id: &str, _publish: bool) -> Option<SaveLock> {
            self.calls.push("lock_for_save");
            (id == T).then(|| SaveLock {
                version: 2,
                current_hash: sha256_hex("a\n"),
                active_editing_cycle_id: "c1".into(),
                publish: None,
            })
        }
        fn save_checkpoint(&mut self, _: &str, cycle: &str, _: &str, version: i64, _: &str) {
            assert_eq!((cycle, version), ("c1", 2));
            self.calls.push("save_checkpoint");
        }
        fn move_workspace_baseline(&mut self, _: &str, _: &str, _: i64) {
            self.calls.push("move_workspace_baseline");
        }
        fn saved_target(&mut self, id: &str) -> StoredTarget {
            self.calls.push("saved_target");
            StoredTarget {
                target_file_id: id.into(),
                version: 2,
                current_hash: sha256_hex("a\n"),
                content: "a\n".into(),
                active_editing_cycle_id: "c2".into(),
                filename: "a.txt".into(),
                target_type: "text".into(),
                source_line_endings: None,
            }
        }
    }

    /// Contract "patchdiff_save": a publishing SAVE outside a transaction the caller owns is
    /// refused before anything is read or locked; a failed guard writes nothing; a SAVE writes
    /// its checkpoint and then reads the target again for `export_after_save`.
    #[test]
    fn save_checks_before_it_locks_and_writes_after_its_guards() {
        let mut s = Memory::default();
        let publish = json!({"target_file_id": T, "sync_workspace": true}).to_string();
        let r = save(&mut s, &publish, false);
        assert_eq!(r["code"], "workspace_requires_owned_transaction", "{r}");
        assert!(s.calls.is_empty());

        let stale = json!({"target_file_id": T, "expected_target_version": 1}).to_string();
        let r = save(&mut s, &stale, false);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(s.calls, ["lock_for_save"]);

        s.calls.clear();
        let args = json!({"target_file_id": T, "expected_target_version": 2,
                          "export_after_save": true})
        .to_string();
        let r = save(&mut s, &args, false);
        assert_eq!(r["status"], "saved", "{r}");
        assert_eq!(r["closed_editing_cycle_id"], "c1");
        assert_eq!(r["export"]["content"], "a\n");
        assert_eq!(
            s.calls,
            ["lock_for_save", "save_checkpoint", "saved_target"]
        );

        s.calls.clear();
        let other = json!({"target_file_id": "22222222-2222-4222-8222-222222222222"});
        let r = save(&mut s, &other.to_string(), false);
        assert_eq!(r["status"], "not_found", "{r}");
        assert_eq!(s.calls, ["lock_for_save", "readable"]);
    }
}
