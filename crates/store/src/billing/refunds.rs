//! Refunds and what they change: the capture's reservation (the remainder
//! check and the reservation are one conditional update), the capture's
//! and the payment's `amount_refunded`, the order's status, entitlements.

use super::checkout::entitlements::EntitlementRecord;
use super::checkout::payments::PaymentRecord;
use super::checkout::{at, reference, state};
use super::{minor, money, money_in};
use crate::db::codec::opt_ts;
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::states::{EntitlementStatus, OrderStatus};
use domain::refunds::states::{AccessEffect, RefundReason, RefundScope, RefundStatus};
use domain::{Money, Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct RefundRecord {
    pub refund_ref: Ref,
    pub environment_ref: Ref,
    pub payment_intent_ref: Ref,
    pub capture_ref: Ref,
    pub status: RefundStatus,
    pub scope: RefundScope,
    pub amount: Money,
    pub reason: RefundReason,
    pub access_effect: AccessEffect,
    pub requested_at: Timestamp,
    pub scheduled_at: Option<Timestamp>,
    pub executed_at: Option<Timestamp>,
    pub canceled_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for RefundRecord {
    const TABLE: &'static str = "refunds";
    const REF_COLUMN: &'static str = "refund_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[
        ("status", "status"),
        ("payment_intent_ref", "payment_intent_ref"),
    ];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(RefundRecord {
            refund_ref: reference(row, "refund_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            payment_intent_ref: reference(row, "payment_intent_ref")?,
            capture_ref: reference(row, "capture_ref")?,
            status: state(row, "status", RefundStatus::parse)?,
            scope: state(row, "scope", RefundScope::parse)?,
            amount: money(row, "currency", "amount_minor")?,
            reason: state(row, "reason", RefundReason::parse)?,
            access_effect: state(row, "access_effect", AccessEffect::parse)?,
            requested_at: at(row, "requested_at")?,
            scheduled_at: opt_ts(row, "scheduled_at")?,
            executed_at: opt_ts(row, "executed_at")?,
            canceled_at: opt_ts(row, "canceled_at")?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

/// A capture's amounts under its row lock.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    pub captured: Money,
    /// What scheduled, pending and succeeded refunds hold.
    pub reserved: Money,
}

/// Locks the capture for the rest of the unit of work and reads what its
/// refunds hold.
pub async fn lock_capture(tx: &mut WriteTx, capture_ref: &Ref) -> Result<Held, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE captures SET version = version WHERE capture_ref = $1 RETURNING *",
            &[capture_ref.as_str().into()],
        )
        .await?;
    let row = single(&rows)?;
    let captured = money(row, "currency", "amount_minor")?;
    Ok(Held {
        captured,
        reserved: money_in(row, captured.currency(), "amount_reserved_minor")?,
    })
}

/// Reserves `amount` of the capture if it does not take the reservations
/// above the captured amount: the remainder check and the reservation in
/// one statement. `Conflict` when it would.
pub async fn reserve(tx: &mut WriteTx, capture_ref: &Ref, amount: Money) -> Result<(), StoreError> {
    let changed = tx
        .execute(
            "UPDATE captures SET amount_reserved_minor = amount_reserved_minor + $1, \
             version = version + 1 \
             WHERE capture_ref = $2 AND amount_reserved_minor + $1 <= amount_minor",
            &[minor(amount).into(), capture_ref.as_str().into()],
        )
        .await?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict)
    }
}

/// Gives a failed or canceled refund's amount back to the remainder.
pub async fn release(tx: &mut WriteTx, refund: &RefundRecord) -> Result<(), StoreError> {
    tx.execute(
        "UPDATE captures SET amount_reserved_minor = amount_reserved_minor - $1, \
         version = version + 1 WHERE capture_ref = $2",
        &[
            minor(refund.amount).into(),
            refund.capture_ref.as_str().into(),
        ],
    )
    .await?;
    Ok(())
}

pub struct NewRefund<'a> {
    pub payment_intent_ref: &'a Ref,
    pub capture_ref: &'a Ref,
    pub status: RefundStatus,
    pub scope: RefundScope,
    pub amount: Money,
    pub reason: RefundReason,
    pub access_effect: AccessEffect,
    pub scheduled_at: Option<Timestamp>,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewRefund<'_>,
) -> Result<RefundRecord, StoreError> {
    let now = Timestamp::now().millis();
    let rows = tx
        .fetch(
            "INSERT INTO refunds (refund_ref, environment_ref, payment_intent_ref, capture_ref, \
             status, scope, currency, amount_minor, reason, access_effect, requested_at, \
             scheduled_at, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $11, $11) RETURNING *",
            &[
                Ref::generate(Prefix::Refund).as_str().into(),
                environment_ref.as_str().into(),
                new.payment_intent_ref.as_str().into(),
                new.capture_ref.as_str().into(),
                new.status.as_str().into(),
                new.scope.as_str().into(),
                new.amount.currency().as_str().into(),
                minor(new.amount).into(),
                new.reason.as_str().into(),
                new.access_effect.as_str().into(),
                now.into(),
                new.scheduled_at.map(Timestamp::millis).into(),
            ],
        )
        .await?;
    RefundRecord::decode(single(&rows)?)
}

/// The refund, locked for the rest of the unit of work.
pub async fn lock(tx: &mut WriteTx, refund_ref: &Ref) -> Result<RefundRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE refunds SET version = version WHERE refund_ref = $1 RETURNING *",
            &[refund_ref.as_str().into()],
        )
        .await?;
    RefundRecord::decode(rows.first().ok_or(StoreError::NotFound)?)
}

/// Moves a locked refund to `status` at `now`, stamping the moment it
/// executed or was canceled.
pub async fn set_status(
    tx: &mut WriteTx,
    current: &RefundRecord,
    status: RefundStatus,
    now: Timestamp,
) -> Result<RefundRecord, StoreError> {
    let now = now.millis();
    let executed = matches!(status, RefundStatus::Succeeded | RefundStatus::Failed).then_some(now);
    let canceled = (status == RefundStatus::Canceled).then_some(now);
    let rows = tx
        .fetch(
            "UPDATE refunds SET status = $1, executed_at = COALESCE($2, executed_at), \
             canceled_at = COALESCE($3, canceled_at), updated_at = $4, version = version + 1 \
             WHERE refund_ref = $5 AND version = $6 RETURNING *",
            &[
                status.as_str().into(),
                executed.into(),
                canceled.into(),
                now.into(),
                current.refund_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    RefundRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

/// Records a succeeded refund on its capture and payment, and sets the
/// order's status from the payment's refunded total; returns the order the
/// payment bought access through (for a renewal's payment, the order that
/// started its subscription). `now` stamps the rows it changes.
pub async fn apply_success(
    tx: &mut WriteTx,
    refund: &RefundRecord,
    order_status: impl Fn(Money, Money) -> OrderStatus,
    now: Timestamp,
) -> Result<Option<Ref>, StoreError> {
    let amount = minor(refund.amount);
    let now = now.millis();
    tx.execute(
        "UPDATE captures SET amount_refunded_minor = amount_refunded_minor + $1, \
         version = version + 1 WHERE capture_ref = $2",
        &[amount.into(), refund.capture_ref.as_str().into()],
    )
    .await?;
    let rows = tx
        .fetch(
            "UPDATE payments SET amount_refunded_minor = amount_refunded_minor + $1, \
             updated_at = $2, version = version + 1 WHERE payment_intent_ref = $3 RETURNING *",
            &[
                amount.into(),
                now.into(),
                refund.payment_intent_ref.as_str().into(),
            ],
        )
        .await?;
    let payment = PaymentRecord::decode(single(&rows)?)?;
    let status = order_status(payment.amount, payment.amount_refunded);
    let orders = tx
        .fetch(
            "UPDATE orders SET status = $1, updated_at = $2, version = version + 1 \
             WHERE payment_intent_ref = $3 RETURNING order_ref",
            &[
                status.as_str().into(),
                now.into(),
                refund.payment_intent_ref.as_str().into(),
            ],
        )
        .await?;
    if let Some(row) = orders.first() {
        return text(row, "order_ref").map(|r| Some(Ref::from_trusted(r)));
    }
    // A renewal's payment is no order's own: it is billed under the order
    // that started its subscription (its session's), whose status stays
    // that of its first payment, and whose entitlements are what the
    // renewal paid for.
    let started = tx
        .fetch(
            "SELECT order_ref FROM orders WHERE checkout_session_ref = $1",
            &[payment.checkout_session_ref.as_str().into()],
        )
        .await?;
    started
        .first()
        .map(|r| text(r, "order_ref").map(Ref::from_trusted))
        .transpose()
}

/// Revokes the order's active entitlements at `now`; returns them as
/// revoked.
pub async fn revoke_entitlements(
    tx: &mut WriteTx,
    order_ref: &Ref,
    now: Timestamp,
) -> Result<Vec<EntitlementRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE entitlements SET status = $1, revoked_at = $2, version = version + 1 \
             WHERE order_ref = $3 AND status = $4 RETURNING *",
            &[
                EntitlementStatus::Revoked.as_str().into(),
                now.millis().into(),
                order_ref.as_str().into(),
                EntitlementStatus::Active.as_str().into(),
            ],
        )
        .await?;
    rows.iter().map(|r| EntitlementRecord::decode(r)).collect()
}

/// The payment's scheduled refunds, locked.
pub async fn scheduled_of_payment(
    tx: &mut WriteTx,
    payment_intent_ref: &Ref,
) -> Result<Vec<RefundRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE refunds SET version = version WHERE payment_intent_ref = $1 AND status = $2 \
             RETURNING *",
            &[
                payment_intent_ref.as_str().into(),
                RefundStatus::Scheduled.as_str().into(),
            ],
        )
        .await?;
    rows.iter().map(|r| RefundRecord::decode(r)).collect()
}
