//! Proration of a subscription's price change (contract 14.2): exact
//! integer arithmetic in minor units, rounded half to even.
//!
//! With `P` the seconds of the current period and `r` the seconds left in
//! it at the change, `credit = round_half_even(old × r / P)` and, for a
//! price of the same interval, `debit = round_half_even(new × r / P)`. A
//! price of another interval starts a new period at the change, and `debit`
//! is the new price in full. Seconds are whole seconds of the instants
//! ([`Span::of`]: each instant's millisecond count floored to its second),
//! so a preview and the change made at the same (clock) time compute the
//! same numbers. Products are taken in `i128`: an 18-digit amount times the
//! seconds of any period fits with room to spare.
//!
//! What a change then does depends on its `proration` mode
//! ([`plan_change`], [`ChangeOutcome`]):
//! - `charge_now`: when `debit > credit`, an invoice of the lines
//!   `proration_credit` (−credit) and `proration_debit` (debit), with the
//!   buyer's credit balance applied (`credit_applied`), due at once; when
//!   `debit ≤ credit`, no invoice, and `credit − debit` goes to the buyer's
//!   credit balance;
//! - `next_invoice`: the two lines wait for the next renewal's invoice;
//! - `none`: no proration.
//!
//! Nothing here reads a clock or a balance: callers pass the instant of the
//! change and the buyer's balance they read in the same unit of work.

use super::lines::{CreditApplied, InvoiceLine, InvoiceLines, LineError, LinePeriod};
use crate::money::{Money, MAX_VALUE};
use crate::principal::wire_enum;
use crate::reference::Ref;
use crate::time::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProrationError {
    #[error("a period lasts at least one second, not {0}")]
    PeriodNotPositive(i64),
    #[error("the seconds left in a period cannot be negative ({0})")]
    RemainingNegative(i64),
    #[error("{remaining} seconds cannot be left of a period of {period}")]
    RemainingBeyondPeriod { remaining: i64, period: i64 },
    #[error("an amount to prorate cannot be negative ({0})")]
    NegativeAmount(i64),
    #[error("a change's prices and the buyer's balance are in one currency")]
    CurrencyMismatch,
    #[error("an amount is out of range")]
    OutOfRange,
    #[error(transparent)]
    Line(#[from] LineError),
}

/// `numerator / denominator` rounded to the nearest integer, a tie to the
/// even one; `None` when `denominator ≤ 0`. Exact for every `i128`
/// numerator: it floors, then compares twice the remainder with the
/// denominator.
pub fn round_half_even(numerator: i128, denominator: i128) -> Option<i128> {
    if denominator <= 0 {
        return None;
    }
    let floor = numerator.div_euclid(denominator);
    // 0 ≤ rest < denominator, so doubling it cannot overflow unless the
    // denominator is beyond i128::MAX / 2; compare without doubling.
    let rest = numerator.rem_euclid(denominator);
    let above_half = denominator - rest;
    Some(match rest.cmp(&above_half) {
        std::cmp::Ordering::Less => floor,
        std::cmp::Ordering::Greater => floor + 1,
        std::cmp::Ordering::Equal if floor % 2 == 0 => floor,
        std::cmp::Ordering::Equal => floor + 1,
    })
}

/// The current period's length `P` and the seconds `r` left of it at a
/// change: `P > 0`, `0 ≤ r ≤ P`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    period: i64,
    remaining: i64,
}

impl Span {
    pub fn new(period_seconds: i64, remaining_seconds: i64) -> Result<Span, ProrationError> {
        if period_seconds <= 0 {
            return Err(ProrationError::PeriodNotPositive(period_seconds));
        }
        if remaining_seconds < 0 {
            return Err(ProrationError::RemainingNegative(remaining_seconds));
        }
        if remaining_seconds > period_seconds {
            return Err(ProrationError::RemainingBeyondPeriod {
                remaining: remaining_seconds,
                period: period_seconds,
            });
        }
        Ok(Span {
            period: period_seconds,
            remaining: remaining_seconds,
        })
    }

    /// The span of the period `start..end` at the instant `at`, in whole
    /// seconds of each instant. A change before the period starts or after
    /// it ends is refused.
    pub fn of(start: Timestamp, end: Timestamp, at: Timestamp) -> Result<Span, ProrationError> {
        let second = |t: Timestamp| t.millis().div_euclid(1000);
        let period = second(end).checked_sub(second(start));
        let remaining = second(end).checked_sub(second(at));
        match (period, remaining) {
            (Some(p), Some(r)) => Span::new(p, r),
            _ => Err(ProrationError::OutOfRange),
        }
    }

    pub fn period_seconds(self) -> i64 {
        self.period
    }

    pub fn remaining_seconds(self) -> i64 {
        self.remaining
    }
}

/// `round_half_even(amount × r / P)` of a non-negative `amount` in minor
/// units; never more than `amount`.
pub fn prorate_minor(amount: i64, span: Span) -> Result<i64, ProrationError> {
    if amount < 0 {
        return Err(ProrationError::NegativeAmount(amount));
    }
    let exact = i128::from(amount) * i128::from(span.remaining);
    round_half_even(exact, i128::from(span.period))
        .and_then(|v| i64::try_from(v).ok())
        .ok_or(ProrationError::OutOfRange)
}

/// `amount` for the `r / P` of its period left: never more than `amount`.
pub fn prorate(amount: Money, span: Span) -> Money {
    let minor = i64::try_from(amount.minor()).unwrap_or(i64::MAX);
    // r ≤ P, so the result is at most `amount`: in range, not negative.
    let prorated = prorate_minor(minor, span).unwrap_or(minor);
    Money::new(amount.currency(), u64::try_from(prorated).unwrap_or(0)).unwrap_or(amount)
}

wire_enum!(
    /// How a price change is prorated (contract 14.2); `charge_now` when
    /// not given.
    ProrationMode {
        ChargeNow => "charge_now",
        NextInvoice => "next_invoice",
        None => "none",
    }
);

impl ProrationMode {
    /// The mode of a change that names none.
    pub const DEFAULT: ProrationMode = ProrationMode::ChargeNow;
}

/// A price and what it charges for one of its periods (its amount times
/// the subscription's quantity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricedPeriod {
    pub price_ref: Ref,
    pub amount: Money,
}

/// Where the new price's period goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewPeriod {
    /// The new price has the old one's interval: the current period goes on.
    SameInterval,
    /// The new price has another interval: a new period starts at the
    /// change and ends at `end` (the caller's calendar arithmetic).
    Restarts { end: Timestamp },
}

/// A subscription's price change at `at`, within its current `period`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriceChange {
    pub from: PricedPeriod,
    pub to: PricedPeriod,
    pub period: LinePeriod,
    pub at: Timestamp,
    pub new_period: NewPeriod,
}

/// A change's two proration lines: the old price's credit for the rest of
/// the period and the new price's debit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proration {
    credit: Money,
    debit: Money,
    credit_line: InvoiceLine,
    debit_line: InvoiceLine,
}

impl Proration {
    /// What the rest of the period at the old price is worth (≥ 0).
    pub fn credit(&self) -> Money {
        self.credit
    }

    /// What the new price charges for the rest (or a new period) (≥ 0).
    pub fn debit(&self) -> Money {
        self.debit
    }

    /// `proration_credit` (−credit), then `proration_debit` (debit).
    pub fn lines(&self) -> [InvoiceLine; 2] {
        [self.credit_line.clone(), self.debit_line.clone()]
    }

    /// `debit − credit`: what the change costs the buyer (negative when it
    /// gives back).
    pub fn net(&self) -> i128 {
        i128::from(self.debit.minor()) - i128::from(self.credit.minor())
    }
}

/// The proration of `change`: the old price's credit for the seconds left
/// and the new price's debit (prorated the same way, or in full when its
/// interval differs).
pub fn prorate_change(change: &PriceChange) -> Result<Proration, ProrationError> {
    let (old, new) = (change.from.amount, change.to.amount);
    if old.currency() != new.currency() {
        return Err(ProrationError::CurrencyMismatch);
    }
    let span = Span::of(change.period.start(), change.period.end(), change.at)?;
    let credit = prorate(old, span);
    let rest = LinePeriod::new(change.at, change.period.end())?;
    let (debit, debit_period) = match change.new_period {
        NewPeriod::SameInterval => (prorate(new, span), rest),
        NewPeriod::Restarts { end } => (new, LinePeriod::new(change.at, end)?),
    };
    let at = change.at.to_rfc3339();
    let credit_line = InvoiceLine::proration_credit(
        change.from.price_ref.clone(),
        credit,
        rest,
        format!(
            "Unused time on {} after {at}",
            change.from.price_ref.as_str()
        ),
    );
    let debit_line = InvoiceLine::proration_debit(
        change.to.price_ref.clone(),
        debit,
        debit_period,
        match change.new_period {
            NewPeriod::SameInterval => {
                format!(
                    "Remaining time on {} after {at}",
                    change.to.price_ref.as_str()
                )
            }
            NewPeriod::Restarts { .. } => {
                format!("{} from {at}", change.to.price_ref.as_str())
            }
        },
    );
    Ok(Proration {
        credit,
        debit,
        credit_line,
        debit_line,
    })
}

/// What a price change does to the buyer's money, by proration mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// `charge_now` with `debit > credit`: an invoice due at once, its
    /// lines with the buyer's credit applied; `credit.total_after` is what
    /// is charged (nothing when the balance covers it) and
    /// `credit.balance_after` the buyer's balance after it.
    Invoice {
        proration: Proration,
        lines: InvoiceLines,
        credit: CreditApplied,
    },
    /// `charge_now` with `debit ≤ credit`: no invoice; `added` (`credit −
    /// debit`) goes to the buyer's credit balance, which becomes
    /// `balance_after`.
    ToCreditBalance {
        proration: Proration,
        added: Money,
        balance_after: Money,
    },
    /// `next_invoice`: the two lines wait for the next renewal's invoice
    /// (the subscription's `pending_invoice_lines`); the balance is
    /// untouched until then.
    NextInvoice { proration: Proration },
    /// `none`: no proration; the next renewal charges the new price.
    NoProration,
}

impl ChangeOutcome {
    /// The lines the change makes or leaves pending, in order.
    pub fn lines(&self) -> Vec<InvoiceLine> {
        match self {
            ChangeOutcome::Invoice { lines, .. } => lines.lines().to_vec(),
            ChangeOutcome::ToCreditBalance { proration, .. }
            | ChangeOutcome::NextInvoice { proration } => proration.lines().to_vec(),
            ChangeOutcome::NoProration => Vec::new(),
        }
    }

    /// What is charged at once (zero unless an invoice is due and the
    /// balance does not cover it).
    pub fn charged_now(&self, currency: crate::money::Currency) -> Money {
        match self {
            ChangeOutcome::Invoice { credit, .. } => credit.total_after,
            _ => Money::zero(currency),
        }
    }
}

/// What `change` does under `mode` for a buyer whose credit balance is
/// `balance` (in the prices' currency). Every mode checks the change the
/// same way (the period, the instant, the currencies), so an impossible
/// change is refused whatever its mode.
pub fn plan_change(
    change: &PriceChange,
    mode: ProrationMode,
    balance: Money,
) -> Result<ChangeOutcome, ProrationError> {
    let proration = prorate_change(change)?;
    if balance.currency() != proration.credit.currency() {
        return Err(ProrationError::CurrencyMismatch);
    }
    Ok(match mode {
        ProrationMode::None => ChangeOutcome::NoProration,
        ProrationMode::NextInvoice => ChangeOutcome::NextInvoice { proration },
        ProrationMode::ChargeNow if proration.debit.minor() > proration.credit.minor() => {
            let currency = balance.currency();
            let lines = InvoiceLines::new(currency, proration.lines().to_vec())?;
            let (lines, credit) = lines.with_credit(balance)?;
            ChangeOutcome::Invoice {
                proration,
                lines,
                credit,
            }
        }
        ProrationMode::ChargeNow => {
            let added = proration
                .credit
                .checked_sub(proration.debit)
                .map_err(|_| ProrationError::OutOfRange)?;
            let balance_after = balance
                .checked_add(added)
                .map_err(|_| ProrationError::OutOfRange)?;
            debug_assert!(balance_after.minor() <= MAX_VALUE);
            ChangeOutcome::ToCreditBalance {
                proration,
                added,
                balance_after,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkout::lines::LineKind;
    use crate::money::Currency;
    use crate::reference::Prefix;
    use proptest::prelude::*;

    const DAY: i64 = 86_400;
    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    fn ms(seconds: i64) -> Timestamp {
        Timestamp::from_millis(T0 + seconds * 1000)
    }

    fn priced(amount: u64) -> PricedPeriod {
        PricedPeriod {
            price_ref: Ref::generate(Prefix::Price),
            amount: eur(amount),
        }
    }

    /// A change from `old` to `new` (same interval) of a period of `p`
    /// seconds with `r` left.
    fn change(old: &PricedPeriod, new: &PricedPeriod, p: i64, r: i64) -> PriceChange {
        PriceChange {
            from: old.clone(),
            to: new.clone(),
            period: LinePeriod::new(ms(0), ms(p)).unwrap(),
            at: ms(p - r),
            new_period: NewPeriod::SameInterval,
        }
    }

    #[test]
    fn half_to_even() {
        let r = |n, d| round_half_even(n, d).unwrap();
        assert_eq!([r(1, 2), r(3, 2), r(5, 2), r(7, 2)], [0, 2, 2, 4]);
        assert_eq!([r(-1, 2), r(-3, 2), r(-5, 2)], [0, -2, -2]);
        assert_eq!([r(1, 3), r(2, 3), r(4, 3), r(5, 3)], [0, 1, 1, 2]);
        assert_eq!([r(0, 7), r(14, 7)], [0, 2]);
        assert_eq!(round_half_even(1, 0), None);
        assert_eq!(round_half_even(1, -2), None);
        assert_eq!(r(i128::MAX, i128::MAX), 1);
        assert_eq!(r(i128::MIN, i128::MAX), -1);
    }

    #[test]
    fn impossible_inputs_are_refused() {
        use ProrationError::*;
        assert_eq!(Span::new(0, 0), Err(PeriodNotPositive(0)));
        assert_eq!(Span::new(-5, 0), Err(PeriodNotPositive(-5)));
        assert_eq!(Span::new(10, -1), Err(RemainingNegative(-1)));
        assert_eq!(
            Span::new(10, 11),
            Err(RemainingBeyondPeriod {
                remaining: 11,
                period: 10
            })
        );
        let span = Span::new(10, 5).unwrap();
        assert_eq!(prorate_minor(-1, span), Err(NegativeAmount(-1)));
        // Before the period started, or after it ended.
        assert!(Span::of(ms(0), ms(100), ms(-1)).is_err());
        assert!(Span::of(ms(0), ms(100), ms(101)).is_err());
        assert!(Span::of(ms(100), ms(100), ms(100)).is_err());
        let usd = PricedPeriod {
            price_ref: Ref::generate(Prefix::Price),
            amount: Money::new(Currency::parse("USD").unwrap(), 1).unwrap(),
        };
        let c = change(&priced(1), &usd, 100, 50);
        assert_eq!(prorate_change(&c), Err(CurrencyMismatch));
        let c = change(&priced(1), &priced(2), 100, 50);
        let usd0 = Money::zero(Currency::parse("USD").unwrap());
        assert_eq!(
            plan_change(&c, ProrationMode::None, usd0),
            Err(CurrencyMismatch)
        );
    }

    #[test]
    fn whole_seconds_of_each_instant() {
        let t = |ms| Timestamp::from_millis(ms);
        let s = Span::of(t(999), t(10_000), t(5_999)).unwrap();
        assert_eq!((s.period_seconds(), s.remaining_seconds()), (10, 5));
        let s = Span::of(t(-1), t(1_000), t(-1)).unwrap();
        assert_eq!((s.period_seconds(), s.remaining_seconds()), (2, 2));
    }

    /// The worked example: a 30-day period with
    /// 10 days left, 19.99 → 29.99.
    #[test]
    fn a_thirty_day_period_with_ten_days_left() {
        let (old, new) = (priced(1999), priced(2999));
        let up = change(&old, &new, 30 * DAY, 10 * DAY);
        let p = prorate_change(&up).unwrap();
        // 1999 × 10/30 = 666.33… → 666; 2999 × 10/30 = 999.66… → 1000.
        assert_eq!((p.credit(), p.debit(), p.net()), (eur(666), eur(1000), 334));
        let [credit, debit] = p.lines();
        assert_eq!(credit.kind(), LineKind::ProrationCredit);
        assert_eq!(credit.amount(), -666);
        assert_eq!(credit.price_ref(), Some(&old.price_ref));
        assert_eq!(
            credit.period().map(|p| (p.start(), p.end())),
            Some((ms(20 * DAY), ms(30 * DAY)))
        );
        assert_eq!(debit.kind(), LineKind::ProrationDebit);
        assert_eq!(debit.amount(), 1000);
        assert_eq!(debit.price_ref(), Some(&new.price_ref));

        // charge_now: an invoice of 334, 100 of it from the balance.
        match plan_change(&up, ProrationMode::ChargeNow, eur(100)).unwrap() {
            ChangeOutcome::Invoice { lines, credit, .. } => {
                let amounts: Vec<i64> = lines.lines().iter().map(InvoiceLine::amount).collect();
                assert_eq!(amounts, [-666, 1000, -100]);
                assert_eq!(lines.lines()[2].kind(), LineKind::CreditApplied);
                assert_eq!(lines.total(), eur(234));
                assert_eq!(
                    (credit.applied, credit.total_after, credit.balance_after),
                    (eur(100), eur(234), eur(0))
                );
            }
            other => panic!("{other:?}"),
        }
        // Without a balance: no credit_applied line.
        let outcome = plan_change(&up, ProrationMode::ChargeNow, eur(0)).unwrap();
        assert_eq!(outcome.lines().len(), 2);
        assert_eq!(outcome.charged_now(eur(0).currency()), eur(334));
        // A balance that covers it: nothing charged.
        let outcome = plan_change(&up, ProrationMode::ChargeNow, eur(500)).unwrap();
        assert_eq!(outcome.charged_now(eur(0).currency()), eur(0));

        // The downgrade back at the same instant: 1000 − 666 to the balance.
        let down = change(&new, &old, 30 * DAY, 10 * DAY);
        match plan_change(&down, ProrationMode::ChargeNow, eur(0)).unwrap() {
            ChangeOutcome::ToCreditBalance {
                added,
                balance_after,
                ..
            } => {
                assert_eq!((added, balance_after), (eur(334), eur(334)));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            plan_change(&up, ProrationMode::NextInvoice, eur(0)).unwrap(),
            ChangeOutcome::NextInvoice { .. }
        ));
        assert_eq!(
            plan_change(&up, ProrationMode::None, eur(0)).unwrap(),
            ChangeOutcome::NoProration
        );
    }

    #[test]
    fn another_interval_charges_the_new_price_in_full() {
        let (monthly, yearly) = (priced(1999), priced(19990));
        let mut c = change(&monthly, &yearly, 30 * DAY, 10 * DAY);
        c.new_period = NewPeriod::Restarts {
            end: ms(20 * DAY + 365 * DAY),
        };
        let p = prorate_change(&c).unwrap();
        assert_eq!((p.credit(), p.debit()), (eur(666), eur(19990)));
        let [_, debit] = p.lines();
        assert_eq!(
            debit.period().map(|p| (p.start(), p.end())),
            Some((ms(20 * DAY), ms(385 * DAY)))
        );
        // A new period cannot end before the change.
        c.new_period = NewPeriod::Restarts { end: ms(0) };
        assert!(prorate_change(&c).is_err());
    }

    #[test]
    fn a_tie_rounds_to_even() {
        // 5 × 1/2 = 2.5 → 2; 7 × 1/2 = 3.5 → 4.
        let half = Span::new(2 * DAY, DAY).unwrap();
        assert_eq!(prorate_minor(5, half), Ok(2));
        assert_eq!(prorate_minor(7, half), Ok(4));
        assert_eq!(prorate_minor(0, half), Ok(0));
        let all = Span::new(DAY, DAY).unwrap();
        assert_eq!(prorate_minor(MAX_VALUE as i64, all), Ok(MAX_VALUE as i64));
        let none = Span::new(DAY, 0).unwrap();
        assert_eq!(prorate_minor(MAX_VALUE as i64, none), Ok(0));
    }

    /// The reference: `q` is a nearest integer to `n / d` (no integer is
    /// strictly nearer), and of two equally near it is the even one;
    /// compared exactly, as rationals with the common denominator `d`.
    fn is_round_half_even(n: i128, d: i128, q: i128) -> bool {
        let dist = |k: i128| (n - k * d).abs();
        let nearest = dist(q) <= dist(q - 1) && dist(q) <= dist(q + 1);
        let tie = dist(q) == dist(q - 1) || dist(q) == dist(q + 1);
        nearest && (!tie || q % 2 == 0)
    }

    fn amount() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..100_000, 0u64..=MAX_VALUE]
    }

    /// A period of up to two years (a year's price, a leap day), and the
    /// seconds left in it.
    fn span() -> impl Strategy<Value = (i64, i64)> {
        prop_oneof![1i64..100, 1i64..=(731 * DAY)].prop_flat_map(|p| (Just(p), 0..=p))
    }

    proptest! {
        #[test]
        fn rounding_matches_the_reference(n in -1_000_000i128..1_000_000, d in 1i128..1000) {
            let q = round_half_even(n, d).unwrap();
            prop_assert!(is_round_half_even(n, d, q), "{n}/{d} → {q}");
        }

        #[test]
        fn proration_matches_the_reference(a in amount(), (p, r) in span()) {
            let got = prorate_minor(a as i64, Span::new(p, r).unwrap()).unwrap();
            let (n, d) = (i128::from(a) * i128::from(r), i128::from(p));
            prop_assert!(is_round_half_even(n, d, i128::from(got)));
        }

        /// Credit plus the remaining debit never exceeds what was paid:
        /// the credit is at most the old price, the debit at most the new
        /// one, and the credit for a price never exceeds the debit paid for
        /// it at an earlier change in the same period (so changing back and
        /// forth cannot mint credit).
        #[test]
        fn credit_never_exceeds_what_was_paid(
            old in amount(), new in amount(), (p, r1) in span(), back in 0i64..=1000,
        ) {
            let (a, b) = (priced(old), priced(new));
            let first = prorate_change(&change(&a, &b, p, r1)).unwrap();
            prop_assert!(first.credit().minor() <= old);
            prop_assert!(first.debit().minor() <= new);
            // Later in the same period, B → A: B's credit ≤ B's debit paid.
            let r2 = r1 - back.min(r1);
            let second = prorate_change(&change(&b, &a, p, r2)).unwrap();
            prop_assert!(second.credit().minor() <= first.debit().minor());
        }

        /// A change and its reverse at the same instant leave the buyer
        /// where they were, apart from rounding (at most one minor unit
        /// per line; of the same interval, none at all): what was charged
        /// now comes back as credit balance.
        #[test]
        fn a_change_and_its_reverse_cancel_out(
            old in 0u64..1_000_000_000, new in 0u64..1_000_000_000,
            (p, r) in span(), balance in 0u64..1_000_000_000,
        ) {
            let (a, b) = (priced(old), priced(new));
            let there = change(&a, &b, p, r);
            let back = change(&b, &a, p, r);
            let one = prorate_change(&there).unwrap();
            let two = prorate_change(&back).unwrap();
            prop_assert_eq!(one.net() + two.net(), 0);

            // Through charge_now: (balance − charged) is the buyer's
            // position; it ends where it started.
            let position = |o: &ChangeOutcome, before: Money| -> (i128, Money) {
                match o {
                    ChangeOutcome::Invoice { credit, .. } => (
                        i128::from(credit.balance_after.minor())
                            - i128::from(credit.total_after.minor()),
                        credit.balance_after,
                    ),
                    ChangeOutcome::ToCreditBalance { balance_after, .. } => {
                        (i128::from(balance_after.minor()), *balance_after)
                    }
                    _ => (i128::from(before.minor()), before),
                }
            };
            let o1 = plan_change(&there, ProrationMode::ChargeNow, eur(balance)).unwrap();
            let charged1 = i128::from(o1.charged_now(eur(0).currency()).minor());
            let (_, b1) = position(&o1, eur(balance));
            let o2 = plan_change(&back, ProrationMode::ChargeNow, b1).unwrap();
            let charged2 = i128::from(o2.charged_now(eur(0).currency()).minor());
            let (_, b2) = position(&o2, b1);
            let lines = (o1.lines().len() + o2.lines().len()) as i128;
            let drift = i128::from(b2.minor()) - charged1 - charged2 - i128::from(balance);
            prop_assert!(drift.abs() <= lines, "drift {drift} over {lines} lines");
            prop_assert_eq!(drift, 0);
        }

        /// Of another interval, the reverse at the same instant credits the
        /// new price in full: nothing of it is lost.
        #[test]
        fn the_reverse_of_a_restart_credits_it_in_full(
            old in amount(), new in amount(), (p, r) in span(), len in 1i64..=(366 * DAY),
        ) {
            let (a, b) = (priced(old), priced(new));
            let mut there = change(&a, &b, p, r);
            let at = there.at;
            there.new_period = NewPeriod::Restarts { end: at.plus_seconds(len) };
            let one = prorate_change(&there).unwrap();
            prop_assert_eq!(one.debit().minor(), new);
            let back = PriceChange {
                from: b.clone(),
                to: a.clone(),
                period: LinePeriod::new(at, at.plus_seconds(len)).unwrap(),
                at,
                new_period: NewPeriod::Restarts { end: ms(p) },
            };
            let two = prorate_change(&back).unwrap();
            prop_assert_eq!(two.credit().minor(), new);
        }

        /// Whatever the mode, the lines of an invoice sum to its total,
        /// which is never below zero, and the balance never goes below
        /// zero.
        #[test]
        fn outcomes_are_well_formed(
            old in amount(), new in amount(), (p, r) in span(), balance in amount(),
        ) {
            let c = change(&priced(old), &priced(new), p, r);
            for mode in ProrationMode::ALL {
                match plan_change(&c, *mode, eur(balance)) {
                    Ok(ChangeOutcome::Invoice { lines, credit, proration }) => {
                        prop_assert!(proration.debit().minor() > proration.credit().minor());
                        let sum: i128 = lines.lines().iter().map(|l| i128::from(l.amount())).sum();
                        prop_assert_eq!(sum, i128::from(lines.total().minor()));
                        prop_assert_eq!(lines.total(), credit.total_after);
                        prop_assert_eq!(credit.applied.minor() + credit.balance_after.minor(), balance);
                    }
                    Ok(ChangeOutcome::ToCreditBalance { proration, added, balance_after }) => {
                        prop_assert!(proration.debit().minor() <= proration.credit().minor());
                        prop_assert_eq!(added.minor() + proration.debit().minor(), proration.credit().minor());
                        prop_assert_eq!(balance_after.minor(), balance + added.minor());
                    }
                    Ok(_) => {}
                    // Only a balance beyond 18 digits is refused.
                    Err(e) => prop_assert_eq!(e, ProrationError::OutOfRange),
                }
            }
        }
    }
}
