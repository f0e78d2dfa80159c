//! The `files` profile end to end (issue 19 item 4; docs/files.md): the real `patchdiff-mcp`
//! over real pipes, a real directory and a real PostgreSQL. What the TypeScript SDK task suite
//! (tests/mcp_node/files.test.mjs) cannot see from outside: every attempt in the log, one
//! transaction per call (a publication refused mid-call leaves no accepted attempt and no new
//! version), the checkpoint and baseline of each publication, and the same target found again
//! by a new process.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and `PATCHDIFF_MCP_BIN` (the built server; default target/debug).

use patchdiff_tests::roles::dsn;
use patchdiff_tests::stdio::Session;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    patchdiff_tests::scratch_dir("pd-files", name)
}

fn key_file() -> String {
    patchdiff_tests::workspace_key_file("pd-files")
        .to_string_lossy()
        .into_owned()
}

fn start(root: &Path, env: &[(&str, &str)]) -> Session {
    let root = root.to_string_lossy().into_owned();
    let key = key_file();
    let mut all = vec![
        ("PATCHDIFF_MCP_PROFILE", "files"),
        ("PATCHDIFF_WORKSPACE_ROOT", root.as_str()),
        ("PATCHDIFF_WORKSPACE_KEY_FILE", key.as_str()),
    ];
    all.extend_from_slice(env);
    Session::start(&dsn(), &all, "2025-06-18")
}

/// tools/call: (the text, structuredContent, isError).
fn call(s: &mut Session, name: &str, arguments: Value) -> (String, Value, bool) {
    let r = s.request("tools/call", json!({"name": name, "arguments": arguments}));
    let r = &r["result"];
    (
        r["content"][0]["text"].as_str().unwrap().to_owned(),
        r["structuredContent"].clone(),
        r["isError"].as_bool().unwrap(),
    )
}

fn edit(s: &mut Session, path: &str, old: &str, new: &str) -> (String, Value, bool) {
    call(
        s,
        "edit_file",
        json!({"path": path, "edits": [{"oldText": old, "newText": new}]}),
    )
}

fn rows(query: &str, id: &str) -> Vec<Vec<Option<String>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The database that holds the target's rows: through a router, its partition.
        let c = patchdiff_tests::tables_for(&dsn(), id).await;
        c.query(query, &[&id])
            .await
            .unwrap()
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| r.get::<_, Option<String>>(i))
                    .collect()
            })
            .collect()
    })
}

/// (status, failure_reason, client_request_id) of every attempt on a target, in order.
fn log(target: &str) -> Vec<(String, String, String)> {
    rows(
        "SELECT status::text, coalesce(failure_reason::text, ''), coalesce(client_request_id, '') \
         FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid ORDER BY log_sequence",
        target,
    )
    .into_iter()
    .map(|r| {
        (
            r[0].clone().unwrap(),
            r[1].clone().unwrap(),
            r[2].clone().unwrap(),
        )
    })
    .collect()
}

/// (version, save_checkpoint snapshots, workspace baseline) of a target.
fn state(target: &str) -> (String, String, String) {
    let r = &rows(
        "SELECT version::text, (SELECT count(*) FROM patchdiff.snapshots s WHERE s.target_file_id = t.target_file_id \
         AND snapshot_reason = 'save_checkpoint')::text, workspace_baseline_sha256 \
         FROM patchdiff.targets t WHERE target_file_id = $1::text::uuid",
        target,
    )[0];
    (
        r[0].clone().unwrap(),
        r[1].clone().unwrap(),
        r[2].clone().unwrap_or_default(),
    )
}

fn sha(bytes: &[u8]) -> String {
    patchdiff_engine::api::text::sha256_hex(std::str::from_utf8(bytes).unwrap())
}

/// Issue 19 item 4 "every attempt in the log", "all edits of one call atomic", "a retried call
/// deduplicated", "publication under the workspace rules": each edit_file is one accepted or
/// rejected row; an accepted one is published with a checkpoint and the baseline moved to the
/// disk's bytes; a resend adds no row.
#[test]
fn every_attempt_is_logged_and_each_accepted_call_is_published_with_a_checkpoint() {
    let root = scratch("log");
    let file = root.join("a.txt");
    std::fs::write(&file, "one\ntwo\ntwo\n").unwrap();
    let mut s = start(&root, &[]);
    let (_, read, err) = call(&mut s, "read_file", json!({"path": "a.txt"}));
    assert!(!err);
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    assert_eq!(
        state(&target),
        ("0".into(), "0".into(), sha(b"one\ntwo\ntwo\n"))
    );

    let (text, v, err) = edit(&mut s, "a.txt", "one", "uno");
    assert!(!err, "{text}");
    assert_eq!(v["target_file_id"], target.as_str());
    assert_eq!(std::fs::read(&file).unwrap(), b"uno\ntwo\ntwo\n");
    assert_eq!(v["workspace_sync"]["durability"], "confirmed");
    assert_eq!(
        state(&target),
        ("1".into(), "1".into(), sha(b"uno\ntwo\ntwo\n"))
    );

    let (text, v, err) = edit(&mut s, "a.txt", "two", "dos");
    assert!(err && text.contains("matches 2 places"), "{text}");
    assert_eq!(
        v["diagnostic"]["exact_candidates"]["candidates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // The resend of the accepted call: answered from the log, no row, no version.
    let (_, v, err) = edit(&mut s, "a.txt", "one", "uno");
    assert!(!err);
    assert_eq!(v["status"], "deduplicated");
    let (text, v, err) = edit(&mut s, "a.txt", "zzz", "y");
    assert!(err && text.contains("Could not find exact match"), "{text}");
    assert_eq!(v["failure_reason"], "match_absent");
    // The resend of a rejected call: the recorded rejection, no second row.
    let (_, v, err) = edit(&mut s, "a.txt", "zzz", "y");
    assert!(err);
    assert_eq!(v["deduplicated"], true, "{v}");
    std::fs::write(&file, "uno\ntwo\nthree\n").unwrap();
    let (text, v, err) = edit(&mut s, "a.txt", "uno", "one");
    assert!(err && text.contains("changed on disk"), "{text}");
    assert_eq!(v["failure_reason"], "target_hash_mismatch");
    assert_eq!(std::fs::read(&file).unwrap(), b"uno\ntwo\nthree\n");

    let l = log(&target);
    let kinds: Vec<(&str, &str)> = l.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
    assert_eq!(
        kinds,
        [
            ("accepted", ""),
            ("rejected", "match_ambiguous"),
            ("rejected", "match_absent"),
            ("rejected", "target_hash_mismatch"),
        ]
    );
    assert!(l.iter().all(|r| r.2.starts_with("files2-")), "{l:?}");
    assert_eq!(state(&target).0, "1");
}

/// Issue 19 item 4: a retried edit_file after success is answered from the log, in the same
/// process and in a new one that finds the same target (import on first use happens once).
#[test]
fn a_resent_call_is_applied_once_and_a_new_process_finds_the_same_target() {
    let root = scratch("retry");
    let file = root.join("v.toml");
    std::fs::write(&file, "version = 1\n").unwrap();
    let abs = file.to_string_lossy().into_owned();
    let mut s = start(&root, &[]);
    let (text, first, err) = edit(&mut s, &abs, "version = 1", "version = 10");
    assert!(!err, "{text}");
    let target = first["target_file_id"].as_str().unwrap().to_owned();
    let (_, v, err) = edit(&mut s, &abs, "version = 1", "version = 10");
    assert!(!err);
    assert_eq!(v["status"], "deduplicated");
    drop(s);
    let mut s = start(&root, &[]);
    let (_, v, err) = edit(&mut s, "v.toml", "version = 1", "version = 10");
    assert!(!err);
    assert_eq!(v["status"], "deduplicated");
    assert_eq!(v["target_file_id"], target.as_str());
    assert_eq!(std::fs::read(&file).unwrap(), b"version = 10\n");
    assert_eq!(log(&target).len(), 1);
    assert_eq!(state(&target).0, "1");
}

/// docs/files.md "Retries" (helper-54): an edit refused because the file changed on disk applies
/// once the file is back to its version's text and read again (the request key names the text
/// the edit was sent against; before, the same edit was a request_key_conflict for good). And a
/// second process that knows an older version carries on with the same target: its read finds
/// the newer version another process made instead of importing the file as a new target.
#[test]
fn an_edit_refused_as_stale_applies_later_and_two_processes_share_one_target() {
    let root = scratch("stale-key");
    let file = root.join("f3.txt");
    std::fs::write(&file, "alpha beta alpha\n").unwrap();
    let mut a = start(&root, &[]);
    let (_, read, _) = call(&mut a, "read_file", json!({"path": "f3.txt"}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    std::fs::write(&file, "alpha beta alpha \n").unwrap();
    let (text, v, err) = edit(&mut a, "f3.txt", "beta", "BETA");
    assert!(err && text.contains("changed on disk"), "{text}");
    assert_eq!(v["failure_reason"], "target_hash_mismatch", "{v}");
    // Undone outside (git checkout): the version's text again.
    std::fs::write(&file, "alpha beta alpha\n").unwrap();
    let (_, read, err) = call(&mut a, "read_file", json!({"path": "f3.txt"}));
    assert!(!err);
    assert_eq!(read["version"], 0);
    let (text, v, err) = edit(&mut a, "f3.txt", "beta", "BETA");
    assert!(!err, "{text} {v}");
    assert_eq!(v["version"], 1);
    assert_eq!(std::fs::read(&file).unwrap(), b"alpha BETA alpha\n");

    // A second process read version 1; the first makes version 2.
    let mut b = start(&root, &[]);
    let (_, read, _) = call(&mut b, "read_file", json!({"path": "f3.txt"}));
    assert_eq!(
        (read["target_file_id"].as_str(), read["version"].as_i64()),
        (Some(target.as_str()), Some(1))
    );
    let (text, _, err) = edit(&mut a, "f3.txt", "alpha BETA", "ALPHA BETA");
    assert!(!err, "{text}");
    let (_, read, err) = call(&mut b, "read_file", json!({"path": "f3.txt"}));
    assert!(!err);
    assert_eq!(
        (read["target_file_id"].as_str(), read["version"].as_i64()),
        (Some(target.as_str()), Some(2)),
        "the same target, at the version the other process made"
    );
    let (text, v, err) = edit(&mut b, "f3.txt", "alpha\n", "omega\n");
    assert!(!err, "{text}");
    assert_eq!(
        (v["target_file_id"].as_str(), v["version"].as_i64()),
        (Some(target.as_str()), Some(3))
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"ALPHA BETA omega\n");
    let kinds: Vec<(String, String)> = log(&target).into_iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        kinds,
        [
            ("rejected".into(), "target_hash_mismatch".into()),
            ("accepted".into(), "".into()),
            ("accepted".into(), "".into()),
            ("accepted".into(), "".into()),
        ]
    );
}

/// The `edit_file` request key (mcp-frontend/src/files.rs `request_key`), computed here as any
/// role that may write a target could.
fn files_key(rel: &str, edits: &[(&str, &str)], version: i64, hash: &str) -> String {
    let body = patchdiff_engine::wire::to_string(
        &json!([rel, edits, version, hash]),
        patchdiff_engine::wire::LITERAL,
    );
    format!(
        "files2-{}",
        sha(format!("patchdiff-files/2\0{body}").as_bytes())
    )
}

/// docs/files.md "Retries" (helper-56): the log's newest acceptance carrying the key a resend
/// would have is not enough to answer "already applied": any role that may write the target
/// can send that key with other edits. Its record must hold these edits; here it does not, so
/// the call is a new one (before, it answered "already applied" for edits never made).
#[test]
fn another_edit_sent_with_this_calls_key_is_not_taken_for_it() {
    let root = scratch("forged-key");
    let file = root.join("c.txt");
    std::fs::write(&file, "x = 1\ny = 2\n").unwrap();
    let mut s = start(&root, &[]);
    let (text, v, err) = edit(&mut s, "c.txt", "y = 2", "y = 3");
    assert!(!err, "{text}");
    let target = v["target_file_id"].as_str().unwrap().to_owned();
    // The key as computed here is the front end's.
    assert_eq!(
        log(&target)[0].2,
        files_key("c.txt", &[("y = 2", "y = 3")], 0, &sha(b"x = 1\ny = 2\n"))
    );
    drop(s);
    // Another writer makes version 2 with a different edit and the key that the edit
    // x = 1 -> x = 10 would have at version 1; the file on disk follows.
    let forged = files_key("c.txt", &[("x = 1", "x = 10")], 1, &sha(b"x = 1\ny = 3\n"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = rt.block_on(async {
        let c = patchdiff_tests::connect(&dsn()).await.unwrap();
        patchdiff_tests::call(
            &c,
            "patchdiff_submit_edits",
            &json!({"target_file_id": target, "expected_target_version": 1, "client_request_id": forged, "intent": "another edit",
                    "edits": [{"match": "y = 3", "replace": "y = 4"}]}),
        )
        .await
        .unwrap()
    });
    assert_eq!(r["status"], "accepted", "{r}");
    std::fs::write(&file, "x = 1\ny = 4\n").unwrap();
    let mut s = start(&root, &[]);
    let (text, v, _) = edit(&mut s, "c.txt", "x = 1", "x = 10");
    assert_ne!(v["status"], "deduplicated", "{text}");
    assert!(!text.contains("already applied"), "{text}");
    // Sent as a new call: here refused at publication, since the other writer changed the file
    // without publishing it (its bytes are not the last publication's), and nothing written.
    assert_eq!(v["failure_reason"], "external_disk_drift", "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 1\ny = 4\n");
    assert_eq!(state(&target).0, "2");
}

/// Issue 19 item 4 "all edits of one call atomic" and "publication under the workspace rules":
/// the file changed between the submission and the installation (paused at the test hook): the
/// publication is refused as external_disk_drift and the call's transaction rolls back, so the
/// accepted attempt and the new version are gone; the human's bytes stay. The refusal names the
/// call it refuses: a refused `write_file` applied no edits (helper-95 found it said it had not).
#[test]
fn a_publication_refused_mid_call_rolls_the_whole_call_back() {
    let cases = [
        (
            "edit_file",
            json!({"path": "b.txt", "edits": [{"oldText": "alpha", "newText": "ALPHA"}]}),
            "nothing was written and the edits were not applied",
        ),
        (
            "write_file",
            json!({"path": "b.txt", "content": "ALPHA\nbeta\n"}),
            "nothing was written. Read it again with read_file, then write it again",
        ),
    ];
    for (tool, arguments, says) in cases {
        let root = scratch(&format!("drift-{tool}"));
        let hooks = scratch(&format!("drift-hook-{tool}"));
        let file = root.join("b.txt");
        std::fs::write(&file, "alpha\nbeta\n").unwrap();
        let hook_dir = hooks.to_string_lossy().into_owned();
        let mut s = start(
            &root,
            &[
                ("PATCHDIFF_WORKSPACE_TEST_HOOK", "after_walk"),
                ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
            ],
        );
        let (_, read, _) = call(&mut s, "read_file", json!({"path": "b.txt"}));
        let target = read["target_file_id"].as_str().unwrap().to_owned();
        let line = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        s.pipes.send(format!("{line}\n").as_bytes());
        wait_paused(&hooks);
        std::fs::write(&file, "alpha\nbeta\nhuman\n").unwrap();
        std::fs::write(hooks.join("resume"), "").unwrap();
        let reply: Value =
            serde_json::from_slice(&s.pipes.line(Duration::from_secs(30)).unwrap()).unwrap();
        let r = &reply["result"];
        assert_eq!(r["isError"], true, "{tool}: {reply}");
        assert_eq!(
            r["structuredContent"]["failure_reason"], "external_disk_drift",
            "{tool}"
        );
        let text = r["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(says), "{tool}: {text}");
        assert_eq!(text.contains("edit"), tool == "edit_file", "{tool}: {text}");
        assert_eq!(std::fs::read(&file).unwrap(), b"alpha\nbeta\nhuman\n");
        assert!(
            log(&target).is_empty(),
            "{tool}: the accepted attempt was rolled back with the publication"
        );
        assert_eq!(state(&target).0, "0", "{tool}");
    }
}

/// docs/files.md, "read_file of a stale file imports it again ... after which edits apply to
/// what the agent just read": also when only the line endings changed on disk. The text then
/// equals the target's, so only the raw bytes, which the publication compares, tell them
/// apart: the first edit after the change is refused as drift (nothing written), and after a
/// read the next one applies, in the file's new line endings. Before, every later call was
/// refused as drift, read or not, until the text itself changed.
#[test]
fn a_line_ending_change_on_disk_is_read_again() {
    let root = scratch("eol-only");
    let file = root.join("eol.txt");
    std::fs::write(&file, "a\nb\n").unwrap();
    let mut s = start(&root, &[]);
    let (text, _, err) = edit(&mut s, "eol.txt", "b", "B");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"a\nB\n");
    // An editor converts the file to CRLF: the same text, other bytes.
    std::fs::write(&file, "a\r\nB\r\n").unwrap();
    let (text, v, err) = edit(&mut s, "eol.txt", "a", "A");
    assert!(err, "{text}");
    assert_eq!(v["failure_reason"], "external_disk_drift", "{v}");
    assert!(text.contains("Read it again with read_file"), "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"a\r\nB\r\n");
    let (text, _, err) = call(&mut s, "read_file", json!({"path": "eol.txt"}));
    assert!(!err && text == "a\r\nB\r\n", "{text:?}");
    let (text, _, err) = edit(&mut s, "eol.txt", "a", "A");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"A\r\nB\r\n");
}

/// docs/files.md, "write_file": a read-only file (mode 0444) is not replaced, as an editor or
/// the reference server would fail to open it for writing, although `rename` over it would
/// succeed and root may write it: the publication is refused (`workspace_file_read_only`), the
/// call's transaction rolls back (no accepted attempt, no new version), and the file keeps its
/// bytes, mode and inode. Made writable, the same call writes it.
#[test]
fn a_read_only_file_is_not_overwritten() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let root = scratch("read-only");
    let file = root.join("ro.txt");
    std::fs::write(&file, "keep\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
    let ino = std::fs::metadata(&file).unwrap().ino();
    let mut s = start(&root, &[]);
    let (text, v, err) = call(
        &mut s,
        "write_file",
        json!({"path": "ro.txt", "content": "replaced\n"}),
    );
    assert!(err, "{text}");
    assert_eq!(v["failure_reason"], "workspace_file_read_only", "{v}");
    assert!(
        text.contains("read-only") && text.contains("0444"),
        "{text}"
    );
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(std::fs::read(&file).unwrap(), b"keep\n");
    assert_eq!(meta.permissions().mode() & 0o7777, 0o444);
    assert_eq!(meta.ino(), ino);
    let left: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["ro.txt"], "no staged file is left");
    let target = v["target_file_id"].as_str().unwrap().to_owned();
    assert!(
        log(&target).is_empty(),
        "the accepted attempt was rolled back with the publication"
    );
    assert_eq!(state(&target).0, "0");

    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (text, _, err) = call(
        &mut s,
        "write_file",
        json!({"path": "ro.txt", "content": "replaced\n"}),
    );
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"replaced\n");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777,
        0o644
    );
}

/// Issue 19 item 4: non-UTF-8 files and paths outside the root are refused clearly, and nothing
/// is imported.
#[test]
fn non_utf8_and_outside_paths_are_refused() {
    let root = scratch("refusals");
    std::fs::write(root.join("latin1.txt"), b"caf\xe9\n").unwrap();
    let mut s = start(&root, &[]);
    let (text, v, err) = call(&mut s, "read_file", json!({"path": "latin1.txt"}));
    assert!(err && text.contains("not UTF-8"), "{text}");
    assert_eq!(v["failure_reason"], "workspace_file_not_utf8");
    let (text, _, err) = edit(&mut s, "/etc/hostname", "a", "b");
    assert!(
        err && text.contains("outside allowed directories"),
        "{text}"
    );
    let (_, v, err) = edit(&mut s, "../x", "a", "b");
    assert!(err);
    assert_eq!(v["failure_reason"], "workspace_path_escape");
    // A path that is not a string is named as such, not as an empty one (helper-48).
    let (text, v, err) = call(&mut s, "read_file", json!({"path": 5}));
    assert!(err && text.contains("path must be a string"), "{text}");
    assert_eq!(v["code"], "workspace_path_invalid", "{v}");
    // Arguments the front end refuses before the call (unknown or missing names) are answered
    // as every other failure of the profile: an `Error: ...` text and the record with its path
    // (helper-114: they were a bare JSON text, without structuredContent).
    let (text, v, err) = call(
        &mut s,
        "edit_file",
        json!({"path": "latin1.txt", "edits": [], "dryrun": true}),
    );
    assert!(err, "{text}");
    assert!(
        text.starts_with("Error: unknown argument(s) for edit_file: dryrun"),
        "{text}"
    );
    assert_eq!(
        (
            &v["code"],
            &v["path"],
            &v["unknown_arguments"],
            &v["content"]
        ),
        (
            &json!("unknown_argument"),
            &json!("latin1.txt"),
            &json!(["dryrun"]),
            &json!(text)
        ),
        "{v}"
    );
    let (text, v, err) = call(&mut s, "write_file", json!({"path": 7}));
    assert!(
        err && text.starts_with("Error: missing required argument(s)"),
        "{text}"
    );
    assert_eq!(
        (&v["code"], &v["path"]),
        (&json!("missing_argument"), &json!("")),
        "{v}"
    );
    assert_eq!(
        std::fs::read(root.join("latin1.txt")).unwrap(),
        b"caf\xe9\n"
    );
}

/// docs/files.md, `write_file`: a new file is imported and published in one transaction, and
/// later calls find its target. Through a router (docs/scale-out.md) that transaction runs on
/// the partition its binding's nonce chooses, and the new target's ID routes back there: every
/// later call through the router reaches it, and its rows are on that partition.
#[test]
fn new_files_written_are_found_by_later_calls() {
    let root = scratch("new");
    let mut s = start(&root, &[]);
    for i in 0..6 {
        let path = format!("new{i}.txt");
        let (text, sc, err) = call(
            &mut s,
            "write_file",
            json!({"path": path, "content": "one\r\ntwo\r\n"}),
        );
        assert!(!err, "{text}");
        let id = sc["target_file_id"].as_str().unwrap().to_owned();
        let (text, _, err) = edit(&mut s, &path, "two", "TWO");
        assert!(!err, "{text}");
        assert_eq!(
            std::fs::read(root.join(&path)).unwrap(),
            b"one\r\nTWO\r\n",
            "{path}"
        );
        // Read on the database that holds the target's rows: version 0 imported, 1 edited.
        assert_eq!(state(&id).0, "1", "{path}");
    }
}

/// docs/files.md, "Finding the file's target", and docs/security.md: a target another role made
/// with this file's label and granted to the front end's role is never taken for the file
/// (helper-48: the victim's edit was logged in the other role's target, where that role read
/// the new text, and a planted copy of the file's bytes refused every later edit for good). The
/// front end imports the file as a target of its own and publishes from it.
#[test]
fn a_target_of_another_role_with_the_files_label_is_never_used() {
    use std::os::unix::fs::MetadataExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    if rt.block_on(patchdiff_tests::not_through_a_router(
        &dsn(),
        "roles of its own in a database of its own",
    )) {
        return;
    }
    let db = patchdiff_tests::roles::unique("patchdiff_files_label");
    let (victim, planter) = (format!("{db}_victim"), format!("{db}_planter"));
    let root = scratch("foreign_label");
    std::fs::write(root.join("s.txt"), "password=old\n").unwrap();
    let meta = std::fs::metadata(&root).unwrap();
    let label = format!("files:{}:{}:s.txt", meta.dev(), meta.ino());
    let admin_config = patchdiff_tests::roles::config_for("postgres", None);
    let planted = rt.block_on(async {
        let admin = patchdiff_tests::roles::open(&admin_config).await.unwrap();
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {db} ENCODING 'UTF8' TEMPLATE template0"
            ))
            .await
            .unwrap();
        let c = patchdiff_tests::roles::open(&patchdiff_tests::roles::config_for(&db, None))
            .await
            .unwrap();
        c.batch_execute("CREATE EXTENSION pg_patchdiff")
            .await
            .unwrap();
        for role in [&victim, &planter] {
            c.batch_execute(&patchdiff_tests::roles::recipe(&db, role, "pw"))
                .await
                .unwrap();
        }
        let p = patchdiff_tests::roles::open(&patchdiff_tests::roles::config_for(
            &db,
            Some((&planter, "pw")),
        ))
        .await
        .unwrap();
        // A target of a group role both are members of, which the victim's role reaches as an
        // owner (`access: "owner"`) though another member made it (helper-52).
        let team = format!("{db}_team");
        c.batch_execute(&format!(
            "CREATE ROLE {team} NOLOGIN; GRANT {team} TO {victim}, {planter}; \
             ALTER ROLE {victim} INHERIT; \
             GRANT EXECUTE ON FUNCTION patchdiff_initialize_target(json) TO {team}"
        ))
        .await
        .unwrap();
        p.batch_execute(&format!("SET ROLE {team}")).await.unwrap();
        let of_group = patchdiff_tests::initialize_target(&p, &label, "password=old\n")
            .await
            .unwrap();
        p.batch_execute("RESET ROLE").await.unwrap();
        let t = patchdiff_tests::initialize_target(&p, &label, "password=old\n")
            .await
            .unwrap();
        let granted = patchdiff_tests::call(
            &p,
            "patchdiff_grant",
            &json!({"target_file_id": t, "role": victim, "privilege": "write"}),
        )
        .await
        .unwrap();
        assert_eq!(granted["status"], "ok", "{granted}");
        [t, of_group]
    });
    let as_victim = format!("{} dbname={db} user={victim} password=pw", dsn());
    let root_text = root.to_string_lossy().into_owned();
    let key = key_file();
    let mut s = Session::start(
        &as_victim,
        &[
            ("PATCHDIFF_MCP_PROFILE", "files"),
            ("PATCHDIFF_WORKSPACE_ROOT", root_text.as_str()),
            ("PATCHDIFF_WORKSPACE_KEY_FILE", key.as_str()),
        ],
        "2025-06-18",
    );
    let (text, v, err) = edit(&mut s, "s.txt", "password=old", "password=NEWSECRET");
    assert!(!err, "{text}");
    for t in &planted {
        assert_ne!(v["target_file_id"], t.as_str(), "{v}");
    }
    assert_eq!(
        std::fs::read(root.join("s.txt")).unwrap(),
        b"password=NEWSECRET\n"
    );
    drop(s);
    rt.block_on(async {
        let c = patchdiff_tests::roles::open(&patchdiff_tests::roles::config_for(&db, None))
            .await
            .unwrap();
        for t in &planted {
            let attempts: i64 = c
                .query_one(
                    "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::text::uuid",
                    &[t],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(attempts, 0, "the victim's edit reached a planted target");
        }
        drop(c);
        let admin = patchdiff_tests::roles::open(&admin_config).await.unwrap();
        for sql in [
            format!("DROP DATABASE {db} WITH (FORCE)"),
            format!("DROP ROLE {db}_team"),
            format!("DROP ROLE {victim}"),
            format!("DROP ROLE {planter}"),
        ] {
            admin.batch_execute(&sql).await.unwrap();
        }
    });
}

/// Waits for the workspace test hook (docs/workspace.md "Test hooks") to pause in `dir`.
fn wait_paused(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("paused").exists() {
        assert!(Instant::now() < deadline, "the test hook never paused");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A file `name` holding `before`, read (imported) by a front end that is then killed between
/// the installation and the commit of `call` (the workspace test hook `before_commit`), once the
/// disk holds `after` and the killed call's transaction has rolled back: the root and the target.
fn interrupted_before_commit(
    scratch_name: &str,
    name: &str,
    before: &str,
    call_params: Value,
    after: &str,
) -> (PathBuf, String) {
    let base = scratch(scratch_name);
    let (root, hook) = (base.join("root"), base.join("hook"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&hook).unwrap();
    std::fs::write(root.join(name), before).unwrap();
    let hook_dir = hook.display().to_string();
    let mut a = start(
        &root,
        &[
            ("PATCHDIFF_WORKSPACE_TEST_HOOK", "before_commit"),
            ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
        ],
    );
    let (_, read, _) = call(&mut a, "read_file", json!({"path": name}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    let line = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": call_params});
    a.pipes.send(format!("{line}\n").as_bytes());
    wait_paused(&hook);
    a.pipes.kill();
    drop(a);
    assert_eq!(std::fs::read_to_string(root.join(name)).unwrap(), after);
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(&target) != ("0".into(), "0".into(), sha(before.as_bytes())) {
        assert!(
            Instant::now() < deadline,
            "the killed call's transaction is still open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (root, target)
}

/// `k.py` (`x = 1`, `y = 2`) after the edit `x = 1` -> `x = 1 + 1` was killed between its
/// installation and its commit ([`interrupted_before_commit`]).
fn interrupted_edit(scratch_name: &str) -> (PathBuf, String) {
    interrupted_before_commit(
        scratch_name,
        "k.py",
        "x = 1\ny = 2\n",
        json!({"name": "edit_file", "arguments": {"path": "k.py", "edits": [{"oldText": "x = 1", "newText": "x = 1 + 1"}]}}),
        "x = 1 + 1\ny = 2\n",
    )
}

/// docs/files.md "Retries", docs/workspace.md "Reconciling after `partial` or a crash"
/// (helper-89): a front end killed between the file's installation and its commit leaves the
/// disk one edit ahead of the target. The same `edit_file` sent again to a new process is that
/// call: it is recorded once, on the text it was sent against, and the file is not edited again.
/// It used to be refused as a change on disk ("read it again, then redo the edit"), and doing
/// so applied the edit twice (`x = 1 + 1 + 1`).
#[test]
fn an_edit_interrupted_before_its_commit_is_recorded_once_when_sent_again() {
    let (root, target) = interrupted_edit("interrupted");
    let file = root.join("k.py");
    let mut b = start(&root, &[]);
    let (text, v, err) = edit(&mut b, "k.py", "x = 1", "x = 1 + 1");
    assert!(!err, "{text} {v}");
    assert_eq!(
        (v["status"].as_str(), v["version"].as_i64()),
        (Some("accepted"), Some(1)),
        "{v}"
    );
    assert_eq!(v["target_file_id"], target.as_str());
    assert!(text.contains("-x = 1\n+x = 1 + 1"), "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 1 + 1\ny = 2\n");
    assert_eq!(
        state(&target),
        ("1".into(), "1".into(), sha(b"x = 1 + 1\ny = 2\n"))
    );
    let kinds: Vec<String> = log(&target).into_iter().map(|r| r.0).collect();
    assert_eq!(kinds, ["accepted"]);
    // Sent once more, it is the resend of a call that succeeded.
    let (_, v, err) = edit(&mut b, "k.py", "x = 1", "x = 1 + 1");
    assert!(!err);
    assert_eq!(v["status"], "deduplicated", "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 1 + 1\ny = 2\n");
}

/// docs/files.md "Retries" (helper-89): the same `edit_file` from two processes at once is
/// applied, published and checkpointed once; the other call answers `deduplicated`. The one that
/// recovered the other's commit used to publish again: a second checkpoint and editing cycle,
/// and both answered `accepted`.
#[test]
fn the_same_edit_from_two_processes_at_once_is_published_once() {
    let root = scratch("twice");
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    for round in 0..4 {
        let name = format!("t{round}.py");
        let file = root.join(&name);
        std::fs::write(&file, "x = 1\n").unwrap();
        let (_, read, _) = call(&mut a, "read_file", json!({"path": name}));
        let target = read["target_file_id"].as_str().unwrap().to_owned();
        let (_, read, _) = call(&mut b, "read_file", json!({"path": name}));
        assert_eq!(read["target_file_id"], target.as_str());
        let line = |id: i64| {
            let l = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "edit_file", "arguments": {"path": name, "edits": [{"oldText": "x = 1", "newText": "x = 2"}]}}});
            format!("{l}\n")
        };
        a.pipes.send(line(1000 + round).as_bytes());
        b.pipes.send(line(1000 + round).as_bytes());
        let mut statuses = Vec::new();
        for s in [&mut a, &mut b] {
            let reply: Value =
                serde_json::from_slice(&s.pipes.line(Duration::from_secs(30)).unwrap()).unwrap();
            statuses.push(reply["result"]["structuredContent"]["status"].clone());
        }
        statuses.sort_by_key(|s| s.to_string());
        assert_eq!(
            statuses,
            [json!("accepted"), json!("deduplicated")],
            "round {round}"
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"x = 2\n");
        assert_eq!(state(&target), ("1".into(), "1".into(), sha(b"x = 2\n")));
        assert_eq!(log(&target).len(), 1);
        let cycles = rows(
            "SELECT count(*)::text FROM patchdiff.editing_cycles WHERE target_file_id = $1::text::uuid",
            &target,
        );
        assert_eq!(cycles[0][0].as_deref(), Some("2"), "round {round}");
    }
}

/// docs/files.md "Retries": a `write_file` interrupted between installation and commit, sent
/// again, is recorded once against the target's text; it was refused as a change on disk.
#[test]
fn a_write_interrupted_before_its_commit_is_recorded_when_sent_again() {
    let (root, target) = interrupted_before_commit(
        "interrupted-write",
        "w.txt",
        "old\n",
        json!({"name": "write_file", "arguments": {"path": "w.txt", "content": "new\n"}}),
        "new\n",
    );
    let mut b = start(&root, &[]);
    let (text, v, err) = call(
        &mut b,
        "write_file",
        json!({"path": "w.txt", "content": "new\n"}),
    );
    assert!(!err, "{text} {v}");
    assert_eq!(
        (v["status"].as_str(), v["version"].as_i64()),
        (Some("accepted"), Some(1)),
        "{v}"
    );
    assert_eq!(std::fs::read(root.join("w.txt")).unwrap(), b"new\n");
    assert_eq!(state(&target), ("1".into(), "1".into(), sha(b"new\n")));
    let kinds: Vec<String> = log(&target).into_iter().map(|r| r.0).collect();
    assert_eq!(kinds, ["accepted"]);
}

/// docs/files.md "Retries" (helper-91): a process whose remembered version was moved on and back
/// by another (an edit and its revert) sends an edit keyed on that old version. The target is
/// read again first, so the edit applies to the current version; it used to recover the first
/// edit's recorded outcome and answer "already applied" to a file that did not hold it.
#[test]
fn an_edit_after_another_process_edited_and_reverted_is_applied() {
    let root = scratch("aba");
    let file = root.join("k.py");
    std::fs::write(&file, "x = 1\ny = 2\n").unwrap();
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    let (_, read, _) = call(&mut a, "read_file", json!({"path": "k.py"}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    call(&mut b, "read_file", json!({"path": "k.py"}));
    let (text, _, err) = edit(&mut a, "k.py", "x = 1", "x = 2");
    assert!(!err, "{text}");
    let (text, _, err) = edit(&mut a, "k.py", "x = 2", "x = 1");
    assert!(!err, "{text}");
    let (text, v, err) = edit(&mut b, "k.py", "x = 1", "x = 2");
    assert!(!err, "{text} {v}");
    assert_eq!(
        (v["status"].as_str(), v["version"].as_i64()),
        (Some("accepted"), Some(3)),
        "{v}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 2\ny = 2\n");
    assert_eq!(state(&target).0, "3");
}

/// docs/files.md "Retries" (helper-91): after a kill between installation and commit, the file's
/// line endings changed on disk; the resent edit is recorded once and published in the file's
/// line endings, which the disk already holds, and a second resend is deduplicated: it never
/// imports the file anew and applies itself to a disk that already holds it (it did:
/// `x = 1 + 1 + 1`). A dry run of the same edit after the kill previews it as the call would
/// record it.
#[test]
fn an_interrupted_edit_is_never_applied_twice_after_a_line_ending_change() {
    let (root, target) = interrupted_edit("interrupted-eol");
    let file = root.join("k.py");
    let mut b = start(&root, &[]);
    let (text, v, err) = call(
        &mut b,
        "edit_file",
        json!({"path": "k.py", "edits": [{"oldText": "x = 1", "newText": "x = 1 + 1"}], "dryRun": true}),
    );
    assert!(!err, "{text}");
    assert_eq!(v["status"], "preview", "{v}");
    assert!(text.contains("-x = 1\n+x = 1 + 1"), "{text}");
    std::fs::write(&file, "x = 1 + 1\r\ny = 2\r\n").unwrap();
    // Recorded once, published in the file's own (new) line endings, which the disk already
    // holds; sent again, it is the resend of a call that succeeded.
    for status in ["accepted", "deduplicated"] {
        let (text, v, err) = edit(&mut b, "k.py", "x = 1", "x = 1 + 1");
        assert!(!err, "{text}");
        assert_eq!(v["status"], status, "{v}");
        assert_eq!(std::fs::read(&file).unwrap(), b"x = 1 + 1\r\ny = 2\r\n");
    }
    assert_eq!(state(&target).0, "1");
}

/// docs/files.md "Retries" (helper-93, helper-95): a write that changes nothing (the same content,
/// or the same text in other line endings) makes a version, which the edit that made the file's
/// text passes over when it recognizes its own resend, from another process too; the resend used
/// to be taken for a new request and applied a second time. A dry run of that resend answers what
/// the call does: `deduplicated`. And an edit keeps the line endings the file has on disk (a
/// `write_file` in CRLF, then an edit, turned the file back to LF).
#[test]
fn versions_that_change_nothing_leave_resends_recognized() {
    let root = scratch("no-op-write");
    let file = root.join("nw.txt");
    std::fs::write(&file, "x = 1\n").unwrap();
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    let (_, read, _) = call(&mut a, "read_file", json!({"path": "nw.txt"}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    let (text, _, err) = edit(&mut a, "nw.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    call(&mut b, "read_file", json!({"path": "nw.txt"}));
    for content in ["x = 1 + 1\n", "x = 1 + 1\r\n"] {
        let (text, v, err) = call(
            &mut b,
            "write_file",
            json!({"path": "nw.txt", "content": content}),
        );
        assert!(!err, "{text}");
        assert_eq!(v["status"], "accepted", "{v}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
        let (text, v, err) = call(
            &mut a,
            "edit_file",
            json!({"path": "nw.txt", "edits": [{"oldText": "x = 1", "newText": "x = 1 + 1"}], "dryRun": true}),
        );
        assert!(!err, "{text}");
        assert_eq!(v["status"], "deduplicated", "{v}");
        let (text, v, err) = edit(&mut a, "nw.txt", "x = 1", "x = 1 + 1");
        assert!(!err, "{text}");
        assert_eq!(v["status"], "deduplicated", "{v}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), content);
    }
    assert_eq!(state(&target).0, "3");
    // The file is CRLF now: an edit keeps it so.
    let (text, _, err) = edit(&mut a, "nw.txt", "1 + 1", "2");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 2\r\n");
}

/// helper-95: a file whose line endings were changed on disk after it was read, written with
/// exactly what it holds, is published (the publication's baseline follows the disk), and an
/// edit after it applies.
#[test]
fn a_write_of_what_the_disk_holds_after_a_line_ending_change_keeps_the_file_editable() {
    let root = scratch("eol-write");
    let file = root.join("c.txt");
    std::fs::write(&file, "a\r\nb\r\n").unwrap();
    let mut s = start(&root, &[]);
    call(&mut s, "read_file", json!({"path": "c.txt"}));
    std::fs::write(&file, "a\nb\n").unwrap();
    let (text, _, err) = call(
        &mut s,
        "write_file",
        json!({"path": "c.txt", "content": "a\nb\n"}),
    );
    assert!(!err, "{text}");
    let (text, _, err) = edit(&mut s, "c.txt", "a", "A");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"A\nb\n");
}

/// docs/files.md "Paths" (helper-94): a path the workspace takes but whose target name (the
/// files profile's label, the path behind a prefix) would pass the extension's 4,096 bytes is
/// refused as `path_too_long`, naming the path's own length, before anything is created; the
/// extension used to refuse it as a `filename` the caller never gave.
#[test]
fn a_path_too_long_for_its_label_is_refused_before_anything_is_created() {
    let root = scratch("long-path");
    let mut s = start(&root, &[]);
    let path = format!("{}z.txt", "a/".repeat(2040));
    assert!(path.len() < 4096);
    let (text, v, err) = call(
        &mut s,
        "write_file",
        json!({"path": path, "content": "x\n"}),
    );
    assert!(err, "{text}");
    assert_eq!(v["code"], "path_too_long", "{v}");
    assert!(text.contains("4085 bytes long"), "{text}");
    assert!(!root.join("a").exists());
}

/// docs/files.md "Retries" (helper-97): passing over versions that changed nothing (a) still
/// honours a `read_file` made after the edit (the same edit is then a new request and applies),
/// (b) passes over as many as it says (20), and (c) does not stop at this process's own last call
/// when that call changed nothing.
#[test]
fn passing_over_versions_that_changed_nothing_keeps_the_other_retry_rules() {
    let root = scratch("no-op-rules");
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    let fresh = |name: &str, a: &mut patchdiff_tests::stdio::Session| {
        std::fs::write(root.join(name), "x = 1\n").unwrap();
        call(a, "read_file", json!({"path": name}));
        let (text, _, err) = edit(a, name, "x = 1", "x = 1 + 1");
        assert!(!err, "{text}");
    };
    // (a) Read after the edit, then another process writes the same text: applied again.
    fresh("ra.txt", &mut a);
    call(&mut a, "read_file", json!({"path": "ra.txt"}));
    call(
        &mut b,
        "write_file",
        json!({"path": "ra.txt", "content": "x = 1 + 1\n"}),
    );
    let (text, v, err) = edit(&mut a, "ra.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    assert_eq!(v["status"], "accepted", "{v}");
    assert_eq!(
        std::fs::read(root.join("ra.txt")).unwrap(),
        b"x = 1 + 1 + 1\n"
    );
    // (b) Twenty writes that change nothing: still the resend of the call that made the text.
    fresh("rb.txt", &mut a);
    for _ in 0..20 {
        call(
            &mut b,
            "write_file",
            json!({"path": "rb.txt", "content": "x = 1 + 1\n"}),
        );
    }
    let (_, v, _) = edit(&mut a, "rb.txt", "x = 1", "x = 1 + 1");
    assert_eq!(v["status"], "deduplicated", "{v}");
    assert_eq!(std::fs::read(root.join("rb.txt")).unwrap(), b"x = 1 + 1\n");
    // (c) This process's own edit that changed nothing hides no earlier call.
    fresh("rc.txt", &mut a);
    let (text, _, err) = edit(&mut a, "rc.txt", "+ 1", "+ 1");
    assert!(!err, "{text}");
    let (_, v, _) = edit(&mut a, "rc.txt", "x = 1", "x = 1 + 1");
    assert_eq!(v["status"], "deduplicated", "{v}");
    assert_eq!(std::fs::read(root.join("rc.txt")).unwrap(), b"x = 1 + 1\n");
}

/// How many targets are named `label` (through a router, on every partition): through the API,
/// as the files profile looks them up.
fn targets_named(label: &str) -> usize {
    patchdiff_tests::with_sql(&dsn(), async |c| {
        let v = patchdiff_tests::call(
            c,
            "patchdiff_list_targets",
            &json!({"filename_prefix": label, "limit": 200}),
        )
        .await
        .unwrap();
        v["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["filename"] == label)
            .count()
    })
}

/// The refusal's code: `failure_reason` of a workspace or engine refusal, `code` of an invalid
/// argument.
fn refused_as(v: &Value) -> &str {
    v["failure_reason"]
        .as_str()
        .or(v["code"].as_str())
        .unwrap_or_default()
}

/// docs/files.md "Limits" and "edit_file", docs/workspace.md "Reserved paths" (helper-114): each of
/// these is refused before anything is written, where before it was written or misnamed:
/// - a `newText` with a lone CR is `mixed_line_endings`, as `write_file` refuses it (before: `o\rne`
///   accepted, and `o\nne` written);
/// - a new file over 8 MiB is `workspace_file_too_large` (before: written, and then refused by
///   every later call on it);
/// - a file whose text is over 16 MiB once JSON-escaped is `workspace_file_too_large` on its first
///   read (before: `arguments_too_large`, "nothing was read or written", of a call that sent a path);
/// - a file named `HEAD` is `workspace_path_reserved` (before: created, the key file of a bare git
///   repository with `objects/`, `refs/` and a `config` whose `core.fsmonitor` runs commands).
#[test]
fn files_that_could_not_be_kept_or_that_run_commands_are_refused_before_anything_is_written() {
    let root = scratch("refused-first");
    std::fs::write(root.join("cr.txt"), "one\ntwo\n").unwrap();
    std::fs::write(root.join("ctl.txt"), "\u{1}".repeat(3 * 1024 * 1024)).unwrap();
    let mut s = start(&root, &[]);

    let (text, v, err) = edit(&mut s, "cr.txt", "one", "o\rne");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "mixed_line_endings", "{v}");
    assert_eq!(std::fs::read(root.join("cr.txt")).unwrap(), b"one\ntwo\n");

    let big = "a".repeat(8 * 1024 * 1024 + 1);
    let (text, v, err) = call(
        &mut s,
        "write_file",
        json!({"path": "big.txt", "content": big}),
    );
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "workspace_file_too_large", "{v}");
    assert!(!root.join("big.txt").exists());

    let (text, v, err) = call(&mut s, "read_file", json!({"path": "ctl.txt"}));
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "workspace_file_too_large", "{v}");
    assert!(text.contains("once JSON-escaped"), "{text}");

    for path in ["evil/HEAD", "evil/head"] {
        let (text, v, err) = call(
            &mut s,
            "write_file",
            json!({"path": path, "content": "ref: refs/heads/main\n"}),
        );
        assert!(err, "{text}");
        assert_eq!(refused_as(&v), "workspace_path_reserved", "{v}");
    }
    assert!(!root.join("evil").exists());

    // A path or a text with an escaped lone surrogate is answered as what it is (before: "the path
    // is empty", "content must be a string").
    for (id, args) in [
        (91, r#"{"path": "a\ud800.txt"}"#),
        (92, r#"{"path": "s.txt", "content": "x\udc00"}"#),
    ] {
        let name = if id == 91 { "read_file" } else { "write_file" };
        let line = format!(
            r#"{{"jsonrpc": "2.0", "id": {id}, "method": "tools/call", "params": {{"name": "{name}", "arguments": {args}}}}}"#
        );
        s.pipes.send(format!("{line}\n").as_bytes());
        let reply: Value =
            serde_json::from_slice(&s.pipes.line(Duration::from_secs(30)).unwrap()).unwrap();
        let text = reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(reply["result"]["isError"], true, "{reply}");
        assert!(text.contains("lone surrogate"), "{reply}");
    }
    assert!(!root.join("s.txt").exists());
    // Beside it, the other names of a repository are still ordinary files.
    let (text, _, err) = call(
        &mut s,
        "write_file",
        json!({"path": "evil/config", "content": "[core]\n"}),
    );
    assert!(!err, "{text}");
}

/// Whether the tests run through a router (then `why` is printed, and the caller skips).
fn through_a_router(why: &str) -> bool {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(patchdiff_tests::not_through_a_router(&dsn(), why))
}

/// Renames target `id` of `rel` under `root` to the label front ends gave before labels named
/// their key, as if an earlier version had imported it (on one database, not through a router).
fn labelled_as_before_key_tags(root: &Path, rel: &str, id: &str) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root).unwrap();
    let legacy = format!("files:{}:{}:{rel}", meta.dev(), meta.ino());
    patchdiff_tests::with_sql(&dsn(), async |c| {
        c.execute(
            "UPDATE patchdiff.targets SET filename = $1 WHERE target_file_id = $2::text::uuid",
            &[&legacy, &id],
        )
        .await
        .unwrap()
    });
}

/// docs/files.md "Which target a file is": front ends with different binding keys on one root
/// and role (two users' default key files) each keep to targets of their own key, so their edits
/// apply in turn; and a target imported before labels named their key is still found, so a file
/// keeps its history. Before, each took the other's target for the disk's text and was refused
/// by its binding proof: 199 of 200 edits refused, and a new target at every read (helper-118).
#[test]
fn front_ends_with_different_keys_keep_to_their_own_targets() {
    let root = scratch("two-keys");
    let file = root.join("f.txt");
    std::fs::write(&file, "n = 0\n").unwrap();
    let other = patchdiff_tests::workspace_key_file("pd-files-118")
        .to_string_lossy()
        .into_owned();
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[("PATCHDIFF_WORKSPACE_KEY_FILE", other.as_str())]);
    for n in 0..6 {
        let s = if n % 2 == 0 { &mut a } else { &mut b };
        let (text, _, err) = call(s, "read_file", json!({"path": "f.txt"}));
        assert!(!err && text == format!("n = {n}\n"), "round {n}: {text}");
        let (text, v, err) = edit(s, "f.txt", &format!("n = {n}"), &format!("n = {}", n + 1));
        assert!(!err, "round {n}: {text} {v}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "n = 6\n");
    drop((a, b));

    if through_a_router("a target renamed in place") {
        return;
    }
    std::fs::write(root.join("g.txt"), "g0\n").unwrap();
    let mut a = start(&root, &[]);
    let (_, read, _) = call(&mut a, "read_file", json!({"path": "g.txt"}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    drop(a);
    labelled_as_before_key_tags(&root, "g.txt", &target);
    let mut a = start(&root, &[]);
    let (text, v, err) = edit(&mut a, "g.txt", "g0", "g1");
    assert!(!err, "{text}");
    assert_eq!(v["target_file_id"], target.as_str(), "{v}");
    assert_eq!(std::fs::read_to_string(root.join("g.txt")).unwrap(), "g1\n");
}

/// docs/files.md "The tools": a call PostgreSQL cancels (here a statement timeout while an
/// administrator holds a table lock) wrote nothing, and is answered so, with the code the other
/// profiles give (`cancelled`, `statement_timeout`), not as an outcome unknown (helper-120).
#[test]
fn a_call_cancelled_by_a_statement_timeout_is_answered_as_such() {
    if through_a_router("a table lock on one server") {
        return;
    }
    let root = scratch("timeout");
    std::fs::write(root.join("t.txt"), "t\n").unwrap();
    let mut s = start(&root, &[("PATCHDIFF_MCP_STATEMENT_TIMEOUT", "300ms")]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let holder = rt.block_on(async {
        let c = patchdiff_tests::connect(&dsn()).await.unwrap();
        c.batch_execute("BEGIN; LOCK TABLE patchdiff.targets IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        c
    });
    let (text, v, err) = call(&mut s, "read_file", json!({"path": "t.txt"}));
    rt.block_on(holder.batch_execute("ROLLBACK")).unwrap();
    assert!(err, "{text}");
    assert_eq!(
        (&v["status"], &v["code"], &v["nothing_written"]),
        (
            &json!("cancelled"),
            &json!("statement_timeout"),
            &json!(true)
        ),
        "{v}"
    );
    assert!(
        text.starts_with("Error: looking the file up: PostgreSQL cancelled"),
        "{text}"
    );
    let (text, _, err) = call(&mut s, "read_file", json!({"path": "t.txt"}));
    assert!(!err && text == "t\n", "{text}");
}

/// docs/files.md "Stale files": a file changed on disk since it was last read is refused, also
/// when it was changed back to the text of an older target of the file (another tool's `git
/// checkout`): an edit or a write does not go back to that target. After a read, which takes it,
/// the edit applies. Before, the edit was applied to the older target and published over the
/// reverted file, the agent having last read another text (helper-118).
#[test]
fn a_file_changed_back_to_an_older_text_is_stale_until_read() {
    let root = scratch("revert");
    let file = root.join("c.txt");
    let (x, y) = (
        "limit = 10\nmode = \"safe\"\n",
        "limit = 10\nmode = \"fast\"\n",
    );
    std::fs::write(&file, x).unwrap();
    let mut s = start(&root, &[]);
    let (_, first, _) = call(&mut s, "read_file", json!({"path": "c.txt"}));
    std::fs::write(&file, y).unwrap();
    let (text, second, _) = call(&mut s, "read_file", json!({"path": "c.txt"}));
    assert_eq!(text, y);
    assert_ne!(
        first["target_file_id"], second["target_file_id"],
        "{second}"
    );
    std::fs::write(&file, x).unwrap();
    let (text, v, err) = edit(&mut s, "c.txt", "limit = 10", "limit = 99");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    let (text, v, err) = call(
        &mut s,
        "write_file",
        json!({"path": "c.txt", "content": "limit = 10\nretries = 3\n"}),
    );
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    assert!(text.contains("write it again"), "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), x);
    let (text, _, err) = call(&mut s, "read_file", json!({"path": "c.txt"}));
    assert!(!err && text == x, "{text}");
    let (text, _, err) = edit(&mut s, "c.txt", "limit = 10", "limit = 99");
    assert!(!err, "{text}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "limit = 99\nmode = \"safe\"\n"
    );
    // One process: X read (its target), Y read (imported), X read again (the first target
    // taken again), then Y outside, which nobody reads: a write is stale, though Y's target is
    // the file's newest (helper-122: accepted there, the outside change lost).
    let file = root.join("e.txt");
    read_each(&mut s, &file, &["X\n", "Y\n", "X\n"]);
    std::fs::write(&file, "Y\n").unwrap();
    let (text, v, err) = call(
        &mut s,
        "write_file",
        json!({"path": "e.txt", "content": "W\n"}),
    );
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "Y\n");
    // With two processes: B read X; outside, the file became Y (A read it), then Z (A read it),
    // then Y again. B's write applies only to B's own target (X's): it is stale (helper-120:
    // accepted on Y's target, made after B's, the outside change lost).
    let file = root.join("d.txt");
    std::fs::write(&file, "X\n").unwrap();
    let mut b = start(&root, &[]);
    call(&mut b, "read_file", json!({"path": "d.txt"}));
    read_each(&mut s, &file, &["Y\n", "Z\n"]);
    std::fs::write(&file, "Y\n").unwrap();
    let (text, v, err) = call(
        &mut b,
        "write_file",
        json!({"path": "d.txt", "content": "W\n"}),
    );
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    let (text, v, err) = edit(&mut b, "d.txt", "Y", "W");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "Y\n");
}

/// docs/files.md "Retries" and "Stale files": a refusal does not make a process forget the target
/// it knows. A's edit is refused for a change of line endings made outside; the file then changes
/// outside again and another process reads (imports) it: A's next edit, with no read between, is
/// refused as stale, and once the file is made as it was, A's same edit applies. Before, the
/// refusal forgot A's target and the next edit took the file's newest, over the change A had not
/// read (helper-123). And a resend from a new process of an edit whose target is not the file's
/// newest (the file went X, Y, X, each read) is recognized, not refused as stale (helper-123: the
/// edit, redone after a read as the refusal advised, was applied twice).
#[test]
fn refusals_keep_the_known_target_and_resends_find_theirs() {
    let root = scratch("keep-known");
    let file = root.join("k.txt");
    let (x, y) = (
        "limit = 10\nmode = \"safe\"\n",
        "limit = 10\nmode = \"fast\"\n",
    );
    std::fs::write(&file, x).unwrap();
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    call(&mut a, "read_file", json!({"path": "k.txt"}));
    std::fs::write(&file, x.replace('\n', "\r\n")).unwrap();
    let (text, v, err) = edit(&mut a, "k.txt", "limit = 10", "limit = 99");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "external_disk_drift", "{v}");
    std::fs::write(&file, y).unwrap();
    let (text, _, err) = call(&mut b, "read_file", json!({"path": "k.txt"}));
    assert!(!err && text == y, "{text}");
    let (text, v, err) = edit(&mut a, "k.txt", "limit = 10", "limit = 99");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), y);

    let file = root.join("r.txt");
    read_each(&mut a, &file, &["x = 1\n", "y = 2\n", "x = 1\n"]);
    let (text, first, err) = edit(&mut a, "r.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    drop(a);
    let mut c = start(&root, &[]);
    let (text, v, err) = edit(&mut c, "r.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    assert_eq!(v["status"], "deduplicated", "{v}");
    assert_eq!(v["target_file_id"], first["target_file_id"], "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x = 1 + 1\n");
    // The same when another, newer target already holds the edit's result (the file held it
    // earlier, made outside and read, then went back): a new process's resend is recognized on
    // the target the call changed, not applied to the other (helper-124: `x = 1 + 1 + 1`).
    let file = root.join("t.txt");
    let mut a = start(&root, &[]);
    read_each(&mut a, &file, &["x = 1\n", "x = 1 + 1\n", "x = 1\n"]);
    let (text, first, err) = edit(&mut a, "t.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    drop(a);
    let mut d = start(&root, &[]);
    let (text, v, err) = edit(&mut d, "t.txt", "x = 1", "x = 1 + 1");
    assert!(!err, "{text}");
    assert_eq!(v["status"], "deduplicated", "{v}");
    assert_eq!(v["target_file_id"], first["target_file_id"], "{v}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x = 1 + 1\n");
}

/// docs/files.md "Limits": an edit that would make the file larger than the profile reads (8 MiB,
/// or 16 MiB once JSON-escaped) is refused before anything is sent or written, a dry run too;
/// one that stays within them applies, and the file is read again. Before, the edit applied and
/// every later call on the file was refused as too large (helper-118).
#[test]
fn an_edit_that_would_make_a_file_too_large_to_read_is_refused() {
    let root = scratch("grow");
    let limit = 8 * 1024 * 1024;
    // 4 bytes under the limit.
    let big = format!("@A@\n{}\n", "x".repeat(limit - 9));
    std::fs::write(root.join("big.txt"), &big).unwrap();
    std::fs::write(root.join("small.txt"), "a\n").unwrap();
    let mut s = start(&root, &[]);
    let (_, read, err) = call(&mut s, "read_file", json!({"path": "big.txt", "head": 1}));
    assert!(!err, "{read}");
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    let logged = log(&target).len();
    for dry in [true, false] {
        let (text, v, err) = call(
            &mut s,
            "edit_file",
            json!({"path": "big.txt", "edits": [{"oldText": "@A@", "newText": "@A@12345"}], "dryRun": dry}),
        );
        assert!(err, "{text}");
        assert_eq!(refused_as(&v), "workspace_file_too_large", "{v}");
        assert!(text.contains(&format!("{} bytes", limit + 1)), "{text}");
    }
    assert_eq!(std::fs::read(root.join("big.txt")).unwrap(), big.as_bytes());
    assert_eq!(log(&target).len(), logged, "nothing was sent");
    // Exactly at the limit: applied, and the file is still read.
    let (text, _, err) = edit(&mut s, "big.txt", "@A@", "@A@1234");
    assert!(!err, "{text}");
    assert_eq!(
        std::fs::metadata(root.join("big.txt")).unwrap().len(),
        limit as u64
    );
    // The same call again (no read between) is its resend, answered as such, in this process and
    // a new one, not counted as growing the file again (helper-120).
    for fresh in [false, true] {
        if fresh {
            s = start(&root, &[]);
        }
        let (text, v, err) = edit(&mut s, "big.txt", "@A@", "@A@1234");
        assert!(!err, "{text}");
        assert_eq!(v["status"], "deduplicated", "{v}");
    }
    drop(s);
    let mut s = start(&root, &[]);
    let (text, v, err) = call(&mut s, "read_file", json!({"path": "big.txt", "head": 1}));
    assert!(!err && text == "@A@1234", "{text} {v}");
    // Edits that do not apply are refused as such, not as too large (helper-120).
    let (text, v, err) = edit(&mut s, "big.txt", "@B@", &"y".repeat(100));
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "match_absent", "{v}");
    // A file whose only line break an edit removed is published with the line endings it was
    // imported with (CRLF here): its later line breaks count two bytes (helper-120: counted as
    // one, an edit made an 8,776,002-byte file).
    let crlf = format!("{}Q\r\nZ", "x".repeat(8_000_000));
    std::fs::write(root.join("crlf.txt"), &crlf).unwrap();
    let (text, _, err) = edit(&mut s, "crlf.txt", "Q\nZ", "QZ");
    assert!(!err, "{text}");
    let (text, v, err) = edit(
        &mut s,
        "crlf.txt",
        "QZ",
        &format!("Q{}Z", "\n".repeat(388_000)),
    );
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "workspace_file_too_large", "{v}");
    assert!(text.contains("8776002 bytes"), "{text}");
    // Escaped: 2,800,000 control characters are 2.8 MB on disk but 16.8 MB of arguments.
    let controls = "\u{1}".repeat(2_800_000);
    let (text, v, err) = edit(&mut s, "small.txt", "a", &controls);
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "workspace_file_too_large", "{v}");
    assert!(text.contains("once JSON-escaped"), "{text}");
    assert_eq!(std::fs::read(root.join("small.txt")).unwrap(), b"a\n");
}

/// docs/files.md "Which target a file is": a file whose target was bound by a front end with
/// another key (the key file replaced or lost) is a new file to this one, imported on its first
/// use (labels name their key). One whose target has the label of an earlier version (no key in
/// it) is refused as `workspace_binding_unverified` with advice this profile can follow (helper-114):
/// `read_file` imports it anew, and the edit then applies. Before helper-114 the advice named a
/// tool the profile does not have (`from_workspace: true`), `read_file` imported nothing (the text
/// matched), and every edit and write of the file was refused for good.
#[test]
fn a_file_bound_under_another_key_is_imported_anew_on_its_next_read() {
    let root = scratch("other-key");
    let file = root.join("k.txt");
    std::fs::write(&file, "alpha\n").unwrap();
    let mut a = start(&root, &[]);
    let (text, first, err) = edit(&mut a, "k.txt", "alpha", "beta");
    assert!(!err, "{text}");
    drop(a);
    let other = patchdiff_tests::workspace_key_file("pd-files-other")
        .to_string_lossy()
        .into_owned();
    let mut b = start(&root, &[("PATCHDIFF_WORKSPACE_KEY_FILE", other.as_str())]);
    let (text, v, err) = edit(&mut b, "k.txt", "beta", "gamma");
    assert!(!err, "{text}");
    assert_ne!(v["target_file_id"], first["target_file_id"], "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), b"gamma\n");
    // A new process with that key finds that target.
    drop(b);
    let mut c = start(&root, &[("PATCHDIFF_WORKSPACE_KEY_FILE", other.as_str())]);
    let (text, w, err) = edit(&mut c, "k.txt", "gamma", "delta");
    assert!(!err, "{text}");
    assert_eq!(w["target_file_id"], v["target_file_id"], "{w}");
    assert_eq!(std::fs::read(&file).unwrap(), b"delta\n");
    drop(c);

    if through_a_router("a target renamed in place") {
        return;
    }
    // A file only the other key's front end imported, its target labelled as an earlier version
    // labelled them: this key's front end finds it, and is refused by its binding proof.
    let moved = root.join("m.txt");
    std::fs::write(&moved, "one\n").unwrap();
    let mut b = start(&root, &[("PATCHDIFF_WORKSPACE_KEY_FILE", other.as_str())]);
    let (text, v, err) = edit(&mut b, "m.txt", "one", "two");
    assert!(!err, "{text}");
    drop(b);
    labelled_as_before_key_tags(&root, "m.txt", v["target_file_id"].as_str().unwrap());
    // Its stderr with the default filter: the refusal's warning is written (docs/profiles.md,
    // `PATCHDIFF_LOG`: warnings and above; it was errors only over stdio, helper-118).
    let log = scratch("other-key-log").join("stderr");
    let key = key_file();
    let root_text = root.to_string_lossy().into_owned();
    let mut d = Session::start_logging(
        &dsn(),
        &[
            ("PATCHDIFF_MCP_PROFILE", "files"),
            ("PATCHDIFF_WORKSPACE_ROOT", root_text.as_str()),
            ("PATCHDIFF_WORKSPACE_KEY_FILE", key.as_str()),
        ],
        "2025-06-18",
        std::fs::File::create(&log).unwrap(),
    );
    let (text, v, err) = edit(&mut d, "m.txt", "two", "three");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "workspace_binding_unverified", "{v}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("WARN"), "{logged:?}");
    assert!(
        text.contains("read_file") && !text.contains("from_workspace"),
        "{text}"
    );
    assert_eq!(std::fs::read(&moved).unwrap(), b"two\n");
    let (text, _, err) = call(&mut d, "read_file", json!({"path": "m.txt"}));
    assert!(!err && text == "two\n", "{text:?}");
    let (text, _, err) = edit(&mut d, "m.txt", "two", "three");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&moved).unwrap(), b"three\n");
}

/// Writes each of `texts` to `file` (under the session's root) in turn, and reads it with `s`
/// after each write.
fn read_each(s: &mut Session, file: &Path, texts: &[&str]) {
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    for text in texts {
        std::fs::write(file, text).unwrap();
        let (read, _, err) = call(s, "read_file", json!({"path": name}));
        assert!(!err && read == *text, "{read}");
    }
}

/// A process on `root` whose `read_file` of `path` (sent at once) the test hook `point` holds:
/// the session, and the hook's folder (write `resume` there to let it go on).
fn held_read(root: &Path, point: &str, path: &str) -> (Session, PathBuf) {
    held_call(root, point, "read_file", json!({"path": path}))
}

/// A process on `root` whose call of `tool` with `arguments` (sent at once) the test hook
/// `point` holds: the session, and the hook's folder.
fn held_call(root: &Path, point: &str, tool: &str, arguments: Value) -> (Session, PathBuf) {
    let hook = scratch(&format!(
        "{point}-{tool}-{}-hook",
        arguments["path"].as_str().unwrap_or("")
    ));
    let hook_dir = hook.to_string_lossy().into_owned();
    let mut s = start(
        root,
        &[
            ("PATCHDIFF_WORKSPACE_TEST_HOOK", point),
            ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
        ],
    );
    let line = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    s.pipes.send(format!("{line}\n").as_bytes());
    wait_paused(&hook);
    (s, hook)
}

/// Sends `read_file` of `path` as request `id`, without waiting for its answer.
fn send_read(s: &mut Session, id: u32, path: &str) {
    let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": path}}});
    s.pipes.send(format!("{line}\n").as_bytes());
}

/// The `result` of the next answer on `s`.
fn next_result(s: &mut Session) -> Value {
    let reply: Value =
        serde_json::from_slice(&s.pipes.line(Duration::from_secs(30)).unwrap()).unwrap();
    reply["result"].clone()
}

/// How many targets have the label of target `id` (the file's targets of this key).
fn targets_like(id: &str) -> usize {
    let label = rows(
        "SELECT filename FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        id,
    );
    targets_named(label[0][0].as_deref().unwrap())
}

/// docs/files.md "Which target a file is" (helper-114): a `read_file` that read the file just
/// before another process published a new version of it (installed and committed before the
/// read asked the database) reads it again and takes the same target, at the new version. The
/// test hook `after_read` pauses A's read between the two. Before, A imported the text it had
/// read, of a version already replaced, as a new target of the file: two processes that each
/// read, wrote and edited one file 150 times split its history over 49 targets.
#[test]
fn a_read_that_raced_another_process_s_publication_keeps_the_files_target() {
    let root = scratch("read-race");
    let file = root.join("r.txt");
    std::fs::write(&file, "v0\n").unwrap();
    let mut b = start(&root, &[]);
    let (_, read, _) = call(&mut b, "read_file", json!({"path": "r.txt"}));
    let target = read["target_file_id"].as_str().unwrap().to_owned();
    let (mut a, hook) = held_read(&root, "after_read", "r.txt");
    let (text, _, err) = call(
        &mut b,
        "write_file",
        json!({"path": "r.txt", "content": "v1\n"}),
    );
    assert!(!err, "{text}");
    std::fs::write(hook.join("resume"), "").unwrap();
    let r = next_result(&mut a);
    assert_eq!(r["content"][0]["text"], "v1\n", "{r}");
    assert_eq!(
        r["structuredContent"]["target_file_id"],
        target.as_str(),
        "{r}"
    );
    assert_eq!(r["structuredContent"]["version"], 1, "{r}");
    assert_eq!(targets_like(&target), 1, "one target for the file");
}

/// docs/files.md "Which target a file is": two processes whose first reads of a file come at
/// once import it once. A's import is held by the test hook `before_import` (it holds the file's
/// import lock there); B's read, which found no target either, waits for that lock, then finds
/// A's target. Before, B imported the file while A was held and A imported it again: one file,
/// two targets (helper-114).
#[test]
fn two_first_reads_at_once_import_the_file_once() {
    let root = scratch("first-reads");
    std::fs::write(root.join("f.txt"), "first\n").unwrap();
    let (mut a, hook) = held_read(&root, "before_import", "f.txt");
    let mut b = start(&root, &[]);
    send_read(&mut b, 2, "f.txt");
    // B has looked the file up (nothing) and waits for the lock A holds; it must not answer.
    assert!(
        b.pipes.line(Duration::from_millis(500)).is_err(),
        "B read the file while A held its import"
    );
    std::fs::write(hook.join("resume"), "").unwrap();
    let answer = |s: &mut Session| -> Value {
        let r = next_result(s);
        assert_eq!(r["isError"], false, "{r}");
        assert_eq!(r["content"][0]["text"], "first\n", "{r}");
        r["structuredContent"].clone()
    };
    let (va, vb) = (answer(&mut a), answer(&mut b));
    assert_eq!(va["target_file_id"], vb["target_file_id"], "{va} {vb}");
    assert_eq!(
        targets_like(va["target_file_id"].as_str().unwrap()),
        1,
        "one target for the file"
    );
}

/// docs/files.md "Retries", imports: an import reads the file again once it has its turn (the
/// lock), and imports the text the file holds then. A's read is held by the test hook
/// `before_import` after it read `one`; the file then holds `two`: the read answers `two`, and
/// no target of `one` is made. Before, the import made a target of `one`, a text the file no
/// longer held (helper-122: two first edits at once left 7 of 60 files such a second target);
/// a first fix refused such a read, and a file another program kept writing could then never be
/// read (helper-123).
#[test]
fn an_import_takes_the_text_the_file_holds_when_its_turn_comes() {
    let root = scratch("import-moved");
    let file = root.join("m.txt");
    std::fs::write(&file, "one\n").unwrap();
    let (mut a, hook) = held_read(&root, "before_import", "m.txt");
    std::fs::write(&file, "two\n").unwrap();
    std::fs::write(hook.join("resume"), "").unwrap();
    let r = next_result(&mut a);
    assert_eq!(r["isError"], false, "{r}");
    assert_eq!(r["content"][0]["text"], "two\n", "{r}");
    let (text, read, err) = call(&mut a, "read_file", json!({"path": "m.txt"}));
    assert!(!err && text == "two\n", "{text}");
    assert_eq!(
        read["target_file_id"], r["structuredContent"]["target_file_id"],
        "{read}"
    );
    assert_eq!(
        targets_like(read["target_file_id"].as_str().unwrap()),
        1,
        "no target of the text the file no longer held"
    );
    // A first edit whose file is saved again in other line endings while its import waits is
    // refused, nothing written: the import reads CRLF bytes the call did not read (helper-124:
    // the edit was published in LF over the CRLF re-save, 79 times of 80).
    let file = root.join("n.txt");
    std::fs::write(&file, "x = 1\n").unwrap();
    let (mut b, hook) = held_call(
        &root,
        "before_import",
        "edit_file",
        json!({"path": "n.txt", "edits": [{"oldText": "x = 1", "newText": "x = 2"}]}),
    );
    std::fs::write(&file, "x = 1\r\n").unwrap();
    std::fs::write(hook.join("resume"), "").unwrap();
    let r = next_result(&mut b);
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(
        r["structuredContent"]["failure_reason"], "external_disk_drift",
        "{r}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 1\r\n");
    let (text, _, err) = call(&mut b, "read_file", json!({"path": "n.txt"}));
    assert!(!err && text == "x = 1\r\n", "{text:?}");
    let (text, _, err) = edit(&mut b, "n.txt", "x = 1", "x = 2");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 2\r\n");
}

/// docs/files.md "Stale files" (helper-114): once a file changed on disk is imported again by one
/// process, another process that reads it takes that new target rather than importing a third.
/// Before, each process imported a target of its own on its read, and one whose target another
/// process then published to kept importing on every read (40 targets in 100 rounds of two
/// processes reading, writing and editing one file).
#[test]
fn a_file_changed_on_disk_is_imported_once_for_every_process() {
    let root = scratch("one-import");
    let file = root.join("s.txt");
    std::fs::write(&file, "v0\n").unwrap();
    let mut a = start(&root, &[]);
    let mut b = start(&root, &[]);
    let (_, first, _) = call(&mut a, "read_file", json!({"path": "s.txt"}));
    let (_, same, _) = call(&mut b, "read_file", json!({"path": "s.txt"}));
    assert_eq!(first["target_file_id"], same["target_file_id"]);
    std::fs::write(&file, "v1\n").unwrap();
    let (_, again, _) = call(&mut a, "read_file", json!({"path": "s.txt"}));
    assert_ne!(
        again["target_file_id"], first["target_file_id"],
        "imported again"
    );
    let (text, other, err) = call(&mut b, "read_file", json!({"path": "s.txt"}));
    assert!(!err && text == "v1\n", "{text}");
    assert_eq!(other["target_file_id"], again["target_file_id"], "{other}");
    let (text, _, err) = edit(&mut b, "s.txt", "v1", "v2");
    assert!(!err, "{text}");
    let (text, _, err) = edit(&mut a, "s.txt", "v2", "v3");
    assert!(!err, "{text}");
    assert_eq!(std::fs::read(&file).unwrap(), b"v3\n");
    // An edit of a process that has not read the change made outside is stale, though another
    // process imported it (only a read takes another target: helper-122); after its read, which
    // takes that target rather than importing a fourth, the edit applies there.
    let mut c = start(&root, &[]);
    let (_, _, err) = call(&mut c, "read_file", json!({"path": "s.txt"}));
    assert!(!err);
    std::fs::write(&file, "w0\n").unwrap();
    let (_, moved, _) = call(&mut a, "read_file", json!({"path": "s.txt"}));
    let (text, v, err) = edit(&mut c, "s.txt", "w0", "w1");
    assert!(err, "{text}");
    assert_eq!(refused_as(&v), "target_hash_mismatch", "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), b"w0\n");
    let (text, read, err) = call(&mut c, "read_file", json!({"path": "s.txt"}));
    assert!(!err && text == "w0\n", "{text}");
    assert_eq!(read["target_file_id"], moved["target_file_id"], "{read}");
    let (text, v, err) = edit(&mut c, "s.txt", "w0", "w1");
    assert!(!err, "{text}");
    assert_eq!(v["target_file_id"], moved["target_file_id"], "{v}");
    assert_eq!(std::fs::read(&file).unwrap(), b"w1\n");
    assert_eq!(targets_like(again["target_file_id"].as_str().unwrap()), 3);
}
