//! Endpoint health, computed from the endpoint's status and its newest
//! attempts (contract section 9, "Health"), with its receiver protection
//! in force now (contract 13.2).

use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::opt_ts;
use domain::webhook::health::health;
use domain::webhook::limits::MILLI;
use serde::Serialize;
use utoipa::ToSchema;

/// How many of the newest attempts the health rule reads.
const WINDOW: u32 = 100;

#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointHealthDto {
    pub endpoint_ref: String,
    /// `healthy`, `degraded`, `failing`, `unknown`, `paused` or `disabled`.
    pub health: String,
    /// The status of the newest delivery, or null.
    pub last_delivery_status: Option<String>,
    /// Keys whose failed head keeps their later deliveries waiting
    /// (contract 13.1); 0 on an endpoint that is not `per_key`.
    pub blocked_keys: i64,
    /// Attempts a second the endpoint's attempts may start at now: the
    /// lower of its `rate_limit` and the rate back-pressure left it (a
    /// `429` or `503` halves it; it climbs back by a tenth every 10 s);
    /// null when nothing limits it (contract 13.2).
    pub effective_rate: Option<f64>,
    /// Until when a `Retry-After` holds every attempt to the endpoint
    /// off; null when none does.
    pub throttled_until: Option<String>,
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let endpoint = load_endpoint(ctx, &input).await?;
    let recent = ctx
        .store()
        .webhooks()
        .recent_attempt_outcomes(&endpoint.endpoint_ref, WINDOW)
        .await?;
    let last = ctx
        .store()
        .webhooks()
        .latest_delivery_status(&endpoint.endpoint_ref)
        .await?;
    let blocked_keys = ctx
        .store()
        .webhooks()
        .blocked_keys(Some(&endpoint.endpoint_ref))
        .await?;
    let now = ctx.now();
    let protection = &endpoint.protection;
    Ok(Reply::one(
        EndpointHealthDto {
            endpoint_ref: endpoint.endpoint_ref.to_string(),
            health: health(endpoint.status, &recent).as_str().to_owned(),
            last_delivery_status: last.map(|s| s.as_str().to_owned()),
            blocked_keys,
            effective_rate: protection
                .effective_rate_milli(now)
                .map(|milli| milli as f64 / MILLI as f64),
            throttled_until: opt_ts(protection.throttled(now)),
        },
        None,
    ))
}
