//! Wire states of checkout sessions and of the records a payment makes,
//! and the two statuses that are derived when read rather than stored: a
//! session past its `expires_at` reads `expired`, and the journey of such a
//! session reads `abandoned`.
//!
//! Derived statuses are computed from a `now` or a flag the caller passes;
//! this module never reads a clock and never decides what is written.

use crate::catalogue::StateError;
use crate::principal::wire_enum;
use crate::time::Timestamp;

/// How long a checkout session stays payable: `expires_at` = `created_at` +
/// 24 h (contract 10.1).
pub const SESSION_TTL_SECONDS: i64 = 86_400;

wire_enum!(
    /// `Expired` is never stored: an open session reads expired once its
    /// `expires_at` has passed (see [`SessionStatus::effective`]).
    SessionStatus { Open => "open", Complete => "complete", Expired => "expired" }
);

wire_enum!(
    PaymentStatus {
        Succeeded => "succeeded",
        Failed => "failed",
        RequiresAction => "requires_action",
        Canceled => "canceled",
    }
);

wire_enum!(
    /// Why a payment failed; a failed payment carries exactly one.
    FailureCode {
        CardDeclined => "card_declined",
        InsufficientFunds => "insufficient_funds",
        AuthenticationFailed => "authentication_failed",
    }
);

wire_enum!(
    OrderStatus { Paid => "paid", PartiallyRefunded => "partially_refunded", Refunded => "refunded" }
);

wire_enum!(
    /// A first payment's invoice is written `paid`; a renewal's is `open`
    /// while its charge is declined and dunning retries it, then `paid` or,
    /// when the schedule runs out, `uncollectible` (contract 12.4).
    InvoiceStatus { Open => "open", Paid => "paid", Uncollectible => "uncollectible" }
);

wire_enum!(EntitlementStatus { Active => "active", Revoked => "revoked" });

wire_enum!(StoredMethodStatus { Active => "active", Detached => "detached" });

wire_enum!(
    /// `Incomplete` while its first payment waits for authentication;
    /// `PastDue` while a declined renewal is retried (contract 12.4);
    /// `Trialing` from a paid session with a trial until `trial_end`
    /// (contract 14.3). See [`SubscriptionStatus::may_become`].
    SubscriptionStatus {
        Incomplete => "incomplete",
        Active => "active",
        PastDue => "past_due",
        Canceled => "canceled",
        Trialing => "trialing",
    }
);

impl SubscriptionStatus {
    /// The subscription machine: whether a subscription in `self` may move
    /// to `to`. `incomplete` becomes `active` once authenticated; `active`
    /// and `past_due` move between each other by renewal and dunning;
    /// `trialing` becomes `active` when the first period's charge at
    /// `trial_end` succeeds, `past_due` when it is declined; anything not
    /// yet canceled may be canceled, and `canceled` is final.
    pub fn may_become(self, to: SubscriptionStatus) -> bool {
        use SubscriptionStatus::*;
        matches!(
            (self, to),
            (Incomplete, Active)
                | (Active, PastDue)
                | (PastDue, Active)
                | (Trialing, Active)
                | (Trialing, PastDue)
                | (Incomplete | Active | PastDue | Trialing, Canceled)
        )
    }
}

wire_enum!(
    /// The kind of a subscription change; a subscription's first change is
    /// always `Started`.
    ChangeKind {
        Started => "started",
        Repriced => "repriced",
        Renewal => "renewal",
        Canceled => "canceled",
        PriceChange => "price_change",
    }
);

wire_enum!(
    /// Why a subscription was canceled: asked for (`cancelSubscription`) or
    /// its dunning schedule ran out.
    CancelReason { Requested => "requested", Nonpayment => "nonpayment" }
);

wire_enum!(
    /// `Abandoned` is derived when read from the session's expiry (see
    /// [`JourneyStatus::effective`]).
    JourneyStatus { Open => "open", Converted => "converted", Abandoned => "abandoned" }
);

wire_enum!(
    StepKind {
        SessionCreated => "session_created",
        PaymentAttempted => "payment_attempted",
        ActionRequired => "action_required",
        PaymentFailed => "payment_failed",
        PaymentSucceeded => "payment_succeeded",
        SubscriptionStarted => "subscription_started",
    }
);

wire_enum!(
    /// The `result` of a pay answer: `RetrievePaymentResponse` for one-time
    /// items (a decline included), the other two for recurring items.
    PayResult {
        RetrievePaymentResponse => "retrieve_payment_response",
        SubscriptionSetupActionRequired => "subscription_setup_action_required",
        SubscriptionStarted => "subscription_started",
    }
);

impl SessionStatus {
    /// The status a reader sees. Only an open session expires: a complete
    /// one was paid before its deadline and stays complete forever. The
    /// deadline itself is already expired (`now >= expires_at`), so a pay
    /// racing the deadline cannot win on the boundary millisecond.
    pub fn effective(self, expires_at: Timestamp, now: Timestamp) -> SessionStatus {
        match self {
            SessionStatus::Open if now >= expires_at => SessionStatus::Expired,
            s => s,
        }
    }

    /// Whether a pay call may proceed; callers pass the *effective* status.
    /// Each pay on an open session makes a new payment, so `Open` is the
    /// only payable state.
    pub fn check_payable(self) -> Result<(), StateError> {
        match self {
            SessionStatus::Open => Ok(()),
            from => Err(StateError {
                resource: "checkout session",
                action: "pay",
                from: from.as_str(),
            }),
        }
    }
}

impl JourneyStatus {
    /// The status a reader sees: an open journey whose session has expired
    /// was abandoned. A converted journey stays converted, since its session
    /// is complete and never expires.
    pub fn effective(self, session_expired: bool) -> JourneyStatus {
        match self {
            JourneyStatus::Open if session_expired => JourneyStatus::Abandoned,
            s => s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trips<T: Copy + PartialEq + std::fmt::Debug>(
        all: &[T],
        as_str: fn(T) -> &'static str,
        parse: fn(&str) -> Option<T>,
    ) {
        let mut seen = std::collections::HashSet::new();
        for s in all {
            assert_eq!(parse(as_str(*s)), Some(*s));
            assert!(seen.insert(as_str(*s)), "duplicate wire name");
            assert_eq!(parse(&as_str(*s).to_uppercase()), None);
        }
    }

    #[test]
    fn wire_names_round_trip() {
        round_trips(
            SessionStatus::ALL,
            SessionStatus::as_str,
            SessionStatus::parse,
        );
        round_trips(
            PaymentStatus::ALL,
            PaymentStatus::as_str,
            PaymentStatus::parse,
        );
        round_trips(FailureCode::ALL, FailureCode::as_str, FailureCode::parse);
        round_trips(OrderStatus::ALL, OrderStatus::as_str, OrderStatus::parse);
        round_trips(
            InvoiceStatus::ALL,
            InvoiceStatus::as_str,
            InvoiceStatus::parse,
        );
        round_trips(
            EntitlementStatus::ALL,
            EntitlementStatus::as_str,
            EntitlementStatus::parse,
        );
        round_trips(
            StoredMethodStatus::ALL,
            StoredMethodStatus::as_str,
            StoredMethodStatus::parse,
        );
        round_trips(
            SubscriptionStatus::ALL,
            SubscriptionStatus::as_str,
            SubscriptionStatus::parse,
        );
        round_trips(ChangeKind::ALL, ChangeKind::as_str, ChangeKind::parse);
        round_trips(
            JourneyStatus::ALL,
            JourneyStatus::as_str,
            JourneyStatus::parse,
        );
        round_trips(StepKind::ALL, StepKind::as_str, StepKind::parse);
        round_trips(PayResult::ALL, PayResult::as_str, PayResult::parse);
    }

    #[test]
    fn wire_names_are_the_documented_ones() {
        let names = |v: Vec<&'static str>| v.join(" ");
        assert_eq!(
            names(SessionStatus::ALL.iter().map(|s| s.as_str()).collect()),
            "open complete expired"
        );
        assert_eq!(
            names(PaymentStatus::ALL.iter().map(|s| s.as_str()).collect()),
            "succeeded failed requires_action canceled"
        );
        assert_eq!(
            names(FailureCode::ALL.iter().map(|s| s.as_str()).collect()),
            "card_declined insufficient_funds authentication_failed"
        );
        assert_eq!(
            names(OrderStatus::ALL.iter().map(|s| s.as_str()).collect()),
            "paid partially_refunded refunded"
        );
        assert_eq!(
            names(StepKind::ALL.iter().map(|s| s.as_str()).collect()),
            "session_created payment_attempted action_required payment_failed \
             payment_succeeded subscription_started"
        );
        assert_eq!(
            names(PayResult::ALL.iter().map(|s| s.as_str()).collect()),
            "retrieve_payment_response subscription_setup_action_required subscription_started"
        );
    }

    #[test]
    fn subscription_machine() {
        use SubscriptionStatus::*;
        let allowed = [
            (Incomplete, Active),
            (Active, PastDue),
            (PastDue, Active),
            (Trialing, Active),
            (Trialing, PastDue),
            (Incomplete, Canceled),
            (Active, Canceled),
            (PastDue, Canceled),
            (Trialing, Canceled),
        ];
        for from in SubscriptionStatus::ALL {
            for to in SubscriptionStatus::ALL {
                assert_eq!(
                    from.may_become(*to),
                    allowed.contains(&(*from, *to)),
                    "{from:?} -> {to:?}"
                );
            }
        }
        assert_eq!(Trialing.as_str(), "trialing");
    }

    #[test]
    fn session_expiry_boundary() {
        let exp = Timestamp::from_millis(1_000_000);
        let before = Timestamp::from_millis(999_999);
        assert_eq!(
            SessionStatus::Open.effective(exp, before),
            SessionStatus::Open
        );
        assert_eq!(
            SessionStatus::Open.effective(exp, exp),
            SessionStatus::Expired
        );
        assert_eq!(
            SessionStatus::Complete.effective(exp, exp.plus_seconds(SESSION_TTL_SECONDS)),
            SessionStatus::Complete
        );
    }

    #[test]
    fn pay_table() {
        assert_eq!(SessionStatus::Open.check_payable(), Ok(()));
        assert_eq!(
            SessionStatus::Complete
                .check_payable()
                .unwrap_err()
                .to_string(),
            "cannot pay a complete checkout session"
        );
        assert_eq!(
            SessionStatus::Expired.check_payable(),
            Err(StateError {
                resource: "checkout session",
                action: "pay",
                from: "expired"
            })
        );
    }

    #[test]
    fn journey_table() {
        assert_eq!(JourneyStatus::Open.effective(false), JourneyStatus::Open);
        assert_eq!(
            JourneyStatus::Open.effective(true),
            JourneyStatus::Abandoned
        );
        assert_eq!(
            JourneyStatus::Converted.effective(true),
            JourneyStatus::Converted
        );
        assert_eq!(
            JourneyStatus::Abandoned.effective(false),
            JourneyStatus::Abandoned
        );
    }

    proptest! {
        /// Expiry only ever moves an open session to expired, exactly from
        /// `expires_at` on, and is stable once reached.
        #[test]
        fn session_effective(
            s in prop::sample::select(SessionStatus::ALL),
            exp in any::<i64>(),
            now in any::<i64>(),
        ) {
            let (exp, now) = (Timestamp::from_millis(exp), Timestamp::from_millis(now));
            let e = s.effective(exp, now);
            let expected = if s == SessionStatus::Open && now >= exp { SessionStatus::Expired } else { s };
            prop_assert_eq!(e, expected);
            prop_assert_eq!(e.effective(exp, now), e);
            prop_assert_eq!(e.check_payable().is_ok(), e == SessionStatus::Open);
        }

        #[test]
        fn journey_effective_is_stable(
            s in prop::sample::select(JourneyStatus::ALL),
            expired in any::<bool>(),
        ) {
            let e = s.effective(expired);
            prop_assert_eq!(e.effective(expired), e);
            prop_assert_eq!(e != s, s == JourneyStatus::Open && expired);
        }
    }
}
