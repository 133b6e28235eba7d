//! `cancelSubscription` (contract 12.4): now, which revokes its
//! entitlements at once, or at the period's end, which sets
//! `cancel_at_period_end` so that the period's end cancels it instead of
//! renewing (`commerce::renewals`). Both happen at the subscription's time:
//! its test clock's, or the wall clock's.

use super::test_clocks::time_of;
use crate::error::ApiError;
use crate::handlers::reads::{self, load, Served};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::refused;
use serde::Deserialize;
use store::billing::checkout::subscriptions::{self, Move, SubscriptionRecord};
use utoipa::ToSchema;

/// Longest `reason`.
const MAX_REASON: usize = 500;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelSubscription {
    /// `false`: cancel now; `true`: at the end of the current period.
    pub at_period_end: bool,
    /// Why, in the caller's words (at most 500 characters); the
    /// subscription's `cancel_reason` is `requested` either way.
    pub reason: Option<String>,
}

pub async fn cancel(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CancelSubscription = input.body()?;
    if body
        .reason
        .as_deref()
        .is_some_and(|r| r.chars().count() > MAX_REASON)
    {
        return Err(ApiError::validation(
            "reason",
            format!("must be at most {MAX_REASON} characters"),
        ));
    }
    let sub = load::<SubscriptionRecord>(ctx, &input).await?;
    input.check_etag(&Served::etag(&sub, ctx.now()))?;
    sub.status.check_cancel().map_err(refused)?;
    let now = time_of(ctx, sub.test_clock_ref.as_ref()).await?;
    let tx = ctx.tx().await?;
    let done = if body.at_period_end {
        let moved = Move {
            cancel_at_period_end: Some(true),
            ..Move::default()
        };
        subscriptions::update(tx, &sub, moved, now).await?
    } else {
        commerce::renewals::cancel_now(tx, &sub, now).await?
    };
    Ok(reads::one(ctx, &done))
}
