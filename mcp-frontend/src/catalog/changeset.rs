//! Beyond the contract (issue 19 item 1), listed only by the `extended` profile: one atomic
//! changeset of guarded tx/1 or tx/2 proposals on several targets.

use super::schema::{
    GUARD_RULE, guards, nonempty, nullable, output, submission_options, target_id,
};
use super::submissions::{edit_item, operation_item};
use super::{Declaration, Kind};
use crate::tool::Tool;
use patchdiff_engine::wire::changeset::{
    CHANGESET_MAX_BYTES, CHANGESET_MAX_CHANGES, CHANGESET_MAX_MEMBERS,
};
use serde_json::{Map, Value, json};

/// Example targets: a function's file and a caller's file.
const DEF: &str = "33333333-3333-4333-8333-333333333333";
const CALLER: &str = "44444444-4444-4444-8444-444444444444";

/// One member: the arguments of patchdiff_submit_edits (with `edits`) or of
/// patchdiff_submit_operations (with `operations`), without a request key of its own.
fn member() -> Value {
    let mut props = Map::new();
    let mut params = vec![
        target_id(),
        ("intent", nonempty("What this member is for."), true),
    ];
    params.push((
        "edits",
        json!({"type": "array", "minItems": 1, "items": edit_item(), "description": "tx/1 edits (as patchdiff_submit_edits)."}),
        false,
    ));
    params.push((
        "operations",
        json!({"type": "array", "minItems": 1, "items": operation_item(), "description": "tx/2 operations (as patchdiff_submit_operations)."}),
        false,
    ));
    params.extend(guards());
    params.extend(
        submission_options()
            .into_iter()
            .filter(|(n, _, _)| *n != "client_request_id"),
    );
    for (name, schema, _) in params {
        props.insert(name.into(), schema);
    }
    json!({
        "type": "object",
        "properties": props,
        "required": ["target_file_id", "intent"],
        "additionalProperties": false,
        "oneOf": [{"required": ["edits"]}, {"required": ["operations"]}],
    })
}

pub(super) fn tools() -> Vec<Declaration> {
    vec![Declaration {
        tool: Tool::SubmitChangeset,
        meta: None,
        title: "Submit changeset",
        description: format!(
            "Several guarded proposals on different targets, all or nothing: each member is the arguments of patchdiff_submit_edits (edits) or patchdiff_submit_operations (operations), with its own guards. Every member is accepted and applied, or none is (each is logged rejected, naming the failing member). One client_request_id covers the whole changeset; members carry none. At most {CHANGESET_MAX_MEMBERS} members, {CHANGESET_MAX_CHANGES} edits and operations in all, {CHANGESET_MAX_BYTES} bytes, each target once. {GUARD_RULE}"
        ),
        kind: Kind::Submit,
        params: vec![
            (
                "members",
                json!({"type": "array", "minItems": 1, "maxItems": CHANGESET_MAX_MEMBERS, "items": member(),
                       "description": "Ordered proposals, one per target."}),
                true,
            ),
            (
                "client_request_id",
                nullable(
                    json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$", "not": {"pattern": "\\n$"}}),
                    "Request key of the whole changeset: resend the identical call to recover its outcome.",
                ),
                false,
            ),
        ],
        root: vec![],
        forms: &[],
        output: output(json!({
            "status": {"type": "string", "description": "accepted, rejected or invalid_argument"},
            "changeset_id": {"type": ["string", "null"], "description": "Shared by every member's attempt; null when nothing was written."},
            "member_count": {"type": "integer"},
            "failing_member": {"type": ["object", "null"], "description": "member_index, target_file_id, failure_reason, code."},
            "members": {"type": "array", "description": "Each member's own submission answer, in order."},
            "deduplicated": {"type": "boolean"}
        })),
        examples: vec![json!({
            "client_request_id": "rename-001",
            "members": [
                {"target_file_id": DEF, "expected_target_version": 4, "intent": "Rename parse to parse_header",
                 "edits": [{"match": "def parse(", "replace": "def parse_header("}]},
                {"target_file_id": CALLER, "expected_target_version": 9, "intent": "Update the caller",
                 "operations": [{"op": "match", "match": "parse(data)", "replace": "parse_header(data)"}]}
            ]
        })],
    }]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{all_tools, profile_tools};
    use crate::config::Profile;

    /// Issue 19 item 1: the changeset tool is listed by the `extended` profile and no other
    /// (the contract's six profiles keep their catalogs, which the goldens pin).
    #[test]
    fn listed_only_by_the_extended_profile() {
        for p in Profile::ALL {
            let listed = profile_tools(p)
                .iter()
                .any(|t| t.tool == Tool::SubmitChangeset);
            assert_eq!(listed, p == Profile::Extended, "{p:?}");
        }
    }

    /// The example is a rename across two targets whose members use only the member schema's
    /// names, each with a guard, one in each format, and no member key.
    #[test]
    fn the_example_is_a_rename_across_two_targets() {
        let t = all_tools()
            .into_iter()
            .find(|t| t.tool == Tool::SubmitChangeset)
            .unwrap();
        let schema = member();
        let names: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        let members = t.examples[0]["members"].as_array().unwrap().clone();
        assert_eq!(members.len(), 2);
        assert_ne!(members[0]["target_file_id"], members[1]["target_file_id"]);
        for m in &members {
            for k in m.as_object().unwrap().keys() {
                assert!(names.contains(&k), "{k}");
            }
            assert!(m.get("expected_target_version").is_some());
            assert!(m.get("client_request_id").is_none());
        }
        assert!(members[0].get("edits").is_some() && members[1].get("operations").is_some());
        assert!(!names.iter().any(|n| *n == "client_request_id"));
    }
}
