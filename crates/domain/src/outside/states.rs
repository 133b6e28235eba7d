//! Wire states of the resources other systems own: disputes, payouts and
//! participations, and a dispute's evidence deadline.
//!
//! There are no transition functions here on purpose: these resources
//! change only when their owner says so, and the service records what it is
//! told (an event older than the last applied one is skipped by the intake,
//! by `occurred_at`, not by any state order).

use crate::principal::wire_enum;
use crate::time::Timestamp;

/// Days a merchant has to answer a dispute: `evidence_due_at` = opened + 7
/// days (contract section 10).
pub const EVIDENCE_DAYS: i64 = 7;

wire_enum!(DisputeKind { Chargeback => "chargeback", Inquiry => "inquiry" });

wire_enum!(
    DisputeStatus {
        NeedsResponse => "needs_response",
        UnderReview => "under_review",
        Won => "won",
        Lost => "lost",
    }
);

wire_enum!(
    PayoutStatus {
        Pending => "pending",
        InTransit => "in_transit",
        Paid => "paid",
        Failed => "failed",
        Canceled => "canceled",
    }
);

wire_enum!(
    ParticipationStatus {
        Invited => "invited",
        Accepted => "accepted",
        Declined => "declined",
        Revoked => "revoked",
    }
);

impl DisputeStatus {
    /// An open dispute blocks refunds of its payment and cancels the
    /// payment's scheduled ones; `won` and `lost` are closed.
    pub fn is_open(self) -> bool {
        matches!(
            self,
            DisputeStatus::NeedsResponse | DisputeStatus::UnderReview
        )
    }
}

/// When a dispute's evidence is due: opened + [`EVIDENCE_DAYS`].
pub fn evidence_due_at(opened_at: Timestamp) -> Timestamp {
    opened_at.plus_seconds(EVIDENCE_DAYS * 86_400)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> String {
        all.iter().map(|s| as_str(*s)).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn wire_names_are_the_documented_ones() {
        assert_eq!(
            names(DisputeKind::ALL, DisputeKind::as_str),
            "chargeback inquiry"
        );
        assert_eq!(
            names(DisputeStatus::ALL, DisputeStatus::as_str),
            "needs_response under_review won lost"
        );
        assert_eq!(
            names(PayoutStatus::ALL, PayoutStatus::as_str),
            "pending in_transit paid failed canceled"
        );
        assert_eq!(
            names(ParticipationStatus::ALL, ParticipationStatus::as_str),
            "invited accepted declined revoked"
        );
    }

    #[test]
    fn wire_names_round_trip() {
        for s in DisputeKind::ALL {
            assert_eq!(DisputeKind::parse(s.as_str()), Some(*s));
        }
        for s in DisputeStatus::ALL {
            assert_eq!(DisputeStatus::parse(s.as_str()), Some(*s));
        }
        for s in PayoutStatus::ALL {
            assert_eq!(PayoutStatus::parse(s.as_str()), Some(*s));
        }
        for s in ParticipationStatus::ALL {
            assert_eq!(ParticipationStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(DisputeStatus::parse("Won"), None);
        assert_eq!(PayoutStatus::parse("in-transit"), None);
    }

    #[test]
    fn open_disputes() {
        let open: Vec<_> = DisputeStatus::ALL
            .iter()
            .filter(|s| s.is_open())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(open, ["needs_response", "under_review"]);
    }

    #[test]
    fn evidence_deadline() {
        let opened = Timestamp::parse("2026-11-22T10:04:05.123Z").unwrap();
        assert_eq!(
            evidence_due_at(opened).to_rfc3339(),
            "2026-11-29T10:04:05.123Z"
        );
    }

    proptest! {
        #[test]
        fn evidence_is_seven_days_later(ms in -1_000_000_000_000_000i64..1_000_000_000_000_000) {
            let t = Timestamp::from_millis(ms);
            prop_assert_eq!(evidence_due_at(t).millis() - ms, 7 * 86_400_000);
        }
    }
}
