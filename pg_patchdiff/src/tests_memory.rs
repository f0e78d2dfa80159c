//! A failed allocation inside a backend (`crate::memory`), over SQL: the allocator's answers that
//! leave the session standing. The answer that ends the session (`FATAL`, with the server going
//! on) cannot run inside this test's own backend; `tests/tests/hostile_input.rs`
//! (`an_allocation_a_backend_cannot_make_never_restarts_the_server`) holds it, on a real cluster
//! under a real address-space limit.

use crate::memory::{fail_allocations, reserve_held};
use crate::tests::{call, init, scalar};
use pgrx::prelude::*;
use serde_json::json;

/// The next allocation of at least 1 MiB fails, as if the system had no memory left; any larger
/// request in the calls below is one.
const FROM: usize = 1 << 20;

/// Runs `sql` in a PL/pgSQL block that catches `out_of_memory` (a subtransaction, rolled back
/// when it is caught, as an application's handler would) and answers its SQLSTATE, message and
/// detail, or `none` if nothing was raised. The failure is armed just before.
fn caught(sql: &str) -> (String, String, String) {
    Spi::run("CREATE TEMP TABLE IF NOT EXISTS caught (state text, message text, detail text)")
        .unwrap();
    Spi::run("TRUNCATE caught").unwrap();
    fail_allocations(FROM, 1);
    let ran = Spi::run(&format!(
        "DO $$ DECLARE s text; m text; d text; BEGIN {sql}; \
         INSERT INTO caught VALUES ('none', '', ''); \
         EXCEPTION WHEN out_of_memory THEN \
           GET STACKED DIAGNOSTICS s = RETURNED_SQLSTATE, m = MESSAGE_TEXT, d = PG_EXCEPTION_DETAIL; \
           INSERT INTO caught VALUES (s, m, d); END $$"
    ));
    fail_allocations(usize::MAX, 0);
    ran.unwrap();
    let row = Spi::get_three::<String, String, String>("SELECT state, message, detail FROM caught")
        .unwrap();
    (
        row.0.unwrap_or_default(),
        row.1.unwrap_or_default(),
        row.2.unwrap_or_default(),
    )
}

#[pg_schema]
mod tests {
    use super::*;

    /// DESIGN.md "Nothing an input can reach may take the server down": an allocation that fails
    /// and is served from the backend's reserve ends its call with `ERROR: out of memory`
    /// (53200), a read's and a submission's alike; the submission writes nothing, and the
    /// session's next call sets the reserve aside again and is answered as if nothing happened.
    /// Before, the same failure aborted the backend and the postmaster restarted the server.
    #[pg_test]
    fn a_call_finished_on_the_reserve_ends_with_out_of_memory_and_the_session_goes_on() {
        let text = format!(
            "Title line\n{}",
            "The old lighthouse keeper walked along the shore.\n".repeat(60_000)
        );
        let t = init(&text);
        assert!(reserve_held());
        let rows = || -> i64 {
            scalar(
                "SELECT count(*) FROM patchdiff.pdcp_logs WHERE target_file_id = $1::uuid",
                &t,
            )
        };
        let version = || -> i64 {
            scalar(
                "SELECT version FROM patchdiff.targets WHERE target_file_id = $1::uuid",
                &t,
            )
        };
        let logged = rows();

        let read = format!("PERFORM patchdiff_get_target('{{\"target_file_id\": \"{t}\"}}')");
        let (state, message, detail) = caught(&read);
        assert_eq!(
            (state.as_str(), message.as_str()),
            ("53200", "out of memory")
        );
        assert!(detail.contains("on its reserve"), "{detail}");
        assert!(!reserve_held(), "spent until the next call");

        let edit = json!({"target_file_id": t, "expected_target_version": 0, "intent": "x",
                          "edits": [{"match": "Title line", "replace": "Heading"}]});
        let (state, _, _) = caught(&format!("PERFORM patchdiff_submit_edits('{edit}')"));
        assert_eq!(state, "53200");
        assert_eq!(
            (rows(), version()),
            (logged, 0),
            "nothing of the submission is kept"
        );

        // Nothing armed: the same calls are answered, on a reserve set aside again.
        let r = call("patchdiff_get_target", json!({"target_file_id": t}));
        assert_eq!(r["current_content"].as_str(), Some(text.as_str()));
        assert!(reserve_held());
        let r = call("patchdiff_submit_edits", edit);
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!((rows(), version()), (logged + 1, 1));
    }

    /// Code that handles its own allocation failure (`try_reserve` inside the engine's
    /// `memory::fallibly`, as the near-miss search's buffers) is told "no memory", and the
    /// reserve is neither spent nor the call ended for it: the near-miss search answers its
    /// omission (issue 17) as it would anywhere.
    #[pg_test]
    fn a_failure_the_code_handles_itself_is_left_to_it() {
        use patchdiff_engine::api::memory::fallibly;
        crate::memory::begin_call();
        fail_allocations(FROM, 1);
        let mut v: Vec<u8> = Vec::new();
        let refused = fallibly(|| v.try_reserve_exact(2 * FROM)).is_err();
        fail_allocations(usize::MAX, 0);
        assert!(refused, "the failure reaches the code that asked");
        assert!(reserve_held(), "the reserve stays set aside");
        // Ends nothing: no ERROR is due.
        crate::memory::settle();
        let mut w: Vec<u8> = Vec::new();
        assert!(w.try_reserve_exact(2 * FROM).is_ok());
    }
}
