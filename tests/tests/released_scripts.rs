//! Issue 16 item 5, release gates: a released pg_patchdiff script is never edited. Needs no
//! database.
//!
//! A release freezes its install script in `sql/releases/` and adds its line to
//! `sql/releases/SHA256SUMS`, together with the lines of the upgrade scripts (`sql/upgrades/`)
//! that lead to it. Databases were created and updated by exactly those bytes, so a line is
//! never edited or removed: a change to the extension's objects goes into the upgrade script of
//! the version being built instead. That version (`pg_patchdiff/Cargo.toml`) is never a released
//! one, and every release reaches it through upgrade scripts, so `ALTER EXTENSION pg_patchdiff
//! UPDATE` works from each of them (tests/tests/upgrade.rs proves what the update leaves).

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Version = (u64, u64, u64);

fn sql_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql")
}

fn parse_version(s: &str) -> Option<Version> {
    let mut parts = s.split('.').map(|p| p.parse::<u64>().ok());
    let v = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(v)
}

fn show((a, b, c): Version) -> String {
    format!("{a}.{b}.{c}")
}

/// The names of the files in `dir` (relative to `sql/`), sorted.
fn files(dir: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(sql_dir().join(dir))
        .unwrap_or_else(|e| panic!("cannot list sql/{dir}: {e}"))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// The version pg_patchdiff is built as: its own `version = "..."` line (the workspace's
/// version is patchdiff-mcp's, which this does not follow).
fn version_being_built() -> Version {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pg_patchdiff/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("version"))
        .unwrap_or_else(|| panic!("{}: no version line", manifest.display()));
    let quoted = line
        .split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("pg_patchdiff's version must be its own (version = \"x.y.z\"), not the workspace's: {line}"));
    parse_version(quoted).unwrap_or_else(|| panic!("not a version: {line}"))
}

/// `sql/releases/pg_patchdiff--X.Y.Z.sql` files: the released versions.
fn released() -> BTreeMap<Version, String> {
    let mut out = BTreeMap::new();
    for name in files("releases") {
        if name == "SHA256SUMS" {
            continue;
        }
        let version = name
            .strip_prefix("pg_patchdiff--")
            .and_then(|r| r.strip_suffix(".sql"))
            .and_then(parse_version)
            .unwrap_or_else(|| {
                panic!(
                    "sql/releases/{name}: only pg_patchdiff--X.Y.Z.sql and SHA256SUMS belong here"
                )
            });
        out.insert(version, format!("releases/{name}"));
    }
    out
}

/// `sql/upgrades/pg_patchdiff--FROM--TO.sql` files, by (from, to).
fn upgrades() -> BTreeMap<(Version, Version), String> {
    let mut out = BTreeMap::new();
    for name in files("upgrades") {
        let pair = name
            .strip_prefix("pg_patchdiff--")
            .and_then(|r| r.strip_suffix(".sql"))
            .and_then(|r| r.split_once("--"))
            .and_then(|(a, b)| Some((parse_version(a)?, parse_version(b)?)));
        let (from, to) = pair.unwrap_or_else(|| {
            panic!("sql/upgrades/{name}: only pg_patchdiff--X.Y.Z--X.Y.Z.sql belongs here")
        });
        assert!(from < to, "sql/upgrades/{name} goes backwards");
        out.insert((from, to), format!("upgrades/{name}"));
    }
    out
}

/// SHA256SUMS as `sha256sum` writes it, paths relative to sql/releases, '#' lines comments:
/// (path relative to `sql/`, sha256).
fn checksums() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(sql_dir().join("releases/SHA256SUMS"))
        .expect("sql/releases/SHA256SUMS");
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (sum, path) = line
            .split_once("  ")
            .unwrap_or_else(|| panic!("SHA256SUMS: not \"<sha256>  <path>\": {line}"));
        let path = match path.strip_prefix("../") {
            Some(p) => p.to_owned(),
            None => format!("releases/{path}"),
        };
        assert!(
            out.insert(path.clone(), sum.to_owned()).is_none(),
            "SHA256SUMS names {path} twice"
        );
    }
    out
}

fn sha256_of(path: &str) -> String {
    let bytes = std::fs::read(sql_dir().join(path))
        .unwrap_or_else(|e| panic!("sql/{path} is listed in SHA256SUMS but cannot be read: {e}"));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// No released script differs from the bytes SHA256SUMS froze.
#[test]
fn released_scripts_are_never_edited() {
    for (path, frozen) in checksums() {
        let now = sha256_of(&path);
        assert_eq!(
            now, frozen,
            "sql/{path} was edited after its release (its sha256 is now {now}, SHA256SUMS froze \
             {frozen}). A released script is never edited: restore it, and put the change in the \
             upgrade script of the version being built (sql/upgrades)."
        );
    }
}

/// Every released install script, and every upgrade script that leads to a released version,
/// has its line in SHA256SUMS.
#[test]
fn every_released_script_is_frozen() {
    let sums = checksums();
    let released = released();
    assert!(
        released.contains_key(&(0, 1, 0)),
        "the 0.1.0 release (issue 16) is missing from sql/releases"
    );
    let frozen_upgrades = upgrades()
        .into_iter()
        .filter(|((_, to), _)| released.contains_key(to))
        .map(|(_, path)| path);
    for path in released.values().cloned().chain(frozen_upgrades) {
        assert!(
            sums.contains_key(&path),
            "sql/{path} is released but has no line in sql/releases/SHA256SUMS: add one \
             (cd sql/releases && sha256sum {}), never edit the others",
            path.strip_prefix("releases/")
                .map(str::to_owned)
                .unwrap_or_else(|| format!("../{path}"))
        );
    }
}

/// The version being built is newer than every release (so pgrx's install script never
/// replaces a frozen one), and upgrade scripts lead from every release to it.
#[test]
fn every_release_updates_to_the_version_being_built() {
    let building = version_being_built();
    let released = released();
    let latest = *released.keys().next_back().expect("no release");
    assert!(
        building > latest,
        "pg_patchdiff is built as {} but {} is released already: a released version's objects \
         never change, so the version in pg_patchdiff/Cargo.toml must be newer, with an upgrade \
         script from {} to it",
        show(building),
        show(latest),
        show(latest)
    );
    let edges: BTreeSet<(Version, Version)> = upgrades().into_keys().collect();
    for &from in released.keys() {
        let mut reached = BTreeSet::from([from]);
        let mut todo = vec![from];
        while let Some(v) = todo.pop() {
            for &(a, b) in &edges {
                if a == v && reached.insert(b) {
                    todo.push(b);
                }
            }
        }
        assert!(
            reached.contains(&building),
            "no upgrade path from the release {} to {}, the version being built: add \
             sql/upgrades/pg_patchdiff--{}--{}.sql",
            show(from),
            show(building),
            show(latest),
            show(building)
        );
    }
}
