//! The checkpoint (SAVE), with the workspace profiles' publication arguments.

use super::schema::{boolean, guards, nullable, status_output, target_id};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::json;

pub(super) fn tools() -> Vec<Declaration> {
    let id = target_id;
    let mut save = vec![id()];
    save.extend(guards());
    save.extend([
        ("export_after_save", boolean("Add a default-format export of the saved content."), false),
        ("sync_workspace", nullable(json!({"type": "boolean"}), "Publish the file to the workspace (workspace profiles)."), false),
        ("workspace_eol_format", json!({"enum": ["original_eol", "canonical_lf", "crlf"], "description": "Line endings of a published file; default original_eol."}), false),
    ]);
    vec![
        Declaration {
            tool: Tool::Save,
            meta: None,
            title: "Save checkpoint",
            description: "Snapshot the target and start a new editing cycle; content, version and hash are unchanged. Optional guards are all checked.".into(),
            kind: Kind::Checkpoint,
            params: save,
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
    ]
}
