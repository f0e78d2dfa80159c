//! Helpers for `patchdiff-mcp serve` (Streamable HTTP, docs/http.md) in tests.

use std::io::{BufRead, BufReader};
use std::process::ChildStderr;

/// The endpoint's URL, from the first line `patchdiff-mcp serve` writes on stderr (with
/// `--listen 127.0.0.1:0`, the port the system chose).
pub fn listening_url(stderr: &mut BufReader<ChildStderr>) -> String {
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    line.trim()
        .strip_prefix("patchdiff-mcp: listening on ")
        .unwrap_or_else(|| panic!("no address line: {line:?}"))
        .to_owned()
}
