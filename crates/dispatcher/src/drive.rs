//! The dispatcher driven by its caller: every delivery due at a given
//! moment attempted and recorded before the call returns. A test calls
//! `run_until_idle` where it would otherwise start a `Dispatcher`, sleep
//! and poll the receiver; a tool can call `run_once` from its own loop.
//!
//! It takes the same steps as `Dispatcher::run` through the same code: the
//! claim (`Dispatch::claim_due_deliveries`), the endpoint view
//! (`EndpointCache`), the attempt (`attempt::run`: shaping, signing,
//! sending, `schedule::after_attempt`) and the record
//! (`Dispatch::record_attempts`). It leaves out what only a long-running
//! loop needs: hand-overs, carried deliveries, circuit breakers, pacing
//! and the Redis schedule. Leases fence it as they fence every dispatcher,
//! so it may run beside one.
//!
//! What it must never do: wait for time to pass. A retry due later than
//! the round's moment is left for a later round.

use crate::endpoints::EndpointCache;
use crate::failing::FailingSince;
use crate::sending::Sender;
use crate::settings::DispatchSettings;
use crate::{attempt, DispatchError};
use domain::webhook::EndpointStatus;
use domain::{Ref, Timestamp};
use futures::stream::{self, StreamExt};
use store::Store;

/// A dispatcher the caller drives (module docs).
pub struct Driven {
    store: Store,
    settings: DispatchSettings,
    sender: Sender,
    failing: FailingSince,
    cache: EndpointCache,
}

/// What a call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Round {
    /// Attempts made and recorded.
    pub attempted: usize,
    /// Deliveries given back held: their endpoint is not active.
    pub held: usize,
}

impl Driven {
    pub fn new(store: Store, settings: DispatchSettings) -> Driven {
        Driven {
            sender: Sender::new(&settings),
            store,
            settings,
            failing: FailingSince::default(),
            cache: EndpointCache::default(),
        }
    }

    /// Claims up to a claim batch of the deliveries due at `now`, attempts
    /// them at once (at most `max_in_flight` together) and records every
    /// result in one transaction.
    pub async fn run_once(&mut self, now: Timestamp) -> Result<Round, DispatchError> {
        let owner = self.settings.worker_id.clone();
        let lease_until = now.plus_millis(self.settings.lease().as_millis() as i64);
        let claimed = self
            .store
            .dispatch()
            .claim_due_deliveries(&owner, now, lease_until, self.settings.claim_batch)
            .await?;
        if claimed.is_empty() {
            return Ok(Round::default());
        }
        let refs: Vec<&Ref> = claimed.iter().map(|d| &d.endpoint_ref).collect();
        let versions = self.store.webhooks().endpoint_versions(&refs).await?;
        let mut ready = Vec::with_capacity(claimed.len());
        let mut held: Vec<(Ref, Option<Timestamp>)> = Vec::new();
        for delivery in claimed {
            let version = match versions.get(delivery.endpoint_ref.as_str()) {
                Some(&(version, EndpointStatus::Active)) => version,
                Some(_) => {
                    held.push((delivery.delivery_ref, None));
                    continue;
                }
                // The endpoint is gone: its deliveries went with it.
                None => continue,
            };
            let view = self
                .cache
                .get(
                    &self.store,
                    (&self.settings.cipher, &self.sender, &self.settings.clock),
                    &delivery.environment_ref,
                    &delivery.endpoint_ref,
                    version,
                )
                .await?;
            if view.status != EndpointStatus::Active {
                held.push((delivery.delivery_ref, None));
                continue;
            }
            ready.push((delivery, view));
        }
        if !held.is_empty() {
            self.store
                .dispatch()
                .release_deliveries(&owner, &held)
                .await?;
        }
        let (store, settings, sender, failing) =
            (&self.store, &self.settings, &self.sender, &self.failing);
        let results: Vec<store::AttemptResult> = stream::iter(ready)
            .map(|(delivery, view)| async move {
                attempt::run(store, settings, sender, &delivery, &view, failing).await
            })
            .buffer_unordered(self.settings.max_in_flight.max(1))
            .collect()
            .await;
        self.store
            .dispatch()
            .record_attempts(&owner, &results, self.settings.announce.clone())
            .await?;
        Ok(Round {
            attempted: results.len(),
            held: held.len(),
        })
    }

    /// Rounds at the moment each starts until one finds nothing due: then
    /// every delivery due by that moment has been attempted and recorded.
    /// The moment is the settings' clock's: the wall clock, or a test's
    /// moved ahead of it, so that a test makes a retry due by moving its
    /// clock past the retry's time rather than by sleeping.
    /// A retry scheduled `0s` after a failure is due in the next round;
    /// one scheduled later is left alone. It ends because each delivery has
    /// finitely many attempts (its schedule), unless events keep coming.
    pub async fn run_until_idle(&mut self) -> Result<Round, DispatchError> {
        let mut total = Round::default();
        loop {
            let round = self.run_once(self.settings.clock.now()).await?;
            if round == Round::default() {
                return Ok(total);
            }
            total.attempted += round.attempted;
            total.held += round.held;
        }
    }
}
