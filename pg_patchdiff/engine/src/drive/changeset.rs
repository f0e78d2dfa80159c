//! `patchdiff_submit_changeset` (issue 19 item 1) over a [`Store`]: every member through the
//! single submission's own steps ([`crate::drive::submission`]: lock, keyed recovery or
//! conflict, strict mode, evaluation, the attempt write and the answer), all or none.
//!
//! 1. The arguments, the caps and duplicate targets, before any lock
//!    ([`crate::submission::changeset::parse`]).
//!    Then the sizes of the members' targets together, read without their texts
//!    (`patchdiff.max_changeset_target_bytes`): a changeset holds every member's text at once.
//! 2. Every member's target locked in one global order, by target ID, so two changesets over
//!    the same targets cannot deadlock. A target the caller may not write ends the call there:
//!    the answer names the member, and nothing is written. The locked texts' sizes are checked
//!    again.
//! 3. Every member decided under the locks, writing nothing yet.
//! 4. Only then the writes: every member accepted, or every member rejected (a member that
//!    passed is logged as `changeset_member_rejected`, naming the failing member), all under
//!    one `changeset_id`. The log never holds an acceptance that did not take effect.

use crate::contract::words::{DiagnosticCode, FailureReason, Status};
use crate::drive::store::{Store, StoredTarget};
use crate::drive::submission::{Decision, Locked, Settings, Verdict, lock};
use crate::evidence::rejection::{Rejection, Stage};
use crate::submission::changeset::{self, Changeset, Member, TOOL};
use crate::submission::submit::{self, Attempt, AttemptRow, Parent};
use crate::target::TargetView;
use serde_json::{Map, Value, json};

/// Runs `patchdiff_submit_changeset` over the caller's transaction.
pub fn submit_changeset(store: &mut impl Store, args: &str, settings: Settings) -> Value {
    let cs = match changeset::parse(args) {
        Ok(c) => c,
        Err(e) => return e.to_json(TOOL),
    };
    let n = cs.members.len();
    let correlations: Vec<Option<String>> = cs
        .members
        .iter()
        .map(|m| m.sub.include_correlation_id.then(|| store.new_id()))
        .collect();
    // One global order: by target ID (canonical lower-case UUIDs, so string order is ID order).
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        cs.members[a]
            .sub
            .target_file_id
            .cmp(&cs.members[b].sub.target_file_id)
    });
    // A changeset holds every member's text at once: their sizes together are bounded before any
    // is read or locked (a target the caller may not write is not measured; locking it answers).
    let measured = cs
        .members
        .iter()
        .filter_map(|m| store.target_bytes(&m.sub.target_file_id))
        .fold(0, usize::saturating_add);
    if let Some(e) = changeset::targets_too_large(measured, settings.max_changeset_target_bytes) {
        return e.to_json(TOOL);
    }
    let mut targets: Vec<Option<StoredTarget>> = vec![None; n];
    for &i in &order {
        let m = &cs.members[i];
        match lock(store, &m.sub, correlations[i].as_deref()) {
            Ok(t) => targets[i] = Some(t),
            Err(answer) => return unwritten(&cs, m, answer),
        }
    }
    let targets: Vec<StoredTarget> = targets.into_iter().flatten().collect();
    // ... and again as locked: a target may have grown since it was measured.
    let held = targets
        .iter()
        .map(|t| t.content.len())
        .fold(0, usize::saturating_add);
    if let Some(e) = changeset::targets_too_large(held, settings.max_changeset_target_bytes) {
        return e.to_json(TOOL);
    }
    let parents: Vec<Parent> = cs
        .members
        .iter()
        .map(|m| {
            m.sub
                .parent_uuid()
                .map_or(Parent::NotLookedUp, |p| store.parent(&p))
        })
        .collect();
    let own: Vec<submit::Identity> = cs
        .members
        .iter()
        .zip(&parents)
        .map(|(m, p)| submit::prepare(&m.sub, p))
        .collect();
    let pairs: Vec<(&str, &str)> = cs
        .members
        .iter()
        .zip(&own)
        .map(|(m, id)| (m.sub.target_file_id.as_str(), id.fingerprint.as_str()))
        .collect();
    let stored: Vec<Option<AttemptRow>> = match &cs.client_request_id {
        Some(k) => cs
            .members
            .iter()
            .map(|m| store.keyed_attempt(&m.sub.target_file_id, k))
            .collect(),
        None => vec![None; n],
    };
    let salt = changeset::stored_salt(
        stored
            .iter()
            .map(|s| s.as_ref().map(|s| &s.request_envelope)),
    )
    .unwrap_or_else(|| store.new_id());
    let cs_fingerprint = changeset::fingerprint(&pairs, &salt);
    let identities: Vec<submit::Identity> = own
        .iter()
        .map(|id| changeset::member_identity(id, &cs_fingerprint, &salt))
        .collect();
    let locked: Vec<Locked> = (0..n)
        .map(|i| Locked {
            sub: &cs.members[i].sub,
            target: &targets[i],
            identity: &identities[i],
            parent: &parents[i],
            correlation: correlations[i].as_deref(),
            route: crate::drive::submission::Route::Unobserved,
            settings,
        })
        .collect();
    let found = stored.iter().flatten().count();
    let all_match = stored.iter().zip(&identities).all(|(s, id)| {
        s.as_ref()
            .is_some_and(|s| s.request_fingerprint == id.fingerprint)
    });
    if found == n && all_match {
        return recovered(&cs, store, &locked, stored);
    }
    // Fresh, or a key conflict: some member's target holds the key for something else (a
    // different changeset body, another target set, a single submission).
    let conflict = found > 0;
    let mut verdicts: Vec<Verdict> = Vec::with_capacity(n);
    for (i, l) in locked.iter().enumerate() {
        let mismatched = stored[i]
            .as_ref()
            .filter(|s| s.request_fingerprint != l.identity.fingerprint)
            .cloned();
        match l.decide(store, mismatched) {
            Decision::Write(v) => verdicts.push(v),
            // Only a sole replacement's admission answers without a row, and a changeset holds
            // no replacement; should it ever, the whole changeset writes nothing.
            Decision::Answered(answer) => return unwritten(&cs, &cs.members[i], answer),
        }
    }
    let failing = verdicts.iter().enumerate().find_map(|(i, v)| {
        let a = &v.attempt;
        let keyed = a.conflicts_with_pdcp_log_id.is_some();
        (a.status != Status::Accepted && (!conflict || keyed)).then_some(i)
    });
    let failing = failing
        .or_else(|| {
            verdicts
                .iter()
                .position(|v| v.attempt.status != Status::Accepted)
        })
        // A key held on some member targets (with this changeset's fingerprint) but not on
        // others cannot come from this changeset, which writes all or none: never applied.
        .or_else(|| {
            conflict
                .then(|| stored.iter().position(Option::is_some))
                .flatten()
        });
    let changeset_id = store.new_id();
    let mut answers = Vec::with_capacity(n);
    let mut failing_member = Value::Null;
    if let Some(f) = failing {
        failing_member = failure(&cs.members[f], &verdicts[f].attempt);
    }
    for (l, mut v) in locked.iter().zip(verdicts) {
        if conflict && v.attempt.conflicts_with_pdcp_log_id.is_none() {
            // The key is not this changeset's on every target: no member of it takes the key.
            v.attempt.client_request_id = None;
        }
        if let Some(f) = failing
            && v.attempt.status == Status::Accepted
        {
            v.attempt = demote(v.attempt, l, &cs.members[f], &changeset_id);
        }
        v.attempt.changeset_id = Some(changeset_id.clone());
        answers.push(l.record(store, v));
    }
    answer(
        &cs,
        if failing.is_some() {
            Status::Rejected
        } else {
            Status::Accepted
        },
        Some(&changeset_id),
        failing_member,
        answers,
        false,
    )
}

/// A member that passed its own checks, rejected because `failing` was: its stored row says which
/// member of which changeset failed, and it changes nothing. It does not name the failing
/// member's target or why it failed: this row is read by whoever may read this member's target,
/// who may not read that one (docs/security.md, "A target you may not read does not exist for
/// you"). The changeset's answer names both (`failing_member`), to its caller, who could write
/// every member's target.
fn demote(a: Attempt, l: &Locked, failing: &Member, changeset_id: &str) -> Attempt {
    let r = Rejection::coded(
        FailureReason::ContextInvalid,
        Stage::PreconditionGuard,
        DiagnosticCode::ChangesetMemberRejected,
        format!(
            "Not applied: member {} of changeset {changeset_id} was rejected; a changeset applies every member or none.",
            failing.index
        ),
    )
    .field("changeset_id", json!(changeset_id))
    .field("failing_member_index", json!(failing.index));
    let start: TargetView = l.target.view();
    let base = Attempt {
        status: Status::Rejected,
        after_version: None,
        after_hash: None,
        new_content: None,
        changes: Vec::new(),
        warnings: Vec::new(),
        diagnostic: None,
        near_miss_input: None,
        ..a
    };
    submit::rejected(base, &r, l.sub.protocol_version, &start)
}

/// What names the failing member in the changeset's answer.
fn failure(m: &Member, a: &Attempt) -> Value {
    let code = a
        .diagnostic
        .as_ref()
        .and_then(|d| d.get("code"))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "member_index": m.index,
        "target_file_id": m.sub.target_file_id,
        "failure_reason": a.failure_reason.map(FailureReason::as_str),
        "code": code,
    })
}

/// A member whose target the caller may not write (or, never in practice, an answer without
/// a row): the changeset ends before anything is written, and says which member.
fn unwritten(cs: &Changeset, m: &Member, answer: Value) -> Value {
    let reason = answer
        .get("failure_reason")
        .or_else(|| answer.get("code"))
        .cloned()
        .unwrap_or(Value::Null);
    let code = answer
        .get("code")
        .or_else(|| answer.get("diagnostic").and_then(|d| d.get("code")))
        .cloned()
        .unwrap_or(Value::Null);
    let failing = json!({
        "member_index": m.index,
        "target_file_id": m.sub.target_file_id,
        "failure_reason": reason,
        "code": code,
        "answer": answer,
    });
    self::answer(cs, Status::Rejected, None, failing, Vec::new(), false)
}

/// An exact resend of a recorded changeset: every member's recorded outcome, nothing written.
fn recovered(
    cs: &Changeset,
    store: &mut impl Store,
    locked: &[Locked],
    stored: Vec<Option<AttemptRow>>,
) -> Value {
    let stored: Vec<AttemptRow> = stored.into_iter().flatten().collect();
    let changeset_id = stored.first().and_then(|s| s.changeset_id.clone());
    let accepted = stored.iter().all(|s| s.status() == Some(Status::Accepted));
    let failing = stored.iter().enumerate().find(|(_, s)| {
        s.status() != Some(Status::Accepted)
            && s.diagnostic.as_ref().and_then(|d| d["code"].as_str())
                != Some(DiagnosticCode::ChangesetMemberRejected.as_str())
    });
    let failing_member = failing.map_or(Value::Null, |(i, s)| {
        json!({
            "member_index": i,
            "target_file_id": cs.members[i].sub.target_file_id,
            "failure_reason": s.failure_reason,
            "code": s.diagnostic.as_ref().and_then(|d| d.get("code")).cloned().unwrap_or(Value::Null),
        })
    });
    let mut answers = Vec::with_capacity(stored.len());
    for (l, s) in locked.iter().zip(stored) {
        match l.decide(store, Some(s)) {
            Decision::Answered(v) => answers.push(v),
            // The fingerprints matched, so every member recovers; a mismatch cannot get here.
            Decision::Write(_) => unreachable!("a matching fingerprint recovers"),
        }
    }
    let status = if accepted {
        Status::Accepted
    } else {
        Status::Rejected
    };
    answer(
        cs,
        status,
        changeset_id.as_deref(),
        failing_member,
        answers,
        true,
    )
}

/// The changeset's answer: its status, its ID (null when nothing was written), the failing
/// member, and each member's own answer in member order.
fn answer(
    cs: &Changeset,
    status: Status,
    changeset_id: Option<&str>,
    failing_member: Value,
    members: Vec<Value>,
    deduplicated: bool,
) -> Value {
    let mut m = Map::new();
    m.insert("status".into(), json!(status.as_str()));
    m.insert("changeset_id".into(), json!(changeset_id));
    m.insert("member_count".into(), json!(cs.members.len()));
    // A rejection's code at the top, as the single tools answer it (target_not_found,
    // request_key_conflict, ...): the failing member's.
    if let Some(code) = failing_member.get("code").filter(|c| !c.is_null()) {
        m.insert("code".into(), code.clone());
    }
    m.insert("failing_member".into(), failing_member);
    m.insert("members".into(), Value::Array(members));
    m.insert("deduplicated".into(), json!(deduplicated));
    m.insert("client_request_id".into(), json!(cs.client_request_id));
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    //! Issue 19 item 1, "Changesets", over an in-memory [`Store`] of several targets that
    //! records every call: lock order, all or none, the log, request keys, tenancy and caps. The
    //! same clauses run on real PostgreSQL in tests/tests/changesets.rs.

    use super::*;
    use crate::drive::store::Session;
    use crate::scope::observation::{ObservationLink, ObservationRow};
    use crate::text::sha256_hex;
    use std::collections::BTreeMap;

    const A: &str = "aaaaaaaa-0000-4000-8000-000000000001";
    const B: &str = "bbbbbbbb-0000-4000-8000-000000000002";
    const HIDDEN: &str = "cccccccc-0000-4000-8000-000000000003";

    #[derive(Default)]
    struct Memory {
        targets: BTreeMap<String, StoredTarget>,
        attempts: Vec<(String, String, Attempt)>,
        locked: Vec<String>,
        writes: usize,
        ids: u32,
        /// Bytes each target gains between being measured and being locked (another writer).
        grown: usize,
    }

    impl Memory {
        fn with(docs: &[(&str, &str)]) -> Memory {
            let mut m = Memory::default();
            for (id, doc) in docs {
                m.targets.insert(
                    (*id).into(),
                    StoredTarget {
                        target_file_id: (*id).into(),
                        version: 0,
                        current_hash: sha256_hex(doc),
                        content: (*doc).into(),
                        active_editing_cycle_id: "dddddddd-0000-4000-8000-000000000000".into(),
                        filename: "f.rs".into(),
                        target_type: "text".into(),
                        source_line_endings: None,
                    },
                );
            }
            m
        }
        fn content(&self, id: &str) -> &str {
            &self.targets[id].content
        }
    }

    impl Session for Memory {
        fn new_id(&mut self) -> String {
            self.ids += 1;
            format!("00000000-0000-4000-8000-{:012}", self.ids)
        }
        fn readable(&mut self, _: &str) -> bool {
            false
        }
    }

    impl Store for Memory {
        fn lock_target(&mut self, id: &str) -> Option<StoredTarget> {
            self.locked.push(id.into());
            let mut t = self.targets.get(id).cloned()?;
            t.content.push_str(&"+".repeat(self.grown));
            Some(t)
        }
        fn writable_target(&mut self, id: &str) -> Option<StoredTarget> {
            self.targets.get(id).cloned()
        }
        fn parent(&mut self, _: &str) -> Parent {
            Parent::NotFound
        }
        fn keyed_attempt(&mut self, id: &str, key: &str) -> Option<AttemptRow> {
            self.attempts
                .iter()
                .find(|(l, t, a)| {
                    t == id && a.client_request_id.as_deref() == Some(key) && !l.is_empty()
                })
                .map(|(l, _, a)| AttemptRow::of(a, l))
        }
        fn lock_observations(&mut self, _: &str, _: &[String]) -> Vec<ObservationRow> {
            Vec::new()
        }
        fn consumed_by(&mut self, _: &str) -> Vec<ObservationRow> {
            Vec::new()
        }
        fn write_attempt(
            &mut self,
            a: &Attempt,
            new_content: Option<String>,
            log_id: &str,
            id: &str,
            _: &str,
        ) {
            self.writes += 1;
            assert!(a.new_content.is_none(), "the new text crosses on its own");
            if let (Some(t), Some(c)) = (self.targets.get_mut(id), &new_content) {
                t.content = c.clone();
                t.current_hash = a.after_hash.clone().unwrap();
                t.version = a.after_version.unwrap();
            }
            let mut a = a.clone();
            a.new_content = new_content;
            self.attempts.push((log_id.into(), id.into(), a));
        }
        fn write_consumptions(&mut self, _: &str, _: &[ObservationLink]) {}
    }

    fn edit(id: &str, m: &str, r: &str) -> Value {
        json!({"target_file_id": id, "intent": "rename", "expected_target_version": 0,
               "edits": [{"match": m, "replace": r}]})
    }

    fn run(s: &mut Memory, args: Value) -> Value {
        submit_changeset(s, &args.to_string(), Settings::default())
    }

    /// "Either every proposal is accepted and committed"; "targets are locked in one global
    /// order": members listed B then A are locked A then B, and both are applied, each logged
    /// under the one changeset_id.
    #[test]
    fn every_member_accepted_is_applied_under_one_changeset_id() {
        let mut s = Memory::with(&[(A, "fn old() {}\n"), (B, "old();\n")]);
        let ops = json!({"target_file_id": A, "intent": "rename", "expected_target_version": 0,
                         "operations": [{"op": "match", "match": "old", "replace": "new"}]});
        let r = run(&mut s, json!({"members": [edit(B, "old", "new"), ops]}));
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!(s.locked, [A, B]);
        assert_eq!((s.content(A), s.content(B)), ("fn new() {}\n", "new();\n"));
        assert_eq!(r["members"][0]["target_file_id"], B);
        assert_eq!(r["members"][1]["status"], "accepted");
        assert_eq!(r["failing_member"], Value::Null);
        let id = r["changeset_id"].as_str().unwrap();
        assert_eq!(s.attempts.len(), 2);
        for (log, _, a) in &s.attempts {
            assert_eq!(a.changeset_id.as_deref(), Some(id));
            assert_eq!(a.status, Status::Accepted);
            assert!(
                r["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|m| m["pdcp_log_id"] == log.as_str())
            );
        }
    }

    /// "Or none is applied": member 1 is rejected, so member 0, which passed, is logged rejected
    /// with changeset_member_rejected naming member 1 and its target; no target changes.
    #[test]
    fn one_rejected_member_rejects_every_member_and_names_it() {
        let mut s = Memory::with(&[(A, "fn old() {}\n"), (B, "old();\n")]);
        let r = run(
            &mut s,
            json!({"members": [edit(A, "old", "new"), edit(B, "absent", "x")]}),
        );
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(
            r["failing_member"],
            json!({"member_index": 1, "target_file_id": B, "failure_reason": "match_absent",
                   "code": Value::Null})
        );
        assert_eq!((s.content(A), s.content(B)), ("fn old() {}\n", "old();\n"));
        assert_eq!(s.attempts.len(), 2);
        assert!(
            s.attempts
                .iter()
                .all(|(_, _, a)| a.status == Status::Rejected
                    && a.changeset_id == r["changeset_id"].as_str().map(str::to_owned))
        );
        let m0 = &r["members"][0];
        assert_eq!(m0["status"], "rejected");
        assert_eq!(m0["failure_reason"], "context_invalid");
        let d = &m0["diagnostic"];
        assert_eq!(d["code"], "changeset_member_rejected");
        assert_eq!(d["failing_member_index"], 1);
        // The row of A names neither B nor why B failed: its readers may not read B.
        assert!(d.get("failing_target_file_id").is_none(), "{d}");
        assert!(d.get("failing_failure_reason").is_none(), "{d}");
        let detail = m0["failure_detail"].as_str().unwrap();
        assert!(
            !detail.contains(B) && !detail.contains("match_absent"),
            "{detail}"
        );
        assert_eq!(m0["current_version"], 0);
        assert_eq!(r["members"][1]["failure_reason"], "match_absent");
    }

    /// Tenancy: a member's target the caller may not see answers like an unknown target, names
    /// the member, and nothing at all is written.
    #[test]
    fn an_invisible_member_target_writes_nothing() {
        let mut s = Memory::with(&[(A, "a\n")]);
        let r = run(
            &mut s,
            json!({"members": [edit(A, "a", "b"), edit(HIDDEN, "a", "b")]}),
        );
        assert_eq!(r["status"], "rejected");
        assert_eq!(r["changeset_id"], Value::Null);
        assert_eq!(r["failing_member"]["member_index"], 1);
        assert_eq!(r["failing_member"]["failure_reason"], "context_invalid");
        assert_eq!(r["failing_member"]["code"], "target_not_found", "{r}");
        assert_eq!(
            r["failing_member"]["answer"]["diagnostic"]["code"],
            "target_not_found"
        );
        assert_eq!(s.writes, 0);
        assert_eq!(s.content(A), "a\n");
    }

    /// "One request key covers the whole changeset": a resend recovers every member's outcome
    /// and writes nothing; a different body under the key is an audited conflict that changes
    /// nothing; a single submission under the key on a member's target conflicts too.
    #[test]
    fn one_key_recovers_the_whole_changeset_or_conflicts() {
        let mut s = Memory::with(&[(A, "old\n"), (B, "old\n")]);
        let args = json!({"client_request_id": "k1",
                          "members": [edit(A, "old", "new"), edit(B, "old", "new")]});
        let first = run(&mut s, args.clone());
        assert_eq!(first["status"], "accepted");
        let again = run(&mut s, args);
        assert_eq!(again["status"], "accepted");
        assert_eq!(again["deduplicated"], true);
        assert_eq!(again["changeset_id"], first["changeset_id"]);
        assert_eq!(
            again["members"][1]["pdcp_log_id"],
            first["members"][1]["pdcp_log_id"]
        );
        assert_eq!(s.writes, 2);
        // Same key, a different body: one more row per member, none applied, none keyed.
        let other = json!({"client_request_id": "k1",
                           "members": [edit(A, "new", "newer"), edit(B, "new", "newer")]});
        let r = run(&mut s, other);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(r["failing_member"]["code"], "request_key_conflict");
        assert_eq!((s.content(A), s.content(B)), ("new\n", "new\n"));
        assert_eq!(s.writes, 4);
        assert!(
            s.attempts[2..]
                .iter()
                .all(|(_, _, a)| a.client_request_id.is_none())
        );
        // A single submission under the changeset's key on member A's target.
        let single = submit::parse_submit_edits(
            &json!({"target_file_id": A, "intent": "rename", "expected_target_version": 0,
                    "edits": [{"match": "old", "replace": "new"}], "client_request_id": "k1"})
            .to_string(),
        );
        let r = crate::drive::submission::run(
            &mut s,
            "patchdiff_submit_edits",
            single,
            crate::drive::submission::Route::Unobserved,
            Settings::default(),
        );
        assert_eq!(r["diagnostic"]["code"], "request_key_conflict", "{r}");
        // A rejected keyed changeset recovers the same rejection.
        let mut s = Memory::with(&[(A, "old\n"), (B, "old\n")]);
        let args = json!({"client_request_id": "k2",
                          "members": [edit(A, "old", "new"), edit(B, "absent", "x")]});
        let first = run(&mut s, args.clone());
        let again = run(&mut s, args);
        assert_eq!(again["status"], "rejected");
        assert_eq!(again["deduplicated"], true);
        assert_eq!(again["failing_member"], first["failing_member"]);
        assert_eq!(s.writes, 2);
    }

    /// docs/sql-api.md, "Rules that hold for every function": a member whose acceptance would grow its target past
    /// `patchdiff.max_target_bytes` rejects the changeset, naming that member and its
    /// `target_too_large` answer, and no member is written.
    #[test]
    fn a_member_over_max_target_bytes_writes_no_member() {
        let mut s = Memory::with(&[(A, "a\n"), (B, "a\n")]);
        let limited = Settings {
            max_target_bytes: 8,
            ..Settings::default()
        };
        let args = json!({"members": [edit(A, "a", "b"), edit(B, "a", "0123456789")]});
        let r = submit_changeset(&mut s, &args.to_string(), limited);
        assert_eq!(r["status"], "rejected", "{r}");
        let failing = &r["failing_member"];
        assert_eq!(
            (
                &failing["member_index"],
                &failing["target_file_id"],
                &failing["code"]
            ),
            (&json!(1), &json!(B), &json!("target_too_large")),
            "{r}"
        );
        assert_eq!(failing["answer"]["actual"], 11, "{r}");
        assert_eq!((s.content(A), s.content(B)), ("a\n", "a\n"));
        assert!(s.attempts.is_empty(), "no member written");
        let args = json!({"members": [edit(A, "a", "b"), edit(B, "a", "0123456")]});
        let r = submit_changeset(&mut s, &args.to_string(), limited);
        assert_eq!(r["status"], "accepted", "{r}");
    }

    /// A changeset holds every member's text at once, so the texts of its targets together are
    /// bounded (`patchdiff.max_changeset_target_bytes`, docs/sql-api.md, "Submit a changeset"):
    /// over the limit, `changeset_targets_too_large` with `limit` and `actual`, measured before
    /// any target is locked; nothing locked or written. A target that grew past it between
    /// being measured and being locked is refused under the lock, nothing written. At the limit,
    /// accepted.
    #[test]
    fn the_targets_of_a_changeset_are_bounded_together() {
        let mut s = Memory::with(&[(A, "a\n"), (B, "bb\n")]);
        let limit = |bytes| Settings {
            max_changeset_target_bytes: bytes,
            ..Settings::default()
        };
        let args = json!({"members": [edit(A, "a", "x"), edit(B, "bb", "y")]}).to_string();
        let r = submit_changeset(&mut s, &args, limit(4));
        assert_eq!(
            (&r["status"], &r["code"], &r["limit"], &r["actual"]),
            (
                &json!("invalid_argument"),
                &json!("changeset_targets_too_large"),
                &json!(4),
                &json!(5)
            ),
            "{r}"
        );
        assert!(s.locked.is_empty(), "measured, not locked");
        assert!(s.attempts.is_empty());
        s.grown = 1;
        let r = submit_changeset(&mut s, &args, limit(6));
        assert_eq!(
            (&r["code"], &r["actual"]),
            (&json!("changeset_targets_too_large"), &json!(7)),
            "{r}"
        );
        assert_eq!(s.locked, [A, B], "refused under the locks");
        assert!(s.attempts.is_empty(), "nothing written");
        assert_eq!((s.content(A), s.content(B)), ("a\n", "bb\n"));
        s.grown = 0;
        let r = submit_changeset(&mut s, &args, limit(5));
        assert_eq!(r["status"], "accepted", "{r}");
        assert_eq!((s.content(A), s.content(B)), ("x\n", "y\n"));
    }

    /// Strict observation mode holds for every member, as for the single tools: each fresh
    /// member is the audited OBSERVATION_REQUIRED rejection, so the changeset is rejected and no
    /// target changes; the rows are written in member order after every lock.
    #[test]
    fn strict_mode_rejects_every_member() {
        let mut s = Memory::with(&[(A, "a\n"), (B, "a\n")]);
        let strict = Settings {
            strict_observation_mode: true,
            ..Settings::default()
        };
        let args = json!({"members": [edit(B, "a", "b"), edit(A, "a", "b")]});
        let r = submit_changeset(&mut s, &args.to_string(), strict);
        assert_eq!(r["status"], "rejected", "{r}");
        assert_eq!(r["failing_member"]["member_index"], 0);
        assert_eq!(r["code"], "OBSERVATION_REQUIRED");
        assert_eq!(r["members"][1]["code"], "OBSERVATION_REQUIRED");
        assert_eq!((s.content(A), s.content(B)), ("a\n", "a\n"));
        assert_eq!(s.locked, [A, B]);
        let written: Vec<&str> = s.attempts.iter().map(|(_, t, _)| t.as_str()).collect();
        assert_eq!(written, [B, A]);
    }

    /// Caps and hostile input are refused before any lock: too many members, a target twice, a
    /// member with its own key, neither or both formats, over the byte cap, too deep.
    #[test]
    fn caps_and_hostile_input_are_refused_before_any_lock() {
        use crate::contract::limits::{
            CHANGESET_MAX_BYTES, CHANGESET_MAX_CHANGES, CHANGESET_MAX_MEMBERS,
        };
        // Two members of 5,000 edits or operations each are at the cap; one more is over it.
        let changes = |n: usize, key: &str, target: &str| {
            let mut m = edit(target, "a", "b");
            let one = m["edits"][0].clone();
            m.as_object_mut().unwrap().remove("edits");
            m[key] = Value::Array(vec![one; n]);
            m
        };
        let half = CHANGESET_MAX_CHANGES / 2;
        let at_cap =
            json!({"members": [changes(half, "edits", A), changes(half, "operations", B)]});
        let r = submit_changeset(
            &mut Memory::with(&[(A, "a\n"), (B, "a\n")]),
            &at_cap.to_string(),
            Settings::default(),
        );
        assert_ne!(r["code"], "too_many_changes", "{r}");
        let over =
            json!({"members": [changes(half, "edits", A), changes(half + 1, "operations", B)]});
        let many: Vec<Value> = (0..=CHANGESET_MAX_MEMBERS)
            .map(|i| edit(&format!("aaaaaaaa-0000-4000-8000-{i:012}"), "a", "b"))
            .collect();
        let mut keyed = edit(B, "a", "b");
        keyed["client_request_id"] = json!("own");
        let mut both = edit(B, "a", "b");
        both["operations"] = json!([]);
        let mut deep = String::new();
        for _ in 0..200 {
            deep.push('[');
        }
        let big = format!(
            "{{\"members\": [{}], \"pad\": \"{}\"}}",
            edit(A, "a", "b"),
            "x".repeat(CHANGESET_MAX_BYTES)
        );
        for (args, code) in [
            (json!({"members": many}).to_string(), "too_many_members"),
            (json!({"members": []}).to_string(), "invalid_members"),
            (json!({"members": {}}).to_string(), "invalid_members"),
            (
                json!({"members": [edit(A, "a", "b"), edit(&A.to_uppercase(), "b", "c")]})
                    .to_string(),
                "duplicate_target",
            ),
            (
                json!({"members": [edit(A, "a", "b"), keyed]}).to_string(),
                "member_request_key",
            ),
            (json!({"members": [both]}).to_string(), "invalid_member"),
            (json!({"members": [7]}).to_string(), "invalid_member"),
            (
                json!({"members": [edit(A, "a", "b")], "client_request_id": " "}).to_string(),
                "invalid_client_request_id",
            ),
            (format!("{{\"members\": {deep}"), "invalid_json"),
            (big, "changeset_too_large"),
            (over.to_string(), "too_many_changes"),
        ] {
            let mut s = Memory::with(&[(A, "a\n"), (B, "a\n")]);
            let r = submit_changeset(&mut s, &args, Settings::default());
            assert_eq!(r["status"], "invalid_argument", "{code}: {r}");
            assert_eq!(r["code"], code, "{r}");
            assert!(s.locked.is_empty() && s.writes == 0, "{code}");
        }
        let mut s = Memory::with(&[(A, "a\n")]);
        let mut bad = edit(A, "a", "b");
        bad["target_file_id"] = json!("nope");
        let r = run(&mut s, json!({"members": [edit(B, "a", "b"), bad]}));
        assert_eq!(r["member_index"], 1, "{r}");
        assert!(s.locked.is_empty());
    }
}
