//! The parser helper's side of the wire (`patchdiff-waymark-helper`).
//!
//! Tree-sitter and its grammars are third-party C code, and some of them abort the process on
//! inputs a few hundred bytes long (tree-sitter-yaml's scanner overruns tree-sitter's 1,024-byte
//! serialization buffer at 254 nested sequences, and the assertion aborts). Inside a PostgreSQL
//! backend an abort makes the postmaster restart every session. So the extension never links
//! this crate: it starts this helper with exec, sends it one request at a time over a pipe, and
//! treats the helper's death as an answer (`parser_crashed`, `parser_limit`).
//!
//! The helper limits itself before it reads any input: its address space (`RLIMIT_AS`), no core
//! files, the kernel's OOM killer's first choice (`oom_score_adj` 1000), and, per request, its CPU time (`RLIMIT_CPU`, whose soft limit ends it with SIGXCPU);
//! it dies with its parent (`PR_SET_PDEATHSIG`). An allocation that fails under the address
//! space limit ends it with [`EXIT_MEMORY`], from Rust and from tree-sitter alike, so the
//! backend can tell a memory limit from a crash.

use patchdiff_engine::api::scope::wire;
use std::io::{self, Read, Write};

pub use patchdiff_engine::api::scope::wire::{EXIT_MEMORY, EXIT_USAGE};

/// The helper's limits, from its command line.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `RLIMIT_AS` in bytes (0: none).
    pub memory_bytes: u64,
    /// CPU seconds per request (0: none).
    pub cpu_seconds: u64,
    /// The process that started it: the helper exits if it is not (or no longer) its parent.
    pub parent_pid: Option<i32>,
    /// At most this many bytes of kept trees and texts for incremental outlines (`None`: an
    /// eighth of `memory_bytes`); never more than an eighth of `memory_bytes` either way.
    pub kept_bytes: Option<u64>,
}

impl Limits {
    /// `--memory-bytes N --cpu-seconds N --parent-pid N --kept-bytes N`, each optional.
    pub fn from_args(args: impl Iterator<Item = String>) -> Result<Limits, String> {
        let mut l = Limits {
            memory_bytes: 0,
            cpu_seconds: 0,
            parent_pid: None,
            kept_bytes: None,
        };
        let mut args = args;
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| format!("{flag}: {v:?} is not a number"))
            };
            match flag.as_str() {
                "--memory-bytes" => l.memory_bytes = number(&value)?,
                "--cpu-seconds" => l.cpu_seconds = number(&value)?,
                "--kept-bytes" => l.kept_bytes = Some(number(&value)?),
                "--parent-pid" => {
                    l.parent_pid = Some(i32::try_from(number(&value)?).map_err(|_| "bad pid")?)
                }
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        Ok(l)
    }
}

/// The hard limit of `resource` this process inherited (`u64::MAX`: none). Only a privileged
/// process may raise a hard limit: asking for more than this fails.
fn hard_limit(resource: libc::__rlimit_resource_t) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the struct we pass.
    if unsafe { libc::getrlimit(resource, &mut r) } != 0 || r.rlim_max == libc::RLIM_INFINITY {
        return u64::MAX;
    }
    r.rlim_max
}

fn set_limit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let r = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(resource, &r) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// CPU seconds this process has used so far (user + system), rounded up.
fn cpu_used() -> u64 {
    // SAFETY: rusage is plain old data, for which all-zero bytes are a valid value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only into the struct we pass, which lives across the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    // Seconds and microseconds of both added before rounding up: each request then has between
    // its CPU limit and a second more (helper-57: `floor(user) + floor(system) + 1` left a warm
    // helper between 9 and 11 s of a 10 s limit).
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (micros(u.ru_utime) + micros(u.ru_stime)).div_ceil(1_000_000)
}

/// Applies the limits that hold for the helper's whole life.
/// The memory limit may come out lower than asked for: the one it inherited, which `l` then
/// says.
pub fn confine(l: &mut Limits) -> Result<(), String> {
    // SAFETY: plain system calls with constant arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    if let Some(pid) = l.parent_pid {
        // The parent may have died between fork and prctl: then nobody waits for the answer.
        // SAFETY: getppid has no preconditions and cannot fail.
        if unsafe { libc::getppid() } != pid {
            return Err("the backend that started the helper is gone".into());
        }
    }
    // A backend's open files (its client's socket, relation files) are not the helper's
    // business: only the two pipes and stderr (the server's log) stay open.
    // SAFETY: close_range(2) on descriptors this process does not use.
    if unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) } != 0 {
        for fd in 3..1024 {
            // SAFETY: as above; no Rust object owns these descriptors yet.
            unsafe { libc::close(fd) };
        }
    }
    set_limit(libc::RLIMIT_CORE, 0, 0).map_err(|e| format!("RLIMIT_CORE: {e}"))?;
    // First in line for the kernel's OOM killer. Each helper may use its whole address-space
    // limit, and every backend may have one parsing at once (helper-55: 8 parses of one 2 MB
    // Markdown file took 7.5 GB of the host for 10 s); should the host run out, a helper must be
    // what the kernel kills, not a backend (which makes the postmaster restart every session).
    // Raising one's own score needs no privilege; a system that refuses it leaves the default.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    if l.memory_bytes > 0 {
        // At most what the helper inherited from its backend (a server started under `ulimit
        // -v`, systemd's LimitAS=): asking for more failed, and every outline of every text was
        // answered as a crash the text caused (helper-84).
        l.memory_bytes = l.memory_bytes.min(hard_limit(libc::RLIMIT_AS));
        set_limit(libc::RLIMIT_AS, l.memory_bytes, l.memory_bytes)
            .map_err(|e| format!("RLIMIT_AS: {e}"))?;
    }
    install_tree_sitter_allocator();
    Ok(())
}

/// Trees a helper keeps for incremental parsing (issue 21): one per target recently observed.
pub const KEPT_TREES: usize = 4;

/// The memory a helper's kept trees and texts may hold, in bytes: `--kept-bytes`
/// (`patchdiff.parser_kept_memory`; 0 keeps nothing), and never more than an eighth of its
/// address-space limit (128 MiB under the default 1 GiB; a 1 MiB Python module's tree takes about
/// 45 MB), so that a parse keeps seven eighths of the limit it had without them.
pub fn kept_bytes(l: &Limits) -> usize {
    let limit = if l.memory_bytes > 0 {
        l.memory_bytes
    } else {
        1 << 30
    };
    let eighth = limit / 8;
    usize::try_from(l.kept_bytes.map_or(eighth, |k| k.min(eighth))).unwrap_or(usize::MAX)
}

/// Bytes tree-sitter holds now (its allocations through this helper's allocator functions),
/// measured with `malloc_usable_size`: between requests, the kept trees.
static TREE_SITTER_BYTES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes tree-sitter holds now, when this process installed the allocator (`confine`).
pub fn tree_sitter_bytes() -> usize {
    TREE_SITTER_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

fn count_in(p: *mut libc::c_void) {
    if !p.is_null() {
        // SAFETY: p is a live block from the C allocator.
        let n = unsafe { libc::malloc_usable_size(p) };
        TREE_SITTER_BYTES.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
}

fn count_out(p: *mut libc::c_void) {
    if !p.is_null() {
        // SAFETY: p is a live block from the C allocator, about to be freed or moved.
        let n = unsafe { libc::malloc_usable_size(p) };
        TREE_SITTER_BYTES.fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Serves requests from `input` until it closes. Each answer is written whole and flushed
/// before the next request is read.
///
/// A request with a lineage (the backend's target id) is parsed incrementally from the tree kept
/// of that lineage's last text ([`crate::incremental`]); the helper keeps at most
/// [`KEPT_TREES`] trees, holding at most [`kept_bytes`] (their texts and what tree-sitter
/// holds, [`tree_sitter_bytes`]).
pub fn serve(l: &Limits, input: &mut impl Read, output: &mut impl Write) -> io::Result<()> {
    let mut trees =
        crate::incremental::Trees::new(KEPT_TREES, kept_bytes(l)).measured_by(tree_sitter_bytes);
    loop {
        let mut head = [0u8; 9];
        match input.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let (language, len, has_lineage) = wire::request_header(&head)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if len > wire::MAX_TEXT_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too large",
            ));
        }
        let lineage = if has_lineage {
            let mut n = [0u8; 1];
            input.read_exact(&mut n)?;
            let mut lineage = vec![0u8; usize::from(n[0])];
            input.read_exact(&mut lineage)?;
            Some(lineage)
        } else {
            None
        };
        let mut text = vec![0u8; len as usize];
        input.read_exact(&mut text)?;
        let text = String::from_utf8(text)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "text is not UTF-8"))?;
        if l.cpu_seconds > 0 {
            // The soft limit is per request: what was used so far plus this request's share,
            // and at least a second under the hard limit the helper inherited, which it may not
            // raise (helper-84: with any hard CPU limit on the server, asking for none failed
            // every request). At the hard limit the kernel sends SIGKILL, not SIGXCPU, which
            // reads as a helper stopped from outside, never kept, each call spending the whole
            // limit again (helper-85). The backend starts a fresh helper for a request that the
            // hard limit would cut short.
            let hard = hard_limit(libc::RLIMIT_CPU);
            set_limit(
                libc::RLIMIT_CPU,
                cpu_used()
                    .saturating_add(l.cpu_seconds)
                    .min(hard.saturating_sub(1)),
                if hard == u64::MAX {
                    libc::RLIM_INFINITY
                } else {
                    hard
                },
            )?;
        }
        let outline = match lineage {
            Some(lineage) => trees.outline(&lineage, language, text),
            None => crate::outline(language, &text),
        };
        let answer = match outline {
            Ok(o) => wire::outline_response(&o),
            Err(limit) => wire::limit_response(limit),
        };
        output.write_all(&answer)?;
        output.flush()?;
        // What the request's tree and text took goes back to the system now, while the backend
        // reads the answer: glibc keeps freed memory in its arenas, and a helper that once parsed
        // a hostile 8 MB text stayed at ~950 MB resident for the rest of its backend's life
        // (a helper per backend). What the kept trees hold stays allocated.
        // SAFETY: malloc_trim only walks and releases glibc's own free lists.
        unsafe { libc::malloc_trim(0) };
    }
}

// tree-sitter allocates with malloc and aborts when it fails; under RLIMIT_AS a failure is the
// memory limit, not a crash, so these end the helper with EXIT_MEMORY instead.
//
// SAFETY (the four functions): each forwards its arguments unchanged to the C allocator
// function of the same contract, as tree-sitter expects of a replacement allocator; `_exit` ends
// the process without running anything that could touch the failed allocation.
unsafe extern "C" fn ts_malloc(size: usize) -> *mut libc::c_void {
    // SAFETY: see above.
    let p = unsafe { libc::malloc(size) };
    if p.is_null() && size > 0 {
        // SAFETY: see above.
        unsafe { libc::_exit(EXIT_MEMORY) };
    }
    count_in(p);
    p
}

unsafe extern "C" fn ts_calloc(n: usize, size: usize) -> *mut libc::c_void {
    // SAFETY: see above.
    let p = unsafe { libc::calloc(n, size) };
    if p.is_null() && n > 0 && size > 0 {
        // SAFETY: see above.
        unsafe { libc::_exit(EXIT_MEMORY) };
    }
    count_in(p);
    p
}

unsafe extern "C" fn ts_realloc(ptr: *mut libc::c_void, size: usize) -> *mut libc::c_void {
    count_out(ptr);
    // SAFETY: see above.
    let p = unsafe { libc::realloc(ptr, size) };
    if p.is_null() && size > 0 {
        // SAFETY: see above.
        unsafe { libc::_exit(EXIT_MEMORY) };
    }
    count_in(p);
    p
}

unsafe extern "C" fn ts_free(ptr: *mut libc::c_void) {
    count_out(ptr);
    // SAFETY: see above.
    unsafe { libc::free(ptr) }
}

fn install_tree_sitter_allocator() {
    // SAFETY: called once, before any tree-sitter object exists.
    unsafe {
        tree_sitter::set_allocator(Some(tree_sitter::Allocator {
            malloc: ts_malloc,
            calloc: ts_calloc,
            realloc: ts_realloc,
            free: ts_free,
        }));
    }
}

/// A global allocator for the helper binary: the system allocator, but an allocation that fails
/// (the address-space limit) ends the process with [`EXIT_MEMORY`] rather than Rust's abort,
/// which would look like a crash.
pub struct LimitedAlloc;

// SAFETY: every method forwards to `std::alloc::System` with the caller's arguments unchanged,
// so the GlobalAlloc contract holds as it does for System; on a null result it ends the process
// with `_exit`, which never returns and runs no Rust code that could allocate.
unsafe impl std::alloc::GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: see the impl.
        let p = unsafe { std::alloc::System.alloc(layout) };
        if p.is_null() {
            // SAFETY: see the impl.
            unsafe { libc::_exit(EXIT_MEMORY) };
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: see the impl.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: see the impl.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        if p.is_null() {
            // SAFETY: see the impl.
            unsafe { libc::_exit(EXIT_MEMORY) };
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: see the impl.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, size) };
        if p.is_null() {
            // SAFETY: see the impl.
            unsafe { libc::_exit(EXIT_MEMORY) };
        }
        p
    }
}
