//! Refunds: create (parsed here; the use case is `commerce::refunds`),
//! list and retrieve (the generic reads). What happens later (start at
//! `scheduled_at`, settle) is timed work (`commerce::jobs`).

use crate::error::ApiError;
use crate::handlers::reads::load_by_ref;
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use commerce::refunds::{self, RefundAsk};
use commerce::shapes::MoneyDto;
use domain::refunds::states::{check_schedule, AccessEffect, RefundReason};
use domain::{Prefix, Ref, Timestamp};
use serde::Deserialize;
use store::billing::checkout::payments::{CaptureRecord, PaymentRecord};
use utoipa::ToSchema;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRefund {
    pub payment_intent_ref: String,
    /// Defaults to the payment's capture.
    pub capture_ref: Option<String>,
    /// Defaults to the whole remainder; at least `"1"`.
    pub amount: Option<MoneyDto>,
    /// `requested_by_customer`, `duplicate`, `fraudulent` or `other`.
    pub reason: String,
    /// `revoke` or `retain`: what a succeeded refund does to the order's
    /// entitlements.
    pub access_effect: String,
    /// In the future, at most 90 days ahead.
    pub scheduled_at: Option<String>,
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    let body: CreateRefund = input.body()?;
    let payment_ref = Ref::parse(Prefix::Payment, &body.payment_intent_ref)
        .map_err(|e| ApiError::validation("payment_intent_ref", e.to_string()))?;
    let capture_ref = body
        .capture_ref
        .as_deref()
        .map(|c| Ref::parse(Prefix::Capture, c))
        .transpose()
        .map_err(|e| ApiError::validation("capture_ref", e.to_string()))?;
    let requested = body
        .amount
        .as_ref()
        .map(|a| a.parse("amount"))
        .transpose()?;
    let reason = RefundReason::parse(&body.reason).ok_or_else(|| {
        ApiError::validation(
            "reason",
            "must be requested_by_customer, duplicate, fraudulent or other",
        )
    })?;
    let access_effect = AccessEffect::parse(&body.access_effect)
        .ok_or_else(|| ApiError::validation("access_effect", "must be revoke or retain"))?;
    let now = ctx.now();
    let scheduled_at = body
        .scheduled_at
        .as_deref()
        .map(|t| {
            let at = Timestamp::parse(t).ok_or_else(|| {
                ApiError::validation("scheduled_at", "must be an RFC 3339 timestamp")
            })?;
            check_schedule(at, now)
                .map(|()| at)
                .map_err(|e| ApiError::validation("scheduled_at", e.to_string()))
        })
        .transpose()?;
    if requested.is_some_and(|m| m.minor() == 0) {
        return Err(ApiError::validation("amount", "must be at least 1"));
    }
    let payment: PaymentRecord = load_by_ref(ctx, &payment_ref).await?;
    let capture: CaptureRecord = match &capture_ref {
        Some(c) => load_by_ref(ctx, c).await?,
        None => refunds::first_capture(ctx.store(), ctx.env(), &payment).await?,
    };
    refunds::check(&payment, &capture)?;
    let ask = RefundAsk {
        requested,
        reason,
        access_effect,
        scheduled_at,
    };
    let env = ctx.env().clone();
    let tx = ctx.tx().await?;
    let refund = refunds::create(tx, &env, &payment, &capture, ask, now).await?;
    Ok(crate::handlers::reads::one(ctx, &refund))
}
