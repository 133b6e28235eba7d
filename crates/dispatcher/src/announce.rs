//! The operational events' shapes (contract 13.4): `Announcer` makes the
//! event of each change the store writes with it (`store::dispatch::
//! operational`), carrying the endpoint or the delivery as the API shows
//! it (`webhook_shapes`). The events have the environment's scope and no
//! ordering key; the fan-out never delivers one to the endpoint it is about.

use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde_json::Value;
use store::dispatch::operational::{Announce, Happened};
use store::{EndpointRecord, EventData, EventRecord};

/// Makes the service's operational events. Its events show an endpoint
/// that set no `max_in_flight` with the deployment's default
/// (`delivery.endpoint_max_in_flight`), as the API does.
pub struct Announcer {
    endpoint_max_in_flight: u32,
}

impl Announcer {
    pub fn new(endpoint_max_in_flight: u32) -> Announcer {
        Announcer {
            endpoint_max_in_flight,
        }
    }
}

impl Announce for Announcer {
    fn event(&self, happened: Happened<'_>, now: Timestamp) -> Option<EventRecord> {
        let max = self.endpoint_max_in_flight;
        let (event_type, environment_ref, data) = match happened {
            Happened::EndpointFailing {
                endpoint,
                disable_at,
            } => (
                "webhook_endpoint.failing",
                &endpoint.environment_ref,
                endpoint_with(
                    endpoint,
                    now,
                    max,
                    [
                        ("health", Value::from("failing")),
                        ("disable_at", Value::from(disable_at.to_rfc3339())),
                    ],
                ),
            ),
            Happened::EndpointRecovered { endpoint } => (
                "webhook_endpoint.recovered",
                &endpoint.environment_ref,
                endpoint_with(endpoint, now, max, []),
            ),
            Happened::EndpointDisabled { endpoint, reason } => (
                "webhook_endpoint.disabled",
                &endpoint.environment_ref,
                endpoint_with(
                    endpoint,
                    now,
                    max,
                    [
                        ("health", Value::from("disabled")),
                        ("reason", Value::from(reason)),
                    ],
                ),
            ),
            Happened::DeliveryFailed { delivery } => (
                "webhook_delivery.failed",
                &delivery.environment_ref,
                serde_json::to_value(webhook_shapes::delivery::dto(delivery, None)).ok()?,
            ),
        };
        let data = EventData::parse(data.to_string()).ok()?;
        Some(EventRecord {
            event_ref: Ref::generate(Prefix::Event),
            environment_ref: environment_ref.clone(),
            public_event_type: event_type.to_owned(),
            occurred_at: now,
            scope: Scope::default(),
            data,
            order: None,
        })
    }
}

/// The endpoint as `retrieveWebhookEndpoint` shows it at `now` (`max`:
/// the deployment's default `max_in_flight`), with `extra` fields.
fn endpoint_with<const N: usize>(
    endpoint: &EndpointRecord,
    now: Timestamp,
    max: u32,
    extra: [(&str, Value); N],
) -> Value {
    let mut v = serde_json::to_value(webhook_shapes::endpoint::dto(endpoint, None, now, max))
        .unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        for (k, x) in extra {
            map.insert(k.to_owned(), x);
        }
    }
    v
}
