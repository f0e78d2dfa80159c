//! The `files` profile (issue 19 item 4): the reference filesystem server's `read_file`,
//! `edit_file` and `write_file`, with its argument names and shapes, so that a host switches by
//! changing one config line. Behind them sit the workspace machinery and the guarded
//! submissions (docs/files.md).

use super::schema::{boolean, integer, string};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::{Value, json};

/// What every file tool answers besides its text: the reference server's `content` (the same
/// text), and PatchDIFF's record of the call.
fn file_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "The answer's text, as the reference filesystem server gives it."},
            "status": {"type": "string"},
            "path": {"type": "string"},
            "target_file_id": {"type": ["string", "null"]},
            "version": {"type": ["integer", "null"]},
            "current_hash": {"type": ["string", "null"]}
        },
        "required": ["content", "status"]
    })
}

fn path() -> (&'static str, Value, bool) {
    (
        "path",
        string("The file: absolute under the workspace root, or relative to it."),
        true,
    )
}

pub(super) fn tools() -> Vec<Declaration> {
    let edit = json!({
        "type": "object",
        "properties": {
            "oldText": {"type": "string", "description": "Text to search for - must match exactly, once"},
            "newText": {"type": "string", "description": "Text to replace with"}
        },
        "required": ["oldText", "newText"],
        "additionalProperties": false
    });
    vec![
        Declaration {
            tool: Tool::ReadFile,
            meta: None,
            title: "Read file",
            description: "Read the complete contents of a UTF-8 text file in the workspace. Use head or tail for only the first or last N lines. The read is what edit_file's edits are checked against: a file changed on disk since it was last read is refused there until it is read again.".into(),
            kind: Kind::Read,
            params: vec![
                path(),
                ("head", integer(0, "If provided, returns only the first N lines of the file"), false),
                ("tail", integer(0, "If provided, returns only the last N lines of the file"), false),
            ],
            root: vec![],
            forms: &[],
            output: file_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::EditFile,
            meta: None,
            title: "Edit file",
            description: "Make line-based edits to a text file. Each oldText must match exactly one place in the file (whitespace and all): an ambiguous or missing oldText refuses the whole call with candidates or near misses, and nothing is written. All edits of a call apply together or not at all. Returns a git-style diff; dryRun previews it without writing. Resending an identical call after it succeeded does not apply it twice.".into(),
            kind: Kind::Submit,
            params: vec![
                path(),
                ("edits", json!({"type": "array", "minItems": 1, "items": edit, "description": "Edits applied in order, each to the text the earlier ones left; all or none"}), true),
                ("dryRun", boolean("Preview changes using git-style diff format"), false),
            ],
            root: vec![],
            forms: &[],
            output: file_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::WriteFile,
            meta: None,
            title: "Write file",
            description: "Create a new file or completely overwrite an existing file with new content, written byte for byte. Overwriting a file changed on disk since it was last read is refused.".into(),
            kind: Kind::Submit,
            params: vec![path(), ("content", string("The file's complete new content"), true)],
            root: vec![],
            forms: &[],
            output: file_output(),
            examples: vec![],
        },
    ]
}
