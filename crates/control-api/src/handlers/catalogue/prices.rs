//! Prices: create (draft), list, retrieve, and publish, which supersedes
//! the product's published price and makes or moves its offer in the same
//! unit of work.

use super::{found, product_by_ref, refused, MoneyDto};
use crate::error::ApiError;
use crate::handlers::admin::{opt_ts, ts};
use crate::handlers::lists::ListQuery;
use crate::handlers::webhooks::endpoints::EmptyBody;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::catalogue::{PriceStatus, ProductStatus, Recurrence};
use domain::etag::etag;
use domain::{Prefix, Ref};
use serde::{Deserialize, Serialize};
use store::billing::prices::{self, NewPrice, PriceRecord};
use store::billing::{offers, products};
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct PriceDto {
    pub price_ref: String,
    pub product_ref: String,
    pub amount: MoneyDto,
    /// `one_time` or `recurring`.
    #[serde(rename = "type")]
    pub price_type: String,
    /// `month` or `year` for recurring prices, else null.
    pub interval: Option<String>,
    /// `draft`, `published` or `superseded`.
    pub status: String,
    pub created_at: String,
    pub published_at: Option<String>,
    pub superseded_at: Option<String>,
    pub etag: String,
}

fn price_etag(p: &PriceRecord) -> String {
    etag(p.price_ref.as_str(), p.version)
}

fn dto(p: &PriceRecord) -> PriceDto {
    PriceDto {
        price_ref: p.price_ref.to_string(),
        product_ref: p.product_ref.to_string(),
        amount: p.amount.into(),
        price_type: p.recurrence.price_type().as_str().to_owned(),
        interval: p.recurrence.interval().map(|i| i.as_str().to_owned()),
        status: p.status.as_str().to_owned(),
        created_at: ts(p.created_at),
        published_at: opt_ts(p.published_at),
        superseded_at: opt_ts(p.superseded_at),
        etag: price_etag(p),
    }
}

fn reply(p: &PriceRecord) -> Reply {
    Reply::one(dto(p), Some(price_etag(p)))
}

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
    Ok(reply(&row))
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(
        ctx.op.id,
        &input,
        Some("status"),
        &[("product_ref", Prefix::Product)],
    )?;
    let status = query.status(PriceStatus::parse, "draft, published or superseded")?;
    let product_ref = query.reference("product_ref");
    let page = ctx
        .store()
        .billing()
        .list_prices(ctx.env(), status, product_ref.as_ref(), &query.page)
        .await?;
    Ok(Reply::page(
        page,
        &query.scope,
        |p| (p.created_at.millis(), p.price_ref.to_string()),
        dto,
    ))
}

async fn load(ctx: &Ctx, input: &Input) -> Result<PriceRecord, ApiError> {
    let price_ref = input.path_ref("price_ref", Prefix::Price)?;
    found(
        ctx.store().billing().price(ctx.env(), &price_ref).await,
        "price",
    )
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(reply(&load(ctx, &input).await?))
}

pub async fn publish(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let _: EmptyBody = input.body()?;
    let current = load(ctx, &input).await?;
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
    Ok(reply(&row))
}
