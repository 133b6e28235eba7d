//! What the dispatcher persists: the embedded event queue (one row per
//! `event_ref`, so a duplicate is processed once), dead letters, fan-out,
//! delivery leases, and attempt results.
//!
//! The store is the source of truth for every delivery: a lease is only a
//! time-limited claim (`lease_owner`, `lease_until`) that expires by itself
//! when a worker dies, and an attempt is recorded together with the
//! delivery's next state in one transaction.
//!
//! By idea: `intake.rs` (events written with their fan-out in one
//! transaction), `deliveries.rs` (the embedded queue's pending events and
//! the delivery rows), `fanout.rs`, `leases.rs` (claims, give-backs,
//! schedule reads, and `statements`, the one definition of a claimable
//! delivery), `attempts.rs` (results and next states), `dead_letters.rs`,
//! `outbox.rs`, `projection.rs`, `signals.rs`, `ordering.rs` (order per
//! key: numbering, and the release of waiting deliveries), `pressure.rs`
//! (back-pressure a 429 or 503 puts on its endpoint).

mod attempts;
pub mod dead_letters;
mod deliveries;
pub mod fanout;
pub mod intake;
mod leases;
pub mod operational;
pub mod ordering;
pub mod outbox;
mod pressure;
pub mod projection;
pub mod signals;

pub(crate) use deliveries::{event_from_row, insert_deliveries, order_from_row, DeliveryRow};
pub use deliveries::{EVENT_DATA_OF_ROW, SHARED_EVENT_DATA};
pub use leases::statements;
pub(crate) use leases::*;

use crate::Store;
use domain::webhook::{AttemptStatus, DeliveryStatus};
use domain::{Ref, Timestamp};

pub use domain::webhook::event::{EventData, EventRecord};

/// The dispatcher's persistence (`store.dispatch()`), like the other
/// domains' repositories: the queue's events and their fan-out, leases,
/// attempts, dead letters. It reads and writes through its store, which it
/// derefs to.
#[derive(Clone, Copy)]
pub struct Dispatch<'a>(&'a Store);

impl Store {
    /// The dispatcher's persistence (`Dispatch`).
    pub fn dispatch(&self) -> Dispatch<'_> {
        Dispatch(self)
    }
}

impl std::ops::Deref for Dispatch<'_> {
    type Target = Store;

    fn deref(&self) -> &Store {
        self.0
    }
}

/// The outcome of one attempt and the delivery's state after it.
#[derive(Debug, Clone)]
pub struct AttemptResult {
    pub delivery_ref: Ref,
    pub environment_ref: Ref,
    pub endpoint_ref: Ref,
    pub generation: u32,
    pub attempt_number: u32,
    pub status: AttemptStatus,
    pub response_status: Option<u16>,
    pub error: Option<String>,
    pub response_body_excerpt: Option<String>,
    pub duration_ms: i64,
    pub started_at: Timestamp,
    /// When the next attempt is due, if there is one.
    pub next_attempt_at: Option<Timestamp>,
    pub delivery_status: DeliveryStatus,
    /// The body as sent, or how to build it again.
    pub payload: crate::webhooks::payload::Payload,
    /// Disable the endpoint (410 Gone, or failing for too long).
    pub disable_endpoint: bool,
    /// The delivery's key when it is ordered (`DeliveryRecord::ordered`):
    /// its success releases the key's next delivery.
    pub ordered_key: Option<String>,
    /// A `429` or `503`: what it tells of the endpoint (contract 13.2),
    /// written with the attempt (`pressure`).
    pub pushback: Option<domain::webhook::limits::Pushback>,
}

impl AttemptResult {
    /// Whether recording it may let a waiting delivery of its key start.
    fn releases_key(&self) -> bool {
        self.ordered_key.is_some() && self.delivery_status == DeliveryStatus::Succeeded
    }

    /// Whether its delivery's row keeps it (`webhooks::attempts`) instead
    /// of a row of its own: a success without an error. A success with one
    /// (a body that did not end in time) is a row, as every failure is:
    /// the row keeps no error.
    fn kept_on_delivery(&self) -> bool {
        self.status == AttemptStatus::Succeeded && self.error.is_none()
    }

    /// Whether a first attempt made before its delivery was written can be
    /// written as its delivery's birth (`intake::Prepared`): a success
    /// kept on the row, that settles it, releases no key and presses on
    /// nothing; the rest of what recording does has nothing to do for it.
    pub fn settles_at_birth(&self) -> bool {
        self.kept_on_delivery()
            && self.attempt_number == 1
            && self.generation == 1
            && self.delivery_status == DeliveryStatus::Succeeded
            && !self.disable_endpoint
            && self.ordered_key.is_none()
            && self.pushback.is_none()
    }
}

/// What `Dispatch::record_attempts` wrote.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Results recorded (the others' leases were lost).
    pub recorded: usize,
    /// Waiting deliveries of the successes' keys released, due now.
    pub released: Vec<Ref>,
}

/// Attempt rows per INSERT statement (14 parameters each, well under
/// SQLite's and PostgreSQL's parameter limits).
const ATTEMPT_ROWS: usize = 50;
/// Delivery rows per INSERT statement (16 parameters each).
const DELIVERY_ROWS: usize = 50;
/// Deliveries per UPDATE statement when recording attempts (8 each).
const UPDATE_ROWS: usize = 50;
