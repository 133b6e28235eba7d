//! Event intake: parses each message by the envelope's rules (contract
//! section 9; `domain::webhook::event`, documented as a JSON Schema in
//! `config/event-envelope.schema.json`), screens it (`screen`) and accepts
//! it into the event queue (`crate::queue`), once per `event_ref`.
//! A message that cannot be parsed or validated is kept as a dead letter
//! with its reason: never dropped, never a crash.
//!
//! A valid event that names an environment this store does not have is
//! another store's: every store's queue bound to `billing.events` sees
//! every event published there, so each store keeps only its own
//! environments' events and lets the rest pass (acknowledged, counted in
//! `billing_events_foreign_total`), neither stored nor dead-lettered.

use crate::metrics as m;
use crate::queue::EventQueue;
use crate::DispatchError;
use domain::webhook::catalogue;
use domain::Ref;
use store::projection::Projection;
use store::{EventRecord, Store, StoreError};

/// The envelope and its rules live in `domain::webhook::event`.
pub use domain::webhook::event::{envelope, parse, parse_with_producer, EnvelopeError, PRODUCER};

/// Applies the queue's projector (`store::projection`) to an event of
/// another system: the event as subscribers receive it, or why it is
/// refused. The service's own events (`producer` billing) pass as they are.
pub async fn project(
    queue: &EventQueue,
    mut event: EventRecord,
    producer: Option<&str>,
) -> Result<Result<EventRecord, EnvelopeError>, StoreError> {
    let theirs = producer != Some(PRODUCER) && catalogue::is_projected(&event.public_event_type);
    let Some(projector) = queue.projector().filter(|_| theirs) else {
        return Ok(Ok(event));
    };
    Ok(match projector.project(&event).await? {
        Projection::Skip => Ok(event),
        Projection::Apply { data, scope } => {
            event.data = data;
            event.scope = scope;
            Ok(event)
        }
        Projection::Refuse(reason) => Err(EnvelopeError::Projection(reason)),
    })
}

/// The environments of a store, as far as its intake has seen them.
/// Environments are never deleted, so one found stays known; one not found
/// is asked of the store again next time (it may have been made since).
#[derive(Debug, Default)]
pub struct Environments {
    known: std::sync::RwLock<std::collections::HashSet<Ref>>,
}

impl Environments {
    /// Whether `store` has `environment_ref`.
    pub async fn holds(&self, store: &Store, environment_ref: &Ref) -> Result<bool, StoreError> {
        let known = {
            let known = self.known.read().unwrap_or_else(|p| p.into_inner());
            known.contains(environment_ref)
        };
        if known {
            return Ok(true);
        }
        match store.admin().environment(environment_ref).await {
            Ok(_) => {
                self.known
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(environment_ref.clone());
                Ok(true)
            }
            Err(StoreError::NotFound) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// What the intake makes of a parsed, valid event.
#[derive(Debug)]
pub enum Screened {
    /// This store's: to enqueue as it now is (projected if another system's).
    Accept(EventRecord),
    /// Another store's (its environment is not here): let it pass.
    Foreign,
    /// Refused (by the projection): to dead-letter with this reason.
    Refuse(EnvelopeError),
}

/// Screens a parsed event for `queue`'s store: another store's passes,
/// another system's is projected (`project`). A store error is returned as
/// such: the caller hands the message back.
pub async fn screen(
    queue: &EventQueue,
    event: EventRecord,
    producer: Option<&str>,
) -> Result<Screened, StoreError> {
    let store = queue.store();
    if !queue
        .environments()
        .holds(store, &event.environment_ref)
        .await?
    {
        return Ok(Screened::Foreign);
    }
    Ok(match project(queue, event, producer).await? {
        Ok(event) => Screened::Accept(event),
        Err(refused) => Screened::Refuse(refused),
    })
}

/// What became of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    New,
    Duplicate,
    /// Another store's (its environment is not in this store): let pass.
    Foreign,
    /// Refused, with the reason it was dead-lettered for.
    Dead(String),
}

/// Accepts one message into the event queue (or the dead letters).
pub async fn accept(
    queue: &EventQueue,
    body: &[u8],
    source: &'static str,
) -> Result<Accepted, DispatchError> {
    let store = queue.store();
    let parsed = match parse_with_producer(body) {
        Ok((event, producer)) => screen(queue, event, producer.as_deref()).await?,
        Err(refused) => Screened::Refuse(refused),
    };
    match parsed {
        Screened::Foreign => {
            metrics::counter!(m::EVENTS_FOREIGN, "source" => source).increment(1);
            Ok(Accepted::Foreign)
        }
        Screened::Accept(event) => {
            metrics::counter!(m::EVENTS_CONSUMED, "source" => source).increment(1);
            Ok(if queue.enqueue(&event).await? {
                Accepted::New
            } else {
                Accepted::Duplicate
            })
        }
        Screened::Refuse(refused) => {
            metrics::counter!(m::EVENTS_DEAD, "source" => source).increment(1);
            let reason = refused.to_string();
            store
                .dispatch()
                .dead_letter(&String::from_utf8_lossy(body), &reason)
                .await?;
            Ok(Accepted::Dead(reason))
        }
    }
}
