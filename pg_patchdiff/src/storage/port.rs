//! The engine's storage port over SPI, for one call of one caller.

use super::{Caller, Need, attempts, fault, grants, ledger, observations, targets};
use patchdiff_engine::api::history::{LedgerRow, LogQuery};
use patchdiff_engine::api::observation::{ObservationLink, ObservationRow};
use patchdiff_engine::api::scope::{Language, Outline};
use patchdiff_engine::api::store::{
    Checkpoints, Grants, History, NewObservation, NoOutline, Observations, Reads, SaveLock,
    Session, Store, StoredObservation, StoredState, StoredTarget, Targets, Versions,
};
use patchdiff_engine::api::submit::{Attempt, AttemptRow, Parent};
use patchdiff_engine::api::target::NewTarget;
use patchdiff_engine::api::target::TargetView;
use patchdiff_engine::api::tenancy::{ListQuery, ListedTarget, Privilege};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use std::rc::Rc;

/// The rows of the caller's transaction, as `caller` may see them: every port but [`History`].
pub struct SpiStore<'a, 'c> {
    pub client: &'a mut SpiClient<'c>,
    pub caller: Caller,
}

impl Session for SpiStore<'_, '_> {
    fn new_id(&mut self) -> String {
        crate::new_id()
    }

    fn new_target_id(&mut self) -> String {
        crate::new_target_id()
    }

    fn readable(&mut self, target_file_id: &str) -> bool {
        targets::readable(self.client, target_file_id, self.caller)
    }
}

impl Store for SpiStore<'_, '_> {
    fn lock_target(&mut self, target_file_id: &str) -> Option<StoredTarget> {
        targets::lock_target(self.client, target_file_id, self.caller)
    }

    fn writable_target(&mut self, target_file_id: &str) -> Option<StoredTarget> {
        targets::writable_target(self.client, target_file_id, self.caller)
    }

    fn target_bytes(&mut self, target_file_id: &str) -> Option<usize> {
        targets::target_bytes(self.client, target_file_id, self.caller)
    }

    fn parent(&mut self, pdcp_log_id: &str) -> Parent {
        attempts::parent(self.client, pdcp_log_id, self.caller)
    }

    fn keyed_attempt(
        &mut self,
        target_file_id: &str,
        client_request_id: &str,
    ) -> Option<AttemptRow> {
        attempts::keyed_attempt(self.client, target_file_id, client_request_id, self.caller)
    }

    fn lock_observations(
        &mut self,
        target_file_id: &str,
        observation_ids: &[String],
    ) -> Vec<ObservationRow> {
        observations::lock_observations(self.client, target_file_id, observation_ids, self.caller)
    }

    fn consumed_by(&mut self, pdcp_log_id: &str) -> Vec<ObservationRow> {
        observations::consumed_by(self.client, pdcp_log_id)
    }

    fn write_attempt(
        &mut self,
        attempt: &Attempt,
        new_content: Option<String>,
        pdcp_log_id: &str,
        target_file_id: &str,
        editing_cycle_id: &str,
    ) {
        attempts::write_attempt(
            self.client,
            attempt,
            new_content,
            pdcp_log_id,
            target_file_id,
            editing_cycle_id,
            self.caller.role,
        );
    }

    fn write_consumptions(&mut self, pdcp_log_id: &str, links: &[ObservationLink]) {
        observations::write_consumptions(self.client, pdcp_log_id, links);
    }
}

/// What replay reads, as `caller` may see it. Each read opens its own SPI connection, so a
/// batch's memory is released once it has been replayed. Nothing is locked.
pub struct SpiHistory {
    pub caller: Caller,
}

impl History for SpiHistory {
    fn replay_start(&mut self, target_file_id: &str) -> Option<(StoredState, Option<StoredState>)> {
        Spi::connect_mut(|c| targets::replay_start(c, target_file_id, self.caller))
    }

    fn version_now(&mut self, target_file_id: &str) -> Option<i64> {
        Spi::connect_mut(|c| targets::version_now(c, target_file_id, self.caller))
    }

    fn next_batches(&mut self, target_file_id: &str, after: i64) -> Vec<(i64, i64)> {
        attempts::next_batches(target_file_id, after)
    }

    fn accepted(&mut self, target_file_id: &str, after: i64, upto: i64) -> Vec<AttemptRow> {
        attempts::batch(target_file_id, after, upto)
    }
}

impl Versions for SpiHistory {
    fn diff_target(&mut self, target_file_id: &str) -> Option<StoredTarget> {
        Spi::connect(|c| targets::target(c, target_file_id, self.caller, Need::Read))
    }

    fn first_version(&mut self, target_file_id: &str) -> Option<i64> {
        Spi::connect(|c| targets::first_version(c, target_file_id))
    }

    fn snapshot_at_or_below(
        &mut self,
        target_file_id: &str,
        version: i64,
    ) -> Option<(StoredState, i64)> {
        Spi::connect(|c| targets::snapshot_at_or_below(c, target_file_id, version))
    }
}

impl Checkpoints for SpiStore<'_, '_> {
    fn lock_for_save(&mut self, target_file_id: &str, publish: bool) -> Option<SaveLock> {
        targets::lock_for_save(self.client, target_file_id, self.caller, publish)
    }

    fn save_checkpoint(
        &mut self,
        target_file_id: &str,
        cycle: &str,
        new_cycle: &str,
        version: i64,
        snapshot_id: &str,
    ) {
        targets::save_checkpoint(
            self.client,
            target_file_id,
            cycle,
            new_cycle,
            version,
            snapshot_id,
            self.caller.role,
        );
    }

    fn move_workspace_baseline(&mut self, target_file_id: &str, sha256: &str, bytes: i64) {
        targets::move_workspace_baseline(self.client, target_file_id, sha256, bytes);
    }

    fn saved_target(&mut self, target_file_id: &str) -> StoredTarget {
        targets::target(self.client, target_file_id, self.caller, Need::Read)
            .unwrap_or_else(|| fault("exporting", "target vanished"))
    }
}

impl Targets for SpiStore<'_, '_> {
    fn insert_target(
        &mut self,
        target: &NewTarget,
        target_file_id: &str,
        cycle_id: &str,
        snapshot_id: &str,
    ) -> bool {
        targets::insert_target(
            self.client,
            target,
            target_file_id,
            cycle_id,
            snapshot_id,
            self.caller.role,
        )
    }
}

impl Reads for SpiStore<'_, '_> {
    fn target(&mut self, target_file_id: &str) -> Option<StoredTarget> {
        targets::target(self.client, target_file_id, self.caller, Need::Read)
    }

    fn readable_cycle(&mut self, target_file_id: &str) -> Option<String> {
        targets::readable_cycle(self.client, target_file_id, self.caller)
    }

    fn log_page(&mut self, q: &LogQuery) -> (Vec<AttemptRow>, bool) {
        attempts::log_page(self.client, q)
    }

    fn record(&mut self, pdcp_log_id: &str) -> String {
        attempts::record(self.client, pdcp_log_id)
    }

    fn ledger_page(
        &mut self,
        target_file_id: &str,
        cycle: Option<&str>,
        max_sequence: i64,
        fetch: i64,
    ) -> (Vec<LedgerRow>, bool) {
        ledger::ledger_page(self.client, target_file_id, cycle, max_sequence, fetch)
    }
}

impl Grants for SpiStore<'_, '_> {
    type Role = pg_sys::Oid;

    fn owns(&mut self, target_file_id: &str) -> Option<bool> {
        grants::owns(self.client, target_file_id, self.caller)
    }

    fn role(&mut self, name: &str) -> Option<pg_sys::Oid> {
        grants::role(name)
    }

    fn grant(&mut self, target_file_id: &str, role: pg_sys::Oid, privilege: Privilege) {
        grants::grant(
            self.client,
            target_file_id,
            role,
            privilege,
            self.caller.role,
        );
    }

    fn revoke(&mut self, target_file_id: &str, role: pg_sys::Oid, write_only: bool) {
        grants::revoke(self.client, target_file_id, role, write_only);
    }

    fn current_grant(&mut self, target_file_id: &str, role: pg_sys::Oid) -> Option<Privilege> {
        grants::current_grant(self.client, target_file_id, role)
    }

    fn list_targets(&mut self, q: &ListQuery) -> Vec<ListedTarget> {
        grants::list_targets(self.client, self.caller, q)
    }
}

impl Observations for SpiStore<'_, '_> {
    fn target_for(&mut self, target_file_id: &str, write: bool) -> Option<StoredTarget> {
        let need = if write { Need::Write } else { Need::Read };
        targets::target(self.client, target_file_id, self.caller, need)
    }

    fn outline(
        &mut self,
        target: &TargetView,
        language: Language,
    ) -> Result<Rc<Outline>, NoOutline> {
        crate::observe::outline(target, language, self.caller.role)
    }

    fn insert_observation(&mut self, observation: &NewObservation) {
        observations::insert_observation(self.client, observation);
    }

    fn observation(&mut self, observation_id: &str) -> Option<StoredObservation> {
        observations::observation(self.client, observation_id, self.caller)
    }
}
