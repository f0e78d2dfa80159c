//! Replay and the history pages.

use super::schema::{T, boolean, nullable, output, status_output, target_id};
use super::{Declaration, Kind};
use crate::tool::Tool;
use serde_json::{Value, json};

fn history_output() -> Value {
    output(
        json!({"entries": {"type": "array"}, "has_more": {"type": "boolean"}, "next_sequence": {"type": ["integer", "null"]}}),
    )
}

pub(super) fn tools() -> Vec<Declaration> {
    let id = target_id;
    let limit = || {
        (
            "limit",
            nullable(
                json!({"type": "integer", "minimum": 1}),
                "Page size; default 50, capped at 200.",
            ),
            false,
        )
    };
    let before = || {
        (
            "before_sequence",
            nullable(
                json!({"type": "integer", "minimum": 1}),
                "Exclusive cursor: pass next_sequence from the previous page.",
            ),
            false,
        )
    };
    vec![
        Declaration {
            tool: Tool::Replay,
            meta: None,
            title: "Replay",
            description: "Reconstruct the target from its initial snapshot and accepted history; read materialized_state_matches and its four checks.".into(),
            kind: Kind::Read,
            params: vec![id()],
            root: vec![],
            forms: &[],
            output: status_output(),
            examples: vec![],
        },
        Declaration {
            tool: Tool::GetPdcpLog,
            meta: None,
            title: "Attempt log",
            description: "Newest-first page of accepted and rejected attempts; continue with before_sequence = next_sequence while has_more.".into(),
            kind: Kind::Read,
            params: vec![
                id(),
                limit(),
                before(),
                ("status", nullable(json!({"enum": ["accepted", "rejected"]}), "Only accepted or only rejected attempts."), false),
                ("content_hash", nullable(json!({"type": "string"}), "Only attempts whose stored record has this SHA-256."), false),
                ("client_request_id", nullable(json!({"type": "string"}), "Only the attempt stored under this request key."), false),
                ("include_content", boolean("Include each stored record (1 MiB page budget); default false."), false),
            ],
            root: vec![],
            forms: &[],
            output: history_output(),
            examples: vec![json!({"target_file_id": T, "limit": 3}), json!({"target_file_id": T, "limit": 3, "before_sequence": 8})],
        },
        Declaration {
            tool: Tool::GetManifestLedger,
            meta: None,
            title: "Manifest ledger",
            description: "Accepted changes of the newest page, shown oldest-first, with origin, derived facts and their attempt; active editing cycle unless include_previous_cycles.".into(),
            kind: Kind::Read,
            params: vec![id(), ("include_previous_cycles", boolean("Include cycles closed by patchdiff_save; default false."), false), limit(), before()],
            root: vec![],
            forms: &[],
            output: history_output(),
            examples: vec![json!({"target_file_id": T, "limit": 3}), json!({"target_file_id": T, "limit": 3, "before_sequence": 8})],
        },
    ]
}
