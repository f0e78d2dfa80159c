//! Observed submissions (contract "patchdiff_submit_observed_operations"): tx/2 operations
//! confined to server-issued structural observations, in the single form (absolute spans inside
//! one running scope) and the batch form (patchdiff-observed-batch/1: one group per observed
//! scope, each on its own scope-local sequential buffer), and strict observation mode.
//!
//! The extension calls, under the target's row lock: [`parse_submit_observed_operations`],
//! [`submit::prepare`], [`submit::recover_or_conflict`] when the request key is already stored
//! (then [`recovered_fields`] on a recovered answer; recovery needs no observation row), else it
//! locks and reads the rows named by [`requested_observations`] and calls [`evaluate`]; it
//! writes the returned [`Attempt`] with its [`Attempt::observations`] links and answers with
//! [`respond`]. Replay goes through [`crate::history::replay`], which calls [`crate::history::replay::replay_single`] and
//! [`crate::history::replay::replay_batch`] with the rows linked to each accepted log.
//!
//! Choices where the contract is silent:
//! - The forms are told apart by which argument names are present (even with a null value):
//!   `observation_id` / `operations` name the single form, `observation_bundle_id` / `groups`
//!   the batch form. Names of both is `invalid_argument` / `observed_form_conflict`, with no
//!   row: the request names no single route whose audit could record it. Neither bundle field
//!   means the single form, whose missing `observation_id` is the audited
//!   `OBSERVATION_REQUIRED`. As for every submission tool, `intent` and the form's list
//!   (`operations`, `groups`) are required argument names.
//! - The single form's record is tx/2 with `observation_id` (as sent); its runtime follows
//!   [`tx2::runtime_for`], so an insertion without guard keys runs under 0.3.0 and is then
//!   refused `OBSERVED_INSERTION_GUARDS_REQUIRED`. Group operations always parse under 0.5.0
//!   (span context), since observed insertions need both guards.
//! - Observation checks are check-major: each check of the contract's order runs over the
//!   bundle and every group before the next check, so the most fundamental fault is named.
//!   The bundle check (`OBSERVATION_BUNDLE_MISMATCH`) runs after `OBSERVATION_TARGET_MISMATCH`
//!   and before `OBSERVATION_CYCLE_MISMATCH`. A missing `observation_bundle_id` is
//!   `OBSERVATION_REQUIRED`, a malformed one `INVALID_OBSERVATION_ID`, both with `field`.
//! - The single form may use an observation a bundle issued.
//! - Scope re-verification failures (bounds past the text, a scope hash that does not name the
//!   scope's text, overlapping scopes) are `context_invalid` at PRECONDITION_GUARD with
//!   `OBSERVED_SCOPE_MISMATCH` / `OBSERVED_SCOPES_OVERLAP`: the rows are inconsistent, not the
//!   target moved on (that is a stale observation).
//! - Any span guard (`expected_before` / `expected_after`) that reaches past the running scope
//!   is `OPERATION_OUTSIDE_OBSERVED_SCOPE`, for replacements as for insertions.
//! - Batch change IDs default to `chg_NNN` numbered across the whole batch, so that groups
//!   without explicit IDs do not collide; explicit IDs must be unique across the batch.
//! - Single-form facts are exactly tx/2 facts (absolute sequential coordinates). Batch facts add
//!   `group_index`, `observation_id`, `span_basis: "scope_local"` and `scope_start`.
//! - A batch rejection's `failure_context` is the failing group's scope-local buffer (stage
//!   `canonical_target` before its first change, `intermediate_buffer` after), and its near-miss
//!   input is that buffer; a single-form rejection keeps absolute coordinates of the whole text.

use crate::contract::args::{ArgError, Args};
use crate::contract::invalid_text;
use crate::contract::json::type_name;
use crate::contract::limits::{
    OBSERVED_MAX_BATCH_OPERATIONS, OBSERVED_MAX_GROUPS, OBSERVED_SUMMARY_SYMBOL_CHARS,
};
use crate::contract::uuid::canonical_uuid;
use crate::contract::words::{DiagnosticCode, FailureReason, Status};
use crate::evidence::rejection::{Rejection, Stage, context};
use crate::format::common::{self, ObservedFact};
use crate::format::protocol::{Protocol, Runtime};
use crate::format::sequential::{self, Applied, Confinement, Op};
use crate::format::tx2::{self, Operation};
use crate::scope::observation::{ObservationLink, ObservationRow};
use crate::submission::respond::{GroupSummary, RejectedResponse, SubmissionResponse};
use crate::submission::submit::{self, Attempt, Identity, Parent, Required, Submission};
use crate::target::TargetView;
use crate::text::warnings;
use crate::text::{char_len, head_chars, sha256_hex};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

/// The durable (protocol_version, runtime_version) pair of an observed batch.
pub const BATCH_PROTOCOL: &str = Protocol::ObservedBatch.as_str();
pub const BATCH_RUNTIME: &str = Runtime::ObservedBatchR1.as_str();

/// "Batch form": 1..32 groups, at most 128 operations in total.
pub const MAX_GROUPS: usize = OBSERVED_MAX_GROUPS;
pub const MAX_BATCH_OPERATIONS: usize = OBSERVED_MAX_BATCH_OPERATIONS;

/// Every argument of both forms.
pub const SUBMIT_OBSERVED_ARGS: &[&str] = &[
    "target_file_id",
    "observation_id",
    "observation_bundle_id",
    "groups",
    "intent",
    "operations",
    "expected_target_version",
    "expected_current_hash",
    "source",
    "parent_pdcp_log_id",
    "attempt",
    "client_request_id",
    "include_correlation_id",
];
/// Required names of both forms; the single form adds `operations`, the batch form `groups`.
pub const SUBMIT_OBSERVED_REQUIRED: &[&str] = &["target_file_id", "intent"];
/// The argument names of each form.
pub const SINGLE_FORM_ARGS: &[&str] = &["observation_id", "operations"];
pub const BATCH_FORM_ARGS: &[&str] = &["observation_bundle_id", "groups"];

/// The keys of one batch group.
pub const GROUP_FIELDS: &[&str] = &["observation_id", "operations"];

/// `span_basis` of batch facts and rejections.
pub const SCOPE_LOCAL: &str = "scope_local";

pub(crate) fn ids_equal(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Parses `patchdiff_submit_observed_operations` arguments. Only what cannot be audited against
/// a target is an `invalid_argument`: the object itself, names (unknown, missing, or of both
/// forms: `observed_form_conflict`), the target ID, `source` and `include_correlation_id`.
/// Everything else is judged, and logged, by [`evaluate`].
pub fn parse_submit_observed_operations(text: &str) -> Result<Submission, ArgError> {
    let a = Args::parse_proposal(text, SUBMIT_OBSERVED_ARGS, SUBMIT_OBSERVED_REQUIRED)?;
    let single: Vec<&str> = SINGLE_FORM_ARGS
        .iter()
        .copied()
        .filter(|k| a.has(k))
        .collect();
    let batch: Vec<&str> = BATCH_FORM_ARGS
        .iter()
        .copied()
        .filter(|k| a.has(k))
        .collect();
    if !single.is_empty() && !batch.is_empty() {
        return Err(ArgError::new(
            "observed_form_conflict",
            format!(
                "single-form arguments ({}) and batch-form arguments ({}) are mutually exclusive; send observation_id with operations, or observation_bundle_id with groups",
                single.join(", "),
                batch.join(", ")
            ),
        )
        .with("single_form_arguments", json!(single))
        .with("batch_form_arguments", json!(batch)));
    }
    let is_batch = !batch.is_empty();
    let list = if is_batch { "groups" } else { "operations" };
    if !a.has(list) {
        // Checked like every other required name, after the target ID would be: the target ID
        // is checked first so that a bad ID is never masked.
        let protocol = if is_batch {
            BATCH_PROTOCOL
        } else {
            tx2::PROTOCOL
        };
        let runtime = if is_batch {
            BATCH_RUNTIME
        } else {
            tx2::runtime_for(a.get("operations"))
        };
        a.proposal_target_file_id(protocol, runtime)?;
        return Err(ArgError::new(
            "missing_argument",
            format!("missing required argument(s): {list}"),
        )
        .with("missing_arguments", json!([list])));
    }
    let mut record = Map::new();
    if is_batch {
        record.insert("protocol_version".into(), json!(BATCH_PROTOCOL));
        for k in ["intent", "observation_bundle_id", "groups"] {
            if let Some(v) = a.get(k) {
                record.insert(k.into(), v.clone());
            }
        }
        submit::envelope(&a, record, BATCH_PROTOCOL, BATCH_RUNTIME)
    } else {
        record.insert("protocol_version".into(), json!(tx2::PROTOCOL));
        for k in ["intent", "operations", "observation_id"] {
            if let Some(v) = a.get(k) {
                record.insert(k.into(), v.clone());
            }
        }
        let runtime = tx2::runtime_for(record.get("operations"));
        submit::envelope(&a, record, tx2::PROTOCOL, runtime)
    }
}

fn is_batch(sub: &Submission) -> bool {
    sub.protocol_version == BATCH_PROTOCOL
}

/// The canonical observation IDs the extension must lock and read for [`evaluate`]: the single
/// form's one ID, or each group's, deduplicated, in order. Only valid UUID strings are listed;
/// a batch of more than [`MAX_GROUPS`] groups lists none (it is refused before any row is
/// consulted).
pub fn requested_observations(sub: &Submission) -> Vec<String> {
    let raw: Vec<&Value> = if is_batch(sub) {
        match sub.record.get("groups") {
            Some(Value::Array(gs)) if gs.len() <= MAX_GROUPS => {
                gs.iter().filter_map(|g| g.get("observation_id")).collect()
            }
            _ => Vec::new(),
        }
    } else {
        sub.record.get("observation_id").into_iter().collect()
    };
    let mut out: Vec<String> = Vec::new();
    for id in raw
        .iter()
        .filter_map(|v| v.as_str())
        .filter_map(canonical_uuid)
    {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

/// A rejection and, for a batch group, the scope-local failure context that replaces the
/// whole-text one.
pub(crate) struct Fail {
    pub(crate) r: Rejection,
    pub(crate) failure_context: Option<Value>,
}

impl From<Rejection> for Fail {
    fn from(r: Rejection) -> Self {
        Fail {
            r,
            failure_context: None,
        }
    }
}

/// One parsed group of a batch record.
#[derive(Debug, Clone)]
pub(crate) struct Group<'r> {
    pub(crate) observation_id: Option<&'r Value>,
    pub(crate) ops: Vec<Operation>,
}

/// A validated proposal of either form.
enum Proposal<'r> {
    Single(Vec<Operation>),
    Batch(Vec<Group<'r>>),
}

/// Judges a fresh observed submission against the locked target state, its active editing
/// cycle and the observation rows read for [`requested_observations`] (with their consumption).
///
/// PROTOCOL_VALIDATION: what [`submit::judge`] checks before the record, both guards required
/// (`OBSERVED_GUARDS_REQUIRED`) and, for a batch, the request key (`CLIENT_REQUEST_ID_REQUIRED`);
/// the record; the observations in the contract's order. PRECONDITION_GUARD: stale
/// observations, the explicit guards, the re-verified scopes. TRANSACTION_APPLICABILITY: the
/// confined application. An acceptance carries the observation links to write.
pub fn evaluate(
    sub: &Submission,
    id: &Identity,
    parent: &Parent,
    start: &TargetView,
    active_cycle: &str,
    rows: &[ObservationRow],
) -> Attempt {
    let base = submit::base_attempt(sub, id, start);
    match judge(sub, parent, start, active_cycle, rows, base.attempt) {
        Ok((applied, links)) => {
            let after_hash = applied.content_sha256();
            Attempt {
                status: Status::Accepted,
                after_version: Some(start.version + 1),
                after_hash: Some(after_hash),
                new_content: Some(applied.content),
                changes: applied.changes,
                diagnostic: warnings::stored_diagnostic(&applied.warnings),
                warnings: applied.warnings,
                observations: links,
                ..base
            }
        }
        Err(f) => {
            let mut a = submit::rejected(base, &f.r, sub.protocol_version, start);
            if let (Some(ctx), Some(Value::Object(d))) = (f.failure_context, &mut a.diagnostic) {
                d.insert("failure_context".into(), ctx);
            }
            a
        }
    }
}

fn judge(
    sub: &Submission,
    parent: &Parent,
    start: &TargetView,
    active_cycle: &str,
    rows: &[ObservationRow],
    attempt_no: Option<i64>,
) -> Result<(Applied, Vec<ObservationLink>), Fail> {
    let batch = is_batch(sub);
    let required = Required {
        both_guards: true,
        request_key: batch,
    };
    let guards = submit::preflight(sub, parent, attempt_no, required)?;
    let proposal = parse_proposal(&sub.record, batch, sub.runtime_version)?;
    let found = check_observations(sub, &proposal, start, active_cycle, rows)?;
    submit::check_guards(&guards, start)?;
    let scoped: Vec<&ObservationRow> = found.iter().map(|(_, r)| *r).collect();
    verify_scopes(start.content, &scoped).map_err(|(code, detail, g)| {
        let mut r = Rejection::coded(
            FailureReason::ContextInvalid,
            Stage::PreconditionGuard,
            code,
            detail,
        );
        if let Some((g, id)) = g.and_then(|g| found.get(g).map(|f| (g, &f.0))) {
            if batch {
                r.fields.insert("group_index".into(), json!(g + 1));
            }
            r.fields.insert("observation_id".into(), json!(id));
        }
        r
    })?;
    let applied = match &proposal {
        Proposal::Single(ops) => apply_single(start, ops, found[0].1, &found[0].0)?,
        Proposal::Batch(groups) => apply_batch(start, groups, &found)?,
    };
    let links = found
        .iter()
        .enumerate()
        .map(|(i, (id, _))| ObservationLink {
            observation_id: id.clone(),
            group_index: batch.then_some(i + 1),
        })
        .collect();
    Ok((applied, links))
}

fn parse_proposal<'r>(
    record: &'r Map<String, Value>,
    batch: bool,
    runtime: &str,
) -> Result<Proposal<'r>, Rejection> {
    if batch {
        parse_batch(record).map(Proposal::Batch)
    } else {
        let (_, ops) = tx2::parse(record.get("intent"), record.get("operations"), runtime)?;
        Ok(Proposal::Single(ops))
    }
}

fn group_block(g: usize, field: &str, what: String) -> Rejection {
    crate::format::common::malformed_field(
        DiagnosticCode::InvalidGroup,
        &format!("groups[{}]", g - 1),
        ("group_index", g),
        field,
        what,
    )
}

/// A group's rejection from the tx/2 parser: named by its group (1-based `group_index` after
/// `code`) and path.
fn in_group(mut r: Rejection, g: usize) -> Rejection {
    let at = r
        .fields
        .keys()
        .position(|k| k == "code")
        .map_or(0, |i| i + 1);
    r.fields.shift_insert(at, "group_index".into(), json!(g));
    r.detail = format!("groups[{}].{}", g - 1, r.detail);
    r
}

/// The canonical spelling of an observation ID for duplicate detection: a UUID in lowercase,
/// any other string as sent; other values are judged later (`INVALID_OBSERVATION_ID`).
fn id_key(v: Option<&Value>) -> Option<String> {
    let s = v?.as_str()?;
    Some(canonical_uuid(s).unwrap_or_else(|| s.to_owned()))
}

/// Validates a batch record's `intent` and `groups`: 1..32 groups, each exactly
/// `{observation_id, operations}` with non-empty tx/2 operations (runtime 0.5.0), unique
/// observation IDs, at most 128 operations, change IDs unique across the batch (defaults
/// numbered across the batch).
pub(crate) fn parse_batch(record: &Map<String, Value>) -> Result<Vec<Group<'_>>, Rejection> {
    const GROUPS: common::List = common::List {
        name: "groups",
        item: "group",
        missing: DiagnosticCode::MissingGroups,
        empty: DiagnosticCode::EmptyGroups,
        not_array: DiagnosticCode::InvalidGroups,
        code: DiagnosticCode::InvalidGroup,
        index_key: "group_index",
    };
    let intent = record.get("intent");
    common::parse_intent(intent)?;
    let list = common::parse_list(GROUPS, record.get("groups"))?;
    if list.len() > MAX_GROUPS {
        return Err(common::malformed(
            FailureReason::ManifestMalformed,
            DiagnosticCode::TooManyGroups,
            format!(
                "groups has {} groups; a batch has at most {MAX_GROUPS}.",
                list.len()
            ),
        )
        .field("group_count", json!(list.len()))
        .field("limit", json!(MAX_GROUPS)));
    }
    let mut shapes: Vec<(Option<&Value>, &Vec<Value>)> = Vec::with_capacity(list.len());
    for (i, raw) in list.iter().enumerate() {
        let g = i + 1;
        let Value::Object(o) = raw else {
            return Err(group_block(
                g,
                "*",
                format!("a group must be an object, not {}", type_name(raw)),
            ));
        };
        if let Some(k) = o
            .keys()
            .filter(|k| !GROUP_FIELDS.contains(&k.as_str()))
            .min()
        {
            return Err(group_block(
                g,
                k,
                "unknown field; a group is exactly {observation_id, operations}".into(),
            ));
        }
        let ops =
            common::parse_list(tx2::OPERATIONS, o.get("operations")).map_err(|r| in_group(r, g))?;
        shapes.push((o.get("observation_id"), ops));
    }
    let mut seen: Vec<(String, usize)> = Vec::new();
    for (i, (id, _)) in shapes.iter().enumerate() {
        if let Some(k) = id_key(*id) {
            if let Some((_, first)) = seen.iter().find(|(s, _)| *s == k) {
                return Err(group_block(
                    i + 1,
                    "observation_id",
                    format!("duplicate observation_id, already used by group_index {first}"),
                ));
            }
            seen.push((k, i + 1));
        }
    }
    let total: usize = shapes.iter().map(|(_, ops)| ops.len()).sum();
    if total > MAX_BATCH_OPERATIONS {
        return Err(common::malformed(
            FailureReason::ManifestMalformed,
            DiagnosticCode::TooManyOperations,
            format!("groups hold {total} operations; a batch has at most {MAX_BATCH_OPERATIONS}."),
        )
        .field("operation_count", json!(total))
        .field("limit", json!(MAX_BATCH_OPERATIONS)));
    }
    let mut out = Vec::with_capacity(shapes.len());
    let mut ids: HashSet<String> = HashSet::new();
    let mut n = 0usize;
    for (i, (id, raw_ops)) in shapes.iter().enumerate() {
        let g = i + 1;
        let value = Value::Array((*raw_ops).clone());
        let (_, mut ops) = tx2::parse(intent, Some(&value), tx2::RUNTIME_SPAN_CONTEXT)
            .map_err(|r| in_group(r, g))?;
        for (j, op) in ops.iter_mut().enumerate() {
            n += 1;
            if raw_ops[j].get("change_id").is_none_or(Value::is_null) {
                let default = format!("chg_{n:03}");
                match op {
                    Operation::Match(e) => e.change_id = default,
                    Operation::Span(s) => s.change_id = default,
                }
            }
            let cid = op.as_op().change_id().to_owned();
            if !ids.insert(cid.clone()) {
                return Err(in_group(
                    common::block(
                        tx2::OPERATIONS,
                        j,
                        "change_id",
                        format!("duplicate change_id {cid:?} in the batch"),
                    ),
                    g,
                ));
            }
        }
        out.push(Group {
            observation_id: *id,
            ops,
        });
    }
    Ok(out)
}

/// A submitted observation reference: the bundle of a batch (`group: None`) or one
/// observation (`group` 1-based in a batch, `None` in the single form).
struct Ref<'a> {
    group: Option<usize>,
    field: &'static str,
    raw: Option<&'a Value>,
}

fn observation_rejection(
    reason: FailureReason,
    stage: Stage,
    code: DiagnosticCode,
    detail: String,
    group: Option<usize>,
) -> Rejection {
    let r = Rejection::coded(reason, stage, code, detail);
    match group {
        Some(g) => r.field("group_index", json!(g)),
        None => r,
    }
}

fn whose(group: Option<usize>, field: &str) -> String {
    match group {
        Some(g) => format!("groups[{}].{field}", g - 1),
        None => field.to_owned(),
    }
}

/// The observation checks, in the contract's order: missing, malformed, unknown, cross-target,
/// (batch) other bundle, closed cycle, already consumed, stale version, stale hash. Each check
/// covers the bundle and every group before the next one. Returns each observation (canonical
/// ID and row) in group order.
fn check_observations<'a>(
    sub: &Submission,
    proposal: &Proposal,
    start: &TargetView,
    active_cycle: &str,
    rows: &'a [ObservationRow],
) -> Result<Vec<(String, &'a ObservationRow)>, Rejection> {
    let mut refs: Vec<Ref> = Vec::new();
    match proposal {
        Proposal::Single(_) => refs.push(Ref {
            group: None,
            field: "observation_id",
            raw: sub.record.get("observation_id"),
        }),
        Proposal::Batch(groups) => {
            refs.push(Ref {
                group: None,
                field: "observation_bundle_id",
                raw: sub.record.get("observation_bundle_id"),
            });
            for (i, g) in groups.iter().enumerate() {
                refs.push(Ref {
                    group: Some(i + 1),
                    field: "observation_id",
                    raw: g.observation_id,
                });
            }
        }
    }
    let pv = Stage::ProtocolValidation;
    for r in &refs {
        if r.raw.is_none_or(Value::is_null) {
            let what = whose(r.group, r.field);
            return Err(observation_rejection(
                FailureReason::ContextMissing,
                pv,
                DiagnosticCode::ObservationRequired,
                format!(
                    "{what} is required: observe the scope with patchdiff_observe_scope and submit the observation it issues."
                ),
                r.group,
            )
            .field("field", json!(r.field)));
        }
    }
    let mut canonical: Vec<String> = Vec::with_capacity(refs.len());
    for r in &refs {
        match r.raw.and_then(Value::as_str).and_then(canonical_uuid) {
            Some(id) => canonical.push(id),
            None => {
                let what = whose(r.group, r.field);
                let got = r.raw.map_or("null", type_name);
                return Err(observation_rejection(
                    FailureReason::ContextInvalid,
                    pv,
                    DiagnosticCode::InvalidObservationId,
                    format!(
                        "{what} must be a hyphenated UUID string (got a {got} that is not one)."
                    ),
                    r.group,
                )
                .field("field", json!(r.field)));
            }
        }
    }
    // The observations proper: the bundle is the first reference of a batch.
    let (bundle, obs): (Option<&String>, Vec<(Option<usize>, &String)>) = match proposal {
        Proposal::Single(_) => (None, vec![(None, &canonical[0])]),
        Proposal::Batch(_) => (
            Some(&canonical[0]),
            refs[1..]
                .iter()
                .zip(&canonical[1..])
                .map(|(r, id)| (r.group, id))
                .collect(),
        ),
    };
    let mut found: Vec<(String, &ObservationRow)> = Vec::with_capacity(obs.len());
    for (g, id) in &obs {
        match rows.iter().find(|r| ids_equal(&r.observation_id, id)) {
            Some(row) => found.push(((*id).clone(), row)),
            None => {
                return Err(observation_rejection(
                    FailureReason::ContextInvalid,
                    pv,
                    DiagnosticCode::UnknownObservationId,
                    format!(
                        "{} names no observation; observe the scope with patchdiff_observe_scope.",
                        whose(*g, "observation_id")
                    ),
                    *g,
                )
                .field("observation_id", json!(id)));
            }
        }
    }
    let group_of = |i: usize| obs[i].0;
    let fail = |i: usize, reason, stage, code: DiagnosticCode, detail: String| {
        observation_rejection(reason, stage, code, detail, group_of(i))
            .field("observation_id", json!(found[i].0))
    };
    // The other target is not named: this rejection is logged on the submission's target, whose
    // every reader sees it, and the observed target may be one only the submitter can read
    // (helper-71). The submitter knows which target it observed.
    for (i, (_, row)) in found.iter().enumerate() {
        if !ids_equal(&row.target_file_id, &sub.target_file_id) {
            return Err(fail(
                i,
                FailureReason::ContextInvalid,
                pv,
                DiagnosticCode::ObservationTargetMismatch,
                "The observation was issued for another target.".into(),
            ));
        }
    }
    if let Some(bundle) = bundle {
        for (i, (_, row)) in found.iter().enumerate() {
            if !row
                .observation_bundle_id
                .as_deref()
                .is_some_and(|b| ids_equal(b, bundle))
            {
                return Err(fail(
                    i,
                    FailureReason::ContextInvalid,
                    pv,
                    DiagnosticCode::ObservationBundleMismatch,
                    "The observation does not belong to observation_bundle_id; every group must use an observation of the bundle.".into(),
                )
                .field("observation_bundle_id", json!(bundle))
                .field("observation_issued_bundle_id", json!(row.observation_bundle_id)));
            }
        }
    }
    for (i, (_, row)) in found.iter().enumerate() {
        if !ids_equal(&row.editing_cycle_id, active_cycle) {
            return Err(fail(
                i,
                FailureReason::ContextInvalid,
                pv,
                DiagnosticCode::ObservationCycleMismatch,
                "The observation belongs to an editing cycle a SAVE has closed; observe the scope again.".into(),
            )
            .field("observation_editing_cycle_id", json!(row.editing_cycle_id))
            .field("active_editing_cycle_id", json!(active_cycle)));
        }
    }
    for (i, (_, row)) in found.iter().enumerate() {
        if let Some(by) = &row.consumed_by_pdcp_log_id {
            return Err(fail(
                i,
                FailureReason::ContextInvalid,
                pv,
                DiagnosticCode::ObservationAlreadyConsumed,
                "The observation was already consumed by an accepted attempt; observe the scope again.".into(),
            )
            .field("consumed_by_pdcp_log_id", json!(by)));
        }
    }
    let pg = Stage::PreconditionGuard;
    for (i, (_, row)) in found.iter().enumerate() {
        if row.target_version != start.version {
            return Err(fail(
                i,
                FailureReason::TargetVersionMismatch,
                pg,
                DiagnosticCode::StaleObservationVersion,
                format!(
                    "The observation was issued at target version {}; the target is at version {}. Observe the scope again.",
                    row.target_version, start.version
                ),
            )
            .field("observation_target_version", json!(row.target_version))
            .field("current_version", json!(start.version)));
        }
    }
    for (i, (_, row)) in found.iter().enumerate() {
        if row.target_current_hash != start.current_hash {
            return Err(fail(
                i,
                FailureReason::TargetHashMismatch,
                pg,
                DiagnosticCode::StaleObservationHash,
                "The observation was issued against another target hash; observe the scope again."
                    .into(),
            )
            .field("observation_target_hash", json!(row.target_current_hash))
            .field("current_hash", json!(start.current_hash)));
        }
    }
    Ok(found)
}

/// The byte ranges of code-point ranges of `content`, all found in one forward pass (a batch
/// has up to 32 scopes in a 1 MiB text: one scan per scope would dominate the commit).
/// Ranges past the end of the text are clamped to it; callers check bounds first.
fn scope_byte_ranges(content: &str, ranges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut points: Vec<usize> = ranges.iter().flat_map(|&(s, e)| [s, e]).collect();
    points.sort_unstable();
    points.dedup();
    let bytes = crate::scope::observation::byte_offsets(content, &points);
    let at = |cp: usize| bytes[points.binary_search(&cp).unwrap_or(0)];
    ranges.iter().map(|&(s, e)| (at(s), at(e))).collect()
}

/// The re-verification of every participating scope against the text: bounds inside it, its
/// SHA-256 the recorded `observed_scope_hash`, and (several) pairwise disjoint. The target's
/// version and hash already equal the observations', so the text is the one Waymark parsed and
/// needs no new parse. Errors are `(code, detail, index of the observation)`.
pub(crate) fn verify_scopes(
    content: &str,
    rows: &[&ObservationRow],
) -> Result<(), (DiagnosticCode, String, Option<usize>)> {
    let len = char_len(content);
    let spans: Vec<(usize, usize)> = rows
        .iter()
        .map(|r| (r.scope_start.min(len), r.scope_end.min(len)))
        .collect();
    let bytes = scope_byte_ranges(content, &spans);
    for (i, row) in rows.iter().enumerate() {
        if row.scope_start > row.scope_end || row.scope_end > len {
            return Err((
                DiagnosticCode::ObservedScopeMismatch,
                format!(
                    "The observed scope [{}, {}) does not lie inside the target's {len} code points.",
                    row.scope_start, row.scope_end
                ),
                Some(i),
            ));
        }
        let hash = sha256_hex(&content[bytes[i].0..bytes[i].1]);
        if hash != row.observed_scope_hash {
            return Err((
                DiagnosticCode::ObservedScopeMismatch,
                format!(
                    "The text of the observed scope [{}, {}) no longer hashes to its observed_scope_hash.",
                    row.scope_start, row.scope_end
                ),
                Some(i),
            ));
        }
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| (rows[i].scope_start, rows[i].scope_end));
    for w in order.windows(2) {
        let (a, b) = (rows[w[0]], rows[w[1]]);
        if b.scope_start < a.scope_end {
            return Err((
                DiagnosticCode::ObservedScopesOverlap,
                format!(
                    "The observed scopes [{}, {}) and [{}, {}) overlap; a batch edits disjoint scopes.",
                    a.scope_start, a.scope_end, b.scope_start, b.scope_end
                ),
                Some(w[1]),
            ));
        }
    }
    Ok(())
}

/// The single form: the operations on the whole text, confined to the observation's running
/// scope; spans arrive absolute and facts stay absolute.
pub(crate) fn apply_single(
    start: &TargetView,
    ops: &[Operation],
    row: &ObservationRow,
    observation_id: &str,
) -> Result<Applied, Rejection> {
    let ops: Vec<Op> = ops.iter().map(Operation::as_op).collect();
    let scope = Confinement {
        start: row.scope_start,
        end: row.scope_end,
    };
    sequential::apply_in(start, &ops, Some(scope)).map_err(|mut r| {
        r.fields
            .insert("observation_id".into(), json!(observation_id));
        r.fields
            .insert("scope_start".into(), json!(row.scope_start));
        r.fields.insert("scope_end".into(), json!(row.scope_end));
        r
    })
}

/// The batch form: each group, in submitted order, on its own scope-local sequential buffer;
/// then the new content assembled by replacing each scope's original span, in descending
/// original order. Change indexes count across the batch; the no-op transaction warning is
/// judged on the whole text.
pub(crate) fn apply_batch(
    start: &TargetView,
    groups: &[Group],
    found: &[(String, &ObservationRow)],
) -> Result<Applied, Fail> {
    let mut changes = Vec::new();
    let mut ws = Vec::new();
    let mut texts: Vec<String> = Vec::with_capacity(groups.len());
    let mut offset = 0usize;
    let spans: Vec<(usize, usize)> = found
        .iter()
        .map(|(_, r)| (r.scope_start, r.scope_end))
        .collect();
    let bytes = scope_byte_ranges(start.content, &spans);
    for (i, (group, (id, row))) in groups.iter().zip(found).enumerate() {
        let g = i + 1;
        let scope_text = &start.content[bytes[i].0..bytes[i].1];
        let local = TargetView {
            content: scope_text,
            ..*start
        };
        let ops: Vec<Op> = group.ops.iter().map(Operation::as_op).collect();
        let scope = Confinement {
            start: 0,
            end: char_len(scope_text),
        };
        match sequential::apply_in(&local, &ops, Some(scope)) {
            Ok(a) => {
                for mut f in a.changes {
                    f.change_index += offset;
                    f.observed = Some(ObservedFact {
                        group_index: g,
                        observation_id: id.clone(),
                        span_basis: SCOPE_LOCAL,
                        scope_start: row.scope_start,
                    });
                    changes.push(f);
                }
                for mut w in a.warnings {
                    if w.code == warnings::NO_OP_TRANSACTION {
                        continue;
                    }
                    if let Some(k) = w.fields.get("change_index").and_then(Value::as_u64) {
                        w.fields
                            .insert("change_index".into(), json!(k as usize + offset));
                    }
                    w.fields.insert("group_index".into(), json!(g));
                    ws.push(w);
                }
                offset += ops.len();
                texts.push(a.content);
            }
            Err(mut r) => {
                let (buf, prior) = r
                    .intermediate
                    .clone()
                    .unwrap_or_else(|| (scope_text.to_owned(), 0));
                let stage = if prior > 0 {
                    "intermediate_buffer"
                } else {
                    "canonical_target"
                };
                let ctx = context(&buf, stage, prior, r.location, start);
                r.detail = format!("Group {g} (scope-local coordinates): {}", r.detail);
                for (k, v) in [
                    ("group_index", json!(g)),
                    ("observation_id", json!(id)),
                    ("span_basis", json!(SCOPE_LOCAL)),
                    ("scope_start", json!(row.scope_start)),
                    ("scope_end", json!(row.scope_end)),
                ] {
                    r.fields.insert(k.into(), v);
                }
                return Err(Fail {
                    r,
                    failure_context: Some(ctx),
                });
            }
        }
    }
    // Each scope's original span replaced by its new text: the disjoint spans in ascending
    // order, copied once (equal to replacing them in descending original order).
    let mut order: Vec<usize> = (0..found.len()).collect();
    order.sort_by_key(|&i| bytes[i]);
    let grown: usize = texts.iter().map(String::len).sum();
    let mut content = String::with_capacity(start.content.len() + grown);
    let mut from = 0;
    for i in order {
        let (b0, b1) = bytes[i];
        content.push_str(&start.content[from..b0]);
        content.push_str(&texts[i]);
        from = b1;
    }
    content.push_str(&start.content[from..]);
    if content == start.content {
        ws.push(sequential::no_op_transaction());
    }
    Ok(Applied {
        content,
        changes,
        warnings: ws,
        content_sha256: None,
    })
}

/// Strict observation mode (`PATCHDIFF_STRICT_OBSERVATION_MODE=1`): the audited rejection of an
/// unobserved write (`patchdiff_submit_edits`, `patchdiff_submit_operations`,
/// `patchdiff_submit_replacement`), to write like any attempt. Nothing else is judged.
pub fn observation_required(sub: &Submission, id: &Identity, start: &TargetView) -> Attempt {
    let r = Rejection::coded(
        FailureReason::ContextMissing,
        Stage::ProtocolValidation,
        DiagnosticCode::ObservationRequired,
        "Strict observation mode is enabled: unobserved writes are refused. Observe the scope with patchdiff_observe_scope and submit with patchdiff_submit_observed_operations.",
    );
    let base = submit::base_attempt(sub, id, start);
    submit::rejected(base, &r, sub.protocol_version, start)
}

/// Adds a top-level `code` (from `diagnostic.code`, null when it has none) right after `status`
/// to a rejected response. [`respond`] does it; the extension may do it on strict-mode
/// rejections of the unobserved tools.
pub fn add_code(resp: &mut SubmissionResponse) {
    if let SubmissionResponse::Rejected(r) = resp {
        set_code(r);
    }
}

fn set_code(r: &mut RejectedResponse) {
    r.code = Some(r.diagnostic.get("code").cloned().unwrap_or(Value::Null));
}

/// The answer to a freshly written observed attempt: [`submit::respond`] plus
/// - on a rejection, `code` (from `diagnostic.code`, or null);
/// - `observation_id` (single form) or `observation_bundle_id` (batch), as sent, after
///   `target_file_id`;
/// - on an acceptance, `before_version` and `after_version` around `version`,
///   `operation_count` after `manifest_entries_added` and, for a batch, `group_count` there and
///   `groups` (after `evidence`): `[{group_index, observation_id, symbol_name, symbol_name_truncated,
///   kind, operation_count, scope_start, scope_end, scope_end_after}]`.
///
/// `rows` are the observation rows the attempt was judged with.
pub fn respond(
    a: &Attempt,
    sub: &Submission,
    pdcp_log_id: &str,
    current: &TargetView,
    correlation_id: Option<&str>,
    rows: &[ObservationRow],
) -> Value {
    response(a, sub, pdcp_log_id, current, correlation_id, rows).to_value()
}

/// [`respond`] as its type.
pub fn response(
    a: &Attempt,
    sub: &Submission,
    pdcp_log_id: &str,
    current: &TargetView,
    correlation_id: Option<&str>,
    rows: &[ObservationRow],
) -> SubmissionResponse {
    let mut r = submit::response(a, sub, pdcp_log_id, current, correlation_id);
    observed_fields(&mut r, &sub.record, is_batch(sub), rows, a.before_version);
    r
}

/// Adds the observed fields of [`respond`] to an answer [`submit::recover_or_conflict`]
/// recovered, from the stored record (`pdcp_content`, or the record inside an invalid-input
/// evidence envelope) and the recovered facts. `rows` are the observations linked to the stored
/// attempt, when the extension reads them; without them a batch's group summaries carry
/// `symbol_name`, `kind`, `scope_end` and `scope_end_after` as null (`scope_start` comes from the
/// facts). Anything else leaves the answer unchanged.
pub fn recovered_fields(
    resp: &mut SubmissionResponse,
    record_json: &str,
    rows: &[ObservationRow],
    before_version: i64,
) {
    let Ok(Value::Object(mut record)) = serde_json::from_str::<Value>(record_json) else {
        return;
    };
    if record.get("format").and_then(Value::as_str) == Some(invalid_text::INVALID_INPUT_FORMAT)
        && let Some(Value::Object(inner)) = record.remove("record")
    {
        record = inner;
    }
    let batch = record.get("protocol_version").and_then(Value::as_str) == Some(BATCH_PROTOCOL);
    observed_fields(resp, &record, batch, rows, before_version);
}

/// `before_version` is the attempt row's: on a rejection it is answered as recorded, since a
/// rejection has no `version` to derive it from (observed-editor-v2 "Commit receipts" takes the
/// original transaction's before version "from the service result, including on recovery").
fn observed_fields(
    resp: &mut SubmissionResponse,
    record: &Map<String, Value>,
    batch: bool,
    rows: &[ObservationRow],
    before_version: i64,
) {
    let key = if batch {
        "observation_bundle_id"
    } else {
        "observation_id"
    };
    let sent = Some(record.get(key).cloned().unwrap_or(Value::Null));
    let m = match resp {
        SubmissionResponse::Rejected(r) => {
            set_code(r);
            r.before_version = Some(before_version);
            if batch {
                r.observation_bundle_id = sent;
                let groups = record.get("groups").and_then(Value::as_array);
                r.group_count = Some(groups.map(Vec::len));
                r.operation_count = Some(groups.and_then(|gs| {
                    gs.iter()
                        .map(|g| g.get("operations").and_then(Value::as_array).map(Vec::len))
                        .sum()
                }));
            } else {
                r.observation_id = sent;
                r.operation_count = Some(
                    record
                        .get("operations")
                        .and_then(Value::as_array)
                        .map(Vec::len),
                );
            }
            return;
        }
        SubmissionResponse::Accepted(m) => m,
    };
    if batch {
        m.observation_bundle_id = sent;
    } else {
        m.observation_id = sent;
    }
    let after = m.version;
    m.before_version = Some(after.map(|v| v - 1));
    m.after_version = Some(after);
    let count = |ops: Option<&Value>| ops.and_then(Value::as_array).map_or(0, Vec::len);
    if !batch {
        m.operation_count = Some(count(record.get("operations")));
        return;
    }
    let groups: Vec<Value> = record
        .get("groups")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let facts = &m.evidence.changes;
    let total: usize = groups.iter().map(|g| count(g.get("operations"))).sum();
    let summaries: Vec<GroupSummary> = groups
        .iter()
        .enumerate()
        .map(|(i, group)| {
            let g = i + 1;
            let sent = group.get("observation_id").cloned().unwrap_or(Value::Null);
            let row = sent
                .as_str()
                .and_then(canonical_uuid)
                .and_then(|id| rows.iter().find(|r| ids_equal(&r.observation_id, &id)));
            let mine: Vec<&Value> = facts
                .iter()
                .filter(|f| f.get("group_index").and_then(Value::as_u64) == Some(g as u64))
                .collect();
            let delta: i64 = mine
                .iter()
                .map(|f| {
                    let n = |k: &str| f.get(k).and_then(Value::as_i64).unwrap_or(0);
                    n("replacement_chars") - n("matched_chars")
                })
                .sum();
            let scope_start = row.map(|r| json!(r.scope_start)).unwrap_or_else(|| {
                mine.first()
                    .and_then(|f| f.get("scope_start"))
                    .cloned()
                    .unwrap_or(Value::Null)
            });
            let symbol = row.map(|r| head_chars(&r.symbol_path, OBSERVED_SUMMARY_SYMBOL_CHARS));
            GroupSummary {
                group_index: g,
                observation_id: sent,
                symbol_name: symbol.map(str::to_owned),
                symbol_name_truncated: row
                    .is_some_and(|r| symbol.is_some_and(|s| s.len() < r.symbol_path.len())),
                kind: row.map(|r| r.kind.clone()),
                operation_count: count(group.get("operations")),
                scope_start,
                scope_end: row.map(|r| r.scope_end),
                scope_end_after: row.map(|r| r.scope_end as i64 + delta),
            }
        })
        .collect();
    m.operation_count = Some(total);
    m.group_count = Some(groups.len());
    m.groups = Some(summaries);
}
