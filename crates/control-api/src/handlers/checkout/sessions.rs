//! Checkout sessions: create (priced now, from the config's published
//! version; starts a journey), list and retrieve.

use crate::error::ApiError;
use crate::handlers::catalogue::offers::amount_at;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::{found, money_error};
use commerce::shapes::checkout::step;
use domain::catalogue::checkout_config::check_values;
use domain::checkout::buyer::{BuyerName, Email};
use domain::checkout::states::{StepKind, SESSION_TTL_SECONDS};
use domain::{Money, Prefix, Ref};
use serde::Deserialize;
use store::billing::checkout::journeys;
use store::billing::checkout::sessions::{self, NewSession};
use store::billing::checkout::PricedItem;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuyerInput {
    pub email: String,
    /// 1 to 200 characters.
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCheckoutSession {
    pub config_ref: String,
    pub buyer: BuyerInput,
    /// Values by custom field key, checked against the config.
    #[schema(value_type = Option<Object>)]
    pub custom_fields: Option<serde_json::Map<String, serde_json::Value>>,
    /// A test clock of the sandbox (`clk_…`): the session, its buyer and
    /// every subscription paid through it live on the clock's time.
    pub test_clock_ref: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateCheckoutSession = input.body()?;
    let config_ref = Ref::parse(Prefix::CheckoutConfig, &body.config_ref)
        .map_err(|e| ApiError::validation("config_ref", e.to_string()))?;
    let email = Email::parse(&body.buyer.email)
        .map_err(|e| ApiError::validation("buyer.email", e.to_string()))?;
    let name = body
        .buyer
        .name
        .as_deref()
        .map(BuyerName::parse)
        .transpose()
        .map_err(|e| ApiError::validation("buyer.name", e.to_string()))?;
    let config = found(
        ctx.store()
            .billing()
            .checkout_config(ctx.env(), &config_ref)
            .await,
        "checkout config",
    )?;
    let Some(version) = config.published_version else {
        return Err(ApiError::semantic(format!(
            "cannot create a session for a {} checkout config; publish it first",
            config.status.as_str()
        )));
    };
    let content = ctx
        .store()
        .billing()
        .checkout_config_version(ctx.env(), &config_ref, version)
        .await?;
    let values = check_values(
        &content.custom_fields,
        &body.custom_fields.unwrap_or_default(),
    )
    .map_err(|e| {
        let e = e.under("custom_fields");
        ApiError::validation(e.field, e.issue)
    })?;
    let clock = body
        .test_clock_ref
        .as_deref()
        .map(|c| Ref::parse(Prefix::TestClock, c))
        .transpose()
        .map_err(|e| ApiError::validation("test_clock_ref", e.to_string()))?;
    let now = super::test_clocks::time_of(ctx, clock.as_ref()).await?;
    let refs: Vec<String> = content
        .line_items
        .iter()
        .map(|i| i.offer_ref.clone())
        .collect();
    let offers = ctx.store().billing().offers(ctx.env(), &refs).await?;
    let mut items = Vec::with_capacity(refs.len());
    let mut total: Option<Money> = None;
    for line in &content.line_items {
        let offer = offers
            .iter()
            .find(|o| o.offer.offer_ref.as_str() == line.offer_ref)
            .ok_or_else(|| ApiError::semantic("an offer of the checkout config is gone"))?;
        let unit = amount_at(offer, now).0;
        let amount = unit
            .checked_mul(u64::from(line.quantity))
            .map_err(money_error)?;
        total = Some(match total {
            None => amount,
            Some(t) => t.checked_add(amount).map_err(money_error)?,
        });
        items.push(PricedItem {
            offer_ref: line.offer_ref.clone(),
            price_ref: offer.price.price_ref.to_string(),
            product_ref: offer.offer.product_ref.to_string(),
            quantity: line.quantity,
            unit_amount: unit.minor(),
            amount: amount.minor(),
            price_type: offer.price.recurrence.price_type().as_str().to_owned(),
            interval: offer
                .price
                .recurrence
                .interval()
                .map(|i| i.as_str().to_owned()),
        });
    }
    let total = total.ok_or_else(|| ApiError::semantic("the checkout config has no line items"))?;
    let env = ctx.env().clone();
    let journey_ref = journeys::new_ref();
    let expires_at = now.plus_seconds(SESSION_TTL_SECONDS);
    let new = NewSession {
        config_ref: &config_ref,
        config_version: version,
        mode: content.mode,
        buyer_email: email.as_str(),
        buyer_name: name.as_ref().map(BuyerName::as_str),
        journey_ref: &journey_ref,
        line_items: &items,
        amount_total: total,
        custom_fields: &values,
        success_url: &content.success_url,
        cancel_url: content.cancel_url.as_deref(),
        created_at: now,
        expires_at,
        test_clock_ref: clock.as_ref(),
    };
    let tx = ctx.tx().await?;
    let session = sessions::create(tx, &env, new).await?;
    journeys::start(
        tx,
        &env,
        &journey_ref,
        &session.checkout_session_ref,
        step(StepKind::SessionCreated, now, None),
        now,
    )
    .await?;
    Ok(crate::handlers::reads::one(ctx, &session))
}
