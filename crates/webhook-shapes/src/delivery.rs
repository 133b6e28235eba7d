//! A delivery as `retrieveWebhookDelivery` shows it.

use crate::{opt_ts, ts};
use domain::etag::etag;
use domain::Ref;
use serde::Serialize;
use store::DeliveryRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDto {
    pub delivery_ref: String,
    pub endpoint_ref: String,
    pub event_ref: String,
    /// The event's ordering key, or null (contract 13.1).
    pub ordering_key: Option<String>,
    /// The event's place among its key's events, from 1; null without a key.
    pub sequence: Option<i64>,
    pub public_event_type: String,
    /// `pending`, `held`, `succeeded` or `failed`.
    pub status: String,
    /// On a `per_key` endpoint, the earlier delivery of its key this one
    /// waits for; null otherwise.
    pub waiting_for: Option<String>,
    /// When a failed delivery was skipped, releasing its key.
    pub skipped_at: Option<String>,
    pub skip_reason: Option<String>,
    pub diagnostic: bool,
    pub dto_version: u32,
    pub generation: u32,
    /// Attempts made in the current generation.
    pub attempt_count: u32,
    pub next_attempt_at: Option<String>,
    pub last_attempt_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

pub fn delivery_etag(d: &DeliveryRecord) -> String {
    etag(d.delivery_ref.as_str(), d.version)
}

/// The delivery's wire form; `waiting_for` is read apart
/// (`Webhooks::waiting_for`).
pub fn dto(d: &DeliveryRecord, waiting_for: Option<&Ref>) -> DeliveryDto {
    DeliveryDto {
        delivery_ref: d.delivery_ref.to_string(),
        endpoint_ref: d.endpoint_ref.to_string(),
        event_ref: d.event_ref.to_string(),
        ordering_key: d.order.as_ref().map(|o| o.key.to_string()),
        sequence: d.order.as_ref().and_then(|o| o.sequence),
        public_event_type: d.public_event_type.clone(),
        status: d.status.as_str().to_owned(),
        waiting_for: waiting_for.map(Ref::to_string),
        skipped_at: opt_ts(d.skipped_at),
        skip_reason: d.skip_reason.clone(),
        diagnostic: d.diagnostic,
        dto_version: d.dto_version,
        generation: d.generation,
        attempt_count: d.attempt_count,
        next_attempt_at: opt_ts(d.next_attempt_at),
        last_attempt_at: opt_ts(d.last_attempt_at),
        created_at: ts(d.created_at),
        updated_at: ts(d.updated_at),
        etag: delivery_etag(d),
    }
}
