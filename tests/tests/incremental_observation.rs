//! Issue 21, item 2, on a real server: an observation right after a commit (whose outline this
//! backend's parser helper reparses incrementally from the tree of the version it parsed
//! before) answers exactly what a fresh backend (a new connection, a cold full parse) answers;
//! also after a commit that was rolled back, whose text the helper had parsed.
//!
//! Environment: `PATCHDIFF_TEST_DSN` (required).

use patchdiff_tests::{call, connect, initialize_target, one_match_per_group, without_ids};
use serde_json::{Value, json};
use tokio_postgres::Client;

fn dsn() -> String {
    std::env::var("PATCHDIFF_TEST_DSN").expect("PATCHDIFF_TEST_DSN must be set")
}

fn module(functions: usize) -> String {
    (0..functions)
        .map(|n| {
            format!(
                "class Handler{n}:\n    def handle(self, event):\n        retries = 0\n        return dispatch(event, retries)\n\n\n\
                 def handler_{n}(event):\n    retries = 0\n    return dispatch(event, retries)\n\n\n"
            )
        })
        .collect()
}

fn bundle(target: &str, functions: usize, shift: usize) -> Value {
    let selections: Vec<Value> = (0..8)
        .map(|k| json!({"symbol_name": format!("handler_{}", (k * functions / 8 + shift) % functions)}))
        .collect();
    json!({"target_file_id": target, "selections": selections, "max_chars": 400})
}

/// Observes `args` on `c` and on a fresh connection; both answers, the ids left out, must agree.
async fn same_as_a_fresh_backend(c: &Client, args: &Value, what: &str) -> Value {
    let warm = call(c, "patchdiff_observe_scope", args).await.unwrap();
    let fresh = connect(&dsn()).await.unwrap();
    let cold = call(&fresh, "patchdiff_observe_scope", args).await.unwrap();
    assert_eq!(
        without_ids(&warm),
        without_ids(&cold),
        "{what}: this backend and a fresh one answer differently"
    );
    warm
}

/// Commits one `retries = ...` change in each scope of the observed bundle `b`.
async fn commit(c: &Client, target: &str, b: &Value, value: usize) -> Value {
    let request_id = format!(
        "incr-{}-{value}",
        b["snapshot"]["observation_bundle_id"]
            .as_str()
            .unwrap_or("")
    );
    let args = one_match_per_group(
        target,
        b,
        "retries = 0",
        &format!("retries = {value}"),
        "incremental observation test",
        &request_id,
    );
    call(c, "patchdiff_submit_observed_operations", &args)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observation_after_a_commit_equals_a_fresh_backends() {
    let c = connect(&dsn()).await.unwrap();
    let functions = 400;
    let target = initialize_target(&c, "incremental.py", &module(functions))
        .await
        .unwrap();
    for round in 0..6 {
        let args = bundle(&target, functions, round);
        let b = same_as_a_fresh_backend(&c, &args, &format!("round {round}")).await;
        assert_eq!(b["status"], "observed_batch", "{b}");
        let listed = json!({"target_file_id": target, "query": "handle"});
        same_as_a_fresh_backend(&c, &listed, &format!("round {round}, candidates")).await;
        if round == 3 {
            // A commit this backend's helper parsed, then rolled back: the next version has
            // other text under the same version number.
            // Through a router the transaction runs on the target's partition directly
            // (docs/scale-out.md, "What differs through the router").
            let partition;
            let own = if patchdiff_tests::is_router(&c).await {
                partition = patchdiff_tests::tables_for(&dsn(), &target).await;
                &partition
            } else {
                &c
            };
            own.batch_execute("BEGIN").await.unwrap();
            let r = commit(own, &target, &b, 999).await;
            assert_eq!(r["status"], "accepted", "{r}");
            let inside = bundle(&target, functions, round + 1);
            let seen = call(own, "patchdiff_observe_scope", &inside).await.unwrap();
            assert_eq!(seen["status"], "observed_batch", "{seen}");
            own.batch_execute("ROLLBACK").await.unwrap();
        }
        let r = commit(&c, &target, &b, round + 1).await;
        assert_eq!(r["status"], "accepted", "{r}");
    }
    let last = bundle(&target, functions, 1);
    same_as_a_fresh_backend(&c, &last, "after the last commit").await;
}

/// `patchdiff.parser_kept_memory = 0` (issue 21): the helper keeps no tree between calls, and
/// observations after commits still answer what a fresh backend answers. Changing the setting
/// replaces the backend's helper at its next call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_kept_memory_observations_still_equal_a_fresh_backends() {
    let c = connect(&dsn()).await.unwrap();
    let functions = 120;
    let target = initialize_target(&c, "incremental-none.py", &module(functions))
        .await
        .unwrap();
    // A warm helper with the default setting first, then the setting changes under it.
    let args = bundle(&target, functions, 0);
    same_as_a_fresh_backend(&c, &args, "default setting").await;
    c.batch_execute("SET patchdiff.parser_kept_memory = 0")
        .await
        .unwrap();
    let shown: String = c
        .query_one("SHOW patchdiff.parser_kept_memory", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "0");
    for round in 0..3 {
        let args = bundle(&target, functions, round);
        let b = same_as_a_fresh_backend(&c, &args, &format!("kept memory 0, round {round}")).await;
        assert_eq!(b["status"], "observed_batch", "{b}");
        let r = commit(&c, &target, &b, round + 1).await;
        assert_eq!(r["status"], "accepted", "{r}");
    }
    same_as_a_fresh_backend(&c, &bundle(&target, functions, 1), "kept memory 0, last").await;
}
