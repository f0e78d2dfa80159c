//! The workspace profile end to end: the real `patchdiff-mcp` over real pipes, a real directory
//! and a real PostgreSQL (issue 7; contract "patchdiff_save", "Publication outcomes", "Workspace
//! filesystem contract"; docs/workspace.md).
//!
//! Environment: `PATCHDIFF_TEST_DSN` (a superuser connection string to a database with
//! pg_patchdiff) and `PATCHDIFF_MCP_BIN` (the built server; default target/debug).

use patchdiff_tests::roles::dsn;
use patchdiff_tests::stdio::{Pipes, mcp_bin};
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    patchdiff_tests::scratch_dir("pd-ws", name)
}

fn key_file() -> PathBuf {
    patchdiff_tests::workspace_key_file("pd-ws")
}

struct Mcp {
    pipes: Pipes,
    next_id: i64,
}

impl Mcp {
    fn start(root: &Path, env: &[(&str, &str)]) -> Mcp {
        let mut cmd = Command::new(mcp_bin());
        cmd.env("PATCHDIFF_DATABASE_URL", dsn())
            .env("PATCHDIFF_MCP_PROFILE", "workspace")
            .env("PATCHDIFF_WORKSPACE_ROOT", root)
            .env("PATCHDIFF_WORKSPACE_KEY_FILE", key_file())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut m = Mcp {
            pipes: Pipes::spawn(cmd),
            next_id: 1,
        };
        let r = m.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ws", "version": "1"}}),
        );
        assert!(r["result"].is_object(), "{r}");
        m
    }

    fn send(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.pipes.send(format!("{line}\n").as_bytes());
        id
    }

    fn reply(&self, id: i64) -> Value {
        let line = self
            .pipes
            .line(REPLY_TIMEOUT)
            .expect("no reply from patchdiff-mcp");
        assert!(line.is_ascii());
        let r: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        self.reply(id)
    }

    fn send_call(&mut self, name: &str, arguments: Value) -> i64 {
        self.send("tools/call", json!({"name": name, "arguments": arguments}))
    }

    fn tool_text(r: &Value) -> Value {
        serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap()
    }

    fn call(&mut self, name: &str, arguments: Value) -> Value {
        let id = self.send_call(name, arguments);
        Mcp::tool_text(&self.reply(id))
    }

    fn import(&mut self, rel: &str) -> Value {
        self.call(
            "patchdiff_initialize_target",
            json!({"filename": rel, "from_workspace": true}),
        )
    }

    fn edit(&mut self, target: &str, version: i64, from: &str, to: &str) {
        let t = self.call(
            "patchdiff_submit_edits",
            json!({"target_file_id": target, "expected_target_version": version, "intent": "test edit",
                   "edits": [{"match": from, "replace": to}]}),
        );
        assert_eq!(t["status"], "accepted", "{t}");
    }

    fn save_args(target: &str) -> Value {
        json!({"target_file_id": target, "sync_workspace": true})
    }

    fn save(&mut self, target: &str) -> Value {
        self.call("patchdiff_save", Mcp::save_args(target))
    }
}

/// Waits until a paused test hook has created `<dir>/paused`.
fn wait_paused(dir: &Path) {
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while !dir.join("paused").exists() {
        assert!(Instant::now() < deadline, "the test hook never paused");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn sql(query: &str, id: &str) -> Vec<Option<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The database that holds the target's rows: through a router, its partition.
        let c = patchdiff_tests::tables_for(&dsn(), id).await;
        let row = c.query_one(query, &[&id]).await.unwrap();
        (0..row.len())
            .map(|i| row.get::<_, Option<String>>(i))
            .collect()
    })
}

/// (save_checkpoint snapshots, workspace baseline) of a target.
fn checkpoints_and_baseline(target: &str) -> (String, String) {
    let r = sql(
        "SELECT (SELECT count(*) FROM patchdiff.snapshots WHERE target_file_id = $1::text::uuid AND snapshot_reason = 'save_checkpoint')::text, \
         (SELECT workspace_baseline_sha256 FROM patchdiff.targets WHERE target_file_id = $1::text::uuid)",
        target,
    );
    (r[0].clone().unwrap(), r[1].clone().unwrap_or_default())
}

fn sha(bytes: &[u8]) -> String {
    patchdiff_engine::api::text::sha256_hex(std::str::from_utf8(bytes).unwrap())
}

fn id(t: &Value) -> String {
    assert_eq!(t["status"], "ok", "{t}");
    t["target_file_id"].as_str().unwrap().to_owned()
}

/// Issue 7 "the full loop over real stdio": import a CRLF file, edit, SAVE with sync: the file
/// keeps CRLF and only the edited line differs; its mode is kept; the baseline moves so a
/// second round publishes too; the profile lists exactly its five tools.
#[test]
fn crlf_file_round_trips_with_only_the_edited_lines_changed() {
    let root = scratch("loop");
    std::fs::create_dir(root.join("src")).unwrap();
    let path = root.join("src/notes.md");
    let original = "# Notes\r\nalpha line\r\nbeta line\r\ngamma line\r\n";
    std::fs::write(&path, original).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mut m = Mcp::start(&root, &[]);
    let tools = m.request("tools/list", json!({}))["result"]["tools"].clone();
    let mut names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "patchdiff_find_occurrences",
            "patchdiff_initialize_target",
            "patchdiff_read_target",
            "patchdiff_save",
            "patchdiff_submit_edits"
        ]
    );
    let t = m.import("src/notes.md");
    let target = id(&t);
    assert_eq!(t["source_line_endings"]["style"], "crlf");
    assert_eq!(
        t["source_line_endings"]["source_sha256"],
        sha(original.as_bytes())
    );
    assert_eq!(
        checkpoints_and_baseline(&target).1,
        sha(original.as_bytes())
    );
    let read = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert!(read.to_string().contains("beta line"), "{read}");
    m.edit(&target, 0, "beta line", "BETA line, edited");
    let s = m.call(
        "patchdiff_save",
        json!({"target_file_id": target, "expected_target_version": 1, "sync_workspace": true}),
    );
    assert_eq!(s["status"], "saved", "{s}");
    let expected = "# Notes\r\nalpha line\r\nBETA line, edited\r\ngamma line\r\n";
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(String::from_utf8_lossy(&disk), expected);
    let w = &s["workspace_sync"];
    assert_eq!(w["synced_path"], "src/notes.md");
    assert_eq!(w["disk_sha256"], sha(&disk));
    assert_eq!(w["bytes_written"], disk.len());
    assert_eq!(w["content_eol"], "crlf");
    assert_eq!(w["publication"], "installed");
    assert_eq!(w["durability"], "confirmed");
    assert!(s.get("workspace_publication").is_none());
    assert!(s["snapshot_id"].is_string() && s["new_editing_cycle_id"].is_string());
    let before: Vec<&str> = original.split("\r\n").collect();
    let after: Vec<&str> = expected.split("\r\n").collect();
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert_eq!((before.len(), changed), (after.len(), 1));
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    assert_eq!(checkpoints_and_baseline(&target), ("1".into(), sha(&disk)));
    // The baseline moved: a second edit publishes on top of the first.
    m.edit(&target, 1, "gamma line", "gamma line 2");
    let s = m.save(&target);
    assert_eq!(s["status"], "saved", "{s}");
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .ends_with("gamma line 2\r\n")
    );
    // Without sync_workspace (and PATCHDIFF_WORKSPACE_SYNC_ON_SAVE unset) a SAVE is a
    // checkpoint only.
    m.edit(&target, 2, "alpha line", "ALPHA");
    let s = m.call("patchdiff_save", json!({"target_file_id": target}));
    assert_eq!(s["status"], "saved", "{s}");
    assert!(s.get("workspace_sync").is_none());
    assert!(!std::fs::read_to_string(&path).unwrap().contains("ALPHA"));
    // Conflicting content is refused.
    let r = m.call(
        "patchdiff_initialize_target",
        json!({"filename": "src/notes.md", "from_workspace": true, "content": "x"}),
    );
    assert_eq!(r["code"], "workspace_content_conflict", "{r}");
}

/// Contract "Publication outcomes": over plain SQL, a publishing SAVE in a transaction the
/// caller did not declare as owned is refused before anything is written.
#[test]
fn sql_callers_must_own_the_transaction_to_publish() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = patchdiff_tests::connect(&dsn()).await.unwrap();
        let target = patchdiff_tests::initialize_target(&c, "a.txt", "x\n")
            .await
            .unwrap();
        let args = json!({"target_file_id": target, "sync_workspace": true});
        let r = patchdiff_tests::call(&c, "patchdiff_save", &args)
            .await
            .unwrap();
        assert_eq!(r["code"], "workspace_requires_owned_transaction", "{r}");
        let tx = c.transaction().await.unwrap();
        let r = patchdiff_tests::call(&tx, "patchdiff_save", &args)
            .await
            .unwrap();
        assert_eq!(r["code"], "workspace_requires_owned_transaction", "{r}");
        tx.batch_execute("SET LOCAL patchdiff.workspace_owned_transaction = on")
            .await
            .unwrap();
        let r = patchdiff_tests::call(&tx, "patchdiff_save", &args)
            .await
            .unwrap();
        if patchdiff_tests::is_router(&tx).await {
            // Through a router (docs/scale-out.md) the SAVE runs in a transaction of its own on
            // the shard, which the caller cannot own: still refused, before anything is written.
            assert_eq!(r["code"], "workspace_requires_owned_transaction", "{r}");
        } else {
            // Owned, but the target was never imported from a workspace.
            assert_eq!(r["failure_reason"], "workspace_not_bound", "{r}");
        }
        tx.rollback().await.unwrap();
    });
}

/// Contract "Workspace filesystem contract": escapes, absolute paths, a symlinked file and a
/// symlinked parent are refused on import and on publication, and nothing outside the root is
/// read or written.
#[test]
fn path_attacks_read_and_write_nothing_outside_the_root() {
    let base = scratch("attacks");
    let (root, outside) = (base.join("root"), base.join("outside"));
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let secret = "SECRET outside the workspace\n";
    std::fs::write(outside.join("secret.txt"), secret).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("linkdir")).unwrap();
    let mut m = Mcp::start(&root, &[]);
    let abs = outside.join("secret.txt").display().to_string();
    for (path, code) in [
        ("../outside/secret.txt", "workspace_path_escape"),
        ("sub/../../outside/secret.txt", "workspace_path_escape"),
        (abs.as_str(), "workspace_path_absolute"),
        ("link.txt", "workspace_path_symlink"),
        ("linkdir/secret.txt", "workspace_path_symlink"),
        ("sub//x.txt", "workspace_path_ambiguous"),
    ] {
        let r = m.import(path);
        assert_eq!(r["status"], "rejected", "{path}: {r}");
        assert_eq!(r["failure_reason"], code, "{path}: {r}");
        assert!(!r.to_string().contains("SECRET"), "{r}");
    }
    // Publication: the file, then its parent, replaced by a symlink after the import.
    std::fs::write(root.join("sub/a.txt"), "a\n").unwrap();
    let target = id(&m.import("sub/a.txt"));
    m.edit(&target, 0, "a", "b");
    std::fs::remove_file(root.join("sub/a.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("sub/a.txt")).unwrap();
    let s = m.save(&target);
    assert_eq!(
        (&s["status"], &s["failure_reason"]),
        (&json!("rejected"), &json!("workspace_path_symlink")),
        "{s}"
    );
    std::fs::remove_file(root.join("sub/a.txt")).unwrap();
    std::fs::rename(root.join("sub"), root.join("sub.real")).unwrap();
    std::fs::write(outside.join("a.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
    let s = m.save(&target);
    assert_eq!(s["failure_reason"], "workspace_path_symlink", "{s}");
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        secret
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 2);
    assert_eq!(checkpoints_and_baseline(&target).0, "0");
}

/// Contract "Workspace filesystem contract": replacing an ancestor with a symlink after the
/// walk cannot redirect the opened handle: the test hook pauses the publication after its walk
/// while the test swaps the parent for a symlink to another tree.
#[test]
fn parent_swapped_for_a_symlink_mid_publication_is_not_followed() {
    let base = scratch("swap");
    let (root, outside, hook) = (base.join("root"), base.join("outside"), base.join("hook"));
    for d in [root.join("sub"), outside.clone(), hook.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(root.join("sub/a.txt"), "one\n").unwrap();
    std::fs::write(outside.join("a.txt"), "one\n").unwrap();
    let hook_dir = hook.display().to_string();
    let mut m = Mcp::start(
        &root,
        &[
            ("PATCHDIFF_WORKSPACE_TEST_HOOK", "after_walk"),
            ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
        ],
    );
    let target = id(&m.import("sub/a.txt"));
    m.edit(&target, 0, "one", "two");
    let call = m.send_call("patchdiff_save", Mcp::save_args(&target));
    wait_paused(&hook);
    std::fs::rename(root.join("sub"), root.join("moved")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("sub")).unwrap();
    std::fs::write(hook.join("resume"), "").unwrap();
    let s = Mcp::tool_text(&m.reply(call));
    assert_eq!(s["status"], "saved", "{s}");
    assert_eq!(
        std::fs::read_to_string(outside.join("a.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
    assert_eq!(
        std::fs::read_to_string(root.join("moved/a.txt")).unwrap(),
        "two\n"
    );
}

/// Contract "Workspace filesystem contract": a target is bound to its root's device and inode.
/// Another directory with the same relative path and bytes is refused; the same directory
/// reached through an aliasing path is the same root.
#[test]
fn a_target_bound_to_another_root_is_refused() {
    let base = scratch("alias");
    let (a, b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(a.join("f.txt"), "same\n").unwrap();
    std::fs::write(b.join("f.txt"), "same\n").unwrap();
    std::os::unix::fs::symlink(&a, base.join("alias-of-a")).unwrap();
    let target = {
        let mut m = Mcp::start(&a, &[]);
        let target = id(&m.import("f.txt"));
        m.edit(&target, 0, "same", "edited");
        target
    };
    let mut other = Mcp::start(&b, &[]);
    let s = other.save(&target);
    assert_eq!(s["failure_reason"], "workspace_root_mismatch", "{s}");
    assert_eq!(std::fs::read_to_string(b.join("f.txt")).unwrap(), "same\n");
    assert_eq!(std::fs::read_to_string(a.join("f.txt")).unwrap(), "same\n");
    let mut alias = Mcp::start(&base.join("alias-of-a"), &[]);
    let s = alias.save(&target);
    assert_eq!(s["status"], "saved", "{s}");
    assert_eq!(
        std::fs::read_to_string(a.join("f.txt")).unwrap(),
        "edited\n"
    );
}

/// Contract "Workspace filesystem contract": a file changed on disk after the import is
/// refused as external_disk_drift and left as it was; no checkpoint is created.
#[test]
fn external_drift_is_refused_and_the_file_left_intact() {
    let root = scratch("drift");
    std::fs::write(root.join("d.txt"), "mine\n").unwrap();
    let mut m = Mcp::start(&root, &[]);
    let target = id(&m.import("d.txt"));
    let baseline = checkpoints_and_baseline(&target).1;
    m.edit(&target, 0, "mine", "ours");
    std::fs::write(root.join("d.txt"), "theirs\n").unwrap();
    let s = m.save(&target);
    assert_eq!(
        (&s["status"], &s["failure_reason"]),
        (&json!("rejected"), &json!("external_disk_drift")),
        "{s}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("d.txt")).unwrap(),
        "theirs\n"
    );
    assert_eq!(checkpoints_and_baseline(&target), ("0".into(), baseline));
    // No staged file is left behind.
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
}

/// Contract "Workspace filesystem contract": two front-end processes publishing into one
/// directory are serialized by the directory lease: one holding it makes the other answer
/// workspace_busy; free-running, every SAVE is saved or busy and no file is ever torn.
#[test]
fn two_front_ends_publishing_to_one_directory_are_serialized() {
    let base = scratch("two");
    let (root, hook) = (base.join("root"), base.join("hook"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&hook).unwrap();
    std::fs::write(root.join("a.txt"), "a0\n").unwrap();
    std::fs::write(root.join("b.txt"), "b0\n").unwrap();
    let hook_dir = hook.display().to_string();
    let mut holder = Mcp::start(
        &root,
        &[
            ("PATCHDIFF_WORKSPACE_TEST_HOOK", "after_lease"),
            ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
        ],
    );
    let mut other = Mcp::start(&root, &[]);
    let ta = id(&holder.import("a.txt"));
    let tb = id(&other.import("b.txt"));
    holder.edit(&ta, 0, "a0", "a1");
    other.edit(&tb, 0, "b0", "b1");
    let call = holder.send_call("patchdiff_save", Mcp::save_args(&ta));
    wait_paused(&hook);
    let s = other.save(&tb);
    assert_eq!(s["failure_reason"], "workspace_busy", "{s}");
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "b0\n");
    std::fs::write(hook.join("resume"), "").unwrap();
    assert_eq!(Mcp::tool_text(&holder.reply(call))["status"], "saved");
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "a1\n");
    // Free-running: both publish rounds at once.
    let run = |mut m: Mcp, target: String, letter: char| {
        std::thread::spawn(move || {
            let mut last_saved = format!("{letter}1\n");
            for round in 2..12 {
                let prev = format!("{letter}{}", round - 1);
                let next = format!("{letter}{round}");
                m.edit(&target, round - 1, &prev, &next);
                let s = m.save(&target);
                match s["status"].as_str() {
                    Some("saved") => last_saved = format!("{next}\n"),
                    _ => assert_eq!(s["failure_reason"], "workspace_busy", "{s}"),
                }
            }
            last_saved
        })
    };
    // b's first save was refused busy; SAVE it now so both start from a published state.
    assert_eq!(other.save(&tb)["status"], "saved");
    let ha = run(holder, ta, 'a');
    let hb = run(other, tb, 'b');
    let (la, lb) = (ha.join().unwrap(), hb.join().unwrap());
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), la);
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), lb);
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 2);
}

/// Contract "Publication outcomes": a front end killed between installation and COMMIT
/// leaves the installed bytes and no checkpoint; the next start reconciles by saving again,
/// which finds the disk already holding the bytes to publish (docs/workspace.md).
#[test]
fn a_crash_between_installation_and_commit_is_reconciled_by_saving_again() {
    let base = scratch("crash");
    let (root, hook) = (base.join("root"), base.join("hook"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&hook).unwrap();
    std::fs::write(root.join("c.txt"), "before\n").unwrap();
    let hook_dir = hook.display().to_string();
    let mut m = Mcp::start(
        &root,
        &[
            ("PATCHDIFF_WORKSPACE_TEST_HOOK", "before_commit"),
            ("PATCHDIFF_WORKSPACE_TEST_HOOK_DIR", &hook_dir),
        ],
    );
    let target = id(&m.import("c.txt"));
    let baseline = checkpoints_and_baseline(&target).1;
    m.edit(&target, 0, "before", "after");
    m.send_call("patchdiff_save", Mcp::save_args(&target));
    wait_paused(&hook);
    m.pipes.kill();
    drop(m);
    // Installed bytes, uncommitted checkpoint (the session's transaction rolled back).
    assert_eq!(
        std::fs::read_to_string(root.join("c.txt")).unwrap(),
        "after\n"
    );
    let deadline = Instant::now() + REPLY_TIMEOUT;
    while checkpoints_and_baseline(&target) != ("0".into(), baseline.clone()) {
        assert!(
            Instant::now() < deadline,
            "the killed session's transaction is still open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut next = Mcp::start(&root, &[]);
    let s = next.save(&target);
    assert_eq!(s["status"], "saved", "{s}");
    assert_eq!(
        checkpoints_and_baseline(&target),
        ("1".into(), sha(b"after\n"))
    );
    assert_eq!(
        std::fs::read_to_string(root.join("c.txt")).unwrap(),
        "after\n"
    );
}

/// Issue 7: the workspace profiles refuse to start without PATCHDIFF_WORKSPACE_ROOT.
#[test]
fn workspace_profiles_do_not_start_without_a_root() {
    for profile in ["workspace", "observed_workspace"] {
        let out = Command::new(mcp_bin())
            .env("PATCHDIFF_DATABASE_URL", dsn())
            .env("PATCHDIFF_MCP_PROFILE", profile)
            .env_remove("PATCHDIFF_WORKSPACE_ROOT")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("PATCHDIFF_WORKSPACE_ROOT"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs `f` with a superuser connection (PATCHDIFF_TEST_DSN), as a SQL caller would.
fn with_sql<T>(f: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
    patchdiff_tests::with_sql(&dsn(), f)
}

/// A made-up nonce of the right shape, new on every call and every run (a nonce binds one
/// target in a database for good).
fn made_up_nonce() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(
        "{:016x}{:016x}",
        nanos ^ n,
        (std::process::id() as u64) << 16 | n
    )
}

/// Every entry under `dir`, recursively, with its bytes (directories as None).
fn tree(dir: &Path) -> Vec<(PathBuf, Option<Vec<u8>>)> {
    let mut out = vec![];
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p.clone());
                out.push((p, None));
            } else {
                out.push((p.clone(), Some(std::fs::read(&p).unwrap())));
            }
        }
    }
    out.sort();
    out
}

/// Issue 15 item 3, "Bindings only the importing front end can publish"; contract "Workspace
/// filesystem contract". A SQL caller names the test root's real device and inode in a
/// workspace_binding (a VCS file it matches byte for byte, and a path deep in directories that do
/// not exist), with a made-up nonce and proof, edits the target over SQL, and the real front end
/// SAVEs it with sync_workspace: refused workspace_binding_unverified, nothing on disk changed or
/// created, no checkpoint written. Without nonce and proof the binding is refused outright, and a
/// proof copied from a real import cannot bind a second target.
#[test]
fn a_binding_forged_over_sql_is_never_published() {
    use std::os::unix::fs::MetadataExt;
    let root = scratch("forged");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    let config = "[core]\n\trepositoryformatversion = 0\n";
    std::fs::write(root.join(".git/config"), config).unwrap();
    std::fs::write(root.join("real.txt"), "real\n").unwrap();
    let meta = std::fs::metadata(&root).unwrap();
    let (dev, ino) = (meta.dev(), meta.ino());
    let mut m = Mcp::start(&root, &[]);
    let before = tree(&root);
    let forge = |path: &str, content: &str, proof: Option<(&str, &str)>| {
        let mut binding = json!({"root_device": dev, "root_inode": ino, "relative_path": path});
        if let Some((nonce, proof)) = proof {
            binding["nonce"] = json!(nonce);
            binding["proof"] = json!(proof);
        }
        with_sql(async |c| {
            patchdiff_tests::call(
                c,
                "patchdiff_initialize_target",
                &json!({"filename": path, "content": content, "workspace_binding": binding}),
            )
            .await
            .unwrap()
        })
    };
    let edit_over_sql = |target: &str, from: &str, to: &str| {
        let r = with_sql(async |c| {
            patchdiff_tests::call(
                c,
                "patchdiff_submit_edits",
                &json!({"target_file_id": target, "expected_target_version": 0, "intent": "forged",
                        "edits": [{"match": from, "replace": to}]}),
            )
            .await
            .unwrap()
        });
        assert_eq!(r["status"], "accepted", "{r}");
    };
    // No nonce and proof: the extension refuses the binding itself.
    let r = forge(".git/config", config, None);
    assert_eq!(r["code"], "invalid_workspace_binding", "{r}");
    // Made-up nonce and proof of the right shape: bound, edited, never published.
    let (nonce_a, nonce_b) = (made_up_nonce(), made_up_nonce());
    let fake_proof = "0123456789abcdef".repeat(4);
    let t1 = id(&forge(".git/config", config, Some((&nonce_a, &fake_proof))));
    edit_over_sql(
        &t1,
        "repositoryformatversion = 0",
        "repositoryformatversion = 0\n\tfsmonitor = \"touch /tmp/pwned\"",
    );
    let t2 = id(&forge(
        "deep/new/dir/planted.sh",
        "#!/bin/sh\n",
        Some((&nonce_b, &fake_proof)),
    ));
    edit_over_sql(&t2, "#!/bin/sh", "#!/bin/sh\ntouch /tmp/pwned");
    for t in [&t1, &t2] {
        let s = m.save(t);
        assert_eq!(
            (&s["status"], &s["failure_reason"]),
            (&json!("rejected"), &json!("workspace_binding_unverified")),
            "{s}"
        );
        assert_eq!(checkpoints_and_baseline(t).0, "0");
    }
    assert_eq!(tree(&root), before);
    assert!(!root.join("deep").exists());
    // A real import's nonce and proof, copied into a second binding, are refused.
    let real = id(&m.import("real.txt"));
    let copied = sql(
        "SELECT workspace_binding_nonce, workspace_binding_proof FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        &real,
    );
    let (nonce, proof) = (copied[0].clone().unwrap(), copied[1].clone().unwrap());
    assert!(nonce.len() == 32 && proof.len() == 64, "{nonce} {proof}");
    let r = forge("real.txt", "real\n", Some((&nonce, &proof)));
    assert_eq!(r["code"], "invalid_workspace_binding", "{r}");
    // Through a router a shard sees only its own database: the same copy, made on a partition
    // its nonce does not choose (with the router's internal creation function, which every role
    // may call, or over a direct connection to that partition), binds there, and the front end
    // refuses to publish it (helper-45).
    let binding = json!({"root_device": dev, "root_inode": ino, "relative_path": "real.txt",
                         "nonce": nonce, "proof": proof});
    let args = json!({"filename": "real.txt", "content": "real\n", "workspace_binding": binding})
        .to_string();
    let elsewhere = with_sql(async |c| {
        if !patchdiff_tests::is_router(c).await {
            return None;
        }
        let row = c
            .query_one(
                "SELECT patchdiff_router.partitions(), patchdiff_router.binding_partition($1::text::json)",
                &[&args],
            )
            .await
            .unwrap();
        let (n, p): (i32, i32) = (row.get(0), row.get(1));
        let made = c
            .query_one(
                "SELECT patchdiff_router.initialize_target_on($1, $2, $3::text::json)::text",
                &[&((p + 1) % n), &n, &args],
            )
            .await
            .unwrap();
        Some(serde_json::from_str::<Value>(&made.get::<_, String>(0)).unwrap())
    });
    if let Some(r) = elsewhere {
        let copy = id(&r);
        edit_over_sql(&copy, "real", "forged");
        let s = m.save(&copy);
        assert_eq!(
            (&s["status"], &s["failure_reason"]),
            (&json!("rejected"), &json!("workspace_binding_unverified")),
            "{s}"
        );
        assert_eq!(checkpoints_and_baseline(&copy).0, "0");
        assert_eq!(
            std::fs::read_to_string(root.join("real.txt")).unwrap(),
            "real\n"
        );
    }
    // The same proof under a fresh nonce does not verify.
    let t3 = id(&forge(
        "real.txt",
        "real\n",
        Some((&made_up_nonce(), &proof)),
    ));
    edit_over_sql(&t3, "real", "forged");
    let s = m.save(&t3);
    assert_eq!(s["failure_reason"], "workspace_binding_unverified", "{s}");
    assert_eq!(
        std::fs::read_to_string(root.join("real.txt")).unwrap(),
        "real\n"
    );
    // The real import publishes.
    m.edit(&real, 0, "real", "edited");
    assert_eq!(m.save(&real)["status"], "saved");
    assert_eq!(
        std::fs::read_to_string(root.join("real.txt")).unwrap(),
        "edited\n"
    );
}

/// Issue 15 item 3, "Reserved paths": version-control metadata (any case) is never imported.
#[test]
fn version_control_paths_are_reserved() {
    let root = scratch("reserved");
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("sub/.GIT")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join("sub/.GIT/x"), "x\n").unwrap();
    let mut m = Mcp::start(&root, &[]);
    for path in [".git/config", "sub/.GIT/x"] {
        let r = m.import(path);
        assert_eq!(
            (&r["status"], &r["failure_reason"]),
            (&json!("rejected"), &json!("workspace_path_reserved")),
            "{path}: {r}"
        );
    }
    // PATCHDIFF_WORKSPACE_RESERVED replaces the list.
    let mut m = Mcp::start(&root, &[("PATCHDIFF_WORKSPACE_RESERVED", "")]);
    assert_eq!(m.import(".git/config")["status"], "ok");
}

/// Issue 15 item 3, "Publication": a SAVE by a front end running as root keeps the replaced
/// file's owner and drops set-user-ID and set-group-ID (06755 becomes 0755).
#[test]
fn a_root_publication_keeps_the_owner_and_drops_set_id_bits() {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        eprintln!("skipped: needs root to chown a file to nobody");
        return;
    }
    let root = scratch("owner");
    let path = root.join("tool.sh");
    std::fs::write(&path, "#!/bin/sh\necho one\n").unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o6755)).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o7777, 0o6755);
    let mut m = Mcp::start(&root, &[]);
    let target = id(&m.import("tool.sh"));
    m.edit(&target, 0, "echo one", "echo two");
    let s = m.save(&target);
    assert_eq!(s["status"], "saved", "{s}");
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    assert_eq!(meta.mode() & 0o7777, 0o755);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "#!/bin/sh\necho two\n"
    );
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Issue 15 item 3, "Bounded disk reads": a 64 GiB sparse file swapped in before SAVE is
/// drift, refused in well under 2 s without being read; it is left as it is and the server
/// still answers.
#[test]
fn a_huge_sparse_file_swapped_in_is_refused_quickly() {
    let root = scratch("sparse");
    std::fs::write(root.join("s.txt"), "small\n").unwrap();
    let mut m = Mcp::start(&root, &[]);
    let target = id(&m.import("s.txt"));
    m.edit(&target, 0, "small", "edited");
    let big = std::fs::File::create(root.join("big.tmp")).unwrap();
    big.set_len(64 << 30).unwrap();
    drop(big);
    std::fs::rename(root.join("big.tmp"), root.join("s.txt")).unwrap();
    let t = Instant::now();
    let s = m.save(&target);
    let took = t.elapsed();
    assert_eq!(
        (&s["status"], &s["failure_reason"]),
        (&json!("rejected"), &json!("external_disk_drift")),
        "{s}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(
        std::fs::metadata(root.join("s.txt")).unwrap().len(),
        64 << 30
    );
    assert_eq!(checkpoints_and_baseline(&target).0, "0");
    let read = m.call("patchdiff_read_target", json!({"target_file_id": target}));
    assert!(read.to_string().contains("edited"), "{read}");
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
    // Not left for other tools to trip over.
    std::fs::remove_file(root.join("s.txt")).unwrap();
}

/// Issue 15 item 3, "Publication": a hard link inside the root to a file outside it is not
/// imported (its content never leaves the outside file).
#[test]
fn a_hard_link_to_an_outside_file_is_refused() {
    let base = scratch("hardlink");
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(base.join("outside.txt"), "SECRET outside\n").unwrap();
    std::fs::hard_link(base.join("outside.txt"), root.join("inside.txt")).unwrap();
    let mut m = Mcp::start(&root, &[]);
    let r = m.import("inside.txt");
    assert_eq!(
        (&r["status"], &r["failure_reason"]),
        (&json!("rejected"), &json!("workspace_hard_link")),
        "{r}"
    );
    assert!(!r.to_string().contains("SECRET"), "{r}");
}

/// Issue 15 item 3, "Staging names": a file whose name is 80 CJK characters (243 bytes) is
/// imported, edited and published: the staging file's name holds none of the target's.
#[test]
fn a_file_with_a_long_cjk_name_publishes() {
    let root = scratch("cjk");
    let name = format!("{}.md", "\u{6f22}".repeat(80));
    assert_eq!(name.len(), 243);
    std::fs::write(root.join(&name), "first\n").unwrap();
    let mut m = Mcp::start(&root, &[]);
    let target = id(&m.import(&name));
    m.edit(&target, 0, "first", "second");
    let s = m.save(&target);
    assert_eq!(s["status"], "saved", "{s}");
    assert_eq!(
        std::fs::read_to_string(root.join(&name)).unwrap(),
        "second\n"
    );
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
}

/// Issue 15 item 3, "Binding proof": a key file anyone else can read, or of the wrong size,
/// stops start-up with a message naming PATCHDIFF_WORKSPACE_KEY_FILE; nothing is served.
#[test]
fn an_unsafe_key_file_stops_start_up() {
    let base = scratch("badkey");
    let root = base.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let key = base.join("workspace.key");
    for (bytes, mode, why) in [
        (vec![7u8; 32], 0o644, "0644"),
        (vec![7u8; 16], 0o600, "16 bytes"),
    ] {
        std::fs::write(&key, bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = Command::new(mcp_bin())
            .env("PATCHDIFF_DATABASE_URL", dsn())
            .env("PATCHDIFF_MCP_PROFILE", "workspace")
            .env("PATCHDIFF_WORKSPACE_ROOT", &root)
            .env("PATCHDIFF_WORKSPACE_KEY_FILE", &key)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("PATCHDIFF_WORKSPACE_KEY_FILE") && stderr.contains(why),
            "{stderr}"
        );
    }
}

/// docs/workspace.md, "Import": a file within the 8 MiB limit whose text is longer than 16 MiB
/// once JSON-escaped (control characters take six bytes each) is refused before anything is
/// sent, as `workspace_file_too_large` naming that size (helper-50: it was sent, 48 MB, and
/// refused as `arguments_too_large`, though the model had sent only a file name); nothing is
/// written. A file of as many plain characters is imported.
#[test]
fn a_file_too_large_once_escaped_is_refused_before_it_is_sent() {
    let root = scratch("escaped");
    std::fs::write(root.join("controls.txt"), vec![1u8; 3 << 20]).unwrap();
    std::fs::write(root.join("plain.txt"), vec![b'a'; 3 << 20]).unwrap();
    let mut m = Mcp::start(&root, &[]);
    let r = m.import("controls.txt");
    assert_eq!(
        (&r["status"], &r["failure_reason"]),
        (&json!("rejected"), &json!("workspace_file_too_large")),
        "{r}"
    );
    let detail = r["failure_detail"].as_str().unwrap();
    assert!(
        detail.contains("once JSON-escaped") && detail.contains("the limit is 16777216 bytes"),
        "{detail}"
    );
    assert!(r.get("target_file_id").is_none(), "{r}");
    let r = m.import("plain.txt");
    assert_eq!(r["status"], "ok", "{}", r["failure_detail"]);
}

/// A SAVE that waits for the target's row lock publishes nothing and commits nothing, however
/// long the lock is held, when its host cancels it or dies:
/// - docs/profiles.md, "Cancellation": `notifications/cancelled` naming it cancels the SAVE's
///   statement, on the session it runs on (through a router, the publication's own session on
///   the target's partition), and it is not answered; the next request is.
/// - docs/profiles.md, "Exit status": `patchdiff-mcp` sees that its stdout has no reader,
///   cancels the call's statement and exits 1, which closes every session of the call;
///   PostgreSQL ends the statement of one the cancel does not reach (through a router, the
///   publication's session) within a second (`client_connection_check_interval`). Before, that
///   SAVE waited for the lock, then installed the file and committed for a host that was gone.
#[test]
fn a_save_cancelled_or_whose_host_died_while_it_waited_publishes_nothing() {
    use std::io::{BufRead, Write};
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Host {
        Cancels,
        Dies,
    }
    for host in [Host::Cancels, Host::Dies] {
        let base = scratch(&format!("host-{host:?}"));
        let root = base.join("root");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("g.txt"), "g0\n").unwrap();
        let mut setup = Mcp::start(&root, &[]);
        let target = id(&setup.import("g.txt"));
        setup.edit(&target, 0, "g0", "g1");
        drop(setup);
        let before = checkpoints_and_baseline(&target);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let (holder, observer) = rt.block_on(async {
            (
                patchdiff_tests::tables_for(&dsn(), &target).await,
                patchdiff_tests::tables_for(&dsn(), &target).await,
            )
        });
        let holder_pid: i32 = rt.block_on(async {
            holder
                .batch_execute(&format!(
                    "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{target}' FOR UPDATE"
                ))
                .await
                .unwrap();
            holder
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .unwrap()
                .get(0)
        });
        let waiting = || -> i64 {
            rt.block_on(async {
                observer
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))",
                        &[&holder_pid],
                    )
                    .await
                    .unwrap()
                    .get(0)
            })
        };
        let root_text = root.display().to_string();
        let key_text = key_file().display().to_string();
        let url = dsn();
        let (mut child, mut stdin, mut stdout) = patchdiff_tests::stdio::spawn_unread(&[
            ("PATCHDIFF_DATABASE_URL", &url),
            ("PATCHDIFF_MCP_PROFILE", "workspace"),
            ("PATCHDIFF_WORKSPACE_ROOT", &root_text),
            ("PATCHDIFF_WORKSPACE_KEY_FILE", &key_text),
        ]);
        let mut send = |lines: &[Value]| {
            for line in lines {
                stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
            }
            stdin.flush().unwrap();
        };
        send(&[
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ws", "version": "1"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "patchdiff_save", "arguments": Mcp::save_args(&target)}}),
        ]);
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let deadline = Instant::now() + REPLY_TIMEOUT;
        while waiting() == 0 {
            assert!(
                Instant::now() < deadline,
                "the SAVE never waited for the target's lock"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if host == Host::Cancels {
            send(&[
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}),
                json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}),
            ]);
            let mut next = String::new();
            stdout.read_line(&mut next).unwrap();
            let r: Value = serde_json::from_str(&next).unwrap();
            assert_eq!(r["id"], 3, "the cancelled SAVE is not answered: {r}");
            assert_eq!(waiting(), 0, "the cancelled SAVE no longer waits");
            drop(stdin);
            let mut rest = String::new();
            stdout.read_line(&mut rest).unwrap();
            assert_eq!(rest, "", "nothing more is answered");
        } else {
            drop(stdin);
            drop(stdout);
            let deadline = Instant::now() + Duration::from_secs(15);
            while waiting() != 0 {
                assert!(
                    Instant::now() < deadline,
                    "the SAVE of a host that is gone still waits for the lock 15 s later"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let status = child.wait().unwrap();
        rt.block_on(holder.batch_execute("ROLLBACK")).unwrap();
        let expected = if host == Host::Dies { 1 } else { 0 };
        assert_eq!(status.code(), Some(expected), "{host:?}: {status:?}");
        assert_eq!(
            std::fs::read_to_string(root.join("g.txt")).unwrap(),
            "g0\n",
            "{host:?}: nothing was published"
        );
        assert_eq!(
            checkpoints_and_baseline(&target),
            before,
            "{host:?}: nothing was committed"
        );
    }
}
