//! The body a delivery sends: its event's data in its dto version, shaped
//! for a grant, in the signed envelope. An attempt builds it to send it,
//! and the API's body view rebuilds it from the same parts for a delivery
//! whose body was not stored (`store::webhooks::deliveries::Payload::Rebuilt`),
//! so the two must come from this one function.

use domain::webhook::body::DeliveredBody;
use domain::webhook::shaping::{self, GrantView};
use store::DeliveryRecord;

/// The exact bytes sent for `delivery`, whose event's data in its dto
/// version is `data`, to an endpoint holding `grant`.
pub fn delivered(
    delivery: &DeliveryRecord,
    data: serde_json::Value,
    grant: Option<&GrantView>,
) -> String {
    let data = shaping::shape_owned(
        &delivery.public_event_type,
        delivery.dto_version,
        data,
        grant,
    );
    DeliveredBody::new(
        delivery.event_ref.as_str(),
        &delivery.public_event_type,
        delivery.dto_version,
        delivery.occurred_at,
        delivery.environment_ref.as_str(),
        &data,
    )
    .ordered(
        delivery.order.as_ref().map(|o| o.key.as_str()),
        delivery.order.as_ref().and_then(|o| o.sequence),
    )
    .to_json()
}
