//! The outbox relay: hands the events that committed writes emitted (the
//! store's `outbox` table) on, oldest first, and deletes each only after
//! it was taken: a publisher confirm from RabbitMQ in a fleet, or, in the
//! embedded mode, this process's `EventQueue` committing it, the one way
//! every other event comes in too. A relay that dies between the two
//! relays the event again, and the intake drops the duplicate by its
//! `event_ref`.
//!
//! Several API processes may relay at once; they may then publish an event
//! twice (harmless, as above) but never lose one.

use crate::amqp::{AmqpError, Publisher};
use crate::intake;
use crate::metrics as m;
use crate::queue::EventQueue;
use crate::DispatchError;
use std::time::Duration;
use store::{EventRecord, Store};
use tokio_util::sync::CancellationToken;

/// Events read per round.
const BATCH: u32 = 100;
/// How often an idle relay looks for events other processes emitted.
const POLL: Duration = Duration::from_millis(500);
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where relayed events go.
#[derive(Clone)]
pub enum Target {
    /// This process's event queue (embedded mode): the events are
    /// accepted, fanned out and handed to its dispatcher as any other.
    Queue(EventQueue),
    /// The `billing.events` exchange at this AMQP url (fleet mode).
    Amqp(String),
}

/// Relays until `shutdown` is cancelled.
pub async fn relay(store: Store, target: Target, shutdown: CancellationToken) {
    let written = store.outbox_written();
    let mut publisher: Option<Publisher> = None;
    let mut backoff = MIN_BACKOFF;
    loop {
        if shutdown.is_cancelled() {
            break;
        }
        let outcome = match store.outbox_batch(BATCH).await {
            Ok(batch) if batch.is_empty() => Ok(0),
            Ok(batch) => round(&store, &target, &mut publisher, &batch).await,
            Err(e) => Err(e.into()),
        };
        let wait = match outcome {
            Ok(0) => POLL,
            Ok(n) => {
                metrics::counter!(m::OUTBOX_RELAYED).increment(n as u64);
                backoff = MIN_BACKOFF;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "outbox relay round failed; the events stay in the outbox");
                let wait = backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                wait
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = written.notified(), if wait == POLL => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
    if let Some(p) = publisher {
        p.close().await;
    }
}

/// Relays one batch; returns how many events left the outbox. On an
/// error, the events not relayed stay in the outbox (a failed delete
/// leaves relayed ones there too, to be relayed again).
async fn round(
    store: &Store,
    target: &Target,
    publisher: &mut Option<Publisher>,
    batch: &[EventRecord],
) -> Result<usize, DispatchError> {
    let url = match target {
        Target::Queue(queue) => return enqueue(store, queue, batch).await,
        Target::Amqp(url) => url,
    };
    if publisher.is_none() {
        *publisher = Some(Publisher::connect(url).await?);
    }
    let Some(p) = publisher.as_ref() else {
        return Ok(0);
    };
    let mut confirmed = Vec::with_capacity(batch.len());
    let mut failure: Option<AmqpError> = None;
    for event in batch {
        match p
            .publish(intake::envelope(event).as_bytes(), &event.public_event_type)
            .await
        {
            Ok(()) => confirmed.push(&event.event_ref),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    store.outbox_relayed(&confirmed).await?;
    match failure {
        None => Ok(confirmed.len()),
        Some(source) => {
            // A fresh connection next round: this one may be broken.
            if let Some(p) = publisher.take() {
                p.close().await;
            }
            Err(DispatchError::PartlyPublished {
                published: confirmed.len(),
                batch: batch.len(),
                source,
            })
        }
    }
}

/// Puts one batch into `queue`, all its events at once so that they share
/// the queue's group commits, and deletes those it accepted (or had
/// accepted before) from the outbox.
async fn enqueue(
    store: &Store,
    queue: &EventQueue,
    batch: &[EventRecord],
) -> Result<usize, DispatchError> {
    let outcomes = futures::future::join_all(batch.iter().map(|e| queue.enqueue(e))).await;
    let mut taken = Vec::with_capacity(batch.len());
    let mut failure = None;
    for (event, outcome) in batch.iter().zip(outcomes) {
        match outcome {
            Ok(_) => taken.push(&event.event_ref),
            Err(e) => failure = Some(e),
        }
    }
    store.outbox_relayed(&taken).await?;
    match failure {
        None => Ok(taken.len()),
        Some(e) => Err(e.into()),
    }
}
