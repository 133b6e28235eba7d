//! Metric names and the Prometheus exporter. Labels are bounded: outcome,
//! status class, event type (a catalogue name), never a reference or url.

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

/// Serves `GET /metrics` on `addr` for this process.
pub fn install(addr: SocketAddr) -> Result<(), DispatchError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])?
        .install()?;
    Ok(())
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
