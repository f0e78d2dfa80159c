//! Allocations whose failure the engine handles itself.
//!
//! Inside a PostgreSQL backend the extension's global allocator decides what a failed allocation
//! does (`pg_patchdiff/src/memory.rs`): Rust's own answer, aborting the process, would make the
//! postmaster end every other session and restart the server. It cannot tell an allocation
//! whose failure its caller handles (`try_reserve`) from one whose failure aborts, so code that
//! handles the failure itself says so by running the allocation in [`fallibly`]. There the
//! allocator answers a failure with "no memory", as the system allocator does, and the caller
//! takes its own way out (the near-miss search answers an omission).
//!
//! The engine knows nothing of PostgreSQL: outside a backend nothing reads this, and it costs an
//! atomic add and subtract around the few allocations that use it.

use std::sync::atomic::{AtomicU32, Ordering};

/// How many [`fallibly`] calls are running (the backend runs one thread; nesting is allowed).
static FALLIBLE: AtomicU32 = AtomicU32::new(0);

/// Runs `f`, whose allocations' failures its own code handles (`try_reserve`, `try_with_capacity`).
pub fn fallibly<T>(f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            FALLIBLE.fetch_sub(1, Ordering::Relaxed);
        }
    }
    FALLIBLE.fetch_add(1, Ordering::Relaxed);
    let _leave = Leave;
    f()
}

/// Whether a failed allocation now would be handled by the code that made it.
pub fn fallible() -> bool {
    FALLIBLE.load(Ordering::Relaxed) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallible_only_inside_and_again_after_a_panic() {
        assert!(!fallible());
        fallibly(|| {
            assert!(fallible());
            fallibly(|| assert!(fallible()));
            assert!(fallible());
        });
        assert!(!fallible());
        let unwound = std::panic::catch_unwind(|| fallibly(|| panic!("inside")));
        assert!(unwound.is_err());
        assert!(!fallible(), "an unwind leaves the section too");
    }
}
