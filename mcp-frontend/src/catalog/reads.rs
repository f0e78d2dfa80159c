//! Authoritative reads of a target's text.

use super::schema::{T, boolean, integer, nonempty, nullable, status_output, target_id};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::json;

pub(super) fn tools() -> Vec<Declaration> {
    let id = target_id;
    vec![
        Declaration {
            tool: Tool::ReadTarget,
            meta: None,
            title: "Read target",
            description: "Authoritative read of a code-point slice with version and current_hash; continue with start = next_start.".into(),
            kind: Kind::Read,
            params: vec![id(), ("start", integer(0, "Start offset in Unicode code points; default 0."), false), ("length", nullable(json!({"type": "integer", "minimum": 1}), "Code points to read; default 4000, capped at 8000."), false)],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "start": 0, "length": 200})],
        },
        Declaration {
            tool: Tool::ReadLines,
            meta: None,
            title: "Read lines",
            description: "Read an inclusive range of 1-based LF lines; continue with offset = next_offset (relative to the range) or read_target start = next_start (absolute).".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                ("start_line", integer(1, "First line, 1-based; default 1."), false),
                ("end_line", nullable(json!({"type": "integer", "minimum": 1}), "Last line, inclusive; default the last line."), false),
                ("offset", integer(0, "Code-point offset within the selected range (a next_offset); default 0."), false),
                ("max_chars", nullable(json!({"type": "integer", "minimum": 1}), "Page size in code points; default 4000, capped at 8000."), false),
                ("include_line_starts", boolean("Add line_starts: absolute start offset of each selected line on the page."), false),
            ],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "start_line": 1, "end_line": 1})],
        },
        Declaration {
            tool: Tool::FindOccurrences,
            meta: None,
            title: "Find occurrences",
            description: "Exact occurrences of text (overlapping ones counted) with code-point spans and context; indexes describe the current target.".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                ("text", nonempty("Exact text to find (case- and whitespace-sensitive)."), true),
                ("context_chars", integer(0, "Context code points on each side; default 40, capped at 400."), false),
                ("start_occurrence", integer(1, "1-based occurrence to start from (a next_occurrence_index); default 1."), false),
                ("max_results", integer(1, "Occurrences to return; default and cap 200."), false),
            ],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![json!({"target_file_id": T, "text": "alpha", "context_chars": 20})],
        },
    ]
}
