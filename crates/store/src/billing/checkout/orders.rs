//! Orders (one per completed session) and their invoices, numbered per
//! environment and year without gaps (`invoice_counters`).

use super::{at, opt_reference, reference, state, PricedItem};
use crate::billing::{minor, money, Resource};
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::StoreError;
use domain::checkout::invoice::{year_of, InvoiceNumber};
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
                Timestamp::now().millis().into(),
            ],
        )
        .await?;
    OrderRecord::decode(single(&rows)?)
}

#[derive(Debug, Clone)]
pub struct InvoiceRecord {
    pub invoice_ref: Ref,
    pub environment_ref: Ref,
    pub number: String,
    pub order_ref: Ref,
    pub buyer_ref: Ref,
    pub subscription_ref: Option<Ref>,
    pub amount_total: Money,
    pub status: InvoiceStatus,
    pub issued_at: Timestamp,
    pub paid_at: Option<Timestamp>,
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
            created_at: at(row, "created_at")?,
            version: int(row, "version")?,
        })
    }
}

/// The environment's next invoice number for the year of `now`. The
/// counter row stays locked until the unit of work ends, so concurrent
/// payments take consecutive numbers, and a rolled-back one gives its
/// number back.
async fn next_number(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    now: Timestamp,
) -> Result<InvoiceNumber, StoreError> {
    let year = year_of(now);
    let rows = tx
        .fetch(
            "INSERT INTO invoice_counters (environment_ref, year, last_number) VALUES ($1, $2, 1) \
             ON CONFLICT (environment_ref, year) DO UPDATE \
             SET last_number = invoice_counters.last_number + 1 RETURNING last_number",
            &[environment_ref.as_str().into(), i64::from(year).into()],
        )
        .await?;
    let last = int(single(&rows)?, "last_number")?;
    u32::try_from(last)
        .ok()
        .and_then(|seq| InvoiceNumber::new(year, seq).ok())
        .ok_or_else(|| StoreError::Corrupt(format!("invoice number {year}-{last}")))
}

pub struct NewInvoice<'a> {
    pub order: &'a OrderRecord,
    pub subscription_ref: Option<&'a Ref>,
    pub paid_at: Timestamp,
}

/// A paid invoice for an order, with the next number.
pub async fn invoice(tx: &mut WriteTx, new: NewInvoice<'_>) -> Result<InvoiceRecord, StoreError> {
    let order = new.order;
    let number = next_number(tx, &order.environment_ref, new.paid_at).await?;
    let rows = tx
        .fetch(
            "INSERT INTO invoices (invoice_ref, environment_ref, number, order_ref, buyer_ref, \
             subscription_ref, currency, amount_total, status, issued_at, paid_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $10) RETURNING *",
            &[
                Ref::generate(Prefix::Invoice).as_str().into(),
                order.environment_ref.as_str().into(),
                number.to_string().as_str().into(),
                order.order_ref.as_str().into(),
                order.buyer_ref.as_str().into(),
                new.subscription_ref.map(Ref::as_str).into(),
                order.amount_total.currency().as_str().into(),
                minor(order.amount_total).into(),
                InvoiceStatus::Paid.as_str().into(),
                new.paid_at.millis().into(),
            ],
        )
        .await?;
    InvoiceRecord::decode(single(&rows)?)
}
