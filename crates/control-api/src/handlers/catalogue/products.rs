//! Products: create and publish (`draft → published`); list and retrieve
//! are the generic reads of `Served` records.

use super::product_by_ref;
use crate::error::ApiError;
use crate::handlers::reads::one;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::check_text;
use crate::wire::EmptyBody;
use crate::wire::{found, refused};
use domain::Prefix;
use serde::Deserialize;
use store::billing::products;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProduct {
    /// 1 to 200 characters.
    pub name: String,
    /// At most 1,000 characters.
    pub description: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateProduct = input.body()?;
    check_text("name", &body.name, 1, 200)?;
    if let Some(d) = &body.description {
        check_text("description", d, 0, 1000)?;
    }
    let env = ctx.env().clone();
    let row = products::create(
        ctx.tx().await?,
        &env,
        &body.name,
        body.description.as_deref(),
    )
    .await?;
    Ok(one(ctx, &row))
}

pub async fn publish(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let _: EmptyBody = input.body()?;
    let product_ref = input.path_ref("product_ref", Prefix::Product)?;
    let current = product_by_ref(ctx, &product_ref).await?;
    let next = current.status.publish().map_err(refused)?;
    let row = found(
        products::set_status(ctx.tx().await?, &current, next).await,
        "product",
    )?;
    Ok(one(ctx, &row))
}
