//! Secret rotation: rotate adds a pending version, confirm promotes it and
//! retires the old active one for the grace period, revoke ends the pending
//! or the retiring versions at once.

use super::endpoints::{endpoint_etag, reply, seal, versions};
use super::{check_reason, load_endpoint};
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::webhook::secret_version;
use domain::webhook::signing::SigningSecret;
use serde::Deserialize;
use store::webhooks::endpoints;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretReason {
    /// 1 to 500 characters.
    pub reason: String,
}

async fn prepare(ctx: &Ctx, input: &Input) -> Result<store::EndpointRecord, ApiError> {
    let body: SecretReason = input.body()?;
    check_reason(&body.reason)?;
    let current = load_endpoint(ctx, input).await?;
    input.check_etag(&endpoint_etag(&current))?;
    Ok(current)
}

pub async fn rotate(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let current = prepare(ctx, &input).await?;
    let added = secret_version::rotate(&versions(&current), ctx.now())
        .map_err(|e| ApiError::semantic(e.to_string()))?;
    let secret = SigningSecret::generate();
    let number = added.version;
    let sealed = seal(ctx, &secret);
    let row =
        endpoints::update_secret_versions(ctx.tx().await?, &current, &[], Some((added, sealed)))
            .await?;
    Ok(reply(ctx, &row, Some((number, &secret))))
}

pub async fn confirm(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let current = prepare(ctx, &input).await?;
    let mut v = versions(&current);
    let grace = ctx.state.settings.webhooks.secret_grace.as_millis() as i64;
    secret_version::confirm(&mut v, ctx.now(), grace)
        .map_err(|e| ApiError::semantic(e.to_string()))?;
    let row = endpoints::update_secret_versions(ctx.tx().await?, &current, &v, None).await?;
    Ok(reply(ctx, &row, None))
}

pub async fn revoke(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let current = prepare(ctx, &input).await?;
    let mut v = versions(&current);
    secret_version::revoke(&mut v, ctx.now()).map_err(|e| ApiError::semantic(e.to_string()))?;
    let row = endpoints::update_secret_versions(ctx.tx().await?, &current, &v, None).await?;
    Ok(reply(ctx, &row, None))
}
