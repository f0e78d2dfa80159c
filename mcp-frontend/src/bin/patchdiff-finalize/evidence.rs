//! The output directory: manifest.json, events.jsonl, exports/ and results.json, each
//! created new and fsynced before the run relies on it. The directory and everything in it are
//! the finalizer's user's alone (0700 and 0600). An export and results.json are written whole
//! under `.partial/` first and then linked into place, so a failure (a full disk, a name the
//! file system refuses) never leaves part of a document where a whole one belongs (helper-46).

use crate::manifest::Target;
use patchdiff_engine::wire::{LITERAL, sha256_hex, to_string};
use serde_json::{Value, json};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Identifies the layout of manifest.json, results.json and the printed outcome.
pub const FORMAT: &str = "patchdiff-finalize/1";
/// The only export format the finalizer writes.
pub const EXPORT_FORMAT: &str = "canonical_lf";

/// The root-level evidence: manifest.json, events.jsonl (one fsynced line per event), and at
/// the end results.json; exports/ holds only exported documents.
pub(crate) struct Evidence {
    pub(crate) root: PathBuf,
    exports: PathBuf,
    /// Where a file is written whole before it is linked into place; removed at the end.
    partial: PathBuf,
    events: File,
    seq: u64,
    pub(crate) manifest_sha256: String,
}

pub(crate) enum Refusal {
    Exists(String),
    Io(String),
}

impl Evidence {
    pub(crate) fn create(
        root: &Path,
        manifest_path: &Path,
        manifest_text: &str,
        targets: &[Target],
    ) -> Result<Evidence, Refusal> {
        let io = |what: &str, e: io::Error| Refusal::Io(format!("{what}: {e}"));
        match new_dir(root) {
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
        new_dir(&exports).map_err(|e| io("cannot create exports/", e))?;
        let partial = root.join(".partial");
        new_dir(&partial).map_err(|e| io("cannot create .partial/", e))?;
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
            .mode(0o600)
            .open(root.join("events.jsonl"))
            .map_err(|e| io("cannot create events.jsonl", e))?;
        sync_dir(root).map_err(|e| io("cannot fsync the output directory", e))?;
        Ok(Evidence {
            root: root.to_owned(),
            exports,
            partial,
            events,
            seq: 0,
            manifest_sha256,
        })
    }

    /// Appends one event and makes it durable before returning.
    pub(crate) fn event(&mut self, event: &str, fields: Value) -> io::Result<()> {
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

    /// Writes `exports/<filename>`: whole under `.partial/`, read back and checked, fsynced,
    /// then linked into place (never replacing a file), and every directory from its parent up
    /// to the output directory fsynced. Returns the relative path. On failure nothing of it is
    /// left: not the file, not the directories made for it.
    pub(crate) fn export(&self, filename: &str, content: &str) -> io::Result<String> {
        let path = self.exports.join(filename);
        let parent = path.parent().unwrap_or(&self.exports).to_owned();
        let mut made = Vec::new();
        if let Err(e) = self.place(&path, &parent, content, &mut made) {
            for dir in made.iter().rev() {
                let _ = fs::remove_dir(dir);
            }
            return Err(e);
        }
        Ok(format!("exports/{filename}"))
    }

    fn place(
        &self,
        path: &Path,
        parent: &Path,
        content: &str,
        made: &mut Vec<PathBuf>,
    ) -> io::Result<()> {
        // The directories under exports/ that do not exist yet, made one by one (0700), so that
        // a failure removes exactly those.
        let mut missing = Vec::new();
        let mut dir = parent;
        while dir != self.exports && fs::symlink_metadata(dir).is_err() {
            missing.push(dir.to_owned());
            dir = dir.parent().unwrap_or(&self.exports);
        }
        for dir in missing.into_iter().rev() {
            new_dir(&dir)?;
            made.push(dir);
        }
        self.link_whole(path, content, "export")?;
        let mut dir = parent;
        loop {
            sync_dir(dir).inspect_err(|_| {
                let _ = fs::remove_file(path);
            })?;
            if dir == self.root {
                break;
            }
            dir = dir.parent().unwrap_or(&self.root);
        }
        Ok(())
    }

    /// Writes `content` whole to `.partial/<tag>`, reads it back and checks it, fsyncs it, and
    /// links it to `path` (which must not exist); the partial name is removed either way.
    fn link_whole(&self, path: &Path, content: &str, tag: &str) -> io::Result<()> {
        let partial = self.partial.join(tag);
        let linked = write_new(&partial, content)
            .and_then(|()| {
                if fs::read(&partial)? != content.as_bytes() {
                    return Err(io::Error::other(
                        "the file read back differs from the bytes written",
                    ));
                }
                Ok(())
            })
            .and_then(|()| fs::hard_link(&partial, path));
        let _ = fs::remove_file(&partial);
        linked
    }

    /// Writes results.json whole and links it into place, then fsyncs the evidence and the
    /// directories, and removes `.partial/`. A results.json that could not be written whole is
    /// not there at all.
    pub(crate) fn results(&self, results: &Value) -> io::Result<()> {
        let path = self.root.join("results.json");
        self.link_whole(&path, &pretty(results), "results.json")?;
        let synced = self
            .events
            .sync_all()
            .and_then(|()| fs::remove_dir(&self.partial))
            .and_then(|()| sync_dir(&self.exports))
            .and_then(|()| sync_dir(&self.root));
        if synced.is_err() {
            let _ = fs::remove_file(&path);
            let _ = sync_dir(&self.root);
        }
        synced
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

/// Creates `path` (never replacing a file, mode 0600) with `content`, fsynced.
fn write_new(path: &Path, content: &str) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

/// Creates directory `path` (never an existing one), mode 0700.
fn new_dir(path: &Path) -> io::Result<()> {
    DirBuilder::new().mode(0o700).create(path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
