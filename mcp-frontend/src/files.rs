//! The `files` profile (issue 19 item 4; docs/files.md): `read_file`, `edit_file` and
//! `write_file` with the reference filesystem server's names and argument shapes, built on the
//! workspace machinery (import with a binding proof, publication in a transaction this front
//! end owns) and the guarded submissions.
//!
//! Like the workspace profile's publishing SAVE, a file tool makes several SQL calls: the
//! import of a file on first use, then one transaction holding the submission and the
//! publishing SAVE. Every verdict on the edits themselves still comes from the extension.

use crate::database::{CallError, Db};
use crate::server::{PublishAnswer, Server, publish_in_transaction};
use crate::tool::Tool;
use crate::workspace::{Workspace, sha256_hex};
use patchdiff_engine::wire::unified::{self, Budget, Change, DiffError, Ranges};
use patchdiff_engine::wire::{LITERAL, literal_str_len, to_string};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// Context lines around each hunk of a diff: the reference server's (jsdiff's
/// `createTwoFilesPatch` default).
pub const DIFF_CONTEXT: usize = 4;
/// The most search steps one `edit_file` diff may take (the engine's GNU diff counts every
/// diagonal and snake step); past it the changed middle, between the texts' common first and
/// last lines, is shown removed and added whole: a correct diff, only a longer one. 1,000
/// scattered edits of an 8 MB file take about 0.2 million.
pub const DIFF_MAX_STEPS: u64 = 100_000_000;
/// The most `edits` one `edit_file` call may carry (the engine's tx/1 limit is 10,000; the
/// front end refuses beyond this before any SQL).
pub const MAX_EDITS: usize = 1_000;
/// The status of a refused argument (a status, not a code: docs/codes.md).
const INVALID_ARGUMENT: &str = "invalid_argument";
/// Targets per page of a lookup of one file's label, and how many pages it reads at most.
const LOOKUP_LIMIT: u64 = 500;
const LOOKUP_PAGES: usize = 8;

/// What this front end knows of a file it has served: the target bound to it and the state
/// the last read, import or publication left.
#[derive(Debug, Clone)]
struct Entry {
    target_file_id: String,
    version: i64,
    /// The target's current hash: the SHA-256 of its canonical-LF text.
    hash: String,
    /// The version the agent last read with `read_file`: an identical `edit_file` after a
    /// read is a new request, not a retry.
    read_at_version: Option<i64>,
    /// The request key of the last `edit_file` this process had accepted, the version it
    /// produced and the hash of the text it was based on.
    last_call: Option<(String, i64, String)>,
}

/// How many accepted versions that changed nothing `is_retry` passes over to find the call that
/// made a file's current text (one page of the attempt log).
const NO_OP_VERSIONS_PASSED: i64 = 20;

/// The files profile's state for one connection.
#[derive(Debug, Default)]
pub struct Files {
    entries: HashMap<String, Entry>,
    /// Paths whose last publication found their bytes changed on disk (`external_disk_drift`),
    /// with the target it was refused for: the next read imports them again instead of taking
    /// that target, whose text can still equal the disk's when only the line endings changed on
    /// disk (then only the raw bytes, which the publication compares, tell them apart); another
    /// target of the file with the disk's text is taken (one that another process publishes
    /// to). Without a target (`workspace_binding_unverified`), the next read imports them.
    reimport: HashMap<String, Option<String>>,
    /// Per path, every target whose publication was refused in this process because the disk
    /// had changed or its binding could not be verified: never taken again for the disk's text
    /// (two old targets of the same text would otherwise be taken in turn, each refused once).
    refused: HashMap<String, std::collections::HashSet<String>>,
    /// The role this front end calls as, as `patchdiff_list_targets` names owners (quoted where
    /// an identifier needs it); read once.
    me: Option<String>,
}

/// A line-ending style of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eol {
    /// No line break at all.
    None,
    Lf,
    Crlf,
    /// Several styles, or a lone CR: not kept byte for byte, so refused for writing.
    Mixed,
}

pub fn eol(text: &str) -> Eol {
    let b = text.as_bytes();
    let (mut lf, mut crlf) = (0usize, 0usize);
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'\n' if i > 0 && b[i - 1] == b'\r' => crlf += 1,
            b'\n' => lf += 1,
            b'\r' if b.get(i + 1) != Some(&b'\n') => return Eol::Mixed,
            _ => {}
        }
    }
    match (lf, crlf) {
        (0, 0) => Eol::None,
        (_, 0) => Eol::Lf,
        (0, _) => Eol::Crlf,
        _ => Eol::Mixed,
    }
}

/// Canonical LF, as the extension stores text (CRLF becomes LF).
pub fn canonical(text: &str) -> String {
    if text.contains('\r') {
        text.replace("\r\n", "\n")
    } else {
        text.to_owned()
    }
}

/// The request key of an `edit_file` call: the file, the edits (canonical LF), the version
/// they were based on and the hash of the file's text they were sent against (the submission's
/// `expected_current_hash`). The same call resent while the file is at that version and text
/// recovers the recorded outcome (the extension's keyed recovery); see [`Server::is_retry`] for
/// a resend after the call succeeded. Without the hash (before 2026-12-06, `files1-`), a call
/// refused because the file had changed on disk held its key under the changed text's hash, and
/// the same edit sent once the file was back to that version's text was a `request_key_conflict`
/// for good, even after a `read_file` (helper-54).
pub fn request_key(
    rel: &str,
    edits: &[(String, String)],
    base_version: i64,
    base_hash: &str,
) -> String {
    let body = to_string(&json!([rel, edits, base_version, base_hash]), LITERAL);
    format!(
        "files2-{}",
        sha256_hex(format!("patchdiff-files/2\0{body}").as_bytes())
    )
}

/// A path of a call as a path relative to the workspace root: absolute under the root (as the
/// reference server takes them), or already relative. The part after the root is taken as it
/// is written, so it meets the workspace's path rules as a relative path does: a trailing `/`,
/// an empty or a `.` component is refused, not dropped (`Path::strip_prefix` compares
/// components, and so made `ROOT/f.txt/` name `f.txt`). The root is matched as configured and
/// as the directory actually opened at start-up ([`Workspace::real_path`]), never resolved
/// again: a symbolic link re-pointed later changes neither.
pub fn relative(ws: &Workspace, path: &str) -> Result<String, (&'static str, String)> {
    let p = std::path::Path::new(path);
    if !p.is_absolute() {
        return Ok(path.strip_prefix("./").unwrap_or(path).to_owned());
    }
    let roots: Vec<&std::path::Path> = std::iter::once(ws.path.as_path())
        .chain(ws.real_path.as_deref())
        .collect();
    for root in &roots {
        let root = root.to_str().unwrap_or_default().trim_end_matches('/');
        if let Some(rest) = path
            .strip_prefix(root)
            .and_then(|r| r.strip_prefix('/'))
            .filter(|r| !r.is_empty())
        {
            return Ok(rest.to_owned());
        }
    }
    // Under the root only in another spelling (`//`, `/./` before or in the root's part).
    let under = |root: &&std::path::Path| {
        p.strip_prefix(root)
            .ok()
            .filter(|r| !r.as_os_str().is_empty())
    };
    if let Some(rest) = roots.iter().find_map(under) {
        return Err((
            "workspace_path_ambiguous",
            format!(
                "{path} names {} under {} in a spelling with empty or '.' components; write it as {}/{}",
                rest.display(),
                ws.path.display(),
                ws.path.display(),
                rest.display()
            ),
        ));
    }
    Err((
        "workspace_path_outside_root",
        format!(
            "Access denied - path outside allowed directories: {path} not in {}",
            ws.path.display()
        ),
    ))
}

/// The first of the two keys of the advisory lock under which the files profile imports a file
/// ("pdfi"); the second is [`Workspace::import_lock_key`] of its label.
const IMPORT_LOCK_CLASS: i32 = 0x7064_6669;

/// How many other targets holding a file's text a new process's resend is looked for on.
const MAX_TWINS: usize = 8;

/// How long an import waits for another process's import of the same file.
const IMPORT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The target label of a file: the public name of this front end's binding key, the root's
/// identity and the relative path, so that a lookup finds only targets imported from this root
/// with this key (a forged one is refused at publication by the binding proof). Front ends with
/// different keys on one root (two users' default key files) took each other's targets, whose
/// publications they then refused: 199 of 200 edits refused, and a new target at every read
/// (helper-118).
fn label(ws: &Workspace, rel: &str) -> String {
    format!("files@{}:{}:{}:{rel}", ws.key_tag(), ws.device, ws.inode)
}

/// The label of a file's targets imported before labels named their key (2026-12-07), still
/// looked up after [`label`]'s, so that a file keeps its history across the change.
fn legacy_label(ws: &Workspace, rel: &str) -> String {
    format!("files:{}:{}:{rel}", ws.device, ws.inode)
}

/// `head`/`tail` lines of a text (the reference server's read_file options).
pub fn head_tail(text: &str, head: Option<u64>, tail: Option<u64>) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    // A final line break does not start another line.
    let n = if text.ends_with('\n') {
        lines.len() - 1
    } else {
        lines.len()
    };
    let take = |k: Option<u64>| k.map_or(n, |k| usize::try_from(k).unwrap_or(usize::MAX).min(n));
    if head.is_some() {
        lines[..take(head)].join("\n")
    } else {
        lines[n - take(tail)..n].join("\n")
    }
}

/// The text after the edits, rebuilt by the engine from the acceptance's change facts (span of
/// each edit in the buffer after the earlier ones, code points) and checked against its
/// `after_hash`. A preview carries the facts of 32 edits at most (the contract's cap); for more,
/// the engine applies the edits to `before` as the preview did (`tx1::apply`), and the result
/// is checked against the hash all the same (helper-60: a dry run of 33 edits had no diff).
pub fn apply_facts(
    before: &str,
    edits: &[(String, String)],
    facts: &[Value],
    after_hash: &str,
) -> Option<String> {
    if facts.len() != edits.len() {
        let text = applied_here(before, edits)?;
        return (sha256_hex(text.as_bytes()) == after_hash).then_some(text);
    }
    let spans = facts
        .iter()
        .map(|f| {
            let at = |k: &str| usize::try_from(f.get(k)?.as_u64()?).ok();
            Some((at("span_start")?, at("span_end")?))
        })
        .collect::<Option<Vec<_>>>()?;
    let replacements = spans
        .into_iter()
        .zip(edits)
        .map(|((s, e), (_, new))| (s, e, new.as_str()));
    let after = patchdiff_engine::api::text::apply_spans(before, replacements)?;
    (sha256_hex(after.as_bytes()) == after_hash).then_some(after)
}

/// The changes of a diff that shows everything between the texts' common first and last lines
/// removed and added (at most one change).
fn whole_middle(a: &[&str], b: &[&str]) -> Vec<Change> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (deleted, inserted) = (a.len() - pre - suf, b.len() - pre - suf);
    if deleted == 0 && inserted == 0 {
        return Vec::new();
    }
    vec![Change {
        line0: pre,
        line1: pre,
        deleted,
        inserted,
    }]
}

/// A git-style unified diff of two canonical-LF texts, shaped like the reference server's
/// (`Index:` line, `original`/`modified` labels, 4 lines of context, every range with its
/// count). Empty when equal. The changes are the engine's GNU diff (`patchdiff_diff`'s), within
/// [`DIFF_MAX_STEPS`].
pub fn unified_diff(path: &str, before: &str, after: &str) -> String {
    unified_diff_within(path, before, after, DIFF_MAX_STEPS)
}

fn unified_diff_within(path: &str, before: &str, after: &str, max_steps: u64) -> String {
    let script = unified::changes(before, after, DIFF_CONTEXT, &mut Budget::new(max_steps))
        .unwrap_or_else(|DiffError::TooExpensive { .. }| {
            whole_middle(&unified::lines(before), &unified::lines(after))
        });
    if script.is_empty() {
        return String::new();
    }
    let hunks = unified::print_hunks(&script, before, after, DIFF_CONTEXT, Ranges::Counted);
    format!(
        "Index: {path}\n===================================================================\n--- {path}\toriginal\n+++ {path}\tmodified\n{hunks}"
    )
}

/// The reference server's presentation of a diff: a fenced `diff` block whose fence is longer
/// than any run of backticks inside.
pub fn fenced(diff: &str) -> String {
    let mut n = 3;
    while diff.contains(&"`".repeat(n)) {
        n += 1;
    }
    let fence = "`".repeat(n);
    format!("{fence}diff\n{diff}{fence}\n\n")
}

/// One line of an answer's evidence, shortened for the text channel.
fn preview(s: &str) -> String {
    let one: String = s.chars().take(120).collect();
    let mut one = one.replace('\n', "\\n");
    if s.chars().count() > 120 {
        one.push('…');
    }
    one
}

/// A failure's text (for agents used to the reference server's "Error: ..." lines) and its
/// structured record.
fn failure(path: &str, mut record: Map<String, Value>, text: String) -> (String, Value, bool) {
    record.insert("content".into(), json!(text));
    record.insert("path".into(), json!(path));
    (text, Value::Object(record), true)
}

/// The answer to a call whose edits an identical earlier call already applied (files.md
/// "Retries"): nothing written, nothing published.
fn deduplicated(
    path: &str,
    target_file_id: &str,
    version: i64,
    hash: &str,
    client_request_id: &Value,
    pdcp_log_id: &Value,
) -> (String, Value, bool) {
    let text = format!(
        "These edits were already applied to {path} by an identical earlier call (version {version}); they were not applied again.\n"
    );
    let v = json!({"content": text, "status": "deduplicated", "deduplicated": true, "path": path,
        "target_file_id": target_file_id, "version": version, "current_hash": hash,
        "client_request_id": client_request_id, "pdcp_log_id": pdcp_log_id});
    (text, v, false)
}

/// The answer to a call whose key recovered an outcome the target has since moved on from:
/// another process changed the file after this one last read it. Nothing was written or logged.
fn moved_on(path: &str, recovered: &Value) -> (String, Value, bool) {
    let text = format!(
        "Error: {path} was changed by another call since it was last read (it is at version {} now); nothing was written. Read it again with read_file, then redo the edit if it is still needed.",
        recovered["current_version"]
    );
    let record = json!({"status": "rejected", "failure_reason": "target_version_mismatch",
        "target_file_id": recovered["target_file_id"], "current_version": recovered["current_version"],
        "current_hash": recovered["current_hash"], "pdcp_log_id": null, "deduplicated": false});
    failure(path, record.as_object().cloned().unwrap_or_default(), text)
}

fn invalid(path: &str, code: &str, detail: &str) -> (String, Value, bool) {
    let mut m = Map::new();
    m.insert("status".into(), json!(INVALID_ARGUMENT));
    m.insert("code".into(), json!(code));
    m.insert("failure_detail".into(), json!(detail));
    failure(path, m, format!("Error: {detail}"))
}

/// A front-end refusal of a files tool's arguments (unknown or missing names, deep nesting, not an
/// object: crate::server) in the shape of every other failure of the profile: an `Error: ...`
/// text, and the refusal's members with `content` and `path` (the `path` argument when it is a
/// string, else empty) as `structuredContent`.
pub(crate) fn refusal(raw: &str, payload: Value) -> (String, Value, bool) {
    #[derive(serde::Deserialize)]
    struct Path {
        path: Option<Value>,
    }
    let path = serde_json::from_str::<Path>(raw)
        .ok()
        .and_then(|p| p.path)
        .and_then(|p| p.as_str().map(str::to_owned))
        .unwrap_or_default();
    let Value::Object(m) = payload else {
        return failure(
            &path,
            Map::new(),
            "Error: the arguments were refused".into(),
        );
    };
    let detail = m
        .get("failure_detail")
        .and_then(Value::as_str)
        .unwrap_or("the arguments were refused")
        .to_owned();
    failure(&path, m, format!("Error: {detail}"))
}

/// The text of an engine rejection of `edit_file`'s edits, naming the edit and the evidence:
/// the candidates of an ambiguous oldText, the near misses (whitespace ones first) of an
/// absent one, the versions of a stale file.
fn rejection_text(path: &str, v: &Value, edits: &[(String, String)]) -> String {
    let reason = v["failure_reason"].as_str().unwrap_or("rejected");
    let n = v["failed_change_id"]
        .as_str()
        .and_then(|c| c.strip_prefix("chg_"))
        .and_then(|d| d.parse::<usize>().ok());
    let which = n.map_or(String::new(), |n| format!(" {n}"));
    let old = n
        .and_then(|n| edits.get(n.wrapping_sub(1)))
        .map_or("", |e| e.0.as_str());
    let d = &v["diagnostic"];
    let mut t = match reason {
        "match_ambiguous" => {
            let count = d["occurrence_count"].as_u64().unwrap_or(0);
            let mut t = format!(
                "Error: oldText of edit{which} matches {count} places in {path}; it must match exactly one. Nothing was written. Include more surrounding lines to make it unique:\n{old}\nCandidates:"
            );
            for c in d["exact_candidates"]["candidates"]
                .as_array()
                .into_iter()
                .flatten()
            {
                t.push_str(&format!(
                    "\n  #{} at {}: …{}[{}]{}…",
                    c["occurrence_index"],
                    c["start"],
                    preview(c["before"].as_str().unwrap_or("")),
                    preview(c["match_preview"].as_str().unwrap_or("")),
                    preview(c["after"].as_str().unwrap_or(""))
                ));
            }
            t
        }
        "match_absent" => {
            let mut t = format!(
                "Error: Could not find exact match for edit{which} in {path}; nothing was written (whitespace is not adjusted):\n{old}"
            );
            let nm = &v["near_misses"];
            let ws: Vec<&Value> = nm["whitespace_candidates"]["candidates"]
                .as_array()
                .into_iter()
                .flatten()
                .collect();
            let near: Vec<&Value> = nm["candidates"].as_array().into_iter().flatten().collect();
            if !ws.is_empty() || !near.is_empty() {
                t.push_str("\nNear misses (copy the exact text from the file):");
            }
            for c in ws.into_iter().chain(near).take(5) {
                let at = match c["start_line"].as_u64() {
                    Some(l) => format!("line {l}"),
                    None => format!("code point {}", c["start"]),
                };
                t.push_str(&format!(
                    "\n  {at}: {}",
                    preview(c["text"].as_str().unwrap_or(""))
                ));
            }
            t
        }
        // A write (no edits) is redone as a write.
        "target_hash_mismatch" | "target_version_mismatch" => format!(
            "Error: {path} changed on disk since it was last read; nothing was written. Read it again with read_file, then {}.",
            if edits.is_empty() {
                "write it again if that is still wanted"
            } else {
                "redo the edit"
            }
        ),
        _ => {
            // Details that already say so are not followed by it twice (helper-118).
            let detail = v["failure_detail"].as_str().unwrap_or("");
            let detail = detail
                .trim_end_matches('.')
                .trim_end_matches("; nothing was written")
                .trim_end_matches("nothing was written")
                .trim_end_matches([';', ',', ' ']);
            format!(
                "Error: the {} {path} {} refused ({reason}): {detail}; nothing was written.",
                if edits.is_empty() {
                    "write of"
                } else {
                    "edits to"
                },
                if edits.is_empty() { "was" } else { "were" }
            )
        }
    };
    if let Some(id) = v["pdcp_log_id"].as_str() {
        t.push_str(&format!("\n(attempt logged as {id})"));
    }
    t
}

/// The rejection's structured record: the SQL answer without its full-text contexts.
fn rejection_record(v: &Value) -> Map<String, Value> {
    let mut m = v.as_object().cloned().unwrap_or_default();
    m.remove("current_context");
    if let Some(Value::Object(d)) = m.get_mut("diagnostic") {
        d.remove("failure_context");
    }
    m
}

/// Refuses `edits` (canonical LF, each replacing one place of `base`, the canonical text they are
/// sent against) when the file `rel` they publish would be larger than the profile reads: its
/// bytes past [`crate::workspace::IMPORT_MAX_BYTES`], or its import's arguments (the text
/// JSON-escaped) past [`crate::workspace::IMPORT_MAX_ARGUMENT_BYTES`]. `crlf`: the file is
/// published with CRLF line breaks (a byte more each, and two more escaped). The sizes are first
/// counted from the edits (each changes them by its newText's less its oldText's); only when that
/// count is over a limit are the edits applied here, as the engine applies them, to measure the
/// text itself: edits that do not apply are left to the engine to refuse as such (helper-120: an
/// absent oldText was answered "too large"). Before, an edit could leave a file the profile could
/// no longer read (helper-118: an 8 MiB file one edit past the limit, then refused by every
/// tool; three edits of control characters that made 22 MB of arguments).
fn edit_fits(
    ws: &Workspace,
    path: &str,
    rel: &str,
    base: &str,
    crlf: bool,
    edits: &[(String, String)],
) -> Result<(), (String, Value, bool)> {
    let breaks = |t: &str| {
        if crlf {
            t.bytes().filter(|&b| b == b'\n').count() as i64
        } else {
            0
        }
    };
    let bytes = |t: &str| t.len() as i64 + breaks(t);
    // The inside of the string literal: its length less the two quotes.
    let escaped = |t: &str| literal_str_len(t) as i64 - 2 + 2 * breaks(t);
    let (grow, grow_escaped) = edits.iter().fold((0i64, 0i64), |(b, e), (old, new)| {
        (b + bytes(new) - bytes(old), e + escaped(new) - escaped(old))
    });
    if grow <= 0 && grow_escaped <= 0 {
        return Ok(());
    }
    // The import's other arguments (the label, the binding) as they would be sent.
    let Ok(rest) = Server::import_args(ws, rel, "") else {
        return Ok(());
    };
    let rest = rest.len() as i64;
    let (max, max_escaped) = (
        crate::workspace::IMPORT_MAX_BYTES as i64,
        crate::workspace::IMPORT_MAX_ARGUMENT_BYTES as i64,
    );
    let over = |after: i64, after_escaped: i64| after > max || after_escaped > max_escaped;
    if !over(bytes(base) + grow, rest + escaped(base) + grow_escaped) {
        return Ok(());
    }
    let Some(text) = applied_here(base, edits) else {
        return Ok(());
    };
    let (after, after_escaped) = (bytes(&text), rest + escaped(&text));
    if !over(after, after_escaped) {
        return Ok(());
    }
    Err(invalid(
        path,
        "workspace_file_too_large",
        &format!(
            "the edits would make {path} {after} bytes ({after_escaped} once JSON-escaped for the database); files of at most {max} bytes ({max_escaped} escaped) are read, edited and written, so it could not be read again; nothing was written"
        ),
    ))
}

/// `edits` applied to `before` as the engine applies them (each oldText once), or `None` when
/// they do not apply.
fn applied_here(before: &str, edits: &[(String, String)]) -> Option<String> {
    use patchdiff_engine::api::{target::TargetView, tx1};
    let sent: Vec<Value> = edits
        .iter()
        .map(|(o, n)| json!({"match": o, "replace": n}))
        .collect();
    let (_, parsed) = tx1::parse(Some(&json!("edit_file")), Some(&Value::Array(sent))).ok()?;
    let view = TargetView {
        target_file_id: "",
        version: 0,
        current_hash: "",
        content: before,
    };
    tx1::apply(&view, &parsed).ok().map(|a| a.content)
}

/// The edits of an `edit_file` call, canonical LF, or the refusal's (code, message).
fn parse_edits(v: Option<&Value>) -> Result<Vec<(String, String)>, (&'static str, &'static str)> {
    let edits = parse_edit_list(v).map_err(|why| ("invalid_edits", why))?;
    // A lone CR is not a line ending the file could keep byte for byte: the published text
    // would have a line break there (helper-114: `o\rne` was accepted and `o\nne` written),
    // so it is refused as `write_file` refuses it.
    if edits.iter().any(|(_, new)| new.contains('\r')) {
        return Err((
            "mixed_line_endings",
            "a newText has a carriage return that does not end a line (a lone CR), which could not be written byte for byte; use the file's line endings",
        ));
    }
    Ok(edits)
}

/// `edit_file`'s edits: `[{oldText, newText}]`, canonical LF (the reference server normalizes
/// line endings the same way).
fn parse_edit_list(v: Option<&Value>) -> Result<Vec<(String, String)>, &'static str> {
    let items = v
        .and_then(Value::as_array)
        .ok_or("edits must be an array of {oldText, newText}")?;
    if items.is_empty() {
        return Err("edits must not be empty");
    }
    if items.len() > MAX_EDITS {
        return Err("too many edits in one call (at most 1,000)");
    }
    items
        .iter()
        .map(|e| {
            let o = e
                .as_object()
                .filter(|o| o.keys().all(|k| k == "oldText" || k == "newText"))
                .ok_or("each edit must be an object {oldText, newText} and nothing else")?;
            let s = |k: &str| o.get(k).and_then(Value::as_str).map(canonical);
            match (s("oldText"), s("newText")) {
                (Some(old), Some(new)) if !old.is_empty() => Ok((old, new)),
                (Some(_), Some(_)) => Err("oldText must not be empty"),
                _ => Err("each edit needs oldText and newText strings"),
            }
        })
        .collect()
}

/// An error of the infrastructure (a failed SQL call), for which the outcome may be unknown.
fn unknown(path: &str, what: &str, detail: String) -> (String, Value, bool) {
    let mut m = Map::new();
    m.insert("status".into(), json!("outcome_unknown"));
    m.insert("failure_detail".into(), json!(detail));
    failure(
        path,
        m,
        format!("Error: {what} failed ({detail}); read the file before trying again."),
    )
}

/// A failed SQL call's answer: cancelled (a statement timeout, the client's cancellation) or
/// refused by a partition, nothing was written, as the other profiles answer it
/// ([`crate::server::call_failure`]); otherwise its outcome is unknown ([`unknown`]). A statement
/// timeout during an import was answered `outcome_unknown` (helper-120).
fn db_failed(path: &str, what: &str, e: &CallError) -> (String, Value, bool) {
    if e.cancelled.is_none() && !e.unavailable && !e.login_refused {
        return unknown(path, what, e.message.clone());
    }
    let v = crate::server::call_failure(what, e, "", "");
    let Value::Object(mut m) = v else {
        return unknown(path, what, e.message.clone());
    };
    m.remove("tool");
    let detail = m
        .get("failure_detail")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    failure(path, m, format!("Error: {what}: {detail}"))
}

impl Server {
    /// One call of a file tool: its text (the reference server's shape), its structured
    /// record and whether it is an error.
    pub(crate) async fn files_call(&mut self, tool: Tool, raw: &str) -> (String, Value, bool) {
        // A string with an escaped lone surrogate is valid JSON that no Rust string holds: such
        // arguments used to be read as none, and were answered "the path is empty" or "content
        // must be a string" (helper-114).
        let args: Map<String, Value> = match serde_json::from_str(raw) {
            Ok(a) => a,
            Err(e) => {
                return invalid(
                    "",
                    "invalid_arguments",
                    &format!(
                        "the arguments could not be read as text ({e}): a string with an escaped lone surrogate (\\uD800 to \\uDFFF without its pair) names no file and is no file's text; nothing was read or written"
                    ),
                );
            }
        };
        let path = args.get("path").and_then(Value::as_str).unwrap_or_default();
        // Held apart for the call, so the steps can borrow the session mutably beside it; put
        // back below (the files profile is served over stdio only, where a call is never
        // dropped half-way).
        let Some(ws) = self.workspace.take() else {
            return invalid(
                path,
                "workspace_not_configured",
                "the files profile needs PATCHDIFF_WORKSPACE_ROOT",
            );
        };
        let answer = match relative(&ws, path) {
            _ if args.get("path").is_some_and(|p| !p.is_string()) => invalid(
                path,
                "workspace_path_invalid",
                "path must be a string: a path under the workspace root, or relative to it",
            ),
            Err((code, why)) => invalid(path, code, &why),
            Ok(rel) => match tool {
                Tool::ReadFile => self.read_file(&ws, path, &rel, &args).await,
                Tool::EditFile => self.edit_file(&ws, path, &rel, &args).await,
                _ => self.write_file(&ws, path, &rel, &args).await,
            },
        };
        self.workspace = Some(ws);
        answer
    }

    /// One autocommit SQL call of a read-only function, its answer parsed.
    async fn sql(&mut self, function: &str, args: &Value) -> Result<Value, CallError> {
        let text = self.db.call(function, &to_string(args, LITERAL)).await?;
        serde_json::from_str(&text).map_err(|e| CallError::unknown(e.to_string()))
    }

    /// The target an edit or overwrite of `rel` (whose bytes are `disk`) applies to: the one
    /// found, else a new import (import on first use).
    ///
    /// A known target is read from the database on every write, whatever this process remembers
    /// of it: another process may have moved it on and back to the same text (an edit and its
    /// revert), and a resend keyed on the version remembered was then answered with the first
    /// edit's recorded outcome, "already applied", though the file did not hold it (helper-91).
    /// Also the target's length in code points when it was read (`None` for a new import).
    async fn target_for_write(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        disk: &str,
    ) -> Result<(Entry, Option<u64>), (String, Value, bool)> {
        // A process that knows no target of the file (its first call on it) takes the newest
        // one holding the disk's text, as a read would, else the newest: a resend from a new
        // process found the file's newest target, not the one its first send had changed, and
        // was refused as stale (helper-123).
        let known = match self.files.entries.get(rel) {
            Some(e) => Ok(Some(e.clone())),
            None => {
                let hd = sha256_hex(canonical(disk).as_bytes());
                let skip = self.files.refused.get(rel).cloned().unwrap_or_default();
                match self.look_up(ws, rel, Some((&hd, &skip))).await {
                    Ok(None) => self.look_up(ws, rel, None).await,
                    found => found,
                }
            }
        };
        match known {
            // The target this process knows, as the database has it now: another process's
            // publication may have moved it on to the disk's text. Never another target of the
            // file, though one may hold the disk's text: only a read takes one. Taking the
            // newest target with the disk's text (helper-114), then a target made after this
            // process's (helper-118), then the file's newest (helper-120), each still let an edit
            // or a write through over a change made outside that nobody had read since: a file
            // changed back to an older version's text, whose target a read, an import race or a
            // read of another version had left the newest (helper-118, helper-120, helper-122).
            Ok(Some(e)) => self
                .current(rel, e)
                .await
                .map_err(|e| db_failed(path, "looking the file up", &e)),
            // Serialized with other processes' imports of the file, as a read's (helper-120: two
            // processes' first edits at once gave 4 of 60 files two targets). The import reads
            // the file again: if its bytes are not the ones the call read (another text, or the
            // same text in other line endings), the call is refused, nothing written. The guard
            // (the hash of the canonical text) let a change of line endings alone through, and the
            // edit was published in the line endings of its first read over a CRLF re-save
            // (helper-124: 79 of 80).
            Ok(None) => {
                let (e, now) = self.import_once(ws, rel).await?;
                if now != disk {
                    let mut m = Map::new();
                    m.insert("status".into(), json!("rejected"));
                    m.insert("failure_reason".into(), json!("external_disk_drift"));
                    return Err(failure(
                        path,
                        m,
                        format!(
                            "Error: {path} changed on disk while this call read it; nothing was written. Read it again with read_file, then try again."
                        ),
                    ));
                }
                Ok((e, None))
            }
            Err(e) => Err(db_failed(path, "looking the file up", &e)),
        }
    }

    /// The file's other targets (both labels, owned by this role, on the first page of each
    /// label) whose text has the hash `hd`, but `but`: at most [`MAX_TWINS`].
    async fn twins(
        &mut self,
        ws: &Workspace,
        rel: &str,
        hd: &str,
        but: &str,
    ) -> Result<Vec<Entry>, CallError> {
        let me = self.db.current_role().await?;
        let mut out = Vec::new();
        for label in [label(ws, rel), legacy_label(ws, rel)] {
            let v = self
                .sql(
                    "patchdiff_list_targets",
                    &json!({"filename_prefix": label, "limit": LOOKUP_LIMIT}),
                )
                .await?;
            out.extend(
                v["targets"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|t| {
                        t["filename"].as_str() == Some(label.as_str())
                            && t["owner"].as_str() == Some(me.as_str())
                            && t["current_hash"].as_str() == Some(hd)
                            && t["target_file_id"].as_str() != Some(but)
                    })
                    .map(|t| Entry {
                        target_file_id: t["target_file_id"].as_str().unwrap_or_default().to_owned(),
                        version: t["version"].as_i64().unwrap_or(0),
                        hash: hd.to_owned(),
                        read_at_version: None,
                        last_call: None,
                    }),
            );
        }
        out.truncate(MAX_TWINS);
        Ok(out)
    }

    /// `e` as the database has it now, and its text's length in code points.
    async fn current(
        &mut self,
        rel: &str,
        mut e: Entry,
    ) -> Result<(Entry, Option<u64>), CallError> {
        let v = self
            .sql(
                "patchdiff_read_target",
                &json!({"target_file_id": e.target_file_id, "start": 0, "length": 1}),
            )
            .await?;
        if let (Some("ok"), Some(version), Some(hash)) = (
            v["status"].as_str(),
            v["version"].as_i64(),
            v["current_hash"].as_str(),
        ) && (version, hash) != (e.version, e.hash.as_str())
        {
            e.version = version;
            e.hash = hash.to_owned();
            self.files.entries.insert(rel.to_owned(), e.clone());
        }
        Ok((e, v["total_chars"].as_u64()))
    }

    /// `e` as the database has it now when its text is not `hd`, the disk's: this process may
    /// know an older version (another process, or a call whose answer it never had, made the
    /// newer one). Without this the file was imported again as a new target, its history split
    /// in two (helper-54), or an edit was refused as stale against a version long gone.
    async fn refreshed(&mut self, rel: &str, e: Entry, hd: &str) -> Result<Entry, CallError> {
        if e.hash == hd {
            return Ok(e);
        }
        self.current(rel, e).await.map(|(e, _)| e)
    }

    /// The target bound to `rel`, if this process or an earlier one imported it: the cache,
    /// else the newest target labelled for this root and path. Its hash may differ from the
    /// disk's: the file changed on disk since it was imported or published (stale).
    ///
    /// After a publication found the file's bytes changed on disk (`reimport`), a `read_file`
    /// imports the file again ([`Server::current_target`]); an edit or a write keeps the target,
    /// whose guards refuse it until the agent has read the file. An edit resent without a read
    /// used to import it, and applied itself a second time to a disk that already held it
    /// (helper-91).
    async fn find_target(&mut self, ws: &Workspace, rel: &str) -> Result<Option<Entry>, CallError> {
        if let Some(e) = self.files.entries.get(rel) {
            return Ok(Some(e.clone()));
        }
        self.look_up(ws, rel, None).await
    }

    /// The file's newest target (of this root and path, owned by this very role) or, given
    /// `prefer`, the newest of them whose text has that hash and is not among the targets to
    /// skip (none if none is); remembered as the file's.
    async fn look_up(
        &mut self,
        ws: &Workspace,
        rel: &str,
        prefer: Option<(&str, &std::collections::HashSet<String>)>,
    ) -> Result<Option<Entry>, CallError> {
        // Only a target this very role owns: any role can make a target with this label and
        // grant it to another, which would then send its edits there (another tenant reads them
        // in its log) or be refused on it for good (helper-48); `access: "owner"` would also
        // take one of a group role the front end's role inherits, which another member may have
        // made (helper-52). Others' targets whose names start with the label can fill whole
        // pages: a few pages are read, newest first; past them the file is imported again, as a
        // new target of its own (newest, so found on the first page next time). Refusing
        // instead let any role that knows the label stop the file's reads and edits with 4,000
        // targets made and granted in one statement (helper-53).
        let me = match &self.files.me {
            Some(me) => me.clone(),
            None => {
                let me = self.db.current_role().await?;
                self.files.me = Some(me.clone());
                me
            }
        };
        let matches = |t: &Value| {
            prefer.is_some_and(|(h, skip)| {
                t["current_hash"].as_str() == Some(h)
                    && t["target_file_id"]
                        .as_str()
                        .is_some_and(|id| !skip.contains(id))
            })
        };
        // Each label's newest target and newest one with the hash: this key's label, and the
        // one front ends gave before labels named their key (a front end of that version may
        // still run on the same root and key, so neither is taken to be the newer).
        let (mut newest, mut matching): (Vec<Value>, Vec<Value>) = (Vec::new(), Vec::new());
        for label in [label(ws, rel), legacy_label(ws, rel)] {
            let (mut first, mut found) = (None, None);
            let mut cursor = Value::Null;
            for _ in 0..LOOKUP_PAGES {
                let v = self
                    .sql(
                        "patchdiff_list_targets",
                        &json!({"filename_prefix": label, "limit": LOOKUP_LIMIT, "cursor": cursor}),
                    )
                    .await?;
                for t in v["targets"].as_array().into_iter().flatten().filter(|t| {
                    t["filename"].as_str() == Some(label.as_str())
                        && t["owner"].as_str() == Some(me.as_str())
                }) {
                    if first.is_none() {
                        first = Some(t.clone());
                    }
                    if matches(t) {
                        found = Some(t.clone());
                        break;
                    }
                }
                cursor = v["next_cursor"].clone();
                let done = first.is_some() && (prefer.is_none() || found.is_some());
                if done || !cursor.is_string() {
                    break;
                }
            }
            if first.is_none() && cursor.is_string() {
                tracing::warn!(
                    label,
                    "the role sees more than {} targets named like this file's label: the file is imported again as a new target",
                    LOOKUP_PAGES as u64 * LOOKUP_LIMIT
                );
            }
            newest.extend(first);
            matching.extend(found);
        }
        // `created_at` is RFC 3339 in UTC with microseconds: its text orders as its time.
        let latest = |ts: Vec<Value>| {
            ts.into_iter()
                .max_by(|a, b| a["created_at"].as_str().cmp(&b["created_at"].as_str()))
        };
        let found = match prefer {
            None => latest(newest),
            Some(_) => latest(matching),
        };
        let entry = found.map(|t| Entry {
            target_file_id: t["target_file_id"].as_str().unwrap_or_default().to_owned(),
            version: t["version"].as_i64().unwrap_or(0),
            hash: t["current_hash"].as_str().unwrap_or_default().to_owned(),
            read_at_version: None,
            last_call: None,
        });
        if let Some(e) = &entry {
            self.files.entries.insert(rel.to_owned(), e.clone());
        }
        Ok(entry)
    }

    /// The arguments that import `rel` (whose bytes are `disk`) as a new target bound to it,
    /// with this front end's binding proof (a new nonce each time).
    fn import_args(ws: &Workspace, rel: &str, disk: &str) -> Result<String, (String, Value, bool)> {
        // The target's filename is the label, a little longer than the path: a path the
        // workspace takes can still make a label over the extension's limit, which it refused
        // as "filename must be at most 4096 bytes", a name the caller never gave (helper-94).
        let name = label(ws, rel);
        if name.len() > patchdiff_engine::api::limits::FILENAME_MAX_BYTES {
            return Err(invalid(
                rel,
                "path_too_long",
                &format!(
                    "{rel} is {} bytes long; with the files profile's prefix ({} bytes) it is over the {}-byte limit of a target's name, so it cannot be imported; nothing was written",
                    rel.len(),
                    name.len() - rel.len(),
                    patchdiff_engine::api::limits::FILENAME_MAX_BYTES
                ),
            ));
        }
        // A new file's text comes from the call: no larger than a file the profile reads, edits
        // and writes (helper-114: a 10 MiB `write_file` made a file every later call refused).
        if disk.len() as u64 > crate::workspace::IMPORT_MAX_BYTES {
            return Err(invalid(
                rel,
                "workspace_file_too_large",
                &format!(
                    "the text is {} bytes; files of at most {} bytes are read, edited and written; nothing was written",
                    disk.len(),
                    crate::workspace::IMPORT_MAX_BYTES
                ),
            ));
        }
        let binding = ws
            .binding(rel)
            .map_err(|r| invalid(rel, r.code, &r.detail))?;
        let args = to_string(
            &json!({"filename": name, "content": disk, "content_type": "text/plain", "workspace_binding": binding}),
            LITERAL,
        );
        // As the workspace profile's import: refused here, before the text is sent, rather than
        // answered `arguments_too_large` for a call whose own arguments were a path (helper-50,
        // helper-114: 8 MiB of U+0001 made 48 MB of arguments).
        if args.len() > crate::workspace::IMPORT_MAX_ARGUMENT_BYTES {
            return Err(invalid(
                rel,
                "workspace_file_too_large",
                &format!(
                    "the file's text is {} bytes once JSON-escaped for the database (control characters take six bytes each, quotes and backslashes two); the limit is {} bytes; nothing was written",
                    args.len(),
                    crate::workspace::IMPORT_MAX_ARGUMENT_BYTES
                ),
            ));
        }
        Ok(args)
    }

    /// Imports `rel` (whose bytes are `disk`) as a new target bound to it, outside any
    /// transaction.
    async fn import(
        db: &mut Db,
        ws: &Workspace,
        rel: &str,
        disk: &str,
    ) -> Result<Entry, (String, Value, bool)> {
        let args = Server::import_args(ws, rel, disk)?;
        Server::import_with(db, rel, &args, false).await
    }

    /// Imports `rel` with its import arguments `args`; `db` runs it in the open transaction
    /// when `in_tx`.
    async fn import_with(
        db: &mut Db,
        rel: &str,
        args: &str,
        in_tx: bool,
    ) -> Result<Entry, (String, Value, bool)> {
        let text = if in_tx {
            db.call_in_transaction("patchdiff_initialize_target", args)
                .await
        } else {
            db.call("patchdiff_initialize_target", args).await
        }
        .map_err(|e| db_failed(rel, "importing the file", &e))?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match (v["target_file_id"].as_str(), v["current_hash"].as_str()) {
            (Some(id), Some(h)) => Ok(Entry {
                target_file_id: id.to_owned(),
                version: v["version"].as_i64().unwrap_or(0),
                hash: h.to_owned(),
                read_at_version: None,
                last_call: None,
            }),
            _ => {
                let mut m = rejection_record(&v);
                m.insert(
                    "status".into(),
                    v.get("status").cloned().unwrap_or(json!("rejected")),
                );
                let detail = v["failure_detail"]
                    .as_str()
                    .unwrap_or("the import was refused");
                Err(failure(rel, m, format!("Error: importing {rel}: {detail}")))
            }
        }
    }

    /// The file's bytes as UTF-8 text (the workspace's import rules: a regular file under the
    /// root, no link followed, at most 8 MiB, UTF-8).
    fn disk(ws: &Workspace, path: &str, rel: &str) -> Result<String, (String, Value, bool)> {
        ws.import(rel).map_err(|r| {
            let mut m = Map::new();
            m.insert("status".into(), json!("rejected"));
            m.insert("failure_reason".into(), json!(r.code));
            m.insert("failure_detail".into(), json!(r.detail));
            let text = match r.code {
                "workspace_file_not_utf8" => format!(
                    "Error: {path} is not UTF-8 text; the files profile reads and edits only UTF-8 files. Nothing was read or written."
                ),
                "workspace_file_not_found" => {
                    format!("Error: ENOENT: no such file or directory, open '{path}'")
                }
                _ => format!("Error: {path}: {} ({})", r.detail, r.code),
            };
            failure(path, m, text)
        })
    }

    /// The target for a file read now, and the text read: the known one if its text is the
    /// disk's, else a new import (the file changed on disk since it was imported, or was never
    /// imported).
    ///
    /// The disk is read before the database: a publication by another process may have
    /// installed the file and committed in between, so that the database is newer than the
    /// bytes read. Then the file is read once more, and when it now holds the target's text,
    /// that is what was read (helper-114: two processes each reading, writing and editing one
    /// file 150 times split its history over 49 targets, each read that lost this race
    /// importing the text of a version already replaced).
    async fn current_target(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        disk: String,
    ) -> Result<(Entry, String), (String, Value, bool)> {
        let hd = sha256_hex(canonical(&disk).as_bytes());
        let found = match self.files.reimport.remove(rel) {
            None => self.find_target(ws, rel).await,
            Some(None) => Ok(None),
            Some(Some(_)) => {
                let skip = self.files.refused.get(rel).cloned().unwrap_or_default();
                self.look_up(ws, rel, Some((&hd, &skip))).await
            }
        }
        .map_err(|e| db_failed(rel, "looking the file up", &e))?;
        let found = match found {
            Some(e) => Some(
                self.refreshed(rel, e, &hd)
                    .await
                    .map_err(|e| db_failed(rel, "looking the file up", &e))?,
            ),
            None => None,
        };
        let Some(mut e) = found else {
            return self.import_once(ws, rel).await;
        };
        let (mut disk, mut hd) = (disk, hd);
        // A publication holds the directory's lease until it has committed, and a read takes
        // it: the database, asked after a read, is never older than what was read, unless the
        // file was changed by someone else. A few rounds while other processes keep publishing.
        for _ in 0..READ_AGAIN {
            if e.hash == hd {
                return Ok((e, disk));
            }
            disk = Self::disk(ws, path, rel)?;
            hd = sha256_hex(canonical(&disk).as_bytes());
            e = self
                .refreshed(rel, e, &hd)
                .await
                .map_err(|e| db_failed(rel, "looking the file up", &e))?;
        }
        if e.hash == hd {
            return Ok((e, disk));
        }
        // Another target of the file may hold this text: two processes whose first reads were at
        // once imported it twice, and the one whose target the other then published to went on
        // importing on each read, as its own target fell behind (helper-114: 40 targets in 100
        // rounds of two processes). The file's targets are looked up again for one with it.
        let skip = self.files.refused.get(rel).cloned().unwrap_or_default();
        let found = self
            .look_up(ws, rel, Some((&hd, &skip)))
            .await
            .map_err(|e| db_failed(rel, "looking the file up", &e))?;
        if let Some(e) = found {
            return Ok((e, disk));
        }
        self.import_once(ws, rel).await
    }

    /// The target of `rel` for a call that found none with the text it read, and the text it
    /// holds: processes on one database take an advisory lock on the file's label for their
    /// import, read the file again once they hold it, look again for a target with that text,
    /// and import it only when there is none. Two processes whose first reads of a file came at
    /// once imported it twice (helper-114). The lock is waited for at most [`IMPORT_LOCK_WAIT`]
    /// (any role sees its key in `pg_locks` and may hold it); past it the file is read, looked
    /// for and imported the same way.
    async fn import_once(
        &mut self,
        ws: &Workspace,
        rel: &str,
    ) -> Result<(Entry, String), (String, Value, bool)> {
        let key = ws.import_lock_key(&label(ws, rel));
        let locked = self
            .db
            .try_advisory_lock(IMPORT_LOCK_CLASS, key, IMPORT_LOCK_WAIT)
            .await
            .map_err(|e| db_failed(rel, "looking the file up", &e))?;
        ws.hook("before_import");
        let imported = async {
            // Read under the lock: what the caller read may have been replaced meanwhile
            // (another process's publication, or the import this lock waited for), and importing
            // it made a second target of a text the file no longer held (helper-122: two first
            // edits at once, 7 files of 60). Refusing such a read instead left a file another
            // program keeps writing never read (helper-123).
            let disk = Self::disk(ws, rel, rel)?;
            let hd = sha256_hex(canonical(&disk).as_bytes());
            // Looked for again even without the lock (another role holding it, which
            // `pg_locks` shows every role: helper-122), before a second target is made.
            let skip = self.files.refused.get(rel).cloned().unwrap_or_default();
            let found = self
                .look_up(ws, rel, Some((&hd, &skip)))
                .await
                .map_err(|e| db_failed(rel, "looking the file up", &e))?;
            let e = match found {
                Some(e) => e,
                None => Server::import(&mut self.db, ws, rel, &disk).await?,
            };
            Ok((e, disk))
        }
        .await;
        if locked {
            self.db.advisory_unlock(IMPORT_LOCK_CLASS, key).await;
        }
        imported
    }

    async fn read_file(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        args: &Map<String, Value>,
    ) -> (String, Value, bool) {
        let n = |k: &str| args.get(k).filter(|v| !v.is_null());
        let (head, tail) = (n("head"), n("tail"));
        if head.is_some() && tail.is_some() {
            return invalid(
                path,
                "invalid_arguments",
                "Cannot specify both head and tail parameters simultaneously",
            );
        }
        if head.is_some_and(|h| h.as_u64().is_none()) || tail.is_some_and(|t| t.as_u64().is_none())
        {
            return invalid(
                path,
                "invalid_arguments",
                "head and tail must be non-negative integers",
            );
        }
        let disk = match Self::disk(ws, path, rel) {
            Ok(d) => d,
            Err(a) => return a,
        };
        ws.hook("after_read");
        let (mut entry, disk) = match self.current_target(ws, path, rel, disk).await {
            Ok(e) => e,
            Err(a) => return a,
        };
        entry.read_at_version = Some(entry.version);
        let text = if head.is_some() || tail.is_some() {
            head_tail(
                &disk,
                head.and_then(Value::as_u64),
                tail.and_then(Value::as_u64),
            )
        } else {
            disk
        };
        let v = json!({"content": text, "status": "ok", "path": path,
            "target_file_id": entry.target_file_id, "version": entry.version, "current_hash": entry.hash});
        self.files.entries.insert(rel.to_owned(), entry);
        (text, v, false)
    }

    /// Whether an `edit_file` of `edits` is the resend of the call that made the current
    /// version: the last accepted call this process knows of, or, when it knows none, the
    /// attempt log's newest acceptance, whose key must be these edits' key at the version and
    /// text it was based on, and whose record must hold these very edits. Its record (with its
    /// `client_request_id`) when it is.
    async fn is_retry(
        &mut self,
        entry: &Entry,
        rel: &str,
        edits: &[(String, String)],
    ) -> Result<Option<Value>, CallError> {
        if entry.version < 1 || entry.read_at_version == Some(entry.version) {
            return Ok(None);
        }
        match &entry.last_call {
            // This process's last call, when it made the current version and changed the text
            // (a call that changed nothing hides no earlier one: helper-97).
            Some((k, v, base_hash)) if *v == entry.version && *base_hash != entry.hash => {
                let prev = request_key(rel, edits, v - 1, base_hash);
                return Ok((*k == prev).then(|| json!({"client_request_id": k})));
            }
            _ => {}
        }
        // The acceptance that made the current text: the newest one that changed it. Versions
        // that changed nothing (a write of the same text, in the same or other line endings, by
        // this process or another) are passed over, up to a page of them: a resend after one of
        // them was taken for a new request and applied a second time (helper-93, helper-95).
        let args = json!({"target_file_id": entry.target_file_id, "status": "accepted",
                          "limit": NO_OP_VERSIONS_PASSED + 1});
        let page = self.sql("patchdiff_get_pdcp_log", &args).await?;
        let Some(row) = page["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["before_hash"] != r["after_hash"])
            .cloned()
        else {
            return Ok(None);
        };
        let Some(made) = row["after_version"].as_i64() else {
            return Ok(None);
        };
        // Read since that call made the text: the same edit is a new request (helper-97: a
        // version that changed nothing in between made it answer "already applied").
        if entry.read_at_version.is_some_and(|r| r >= made) {
            return Ok(None);
        }
        let key = request_key(
            rel,
            edits,
            made - 1,
            row["before_hash"].as_str().unwrap_or_default(),
        );
        if row["after_hash"].as_str() != Some(entry.hash.as_str())
            || row["client_request_id"].as_str() != Some(key.as_str())
        {
            return Ok(None);
        }
        // The key is only a claim: any role that may write the target can send it with other
        // edits (helper-56: another role's different edit, sent with the key this call would
        // have, made it answer "already applied" for edits never made). The record must hold
        // these edits, as this front end sends them.
        let args = json!({"target_file_id": entry.target_file_id, "client_request_id": key,
                          "include_content": true, "limit": 1});
        let Some(full) = self.sql("patchdiff_get_pdcp_log", &args).await?["entries"]
            .as_array()
            .and_then(|e| e.first())
            .cloned()
        else {
            return Ok(None);
        };
        let sent: Vec<Value> = edits
            .iter()
            .map(|(o, n)| json!({"match": o, "replace": n}))
            .collect();
        let record: Value = full["pdcp_content"]
            .as_str()
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or(Value::Null);
        let same = full["pdcp_log_id"] == row["pdcp_log_id"]
            && record["protocol_version"] == "patchdiff-tx/1"
            && record["edits"].as_array() == Some(&sent);
        Ok(same.then_some(row))
    }

    /// Whether the disk (its canonical text's hash `hd`) holds exactly what `submission`'s
    /// edits make of the target's current text, as `entry` knows it: then these edits were
    /// installed by a call interrupted before its commit (a killed front end; docs/workspace.md
    /// "Reconciling after `partial` or a crash"), and the target's text, which they were sent
    /// against, is returned. The same call sent again was refused as a change on disk, with the
    /// advice to read the file again and redo the edit, which applied it a second time
    /// (helper-89: `x = 1` became `x = 1 + 1 + 1`). Read only: a preview of the edits on the
    /// target's text, then that text itself.
    ///
    /// The preview runs only when the lengths agree: the target's (`target_chars`, when it was
    /// read) changed by what each edit adds or removes is the disk's (`disk_chars`). Any edit of
    /// a stale file used to pay for a whole preview before its refusal (helper-91: 1.1 to 1.4 s
    /// for 1,000 edits of an 8 MB file, where the refusal alone took 9 ms).
    #[allow(clippy::too_many_arguments)]
    async fn interrupted_publication(
        &mut self,
        entry: &Entry,
        submission: &Value,
        hd: &str,
        edits: &[(String, String)],
        target_chars: Option<u64>,
        disk_chars: u64,
    ) -> Result<Option<String>, CallError> {
        let growth: i128 = edits
            .iter()
            .map(|(old, new)| new.chars().count() as i128 - old.chars().count() as i128)
            .sum();
        if target_chars.is_some_and(|t| i128::from(t) + growth != i128::from(disk_chars)) {
            return Ok(None);
        }
        let mut preview = submission.clone();
        preview["expected_current_hash"] = json!(entry.hash);
        preview["format"] = json!("patchdiff-tx/1");
        preview.as_object_mut().map(|m| m.remove("source"));
        let v = self.sql("patchdiff_preview", &preview).await?;
        if v["status"] != "accepted" || v["after_hash"].as_str() != Some(hd) {
            return Ok(None);
        }
        let t = self
            .sql(
                "patchdiff_get_target",
                &json!({"target_file_id": entry.target_file_id}),
            )
            .await?;
        // The text the preview saw; if the target moved on since, the submission's guards
        // refuse it as they would have.
        if t["current_hash"].as_str() != Some(entry.hash.as_str()) {
            return Ok(None);
        }
        Ok(t["current_content"].as_str().map(str::to_owned))
    }

    async fn edit_file(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        args: &Map<String, Value>,
    ) -> (String, Value, bool) {
        let edits = match parse_edits(args.get("edits")) {
            Ok(e) => e,
            Err((code, why)) => return invalid(path, code, why),
        };
        let dry_run = match args.get("dryRun") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return invalid(path, "invalid_arguments", "dryRun must be a boolean"),
        };
        let disk = match Self::disk(ws, path, rel) {
            Ok(d) => d,
            Err(a) => return a,
        };
        if eol(&disk) == Eol::Mixed {
            return invalid(
                path,
                "mixed_line_endings",
                &format!(
                    "{path} mixes line endings (LF, CRLF or lone CR); its bytes could not be kept as they are, so it is not edited. Normalize its line endings first."
                ),
            );
        }
        let before = canonical(&disk);
        let hd = sha256_hex(before.as_bytes());
        // This process's first call on the file: the target it takes is a guess (the newest
        // holding the disk's text), so a resend is also looked for on the file's other targets
        // holding that text, below.
        let first_call = !self.files.entries.contains_key(rel);
        // Import on first use; a known target whose text is not the disk's is stale: the
        // submission's hash guard refuses it, and the refusal is logged.
        let (entry, target_chars) = match self.target_for_write(ws, path, rel, &disk).await {
            Ok(e) => e,
            Err(a) => return a,
        };
        let mut submission = json!({
            "target_file_id": entry.target_file_id,
            "intent": format!("edit_file {rel}"),
            "edits": edits.iter().map(|(o, n)| json!({"match": o, "replace": n})).collect::<Vec<_>>(),
            "expected_target_version": entry.version,
            "expected_current_hash": hd,
            "source": "files/edit_file",
        });
        // A disk one edit ahead of the target: is it this very call, interrupted between the
        // file's installation and its commit (a killed front end)? Then it is recorded now, on
        // the text it was sent against, with the key it had; a dry run previews it there too.
        let (mut before, mut base_hash) = (before, hd.clone());
        if entry.hash != base_hash {
            let disk_chars = before.chars().count() as u64;
            match self
                .interrupted_publication(
                    &entry,
                    &submission,
                    &base_hash,
                    &edits,
                    target_chars,
                    disk_chars,
                )
                .await
            {
                Ok(Some(sent_against)) => {
                    submission["expected_current_hash"] = json!(entry.hash);
                    (before, base_hash) = (sent_against, entry.hash.clone());
                }
                Ok(None) => {}
                Err(e) => return db_failed(path, "checking for an interrupted call", &e),
            }
        }
        // The resend of the call that made the current version: a dry run answers what the call
        // would (helper-93: it previewed applying the edits again).
        if entry.hash == hd && (entry.version >= 1 || first_call) {
            // A new process's resend may belong to another target holding the same text (the
            // file held it earlier, made outside and read, then went back): it was taken for a
            // new call there and applied a second time (helper-124: `x = 1 + 1 + 1`).
            let mut candidates = vec![entry.clone()];
            if first_call {
                match self.twins(ws, rel, &hd, &entry.target_file_id).await {
                    Ok(twins) => candidates.extend(twins),
                    Err(e) => return db_failed(path, "checking for a resent call", &e),
                }
            }
            for candidate in candidates {
                match self.is_retry(&candidate, rel, &edits).await {
                    Ok(Some(rec)) => {
                        self.files.entries.insert(rel.to_owned(), candidate.clone());
                        return deduplicated(
                            path,
                            &candidate.target_file_id,
                            candidate.version,
                            &candidate.hash,
                            &rec["client_request_id"],
                            &rec["pdcp_log_id"],
                        );
                    }
                    Ok(None) => {}
                    Err(e) => return db_failed(path, "checking for a resent call", &e),
                }
            }
        }
        // After the resends, which change nothing (helper-120: a resend of an edit that grew the
        // file was counted as growing it again, and refused). A file without a line break is
        // published with the import's line endings, which are not known here: counted as CRLF.
        let crlf = matches!(eol(&disk), Eol::Crlf | Eol::None);
        if let Err(a) = edit_fits(ws, path, rel, &before, crlf, &edits) {
            return a;
        }
        if dry_run {
            submission["format"] = json!("patchdiff-tx/1");
            submission.as_object_mut().map(|m| m.remove("source"));
            return self.dry_run(path, &before, &edits, &submission).await;
        }
        let key = request_key(rel, &edits, entry.version, &base_hash);
        submission["client_request_id"] = json!(key);
        let outcome = self
            .submit_and_publish(
                ws,
                path,
                rel,
                Call::Edit,
                &submission,
                disk_eol_format(&disk),
                &entry,
            )
            .await;
        let (v, after) = match outcome {
            Submitted::Published(v, after) => (v, after),
            Submitted::Answer(a) => return a,
            Submitted::Deduplicated(v) => {
                return deduplicated(
                    path,
                    &entry.target_file_id,
                    v["version"].as_i64().unwrap_or(entry.version + 1),
                    v["after_hash"].as_str().unwrap_or_default(),
                    &json!(key),
                    &v["pdcp_log_id"],
                );
            }
            Submitted::Rejected(mut v) => {
                self.near_misses(&mut v, &submission).await;
                let text = rejection_text(path, &v, &edits);
                return failure(path, rejection_record(&v), text);
            }
        };
        let facts = v["evidence"]["changes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let diff = apply_facts(&before, &edits, &facts, &after.hash)
            .map(|new| unified_diff(path, &before, &new));
        let mut e = after;
        e.last_call = Some((key, e.version, base_hash));
        self.files.entries.insert(rel.to_owned(), e);
        let text = match &diff {
            Some(d) => fenced(d),
            None => format!("Edits applied to {path} (the diff is not available).\n"),
        };
        let mut m = v.as_object().cloned().unwrap_or_default();
        m.insert("content".into(), json!(text));
        m.insert("path".into(), json!(path));
        m.insert("diff".into(), json!(diff));
        (text, Value::Object(m), false)
    }

    /// A `match_absent` rejected inside the call's transaction carries no near misses (the
    /// extension does not search while the target is locked): after the COMMIT, the read-only
    /// preview of the same proposal searches them, and they join the answer.
    async fn near_misses(&mut self, v: &mut Value, submission: &Value) {
        if v["failure_reason"] != "match_absent"
            || v["near_misses"]["omission_reason"] != "caller_transaction"
        {
            return;
        }
        let mut preview = submission.clone();
        if let Some(m) = preview.as_object_mut() {
            m.remove("source");
            m.remove("client_request_id");
            m.insert("format".into(), json!("patchdiff-tx/1"));
        }
        let Ok(text) = self
            .db
            .call("patchdiff_preview", &to_string(&preview, LITERAL))
            .await
        else {
            return;
        };
        let p: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if p["failure_reason"] == "match_absent" && p["failed_change_id"] == v["failed_change_id"] {
            v["near_misses"] = p["near_misses"].clone();
        }
    }

    /// `dryRun`: the engine's read-only preview of the same proposal, its diff rebuilt from the
    /// preview's change facts.
    async fn dry_run(
        &mut self,
        path: &str,
        before: &str,
        edits: &[(String, String)],
        submission: &Value,
    ) -> (String, Value, bool) {
        let text = match self
            .db
            .call("patchdiff_preview", &to_string(submission, LITERAL))
            .await
        {
            Ok(t) => t,
            Err(e) => return db_failed(path, "the preview", &e),
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v["status"] != "accepted" {
            let text = rejection_text(path, &v, edits);
            return failure(path, rejection_record(&v), text);
        }
        let facts = v["change_facts"].as_array().cloned().unwrap_or_default();
        let after = v["after_hash"].as_str().unwrap_or_default();
        let diff =
            apply_facts(before, edits, &facts, after).map(|n| unified_diff(path, before, &n));
        let text = match &diff {
            Some(d) => fenced(d),
            None => format!("The edits apply to {path} (the diff is not available).\n"),
        };
        let mut m = Map::new();
        m.insert("content".into(), json!(text));
        m.insert("status".into(), json!("preview"));
        m.insert("dry_run".into(), json!(true));
        m.insert("path".into(), json!(path));
        m.insert("target_file_id".into(), v["target_file_id"].clone());
        m.insert("version".into(), v["current_version"].clone());
        m.insert("current_hash".into(), v["current_hash"].clone());
        m.insert("after_hash".into(), v["after_hash"].clone());
        m.insert("diff".into(), json!(diff));
        (text, Value::Object(m), false)
    }

    async fn write_file(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        args: &Map<String, Value>,
    ) -> (String, Value, bool) {
        let Some(content) = args.get("content").and_then(Value::as_str) else {
            return invalid(path, "invalid_arguments", "content must be a string");
        };
        let format = match eol(content) {
            Eol::Mixed => {
                return invalid(
                    path,
                    "mixed_line_endings",
                    "content mixes line endings (LF, CRLF or lone CR), which could not be written byte for byte; use one style",
                );
            }
            Eol::Crlf => "crlf",
            Eol::Lf | Eol::None => "canonical_lf",
        };
        let disk = match ws.import(rel) {
            Ok(d) => Some(d),
            Err(r) if r.code == "workspace_file_not_found" => None,
            Err(_) => {
                return match Self::disk(ws, path, rel) {
                    Err(a) => a,
                    Ok(_) => invalid(path, "workspace_io_error", "the file could not be read"),
                };
            }
        };
        let outcome = match disk {
            // A new file: imported from the content and published in one transaction.
            None => self.create_file(ws, path, rel, content).await,
            Some(disk) => {
                if eol(&disk) == Eol::Mixed {
                    return invalid(
                        path,
                        "mixed_line_endings",
                        &format!("{path} mixes line endings; it is not overwritten"),
                    );
                }
                let hd = sha256_hex(canonical(&disk).as_bytes());
                let entry = match self.target_for_write(ws, path, rel, &disk).await {
                    Ok((e, _)) => e,
                    Err(a) => return a,
                };
                let replacement = canonical(content);
                // The disk already holds this very content and the target does not: a write
                // interrupted between its installation and its commit (a killed front end),
                // sent again. It is recorded against the target's text, and the publishing SAVE
                // finds the disk holding what it publishes; it was refused as a change on disk
                // (docs/files.md "Retries", as for edit_file).
                let sent_against = if entry.hash != hd && sha256_hex(replacement.as_bytes()) == hd {
                    &entry.hash
                } else {
                    &hd
                };
                let submission = json!({
                    "target_file_id": entry.target_file_id,
                    "intent": format!("write_file {rel}"),
                    "replacement": replacement,
                    "expected_target_version": entry.version,
                    "expected_current_hash": sent_against,
                    "source": "files/write_file",
                });
                self.submit_and_publish(ws, path, rel, Call::Write, &submission, format, &entry)
                    .await
            }
        };
        match outcome {
            Submitted::Published(v, e) => {
                self.files.entries.insert(rel.to_owned(), e);
                let text = format!("Successfully wrote to {path}");
                let mut m = v.as_object().cloned().unwrap_or_default();
                m.insert("content".into(), json!(text));
                m.insert("path".into(), json!(path));
                (text, Value::Object(m), false)
            }
            Submitted::Answer(a) => a,
            Submitted::Rejected(v) => {
                let text = rejection_text(path, &v, &[]);
                failure(path, rejection_record(&v), text)
            }
            // A write carries no request key, so it is never a keyed recovery; were it one, the
            // same answer as an edit's.
            Submitted::Deduplicated(v) => deduplicated(
                path,
                v["target_file_id"].as_str().unwrap_or_default(),
                v["version"].as_i64().unwrap_or_default(),
                v["after_hash"].as_str().unwrap_or_default(),
                &v["client_request_id"],
                &v["pdcp_log_id"],
            ),
        }
    }

    /// BEGIN of the call's transaction, which the publishing SAVE needs (docs/workspace.md).
    /// `args`: the JSON text of the transaction's first call, which names its target (or the new
    /// target's binding): through a router, the transaction runs on that target's partition.
    async fn begin(&mut self, path: &str, args: &str) -> Result<(), (String, Value, bool)> {
        let begun = self.db.begin_publication(args).await;
        if let Err(e) = begun {
            // The BEGIN may have opened the block before its SET LOCAL failed.
            self.db.rollback().await;
            return Err(db_failed(path, "starting the transaction", &e));
        }
        Ok(())
    }

    /// A new file: BEGIN; the import of `content` bound to `rel`; the publishing SAVE (which
    /// creates the file without clobbering one that appeared meanwhile); COMMIT.
    async fn create_file(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        content: &str,
    ) -> Submitted {
        // The binding is made once: through a router its nonce chooses the partition that the
        // transaction runs on and the target lives on (docs/scale-out.md).
        let args = match Server::import_args(ws, rel, content) {
            Ok(a) => a,
            Err(a) => return Submitted::Answer(a),
        };
        if let Err(a) = self.begin(path, &args).await {
            return Submitted::Answer(a);
        }
        let entry = match Server::import_with(&mut self.db, rel, &args, true).await {
            Ok(e) => e,
            Err(a) => {
                self.db.rollback().await;
                return Submitted::Answer(a);
            }
        };
        let save = save_args(&entry.target_file_id, entry.version, "original_eol");
        self.publish(
            ws,
            path,
            rel,
            &save,
            json!({"status": "accepted", "target_file_id": entry.target_file_id,
            "version": entry.version, "current_hash": entry.hash}),
            entry,
            Call::Write,
            true,
        )
        .await
    }

    /// BEGIN; the submission (`call`'s function, `submission`); if accepted, the publishing SAVE in
    /// the same transaction, the file installed and COMMIT; if rejected, COMMIT of the logged
    /// attempt alone.
    #[allow(clippy::too_many_arguments)]
    async fn submit_and_publish(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        call: Call,
        submission: &Value,
        eol_format: &str,
        entry: &Entry,
    ) -> Submitted {
        let args = to_string(submission, LITERAL);
        if let Err(a) = self.begin(path, &args).await {
            return Submitted::Answer(a);
        }
        let text = match self.db.call_in_transaction(call.function(), &args).await {
            Ok(t) => t,
            Err(e) => {
                self.db.rollback().await;
                return Submitted::Answer(db_failed(path, "the submission", &e));
            }
        };
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if v["status"] != "accepted" {
            // A call the client cancelled meanwhile (notifications/cancelled) writes nothing, its
            // rejection included (helper-67 B).
            if let Err(e) = self.db.refuse_if_cancelled() {
                self.db.rollback().await;
                return Submitted::Answer(db_failed(path, "the submission", &e));
            }
            // The rejected attempt is logged: keep its row.
            let committed = self.db.commit().await;
            // The target stays this process's, whatever the refusal: the next call reads it as
            // the database has it then ([`Server::target_for_write`]). Forgotten here and after
            // the refusals below, the next edit or write took the file's newest target, over a
            // change made outside that this process had not read (helper-123).
            if let Err(e) = committed {
                return Submitted::Answer(unknown(path, "logging the rejection", e.message));
            }
            return Submitted::Rejected(v);
        }
        // The same keyed call, committed by another process since this one read the target (two
        // servers sent it at once): that process installed the file before it committed, so it
        // is not published again. It was: a second SAVE, with its checkpoint and a new editing
        // cycle, the file renamed over once more, and both calls answered `accepted` (helper-89).
        //
        // It is that only while the recorded outcome is still the target's state and the disk
        // holds it (helper-91: a stale version, moved on and back by an edit and its revert,
        // recovered the first edit's outcome, answered "already applied" to a file without it).
        // A recorded acceptance that is current but not on disk (made over SQL with this call's
        // key) is published as any acceptance; one the target has moved on from is refused.
        if v["deduplicated"] == true {
            let current = v["current_version"].as_i64() == v["version"].as_i64();
            let on_disk = Self::disk(ws, path, rel)
                .ok()
                .map(|d| sha256_hex(canonical(&d).as_bytes()));
            if !current || on_disk.as_deref() == v["after_hash"].as_str() {
                self.db.rollback().await;
                return match current {
                    true => Submitted::Deduplicated(v),
                    false => Submitted::Answer(moved_on(path, &v)),
                };
            }
        }
        let version = v["version"].as_i64().unwrap_or(entry.version + 1);
        let save = save_args(&entry.target_file_id, version, eol_format);
        let after = Entry {
            version,
            hash: v["after_hash"].as_str().unwrap_or_default().to_owned(),
            read_at_version: None,
            last_call: None,
            target_file_id: entry.target_file_id.clone(),
        };
        self.publish(ws, path, rel, &save, v, after, call, false)
            .await
    }

    /// The publishing SAVE of the open transaction, then the answer: `submitted` with the
    /// publication's receipt, or the workspace profile's refusal or partial outcome.
    /// `may_create`: the file is new (its import is in this transaction); any other publication
    /// refuses a file that is no longer on disk.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &mut self,
        ws: &Workspace,
        path: &str,
        rel: &str,
        save: &Value,
        submitted: Value,
        after: Entry,
        call: Call,
        may_create: bool,
    ) -> Submitted {
        let answer = publish_in_transaction(
            &mut self.db,
            ws,
            "patchdiff_save",
            &to_string(save, LITERAL),
            may_create,
        )
        .await;
        match answer {
            PublishAnswer {
                value: Some(saved),
                is_error: false,
                ..
            } if saved["status"] == "saved" => {
                let mut m = submitted.as_object().cloned().unwrap_or_default();
                m.insert("workspace_sync".into(), saved["workspace_sync"].clone());
                m.insert("snapshot_id".into(), saved["snapshot_id"].clone());
                Submitted::Published(Value::Object(m), after)
            }
            PublishAnswer { text, value, .. } => {
                let v = value.unwrap_or_else(|| serde_json::from_str(&text).unwrap_or(Value::Null));
                let status = v["status"].as_str().unwrap_or("rejected");
                let code = v["failure_reason"]
                    .as_str()
                    .or(v["code"].as_str())
                    .unwrap_or("rejected");
                let detail = v["failure_detail"].as_str().unwrap_or("");
                let text = if status == "partial" {
                    format!(
                        "Error: {path} was written, but its record is uncertain ({code}): {detail}"
                    )
                } else if code == "external_disk_drift" {
                    self.files
                        .reimport
                        .insert(rel.to_owned(), Some(after.target_file_id.clone()));
                    self.files
                        .refused
                        .entry(rel.to_owned())
                        .or_default()
                        .insert(after.target_file_id.clone());
                    match call {
                        Call::Edit => format!(
                            "Error: {path} changed on disk since it was last read; nothing was written and the edits were not applied. Read it again with read_file, then redo the edit."
                        ),
                        Call::Write => format!(
                            "Error: {path} changed on disk since it was last read; nothing was written. Read it again with read_file, then write it again if it should still be replaced."
                        ),
                    }
                } else if code == "workspace_binding_unverified" {
                    // Its target was bound by a front end with another key (the key file was
                    // replaced or lost) or over SQL: the next read imports the file anew, as a new
                    // target, instead of this file being refused for good with advice to use a tool
                    // this profile does not have (helper-114).
                    self.files.reimport.insert(rel.to_owned(), None);
                    self.files
                        .refused
                        .entry(rel.to_owned())
                        .or_default()
                        .insert(after.target_file_id.clone());
                    tracing::warn!(
                        path = rel,
                        "the file's target was bound by a front end with another key: the next read_file imports it as a new target"
                    );
                    let undone = match call {
                        Call::Edit => "the edits were not applied",
                        Call::Write => "the file was left as it was",
                    };
                    format!(
                        "Error: {path} was not written ({code}): its record in the database was bound to this file by a front end with another workspace key (or over SQL), so this server cannot prove it is this file's; nothing was written and {undone}. Read the file with read_file, which imports it anew (its earlier history stays with the old record), then try again."
                    )
                } else {
                    let undone = match call {
                        Call::Edit => "The edits were not applied.",
                        Call::Write => "The file was left as it was.",
                    };
                    format!("Error: {path} was not written ({code}): {detail} {undone}")
                };
                let m = rejection_record(&v);
                Submitted::Answer(failure(path, m, text))
            }
        }
    }
}

/// How many times a read whose text is not its target's reads the file again before it imports
/// it as a new target ([`Server::current_target`]).
const READ_AGAIN: usize = 3;

/// The line endings an edit publishes in: the file's own, as it is on disk now (it was the
/// import's, `original_eol`, so an edit after a `write_file` that changed them turned them back:
/// helper-95); a file without a line break keeps the recorded ones.
fn disk_eol_format(disk: &str) -> &'static str {
    match eol(disk) {
        Eol::Crlf => "crlf",
        Eol::Lf => "canonical_lf",
        Eol::None | Eol::Mixed => "original_eol",
    }
}

/// The publishing SAVE of a target at `version`, in `eol` line endings.
fn save_args(target_file_id: &str, version: i64, eol: &str) -> Value {
    json!({"target_file_id": target_file_id, "expected_target_version": version,
        "sync_workspace": true, "workspace_eol_format": eol})
}

/// The call a publication is for, which its refusal names.
#[derive(Clone, Copy)]
enum Call {
    /// `edit_file`: `patchdiff_submit_edits`.
    Edit,
    /// `write_file` over an existing file (`patchdiff_submit_replacement`), or a new file.
    Write,
}

impl Call {
    fn function(self) -> &'static str {
        match self {
            Call::Edit => "patchdiff_submit_edits",
            Call::Write => "patchdiff_submit_replacement",
        }
    }
}

/// How a submission with its publication ended.
enum Submitted {
    /// Accepted, published and committed: the submission's answer with the receipt, and the
    /// target's new state.
    Published(Value, Entry),
    /// Refused by the engine (logged and committed).
    Rejected(Value),
    /// The recorded outcome of the same keyed call, which another process committed (and
    /// published) meanwhile: nothing was written or published again.
    Deduplicated(Value),
    /// Anything else, already presented.
    Answer((String, Value, bool)),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/files.md, paths: an absolute path under the root is the rest as written, so the
    /// workspace's path rules see a trailing `/` or an empty or `.` component (they used to be
    /// dropped: `ROOT/trail/` created a file `trail`); another spelling of the root is refused as
    /// ambiguous; the root is matched as opened at start-up, not as a symbolic link now points.
    #[test]
    fn absolute_paths_keep_their_spelling_under_the_root() {
        let base = std::env::temp_dir().join(format!("pd-files-rel-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("real")).unwrap();
        std::fs::create_dir_all(base.join("other")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        let key = crate::binding::BindingKey::from_bytes([7; 32]);
        let ws = Workspace::open(&base.join("link"), key, vec![], None).unwrap();
        let (link, real) = (base.join("link"), base.join("real"));
        let (link, real) = (link.to_str().unwrap(), real.to_str().unwrap());
        let ok = |p: &str| relative(&ws, p);
        assert_eq!(ok(&format!("{link}/a/b.txt")), Ok("a/b.txt".into()));
        assert_eq!(ok(&format!("{real}/a/b.txt")), Ok("a/b.txt".into()));
        assert_eq!(ok("./a.txt"), Ok("a.txt".into()));
        // As written: the workspace's rules refuse these later (workspace_path_ambiguous).
        assert_eq!(ok(&format!("{link}/trail/")), Ok("trail/".into()));
        assert_eq!(ok(&format!("{link}//f.txt")), Ok("/f.txt".into()));
        assert_eq!(ok(&format!("{link}/./f.txt")), Ok("./f.txt".into()));
        let code = |p: String| relative(&ws, &p).unwrap_err().0;
        let parent = base.to_str().unwrap();
        assert_eq!(code(format!("/{link}/f.txt")), "workspace_path_ambiguous");
        assert_eq!(
            code(format!("{parent}//link/f.txt")),
            "workspace_path_ambiguous"
        );
        assert_eq!(
            code(format!("{link}x/f.txt")),
            "workspace_path_outside_root"
        );
        assert_eq!(code(format!("{link}/")), "workspace_path_outside_root");
        // The link re-pointed after start-up: its old target is still the root, its new one not.
        std::fs::remove_file(base.join("link")).unwrap();
        std::os::unix::fs::symlink(base.join("other"), base.join("link")).unwrap();
        let other = base.join("other");
        let other = other.to_str().unwrap();
        assert_eq!(
            code(format!("{other}/victim")),
            "workspace_path_outside_root"
        );
        assert_eq!(ok(&format!("{real}/f.txt")), Ok("f.txt".into()));
        let _ = std::fs::remove_dir_all(&base);
    }

    /// Issue 19 item 4: CRLF is recognized, so it is kept; mixed endings are refused.
    #[test]
    fn line_endings() {
        assert_eq!(eol("a\nb\n"), Eol::Lf);
        assert_eq!(eol("a\r\nb\r\n"), Eol::Crlf);
        assert_eq!(eol("ab"), Eol::None);
        assert_eq!(eol("a\r\nb\n"), Eol::Mixed);
        assert_eq!(eol("a\rb"), Eol::Mixed);
        assert_eq!(canonical("a\r\nb\r\n"), "a\nb\n");
    }

    /// The diff has the reference server's shape and is the smallest line diff.
    #[test]
    fn unified_diff_shape() {
        let before: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let after = before.replace("line 10\n", "line ten\n");
        let d = unified_diff("a.txt", &before, &after);
        assert_eq!(
            d,
            "Index: a.txt\n===================================================================\n--- a.txt\toriginal\n+++ a.txt\tmodified\n@@ -6,9 +6,9 @@\n line 6\n line 7\n line 8\n line 9\n-line 10\n+line ten\n line 11\n line 12\n line 13\n line 14\n"
        );
        assert_eq!(unified_diff("a", "x\n", "x\n"), "");
        let d = unified_diff("a", "x", "y");
        assert!(d.ends_with("@@ -1,1 +1,1 @@\n-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"), "{d}");
        let d = unified_diff("a", "", "y\n");
        assert!(d.ends_with("@@ -0,0 +1,1 @@\n+y\n"), "{d}");
        // Two distant changes are two hunks.
        let after = before
            .replace("line 2\n", "two\n")
            .replace("line 19\n", "nineteen\n");
        let d = unified_diff("a", &before, &after);
        assert_eq!(d.matches("@@ -").count(), 2, "{d}");
    }

    /// The hunks of a diff of [`unified_diff`]'s shape as GNU diff prints them: every range of
    /// one line without its count. (The engine's own tests hold GNU's hunks to GNU diff itself,
    /// and its fuzz target `diff` applies them.)
    fn as_gnu(diff: &str) -> String {
        diff.split_inclusive('\n')
            .skip(4)
            .map(|l| match l.strip_prefix("@@ ") {
                Some(_) => l.replace(",1 ", " "),
                None => l.to_owned(),
            })
            .collect()
    }

    fn gnu(a: &str, b: &str) -> String {
        patchdiff_engine::api::unified::hunks(a, b, DIFF_CONTEXT, &mut Budget::new(u64::MAX))
            .expect("no budget")
    }

    /// Many scattered edits (here a rename on 1,000 of 20,000 lines, 2,000 edit steps, twice
    /// what the front end's own diff searched before 2026-12-06) answer a diff of the changed
    /// lines, not the whole file removed and added: the 44 MB answer helper-48 got for 1,000
    /// edits of a 7.2 MB file. The diff still applies.
    #[test]
    fn many_scattered_edits_give_a_diff_of_the_changed_lines() {
        let before: String = (0..20_000)
            .map(|i| format!("line {i} calls old_name() here\n"))
            .collect();
        let after: String = (0..20_000)
            .map(|i| {
                let name = if i % 20 == 7 { "new_name" } else { "old_name" };
                format!("line {i} calls {name}() here\n")
            })
            .collect();
        let d = unified_diff("big.txt", &before, &after);
        assert_eq!(as_gnu(&d), gnu(&before, &after));
        let removed = d.lines().filter(|l| l.starts_with("-line")).count();
        let added = d.lines().filter(|l| l.starts_with("+line")).count();
        assert_eq!((removed, added), (1_000, 1_000));
        // 1,000 hunks of 9 lines (4 of context each side): 9 of every 20 lines, where the whole
        // file removed and added was twice its size.
        assert_eq!(d.matches("@@ -").count(), 1_000);
        assert!(d.len() < before.len() * 2 / 3, "{} bytes", d.len());
    }

    /// Whatever the texts, the diff's hunks are GNU diff's: random texts of repeated and unique
    /// lines, some without a final newline.
    #[test]
    fn every_diff_is_gnu_diffs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..60 {
            let len = if round % 3 == 0 { 3_000 } else { 40 };
            let line = |i: u64, next: &mut dyn FnMut(u64) -> u64| match next(4) {
                0 => "same\n".to_owned(),
                1 => format!("rep {}\n", next(5)),
                _ => format!("unique {i} {}\n", next(3)),
            };
            let a: String = (0..len).map(|i| line(i, &mut next)).collect();
            let mut b = String::new();
            for (i, l) in a.split_inclusive('\n').enumerate() {
                match next(10) {
                    0 => {}
                    1 => b.push_str(&line(i as u64 + 100_000, &mut next)),
                    2 => {
                        b.push_str(l);
                        b.push_str(&line(i as u64 + 200_000, &mut next));
                    }
                    _ => b.push_str(l),
                }
            }
            let (a, b) = match round % 4 {
                1 => (a.trim_end().to_owned(), b),
                2 => (a, b.trim_end().to_owned()),
                _ => (a, b),
            };
            // Below the header, GNU diff's (`patchdiff_diff`'s) hunks, but that a range of one
            // line keeps its count, as jsdiff prints it.
            let d = unified_diff("r.txt", &a, &b);
            assert_eq!(as_gnu(&d), gnu(&a, &b), "round {round}");
        }
    }

    /// With the search's steps used up (a budget of 0 to 5,000 here, where the diff needs
    /// more), the middle between the common first and last lines is shown removed and added
    /// whole: one hunk that `patch` applies.
    #[test]
    fn an_exhausted_search_still_gives_a_correct_diff() {
        let a: String = (0..3_000).map(|i| format!("l{}\n", i % 700)).collect();
        let b: String = (0..3_000)
            .map(|i| format!("l{}\n", (i * 7) % 900))
            .collect();
        let (a, b) = (format!("top\n{a}end\n"), format!("top\n{b}end\n"));
        let full = unified_diff("x", &a, &b);
        assert_eq!(as_gnu(&full), gnu(&a, &b));
        // The middle removed and added whole, between the common first and last lines (here
        // "top", "l0" and "end"), with those as its context.
        let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
        assert_eq!(
            (&la[..2], &lb[..2]),
            (&["top", "l0"][..], &["top", "l0"][..])
        );
        assert_ne!(la[2], lb[2]);
        let whole: String = std::iter::once("@@ -1,3002 +1,3002 @@\n top\n l0\n".to_owned())
            .chain(la[2..3_001].iter().map(|l| format!("-{l}\n")))
            .chain(lb[2..3_001].iter().map(|l| format!("+{l}\n")))
            .chain(std::iter::once(" end\n".to_owned()))
            .collect();
        for budget in [0, 10, 5_000] {
            let d = unified_diff_within("x", &a, &b, budget);
            let hunks = d.split_once("@@").map(|(_, h)| format!("@@{h}"));
            assert!(
                hunks.as_ref() == Some(&whole),
                "budget {budget}: {:.300}",
                d
            );
        }
    }

    /// Issue 19 item 4: the request key covers the path, the edits, the base version and the
    /// hash of the text they were sent against (helper-54).
    #[test]
    fn request_keys() {
        let e = vec![("a".to_owned(), "b".to_owned())];
        let k = request_key("x.txt", &e, 3, "h");
        assert!(k.len() <= 128 && k.starts_with("files2-"));
        assert_eq!(k, request_key("x.txt", &e, 3, "h"));
        assert_ne!(k, request_key("x.txt", &e, 4, "h"));
        assert_ne!(k, request_key("x.txt", &e, 3, "g"));
        assert_ne!(k, request_key("y.txt", &e, 3, "h"));
        assert_ne!(
            k,
            request_key("x.txt", &[("a".to_owned(), "c".to_owned())], 3, "h")
        );
    }

    /// A preview's facts stop at 32 edits: the text after more is rebuilt by the engine's tx/1
    /// application, and only when that gives the acceptance's hash.
    #[test]
    fn more_edits_than_facts_rebuild_the_text_in_order() {
        let before: String = (0..40).map(|i| format!("line {i}\n")).collect();
        let edits: Vec<(String, String)> = (0..40)
            .map(|i| (format!("line {i}\n"), format!("LINE {i}\n")))
            .collect();
        let after = before.to_uppercase();
        let facts = vec![json!({"span_start": 0, "span_end": 7}); 32];
        assert_eq!(
            apply_facts(&before, &edits, &facts, &sha256_hex(after.as_bytes())).as_deref(),
            Some(after.as_str())
        );
        // Another hash: no text.
        assert_eq!(
            apply_facts(&before, &edits, &facts, &sha256_hex(b"x")),
            None
        );
    }

    #[test]
    fn facts_rebuild_the_text() {
        let before = "foo bar\nfoo baz\n";
        let edits = vec![
            ("baz".to_owned(), "qux".to_owned()),
            ("bar".to_owned(), "é".to_owned()),
        ];
        let after = "foo é\nfoo qux\n";
        let facts = vec![
            json!({"span_start": 12, "span_end": 15}),
            json!({"span_start": 4, "span_end": 7}),
        ];
        let h = sha256_hex(after.as_bytes());
        assert_eq!(
            apply_facts(before, &edits, &facts, &h).as_deref(),
            Some(after)
        );
        assert_eq!(apply_facts(before, &edits, &facts, "0"), None);
    }

    #[test]
    fn head_and_tail() {
        assert_eq!(head_tail("a\nb\nc\n", Some(2), None), "a\nb");
        assert_eq!(head_tail("a\nb\nc\n", None, Some(2)), "b\nc");
        assert_eq!(head_tail("a\nb\nc", None, Some(5)), "a\nb\nc");
    }
}
