//! The engine's storage port ([`Store`], [`History`]) over SPI, for one call of one caller.

use super::{Caller, attempts, observations, targets};
use patchdiff_engine::api::observation::{ObservationLink, ObservationRow};
use patchdiff_engine::api::store::{History, LockedTarget, Store, StoredState};
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

    fn lock_target(&mut self, target_file_id: &str) -> Option<LockedTarget> {
        let t = targets::lock_target(self.client, target_file_id, self.caller)?;
        Some(LockedTarget {
            target_file_id: target_file_id.to_owned(),
            version: t.version,
            current_hash: t.current_hash,
            content: t.content,
            active_editing_cycle_id: t.active_editing_cycle_id,
        })
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
