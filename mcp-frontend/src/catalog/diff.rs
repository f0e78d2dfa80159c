//! `patchdiff_diff` (issue 19, item 3): the unified diff between two versions of one target.
//! Family::Extended: listed by the `extended` profile only.

use super::schema::{T, integer, nullable, output, string, target_id};
use super::{Declaration, Kind};
use crate::tool::Tool;
use patchdiff_engine::wire::diff::{
    DIFF_DEFAULT_CONTEXT, DIFF_DEFAULT_PAGE_BYTES, DIFF_MAX_CONTEXT, DIFF_MAX_PAGE_BYTES,
    DIFF_MIN_PAGE_BYTES,
};
use serde_json::json;

pub(super) fn tools() -> Vec<Declaration> {
    vec![Declaration {
        tool: Tool::Diff,
        meta: None,
        title: "Diff",
        description: "Unified diff between two versions of a target (any two, across SAVEs): GNU diff -U<context> hunks of the LF texts, one page of at most max_page_bytes; continue with cursor = next_cursor while has_more. Prepend header to the concatenated pages for a patch.".into(),
        kind: Kind::Read,
        params: vec![
            target_id(),
            (
                "from_version",
                integer(0, "The old version (the - side)."),
                true,
            ),
            (
                "to_version",
                nullable(
                    json!({"type": "integer", "minimum": 0}),
                    "The new version (the + side); default the current version.",
                ),
                false,
            ),
            (
                "context",
                nullable(
                    json!({"type": "integer", "minimum": 0, "maximum": DIFF_MAX_CONTEXT}),
                    &format!("Context lines around each change; default {DIFF_DEFAULT_CONTEXT}."),
                ),
                false,
            ),
            (
                "max_page_bytes",
                nullable(
                    json!({"type": "integer", "minimum": DIFF_MIN_PAGE_BYTES, "maximum": DIFF_MAX_PAGE_BYTES}),
                    &format!("Page size in UTF-8 bytes; default {DIFF_DEFAULT_PAGE_BYTES}."),
                ),
                false,
            ),
            (
                "cursor",
                nullable(
                    string("next_cursor of the previous page, with the same versions and context."),
                    "Continue a diff.",
                ),
                false,
            ),
        ],
        root: vec![],
        forms: &[],
        output: output(json!({
            "status": {"type": "string"},
            "from_version": {"type": "integer"},
            "to_version": {"type": "integer"},
            "header": {"type": "string"},
            "hunks": {"type": "string", "description": "This page of the hunk text."},
            "identical": {"type": "boolean"},
            "has_more": {"type": "boolean"},
            "next_cursor": {"type": ["string", "null"]},
        })),
        examples: vec![json!({"target_file_id": T, "from_version": 0, "to_version": 2})],
    }]
}
