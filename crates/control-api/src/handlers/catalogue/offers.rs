//! Offers: list, retrieve and reprice. An offer's `amount` and
//! `promotion_ref` are computed when read, from the clock and the
//! promotions that cover it.

use crate::error::ApiError;
use crate::handlers::lists::{Filter, ListQuery};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::check_text;
use crate::wire::ts;
use crate::wire::{found, money_error, MoneyDto};
use commerce::checkout::amount_at;
use domain::catalogue::{OfferStatus, PriceStatus};
use domain::etag::etag;
use domain::{Money, Prefix, Timestamp};
use serde::{Deserialize, Serialize};
use store::billing::offers::{self, OfferRecord};
use store::billing::prices::{self, NewPrice};
use store::billing::products;
use store::billing::promotions::PromotionRecord;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct OfferDto {
    pub offer_ref: String,
    pub product_ref: String,
    pub price_ref: String,
    /// The current price's amount.
    pub base_amount: MoneyDto,
    /// `base_amount` after the promotion active now, if any.
    pub amount: MoneyDto,
    /// The promotion active now, else null.
    pub promotion_ref: Option<String>,
    /// `active` (`retired` is reserved).
    pub status: String,
    /// The current price's `type`: `one_time` or `recurring`.
    #[serde(rename = "type")]
    pub price_type: String,
    /// The current price's `interval`.
    pub interval: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

/// The offer's tag: its row version and what is computed from the clock,
/// so that it changes when a promotion starts or ends.
fn offer_etag(o: &OfferRecord, promotion: Option<&PromotionRecord>) -> String {
    let promotion = promotion.map(|p| p.promotion_ref.as_str()).unwrap_or("");
    etag(
        &format!("{}:{}", o.offer.offer_ref, promotion),
        o.offer.version,
    )
}

pub(crate) fn dto(o: &OfferRecord, now: Timestamp) -> OfferDto {
    let (amount, promotion) = amount_at(o, now);
    OfferDto {
        offer_ref: o.offer.offer_ref.to_string(),
        product_ref: o.offer.product_ref.to_string(),
        price_ref: o.price.price_ref.to_string(),
        base_amount: o.price.amount.into(),
        amount: amount.into(),
        promotion_ref: promotion.map(|p| p.promotion_ref.to_string()),
        status: o.offer.status.as_str().to_owned(),
        price_type: o.price.recurrence.price_type().as_str().to_owned(),
        interval: o.price.recurrence.interval().map(|i| i.as_str().to_owned()),
        created_at: ts(o.offer.created_at),
        updated_at: ts(o.offer.updated_at),
        etag: offer_etag(o, promotion),
    }
}

fn reply(o: &OfferRecord, now: Timestamp) -> Reply {
    let d = dto(o, now);
    let tag = d.etag.clone();
    Reply::one(d, Some(tag))
}

/// The filters of `listOffers`.
pub fn filters() -> Vec<Filter> {
    vec![
        Filter::one_of("status", || {
            OfferStatus::ALL.iter().map(|s| s.as_str()).collect()
        }),
        Filter::reference("product_ref", Prefix::Product),
    ]
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let query = ListQuery::parse(ctx, &input)?;
    let status = query.status(OfferStatus::parse, "active or retired")?;
    let product_ref = query.reference("product_ref");
    let page = ctx
        .store()
        .billing()
        .list_offers(ctx.env(), status, product_ref.as_ref(), &query.page)
        .await?;
    let now = ctx.now();
    Ok(Reply::page(
        page,
        &query.scope,
        |o| (o.offer.created_at.millis(), o.offer.offer_ref.to_string()),
        |o| dto(o, now),
    ))
}

async fn load(ctx: &Ctx, input: &Input) -> Result<OfferRecord, ApiError> {
    let offer_ref = input.path_ref("offer_ref", Prefix::Offer)?;
    found(
        ctx.store().billing().offer(ctx.env(), &offer_ref).await,
        "offer",
    )
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    input.query_params(&[])?;
    Ok(reply(&load(ctx, &input).await?, ctx.now()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepriceOffer {
    /// The new amount, in the current price's currency.
    pub amount: MoneyDto,
    /// 1 to 200 characters.
    pub reason: String,
}

fn same_currency(current: Money, new: Money) -> Result<(), ApiError> {
    if current.currency() == new.currency() {
        Ok(())
    } else {
        Err(money_error(domain::MoneyError::CurrencyMismatch))
    }
}

pub async fn reprice(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: RepriceOffer = input.body()?;
    let amount = body.amount.parse("amount")?;
    check_text("reason", &body.reason, 1, 200)?;
    let offer = load(ctx, &input).await?;
    same_currency(offer.price.amount, amount)?;
    let now = ctx.now();
    let env = ctx.env().clone();
    let offer_refs = [offer.offer.offer_ref.to_string()];
    let tx = ctx.tx().await?;
    // The product's lock first, as publishPrice takes it, then the offer's.
    products::lock(tx, &env, &offer.offer.product_ref).await?;
    let current = offers::lock(tx, &env, &offer_refs)
        .await?
        .pop()
        .ok_or_else(|| ApiError::not_found("offer"))?;
    same_currency(current.price.amount, amount)?;
    prices::supersede_published(tx, &current.offer.product_ref).await?;
    let new = NewPrice {
        product_ref: &current.offer.product_ref,
        amount,
        recurrence: current.price.recurrence,
        status: PriceStatus::Published,
        reason: Some(&body.reason),
    };
    let price = prices::create(tx, &env, new).await?;
    let moved = offers::point_at(tx, &env, &current.offer.product_ref, &price.price_ref).await?;
    Ok(reply(&moved, now))
}
