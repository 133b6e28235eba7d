//! The event queue of a process: every caller that accepts an event (the
//! AMQP consumer, the in-process intake, `billing admin publish-event`)
//! puts it here, and this process's dispatcher registers here to receive
//! the fresh deliveries it has room for (`crate::handoff`).
//!
//! Group commit: callers that arrive while the group writes in flight run
//! (`TURNS`) wait for one to end, then the next of them writes everyone's
//! events in one transaction (`Dispatch::write_events`, which fans them out in
//! it too). Each caller still returns only once its own event is committed
//! (or refused), so acknowledging a message after `enqueue` stays safe.
//!
//! The rule: concurrent callers share a transaction; the queue never
//! spends a transaction (and, on SQLite, a turn of the single writer) per
//! event, which would make publishers queue behind each other and behind
//! the dispatcher's writes. A failed group write fails every caller of the
//! group with the group's own error (`EnqueueError::Write`).
//!
//! With a dispatcher registered here, a group's fresh deliveries to quick
//! endpoints are attempted before the group is written
//! (`crate::first_attempts`). The callers are answered, and AMQP messages
//! acknowledged, only after the write.
//!
//! A process that runs a dispatcher says so before its event sources start
//! (`EventQueue::await_dispatcher`), and its queue writes no group until
//! the dispatcher registers: an event whose delivery was attempted before
//! a write that a crash stopped comes back at the next start, from the
//! broker or the outbox, and only a group written with the dispatcher's
//! `Leasing` gives that delivery the keyed reference (`webhook-id`) its
//! receiver saw. Without a registered dispatcher, references are drawn at
//! random.
//!
//! It owns no SQL: the store writes, this decides who writes together and
//! where fresh deliveries go.

pub use crate::error::EnqueueError;
use crate::first_attempts::Unwritten;
use crate::handoff::{HandedOver, Intake, Ticket};
use std::sync::{Arc, Mutex};
use store::fanout::EventRow;
use store::{EventRecord, Store, StoreError};
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};

/// Group writes in flight at once: while one writes, the next has taken its
/// batch and waits for the writer, and the events that arrive meanwhile
/// gather for the one after. With a dispatcher here a group also holds its
/// turn while its fresh deliveries are attempted before the write
/// (`crate::first_attempts`), so more turns than two let one group's
/// attempts and another's write go on together.
const TURNS: usize = 4;

/// A caller's answer: whether its event was new, or the group write's error.
type Reply = oneshot::Sender<Result<bool, Arc<StoreError>>>;

/// Where a group's fresh deliveries go.
enum Handoff {
    /// Nowhere yet: a dispatcher is starting, and groups wait for it.
    Awaited,
    /// To this dispatcher.
    Registered(Arc<Intake>),
    /// None: they are left due in the store for a claim.
    None,
}

/// A handle on the queue; cheap to clone. Every clone shares the group
/// commit and the registered dispatcher.
#[derive(Clone)]
pub struct EventQueue(Arc<Inner>);

struct Inner {
    store: Store,
    /// Events waiting for the next group write.
    waiting: Mutex<Vec<(EventRow, Reply)>>,
    turns: Arc<Semaphore>,
    /// This process's dispatcher, if one runs here.
    handoff: watch::Sender<Handoff>,
    /// Successes of attempts whose write failed, for the events' return.
    unwritten: Unwritten,
    /// The store's environments the intake has met (`intake::screen`).
    environments: crate::intake::Environments,
    /// What projects other systems' events (`intake::project`), given by
    /// the process that builds the parts.
    projector: Option<Arc<dyn store::projection::Projector>>,
}

impl EventQueue {
    /// A queue that accepts other systems' events as they were published.
    pub fn new(store: Store) -> EventQueue {
        EventQueue::build(store, None)
    }

    /// A queue whose intake projects other systems' events with
    /// `projector` before accepting them.
    pub fn with_projector(
        store: Store,
        projector: Arc<dyn store::projection::Projector>,
    ) -> EventQueue {
        EventQueue::build(store, Some(projector))
    }

    fn build(store: Store, projector: Option<Arc<dyn store::projection::Projector>>) -> EventQueue {
        EventQueue(Arc::new(Inner {
            store,
            waiting: Mutex::default(),
            turns: Arc::new(Semaphore::new(TURNS)),
            handoff: watch::Sender::new(Handoff::None),
            unwritten: Unwritten::default(),
            environments: crate::intake::Environments::default(),
            projector,
        }))
    }

    /// The projector of other systems' events, if the queue has one.
    pub fn projector(&self) -> Option<&Arc<dyn store::projection::Projector>> {
        self.0.projector.as_ref()
    }

    /// The store the queue writes to.
    pub fn store(&self) -> &Store {
        &self.0.store
    }

    /// The store's environments, as the intake has met them.
    pub(crate) fn environments(&self) -> &crate::intake::Environments {
        &self.0.environments
    }

    /// Says that a dispatcher will run in this process: until it
    /// registers, no group is written (module docs). Called before the
    /// process's event sources start.
    pub fn await_dispatcher(&self) {
        self.0.handoff.send_if_modified(|h| match h {
            Handoff::None => {
                *h = Handoff::Awaited;
                true
            }
            _ => false,
        });
    }

    /// Registers this process's running dispatcher, in place of any
    /// other: fresh deliveries it has room for are handed to it.
    pub(crate) fn register(&self, intake: Arc<Intake>) {
        self.0.handoff.send_replace(Handoff::Registered(intake));
    }

    /// Unregisters `intake` (its dispatcher is stopping), unless another
    /// took its place: while none is registered, fresh deliveries are
    /// left due in the store for a claim.
    pub(crate) fn unregister(&self, intake: &Arc<Intake>) {
        self.0.handoff.send_if_modified(|h| match h {
            Handoff::Registered(r) if Arc::ptr_eq(r, intake) => {
                *h = Handoff::None;
                true
            }
            _ => false,
        });
    }

    /// Accepts an event. Returns false when an event with this reference
    /// was accepted before (it is processed once).
    pub async fn enqueue(&self, event: &EventRecord) -> Result<bool, EnqueueError> {
        let (reply, mut answer) = oneshot::channel();
        // Serialised here, on the caller's task: the writer has only to write.
        let row = EventRow::from(event);
        self.0.waiting().push((row, reply));
        let turn = self
            .0
            .turns
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| EnqueueError::Closed)?;
        match answer.try_recv() {
            // Written by a caller that held a turn before.
            Ok(result) => return result.map_err(EnqueueError::Write),
            Err(oneshot::error::TryRecvError::Closed) => return Err(EnqueueError::Unanswered),
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        let batch = std::mem::take(&mut *self.0.waiting());
        if batch.is_empty() {
            // Our event is in the other turn's write.
            drop(turn);
        } else {
            // The write, its answers and the turn go to a task of their
            // own, so that the batch is answered even if this caller stops
            // waiting.
            tokio::spawn(self.0.clone().write(batch, turn));
        }
        match answer.await {
            Ok(result) => result.map_err(EnqueueError::Write),
            Err(_) => Err(EnqueueError::Unanswered),
        }
    }
}

impl Inner {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Vec<(EventRow, Reply)>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registered dispatcher, once an awaited one has registered.
    async fn intake(&self) -> Option<Arc<Intake>> {
        let mut handoff = self.handoff.subscribe();
        let decided = handoff.wait_for(|h| !matches!(h, Handoff::Awaited)).await;
        match decided.as_deref() {
            Ok(Handoff::Registered(intake)) => Some(intake.clone()),
            // The sender lives as long as `self`: never an error.
            _ => None,
        }
    }

    /// Writes one group, hands its fresh deliveries to the dispatcher, and
    /// answers its callers.
    async fn write(self: Arc<Inner>, batch: Vec<(EventRow, Reply)>, turn: OwnedSemaphorePermit) {
        let (events, replies): (Vec<EventRow>, Vec<Reply>) = batch.into_iter().unzip();
        let refs: Vec<domain::Ref> = events.iter().map(|e| e.event_ref.clone()).collect();
        let intake = self.intake().await;
        let outcome = match &intake {
            Some(intake) => {
                crate::first_attempts::write(&self.store, intake, &self.unwritten, events).await
            }
            None => {
                let dispatch = self.store.dispatch();
                dispatch.write_events::<Ticket>(events, None).await
            }
        };
        let new = match outcome {
            Ok(written) => {
                if let Some(intake) = &intake {
                    hand_over(intake, written.leased, written.left_due);
                }
                Ok(written.new)
            }
            // One error for the whole group, shared by its callers.
            Err(e) => Err(Arc::new(e)),
        };
        let mut answered = std::collections::HashSet::new();
        for (event_ref, reply) in refs.iter().zip(replies) {
            let _ = reply.send(match &new {
                // A reference repeated within the batch is new only once.
                Ok(new) => Ok(new.contains(event_ref.as_str()) && answered.insert(event_ref)),
                Err(cause) => Err(cause.clone()),
            });
        }
        drop(turn);
    }
}

/// Gives the dispatcher the deliveries the group write leased to it, and
/// those it left due without a lease (for the Redis schedule in a fleet).
fn hand_over(
    intake: &Intake,
    leased: Vec<HandedOver>,
    left_due: Vec<(domain::Ref, domain::Timestamp)>,
) {
    if !leased.is_empty() {
        intake.take(leased);
    }
    if !left_due.is_empty() {
        intake.left_due(left_due);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_failed(cause: StoreError) -> EnqueueError {
        EnqueueError::Write(Arc::new(cause))
    }

    /// The error SQLite gives for `sql` on an empty database.
    fn sqlite(sql: &str) -> StoreError {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        StoreError::from(conn.execute_batch(sql).unwrap_err())
    }

    #[test]
    fn a_failed_group_write_is_unavailable_only_when_its_cause_is() {
        let timed_out = write_failed(StoreError::from(sqlx::Error::PoolTimedOut));
        assert!(timed_out.is_unavailable());
        let syntax = sqlite("SELEC 1");
        assert!(matches!(syntax, StoreError::Sqlite(_)), "{syntax:?}");
        assert!(!syntax.is_unavailable());
        assert!(!write_failed(syntax).is_unavailable());
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert!(write_failed(StoreError::from(busy)).is_unavailable());
        assert!(!EnqueueError::Unanswered.is_unavailable());
        assert!(!EnqueueError::Closed.is_unavailable());
    }

    #[test]
    fn a_failed_group_write_says_its_cause() {
        let e = write_failed(StoreError::Corrupt("no column status".into()));
        assert!(e.to_string().contains("no column status"), "{e}");
        let source = std::error::Error::source(&e).expect("the cause");
        assert_eq!(
            source.to_string(),
            "stored data is corrupt: no column status"
        );
    }
}
