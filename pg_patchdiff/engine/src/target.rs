//! Target lifecycle: initialization facts and the metadata responses.

use crate::args::{ArgError, Args};
use crate::limits::FILENAME_MAX_BYTES;
use crate::text::{SourceLineEndings, canonicalize, sha256_hex, text_defect};
use crate::uuid::canonical_uuid;
use serde_json::{Value, json};

/// The committed state of one target as the engine sees it.
#[derive(Debug, Clone, Copy)]
pub struct TargetView<'a> {
    pub target_file_id: &'a str,
    pub version: i64,
    pub current_hash: &'a str,
    pub content: &'a str,
}

/// A validated initialization request.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTarget {
    pub filename: String,
    pub target_type: String,
    pub project_id: Option<String>,
    pub canonical: String,
    pub current_hash: String,
    pub source_line_endings: SourceLineEndings,
}

pub const INITIALIZE_ARGS: &[&str] = &[
    "filename",
    "content",
    "from_workspace",
    "content_type",
    "project_id",
];
pub const UPLOAD_ARGS: &[&str] = &["filename", "content", "content_type", "project_id"];
pub const DEFAULT_TARGET_TYPE: &str = "text/plain";

/// Parses `patchdiff_initialize_target` (or, with `upload`, `patchdiff_handle_upload`) arguments.
pub fn parse_initialize(text: &str, upload: bool) -> Result<NewTarget, ArgError> {
    let (allowed, required): (&[&str], &[&str]) = if upload {
        (UPLOAD_ARGS, &["filename", "content", "content_type"])
    } else {
        (INITIALIZE_ARGS, &["filename"])
    };
    let a = Args::parse(text, allowed, required)?;
    if a.bool_or("from_workspace", false, "invalid_from_workspace")? {
        // The front end owns workspace files; the SQL API receives their content inline.
        return Err(ArgError::new(
            "workspace_not_configured",
            "from_workspace is served by patchdiff-mcp's workspace profile; over SQL, pass content inline",
        ));
    }
    let filename = a
        .opt_str("filename", false, "invalid_filename")?
        .unwrap_or_default();
    if filename.trim().is_empty() {
        return Err(ArgError::new(
            "invalid_filename",
            "filename must be a non-blank string",
        ));
    }
    if filename.len() > FILENAME_MAX_BYTES
        || text_defect(filename).is_some()
        || filename.contains(['\n', '\r'])
    {
        return Err(ArgError::new(
            "invalid_filename",
            format!(
                "filename must be at most {FILENAME_MAX_BYTES} bytes without NUL or line breaks"
            ),
        ));
    }
    let content = match a.opt_str("content", true, "invalid_content")? {
        Some(c) => c,
        None => {
            return Err(ArgError::new(
                "missing_content",
                "content is required for inline initialization",
            ));
        }
    };
    if let Some(why) = text_defect(content) {
        return Err(ArgError::new("invalid_text", format!("content {why}")));
    }
    let target_type = match a.opt_str("content_type", true, "invalid_content_type")? {
        None => DEFAULT_TARGET_TYPE.to_owned(),
        Some(t) if t.trim().is_empty() || t.len() > 255 || text_defect(t).is_some() => {
            return Err(ArgError::new(
                "invalid_content_type",
                "content_type must be a non-blank string of at most 255 bytes",
            ));
        }
        Some(t) => t.to_owned(),
    };
    let project_id = match a.opt_str("project_id", true, "invalid_project_id")? {
        None => None,
        Some(p) => Some(canonical_uuid(p).ok_or_else(|| {
            ArgError::new(
                "invalid_project_id",
                "project_id must be a UUID string or null",
            )
        })?),
    };
    let canonical = canonicalize(content).into_owned();
    Ok(NewTarget {
        filename: filename.to_owned(),
        target_type,
        project_id,
        current_hash: sha256_hex(&canonical),
        source_line_endings: SourceLineEndings::of(content),
        canonical,
    })
}

/// The initialize/upload response.
pub fn initialized_response(t: &NewTarget, target_file_id: &str, cycle_id: &str) -> Value {
    json!({
        "status": "ok",
        "target_file_id": target_file_id,
        "filename": t.filename,
        "target_type": t.target_type,
        "version": 0,
        "current_hash": t.current_hash,
        "active_editing_cycle_id": cycle_id,
        "source_line_endings": t.source_line_endings.to_json(),
    })
}

/// Stored metadata that `patchdiff_get_target` returns beside the view.
pub struct TargetMeta<'a> {
    pub filename: &'a str,
    pub target_type: &'a str,
    pub active_editing_cycle_id: &'a str,
    /// The stored object, or null for a target without recorded facts.
    pub source_line_endings: Value,
}

pub fn get_target_response(t: &TargetView, m: &TargetMeta) -> Value {
    json!({
        "status": "ok",
        "target_file_id": t.target_file_id,
        "filename": m.filename,
        "target_type": m.target_type,
        "current_content": t.content,
        "current_hash": t.current_hash,
        "version": t.version,
        "active_editing_cycle_id": m.active_editing_cycle_id,
        "source_line_endings": m.source_line_endings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract "patchdiff_initialize_target": a one-line CRLF upload of 18 code points.
    #[test]
    fn crlf_upload_is_recorded_then_normalized() {
        let t = parse_initialize(r#"{"filename":"doc.md","content":"alpha beta alpha\r\n","content_type":"text/markdown"}"#, false).unwrap();
        assert_eq!(t.canonical, "alpha beta alpha\n");
        assert_eq!(t.current_hash, sha256_hex("alpha beta alpha\n"));
        let f = t.source_line_endings.to_json();
        assert_eq!(f["style"], "crlf");
        assert_eq!(f["crlf"], 1);
        assert_eq!(f["normalized"], true);
        assert_eq!(f["source_code_points"], 18);
        assert_eq!(f["source_utf8_bytes"], 18);
        assert_eq!(f["source_sha256"], sha256_hex("alpha beta alpha\r\n"));
        assert_eq!(t.target_type, "text/markdown");
    }

    #[test]
    fn initialize_argument_errors() {
        let code = |s: &str, up: bool| parse_initialize(s, up).err().map(|e| e.code);
        assert_eq!(code(r#"{"filename":"a"}"#, false), Some("missing_content"));
        assert_eq!(
            code(r#"{"filename":"","content":""}"#, false),
            Some("invalid_filename")
        );
        assert_eq!(
            code(r#"{"filename":"a","content":"x\u0000"}"#, false),
            Some("invalid_text")
        );
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","project_id":"nope"}"#,
                false
            ),
            Some("invalid_project_id")
        );
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","from_workspace":true}"#,
                true
            ),
            Some("unknown_argument")
        );
        assert_eq!(
            code(r#"{"filename":"a","content":"x"}"#, true),
            Some("missing_argument")
        );
        assert_eq!(
            code(r#"{"filename":"a","content":1}"#, false),
            Some("invalid_content")
        );
        assert!(parse_initialize(r#"{"filename":"a","content":""}"#, false).is_ok());
    }
}
