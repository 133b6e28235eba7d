//! The sandbox processor: which test payment method (`pm_card_…`) stands
//! for which card, and what paying with it does (contract 10 and 10.1,
//! `docs/checkout.md`).
//!
//! This module only decides. It never charges, stores or schedules
//! anything: the caller writes the payment, opens the dispute of
//! `pm_card_dispute` and fails the refunds of `pm_card_refund_fails` (issue
//! 18) from the answers given here. Live environments have no processor and
//! never reach this module.

use super::states::{FailureCode, PaymentStatus};
use crate::time::Timestamp;
use chrono::{DateTime, Datelike, Utc};

/// How long a `next_action` (authentication) waits, in seconds: its
/// `expires_at` is the payment's creation + 1 hour.
pub const ACTION_TTL_SECONDS: i64 = 3600;

/// The card a payment was made with, as payments and stored payment
/// methods show it (`payment_instrument` data: never the full number).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Card {
    pub brand: String,
    pub last4: String,
    pub exp_month: u32,
    pub exp_year: u32,
}

/// What the processor answers to a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed(FailureCode),
    RequiresAction,
}

impl Outcome {
    /// The payment status this outcome writes.
    pub fn status(self) -> PaymentStatus {
        match self {
            Outcome::Succeeded => PaymentStatus::Succeeded,
            Outcome::Failed(_) => PaymentStatus::Failed,
            Outcome::RequiresAction => PaymentStatus::RequiresAction,
        }
    }

    /// The payment's `failure_code`: set exactly when it failed.
    pub fn failure_code(self) -> Option<FailureCode> {
        match self {
            Outcome::Failed(code) => Some(code),
            _ => None,
        }
    }
}

/// The sandbox's test payment methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestCard {
    Visa,
    Mastercard,
    Declined,
    InsufficientFunds,
    RequiresAction,
    Dispute,
    RefundFails,
    RenewalFails,
}

impl TestCard {
    pub const ALL: &'static [TestCard] = &[
        TestCard::Visa,
        TestCard::Mastercard,
        TestCard::Declined,
        TestCard::InsufficientFunds,
        TestCard::RequiresAction,
        TestCard::Dispute,
        TestCard::RefundFails,
        TestCard::RenewalFails,
    ];

    /// `None` for anything else, including other `pm_…` values (see
    /// [`is_payment_method_ref`]).
    pub fn parse(s: &str) -> Option<TestCard> {
        TestCard::ALL.iter().copied().find(|c| c.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TestCard::Visa => "pm_card_visa",
            TestCard::Mastercard => "pm_card_mastercard",
            TestCard::Declined => "pm_card_declined",
            TestCard::InsufficientFunds => "pm_card_insufficient_funds",
            TestCard::RequiresAction => "pm_card_requires_action",
            TestCard::Dispute => "pm_card_dispute",
            TestCard::RefundFails => "pm_card_refund_fails",
            TestCard::RenewalFails => "pm_card_renewal_fails",
        }
    }

    fn brand_last4(self) -> (&'static str, &'static str) {
        match self {
            TestCard::Visa => ("visa", "4242"),
            TestCard::Mastercard => ("mastercard", "4444"),
            TestCard::Declined => ("visa", "0002"),
            TestCard::InsufficientFunds => ("visa", "9995"),
            TestCard::RequiresAction => ("visa", "3184"),
            TestCard::Dispute => ("visa", "0259"),
            TestCard::RefundFails => ("visa", "5556"),
            TestCard::RenewalFails => ("visa", "0341"),
        }
    }

    /// The card's details. Its expiry is December three years after `now`
    /// (UTC), so a test card is always valid for longer than any
    /// subscription period started with it today.
    pub fn card(self, now: Timestamp) -> Card {
        let (brand, last4) = self.brand_last4();
        Card {
            brand: brand.to_owned(),
            last4: last4.to_owned(),
            exp_month: 12,
            exp_year: exp_year(now),
        }
    }

    pub fn outcome(self) -> Outcome {
        match self {
            TestCard::Visa
            | TestCard::Mastercard
            | TestCard::Dispute
            | TestCard::RefundFails
            | TestCard::RenewalFails => Outcome::Succeeded,
            TestCard::Declined => Outcome::Failed(FailureCode::CardDeclined),
            TestCard::InsufficientFunds => Outcome::Failed(FailureCode::InsufficientFunds),
            TestCard::RequiresAction => Outcome::RequiresAction,
        }
    }

    /// What a renewal charged to a stored method of this card answers (no
    /// buyer is present, so no authentication is asked for): a card that
    /// paid its first period pays again, except `pm_card_renewal_fails`,
    /// which declines every renewal.
    pub fn renewal_outcome(self) -> Outcome {
        match self {
            TestCard::RenewalFails => Outcome::Failed(FailureCode::InsufficientFunds),
            TestCard::RequiresAction => Outcome::Succeeded,
            card => card.outcome(),
        }
    }

    /// A successful payment with this card has a dispute opened on it
    /// shortly after (the caller schedules it).
    pub fn opens_dispute(self) -> bool {
        matches!(self, TestCard::Dispute)
    }

    /// Refunds of payments made with this card fail when settled.
    pub fn refunds_fail(self) -> bool {
        matches!(self, TestCard::RefundFails)
    }
}

/// Finishes a payment waiting for authentication: approving completes it as
/// `pm_card_visa` would, declining fails it.
pub fn authenticate(approve: bool) -> Outcome {
    if approve {
        Outcome::Succeeded
    } else {
        Outcome::Failed(FailureCode::AuthenticationFailed)
    }
}

/// Whether `s` is meant as a payment method (`pm_…`) rather than a stored
/// one: an unknown `pm_…` is then `validation_failed`, not `not_found`.
pub fn is_payment_method_ref(s: &str) -> bool {
    s.starts_with("pm_")
}

fn exp_year(now: Timestamp) -> u32 {
    // A timestamp outside chrono's range (hundreds of millennia away) reads
    // as the epoch, as `Timestamp::to_rfc3339` does; a year before 0 cannot
    // come from a real clock and reads as 0.
    let year = DateTime::<Utc>::from_timestamp_millis(now.millis())
        .unwrap_or_default()
        .year();
    u32::try_from(year.saturating_add(3)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    #[test]
    fn every_card_outcome() {
        use FailureCode::*;
        let table = [
            (TestCard::Visa, Outcome::Succeeded),
            (TestCard::Mastercard, Outcome::Succeeded),
            (TestCard::Declined, Outcome::Failed(CardDeclined)),
            (
                TestCard::InsufficientFunds,
                Outcome::Failed(InsufficientFunds),
            ),
            (TestCard::RequiresAction, Outcome::RequiresAction),
            (TestCard::Dispute, Outcome::Succeeded),
            (TestCard::RefundFails, Outcome::Succeeded),
            (TestCard::RenewalFails, Outcome::Succeeded),
        ];
        assert_eq!(table.len(), TestCard::ALL.len());
        for (card, outcome) in table {
            assert_eq!(card.outcome(), outcome, "{}", card.as_str());
            assert_eq!(card.opens_dispute(), card == TestCard::Dispute);
            assert_eq!(card.refunds_fail(), card == TestCard::RefundFails);
        }
    }

    #[test]
    fn every_card_details() {
        let now = at("2026-12-31T23:59:59.999Z");
        let table = [
            (TestCard::Visa, "visa", "4242"),
            (TestCard::Mastercard, "mastercard", "4444"),
            (TestCard::Declined, "visa", "0002"),
            (TestCard::InsufficientFunds, "visa", "9995"),
            (TestCard::RequiresAction, "visa", "3184"),
            (TestCard::Dispute, "visa", "0259"),
            (TestCard::RefundFails, "visa", "5556"),
            (TestCard::RenewalFails, "visa", "0341"),
        ];
        assert_eq!(table.len(), TestCard::ALL.len());
        for (card, brand, last4) in table {
            assert_eq!(
                card.card(now),
                Card {
                    brand: brand.into(),
                    last4: last4.into(),
                    exp_month: 12,
                    exp_year: 2029
                }
            );
        }
        // The year is UTC's: 23:30 on 31 December at -01:00 is already the
        // next year.
        assert_eq!(
            TestCard::Visa
                .card(at("2026-12-31T23:30:00-01:00"))
                .exp_year,
            2030
        );
    }

    #[test]
    fn card_serializes_flat() {
        let v =
            serde_json::to_value(TestCard::Mastercard.card(at("2026-01-01T00:00:00Z"))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"brand": "mastercard", "last4": "4444", "exp_month": 12, "exp_year": 2029})
        );
    }

    #[test]
    fn parse_as_str_round_trip() {
        for card in TestCard::ALL {
            assert_eq!(TestCard::parse(card.as_str()), Some(*card));
            assert!(is_payment_method_ref(card.as_str()));
        }
        assert_eq!(TestCard::parse("pm_card_amex"), None);
        assert_eq!(TestCard::parse("PM_CARD_VISA"), None);
        assert_eq!(TestCard::parse("pm_card_visa "), None);
        assert!(is_payment_method_ref("pm_card_amex"));
        assert!(!is_payment_method_ref("spm_0123"));
        assert!(!is_payment_method_ref("pm"));
    }

    #[test]
    fn authentication() {
        assert_eq!(authenticate(true), TestCard::Visa.outcome());
        assert_eq!(
            authenticate(false),
            Outcome::Failed(FailureCode::AuthenticationFailed)
        );
    }

    #[test]
    fn outcome_status_and_code() {
        assert_eq!(Outcome::Succeeded.status(), PaymentStatus::Succeeded);
        assert_eq!(Outcome::Succeeded.failure_code(), None);
        assert_eq!(
            Outcome::RequiresAction.status(),
            PaymentStatus::RequiresAction
        );
        assert_eq!(Outcome::RequiresAction.failure_code(), None);
        let f = Outcome::Failed(FailureCode::CardDeclined);
        assert_eq!(f.status(), PaymentStatus::Failed);
        assert_eq!(f.failure_code(), Some(FailureCode::CardDeclined));
    }

    proptest! {
        /// Only the listed names parse; anything else is not a test card.
        #[test]
        fn parse_only_known(s in "(pm_card_)?[a-z_]{0,20}") {
            match TestCard::parse(&s) {
                Some(c) => prop_assert_eq!(c.as_str(), s.as_str()),
                None => prop_assert!(TestCard::ALL.iter().all(|c| c.as_str() != s)),
            }
        }

        #[test]
        fn expiry_is_three_years_ahead(ms in 0i64..253_402_300_799_000) {
            let now = Timestamp::from_millis(ms);
            let year = DateTime::<Utc>::from_timestamp_millis(ms).unwrap().year();
            let card = TestCard::Visa.card(now);
            prop_assert_eq!(i64::from(card.exp_year), i64::from(year) + 3);
            prop_assert_eq!(card.exp_month, 12);
        }
    }
}
