//! Prices: create (draft) and publish, which supersedes
//! the product's published price and makes or moves its offer in the same
//! unit of work. List and retrieve are the generic reads of `Served` records.

use super::product_by_ref;
use crate::error::ApiError;
use crate::handlers::reads::{load, one};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::EmptyBody;
use crate::wire::{found, refused, MoneyDto};
use domain::catalogue::{PriceStatus, ProductStatus, Recurrence};
use domain::{Prefix, Ref};
use serde::Deserialize;
use store::billing::prices::{self, NewPrice, PriceRecord};
use store::billing::{offers, products};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePrice {
    pub product_ref: String,
    /// `"0"` is allowed.
    pub amount: MoneyDto,
    /// `one_time` or `recurring`.
    #[serde(rename = "type")]
    pub price_type: String,
    /// `month` or `year`: required for `recurring`, absent or null for `one_time`.
    pub interval: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreatePrice = input.body()?;
    let product_ref = Ref::parse(Prefix::Product, &body.product_ref)
        .map_err(|e| ApiError::validation("product_ref", e.to_string()))?;
    let amount = body.amount.parse("amount")?;
    let recurrence = Recurrence::parse(&body.price_type, body.interval.as_deref())
        .map_err(|e| ApiError::validation(e.field(), e.to_string()))?;
    product_by_ref(ctx, &product_ref).await?;
    let env = ctx.env().clone();
    let new = NewPrice {
        product_ref: &product_ref,
        amount,
        recurrence,
        status: PriceStatus::Draft,
        reason: None,
    };
    let row = prices::create(ctx.tx().await?, &env, new).await?;
    Ok(one(ctx, &row))
}

pub async fn publish(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let _: EmptyBody = input.body()?;
    let current = load::<PriceRecord>(ctx, &input).await?;
    current.status.publish().map_err(refused)?;
    let env = ctx.env().clone();
    let tx = ctx.tx().await?;
    // Under the product's lock: another publish or a reprice of this
    // product waits, then sees this one's price as the published one.
    let product = found(
        products::lock(tx, &env, &current.product_ref).await,
        "product",
    )?;
    if product.status != ProductStatus::Published {
        return Err(ApiError::semantic(format!(
            "cannot publish a price of a {} product; publish the product first",
            product.status.as_str()
        )));
    }
    prices::supersede_published(tx, &current.product_ref).await?;
    let row = prices::publish(tx, &current).await?;
    offers::point_at(tx, &env, &current.product_ref, &row.price_ref).await?;
    Ok(one(ctx, &row))
}
