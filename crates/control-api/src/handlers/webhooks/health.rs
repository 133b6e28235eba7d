//! Endpoint health, computed from the endpoint's status and its newest
//! attempts (contract section 9, "Health").

use super::load_endpoint;
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::health::health;
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
    Ok(Reply::one(
        EndpointHealthDto {
            endpoint_ref: endpoint.endpoint_ref.to_string(),
            health: health(endpoint.status, &recent).as_str().to_owned(),
            last_delivery_status: last.map(|s| s.as_str().to_owned()),
            blocked_keys,
        },
        None,
    ))
}
