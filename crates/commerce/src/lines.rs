//! The lines of the invoices pay and renewals make (contract 14.1): a
//! one-time line item is an `item` line, a recurring one a `period` line
//! with its period's bounds; each names its price. The lines and their
//! rules are `domain::checkout::lines`'s; this module only says which lines
//! a checkout's and a renewal's invoice have, from what they already read.

use crate::CommerceError;
use domain::checkout::lines::{InvoiceLine, InvoiceLines, LinePeriod};
use domain::checkout::period::period_end;
use domain::{Currency, Money, Ref, Timestamp};
use store::billing::checkout::PricedItem;

fn broken(e: impl std::fmt::Display) -> CommerceError {
    CommerceError::broken(format!("invoice lines: {e}"))
}

/// `2 × prd_…`, and for a period, its interval: `1 × prd_… (monthly)`.
fn describe(item: &PricedItem) -> String {
    let what = format!("{} × {}", item.quantity, item.product_ref);
    match &item.interval {
        Some(interval) => format!("{what} ({interval}ly)"),
        None => what,
    }
}

/// The line of `item` in `currency`: its `period` (`start` to `end`) when
/// it recurs, else an `item` line.
pub fn line_of(
    item: &PricedItem,
    currency: Currency,
    period: Option<(Timestamp, Timestamp)>,
) -> Result<InvoiceLine, CommerceError> {
    let amount = Money::new(currency, item.amount).map_err(broken)?;
    let price_ref = Ref::from_trusted(item.price_ref.clone());
    Ok(match period {
        Some((start, end)) => {
            let period = LinePeriod::new(start, end).map_err(broken)?;
            InvoiceLine::for_period(price_ref, amount, period, describe(item))
        }
        None => InvoiceLine::item(price_ref, amount, describe(item)),
    })
}

/// The lines of a checkout's invoice, paid at `now`: one per line item, a
/// recurring one billing its subscription's first period (from `now`, as
/// pay starts it). They must sum to what the session charged.
pub fn of_checkout(
    items: &[PricedItem],
    charged: Money,
    now: Timestamp,
) -> Result<InvoiceLines, CommerceError> {
    let currency = charged.currency();
    let lines = items
        .iter()
        .map(|item| {
            let period = item
                .recurrence()?
                .interval()
                .map(|interval| (now, period_end(now, interval)));
            line_of(item, currency, period)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let lines = InvoiceLines::new(currency, lines).map_err(broken)?;
    if lines.total() != charged {
        return Err(broken(format!(
            "they sum to {}, the session charged {charged}",
            lines.total()
        )));
    }
    Ok(lines)
}

/// The lines of a renewal's invoice: `item`'s next period, `start` to
/// `end`, at the amount its session priced, in `currency`.
pub fn of_renewal(
    item: &PricedItem,
    currency: Currency,
    period: (Timestamp, Timestamp),
) -> Result<InvoiceLines, CommerceError> {
    let line = line_of(item, currency, Some(period))?;
    InvoiceLines::new(currency, vec![line]).map_err(broken)
}
