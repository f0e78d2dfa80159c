//! Creating and fetching whole targets.

use super::schema::{
    UUID_RE, boolean, nonempty, nullable, status_output, strict, string, target_id,
};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::json;

pub(super) fn tools() -> Vec<Declaration> {
    let id = target_id;
    vec![
        Declaration {
            tool: Tool::InitializeTarget,
            meta: None,
            title: "Initialize target",
            description: "Create a managed target from text: line endings are recorded (source_line_endings) and normalized to LF; version 0.".into(),
            kind: Kind::Create,
            params: vec![
                ("filename", nonempty("Document filename (a label; with from_workspace, a path relative to the workspace root)."), true),
                ("content", nullable(json!({"type": "string"}), "Full document text; required unless from_workspace."), false),
                ("from_workspace", boolean("Read filename from the configured workspace instead of content."), false),
                ("content_type", string("MIME type or language, e.g. text/markdown; default text/plain."), false),
                ("project_id", nullable(strict(UUID_RE), "Optional project UUID."), false),
            ],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::HandleUpload,
            meta: None,
            title: "Upload target",
            description: "Upload alias of patchdiff_initialize_target.".into(),
            kind: Kind::Create,
            params: vec![
                ("filename", nonempty("Document filename."), true),
                ("content", string("Full document text; line endings are recorded then normalized to LF."), true),
                ("content_type", string("MIME type or language, e.g. text/markdown."), true),
                ("project_id", nullable(strict(UUID_RE), "Optional project UUID."), false),
            ],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::GetTarget,
            meta: None,
            title: "Get target",
            description: "Current canonical content, current_hash, version, active editing cycle and recorded source line endings.".into(),
            kind: Kind::Read,
            params: vec![id()],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::ExportTarget,
            meta: None,
            title: "Export target",
            description: "Target text in an explicit line-ending format, with content_sha256 of the returned bytes.".into(),
            kind: Kind::Read,
            params: vec![id(), ("format", json!({"enum": ["original_text", "canonical_lf", "crlf", "original_eol"], "description": "original_text (default) and canonical_lf give LF; crlf; original_eol restores the recorded uniform style."}), false)],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
    ]
}
