//! The dispatcher's side of `store::handoff`: room for attempts (the global
//! and per-endpoint slots and the circuit breakers, shared with the claim
//! loop), the channel on which the intake hands over fresh deliveries
//! leased to this dispatcher, and (fleet mode) the one on which it reports
//! those it left due, for the Redis schedule.
//!
//! Room is only reserved where the claim loop would start the attempt at
//! once: a slot free for the endpoint and in total, and a circuit that is
//! not open or probing. Everything else stays due in the store and takes
//! the claim loop's way, so fairness rules live in one place.

use crate::breaker::Breakers;
use crate::failing::FailingSince;
use crate::settings::DispatchSettings;
use domain::{Ref, Timestamp};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use store::handoff::{HandedOver, Handoff, Ticket};
use tokio::sync::{mpsc, Semaphore};

/// Concurrency slots and circuit breakers of one dispatcher.
pub struct Slots {
    pub global: Arc<Semaphore>,
    per_endpoint: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_endpoint_limit: usize,
    pub breakers: Mutex<Breakers>,
    pub failing: FailingSince,
}

impl Slots {
    pub fn new(settings: &DispatchSettings) -> Slots {
        Slots {
            global: Arc::new(Semaphore::new(settings.max_in_flight)),
            per_endpoint: Mutex::default(),
            per_endpoint_limit: settings.max_in_flight_per_endpoint,
            breakers: Mutex::default(),
            failing: FailingSince::default(),
        }
    }

    /// One slot of `endpoint_ref` and one global slot, if both are free.
    pub fn try_reserve(&self, endpoint_ref: &Ref) -> Option<Ticket> {
        let endpoint = {
            let mut limits = self.per_endpoint.lock().unwrap_or_else(|p| p.into_inner());
            match limits.get(endpoint_ref.as_str()) {
                Some(s) => s.clone(),
                None => limits
                    .entry(endpoint_ref.to_string())
                    .or_insert_with(|| Arc::new(Semaphore::new(self.per_endpoint_limit)))
                    .clone(),
            }
        };
        let endpoint = endpoint.try_acquire_owned().ok()?;
        let global = self.global.clone().try_acquire_owned().ok()?;
        Some(Ticket {
            permits: vec![global, endpoint],
        })
    }
}

/// Registered with the store by a running dispatcher.
pub struct Intake {
    owner: String,
    lease: Duration,
    slots: Arc<Slots>,
    handed: mpsc::UnboundedSender<HandedOver>,
    /// Fleet mode: where deliveries left due go, to be put into Redis.
    left_due: Option<mpsc::UnboundedSender<Vec<(Ref, Timestamp)>>>,
}

impl Intake {
    pub fn new(
        settings: &DispatchSettings,
        slots: Arc<Slots>,
    ) -> (Intake, mpsc::UnboundedReceiver<HandedOver>) {
        let (handed, received) = mpsc::unbounded_channel();
        let intake = Intake {
            owner: settings.worker_id.clone(),
            lease: settings.lease(),
            slots,
            handed,
            left_due: None,
        };
        (intake, received)
    }

    /// Sends the deliveries the intake leaves due to `to` (fleet mode: a
    /// task puts them into the Redis schedule).
    pub fn forwarding_left_due(
        mut self,
        to: mpsc::UnboundedSender<Vec<(Ref, Timestamp)>>,
    ) -> Intake {
        self.left_due = Some(to);
        self
    }
}

impl Handoff for Intake {
    fn owner(&self) -> &str {
        &self.owner
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn reserve(&self, endpoint_ref: &Ref) -> Option<Ticket> {
        let closed = self
            .slots
            .breakers
            .lock()
            .map(|b| b.is_closed(endpoint_ref.as_str()))
            .unwrap_or(false);
        if !closed {
            return None;
        }
        self.slots.try_reserve(endpoint_ref)
    }

    fn take(&self, deliveries: Vec<HandedOver>) {
        for d in deliveries {
            // A closed channel means the claim loop has stopped: the lease
            // expires and another claim takes the delivery.
            let _ = self.handed.send(d);
        }
    }

    fn left_due(&self, deliveries: Vec<(Ref, Timestamp)>) {
        if let Some(to) = &self.left_due {
            // A closed channel means the dispatcher is stopping: the
            // schedule's periodic pass finds them.
            let _ = to.send(deliveries);
        }
    }
}
