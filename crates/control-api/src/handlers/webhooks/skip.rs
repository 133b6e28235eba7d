//! `skipWebhookDelivery` (contract 13.1): releases an ordered key past a
//! failed delivery, which stays `failed` with `skipped_at`; the key's next
//! deliveries are released in the same unit of work.

use super::deliveries::{delivery_etag, reply};
use super::{check_reason, load_delivery};
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::DeliveryStatus;
use serde::Deserialize;
use store::webhooks::deliveries;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Skip {
    /// 1 to 500 characters.
    pub reason: String,
}

pub async fn skip(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: Skip = input.body()?;
    check_reason(&body.reason)?;
    let delivery = load_delivery(ctx, &input).await?;
    input.check_etag(&delivery_etag(&delivery))?;
    if delivery.status != DeliveryStatus::Failed {
        return Err(ApiError::semantic(format!(
            "only a failed delivery can be skipped; this one is {}",
            delivery.status.as_str()
        )));
    }
    if !delivery.ordered {
        return Err(ApiError::semantic(
            "only a delivery of an ordering key on a per_key endpoint can be skipped",
        ));
    }
    if delivery.skipped_at.is_some() {
        return Err(ApiError::semantic("the delivery was skipped already"));
    }
    let now = ctx.now();
    let skipped = deliveries::skip(ctx.tx().await?, &delivery, &body.reason, now).await?;
    reply(ctx, &skipped).await
}
