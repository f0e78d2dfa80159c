//! The catalog's contract: budgets, self-description, profiles, the SQL API's names.

use super::observed::{OBSERVED_GUARD_RULE, SNAPSHOT_GUARD_RULE};
use super::schema::GUARD_RULE;
use super::*;
use patchdiff_engine::wire::ascii_len;

fn list(tools: &[Declaration], revision: &str) -> Value {
    json!({"tools": tools.iter().map(|t| t.declaration(revision)).collect::<Vec<_>>()})
}

fn examples(tools: &[Declaration]) -> Map<String, Value> {
    tools
        .iter()
        .filter(|t| !t.examples.is_empty())
        .map(|t| (t.name().to_owned(), json!(t.examples)))
        .collect()
}

/// Contract "Bounded Wire & Context Budgets": the complete tools/list payload is at most
/// 65,536 bytes and the examples map at most 8,192, counted as compact ASCII JSON, for
/// every profile and revision, the `extended` and `files` profiles included. Beyond the
/// profiles, the contract's whole catalog (every tool of its families, the observed_v2 aliases
/// included) and, separately, every tool beyond the contract (issue 19's families) fit too:
/// no client is ever served the union of the two, so "(all)" of every family would bound a
/// list nobody receives, while each half bounds what a future profile could combine.
#[test]
fn discovery_fits_its_budgets() {
    let beyond = |t: &Declaration| matches!(t.tool.family(), Family::Extended | Family::Files);
    let mut catalogs: Vec<(String, Vec<Declaration>)> = vec![
        (
            "(contract)".into(),
            all_tools().into_iter().filter(|t| !beyond(t)).collect(),
        ),
        (
            "(beyond contract)".into(),
            all_tools().into_iter().filter(beyond).collect(),
        ),
    ];
    for p in Profile::ALL.into_iter().chain(Profile::BEYOND_CONTRACT) {
        catalogs.push((p.name().into(), profile_tools(p)));
    }
    for (name, tools) in &catalogs {
        for r in REVISIONS {
            let n = ascii_len(&list(tools, r));
            assert!(n <= 65_536, "{name} {r}: {n} bytes");
        }
        let n = ascii_len(&Value::Object(examples(tools)));
        assert!(n <= 8_192, "{name} examples: {n} bytes");
    }
    // Contract "Discovery": 13 examples across nine of the fifteen core tools.
    let core: Vec<Declaration> = all_tools().into_iter().take(15).collect();
    let core = examples(&core);
    assert_eq!(core.len(), 9);
    let count = |m: &Map<String, Value>| {
        m.values()
            .map(|e| e.as_array().unwrap().len())
            .sum::<usize>()
    };
    assert_eq!(count(&core), 13);
    // Structural: "filtered candidate discovery, direct single selection, batch selection,
    // observation paging, and separate single/batch submissions".
    let tools = all_tools();
    let ex = |n: &str| {
        tools
            .iter()
            .find(|t| t.name() == n)
            .unwrap()
            .examples
            .clone()
    };
    let observe = ex("patchdiff_observe_scope");
    assert!(observe[0].get("query").is_some() && observe[0].get("kind").is_some());
    assert!(observe[1].get("symbol_name").is_some());
    assert!(observe[2].get("selections").is_some());
    assert!(observe[3].get("observation_id").is_some() && observe[3].get("offset").is_some());
    let submit = ex("patchdiff_submit_observed_operations");
    assert!(submit[0].get("observation_id").is_some() && submit[0].get("groups").is_none());
    assert!(submit[1].get("groups").is_some() && submit[1].get("operations").is_none());
}

/// Examples use only declared names and include every required one.
#[test]
fn examples_use_declared_names() {
    for t in all_tools() {
        for e in &t.examples {
            for k in e.as_object().unwrap().keys() {
                assert!(t.allowed().any(|a| a == k), "{}: {k}", t.name());
            }
            // Every required name, the form's included.
            let missing = t.missing(|n| e.get(n).is_some());
            assert!(missing.is_empty(), "{}: {missing:?}", t.name());
        }
    }
}

/// Every top-level parameter has a one-line description; roots are objects; submission
/// tools repeat their guard rule in prose (observed submissions need both guards).
#[test]
fn declarations_are_self_describing() {
    for t in all_tools() {
        let s = t.input_schema();
        assert_eq!(s["type"], "object", "{}", t.name());
        for (name, p) in s["properties"].as_object().unwrap() {
            let d = p["description"]
                .as_str()
                .unwrap_or_else(|| panic!("{}.{name} has no description", t.name()));
            assert!(!d.is_empty() && !d.contains('\n'), "{}.{name}", t.name());
        }
        // The file tools take no guards: the front end guards them (docs/files.md).
        if t.kind == Kind::Submit && t.tool.family() != Family::Files {
            let rule = match t.name() {
                "patchdiff_submit_observed_operations" => OBSERVED_GUARD_RULE,
                "patchdiff_commit_bundle" => SNAPSHOT_GUARD_RULE,
                _ => GUARD_RULE,
            };
            assert!(t.description.contains(rule), "{}", t.name());
        }
        assert_eq!(t.output["type"], "object");
    }
}

/// Contract "Structural Observation and Scoped Submission": the descriptions state the
/// engine's limits.
#[test]
fn structural_descriptions_state_the_limits() {
    use patchdiff_engine::wire::limits::{
        OBSERVED_MAX_BATCH_OPERATIONS, OBSERVED_MAX_GROUPS, READ_DEFAULT_CHARS, READ_MAX_CHARS,
    };
    use patchdiff_engine::wire::observation::{
        BUNDLE_SCOPE_MAX_CHARS, BUNDLE_SELECTIONS_MAX, BUNDLE_TEXT_MAX_CHARS, SCOPE_CANDIDATES_MAX,
    };
    let grouped = |n: usize| {
        let s = n.to_string();
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(c);
        }
        out
    };
    let tools = all_tools();
    let d = |n: &str| {
        tools
            .iter()
            .find(|t| t.name() == n)
            .unwrap()
            .description
            .clone()
    };
    for (tool, facts) in [
        (
            "patchdiff_observe_scope",
            vec![
                grouped(SCOPE_CANDIDATES_MAX),
                format!("1-{BUNDLE_SELECTIONS_MAX}"),
                grouped(BUNDLE_SCOPE_MAX_CHARS),
                grouped(BUNDLE_TEXT_MAX_CHARS),
                grouped(READ_DEFAULT_CHARS),
                grouped(READ_MAX_CHARS),
            ],
        ),
        (
            "patchdiff_observe_scopes",
            vec![
                format!("1-{BUNDLE_SELECTIONS_MAX}"),
                grouped(BUNDLE_SCOPE_MAX_CHARS),
                grouped(BUNDLE_TEXT_MAX_CHARS),
                grouped(READ_DEFAULT_CHARS),
                grouped(READ_MAX_CHARS),
            ],
        ),
        (
            "patchdiff_submit_observed_operations",
            vec![
                format!("1-{OBSERVED_MAX_GROUPS} groups"),
                format!("at most {OBSERVED_MAX_BATCH_OPERATIONS} operations"),
            ],
        ),
        (
            "patchdiff_commit_bundle",
            vec![
                format!("1-{OBSERVED_MAX_GROUPS} groups"),
                format!("at most {OBSERVED_MAX_BATCH_OPERATIONS} operations"),
                grouped(crate::observed_v2::RECEIPT_MAX_BYTES),
            ],
        ),
    ] {
        for f in facts {
            assert!(d(tool).contains(&f), "{tool}: {f}");
        }
    }
}

/// observed-editor-v2: exactly five tools; `_meta` alwaysLoad, outputSchema and annotations
/// on 2025-06-18 and 2025-11-25 only; observation writes, commits are destructive.
#[test]
fn the_observed_v2_catalog() {
    let tools = profile_tools(Profile::ObservedV2);
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "patchdiff_read_target",
            "patchdiff_find_occurrences",
            "patchdiff_list_scopes",
            "patchdiff_observe_scopes",
            "patchdiff_commit_bundle"
        ]
    );
    let routes: Vec<&str> = tools.iter().map(|t| t.function()).collect();
    assert_eq!(
        routes,
        [
            "patchdiff_read_target",
            "patchdiff_find_occurrences",
            "patchdiff_observe_scope",
            "patchdiff_observe_scope",
            "patchdiff_submit_observed_operations"
        ]
    );
    for t in &tools {
        let old = t.declaration(REVISIONS[0]);
        for k in ["_meta", "outputSchema", "annotations", "title"] {
            assert!(old.get(k).is_none(), "{} {k}", t.name());
        }
        for r in &REVISIONS[1..] {
            let d = t.declaration(r);
            assert_eq!(
                d["_meta"],
                json!({"antigravity/alwaysLoad": true}),
                "{}",
                t.name()
            );
            assert_eq!(d["outputSchema"]["type"], "object");
            assert_eq!(d["annotations"]["openWorldHint"], false);
        }
    }
    let hints = |n: &str| {
        let a = tools.iter().find(|t| t.name() == n).unwrap().annotations();
        (
            a["readOnlyHint"].as_bool().unwrap(),
            a["destructiveHint"].as_bool().unwrap(),
            a["idempotentHint"].as_bool().unwrap(),
        )
    };
    assert_eq!(hints("patchdiff_read_target"), (true, false, true));
    assert_eq!(hints("patchdiff_find_occurrences"), (true, false, true));
    assert_eq!(hints("patchdiff_list_scopes"), (true, false, true));
    assert_eq!(hints("patchdiff_observe_scopes"), (false, false, false));
    assert_eq!(hints("patchdiff_commit_bundle"), (false, true, false));
    let commit = tools
        .iter()
        .find(|t| t.name() == "patchdiff_commit_bundle")
        .unwrap();
    let mut required: Vec<&str> = commit.required().collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["client_request_id", "groups", "intent", "snapshot"]
    );
    let snapshot = &commit.input_schema()["properties"]["snapshot"];
    assert_eq!(
        snapshot["required"],
        json!(crate::observed_v2::SNAPSHOT_FIELDS)
    );
    assert_eq!(snapshot["additionalProperties"], false);
    assert_eq!(commit.output["required"], json!(["status", "presentation"]));
    // The structural tools of the other profiles: observation writes, submission destroys;
    // no other profile's declaration carries _meta.
    let all = all_tools();
    let a = |n: &str| all.iter().find(|t| t.name() == n).unwrap().annotations();
    assert_eq!(a("patchdiff_observe_scope")["readOnlyHint"], false);
    assert_eq!(a("patchdiff_observe_scope")["destructiveHint"], false);
    assert_eq!(
        a("patchdiff_submit_observed_operations")["destructiveHint"],
        true
    );
    assert_eq!(
        a("patchdiff_submit_observed_operations")["idempotentHint"],
        false
    );
    for p in Profile::ALL
        .into_iter()
        .filter(|p| *p != Profile::ObservedV2)
    {
        for t in profile_tools(p) {
            assert!(
                t.declaration(REVISIONS[2]).get("_meta").is_none(),
                "{}",
                t.name()
            );
        }
    }
}

/// docs/profiles.md: which tools each profile lists. The observed profiles offer no
/// unobserved mutation route; the editor profiles no lifecycle.
#[test]
fn profile_membership() {
    let names =
        |p: Profile| -> Vec<&'static str> { profile_tools(p).iter().map(|t| t.name()).collect() };
    assert_eq!(names(Profile::Full).len(), 17);
    assert!(
        names(Profile::Full)
            .iter()
            .all(|n| Tool::parse(n).unwrap().family() != Family::ObservedV2)
    );
    assert_eq!(
        names(Profile::ObservedWorkspace),
        [
            "patchdiff_initialize_target",
            "patchdiff_read_target",
            "patchdiff_read_lines",
            "patchdiff_find_occurrences",
            "patchdiff_save",
            "patchdiff_observe_scope",
            "patchdiff_submit_observed_operations"
        ]
    );
    assert_eq!(
        names(Profile::ObservedEditor),
        [
            "patchdiff_read_target",
            "patchdiff_read_lines",
            "patchdiff_find_occurrences",
            "patchdiff_observe_scope",
            "patchdiff_submit_observed_operations"
        ]
    );
    assert_eq!(names(Profile::Workspace).len(), 5);
    assert_eq!(names(Profile::Editor).len(), 7);
    assert_eq!(names(Profile::ObservedV2).len(), 5);
    // Issue 19: extended lists full's tools, in full's order, then the Extended family
    // (patchdiff_diff among them); files lists none of full's.
    let extended = names(Profile::Extended);
    assert_eq!(extended[..17], names(Profile::Full)[..]);
    assert!(extended.contains(&"patchdiff_diff"));
    assert!(
        extended[17..]
            .iter()
            .all(|n| Tool::parse(n).unwrap().family() == Family::Extended)
    );
    assert!(!names(Profile::Files).contains(&"patchdiff_diff"));
    let unobserved = [
        "patchdiff_submit_edits",
        "patchdiff_submit_operations",
        "patchdiff_submit_replacement",
        "patchdiff_preview",
    ];
    let lifecycle = [
        "patchdiff_initialize_target",
        "patchdiff_handle_upload",
        "patchdiff_get_target",
        "patchdiff_export_target",
        "patchdiff_save",
        "patchdiff_replay",
    ];
    for p in [
        Profile::ObservedWorkspace,
        Profile::ObservedEditor,
        Profile::ObservedV2,
    ] {
        assert!(names(p).iter().all(|n| !unobserved.contains(n)), "{p:?}");
    }
    for p in [Profile::ObservedEditor, Profile::ObservedV2] {
        assert!(names(p).iter().all(|n| !lifecycle.contains(n)), "{p:?}");
    }
}

/// The argument names a tool declares are the names the SQL function accepts.
#[test]
fn declared_arguments_match_the_sql_api() {
    use patchdiff_engine::wire::{
        changeset, checkpoint, export, history, lines, observation as observe, preview, read,
        replay, scoped as observed, submit, target,
    };
    let engine: [(&str, &[&str]); 19] = [
        ("patchdiff_initialize_target", target::INITIALIZE_ARGS),
        ("patchdiff_handle_upload", target::UPLOAD_ARGS),
        ("patchdiff_get_target", &["target_file_id"]),
        ("patchdiff_export_target", export::EXPORT_ARGS),
        ("patchdiff_read_target", read::READ_TARGET_ARGS),
        ("patchdiff_read_lines", lines::READ_LINES_ARGS),
        ("patchdiff_find_occurrences", read::FIND_ARGS),
        ("patchdiff_submit_edits", submit::SUBMIT_EDITS_ARGS),
        (
            "patchdiff_submit_operations",
            submit::SUBMIT_OPERATIONS_ARGS,
        ),
        (
            "patchdiff_submit_replacement",
            submit::SUBMIT_REPLACEMENT_ARGS,
        ),
        ("patchdiff_preview", preview::PREVIEW_ARGS),
        ("patchdiff_save", checkpoint::SAVE_ARGS),
        ("patchdiff_replay", replay::REPLAY_ARGS),
        ("patchdiff_get_pdcp_log", history::LOG_ARGS),
        ("patchdiff_get_manifest_ledger", history::LEDGER_ARGS),
        ("patchdiff_observe_scope", observe::OBSERVE_ARGS),
        (
            "patchdiff_submit_observed_operations",
            observed::SUBMIT_OBSERVED_ARGS,
        ),
        (
            "patchdiff_submit_changeset",
            changeset::SUBMIT_CHANGESET_ARGS,
        ),
        ("patchdiff_diff", patchdiff_engine::wire::diff::DIFF_ARGS),
    ];
    // The observed_v2 aliases and the file tools (docs/files.md) have no SQL function of their
    // own name.
    let aliases = Tool::ALL
        .iter()
        .filter(|t| matches!(t.family(), Family::ObservedV2 | Family::Files))
        .count();
    assert_eq!(engine.len() + aliases, all_tools().len());
    let diff = all_tools()
        .into_iter()
        .find(|t| t.tool == Tool::Diff)
        .unwrap();
    assert_eq!(
        diff.required().collect::<Vec<_>>(),
        ["target_file_id", "from_version"]
    );
    for (name, args) in engine {
        let tool = all_tools().into_iter().find(|t| t.name() == name).unwrap();
        let mut declared: Vec<&str> = tool.allowed().collect();
        let mut accepted = args.to_vec();
        declared.sort();
        accepted.sort();
        assert_eq!(declared, accepted, "{name}");
    }
    // Required arguments: what the SQL function reports missing is what the schema requires,
    // except for observed operations (below).
    let required: [(&str, &[&str]); 5] = [
        (
            "patchdiff_submit_changeset",
            changeset::SUBMIT_CHANGESET_REQUIRED,
        ),
        ("patchdiff_submit_edits", submit::SUBMIT_EDITS_REQUIRED),
        (
            "patchdiff_submit_operations",
            submit::SUBMIT_OPERATIONS_REQUIRED,
        ),
        (
            "patchdiff_submit_replacement",
            submit::SUBMIT_REPLACEMENT_REQUIRED,
        ),
        ("patchdiff_preview", preview::PREVIEW_REQUIRED),
    ];
    for (name, args) in required {
        let tool = all_tools().into_iter().find(|t| t.name() == name).unwrap();
        let mut declared: Vec<&str> = tool.required().collect();
        let mut accepted = args.to_vec();
        declared.sort();
        accepted.sort();
        assert_eq!(declared, accepted, "{name}");
    }
    // Contract "patchdiff_submit_observed_operations", Arguments: the SQL function requires
    // only what it cannot audit without (a SQL caller's missing observation or guard is an
    // audited rejection); over MCP the contract's required names, both guards and the form's
    // names, never reach it. The forms are the ones the function tells apart.
    let tool = all_tools()
        .into_iter()
        .find(|t| t.name() == "patchdiff_submit_observed_operations")
        .unwrap();
    let mut declared: Vec<&str> = tool.required().collect();
    declared.sort_unstable();
    let mut expected = observed::SUBMIT_OBSERVED_REQUIRED.to_vec();
    expected.extend(["expected_current_hash", "expected_target_version"]);
    expected.sort_unstable();
    assert_eq!(declared, expected);
    assert_eq!(tool.forms.len(), 2);
    assert_eq!(tool.forms[0].names, observed::SINGLE_FORM_ARGS);
    assert_eq!(tool.forms[1].names, ["observation_bundle_id", "groups"]);
    assert!(
        tool.forms[1]
            .names
            .iter()
            .all(|n| observed::SUBMIT_OBSERVED_ARGS.contains(n))
    );
    // observed_v2: each alias declares the names of exactly one mode of its function.
    let names = |n: &str| -> Vec<&'static str> {
        let mut v: Vec<&str> = all_tools()
            .into_iter()
            .find(|t| t.name() == n)
            .unwrap()
            .allowed()
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(
        names("patchdiff_list_scopes"),
        ["kind", "query", "target_file_id"]
    );
    assert_eq!(
        names("patchdiff_observe_scopes"),
        [
            "include_line_starts",
            "max_chars",
            "selections",
            "target_file_id"
        ]
    );
    for n in names("patchdiff_list_scopes")
        .into_iter()
        .chain(names("patchdiff_observe_scopes"))
    {
        assert!(observe::OBSERVE_ARGS.contains(&n), "{n}");
    }
    // The commit's routed names are the batch form's.
    let mut routed: Vec<&str> = names("patchdiff_commit_bundle")
        .into_iter()
        .filter(|n| *n != "snapshot")
        .chain(crate::observed_v2::SNAPSHOT_FIELDS)
        .collect();
    routed.sort_unstable();
    let mut batch: Vec<&str> = observed::SUBMIT_OBSERVED_ARGS
        .iter()
        .copied()
        .filter(|n| !observed::SINGLE_FORM_ARGS.contains(n))
        .collect();
    batch.sort_unstable();
    assert_eq!(routed, batch);
}

/// Contract "Discovery": both newer submission tools advertise x-patchdiff-capabilities
/// taken from the runtime constants.
#[test]
fn capabilities_come_from_the_runtime_constants() {
    use patchdiff_engine::wire::{limits, tx2, tx3};
    let tools = all_tools();
    let schema = |n: &str| tools.iter().find(|t| t.name() == n).unwrap().input_schema();
    let ops = &schema("patchdiff_submit_operations")["x-patchdiff-capabilities"];
    assert_eq!(ops["protocol"], tx2::PROTOCOL);
    assert_eq!(ops["runtime"], tx2::RUNTIME);
    assert_eq!(ops["span_context"]["runtime"], tx2::RUNTIME_SPAN_CONTEXT);
    assert_eq!(ops["operations"], json!(["match", "span"]));
    let rep = &schema("patchdiff_submit_replacement")["x-patchdiff-capabilities"];
    assert_eq!(rep["protocol"], tx3::PROTOCOL);
    assert_eq!(rep["runtime"], tx3::RUNTIME);
    assert_eq!(
        rep["limits"]["max_code_points"],
        limits::REPLACEMENT_MAX_CODE_POINTS
    );
    assert_eq!(
        rep["limits"]["max_utf8_bytes"],
        limits::REPLACEMENT_MAX_UTF8_BYTES
    );
}

/// Issue 16 item 4: the catalog declares every [`Tool`] exactly once, in `Tool::ALL`'s order,
/// one family after another.
#[test]
fn the_catalog_declares_every_tool_once_in_order() {
    let tools: Vec<Tool> = all_tools().iter().map(|d| d.tool).collect();
    assert_eq!(tools, Tool::ALL);
    let mut families: Vec<Family> = tools.iter().map(|t| t.family()).collect();
    families.dedup();
    assert_eq!(
        families,
        [
            Family::Targets,
            Family::Reads,
            Family::Submissions,
            Family::Save,
            Family::History,
            Family::Observed,
            Family::ObservedV2,
            Family::Extended,
            Family::Files
        ]
    );
}

/// Contract "patchdiff_submit_observed_operations", Arguments (observation_id, operations and
/// both guards required) and batch form (observation_bundle_id, groups, mandatory
/// client_request_id): what the front end reports missing for each shape of call, in
/// declaration order; the schema advertises the two forms as its root anyOf.
#[test]
fn observed_operations_require_the_contracts_names_per_form() {
    let tool = all_tools()
        .into_iter()
        .find(|t| t.tool == Tool::SubmitObservedOperations)
        .unwrap();
    let missing = |sent: &[&str]| tool.missing(|n| sent.contains(&n));
    let guards = ["expected_target_version", "expected_current_hash"];
    let single = [
        &["target_file_id", "intent", "observation_id", "operations"][..],
        &guards,
    ]
    .concat();
    let batch = [
        &[
            "target_file_id",
            "intent",
            "observation_bundle_id",
            "groups",
        ][..],
        &guards,
        &["client_request_id"],
    ]
    .concat();
    assert!(missing(&single).is_empty());
    assert!(missing(&batch).is_empty());
    for name in &single {
        let sent: Vec<&str> = single.iter().copied().filter(|n| n != name).collect();
        assert_eq!(missing(&sent), [*name], "single form without {name}");
    }
    for name in &batch {
        let sent: Vec<&str> = batch.iter().copied().filter(|n| n != name).collect();
        assert_eq!(missing(&sent), [*name], "batch form without {name}");
    }
    // A call naming neither form lacks the single form's names (the contract's list).
    assert_eq!(
        missing(&["target_file_id", "intent"]),
        [
            "observation_id",
            "operations",
            "expected_target_version",
            "expected_current_hash"
        ]
    );
    // Names of both forms are the SQL function's observed_form_conflict, not a missing name.
    let both = [&single[..], &["observation_bundle_id"]].concat();
    assert!(missing(&both).is_empty());
    let schema = tool.input_schema();
    assert_eq!(
        schema["required"],
        json!([
            "target_file_id",
            "intent",
            "expected_target_version",
            "expected_current_hash"
        ])
    );
    assert_eq!(
        schema["anyOf"],
        json!([
            {"required": ["observation_id", "operations"]},
            {"required": ["observation_bundle_id", "groups", "client_request_id"]}
        ])
    );
}

/// Contract "Discovery, argument errors and examples": strict end-of-string patterns pair `$`
/// with `not: {pattern: "\n$"}` (client_request_id included); span context (contract
/// "Span context") is "non-empty strings or null".
#[test]
fn request_keys_and_span_context_match_the_contract_domains() {
    fn walk<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
        match v {
            Value::Object(m) => {
                if m.get("pattern")
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.starts_with('^') && p.ends_with('$'))
                {
                    out.push(v);
                }
                m.values().for_each(|c| walk(c, out));
            }
            Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
            _ => {}
        }
    }
    let mut keys = 0;
    let mut contexts = 0;
    for t in all_tools() {
        let schema = t.input_schema();
        let mut strict = vec![];
        walk(&schema, &mut strict);
        for s in strict {
            assert_eq!(s["not"], json!({"pattern": "\\n$"}), "{}: {s}", t.name());
        }
        // The log's filter looks up stored keys of any spelling: no key syntax there.
        if let Some(key) = schema["properties"].get("client_request_id")
            && t.tool != Tool::GetPdcpLog
        {
            keys += 1;
            assert!(
                key.to_string().contains(r#""pattern":"^[!-~]+$""#),
                "{}",
                t.name()
            );
        }
        let text = schema.to_string();
        for field in ["expected_before", "expected_after"] {
            let needle = format!(r#""{field}":{{"type":["string","null"],"minLength":1,"#);
            let all = text.matches(&format!(r#""{field}":{{"#)).count();
            assert_eq!(text.matches(&needle).count(), all, "{}: {field}", t.name());
            contexts += all;
        }
    }
    // tx/1, tx/2, tx/3, observed operations, commit bundle, changeset (issue 19); every tx/2
    // operation schema.
    assert_eq!(keys, 6);
    assert!(contexts >= 6, "{contexts}");
}
