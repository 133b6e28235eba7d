//! Hand-off of fresh deliveries from the event queue (`crate::queue`) to
//! this process's dispatcher, so that a delivery due at once is not
//! written, then found and leased by a second transaction, then read back
//! and decoded. Here: room for attempts (the global and per-endpoint slots
//! and the circuit breakers, shared with the claim loop), the channel on
//! which the queue hands over fresh deliveries leased to this dispatcher,
//! and (fleet mode) the one on which it reports those it left due, for the
//! Redis schedule.
//!
//! A running dispatcher registers its `Intake` with the queue. The queue's
//! group write asks it for room for each pending delivery (`reserve`: the
//! slots, taken now and carried in a `Ticket`); the store inserts the
//! deliveries that got room already leased to the dispatcher
//! (`store::Leasing`), and after the commit their records go to `take`,
//! which starts the attempts. Deliveries without room, or a process
//! without a dispatcher, take the usual way: inserted due now, claimed by
//! some dispatcher. A ticket dropped without a hand-over gives its slots
//! back.
//!
//! Room is only reserved where the claim loop would start the attempt at
//! once: a slot free for the endpoint and in total, and a circuit that is
//! not open or probing. Everything else stays due in the store and takes
//! the claim loop's way, so fairness rules live in one place.
//!
//! Slow endpoints cannot take every slot: an endpoint is quick while its
//! last attempt here ended within [`quick_limit`]; the others (slow, or not
//! attempted yet) share all slots but a reserve (a quarter of them, at
//! least one endpoint's limit, at most half), which stays for the quick
//! ones. However many
//! endpoints answer slowly, a quick endpoint's fresh delivery finds a slot
//! at once; an endpoint that turns quick again leaves the shared part with
//! its next attempt.

use crate::breaker::Breakers;
use crate::failing::FailingSince;
use crate::settings::DispatchSettings;
use domain::{Ref, Timestamp};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore};

/// Room a dispatcher reserved for one attempt: its slots, held until the
/// attempt ends (or the ticket is dropped).
pub struct Ticket {
    pub permits: Vec<OwnedSemaphorePermit>,
    /// The room in flight a governor gave the attempt (its endpoint is
    /// limited), freed with the ticket.
    pub governed: Option<crate::governor::Admitted>,
    /// Set when the delivery is attempted before it is written
    /// (`crate::first_attempts`).
    pub before_write: Option<BeforeWrite>,
}

/// The link between an attempt made before its delivery was written and
/// the write: the result goes to the write (`report`), which says once it
/// ended what became of the delivery (`verdict`). Until then nothing may
/// touch the delivery's row, which may not exist yet.
pub struct BeforeWrite {
    pub report: oneshot::Sender<store::AttemptResult>,
    pub verdict: oneshot::Receiver<Written>,
}

/// What the write made of a delivery attempted before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Born settled: the write recorded the attempt.
    Settled,
    /// Written leased to this dispatcher: its result is recorded as any.
    Leased,
}

impl Ticket {
    /// Gives back every slot and the governor's room: for an attempt that
    /// ended but whose result waits for its write. Waiting is not being in
    /// flight, and a group write waits for many such results: held, their
    /// slots would keep the group's other deliveries, and the claim loop,
    /// from starting.
    pub fn free_slots(&mut self) {
        self.permits.clear();
        self.governed = None;
    }

    /// For a delivery attempted before its write: reports the attempt's
    /// `result` (`None`: it was not attempted) to the write and waits for
    /// it to end. Whether the delivery's row exists leased to this
    /// dispatcher, for the result to be recorded or the delivery given
    /// back; a delivery not attempted before its write is. A write that
    /// failed, or left the delivery out (its event was accepted before),
    /// sends no verdict: the event comes again, or was delivered by
    /// whoever accepted it.
    pub async fn written_leased(&mut self, result: Option<&store::AttemptResult>) -> bool {
        match self.before_write.take() {
            None => true,
            Some(BeforeWrite { report, verdict }) => {
                if let Some(result) = result {
                    let _ = report.send(result.clone());
                }
                matches!(verdict.await, Ok(Written::Leased))
            }
        }
    }
}

/// A delivery handed to the dispatcher: leased to it, committed, with the
/// endpoint version it was planned against and its reserved room.
pub type HandedOver = store::Leased<Ticket>;

/// The longest attempt that keeps its endpoint quick: a second, or half the
/// time-out if that is shorter.
pub fn quick_limit(timeout: Duration) -> Duration {
    (timeout / 2).min(Duration::from_secs(1))
}

/// Concurrency slots and circuit breakers of one dispatcher.
pub struct Slots {
    pub global: Arc<Semaphore>,
    /// The part of the global slots that endpoints not known to be quick
    /// may hold: all but the reserve (at least one).
    unproven: Arc<Semaphore>,
    /// Endpoints whose last attempt ended within `quick_limit`.
    quick: Mutex<HashSet<String>>,
    quick_limit: Duration,
    per_endpoint: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_endpoint_limit: usize,
    pub breakers: Mutex<Breakers>,
    pub failing: FailingSince,
    /// Each endpoint's recent rate, the base a 429 or 503 halves.
    pub recent: crate::governor::Recent,
    /// Attempts made before their write that ended, until their result is
    /// queued for recording or known to be written: shutdown waits for
    /// them after the attempts in flight.
    pub awaiting_write: tokio_util::task::TaskTracker,
}

impl Slots {
    pub fn new(settings: &DispatchSettings) -> Slots {
        // A quarter, but at least one endpoint's limit (a quick endpoint
        // meets its own limit before the slow ones can refuse it), and at
        // most half.
        let n = settings.max_in_flight;
        let reserve = (n / 4).max(settings.max_in_flight_per_endpoint).min(n / 2);
        Slots {
            global: Arc::new(Semaphore::new(settings.max_in_flight)),
            unproven: Arc::new(Semaphore::new((settings.max_in_flight - reserve).max(1))),
            quick: Mutex::default(),
            quick_limit: quick_limit(settings.timeout),
            per_endpoint: Mutex::default(),
            per_endpoint_limit: settings.max_in_flight_per_endpoint,
            breakers: Mutex::default(),
            failing: FailingSince::default(),
            recent: Default::default(),
            awaiting_write: tokio_util::task::TaskTracker::new(),
        }
    }

    /// After an attempt to `endpoint_ref` that took `took`: the endpoint is
    /// quick until an attempt takes longer than `quick_limit`.
    pub fn paced(&self, endpoint_ref: &Ref, took: Duration) {
        let mut quick = self.quick.lock().unwrap_or_else(|p| p.into_inner());
        if took <= self.quick_limit {
            if !quick.contains(endpoint_ref.as_str()) {
                quick.insert(endpoint_ref.to_string());
            }
        } else {
            quick.remove(endpoint_ref.as_str());
        }
    }

    /// How many claimed deliveries could start now: the global slots free,
    /// but while the shared part is taken (slow endpoints hold it) at most
    /// one more than it has free: a claim then never takes a batch that
    /// would only wait and be written back, yet still finds a quick
    /// endpoint's delivery at the head of the due ones.
    pub fn room(&self) -> usize {
        let shared = self.unproven.available_permits().saturating_add(1);
        self.global.available_permits().min(shared)
    }

    /// Whether the slots that slow and new endpoints share are all taken.
    pub fn shared_full(&self) -> bool {
        self.unproven.available_permits() == 0
    }

    /// Whether the endpoint's last attempt here ended within `quick_limit`.
    pub fn is_quick(&self, endpoint_ref: &Ref) -> bool {
        let quick = self.quick.lock().unwrap_or_else(|p| p.into_inner());
        quick.contains(endpoint_ref.as_str())
    }

    /// The semaphore of `endpoint_ref`'s slots.
    fn endpoint_slots(&self, endpoint_ref: &Ref) -> Arc<Semaphore> {
        let mut limits = self.per_endpoint.lock().unwrap_or_else(|p| p.into_inner());
        match limits.get(endpoint_ref.as_str()) {
            Some(s) => s.clone(),
            None => limits
                .entry(endpoint_ref.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_endpoint_limit)))
                .clone(),
        }
    }

    /// For a quick endpoint's delivery: one slot of `endpoint_ref` and one
    /// global slot, as soon as both are free, if that is before `until`.
    pub async fn reserve_by(
        &self,
        endpoint_ref: &Ref,
        until: tokio::time::Instant,
    ) -> Option<Ticket> {
        let endpoint = self.endpoint_slots(endpoint_ref);
        let endpoint = tokio::time::timeout_at(until, endpoint.acquire_owned())
            .await
            .ok()?
            .ok()?;
        let global = self.global.clone();
        let global = tokio::time::timeout_at(until, global.acquire_owned())
            .await
            .ok()?
            .ok()?;
        Some(Ticket {
            permits: vec![global, endpoint],
            governed: None,
            before_write: None,
        })
    }

    /// One slot of `endpoint_ref` and one global slot, if both are free,
    /// and for an endpoint not known to be quick one of the shared part.
    pub fn try_reserve(&self, endpoint_ref: &Ref) -> Option<Ticket> {
        let endpoint = self.endpoint_slots(endpoint_ref).try_acquire_owned().ok()?;
        let unproven = match self.is_quick(endpoint_ref) {
            true => None,
            false => Some(self.unproven.clone().try_acquire_owned().ok()?),
        };
        let global = self.global.clone().try_acquire_owned().ok()?;
        let mut permits = vec![global, endpoint];
        permits.extend(unproven);
        Some(Ticket {
            permits,
            governed: None,
            before_write: None,
        })
    }
}

/// Registered with the event queue by a running dispatcher.
pub struct Intake {
    owner: String,
    lease: Duration,
    reference_key: [u8; 32],
    slots: Arc<Slots>,
    handed: mpsc::UnboundedSender<HandedOver>,
    left_due: LeftDue,
}

/// Where the deliveries a group write left due go.
enum LeftDue {
    /// The claim loop takes them from the store: it is woken.
    Wake(Arc<Notify>),
    /// Fleet mode: a task puts them into the Redis schedule.
    Forward(mpsc::UnboundedSender<Vec<(Ref, Timestamp)>>),
}

impl Intake {
    /// An intake whose deliveries left due are claimed from the store by
    /// the claim loop that `wake` wakes.
    pub fn new(
        settings: &DispatchSettings,
        slots: Arc<Slots>,
        wake: Arc<Notify>,
    ) -> (Intake, mpsc::UnboundedReceiver<HandedOver>) {
        let (handed, received) = mpsc::unbounded_channel();
        let intake = Intake {
            owner: settings.worker_id.clone(),
            lease: settings.lease(),
            reference_key: *settings.cipher.reference_key(),
            slots,
            handed,
            left_due: LeftDue::Wake(wake),
        };
        (intake, received)
    }

    /// Sends the deliveries the intake leaves due to `to` (fleet mode: a
    /// task puts them into the Redis schedule).
    pub fn forwarding_left_due(
        mut self,
        to: mpsc::UnboundedSender<Vec<(Ref, Timestamp)>>,
    ) -> Intake {
        self.left_due = LeftDue::Forward(to);
        self
    }

    /// The store's `Leasing` for one group write: deliveries that find
    /// room (`reserve`) are born leased to this dispatcher, under keyed
    /// references (some are attempted before the write,
    /// `crate::first_attempts`).
    pub fn leasing(self: &Arc<Intake>) -> store::Leasing<Ticket> {
        let intake = self.clone();
        store::Leasing {
            owner: self.owner.clone(),
            lease: self.lease,
            room: Box::new(move |endpoint_ref| intake.reserve(endpoint_ref)),
            reference_key: Some(self.reference_key),
        }
    }

    /// Whether the endpoint's last attempt here ended within the quick
    /// limit: a fresh delivery to it is attempted before it is written.
    pub fn is_quick(&self, endpoint_ref: &Ref) -> bool {
        self.slots.is_quick(endpoint_ref)
    }

    /// Room to attempt a new delivery to `endpoint_ref` at once, if there
    /// is some (slots free, circuit closed).
    pub fn reserve(&self, endpoint_ref: &Ref) -> Option<Ticket> {
        if !self.circuit_closed(endpoint_ref) {
            return None;
        }
        self.slots.try_reserve(endpoint_ref)
    }

    /// Room to attempt a new delivery to a quick endpoint as soon as its
    /// slots free, if that is before `until` and its circuit is closed.
    pub async fn reserve_by(
        &self,
        endpoint_ref: &Ref,
        until: tokio::time::Instant,
    ) -> Option<Ticket> {
        if !self.circuit_closed(endpoint_ref) {
            return None;
        }
        self.slots.reserve_by(endpoint_ref, until).await
    }

    fn circuit_closed(&self, endpoint_ref: &Ref) -> bool {
        self.slots
            .breakers
            .lock()
            .map(|b| b.is_closed(endpoint_ref.as_str()))
            .unwrap_or(false)
    }

    /// Starts the attempts of committed, leased deliveries.
    pub fn take(&self, deliveries: Vec<HandedOver>) {
        for d in deliveries {
            // A closed channel means the claim loop has stopped: the lease
            // expires and another claim takes the delivery.
            let _ = self.handed.send(d);
        }
    }

    /// Committed deliveries due now that got no room, left unleased in
    /// the store for a claim: in a fleet, the Redis schedule indexes them.
    pub fn left_due(&self, deliveries: Vec<(Ref, Timestamp)>) {
        match &self.left_due {
            LeftDue::Wake(wake) => wake.notify_one(),
            // A closed channel means the dispatcher is stopping: the
            // schedule's periodic pass finds them.
            LeftDue::Forward(to) => {
                let _ = to.send(deliveries);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::webhook::cipher::SecretCipher;
    use domain::webhook::retry::RetrySchedule;
    use domain::Prefix;

    fn slots(max_in_flight: usize, per_endpoint: usize) -> Slots {
        let schedule = RetrySchedule::parse("0s").unwrap();
        let mut settings = DispatchSettings::new(schedule, SecretCipher::new([7; 32]));
        settings.max_in_flight = max_in_flight;
        settings.max_in_flight_per_endpoint = per_endpoint;
        settings.timeout = Duration::from_secs(2);
        Slots::new(&settings)
    }

    fn endpoint() -> Ref {
        Ref::generate(Prefix::WebhookEndpoint)
    }

    /// How many attempts to distinct slow endpoints find room.
    fn slow_room(slots: &Slots) -> Vec<Ticket> {
        let mut held = Vec::new();
        for _ in 0..=slots.global.available_permits() {
            let slow = endpoint();
            slots.paced(&slow, Duration::from_millis(1500));
            if let Some(t) = slots.try_reserve(&slow) {
                held.push(t);
            }
        }
        held
    }

    #[test]
    fn slow_and_new_endpoints_leave_a_reserve_to_quick_ones() {
        let slots = slots(16, 2);
        let quick = endpoint();
        slots.paced(&quick, Duration::from_millis(5));
        let held = slow_room(&slots);
        assert_eq!(held.len(), 12, "all but a quarter");
        assert!(
            slots.try_reserve(&endpoint()).is_none(),
            "a new endpoint shares the slow ones' part"
        );
        assert_eq!(slots.room(), 1, "claims take one at a time");
        let a = slots
            .try_reserve(&quick)
            .expect("the reserve is the quick one's");
        let b = slots
            .try_reserve(&quick)
            .expect("the reserve is the quick one's");
        assert!(slots.try_reserve(&quick).is_none(), "its own limit");
        let other = endpoint();
        slots.paced(&other, Duration::from_millis(5));
        let c = slots.try_reserve(&other).expect("another quick endpoint");
        let d = slots.try_reserve(&other).expect("another quick endpoint");
        assert!(slots.try_reserve(&endpoint()).is_none());
        assert_eq!(slots.global.available_permits(), 0);
        drop((a, b, c, d, held));
        // A slow attempt demotes, a quick one promotes again.
        slots.paced(&quick, Duration::from_secs(2));
        assert!(!slots.is_quick(&quick));
        slots.paced(&quick, Duration::from_millis(20));
        assert!(slots.is_quick(&quick));
    }

    #[test]
    fn the_reserve_is_at_least_one_endpoints_limit_and_at_most_half() {
        assert_eq!(slow_room(&slots(512, 32)).len(), 384, "a quarter");
        assert_eq!(slow_room(&slots(64, 32)).len(), 32, "one endpoint's limit");
        assert_eq!(slow_room(&slots(40, 32)).len(), 20, "at most half");
        assert_eq!(slow_room(&slots(1, 32)).len(), 1, "at least one");
    }
}
