//! The row rules of the three tables every acceptance writes, checked by one C trigger function,
//! `patchdiff.check_row()` (sql/schema.sql), in place of CHECK constraints (issue 21, item 1).
//!
//! Why not CHECK constraints: PostgreSQL 15 rebuilds every CHECK constraint of a table from its
//! stored text (`stringToNode`, `expression_planner`, `ExecInitExpr`) in each statement that
//! inserts into or updates the table, and on UPDATE it checks all of them whichever columns the
//! statement sets. An acceptance writes three tables in one statement, and those 16 rebuilds were
//! 8% of all CPU under the 8-client edit load (perf), more than the index insertions; the
//! trigger costs about as little as no rules at all (docs/benchmarks.md, "Issue 21, item 1",
//! "The row rules").
//!
//! The rules are exactly the former constraints', under their names, and hold for every writer
//! (the trigger is ENABLE ALWAYS, so replica mode does not skip it either):
//! - patchdiff.targets, AFTER INSERT OR UPDATE (an AFTER trigger: a BEFORE UPDATE row trigger
//!   would lock every edited target row a second time);
//! - patchdiff.pdcp_logs and patchdiff.manifest_ledger, BEFORE INSERT (they are append-only).
//!
//! A violation raises `check_violation` (23514), as the constraint did, naming the rule.

use patchdiff_engine::api::uuid::is_lower_hex;
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::ffi::CStr;

/// The function manager's version record for [`patchdiff_check_row`] (`PG_FUNCTION_INFO_V1`).
#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_patchdiff_check_row() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `patchdiff.check_row()`: checks the new row of the table that fired it, and returns it
/// unchanged (a BEFORE trigger) or NULL (an AFTER trigger, whose result is ignored).
///
/// # Safety
/// Called by PostgreSQL's trigger manager only: `fcinfo->context` is its `TriggerData`.
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn patchdiff_check_row(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: fcinfo is the call's own; CALLED_AS_TRIGGER is a node-tag test of its context,
    // which is a Node when it is not null.
    let called_as_trigger = unsafe {
        let context = (*fcinfo).context;
        !context.is_null() && (*context).type_ == pg_sys::NodeTag::T_TriggerData
    };
    if !called_as_trigger {
        error!("patchdiff.check_row() may only be called as a trigger");
    }
    // SAFETY: as above.
    let context = unsafe { (*fcinfo).context };
    // SAFETY: the context is a TriggerData (checked above), valid for this call.
    let data = unsafe { &*(context as *const pg_sys::TriggerData) };
    let event = data.tg_event;
    let row_level = event & pg_sys::TRIGGER_EVENT_ROW != 0;
    let op = event & pg_sys::TRIGGER_EVENT_OPMASK;
    if !row_level || !(op == pg_sys::TRIGGER_EVENT_INSERT || op == pg_sys::TRIGGER_EVENT_UPDATE) {
        error!("patchdiff.check_row() must be fired FOR EACH ROW on INSERT or UPDATE");
    }
    let tuple = if op == pg_sys::TRIGGER_EVENT_UPDATE {
        data.tg_newtuple
    } else {
        data.tg_trigtuple
    };
    // SAFETY: the relation is open for the trigger; its name is a NUL-terminated NameData.
    let (name, tupdesc) = unsafe {
        let rel = &*data.tg_relation;
        (
            CStr::from_ptr((*rel.rd_rel).relname.data.as_ptr()).to_string_lossy(),
            rel.rd_att,
        )
    };
    // SAFETY: the trigger's new row of its own relation.
    let row = unsafe { Row::deform(tuple, tupdesc) };
    let broken = match &*name {
        "targets" => target_rule(&row),
        "pdcp_logs" => attempt_rule(&row),
        "manifest_ledger" => ledger_rule(&row),
        other => error!("patchdiff.check_row() has no rules for relation \"{other}\""),
    };
    if let Some((rule, text)) = broken {
        ereport!(
            ERROR,
            PgSqlErrorCode::ERRCODE_CHECK_VIOLATION,
            format!("new row for relation \"{name}\" violates check rule \"{rule}\""),
            format!("The rule (patchdiff.check_row()): {text}.")
        );
    }
    // A BEFORE trigger's result is the row to write; an AFTER trigger's is ignored.
    if event & pg_sys::TRIGGER_EVENT_TIMINGMASK == pg_sys::TRIGGER_EVENT_BEFORE {
        pg_sys::Datum::from(tuple)
    } else {
        pg_sys::Datum::from(0usize)
    }
}

/// A broken rule: its name (the former constraint's) and its text.
type Broken = Option<(&'static str, &'static str)>;

fn target_rule(r: &Row) -> Broken {
    let device = r.int("workspace_root_device");
    let inode = r.int("workspace_root_inode");
    let path = r.is_set("workspace_relative_path");
    let baseline = r.text("workspace_baseline_sha256");
    let bytes = r.int("workspace_baseline_bytes");
    let nonce = r.text("workspace_binding_nonce");
    let proof = r.text("workspace_binding_proof");
    let binding = [
        device.is_some(),
        inode.is_some(),
        path,
        baseline.is_some(),
        bytes.is_some(),
    ];
    let rules: [(bool, &str, &str); 11] = [
        (
            r.text("current_hash").is_some_and(|h| is_lower_hex(&h, 64)),
            "targets_current_hash_check",
            "current_hash ~ '^[0-9a-f]{64}$'",
        ),
        (
            r.int("version").is_some_and(|v| v >= 0),
            "targets_version_check",
            "version >= 0",
        ),
        (
            device.is_none_or(|v| v >= 0),
            "targets_workspace_root_device_check",
            "workspace_root_device >= 0",
        ),
        (
            inode.is_none_or(|v| v >= 0),
            "targets_workspace_root_inode_check",
            "workspace_root_inode >= 0",
        ),
        (
            baseline.as_deref().is_none_or(|h| is_lower_hex(h, 64)),
            "targets_workspace_baseline_sha256_check",
            "workspace_baseline_sha256 ~ '^[0-9a-f]{64}$'",
        ),
        (
            bytes.is_none_or(|v| v >= 0),
            "targets_workspace_baseline_bytes_check",
            "workspace_baseline_bytes >= 0",
        ),
        (
            nonce.as_deref().is_none_or(|h| is_lower_hex(h, 32)),
            "targets_workspace_binding_nonce_check",
            "workspace_binding_nonce ~ '^[0-9a-f]{32}$'",
        ),
        (
            proof.as_deref().is_none_or(|h| is_lower_hex(h, 64)),
            "targets_workspace_binding_proof_check",
            "workspace_binding_proof ~ '^[0-9a-f]{64}$'",
        ),
        (
            binding.iter().all(|b| *b) || binding.iter().all(|b| !*b),
            "targets_check",
            "num_nulls(workspace_root_device, workspace_root_inode, workspace_relative_path, \
             workspace_baseline_sha256, workspace_baseline_bytes) IN (0, 5)",
        ),
        (
            nonce.is_some() == proof.is_some(),
            "targets_check1",
            "num_nulls(workspace_binding_nonce, workspace_binding_proof) IN (0, 2)",
        ),
        (
            nonce.is_none() || device.is_some(),
            "targets_check2",
            "workspace_binding_nonce IS NULL OR workspace_root_device IS NOT NULL",
        ),
    ];
    first_broken(&rules)
}

fn attempt_rule(r: &Row) -> Broken {
    let status = r.text("status");
    let stage = r.text("failure_stage");
    let rules: [(bool, &str, &str); 4] = [
        (
            // A NULL status is refused by NOT NULL; a CHECK passes NULL.
            status
                .as_deref()
                .is_none_or(|s| s == "accepted" || s == "rejected"),
            "pdcp_logs_status_check",
            "status IN ('accepted', 'rejected')",
        ),
        (
            stage.as_deref().is_none_or(|s| {
                matches!(
                    s,
                    "PROTOCOL_VALIDATION" | "PRECONDITION_GUARD" | "TRANSACTION_APPLICABILITY"
                )
            }),
            "pdcp_logs_failure_stage_check",
            "failure_stage IN ('PROTOCOL_VALIDATION', 'PRECONDITION_GUARD', \
             'TRANSACTION_APPLICABILITY')",
        ),
        (
            r.int("attempt").is_none_or(|a| a >= 1),
            "pdcp_logs_attempt_check",
            "attempt >= 1",
        ),
        (
            status.as_deref().is_none_or(|s| {
                (s == "accepted") == (r.is_set("after_version") && !r.is_set("failure_reason"))
            }),
            "pdcp_logs_check",
            "(status = 'accepted') = (after_version IS NOT NULL AND failure_reason IS NULL)",
        ),
    ];
    first_broken(&rules)
}

fn ledger_rule(r: &Row) -> Broken {
    let rules: [(bool, &str, &str); 1] = [(
        r.int("change_index").is_none_or(|i| i >= 1),
        "manifest_ledger_change_index_check",
        "change_index >= 1",
    )];
    first_broken(&rules)
}

fn first_broken(rules: &[(bool, &'static str, &'static str)]) -> Broken {
    rules
        .iter()
        .find(|(holds, _, _)| !holds)
        .map(|&(_, name, text)| (name, text))
}

/// The new row, deformed once and read by column name: an upgraded database may number its
/// columns differently from a fresh one (dropped columns keep their numbers).
struct Row {
    tupdesc: pg_sys::TupleDesc,
    values: Vec<pg_sys::Datum>,
    nulls: Vec<bool>,
}

impl Row {
    /// # Safety
    /// `tuple` is a row of the relation whose descriptor is `tupdesc`, both valid for the call.
    unsafe fn deform(tuple: pg_sys::HeapTuple, tupdesc: pg_sys::TupleDesc) -> Row {
        // SAFETY: per the caller; heap_deform_tuple fills natts entries of each array.
        unsafe {
            let natts = (*tupdesc).natts as usize;
            let mut values = vec![pg_sys::Datum::from(0usize); natts];
            let mut nulls = vec![true; natts];
            pg_sys::heap_deform_tuple(tuple, tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
            Row {
                tupdesc,
                values,
                nulls,
            }
        }
    }

    fn datum(&self, column: &str) -> Option<(pg_sys::Datum, pg_sys::Oid)> {
        for i in 0..self.values.len() {
            // SAFETY: i < natts, the descriptor's attribute count.
            let att = unsafe { &*(*self.tupdesc).attrs.as_ptr().add(i) };
            // SAFETY: attname is a NUL-terminated NameData.
            let name = unsafe { CStr::from_ptr(att.attname.data.as_ptr()) };
            if att.attisdropped || name.to_bytes() != column.as_bytes() {
                continue;
            }
            return (!self.nulls[i]).then_some((self.values[i], att.atttypid));
        }
        error!("patchdiff.check_row(): the row has no column \"{column}\"")
    }

    fn is_set(&self, column: &str) -> bool {
        self.datum(column).is_some()
    }

    fn int(&self, column: &str) -> Option<i64> {
        self.datum(column).map(|(d, oid)| match oid {
            pg_sys::INT8OID => d.value() as i64,
            pg_sys::INT4OID => d.value() as i32 as i64,
            _ => error!("patchdiff.check_row(): column \"{column}\" is not an integer"),
        })
    }

    fn text(&self, column: &str) -> Option<String> {
        self.datum(column).map(|(d, oid)| {
            if oid != pg_sys::TEXTOID {
                error!("patchdiff.check_row(): column \"{column}\" is not text");
            }
            // SAFETY: a non-null text datum; detoasting copies a compressed or external value
            // into the current memory context.
            unsafe {
                let v = pg_sys::pg_detoast_datum_packed(d.cast_mut_ptr());
                String::from_utf8_lossy(pgrx::varlena_to_byte_slice(v)).into_owned()
            }
        })
    }
}
