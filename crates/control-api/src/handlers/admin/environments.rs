//! `listEnvironments`: the caller's own environment.

use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::ts;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct EnvironmentDto {
    pub environment_ref: String,
    pub name: String,
    /// `sandbox` or `live`.
    pub mode: String,
    pub created_at: String,
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    let env = ctx.store().admin().environment(ctx.env()).await?;
    Ok(Reply::all(vec![EnvironmentDto {
        environment_ref: env.environment_ref.to_string(),
        name: env.name,
        mode: env.mode.as_str().to_owned(),
        created_at: ts(env.created_at),
    }]))
}
