//! Promotions: the exact arithmetic of a discount and the window in which a
//! promotion applies (contract 10.1, `docs/catalogue.md`).
//!
//! A percentage discount is `floor(amount × percent / 100)` minor units; an
//! amount discount is capped at the amount; the promotional amount is
//! `amount − discount` and so never goes below zero. A promotion's status is
//! never stored: it is computed from its window and a `now` the caller
//! passes, so this module never reads a clock.

use crate::money::{Money, MoneyError};
use crate::principal::wire_enum;
use crate::time::Timestamp;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DiscountError {
    #[error("must be an integer from 1 to 100")]
    PercentOutOfRange,
}

/// A whole percentage from 1 to 100: zero would be no promotion at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Percent(u8);

impl Percent {
    pub fn new(v: u64) -> Result<Percent, DiscountError> {
        match u8::try_from(v) {
            Ok(p @ 1..=100) => Ok(Percent(p)),
            _ => Err(DiscountError::PercentOutOfRange),
        }
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discount {
    PercentOff(Percent),
    AmountOff(Money),
}

impl Discount {
    /// How much comes off `amount`: never more than `amount`, same currency.
    pub fn discount_on(&self, amount: Money) -> Result<Money, MoneyError> {
        match self {
            Discount::PercentOff(p) => {
                // u128 holds MAX_VALUE × 100 with room to spare, so the
                // product is exact and never wraps.
                let off = u128::from(amount.minor()) * u128::from(p.get()) / 100;
                // off ≤ amount because p ≤ 100, so it fits u64 and MAX_VALUE.
                let off = u64::try_from(off).map_err(|_| MoneyError::Overflow)?;
                Money::new(amount.currency(), off)
            }
            Discount::AmountOff(off) => {
                if off.currency() != amount.currency() {
                    return Err(MoneyError::CurrencyMismatch);
                }
                Money::new(amount.currency(), off.minor().min(amount.minor()))
            }
        }
    }

    /// The promotional amount: `amount − discount_on(amount)`, never below
    /// zero and in `amount`'s currency.
    pub fn apply(&self, amount: Money) -> Result<Money, MoneyError> {
        amount.checked_sub(self.discount_on(amount)?)
    }

    /// The currency an amount discount is bound to (`None` for a percentage,
    /// which fits any currency).
    pub fn currency(&self) -> Option<crate::money::Currency> {
        match self {
            Discount::PercentOff(_) => None,
            Discount::AmountOff(m) => Some(m.currency()),
        }
    }
}

wire_enum!(
    /// Computed from the window and the clock when read, never stored.
    PromotionStatus { Scheduled => "scheduled", Active => "active", Ended => "ended" }
);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("must be after starts_at")]
    EndsBeforeStart,
}

/// The half-open interval `[starts_at, ends_at)` in which a promotion
/// applies; `ends_at: None` is open-ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    starts_at: Timestamp,
    ends_at: Option<Timestamp>,
}

impl Window {
    /// `ends_at` must be strictly after `starts_at`: an empty window would be
    /// a promotion that never applies. (That `ends_at` is in the future is
    /// the caller's check: it needs the clock.)
    pub fn new(starts_at: Timestamp, ends_at: Option<Timestamp>) -> Result<Window, WindowError> {
        match ends_at {
            Some(end) if end <= starts_at => Err(WindowError::EndsBeforeStart),
            _ => Ok(Window { starts_at, ends_at }),
        }
    }

    pub fn starts_at(&self) -> Timestamp {
        self.starts_at
    }

    pub fn ends_at(&self) -> Option<Timestamp> {
        self.ends_at
    }

    pub fn status_at(&self, now: Timestamp) -> PromotionStatus {
        if now < self.starts_at {
            PromotionStatus::Scheduled
        } else if self.ends_at.is_some_and(|end| end <= now) {
            PromotionStatus::Ended
        } else {
            PromotionStatus::Active
        }
    }

    /// Whether two windows share an instant. Half-open, so a promotion may
    /// start at the very moment the previous one ends.
    pub fn overlaps(&self, other: &Window) -> bool {
        let starts_before_other_ends = other.ends_at.is_none_or(|end| self.starts_at < end);
        let other_starts_before_end = self.ends_at.is_none_or(|end| other.starts_at < end);
        starts_before_other_ends && other_starts_before_end
    }

    /// Scheduled or active: such a promotion blocks another overlapping one
    /// on the same offer.
    pub fn is_live_at(&self, now: Timestamp) -> bool {
        self.status_at(now) != PromotionStatus::Ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::{Currency, MAX_VALUE};
    use proptest::prelude::*;

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    fn usd(v: u64) -> Money {
        Money::new(Currency::parse("USD").unwrap(), v).unwrap()
    }

    fn pct(p: u64) -> Discount {
        Discount::PercentOff(Percent::new(p).unwrap())
    }

    fn t(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    #[test]
    fn percent_range() {
        assert_eq!(Percent::new(0), Err(DiscountError::PercentOutOfRange));
        assert_eq!(Percent::new(101), Err(DiscountError::PercentOutOfRange));
        assert_eq!(
            Percent::new(256 + 50),
            Err(DiscountError::PercentOutOfRange)
        );
        assert_eq!(
            Percent::new(u64::MAX),
            Err(DiscountError::PercentOutOfRange)
        );
        assert_eq!(Percent::new(1).unwrap().get(), 1);
        assert_eq!(Percent::new(100).unwrap().get(), 100);
        assert_eq!(
            DiscountError::PercentOutOfRange.to_string(),
            "must be an integer from 1 to 100"
        );
    }

    #[test]
    fn worked_examples() {
        assert_eq!(pct(15).discount_on(eur(1999)), Ok(eur(299)));
        assert_eq!(pct(15).apply(eur(1999)), Ok(eur(1700)));
        assert_eq!(pct(1).apply(eur(99)), Ok(eur(99)));
        assert_eq!(pct(100).apply(eur(MAX_VALUE)), Ok(eur(0)));
        assert_eq!(
            pct(99).discount_on(eur(MAX_VALUE)),
            Ok(eur(989_999_999_999_999_999))
        );
        assert_eq!(
            Discount::AmountOff(eur(500)).apply(eur(1999)),
            Ok(eur(1499))
        );
        assert_eq!(Discount::AmountOff(eur(5000)).apply(eur(1999)), Ok(eur(0)));
        assert_eq!(Discount::AmountOff(eur(1)).apply(eur(0)), Ok(eur(0)));
        assert_eq!(
            Discount::AmountOff(usd(1)).apply(eur(10)),
            Err(MoneyError::CurrencyMismatch)
        );
        assert_eq!(pct(50).currency(), None);
        assert_eq!(
            Discount::AmountOff(usd(1)).currency(),
            Some(Currency::parse("USD").unwrap())
        );
    }

    #[test]
    fn windows() {
        assert_eq!(
            Window::new(t(10), Some(t(10))),
            Err(WindowError::EndsBeforeStart)
        );
        assert_eq!(
            Window::new(t(10), Some(t(9))),
            Err(WindowError::EndsBeforeStart)
        );
        assert_eq!(
            WindowError::EndsBeforeStart.to_string(),
            "must be after starts_at"
        );
        let w = Window::new(t(10), Some(t(20))).unwrap();
        assert_eq!((w.starts_at(), w.ends_at()), (t(10), Some(t(20))));
        assert_eq!(w.status_at(t(9)), PromotionStatus::Scheduled);
        assert_eq!(w.status_at(t(10)), PromotionStatus::Active);
        assert_eq!(w.status_at(t(19)), PromotionStatus::Active);
        assert_eq!(w.status_at(t(20)), PromotionStatus::Ended);
        assert!(w.is_live_at(t(0)) && w.is_live_at(t(19)) && !w.is_live_at(t(20)));
        let open = Window::new(t(10), None).unwrap();
        assert_eq!(open.status_at(t(i64::MAX)), PromotionStatus::Active);
        assert!(open.overlaps(&Window::new(t(i64::MAX - 1), None).unwrap()));
        assert!(!w.overlaps(&Window::new(t(20), None).unwrap()));
        assert!(w.overlaps(&Window::new(t(19), None).unwrap()));
        assert!(w.overlaps(&Window::new(t(0), None).unwrap()));
        assert!(!w.overlaps(&Window::new(t(0), Some(t(10))).unwrap()));
    }

    fn amount() -> impl Strategy<Value = u64> {
        prop_oneof![0u64..=MAX_VALUE, 0u64..1000, Just(MAX_VALUE)]
    }

    fn window() -> impl Strategy<Value = Window> {
        (
            -1_000_000i64..1_000_000,
            proptest::option::of(1i64..1_000_000),
        )
            .prop_map(|(s, d)| Window::new(t(s), d.map(|d| t(s + d))).unwrap())
    }

    proptest! {
        #[test]
        fn percent_is_exact_floor(a in amount(), p in 1u64..=100) {
            let off = pct(p).discount_on(eur(a)).unwrap();
            let reference = (a as u128 * p as u128) / 100;
            prop_assert_eq!(off.minor() as u128, reference);
            prop_assert!(off.minor() <= a);
            let promo = pct(p).apply(eur(a)).unwrap();
            prop_assert_eq!(promo.minor() as u128, a as u128 - reference);
            prop_assert_eq!(promo.currency(), eur(0).currency());
        }

        #[test]
        fn full_percent_gives_zero(a in amount()) {
            prop_assert_eq!(pct(100).apply(eur(a)), Ok(eur(0)));
        }

        #[test]
        fn promotional_amount_is_within_bounds(a in amount(), off in amount(), p in 1u64..=100) {
            for d in [pct(p), Discount::AmountOff(eur(off))] {
                let promo = d.apply(eur(a)).unwrap();
                prop_assert!(promo.minor() <= a);
                prop_assert_eq!(
                    promo.minor() + d.discount_on(eur(a)).unwrap().minor(),
                    a
                );
            }
            prop_assert_eq!(
                Discount::AmountOff(eur(off)).apply(eur(a)).unwrap().minor(),
                a.saturating_sub(off)
            );
        }

        #[test]
        fn other_currency_amount_off_is_refused(a in amount(), off in amount()) {
            prop_assert_eq!(
                Discount::AmountOff(usd(off)).discount_on(eur(a)),
                Err(MoneyError::CurrencyMismatch)
            );
            prop_assert_eq!(
                Discount::AmountOff(usd(off)).apply(eur(a)),
                Err(MoneyError::CurrencyMismatch)
            );
        }

        #[test]
        fn overlap_is_symmetric_and_reflexive(a in window(), b in window()) {
            prop_assert_eq!(a.overlaps(&b), b.overlaps(&a));
            prop_assert!(a.overlaps(&a));
        }

        /// Two windows overlap exactly when some instant is live in both.
        #[test]
        fn overlap_matches_a_shared_instant(a in window(), b in window()) {
            let start = a.starts_at().max(b.starts_at());
            let shared = a.status_at(start) == PromotionStatus::Active
                && b.status_at(start) == PromotionStatus::Active;
            prop_assert_eq!(a.overlaps(&b), shared);
        }

        #[test]
        fn adjacent_windows_do_not_overlap(s in -1_000_000i64..1_000_000, d1 in 1i64..1000, d2 in proptest::option::of(1i64..1000)) {
            let first = Window::new(t(s), Some(t(s + d1))).unwrap();
            let second = Window::new(t(s + d1), d2.map(|d| t(s + d1 + d))).unwrap();
            prop_assert!(!first.overlaps(&second));
            prop_assert!(!second.overlaps(&first));
        }

        #[test]
        fn status_is_monotone(w in window(), a in -2_000_000i64..2_000_000, b in -2_000_000i64..2_000_000) {
            let (early, late) = (a.min(b), a.max(b));
            let rank = |s: PromotionStatus| PromotionStatus::ALL.iter().position(|x| *x == s);
            prop_assert!(rank(w.status_at(t(early))) <= rank(w.status_at(t(late))));
            prop_assert_eq!(w.is_live_at(t(early)), w.status_at(t(early)) != PromotionStatus::Ended);
        }
    }
}
