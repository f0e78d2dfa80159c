//! The smoke check: every file of `corpus/<target>/` through its target, without AFL++, in a
//! plain `cargo test` (about a second). A crash found by the campaign is fixed by adding its
//! input here, so that this test keeps it fixed.

use std::path::Path;

fn replay_corpus(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        // `abort_*`: a known abort of a grammar's C code (kept as an AFL++ seed, see below).
        let known_abort = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("abort_"));
        if path.is_file() && !known_abort {
            run(&std::fs::read(&path).unwrap());
            n += 1;
        }
    }
    assert!(n > 0, "{} is empty", dir.display());
}

#[test]
fn args() {
    replay_corpus("args", patchdiff_fuzz::args);
}

#[test]
fn submit() {
    replay_corpus("submit", patchdiff_fuzz::submit);
}

#[test]
fn canonical() {
    replay_corpus("canonical", patchdiff_fuzz::canonical);
}

#[test]
fn near_miss() {
    replay_corpus("near_miss", patchdiff_fuzz::near_miss);
}

#[test]
fn replay() {
    replay_corpus("replay", patchdiff_fuzz::replay);
}

/// The YAML and Python grammars abort on deep nesting (tree-sitter's `length <= 1024`
/// assertion in `ts_parser__external_scanner_serialize`); the helper process contains that, so
/// such inputs (`corpus/waymark/abort_*`, e.g. the 509-byte YAML `"- " * 254 + "x"`) are seeds
/// for AFL++ but skipped here, where they would abort this test process.
#[test]
fn waymark() {
    replay_corpus("waymark", patchdiff_fuzz::waymark);
}

#[test]
fn wire() {
    replay_corpus("wire", patchdiff_fuzz::wire);
}

#[test]
fn diff() {
    replay_corpus("diff", patchdiff_fuzz::diff);
}
