//! Orders (one per completed session) and their invoices, numbered per
//! environment and year without gaps: an invoice is written with a pending
//! number, which its unit of work replaces last, at its commit
//! (`invoice_numbers::number_at_commit`).
//!
//! An invoice keeps its lines (contract 14.1) in its `lines` column, JSON
//! written in the statement that inserts it: `[{kind, amount, price_ref,
//! period_start, period_end, description}]`, amounts in signed minor units
//! of the invoice's `currency`, bounds in Unix milliseconds. Read back, they
//! are checked (`domain::checkout::lines`) and must sum to `amount_total`.
//! An invoice issued before lines existed got one line derived from it
//! (migration `0028_invoice_lines`); one whose `lines` is still null (written
//! by an older binary beside this one) reads the same way, without the
//! subscription's price.

use super::invoice_numbers::pending;
use super::{at, opt_reference, reference, state, PricedItem};
use crate::billing::{minor, money};
use crate::db::codec::opt_ts;
use crate::db::codec::{json_col, to_json};
use crate::db::tx::{int, single, text, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::lines::{InvoiceLine, InvoiceLines, LineKind, LinePeriod};
use domain::checkout::states::{InvoiceStatus, OrderStatus};
use domain::{Currency, Money, Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};

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
    let order = OrderRecord::decode(single(&rows)?)?;
    super::credit::adopt_currency(tx, &order.buyer_ref, order.amount_total.currency()).await?;
    Ok(order)
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
    /// The sum of `lines`.
    pub amount_total: Money,
    /// What it charges, line by line (contract 14.1).
    pub lines: InvoiceLines,
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
        let invoice_ref = reference(row, "invoice_ref")?;
        let subscription_ref = opt_reference(row, "subscription_ref")?;
        let amount_total = money(row, "currency", "amount_total")?;
        let lines = match row.text("lines")? {
            Some(stored) => lines_of(&stored, amount_total),
            None => derived_line(amount_total, subscription_ref.is_some()),
        }
        .map_err(|e| StoreError::Corrupt(format!("invoice {invoice_ref} lines: {e}")))?;
        Ok(InvoiceRecord {
            invoice_ref,
            environment_ref: reference(row, "environment_ref")?,
            number: text(row, "number")?,
            order_ref: reference(row, "order_ref")?,
            buyer_ref: reference(row, "buyer_ref")?,
            subscription_ref,
            amount_total,
            lines,
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

/// A line as the `lines` column keeps it.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredLine {
    kind: String,
    /// Signed minor units of the invoice's currency.
    amount: i64,
    price_ref: Option<String>,
    period_start: Option<i64>,
    period_end: Option<i64>,
    description: String,
}

/// `l` as the `lines` column keeps it.
pub(crate) fn stored_line(l: &InvoiceLine) -> StoredLine {
    StoredLine {
        kind: l.kind().as_str().to_owned(),
        amount: l.amount(),
        price_ref: l.price_ref().map(|r| r.as_str().to_owned()),
        period_start: l.period().map(|p| p.start().millis()),
        period_end: l.period().map(|p| p.end().millis()),
        description: l.description().to_owned(),
    }
}

fn stored_lines(lines: &InvoiceLines) -> String {
    let stored: Vec<StoredLine> = lines.lines().iter().map(stored_line).collect();
    to_json(&stored)
}

/// A stored line read back in `currency`, checked.
pub(crate) fn line_of_stored(l: StoredLine, currency: Currency) -> Result<InvoiceLine, String> {
    let kind = LineKind::parse(&l.kind).ok_or_else(|| format!("kind {}", l.kind))?;
    let period = match (l.period_start, l.period_end) {
        (Some(s), Some(e)) => Some(
            LinePeriod::new(Timestamp::from_millis(s), Timestamp::from_millis(e))
                .map_err(|e| e.to_string())?,
        ),
        (None, None) => None,
        _ => return Err("one period bound without the other".to_owned()),
    };
    let price_ref = l.price_ref.map(Ref::from_trusted);
    InvoiceLine::from_parts(kind, currency, l.amount, price_ref, period, l.description)
        .map_err(|e| e.to_string())
}

/// The stored lines of an invoice of `total`, checked: they are in its
/// currency and sum to it.
fn lines_of(stored: &str, total: Money) -> Result<InvoiceLines, String> {
    let stored: Vec<StoredLine> = serde_json::from_str(stored).map_err(|e| e.to_string())?;
    let currency = total.currency();
    let lines = stored
        .into_iter()
        .map(|l| line_of_stored(l, currency))
        .collect::<Result<Vec<_>, _>>()?;
    let lines = InvoiceLines::new(currency, lines).map_err(|e| e.to_string())?;
    if lines.total() != total {
        return Err(format!("they sum to {}, not {total}", lines.total()));
    }
    Ok(lines)
}

/// The one line of an invoice written without lines (see the module's
/// doc): of its whole total, `period` when it bills a subscription, else
/// `item`.
fn derived_line(total: Money, of_subscription: bool) -> Result<InvoiceLines, String> {
    let (kind, description) = if of_subscription {
        (LineKind::Period, "Subscription period")
    } else {
        (LineKind::Item, "Checkout items")
    };
    let line = InvoiceLine::from_parts(
        kind,
        total.currency(),
        minor(total),
        None,
        None,
        description.to_owned(),
    )
    .map_err(|e| e.to_string())?;
    InvoiceLines::new(total.currency(), vec![line]).map_err(|e| e.to_string())
}

pub struct NewInvoice<'a> {
    pub order: &'a OrderRecord,
    pub subscription_ref: Option<&'a Ref>,
    /// What it charges; `amount_total` is their sum.
    pub lines: &'a InvoiceLines,
    pub paid_at: Timestamp,
}

/// A paid invoice for an order, with its lines and its pending number: the
/// caller gives it its number with `invoice_numbers::number_at_commit`.
pub async fn invoice(tx: &mut WriteTx, new: NewInvoice<'_>) -> Result<InvoiceRecord, StoreError> {
    let order = new.order;
    let invoice_ref = Ref::generate(Prefix::Invoice);
    let number = pending(&invoice_ref);
    let total = new.lines.total();
    let lines = stored_lines(new.lines);
    let rows = tx
        .fetch(
            "INSERT INTO invoices (invoice_ref, environment_ref, number, order_ref, buyer_ref, \
             subscription_ref, currency, amount_total, lines, status, issued_at, paid_at, \
             created_at, payment_intent_ref) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11, $12) RETURNING *",
            &[
                invoice_ref.as_str().into(),
                order.environment_ref.as_str().into(),
                number.as_str().into(),
                order.order_ref.as_str().into(),
                order.buyer_ref.as_str().into(),
                new.subscription_ref.map(Ref::as_str).into(),
                total.currency().as_str().into(),
                minor(total).into(),
                lines.as_str().into(),
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
    /// What it charges (its period); `amount_total` is their sum.
    pub lines: &'a InvoiceLines,
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
    // An invoice the buyer's credit balance covers is paid without a
    // payment (contract 14.2).
    let covered = new.lines.total().minor() == 0;
    let status = match new.paid_by {
        Some(_) => InvoiceStatus::Paid,
        None if covered => InvoiceStatus::Paid,
        None => InvoiceStatus::Open,
    };
    let invoice_ref = Ref::generate(Prefix::Invoice);
    let number = pending(&invoice_ref);
    let total = new.lines.total();
    let lines = stored_lines(new.lines);
    let rows = tx
        .fetch(
            "INSERT INTO invoices (invoice_ref, environment_ref, number, order_ref, buyer_ref, \
             subscription_ref, currency, amount_total, lines, status, issued_at, paid_at, \
             created_at, payment_intent_ref) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $11, $13) RETURNING *",
            &[
                invoice_ref.as_str().into(),
                order.environment_ref.as_str().into(),
                number.as_str().into(),
                order.order_ref.as_str().into(),
                order.buyer_ref.as_str().into(),
                new.subscription_ref.as_str().into(),
                total.currency().as_str().into(),
                minor(total).into(),
                lines.as_str().into(),
                status.as_str().into(),
                new.now.millis().into(),
                (new.paid_by.is_some() || covered)
                    .then_some(new.now.millis())
                    .into(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Currency;

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    #[test]
    fn lines_round_trip_through_their_column() {
        let period =
            LinePeriod::new(Timestamp::from_millis(1_000), Timestamp::from_millis(2_000)).unwrap();
        let price = Ref::generate(Prefix::Price);
        let lines = InvoiceLines::new(
            eur(0).currency(),
            vec![
                InvoiceLine::proration_credit(price.clone(), eur(666), period, "c".into()),
                InvoiceLine::proration_debit(price.clone(), eur(1000), period, "d".into()),
                InvoiceLine::credit_applied(eur(34)),
                InvoiceLine::item(price, eur(5), "i".into()),
            ],
        )
        .unwrap();
        let stored = stored_lines(&lines);
        assert_eq!(lines_of(&stored, eur(305)), Ok(lines));
        // They must sum to the invoice's total, in its currency.
        assert!(lines_of(&stored, eur(306)).is_err());
        let usd = Money::new(Currency::parse("USD").unwrap(), 305).unwrap();
        assert!(lines_of(&stored, usd).is_ok_and(|l| l.currency() == usd.currency()));
    }

    #[test]
    fn the_backfilled_shape_reads() {
        // As migration 0028 writes it.
        let backfilled = r#"[{"kind":"period","amount":999,"price_ref":"pri_AAAAAAAAAAAA","period_start":null,"period_end":null,"description":"Subscription period"}]"#;
        let lines = lines_of(backfilled, eur(999)).unwrap();
        assert_eq!(lines.lines()[0].kind(), LineKind::Period);
        assert!(lines.lines()[0].period().is_none());
        for bad in [
            r#"[]"#,
            r#"[{"kind":"bonus","amount":1,"price_ref":null,"period_start":null,"period_end":null,"description":""}]"#,
            r#"[{"kind":"item","amount":-1,"price_ref":null,"period_start":null,"period_end":null,"description":""}]"#,
            r#"[{"kind":"period","amount":1,"price_ref":null,"period_start":5,"period_end":null,"description":""}]"#,
            "not json",
        ] {
            assert!(lines_of(bad, eur(1)).is_err(), "{bad}");
        }
        let derived = derived_line(eur(1999), false).unwrap();
        assert_eq!(derived.lines()[0].kind(), LineKind::Item);
        assert_eq!(derived.total(), eur(1999));
        let derived = derived_line(eur(0), true).unwrap();
        assert_eq!(derived.lines()[0].kind(), LineKind::Period);
    }
}
