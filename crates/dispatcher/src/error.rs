//! `DispatchError`: why a step of the dispatcher failed, by cause. Callers
//! branch on the variant, never on text; the message is for logs.
//!
//! The finer errors of one cause keep their own types: `AmqpError` (the
//! queue), `intake::EnvelopeError` (a message refused as an event) and
//! `sending::DestinationError` (an endpoint's url refused; recorded on the
//! attempt, never returned).

use crate::amqp::AmqpError;
use crate::queue::EnqueueError;
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
