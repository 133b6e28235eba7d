//! The dispatcher: from a domain event to a signed, retried, recorded
//! delivery.
//!
//! Flow: `intake` validates an envelope and accepts it into the event
//! queue (`queue`: once per `event_ref`, concurrent callers in one group
//! write), where the store fans it out in the same transaction: one
//! delivery per (event, endpoint, dto_version) among the subscriptions it
//! matches (`store::fanout`); the deliveries this dispatcher has room for
//! are born leased to it and handed over (`handoff`); `worker` leases due
//! deliveries, keeps per-endpoint limits and circuit breakers, and runs
//! attempts (`governor`: an endpoint's own limits and back-pressure, fleet
//! wide); `attempt` shapes, signs (`signing`) and sends (`sending`) one
//! request; `schedule` decides what follows an attempt; `recorder` writes
//! attempt results in batches. `outbox` relays the events committed writes
//! emitted to the queue. `retention` sweeps what the store no longer
//! keeps.
//!
//! This crate owns outbound HTTP, AMQP and Redis. It must never serve HTTP
//! requests of the API nor write SQL (that is `store`).

pub mod amqp;
pub mod announce;
pub mod attempt;
pub mod breaker;
pub mod dependencies;
pub mod drive;
pub mod endpoints;
pub mod error;
pub mod failing;
pub mod first_attempts;
pub mod governor;
pub mod handoff;
pub mod intake;
pub mod metrics;
pub mod outbox;
pub mod queue;
pub mod recorder;
pub mod redis_buckets;
pub mod redis_schedule;
pub mod redrive_jobs;
pub mod retention;
pub mod schedule;
pub mod sending;
pub mod settings;
pub mod signing;
pub mod worker;

pub use error::DispatchError;
pub use queue::EventQueue;
pub use settings::DispatchSettings;
pub use worker::Dispatcher;
