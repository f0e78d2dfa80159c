//! The Waymark parser helper, from the backend's side.
//!
//! Tree-sitter and its grammars are third-party C code that aborts on some inputs a few hundred
//! bytes long; an abort inside a backend makes the postmaster end every session and run crash
//! recovery. So no parser runs here: each backend starts `patchdiff-waymark-helper` (installed
//! beside this library, `$libdir/patchdiff-waymark-helper`) with exec on first use, keeps it warm
//! for later calls, and speaks to it over pipes (`patchdiff_engine::api::scope::wire`).
//!
//! Every wait is bounded and cancellable: the backend polls the pipes in short steps, and on a
//! query cancel, statement timeout or terminate it kills the helper before PostgreSQL raises the
//! ERROR. The helper confines itself (address space, CPU per request, no core files, death with
//! its parent); the backend adds the wall-clock limit, `patchdiff.parser_timeout` (a
//! `statement_timeout` that comes first is raised as the ERROR it is). A helper that dies or
//! passes a limit is an answer, not a fault: [`Unavailable`].

use patchdiff_engine::api::scope::{Language, Outline, ParserLimit, wire};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::pg_sys;
use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The largest answer read from a helper: an outline at both of its caps (100,000 symbols, 32
/// MiB of names and paths) is well below; a longer length is a broken helper.
const MAX_RESPONSE_BYTES: u64 = 128 << 20;

/// How often a waiting backend looks at its interrupts and the deadline.
const POLL_STEP: Duration = Duration::from_millis(10);

static HELPER_PATH: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
static MEMORY_LIMIT_KB: GucSetting<i32> = GucSetting::<i32>::new(1024 * 1024);
static CPU_LIMIT_S: GucSetting<i32> = GucSetting::<i32>::new(10);
static TIMEOUT_MS: GucSetting<i32> = GucSetting::<i32>::new(10_000);
static KEPT_MEMORY_KB: GucSetting<i32> = GucSetting::<i32>::new(128 * 1024);
static MAX_CONCURRENT: GucSetting<i32> = GucSetting::<i32>::new(8);

/// Registers the helper's settings. All are superuser-only: the path names a program the
/// server runs, and a client role must not be able to raise its own limits.
pub(crate) fn define_gucs() {
    GucRegistry::define_string_guc(
        c"patchdiff.parser_helper",
        c"The Waymark parser helper program (default: $libdir/patchdiff-waymark-helper).",
        c"Structural observation runs tree-sitter in this helper process, never inside the backend.",
        &HELPER_PATH,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"patchdiff.parser_memory_limit",
        c"Address-space limit of the parser helper.",
        c"A parse that needs more answers structure_unavailable / parser_limit (memory).",
        &MEMORY_LIMIT_KB,
        64 * 1024,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.parser_cpu_limit",
        c"CPU seconds the parser helper may spend on one outline.",
        c"A parse that needs more answers structure_unavailable / parser_limit (cpu).",
        &CPU_LIMIT_S,
        1,
        3600,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.parser_kept_memory",
        c"Memory a parser helper may keep between calls for incremental outlines (0: none).",
        c"The syntax trees and texts of recently observed targets, so that the next version is reparsed incrementally; never more than an eighth of patchdiff.parser_memory_limit.",
        &KEPT_MEMORY_KB,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_KB,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.parser_max_concurrent",
        c"Outlines the parser helpers of the whole server may make at once; one login at most half of them, a role it acts as half of that.",
        c"Each parse may use patchdiff.parser_memory_limit, so this times that bounds the memory of every parse running at once. A call that finds none free waits up to patchdiff.parser_timeout, then answers structure_unavailable / parser_busy.",
        &MAX_CONCURRENT,
        1,
        1024,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"patchdiff.parser_timeout",
        c"Wall-clock time the backend waits for one outline from the parser helper.",
        c"Past this limit the helper is killed and the call answers structure_unavailable / parser_limit (time). A statement_timeout, query cancel or terminate that comes first kills the helper and raises its ERROR, as for any statement.",
        &TIMEOUT_MS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
}

/// Why there is no outline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unavailable {
    /// The helper died (a signal such as SIGABRT from a grammar's assertion, a bad answer).
    Crashed(String),
    /// The helper was stopped from outside: SIGKILL or SIGTERM (the kernel's OOM killer, an
    /// operator), or its pipe failed. Not a property of the text.
    Stopped(String),
    /// A limit was reached: an outline cap, memory, CPU or time.
    Limit(ParserLimit),
    /// The helper could not be started.
    NotStarted(String),
    /// Every parse slot of the server (or the login's or role's share of them) stayed taken for
    /// `patchdiff.parser_timeout`; nothing was parsed.
    Busy,
    /// A limit that may not be the text's alone, answered as that limit but not kept with the
    /// version: `time` reached while the helper had less than nine tenths of a CPU for the wait
    /// (a busy host, or other tenants' parses: helper-56, helper-57), or `memory` in a helper that
    /// had served earlier requests (its kept trees of other targets, up to an eighth of its
    /// limit, count against it: helper-57).
    NotKept(ParserLimit),
}

/// The limits an outline was made under (memory, CPU, wall clock): an answer at a limit holds
/// only while they stay as they were.
pub(crate) type LimitsKey = (u64, u64, u64);

/// The current [`LimitsKey`].
pub(crate) fn limits_key() -> LimitsKey {
    let s = Settings::current();
    (
        s.memory_bytes,
        s.cpu_seconds,
        u64::try_from(TIMEOUT_MS.get()).unwrap_or(0),
    )
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Settings {
    program: String,
    memory_bytes: u64,
    cpu_seconds: u64,
    kept_bytes: u64,
}

impl Settings {
    fn current() -> Settings {
        let program = HELPER_PATH
            .get()
            .and_then(|c| c.into_string().ok())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| {
                // SAFETY: pkglib_path is a NUL-terminated buffer PostgreSQL fills at start-up.
                let dir = unsafe { CStr::from_ptr(std::ptr::addr_of!(pg_sys::pkglib_path).cast()) };
                format!("{}/patchdiff-waymark-helper", dir.to_string_lossy())
            });
        Settings {
            program,
            memory_bytes: u64::try_from(MEMORY_LIMIT_KB.get()).unwrap_or(0) * 1024,
            cpu_seconds: u64::try_from(CPU_LIMIT_S.get()).unwrap_or(1),
            kept_bytes: u64::try_from(KEPT_MEMORY_KB.get()).unwrap_or(0) * 1024,
        }
    }
}

/// A running helper. Dropping it kills it and reaps it, so a backend that leaves by an ERROR
/// (cancel, timeout) leaves no helper busy behind it.
struct Helper {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    settings: Settings,
}

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

thread_local! {
    /// The warm helper of this backend.
    static WARM: RefCell<Option<Helper>> = const { RefCell::new(None) };
    /// Outline requests this backend has sent to a helper (tests count the parses a call caused).
    static SENT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many outline requests this backend has sent to a helper.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn parses_sent() -> u64 {
    SENT.with(std::cell::Cell::get)
}

fn start(settings: &Settings) -> Result<Helper, Unavailable> {
    let mut child = Command::new(&settings.program)
        .arg("--memory-bytes")
        .arg(settings.memory_bytes.to_string())
        .arg("--cpu-seconds")
        .arg(settings.cpu_seconds.to_string())
        .arg("--kept-bytes")
        .arg(settings.kept_bytes.to_string())
        .arg("--parent-pid")
        .arg(std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        // A process group of its own. PostgreSQL signals a backend's whole group to cancel
        // (SIGINT) or end (SIGTERM, SIGQUIT) it; in the backend's group the helper got each of
        // those too, died of it before the backend served the cancel, and its death was taken for
        // a crash the text caused, kept with the version: every later observation of it on that
        // connection answered `parser_crashed` without parsing (helper-83). A cancel of an idle
        // backend killed its warm helper and the trees it kept. The backend kills its helper
        // itself on every interrupt (`exchange`), and the helper dies with it (PR_SET_PDEATHSIG).
        .process_group(0)
        .spawn()
        .map_err(|e| Unavailable::NotStarted(format!("{}: {e}", settings.program)))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(Unavailable::NotStarted("no pipes".into()));
    };
    for fd in [stdin.as_raw_fd(), stdout.as_raw_fd()] {
        // SAFETY: fcntl on descriptors this struct owns.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    Ok(Helper {
        child,
        stdin,
        stdout,
        settings: settings.clone(),
    })
}

fn cancel_pending() -> bool {
    // SAFETY: volatile reads of sig_atomic_t flags that signal handlers set.
    unsafe {
        std::ptr::read_volatile(&raw const pg_sys::QueryCancelPending) != 0
            || std::ptr::read_volatile(&raw const pg_sys::ProcDiePending) != 0
    }
}

fn interrupt_pending() -> bool {
    // SAFETY: as above.
    unsafe { std::ptr::read_volatile(&raw const pg_sys::InterruptPending) != 0 }
}

enum Exchange {
    Answer(Vec<u8>),
    /// The helper closed its end: it died.
    Died,
    /// The deadline passed.
    Late,
}

/// Writes `request` and reads one framed answer, in short polls. On a pending cancel the
/// helper is dropped (killed) before the interrupt is served.
fn exchange(h: &mut Option<Helper>, request: &[u8], deadline: Instant) -> io::Result<Exchange> {
    let mut sent = 0usize;
    let mut head = [0u8; 8];
    let mut got_head = 0usize;
    let mut body: Vec<u8> = Vec::new();
    let mut want: Option<usize> = None;
    loop {
        if interrupt_pending() {
            if cancel_pending() {
                // Killed now, not after the statement's ERROR has unwound.
                *h = None;
            }
            // A cancel, timeout or terminate raises its ERROR here; the helper is
            // already given up (killed when dropped during the unwind).
            crate::check_for_interrupts();
            if h.is_none() {
                return Ok(Exchange::Died);
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Exchange::Late);
        }
        let helper = h.as_mut().expect("present");
        let mut fds = [
            libc::pollfd {
                fd: helper.stdout.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: helper.stdin.as_raw_fd(),
                events: if sent < request.len() {
                    libc::POLLOUT
                } else {
                    0
                },
                revents: 0,
            },
        ];
        let step = POLL_STEP.min(deadline - now);
        // SAFETY: poll over two descriptors this function borrows.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, step.as_millis().max(1) as libc::c_int) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if sent < request.len() && fds[1].revents != 0 {
            match helper.stdin.write(&request[sent..]) {
                Ok(k) => sent += k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(Exchange::Died),
                Err(e) => return Err(e),
            }
        }
        if fds[0].revents != 0 {
            loop {
                let r = match want {
                    None => helper.stdout.read(&mut head[got_head..]),
                    Some(total) => {
                        let at = body.len();
                        let chunk = (total - at).min(1 << 20);
                        body.resize(at + chunk, 0);
                        let r = helper.stdout.read(&mut body[at..]);
                        body.truncate(at + r.as_ref().map_or(0, |k| *k));
                        r
                    }
                };
                match r {
                    Ok(0) => return Ok(Exchange::Died),
                    Ok(k) => {
                        if want.is_none() {
                            got_head += k;
                            if got_head == head.len() {
                                let len = u64::from_le_bytes(head);
                                if len > MAX_RESPONSE_BYTES {
                                    return Ok(Exchange::Died);
                                }
                                want = Some(len as usize);
                                body.reserve_exact(len as usize);
                            }
                        }
                        if want == Some(body.len()) {
                            return Ok(Exchange::Answer(body));
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

/// The lock tags of the parse slots: PostgreSQL advisory locks, but with no database (field 1
/// is 0, which SQL's advisory locks never use), so they count across the whole server.
const SLOTS_OF_SERVER: u32 = 0x7064_5701;
const SLOTS_OF_LOGIN: u32 = 0x7064_5702;
const SLOTS_OF_TENANT: u32 = 0x7064_5703;

fn slot_tag(kind: u32, role: pg_sys::Oid, index: u16) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: 0,
        locktag_field2: kind,
        locktag_field3: role.to_u32(),
        locktag_field4: index,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// A parse slot held: the login's lock (and the acting role's) and the server's, transaction
/// locks released when this is dropped (or, on an ERROR, with the transaction).
struct Slot(Vec<pg_sys::LOCKTAG>);

impl Drop for Slot {
    fn drop(&mut self) {
        for tag in &self.0 {
            // SAFETY: releases a lock this backend took with the same tag and mode in this
            // transaction (Slot lives within one call).
            unsafe { pg_sys::LockRelease(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false) };
        }
    }
}

/// The first of `count` slots of `kind` free now, taken.
fn take_free(kind: u32, role: pg_sys::Oid, count: u16) -> Option<pg_sys::LOCKTAG> {
    (0..count).map(|i| slot_tag(kind, role, i)).find(|tag| {
        // SAFETY: a transaction-level lock in the lock manager, without waiting; an ERROR (the
        // lock table full) is raised as usual.
        let r = unsafe {
            pg_sys::LockAcquire(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true)
        };
        r != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL
    })
}

/// A parse slot for `role`, waited for in short steps until `deadline`, serving interrupts: one
/// of the server's `patchdiff.parser_max_concurrent`, one of the login's (the session user's)
/// half of them, rounded up, and, when the call acts as another role than the login (`SET
/// ROLE`, a SECURITY DEFINER function), one of that role's half of the login's share. Without
/// slots every backend could have a helper parsing at its memory limit at once (helper-55: eight
/// parses of a 2 MB Markdown file took 7.5 GB of the host). The login's half keeps a login that
/// acts as several roles to half of the server (helper-56: a login acting as a group role too
/// took all eight); the acting role's half of that keeps one tenant of a login that acts for
/// many, as the HTTP front end's does, from taking all of the login's (helper-57: one tenant
/// took the login's four, and the others waited 10 s for nothing).
///
/// The slots are taken narrowest first (the acting role's, the login's, the server's), and a
/// call waits for the next while holding the ones it has: so a call waiting for its role's slot
/// holds nothing, and one role holds at most its own share of the login's. Taken login first, a
/// tenant's surplus calls each held one of the login's slots while they waited for the tenant's,
/// and four of them left the login's other tenants none (helper-116: another tenant's observation
/// 1 ms alone, 9 s or `parser_busy` meanwhile).
fn take_slot(role: pg_sys::Oid, deadline: Instant) -> Option<Slot> {
    let all = u16::try_from(MAX_CONCURRENT.get().max(1)).unwrap_or(u16::MAX);
    let login_share = all.div_ceil(2);
    // SAFETY: reads the backend's session user, set at connection start.
    let login = unsafe { pg_sys::GetSessionUserId() };
    let mut wanted: Vec<(u32, pg_sys::Oid, u16)> = Vec::with_capacity(3);
    if login != role {
        // Counted apart from the role's own logins: a SECURITY DEFINER function of one role,
        // called by others, does not take that role's share as a login (helper-57).
        wanted.push((SLOTS_OF_TENANT, role, login_share.div_ceil(2)));
    }
    wanted.push((SLOTS_OF_LOGIN, login, login_share));
    wanted.push((SLOTS_OF_SERVER, pg_sys::InvalidOid, all));
    let mut slot = Slot(Vec::with_capacity(wanted.len()));
    loop {
        while let Some(&(kind, owner, count)) = wanted.get(slot.0.len()) {
            match take_free(kind, owner, count) {
                Some(tag) => slot.0.push(tag),
                None => break,
            }
        }
        if slot.0.len() == wanted.len() {
            return Some(slot);
        }
        if Instant::now() >= deadline {
            return None;
        }
        crate::check_for_interrupts();
        std::thread::sleep(POLL_STEP);
    }
}

/// The CPU time (user and system, in clock ticks) process `pid` has used, from /proc; 0 when it
/// cannot be read.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // After the command name, which may hold spaces, in parentheses: state is field 3, utime
    // and stime fields 14 and 15.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    field(14).unwrap_or(0) + field(15).unwrap_or(0)
}

/// Whether warm helper `h` can still give a request its whole CPU limit under the hard
/// `RLIMIT_CPU` it inherited from this backend (a server started under `ulimit -t` or systemd's
/// `LimitCPU=`): past that hard limit the kernel kills it, which is no answer about the text
/// (helper-85). A helper that has used too much of it is replaced by a fresh one.
fn room_for_a_request(h: &Helper, settings: &Settings) -> bool {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_CPU, &mut r) } != 0
        || r.rlim_max == libc::RLIM_INFINITY
    {
        return true;
    }
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .unwrap_or(100)
        .max(1);
    let used = cpu_ticks(h.child.id()).div_ceil(per_second);
    used + settings.cpu_seconds < r.rlim_max
}

/// How long a helper that closed its output may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Why a helper that closed its pipe ended. It is reaped without blocking: one that closed its
/// output but lingers is killed after [`EXIT_GRACE`], and interrupts are served meanwhile.
fn death(mut h: Helper) -> Unavailable {
    let since = Instant::now();
    let status = loop {
        match h.child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if since.elapsed() < EXIT_GRACE => {
                crate::check_for_interrupts();
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) => {
                let _ = h.child.kill();
                break h.child.wait();
            }
            Err(e) => break Err(e),
        }
    };
    match status {
        Ok(s) if s.signal() == Some(libc::SIGXCPU) => Unavailable::Limit(ParserLimit::Cpu),
        Ok(s) if s.code() == Some(wire::EXIT_MEMORY) => Unavailable::Limit(ParserLimit::Memory),
        // It could not set itself up (its reason is in the server's log): not the text's doing,
        // so nothing is kept with the version.
        Ok(s) if s.code() == Some(wire::EXIT_USAGE) => Unavailable::NotStarted(
            "the helper could not set itself up; the server's log says why".into(),
        ),
        // The signals a helper only gets from outside: the kernel's OOM killer, an operator,
        // or PostgreSQL's signals to a process group (a cancel, a terminate, an immediate
        // shutdown), should one still reach it. None of them says anything about the text.
        Ok(s)
            if matches!(
                s.signal(),
                Some(libc::SIGKILL | libc::SIGTERM | libc::SIGINT | libc::SIGQUIT)
            ) =>
        {
            Unavailable::Stopped(format!(
                "the parser helper was stopped by signal {} from outside (the OOM killer, an operator)",
                s.signal().unwrap_or(0)
            ))
        }
        Ok(s) => Unavailable::Crashed(match s.signal() {
            // Worded unlike the postmaster's "server process ... was terminated by signal",
            // which the crash suite looks for in the server's log.
            Some(sig) => format!("the parser helper died of signal {sig}"),
            None => format!(
                "the parser helper exited with status {}",
                s.code().unwrap_or(-1)
            ),
        }),
        Err(e) => Unavailable::Stopped(format!("the parser helper could not be reaped: {e}")),
    }
}

/// The outline of `text`, parsed by this backend's helper. With a `lineage` (the target's id),
/// the helper may reparse it incrementally from the tree it kept of that target's last parsed
/// text (issue 21; `patchdiff_waymark::incremental`): the answer is the same, sooner.
pub(crate) fn outline(
    language: Language,
    lineage: Option<&str>,
    text: &str,
    role: pg_sys::Oid,
) -> Result<Outline, Unavailable> {
    if text.len() as u64 > wire::MAX_TEXT_BYTES {
        return Err(Unavailable::Limit(ParserLimit::Input));
    }
    let settings = Settings::current();
    let timeout = Duration::from_millis(u64::try_from(TIMEOUT_MS.get()).unwrap_or(1));
    // Held until the answer is read (or the call unwinds): a slot waited for no longer than the
    // parse itself may take.
    let Some(_slot) = take_slot(role, Instant::now() + timeout) else {
        return Err(Unavailable::Busy);
    };
    // Only this limit answers `time`. A statement_timeout that comes first is the statement's
    // to raise, as for any statement (the poll below sees it and kills the helper first): a
    // deadline set to the same instant raced it, and the answer was either.
    let deadline = Instant::now() + timeout;
    // Taken out of the backend's slot for the call: an ERROR that unwinds from here drops it.
    let mut helper = WARM
        .with(|w| w.borrow_mut().take())
        .filter(|h| h.settings == settings);
    if let Some(h) = helper.as_mut()
        && (!matches!(h.child.try_wait(), Ok(None)) || !room_for_a_request(h, &settings))
    {
        helper = None;
    }
    let fresh = helper.is_none();
    if fresh {
        helper = Some(start(&settings)?);
    }
    // A memory limit in a helper that held kept trees is not known to be the text's alone.
    let memory = |why: Unavailable| match why {
        Unavailable::Limit(ParserLimit::Memory) if !fresh => {
            Unavailable::NotKept(ParserLimit::Memory)
        }
        other => other,
    };
    let request = match lineage {
        Some(l) => wire::request_in_lineage(language, l.as_bytes(), text),
        None => wire::request(language, text),
    };
    let cpu_before = helper.as_ref().map_or(0, |h| cpu_ticks(h.child.id()));
    SENT.with(|n| n.set(n.get() + 1));
    let sent_at = Instant::now();
    let exchanged = exchange(&mut helper, &request, deadline);
    drop(request);
    let answer = match exchanged {
        Ok(Exchange::Answer(body)) => body,
        Ok(Exchange::Late) => {
            let cpu = helper
                .as_ref()
                .map_or(0, |h| cpu_ticks(h.child.id()))
                .saturating_sub(cpu_before);
            drop(helper);
            // SAFETY: sysconf has no preconditions.
            let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
                .unwrap_or(100)
                .max(1);
            let waited = sent_at.elapsed().as_millis() as u64;
            return Err(if cpu * 1000 / per_second * 10 >= waited * 9 {
                Unavailable::Limit(ParserLimit::Time)
            } else {
                Unavailable::NotKept(ParserLimit::Time)
            });
        }
        Ok(Exchange::Died) => {
            // A cancel or terminate that came with the death is served first: it is why the
            // call ends, not the helper's end.
            crate::check_for_interrupts();
            return Err(memory(helper.map_or_else(
                || Unavailable::Stopped("the parser helper was stopped".into()),
                death,
            )));
        }
        Err(e) => {
            drop(helper);
            return Err(Unavailable::Stopped(format!(
                "the parser helper's pipe failed: {e}"
            )));
        }
    };
    let decoded = wire::decode(language, &answer);
    drop(answer);
    match decoded {
        Ok(result) => {
            // Still healthy: kept warm for the next call.
            WARM.with(|w| *w.borrow_mut() = helper);
            result.map_err(|l| memory(Unavailable::Limit(l)))
        }
        Err(e) => {
            drop(helper);
            Err(Unavailable::Crashed(format!(
                "the parser helper's answer is malformed: {e}"
            )))
        }
    }
}
