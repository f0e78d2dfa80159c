//! `patchdiff_save`: a `save_checkpoint` snapshot that closes the active editing cycle and opens
//! the next, leaving content, version and hash unchanged (contract, "patchdiff_save").
//!
//! Both optional guards are checked when supplied, under the target's row lock; a stale or
//! invalid guard is a `rejected` value and nothing is written.
//!
//! Workspace publication (`sync_workspace: true`) is split: the front end owns the file and the
//! transaction, the extension the checkpoint. A publishing SAVE is accepted only from a caller
//! that says it owns the transaction (`SET LOCAL patchdiff.workspace_owned_transaction = on`
//! inside BEGIN ... COMMIT); it checks the guards and the binding, writes the checkpoint, moves
//! the baseline to the bytes to publish and returns them as `workspace_publication` for the
//! front end to install before it commits ("Publication outcomes").

use crate::contract::args::{ArgError, Args};
use crate::contract::json::{as_int, type_name};
use crate::contract::uuid::is_sha256_hex;
use crate::history::export::{ExportFormat, content_eol, write_eol};
use crate::target::{TargetView, WorkspaceBinding};
use crate::text::sha256_hex;
use serde_json::{Map, Value, json};

pub const SAVE_ARGS: &[&str] = &[
    "target_file_id",
    "expected_target_version",
    "expected_current_hash",
    "export_after_save",
    "sync_workspace",
    "workspace_eol_format",
];

/// `workspace_eol_format`: the line endings of a published file.
pub const WORKSPACE_EOL_FORMATS: &[&str] = &["original_eol", "canonical_lf", "crlf"];

/// A parsed SAVE. The guards stay raw JSON: their syntax is judged against the locked target
/// (an invalid version is a `context_invalid` rejection, not an argument error).
#[derive(Debug, Clone, PartialEq)]
pub struct SaveRequest {
    pub target_file_id: String,
    pub expected_target_version: Value,
    pub expected_current_hash: Value,
    pub export_after_save: bool,
    /// `sync_workspace: true`: a publishing SAVE.
    pub sync_workspace: bool,
    /// `workspace_eol_format` (default `original_eol`); meaningful only when publishing.
    pub workspace_eol_format: ExportFormat,
}

/// The session setting through which a caller says it owns the transaction of a publishing
/// SAVE (the front end runs `SET LOCAL` inside its own BEGIN ... COMMIT).
pub const OWNED_TRANSACTION_GUC: &str = "patchdiff.workspace_owned_transaction";

/// Contract "Publication outcomes": a workspace SAVE must own its database transaction.
pub fn owned_transaction_required() -> ArgError {
    ArgError::new(
        "workspace_requires_owned_transaction",
        format!(
            "sync_workspace: true publishes a file between the checkpoint and its COMMIT, so the publisher must own the transaction: run BEGIN; SET LOCAL {OWNED_TRANSACTION_GUC} = on; SELECT patchdiff_save(...); install the file; COMMIT (patchdiff-mcp's workspace profile does this). Nothing was written."
        ),
    )
}

fn not_configured(what: &str) -> ArgError {
    ArgError::new(
        "workspace_not_configured",
        format!(
            "{what} publishes to a workspace file, which patchdiff-mcp's workspace profile does; over SQL, omit it or pass null/false and export with patchdiff_export_target"
        ),
    )
}

pub fn parse_save(text: &str) -> Result<SaveRequest, ArgError> {
    let a = Args::parse(text, SAVE_ARGS, &["target_file_id"])?;
    let target_file_id = a.target_file_id()?;
    let export_after_save = a.bool_or("export_after_save", false, "invalid_export_after_save")?;
    let sync_workspace = match a.get("sync_workspace") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Bool(true)) => true,
        Some(v) => {
            return Err(ArgError::new(
                "invalid_sync_workspace",
                format!(
                    "sync_workspace must be a boolean or null, not {}",
                    type_name(v)
                ),
            ));
        }
    };
    let workspace_eol_format = match a.get("workspace_eol_format") {
        None | Some(Value::Null) => ExportFormat::OriginalEol,
        Some(Value::String(s)) if WORKSPACE_EOL_FORMATS.contains(&s.as_str()) => {
            if !sync_workspace {
                return Err(not_configured(
                    "workspace_eol_format without sync_workspace: true",
                ));
            }
            match s.as_str() {
                "canonical_lf" => ExportFormat::CanonicalLf,
                "crlf" => ExportFormat::Crlf,
                _ => ExportFormat::OriginalEol,
            }
        }
        Some(_) => {
            return Err(ArgError::new(
                "invalid_workspace_eol_format",
                format!(
                    "workspace_eol_format must be one of {} or null",
                    WORKSPACE_EOL_FORMATS.join(", ")
                ),
            )
            .with("allowed_formats", json!(WORKSPACE_EOL_FORMATS)));
        }
    };
    let take = |k: &str| a.get(k).cloned().unwrap_or(Value::Null);
    Ok(SaveRequest {
        target_file_id,
        expected_target_version: take("expected_target_version"),
        expected_current_hash: take("expected_current_hash"),
        export_after_save,
        sync_workspace,
        workspace_eol_format,
    })
}

/// What a publishing SAVE hands the front end: where to install, which bytes to expect on
/// disk, and the bytes to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Publication {
    pub binding: WorkspaceBinding,
    pub content: String,
    pub content_eol: &'static str,
    pub content_sha256: String,
}

impl Publication {
    /// The `workspace_publication` member of the saved answer; the front end removes it and
    /// reports `workspace_sync` instead.
    pub fn to_json(&self) -> Value {
        json!({
            "root_device": self.binding.root_device,
            "root_inode": self.binding.root_inode,
            "relative_path": self.binding.relative_path,
            "baseline_sha256": self.binding.baseline_sha256,
            "baseline_bytes": self.binding.baseline_bytes,
            "binding_nonce": self.binding.proof.as_ref().map(|p| p.nonce.as_str()),
            "binding_proof": self.binding.proof.as_ref().map(|p| p.proof.as_str()),
            "content": self.content,
            "content_eol": self.content_eol,
            "content_sha256": self.content_sha256,
        })
    }
}

/// The publication of a locked target whose guards passed, or the `rejected` answer (nothing
/// written): a target that was not imported from a workspace, or a line-ending format that
/// cannot be written for it.
pub fn publication(
    req: &SaveRequest,
    t: &TargetView,
    source_line_endings: &Value,
    binding: Option<WorkspaceBinding>,
) -> Result<Publication, Value> {
    let Some(binding) = binding else {
        return Err(rejected(
            t,
            "workspace_not_bound",
            "this target was not imported from a workspace (initialize it with from_workspace: true); nothing was saved."
                .into(),
            &[],
        ));
    };
    let eol = content_eol(req.workspace_eol_format, source_line_endings)
        .map_err(|e| rejected(t, e.code, format!("{} Nothing was saved.", e.detail), &[]))?;
    let content = write_eol(t.content, eol).into_owned();
    Ok(Publication {
        binding,
        content_sha256: sha256_hex(&content),
        content,
        content_eol: eol.as_str(),
    })
}

fn rejected(t: &TargetView, reason: &str, detail: String, extra: &[(&str, Value)]) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!("rejected"));
    m.insert("target_file_id".into(), json!(t.target_file_id));
    m.insert("failure_reason".into(), json!(reason));
    for (k, v) in extra {
        m.insert((*k).into(), v.clone());
    }
    m.insert("failure_detail".into(), json!(detail));
    m.insert("current_version".into(), json!(t.version));
    m.insert("current_hash".into(), json!(t.current_hash));
    Value::Object(m)
}

/// Judges the guards against the locked target: `None` to save, or the `rejected` answer.
/// Order as in submission: version syntax, hash syntax, then the version, then the hash.
pub fn check_guards(req: &SaveRequest, t: &TargetView) -> Option<Value> {
    let version = match &req.expected_target_version {
        Value::Null => None,
        v => match as_int(v) {
            Some(n) if n >= 0 => Some(n),
            _ => {
                return Some(rejected(
                    t,
                    "context_invalid",
                    "expected_target_version must be a non-negative, non-boolean integer or null."
                        .into(),
                    &[("code", json!("invalid_expected_target_version"))],
                ));
            }
        },
    };
    let hash = match &req.expected_current_hash {
        Value::Null => None,
        Value::String(s) if is_sha256_hex(s) => Some(s.as_str()),
        _ => {
            return Some(rejected(
                t,
                "context_invalid",
                "expected_current_hash must be 64 lowercase hexadecimal characters or null.".into(),
                &[("code", json!("invalid_expected_current_hash"))],
            ));
        }
    };
    if let Some(v) = version.filter(|v| *v != t.version) {
        return Some(rejected(
            t,
            "target_version_mismatch",
            format!(
                "expected_target_version {v} does not match current version {}; nothing was saved.",
                t.version
            ),
            &[("expected_target_version", json!(v))],
        ));
    }
    if let Some(h) = hash.filter(|h| *h != t.current_hash) {
        return Some(rejected(
            t,
            "target_hash_mismatch",
            "expected_current_hash does not match the current target hash; nothing was saved."
                .into(),
            &[("expected_current_hash", json!(h))],
        ));
    }
    None
}

/// The `saved` answer. `export` is the default-format export when `export_after_save` asked.
pub fn saved_response(
    t: &TargetView,
    snapshot_id: &str,
    closed_editing_cycle_id: &str,
    new_editing_cycle_id: &str,
    export: Option<Value>,
) -> Value {
    let mut v = json!({
        "status": "saved",
        "target_file_id": t.target_file_id,
        "snapshot_id": snapshot_id,
        "closed_editing_cycle_id": closed_editing_cycle_id,
        "new_editing_cycle_id": new_editing_cycle_id,
        "current_hash": t.current_hash,
        "version": t.version,
    });
    if let (Some(e), Value::Object(m)) = (export, &mut v) {
        m.insert("export".into(), e);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "b22ebf774cb2d9b12dc23d13ac860581d994ab579f4fb470b6f79d0b43a15ff2";

    fn view() -> TargetView<'static> {
        TargetView {
            target_file_id: "t",
            version: 2,
            current_hash: H,
            content: "x",
        }
    }

    fn req(v: Value) -> Result<SaveRequest, ArgError> {
        let mut m = v.as_object().cloned().unwrap();
        m.insert(
            "target_file_id".into(),
            json!("11111111-1111-4111-8111-111111111111"),
        );
        parse_save(&Value::Object(m).to_string())
    }

    fn verdict(v: Value) -> Option<Value> {
        check_guards(&req(v).unwrap(), &view())
    }

    /// Contract "patchdiff_save": both guards are checked when supplied; a stale version is
    /// target_version_mismatch, a stale hash target_hash_mismatch, an invalid version
    /// context_invalid.
    #[test]
    fn guards_are_checked_when_supplied() {
        assert_eq!(verdict(json!({})), None);
        assert_eq!(
            verdict(json!({"expected_target_version": 2, "expected_current_hash": H})),
            None
        );
        let r = verdict(json!({"expected_target_version": 1})).unwrap();
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["failure_reason"], "target_version_mismatch");
        assert_eq!(
            (&r["current_version"], &r["current_hash"]),
            (&json!(2), &json!(H))
        );
        let stale = "0".repeat(64);
        let r =
            verdict(json!({"expected_target_version": 2, "expected_current_hash": stale})).unwrap();
        assert_eq!(r["failure_reason"], "target_hash_mismatch");
        // Both stale: the version is reported, as in submission.
        let r =
            verdict(json!({"expected_target_version": 9, "expected_current_hash": stale})).unwrap();
        assert_eq!(r["failure_reason"], "target_version_mismatch");
        for bad in [
            json!(-1),
            json!(true),
            json!(1.0),
            json!("2"),
            json!(u64::MAX),
        ] {
            let r = verdict(json!({"expected_target_version": bad})).unwrap();
            assert_eq!(r["failure_reason"], "context_invalid", "{bad}");
            assert_eq!(r["code"], "invalid_expected_target_version");
        }
        let r = verdict(json!({"expected_current_hash": H.to_uppercase()})).unwrap();
        assert_eq!(r["code"], "invalid_expected_current_hash");
    }

    /// sync_workspace is a boolean or null; workspace_eol_format one of three formats, and only
    /// with sync_workspace: true.
    #[test]
    fn workspace_arguments_are_parsed_and_checked() {
        for ok in [
            json!({}),
            json!({"sync_workspace": null, "workspace_eol_format": null}),
            json!({"sync_workspace": false}),
            json!({"sync_workspace": true, "workspace_eol_format": "crlf"}),
        ] {
            assert!(req(ok).is_ok());
        }
        let code = |v| req(v).err().map(|e| e.code);
        assert_eq!(
            code(json!({"workspace_eol_format": "crlf"})),
            Some("workspace_not_configured")
        );
        assert_eq!(
            code(json!({"workspace_eol_format": "lf"})),
            Some("invalid_workspace_eol_format")
        );
        assert_eq!(
            code(json!({"sync_workspace": "yes"})),
            Some("invalid_sync_workspace")
        );
        assert_eq!(
            code(json!({"export_after_save": 1})),
            Some("invalid_export_after_save")
        );
        assert_eq!(code(json!({"nope": 1})), Some("unknown_argument"));
        assert!(
            req(json!({"export_after_save": true}))
                .unwrap()
                .export_after_save
        );
    }

    #[test]
    fn saved_response_keys() {
        let r = saved_response(&view(), "s", "c0", "c1", Some(json!({"status": "ok"})));
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "status",
                "target_file_id",
                "snapshot_id",
                "closed_editing_cycle_id",
                "new_editing_cycle_id",
                "current_hash",
                "version",
                "export"
            ]
        );
    }

    /// Contract "Round-tripping to files": the published bytes use the recorded style
    /// (original_eol) and their hash is the next baseline; an unbound target is rejected.
    #[test]
    fn publication_writes_the_recorded_line_endings() {
        use crate::text::SourceLineEndings;
        let facts = SourceLineEndings::of("a\r\nb\r\n").to_json();
        let t = TargetView {
            target_file_id: "t",
            version: 1,
            current_hash: H,
            content: "a\nB\n",
        };
        let b = WorkspaceBinding {
            root_device: 1,
            root_inode: 2,
            relative_path: "a.txt".into(),
            baseline_sha256: "0".repeat(64),
            baseline_bytes: 0,
            proof: None,
        };
        let r = req(json!({"sync_workspace": true})).unwrap();
        let p = publication(&r, &t, &facts, Some(b.clone())).unwrap();
        assert_eq!(p.content, "a\r\nB\r\n");
        assert_eq!(p.content_eol, "crlf");
        assert_eq!(p.content_sha256, sha256_hex("a\r\nB\r\n"));
        let lf =
            req(json!({"sync_workspace": true, "workspace_eol_format": "canonical_lf"})).unwrap();
        assert_eq!(
            publication(&lf, &t, &facts, Some(b)).unwrap().content,
            "a\nB\n"
        );
        let unbound = publication(&r, &t, &facts, None).unwrap_err();
        assert_eq!(unbound["failure_reason"], "workspace_not_bound");
        let mixed = SourceLineEndings::of("a\r\nb\n").to_json();
        let b2 = WorkspaceBinding {
            root_device: 1,
            root_inode: 2,
            relative_path: "a.txt".into(),
            baseline_sha256: "0".repeat(64),
            baseline_bytes: 0,
            proof: None,
        };
        let e = publication(&r, &t, &mixed, Some(b2)).unwrap_err();
        assert_eq!(e["failure_reason"], "original_eol_unrecoverable");
    }
}
