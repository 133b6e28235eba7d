//! Redrive: start a new generation of a finished delivery, singly (with the
//! delivery's ETag) or in batches of 1 to 100 (with `*` or a list of ETags),
//! each item getting its own outcome. A batch is one unit of work: every
//! generation it starts commits with the request, or none does.

use super::deliveries::delivery_etag;
use super::{check_reason, endpoint_by_ref, load_delivery};
use crate::error::{ApiError, Detail};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::RedriveOutcome;
use domain::{Prefix, Ref};
use serde::{Deserialize, Serialize};
use store::webhooks::deliveries;
use store::{DeliveryRecord, StoreError};
use utoipa::ToSchema;

/// Most deliveries one batch may redrive.
const MAX_BATCH: usize = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Redrive {
    /// 1 to 500 characters.
    pub reason: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRedrive {
    /// 1 to 100 distinct delivery references.
    pub delivery_refs: Vec<String>,
    pub reason: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RedriveOutcomeDto {
    pub delivery_ref: String,
    /// `queued`, `held` or `already_pending` (batches add `not_found` and `precondition_failed`).
    pub outcome: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchRedriveDto {
    pub results: Vec<RedriveOutcomeDto>,
}

/// Applies the redrive rule to a delivery the caller may act on, writing
/// in the request's transaction.
async fn redrive_one(ctx: &mut Ctx, delivery: &DeliveryRecord) -> Result<RedriveOutcome, ApiError> {
    let endpoint = endpoint_by_ref(ctx, &delivery.endpoint_ref).await?;
    let outcome = delivery.status.redrive(endpoint.status);
    let Some(next) = outcome.next_status() else {
        return Ok(outcome);
    };
    deliveries::start_generation(ctx.tx().await?, delivery, next).await?;
    Ok(outcome)
}

pub async fn single(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: Redrive = input.body()?;
    check_reason(&body.reason)?;
    let delivery = load_delivery(ctx, &input).await?;
    input.check_etag(&delivery_etag(&delivery))?;
    let outcome = redrive_one(ctx, &delivery).await?;
    Ok(Reply::one(
        RedriveOutcomeDto {
            delivery_ref: delivery.delivery_ref.to_string(),
            outcome: outcome.as_str().to_owned(),
        },
        None,
    ))
}

pub async fn batch(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: BatchRedrive = input.body()?;
    check_reason(&body.reason)?;
    if body.delivery_refs.is_empty() || body.delivery_refs.len() > MAX_BATCH {
        return Err(ApiError::validation(
            "delivery_refs",
            "must hold 1 to 100 references",
        ));
    }
    let mut refs: Vec<Ref> = Vec::with_capacity(body.delivery_refs.len());
    let mut details = Vec::new();
    for (i, r) in body.delivery_refs.iter().enumerate() {
        match Ref::parse(Prefix::WebhookDelivery, r) {
            Ok(parsed) if refs.contains(&parsed) => {
                details.push(Detail::new(format!("delivery_refs.{i}"), "listed twice"))
            }
            Ok(parsed) => refs.push(parsed),
            Err(e) => details.push(Detail::new(format!("delivery_refs.{i}"), e.to_string())),
        }
    }
    if !details.is_empty() {
        return Err(ApiError::Validation(details));
    }
    let if_match = input
        .if_match
        .as_ref()
        .ok_or(ApiError::PreconditionRequired)?;
    let mut results = Vec::with_capacity(refs.len());
    for r in refs {
        let outcome = match ctx.store().webhooks().delivery(ctx.env(), &r).await {
            Err(StoreError::NotFound) => RedriveOutcome::NotFound,
            Err(e) => return Err(e.into()),
            Ok(d) if !if_match.matches(&delivery_etag(&d)) => RedriveOutcome::PreconditionFailed,
            Ok(d) => match redrive_one(ctx, &d).await {
                // A concurrent writer changed it after our check.
                Err(ApiError::VersionConflict(_)) => RedriveOutcome::PreconditionFailed,
                other => other?,
            },
        };
        results.push(RedriveOutcomeDto {
            delivery_ref: r.to_string(),
            outcome: outcome.as_str().to_owned(),
        });
    }
    Ok(Reply::one(BatchRedriveDto { results }, None))
}
