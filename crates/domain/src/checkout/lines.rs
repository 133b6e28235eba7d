//! Invoice lines (contract 14.1): what an invoice charges, line by line.
//!
//! Every invoice has lines `{kind, amount, price_ref, period_start,
//! period_end, description}`, and its `amount_total` is their sum. Amounts
//! are exact signed integers in minor units of the invoice's currency:
//! `item`, `period` and `proration_debit` lines are never negative,
//! `proration_credit` and `credit_applied` lines never positive, and an
//! invoice never totals below zero ([`InvoiceLines::new`] refuses one).
//!
//! | kind | what | `price_ref` | period |
//! |---|---|---|---|
//! | `item` | a one-time checkout line | its price | none |
//! | `period` | a subscription's period, the first one included | its price | the period |
//! | `proration_credit` | the unused rest of a period at the old price | the old price | change to period end |
//! | `proration_debit` | the rest (or a new period) at the new price | the new price | change to its end |
//! | `credit_applied` | the buyer's credit balance used | none | none |
//!
//! The strict constructors ([`InvoiceLine::item`] and the like) are what
//! callers make lines with. [`InvoiceLine::from_parts`] reads stored lines
//! back and is more lenient in one place: lines of invoices issued before
//! lines existed are derived from the invoice alone, so an `item` or
//! `period` line may lack its `price_ref` and period bounds.
//!
//! Applying a credit balance ([`apply_credit`], [`InvoiceLines::with_credit`])
//! takes as much of the balance as the invoice can take: the invoice never
//! totals below zero, the balance never goes below zero, and what is applied
//! plus what remains is the balance before.

use crate::money::{Currency, Money, MoneyError, MAX_VALUE};
use crate::principal::wire_enum;
use crate::reference::Ref;
use crate::time::Timestamp;

wire_enum!(
    /// What an invoice line charges or credits.
    LineKind {
        Item => "item",
        Period => "period",
        ProrationCredit => "proration_credit",
        ProrationDebit => "proration_debit",
        CreditApplied => "credit_applied",
    }
);

impl LineKind {
    /// Whether the line takes money off the invoice (its amount is ≤ 0).
    pub fn is_credit(self) -> bool {
        matches!(self, LineKind::ProrationCredit | LineKind::CreditApplied)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("a {kind} line cannot be {amount}")]
    WrongSign { kind: &'static str, amount: i128 },
    #[error("a line amount is out of range")]
    OutOfRange,
    #[error("a {0} line names its price")]
    MissingPrice(&'static str),
    #[error("a {0} line names no price")]
    UnexpectedPrice(&'static str),
    #[error("a {0} line has its period bounds")]
    MissingPeriod(&'static str),
    #[error("a {0} line has no period bounds")]
    UnexpectedPeriod(&'static str),
    #[error("a line's period ends before it starts")]
    PeriodBackwards,
    #[error("an invoice has at least one line")]
    NoLines,
    #[error("an invoice's lines are all in its currency")]
    CurrencyMismatch,
    #[error("an invoice never totals below zero ({0})")]
    BelowZero(i128),
}

impl From<MoneyError> for LineError {
    fn from(e: MoneyError) -> LineError {
        match e {
            MoneyError::CurrencyMismatch => LineError::CurrencyMismatch,
            _ => LineError::OutOfRange,
        }
    }
}

/// The period a line bills: `start` ≤ `end` (a proration at the very end
/// of a period bills an empty one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinePeriod {
    start: Timestamp,
    end: Timestamp,
}

impl LinePeriod {
    pub fn new(start: Timestamp, end: Timestamp) -> Result<LinePeriod, LineError> {
        if end < start {
            return Err(LineError::PeriodBackwards);
        }
        Ok(LinePeriod { start, end })
    }

    pub fn start(self) -> Timestamp {
        self.start
    }

    pub fn end(self) -> Timestamp {
        self.end
    }
}

/// One line of an invoice: a signed amount in minor units of `currency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceLine {
    kind: LineKind,
    currency: Currency,
    amount: i64,
    price_ref: Option<Ref>,
    period: Option<LinePeriod>,
    description: String,
}

impl InvoiceLine {
    /// A one-time checkout line of `price_ref`.
    pub fn item(price_ref: Ref, amount: Money, description: String) -> InvoiceLine {
        InvoiceLine::debit(LineKind::Item, Some(price_ref), amount, None, description)
    }

    /// A subscription's `period` at `price_ref`.
    pub fn for_period(
        price_ref: Ref,
        amount: Money,
        period: LinePeriod,
        description: String,
    ) -> InvoiceLine {
        InvoiceLine::debit(
            LineKind::Period,
            Some(price_ref),
            amount,
            Some(period),
            description,
        )
    }

    /// The unused rest of a period at the old price: `−credit`.
    pub fn proration_credit(
        price_ref: Ref,
        credit: Money,
        period: LinePeriod,
        description: String,
    ) -> InvoiceLine {
        InvoiceLine::credit(
            LineKind::ProrationCredit,
            Some(price_ref),
            credit,
            Some(period),
            description,
        )
    }

    /// The rest of a period (or a new one) at the new price: `debit`.
    pub fn proration_debit(
        price_ref: Ref,
        debit: Money,
        period: LinePeriod,
        description: String,
    ) -> InvoiceLine {
        InvoiceLine::debit(
            LineKind::ProrationDebit,
            Some(price_ref),
            debit,
            Some(period),
            description,
        )
    }

    /// The buyer's credit balance used by an invoice: `−applied`.
    pub fn credit_applied(applied: Money) -> InvoiceLine {
        InvoiceLine::credit(
            LineKind::CreditApplied,
            None,
            applied,
            None,
            "Credit balance applied".to_owned(),
        )
    }

    fn debit(
        kind: LineKind,
        price_ref: Option<Ref>,
        amount: Money,
        period: Option<LinePeriod>,
        description: String,
    ) -> InvoiceLine {
        InvoiceLine {
            kind,
            currency: amount.currency(),
            // Money is at most 18 digits: it always fits.
            amount: i64::try_from(amount.minor()).unwrap_or(i64::MAX),
            price_ref,
            period,
            description,
        }
    }

    fn credit(
        kind: LineKind,
        price_ref: Option<Ref>,
        amount: Money,
        period: Option<LinePeriod>,
        description: String,
    ) -> InvoiceLine {
        let mut line = InvoiceLine::debit(kind, price_ref, amount, period, description);
        line.amount = -line.amount;
        line
    }

    /// A line read back from storage, checked: its amount's sign and range
    /// for its kind, and which of `price_ref` and `period` it may or must
    /// have (an `item` or `period` line derived from an invoice issued
    /// before lines existed may lack them; see the module's doc).
    pub fn from_parts(
        kind: LineKind,
        currency: Currency,
        amount: i64,
        price_ref: Option<Ref>,
        period: Option<LinePeriod>,
        description: String,
    ) -> Result<InvoiceLine, LineError> {
        let name = kind.as_str();
        if amount.unsigned_abs() > MAX_VALUE {
            return Err(LineError::OutOfRange);
        }
        let wrong_sign = if kind.is_credit() {
            amount > 0
        } else {
            amount < 0
        };
        if wrong_sign {
            return Err(LineError::WrongSign {
                kind: name,
                amount: i128::from(amount),
            });
        }
        match kind {
            LineKind::Item if period.is_some() => return Err(LineError::UnexpectedPeriod(name)),
            LineKind::CreditApplied if price_ref.is_some() => {
                return Err(LineError::UnexpectedPrice(name))
            }
            LineKind::CreditApplied if period.is_some() => {
                return Err(LineError::UnexpectedPeriod(name))
            }
            LineKind::ProrationCredit | LineKind::ProrationDebit if price_ref.is_none() => {
                return Err(LineError::MissingPrice(name))
            }
            LineKind::ProrationCredit | LineKind::ProrationDebit if period.is_none() => {
                return Err(LineError::MissingPeriod(name))
            }
            _ => {}
        }
        Ok(InvoiceLine {
            kind,
            currency,
            amount,
            price_ref,
            period,
            description,
        })
    }

    pub fn kind(&self) -> LineKind {
        self.kind
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    /// Signed minor units: negative for a credit.
    pub fn amount(&self) -> i64 {
        self.amount
    }

    /// The amount as the wire writes it: a `-` before a credit's digits.
    pub fn amount_value(&self) -> String {
        self.amount.to_string()
    }

    pub fn price_ref(&self) -> Option<&Ref> {
        self.price_ref.as_ref()
    }

    pub fn period(&self) -> Option<LinePeriod> {
        self.period
    }

    pub fn description(&self) -> &str {
        &self.description
    }
}

/// An invoice's lines: at least one, all in its currency, summing to its
/// total, which is never below zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceLines {
    currency: Currency,
    lines: Vec<InvoiceLine>,
    total: Money,
}

impl InvoiceLines {
    pub fn new(currency: Currency, lines: Vec<InvoiceLine>) -> Result<InvoiceLines, LineError> {
        if lines.is_empty() {
            return Err(LineError::NoLines);
        }
        if lines.iter().any(|l| l.currency != currency) {
            return Err(LineError::CurrencyMismatch);
        }
        let sum: i128 = lines.iter().map(|l| i128::from(l.amount)).sum();
        if sum < 0 {
            return Err(LineError::BelowZero(sum));
        }
        let minor = u64::try_from(sum).map_err(|_| LineError::OutOfRange)?;
        let total = Money::new(currency, minor)?;
        Ok(InvoiceLines {
            currency,
            lines,
            total,
        })
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }

    pub fn lines(&self) -> &[InvoiceLine] {
        &self.lines
    }

    /// The sum of the lines: the invoice's `amount_total`.
    pub fn total(&self) -> Money {
        self.total
    }

    /// What the buyer's credit balance paid of this invoice: the sum of
    /// its `credit_applied` lines, as a positive amount. An invoice that
    /// ends `uncollectible` gives it back to the balance.
    pub fn credit_used(&self) -> Result<Money, LineError> {
        let used: i128 = self
            .lines
            .iter()
            .filter(|l| l.kind == LineKind::CreditApplied)
            .map(|l| -i128::from(l.amount))
            .sum();
        let minor = u64::try_from(used.max(0)).map_err(|_| LineError::OutOfRange)?;
        Ok(Money::new(self.currency, minor)?)
    }

    /// These lines with the buyer's credit `balance` applied: a
    /// `credit_applied` line of as much as the total can take (none when
    /// nothing applies), and what it did to the total and the balance.
    pub fn with_credit(self, balance: Money) -> Result<(InvoiceLines, CreditApplied), LineError> {
        let applied = apply_credit(self.total, balance)?;
        if applied.applied.minor() == 0 {
            return Ok((self, applied));
        }
        let mut lines = self.lines;
        lines.push(InvoiceLine::credit_applied(applied.applied));
        let with = InvoiceLines::new(self.currency, lines)?;
        debug_assert_eq!(with.total, applied.total_after);
        Ok((with, applied))
    }
}

/// What applying a credit balance to an invoice did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditApplied {
    /// Taken from the balance: as much as the invoice could take.
    pub applied: Money,
    /// The invoice's total after it (what is still charged).
    pub total_after: Money,
    /// The balance after it.
    pub balance_after: Money,
}

/// Applies a credit `balance` to an invoice `total`: `min(total, balance)`
/// comes off both, so neither goes below zero and `applied +
/// balance_after = balance`.
pub fn apply_credit(total: Money, balance: Money) -> Result<CreditApplied, LineError> {
    if total.currency() != balance.currency() {
        return Err(LineError::CurrencyMismatch);
    }
    let applied = Money::new(total.currency(), total.minor().min(balance.minor()))?;
    Ok(CreditApplied {
        applied,
        total_after: total.checked_sub(applied)?,
        balance_after: balance.checked_sub(applied)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::Prefix;
    use proptest::prelude::*;

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    fn price() -> Ref {
        Ref::generate(Prefix::Price)
    }

    fn period() -> LinePeriod {
        LinePeriod::new(Timestamp::from_millis(0), Timestamp::from_millis(1000)).unwrap()
    }

    #[test]
    fn kinds_and_signs() {
        assert_eq!(
            LineKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            [
                "item",
                "period",
                "proration_credit",
                "proration_debit",
                "credit_applied"
            ]
        );
        let credit = InvoiceLine::proration_credit(price(), eur(666), period(), "c".into());
        assert_eq!(
            (credit.amount(), credit.amount_value()),
            (-666, "-666".into())
        );
        let debit = InvoiceLine::proration_debit(price(), eur(1000), period(), "d".into());
        assert_eq!(debit.amount(), 1000);
        let applied = InvoiceLine::credit_applied(eur(300));
        assert_eq!(applied.amount(), -300);
        assert!(applied.price_ref().is_none() && applied.period().is_none());
        let lines = InvoiceLines::new(eur(0).currency(), vec![credit, debit, applied]).unwrap();
        assert_eq!(lines.total(), eur(34));
    }

    #[test]
    fn an_invoice_never_totals_below_zero() {
        let lines = vec![
            InvoiceLine::proration_credit(price(), eur(1000), period(), "c".into()),
            InvoiceLine::proration_debit(price(), eur(999), period(), "d".into()),
        ];
        assert_eq!(
            InvoiceLines::new(eur(0).currency(), lines),
            Err(LineError::BelowZero(-1))
        );
        assert_eq!(
            InvoiceLines::new(eur(0).currency(), Vec::new()),
            Err(LineError::NoLines)
        );
        let usd = Money::new(Currency::parse("USD").unwrap(), 1).unwrap();
        let mixed = vec![InvoiceLine::item(price(), eur(1), "a".into())];
        assert_eq!(
            InvoiceLines::new(usd.currency(), mixed),
            Err(LineError::CurrencyMismatch)
        );
    }

    #[test]
    fn stored_lines_are_checked() {
        let eur = eur(0).currency();
        let parts = |kind, amount, p: Option<Ref>, per: Option<LinePeriod>| {
            InvoiceLine::from_parts(kind, eur, amount, p, per, String::new())
        };
        assert!(parts(LineKind::Item, 5, Some(price()), None).is_ok());
        // Derived from an invoice issued before lines: no price, no bounds.
        assert!(parts(LineKind::Period, 5, None, None).is_ok());
        assert!(matches!(
            parts(LineKind::Item, -5, Some(price()), None),
            Err(LineError::WrongSign { .. })
        ));
        assert!(matches!(
            parts(LineKind::ProrationCredit, 5, Some(price()), Some(period())),
            Err(LineError::WrongSign { .. })
        ));
        assert_eq!(
            parts(LineKind::Item, 5, Some(price()), Some(period())),
            Err(LineError::UnexpectedPeriod("item"))
        );
        assert_eq!(
            parts(LineKind::CreditApplied, -5, Some(price()), None),
            Err(LineError::UnexpectedPrice("credit_applied"))
        );
        assert_eq!(
            parts(LineKind::ProrationDebit, 5, None, Some(period())),
            Err(LineError::MissingPrice("proration_debit"))
        );
        assert_eq!(
            parts(LineKind::ProrationDebit, 5, Some(price()), None),
            Err(LineError::MissingPeriod("proration_debit"))
        );
        assert_eq!(
            parts(LineKind::Item, i64::MIN, Some(price()), None),
            Err(LineError::OutOfRange)
        );
        assert_eq!(
            LinePeriod::new(Timestamp::from_millis(2), Timestamp::from_millis(1)),
            Err(LineError::PeriodBackwards)
        );
    }

    #[test]
    fn credit_applies_as_far_as_the_invoice_goes() {
        let a = apply_credit(eur(1000), eur(300)).unwrap();
        assert_eq!(
            (a.applied, a.total_after, a.balance_after),
            (eur(300), eur(700), eur(0))
        );
        let a = apply_credit(eur(1000), eur(2500)).unwrap();
        assert_eq!(
            (a.applied, a.total_after, a.balance_after),
            (eur(1000), eur(0), eur(1500))
        );

        let lines = InvoiceLines::new(
            eur(0).currency(),
            vec![InvoiceLine::item(price(), eur(1999), "a".into())],
        )
        .unwrap();
        let (same, none) = lines.clone().with_credit(eur(0)).unwrap();
        assert_eq!(same, lines);
        assert_eq!(none.applied, eur(0));
        let (with, applied) = lines.with_credit(eur(500)).unwrap();
        assert_eq!(with.lines().len(), 2);
        assert_eq!(with.lines()[1].kind(), LineKind::CreditApplied);
        assert_eq!(with.lines()[1].amount(), -500);
        assert_eq!(with.total(), eur(1499));
        assert_eq!(applied.balance_after, eur(0));
    }

    fn amount() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..10_000, 0u64..=MAX_VALUE]
    }

    proptest! {
        /// Credit never makes a total or a balance negative (they are
        /// `Money`: an overdraft would be an error), and money is conserved.
        #[test]
        fn applying_credit_conserves_money(total in amount(), balance in amount()) {
            let a = apply_credit(eur(total), eur(balance)).unwrap();
            prop_assert_eq!(a.applied.minor() + a.balance_after.minor(), balance);
            prop_assert_eq!(a.applied.minor() + a.total_after.minor(), total);
            prop_assert!(a.applied.minor() <= total.min(balance));
            // As much as the invoice can take: one of them is used up.
            prop_assert!(a.total_after.minor() == 0 || a.balance_after.minor() == 0);
        }

        #[test]
        fn lines_with_credit_sum_to_their_total(
            items in proptest::collection::vec(0u64..1_000_000, 1..5),
            balance in 0u64..5_000_000,
        ) {
            let lines: Vec<InvoiceLine> = items
                .iter()
                .map(|&v| InvoiceLine::item(price(), eur(v), String::new()))
                .collect();
            let lines = InvoiceLines::new(eur(0).currency(), lines).unwrap();
            let before = lines.total();
            let (with, applied) = lines.with_credit(eur(balance)).unwrap();
            let sum: i128 = with.lines().iter().map(|l| i128::from(l.amount())).sum();
            prop_assert_eq!(sum, i128::from(with.total().minor()));
            prop_assert_eq!(with.total(), applied.total_after);
            prop_assert_eq!(
                applied.applied.minor() + applied.total_after.minor(),
                before.minor()
            );
            prop_assert_eq!(applied.applied.minor() + applied.balance_after.minor(), balance);
            // What an uncollectible invoice gives back is what it took.
            prop_assert_eq!(with.credit_used().unwrap(), applied.applied);
        }
    }
}
