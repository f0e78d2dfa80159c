//! Storage through SPI: the only place that knows table and column names, and the one place
//! that holds SQL. The SQL-function files hold no statement: they hand [`port::SpiStore`] (or
//! [`port::SpiHistory`]), the engine's storage port over these functions, to the engine.
//!
//! Every statement names its schema (`patchdiff.`) because the API functions run as SECURITY
//! DEFINER with `search_path = pg_catalog, pg_temp`. IDs cross as text and are cast in SQL.
//!
//! - [`access`]: who may touch what, and the three tiers of every statement that finds a target;
//! - [`targets`]: target rows, their creation, and the checkpoint (SAVE) statements;
//! - [`attempts`]: the attempt log (parents, keyed attempts, writes, log pages, replay batches);
//! - [`ledger`]: manifest ledger pages;
//! - [`observations`]: issued observations and their consumptions;
//! - [`grants`]: grants, revokes and the target directory;
//! - [`feed`]: the change feed's `NOTIFY patchdiff` at each acceptance and SAVE;
//! - [`port`]: the engine's storage port (`patchdiff_engine::api::store`) over the above.

pub mod access;
pub mod attempts;
pub mod feed;
pub mod grants;
pub mod ledger;
pub mod observations;
pub mod port;
pub mod rules;
pub mod targets;

pub use access::{Caller, Need};

use pgrx::PgOid;
use pgrx::datum::DatumWithOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiHeapTupleData, SpiTupleTable};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

thread_local! {
    /// Plans kept for the life of the backend (SPI_keepplan): parsing and planning the
    /// attempt-writing statement every call would cost more than the edit itself. PostgreSQL's
    /// plan cache revalidates them after DDL. Keyed by the statement and whether it was prepared
    /// mutating ([`write`], [`fresh`]) or not ([`read`]), for the two run under different
    /// snapshots.
    static PLANS: RefCell<HashMap<(&'static str, bool), Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

pub(crate) fn fault(what: &str, e: impl std::fmt::Display) -> ! {
    // Infrastructure faults are SQL errors: they roll back, and the front end reports them as
    // outcome_unknown, never as a rejection.
    pgrx::error!("pg_patchdiff: {what}: {e}")
}

fn plan(
    client: &SpiClient,
    sql: &'static str,
    args: &[DatumWithOid],
    mutating: bool,
    what: &str,
) -> Rc<OwnedPreparedStatement> {
    PLANS
        .with(|p| p.borrow().get(&(sql, mutating)).cloned())
        .unwrap_or_else(|| {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let prepared = if mutating {
                client.prepare_mut(sql, &types)
            } else {
                client.prepare(sql, &types)
            };
            let plan = Rc::new(prepared.unwrap_or_else(|e| fault(what, e)).keep());
            PLANS.with(|p| p.borrow_mut().insert((sql, mutating), plan.clone()));
            plan
        })
}

/// A read-write kept plan (row locks and writes), whose parameter types are those of `args`.
fn write<'c>(
    client: &mut SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    let p = plan(client, sql, args, true, what);
    client
        .update(&*p, None, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// A kept plan that reads the latest committed state, as [`write`] does, but assigns no
/// transaction ID: SPI runs a plan prepared mutating with `read_only = false`, so each statement
/// takes a fresh snapshot (in READ COMMITTED), while only [`write`] (`SpiClient::update`) asks
/// for a transaction ID. For reads that must see what committed after the call's own statement
/// began: a keyed attempt and what its recovery reads, before the row lock or under it.
fn fresh<'c>(
    client: &SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    select_kept(client, sql, args, true, what)
}

/// Runs a kept plan without asking for a transaction ID: [`fresh`] when it was prepared
/// `mutating`, [`read`] when not.
fn select_kept<'c>(
    client: &SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    mutating: bool,
    what: &str,
) -> SpiTupleTable<'c> {
    let p = plan(client, sql, args, mutating, what);
    client
        .select(&*p, None, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// A read-only kept plan: runs in the caller's snapshot and assigns no transaction ID.
///
/// History pages and replay batches read one range of a composite index `(scope..., sequence)`.
/// Each is written as a row-value range, `(scope, seq) <= ($scope, $max) AND (scope, seq) >
/// ($scope, 0)`, ordered by the whole key, never as `scope = $1 ... ORDER BY seq`: with an
/// equality the planner may walk the global `UNIQUE (sequence)` index backward and filter by
/// scope, which visits every newer row of every other target (measured: 11,750 rows, 18 ms, for
/// a 20-row target). Only the composite index returns a row range in key order; the functions
/// that run these statements are declared with `enable_sort = off` and
/// `enable_incremental_sort = off` (`history_planner_settings`)
/// because the planner underestimates row-value ranges and would otherwise sort the whole
/// range. So a page reads at most limit + 1 index entries wherever it lies in the history.
fn read<'c>(
    client: &SpiClient<'c>,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    select_kept(client, sql, args, false, what)
}

/// The rows of `sql` (a read) in the latest committed state, when the calling transaction reads
/// one snapshot throughout (REPEATABLE READ, SERIALIZABLE); `None` in READ COMMITTED, whose
/// statements already see it.
///
/// For a lookup by ID that found nothing under the transaction's snapshot, before the call
/// records "names nothing" for good: the row may have been committed since the snapshot was
/// taken (helper-100: a retry naming a rejected parent, or an observation, that another session
/// had just recorded was itself logged as rejected, `retryable: false`, where the keyed lookup
/// and the guards answer 40001). The same statement, with its access predicate, runs under the
/// latest snapshot (`SPI_execute_snapshot`), as PostgreSQL's foreign key checks look for rows
/// newer than a transaction snapshot. It is planned for this call only: it runs only when a
/// lookup found nothing in such a transaction, and pgrx's kept plans run in the transaction's
/// snapshot once it has written.
fn rows_since_snapshot(sql: &'static str, args: &[DatumWithOid], what: &str) -> Option<usize> {
    // SAFETY: a backend-global set by the transaction's start; read only.
    let isolation = unsafe { pg_sys::XactIsoLevel };
    if isolation < pg_sys::XACT_REPEATABLE_READ as i32 {
        return None;
    }
    let text = std::ffi::CString::new(sql).unwrap_or_else(|e| fault(what, e));
    let mut types: Vec<pg_sys::Oid> = args.iter().map(DatumWithOid::oid).collect();
    let mut values: Vec<pg_sys::Datum> = args
        .iter()
        .map(|a| {
            a.datum()
                .map_or(pg_sys::Datum::from(0usize), |d| d.sans_lifetime())
        })
        .collect();
    let nulls: Vec<std::ffi::c_char> = args
        .iter()
        .map(|a| if a.datum().is_some() { b' ' } else { b'n' } as std::ffi::c_char)
        .collect();
    let arity = i32::try_from(args.len()).unwrap_or_else(|e| fault(what, e));
    // SAFETY: called inside the call's SPI connection; `text` is NUL-terminated and `types`
    // holds `arity` OIDs. A failure raises an ERROR, which ends the call.
    let plan = unsafe { pg_sys::SPI_prepare(text.as_ptr(), arity, types.as_mut_ptr()) };
    if plan.is_null() {
        fault(what, "the statement could not be prepared");
    }
    // SAFETY: the plan was prepared above with `arity` arguments, `values` and `nulls` hold as
    // many; read only, with the latest snapshot and no crosscheck snapshot.
    let status = unsafe {
        pg_sys::SPI_execute_snapshot(
            plan,
            values.as_mut_ptr(),
            nulls.as_ptr(),
            pg_sys::GetLatestSnapshot(),
            std::ptr::null_mut(),
            true,
            false,
            0,
        )
    };
    // SAFETY: read right after the execution that set it.
    let found = unsafe { pg_sys::SPI_processed };
    // SAFETY: the plan is this function's own and no longer used.
    unsafe { pg_sys::SPI_freeplan(plan) };
    if status != pg_sys::SPI_OK_SELECT as i32 {
        fault(what, format!("SPI status {status}"));
    }
    Some(usize::try_from(found).unwrap_or(usize::MAX))
}

/// Error 40001 for a row `what` names that a transaction committed after the caller's snapshot
/// was taken ([`rows_since_snapshot`]): nothing is written, and the retried transaction finds it.
// The macro ends in `unreachable!()` as a statement, which does not make it an expression of
// type `!`.
#[allow(unreachable_code)]
fn committed_since_snapshot(what: &str) -> ! {
    pgrx::ereport!(
        ERROR,
        pgrx::PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        format!("could not serialize access: {what} was recorded by a concurrent transaction"),
        "Retry the transaction; it then finds what this one's snapshot could not see."
    );
    unreachable!("an ERROR does not return")
}

/// A read-only statement planned for this call only, returning at most `limit` rows.
fn read_once<'c>(
    client: &SpiClient<'c>,
    sql: &str,
    limit: Option<i64>,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    client
        .select(sql, limit, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// A read-write statement planned for this call only.
fn write_once<'c>(
    client: &mut SpiClient<'c>,
    sql: &str,
    limit: Option<i64>,
    args: &[DatumWithOid],
    what: &str,
) -> SpiTupleTable<'c> {
    client
        .update(sql, limit, args)
        .unwrap_or_else(|e| fault(what, e))
}

/// The access parameters ($2 caller, $3 need) of a [`access::tiered!`] statement.
fn access_args<'a>(caller: Caller, need: Need) -> [DatumWithOid<'a>; 2] {
    [caller.role.into(), need.as_str().into()]
}

/// The row of target `id` that the first of the caller's tiers of `sql` ([`access::tiered!`])
/// finds, read-write (`locking`: the statement takes a row lock) or read-only.
fn first_row<'c>(
    c: &mut SpiClient<'c>,
    caller: Caller,
    need: Need,
    sql: &[&'static str; 3],
    id: &str,
    locking: bool,
) -> Option<SpiHeapTupleData<'c>> {
    caller.first(|tier| {
        let [a, n] = access_args(caller, need);
        let args = [id.into(), a, n];
        let rows = if locking {
            write(c, sql[tier], &args, "locking target")
        } else {
            read(c, sql[tier], &args, "reading target")
        };
        let row = rows.first();
        if row.is_empty() {
            return None;
        }
        let tuple = row
            .get_heap_tuple()
            .unwrap_or_else(|e| fault("reading target", e))?;
        // A grantee's lock to write: is the grant still there ([`targets::still_granted`])?
        (!locking || need != Need::Write || targets::still_granted(c, id, caller, tier))
            .then_some(tuple)
    })
}

/// A result row's columns by 1-based ordinal.
trait Columns {
    fn column<T: FromDatum + IntoDatum>(&self, i: usize) -> Result<Option<T>, String>;
}

impl Columns for SpiHeapTupleData<'_> {
    fn column<T: FromDatum + IntoDatum>(&self, i: usize) -> Result<Option<T>, String> {
        self.get::<T>(i).map_err(|e| e.to_string())
    }
}

/// One row of an SPI result, deformed once by [`read_rows`].
struct Deformed<'a> {
    desc: pg_sys::TupleDesc,
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
}

impl Columns for Deformed<'_> {
    fn column<T: FromDatum + IntoDatum>(&self, i: usize) -> Result<Option<T>, String> {
        let k = i
            .checked_sub(1)
            .filter(|&k| k < self.values.len())
            .ok_or_else(|| format!("no column {i}"))?;
        // SAFETY: `desc` describes the row, which has column i (checked above).
        let oid = unsafe { pg_sys::SPI_gettypeid(self.desc, i as i32) };
        if !T::is_compatible_with(oid) {
            return Err(format!(
                "column {i} of type {oid:?} is not a {}",
                std::any::type_name::<T>()
            ));
        }
        // SAFETY: the datum and its null flag were deformed from the current SPI result with
        // this descriptor, whose type for it is `oid`, compatible with T; the result is copied
        // (text) or by value (integers, timestamps) before that result is freed.
        Ok(unsafe { T::from_polymorphic_datum(self.values[k], self.nulls[k], oid) })
    }
}

/// Runs a read-only kept plan like [`read`] and maps each row, deformed once: one
/// `heap_deform_tuple` per row, where pgrx's tuple wrapper reads each column by itself
/// (`SPI_getbinval`), walking the row from its start for every column after the first
/// variable-width one when the row has a null: quadratic in the columns of a log page's row.
///
/// It stops before the row that would take the sum of column `budget.0` (an `int8` of the row's
/// stored text bytes, which the statement computes from the stored sizes, without reading the
/// text) over `budget.1`; the first row is always read, and `true` says rows were left unread
/// so. Rows past the budget are never converted, so their text is never read out of TOAST.
fn read_rows<R>(
    client: &SpiClient,
    sql: &'static str,
    args: &[DatumWithOid],
    what: &'static str,
    budget: (usize, i64),
    mut row: impl FnMut(&Row<Deformed>) -> R,
) -> (Vec<R>, bool) {
    let table = read(client, sql, args, what);
    let n = table.len();
    // SAFETY: `read` has just run the statement, so SPI_tuptable is the result `table` wraps,
    // with `n` rows; SPI keeps it until the connection ends, after this function.
    let result = unsafe { pg_sys::SPI_tuptable };
    if n == 0 || result.is_null() {
        return (Vec::new(), false);
    }
    // SAFETY: a non-null SPI result has a descriptor and `n` row pointers.
    let (desc, vals) = unsafe { ((*result).tupdesc, (*result).vals) };
    // SAFETY: an SPI result's descriptor is valid with it.
    let natts = usize::try_from(unsafe { (*desc).natts }).unwrap_or(0);
    let mut values = vec![pg_sys::Datum::from(0usize); natts];
    let mut nulls = vec![false; natts];
    let mut out = Vec::with_capacity(n);
    let mut used: i64 = 0;
    for i in 0..n {
        // SAFETY: row i < n of the result, deformed into arrays of the descriptor's width.
        unsafe {
            pg_sys::heap_deform_tuple(*vals.add(i), desc, values.as_mut_ptr(), nulls.as_mut_ptr());
        }
        let cols = Deformed {
            desc,
            values: &values,
            nulls: &nulls,
        };
        let r = Row(&cols, what);
        used = used.saturating_add(r.int(budget.0));
        if i > 0 && used > budget.1 {
            return (out, true);
        }
        out.push(row(&r));
    }
    (out, false)
}

/// Typed column access that turns a conversion failure into an infrastructure fault.
struct Row<'a, C>(&'a C, &'static str);

impl<C: Columns> Row<'_, C> {
    fn opt<T: FromDatum + IntoDatum>(&self, i: usize) -> Option<T> {
        self.0.column::<T>(i).unwrap_or_else(|e| fault(self.1, e))
    }
    fn text(&self, i: usize) -> String {
        self.opt::<String>(i).unwrap_or_default()
    }
    fn int(&self, i: usize) -> i64 {
        self.opt::<i64>(i).unwrap_or_default()
    }
    /// A `timestamptz` column as microseconds since the Unix epoch: what
    /// `(EXTRACT(epoch FROM c) * 1000000)::int8` gave, without numeric arithmetic per row. Like
    /// that expression, an infinite timestamp or one past bigint is an error (and null, read
    /// through [`Row::int`], was 0).
    fn unix_micros(&self, i: usize) -> i64 {
        /// 2000-01-01 (PostgreSQL's own epoch) in microseconds since 1970-01-01.
        const POSTGRES_EPOCH_MICROS: i64 = 946_684_800_000_000;
        let Some(t) = self.opt::<pgrx::datum::TimestampWithTimeZone>(i) else {
            return 0;
        };
        Some(t.into_inner())
            .filter(|&t| t != i64::MIN && t != i64::MAX)
            .and_then(|t| t.checked_add(POSTGRES_EPOCH_MICROS))
            .unwrap_or_else(|| fault(self.1, "bigint out of range"))
    }
    fn json(&self, i: usize) -> Option<Value> {
        self.opt::<String>(i)
            .map(|s| serde_json::from_str(&s).unwrap_or_else(|e| fault(self.1, e)))
    }
    /// A `json` column as literal-form text, which a page embeds as it is: the stored text
    /// itself when it already is, as every row this extension writes (issue 21, item 4).
    fn json_literal(&self, i: usize) -> Option<String> {
        self.opt::<String>(i)
            .map(|s| patchdiff_engine::wire::stored_literal(s).unwrap_or_else(|e| fault(self.1, e)))
    }
}
