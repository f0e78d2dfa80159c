//! `patchdiff-mcp finalize`, the trusted host finalizer, as a real process against a real
//! PostgreSQL: each test names the clause of the host guide's "Trusted scalar finalization" it
//! proves.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required, a superuser connection string to a database
//! with pg_patchdiff) and `PATCHDIFF_MCP_BIN` (the built binary; default target/debug).
//! Every test creates its own targets and output folder, so the tests run in parallel.

use patchdiff_engine::api::text::sha256_hex;
use patchdiff_tests::stdio::mcp_bin;
use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::process::Command;
use tokio_postgres::Client;

/// How long a finalizer run, or a wait for it, may take before the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN")
        .expect("PATCHDIFF_TEST_DSN must be set to a superuser connection string")
}

async fn client() -> Client {
    connect(&dsn())
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN")
}

/// A connection to the database that holds the target's rows: the test database, or through a
/// router the target's partition (docs/scale-out.md).
async fn tables(id: &str) -> Client {
    patchdiff_tests::tables_for(&dsn(), id).await
}

/// A fresh scratch folder for one test; the finalizer's output folder goes inside it.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("patchdiff-finalize-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What the host keeps from the last accepted receipt of one target.
#[derive(Clone)]
struct Receipt {
    filename: String,
    target_file_id: String,
    version: i64,
    hash: String,
    pdcp_log_id: String,
    /// The canonical content at that receipt.
    content: String,
}

impl Receipt {
    fn manifest_entry(&self) -> Value {
        json!({
            "filename": self.filename,
            "target_file_id": self.target_file_id,
            "expected_target_version": self.version,
            "expected_current_hash": self.hash,
            "accepted_pdcp_log_id": self.pdcp_log_id,
        })
    }
}

/// Initializes a target and accepts one edit replacing `word`; returns that receipt.
async fn edited(c: &Client, filename: &str, content: &str, word: &str, by: &str) -> Receipt {
    let id = initialize_target(c, filename, content).await.unwrap();
    accept(c, &id, filename, 0, word, by).await
}

/// Accepts one version-guarded edit on `id` and returns its receipt.
async fn accept(
    c: &Client,
    id: &str,
    filename: &str,
    version: i64,
    word: &str,
    by: &str,
) -> Receipt {
    let r = call(
        c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": id, "expected_target_version": version, "intent": "finalize test",
                "edits": [{"match": word, "replace": by}]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], "accepted", "{r}");
    let t = call(c, "patchdiff_get_target", &json!({"target_file_id": id}))
        .await
        .unwrap();
    Receipt {
        filename: filename.to_owned(),
        target_file_id: id.to_owned(),
        version: r["version"].as_i64().unwrap(),
        hash: r["current_hash"].as_str().unwrap().to_owned(),
        pdcp_log_id: r["pdcp_log_id"].as_str().unwrap().to_owned(),
        content: t["current_content"].as_str().unwrap().to_owned(),
    }
}

fn write_manifest(dir: &Path, targets: &[&Receipt]) -> PathBuf {
    let path = dir.join("accepted-targets.json");
    let entries: Vec<Value> = targets.iter().map(|r| r.manifest_entry()).collect();
    std::fs::write(&path, Value::Array(entries).to_string()).unwrap();
    path
}

/// The finalizer as a process: `patchdiff-mcp finalize --manifest M --out O [extra]`.
fn finalizer(manifest: &Path, out: &Path, url: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(mcp_bin());
    cmd.arg("finalize")
        .arg("--manifest")
        .arg(manifest)
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("PATCHDIFF_DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Runs to the end; returns the exit status and the outcome printed on stdout.
async fn run(mut cmd: Command) -> (i32, Value) {
    let out = tokio::time::timeout(RUN_TIMEOUT, cmd.output())
        .await
        .expect("the finalizer did not finish")
        .expect("spawning patchdiff-mcp (build it first: cargo build -p patchdiff-mcp)");
    outcome(out)
}

fn outcome(out: Output) -> (i32, Value) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON outcome ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exit status"), value)
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn events(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut out);
    }
    out.sort();
    out
}

/// `save_checkpoint` snapshots of a target, as (version, content_hash, editing_cycle_id).
async fn checkpoints(id: &str) -> Vec<(i64, String, String)> {
    tables(id).await.query(
        "SELECT version, content_hash, editing_cycle_id::text FROM patchdiff.snapshots \
         WHERE target_file_id = $1::text::uuid AND snapshot_reason = 'save_checkpoint' ORDER BY created_at",
        &[&id],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

async fn active_cycle(id: &str) -> String {
    tables(id).await.query_one(
        "SELECT active_editing_cycle_id::text FROM patchdiff.targets WHERE target_file_id = $1::text::uuid",
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}

fn target<'a>(outcome: &'a Value, id: &str) -> &'a Value {
    outcome["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target_file_id"] == id)
        .unwrap_or_else(|| panic!("{id} not in {outcome}"))
}

/// "SAVE carries both original guards. Replay must verify all four materialized-state
/// components and expected versions/hashes; export bytes are independently hashed and written
/// as canonical LF. Complete receipts/exports are flushed/fsynced locally before success", and
/// "writes root-level manifest/events/results separately from exports/": a complete run over two
/// targets checkpoints each (a save_checkpoint snapshot and a new editing cycle) and writes
/// exactly the canonical bytes.
#[tokio::test]
async fn complete_run_over_two_targets() {
    let c = client().await;
    let dir = scratch("complete");
    let a = edited(
        &c,
        "docs/guide.md",
        "# Guide\r\nalpha beta\r\n",
        "beta",
        "gamma",
    )
    .await;
    let b = edited(&c, "notes.txt", "one\ntwo 🌍\n", "two", "deux").await;
    let cycles_before = [
        active_cycle(&a.target_file_id).await,
        active_cycle(&b.target_file_id).await,
    ];
    let manifest = write_manifest(&dir, &[&a, &b]);
    let out = dir.join("finalization");
    let (code, outcome) = run(finalizer(&manifest, &out, &dsn(), &[])).await;

    assert_eq!(
        (code, &outcome["status"]),
        (0, &json!("complete")),
        "{outcome}"
    );
    assert_eq!(outcome["stopped"], Value::Null);
    assert_eq!(outcome["saves_sent"], 2);
    assert_eq!(outcome["save_pending"], json!([]));
    assert_eq!(
        files(&out),
        [
            "events.jsonl",
            "exports/docs/guide.md",
            "exports/notes.txt",
            "manifest.json",
            "results.json"
        ]
    );
    for (r, cycle_before) in [(&a, &cycles_before[0]), (&b, &cycles_before[1])] {
        let t = target(&outcome, &r.target_file_id);
        assert_eq!(t["state"], "finalized", "{t}");
        // Canonical LF bytes, hashed independently of the export's own claim.
        let bytes = std::fs::read(out.join("exports").join(&r.filename)).unwrap();
        assert_eq!(bytes, r.content.as_bytes());
        assert!(!bytes.contains(&b'\r'));
        let sha = sha256_hex(std::str::from_utf8(&bytes).unwrap());
        assert_eq!(sha, r.hash);
        assert_eq!(t["export"]["independent_sha256"], json!(sha));
        assert_eq!(t["export"]["content_sha256"], json!(sha));
        assert_eq!(t["export"]["format"], "canonical_lf");
        assert_eq!(
            t["export"]["path"],
            json!(format!("exports/{}", r.filename))
        );
        assert!(
            t["export"].get("content").is_none(),
            "results hold no content"
        );
        // All four checks, and the guarded state reconstructed.
        for check in [
            "content_matches",
            "stored_hash_matches",
            "recomputed_hash_matches",
            "version_matches",
        ] {
            assert_eq!(t["replay"]["materialized_state_checks"][check], true);
        }
        assert_eq!(t["replay"]["reconstructed_version"], r.version);
        // The checkpoint: a snapshot of the guarded state in the closed cycle, a new cycle.
        assert_eq!(t["save"]["status"], "saved");
        let snaps = checkpoints(&r.target_file_id).await;
        assert_eq!(
            snaps,
            [(r.version, r.hash.clone(), cycle_before.clone())],
            "one checkpoint of the accepted state"
        );
        assert_eq!(t["save"]["closed_editing_cycle_id"], json!(cycle_before));
        let now = active_cycle(&r.target_file_id).await;
        assert_ne!(&now, cycle_before);
        assert_eq!(t["save"]["new_editing_cycle_id"], json!(now));
    }
    // The SAVE was sent with both original guards, and its pending record came first.
    let ev = events(&out);
    for r in [&a, &b] {
        let pos = |name: &str| {
            ev.iter()
                .position(|e| e["event"] == name && e["target_file_id"] == json!(r.target_file_id))
                .unwrap_or_else(|| panic!("no {name} for {}", r.target_file_id))
        };
        let pending = &ev[pos("save_pending")];
        assert_eq!(
            pending["arguments"],
            json!({"target_file_id": r.target_file_id, "expected_target_version": r.version, "expected_current_hash": r.hash})
        );
        assert!(pos("save_pending") < pos("save_response"));
        assert!(pos("save_response") < pos("replay_response"));
        assert!(pos("export_response") < pos("target_finalized"));
    }
    let seqs: Vec<i64> = ev.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=ev.len() as i64).collect::<Vec<_>>());
    // The evidence is the finalizer's user's alone (helper-46: it was world-readable), and no
    // `.partial/` is left.
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        for d in [out.clone(), out.join("exports"), out.join("exports/docs")] {
            assert_eq!(mode(&d), 0o700, "{}", d.display());
        }
        for f in files(&out) {
            assert_eq!(mode(&out.join(&f)), 0o600, "{f}");
        }
        assert!(!out.join(".partial").exists());
    }
    // results.json is the outcome (less the pointer to itself); manifest.json the manifest.
    let results = read_json(&out.join("results.json"));
    let mut printed = outcome.clone();
    printed.as_object_mut().unwrap().remove("results_json");
    assert_eq!(results, printed);
    let m = read_json(&out.join("manifest.json"));
    assert_eq!(
        m["targets"],
        json!([a.manifest_entry(), b.manifest_entry()])
    );
    assert_eq!(
        m["manifest_sha256"],
        json!(sha256_hex(&std::fs::read_to_string(&manifest).unwrap()))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "Do not ... refresh guards to make stale work pass" and "An explicit rejection fails that
/// target. Other domain failures may leave partial per-target completion": a target edited
/// after its receipt is rejected by its guarded SAVE, nothing is exported for it, and the other
/// target is still finalized; the run is incomplete.
#[tokio::test]
async fn stale_guard_rejects_that_save_and_finalizes_the_other() {
    let c = client().await;
    let dir = scratch("stale");
    let stale = edited(&c, "stale.md", "red green blue\n", "red", "RED").await;
    // Someone writes after the receipt the manifest holds.
    accept(
        &c,
        &stale.target_file_id,
        "stale.md",
        stale.version,
        "green",
        "GREEN",
    )
    .await;
    let fresh = edited(&c, "fresh.md", "left right\n", "left", "LEFT").await;
    let manifest = write_manifest(&dir, &[&stale, &fresh]);
    let out = dir.join("finalization");
    let (code, outcome) = run(finalizer(&manifest, &out, &dsn(), &[])).await;

    assert_eq!(
        (code, &outcome["status"]),
        (1, &json!("incomplete")),
        "{outcome}"
    );
    assert_eq!(
        outcome["stopped"],
        Value::Null,
        "a rejection does not stop the run"
    );
    let s = target(&outcome, &stale.target_file_id);
    assert_eq!(s["state"], "save_rejected", "{s}");
    assert_eq!(s["failure"]["reason"], "target_version_mismatch");
    assert_eq!(s["save"]["status"], "rejected");
    assert_eq!(
        s["replay"],
        Value::Null,
        "no verification after a rejection"
    );
    assert!(checkpoints(&stale.target_file_id).await.is_empty());
    let f = target(&outcome, &fresh.target_file_id);
    assert_eq!(f["state"], "finalized", "{f}");
    assert_eq!(checkpoints(&fresh.target_file_id).await.len(), 1);
    assert_eq!(
        files(&out.join("exports")),
        ["fresh.md"],
        "nothing exported for the rejected target"
    );
    assert_eq!(
        std::fs::read(out.join("exports/fresh.md")).unwrap(),
        fresh.content.as_bytes()
    );
    assert_eq!(read_json(&out.join("results.json"))["status"], "incomplete");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "Requires a fresh output directory": an existing one, empty or not, is refused before any
/// SAVE and left as it was.
#[tokio::test]
async fn existing_output_directory_is_refused_before_any_save() {
    let c = client().await;
    let dir = scratch("exists");
    let r = edited(&c, "kept.md", "keep me\n", "keep", "KEEP").await;
    let manifest = write_manifest(&dir, &[&r]);
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let used = dir.join("used");
    std::fs::create_dir(&used).unwrap();
    std::fs::write(used.join("results.json"), "{\"earlier\": true}").unwrap();
    for out in [&empty, &used] {
        let before = files(out);
        let (code, outcome) = run(finalizer(&manifest, out, &dsn(), &[])).await;
        assert_eq!(
            (code, &outcome["status"]),
            (2, &json!("incomplete")),
            "{outcome}"
        );
        assert_eq!(outcome["refused"]["reason"], "output_dir_exists");
        assert_eq!(outcome["saves_sent"], 0);
        assert_eq!(files(out), before);
    }
    assert_eq!(
        std::fs::read_to_string(used.join("results.json")).unwrap(),
        "{\"earlier\": true}"
    );
    assert!(checkpoints(&r.target_file_id).await.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// helper-46: an output directory another user could swap between two writes, and an export
/// path the file system would refuse, are refused before any SAVE (exit status 2), with nothing
/// created. Under a folder others may write (and not sticky), the finalizer wrote a document
/// where that user pointed it; a name too long for the file system used to fail after its
/// target's SAVE, and stop the run there.
#[tokio::test]
async fn unsafe_or_impossible_output_paths_are_refused_before_any_save() {
    use std::os::unix::fs::PermissionsExt;
    let c = client().await;
    let dir = scratch("unsafe");
    let r = edited(&c, "kept.md", "keep me\n", "keep", "KEEP").await;
    let manifest = write_manifest(&dir, &[&r]);
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, outcome) = run(finalizer(&manifest, &open.join("out"), &dsn(), &[])).await;
    assert_eq!(code, 2, "{outcome}");
    assert_eq!(
        outcome["refused"]["reason"], "output_dir_unsafe",
        "{outcome}"
    );
    assert!(
        outcome["refused"]["detail"]
            .as_str()
            .unwrap()
            .contains("may be written by other users"),
        "{outcome}"
    );
    assert!(!open.join("out").exists());
    // Sticky, as /tmp is: no one else may rename what the finalizer creates there.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
    // Every component within NAME_MAX and the name within the manifest's 4096 bytes (4,078),
    // but the path under the output directory is over PATH_MAX.
    let long_name = format!(
        "{}/{}.md",
        vec!["n".repeat(254); 15].join("/"),
        "n".repeat(250)
    );
    let long = edited(&c, &long_name, "long\n", "long", "LONG").await;
    let manifest = write_manifest(&dir, &[&r, &long]);
    let (code, outcome) = run(finalizer(&manifest, &open.join("out"), &dsn(), &[])).await;
    assert_eq!(code, 2, "{outcome}");
    assert_eq!(
        outcome["refused"]["reason"], "output_path_too_long",
        "{outcome}"
    );
    assert!(
        outcome["refused"]["problems"][0]
            .as_str()
            .unwrap()
            .contains("bytes with its NUL (at most 4096)"),
        "{outcome}"
    );
    assert!(!open.join("out").exists());
    assert!(checkpoints(&r.target_file_id).await.is_empty());
    assert!(checkpoints(&long.target_file_id).await.is_empty());
    // The same run into the sticky folder, without the long name, is complete.
    let manifest = write_manifest(&dir, &[&r]);
    let (code, outcome) = run(finalizer(&manifest, &open.join("out"), &dsn(), &[])).await;
    assert_eq!(
        (code, &outcome["status"]),
        (0, &json!("complete")),
        "{outcome}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "The trusted manifest contains filename, target_file_id, expected_target_version,
/// expected_current_hash and accepted_pdcp_log_id": a malformed manifest is refused before any
/// database call. The database URL points nowhere, so reaching it would answer
/// database_unavailable instead; no output directory is created.
#[tokio::test]
async fn malformed_manifest_is_refused_before_any_call() {
    let dir = scratch("malformed");
    let nowhere = "host=127.0.0.1 port=1 user=postgres dbname=none connect_timeout=2";
    let good = json!({"filename": "a.md", "target_file_id": "11111111-1111-4111-8111-111111111111",
        "expected_target_version": 1, "expected_current_hash": "a".repeat(64),
        "accepted_pdcp_log_id": "22222222-2222-4222-8222-222222222222"});
    let mut misspelt = good.clone();
    let v = misspelt
        .as_object_mut()
        .unwrap()
        .remove("expected_target_version")
        .unwrap();
    misspelt["expected_version"] = v;
    let mut escaping = good.clone();
    escaping["filename"] = json!("../outside.md");
    let mut float = good.clone();
    float["expected_target_version"] = json!(1.0);
    let cases = [
        ("not JSON", "[{".to_owned(), "not JSON"),
        ("empty", "[]".to_owned(), "no targets"),
        (
            "misspelt guard",
            json!([misspelt]).to_string(),
            "unknown key \"expected_version\"",
        ),
        (
            "escaping filename",
            json!([escaping]).to_string(),
            "relative path",
        ),
        (
            "float version",
            json!([float]).to_string(),
            "expected_target_version",
        ),
        ("duplicate", json!([good, good]).to_string(), "listed twice"),
    ];
    for (name, text, problem) in cases {
        let manifest = dir.join("manifest.json");
        std::fs::write(&manifest, &text).unwrap();
        let out = dir.join("out");
        let (code, outcome) = run(finalizer(&manifest, &out, nowhere, &[])).await;
        assert_eq!(code, 2, "{name}: {outcome}");
        assert_eq!(outcome["status"], "incomplete");
        assert_eq!(
            outcome["refused"]["reason"], "manifest_invalid",
            "{name}: {outcome}"
        );
        let mut all = outcome["refused"]["detail"].as_str().unwrap().to_owned();
        for p in outcome["refused"]["problems"].as_array().unwrap() {
            all.push('\n');
            all.push_str(p.as_str().unwrap());
        }
        assert!(all.contains(problem), "{name}: {all}");
        assert!(!out.exists(), "{name}: no output directory");
    }
    // The same run with a valid manifest does reach for the database.
    let manifest = dir.join("manifest.json");
    std::fs::write(&manifest, json!([good]).to_string()).unwrap();
    let (code, outcome) = run(finalizer(&manifest, &dir.join("out"), nowhere, &[])).await;
    assert_eq!(
        (code, &outcome["refused"]["reason"]),
        (2, &json!("database_unavailable"))
    );
    assert!(!dir.join("out").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "Preflights all target names/identities": a manifest naming a target under another
/// filename, or a receipt that is not the guarded state, is refused before any SAVE.
#[tokio::test]
async fn target_identities_are_preflighted_before_any_save() {
    let c = client().await;
    let dir = scratch("identity");
    let ok = edited(&c, "ok.md", "fine text\n", "fine", "FINE").await;
    let mut renamed = edited(&c, "real-name.md", "some text\n", "some", "SOME").await;
    renamed.filename = "other-name.md".into();
    let mut foreign = edited(&c, "foreign.md", "foreign text\n", "text", "TEXT").await;
    foreign.pdcp_log_id = ok.pdcp_log_id.clone();
    let manifest = write_manifest(&dir, &[&ok, &renamed, &foreign]);
    let out = dir.join("out");
    let (code, outcome) = run(finalizer(&manifest, &out, &dsn(), &[])).await;
    assert_eq!(code, 2, "{outcome}");
    assert_eq!(outcome["refused"]["reason"], "target_identity_mismatch");
    let problems = outcome["refused"]["problems"].to_string();
    assert!(
        problems.contains("real-name.md") && problems.contains(&ok.pdcp_log_id),
        "{problems}"
    );
    assert!(!out.exists());
    for r in [&ok, &renamed, &foreign] {
        assert!(checkpoints(&r.target_file_id).await.is_empty());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "Replay must verify all four materialized-state components": stored content with CRLF keeps
/// the canonical hash and version, so only content_matches is false, and that alone fails the
/// target (after its SAVE) with nothing exported.
#[tokio::test]
async fn one_false_replay_check_fails_the_target() {
    let c = client().await;
    let dir = scratch("replay");
    let r = edited(&c, "diverged.md", "one\ntwo\n", "two", "TWO").await;
    tables(&r.target_file_id).await.execute(
        "UPDATE patchdiff.targets SET current_content = replace(current_content, E'\\n', E'\\r\\n') \
         WHERE target_file_id = $1::text::uuid",
        &[&r.target_file_id],
    )
    .await
    .unwrap();
    let manifest = write_manifest(&dir, &[&r]);
    let out = dir.join("out");
    let (code, outcome) = run(finalizer(&manifest, &out, &dsn(), &[])).await;
    assert_eq!(
        (code, &outcome["status"]),
        (1, &json!("incomplete")),
        "{outcome}"
    );
    let t = target(&outcome, &r.target_file_id);
    assert_eq!(t["state"], "replay_failed", "{t}");
    let checks = &t["replay"]["materialized_state_checks"];
    assert_eq!(
        (
            &checks["content_matches"],
            &checks["stored_hash_matches"],
            &checks["recomputed_hash_matches"],
            &checks["version_matches"]
        ),
        (&json!(false), &json!(true), &json!(true), &json!(true))
    );
    assert!(
        t["failure"]["detail"]
            .as_str()
            .unwrap()
            .contains("content_matches")
    );
    assert_eq!(t["export"], Value::Null);
    assert!(files(&out.join("exports")).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Holds a target's row lock on a connection of its own until `release`.
async fn hold_row_lock(id: &str) -> Client {
    let holder = tables(id).await;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM patchdiff.targets WHERE target_file_id = '{id}' FOR UPDATE"
        ))
        .await
        .unwrap();
    holder
}

/// Waits until the session named `app` is waiting for a lock: its SAVE is in flight. Through a
/// router the SAVE waits in the session PL/Proxy opened on the target's partition, so the wait is
/// looked for there (the only lock held on that partition is the test's).
async fn wait_for_lock_wait(id: &str, app: &str) {
    let deadline = tokio::time::Instant::now() + RUN_TIMEOUT;
    let c = client().await;
    let router = patchdiff_tests::is_router(&c).await;
    let (c, sql, key) = if router {
        (
            tables(id).await,
            // Blocked by the holder of this target's row (its query names the target).
            "SELECT count(*) FROM pg_stat_activity w WHERE w.datname = current_database() \
             AND w.wait_event_type = 'Lock' AND EXISTS (SELECT 1 FROM pg_stat_activity h \
             WHERE h.pid = ANY (pg_blocking_pids(w.pid)) AND strpos(h.query, $1) > 0)",
            id,
        )
    } else {
        (
            c,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
            app,
        )
    };
    loop {
        let waiting: i64 = c.query_one(sql, &[&key]).await.unwrap().get(0);
        if waiting > 0 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the SAVE never blocked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Terminates the session named `app` and waits (up to 10 s) until it has exited. Through a
/// router, also the session that runs its SAVE on the target's partition: ending the router's
/// session alone would leave that SAVE waiting for up to a second, to commit if the lock is
/// released meanwhile (docs/scale-out.md, "Sessions whose router session ended").
async fn terminate(id: &str, app: &str) {
    let c = client().await;
    c.execute(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity WHERE application_name = $1",
        &[&app],
    )
    .await
    .unwrap();
    patchdiff_tests::end_lock_waiters_behind_router(&dsn(), id).await;
}

/// The state an uncertain SAVE leaves: the run stopped at the first target with save_pending
/// recorded (durable before the SAVE was sent, with no receipt after it), the second target
/// never started, nothing exported.
fn assert_stopped_with_save_pending(
    code: i32,
    outcome: &Value,
    out: &Path,
    first: &Receipt,
    second: &Receipt,
) {
    assert_eq!(
        (code, &outcome["status"]),
        (1, &json!("incomplete")),
        "{outcome}"
    );
    assert_eq!(outcome["stopped"]["reason"], "save_uncertain", "{outcome}");
    assert_eq!(
        outcome["stopped"]["target_file_id"],
        json!(first.target_file_id)
    );
    assert_eq!(outcome["save_pending"], json!([first.target_file_id]));
    assert_eq!(outcome["saves_sent"], 1, "the SAVE is never resent");
    assert_eq!(
        target(outcome, &first.target_file_id)["state"],
        "save_pending"
    );
    assert_eq!(
        target(outcome, &second.target_file_id)["state"],
        "not_started"
    );
    let results = read_json(&out.join("results.json"));
    assert_eq!(results["save_pending"], json!([first.target_file_id]));
    let ev = events(out);
    let names: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "run_started",
            "save_pending",
            "save_uncertain",
            "run_stopped"
        ]
    );
    assert!(
        !ev.iter()
            .any(|e| e["target_file_id"] == json!(second.target_file_id))
    );
    assert!(files(&out.join("exports")).is_empty());
}

/// "A lost/malformed SAVE response ... is save_uncertain: stop, preserve save_pending, and do
/// not retry SAVE, continue dependent verification": the finalizer's backend is terminated while
/// its SAVE waits for the target's row lock. The finalizer exits while that lock is still held
/// (a resent SAVE would block on it), and no checkpoint exists afterwards.
#[tokio::test]
async fn lost_save_response_stops_with_save_pending_and_no_retry() {
    let c = client().await;
    let dir = scratch("lost-save");
    let first = edited(&c, "first.md", "first draft\n", "draft", "copy").await;
    let second = edited(&c, "second.md", "second draft\n", "draft", "copy").await;
    let manifest = write_manifest(&dir, &[&first, &second]);
    let out = dir.join("out");
    let app = format!("finalize-lost-save-{}", std::process::id());
    let url = format!("{} application_name={app}", dsn());

    let holder = hold_row_lock(&first.target_file_id).await;
    let child = finalizer(&manifest, &out, &url, &[]).spawn().unwrap();
    wait_for_lock_wait(&first.target_file_id, &app).await;
    terminate(&first.target_file_id, &app).await;
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .expect("the finalizer must stop, not resend the SAVE")
        .unwrap();
    holder.batch_execute("ROLLBACK").await.unwrap();

    let (code, outcome) = outcome(output);
    assert_stopped_with_save_pending(code, &outcome, &out, &first, &second);
    let detail = outcome["stopped"]["detail"].as_str().unwrap();
    assert!(detail.contains("unknown"), "{detail}");
    assert!(checkpoints(&first.target_file_id).await.is_empty());
    assert!(checkpoints(&second.target_file_id).await.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "The client bounds RPC write/read time ... and never resends a timed-out call": a SAVE that
/// outlives --call-timeout is save_uncertain, with the same stop as a lost response.
#[tokio::test]
async fn timed_out_save_is_uncertain() {
    let c = client().await;
    let dir = scratch("timeout");
    let first = edited(&c, "slow.md", "slow text\n", "slow", "SLOW").await;
    let second = edited(&c, "next.md", "next text\n", "next", "NEXT").await;
    let manifest = write_manifest(&dir, &[&first, &second]);
    let out = dir.join("out");
    let app = format!("finalize-timeout-{}", std::process::id());
    let url = format!("{} application_name={app}", dsn());

    let holder = hold_row_lock(&first.target_file_id).await;
    let (code, outcome) = run(finalizer(&manifest, &out, &url, &["--call-timeout", "1"])).await;
    assert_stopped_with_save_pending(code, &outcome, &out, &first, &second);
    let detail = outcome["stopped"]["detail"].as_str().unwrap();
    // On one database the cancel rolled the SAVE back; through a router the cancel of a write
    // cannot tell whether its shard committed first, so the router says its outcome is unknown
    // (docs/scale-out.md, "When a call's outcome is unknown"). Either way: save_uncertain.
    assert!(
        (detail.contains("did not answer within 1 s; it was cancelled on the server and ended")
            && detail.contains("canceling statement due to user request"))
            || (detail.contains("did not answer within 1 s; after a request to cancel it")
                && detail.contains("may have run and committed there")
                && detail.contains("(40003)")),
        "{outcome}"
    );
    // The SAVE did not go on waiting once the finalizer had stopped (helper-46: it committed
    // seconds after the finalizer had exited): nothing of it runs once the lock is let go.
    let waiting: i64 = tables(&first.target_file_id)
        .await
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1 AND state = 'active'",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(waiting, 0, "the timed-out SAVE still runs on the server");
    holder.batch_execute("ROLLBACK").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(checkpoints(&first.target_file_id).await.is_empty());
    assert!(checkpoints(&second.target_file_id).await.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 16 item 4, "finalize becomes its own binary": `patchdiff-mcp finalize` runs the
/// `patchdiff-finalize` installed beside it, with the same arguments, stdio and exit status;
/// without it the command is refused (exit status 2, nothing written) with a message naming
/// the missing program.
#[tokio::test]
async fn patchdiff_mcp_finalize_runs_the_finalizer_beside_it() {
    let dir = scratch("sibling");
    let server = PathBuf::from(mcp_bin());
    let copy = dir.join("patchdiff-mcp");
    std::fs::copy(&server, &copy).unwrap();
    // The copy was just written: a process another test thread forks meanwhile holds its
    // writing descriptor until that child execs, and running the copy then fails with ETXTBSY
    // ("Text file busy": CI, 2026-12-06). Tried again for up to 5 s.
    let help = async |bin: &Path| -> Output {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut cmd = Command::new(bin);
            cmd.args(["finalize", "--help"])
                .stdin(Stdio::null())
                .kill_on_drop(true);
            match tokio::time::timeout(RUN_TIMEOUT, cmd.output())
                .await
                .unwrap()
            {
                Err(e)
                    if e.raw_os_error() == Some(ETXTBSY)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                r => return r.unwrap(),
            }
        }
    };
    let alone = help(&copy).await;
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(2), "{stderr}");
    assert!(alone.stdout.is_empty());
    assert!(
        stderr.starts_with("patchdiff-mcp finalize: cannot run ")
            && stderr.contains(&dir.join("patchdiff-finalize").display().to_string()),
        "{stderr}"
    );
    std::fs::copy(
        server.with_file_name("patchdiff-finalize"),
        dir.join("patchdiff-finalize"),
    )
    .unwrap();
    let both = help(&copy).await;
    assert_eq!(both.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&both.stdout)
            .starts_with("usage: patchdiff-mcp finalize --manifest FILE --out DIR")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Linux's ETXTBSY ("Text file busy").
const ETXTBSY: i32 = 26;
