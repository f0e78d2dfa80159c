//! The engine's storage port ([`Store`], [`Checkpoints`], [`History`]) over SPI, for one call of one caller.

use super::{Caller, Need, attempts, fault, observations, targets};
use patchdiff_engine::api::observation::{ObservationLink, ObservationRow};
use patchdiff_engine::api::store::{
    Checkpoints, History, SaveLock, Store, StoredState, StoredTarget,
};
use patchdiff_engine::api::submit::{Attempt, AttemptRow, Parent};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

/// The rows of the caller's transaction, as `caller` may see them.
pub struct SpiStore<'a, 'c> {
    pub client: &'a mut SpiClient<'c>,
    pub caller: Caller,
}

impl Store for SpiStore<'_, '_> {
    fn new_id(&mut self) -> String {
        crate::new_id()
    }

    fn lock_target(&mut self, target_file_id: &str) -> Option<StoredTarget> {
        targets::lock_target(self.client, target_file_id, self.caller)
    }

    fn readable(&mut self, target_file_id: &str) -> bool {
        targets::readable(self.client, target_file_id, self.caller)
    }

    fn parent(&mut self, pdcp_log_id: &str) -> Parent {
        attempts::parent(self.client, pdcp_log_id, self.caller)
    }

    fn keyed_attempt(
        &mut self,
        target_file_id: &str,
        client_request_id: &str,
    ) -> Option<AttemptRow> {
        attempts::keyed_attempt(self.client, target_file_id, client_request_id)
    }

    fn lock_observations(&mut self, observation_ids: &[String]) -> Vec<ObservationRow> {
        observations::lock_observations(self.client, observation_ids, self.caller)
    }

    fn consumed_by(&mut self, pdcp_log_id: &str) -> Vec<ObservationRow> {
        observations::consumed_by(self.client, pdcp_log_id)
    }

    fn write_attempt(
        &mut self,
        attempt: &Attempt,
        pdcp_log_id: &str,
        target_file_id: &str,
        editing_cycle_id: &str,
    ) {
        attempts::write_attempt(
            self.client,
            attempt,
            pdcp_log_id,
            target_file_id,
            editing_cycle_id,
        );
    }

    fn write_consumptions(&mut self, pdcp_log_id: &str, links: &[ObservationLink]) {
        observations::write_consumptions(self.client, pdcp_log_id, links);
    }
}

/// What replay reads, as `caller` may see it. Each read opens its own SPI connection, so a
/// batch's memory is released once it has been replayed.
pub struct SpiHistory {
    pub caller: Caller,
    /// Take a share lock on the target: the transaction has written, so each statement takes a
    /// fresh snapshot, and the lock keeps submissions and SAVEs from committing between batches.
    pub share: bool,
}

impl History for SpiHistory {
    fn replay_start(&mut self, target_file_id: &str) -> Option<(StoredState, Option<StoredState>)> {
        Spi::connect_mut(|c| targets::replay_start(c, target_file_id, self.caller, self.share))
    }

    fn next_batches(&mut self, target_file_id: &str, after: i64) -> Vec<(i64, i64)> {
        attempts::next_batches(target_file_id, after)
    }

    fn accepted(&mut self, target_file_id: &str, after: i64, upto: i64) -> Vec<AttemptRow> {
        attempts::batch(target_file_id, after, upto)
    }
}

/// What a SAVE locks, reads and writes, as `caller` may see it.
pub struct SpiCheckpoints<'a, 'c> {
    pub client: &'a mut SpiClient<'c>,
    pub caller: Caller,
}

impl Checkpoints for SpiCheckpoints<'_, '_> {
    fn new_id(&mut self) -> String {
        crate::new_id()
    }

    fn lock_for_save(&mut self, target_file_id: &str, publish: bool) -> Option<SaveLock> {
        targets::lock_for_save(self.client, target_file_id, self.caller, publish)
    }

    fn readable(&mut self, target_file_id: &str) -> bool {
        targets::readable(self.client, target_file_id, self.caller)
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
