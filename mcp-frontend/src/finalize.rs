//! `patchdiff-mcp finalize`: the trusted host finalizer (host guide, "Trusted scalar
//! finalization"; docs/finalize.md).
//!
//! Given a manifest of targets with the guards of their last accepted receipts, it checkpoints
//! each target with both guards (`patchdiff_save`), proves the accepted history reproduces the
//! guarded state (`patchdiff_replay`), exports it as canonical LF (`patchdiff_export_target`),
//! hashes the exported bytes itself and writes them, with its evidence, into a fresh output
//! directory, fsyncing everything before it reports success. Each call is one SQL function
//! call in autocommit, one at a time, never resent. An uncertain SAVE stops the run.

use crate::config::Config;
use crate::database::{CallError, Db};
use patchdiff_engine::wire::{LITERAL, sha256_hex, to_string};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub const USAGE: &str = "\
usage: patchdiff-mcp finalize --manifest FILE --out DIR [--call-timeout SECONDS]

Trusted host finalization (docs/finalize.md): for each target of FILE, SAVE with both accepted
guards, replay (all four materialized-state checks), export as canonical LF and write the
independently hashed bytes under DIR/exports/, with DIR/manifest.json, DIR/events.jsonl and
DIR/results.json. DIR must not exist. Run it only after editing has ended.

  --manifest FILE          JSON: an array of {filename, target_file_id, expected_target_version,
                           expected_current_hash, accepted_pdcp_log_id} (or {\"targets\": [...]})
  --out DIR                the output directory to create (refused if it exists)
  --call-timeout SECONDS   bound on each database call (default 60); a SAVE that runs out of
                           time is uncertain and stops the run

The database is the MCP server's: PATCHDIFF_DATABASE_URL, else the embedded cluster.
Prints the outcome as JSON on stdout. Exit status: 0 complete; 1 incomplete (read results.json
and the outcome: some targets may be saved, a SAVE may be pending); 2 refused before any SAVE
(usage, manifest, output directory, database or target identity), with nothing written.";

/// Identifies the layout of manifest.json, results.json and the printed outcome.
pub const FORMAT: &str = "patchdiff-finalize/1";
/// The only export format the finalizer writes.
pub const EXPORT_FORMAT: &str = "canonical_lf";
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The history tool's largest page.
const LOG_PAGE: i64 = 200;
const TARGET_KEYS: [&str; 5] = [
    "filename",
    "target_file_id",
    "expected_target_version",
    "expected_current_hash",
    "accepted_pdcp_log_id",
];
const FUNCTIONS: [&str; 5] = [
    "patchdiff_get_target",
    "patchdiff_get_pdcp_log",
    "patchdiff_save",
    "patchdiff_replay",
    "patchdiff_export_target",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub manifest: PathBuf,
    pub out: PathBuf,
    pub call_timeout: Duration,
}

/// Parses the arguments after `finalize`; `Ok(None)` asks for the help text.
pub fn parse_args(args: &[String]) -> Result<Option<Options>, String> {
    let (mut manifest, mut out, mut timeout) = (None, None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let slot = match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--manifest" => &mut manifest,
            "--out" => &mut out,
            "--call-timeout" => &mut timeout,
            other => return Err(format!("unknown argument {other:?}")),
        };
        let value = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
        if slot.replace(value.clone()).is_some() {
            return Err(format!("{arg} given twice"));
        }
    }
    let call_timeout = match timeout {
        None => DEFAULT_CALL_TIMEOUT,
        Some(s) => s
            .parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                format!("--call-timeout {s:?} is not a number of seconds in (0, 86400]")
            })?,
    };
    match (manifest, out) {
        (Some(m), Some(o)) if !m.is_empty() && !o.is_empty() => Ok(Some(Options {
            manifest: m.into(),
            out: o.into(),
            call_timeout,
        })),
        _ => Err("--manifest FILE and --out DIR are required".into()),
    }
}

/// One target of the trusted manifest: the host's mapping and its last accepted receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub filename: String,
    pub target_file_id: String,
    pub expected_target_version: i64,
    pub expected_current_hash: String,
    pub accepted_pdcp_log_id: Option<String>,
}

impl Target {
    fn to_json(&self) -> Value {
        json!({
            "filename": self.filename,
            "target_file_id": self.target_file_id,
            "expected_target_version": self.expected_target_version,
            "expected_current_hash": self.expected_current_hash,
            "accepted_pdcp_log_id": self.accepted_pdcp_log_id,
        })
    }
}

/// Validates the whole manifest and reports every problem found, not just the first: an array
/// of targets, or `{"targets": [...]}`. Unknown keys are refused, so that a misspelt guard is
/// never silently dropped.
pub fn parse_manifest(text: &str) -> Result<Vec<Target>, Vec<String>> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| vec![format!("the manifest is not JSON: {e}")])?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut o)
            if o.len() == 1 && matches!(o.get("targets"), Some(Value::Array(_))) =>
        {
            match o.remove("targets") {
                Some(Value::Array(items)) => items,
                _ => unreachable!("checked above"),
            }
        }
        _ => {
            return Err(vec![
                "the manifest must be an array of targets or {\"targets\": [...]}".into(),
            ]);
        }
    };
    if items.is_empty() {
        return Err(vec!["the manifest lists no targets".into()]);
    }
    let mut problems = Vec::new();
    let mut targets = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match parse_target(item) {
            Ok(t) => targets.push(t),
            Err(p) => problems.extend(p.into_iter().map(|p| format!("targets[{i}]: {p}"))),
        }
    }
    let mut ids = BTreeSet::new();
    let mut names = BTreeSet::new();
    for t in &targets {
        if !ids.insert(t.target_file_id.as_str()) {
            problems.push(format!(
                "target_file_id {} is listed twice",
                t.target_file_id
            ));
        }
        if !names.insert(t.filename.as_str()) {
            problems.push(format!("filename {:?} is listed twice", t.filename));
        }
    }
    // exports/a and exports/a/b cannot both be files.
    for t in &targets {
        let parts: Vec<&str> = t.filename.split('/').collect();
        for k in 1..parts.len() {
            let dir = parts[..k].join("/");
            if names.contains(dir.as_str()) {
                problems.push(format!(
                    "filename {:?} is inside {dir:?}, which is also a target's filename",
                    t.filename
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(targets)
    } else {
        Err(problems)
    }
}

fn parse_target(item: &Value) -> Result<Target, Vec<String>> {
    let Value::Object(o) = item else {
        return Err(vec!["a target must be an object".into()]);
    };
    let mut problems: Vec<String> = o
        .keys()
        .filter(|k| !TARGET_KEYS.contains(&k.as_str()))
        .map(|k| format!("unknown key {k:?}"))
        .collect();
    problems.extend(
        TARGET_KEYS
            .iter()
            .filter(|k| !o.contains_key(**k))
            .map(|k| format!("missing {k}")),
    );
    let text = |k: &str| o.get(k).and_then(Value::as_str);
    let filename = text("filename");
    match filename {
        Some(f) => {
            if let Err(why) = check_filename(f) {
                problems.push(format!("filename {f:?} {why}"));
            }
        }
        None if o.contains_key("filename") => problems.push("filename must be a string".into()),
        None => {}
    }
    let id = text("target_file_id");
    if o.contains_key("target_file_id") && !id.is_some_and(is_uuid) {
        problems.push("target_file_id must be a lowercase UUID".into());
    }
    let version = match o.get("expected_target_version") {
        Some(Value::Number(n)) => n.as_i64().filter(|v| *v >= 0),
        _ => None,
    };
    if o.contains_key("expected_target_version") && version.is_none() {
        problems.push("expected_target_version must be an integer >= 0".into());
    }
    let hash = text("expected_current_hash");
    if o.contains_key("expected_current_hash") && !hash.is_some_and(is_sha256) {
        problems.push("expected_current_hash must be 64 lowercase hexadecimal characters".into());
    }
    let receipt = match o.get("accepted_pdcp_log_id") {
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) if is_uuid(s) => Some(Some(s.clone())),
        _ => None,
    };
    match receipt {
        None if o.contains_key("accepted_pdcp_log_id") => {
            problems.push("accepted_pdcp_log_id must be a lowercase UUID (or null)".into());
        }
        Some(None) if version.is_some_and(|v| v != 0) => problems.push(
            "accepted_pdcp_log_id may be null only for expected_target_version 0 (no accepted edit)"
                .into(),
        ),
        _ => {}
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    match (filename, id, version, hash, receipt) {
        (Some(f), Some(i), Some(v), Some(h), Some(r)) => Ok(Target {
            filename: f.to_owned(),
            target_file_id: i.to_owned(),
            expected_target_version: v,
            expected_current_hash: h.to_owned(),
            accepted_pdcp_log_id: r,
        }),
        _ => Err(vec!["incomplete target".into()]),
    }
}

/// The filename becomes `exports/<filename>`: a relative path of plain components.
fn check_filename(f: &str) -> Result<(), &'static str> {
    if f.is_empty() || f.len() > 4096 {
        return Err("must be 1 to 4096 bytes");
    }
    if f.contains('\0') {
        return Err("must not contain NUL");
    }
    if f.starts_with('/') {
        return Err("must be a relative path");
    }
    for part in f.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return Err("must be a relative path of plain components (no empty, . or ..)");
        }
        if part.len() > 255 {
            return Err("has a path component over 255 bytes");
        }
    }
    Ok(())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the run ended with: the JSON printed on stdout and the exit status.
#[derive(Debug)]
pub struct Outcome {
    pub json: Value,
    pub exit_code: i32,
}

/// `finalize` as a command: parses `args`, runs, prints the outcome; returns the exit status.
pub async fn command(args: &[String]) -> i32 {
    let options = match parse_args(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return 0;
        }
        Err(why) => {
            eprintln!("patchdiff-mcp finalize: {why}\n\n{USAGE}");
            return 2;
        }
    };
    let outcome = run(&options, |k| std::env::var(k).ok()).await;
    println!(
        "{}",
        serde_json::to_string_pretty(&outcome.json).unwrap_or_default()
    );
    outcome.exit_code
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
    let out = fs::canonicalize(
        options
            .out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
    .map(|p| p.join(options.out.file_name().unwrap_or_default()))
    .unwrap_or_else(|_| options.out.clone());
    let evidence = match Evidence::create(&out, &options.manifest, &text, &targets) {
        Ok(e) => e,
        Err(Refusal::Exists(detail)) => {
            return refused("output_dir_exists", detail, vec![], &targets);
        }
        Err(Refusal::Io(detail)) => {
            return refused("output_dir_unwritable", detail, vec![], &targets);
        }
    };
    Finalizer {
        caller,
        evidence,
        targets: targets.iter().map(Record::new).collect(),
        stopped: None,
        saves_sent: 0,
    }
    .run()
    .await
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

/// One function call at a time, each bounded in time and never resent.
struct Caller<'a> {
    db: &'a mut Db,
    timeout: Duration,
}

/// A call's answer, as far as it is known.
enum Answer {
    /// A JSON object with a string `status`.
    Object(Map<String, Value>),
    /// A response that is not such an object: the outcome is unknown.
    Malformed(String),
}

impl Caller<'_> {
    /// `Err` when the call's outcome is unknown: the connection failed or the time ran out.
    async fn call(&mut self, function: &str, args: &Value) -> Result<Answer, String> {
        let args = to_string(args, LITERAL);
        match tokio::time::timeout(self.timeout, self.db.call(function, &args)).await {
            Err(_) => Err(format!(
                "{function} did not answer within {} s",
                self.timeout.as_secs_f64()
            )),
            Ok(Err(CallError { message, .. })) => Err(format!("{function} failed: {message}")),
            Ok(Ok(text)) => Ok(match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(o)) if o.get("status").is_some_and(Value::is_string) => {
                    Answer::Object(o)
                }
                Ok(_) => Answer::Malformed(text),
                Err(_) if text.len() > 4096 => {
                    Answer::Malformed(format!("{}... (not JSON)", truncate(&text, 4096)))
                }
                Err(_) => Answer::Malformed(text),
            }),
        }
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn status(o: &Map<String, Value>) -> &str {
    o.get("status").and_then(Value::as_str).unwrap_or_default()
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

/// The root-level evidence: manifest.json, events.jsonl (one fsynced line per event), and at
/// the end results.json; exports/ holds only exported documents.
struct Evidence {
    root: PathBuf,
    exports: PathBuf,
    events: File,
    seq: u64,
    manifest_sha256: String,
}

enum Refusal {
    Exists(String),
    Io(String),
}

impl Evidence {
    fn create(
        root: &Path,
        manifest_path: &Path,
        manifest_text: &str,
        targets: &[Target],
    ) -> Result<Evidence, Refusal> {
        let io = |what: &str, e: io::Error| Refusal::Io(format!("{what}: {e}"));
        match fs::create_dir(root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(Refusal::Exists(format!(
                    "{} already exists; finalization needs a fresh output directory",
                    root.display()
                )));
            }
            Err(e) => return Err(io(&format!("cannot create {}", root.display()), e)),
        }
        let parent = root.parent().unwrap_or(Path::new("/"));
        sync_dir(parent).map_err(|e| io("cannot fsync the output directory's parent", e))?;
        let exports = root.join("exports");
        fs::create_dir(&exports).map_err(|e| io("cannot create exports/", e))?;
        let manifest_sha256 = sha256_hex(manifest_text);
        let manifest = json!({
            "format": FORMAT,
            "manifest_path": fs::canonicalize(manifest_path).unwrap_or_else(|_| manifest_path.to_owned()),
            "manifest_sha256": manifest_sha256,
            "export_format": EXPORT_FORMAT,
            "targets": targets.iter().map(Target::to_json).collect::<Vec<_>>(),
        });
        write_new(&root.join("manifest.json"), &pretty(&manifest))
            .map_err(|e| io("cannot write manifest.json", e))?;
        let events = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(root.join("events.jsonl"))
            .map_err(|e| io("cannot create events.jsonl", e))?;
        sync_dir(root).map_err(|e| io("cannot fsync the output directory", e))?;
        Ok(Evidence {
            root: root.to_owned(),
            exports,
            events,
            seq: 0,
            manifest_sha256,
        })
    }

    /// Appends one event and makes it durable before returning.
    fn event(&mut self, event: &str, fields: Value) -> io::Result<()> {
        self.seq += 1;
        let mut line = json!({"seq": self.seq, "unix_ms": unix_ms(), "event": event});
        if let (Value::Object(line), Value::Object(fields)) = (&mut line, fields) {
            line.extend(fields);
        }
        let mut text = to_string(&line, LITERAL);
        text.push('\n');
        self.events.write_all(text.as_bytes())?;
        self.events.sync_data()
    }

    /// Writes `exports/<filename>`, reads it back and checks the bytes, and fsyncs the file and
    /// every directory from its parent up to the output directory. Returns the relative path.
    fn export(&self, filename: &str, content: &str) -> io::Result<String> {
        let path = self.exports.join(filename);
        let parent = path.parent().unwrap_or(&self.exports).to_owned();
        fs::create_dir_all(&parent)?;
        write_new(&path, content)?;
        if fs::read(&path)? != content.as_bytes() {
            return Err(io::Error::other(
                "the file read back differs from the bytes written",
            ));
        }
        let mut dir = parent.as_path();
        loop {
            sync_dir(dir)?;
            if dir == self.root {
                break;
            }
            dir = dir.parent().unwrap_or(&self.root);
        }
        Ok(format!("exports/{filename}"))
    }

    fn results(&self, results: &Value) -> io::Result<()> {
        write_new(&self.root.join("results.json"), &pretty(results))?;
        self.events.sync_all()?;
        sync_dir(&self.exports)?;
        sync_dir(&self.root)
    }
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Creates `path` (never replacing a file) with `content`, fsynced.
fn write_new(path: &Path, content: &str) -> io::Result<()> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// What happened to one target.
struct Record {
    target: Target,
    state: &'static str,
    save: Value,
    replay: Value,
    export: Value,
    failure: Value,
}

impl Record {
    fn new(t: &Target) -> Record {
        Record {
            target: t.clone(),
            state: "not_started",
            save: Value::Null,
            replay: Value::Null,
            export: Value::Null,
            failure: Value::Null,
        }
    }

    fn fail(&mut self, state: &'static str, stage: &str, reason: &str, detail: String) {
        self.state = state;
        self.failure = json!({"stage": stage, "reason": reason, "detail": detail});
    }

    fn to_json(&self) -> Value {
        let mut v = self.target.to_json();
        v["state"] = json!(self.state);
        v["save"] = self.save.clone();
        v["replay"] = self.replay.clone();
        v["export"] = self.export.clone();
        v["failure"] = self.failure.clone();
        v
    }
}

/// Why the run stopped before its end.
struct Stop {
    reason: &'static str,
    target_file_id: Option<String>,
    stage: &'static str,
    detail: String,
}

struct Finalizer<'a> {
    caller: Caller<'a>,
    evidence: Evidence,
    targets: Vec<Record>,
    stopped: Option<Stop>,
    saves_sent: usize,
}

/// How one step of a target ended when it did not succeed.
enum StepError {
    /// The target failed; the run goes on with the others.
    Target,
    /// The run stops.
    Stop(Stop),
}

impl Finalizer<'_> {
    async fn run(mut self) -> Outcome {
        let started = json!({"manifest_sha256": self.evidence.manifest_sha256, "targets": self.targets.len()});
        if let Err(e) = self.evidence.event("run_started", started) {
            self.stopped = Some(Stop {
                reason: "evidence_failure",
                target_file_id: None,
                stage: "events",
                detail: format!("cannot write events.jsonl: {e}"),
            });
        }
        for i in 0..self.targets.len() {
            if self.stopped.is_some() {
                break;
            }
            match self.finalize(i).await {
                Ok(()) | Err(StepError::Target) => {}
                Err(StepError::Stop(stop)) => {
                    // Best effort: the stop is reported in results.json and the outcome anyway.
                    let _ = self.evidence.event(
                        "run_stopped",
                        json!({"reason": stop.reason, "target_file_id": stop.target_file_id, "stage": stop.stage, "detail": stop.detail}),
                    );
                    self.stopped = Some(stop);
                }
            }
        }
        self.finish()
    }

    /// SAVE, replay, export and write one target.
    async fn finalize(&mut self, i: usize) -> Result<(), StepError> {
        let t = self.targets[i].target.clone();
        let id = t.target_file_id.clone();
        let stop = |reason, stage, detail: String| {
            StepError::Stop(Stop {
                reason,
                target_file_id: Some(t.target_file_id.clone()),
                stage,
                detail,
            })
        };

        // SAVE with both original guards. Its pending record is durable before it is sent.
        let args = json!({
            "target_file_id": id,
            "expected_target_version": t.expected_target_version,
            "expected_current_hash": t.expected_current_hash,
        });
        if let Err(e) = self.evidence.event(
            "save_pending",
            json!({"target_file_id": id, "arguments": args}),
        ) {
            return Err(stop(
                "evidence_failure",
                "save",
                format!("cannot record save_pending, so SAVE was not sent: {e}"),
            ));
        }
        self.saves_sent += 1;
        self.targets[i].state = "save_pending";
        let answer = self.caller.call("patchdiff_save", &args).await;
        let uncertain = |r: &mut Record, detail: String| {
            r.failure = json!({"stage": "save", "reason": "save_uncertain", "detail": detail});
            stop("save_uncertain", "save", detail)
        };
        let save = match answer {
            Err(e) => {
                let detail = format!("{e}; whether the SAVE committed is unknown");
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail}),
                );
                return Err(uncertain(&mut self.targets[i], detail));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = "patchdiff_save returned a malformed answer; whether the SAVE committed is unknown".to_string();
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail, "response_text": text}),
                );
                self.targets[i].save = json!({"response_text": text});
                return Err(uncertain(&mut self.targets[i], detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let response = Value::Object(save.clone());
        self.targets[i].save = response.clone();
        let verdict = match status(&save) {
            "saved" => match check_saved(&save, &t) {
                Ok(()) => "saved",
                Err(why) => {
                    let detail = format!(
                        "patchdiff_save answered saved inconsistently ({why}); the SAVE's effect is uncertain"
                    );
                    let _ = self.evidence.event(
                        "save_uncertain",
                        json!({"target_file_id": id, "detail": detail, "response": response}),
                    );
                    return Err(uncertain(&mut self.targets[i], detail));
                }
            },
            // Explicit refusals that, by contract, write nothing.
            "rejected" | "not_found" | "invalid_argument" | crate::server::PERMISSION_DENIED => {
                "rejected"
            }
            other => {
                let detail = format!(
                    "patchdiff_save answered status {other:?}; whether the SAVE committed is unknown"
                );
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail, "response": response}),
                );
                return Err(uncertain(&mut self.targets[i], detail));
            }
        };
        // A receipt that cannot be persisted leaves the SAVE uncertain for the operator.
        if let Err(e) = self.evidence.event(
            "save_response",
            json!({"target_file_id": id, "verdict": verdict, "response": response}),
        ) {
            let detail = format!("cannot persist the SAVE receipt: {e}");
            return Err(uncertain(&mut self.targets[i], detail));
        }
        if verdict == "rejected" {
            let reason = save
                .get("failure_reason")
                .or(save.get("code"))
                .and_then(Value::as_str)
                .unwrap_or(status(&save))
                .to_owned();
            let detail = save
                .get("failure_detail")
                .and_then(Value::as_str)
                .unwrap_or("patchdiff_save rejected the checkpoint")
                .to_owned();
            self.targets[i].fail("save_rejected", "save", &reason, detail);
            self.target_failed(i)?;
            return Err(StepError::Target);
        }
        self.targets[i].state = "saved";

        // Replay: the accepted history must reproduce exactly the guarded state.
        let replay = match self
            .caller
            .call("patchdiff_replay", &json!({"target_file_id": id}))
            .await
        {
            Err(e) => {
                self.targets[i].fail("interrupted", "replay", "infrastructure_failure", e.clone());
                return Err(stop("infrastructure_failure", "replay", e));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = format!(
                    "patchdiff_replay returned a malformed answer: {}",
                    truncate(&text, 4096)
                );
                self.targets[i].fail("interrupted", "replay", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "replay", detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let response = Value::Object(replay.clone());
        self.targets[i].replay = response.clone();
        let verified = check_replay(&replay, &t);
        if let Err(e) = self.evidence.event(
            "replay_response",
            json!({"target_file_id": id, "verified": verified.is_ok(), "response": response}),
        ) {
            let detail = format!("cannot record the replay: {e}");
            self.targets[i].fail("interrupted", "replay", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "replay", detail));
        }
        if let Err(why) = verified {
            self.targets[i].fail("replay_failed", "replay", "replay_not_verified", why);
            self.target_failed(i)?;
            return Err(StepError::Target);
        }

        // Export as canonical LF and hash the bytes independently.
        let args = json!({"target_file_id": id, "format": EXPORT_FORMAT});
        let mut export = match self.caller.call("patchdiff_export_target", &args).await {
            Err(e) => {
                self.targets[i].fail("interrupted", "export", "infrastructure_failure", e.clone());
                return Err(stop("infrastructure_failure", "export", e));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = format!(
                    "patchdiff_export_target returned a malformed answer: {}",
                    truncate(&text, 4096)
                );
                self.targets[i].fail("interrupted", "export", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "export", detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let content = match export.shift_remove("content") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let independent = content.as_deref().map(sha256_hex);
        let verified = check_export(&export, content.as_deref(), independent.as_deref(), &t);
        let mut receipt = Value::Object(export);
        receipt["independent_sha256"] = json!(independent);
        receipt["bytes"] = json!(content.as_ref().map(String::len));
        self.targets[i].export = receipt.clone();
        if let Err(e) = self.evidence.event(
            "export_response",
            json!({"target_file_id": id, "verified": verified.is_ok(), "response_without_content": receipt}),
        ) {
            let detail = format!("cannot record the export: {e}");
            self.targets[i].fail("interrupted", "export", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "export", detail));
        }
        let content = match (verified, content) {
            (Ok(()), Some(c)) => c,
            (Err(why), _) => {
                self.targets[i].fail("export_failed", "export", "export_not_verified", why);
                self.target_failed(i)?;
                return Err(StepError::Target);
            }
            (Ok(()), None) => unreachable!("check_export requires content"),
        };
        let path = match self.evidence.export(&t.filename, &content) {
            Ok(p) => p,
            Err(e) => {
                let detail = format!("cannot write exports/{}: {e}", t.filename);
                self.targets[i].fail("interrupted", "write", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "write", detail));
            }
        };
        self.targets[i].export["path"] = json!(path);
        if let Err(e) = self.evidence.event(
            "target_finalized",
            json!({"target_file_id": id, "path": path, "sha256": independent}),
        ) {
            let detail = format!("cannot record the finalized target: {e}");
            self.targets[i].fail("interrupted", "write", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "write", detail));
        }
        self.targets[i].state = "finalized";
        Ok(())
    }

    fn target_failed(&mut self, i: usize) -> Result<(), StepError> {
        let r = &self.targets[i];
        let fields = json!({"target_file_id": r.target.target_file_id, "state": r.state, "failure": r.failure});
        self.evidence.event("target_failed", fields).map_err(|e| {
            StepError::Stop(Stop {
                reason: "evidence_failure",
                target_file_id: Some(r.target.target_file_id.clone()),
                stage: "events",
                detail: format!("cannot record the target's failure: {e}"),
            })
        })
    }

    fn finish(self) -> Outcome {
        let finalized = self
            .targets
            .iter()
            .filter(|r| r.state == "finalized")
            .count();
        let complete = self.stopped.is_none() && finalized == self.targets.len();
        let stopped = self.stopped.as_ref().map(|s| {
            json!({"reason": s.reason, "target_file_id": s.target_file_id, "stage": s.stage, "detail": s.detail})
        });
        let pending: Vec<&str> = self
            .targets
            .iter()
            .filter(|r| r.state == "save_pending")
            .map(|r| r.target.target_file_id.as_str())
            .collect();
        let mut results = json!({
            "format": FORMAT,
            "status": if complete { "complete" } else { "incomplete" },
            "output_dir": self.evidence.root,
            "manifest_sha256": self.evidence.manifest_sha256,
            "export_format": EXPORT_FORMAT,
            "targets_total": self.targets.len(),
            "targets_finalized": finalized,
            "saves_sent": self.saves_sent,
            "save_pending": pending,
            "stopped": stopped,
            "targets": self.targets.iter().map(Record::to_json).collect::<Vec<_>>(),
        });
        let mut outcome = results.clone();
        match self.evidence.results(&results) {
            Ok(()) => outcome["results_json"] = json!("results.json"),
            Err(e) => {
                // results.json is best effort; this outcome is authoritative about the failure.
                results["status"] = json!("incomplete");
                outcome["status"] = json!("incomplete");
                outcome["results_json"] = Value::Null;
                outcome["results_json_error"] = json!(e.to_string());
                if outcome["stopped"].is_null() {
                    outcome["stopped"] = json!({"reason": "evidence_failure", "target_file_id": null, "stage": "results", "detail": format!("cannot persist results.json: {e}")});
                }
            }
        }
        let exit_code = if outcome["status"] == "complete" {
            0
        } else {
            1
        };
        Outcome {
            json: outcome,
            exit_code,
        }
    }
}

/// A `saved` answer must name the target and leave its guarded version and hash unchanged.
fn check_saved(o: &Map<String, Value>, t: &Target) -> Result<(), String> {
    let mut wrong = Vec::new();
    if o.get("target_file_id") != Some(&json!(t.target_file_id)) {
        wrong.push("target_file_id");
    }
    if o.get("version") != Some(&json!(t.expected_target_version)) {
        wrong.push("version");
    }
    if o.get("current_hash") != Some(&json!(t.expected_current_hash)) {
        wrong.push("current_hash");
    }
    for k in [
        "snapshot_id",
        "closed_editing_cycle_id",
        "new_editing_cycle_id",
    ] {
        if !o.get(k).and_then(Value::as_str).is_some_and(is_uuid) {
            wrong.push(k);
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected {}", wrong.join(", ")))
    }
}

/// Replay must succeed with all four materialized-state checks true and reconstruct exactly
/// the manifest's version and hash, which must also be the stored ones.
fn check_replay(o: &Map<String, Value>, t: &Target) -> Result<(), String> {
    if status(o) != "success" {
        return Err(format!(
            "replay status {:?} ({})",
            status(o),
            o.get("failure_reason")
                .and_then(Value::as_str)
                .unwrap_or("no failure_reason")
        ));
    }
    let mut wrong = Vec::new();
    if o.get("target_file_id") != Some(&json!(t.target_file_id)) {
        wrong.push("target_file_id".to_string());
    }
    let checks = o.get("materialized_state_checks");
    for c in [
        "content_matches",
        "stored_hash_matches",
        "recomputed_hash_matches",
        "version_matches",
    ] {
        if checks.and_then(|v| v.get(c)) != Some(&Value::Bool(true)) {
            wrong.push(c.to_string());
        }
    }
    if o.get("materialized_state_matches") != Some(&Value::Bool(true)) {
        wrong.push("materialized_state_matches".into());
    }
    for k in ["reconstructed_version", "current_version"] {
        if o.get(k) != Some(&json!(t.expected_target_version)) {
            wrong.push(format!("{k} (expected {})", t.expected_target_version));
        }
    }
    for k in ["reconstructed_hash", "current_hash"] {
        if o.get(k) != Some(&json!(t.expected_current_hash)) {
            wrong.push(format!("{k} (expected the manifest's hash)"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("replay did not verify: {}", wrong.join(", ")))
    }
}

/// The export must be canonical LF of the guarded state, and its bytes must hash, by our own
/// computation, to both the export's content_sha256 and the manifest's canonical hash.
fn check_export(
    o: &Map<String, Value>,
    content: Option<&str>,
    independent: Option<&str>,
    t: &Target,
) -> Result<(), String> {
    if status(o) != "ok" {
        return Err(format!(
            "export status {:?} ({})",
            status(o),
            o.get("failure_detail")
                .and_then(Value::as_str)
                .unwrap_or("no detail")
        ));
    }
    let (Some(content), Some(independent)) = (content, independent) else {
        return Err("the export has no content".into());
    };
    let mut wrong = Vec::new();
    let expect = [
        ("filename", json!(t.filename)),
        ("format", json!(EXPORT_FORMAT)),
        ("content_eol", json!("lf")),
        ("version", json!(t.expected_target_version)),
        ("hash", json!(t.expected_current_hash)),
        ("current_hash", json!(t.expected_current_hash)),
        ("content_sha256", json!(independent)),
    ];
    for (k, v) in expect {
        if o.get(k) != Some(&v) {
            wrong.push(k.to_string());
        }
    }
    if content.contains('\r') {
        wrong.push("content is not LF-canonical".into());
    }
    if independent != t.expected_current_hash {
        wrong.push("the exported bytes do not hash to expected_current_hash".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("export did not verify: {}", wrong.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "11111111-1111-4111-8111-111111111111";
    const LOG: &str = "22222222-2222-4222-8222-222222222222";

    fn target(filename: &str, id: &str) -> Value {
        json!({"filename": filename, "target_file_id": id, "expected_target_version": 1,
               "expected_current_hash": "a".repeat(64), "accepted_pdcp_log_id": LOG})
    }

    /// Host guide: the trusted manifest contains filename, target_file_id,
    /// expected_target_version, expected_current_hash and accepted_pdcp_log_id.
    #[test]
    fn manifest_accepts_both_shapes() {
        let list = json!([target("docs/a.md", ID)]).to_string();
        let t = parse_manifest(&list).unwrap();
        assert_eq!(t[0].filename, "docs/a.md");
        assert_eq!(t[0].accepted_pdcp_log_id.as_deref(), Some(LOG));
        let object = json!({"targets": [target("a.md", ID)]}).to_string();
        assert_eq!(parse_manifest(&object).unwrap().len(), 1);
    }

    /// Host guide: preflight all target names/identities; a misspelt or missing guard is a
    /// refusal, never a SAVE without it.
    #[test]
    fn manifest_problems_are_all_reported() {
        let mut bad = target("../x", "not-a-uuid");
        bad["expected_version"] = json!(1);
        bad["expected_target_version"] = json!(-1);
        bad["expected_current_hash"] = json!("ABC");
        let problems = parse_manifest(&json!([bad]).to_string()).unwrap_err();
        let all = problems.join("\n");
        for needle in [
            "unknown key \"expected_version\"",
            "filename \"../x\"",
            "target_file_id",
            "expected_target_version",
            "expected_current_hash",
        ] {
            assert!(all.contains(needle), "{needle}: {all}");
        }
        let dup = json!([target("a", ID), target("a/b", ID)]).to_string();
        let all = parse_manifest(&dup).unwrap_err().join("\n");
        assert!(
            all.contains("listed twice") && all.contains("inside \"a\""),
            "{all}"
        );
        assert!(parse_manifest("[]").is_err());
        assert!(parse_manifest("{\"targets\": [], \"x\": 1}").is_err());
        let mut null_receipt = target("a", ID);
        null_receipt["accepted_pdcp_log_id"] = Value::Null;
        assert!(parse_manifest(&json!([null_receipt.clone()]).to_string()).is_err());
        null_receipt["expected_target_version"] = json!(0);
        assert!(parse_manifest(&json!([null_receipt]).to_string()).is_ok());
    }

    #[test]
    fn arguments() {
        let a = |s: &[&str]| parse_args(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        let o = a(&["--manifest", "m.json", "--out", "d"]).unwrap().unwrap();
        assert_eq!(o.call_timeout, DEFAULT_CALL_TIMEOUT);
        assert_eq!(a(&["--help"]).unwrap(), None);
        assert!(a(&["--manifest", "m.json"]).is_err());
        assert!(a(&["--manifest", "m", "--out", "d", "--call-timeout", "0"]).is_err());
        assert!(a(&["--manifest", "m", "--manifest", "n", "--out", "d"]).is_err());
        assert!(a(&["--bogus"]).is_err());
    }

    /// Host guide: replay must verify all four materialized-state components and the expected
    /// version/hash.
    #[test]
    fn replay_needs_all_four_checks_and_the_guards() {
        let t = parse_manifest(&json!([target("a", ID)]).to_string())
            .unwrap()
            .remove(0);
        let ok = json!({"status": "success", "target_file_id": ID, "reconstructed_hash": "a".repeat(64),
            "current_hash": "a".repeat(64), "reconstructed_version": 1, "current_version": 1,
            "materialized_state_matches": true, "materialized_state_checks": {"content_matches": true,
            "stored_hash_matches": true, "recomputed_hash_matches": true, "version_matches": true}});
        let obj = |v: Value| v.as_object().unwrap().clone();
        assert!(check_replay(&obj(ok.clone()), &t).is_ok());
        let mut bad = ok.clone();
        bad["materialized_state_checks"]["content_matches"] = json!(false);
        assert!(
            check_replay(&obj(bad), &t)
                .unwrap_err()
                .contains("content_matches")
        );
        let mut bad = ok;
        bad["reconstructed_version"] = json!(2);
        assert!(check_replay(&obj(bad), &t).is_err());
    }
}
