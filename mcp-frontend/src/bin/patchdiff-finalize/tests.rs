//! The finalizer's pure parts: manifest, arguments, replay checks.

use crate::finalizer::check_replay;
use crate::manifest::parse_manifest;
use crate::options::{DEFAULT_CALL_TIMEOUT, parse_args};
use serde_json::{Value, json};

const ID: &str = "11111111-1111-4111-8111-111111111111";
const LOG: &str = "22222222-2222-4222-8222-222222222222";

fn target(filename: &str, id: &str) -> Value {
    json!({"filename": filename, "target_file_id": id, "expected_target_version": 1,
           "expected_current_hash": "a".repeat(64), "accepted_pdcp_log_id": LOG})
}

/// Host guide: the trusted manifest contains filename, target_file_id,
/// expected_target_version, expected_current_hash and accepted_pdcp_log_id.
#[test]
fn manifest_accepts_both_shapes() {
    let list = json!([target("docs/a.md", ID)]).to_string();
    let t = parse_manifest(&list).unwrap();
    assert_eq!(t[0].filename, "docs/a.md");
    assert_eq!(t[0].accepted_pdcp_log_id.as_deref(), Some(LOG));
    let object = json!({"targets": [target("a.md", ID)]}).to_string();
    assert_eq!(parse_manifest(&object).unwrap().len(), 1);
}

/// Host guide: preflight all target names/identities; a misspelt or missing guard is a
/// refusal, never a SAVE without it.
#[test]
fn manifest_problems_are_all_reported() {
    let mut bad = target("../x", "not-a-uuid");
    bad["expected_version"] = json!(1);
    bad["expected_target_version"] = json!(-1);
    bad["expected_current_hash"] = json!("ABC");
    let problems = parse_manifest(&json!([bad]).to_string()).unwrap_err();
    let all = problems.join("\n");
    for needle in [
        "unknown key \"expected_version\"",
        "filename \"../x\"",
        "target_file_id",
        "expected_target_version",
        "expected_current_hash",
    ] {
        assert!(all.contains(needle), "{needle}: {all}");
    }
    let dup = json!([target("a", ID), target("a/b", ID)]).to_string();
    let all = parse_manifest(&dup).unwrap_err().join("\n");
    assert!(
        all.contains("listed twice") && all.contains("inside \"a\""),
        "{all}"
    );
    assert!(parse_manifest("[]").is_err());
    assert!(parse_manifest("{\"targets\": [], \"x\": 1}").is_err());
    let mut null_receipt = target("a", ID);
    null_receipt["accepted_pdcp_log_id"] = Value::Null;
    assert!(parse_manifest(&json!([null_receipt.clone()]).to_string()).is_err());
    null_receipt["expected_target_version"] = json!(0);
    assert!(parse_manifest(&json!([null_receipt]).to_string()).is_ok());
}

#[test]
fn arguments() {
    let a = |s: &[&str]| parse_args(&s.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let o = a(&["--manifest", "m.json", "--out", "d"]).unwrap().unwrap();
    assert_eq!(o.call_timeout, DEFAULT_CALL_TIMEOUT);
    assert_eq!(a(&["--help"]).unwrap(), None);
    assert!(a(&["--manifest", "m.json"]).is_err());
    assert!(a(&["--manifest", "m", "--out", "d", "--call-timeout", "0"]).is_err());
    assert!(a(&["--manifest", "m", "--manifest", "n", "--out", "d"]).is_err());
    assert!(a(&["--bogus"]).is_err());
}

/// Host guide: replay must verify all four materialized-state components and the expected
/// version/hash.
#[test]
fn replay_needs_all_four_checks_and_the_guards() {
    let t = parse_manifest(&json!([target("a", ID)]).to_string())
        .unwrap()
        .remove(0);
    let ok = json!({"status": "success", "target_file_id": ID, "reconstructed_hash": "a".repeat(64),
        "current_hash": "a".repeat(64), "reconstructed_version": 1, "current_version": 1,
        "materialized_state_matches": true, "materialized_state_checks": {"content_matches": true,
        "stored_hash_matches": true, "recomputed_hash_matches": true, "version_matches": true}});
    let obj = |v: Value| v.as_object().unwrap().clone();
    assert!(check_replay(&obj(ok.clone()), &t).is_ok());
    let mut bad = ok.clone();
    bad["materialized_state_checks"]["content_matches"] = json!(false);
    assert!(
        check_replay(&obj(bad), &t)
            .unwrap_err()
            .contains("content_matches")
    );
    let mut bad = ok;
    bad["reconstructed_version"] = json!(2);
    assert!(check_replay(&obj(bad), &t).is_err());
}

/// docs/finalize.md "The manifest": a key given twice in one object is refused (it would be
/// read as its last value, so a guard given twice, one of them wrong, would go unnoticed),
/// whatever the object (helper-46).
#[test]
fn repeated_keys_are_refused() {
    let one = target("a.md", ID).to_string();
    let twice = one.replacen(
        "\"expected_current_hash\":",
        &format!(
            "\"expected_current_hash\":\"{}\",\"expected_current_hash\":",
            "0".repeat(64)
        ),
        1,
    );
    assert_ne!(twice, one);
    for text in [
        format!("[{twice}]"),
        format!("{{\"targets\":[],\"targets\":[{one}]}}"),
    ] {
        let problems = parse_manifest(&text).unwrap_err();
        assert!(
            problems[0].contains("appears twice in one object"),
            "{text}: {problems:?}"
        );
    }
    assert!(parse_manifest(&format!("[{one}]")).is_ok());
}
