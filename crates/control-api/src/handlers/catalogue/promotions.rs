//! Promotions: plan (a read: what a discount would do, with an ETag that
//! digests the plan and every row it read) and apply (the same body under
//! that ETag: recomputed in the unit of work, after locking the offers).

use crate::error::ApiError;
use crate::handlers::{distinct_refs, Ctx};
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{money_error, MoneyDto};
use crate::wire::{opt_ts, ts};
use commerce::checkout::amount_at;
use domain::catalogue::plan::plan_digest;
use domain::catalogue::promotion::{Discount, Percent, Window};
use domain::etag::etag;
use domain::Timestamp;
use serde::{Deserialize, Serialize};
use store::billing::offers::{self, OfferRecord};
use store::billing::promotions::{self, PromotionRecord};
use utoipa::ToSchema;

/// At most this many offers per promotion.
const MAX_OFFERS: usize = 100;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromotionBody {
    /// 1 to 100 distinct offers of the environment.
    pub offer_refs: Vec<String>,
    pub discount: DiscountDto,
    /// Defaults to the moment of apply.
    pub starts_at: Option<String>,
    /// Open-ended when absent; after `starts_at` and in the future.
    pub ends_at: Option<String>,
}

/// Exactly one of `percent_off` and `amount_off`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DiscountDto {
    /// An integer from 1 to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent_off: Option<u64>,
    /// In the offers' currency.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount_off: Option<MoneyDto>,
}

impl From<Discount> for DiscountDto {
    fn from(d: Discount) -> DiscountDto {
        match d {
            Discount::PercentOff(p) => DiscountDto {
                percent_off: Some(u64::from(p.get())),
                amount_off: None,
            },
            Discount::AmountOff(m) => DiscountDto {
                percent_off: None,
                amount_off: Some(m.into()),
            },
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PlanDto {
    pub changes: Vec<ChangeDto>,
    /// Hex SHA-256 of the plan and the versions it read; the plan's ETag
    /// is this, quoted.
    pub plan_digest: String,
    pub etag: String,
}

#[derive(Debug, Serialize, ToSchema)]
#[schema(as = PromotionChangeDto)]
pub struct ChangeDto {
    pub offer_ref: String,
    /// The offer's amount now.
    pub current_amount: MoneyDto,
    /// Its base amount with this discount.
    pub promotional_amount: MoneyDto,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PromotionDto {
    pub promotion_ref: String,
    pub offer_refs: Vec<String>,
    pub discount: DiscountDto,
    pub starts_at: String,
    pub ends_at: Option<String>,
    /// `scheduled`, `active` or `ended`, from the clock.
    pub status: String,
    pub created_at: String,
    pub etag: String,
}

/// A checked body: what plan and apply share.
struct Plan {
    offer_refs: Vec<String>,
    discount: Discount,
    starts_at: Option<Timestamp>,
    ends_at: Option<Timestamp>,
}

fn time_field(field: &str, value: Option<&String>) -> Result<Option<Timestamp>, ApiError> {
    value
        .map(|v| {
            Timestamp::parse(v)
                .ok_or_else(|| ApiError::validation(field, "must be an RFC 3339 timestamp"))
        })
        .transpose()
}

fn checked(input: &Input, now: Timestamp) -> Result<Plan, ApiError> {
    let body: PromotionBody = input.body()?;
    if body.offer_refs.is_empty() || body.offer_refs.len() > MAX_OFFERS {
        return Err(ApiError::validation(
            "offer_refs",
            format!("must list 1 to {MAX_OFFERS} offers"),
        ));
    }
    let offer_refs = distinct_refs("offer_refs", domain::Prefix::Offer, &body.offer_refs)?;
    let discount = match (body.discount.percent_off, &body.discount.amount_off) {
        (Some(p), None) => Discount::PercentOff(
            Percent::new(p)
                .map_err(|e| ApiError::validation("discount.percent_off", e.to_string()))?,
        ),
        (None, Some(m)) => Discount::AmountOff(m.parse("discount.amount_off")?),
        _ => {
            return Err(ApiError::validation(
                "discount",
                "must hold exactly one of percent_off and amount_off",
            ))
        }
    };
    let starts_at = time_field("starts_at", body.starts_at.as_ref())?;
    let ends_at = time_field("ends_at", body.ends_at.as_ref())?;
    if let Some(end) = ends_at {
        if end <= starts_at.unwrap_or(now) || end <= now {
            return Err(ApiError::validation(
                "ends_at",
                "must be after starts_at and in the future",
            ));
        }
    }
    Ok(Plan {
        offer_refs,
        discount,
        starts_at,
        ends_at,
    })
}

/// Every listed offer, in the body's order; a missing one is 404.
fn in_order(plan: &Plan, found: Vec<OfferRecord>) -> Result<Vec<OfferRecord>, ApiError> {
    plan.offer_refs
        .iter()
        .map(|r| {
            found
                .iter()
                .find(|o| o.offer.offer_ref.as_str() == r)
                .cloned()
                .ok_or_else(|| ApiError::not_found("offer"))
        })
        .collect()
}

/// The plan's digest: the body as sent, and the version of every offer
/// and price read.
fn digest(input: &Input, offers: &[OfferRecord]) -> String {
    let reads: Vec<(String, i64)> = offers
        .iter()
        .flat_map(|o| {
            [
                (o.offer.offer_ref.to_string(), o.offer.version),
                (o.price.price_ref.to_string(), o.price.version),
            ]
        })
        .collect();
    plan_digest(&input.body, &reads)
}

fn changes(
    plan: &Plan,
    offers: &[OfferRecord],
    now: Timestamp,
) -> Result<Vec<ChangeDto>, ApiError> {
    offers
        .iter()
        .map(|o| {
            let promotional = plan.discount.apply(o.price.amount).map_err(money_error)?;
            Ok(ChangeDto {
                offer_ref: o.offer.offer_ref.to_string(),
                current_amount: amount_at(o, now).0.into(),
                promotional_amount: promotional.into(),
            })
        })
        .collect()
}

pub async fn plan(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let now = ctx.now();
    let plan = checked(&input, now)?;
    let read = ctx
        .store()
        .billing()
        .offers(ctx.env(), &plan.offer_refs)
        .await?;
    let offers = in_order(&plan, read)?;
    let changes = changes(&plan, &offers, now)?;
    let plan_digest = digest(&input, &offers);
    let tag = format!("\"{plan_digest}\"");
    let dto = PlanDto {
        changes,
        plan_digest,
        etag: tag.clone(),
    };
    Ok(Reply::one(dto, Some(tag)))
}

fn promotion_dto(p: &PromotionRecord, now: Timestamp) -> PromotionDto {
    PromotionDto {
        promotion_ref: p.promotion_ref.to_string(),
        offer_refs: p.offer_refs.clone(),
        discount: p.discount.into(),
        starts_at: ts(p.window.starts_at()),
        ends_at: opt_ts(p.window.ends_at()),
        status: p.window.status_at(now).as_str().to_owned(),
        created_at: ts(p.created_at),
        etag: etag(p.promotion_ref.as_str(), p.version),
    }
}

pub async fn apply(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let now = ctx.now();
    let plan = checked(&input, now)?;
    let env = ctx.env().clone();
    let tx = ctx.tx().await?;
    let locked = match offers::lock(tx, &env, &plan.offer_refs).await {
        Err(store::StoreError::NotFound) => return Err(ApiError::not_found("offer")),
        other => other?,
    };
    let offers = in_order(&plan, locked)?;
    input.check_etag(&format!("\"{}\"", digest(&input, &offers)))?;
    changes(&plan, &offers, now)?;
    let window = Window::new(plan.starts_at.unwrap_or(now), plan.ends_at)
        .map_err(|e| ApiError::validation("ends_at", e.to_string()))?;
    for o in &offers {
        if let Some(other) = o
            .promotions
            .iter()
            .find(|p| p.window.is_live_at(now) && p.window.overlaps(&window))
        {
            return Err(ApiError::semantic(format!(
                "offer {} already has a {} promotion ({}) whose window overlaps this one",
                o.offer.offer_ref,
                other.window.status_at(now).as_str(),
                other.promotion_ref
            )));
        }
    }
    let row = promotions::create(tx, &env, &plan.offer_refs, plan.discount, window).await?;
    offers::touch(tx, &plan.offer_refs).await?;
    Ok(Reply::one(
        promotion_dto(&row, now),
        Some(etag(row.promotion_ref.as_str(), row.version)),
    ))
}
