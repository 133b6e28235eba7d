//! `DispatchError`: why a step of the dispatcher failed, by cause. Callers
//! branch on the variant, never on text; the message is for logs.
//!
//! The finer errors of one cause keep their own types: `AmqpError` (the
//! queue) and `EnqueueError` (the event queue's group write) here, beside
//! the enum that wraps them, so that this file imports no module of the
//! crate; `intake::EnvelopeError` (a message refused as an event) and
//! `sending::DestinationError` (an endpoint's url refused; recorded on the
//! attempt, never returned) where they are made.

use std::sync::Arc;
use std::time::Duration;
use store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    /// The store failed a read or a write (`StoreError::is_unavailable`
    /// tells an outage from a defect).
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The event queue's group write did not accept an event.
    #[error("event queue: {0}")]
    Enqueue(#[from] EnqueueError),
    /// RabbitMQ: the connection, a publish or its confirm, the consumer.
    #[error(transparent)]
    Queue(#[from] AmqpError),
    /// The outbox relay published the first `published` of `batch` events,
    /// then RabbitMQ failed; the others stay in the outbox.
    #[error("publishing to RabbitMQ failed after {published} of {batch} events: {source}")]
    PartlyPublished {
        published: usize,
        batch: usize,
        #[source]
        source: AmqpError,
    },
    /// Redis, the fleet's schedule.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The Prometheus exporter could not be set up (its address, or a
    /// recorder installed before).
    #[error("metrics exporter: {0}")]
    Metrics(#[from] metrics_exporter_prometheus::BuildError),
}

#[derive(Debug, thiserror::Error)]
pub enum AmqpError {
    #[error("AMQP: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("the broker did not confirm the message")]
    NotConfirmed,
    #[error("no queue is bound to `{exchange}` for routing key `{routing_key}`")]
    Unroutable {
        exchange: String,
        routing_key: String,
    },
    #[error("the broker cancelled the consumer")]
    ConsumerCancelled,
    #[error("publishing a dead letter failed; reconnecting")]
    DeadLetterChannel,
    /// The URL does not parse as `amqp://` or `amqps://` (lapin's reason).
    #[error("invalid AMQP URL: {0}")]
    InvalidUrl(String),
    /// The broker did not confirm a message in time.
    #[error("RabbitMQ did not answer within {} s", .0.as_secs())]
    NoAnswer(Duration),
}

/// Why an event was not accepted into the queue.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The group write this event joined failed: the cause is that write's
    /// own error, shared by every caller of the group. Whether retrying
    /// can help is the cause's to say (`is_unavailable`).
    #[error("the shared intake write failed: {0}")]
    Write(#[source] Arc<StoreError>),
    /// The group write ended without answering (its task was lost):
    /// whether the event was committed is unknown, and trying again is
    /// safe (an event is accepted once per `event_ref`).
    #[error("the shared intake write ended without an answer")]
    Unanswered,
    /// The queue no longer takes events.
    #[error("the event queue is closed")]
    Closed,
}

impl EnqueueError {
    /// True when the store is unavailable for now (`StoreError::is_unavailable`).
    pub fn is_unavailable(&self) -> bool {
        match self {
            EnqueueError::Write(cause) => cause.is_unavailable(),
            EnqueueError::Unanswered | EnqueueError::Closed => false,
        }
    }
}
