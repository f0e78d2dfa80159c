//! Near misses of `match_absent` rejections over a real connection (contract "Exact candidates,
//! consumed matches and near misses"): computed for a service-owned (autocommit) call, omitted
//! for a caller's transaction, rescanned from the stored failure context on exact recovery.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (see sql_concurrency.rs).

use patchdiff_tests::{call, connect, initialize_target};
use serde_json::{Value, json};
use tokio_postgres::Client;

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN must be set")
}

async fn client() -> Client {
    connect(&dsn())
        .await
        .expect("connecting with PATCHDIFF_TEST_DSN")
}

fn typo(target: &str, key: Option<&str>) -> Value {
    let mut v = json!({
        "target_file_id": target,
        "expected_target_version": 0,
        "intent": "Rename the lighthouse",
        "edits": [{"match": "lighthuose keeper", "replace": "harbour master"}],
    });
    if let Some(k) = key {
        v["client_request_id"] = json!(k);
    }
    v
}

const DOC: &str =
    "The old lighthouse keeper walked along the shore.\nA lighthouse keeps ships away.\n";

/// A fresh autocommit rejection: the persisted near_miss_query and up to three response-only
/// candidates from the failing buffer, ranked by distance; exact recovery rescans only the
/// stored failure context.
#[tokio::test]
async fn autocommit_rejection_lists_near_misses_and_recovery_rescans_the_stored_context() {
    let c = client().await;
    let t = initialize_target(&c, "near.md", DOC).await.unwrap();
    let r = call(&c, "patchdiff_submit_edits", &typo(&t, Some("near-1")))
        .await
        .unwrap();
    assert_eq!(r["failure_reason"], "match_absent", "{r}");
    assert_eq!(
        r["diagnostic"]["near_miss_query"],
        json!({"query": "lighthuose keeper"})
    );
    let nm = &r["near_misses"];
    assert_eq!(nm["scan_source"], "failing_buffer", "{nm}");
    assert_eq!(
        (&nm["scanned_start"], &nm["scanned_end"]),
        (&json!(0), &json!(DOC.chars().count()))
    );
    assert_eq!(nm["truncated"], false);
    let first = &nm["candidates"][0];
    assert_eq!(
        (&first["text"], &first["distance"], &first["start"]),
        (&json!("lighthouse keeper"), &json!(2), &json!(8)),
        "{nm}"
    );
    assert_eq!(first["context_before"], "The old ");
    // Issue 17, clause "comparison_cells counts banded cells evaluated" as docs/sql-api.md
    // defines it for this search, with its worked example: m = 17, k = 4, n = 81, so the filter
    // is 17 * 4 * (21 + 22) = 2,924 cells and the rest is whole verification batches of
    // 17 * 4 * 18 = 1,224 cells (two of them).
    assert_eq!(nm["comparison_cells"], 5_372, "{nm}");
    // The keys sit right after current_context.
    let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
    let at = keys.iter().position(|k| *k == "current_context").unwrap();
    assert_eq!(keys[at + 1], "near_misses");

    let again = call(&c, "patchdiff_submit_edits", &typo(&t, Some("near-1")))
        .await
        .unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(
        again["near_misses"]["scan_source"],
        "stored_failure_context"
    );
    assert_eq!(again["near_misses"]["candidates"][0]["start"], 8);
}

/// A caller-owned transaction gets omission_reason "caller_transaction"; the verdict is the same.
#[tokio::test]
async fn caller_transaction_omits_near_misses() {
    let c = client().await;
    let t = initialize_target(&c, "near-tx.md", DOC).await.unwrap();
    let mut c = patchdiff_tests::caller_transaction_client(&dsn(), &t, c).await;
    let tx = c.transaction().await.unwrap();
    let r = call(&tx, "patchdiff_submit_edits", &typo(&t, None))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(r["failure_reason"], "match_absent");
    assert_eq!(
        r["near_misses"],
        json!({"omission_reason": "caller_transaction"})
    );
}

/// Queries over 64 raw code points record match_too_large and are not searched; a consumed
/// match is sequential_match_consumed with no near_miss_query.
#[tokio::test]
async fn long_queries_and_consumed_matches_are_not_searched() {
    let c = client().await;
    let t = initialize_target(&c, "near-long.md", DOC).await.unwrap();
    let long = "x".repeat(65);
    let r = call(
        &c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                "edits": [{"match": long, "replace": "y"}]}),
    )
    .await
    .unwrap();
    assert_eq!(
        r["diagnostic"]["near_miss_query"],
        json!({"omission_reason": "match_too_large"})
    );
    // The contract's omission, and (issue 17) the drift evidence, which has no 64-code-point
    // limit: nothing close to 65 x's in this text.
    assert_eq!(
        r["near_misses"],
        json!({"omission_reason": "match_too_large",
               "whitespace_candidates": {"candidates": [], "candidates_truncated": false},
               "block_near_miss": {"omission_reason": "single_line_match"}})
    );
    let r = call(
        &c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                "edits": [{"match": "old lighthouse", "replace": "new"},
                          {"match": "lighthouse keeper", "replace": "z"}]}),
    )
    .await
    .unwrap();
    assert_eq!(r["failure_reason"], "sequential_match_invalid", "{r}");
    assert!(r["diagnostic"].get("near_miss_query").is_none());
    assert_eq!(
        r["near_misses"],
        json!({"omission_reason": "sequential_match_consumed"})
    );
}

/// An empty result carries the hint naming patchdiff_find_occurrences.
#[tokio::test]
async fn no_candidate_gives_the_hint() {
    let c = client().await;
    let t = initialize_target(&c, "near-none.md", DOC).await.unwrap();
    let r = call(
        &c,
        "patchdiff_submit_edits",
        &json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                "edits": [{"match": "zzzzqqqq", "replace": "y"}]}),
    )
    .await
    .unwrap();
    assert_eq!(r["near_misses"]["candidates"], json!([]));
    assert!(
        r["near_misses"]["hint"]
            .as_str()
            .unwrap()
            .contains("patchdiff_find_occurrences")
    );
}

/// A failing buffer longer than 65,536 code points is scanned over its first 65,536 only, and
/// says so: scope_truncated and truncated.
#[tokio::test]
async fn a_long_failing_buffer_is_scanned_in_its_first_65536_code_points() {
    let c = client().await;
    let doc = format!("{}lighthouse keeper\n", "ab\n".repeat(25_000));
    let t = initialize_target(&c, "near-big.md", &doc).await.unwrap();
    let r = call(&c, "patchdiff_submit_edits", &typo(&t, None))
        .await
        .unwrap();
    let nm = &r["near_misses"];
    assert_eq!(
        (&nm["scanned_end"], &nm["scope_truncated"], &nm["truncated"]),
        (&json!(65_536), &json!(true), &json!(true)),
        "{nm}"
    );
}
