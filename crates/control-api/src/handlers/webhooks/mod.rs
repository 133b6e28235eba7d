//! The webhook control surface (contract section 9): endpoints and their
//! secrets, subscriptions, data profile grants, deliveries, redrive, health,
//! test sends and the event catalogue.

pub mod data_profiles;
pub mod dead_letters;
pub mod deliveries;
pub mod endpoints;
pub mod event_types;
pub mod health;
pub mod redrive;
pub mod redrive_jobs;
pub mod secrets;
pub mod skip;
pub mod subscriptions;
pub mod test_send;

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use domain::{Prefix, Ref};
use store::{DeliveryRecord, EndpointRecord, StoreError};

/// The endpoint named by the `endpoint_ref` path parameter.
pub(crate) async fn load_endpoint(ctx: &Ctx, input: &Input) -> Result<EndpointRecord, ApiError> {
    let endpoint_ref = input.path_ref("endpoint_ref", Prefix::WebhookEndpoint)?;
    endpoint_by_ref(ctx, &endpoint_ref).await
}

pub(crate) async fn endpoint_by_ref(
    ctx: &Ctx,
    endpoint_ref: &Ref,
) -> Result<EndpointRecord, ApiError> {
    match ctx
        .store()
        .webhooks()
        .endpoint(ctx.env(), endpoint_ref)
        .await
    {
        Err(StoreError::NotFound) => Err(ApiError::not_found("webhook endpoint")),
        other => Ok(other?),
    }
}

/// The delivery named by the `delivery_ref` path parameter.
pub(crate) async fn load_delivery(ctx: &Ctx, input: &Input) -> Result<DeliveryRecord, ApiError> {
    let delivery_ref = input.path_ref("delivery_ref", Prefix::WebhookDelivery)?;
    match ctx
        .store()
        .webhooks()
        .delivery(ctx.env(), &delivery_ref)
        .await
    {
        Err(StoreError::NotFound) => Err(ApiError::not_found("webhook delivery")),
        other => Ok(other?),
    }
}

/// A required free-text `reason` of 1 to 500 characters.
pub(crate) fn check_reason(reason: &str) -> Result<(), ApiError> {
    crate::wire::check_text("reason", reason, 1, 500)
}
