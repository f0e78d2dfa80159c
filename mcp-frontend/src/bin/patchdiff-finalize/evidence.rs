//! The output directory: manifest.json, events.jsonl, exports/ and results.json, each
//! created new and fsynced before the run relies on it.

use crate::manifest::Target;
use patchdiff_engine::wire::{LITERAL, sha256_hex, to_string};
use serde_json::{Value, json};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
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

    /// Writes `exports/<filename>`, reads it back and checks the bytes, and fsyncs the file and
    /// every directory from its parent up to the output directory. Returns the relative path.
    pub(crate) fn export(&self, filename: &str, content: &str) -> io::Result<String> {
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

    pub(crate) fn results(&self, results: &Value) -> io::Result<()> {
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
