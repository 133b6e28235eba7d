//! A refund asked for: the payment must have succeeded, been captured and
//! have no open dispute; the remainder check and the reservation are one
//! conditional write on the capture; then the refund, its timed work (start
//! at `scheduled_at`, else settle) and `refund.created`, all in the
//! caller's unit of work. What happens later (start, settle, cancel when a
//! dispute opens) is timed work (`crate::jobs`).

use crate::events::{checkout_key, Batch};
use crate::shapes::refunds::payment_scope;
use crate::shapes::Served;
use crate::CommerceError;
use domain::checkout::states::PaymentStatus;
use domain::refunds::amounts::{refund_amount, scope};
use domain::refunds::states::{AccessEffect, RefundReason, RefundStatus};
use domain::{Money, Ref, Timestamp};
use store::billing::checkout::payments::{CaptureRecord, PaymentRecord};
use store::billing::jobs;
use store::billing::outside;
use store::billing::refunds::{self, NewRefund, RefundRecord};
use store::{Store, StoreError, WriteTx};

/// The timed work of refunds.
pub const START: &str = "refund.start";
pub const SETTLE: &str = "refund.settle";
/// How long the sandbox processor takes to settle a refund.
pub const SETTLE_AFTER_MS: i64 = 1_000;

/// What the caller asks of a refund, checked for form.
pub struct RefundAsk {
    /// Defaults to the whole remainder.
    pub requested: Option<Money>,
    pub reason: RefundReason,
    pub access_effect: AccessEffect,
    /// When it starts; now when `None`.
    pub scheduled_at: Option<Timestamp>,
}

/// The payment's first capture, for a refund that names none.
pub async fn first_capture(
    store: &Store,
    environment_ref: &Ref,
    payment: &PaymentRecord,
) -> Result<CaptureRecord, CommerceError> {
    let page = store
        .list::<CaptureRecord>(
            store::resource::Scope::environment(environment_ref),
            &[(
                "payment_intent_ref",
                Some(payment.payment_intent_ref.as_str().into()),
            )],
            &store::PageRequest {
                limit: 1,
                after: None,
            },
        )
        .await?;
    page.items.into_iter().next().ok_or_else(|| {
        CommerceError::refused(format!(
            "cannot refund a {} payment: nothing was captured",
            payment.status.as_str()
        ))
    })
}

/// Whether `capture` of `payment` may be refunded at all, before any
/// write.
pub fn check(payment: &PaymentRecord, capture: &CaptureRecord) -> Result<(), CommerceError> {
    if payment.status != PaymentStatus::Succeeded {
        return Err(CommerceError::refused(format!(
            "cannot refund a {} payment",
            payment.status.as_str()
        )));
    }
    if capture.payment_intent_ref != payment.payment_intent_ref {
        return Err(CommerceError::refused(
            "the capture belongs to another payment",
        ));
    }
    Ok(())
}

/// Creates the refund of `capture` in `tx` at `now`, with its timed work
/// and `refund.created`.
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    payment: &PaymentRecord,
    capture: &CaptureRecord,
    ask: RefundAsk,
    now: Timestamp,
) -> Result<RefundRecord, CommerceError> {
    let held = refunds::lock_capture(tx, &capture.capture_ref).await?;
    if outside::open_disputes_of(tx, &payment.payment_intent_ref).await? > 0 {
        return Err(CommerceError::refused(
            "cannot refund a payment with an open dispute",
        ));
    }
    let amount = refund_amount(held.captured, held.reserved, ask.requested).map_err(|e| {
        if e.is_semantic() {
            CommerceError::refused(e.to_string())
        } else {
            CommerceError::invalid("amount", e.to_string())
        }
    })?;
    match refunds::reserve(tx, &capture.capture_ref, amount).await {
        Err(StoreError::Conflict) => {
            return Err(CommerceError::refused(
                "the amount is more than the payment's refundable remainder",
            ))
        }
        other => other?,
    }
    let status = match ask.scheduled_at {
        Some(_) => RefundStatus::Scheduled,
        None => RefundStatus::Pending,
    };
    let new = NewRefund {
        payment_intent_ref: &payment.payment_intent_ref,
        capture_ref: &capture.capture_ref,
        status,
        scope: scope(amount, held.captured),
        amount,
        reason: ask.reason,
        access_effect: ask.access_effect,
        scheduled_at: ask.scheduled_at,
    };
    let refund = refunds::create(tx, environment_ref, new).await?;
    match ask.scheduled_at {
        Some(at) => jobs::schedule(tx, START, &refund.refund_ref, environment_ref, at).await?,
        None => {
            let due = now.plus_millis(SETTLE_AFTER_MS);
            jobs::schedule(tx, SETTLE, &refund.refund_ref, environment_ref, due).await?
        }
    }
    let key = checkout_key(tx, &payment.checkout_session_ref).await?;
    let mut events = Batch::new(environment_ref, payment_scope(payment), now).keyed(&key);
    events.add("refund.created", &refund.dto(now))?;
    events.flush(tx).await?;
    Ok(refund)
}
