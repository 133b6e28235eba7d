//! Refunds: create (the remainder check and the reservation are one
//! conditional write on the capture), list and retrieve. What happens
//! later (start at `scheduled_at`, settle) is timed work (`crate::jobs`).

use crate::error::ApiError;
use crate::handlers::admin::{opt_ts, ts};
use crate::handlers::catalogue::MoneyDto;
use crate::handlers::events::emit;
use crate::handlers::reads::{load_by_ref, status_of, Served, StatusFilter};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use domain::checkout::states::PaymentStatus;
use domain::etag::etag;
use domain::refunds::amounts::{refund_amount, scope};
use domain::refunds::states::{check_schedule, AccessEffect, RefundReason, RefundStatus};
use domain::webhook::shaping::Scope;
use domain::{Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};
use store::billing::checkout::payments::{CaptureRecord, PaymentRecord};
use store::billing::jobs;
use store::billing::outside;
use store::billing::refunds::{self, NewRefund, RefundRecord};
use store::StoreError;
use utoipa::ToSchema;

/// The timed work of refunds.
pub const START: &str = "refund.start";
pub const SETTLE: &str = "refund.settle";
/// How long the sandbox processor takes to settle a refund.
pub const SETTLE_AFTER_MS: i64 = 1_000;

#[derive(Debug, Serialize, ToSchema)]
pub struct RefundDto {
    pub refund_ref: String,
    pub payment_intent_ref: String,
    pub capture_ref: String,
    /// `scheduled`, `pending`, `succeeded`, `failed` or `canceled`.
    pub status: String,
    /// `full` or `partial`.
    pub scope: String,
    pub amount: MoneyDto,
    pub reason: String,
    /// `revoke` or `retain`.
    pub access_effect: String,
    /// True while scheduled.
    pub cancelable: bool,
    pub requested_at: String,
    pub scheduled_at: Option<String>,
    pub executed_at: Option<String>,
    pub canceled_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
    pub etag: String,
}

impl Served for RefundRecord {
    type Dto = RefundDto;
    const PREFIX: Prefix = Prefix::Refund;
    const WHAT: &'static str = "refund";
    const PATH_PARAM: &'static str = "refund_ref";
    const STATUS: Option<StatusFilter> = status_of!(RefundStatus);
    const REF_FILTERS: &'static [(&'static str, Prefix)] =
        &[("payment_intent_ref", Prefix::Payment)];

    fn dto(&self, _now: Timestamp) -> RefundDto {
        RefundDto {
            refund_ref: self.refund_ref.to_string(),
            payment_intent_ref: self.payment_intent_ref.to_string(),
            capture_ref: self.capture_ref.to_string(),
            status: self.status.as_str().to_owned(),
            scope: self.scope.as_str().to_owned(),
            amount: self.amount.into(),
            reason: self.reason.as_str().to_owned(),
            access_effect: self.access_effect.as_str().to_owned(),
            cancelable: self.status.cancelable(),
            requested_at: ts(self.requested_at),
            scheduled_at: opt_ts(self.scheduled_at),
            executed_at: opt_ts(self.executed_at),
            canceled_at: opt_ts(self.canceled_at),
            created_at: ts(self.created_at),
            updated_at: ts(self.updated_at),
            etag: Served::etag(self),
        }
    }

    fn etag(&self) -> String {
        etag(self.refund_ref.as_str(), self.version)
    }

    fn position(&self) -> (i64, String) {
        (self.created_at.millis(), self.refund_ref.to_string())
    }
}

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

/// What a refund's events concern: its payment's products and buyer.
pub(crate) fn payment_scope(payment: &PaymentRecord) -> Scope {
    Scope {
        product_refs: payment.product_refs.clone(),
        buyer_ref: payment.buyer_ref.as_ref().map(Ref::to_string),
        beneficiary_business_ref: None,
    }
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
        None => {
            let page = ctx
                .store()
                .list::<CaptureRecord>(
                    store::resource::Scope::environment(ctx.env()),
                    &[("payment_intent_ref", Some(payment_ref.as_str().into()))],
                    &store::PageRequest {
                        limit: 1,
                        after: None,
                    },
                )
                .await?;
            page.items.into_iter().next().ok_or_else(|| {
                ApiError::semantic(format!(
                    "cannot refund a {} payment: nothing was captured",
                    payment.status.as_str()
                ))
            })?
        }
    };
    if payment.status != PaymentStatus::Succeeded {
        return Err(ApiError::semantic(format!(
            "cannot refund a {} payment",
            payment.status.as_str()
        )));
    }
    if capture.payment_intent_ref != payment.payment_intent_ref {
        return Err(ApiError::semantic("the capture belongs to another payment"));
    }
    let env = ctx.env().clone();
    let tx = ctx.tx().await?;
    let held = refunds::lock_capture(tx, &capture.capture_ref).await?;
    if outside::open_disputes_of(tx, &payment.payment_intent_ref).await? > 0 {
        return Err(ApiError::semantic(
            "cannot refund a payment with an open dispute",
        ));
    }
    let amount = refund_amount(held.captured, held.reserved, requested).map_err(|e| {
        if e.is_semantic() {
            ApiError::semantic(e.to_string())
        } else {
            ApiError::validation("amount", e.to_string())
        }
    })?;
    match refunds::reserve(tx, &capture.capture_ref, amount).await {
        Err(StoreError::Conflict) => {
            return Err(ApiError::semantic(
                "the amount is more than the payment's refundable remainder",
            ))
        }
        other => other?,
    }
    let status = match scheduled_at {
        Some(_) => RefundStatus::Scheduled,
        None => RefundStatus::Pending,
    };
    let new = NewRefund {
        payment_intent_ref: &payment.payment_intent_ref,
        capture_ref: &capture.capture_ref,
        status,
        scope: scope(amount, held.captured),
        amount,
        reason,
        access_effect,
        scheduled_at,
    };
    let refund = refunds::create(tx, &env, new).await?;
    match scheduled_at {
        Some(at) => jobs::schedule(tx, START, &refund.refund_ref, &env, at).await?,
        None => {
            let due = now.plus_millis(SETTLE_AFTER_MS);
            jobs::schedule(tx, SETTLE, &refund.refund_ref, &env, due).await?
        }
    }
    emit(
        tx,
        &env,
        "refund.created",
        &payment_scope(&payment),
        &refund.dto(now),
    )
    .await?;
    Ok(crate::handlers::reads::one(ctx, &refund))
}
