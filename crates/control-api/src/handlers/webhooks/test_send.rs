//! `sendWebhookTest`: a diagnostic delivery carrying the catalogue example
//! of a type, with no subscription needed. Grants and pause apply; the
//! delivery pipeline sends it like any other.

use super::data_profiles::view;
use super::deliveries::reply;
use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::body::DeliveredBody;
use domain::webhook::{catalogue, shaping, DeliveryStatus};
use domain::{Prefix, Ref};
use serde::Deserialize;
use store::webhooks::deliveries;
use store::NewDelivery;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendTest {
    pub public_event_type: String,
}

pub async fn send(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: SendTest = input.body()?;
    let event = catalogue::find(&body.public_event_type).ok_or_else(|| {
        ApiError::validation("public_event_type", "not an event type of the catalogue")
    })?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let dto_version = event.dto_versions.iter().copied().max().unwrap_or(1);
    let example = catalogue::example(event.name, dto_version).unwrap_or_default();
    let grant = ctx
        .store()
        .webhooks()
        .active_data_profile_grant(&endpoint.endpoint_ref)
        .await?;
    let grant = view(ctx, grant.as_ref()).await?;
    let data = shaping::shape(event.name, dto_version, &example, grant.as_ref());
    let event_ref = Ref::generate(Prefix::Event);
    let occurred_at = ctx.now();
    let payload = DeliveredBody::new(
        event_ref.as_str(),
        event.name,
        dto_version,
        occurred_at,
        ctx.env().as_str(),
        &data,
    )
    .to_json();
    let new = NewDelivery {
        environment_ref: ctx.env().clone(),
        endpoint_ref: endpoint.endpoint_ref.clone(),
        event_ref,
        public_event_type: event.name.to_owned(),
        dto_version,
        status: DeliveryStatus::initial(endpoint.status),
        diagnostic: true,
        occurred_at,
        event_data: example.to_string(),
        event_copy: None,
        match_reasons: serde_json::json!([{"kind": "test_send"}]),
        payload,
        order: None,
        ordered: false,
        // Written due, never leased: the dispatcher's claim loop starts
        // it, where the endpoint's limits are kept.
        limited: false,
    };
    // Only a row is written here: the dispatcher sends it after the commit.
    let delivery = deliveries::create(ctx.tx().await?, new).await?;
    reply(ctx, &delivery).await
}
