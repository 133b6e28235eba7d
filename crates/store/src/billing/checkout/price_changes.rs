//! A subscription's price change (contract 14.2): its new price (and
//! product, and period when the interval differs), the proration lines a
//! `next_invoice` change leaves for the next renewal
//! (`pending_invoice_lines`), and its `price_change` record. The rules are
//! `domain::checkout::proration`'s; the caller (`commerce::changes`) writes
//! what they decide in one unit of work.

use super::orders::{line_of_stored, stored_line, StoredLine};
use super::subscriptions::{ChangeRecord, SubscriptionRecord};
use crate::db::codec::to_json;
use crate::db::tx::{single, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::lines::InvoiceLine;
use domain::checkout::proration::ProrationMode;
use domain::checkout::states::ChangeKind;
use domain::{Currency, Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};

/// Pending lines as the `pending_invoice_lines` column keeps them.
#[derive(Debug, Serialize, Deserialize)]
struct Pending {
    currency: String,
    lines: Vec<StoredLine>,
}

fn encode(lines: &[InvoiceLine]) -> Option<String> {
    let first = lines.first()?;
    Some(to_json(&Pending {
        currency: first.currency().as_str().to_owned(),
        lines: lines.iter().map(stored_line).collect(),
    }))
}

/// The lines waiting in a subscription row for its next renewal's invoice.
pub(crate) fn pending_of(row: &dyn Columns) -> Result<Vec<InvoiceLine>, StoreError> {
    let Some(stored) = row.text("pending_invoice_lines")? else {
        return Ok(Vec::new());
    };
    let corrupt = |e: String| StoreError::Corrupt(format!("pending_invoice_lines: {e}"));
    let pending: Pending = serde_json::from_str(&stored).map_err(|e| corrupt(e.to_string()))?;
    let currency = Currency::parse(&pending.currency).map_err(|e| corrupt(e.to_string()))?;
    pending
        .lines
        .into_iter()
        .map(|l| line_of_stored(l, currency).map_err(corrupt))
        .collect()
}

/// Where a price change moves a subscription.
pub struct PriceMove<'a> {
    pub price_ref: &'a Ref,
    pub product_ref: &'a Ref,
    /// A new period (the new price has another interval), or `None`.
    pub period: Option<(Timestamp, Timestamp)>,
    /// Every line waiting for the next renewal after the change (those
    /// that waited before included).
    pub pending: &'a [InvoiceLine],
}

/// Moves a subscription still at its read version to its new price at
/// `now`; `Conflict` when another unit of work moved it meanwhile.
pub async fn change_price(
    tx: &mut WriteTx,
    current: &SubscriptionRecord,
    to: PriceMove<'_>,
    now: Timestamp,
) -> Result<SubscriptionRecord, StoreError> {
    let (start, end) = match to.period {
        Some((s, e)) => (Some(s), Some(e)),
        None => (current.current_period_start, current.current_period_end),
    };
    // A new period restarts the count of periods at its start.
    let anchor = to.period.map(|(s, _)| s).or(current.period_anchor);
    let rows = tx
        .fetch(
            "UPDATE subscriptions SET price_ref = $1, product_ref = $2, \
             current_period_start = $3, current_period_end = $4, pending_invoice_lines = $5, \
             updated_at = $6, period_anchor = $7, version = version + 1 \
             WHERE subscription_ref = $8 AND version = $9 RETURNING *",
            &[
                to.price_ref.as_str().into(),
                to.product_ref.as_str().into(),
                start.map(Timestamp::millis).into(),
                end.map(Timestamp::millis).into(),
                encode(to.pending).as_deref().into(),
                now.millis().into(),
                anchor.map(Timestamp::millis).into(),
                current.subscription_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    SubscriptionRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

/// Empties a subscription's pending lines, taken by the renewal whose
/// invoice they joined. The renewal's own write of the subscription, in
/// the same unit of work, bumps its version.
pub async fn clear_pending(tx: &mut WriteTx, subscription_ref: &Ref) -> Result<(), StoreError> {
    tx.fetch(
        "UPDATE subscriptions SET pending_invoice_lines = NULL WHERE subscription_ref = $1",
        &[subscription_ref.as_str().into()],
    )
    .await?;
    Ok(())
}

/// The `price_change` record of a change from `from_price_ref` to the
/// subscription's (new) price, effective at `effective_at`.
pub async fn record(
    tx: &mut WriteTx,
    changed: &SubscriptionRecord,
    from_price_ref: &Ref,
    proration: ProrationMode,
    effective_at: Timestamp,
) -> Result<ChangeRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO subscription_changes (subscription_change_ref, environment_ref, \
             subscription_ref, kind, from_price_ref, to_price_ref, proration, effective_at, \
             created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8) RETURNING *",
            &[
                Ref::generate(Prefix::SubscriptionChange).as_str().into(),
                changed.environment_ref.as_str().into(),
                changed.subscription_ref.as_str().into(),
                ChangeKind::PriceChange.as_str().into(),
                from_price_ref.as_str().into(),
                changed.price_ref.as_str().into(),
                proration.as_str().into(),
                effective_at.millis().into(),
            ],
        )
        .await?;
    ChangeRecord::decode(single(&rows)?)
}
