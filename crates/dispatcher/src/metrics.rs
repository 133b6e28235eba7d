//! Metric names and the Prometheus exporter. Labels are bounded: outcome,
//! status class, event type (a catalogue name), never a reference or url.
//!
//! Every series a rule of `config/prometheus-alerts.yml` or a panel of
//! `config/grafana-delivery-health.json` reads is on `/metrics` from the
//! start, at 0 (`install`): a counter that appeared only with its first
//! event would hide that event from `increase()`, and a panel would read
//! nothing on a fresh service. `billing_dependency_up` says whether the
//! process reaches its store, queue and scheduler
//! (`crate::dependencies`).

use crate::DispatchError;
use metrics_exporter_prometheus::PrometheusBuilder;
use std::net::SocketAddr;

pub const DELIVERIES: &str = "billing_webhook_deliveries_total";
pub const ATTEMPTS: &str = "billing_webhook_attempts_total";
pub const ATTEMPT_SECONDS: &str = "billing_webhook_attempt_duration_seconds";
pub const FIRST_ATTEMPT_LAG_SECONDS: &str = "billing_webhook_event_to_first_attempt_seconds";
pub const DUE_BACKLOG: &str = "billing_webhook_due_backlog";
/// Keys of `per_key` endpoints whose failed head keeps the rest waiting.
pub const BLOCKED_KEYS: &str = "billing_webhook_blocked_keys";
pub const IN_FLIGHT: &str = "billing_webhook_attempts_in_flight";
pub const ENDPOINTS: &str = "billing_webhook_endpoints";
pub const EVENTS_CONSUMED: &str = "billing_events_consumed_total";
pub const EVENTS_DEAD: &str = "billing_events_dead_lettered_total";
/// Events naming an environment this store does not have (another store's,
/// on a shared exchange): acknowledged and left to their own store.
pub const EVENTS_FOREIGN: &str = "billing_events_foreign_total";
pub const OUTBOX_RELAYED: &str = "billing_outbox_relayed_total";
/// Rows the retention sweep deleted (bodies: emptied), by `kind`.
pub const RETENTION_DELETED: &str = "billing_retention_deleted_total";
/// Age of the oldest row of each `kind` still kept: it levels off at the
/// kind's retention (plus a sweep interval) when the sweep keeps up.
pub const RETENTION_OLDEST_AGE: &str = "billing_retention_oldest_age_seconds";
/// 1 while the process reaches a backing service, 0 while it does not, by
/// `dependency`: `store`, and in a fleet `queue` (RabbitMQ) and
/// `scheduler` (Redis). The embedded queue and schedule live in the store.
pub const DEPENDENCY_UP: &str = "billing_dependency_up";
/// The API's request counter (`control_api::pipeline::HTTP_REQUESTS`,
/// which counts it), named here only to export it from the start.
pub const HTTP_REQUESTS: &str = "billing_http_requests_total";

/// The `source` of the events the intake takes in: RabbitMQ's consumer
/// (`amqp.rs`) is the only one a process runs. The embedded queue is a
/// table of the store, filled by the outbox relay and `publish-event`,
/// which count nothing here.
pub const EVENT_SOURCES: &[&str] = &["amqp"];

/// Serves `GET /metrics` on `addr` for this process, every series of
/// `register_at_zero` already on it.
pub fn install(addr: SocketAddr) -> Result<(), DispatchError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])?
        .install()?;
    register_at_zero();
    Ok(())
}

/// Registers every series of this module at 0, for every value its
/// labels can take (the catalogue's event types, the health states, the
/// retention kinds, …), without moving one that already counts. Every role
/// exports all of them: a store-wide gauge that a role does not refresh
/// (the due backlog in a `billing api`) stays 0, so rules and panels take
/// the `max` of those over the processes. The API's counter is registered
/// with its one label pair known in advance (an unknown route's 404).
pub fn register_at_zero() {
    use domain::retention::RetentionKind;
    use domain::webhook::health::Health;
    use domain::webhook::{catalogue, AttemptStatus, DeliveryStatus};
    // One status of each class: a 2xx succeeds, anything else fails.
    for status in [Some(200), Some(300), Some(400), Some(500), Some(600), None] {
        let outcome = if matches!(status, Some(200..=299)) {
            AttemptStatus::Succeeded
        } else {
            AttemptStatus::Failed
        };
        metrics::counter!(ATTEMPTS, "outcome" => outcome.as_str(), "status_class" => status_class(status))
            .increment(0);
    }
    for event_type in catalogue::all() {
        for outcome in [DeliveryStatus::Succeeded, DeliveryStatus::Failed] {
            metrics::counter!(DELIVERIES, "outcome" => outcome.as_str(), "event_type" => event_type.name)
                .increment(0);
        }
    }
    // A histogram is on `/metrics` (empty buckets) once registered.
    let _ = metrics::histogram!(ATTEMPT_SECONDS);
    let _ = metrics::histogram!(FIRST_ATTEMPT_LAG_SECONDS);
    for gauge in [DUE_BACKLOG, BLOCKED_KEYS, IN_FLIGHT] {
        metrics::gauge!(gauge).increment(0.0);
    }
    for health in Health::ALL {
        metrics::gauge!(ENDPOINTS, "health" => health.as_str()).increment(0.0);
    }
    for source in EVENT_SOURCES {
        for counter in [EVENTS_CONSUMED, EVENTS_DEAD, EVENTS_FOREIGN] {
            metrics::counter!(counter, "source" => *source).increment(0);
        }
    }
    metrics::counter!(OUTBOX_RELAYED).increment(0);
    for kind in RetentionKind::ALL {
        metrics::counter!(RETENTION_DELETED, "kind" => kind.as_str()).increment(0);
        metrics::gauge!(RETENTION_OLDEST_AGE, "kind" => kind.as_str()).increment(0.0);
    }
    metrics::counter!(HTTP_REQUESTS, "operation" => "unknown_route", "status" => "404")
        .increment(0);
}

/// `2xx`, `4xx`, … or `none` when no response came.
pub fn status_class(status: Option<u16>) -> &'static str {
    match status {
        Some(200..=299) => "2xx",
        Some(300..=399) => "3xx",
        Some(400..=499) => "4xx",
        Some(500..=599) => "5xx",
        Some(_) => "other",
        None => "none",
    }
}

/// Most endpoints the health gauge reads per refresh.
const HEALTH_SAMPLE: u32 = 10_000;

/// Sets `billing_webhook_endpoints{health}` to the number of endpoints in
/// each health state (contract section 9's rule).
pub async fn record_endpoint_health(store: &store::Store) -> Result<(), store::StoreError> {
    use domain::webhook::health::{health, Health, WINDOW};
    use domain::webhook::EndpointStatus;
    let endpoints = store.webhooks().endpoint_statuses(HEALTH_SAMPLE).await?;
    // Only an active endpoint's attempts decide its health.
    let read: Vec<&domain::Ref> = endpoints
        .iter()
        .filter(|(_, status)| *status == EndpointStatus::Active)
        .map(|(endpoint_ref, _)| endpoint_ref)
        .collect();
    let recent = store
        .webhooks()
        .recent_attempt_outcomes_of(&read, WINDOW as u32)
        .await?;
    let mut counts: std::collections::HashMap<Health, u64> =
        Health::ALL.iter().map(|h| (*h, 0)).collect();
    for (endpoint_ref, status) in &endpoints {
        let outcomes = recent
            .get(endpoint_ref.as_str())
            .map_or(&[][..], Vec::as_slice);
        *counts.entry(health(*status, outcomes)).or_default() += 1;
    }
    for (h, n) in counts {
        metrics::gauge!(ENDPOINTS, "health" => h.as_str()).set(n as f64);
    }
    Ok(())
}
