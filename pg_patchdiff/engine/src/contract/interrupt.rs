//! Interrupt checks inside loops whose length depends on input (DESIGN.md: "Every loop whose
//! length depends on input checks for interrupts").
//!
//! The engine knows nothing of PostgreSQL. The extension registers one hook with [`set_hook`],
//! a function that runs PostgreSQL's `CHECK_FOR_INTERRUPTS()`, so that a query cancel or a
//! `statement_timeout` stops a long search, application or replay instead of waiting for it.
//! That hook may raise an ERROR, which pgrx turns into a Rust panic that unwinds through engine
//! frames (the workspace builds with `panic = "unwind"`). The engine works on values only: an
//! unwind leaves no shared state behind, no lock held and nothing half-written, so every frame
//! may be abandoned at any check.
//!
//! Cost: with no hook installed, [`check`] is one atomic load. With a hook it is an indirect
//! call, and PostgreSQL's own `CHECK_FOR_INTERRUPTS()` is a load and a branch when nothing is
//! pending. Hot loops that do a few nanoseconds of work per iteration still count iterations
//! with [`Every`] and check once per interval, so that the checks stay far below 1% of the
//! loop's time while a pending cancel is still seen within microseconds; loops whose iteration
//! is itself expensive (an edit, a replayed row, a memmem call) check every time.

use std::cell::Cell;
use std::sync::atomic::{AtomicPtr, Ordering};

/// Iterations between checks in byte- or character-level loops: 4,096 iterations of a few
/// nanoseconds each is a few microseconds between checks.
pub const SEARCH_INTERVAL: u32 = 4_096;

/// The registered hook, or null.
static HOOK: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Registers the function [`check`] calls. The extension calls this once, at load; a later call
/// replaces the hook (tests use that to install a counting hook).
pub fn set_hook(f: fn()) {
    HOOK.store(f as *mut (), Ordering::Release);
}

thread_local! {
    /// Set while the hook runs, and so left set when it unwinds: see [`unwound`].
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Calls the registered hook, if any. It may not return (an ERROR unwinds as a panic).
#[inline]
pub fn check() {
    let p = HOOK.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: the only non-null value ever stored is a `fn()` cast in `set_hook`.
        let f: fn() = unsafe { std::mem::transmute::<*mut (), fn()>(p) };
        IN_HOOK.set(true);
        f();
        IN_HOOK.set(false);
    }
}

/// Whether the hook unwound (raised an interrupt) since [`clear_unwound`] on this thread. Code
/// that contains its own panics (`near_miss::contained`) asks this to let an interrupt through:
/// a cancel or `statement_timeout` must end the statement, whatever frames it crosses.
pub fn unwound() -> bool {
    IN_HOOK.get()
}

/// Forgets an earlier unwind of the hook on this thread.
pub fn clear_unwound() {
    IN_HOOK.set(false);
}

/// Counts iterations and calls [`check`] once every `interval` of them.
#[derive(Debug, Clone)]
pub struct Every {
    left: u32,
    interval: u32,
}

impl Every {
    pub fn new(interval: u32) -> Self {
        let interval = interval.max(1);
        Every {
            left: interval,
            interval,
        }
    }

    /// One iteration; every `interval`-th calls [`check`].
    #[inline]
    pub fn tick(&mut self) {
        self.left -= 1;
        if self.left == 0 {
            self.left = self.interval;
            check();
        }
    }

    /// `n` iterations at once (a chunk of bytes), checking when an interval boundary passes.
    #[inline]
    pub fn advance(&mut self, n: usize) {
        if n >= self.left as usize {
            self.left = self.interval;
            check();
        } else {
            self.left -= n as u32;
        }
    }
}

/// Test support: a hook that counts its calls on the calling thread and panics once a
/// thread-local budget is spent, so a test can prove a loop checks without touching other
/// threads' tests (the hook is process-wide; the budget is per thread and unlimited by default).
#[cfg(test)]
pub mod testing {
    use std::cell::Cell;

    thread_local! {
        static CALLS: Cell<u64> = const { Cell::new(0) };
        static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
    }

    /// The message of the panic [`counting_hook`] raises.
    pub const INTERRUPTED: &str = "patchdiff test interrupt";

    pub fn counting_hook() {
        let n = CALLS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        if BUDGET.with(|b| b.get()).is_some_and(|max| n > max) {
            panic!("{INTERRUPTED}");
        }
    }

    /// Installs [`counting_hook`] and arms this thread: zero calls so far, a panic after `max`.
    pub fn arm(max: Option<u64>) {
        super::set_hook(counting_hook);
        CALLS.with(|c| c.set(0));
        BUDGET.with(|b| b.set(max));
    }

    /// Calls on this thread since [`arm`].
    pub fn calls() -> u64 {
        CALLS.with(|c| c.get())
    }

    /// Runs `f` with a hook that panics after `max` checks on this thread; `true` when `f` was
    /// interrupted that way. The budget is disarmed afterwards.
    pub fn interrupted_after<R>(max: u64, f: impl FnOnce() -> R) -> bool {
        arm(Some(max));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        BUDGET.with(|b| b.set(None));
        match r {
            Ok(_) => false,
            Err(e) => {
                e.downcast_ref::<&str>() == Some(&INTERRUPTED)
                    || e.downcast_ref::<String>().is_some_and(|s| s == INTERRUPTED)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_checks_once_per_interval() {
        testing::arm(None);
        let mut e = Every::new(10);
        for _ in 0..95 {
            e.tick();
        }
        assert_eq!(testing::calls(), 9);
        e.advance(3);
        assert_eq!(testing::calls(), 9);
        e.advance(100);
        assert_eq!(testing::calls(), 10);
    }

    #[test]
    fn a_panicking_hook_unwinds_a_long_search() {
        let hay = "a".repeat(1 << 20);
        let needle = "a".repeat(1 << 10);
        assert!(testing::interrupted_after(3, || {
            crate::text::occurrence::count(&hay, &needle)
        }));
        // Disarmed, the same search completes.
        assert_eq!(
            crate::text::occurrence::count(&hay, &needle),
            (1 << 20) - (1 << 10) + 1
        );
    }
}
