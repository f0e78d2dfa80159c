//! What a failed allocation does inside a backend.
//!
//! Rust's answer to an allocation that fails is to abort the process. In a backend that is
//! SIGABRT, and the postmaster, which cannot know what a dying backend left half-done in shared
//! memory, then ends every other session of the server and restarts it. PostgreSQL's own code
//! answers the same event with `ERROR: out of memory`, which ends the statement and nothing else.
//! Allocations fail when the machine's memory is committed (`vm.overcommit_memory = 2`, which
//! PostgreSQL's documentation advises for production servers), under an address-space limit, or
//! for one request too large to serve; before this, any of them, in any call of this library
//! (a 360 MB argument copy under `ulimit -v`, for one), restarted the whole server.
//!
//! So this library's allocator answers a failure in three ways, none of which touches another
//! session:
//!
//! - **Inside [`fallibly`](patchdiff_engine::api::memory::fallibly)**, where the code that asked
//!   handles the failure itself (`try_reserve`), it answers "no memory", as the system's
//!   allocator does.
//! - **Otherwise it gives up its reserve**, [`RESERVE_BYTES`] the backend set aside, and asks
//!   again. If that serves the request the call goes on to its next interrupt check, or to its
//!   end, and there ends with `ERROR: out of memory` (SQLSTATE 53200): its transaction rolls
//!   back, nothing it wrote is kept, and the session stays. The next call sets the reserve aside
//!   again before it starts, or ends at once with the same ERROR while memory stays short.
//! - **If the request still cannot be served** (larger than the reserve, or memory taken again
//!   meanwhile), an ERROR is not possible from inside an allocation (Rust code may not unwind
//!   out of one), so it ends this session with `FATAL: out of memory`: PostgreSQL's own exit for
//!   a backend, which rolls back its transaction, releases its locks and leaves shared memory
//!   clean, so the postmaster lets every other session go on.
//!
//! The reserve is the backend's commit charge for 1 MiB it never touches (no resident memory).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use patchdiff_engine::api::memory::fallible;

/// The memory a backend sets aside to finish what it is doing when an allocation fails.
pub(crate) const RESERVE_BYTES: usize = 1 << 20;

/// The library's allocator: the system's, with the answers above to a failure.
#[cfg_attr(test, allow(dead_code))]
struct Backstop;

/// Not in the test harness `cargo pgrx test` links (it runs outside PostgreSQL, so it cannot
/// link PostgreSQL's error functions): the tests run in the library loaded into a backend.
#[cfg_attr(not(test), global_allocator)]
#[cfg_attr(test, allow(dead_code))]
static ALLOCATOR: Backstop = Backstop;

/// The reserve, or null while it is spent.
static RESERVE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());

/// Set when the reserve was given up to serve a request, until the call ends with its ERROR.
static SPENT: AtomicBool = AtomicBool::new(false);

fn reserve_layout() -> Layout {
    Layout::from_size_align(RESERVE_BYTES, 16).expect("a valid layout")
}

// SAFETY: every request goes to the system allocator with the caller's layout; a pointer is only
// ever returned by it, and is handed back to it unchanged.
unsafe impl GlobalAlloc for Backstop {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the layout GlobalAlloc::alloc was given, as it requires it.
        served(layout.size(), || unsafe { System.alloc(layout) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the layout GlobalAlloc::alloc_zeroed was given, as it requires it.
        served(layout.size(), || unsafe { System.alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from the system allocator with this layout (every path above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the block and sizes GlobalAlloc::realloc was given; a failed realloc leaves
        // the old block as it was, so asking again is sound.
        served(new_size, || unsafe {
            System.realloc(ptr, layout, new_size)
        })
    }
}

/// `ask` for `size` bytes, and the answers of this module's comment if it fails.
#[inline(always)]
fn served(size: usize, ask: impl Fn() -> *mut u8) -> *mut u8 {
    let p = if refused(size) {
        std::ptr::null_mut()
    } else {
        ask()
    };
    if p.is_null() { short(size, ask) } else { p }
}

/// A request of `size` bytes failed: the answers of this module's comment, in order.
#[cold]
#[inline(never)]
fn short(size: usize, again: impl Fn() -> *mut u8) -> *mut u8 {
    if fallible() {
        return std::ptr::null_mut();
    }
    let reserve = RESERVE.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !reserve.is_null() {
        // SAFETY: the reserve was allocated by the system allocator with this layout.
        unsafe { System.dealloc(reserve, reserve_layout()) };
        SPENT.store(true, Ordering::Relaxed);
        let p = again();
        if !p.is_null() {
            return p;
        }
    }
    end_session(size)
}

/// Ends this session as PostgreSQL ends one that cannot go on: `FATAL`, whose exit rolls back
/// the transaction and cleans up after the backend, so the server does not restart. Nothing here
/// allocates through Rust: the texts are static and PostgreSQL formats them in its own memory.
#[cfg(not(test))]
#[cold]
fn end_session(size: usize) -> ! {
    use pgrx::pg_sys;
    use std::ffi::{c_char, c_int};
    // Declared here as pgrx declares them for its own reports (they are not in its bindings).
    unsafe extern "C-unwind" {
        fn errstart(elevel: c_int, domain: *const c_char) -> bool;
        fn errcode(sqlerrcode: c_int) -> c_int;
        fn errmsg(fmt: *const c_char, ...) -> c_int;
        fn errdetail(fmt: *const c_char, ...) -> c_int;
        fn errfinish(filename: *const c_char, lineno: c_int, funcname: *const c_char);
    }
    // SAFETY: an error report as elog.h's ereport() makes it, on the backend's one thread; for
    // FATAL, errfinish() exits the process through proc_exit() and never returns.
    unsafe {
        if errstart(pg_sys::FATAL as c_int, std::ptr::null()) {
            errcode(pgrx::PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY as c_int);
            errmsg(c"out of memory".as_ptr());
            errdetail(
                c"Failed on request of size %zu in pg_patchdiff. This session ends and its transaction is rolled back; the server and its other sessions go on."
                    .as_ptr(),
                size,
            );
            errfinish(
                c"memory.rs".as_ptr(),
                line!() as c_int,
                c"end_session".as_ptr(),
            );
        }
        pg_sys::proc_exit(1)
    }
}

/// The test harness has no PostgreSQL to end a session of (and does not use this allocator).
#[cfg(test)]
fn end_session(_size: usize) -> ! {
    std::process::abort()
}

/// Sets the reserve aside unless it is: whether it is now.
pub(crate) fn set_aside() -> bool {
    if !RESERVE.load(Ordering::Relaxed).is_null() {
        return true;
    }
    // SAFETY: a plain allocation of a valid, non-zero layout, freed only in `short`.
    let p = unsafe { System.alloc(reserve_layout()) };
    RESERVE.store(p, Ordering::Relaxed);
    !p.is_null()
}

/// Before each call: a call that cannot have its reserve ends here, with `ERROR: out of
/// memory`, before it reads or writes anything.
pub(crate) fn begin_call() {
    // A reserve spent after an earlier call's last check ended nothing: that call had its
    // answer. This call starts afresh.
    SPENT.store(false, Ordering::Relaxed);
    if !set_aside() {
        out_of_memory("pg_patchdiff could not set aside its memory reserve before this call.");
    }
}

/// Ends the call with `ERROR: out of memory` if the reserve was spent during it. Called by
/// every interrupt check of the engine's loops and at the end of every call.
pub(crate) fn settle() {
    if SPENT.swap(false, Ordering::Relaxed) {
        out_of_memory(
            "pg_patchdiff ran out of memory during this call and finished what it was doing on its reserve; the call ends here, and nothing it did is kept.",
        );
    }
}

fn out_of_memory(detail: &str) -> ! {
    pgrx::ereport!(
        ERROR,
        pgrx::PgSqlErrorCode::ERRCODE_OUT_OF_MEMORY,
        "out of memory",
        detail
    );
}

/// Allocation failures a test asks for: the next `FAILURES` requests of at least `FROM` bytes
/// answer "no memory" as if the system had none (`fail_allocations`).
#[cfg(any(test, feature = "pg_test"))]
mod injection {
    use std::sync::atomic::{AtomicU32, AtomicUsize};

    pub(super) static FROM: AtomicUsize = AtomicUsize::new(usize::MAX);
    pub(super) static FAILURES: AtomicU32 = AtomicU32::new(0);
}

/// Arms `failures` injected failures of requests of at least `from` bytes (tests only).
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn fail_allocations(from: usize, failures: u32) {
    injection::FROM.store(from, Ordering::Relaxed);
    injection::FAILURES.store(failures, Ordering::Relaxed);
}

/// Whether the reserve is set aside now (tests only).
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn reserve_held() -> bool {
    !RESERVE.load(Ordering::Relaxed).is_null()
}

/// Whether a test asked for this request to fail.
#[inline(always)]
fn refused(size: usize) -> bool {
    #[cfg(any(test, feature = "pg_test"))]
    {
        use injection::{FAILURES, FROM};
        size >= FROM.load(Ordering::Relaxed)
            && FAILURES
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
    }
    #[cfg(not(any(test, feature = "pg_test")))]
    {
        let _ = size;
        false
    }
}
