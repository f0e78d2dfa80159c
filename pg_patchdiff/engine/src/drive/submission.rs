//! One submission, in the contract's order, over a [`Store`]: the target's row lock, the parent,
//! exact keyed recovery (or an audited conflict) before every fresh check, strict observation
//! mode, the observed route's observations, fresh admission, evaluation, the attempt and its
//! consumptions, the answer, and near misses.

use crate::contract::args::{ArgError, not_found, oversized, target_too_large, too_large};
use crate::contract::json::{LITERAL, to_string};
use crate::contract::words::Status;
use crate::drive::store::{Store, StoredTarget};
use crate::scope::observation::ObservationRow;
use crate::submission::identity;
use crate::submission::scoped as observed;
use crate::submission::submit::{
    self, Attempt, AttemptRow, Identity, KeyOutcome, Parent, Submission,
};
use crate::target::TargetView;
use crate::target::tenancy;
use serde_json::{Map, Value, json};

/// Which service a submission goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// patchdiff_submit_edits / _operations / _replacement: refused in strict observation mode.
    Unobserved,
    /// patchdiff_submit_observed_operations: confined to issued observations.
    Observed,
}

/// What the caller's session and transaction say about this call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `patchdiff.strict_observation_mode`: every fresh unobserved write is an audited
    /// `OBSERVATION_REQUIRED` rejection.
    pub strict_observation_mode: bool,
    /// The call runs inside a transaction block the caller opened (BEGIN ... COMMIT), as opposed
    /// to the single-statement transaction of an autocommit call such as the MCP front end's.
    /// The contract computes near misses only once a service-owned transaction has released its
    /// lock; a function cannot run after its own commit, so an autocommit call searches just
    /// before it (bounded: at most 65,536 code points), and a caller's transaction gets
    /// `caller_transaction`.
    pub caller_owned_transaction: bool,
    /// `patchdiff.max_target_bytes`: an acceptance may not leave its target's text larger than
    /// this and larger than it was ([`grows_too_large`]).
    pub max_target_bytes: usize,
    /// `patchdiff.max_changeset_target_bytes` (changesets only): the most bytes of text the
    /// targets of one changeset may hold together (`changeset_targets_too_large`).
    pub max_changeset_target_bytes: usize,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            strict_observation_mode: false,
            caller_owned_transaction: false,
            max_target_bytes: crate::contract::limits::TARGET_MAX_BYTES_DEFAULT,
            max_changeset_target_bytes:
                crate::contract::limits::CHANGESET_TARGETS_MAX_BYTES_DEFAULT,
        }
    }
}

/// `invalid_argument` / `target_too_large` when an acceptance would leave the target's text over
/// `limit` bytes and larger than it was (a target already over a lowered limit may still
/// shrink); nothing is written. Checked after evaluation, under the lock: only the applied text
/// knows its size.
pub(crate) fn grows_too_large(
    attempt: &Attempt,
    start: &TargetView,
    limit: usize,
    correlation: Option<&str>,
) -> Option<Value> {
    let after = attempt.new_content.as_deref()?.len();
    let mut v = target_too_large(after, start.content.len(), limit)?
        .with("target_file_id", json!(start.target_file_id))
        .with("pdcp_log_id", Value::Null)
        .to_json("");
    if let Some(c) = correlation {
        v["correlation_id"] = json!(c);
    }
    Some(v)
}

/// The answer for a target the caller could not lock or read (`write`: it asked to write):
/// `not_found`, exactly as for an unknown ID, unless it asked to write a target it may read
/// (`readable`, asked only then).
pub fn unavailable(id: &str, write: bool, readable: impl FnOnce() -> bool) -> Value {
    if write && readable() {
        tenancy::write_not_granted(id)
    } else {
        not_found(id)
    }
}

/// Runs one submission of `tool` (its arguments as parsed) under the target's row lock: keyed
/// recovery or conflict, then guards, application and the attempt, ledger and target writes.
pub fn run(
    store: &mut impl Store,
    tool: &str,
    sub: Result<Submission, ArgError>,
    route: Route,
    settings: Settings,
) -> Value {
    let sub = match sub {
        Ok(s) => s,
        Err(e) => return refused(store, tool, &e),
    };
    let correlation = sub.include_correlation_id.then(|| store.new_id());
    if let Some(answer) = recover_unlocked(store, &sub, route, settings, correlation.as_deref()) {
        return answer;
    }
    let t = match lock(store, &sub, correlation.as_deref()) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let parent = sub
        .parent_uuid()
        .map_or(Parent::NotLookedUp, |p| store.parent(&p));
    let identity = submit::prepare(&sub, &parent);
    let stored = sub
        .request_key()
        .and_then(|k| store.keyed_attempt(&sub.target_file_id, k));
    let mut t = t;
    let locked = Locked {
        sub: &sub,
        target: &t,
        identity: &identity,
        parent: &parent,
        correlation: correlation.as_deref(),
        route,
        settings,
    };
    let verdict = match locked.decide(store, stored) {
        Decision::Answered(answer) => return answer,
        Decision::Write(verdict) => verdict,
    };
    // An acceptance is answered from its new version alone, so the old text is let go before
    // the new one is written: on a large target, one copy of its text less at the call's peak
    // (docs/reliability.md, "Resource bounds"). A rejection's answer quotes the text it was
    // judged against (`current_context`), so it keeps it.
    if verdict.attempt.status == Status::Accepted {
        t.content = String::new();
    }
    Locked {
        sub: &sub,
        target: &t,
        identity: &identity,
        parent: &parent,
        correlation: correlation.as_deref(),
        route,
        settings,
    }
    .record(store, verdict)
}

/// An exact keyed recovery answered without the row lock, or `None` to take the lock and run
/// the contract's order (no attempt under the key yet, a key conflict to audit, or a target the
/// caller may not write).
///
/// A recovery writes nothing, and the attempt it recovers never changes once committed (the log
/// is append-only), so the lock would order it against nothing: the answer is the one the locked
/// path gives at the moment of this call's reads. The attempt is read first and the target after
/// it, in a later snapshot, so `current_version` is never older than the recovered `version`.
/// Without the lock a resend takes no transaction ID and flushes no WAL at commit: it costs a
/// third of an acceptance instead of half (docs/benchmarks.md, "Keyed resends").
fn recover_unlocked(
    store: &mut impl Store,
    sub: &Submission,
    route: Route,
    settings: Settings,
    correlation: Option<&str>,
) -> Option<Value> {
    let stored = store.keyed_attempt(&sub.target_file_id, sub.request_key()?)?;
    let t = store.writable_target(&sub.target_file_id)?;
    let parent = sub
        .parent_uuid()
        .map_or(Parent::NotLookedUp, |p| store.parent(&p));
    let identity = submit::prepare(sub, &parent);
    let locked = Locked {
        sub,
        target: &t,
        identity: &identity,
        parent: &parent,
        correlation,
        route,
        settings,
    };
    match locked.decide(store, Some(stored)) {
        Decision::Answered(answer) => Some(answer),
        Decision::Write(_) => None,
    }
}

/// The answer to arguments that did not parse: a malformed target ID is the contract's
/// target-identity rejection, anything else `invalid_argument`; nothing is written.
pub(crate) fn refused(store: &mut impl Store, tool: &str, e: &ArgError) -> Value {
    match &e.malformed_target {
        Some(m) => {
            let correlation = m.include_correlation_id.then(|| store.new_id());
            identity::rejection(&identity::malformed(m, correlation.as_deref()))
        }
        None => e.to_json(tool),
    }
}

/// Takes the row lock of the submission's target, or answers for a target the caller may not
/// write, having locked and written nothing.
pub(crate) fn lock(
    store: &mut impl Store,
    sub: &Submission,
    correlation: Option<&str>,
) -> Result<StoredTarget, Value> {
    let id = sub.target_file_id.as_str();
    if let Some(t) = store.lock_target(id) {
        return Ok(t);
    }
    // A target the caller may read but not write is known to it: permission_denied. One it
    // may not see is answered exactly as an unknown one: the target-identity rejection.
    if store.readable(id) {
        return Err(tenancy::write_not_granted(id));
    }
    let sent = json!(id);
    Err(identity::rejection(&identity::Call {
        failure: identity::Failure::TargetNotFound,
        target_file_id: &sent,
        format: sub.protocol_version,
        client_request_id: &sub.client_request_id,
        correlation_id: correlation,
    }))
}

/// One submission whose target is locked (or, for an exact keyed recovery, read as of now:
/// [`recover_unlocked`]), with what the contract's checks need.
pub(crate) struct Locked<'a> {
    pub sub: &'a Submission,
    pub target: &'a StoredTarget,
    pub identity: &'a Identity,
    pub parent: &'a Parent,
    pub correlation: Option<&'a str>,
    pub route: Route,
    pub settings: Settings,
}

/// What a locked submission comes to before anything is written. Made once per member and
/// matched at once; the attempt is not boxed (a single submission's hot path).
#[allow(clippy::large_enum_variant)]
pub(crate) enum Decision {
    /// An answer that writes nothing: an exact keyed recovery, or a fresh admission refusal.
    Answered(Value),
    /// An attempt to write (accepted, rejected, or an audited key conflict).
    Write(Verdict),
}

/// An attempt to write, with what its answer needs.
pub(crate) struct Verdict {
    pub attempt: Attempt,
    /// Strict observation mode refused it (the answer gets the top-level `code`).
    pub strict_refusal: bool,
    /// The observations the observed route locked.
    pub rows: Vec<ObservationRow>,
}

impl Locked<'_> {
    /// The contract's order under the lock: exact keyed recovery (or an audited conflict)
    /// before every fresh check, then strict mode, observations, admission and evaluation.
    /// `stored` is the attempt already recorded under the submission's request key, if any.
    pub(crate) fn decide(&self, store: &mut impl Store, stored: Option<AttemptRow>) -> Decision {
        let (sub, identity, parent) = (self.sub, self.identity, self.parent);
        let start = self.target.view();
        let mut rows = Vec::new();
        let mut strict_refusal = false;
        let attempt = match stored {
            Some(stored) => {
                match submit::recover_or_conflict(sub, identity, &stored, &start, self.correlation)
                {
                    KeyOutcome::Recovered(mut r) => {
                        if self.route == Route::Observed {
                            let consumed = store.consumed_by(&stored.pdcp_log_id);
                            observed::recovered_fields(
                                &mut r,
                                &stored.pdcp_content,
                                &consumed,
                                stored.before_version,
                            );
                        }
                        let mut v = r.to_value();
                        submit::add_near_misses(
                            &mut v,
                            None,
                            self.settings.caller_owned_transaction,
                        );
                        return Decision::Answered(v);
                    }
                    KeyOutcome::Conflict(a) => *a,
                }
            }
            None if self.route == Route::Observed => {
                rows = store
                    .lock_observations(&sub.target_file_id, &observed::requested_observations(sub));
                observed::evaluate(
                    sub,
                    identity,
                    parent,
                    &start,
                    &self.target.active_editing_cycle_id,
                    &rows,
                )
            }
            // The contract's order for a fresh unobserved write: invalid text is classified
            // first (`evaluate`'s audited target_encoding_invalid, strict mode or not), then
            // fresh admission (a sole replacement over its limits: no row), and only then
            // strict mode.
            None => match submit::admission(sub, self.correlation) {
                Some(too_large) => return Decision::Answered(too_large),
                None if self.settings.strict_observation_mode && sub.invalid_text.is_empty() => {
                    strict_refusal = true;
                    observed::observation_required(sub, identity, &start)
                }
                None => submit::evaluate(sub, identity, parent, &start),
            },
        };
        if let Some(refusal) = grows_too_large(
            &attempt,
            &start,
            self.settings.max_target_bytes,
            self.correlation,
        ) {
            return Decision::Answered(refusal);
        }
        Decision::Write(Verdict {
            attempt,
            strict_refusal,
            rows,
        })
    }

    /// Writes the attempt (its ledger rows, the new target state and its consumptions) and
    /// answers for it.
    pub(crate) fn record(&self, store: &mut impl Store, v: Verdict) -> Value {
        let Verdict {
            mut attempt,
            strict_refusal,
            rows,
        } = v;
        let (sub, id) = (self.sub, self.sub.target_file_id.as_str());
        let log_id = store.new_id();
        // The new text goes to the store, which lets it go once the database holds its copy:
        // an acceptance's answer names the new version by its number and hash only
        // (`submit::response`), never by its text.
        let new_content = attempt.new_content.take();
        let wrote_text = new_content.is_some();
        store.write_attempt(
            &attempt,
            new_content,
            &log_id,
            id,
            &self.target.active_editing_cycle_id,
        );
        if attempt.status == Status::Accepted && !attempt.observations.is_empty() {
            store.write_consumptions(&log_id, &attempt.observations);
        }
        let now = match (wrote_text, &attempt.after_hash, attempt.after_version) {
            (true, Some(hash), Some(version)) => TargetView {
                target_file_id: id,
                version,
                current_hash: hash,
                content: "",
            },
            _ => self.target.view(),
        };
        let correlation = self.correlation;
        let mut answer = match self.route {
            Route::Observed => observed::response(&attempt, sub, &log_id, &now, correlation, &rows),
            Route::Unobserved => submit::response(&attempt, sub, &log_id, &now, correlation),
        };
        if strict_refusal {
            // The observed tools' top-level `code`, so a host reads OBSERVATION_REQUIRED alike.
            observed::add_code(&mut answer);
        }
        let mut answer = answer.to_value();
        submit::add_near_misses(
            &mut answer,
            attempt.near_miss_input.as_ref(),
            self.settings.caller_owned_transaction,
        );
        answer
    }
}

/// The named arguments of `patchdiff_submit`, the DBA's typed entry point to
/// patchdiff_submit_edits; `None` is SQL NULL.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypedEdits<'a> {
    pub target_file_id: Option<String>,
    pub intent: Option<String>,
    /// The `edits` argument's `json` text.
    pub edits: Option<&'a str>,
    pub expected_target_version: Option<i64>,
    pub expected_current_hash: Option<String>,
    pub client_request_id: Option<String>,
    pub parent_pdcp_log_id: Option<String>,
    pub attempt: Option<i64>,
    pub source: Option<String>,
    pub include_correlation_id: Option<bool>,
}

impl TypedEdits<'_> {
    /// The patchdiff_submit_edits argument text these name, or the answer when `edits` is too
    /// large or not JSON. NULLs become omitted arguments, so they meet the same checks as over
    /// JSON. The text arguments together are held to `max_argument_bytes`
    /// (`patchdiff.max_argument_bytes`) as one `json` argument is: a 100 MB `intent` used to be
    /// copied into an argument text and parsed before its own cap refused it.
    pub fn arguments(self, max_argument_bytes: usize) -> Result<String, Value> {
        const TOOL: &str = "patchdiff_submit";
        if let Some(Err(e)) = self.edits.map(oversized) {
            return Err(e.to_json(TOOL));
        }
        let texts = [
            self.edits.map(str::len),
            self.intent.as_ref().map(String::len),
            self.expected_current_hash.as_ref().map(String::len),
            self.client_request_id.as_ref().map(String::len),
            self.source.as_ref().map(String::len),
        ];
        let size: usize = texts.iter().flatten().sum();
        if size > max_argument_bytes {
            return Err(too_large(size, max_argument_bytes).to_json(TOOL));
        }
        let mut m = Map::new();
        if let Some(id) = self.target_file_id {
            m.insert("target_file_id".into(), json!(id));
        }
        if let Some(Err(e)) = self.edits.map(crate::contract::args::too_complex) {
            return Err(e.to_json(TOOL));
        }
        match self.edits.map(serde_json::from_str::<Value>) {
            Some(Ok(v)) => {
                m.insert("edits".into(), v);
            }
            Some(Err(e)) => {
                let err = ArgError::new("invalid_json", format!("edits is not valid JSON: {e}"));
                return Err(err.to_json(TOOL));
            }
            None => {}
        }
        let optional = [
            ("intent", self.intent.map(Value::from)),
            (
                "expected_target_version",
                self.expected_target_version.map(Value::from),
            ),
            (
                "expected_current_hash",
                self.expected_current_hash.map(Value::from),
            ),
            ("client_request_id", self.client_request_id.map(Value::from)),
            (
                "parent_pdcp_log_id",
                self.parent_pdcp_log_id.map(Value::from),
            ),
            ("attempt", self.attempt.map(Value::from)),
            ("source", self.source.map(Value::from)),
            (
                "include_correlation_id",
                self.include_correlation_id.map(Value::from),
            ),
        ];
        for (k, v) in optional {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        }
        Ok(to_string(&Value::Object(m), LITERAL))
    }
}

#[cfg(test)]
mod tests {
    //! Issue 16 item 3, "the engine drives the call": the contract's order, proved over an
    //! in-memory [`Store`] that records every call. The same clauses run on real PostgreSQL in
    //! the extension's tests and the end-to-end suites.

    use super::*;
    use crate::drive::store::{Session, StoredTarget};
    use crate::scope::observation::{ObservationLink, ObservationRow};
    use crate::submission::submit::{Attempt, AttemptRow};
    use crate::text::{char_len, sha256_hex, slice_chars};
    use serde_json::json;

    const T: &str = "11111111-1111-4111-8111-111111111111";
    const READ_ONLY: &str = "22222222-2222-4222-8222-222222222222";
    const CYCLE: &str = "33333333-3333-4333-8333-333333333333";
    const OBS: &str = "aaaaaaaa-aaaa-4aaa-8aaa-000000000001";
    const DOC: &str = "def alpha():\n    return \"hello\"\n\ndef gamma():\n    return \"hello\"\n";

    /// Rows of one target the caller may write, and one it may only read.
    #[derive(Default)]
    struct Memory {
        target: Option<StoredTarget>,
        attempts: Vec<(String, Attempt)>,
        consumptions: Vec<(String, ObservationLink)>,
        observations: Vec<ObservationRow>,
        /// Every call, in order.
        calls: Vec<&'static str>,
        ids: u32,
    }

    impl Memory {
        fn with(doc: &str) -> Memory {
            Memory {
                target: Some(StoredTarget {
                    target_file_id: T.into(),
                    version: 0,
                    current_hash: sha256_hex(doc),
                    content: doc.into(),
                    active_editing_cycle_id: CYCLE.into(),
                    filename: "a.txt".into(),
                    target_type: "text".into(),
                    source_line_endings: None,
                }),
                ..Memory::default()
            }
        }

        fn writes(&self) -> Vec<&'static str> {
            self.calls
                .iter()
                .copied()
                .filter(|c| c.starts_with("write"))
                .collect()
        }
    }

    impl Session for Memory {
        fn new_id(&mut self) -> String {
            self.ids += 1;
            format!("00000000-0000-4000-8000-{:012}", self.ids)
        }
        fn readable(&mut self, id: &str) -> bool {
            self.calls.push("readable");
            id == READ_ONLY
        }
    }

    impl Store for Memory {
        fn lock_target(&mut self, id: &str) -> Option<StoredTarget> {
            self.calls.push("lock_target");
            self.target.clone().filter(|t| t.target_file_id == id)
        }
        fn writable_target(&mut self, id: &str) -> Option<StoredTarget> {
            self.calls.push("writable_target");
            self.target.clone().filter(|t| t.target_file_id == id)
        }
        fn parent(&mut self, log_id: &str) -> Parent {
            self.calls.push("parent");
            match self.attempts.iter().find(|(l, _)| l == log_id) {
                Some(_) => Parent::Found {
                    target_file_id: T.into(),
                    status: Some(Status::Rejected),
                },
                None => Parent::NotFound,
            }
        }
        fn keyed_attempt(&mut self, id: &str, key: &str) -> Option<AttemptRow> {
            self.calls.push("keyed_attempt");
            let (log, a) = self
                .attempts
                .iter()
                .find(|(_, a)| a.client_request_id.as_deref() == Some(key))?;
            assert_eq!(id, T);
            Some(AttemptRow::of(a, log))
        }
        fn lock_observations(&mut self, _: &str, ids: &[String]) -> Vec<ObservationRow> {
            self.calls.push("lock_observations");
            self.observations
                .iter()
                .filter(|o| ids.contains(&o.observation_id))
                .cloned()
                .collect()
        }
        fn consumed_by(&mut self, log_id: &str) -> Vec<ObservationRow> {
            self.calls.push("consumed_by");
            let ids: Vec<&String> = self
                .consumptions
                .iter()
                .filter(|(l, _)| l == log_id)
                .map(|(_, c)| &c.observation_id)
                .collect();
            self.observations
                .iter()
                .filter(|o| ids.contains(&&o.observation_id))
                .cloned()
                .collect()
        }
        fn write_attempt(
            &mut self,
            a: &Attempt,
            new_content: Option<String>,
            log_id: &str,
            id: &str,
            cycle: &str,
        ) {
            self.calls.push("write_attempt");
            assert_eq!((id, cycle), (T, CYCLE));
            assert!(a.new_content.is_none(), "the new text crosses on its own");
            if let (Some(t), Some(content)) = (self.target.as_mut(), &new_content) {
                t.content = content.clone();
                t.current_hash = a.after_hash.clone().unwrap();
                t.version = a.after_version.unwrap();
            }
            // Kept as written: the attempt with the text it wrote.
            let mut a = a.clone();
            a.new_content = new_content;
            self.attempts.push((log_id.into(), a));
        }
        fn write_consumptions(&mut self, log_id: &str, links: &[ObservationLink]) {
            self.calls.push("write_consumptions");
            for l in links {
                self.consumptions.push((log_id.into(), l.clone()));
            }
        }
    }

    fn edits(args: Value, store: &mut Memory, strict: bool) -> Value {
        let settings = Settings {
            strict_observation_mode: strict,
            ..Settings::default()
        };
        let sub = submit::parse_submit_edits(&args.to_string());
        run(
            store,
            "patchdiff_submit_edits",
            sub,
            Route::Unobserved,
            settings,
        )
    }

    fn observed(args: Value, store: &mut Memory) -> Value {
        let sub = observed::parse_submit_observed_operations(&args.to_string());
        let tool = "patchdiff_submit_observed_operations";
        run(store, tool, sub, Route::Observed, Settings::default())
    }

    fn gamma_observation(doc: &str) -> ObservationRow {
        let b = char_len(&doc[..doc.find("def gamma").unwrap()]);
        let e = char_len(doc);
        ObservationRow {
            observation_id: OBS.into(),
            target_file_id: T.into(),
            editing_cycle_id: CYCLE.into(),
            observation_bundle_id: None,
            bundle_ordinal: None,
            symbol_path: "gamma".into(),
            kind: "function".into(),
            target_version: 0,
            target_current_hash: sha256_hex(doc),
            scope_start: b,
            scope_end: e,
            observed_scope_hash: sha256_hex(slice_chars(doc, b, e)),
            consumed_by_pdcp_log_id: None,
        }
    }

    fn observed_args(store: &Memory, key: Option<&str>) -> Value {
        let t = store.target.as_ref().unwrap();
        json!({
            "target_file_id": T, "observation_id": OBS, "intent": "edit",
            "operations": [{"op": "match", "match": "\"hello\"", "replace": "\"bye\""}],
            "expected_target_version": t.version, "expected_current_hash": t.current_hash,
            "client_request_id": key,
        })
    }

    /// docs/sql-api.md, "Rules that hold for every function" (`patchdiff.max_target_bytes`,
    /// ours): an acceptance that would leave the target's text over the limit and larger than it
    /// was is `invalid_argument` / `target_too_large` with `limit` and `actual`, and writes
    /// nothing; up to the limit it is accepted; a target already over a lowered limit may still
    /// shrink. A rejection is logged as always, whatever the size. The preview answers alike.
    #[test]
    fn an_acceptance_may_not_grow_a_target_past_max_target_bytes() {
        let limited = |max: usize| Settings {
            max_target_bytes: max,
            ..Settings::default()
        };
        let edit = |s: &mut Memory, m: &str, r: &str, max: usize| {
            let v = s.target.as_ref().unwrap().version;
            let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": v,
                              "edits": [{"match": m, "replace": r}]});
            let sub = submit::parse_submit_edits(&args.to_string());
            run(
                s,
                "patchdiff_submit_edits",
                sub,
                Route::Unobserved,
                limited(max),
            )
        };
        let mut s = Memory::with("abc\n");
        // 4 bytes -> 17: one over a limit of 16.
        let r = edit(&mut s, "abc", "abcdefghijklmnop", 16);
        assert_eq!(
            (&r["status"], &r["code"], &r["limit"], &r["actual"]),
            (
                &json!("invalid_argument"),
                &json!("target_too_large"),
                &json!(16),
                &json!(17)
            ),
            "{r}"
        );
        assert_eq!(r["target_file_id"], T);
        assert_eq!(r["pdcp_log_id"], Value::Null);
        assert!(s.attempts.is_empty(), "nothing written");
        assert_eq!(s.target.as_ref().unwrap().content, "abc\n");
        let preview = |s: &Memory, m: &str, r: &str, max: usize| {
            let t = s.target.as_ref().unwrap();
            let args = json!({"target_file_id": T, "format": "patchdiff-tx/1", "intent": "i",
                              "expected_target_version": t.version,
                              "edits": [{"match": m, "replace": r}]});
            let sub = crate::submission::preview::parse_preview(&args.to_string()).unwrap();
            crate::submission::preview::preview_within(&sub, &t.view(), max)
        };
        let p = preview(&s, "abc", "abcdefghijklmnop", 16);
        assert_eq!(
            (&p["status"], &p["code"]),
            (&json!("invalid_argument"), &json!("target_too_large")),
            "{p}"
        );
        assert_eq!(
            preview(&s, "abc", "abcdefghijklmno", 16)["status"],
            "accepted"
        );
        // Exactly the limit is accepted.
        let r = edit(&mut s, "abc", "abcdefghijklmno", 16);
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(s.target.as_ref().unwrap().content.len(), 16);
        // A rejection (no match) is logged whatever the size.
        let r = edit(&mut s, "absent", "x", 4);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(s.attempts.len(), 2);
        // Over a lowered limit (4): growing is refused, shrinking and keeping the size accepted.
        assert_eq!(edit(&mut s, "a", "aa", 4)["code"], "target_too_large");
        assert_eq!(edit(&mut s, "b", "B", 4)["status"], "accepted");
        assert_eq!(edit(&mut s, "cd", "c", 4)["status"], "accepted");
        assert_eq!(s.target.as_ref().unwrap().content, "aBcefghijklmno\n");
        assert_eq!(s.attempts.len(), 4);
    }

    /// observed-editor-v2 "Exact keyed recovery precedes fresh guard and consumed-observation
    /// checks", and strict observation mode ("A keyed resend still recovers its recorded
    /// outcome"): the resend is answered from the stored row, writing nothing, though its guard
    /// is now stale and strict mode is on. It takes no lock: the attempt, then the target as the
    /// caller may write it (`recover_unlocked`).
    #[test]
    fn keyed_recovery_precedes_strict_mode_and_guards() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "a", "replace": "b"}], "client_request_id": "k1"});
        let first = edits(args.clone(), &mut s, false);
        assert_eq!(first["status"], "accepted");
        s.calls.clear();
        let again = edits(args, &mut s, true);
        assert_eq!(again["status"], "accepted");
        assert_eq!(again["deduplicated"], true);
        assert_eq!(again["pdcp_log_id"], first["pdcp_log_id"]);
        assert_eq!(s.calls, ["keyed_attempt", "writable_target"]);
        assert_eq!(s.attempts.len(), 1);
    }

    /// The same for the observed route: a keyed resend of a consumed observation recovers (with
    /// the consumed observations read back) instead of meeting OBSERVATION_CONSUMED.
    #[test]
    fn observed_keyed_recovery_precedes_consumed_observation_checks() {
        let mut s = Memory::with(DOC);
        s.observations.push(gamma_observation(DOC));
        let args = observed_args(&s, Some("k2"));
        let first = observed(args.clone(), &mut s);
        assert_eq!(first["status"], "accepted", "{first}");
        s.calls.clear();
        let again = observed(args, &mut s);
        assert_eq!(again["deduplicated"], true, "{again}");
        assert_eq!(again["observation_id"], OBS);
        assert_eq!(s.calls, ["keyed_attempt", "writable_target", "consumed_by"]);
        assert_eq!((s.attempts.len(), s.consumptions.len()), (1, 1));
    }

    /// "Rejections are values": a stale guard writes exactly one rejected attempt row, and no
    /// consumption, on either route.
    #[test]
    fn a_rejection_writes_one_row_and_no_consumptions() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 7,
                          "edits": [{"match": "a", "replace": "b"}]});
        let r = edits(args, &mut s, false);
        assert_eq!(r["status"], "rejected");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert_eq!(r["pdcp_log_id"], s.attempts[0].0.as_str());

        let mut s = Memory::with(DOC);
        s.observations.push(gamma_observation(DOC));
        let mut args = observed_args(&s, None);
        args["expected_current_hash"] = json!(sha256_hex("other"));
        let r = observed(args, &mut s);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert!(s.consumptions.is_empty());
    }

    /// An observed acceptance writes its attempt, then the consumption of each observation, after
    /// locking the target and then the observations.
    #[test]
    fn an_observed_acceptance_writes_its_consumptions() {
        let mut s = Memory::with(DOC);
        s.observations.push(gamma_observation(DOC));
        let r = observed(observed_args(&s, None), &mut s);
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(
            s.calls,
            [
                "lock_target",
                "lock_observations",
                "write_attempt",
                "write_consumptions"
            ]
        );
        let log = s.attempts[0].0.clone();
        assert_eq!(r["pdcp_log_id"], log.as_str());
        assert_eq!(
            s.consumptions,
            [(
                log,
                ObservationLink {
                    observation_id: OBS.into(),
                    group_index: None
                }
            )]
        );
        assert_eq!(
            s.target.unwrap().content,
            "def alpha():\n    return \"hello\"\n\ndef gamma():\n    return \"bye\"\n"
        );
    }

    /// Contract "strict observation mode": a fresh unobserved write is an audited
    /// OBSERVATION_REQUIRED rejection (one row, the top-level `code`), judged before any guard.
    #[test]
    fn strict_mode_writes_one_audited_rejection() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 7,
                          "edits": [{"match": "a", "replace": "b"}]});
        let r = edits(args, &mut s, true);
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["code"], "OBSERVATION_REQUIRED");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert_eq!(s.target.unwrap().version, 0);
    }

    /// Contract "patchdiff_submit_replacement": a valid oversized fresh replacement answers
    /// replacement_too_large with `pdcp_log_id: null`, and "no attempt or current-PDCP row is
    /// written"; a keyed one still looks its key up first.
    #[test]
    fn sole_replacement_over_admission_limits_writes_no_row() {
        let mut s = Memory::with("a\n");
        let big = "x".repeat(crate::contract::limits::REPLACEMENT_MAX_CODE_POINTS + 1);
        let args = json!({"target_file_id": T, "intent": "i", "replacement": big,
                          "expected_target_version": 0, "client_request_id": "k3"});
        let sub = submit::parse_submit_replacement(&args.to_string());
        let tool = "patchdiff_submit_replacement";
        let r = run(&mut s, tool, sub, Route::Unobserved, Settings::default());
        assert_eq!(r["status"], "invalid_argument");
        assert_eq!(r["code"], "replacement_too_large");
        assert_eq!(r["pdcp_log_id"], Value::Null);
        assert_eq!(s.calls, ["keyed_attempt", "lock_target", "keyed_attempt"]);
    }

    /// Contract "client_request_id": reusing a key for a different proposal "returns
    /// context_invalid with diagnostic.code: request_key_conflict and a fresh durable rejection
    /// log ID". The unlocked lookup finds the key, but only an exact recovery is answered
    /// without the lock: the conflict is looked up again and audited under it.
    #[test]
    fn a_key_conflict_is_audited_under_the_lock() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "a", "replace": "b"}], "client_request_id": "k4"});
        let first = edits(args.clone(), &mut s, false);
        assert_eq!(first["status"], "accepted");
        s.calls.clear();
        let mut other = args;
        other["edits"][0]["replace"] = json!("c");
        let r = edits(other, &mut s, false);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(r["diagnostic"]["code"], "request_key_conflict");
        assert_ne!(r["pdcp_log_id"], first["pdcp_log_id"]);
        assert_eq!(
            s.calls,
            [
                "keyed_attempt",
                "writable_target",
                "lock_target",
                "keyed_attempt",
                "write_attempt"
            ]
        );
        assert_eq!(s.attempts.len(), 2);
    }

    /// Issue 15 (docs/security.md): a target the caller may not write is neither locked nor
    /// written; it answers exactly like an unknown one (issue 17: the contract's
    /// target_not_found rejection, `pdcp_log_id: null`), or write_not_granted when the caller
    /// may read it. Arguments that do not parse touch no row at all.
    #[test]
    fn an_invisible_target_writes_nothing() {
        let mut s = Memory::with("a\n");
        for (id, status, code) in [
            (
                "44444444-4444-4444-8444-444444444444",
                "rejected",
                "target_not_found",
            ),
            (READ_ONLY, "permission_denied", "write_not_granted"),
        ] {
            s.calls.clear();
            let args = json!({"target_file_id": id, "intent": "i",
                              "edits": [{"match": "a", "replace": "b"}]});
            let r = edits(args, &mut s, false);
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!(status), &json!(code)),
                "{r}"
            );
            assert_eq!(s.calls, ["lock_target", "readable"]);
        }
        // A malformed target ID: the invalid_target_id rejection, before any row is touched.
        s.calls.clear();
        let args = json!({"target_file_id": "not-a-uuid", "intent": "i", "include_correlation_id": true,
                          "edits": [{"match": "a", "replace": "b"}]});
        let r = edits(args, &mut s, false);
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("rejected"), &json!("invalid_target_id")),
            "{r}"
        );
        assert_eq!(r["target_file_id"], "not-a-uuid");
        assert!(r["correlation_id"].is_string(), "{r}");
        assert!(s.calls.is_empty());
        s.calls.clear();
        let r = edits(json!({"target_file_id": T}), &mut s, false);
        assert_eq!(r["status"], "invalid_argument");
        assert!(s.calls.is_empty());
        assert!(s.attempts.is_empty());
    }

    /// Issue 17: "A fault inside the near-miss search must not roll back the audited attempt:
    /// return an omission_reason instead." The attempt is written before the search; a search
    /// that panics or cannot get its memory leaves the verdict and the written attempt as they
    /// are and answers near_miss_search_failed. An interrupt raised inside the search unwinds
    /// out of the call (PostgreSQL then rolls the statement back, attempt and all, and returns
    /// no verdict).
    #[test]
    fn a_failing_near_miss_search_keeps_the_rejection_and_its_attempt() {
        use crate::contract::interrupt;
        use crate::evidence::near_miss::fault::{Fault, inject};
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "retrun \"hello\"", "replace": "x"}]});
        for fault in [Fault::Panic, Fault::Allocation] {
            let mut s = Memory::with(DOC);
            inject(Some(fault));
            let r = edits(args.clone(), &mut s, false);
            inject(None);
            assert_eq!(r["status"], "rejected", "{fault:?}");
            assert_eq!(r["failure_reason"], "match_absent");
            // The contract's list is omitted; the drift evidence (searched apart) still comes.
            assert_eq!(
                r["near_misses"]["omission_reason"], "near_miss_search_failed",
                "{fault:?}: {r}"
            );
            assert!(r["near_misses"]["candidates"].is_null());
            assert!(r["near_misses"]["whitespace_candidates"].is_object());
            assert_eq!(s.writes(), ["write_attempt"]);
            assert_eq!(r["pdcp_log_id"], s.attempts[0].0);
        }
        // A fault in the drift evidence (searched apart, contained apart) keeps the verdict, the
        // attempt and the contract's near misses; only the drift members name the failure.
        let mut s = Memory::with(DOC);
        inject(Some(Fault::DriftPanic));
        let r = edits(args.clone(), &mut s, false);
        inject(None);
        assert_eq!(r["status"], "rejected");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert_eq!(r["pdcp_log_id"], s.attempts[0].0);
        assert_eq!(
            r["near_misses"]["candidates"][0]["text"],
            "return \"hello\""
        );
        for member in ["whitespace_candidates", "block_near_miss"] {
            assert_eq!(
                r["near_misses"][member],
                json!({"omission_reason": "near_miss_search_failed"}),
                "{member}"
            );
        }
        // Unfaulted, the same submission lists the near miss.
        let mut s = Memory::with(DOC);
        let r = edits(args.clone(), &mut s, false);
        assert_eq!(
            r["near_misses"]["candidates"][0]["text"],
            "return \"hello\""
        );

        let mut s = Memory::with(DOC);
        inject(Some(Fault::Interrupt(|| interrupt::testing::arm(Some(0)))));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            edits(args.clone(), &mut s, false)
        }));
        inject(None);
        interrupt::testing::arm(None);
        let payload = out.expect_err("the interrupt ends the call");
        assert_eq!(
            payload.downcast_ref::<String>().map(String::as_str),
            Some(interrupt::testing::INTERRUPTED)
        );
    }

    /// Contract "patchdiff_submit_edits": `source (string, default "model_response")`. Any
    /// string of at most 256 code points (docs/sql-api.md) is accepted and stored exactly as
    /// sent, spaces and non-ASCII included; omitted or null stores the default.
    #[test]
    fn source_is_any_string_stored_as_sent() {
        let at_cap = "\u{00e9}".repeat(crate::contract::limits::SOURCE_MAX_CHARS);
        for (sent, stored) in [
            (json!("Claude Code"), "Claude Code"),
            (json!("user edit"), "user edit"),
            (
                json!("\u{7de8}\u{96c6}\u{8005} \u{1f916}\tv2"),
                "\u{7de8}\u{96c6}\u{8005} \u{1f916}\tv2",
            ),
            (json!(""), ""),
            (json!(at_cap), at_cap.as_str()),
            (Value::Null, submit::DEFAULT_SOURCE),
        ] {
            let mut s = Memory::with("a\n");
            let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                              "edits": [{"match": "a", "replace": "b"}], "source": sent});
            let r = edits(args, &mut s, false);
            assert_eq!(r["status"], "accepted", "{r}");
            assert_eq!(s.attempts[0].1.source, stored);
        }
    }

    /// The same clause's documented bound: a source over 256 code points is refused with
    /// `invalid_argument` / `source_too_large` before the target is even locked, so nothing is
    /// written; a source that is not a string is `invalid_source`, likewise unwritten.
    #[test]
    fn over_long_source_is_refused_before_any_row() {
        let long = "\u{00e9}".repeat(crate::contract::limits::SOURCE_MAX_CHARS + 1);
        for (sent, code) in [
            (json!(long), "source_too_large"),
            (json!(7), "invalid_source"),
        ] {
            let mut s = Memory::with("a\n");
            let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                              "edits": [{"match": "a", "replace": "b"}], "source": sent});
            let r = edits(args, &mut s, false);
            assert_eq!(
                (&r["status"], &r["code"]),
                (&json!("invalid_argument"), &json!(code)),
                "{r}"
            );
            assert!(s.calls.is_empty(), "{:?}", s.calls);
            assert!(s.attempts.is_empty());
        }
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "a", "replace": "b"}], "source": long});
        let r = edits(args, &mut s, false);
        assert_eq!((&r["limit"], &r["actual"]), (&json!(256), &json!(257)));
    }

    /// Contract "Common input and request-key rules": NUL in `source` is text PostgreSQL cannot
    /// store, so it is the audited `target_encoding_invalid` rejection (one row, the source kept
    /// as evidence in the envelope, the row's column the default), not an argument error.
    #[test]
    fn invalid_text_in_source_is_an_audited_rejection() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "a", "replace": "b"}], "source": "bot\u{0000}"});
        let r = edits(args, &mut s, false);
        assert_eq!(r["failure_reason"], "target_encoding_invalid", "{r}");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert_eq!(s.attempts[0].1.source, submit::DEFAULT_SOURCE);
        assert!(s.attempts[0].1.pdcp_content.contains("bot\\u0000"));
    }

    /// Contract "Common input and request-key rules" and "patchdiff_submit_replacement"
    /// ordering ("invalid text is classified first"), under strict observation mode: a fresh
    /// unobserved proposal holding NUL is the audited target_encoding_invalid rejection, not
    /// OBSERVATION_REQUIRED.
    #[test]
    fn strict_mode_follows_invalid_text_classification() {
        let mut s = Memory::with("a\n");
        let args = json!({"target_file_id": T, "intent": "i", "expected_target_version": 0,
                          "edits": [{"match": "a\u{0000}", "replace": "b"}]});
        let r = edits(args, &mut s, true);
        assert_eq!(r["failure_reason"], "target_encoding_invalid", "{r}");
        assert_eq!(r.get("code"), None, "{r}");
        assert_eq!(s.writes(), ["write_attempt"]);
        assert_eq!(
            s.attempts[0].1.failure_reason,
            Some(crate::contract::words::FailureReason::TargetEncodingInvalid)
        );
    }

    /// Contract "patchdiff_submit_replacement": fresh admission runs "before any row", so under
    /// strict observation mode a valid oversized replacement is still `replacement_too_large`
    /// with `pdcp_log_id: null` and nothing written, not an audited OBSERVATION_REQUIRED row.
    #[test]
    fn strict_mode_follows_replacement_admission() {
        let mut s = Memory::with("a\n");
        let big = "x".repeat(crate::contract::limits::REPLACEMENT_MAX_CODE_POINTS + 1);
        let args = json!({"target_file_id": T, "intent": "i", "replacement": big,
                          "expected_target_version": 0});
        let sub = submit::parse_submit_replacement(&args.to_string());
        let strict = Settings {
            strict_observation_mode: true,
            ..Settings::default()
        };
        let r = run(
            &mut s,
            "patchdiff_submit_replacement",
            sub,
            Route::Unobserved,
            strict,
        );
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("invalid_argument"), &json!("replacement_too_large")),
            "{r}"
        );
        assert_eq!(r["pdcp_log_id"], Value::Null);
        assert!(s.writes().is_empty());
        // A replacement within the limits is then refused by strict mode, audited.
        let args = json!({"target_file_id": T, "intent": "i", "replacement": "y",
                          "expected_target_version": 0});
        let sub = submit::parse_submit_replacement(&args.to_string());
        let r = run(
            &mut s,
            "patchdiff_submit_replacement",
            sub,
            Route::Unobserved,
            strict,
        );
        assert_eq!(r["code"], "OBSERVATION_REQUIRED", "{r}");
        assert_eq!(s.writes(), ["write_attempt"]);
    }

    /// Resource bounds (docs/reliability.md): the typed entry point's text arguments count
    /// together against `patchdiff.max_argument_bytes`, as one `json` argument does; at the
    /// limit they are read, one byte over they are refused before any JSON is built.
    #[test]
    fn typed_text_arguments_count_against_the_argument_limit() {
        let typed = |intent: &str, source: &str| TypedEdits {
            target_file_id: Some(T.into()),
            intent: Some(intent.into()),
            edits: Some("[]"),
            expected_target_version: Some(0),
            expected_current_hash: None,
            client_request_id: Some("k".into()),
            parent_pdcp_log_id: None,
            attempt: None,
            source: Some(source.into()),
            include_correlation_id: None,
        };
        // "[]" + intent + "k" + source: 2 + 10 + 1 + 3 = 16 bytes.
        assert!(typed("0123456789", "sql").arguments(16).is_ok());
        let r = typed("0123456789", "sql").arguments(15).unwrap_err();
        assert_eq!(
            (&r["status"], &r["code"]),
            (&json!("invalid_argument"), &json!("arguments_too_large")),
            "{r}"
        );
        assert!(
            r["failure_detail"].as_str().is_some_and(|d| d
                .starts_with("the arguments are 16 bytes, over this server's limit of 15 bytes")),
            "{r}"
        );
        let r = typed("i", &"s".repeat(100)).arguments(64).unwrap_err();
        assert_eq!(r["code"], "arguments_too_large", "{r}");
    }
}
