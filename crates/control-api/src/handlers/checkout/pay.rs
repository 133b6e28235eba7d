//! `payCheckoutSession`: the wire side of pay. The body is parsed into a
//! `commerce::pay::Request` here; what a pay does, in one unit of work, is
//! `commerce::pay`'s. The answer carries the payment, the session's first
//! subscription and the session as they are after it.

use super::test_clocks::time_of;
use crate::error::ApiError;
use crate::handlers::reads::{load, Served};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use commerce::pay::{self, Method, Paid, Request};
use commerce::shapes::checkout::{NextActionDto, PaymentDto, SessionDto, SubscriptionDto};
use domain::checkout::sandbox::TestCard;
use domain::{Prefix, Ref};
use serde::{Deserialize, Serialize};
use store::billing::checkout::sessions::SessionRecord;
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PayCheckoutSession {
    /// A sandbox card (`pm_card_visa`, …) or a stored method (`spm_…`).
    pub payment_method: Option<String>,
    /// Keep the card for later payments (recurring items always do).
    pub save_payment_method: Option<bool>,
    /// `approve` or `decline`: finishes the session's payment that needs
    /// authentication (sandbox only), instead of `payment_method`.
    pub authentication: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PayResultDto {
    /// `retrieve_payment_response`, `subscription_started` or
    /// `subscription_setup_action_required`.
    pub result: String,
    /// Null when the pay started a trial, which charges nothing.
    pub payment: Option<PaymentDto>,
    pub subscription: Option<SubscriptionDto>,
    pub next_action: Option<NextActionDto>,
    pub checkout_session: SessionDto,
}

fn request(body: &PayCheckoutSession) -> Result<Request, ApiError> {
    match (&body.payment_method, &body.authentication) {
        (Some(m), None) => {
            let method = if let Some(card) = TestCard::parse(m) {
                Method::Card(card)
            } else if m.starts_with("spm_") {
                Method::Stored(
                    Ref::parse(Prefix::StoredPaymentMethod, m)
                        .map_err(|e| ApiError::validation("payment_method", e.to_string()))?,
                )
            } else {
                return Err(ApiError::validation(
                    "payment_method",
                    "must be a sandbox card (pm_card_…) or a stored payment method (spm_…)",
                ));
            };
            Ok(Request::Pay {
                method,
                save: body.save_payment_method.unwrap_or(false),
            })
        }
        (None, Some(a)) => {
            if body.save_payment_method.is_some() {
                return Err(ApiError::validation(
                    "save_payment_method",
                    "goes with payment_method, not with authentication",
                ));
            }
            match a.as_str() {
                "approve" => Ok(Request::Authenticate(true)),
                "decline" => Ok(Request::Authenticate(false)),
                _ => Err(ApiError::validation(
                    "authentication",
                    "must be approve or decline",
                )),
            }
        }
        _ => Err(ApiError::validation(
            "body",
            "must hold exactly one of payment_method and authentication",
        )),
    }
}

pub async fn pay(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: PayCheckoutSession = input.body()?;
    let request = request(&body)?;
    pay::check_processor(ctx.caller.mode)?;
    let session = load::<SessionRecord>(ctx, &input).await?;
    let now = time_of(ctx, session.test_clock_ref.as_ref()).await?;
    let env = ctx.env().clone();
    let prepared = pay::prepare(ctx.store(), &env, &session, request, now).await?;
    let tx = ctx.tx().await?;
    let paid = pay::run(tx, &env, &session, prepared, now).await?;
    Ok(answer(&paid, now))
}

fn answer(paid: &Paid, now: domain::Timestamp) -> Reply {
    let payment = paid.payment.as_ref().map(|p| p.dto(now));
    let dto = PayResultDto {
        result: paid.result.as_str().to_owned(),
        next_action: payment.as_ref().and_then(|p| p.next_action.clone()),
        payment,
        subscription: paid.subscription.as_ref().map(|s| s.dto(now)),
        checkout_session: paid.session.dto(now),
    };
    Reply::one(dto, None)
}
