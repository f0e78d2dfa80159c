//! `patchdiff_replay`: reconstruct a target from its initial snapshot plus its accepted
//! attempts in `log_sequence` order (contract, "patchdiff_replay").
//!
//! Each accepted row is replayed by the format recorded with it, its
//! `(protocol_version, runtime_version)` pair, through [`FORMATS`]: the same parse and apply
//! functions submission uses, without guards, warnings, diagnostics, admission limits or
//! line-ending metadata. A pair that is not in the table is `replay_protocol_invalid`.
//!
//! Every replayed row is also checked against what it recorded: its `before_version` and
//! `before_hash` must name the reconstruction so far and its `after_version` / `after_hash`
//! the reconstruction after it. A row that disagrees means the log does not reproduce itself:
//! replay stops with `status: "failed"`, `failure_reason: "replay_divergence"` and the row,
//! rather than reporting a `success` whose materialized-state checks could hide it. Replay
//! reads only; it never repairs storage.
//!
//! The extension streams rows in: [`Replay::start`], [`Replay::step`] per row, then
//! [`Replay::finish`] against the stored target (or [`Failure::to_json`]).
//!
//! Observed submissions (contract "patchdiff_submit_observed_operations") replay from their
//! record and the observation rows linked to the log ([`Accepted::observations`]), never by
//! parsing source code: a tx/2 record carrying `observation_id` through
//! [`replay_single`], the patchdiff-observed-batch/1 format through
//! [`replay_batch`]. Missing or altered evidence is `replay_protocol_invalid`; so are
//! observations linked to a log whose record is not observed.

use crate::contract::interrupt;
use crate::contract::uuid::canonical_uuid;
use crate::contract::words::{FailureReason, Status};
use crate::evidence::rejection::{Rejection, Stage};
use crate::format::protocol::{Protocol, Runtime};
use crate::format::sequential::Applied;
use crate::format::{tx1, tx2, tx3};
use crate::scope::observation::{LinkedObservation, ObservationRow};
use crate::submission::scoped::{
    BATCH_PROTOCOL, apply_batch, apply_single, ids_equal, parse_batch, verify_scopes,
};
use crate::target::TargetView;
use crate::text::{canonicalize, char_len, sha256_hex};
use serde_json::{Map, Value, json};

pub const REPLAY_ARGS: &[&str] = &["target_file_id"];

/// One accepted attempt row, as stored.
#[derive(Debug, Clone, Copy)]
pub struct Accepted<'a> {
    pub log_sequence: i64,
    pub pdcp_log_id: &'a str,
    pub protocol_version: &'a str,
    pub runtime_version: &'a str,
    pub pdcp_content: &'a str,
    pub before_version: i64,
    pub before_hash: &'a str,
    pub after_version: Option<i64>,
    pub after_hash: Option<&'a str>,
    /// The log's `editing_cycle_id`; observed records check their observations' cycle against
    /// it, other records ignore it.
    pub editing_cycle_id: &'a str,
    /// The observations consumed by this log (`observation_consumptions` joined with
    /// `target_scope_observations`), any order; empty for every unobserved record.
    pub observations: &'a [LinkedObservation],
}

impl<'a> Accepted<'a> {
    /// The log row of an unobserved accepted attempt, as the extension stores it: for replaying
    /// an attempt the engine just made (tests, benchmarks, fuzzing) without a database.
    pub fn of(
        a: &'a crate::submission::submit::Attempt,
        log_sequence: i64,
        pdcp_log_id: &'a str,
    ) -> Self {
        Accepted {
            log_sequence,
            pdcp_log_id,
            protocol_version: a.protocol_version,
            runtime_version: a.runtime_version,
            pdcp_content: &a.pdcp_content,
            before_version: a.before_version,
            before_hash: &a.before_hash,
            after_version: a.after_version,
            after_hash: a.after_hash.as_deref(),
            editing_cycle_id: "",
            observations: &[],
        }
    }
}

impl crate::submission::submit::AttemptRow {
    /// The accepted row as replay steps through it.
    pub fn accepted(&self) -> Accepted<'_> {
        Accepted {
            log_sequence: self.log_sequence,
            pdcp_log_id: &self.pdcp_log_id,
            protocol_version: &self.protocol_version,
            runtime_version: &self.runtime_version,
            pdcp_content: &self.pdcp_content,
            before_version: self.before_version,
            before_hash: &self.before_hash,
            after_version: self.after_version,
            after_hash: self.after_hash.as_deref(),
            editing_cycle_id: &self.editing_cycle_id,
            observations: &self.observations,
        }
    }
}

/// What a format's replay function gets: the reconstruction so far, the decoded stored
/// record and its row.
pub struct Step<'a> {
    pub buffer: &'a TargetView<'a>,
    pub record: &'a Map<String, Value>,
    pub row: &'a Accepted<'a>,
}

/// How one recorded (protocol_version, runtime_version) pair is replayed: a function that
/// returns the text after the row, or the reason it cannot.
pub struct Format {
    pub protocol: Protocol,
    pub runtime: Runtime,
    pub replay: fn(&Step) -> Result<String, Failure>,
}

/// Every format replay accepts. A new transaction format adds one line here, with a
/// function that applies its stored record exactly as its submission did.
pub const FORMATS: &[Format] = &[
    Format {
        protocol: Protocol::Tx1,
        runtime: Runtime::Mvp0_2_2,
        replay: replay_tx1,
    },
    Format {
        protocol: Protocol::Tx2,
        runtime: Runtime::Mvp0_3_0,
        replay: replay_tx2_0_3_0,
    },
    Format {
        protocol: Protocol::Tx2,
        runtime: Runtime::Mvp0_5_0,
        replay: replay_tx2_0_5_0,
    },
    Format {
        protocol: Protocol::Tx3,
        runtime: Runtime::Mvp0_4_0,
        replay: replay_tx3,
    },
    Format {
        protocol: Protocol::ObservedBatch,
        runtime: Runtime::ObservedBatchR1,
        replay: replay_batch,
    },
];

/// A stored record's outcome: a record its format cannot read is `replay_protocol_invalid`,
/// one that does not apply to the reconstruction `replay_application_failed`.
fn outcome(row: &Accepted, r: Result<Applied, Rejection>) -> Result<String, Failure> {
    r.map(|a| a.content).map_err(|r| {
        if r.stage == Stage::ProtocolValidation {
            Failure::protocol(
                row,
                format!(
                    "the stored record is not a valid {} record under {}: {}",
                    row.protocol_version, row.runtime_version, r.detail
                ),
            )
        } else {
            Failure::application(row, r.reason, &r.detail)
        }
    })
}

/// patchdiff-tx/2 under patchdiff-mvp-0.3.0, which still rejects span context keys. A record
/// carrying `observation_id` is an observed single form.
fn replay_tx2_0_3_0(s: &Step) -> Result<String, Failure> {
    if s.record.contains_key("observation_id") {
        return replay_single(s, tx2::RUNTIME);
    }
    outcome(s.row, tx2::apply_record(s.buffer, s.record, tx2::RUNTIME))
}

/// patchdiff-tx/2 under patchdiff-mvp-0.5.0 (span context).
fn replay_tx2_0_5_0(s: &Step) -> Result<String, Failure> {
    if s.record.contains_key("observation_id") {
        return replay_single(s, tx2::RUNTIME_SPAN_CONTEXT);
    }
    outcome(
        s.row,
        tx2::apply_record(s.buffer, s.record, tx2::RUNTIME_SPAN_CONTEXT),
    )
}

/// patchdiff-tx/3 under patchdiff-mvp-0.4.0: no admission limits on replay.
fn replay_tx3(s: &Step) -> Result<String, Failure> {
    outcome(s.row, tx3::apply_record(s.buffer, s.record))
}

/// patchdiff-tx/1 under patchdiff-mvp-0.2.2: the stored record's `intent` and `edits`,
/// through `tx1::parse` and `tx1::apply` as submission ran them.
fn replay_tx1(s: &Step) -> Result<String, Failure> {
    let (_, edits) = tx1::parse(s.record.get("intent"), s.record.get("edits")).map_err(|r| {
        Failure::protocol(
            s.row,
            format!(
                "the stored record is not a valid {} record: {}",
                tx1::PROTOCOL,
                r.detail
            ),
        )
    })?;
    tx1::apply(s.buffer, &edits)
        .map(|a| a.content)
        .map_err(|r| Failure::application(s.row, r.reason, &r.detail))
}

/// Why a replay stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub reason: FailureReason,
    pub detail: String,
    /// The row it stopped at; `None` when the initial snapshot itself is at fault.
    pub row: Option<Box<FailedRow>>,
    pub diagnostic: Value,
}

/// The identity of the row a replay stopped at.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedRow {
    pub log_sequence: i64,
    pub pdcp_log_id: String,
    pub protocol_version: String,
    pub runtime_version: String,
}

impl Failure {
    fn at(row: &Accepted, reason: FailureReason, detail: String, diagnostic: Value) -> Self {
        Failure {
            reason,
            detail,
            row: Some(Box::new(FailedRow {
                log_sequence: row.log_sequence,
                pdcp_log_id: row.pdcp_log_id.to_owned(),
                protocol_version: row.protocol_version.to_owned(),
                runtime_version: row.runtime_version.to_owned(),
            })),
            diagnostic,
        }
    }

    /// `replay_base_missing`: the target has no initial snapshot to replay from.
    pub fn base_missing() -> Self {
        Failure {
            reason: FailureReason::ReplayBaseMissing,
            detail: "the target has no initial snapshot to replay from".into(),
            row: None,
            diagnostic: Value::Null,
        }
    }

    /// `replay_protocol_invalid`: an unsupported pair, or a record its format cannot read.
    pub fn protocol(row: &Accepted, detail: String) -> Self {
        let allowed: Vec<Value> = FORMATS
            .iter()
            .map(|f| json!([f.protocol.as_str(), f.runtime.as_str()]))
            .collect();
        Self::at(
            row,
            FailureReason::ReplayProtocolInvalid,
            detail,
            json!({ "supported_formats": allowed }),
        )
    }

    /// `replay_application_failed`: a valid record that does not apply to the reconstruction.
    pub fn application(row: &Accepted, rejection: FailureReason, detail: &str) -> Self {
        Self::at(
            row,
            FailureReason::ReplayApplicationFailed,
            format!(
                "the accepted record does not apply to the reconstructed text: {rejection}: {detail}"
            ),
            json!({ "rejection": rejection.as_str() }),
        )
    }

    fn divergence(row: &Accepted, check: &str, recorded: Value, reconstructed: Value) -> Self {
        Self::at(
            row,
            FailureReason::ReplayDivergence,
            format!(
                "log_sequence {} recorded {check} {recorded} but the reconstruction gives {reconstructed}",
                row.log_sequence
            ),
            json!({ "check": check, "recorded": recorded, "reconstructed": reconstructed }),
        )
    }

    /// The `failed` answer.
    pub fn to_json(&self, stored: &TargetView, replayed: u64) -> Value {
        json!({
            "status": Status::Failed.as_str(),
            "target_file_id": stored.target_file_id,
            "failure_reason": self.reason.as_str(),
            "failure_detail": self.detail,
            "log_sequence": self.row.as_ref().map(|r| r.log_sequence),
            "pdcp_log_id": self.row.as_ref().map(|r| &r.pdcp_log_id),
            "protocol_version": self.row.as_ref().map(|r| &r.protocol_version),
            "runtime_version": self.row.as_ref().map(|r| &r.runtime_version),
            "diagnostic": self.diagnostic,
            "accepted_transactions_replayed": replayed,
            "current_hash": stored.current_hash,
            "current_version": stored.version,
        })
    }
}
/// A reconstruction in progress.
#[derive(Debug, Clone)]
pub struct Replay {
    target_file_id: String,
    content: String,
    hash: String,
    version: i64,
    replayed: u64,
}

impl Replay {
    /// Starts from the initial snapshot. Its recorded `content_hash` must name its content.
    pub fn start(
        target_file_id: &str,
        version: i64,
        content_hash: &str,
        content: String,
    ) -> Result<Replay, Failure> {
        let hash = sha256_hex(&content);
        if hash != content_hash {
            return Err(Failure {
                reason: FailureReason::ReplayDivergence,
                detail: format!(
                    "the initial snapshot recorded content_hash {content_hash} but its content hashes to {hash}"
                ),
                row: None,
                diagnostic: json!({"check": "initial_snapshot_hash", "recorded": content_hash, "reconstructed": hash}),
            });
        }
        Ok(Replay {
            target_file_id: target_file_id.to_owned(),
            content,
            hash,
            version,
            replayed: 0,
        })
    }

    pub fn replayed(&self) -> u64 {
        self.replayed
    }

    /// The version reconstructed so far.
    pub fn version(&self) -> i64 {
        self.version
    }

    /// The reconstruction so far, taken.
    pub fn into_state(self) -> (i64, String, String) {
        (self.version, self.hash, self.content)
    }

    /// Replays one accepted row, the next in `log_sequence` order.
    pub fn step(&mut self, row: &Accepted) -> Result<(), Failure> {
        // One check per row; the row's own application checks per change.
        interrupt::check();
        let recorded = (
            Protocol::parse(row.protocol_version),
            Runtime::parse(row.runtime_version),
        );
        let Some(format) = FORMATS
            .iter()
            .find(|f| recorded == (Some(f.protocol), Some(f.runtime)))
        else {
            return Err(Failure::protocol(
                row,
                format!(
                    "({}, {}) is not a format replay supports",
                    row.protocol_version, row.runtime_version
                ),
            ));
        };
        if row.before_version != self.version {
            return Err(Failure::divergence(
                row,
                "before_version",
                json!(row.before_version),
                json!(self.version),
            ));
        }
        if row.before_hash != self.hash {
            return Err(Failure::divergence(
                row,
                "before_hash",
                json!(row.before_hash),
                json!(self.hash),
            ));
        }
        let record = match serde_json::from_str::<Value>(row.pdcp_content) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Err(Failure::protocol(
                    row,
                    "the stored record is not a JSON object".into(),
                ));
            }
            Err(e) => {
                return Err(Failure::protocol(
                    row,
                    format!("the stored record is not valid JSON: {e}"),
                ));
            }
        };
        if let Some(p) = record.get("protocol_version")
            && p.as_str() != Some(row.protocol_version)
        {
            return Err(Failure::protocol(
                row,
                format!(
                    "the stored record names protocol_version {p}, the row {}",
                    row.protocol_version
                ),
            ));
        }
        if !row.observations.is_empty() && !is_observed_record(row.protocol_version, &record) {
            return Err(Failure::protocol(
                row,
                format!(
                    "{} observation(s) are linked to a log whose record is not an observed submission",
                    row.observations.len()
                ),
            ));
        }
        let buffer = TargetView {
            target_file_id: &self.target_file_id,
            version: self.version,
            current_hash: &self.hash,
            content: &self.content,
        };
        let after = (format.replay)(&Step {
            buffer: &buffer,
            record: &record,
            row,
        })?;
        let after_hash = sha256_hex(&after);
        if row.after_version != Some(self.version + 1) {
            return Err(Failure::divergence(
                row,
                "after_version",
                json!(row.after_version),
                json!(self.version + 1),
            ));
        }
        if row.after_hash != Some(after_hash.as_str()) {
            return Err(Failure::divergence(
                row,
                "after_hash",
                json!(row.after_hash),
                json!(after_hash),
            ));
        }
        self.content = after;
        self.hash = after_hash;
        self.version += 1;
        self.replayed += 1;
        Ok(())
    }

    /// The reconstructed text so far.
    pub fn content(&self) -> &str {
        &self.content
    }

    /// The `success` answer: the reconstruction against the stored target. `content_matches`
    /// compares the raw stored content, so CRLF or bare CR in storage shows even when the
    /// canonical hashes agree; the hash checks keep their canonical meaning.
    pub fn finish(&self, stored: &TargetView) -> Value {
        let content_matches = stored.content == self.content;
        let stored_hash_matches = stored.current_hash == self.hash;
        let recomputed_hash_matches = if content_matches {
            true
        } else {
            sha256_hex(&canonicalize(stored.content)) == self.hash
        };
        let version_matches = stored.version == self.version;
        json!({
            "status": Status::Success.as_str(),
            "target_file_id": stored.target_file_id,
            "reconstructed_hash": self.hash,
            "current_hash": stored.current_hash,
            "reconstructed_version": self.version,
            "current_version": stored.version,
            "accepted_transactions_replayed": self.replayed,
            "materialized_state_matches": content_matches
                && stored_hash_matches
                && recomputed_hash_matches
                && version_matches,
            "materialized_state_checks": {
                "content_matches": content_matches,
                "stored_hash_matches": stored_hash_matches,
                "recomputed_hash_matches": recomputed_hash_matches,
                "version_matches": version_matches,
            },
        })
    }
}

// ---- Observed records (contract "patchdiff_submit_observed_operations"): replayed from their
// record and linked observation rows, never by parsing source code.

/// A `replay_protocol_invalid` failure about the observation evidence of `row`, naming the
/// `check` (and group) that failed.
fn evidence_failure(step: &Step, check: &str, group: Option<usize>, detail: String) -> Failure {
    let mut f = Failure::protocol(
        step.row,
        format!("observation evidence does not match: {detail}"),
    );
    if let Value::Object(d) = &mut f.diagnostic {
        d.insert("check".into(), json!(check));
        if let Some(g) = group {
            d.insert("group_index".into(), json!(g));
        }
    }
    f
}

/// Checks one linked observation against the log and the replay buffer: the accepted-log
/// linkage, target, editing cycle, preimage version and hash, bounds and scope hash.
fn verify_link(step: &Step, link: &LinkedObservation, group: Option<usize>) -> Result<(), Failure> {
    let (row, log, buffer) = (&link.row, step.row, step.buffer);
    let fail = |check: &str, detail: String| Err(evidence_failure(step, check, group, detail));
    if !row
        .consumed_by_pdcp_log_id
        .as_deref()
        .is_some_and(|by| ids_equal(by, log.pdcp_log_id))
    {
        return fail(
            "consumed_by_pdcp_log_id",
            format!(
                "observation {} is consumed by {:?}, not by this log {}",
                row.observation_id, row.consumed_by_pdcp_log_id, log.pdcp_log_id
            ),
        );
    }
    if !ids_equal(&row.target_file_id, buffer.target_file_id) {
        return fail(
            "target_file_id",
            format!(
                "observation {} belongs to target {}",
                row.observation_id, row.target_file_id
            ),
        );
    }
    if !ids_equal(&row.editing_cycle_id, log.editing_cycle_id) {
        return fail(
            "editing_cycle_id",
            format!(
                "observation {} belongs to editing cycle {}, the log to {}",
                row.observation_id, row.editing_cycle_id, log.editing_cycle_id
            ),
        );
    }
    if row.target_version != log.before_version || row.target_version != buffer.version {
        return fail(
            "target_version",
            format!(
                "observation {} was issued at version {}, the log's before_version is {} and the reconstruction is at {}",
                row.observation_id, row.target_version, log.before_version, buffer.version
            ),
        );
    }
    if row.target_current_hash != log.before_hash || row.target_current_hash != buffer.current_hash
    {
        return fail(
            "target_current_hash",
            format!(
                "observation {} was issued at hash {}, the log's before_hash is {}",
                row.observation_id, row.target_current_hash, log.before_hash
            ),
        );
    }
    if let Err((_, detail, _)) = verify_scopes(buffer.content, &[row]) {
        let check = if row.scope_start > row.scope_end || row.scope_end > char_len(buffer.content) {
            "scope_bounds"
        } else {
            "observed_scope_hash"
        };
        return fail(
            check,
            format!("observation {}: {detail}", row.observation_id),
        );
    }
    Ok(())
}

fn application_failure(step: &Step, r: &Rejection) -> Failure {
    Failure::application(step.row, r.reason, &r.detail)
}

/// Replays an accepted tx/2 log whose record carries `observation_id` (the single form) under
/// `runtime`: exactly one linked observation, the record's, verified against the log and the
/// buffer, then the same confined application as submission. No source is parsed.
pub fn replay_single(step: &Step, runtime: &str) -> Result<String, Failure> {
    let record = step.record;
    let (_, ops) =
        tx2::parse(record.get("intent"), record.get("operations"), runtime).map_err(|r| {
            Failure::protocol(
                step.row,
                format!(
                    "the stored record is not a valid {} record under {runtime}: {}",
                    tx2::PROTOCOL,
                    r.detail
                ),
            )
        })?;
    let Some(id) = record
        .get("observation_id")
        .and_then(Value::as_str)
        .and_then(canonical_uuid)
    else {
        return Err(evidence_failure(
            step,
            "observation_id",
            None,
            "the record's observation_id is not a UUID string".into(),
        ));
    };
    let links = step.row.observations;
    let [link] = links else {
        return Err(evidence_failure(
            step,
            "linked_observations",
            None,
            format!(
                "exactly one observation must be linked to the log, found {}",
                links.len()
            ),
        ));
    };
    if link.group_index.is_some() || !ids_equal(&link.row.observation_id, &id) {
        return Err(evidence_failure(
            step,
            "observation_id",
            None,
            format!(
                "the linked observation {} (group_index {:?}) is not the record's {id}",
                link.row.observation_id, link.group_index
            ),
        ));
    }
    verify_link(step, link, None)?;
    apply_single(step.buffer, &ops, &link.row, &id)
        .map(|a| a.content)
        .map_err(|r| application_failure(step, &r))
}

/// Replays an accepted patchdiff-observed-batch/1 log: every group's exact linked observation
/// (the consumption's group_index naming the record's group), of the record's bundle, each
/// verified against the log and the buffer, then the same application as submission. No
/// source is parsed.
pub fn replay_batch(step: &Step) -> Result<String, Failure> {
    let record = step.record;
    let groups = parse_batch(record).map_err(|r| {
        Failure::protocol(
            step.row,
            format!(
                "the stored record is not a valid {BATCH_PROTOCOL} record: {}",
                r.detail
            ),
        )
    })?;
    let Some(bundle) = record
        .get("observation_bundle_id")
        .and_then(Value::as_str)
        .and_then(canonical_uuid)
    else {
        return Err(evidence_failure(
            step,
            "observation_bundle_id",
            None,
            "the record's observation_bundle_id is not a UUID string".into(),
        ));
    };
    let links = step.row.observations;
    if links.len() != groups.len() {
        return Err(evidence_failure(
            step,
            "linked_observations",
            None,
            format!(
                "the record has {} groups but {} observations are linked to the log",
                groups.len(),
                links.len()
            ),
        ));
    }
    let mut found: Vec<(String, &ObservationRow)> = Vec::with_capacity(groups.len());
    for (i, group) in groups.iter().enumerate() {
        let g = i + 1;
        let Some(id) = group
            .observation_id
            .and_then(Value::as_str)
            .and_then(canonical_uuid)
        else {
            return Err(evidence_failure(
                step,
                "observation_id",
                Some(g),
                format!("groups[{i}].observation_id is not a UUID string"),
            ));
        };
        let at: Vec<&LinkedObservation> =
            links.iter().filter(|l| l.group_index == Some(g)).collect();
        let [link] = at[..] else {
            return Err(evidence_failure(
                step,
                "group_index",
                Some(g),
                format!(
                    "{} observations are linked as group_index {g}, not exactly one",
                    at.len()
                ),
            ));
        };
        if !ids_equal(&link.row.observation_id, &id) {
            return Err(evidence_failure(
                step,
                "group_mapping",
                Some(g),
                format!(
                    "group_index {g} is linked to observation {}, the record's group names {id}",
                    link.row.observation_id
                ),
            ));
        }
        if !link
            .row
            .observation_bundle_id
            .as_deref()
            .is_some_and(|b| ids_equal(b, &bundle))
        {
            return Err(evidence_failure(
                step,
                "observation_bundle_id",
                Some(g),
                format!(
                    "observation {} belongs to bundle {:?}, the record to {bundle}",
                    link.row.observation_id, link.row.observation_bundle_id
                ),
            ));
        }
        verify_link(step, link, Some(g))?;
        found.push((id, &link.row));
    }
    let scoped: Vec<&ObservationRow> = found.iter().map(|(_, r)| *r).collect();
    if let Err((_, detail, i)) = verify_scopes(step.buffer.content, &scoped) {
        return Err(evidence_failure(
            step,
            "scopes_overlap",
            i.map(|i| i + 1),
            detail,
        ));
    }
    apply_batch(step.buffer, &groups, &found)
        .map(|a| a.content)
        .map_err(|f| application_failure(step, &f.r))
}

/// Whether a stored record is an observed one (replayed with its linked observations).
pub(crate) fn is_observed_record(protocol_version: &str, record: &Map<String, Value>) -> bool {
    protocol_version == BATCH_PROTOCOL
        || (protocol_version == tx2::PROTOCOL && record.contains_key("observation_id"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::words::Status;
    use crate::submission::submit::{self, Parent};

    /// Submits `edits` through the submission pipeline and returns the stored attempt.
    fn accept(t: &TargetView, edits: Value) -> submit::Attempt {
        let args = json!({
            "target_file_id": "11111111-1111-4111-8111-111111111111",
            "intent": "test",
            "edits": edits,
            "expected_target_version": t.version,
        });
        let sub = submit::parse_submit_edits(&args.to_string()).unwrap();
        let id = submit::prepare(&sub, &Parent::NotLookedUp);
        let a = submit::evaluate(&sub, &id, &Parent::NotLookedUp, t);
        assert_eq!(a.status, Status::Accepted, "{:?}", a.failure_detail);
        a
    }

    fn row(a: &submit::Attempt, seq: i64) -> Accepted<'_> {
        Accepted::of(a, seq, "p")
    }

    const ID: &str = "11111111-1111-4111-8111-111111111111";

    fn history() -> (String, Vec<submit::Attempt>) {
        let base = "alpha beta alpha\n".to_owned();
        let mut text = base.clone();
        let mut out = Vec::new();
        let mut hash = sha256_hex(&text);
        for (v, edits) in [
            json!([{"match": "alpha", "replace": "gamma", "occurrence_index": 2}]),
            json!([{"match": "beta", "replace": "b\r\nc"}, {"match": "gamma", "replace": ""}]),
        ]
        .into_iter()
        .enumerate()
        {
            let t = TargetView {
                target_file_id: ID,
                version: v as i64,
                current_hash: &hash,
                content: &text,
            };
            let a = accept(&t, edits);
            text = a.new_content.clone().unwrap();
            hash = a.after_hash.clone().unwrap();
            out.push(a);
        }
        (base, out)
    }

    /// Issue 14: replaying a long row stops at an interrupt check; unarmed it completes.
    #[test]
    fn long_replay_checks_for_interrupts() {
        let base = "a".repeat(5_000);
        let hash = sha256_hex(&base);
        let t = TargetView {
            target_file_id: ID,
            version: 0,
            current_hash: &hash,
            content: &base,
        };
        let edits: Vec<Value> = (0..1_000)
            .map(|_| json!({"match": "a", "replace": "b", "occurrence_index": 1}))
            .collect();
        let a = accept(&t, json!(edits));
        let run = || {
            let mut r = Replay::start(ID, 0, &hash, base.clone()).unwrap();
            r.step(&row(&a, 1)).map(|_| r.content().to_owned())
        };
        assert!(crate::contract::interrupt::testing::interrupted_after(
            50, run
        ));
        assert_eq!(run().unwrap(), a.new_content.clone().unwrap());
    }

    /// Contract "patchdiff_replay": the success response, every check true on healthy storage.
    #[test]
    fn replays_accepted_history() {
        let (base, attempts) = history();
        let mut r = Replay::start(ID, 0, &sha256_hex(&base), base).unwrap();
        for (i, a) in attempts.iter().enumerate() {
            r.step(&row(a, i as i64 + 1)).unwrap();
        }
        let last = attempts.last().unwrap();
        let now = TargetView {
            target_file_id: ID,
            version: 2,
            current_hash: last.after_hash.as_deref().unwrap(),
            content: last.new_content.as_deref().unwrap(),
        };
        assert_eq!(r.content(), "alpha b\nc \n");
        let v = r.finish(&now);
        assert_eq!(
            v,
            json!({
                "status": "success",
                "target_file_id": ID,
                "reconstructed_hash": now.current_hash,
                "current_hash": now.current_hash,
                "reconstructed_version": 2,
                "current_version": 2,
                "accepted_transactions_replayed": 2,
                "materialized_state_matches": true,
                "materialized_state_checks": {
                    "content_matches": true,
                    "stored_hash_matches": true,
                    "recomputed_hash_matches": true,
                    "version_matches": true
                }
            })
        );
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(
            keys[..4],
            [
                "status",
                "target_file_id",
                "reconstructed_hash",
                "current_hash"
            ]
        );

        // CRLF in storage: only content_matches sees it; a wrong stored hash, only
        // stored_hash_matches; a wrong version, only version_matches.
        let crlf = now.content.replace('\n', "\r\n");
        let v = r.finish(&TargetView {
            content: &crlf,
            ..now
        });
        assert_eq!(v["status"], "success");
        assert_eq!(v["materialized_state_matches"], false);
        assert_eq!(
            v["materialized_state_checks"],
            json!({"content_matches": false, "stored_hash_matches": true, "recomputed_hash_matches": true, "version_matches": true})
        );
        let wrong = "0".repeat(64);
        let v = r.finish(&TargetView {
            current_hash: &wrong,
            ..now
        });
        assert_eq!(
            v["materialized_state_checks"],
            json!({"content_matches": true, "stored_hash_matches": false, "recomputed_hash_matches": true, "version_matches": true})
        );
        let v = r.finish(&TargetView { version: 7, ..now });
        assert_eq!(v["materialized_state_checks"]["version_matches"], false);
        let edited = format!("{}x", now.content);
        let v = r.finish(&TargetView {
            content: &edited,
            ..now
        });
        assert_eq!(
            v["materialized_state_checks"],
            json!({"content_matches": false, "stored_hash_matches": true, "recomputed_hash_matches": false, "version_matches": true})
        );
    }

    /// Unsupported (protocol, runtime) pairs and unreadable records are replay_protocol_invalid.
    #[test]
    fn unsupported_pairs_are_refused() {
        let (base, attempts) = history();
        let start = || Replay::start(ID, 0, &sha256_hex(&base), base.clone()).unwrap();
        let a = &attempts[0];
        for (p, rt) in [
            ("patchdiff-tx/1", "patchdiff-mvp-0.1.0"),
            ("patchdiff-tx/9", "patchdiff-mvp-0.2.2"),
        ] {
            let e = start()
                .step(&Accepted {
                    protocol_version: p,
                    runtime_version: rt,
                    ..row(a, 1)
                })
                .unwrap_err();
            assert_eq!(e.reason.as_str(), "replay_protocol_invalid");
            assert_eq!(e.row.as_ref().map(|r| r.log_sequence), Some(1));
        }
        for bad in [
            "[]",
            "{",
            r#"{"intent":"x","edits":[],"protocol_version":"patchdiff-tx/1"}"#,
            r#"{"intent":"x","edits":[{"match":"a","replace":"b"}],"protocol_version":"patchdiff-tx/2"}"#,
        ] {
            let e = start()
                .step(&Accepted {
                    pdcp_content: bad,
                    ..row(a, 1)
                })
                .unwrap_err();
            assert_eq!(e.reason.as_str(), "replay_protocol_invalid", "{bad}");
        }
        let now = TargetView {
            target_file_id: ID,
            version: 0,
            current_hash: &a.before_hash,
            content: &base,
        };
        let v = start()
            .step(&Accepted {
                runtime_version: "x",
                ..row(a, 1)
            })
            .unwrap_err()
            .to_json(&now, 0);
        assert_eq!(v["status"], "failed");
        assert_eq!(
            v["diagnostic"]["supported_formats"][0],
            json!(["patchdiff-tx/1", "patchdiff-mvp-0.2.2"])
        );
    }

    /// A row whose recorded versions or hashes disagree with the reconstruction stops replay
    /// with replay_divergence; a record that no longer applies, replay_application_failed.
    #[test]
    fn divergent_rows_stop_replay() {
        let (base, attempts) = history();
        let start = || Replay::start(ID, 0, &sha256_hex(&base), base.clone()).unwrap();
        let a = &attempts[0];
        let wrong = "f".repeat(64);
        let cases = [
            (
                Accepted {
                    before_version: 1,
                    ..row(a, 1)
                },
                "before_version",
            ),
            (
                Accepted {
                    before_hash: &wrong,
                    ..row(a, 1)
                },
                "before_hash",
            ),
            (
                Accepted {
                    after_version: Some(5),
                    ..row(a, 1)
                },
                "after_version",
            ),
            (
                Accepted {
                    after_hash: Some(&wrong),
                    ..row(a, 1)
                },
                "after_hash",
            ),
        ];
        for (r, check) in cases {
            let e = start().step(&r).unwrap_err();
            assert_eq!(e.reason.as_str(), "replay_divergence");
            assert_eq!(e.diagnostic["check"], check);
        }
        // The second transaction replayed on the base (skipping the first) diverges at its
        // before_version; with the chain faked, its record no longer applies.
        let b = &attempts[1];
        let e = start()
            .step(&Accepted {
                before_version: 0,
                before_hash: &a.before_hash,
                ..row(b, 2)
            })
            .unwrap_err();
        assert_eq!(e.reason.as_str(), "replay_application_failed");
        assert_eq!(e.diagnostic["rejection"], "match_absent");
        let e = Replay::start(ID, 0, &wrong, base.clone()).unwrap_err();
        assert_eq!(e.diagnostic["check"], "initial_snapshot_hash");
    }
}
