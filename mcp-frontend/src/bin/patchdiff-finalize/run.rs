//! One run: the refusals before any SAVE (arguments, manifest, output directory, database,
//! target identity), then the finalizer over every target.

use crate::caller::{Answer, Caller, status};
use crate::evidence::{Evidence, FORMAT, Refusal};
use crate::finalizer::Finalizer;
use crate::manifest::{Target, parse_manifest};
use crate::options::Options;
use patchdiff_mcp::config::Config;
use patchdiff_mcp::database::Db;
use serde_json::{Value, json};
use std::fs;
use std::path::Path;

/// The history tool's largest page.
const LOG_PAGE: i64 = 200;
/// The functions the finalizer calls: an extension that lacks one is refused before any call.
const FUNCTIONS: [&str; 5] = [
    "patchdiff_get_target",
    "patchdiff_get_pdcp_log",
    "patchdiff_save",
    "patchdiff_replay",
    "patchdiff_export_target",
];

/// What the run ended with: the JSON printed on stdout and the exit status.
#[derive(Debug)]
pub struct Outcome {
    pub json: Value,
    pub exit_code: i32,
}

/// A refusal before any SAVE: nothing written to the database, and no output directory unless
/// creating its first files failed (`output_dir_unwritable`).
fn refused(reason: &str, detail: String, problems: Vec<String>, targets: &[Target]) -> Outcome {
    let targets: Vec<Value> = targets
        .iter()
        .map(|t| {
            let mut v = t.to_json();
            v["state"] = json!("not_started");
            v
        })
        .collect();
    Outcome {
        json: json!({
            "format": FORMAT,
            "status": "incomplete",
            "refused": {"reason": reason, "detail": detail, "problems": problems},
            "saves_sent": 0,
            "targets": targets,
        }),
        exit_code: 2,
    }
}

/// Runs the finalizer; `var` reads the environment (the database settings).
pub async fn run(options: &Options, var: impl Fn(&str) -> Option<String>) -> Outcome {
    let bytes = match fs::read(&options.manifest) {
        Ok(b) => b,
        Err(e) => {
            let detail = format!("cannot read {}: {e}", options.manifest.display());
            return refused("manifest_unreadable", detail, vec![], &[]);
        }
    };
    let Ok(text) = String::from_utf8(bytes) else {
        let detail = "the manifest is not UTF-8".to_string();
        return refused("manifest_invalid", detail, vec![], &[]);
    };
    let targets = match parse_manifest(&text) {
        Ok(t) => t,
        Err(problems) => {
            let detail = format!("{} problem(s) in the manifest", problems.len());
            return refused("manifest_invalid", detail, problems, &[]);
        }
    };
    // Checked before connecting, so a reused directory refuses without touching the database.
    if let Err((reason, detail)) = check_fresh(&options.out) {
        return refused(reason, detail, vec![], &targets);
    }
    let out = fs::canonicalize(
        options
            .out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
    .map(|p| p.join(options.out.file_name().unwrap_or_default()))
    .unwrap_or_else(|_| options.out.clone());
    // The directory is created 0700 and everything in it 0600, but it is reached by its path: a
    // user who may rename entries in a folder on the way could swap it for another directory
    // between two writes, and the finalizer would write a document where that user chose, as
    // the user it runs as (helper-46).
    if let Err(detail) = patchdiff_mcp::embedded::check_owners(
        out.parent().unwrap_or(Path::new("/")),
        "the output directory",
    ) {
        return refused("output_dir_unsafe", detail, vec![], &targets);
    }
    // Every export's path must be one the file system takes, before any SAVE: a name it refuses
    // used to fail after its target's SAVE and stop the run there (helper-46).
    let long: Vec<String> = targets
        .iter()
        .filter_map(|t| path_problem(&out, &t.filename))
        .collect();
    if !long.is_empty() {
        let detail = "some exports' paths are longer than the file system allows".to_string();
        return refused("output_path_too_long", detail, long, &targets);
    }
    let config = match Config::from_env(var) {
        Ok(c) => c,
        Err(e) => return refused("configuration_invalid", e, vec![], &targets),
    };
    let mut db =
        match tokio::time::timeout(options.call_timeout, Db::connect(&config.database)).await {
            Ok(Ok(db)) => db,
            Ok(Err(e)) => return refused("database_unavailable", e, vec![], &targets),
            Err(_) => {
                let detail = "connecting timed out".to_string();
                return refused("database_unavailable", detail, vec![], &targets);
            }
        };
    let missing: Vec<String> = FUNCTIONS
        .iter()
        .filter(|f| !db.functions.contains(**f))
        .map(|f| f.to_string())
        .collect();
    if !missing.is_empty() {
        let detail = "the installed pg_patchdiff lacks functions the finalizer calls".to_string();
        return refused("extension_incomplete", detail, missing, &targets);
    }
    let mut caller = Caller {
        db: &mut db,
        timeout: options.call_timeout,
    };
    let mut problems = Vec::new();
    for t in &targets {
        match preflight(&mut caller, t).await {
            Ok(None) => {}
            Ok(Some(p)) => problems.push(format!("{} ({}): {p}", t.filename, t.target_file_id)),
            Err(e) => {
                let detail = format!("preflight of {} failed: {e}", t.target_file_id);
                return refused("database_failure", detail, problems, &targets);
            }
        }
    }
    if !problems.is_empty() {
        let detail = "the manifest does not name these targets and receipts".to_string();
        return refused("target_identity_mismatch", detail, problems, &targets);
    }
    let evidence = match Evidence::create(&out, &options.manifest, &text, &targets) {
        Ok(e) => e,
        Err(Refusal::Exists(detail)) => {
            return refused("output_dir_exists", detail, vec![], &targets);
        }
        Err(Refusal::Io(detail)) => {
            return refused("output_dir_unwritable", detail, vec![], &targets);
        }
    };
    Finalizer::new(caller, evidence, &targets).run().await
}

/// The longest path, with its terminating NUL, that Linux takes (PATH_MAX). (The manifest's own
/// check refuses a component over NAME_MAX.)
const PATH_MAX: usize = 4096;

/// Why `exports/<filename>` under `out` cannot be written, if it cannot: the whole path (and
/// the NUL after it) over PATH_MAX, which depends on where the output directory is.
fn path_problem(out: &Path, filename: &str) -> Option<String> {
    let path = out.join("exports").join(filename);
    let bytes = path.as_os_str().len() + 1;
    (bytes > PATH_MAX).then(|| {
        format!(
            "{filename:?}: {} is {} bytes with its NUL (at most {PATH_MAX})",
            path.display(),
            bytes
        )
    })
}

/// The output directory must be new, in an existing directory.
fn check_fresh(out: &Path) -> Result<(), (&'static str, String)> {
    if out.symlink_metadata().is_ok() {
        return Err((
            "output_dir_exists",
            format!(
                "{} already exists; finalization needs a fresh output directory",
                out.display()
            ),
        ));
    }
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !parent.is_dir() || out.file_name().is_none() {
        return Err((
            "output_dir_unwritable",
            format!(
                "{} is not a new entry in an existing directory",
                out.display()
            ),
        ));
    }
    Ok(())
}

/// Read-only identity checks of one target: it exists under the manifest's filename, and the
/// receipt is one of its accepted attempts whose resulting state is the manifest's guards.
/// `Ok(Some(problem))` for a mismatch, `Err` when the database did not answer.
async fn preflight(caller: &mut Caller<'_>, t: &Target) -> Result<Option<String>, String> {
    let id = &t.target_file_id;
    let target = match caller
        .call("patchdiff_get_target", &json!({"target_file_id": id}))
        .await?
    {
        Answer::Malformed(text) => return Err(format!("malformed answer: {text}")),
        Answer::Object(o) => o,
    };
    if status(&target) == "not_found" {
        return Ok(Some("no such target".into()));
    }
    if status(&target) != "ok" || target.get("target_file_id") != Some(&json!(id)) {
        return Err(format!(
            "unexpected patchdiff_get_target answer: {}",
            Value::Object(target)
        ));
    }
    let stored = target.get("filename").and_then(Value::as_str);
    if stored != Some(t.filename.as_str()) {
        return Ok(Some(format!(
            "the target's filename is {}, not {:?}",
            stored.map_or("unknown".into(), |s| format!("{s:?}")),
            t.filename
        )));
    }
    let Some(receipt) = &t.accepted_pdcp_log_id else {
        return Ok(None);
    };
    let mut before: Option<i64> = None;
    loop {
        let args = json!({"target_file_id": id, "status": "accepted", "limit": LOG_PAGE, "before_sequence": before});
        let page = match caller.call("patchdiff_get_pdcp_log", &args).await? {
            Answer::Object(o) => Value::Object(o),
            // The history tools answer pages without a status.
            Answer::Malformed(text) => match serde_json::from_str::<Value>(&text) {
                Ok(v @ Value::Object(_)) if v.get("entries").is_some_and(Value::is_array) => v,
                _ => return Err(format!("malformed answer: {text}")),
            },
        };
        let entries = page["entries"].as_array().cloned().unwrap_or_default();
        if let Some(e) = entries.iter().find(|e| e["pdcp_log_id"] == json!(receipt)) {
            if e["status"] != "accepted" || e["target_file_id"] != json!(id) {
                return Ok(Some(format!(
                    "attempt {receipt} is not an accepted attempt of this target"
                )));
            }
            if e["after_version"] != json!(t.expected_target_version)
                || e["after_hash"] != json!(t.expected_current_hash)
            {
                return Ok(Some(format!(
                    "accepted attempt {receipt} left version {} and hash {}, not the manifest's guards",
                    e["after_version"], e["after_hash"]
                )));
            }
            return Ok(None);
        }
        let next = page["next_sequence"].as_i64();
        match next {
            Some(n) if page["has_more"] == true && before.is_none_or(|b| n < b) => before = Some(n),
            _ => {
                return Ok(Some(format!(
                    "accepted_pdcp_log_id {receipt} is not an accepted attempt of this target"
                )));
            }
        }
    }
}
