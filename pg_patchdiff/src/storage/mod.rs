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
//! - [`port`]: the engine's storage port (`patchdiff_engine::api::store`) over the above.

pub mod access;
pub mod attempts;
pub mod grants;
pub mod ledger;
pub mod observations;
pub mod port;
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
    /// plan cache revalidates them after DDL.
    static PLANS: RefCell<HashMap<&'static str, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
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
        .with(|p| p.borrow().get(sql).cloned())
        .unwrap_or_else(|| {
            let types: Vec<PgOid> = args.iter().map(|a| PgOid::from(a.oid())).collect();
            let prepared = if mutating {
                client.prepare_mut(sql, &types)
            } else {
                client.prepare(sql, &types)
            };
            let plan = Rc::new(prepared.unwrap_or_else(|e| fault(what, e)).keep());
            PLANS.with(|p| p.borrow_mut().insert(sql, plan.clone()));
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
    let p = plan(client, sql, args, false, what);
    client
        .select(&*p, None, args)
        .unwrap_or_else(|e| fault(what, e))
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
        row.get_heap_tuple()
            .unwrap_or_else(|e| fault("reading target", e))
    })
}

/// Typed column access that turns a conversion failure into an infrastructure fault.
struct Row<'a, 'c>(&'a SpiHeapTupleData<'c>, &'static str);

impl Row<'_, '_> {
    fn opt<T: FromDatum + IntoDatum>(&self, i: usize) -> Option<T> {
        self.0.get::<T>(i).unwrap_or_else(|e| fault(self.1, e))
    }
    fn text(&self, i: usize) -> String {
        self.opt::<String>(i).unwrap_or_default()
    }
    fn int(&self, i: usize) -> i64 {
        self.opt::<i64>(i).unwrap_or_default()
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
