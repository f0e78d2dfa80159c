//! `PATCHDIFF_MCP_RESPONSE_MODE=compact`: the contract's presentation projections, and nothing
//! else ("External response representations"). Every failure, every diagnostic and every other
//! tool keeps its detailed representation.

use crate::tool::Tool;
use serde_json::{Map, Value, json};

/// The sentence compact mode adds to the descriptions of the tools it projects
/// ([`Tool::compact_projected`]).
pub const ANNOUNCEMENT: &str = " Compact mode: successful results omit supplementary evidence and duplicate page metadata, listed in presentation.omitted.";

const CANDIDATE_KEYS: &[&str] = &["name", "kind", "parent", "start_line", "end_line"];
const SCOPE_PAGE_METADATA: &[&str] = &[
    "start",
    "end",
    "max_chars",
    "next_start",
    "start_line",
    "end_line",
];

/// Projects one result of `tool` (the tool whose SQL function answered) in place when the
/// contract lists its tool and status.
pub fn project(tool: Tool, result: &mut Value) {
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    let mut omitted: Vec<&str> = Vec::new();
    match (tool, status.as_str()) {
        (Tool::SubmitObservedOperations, "accepted") => {
            for k in ["evidence", "groups"] {
                if obj.remove(k).is_some() {
                    omitted.push(k);
                }
            }
        }
        (Tool::ObserveScope, "candidates") => {
            if let Some(Value::Array(list)) = obj.get_mut("candidates") {
                let mut cut = false;
                for c in list.iter_mut().filter_map(Value::as_object_mut) {
                    let before = c.len();
                    c.retain(|k, _| CANDIDATE_KEYS.contains(&k.as_str()));
                    cut |= c.len() < before;
                }
                if cut {
                    omitted.push("candidate_details");
                }
            }
        }
        (Tool::ObserveScope, "observed_batch") => {
            if let Some(Value::Array(scopes)) = obj.get_mut("scopes") {
                let mut cut = false;
                for s in scopes.iter_mut().filter_map(Value::as_object_mut) {
                    for k in SCOPE_PAGE_METADATA {
                        cut |= s.remove(*k).is_some();
                    }
                }
                if cut {
                    omitted.push("duplicate_page_metadata");
                }
            }
        }
        _ => return,
    }
    let mut p = Map::new();
    p.insert("mode".into(), json!("compact"));
    p.insert("omitted".into(), json!(omitted));
    obj.insert("presentation".into(), Value::Object(p));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Contract "External response representations": exactly these projections.
    #[test]
    fn projections_follow_the_contract() {
        let mut accepted = json!({"status": "accepted", "evidence": {}, "groups": [], "warnings": [], "version": 2});
        project(Tool::SubmitObservedOperations, &mut accepted);
        assert_eq!(
            accepted,
            json!({"status": "accepted", "warnings": [], "version": 2, "presentation": {"mode": "compact", "omitted": ["evidence", "groups"]}})
        );

        let mut candidates = json!({"status": "candidates", "candidates": [{"name": "f", "kind": "function", "parent": null, "start_line": 1, "end_line": 3, "start": 0, "end": 9}], "truncated": false});
        project(Tool::ObserveScope, &mut candidates);
        assert_eq!(
            candidates["candidates"][0],
            json!({"name": "f", "kind": "function", "parent": null, "start_line": 1, "end_line": 3})
        );
        assert_eq!(
            candidates["presentation"]["omitted"],
            json!(["candidate_details"])
        );

        let mut batch = json!({"status": "observed_batch", "scopes": [{"observation_id": "o", "text": "x", "start": 0, "end": 1, "max_chars": 4000, "next_start": null, "start_line": 1, "end_line": 1, "offset": 0, "next_offset": null}]});
        project(Tool::ObserveScope, &mut batch);
        assert_eq!(
            batch["scopes"][0],
            json!({"observation_id": "o", "text": "x", "offset": 0, "next_offset": null})
        );
        assert_eq!(
            batch["presentation"]["omitted"],
            json!(["duplicate_page_metadata"])
        );

        // Failures, single observations and other tools keep their representation.
        for (tool, mut v) in [
            (
                Tool::SubmitObservedOperations,
                json!({"status": "rejected", "diagnostic": {}}),
            ),
            (
                Tool::ObserveScope,
                json!({"status": "observed", "text": "x", "start": 0}),
            ),
            (
                Tool::SubmitEdits,
                json!({"status": "accepted", "evidence": {}}),
            ),
        ] {
            let before = v.clone();
            project(tool, &mut v);
            assert_eq!(v, before);
        }
    }
}
