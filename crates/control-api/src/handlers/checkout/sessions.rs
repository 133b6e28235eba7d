//! Checkout sessions: create (parsed here; priced and opened by
//! `commerce::checkout`), list and retrieve (the generic reads).

use super::test_clocks::time_of;
use crate::error::ApiError;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use commerce::checkout::{self, SessionAsk};
use domain::checkout::buyer::{BuyerName, Email};
use domain::{Prefix, Ref};
use serde::Deserialize;
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

fn ask(body: &CreateCheckoutSession) -> Result<SessionAsk, ApiError> {
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
    Ok(SessionAsk {
        config_ref,
        email,
        name,
        custom_fields: body.custom_fields.clone().unwrap_or_default(),
    })
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateCheckoutSession = input.body()?;
    let ask = ask(&body)?;
    let env = ctx.env().clone();
    let configured = checkout::configured(ctx.store(), &env, &ask).await?;
    let clock = body
        .test_clock_ref
        .as_deref()
        .map(|c| Ref::parse(Prefix::TestClock, c))
        .transpose()
        .map_err(|e| ApiError::validation("test_clock_ref", e.to_string()))?;
    let now = time_of(ctx, clock.as_ref()).await?;
    let priced = checkout::price(ctx.store(), &env, configured, now).await?;
    let tx = ctx.tx().await?;
    let session = checkout::open(tx, &env, &ask, priced, clock.as_ref(), now).await?;
    Ok(crate::handlers::reads::one(ctx, &session))
}
