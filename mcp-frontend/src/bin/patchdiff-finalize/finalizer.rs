//! The finalizer proper: per target, SAVE with both guards, replay, export, each result
//! checked and recorded; an uncertain SAVE stops the run.

use crate::caller::{Answer, Caller, status, truncate};
use crate::evidence::{EXPORT_FORMAT, Evidence, FORMAT};
use crate::manifest::{Target, is_uuid};
use crate::run::Outcome;
use patchdiff_engine::wire::sha256_hex;
use serde_json::{Map, Value, json};

/// What happened to one target.
struct Record {
    target: Target,
    state: &'static str,
    save: Value,
    replay: Value,
    export: Value,
    failure: Value,
}

impl Record {
    fn new(t: &Target) -> Record {
        Record {
            target: t.clone(),
            state: "not_started",
            save: Value::Null,
            replay: Value::Null,
            export: Value::Null,
            failure: Value::Null,
        }
    }

    fn fail(&mut self, state: &'static str, stage: &str, reason: &str, detail: String) {
        self.state = state;
        self.failure = json!({"stage": stage, "reason": reason, "detail": detail});
    }

    fn to_json(&self) -> Value {
        let mut v = self.target.to_json();
        v["state"] = json!(self.state);
        v["save"] = self.save.clone();
        v["replay"] = self.replay.clone();
        v["export"] = self.export.clone();
        v["failure"] = self.failure.clone();
        v
    }
}

/// Why the run stopped before its end.
struct Stop {
    reason: &'static str,
    target_file_id: Option<String>,
    stage: &'static str,
    detail: String,
}

pub(crate) struct Finalizer<'a> {
    caller: Caller<'a>,
    evidence: Evidence,
    targets: Vec<Record>,
    stopped: Option<Stop>,
    saves_sent: usize,
}

/// How one step of a target ended when it did not succeed.
enum StepError {
    /// The target failed; the run goes on with the others.
    Target,
    /// The run stops.
    Stop(Stop),
}

impl<'a> Finalizer<'a> {
    pub(crate) fn new(caller: Caller<'a>, evidence: Evidence, targets: &[Target]) -> Finalizer<'a> {
        Finalizer {
            caller,
            evidence,
            targets: targets.iter().map(Record::new).collect(),
            stopped: None,
            saves_sent: 0,
        }
    }

    pub(crate) async fn run(mut self) -> Outcome {
        let started = json!({"manifest_sha256": self.evidence.manifest_sha256, "targets": self.targets.len()});
        if let Err(e) = self.evidence.event("run_started", started) {
            self.stopped = Some(Stop {
                reason: "evidence_failure",
                target_file_id: None,
                stage: "events",
                detail: format!("cannot write events.jsonl: {e}"),
            });
        }
        for i in 0..self.targets.len() {
            if self.stopped.is_some() {
                break;
            }
            match self.finalize(i).await {
                Ok(()) | Err(StepError::Target) => {}
                Err(StepError::Stop(stop)) => {
                    // Best effort: the stop is reported in results.json and the outcome anyway.
                    let _ = self.evidence.event(
                        "run_stopped",
                        json!({"reason": stop.reason, "target_file_id": stop.target_file_id, "stage": stop.stage, "detail": stop.detail}),
                    );
                    self.stopped = Some(stop);
                }
            }
        }
        self.finish()
    }

    /// SAVE, replay, export and write one target.
    async fn finalize(&mut self, i: usize) -> Result<(), StepError> {
        let t = self.targets[i].target.clone();
        let id = t.target_file_id.clone();
        let stop = |reason, stage, detail: String| {
            StepError::Stop(Stop {
                reason,
                target_file_id: Some(t.target_file_id.clone()),
                stage,
                detail,
            })
        };

        // SAVE with both original guards. Its pending record is durable before it is sent.
        let args = json!({
            "target_file_id": id,
            "expected_target_version": t.expected_target_version,
            "expected_current_hash": t.expected_current_hash,
        });
        if let Err(e) = self.evidence.event(
            "save_pending",
            json!({"target_file_id": id, "arguments": args}),
        ) {
            return Err(stop(
                "evidence_failure",
                "save",
                format!("cannot record save_pending, so SAVE was not sent: {e}"),
            ));
        }
        self.saves_sent += 1;
        self.targets[i].state = "save_pending";
        let answer = self.caller.call("patchdiff_save", &args).await;
        let uncertain = |r: &mut Record, detail: String| {
            r.failure = json!({"stage": "save", "reason": "save_uncertain", "detail": detail});
            stop("save_uncertain", "save", detail)
        };
        let save = match answer {
            Err(e) => {
                let detail = format!("{e}; whether the SAVE committed is unknown");
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail}),
                );
                return Err(uncertain(&mut self.targets[i], detail));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = "patchdiff_save returned a malformed answer; whether the SAVE committed is unknown".to_string();
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail, "response_text": text}),
                );
                self.targets[i].save = json!({"response_text": text});
                return Err(uncertain(&mut self.targets[i], detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let response = Value::Object(save.clone());
        self.targets[i].save = response.clone();
        let verdict = match status(&save) {
            "saved" => match check_saved(&save, &t) {
                Ok(()) => "saved",
                Err(why) => {
                    let detail = format!(
                        "patchdiff_save answered saved inconsistently ({why}); the SAVE's effect is uncertain"
                    );
                    let _ = self.evidence.event(
                        "save_uncertain",
                        json!({"target_file_id": id, "detail": detail, "response": response}),
                    );
                    return Err(uncertain(&mut self.targets[i], detail));
                }
            },
            // Explicit refusals that, by contract, write nothing.
            "rejected"
            | "not_found"
            | "invalid_argument"
            | patchdiff_mcp::server::PERMISSION_DENIED => "rejected",
            other => {
                let detail = format!(
                    "patchdiff_save answered status {other:?}; whether the SAVE committed is unknown"
                );
                let _ = self.evidence.event(
                    "save_uncertain",
                    json!({"target_file_id": id, "detail": detail, "response": response}),
                );
                return Err(uncertain(&mut self.targets[i], detail));
            }
        };
        // A receipt that cannot be persisted leaves the SAVE uncertain for the operator.
        if let Err(e) = self.evidence.event(
            "save_response",
            json!({"target_file_id": id, "verdict": verdict, "response": response}),
        ) {
            let detail = format!("cannot persist the SAVE receipt: {e}");
            return Err(uncertain(&mut self.targets[i], detail));
        }
        if verdict == "rejected" {
            let reason = save
                .get("failure_reason")
                .or(save.get("code"))
                .and_then(Value::as_str)
                .unwrap_or(status(&save))
                .to_owned();
            let detail = save
                .get("failure_detail")
                .and_then(Value::as_str)
                .unwrap_or("patchdiff_save rejected the checkpoint")
                .to_owned();
            self.targets[i].fail("save_rejected", "save", &reason, detail);
            self.target_failed(i)?;
            return Err(StepError::Target);
        }
        self.targets[i].state = "saved";

        // Replay: the accepted history must reproduce exactly the guarded state.
        let replay = match self
            .caller
            .call("patchdiff_replay", &json!({"target_file_id": id}))
            .await
        {
            Err(e) => {
                self.targets[i].fail("interrupted", "replay", "infrastructure_failure", e.clone());
                return Err(stop("infrastructure_failure", "replay", e));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = format!(
                    "patchdiff_replay returned a malformed answer: {}",
                    truncate(&text, 4096)
                );
                self.targets[i].fail("interrupted", "replay", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "replay", detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let response = Value::Object(replay.clone());
        self.targets[i].replay = response.clone();
        let verified = check_replay(&replay, &t);
        if let Err(e) = self.evidence.event(
            "replay_response",
            json!({"target_file_id": id, "verified": verified.is_ok(), "response": response}),
        ) {
            let detail = format!("cannot record the replay: {e}");
            self.targets[i].fail("interrupted", "replay", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "replay", detail));
        }
        if let Err(why) = verified {
            self.targets[i].fail("replay_failed", "replay", "replay_not_verified", why);
            self.target_failed(i)?;
            return Err(StepError::Target);
        }

        // Export as canonical LF and hash the bytes independently.
        let args = json!({"target_file_id": id, "format": EXPORT_FORMAT});
        let mut export = match self.caller.call("patchdiff_export_target", &args).await {
            Err(e) => {
                self.targets[i].fail("interrupted", "export", "infrastructure_failure", e.clone());
                return Err(stop("infrastructure_failure", "export", e));
            }
            Ok(Answer::Malformed(text)) => {
                let detail = format!(
                    "patchdiff_export_target returned a malformed answer: {}",
                    truncate(&text, 4096)
                );
                self.targets[i].fail("interrupted", "export", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "export", detail));
            }
            Ok(Answer::Object(o)) => o,
        };
        let content = match export.shift_remove("content") {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let independent = content.as_deref().map(sha256_hex);
        let verified = check_export(&export, content.as_deref(), independent.as_deref(), &t);
        let mut receipt = Value::Object(export);
        receipt["independent_sha256"] = json!(independent);
        receipt["bytes"] = json!(content.as_ref().map(String::len));
        self.targets[i].export = receipt.clone();
        if let Err(e) = self.evidence.event(
            "export_response",
            json!({"target_file_id": id, "verified": verified.is_ok(), "response_without_content": receipt}),
        ) {
            let detail = format!("cannot record the export: {e}");
            self.targets[i].fail("interrupted", "export", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "export", detail));
        }
        let content = match (verified, content) {
            (Ok(()), Some(c)) => c,
            (Err(why), _) => {
                self.targets[i].fail("export_failed", "export", "export_not_verified", why);
                self.target_failed(i)?;
                return Err(StepError::Target);
            }
            (Ok(()), None) => unreachable!("check_export requires content"),
        };
        let path = match self.evidence.export(&t.filename, &content) {
            Ok(p) => p,
            Err(e) => {
                let detail = format!("cannot write exports/{}: {e}", t.filename);
                self.targets[i].fail("interrupted", "write", "evidence_failure", detail.clone());
                return Err(stop("evidence_failure", "write", detail));
            }
        };
        self.targets[i].export["path"] = json!(path);
        if let Err(e) = self.evidence.event(
            "target_finalized",
            json!({"target_file_id": id, "path": path, "sha256": independent}),
        ) {
            let detail = format!("cannot record the finalized target: {e}");
            self.targets[i].fail("interrupted", "write", "evidence_failure", detail.clone());
            return Err(stop("evidence_failure", "write", detail));
        }
        self.targets[i].state = "finalized";
        Ok(())
    }

    fn target_failed(&mut self, i: usize) -> Result<(), StepError> {
        let r = &self.targets[i];
        let fields = json!({"target_file_id": r.target.target_file_id, "state": r.state, "failure": r.failure});
        self.evidence.event("target_failed", fields).map_err(|e| {
            StepError::Stop(Stop {
                reason: "evidence_failure",
                target_file_id: Some(r.target.target_file_id.clone()),
                stage: "events",
                detail: format!("cannot record the target's failure: {e}"),
            })
        })
    }

    fn finish(self) -> Outcome {
        let finalized = self
            .targets
            .iter()
            .filter(|r| r.state == "finalized")
            .count();
        let complete = self.stopped.is_none() && finalized == self.targets.len();
        let stopped = self.stopped.as_ref().map(|s| {
            json!({"reason": s.reason, "target_file_id": s.target_file_id, "stage": s.stage, "detail": s.detail})
        });
        let pending: Vec<&str> = self
            .targets
            .iter()
            .filter(|r| r.state == "save_pending")
            .map(|r| r.target.target_file_id.as_str())
            .collect();
        let mut results = json!({
            "format": FORMAT,
            "status": if complete { "complete" } else { "incomplete" },
            "output_dir": self.evidence.root,
            "manifest_sha256": self.evidence.manifest_sha256,
            "export_format": EXPORT_FORMAT,
            "targets_total": self.targets.len(),
            "targets_finalized": finalized,
            "saves_sent": self.saves_sent,
            "save_pending": pending,
            "stopped": stopped,
            "targets": self.targets.iter().map(Record::to_json).collect::<Vec<_>>(),
        });
        let mut outcome = results.clone();
        match self.evidence.results(&results) {
            Ok(()) => outcome["results_json"] = json!("results.json"),
            Err(e) => {
                // results.json is best effort; this outcome is authoritative about the failure.
                results["status"] = json!("incomplete");
                outcome["status"] = json!("incomplete");
                outcome["results_json"] = Value::Null;
                outcome["results_json_error"] = json!(e.to_string());
                if outcome["stopped"].is_null() {
                    outcome["stopped"] = json!({"reason": "evidence_failure", "target_file_id": null, "stage": "results", "detail": format!("cannot persist results.json: {e}")});
                }
            }
        }
        let exit_code = if outcome["status"] == "complete" {
            0
        } else {
            1
        };
        Outcome {
            json: outcome,
            exit_code,
        }
    }
}

/// A `saved` answer must name the target and leave its guarded version and hash unchanged.
fn check_saved(o: &Map<String, Value>, t: &Target) -> Result<(), String> {
    let mut wrong = Vec::new();
    if o.get("target_file_id") != Some(&json!(t.target_file_id)) {
        wrong.push("target_file_id");
    }
    if o.get("version") != Some(&json!(t.expected_target_version)) {
        wrong.push("version");
    }
    if o.get("current_hash") != Some(&json!(t.expected_current_hash)) {
        wrong.push("current_hash");
    }
    for k in [
        "snapshot_id",
        "closed_editing_cycle_id",
        "new_editing_cycle_id",
    ] {
        if !o.get(k).and_then(Value::as_str).is_some_and(is_uuid) {
            wrong.push(k);
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected {}", wrong.join(", ")))
    }
}

/// Replay must succeed with all four materialized-state checks true and reconstruct exactly
/// the manifest's version and hash, which must also be the stored ones.
pub(crate) fn check_replay(o: &Map<String, Value>, t: &Target) -> Result<(), String> {
    if status(o) != "success" {
        return Err(format!(
            "replay status {:?} ({})",
            status(o),
            o.get("failure_reason")
                .and_then(Value::as_str)
                .unwrap_or("no failure_reason")
        ));
    }
    let mut wrong = Vec::new();
    if o.get("target_file_id") != Some(&json!(t.target_file_id)) {
        wrong.push("target_file_id".to_string());
    }
    let checks = o.get("materialized_state_checks");
    for c in [
        "content_matches",
        "stored_hash_matches",
        "recomputed_hash_matches",
        "version_matches",
    ] {
        if checks.and_then(|v| v.get(c)) != Some(&Value::Bool(true)) {
            wrong.push(c.to_string());
        }
    }
    if o.get("materialized_state_matches") != Some(&Value::Bool(true)) {
        wrong.push("materialized_state_matches".into());
    }
    for k in ["reconstructed_version", "current_version"] {
        if o.get(k) != Some(&json!(t.expected_target_version)) {
            wrong.push(format!("{k} (expected {})", t.expected_target_version));
        }
    }
    for k in ["reconstructed_hash", "current_hash"] {
        if o.get(k) != Some(&json!(t.expected_current_hash)) {
            wrong.push(format!("{k} (expected the manifest's hash)"));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("replay did not verify: {}", wrong.join(", ")))
    }
}

/// The export must be canonical LF of the guarded state, and its bytes must hash, by our own
/// computation, to both the export's content_sha256 and the manifest's canonical hash.
fn check_export(
    o: &Map<String, Value>,
    content: Option<&str>,
    independent: Option<&str>,
    t: &Target,
) -> Result<(), String> {
    if status(o) != "ok" {
        return Err(format!(
            "export status {:?} ({})",
            status(o),
            o.get("failure_detail")
                .and_then(Value::as_str)
                .unwrap_or("no detail")
        ));
    }
    let (Some(content), Some(independent)) = (content, independent) else {
        return Err("the export has no content".into());
    };
    let mut wrong = Vec::new();
    let expect = [
        ("filename", json!(t.filename)),
        ("format", json!(EXPORT_FORMAT)),
        ("content_eol", json!("lf")),
        ("version", json!(t.expected_target_version)),
        ("hash", json!(t.expected_current_hash)),
        ("current_hash", json!(t.expected_current_hash)),
        ("content_sha256", json!(independent)),
    ];
    for (k, v) in expect {
        if o.get(k) != Some(&v) {
            wrong.push(k.to_string());
        }
    }
    if content.contains('\r') {
        wrong.push("content is not LF-canonical".into());
    }
    if independent != t.expected_current_hash {
        wrong.push("the exported bytes do not hash to expected_current_hash".into());
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(format!("export did not verify: {}", wrong.join(", ")))
    }
}
