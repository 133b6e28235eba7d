//! Wire states of a refund and the transitions allowed between them, its
//! reason, scope and access effect, and the window a `scheduled_at` must
//! fall in.
//!
//! Lifecycle: `scheduled` (until `scheduled_at`) → `pending` → `succeeded` |
//! `failed`, and `scheduled` → `canceled` (a dispute opening on the
//! payment). Once a refund has left `scheduled` it has been handed to the
//! processor, so nothing can cancel it any more.

use crate::catalogue::StateError;
use crate::principal::wire_enum;
use crate::time::Timestamp;

/// How far ahead a refund may be scheduled (contract 10.1).
pub const MAX_SCHEDULE_DAYS: i64 = 90;

const DAY_SECONDS: i64 = 86_400;

wire_enum!(
    RefundReason {
        RequestedByCustomer => "requested_by_customer",
        Duplicate => "duplicate",
        Fraudulent => "fraudulent",
        Other => "other",
    }
);

wire_enum!(
    RefundStatus {
        Scheduled => "scheduled",
        Pending => "pending",
        Succeeded => "succeeded",
        Failed => "failed",
        Canceled => "canceled",
    }
);

wire_enum!(
    /// What a succeeded refund does to the order's entitlements: `Revoke`
    /// revokes each of them, `Retain` leaves the buyer's access alone.
    AccessEffect { Revoke => "revoke", Retain => "retain" }
);

wire_enum!(
    /// Derived, never chosen: `Full` when the refund covers the payment's
    /// whole captured amount (see [`crate::refunds::amounts::scope`]).
    RefundScope { Full => "full", Partial => "partial" }
);

fn refused(action: &'static str, from: RefundStatus) -> StateError {
    StateError {
        resource: "refund",
        action,
        from: from.as_str(),
    }
}

impl RefundStatus {
    /// The status a new refund starts in: scheduled when it names a
    /// `scheduled_at`, else pending at once.
    pub fn initial(scheduled_at: Option<Timestamp>) -> RefundStatus {
        match scheduled_at {
            Some(_) => RefundStatus::Scheduled,
            None => RefundStatus::Pending,
        }
    }

    /// `scheduled_at` has come: the refund goes to the processor.
    pub fn start(self) -> Result<RefundStatus, StateError> {
        match self {
            RefundStatus::Scheduled => Ok(RefundStatus::Pending),
            from => Err(refused("start", from)),
        }
    }

    /// The processor's answer to a pending refund.
    pub fn settle(self, ok: bool) -> Result<RefundStatus, StateError> {
        match self {
            RefundStatus::Pending if ok => Ok(RefundStatus::Succeeded),
            RefundStatus::Pending => Ok(RefundStatus::Failed),
            from => Err(refused("settle", from)),
        }
    }

    /// Only a scheduled refund can be canceled: a pending one is already
    /// with the processor.
    pub fn cancel(self) -> Result<RefundStatus, StateError> {
        match self {
            RefundStatus::Scheduled => Ok(RefundStatus::Canceled),
            from => Err(refused("cancel", from)),
        }
    }

    /// Whether the refund's amount counts against the payment's refundable
    /// remainder. A scheduled or pending refund reserves its amount so that
    /// two refunds can never promise the same money; failed and canceled
    /// ones give it back.
    pub fn holds_amount(self) -> bool {
        matches!(
            self,
            RefundStatus::Scheduled | RefundStatus::Pending | RefundStatus::Succeeded
        )
    }

    /// The wire `cancelable` flag.
    pub fn cancelable(self) -> bool {
        self == RefundStatus::Scheduled
    }

    /// Whether no transition leaves this status.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            RefundStatus::Succeeded | RefundStatus::Failed | RefundStatus::Canceled
        )
    }
}

/// Why a `scheduled_at` was refused (`validation_failed` on
/// `scheduled_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("must be in the future")]
    Past,
    #[error("must be at most 90 days ahead")]
    TooFar,
}

/// Checks a refund's `scheduled_at` against `now`: strictly later (a refund
/// due now is simply not scheduled), and no later than 90 days from now,
/// that instant included.
pub fn check_schedule(scheduled_at: Timestamp, now: Timestamp) -> Result<(), ScheduleError> {
    if scheduled_at <= now {
        Err(ScheduleError::Past)
    } else if scheduled_at > now.plus_seconds(MAX_SCHEDULE_DAYS * DAY_SECONDS) {
        Err(ScheduleError::TooFar)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use RefundStatus::*;

    fn names<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> String {
        all.iter().map(|s| as_str(*s)).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn wire_names_are_the_documented_ones() {
        assert_eq!(
            names(RefundReason::ALL, RefundReason::as_str),
            "requested_by_customer duplicate fraudulent other"
        );
        assert_eq!(
            names(RefundStatus::ALL, RefundStatus::as_str),
            "scheduled pending succeeded failed canceled"
        );
        assert_eq!(
            names(AccessEffect::ALL, AccessEffect::as_str),
            "revoke retain"
        );
        assert_eq!(names(RefundScope::ALL, RefundScope::as_str), "full partial");
        for s in RefundStatus::ALL {
            assert_eq!(RefundStatus::parse(s.as_str()), Some(*s));
        }
        for r in RefundReason::ALL {
            assert_eq!(RefundReason::parse(r.as_str()), Some(*r));
        }
        assert_eq!(AccessEffect::parse("revoke"), Some(AccessEffect::Revoke));
        assert_eq!(RefundScope::parse("partial"), Some(RefundScope::Partial));
        assert_eq!(RefundReason::parse("Duplicate"), None);
        assert_eq!(RefundStatus::parse(""), None);
    }

    #[test]
    fn transition_table() {
        assert_eq!(Scheduled.start(), Ok(Pending));
        assert_eq!(Pending.settle(true), Ok(Succeeded));
        assert_eq!(Pending.settle(false), Ok(Failed));
        assert_eq!(Scheduled.cancel(), Ok(Canceled));
        assert_eq!(
            Pending.cancel().unwrap_err().to_string(),
            "cannot cancel a pending refund"
        );
        assert_eq!(
            Scheduled.settle(true),
            Err(StateError {
                resource: "refund",
                action: "settle",
                from: "scheduled"
            })
        );
        assert_eq!(
            Succeeded.start().unwrap_err().to_string(),
            "cannot start a succeeded refund"
        );
    }

    #[test]
    fn flags() {
        let holding: Vec<_> = RefundStatus::ALL
            .iter()
            .filter(|s| s.holds_amount())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(holding, ["scheduled", "pending", "succeeded"]);
        let cancelable: Vec<_> = RefundStatus::ALL
            .iter()
            .filter(|s| s.cancelable())
            .collect();
        assert_eq!(cancelable, [&Scheduled]);
        assert_eq!(RefundStatus::initial(None), Pending);
        assert_eq!(
            RefundStatus::initial(Some(Timestamp::from_millis(1))),
            Scheduled
        );
    }

    #[test]
    fn schedule_bounds() {
        let now = Timestamp::from_millis(1_000_000);
        let limit = now.plus_seconds(90 * 86_400);
        assert_eq!(check_schedule(now, now), Err(ScheduleError::Past));
        assert_eq!(
            check_schedule(now.plus_millis(-1), now),
            Err(ScheduleError::Past)
        );
        assert_eq!(check_schedule(now.plus_millis(1), now), Ok(()));
        assert_eq!(check_schedule(limit, now), Ok(()));
        assert_eq!(
            check_schedule(limit.plus_millis(1), now),
            Err(ScheduleError::TooFar)
        );
        assert_eq!(ScheduleError::Past.to_string(), "must be in the future");
        assert_eq!(
            ScheduleError::TooFar.to_string(),
            "must be at most 90 days ahead"
        );
    }

    #[derive(Debug, Clone, Copy)]
    enum Action {
        Start,
        Settle(bool),
        Cancel,
    }

    fn action() -> impl Strategy<Value = Action> {
        prop_oneof![
            Just(Action::Start),
            any::<bool>().prop_map(Action::Settle),
            Just(Action::Cancel),
        ]
    }

    proptest! {
        /// Every cell: an allowed move is one of the four arrows of the
        /// lifecycle; a refusal names the refund, the action and the state.
        #[test]
        fn cells(s in prop::sample::select(RefundStatus::ALL), a in action()) {
            let (r, name) = match a {
                Action::Start => (s.start(), "start"),
                Action::Settle(ok) => (s.settle(ok), "settle"),
                Action::Cancel => (s.cancel(), "cancel"),
            };
            let expected = match (s, a) {
                (Scheduled, Action::Start) => Some(Pending),
                (Pending, Action::Settle(true)) => Some(Succeeded),
                (Pending, Action::Settle(false)) => Some(Failed),
                (Scheduled, Action::Cancel) => Some(Canceled),
                _ => None,
            };
            match (r, expected) {
                (Ok(n), Some(e)) => prop_assert_eq!(n, e),
                (Err(e), None) => {
                    prop_assert_eq!(e, StateError { resource: "refund", action: name, from: s.as_str() });
                }
                (r, e) => prop_assert!(false, "{:?} {:?}: got {:?}, expected {:?}", s, a, r, e),
            }
        }

        /// Any walk makes at most two moves, and a final status never
        /// moves again; a refund that stops holding its amount never holds
        /// it again.
        #[test]
        fn walks(scheduled in any::<bool>(), actions in prop::collection::vec(action(), 0..12)) {
            let mut s = RefundStatus::initial(scheduled.then(|| Timestamp::from_millis(0)));
            let mut moves = 0;
            let mut released = false;
            for a in actions {
                let next = match a {
                    Action::Start => s.start(),
                    Action::Settle(ok) => s.settle(ok),
                    Action::Cancel => s.cancel(),
                };
                if let Ok(n) = next {
                    prop_assert!(!s.is_final());
                    moves += 1;
                    s = n;
                }
                released |= !s.holds_amount();
                prop_assert!(!(released && s.holds_amount()));
                prop_assert_eq!(s.cancelable(), s == Scheduled);
            }
            prop_assert!(moves <= 2);
        }

        #[test]
        fn schedule_window(now in -1_000_000_000_000i64..1_000_000_000_000, delta in -10_000_000_000i64..10_000_000_000) {
            let now = Timestamp::from_millis(now);
            let at = now.plus_millis(delta);
            let r = check_schedule(at, now);
            prop_assert_eq!(r.is_ok(), delta > 0 && delta <= MAX_SCHEDULE_DAYS * 86_400_000);
            prop_assert_eq!(r == Err(ScheduleError::Past), delta <= 0);
        }
    }
}
