//! Hand-off of fresh deliveries from the intake to this process's
//! dispatcher, so that a delivery due at once is not written, then found
//! and leased by a second transaction, then read back and decoded.
//!
//! A dispatcher registers itself (`Store::set_handoff`). Before the intake
//! writes a batch, it asks the dispatcher for room for each pending
//! delivery (`Handoff::reserve`: the dispatcher's concurrency slots, taken
//! now and carried in a `Ticket`); the deliveries that got room are
//! inserted already leased to the dispatcher, and after the commit their
//! records go to `Handoff::take`, which starts the attempts. Deliveries
//! without room, or a process without a dispatcher, take the usual way:
//! inserted due now, claimed by some dispatcher.
//!
//! Invariant: a delivery is handed over only after the transaction that
//! created it and its lease committed, so the lease fences it exactly as a
//! claimed one; if the process dies, the lease expires and it is claimed
//! again. A ticket dropped without a hand-over gives its slots back.

use crate::DeliveryRecord;
use domain::{Ref, Timestamp};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::OwnedSemaphorePermit;

/// Room a dispatcher reserved for one attempt: its slots, held until the
/// attempt ends (or the ticket is dropped).
pub struct Ticket {
    pub permits: Vec<OwnedSemaphorePermit>,
}

/// A delivery handed to the dispatcher: leased to it, committed, with the
/// endpoint version it was planned against and the reserved room.
pub struct HandedOver {
    pub delivery: DeliveryRecord,
    pub endpoint_version: i64,
    pub ticket: Ticket,
}

/// What the intake needs from the dispatcher of its process.
pub trait Handoff: Send + Sync {
    /// The lease owner the deliveries are leased to.
    fn owner(&self) -> &str;
    /// How long a lease lasts.
    fn lease(&self) -> Duration;
    /// Room to attempt a new delivery to `endpoint_ref` at once, if there
    /// is some (slots free, circuit closed).
    fn reserve(&self, endpoint_ref: &Ref) -> Option<Ticket>;
    /// Starts the attempts of committed, leased deliveries.
    fn take(&self, deliveries: Vec<HandedOver>);
    /// Committed deliveries due at the given time that got no room, left
    /// unleased in the store for a claim: a dispatcher whose schedule
    /// lives outside the store (Redis) indexes them there.
    fn left_due(&self, _deliveries: Vec<(Ref, Timestamp)>) {}
}

/// The registered dispatcher, shared by every clone of a `Store`.
#[derive(Default, Clone)]
pub(crate) struct Slot(Arc<RwLock<Option<Arc<dyn Handoff>>>>);

impl Slot {
    pub(crate) fn get(&self) -> Option<Arc<dyn Handoff>> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, handoff: Option<Arc<dyn Handoff>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = handoff;
    }
}

impl crate::Store {
    /// Registers this process's dispatcher to receive fresh deliveries.
    pub fn set_handoff(&self, handoff: Arc<dyn Handoff>) {
        self.handoff.set(Some(handoff));
    }

    /// Unregisters it (the dispatcher is stopping): fresh deliveries are
    /// then left due in the store.
    pub fn clear_handoff(&self) {
        self.handoff.set(None);
    }
}
