//! Target lifecycle: initialization facts and the metadata responses.

pub mod partition;
pub mod tenancy;

use crate::contract::args::{ArgError, Args};
use crate::contract::limits::FILENAME_MAX_BYTES;
use crate::contract::uuid::{canonical_uuid, is_lower_hex};
use crate::contract::words::Status;
use crate::text::{SourceLineEndings, canonicalize, sha256_hex, text_defect};
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
    /// Set when the front end imported the content from its workspace.
    pub workspace: Option<WorkspaceBinding>,
}

/// The workspace identity a target imported from a file is bound to (contract, "Workspace
/// filesystem contract"): the root directory's device and inode, the path under it, and the
/// SHA-256 of the bytes on disk that the next publication expects to replace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceBinding {
    pub root_device: i64,
    pub root_inode: i64,
    pub relative_path: String,
    pub baseline_sha256: String,
    /// The length of the baseline's bytes: a publication never needs to read more of the disk
    /// file than this or the new content's length to tell whether it drifted.
    pub baseline_bytes: i64,
    /// The front end's proof that it made this binding by importing the file: `nonce` (32
    /// lowercase hex) and `proof`, an HMAC-SHA256 (64 lowercase hex) over the root, the path and
    /// the nonce under a key only the front end holds. The database cannot check the proof; it
    /// stores it, ties each nonce to one target, and hands both back in `workspace_publication`,
    /// where the front end checks them before it touches the disk. `None` for a target bound
    /// before proofs existed: such a binding is never published.
    pub proof: Option<BindingProof>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingProof {
    pub nonce: String,
    pub proof: String,
}

/// `workspace_binding`: the SQL-only argument through which patchdiff-mcp records an import
/// (`{root_device, root_inode, relative_path, nonce, proof}`). It is not a tool argument: a host asks for an
/// import with `from_workspace`, and the front end, which read the file, passes the binding. The
/// baseline is the SHA-256 of `content` itself, which is the file's exact bytes.
pub const WORKSPACE_BINDING_ARG: &str = "workspace_binding";

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
    let with_binding: Vec<&str>;
    let allowed = if upload {
        allowed
    } else {
        with_binding = allowed
            .iter()
            .copied()
            .chain([WORKSPACE_BINDING_ARG])
            .collect();
        &with_binding[..]
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
    let source_line_endings = SourceLineEndings::of(content);
    let workspace = match a.get(WORKSPACE_BINDING_ARG) {
        None | Some(Value::Null) => None,
        Some(b) => Some(parse_binding(
            b,
            &source_line_endings.source_sha256,
            content.len(),
        )?),
    };
    let canonical = canonicalize(content).into_owned();
    Ok(NewTarget {
        filename: filename.to_owned(),
        target_type,
        project_id,
        current_hash: sha256_hex(&canonical),
        source_line_endings,
        canonical,
        workspace,
    })
}

fn parse_binding(
    b: &Value,
    baseline_sha256: &str,
    baseline_bytes: usize,
) -> Result<WorkspaceBinding, ArgError> {
    let bad = || {
        ArgError::new(
            "invalid_workspace_binding",
            "workspace_binding must be {root_device, root_inode: non-negative integers, relative_path: a non-empty relative path, nonce: 32 lowercase hex digits, proof: 64 lowercase hex digits}",
        )
    };
    let o = b.as_object().ok_or_else(bad)?;
    if o.keys().any(|k| {
        !matches!(
            k.as_str(),
            "root_device" | "root_inode" | "relative_path" | "nonce" | "proof"
        )
    }) {
        return Err(bad());
    }
    let int = |k: &str| {
        o.get(k)
            .and_then(crate::contract::json::as_int)
            .filter(|n| *n >= 0)
            .ok_or_else(bad)
    };
    let relative_path = o
        .get("relative_path")
        .and_then(Value::as_str)
        .filter(|p| {
            !p.is_empty()
                && !p.starts_with('/')
                && p.len() <= FILENAME_MAX_BYTES
                && text_defect(p).is_none()
        })
        .ok_or_else(bad)?;
    let hex = |k: &str, len: usize| {
        o.get(k)
            .and_then(Value::as_str)
            .filter(|h| is_lower_hex(h, len))
            .map(str::to_owned)
            .ok_or_else(bad)
    };
    Ok(WorkspaceBinding {
        root_device: int("root_device")?,
        root_inode: int("root_inode")?,
        relative_path: relative_path.to_owned(),
        baseline_sha256: baseline_sha256.to_owned(),
        baseline_bytes: i64::try_from(baseline_bytes).unwrap_or(i64::MAX),
        proof: Some(BindingProof {
            nonce: hex("nonce", 32)?,
            proof: hex("proof", 64)?,
        }),
    })
}

/// A workspace binding whose nonce already binds another target: its proof was made for that
/// one, so this is a copy. Nothing is written.
pub fn binding_nonce_taken() -> ArgError {
    ArgError::new(
        "invalid_workspace_binding",
        "workspace_binding's nonce already binds another target; a binding's proof serves the one target it was made for",
    )
}

/// The initialize/upload response.
pub fn initialized_response(t: &NewTarget, target_file_id: &str, cycle_id: &str) -> Value {
    json!({
        "status": Status::Ok.as_str(),
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
        "status": Status::Ok.as_str(),
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

    /// Contract "Workspace filesystem contract": an import binds the target to the root's
    /// device and inode and the relative path; the baseline is the hash of the exact bytes.
    #[test]
    fn workspace_binding_records_root_identity_and_baseline() {
        let t = parse_initialize(
            &format!(
                r#"{{"filename":"d/a.txt","content":"x\r\n","workspace_binding":{{"root_device":7,"root_inode":42,"relative_path":"d/a.txt","nonce":"{}","proof":"{}"}}}}"#,
                "0a".repeat(16),
                "f1".repeat(32)
            ),
            false,
        )
        .unwrap();
        assert_eq!(
            t.workspace,
            Some(WorkspaceBinding {
                root_device: 7,
                root_inode: 42,
                relative_path: "d/a.txt".into(),
                baseline_sha256: sha256_hex("x\r\n"),
                baseline_bytes: 3,
                proof: Some(BindingProof {
                    nonce: "0a".repeat(16),
                    proof: "f1".repeat(32)
                }),
            })
        );
        let code = |s: &str, up: bool| parse_initialize(s, up).err().map(|e| e.code);
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","workspace_binding":{"root_device":-1,"root_inode":1,"relative_path":"a"}}"#,
                false
            ),
            Some("invalid_workspace_binding")
        );
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","workspace_binding":{"root_device":1,"root_inode":1,"relative_path":"/etc/passwd"}}"#,
                false
            ),
            Some("invalid_workspace_binding")
        );
        // Issue 15: a binding without the front end's proof is refused, so no row can carry
        // one that a publication would later have to judge.
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","workspace_binding":{"root_device":1,"root_inode":1,"relative_path":"a"}}"#,
                false
            ),
            Some("invalid_workspace_binding")
        );
        assert_eq!(
            code(
                &format!(
                    r#"{{"filename":"a","content":"x","workspace_binding":{{"root_device":1,"root_inode":1,"relative_path":"a","nonce":"{}","proof":"{}"}}}}"#,
                    "0A".repeat(16),
                    "f1".repeat(32)
                ),
                false
            ),
            Some("invalid_workspace_binding")
        );
        assert_eq!(
            code(
                r#"{"filename":"a","content":"x","content_type":"t","workspace_binding":null}"#,
                true
            ),
            Some("unknown_argument")
        );
    }
}
