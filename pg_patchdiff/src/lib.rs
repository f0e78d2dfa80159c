//! pg_patchdiff: the PatchDIFF SQL API.
//!
//! Each MCP tool `patchdiff_X` is the SQL function `patchdiff_X(args json) RETURNS json`; the
//! result is the tool's JSON exactly as the contract describes it. This crate is glue: each
//! function hands its argument text to the engine's sequence for it (`patchdiff_engine::api::drive`),
//! over this transaction's rows through the storage port ([`storage::port::SpiStore`]), whose
//! statements all live in [`storage`]; and it supplies what only PostgreSQL knows: the caller,
//! new IDs, session settings and the transaction's state.

use json_text::JsonText as JsonString;
use patchdiff_engine::api::args::ArgError;
use patchdiff_engine::api::drive::{self, Route, Settings, TypedEdits};
use patchdiff_engine::api::scoped as observed;
use patchdiff_engine::api::submit;
use patchdiff_engine::wire::{LITERAL, to_string};
use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::prelude::*;
use serde_json::Value;
use storage::port::SpiStore;

mod changeset;
mod diff;
mod export;
mod grants;
mod history;
mod json_text;
mod memory;
mod observe;
mod ops;
mod parser;
mod storage;

::pgrx::pg_module_magic!(name, version);

/// `patchdiff.max_argument_bytes`: the largest argument text any function reads. Superuser-only,
/// so a client role cannot raise its own limit. Its default (16 MiB) holds a 1 MiB document even
/// when every character arrives `\u`-escaped, with room for the rest of the request.
static MAX_ARGUMENT_BYTES: GucSetting<i32> =
    GucSetting::<i32>::new(patchdiff_engine::api::limits::DEFAULT_MAX_ARGUMENT_BYTES as i32);

pub(crate) fn max_argument_bytes() -> usize {
    usize::try_from(MAX_ARGUMENT_BYTES.get()).unwrap_or(0)
}

/// `patchdiff.max_target_bytes`: the largest text, in UTF-8 bytes, a target may be created with
/// or grow to (`target_too_large`; engine `limits::TARGET_MAX_BYTES_DEFAULT` says why).
/// Superuser-only, as `max_argument_bytes`.
static MAX_TARGET_BYTES: GucSetting<i32> =
    GucSetting::<i32>::new(patchdiff_engine::wire::limits::TARGET_MAX_BYTES_DEFAULT as i32);

pub(crate) fn max_target_bytes() -> usize {
    usize::try_from(MAX_TARGET_BYTES.get()).unwrap_or(0)
}

/// `patchdiff.max_changeset_target_bytes`: the most bytes of text the targets of one changeset
/// may hold together (`changeset_targets_too_large`; engine
/// `limits::CHANGESET_TARGETS_MAX_BYTES_DEFAULT` says why). Superuser-only, as
/// `max_argument_bytes`.
static MAX_CHANGESET_TARGET_BYTES: GucSetting<i32> = GucSetting::<i32>::new(
    patchdiff_engine::wire::limits::CHANGESET_TARGETS_MAX_BYTES_DEFAULT as i32,
);

pub(crate) fn max_changeset_target_bytes() -> usize {
    usize::try_from(MAX_CHANGESET_TARGET_BYTES.get()).unwrap_or(0)
}

/// `patchdiff.workspace_owned_transaction`: set (with SET LOCAL, inside BEGIN ... COMMIT) by a
/// caller that owns the transaction of a publishing SAVE and installs the file before COMMIT.
static WORKSPACE_OWNED_TRANSACTION: GucSetting<bool> = GucSetting::<bool>::new(false);

/// Whether the caller said it owns this transaction, and is in fact inside a transaction block.
pub(crate) fn workspace_owned_transaction() -> bool {
    WORKSPACE_OWNED_TRANSACTION.get() && caller_owned_transaction()
}

/// `patchdiff.strict_observation_mode`: every unobserved write (patchdiff_submit_edits,
/// patchdiff_submit_operations, patchdiff_submit_replacement) is rejected and logged with
/// `OBSERVATION_REQUIRED`. patchdiff-mcp sets it from PATCHDIFF_STRICT_OBSERVATION_MODE.
static STRICT_OBSERVATION_MODE: GucSetting<bool> = GucSetting::<bool>::new(false);
/// The partition a new target's ID routes to, and how many there are (a sharded deployment:
/// docs/scale-out.md); -1, the default, makes an ordinary random ID.
static TARGET_PARTITION: GucSetting<i32> = GucSetting::<i32>::new(-1);
static TARGET_PARTITIONS: GucSetting<i32> = GucSetting::<i32>::new(1);

/// `patchdiff.notify`: the change feed (issue 19 item 2; docs/sql-api.md "The change feed").
/// Superuser-only, so a writer cannot hide its changes from the feed. `listened`, the default,
/// announces a change when a session of this database listens through the feed's lock (issue 21
/// item 1: with nobody listening, commits take no notify-queue lock and keep sharing WAL
/// flushes); `on` announces every change to any `LISTEN`er; `off` nothing.
static NOTIFY: GucSetting<Notify> = GucSetting::<Notify>::new(Notify::Listened);

/// The values of `patchdiff.notify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// Announce while a listener holds or awaits the feed's lock (`storage::feed`).
    Listened,
    /// Announce every change.
    On,
    /// Announce nothing.
    Off,
}

// SAFETY: `CONFIG_ENUM_ENTRY` ends with the null entry PostgreSQL's enum GUCs require, and every
// `val` in it is one `from_ordinal` maps. Besides the three names, the spellings a boolean
// setting accepts stay accepted (hidden, as PostgreSQL's own `synchronous_commit` does), so a
// configuration written when this setting was a boolean keeps its meaning.
unsafe impl pgrx::guc::GucEnum for Notify {
    fn from_ordinal(ordinal: i32) -> Self {
        match ordinal {
            1 => Notify::On,
            2 => Notify::Off,
            _ => Notify::Listened,
        }
    }

    fn to_ordinal(&self) -> i32 {
        match self {
            Notify::Listened => 0,
            Notify::On => 1,
            Notify::Off => 2,
        }
    }

    const CONFIG_ENUM_ENTRY: *const pg_sys::config_enum_entry = {
        const fn entry(
            name: &'static std::ffi::CStr,
            val: i32,
            hidden: bool,
        ) -> pg_sys::config_enum_entry {
            pg_sys::config_enum_entry {
                name: name.as_ptr(),
                val,
                hidden,
            }
        }
        [
            entry(c"listened", 0, false),
            entry(c"on", 1, false),
            entry(c"off", 2, false),
            entry(c"true", 1, true),
            entry(c"yes", 1, true),
            entry(c"1", 1, true),
            entry(c"false", 2, true),
            entry(c"no", 2, true),
            entry(c"0", 2, true),
            pg_sys::config_enum_entry {
                name: std::ptr::null(),
                val: 0,
                hidden: false,
            },
        ]
        .as_ptr()
    };
}

pub(crate) fn notify_mode() -> Notify {
    NOTIFY.get()
}

/// `patchdiff.notify_queue_limit`: at or above this share of PostgreSQL's notification queue, a
/// change is committed without its announcement (`storage::feed`). Superuser-only, like
/// `patchdiff.notify`: a writer cannot hide its changes by lowering it.
static NOTIFY_QUEUE_LIMIT: GucSetting<f64> = GucSetting::<f64>::new(0.5);

pub(crate) fn notify_queue_limit() -> f64 {
    NOTIFY_QUEUE_LIMIT.get()
}

pub(crate) fn strict_observation_mode() -> bool {
    STRICT_OBSERVATION_MODE.get()
}

#[pg_guard]
extern "C-unwind" fn _PG_init() {
    // pgrx turns every PostgreSQL ERROR that crosses Rust frames (a cancel, a statement timeout)
    // into a panic, and its panic hook captures a backtrace whenever the server's environment
    // asks for them: RUST_BACKTRACE=1, as CI runners and developers' shells often set, made each
    // cancelled submission 60 ms late (tests/tests/hostile_input.rs). Library backtraces are off
    // unless RUST_LIB_BACKTRACE asks for them explicitly.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: a backend is single-threaded; nothing reads the environment concurrently.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    // The memory this backend's calls finish on when an allocation fails (`memory`); each
    // call sets it aside again if it was spent, or if it could not be set aside here.
    memory::set_aside();
    GucRegistry::define_bool_guc(
        c"patchdiff.strict_observation_mode",
        c"Reject and log every unobserved write with OBSERVATION_REQUIRED.",
        c"When on, patchdiff_submit_edits, patchdiff_submit_operations and patchdiff_submit_replacement record an audited rejection instead of editing; edits go through patchdiff_observe_scope and patchdiff_submit_observed_operations. A keyed resend still recovers its recorded outcome.",
        &STRICT_OBSERVATION_MODE,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"patchdiff.workspace_owned_transaction",
        c"Set with SET LOCAL by a publisher that owns this transaction (patchdiff_save with sync_workspace: true).",
        c"A publishing SAVE writes its checkpoint, then the publisher installs the file and commits; without this setting, inside BEGIN, the SAVE is refused with workspace_requires_owned_transaction.",
        &WORKSPACE_OWNED_TRANSACTION,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"patchdiff.notify",
        c"Announce acceptances and SAVEs with NOTIFY patchdiff (the change feed): listened, on or off.",
        c"listened (default): announced while a session of this database listens through the feed's lock, pg_advisory_lock_shared(1885628774, 1717921124); on: always, to any LISTEN; off: never. The payload names the target, version, hash, attempt and log sequence (or snapshot); it is delivered at COMMIT. A commit that announces nothing takes no notify-queue lock.",
        &NOTIFY,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_float_guc(
        c"patchdiff.notify_queue_limit",
        c"Share of PostgreSQL's notification queue (0 to 1) at or above which changes are not announced.",
        c"A session that listens but does not read (inside an open transaction) stops the queue from draining; once it is full, every transaction that notifies fails at COMMIT. At or above this share, an acceptance or SAVE commits without its announcement, with a WARNING, rather than failing.",
        &NOTIFY_QUEUE_LIMIT,
        0.0,
        1.0,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"patchdiff.max_argument_bytes",
        c"Largest argument text, in bytes, that a pg_patchdiff function reads.",
        c"Larger arguments are answered with invalid_argument / arguments_too_large before they are detoasted or parsed; nothing is written.",
        &MAX_ARGUMENT_BYTES,
        1024,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.max_target_bytes",
        c"Largest text, in UTF-8 bytes, that a target may be created with or grow to.",
        c"An initialization over it, or an acceptance that would leave a target over it and larger than it was, is answered with invalid_argument / target_too_large; nothing is written. Every call on a target holds a few copies of its text in the backend.",
        &MAX_TARGET_BYTES,
        1024,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.max_changeset_target_bytes",
        c"Most text, in UTF-8 bytes, that the targets of one changeset may hold together.",
        c"A changeset holds every member's text at once. Over it, patchdiff_submit_changeset answers invalid_argument / changeset_targets_too_large, measured before any target is read or locked and again under the locks; nothing is written.",
        &MAX_CHANGESET_TARGET_BYTES,
        1024,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_int_guc(
        c"patchdiff.target_partition",
        c"The partition whose ID a new target gets (a shard behind a PL/Proxy router); -1 for none.",
        c"With patchdiff.target_partitions = n (a power of two), the first 32 bits of the new target's UUID, masked by n - 1, equal this partition: the router's rule for where a target lives (docs/scale-out.md). The router sets both for the call that creates the target.",
        &TARGET_PARTITION,
        -1,
        65_535,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"patchdiff.target_partitions",
        c"How many partitions a sharded deployment routes targets to (a power of two).",
        c"Read with patchdiff.target_partition when a target is created.",
        &TARGET_PARTITIONS,
        1,
        65_536,
        GucContext::Userset,
        GucFlags::default(),
    );
    parser::define_gucs();
    // Every engine loop whose length depends on its input calls this now and then, so
    // statement_timeout, pg_cancel_backend and pg_terminate_backend end any call promptly. The
    // ERROR it may raise unwinds through the engine's frames as a Rust panic (panic = "unwind"),
    // and pgrx raises it again at the function's boundary; the transaction then rolls back, with
    // every row the call had written and the target's lock.
    patchdiff_engine::api::interrupt::set_hook(check_for_interrupts);
}

pub(crate) fn check_for_interrupts() {
    pg_sys::check_for_interrupts!();
    // An allocation served from the memory reserve ends the call here (`memory`).
    memory::settle();
}

pgrx::extension_sql_file!("../../sql/schema.sql", name = "schema", bootstrap);

pub(crate) fn out(v: &Value) -> JsonString {
    JsonString(to_string(v, LITERAL))
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A new target's ID: random, or of the partition `patchdiff.target_partition` names (an ERROR,
/// before anything is written, when the two settings do not fit together).
pub(crate) fn new_target_id() -> String {
    use patchdiff_engine::api::target::partition;
    let p = TARGET_PARTITION.get();
    if p < 0 {
        return new_id();
    }
    match partition::check(p.into(), TARGET_PARTITIONS.get().into()) {
        Ok((p, n)) => {
            uuid::Uuid::from_bytes(partition::place(*uuid::Uuid::new_v4().as_bytes(), p, n))
                .to_string()
        }
        Err(partition::BadPartition(why)) => pgrx::error!("{why}"),
    }
}

/// An engine answer: a value, or (history pages) its JSON text already written.
pub(crate) trait Answer {
    fn into_text(self) -> String;
}

impl Answer for Value {
    fn into_text(self) -> String {
        to_string(&self, LITERAL)
    }
}

impl Answer for String {
    fn into_text(self) -> String {
        self
    }
}

/// Runs one call of the engine over this transaction's rows, as the caller may see them, and
/// returns its answer as `json` text.
pub(crate) fn with_store<A: Answer>(call: impl FnOnce(&mut SpiStore) -> A) -> JsonString {
    let entered = storage::Caller::enter();
    let caller = entered.caller;
    let answer = Spi::connect_mut(|client| call(&mut SpiStore { client, caller }));
    drop(entered);
    // A near-miss search that failed was answered as an omission (issue 17); the client sees
    // only that, so the server log says why, for the operator.
    if let Some(fault) = patchdiff_engine::api::near_miss::take_contained_fault() {
        pgrx::log!("pg_patchdiff: a near-miss search failed and was omitted: {fault}");
    }
    let text = answer.into_text();
    memory::settle();
    // A cancel that came while a large answer was written is served before its datum is copied.
    pgrx::check_for_interrupts!();
    JsonString(text)
}

/// Creates a target from inline content: LF canonicalization, recorded source line endings,
/// version 0, an active editing cycle and the initial snapshot.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_initialize_target(args: JsonString) -> JsonString {
    with_store(|s| {
        drive::initialize(
            s,
            "patchdiff_initialize_target",
            &args.0,
            false,
            max_target_bytes(),
        )
    })
}

/// Upload alias of patchdiff_initialize_target (filename, content and content_type required).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_handle_upload(args: JsonString) -> JsonString {
    with_store(|s| {
        drive::initialize(
            s,
            "patchdiff_handle_upload",
            &args.0,
            true,
            max_target_bytes(),
        )
    })
}

#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_get_target(args: JsonString) -> JsonString {
    with_store(|s| drive::get_target(s, &args.0))
}

#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_read_target(args: JsonString) -> JsonString {
    with_store(|s| drive::read_target(s, &args.0))
}

#[pg_extern(stable)]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_find_occurrences(args: JsonString) -> JsonString {
    with_store(|s| drive::find_occurrences(s, &args.0))
}

/// Whether the call runs inside a transaction block the caller opened (BEGIN ... COMMIT); see
/// [`Settings::caller_owned_transaction`].
fn caller_owned_transaction() -> bool {
    // SAFETY: reads the current transaction state; valid in any function call.
    unsafe { pg_sys::IsTransactionBlock() }
}

/// Runs one submission in the engine's order ([`drive::run`]) over this transaction's rows.
fn run_submission(
    tool: &str,
    sub: Result<submit::Submission, ArgError>,
    route: Route,
) -> JsonString {
    let settings = Settings {
        strict_observation_mode: strict_observation_mode(),
        caller_owned_transaction: caller_owned_transaction(),
        max_target_bytes: max_target_bytes(),
        max_changeset_target_bytes: max_changeset_target_bytes(),
    };
    with_store(|s| drive::run(s, tool, sub, route, settings))
}

/// Guarded tx/2 operations confined to server-issued structural observations: the single form
/// (observation_id, absolute spans) or one atomic batch (observation_bundle_id, groups with
/// scope-local coordinates, patchdiff-observed-batch/1).
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_observed_operations(args: JsonString) -> JsonString {
    run_submission(
        "patchdiff_submit_observed_operations",
        observed::parse_submit_observed_operations(&args.0),
        Route::Observed,
    )
}

/// Typed edits (patchdiff-tx/1, runtime patchdiff-mvp-0.2.2): guarded, sequential, all or nothing.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit_edits(args: JsonString) -> JsonString {
    run_submission(
        "patchdiff_submit_edits",
        submit::parse_submit_edits(&args.0),
        Route::Unobserved,
    )
}

/// The DBA's typed entry point to patchdiff_submit_edits, with named arguments.
#[allow(clippy::too_many_arguments)]
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn patchdiff_submit(
    target_file_id: Option<pgrx::Uuid>,
    intent: Option<String>,
    edits: Option<JsonString>,
    expected_target_version: default!(Option<i64>, "NULL"),
    expected_current_hash: default!(Option<String>, "NULL"),
    client_request_id: default!(Option<String>, "NULL"),
    parent_pdcp_log_id: default!(Option<pgrx::Uuid>, "NULL"),
    attempt: default!(Option<i64>, "NULL"),
    source: default!(Option<String>, "'sql'"),
    include_correlation_id: default!(Option<bool>, false),
) -> JsonString {
    let typed = TypedEdits {
        target_file_id: target_file_id.map(|u| u.to_string()),
        intent,
        edits: edits.as_ref().map(|e| e.0.as_str()),
        expected_target_version,
        expected_current_hash,
        client_request_id,
        parent_pdcp_log_id: parent_pdcp_log_id.map(|u| u.to_string()),
        attempt,
        source,
        include_correlation_id,
    };
    let args = match typed.arguments(max_argument_bytes()) {
        Ok(args) => args,
        Err(answer) => return out(&answer),
    };
    run_submission(
        "patchdiff_submit",
        submit::parse_submit_edits(&args),
        Route::Unobserved,
    )
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;
#[cfg(any(test, feature = "pg_test"))]
mod tests_history;
#[cfg(any(test, feature = "pg_test"))]
mod tests_issue17;
#[cfg(any(test, feature = "pg_test"))]
mod tests_memory;
#[cfg(any(test, feature = "pg_test"))]
mod tests_observed;
#[cfg(any(test, feature = "pg_test"))]
mod tests_ops;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}

// Every API function runs its statements on generic plans from its first call. The kept plans
// (storage::plan) are written to be run generically; PostgreSQL's plan cache would instead
// plan each of them anew, parameters folded in as constants, for the first five calls of every
// connection, and folding the attempt-writing statement's parameters copied an acceptance's new
// text twice more: 29 MB more per call on a 15.2 MB target (docs/reliability.md, "Resource
// bounds"). Statements planned for one call are not kept and keep their custom plans. The
// upgrade script sets the same.
pgrx::extension_sql!(
    r#"
DO $generic$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
               JOIN pg_catalog.pg_depend d ON d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
                    AND d.objid = p.oid AND d.deptype = 'e'
               JOIN pg_catalog.pg_extension e ON e.oid = d.refobjid
               JOIN pg_catalog.pg_language l ON l.oid = p.prolang
              WHERE e.extname = 'pg_patchdiff' AND l.lanname = 'c'
                AND p.prorettype OPERATOR(pg_catalog.<>) 'pg_catalog.trigger'::pg_catalog.regtype
    LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan', f);
    END LOOP;
END
$generic$;
"#,
    name = "generic_plans",
    requires = [
        patchdiff_diff,
        patchdiff_export_target,
        patchdiff_find_occurrences,
        patchdiff_get_manifest_ledger,
        patchdiff_get_pdcp_log,
        patchdiff_get_target,
        patchdiff_grant,
        patchdiff_handle_upload,
        patchdiff_initialize_target,
        patchdiff_list_targets,
        patchdiff_observe_scope,
        patchdiff_preview,
        patchdiff_read_lines,
        patchdiff_read_target,
        patchdiff_replay,
        patchdiff_revoke,
        patchdiff_save,
        patchdiff_submit,
        patchdiff_submit_changeset,
        patchdiff_submit_edits,
        patchdiff_submit_observed_operations,
        patchdiff_submit_operations,
        patchdiff_submit_replacement,
        "history_planner_settings",
        "diff_planner_settings",
        "list_planner_settings"
    ]
);

pgrx::extension_sql_file!("../../sql/comments.sql", name = "comments", finalize);
