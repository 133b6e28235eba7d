//! The money of refunds: the refundable remainder of a payment, the amount
//! a refund request resolves to, its derived scope, and the status the
//! order reads once refunds have succeeded.
//!
//! `captured` is the payment's captured amount; `held` is the sum of its
//! refunds that hold their amount (scheduled, pending, succeeded: see
//! [`RefundStatus::holds_amount`](super::states::RefundStatus::holds_amount));
//! `refunded` is the sum of the succeeded ones only. Every sum is exact
//! `u64` arithmetic through [`Money`].

use super::states::RefundScope;
use crate::checkout::states::OrderStatus;
use crate::money::{Money, MoneyError};

/// Why a refund request's amount was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefundAmountError {
    #[error("the refund amount must be in the payment's currency")]
    CurrencyMismatch,
    #[error("must be at least \"1\"")]
    Zero,
    #[error("the refund amount exceeds the refundable remainder of {remainder}")]
    ExceedsRemainder { remainder: Money },
    #[error("the payment has nothing left to refund")]
    NothingLeft,
    /// The refunds read already hold more than was captured: the store's
    /// invariant is broken, so refunding more must not be allowed.
    #[error("the payment's refunds already exceed its captured amount")]
    HeldExceedsCaptured,
}

impl RefundAmountError {
    /// A zero amount is a malformed body (`400 validation_failed` on
    /// `amount`); the rest are well-formed requests the payment cannot
    /// honour (`422 semantic_error`).
    pub fn is_semantic(&self) -> bool {
        !matches!(self, RefundAmountError::Zero)
    }

    /// The body field the error is about.
    pub fn field(&self) -> &'static str {
        "amount"
    }
}

/// What is left to refund: `captured − held`. An error if the currencies
/// differ or `held` exceeds `captured` (never clamped to zero: that would
/// hide a broken invariant).
pub fn remainder(captured: Money, held: Money) -> Result<Money, MoneyError> {
    captured.checked_sub(held)
}

/// The amount a refund request resolves to: the whole remainder when none
/// is requested, else the requested amount once it is in the payment's
/// currency, at least one minor unit and within the remainder. The checks
/// run in that order so that a malformed amount is refused the same way
/// whatever the payment's state.
pub fn refund_amount(
    captured: Money,
    held: Money,
    requested: Option<Money>,
) -> Result<Money, RefundAmountError> {
    if requested.is_some_and(|r| r.currency() != captured.currency()) {
        return Err(RefundAmountError::CurrencyMismatch);
    }
    if requested.is_some_and(|r| r.minor() == 0) {
        return Err(RefundAmountError::Zero);
    }
    let left = remainder(captured, held).map_err(|e| match e {
        MoneyError::CurrencyMismatch => RefundAmountError::CurrencyMismatch,
        _ => RefundAmountError::HeldExceedsCaptured,
    })?;
    match requested {
        None if left.minor() == 0 => Err(RefundAmountError::NothingLeft),
        None => Ok(left),
        Some(r) if r.minor() > left.minor() => {
            Err(RefundAmountError::ExceedsRemainder { remainder: left })
        }
        Some(r) => Ok(r),
    }
}

/// `Full` exactly when the refund covers the payment's whole captured
/// amount; any smaller refund, even the last one that empties the
/// remainder, is `Partial`.
pub fn scope(amount: Money, captured: Money) -> RefundScope {
    if amount == captured {
        RefundScope::Full
    } else {
        RefundScope::Partial
    }
}

/// The order's status once `refunded` (the sum of its payment's succeeded
/// refunds, in the payment's currency) has been given back. Compared in
/// minor units: callers only ever sum refunds of the payment's currency.
/// A zero-amount payment has nothing to refund and stays paid.
pub fn order_status_after(captured: Money, refunded: Money) -> OrderStatus {
    if refunded.minor() == 0 {
        OrderStatus::Paid
    } else if refunded.minor() >= captured.minor() {
        OrderStatus::Refunded
    } else {
        OrderStatus::PartiallyRefunded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::money::Currency;
    use proptest::prelude::*;

    fn eur(v: u64) -> Money {
        Money::new(Currency::parse("EUR").unwrap(), v).unwrap()
    }

    fn usd(v: u64) -> Money {
        Money::new(Currency::parse("USD").unwrap(), v).unwrap()
    }

    #[test]
    fn remainder_table() {
        assert_eq!(remainder(eur(1999), eur(0)), Ok(eur(1999)));
        assert_eq!(remainder(eur(1999), eur(1999)), Ok(eur(0)));
        assert_eq!(remainder(eur(1999), eur(2000)), Err(MoneyError::Overflow));
        assert_eq!(
            remainder(eur(1999), usd(1)),
            Err(MoneyError::CurrencyMismatch)
        );
    }

    #[test]
    fn amount_table() {
        use RefundAmountError::*;
        assert_eq!(refund_amount(eur(1999), eur(0), None), Ok(eur(1999)));
        assert_eq!(refund_amount(eur(1999), eur(999), None), Ok(eur(1000)));
        assert_eq!(refund_amount(eur(1999), eur(1999), None), Err(NothingLeft));
        assert_eq!(refund_amount(eur(0), eur(0), None), Err(NothingLeft));
        assert_eq!(
            refund_amount(eur(1999), eur(999), Some(eur(1000))),
            Ok(eur(1000))
        );
        assert_eq!(refund_amount(eur(1999), eur(0), Some(eur(1))), Ok(eur(1)));
        assert_eq!(
            refund_amount(eur(1999), eur(999), Some(eur(1001))),
            Err(ExceedsRemainder {
                remainder: eur(1000)
            })
        );
        assert_eq!(
            refund_amount(eur(1999), eur(1999), Some(eur(1))),
            Err(ExceedsRemainder { remainder: eur(0) })
        );
        assert_eq!(refund_amount(eur(1999), eur(0), Some(eur(0))), Err(Zero));
        assert_eq!(
            refund_amount(eur(1999), eur(0), Some(usd(1))),
            Err(CurrencyMismatch)
        );
        assert_eq!(
            refund_amount(eur(1999), usd(0), None),
            Err(CurrencyMismatch)
        );
        assert_eq!(
            refund_amount(eur(1999), eur(2000), None),
            Err(HeldExceedsCaptured)
        );
        assert_eq!(
            refund_amount(eur(1999), eur(2000), Some(eur(1))),
            Err(HeldExceedsCaptured)
        );
    }

    #[test]
    fn error_classes_and_messages() {
        use RefundAmountError::*;
        assert!(!Zero.is_semantic());
        for e in [
            CurrencyMismatch,
            ExceedsRemainder { remainder: eur(5) },
            NothingLeft,
            HeldExceedsCaptured,
        ] {
            assert!(e.is_semantic(), "{e}");
            assert_eq!(e.field(), "amount");
        }
        assert_eq!(Zero.to_string(), "must be at least \"1\"");
        assert_eq!(
            ExceedsRemainder { remainder: eur(5) }.to_string(),
            "the refund amount exceeds the refundable remainder of 5 EUR"
        );
    }

    #[test]
    fn scope_and_order_status() {
        assert_eq!(scope(eur(1999), eur(1999)), RefundScope::Full);
        assert_eq!(scope(eur(1000), eur(1999)), RefundScope::Partial);
        assert_eq!(order_status_after(eur(1999), eur(0)), OrderStatus::Paid);
        assert_eq!(
            order_status_after(eur(1999), eur(1)),
            OrderStatus::PartiallyRefunded
        );
        assert_eq!(
            order_status_after(eur(1999), eur(1999)),
            OrderStatus::Refunded
        );
        assert_eq!(order_status_after(eur(0), eur(0)), OrderStatus::Paid);
    }

    fn rank(s: OrderStatus) -> usize {
        OrderStatus::ALL
            .iter()
            .position(|x| *x == s)
            .unwrap_or(usize::MAX)
    }

    proptest! {
        /// However the requests come, what is held never passes what was
        /// captured, each accepted refund is at least 1, and a refusal
        /// changes nothing.
        #[test]
        fn held_never_exceeds_captured(
            captured in 0u64..100_000,
            requests in prop::collection::vec(proptest::option::of(0u64..60_000), 0..20),
        ) {
            let captured = eur(captured);
            let mut held = eur(0);
            for r in requests {
                match refund_amount(captured, held, r.map(eur)) {
                    Ok(a) => {
                        prop_assert!(a.minor() >= 1);
                        if let Some(r) = r { prop_assert_eq!(a.minor(), r); }
                        held = held.checked_add(a).unwrap();
                    }
                    Err(RefundAmountError::Zero) => prop_assert_eq!(r, Some(0)),
                    Err(RefundAmountError::NothingLeft) => {
                        prop_assert!(r.is_none());
                        prop_assert_eq!(held, captured);
                    }
                    Err(RefundAmountError::ExceedsRemainder { remainder: left }) => {
                        prop_assert_eq!(left, remainder(captured, held).unwrap());
                        prop_assert!(r.unwrap_or(0) > left.minor());
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                }
                prop_assert!(held.minor() <= captured.minor());
            }
        }

        #[test]
        fn scope_is_full_iff_whole(amount in 0u64..1000, captured in 0u64..1000) {
            let s = scope(eur(amount), eur(captured));
            prop_assert_eq!(s == RefundScope::Full, amount == captured);
        }

        /// Refunding more never moves the order back towards `paid`.
        #[test]
        fn order_status_is_monotone(captured in 1u64..10_000, a in 0u64..10_000, b in 0u64..10_000) {
            let (lo, hi) = (a.min(b).min(captured), a.max(b).min(captured));
            let (s_lo, s_hi) = (
                order_status_after(eur(captured), eur(lo)),
                order_status_after(eur(captured), eur(hi)),
            );
            prop_assert!(rank(s_lo) <= rank(s_hi));
            prop_assert_eq!(s_hi == OrderStatus::Refunded, hi == captured);
            prop_assert_eq!(s_lo == OrderStatus::Paid, lo == 0);
        }
    }
}
