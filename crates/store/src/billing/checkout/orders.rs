//! Orders (one per completed session) and their invoices, numbered per
//! environment and year without gaps: an invoice is written with a pending
//! number, which its unit of work replaces last, at its commit
//! (`invoice_numbers::number_at_commit`).

use super::invoice_numbers::pending;
use super::{at, opt_reference, reference, state, PricedItem};
use crate::billing::{minor, money};
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::states::{InvoiceStatus, OrderStatus};
use domain::{Money, Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct OrderRecord {
    pub order_ref: Ref,
    pub environment_ref: Ref,
    pub checkout_session_ref: Ref,
    pub buyer_ref: Ref,
    pub payment_intent_ref: Ref,
    pub line_items: Vec<PricedItem>,
    pub amount_total: Money,
    pub status: OrderStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for OrderRecord {
    const TABLE: &'static str = "orders";
    const REF_COLUMN: &'static str = "order_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("buyer_ref", "buyer_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(OrderRecord {
            order_ref: reference(row, "order_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            checkout_session_ref: reference(row, "checkout_session_ref")?,
            buyer_ref: reference(row, "buyer_ref")?,
            payment_intent_ref: reference(row, "payment_intent_ref")?,
            line_items: json_col(row, "line_items")?,
            amount_total: money(row, "currency", "amount_total")?,
            status: state(row, "status", OrderStatus::parse)?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

pub struct NewOrder<'a> {
    pub checkout_session_ref: &'a Ref,
    pub buyer_ref: &'a Ref,
    pub payment_intent_ref: &'a Ref,
    pub line_items: &'a [PricedItem],
    pub amount_total: Money,
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    new: NewOrder<'_>,
    now: Timestamp,
) -> Result<OrderRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO orders (order_ref, environment_ref, checkout_session_ref, buyer_ref, \
             payment_intent_ref, line_items, currency, amount_total, status, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) RETURNING *",
            &[
                Ref::generate(Prefix::Order).as_str().into(),
                environment_ref.as_str().into(),
                new.checkout_session_ref.as_str().into(),
                new.buyer_ref.as_str().into(),
                new.payment_intent_ref.as_str().into(),
                to_json(&new.line_items).as_str().into(),
                new.amount_total.currency().as_str().into(),
                minor(new.amount_total).into(),
                OrderStatus::Paid.as_str().into(),
                now.millis().into(),
            ],
        )
        .await?;
    OrderRecord::decode(single(&rows)?)
}

#[derive(Debug, Clone)]
pub struct InvoiceRecord {
    pub invoice_ref: Ref,
    pub environment_ref: Ref,
    /// `<year>-<6 digits>`; pending (`invoice_numbers`) in the unit of
    /// work that writes the invoice, until its commit.
    pub number: String,
    pub order_ref: Ref,
    pub buyer_ref: Ref,
    pub subscription_ref: Option<Ref>,
    pub amount_total: Money,
    pub status: InvoiceStatus,
    pub issued_at: Timestamp,
    pub paid_at: Option<Timestamp>,
    /// The payment that paid it; `None` while it is open or uncollectible.
    pub payment_intent_ref: Option<Ref>,
    /// How many times its charge was tried (dunning counts from it).
    pub attempt_count: u32,
    pub created_at: Timestamp,
    pub version: i64,
}

impl Resource for InvoiceRecord {
    const TABLE: &'static str = "invoices";
    const REF_COLUMN: &'static str = "invoice_ref";
    const FILTERS: &'static [(&'static str, &'static str)] =
        &[("status", "status"), ("buyer_ref", "buyer_ref")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(InvoiceRecord {
            invoice_ref: reference(row, "invoice_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            number: text(row, "number")?,
            order_ref: reference(row, "order_ref")?,
            buyer_ref: reference(row, "buyer_ref")?,
            subscription_ref: opt_reference(row, "subscription_ref")?,
            amount_total: money(row, "currency", "amount_total")?,
            status: state(row, "status", InvoiceStatus::parse)?,
            issued_at: at(row, "issued_at")?,
            paid_at: opt_ts(row, "paid_at")?,
            payment_intent_ref: opt_reference(row, "payment_intent_ref")?,
            attempt_count: u32::try_from(int(row, "attempt_count")?)
                .map_err(|_| StoreError::Corrupt("invoice attempt_count".into()))?,
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

pub struct NewInvoice<'a> {
    pub order: &'a OrderRecord,
    pub subscription_ref: Option<&'a Ref>,
    pub paid_at: Timestamp,
}

/// A paid invoice for an order, with its pending number: the caller gives
/// it its number with `invoice_numbers::number_at_commit`.
pub async fn invoice(tx: &mut WriteTx, new: NewInvoice<'_>) -> Result<InvoiceRecord, StoreError> {
    let order = new.order;
    let invoice_ref = Ref::generate(Prefix::Invoice);
    let number = pending(&invoice_ref);
    let rows = tx
        .fetch(
            "INSERT INTO invoices (invoice_ref, environment_ref, number, order_ref, buyer_ref, \
             subscription_ref, currency, amount_total, status, issued_at, paid_at, created_at, \
             payment_intent_ref) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $10, $11) RETURNING *",
            &[
                invoice_ref.as_str().into(),
                order.environment_ref.as_str().into(),
                number.as_str().into(),
                order.order_ref.as_str().into(),
                order.buyer_ref.as_str().into(),
                new.subscription_ref.map(Ref::as_str).into(),
                order.amount_total.currency().as_str().into(),
                minor(order.amount_total).into(),
                InvoiceStatus::Paid.as_str().into(),
                new.paid_at.millis().into(),
                order.payment_intent_ref.as_str().into(),
            ],
        )
        .await?;
    InvoiceRecord::decode(single(&rows)?)
}

/// The order a subscription's checkout session completed with.
pub async fn of_session(
    tx: &mut WriteTx,
    checkout_session_ref: &Ref,
) -> Result<OrderRecord, StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM orders WHERE checkout_session_ref = $1",
            &[checkout_session_ref.as_str().into()],
        )
        .await?;
    OrderRecord::decode(rows.first().ok_or(StoreError::NotFound)?)
}

/// A renewal's invoice: the subscription's period charged again, billed
/// under the order that started it.
pub struct RenewalInvoice<'a> {
    pub order: &'a OrderRecord,
    pub subscription_ref: &'a Ref,
    pub amount: Money,
    /// The payment that paid it, or `None`: the charge was declined and the
    /// invoice stays `open` for dunning.
    pub paid_by: Option<&'a Ref>,
    pub now: Timestamp,
}

/// Issues a renewal's invoice, `paid` when its payment succeeded, else
/// `open`, with its pending number: the caller gives it its number with
/// `invoice_numbers::number_at_commit`.
pub async fn renewal_invoice(
    tx: &mut WriteTx,
    new: RenewalInvoice<'_>,
) -> Result<InvoiceRecord, StoreError> {
    let order = new.order;
    let status = match new.paid_by {
        Some(_) => InvoiceStatus::Paid,
        None => InvoiceStatus::Open,
    };
    let invoice_ref = Ref::generate(Prefix::Invoice);
    let number = pending(&invoice_ref);
    let rows = tx
        .fetch(
            "INSERT INTO invoices (invoice_ref, environment_ref, number, order_ref, buyer_ref, \
             subscription_ref, currency, amount_total, status, issued_at, paid_at, created_at, \
             payment_intent_ref) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $10, $12) RETURNING *",
            &[
                invoice_ref.as_str().into(),
                order.environment_ref.as_str().into(),
                number.as_str().into(),
                order.order_ref.as_str().into(),
                order.buyer_ref.as_str().into(),
                new.subscription_ref.as_str().into(),
                new.amount.currency().as_str().into(),
                minor(new.amount).into(),
                status.as_str().into(),
                new.now.millis().into(),
                new.paid_by.map(|_| new.now.millis()).into(),
                new.paid_by.map(Ref::as_str).into(),
            ],
        )
        .await?;
    InvoiceRecord::decode(single(&rows)?)
}

/// The subscription's `open` invoice, if it has one.
pub async fn open_of_subscription(
    tx: &mut WriteTx,
    subscription_ref: &Ref,
) -> Result<Option<InvoiceRecord>, StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM invoices WHERE subscription_ref = $1 AND status = $2 \
             ORDER BY issued_at DESC LIMIT 1",
            &[
                subscription_ref.as_str().into(),
                InvoiceStatus::Open.as_str().into(),
            ],
        )
        .await?;
    rows.first().map(|r| InvoiceRecord::decode(r)).transpose()
}

/// What a retry of an open invoice's charge did to it.
pub enum Retried<'a> {
    /// Paid by this payment.
    Paid(&'a Ref),
    /// Declined again; it stays open.
    Declined,
    /// Declined for the last time: nothing will collect it.
    Uncollectible,
}

/// Records one more try of an open invoice still at its read version.
pub async fn retried(
    tx: &mut WriteTx,
    current: &InvoiceRecord,
    outcome: Retried<'_>,
    now: Timestamp,
) -> Result<InvoiceRecord, StoreError> {
    let (status, paid_at, payment) = match outcome {
        Retried::Paid(p) => (InvoiceStatus::Paid, Some(now.millis()), Some(p.as_str())),
        Retried::Declined => (InvoiceStatus::Open, None, None),
        Retried::Uncollectible => (InvoiceStatus::Uncollectible, None, None),
    };
    let rows = tx
        .fetch(
            "UPDATE invoices SET status = $1, paid_at = $2, payment_intent_ref = $3, \
             attempt_count = attempt_count + 1, version = version + 1 \
             WHERE invoice_ref = $4 AND version = $5 RETURNING *",
            &[
                status.as_str().into(),
                paid_at.into(),
                payment.into(),
                current.invoice_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    InvoiceRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

/// Marks an open invoice `uncollectible` without another try (its
/// subscription was canceled).
pub async fn uncollectible(
    tx: &mut WriteTx,
    current: &InvoiceRecord,
) -> Result<InvoiceRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE invoices SET status = $1, version = version + 1 \
             WHERE invoice_ref = $2 AND version = $3 RETURNING *",
            &[
                InvoiceStatus::Uncollectible.as_str().into(),
                current.invoice_ref.as_str().into(),
                current.version.into(),
            ],
        )
        .await?;
    InvoiceRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}
