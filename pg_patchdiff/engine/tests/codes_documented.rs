//! Issue 17, "Codes the contract does not name ... are documented": every machine `code` the
//! project emits is a row of docs/codes.md. The codes are collected three ways, so that a new
//! one cannot slip past all of them:
//!
//! - the engine's rejection codes, [`DiagnosticCode::ALL`];
//! - string literals in a code position of the non-test source of the engine, the extension
//!   and the front end (`"code": "..."`, `ArgError::new("...")`, an argument helper's trailing
//!   `"invalid_..."`, the front end's `invalid(...)`, `refuse(...)`, `partial(...)`, warning
//!   constants, `*_too_large` / `too_many_*` caps, and the engine's UPPER_SNAKE observation
//!   codes);
//! - every `"code"` value in the golden files, which pin every response.

use patchdiff_engine::api::words::DiagnosticCode;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Literals the code-position rules catch that are not codes the project emits.
const NOT_CODES: [(&str, &str); 7] = [
    ("CARGO_PKG_VERSION", "an env! variable"),
    ("unknown_arguments", "a member name"),
    ("match_too_large", "a near_misses omission_reason"),
    ("identity_too_large", "a preview evidence_omissions reason"),
    // Contract stage names, quoted in prose; `validation_stage` carries them in lower case
    // and is not a `code`.
    ("PROTOCOL_VALIDATION", "a stage name"),
    ("PRECONDITION_GUARD", "a stage name"),
    ("TRANSACTION_APPLICABILITY", "a stage name"),
];

/// The codes of docs/codes.md: every backquoted word in the first cell of a table row.
fn documented() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(root().join("docs/codes.md")).expect("docs/codes.md");
    let mut codes = BTreeSet::new();
    for line in doc.lines() {
        let Some(row) = line.strip_prefix("| ") else {
            continue;
        };
        let cell = row.split(" | ").next().unwrap_or("");
        for (i, part) in cell.split('`').enumerate() {
            if i % 2 == 1 {
                codes.insert(part.to_owned());
            }
        }
    }
    codes
}

fn is_code_shaped(s: &str) -> bool {
    let lower = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let upper = s
        .bytes()
        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    s.contains('_')
        && s.as_bytes()[0].is_ascii_alphabetic()
        && !s.ends_with('_')
        && (lower || upper)
}

/// The string literals of Rust source, with their byte spans: comments, char literals and
/// lifetimes are skipped, raw strings are read whole.
fn literals(src: &str) -> Vec<(usize, usize, String)> {
    let b = src.as_bytes();
    let mut out = vec![];
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            b'\'' => {
                // 'x', '\n', '\u{..}', b'"'; otherwise a lifetime.
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if let Some(c) = src[i + 1..].chars().next() {
                    let after = i + 1 + c.len_utf8();
                    i = if b.get(after) == Some(&b'\'') {
                        after + 1
                    } else {
                        i + 1
                    };
                } else {
                    i += 1;
                }
            }
            b'r' if (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
                && matches!(b.get(i + 1), Some(b'"' | b'#')) =>
            {
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let end = src[j + 1..]
                    .find(&close)
                    .map_or(b.len(), |e| j + 1 + e + close.len());
                i = end;
            }
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                out.push((start, i + 1, src[start + 1..i].to_owned()));
                i += 1;
            }
            _ => i += 1,
        }
    }
    out
}

fn without_space(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") && !name.starts_with("tests") {
            out.push(path);
        }
    }
}

/// The non-test part of a source file: up to its `mod tests` (or `mod depth_tests`).
fn non_test(src: &str) -> &str {
    let mut end = src.len();
    for marker in ["#[cfg(test)]\nmod ", "#[cfg(test)]\npub mod "] {
        if let Some(at) = src.find(marker) {
            end = end.min(at);
        }
    }
    &src[..end]
}

fn emitted_in_source() -> BTreeMap<String, PathBuf> {
    const CODE_POSITIONS: [&str; 8] = [
        "\"code\":",
        "(\"code\",json!(",
        "ArgError::new(",
        "invalid(",
        "code:",
        "refuse(",
        "partial(",
        "permission_denied(target_file_id,",
    ];
    let mut files = vec![];
    for dir in [
        "pg_patchdiff/engine/src",
        "pg_patchdiff/src",
        "mcp-frontend/src",
    ] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut found = BTreeMap::new();
    for path in files {
        let full = std::fs::read_to_string(&path).unwrap();
        let src = non_test(&full);
        let engine = path.to_string_lossy().contains("engine/src");
        let warnings = path.ends_with("text/warnings.rs");
        for (start, end, lit) in literals(src) {
            if !is_code_shaped(&lit) {
                continue;
            }
            let before = without_space(&src[start.saturating_sub(60)..start]);
            let after = without_space(&src[end..(end + 3).min(src.len())]);
            let positioned = CODE_POSITIONS.iter().any(|p| before.ends_with(p))
                || (warnings && before.ends_with(":&str="));
            let helper_code = after.starts_with(')')
                && ["invalid_", "missing_", "unknown_", "empty_"]
                    .iter()
                    .any(|p| lit.starts_with(p));
            let upper = engine && lit.bytes().all(|c| !c.is_ascii_lowercase());
            // The work caps (submit.rs check_caps) pass their codes through tables.
            let cap = lit.ends_with("_too_large") || lit.starts_with("too_many_");
            if positioned || helper_code || upper || cap {
                found.entry(lit).or_insert_with(|| path.clone());
            }
        }
    }
    found
}

fn emitted_in_goldens() -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    for dir in ["tests/golden", "tests/sql/expected"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let text = text.replace("\\\"", "\"");
            for (at, _) in text.match_indices("\"code\"") {
                let rest = text[at + 6..].trim_start();
                let Some(rest) = rest.strip_prefix(':') else {
                    continue;
                };
                let Some(rest) = rest.trim_start().strip_prefix('"') else {
                    continue;
                };
                let code: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                found.entry(code).or_insert_with(|| path.clone());
            }
        }
    }
    found
}

#[test]
fn every_emitted_code_is_documented() {
    let documented = documented();
    let mut emitted: BTreeMap<String, PathBuf> = emitted_in_source();
    for (code, path) in emitted_in_goldens() {
        emitted.entry(code).or_insert(path);
    }
    for code in DiagnosticCode::ALL {
        emitted
            .entry(code.as_str().to_owned())
            .or_insert_with(|| PathBuf::from("contract/words.rs"));
    }
    for (code, _) in NOT_CODES {
        emitted.remove(code);
    }
    // The collection is not vacuous: the three sources found what they must.
    for code in [
        "OBSERVED_SCOPES_OVERLAP",
        "invalid_start_occurrence",
        "unknown_snapshot_field",
        "no_op_change",
        "write_not_granted",
        "workspace_path_escape",
        "invalid_snapshot",
        "PARSER_LIMIT",
        "metadata_too_large",
        "too_many_edits",
    ] {
        assert!(emitted.contains_key(code), "{code} was not collected");
    }
    let missing: Vec<String> = emitted
        .iter()
        .filter(|(c, _)| !documented.contains(*c))
        .map(|(c, p)| format!("{c} ({})", p.display()))
        .collect();
    assert!(
        missing.is_empty(),
        "codes emitted but not in docs/codes.md:\n{}",
        missing.join("\n")
    );
}

/// The collector itself: literals, comments, char literals and raw strings.
#[test]
fn literals_skip_comments_chars_and_raw_strings() {
    let src = r####"let a = "x_y"; // "c_d"
let b = b'"'; let c = '\''; fn f<'a>() {} let r = r#"raw "q_r""#; /* "e_f" */ let z = "z_w";"####;
    let lits: Vec<String> = literals(src).into_iter().map(|l| l.2).collect();
    assert_eq!(lits, ["x_y", "z_w"]);
}
