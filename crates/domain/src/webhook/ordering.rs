//! Order per key (contract 13.1): an event's `ordering_key` and `sequence`,
//! an endpoint's `ordering`, and the rule that decides when a delivery on
//! a `per_key` endpoint may start: every delivery of its key with a lower
//! sequence is settled (`may_start`). The store's release statement
//! (`store::dispatch::ordering`) is this rule in SQL, and a property test
//! there holds the two together.
//!
//! Pure: what the deliveries of a key are is given, never read.

use crate::principal::wire_enum;
use crate::webhook::DeliveryStatus;

wire_enum!(
    /// How an endpoint orders its deliveries: `none` (any order, the
    /// default) or `per_key` (each ordering key's deliveries one after
    /// another, in sequence).
    EndpointOrdering { None => "none", PerKey => "per_key" }
);

/// The most characters an ordering key has.
pub const MAX_KEY_CHARS: usize = 200;

/// An event's ordering key: 1 to 200 characters, no control character.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OrderingKey(String);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OrderingKeyError {
    #[error("ordering_key must not be empty")]
    Empty,
    #[error("ordering_key must be at most {MAX_KEY_CHARS} characters")]
    TooLong,
    #[error("ordering_key must not contain control characters")]
    Control,
}

impl OrderingKey {
    pub fn parse(text: &str) -> Result<OrderingKey, OrderingKeyError> {
        if text.is_empty() {
            return Err(OrderingKeyError::Empty);
        }
        if text.chars().count() > MAX_KEY_CHARS {
            return Err(OrderingKeyError::TooLong);
        }
        if text.chars().any(char::is_control) {
            return Err(OrderingKeyError::Control);
        }
        Ok(OrderingKey(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OrderingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A delivery of a key, as the rule sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub sequence: i64,
    pub status: DeliveryStatus,
    pub skipped: bool,
}

impl Standing {
    /// Whether this delivery keeps the later ones of its key waiting: it is
    /// open (`pending`, `held`), or it failed for good and was not skipped.
    /// Succeeded, or failed and skipped, it lets them go.
    pub fn blocks(&self) -> bool {
        blocks(self.status, self.skipped)
    }
}

/// `Standing::blocks` for a delivery's status and whether it was skipped.
pub fn blocks(status: DeliveryStatus, skipped: bool) -> bool {
    match status {
        DeliveryStatus::Pending | DeliveryStatus::Held => true,
        DeliveryStatus::Failed => !skipped,
        DeliveryStatus::Succeeded => false,
    }
}

/// Whether the delivery of `sequence` on a `per_key` endpoint may start,
/// given the other deliveries of its key on that endpoint and how far the
/// key's events were accepted without a gap (`accepted_through`): every
/// event before it was accepted, and none of their deliveries blocks.
pub fn may_start(sequence: i64, accepted_through: i64, others: &[Standing]) -> bool {
    sequence <= accepted_through && !others.iter().any(|o| o.sequence < sequence && o.blocks())
}

/// How far a key's events were accepted without a gap: from `through`,
/// along `accepted` (the sequences accepted beyond it, in any order).
pub fn accepted_through(through: i64, accepted: &[i64]) -> i64 {
    let mut sorted: Vec<i64> = accepted.iter().copied().filter(|s| *s > through).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut through = through;
    for s in sorted {
        if s != through + 1 {
            break;
        }
        through = s;
    }
    through
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_key_is_a_short_printable_text() {
        assert!(OrderingKey::parse("sub_AAAAAAAAAAAA").is_ok());
        assert_eq!(OrderingKey::parse(""), Err(OrderingKeyError::Empty));
        assert_eq!(
            OrderingKey::parse(&"é".repeat(201)),
            Err(OrderingKeyError::TooLong)
        );
        assert!(OrderingKey::parse(&"é".repeat(200)).is_ok());
        assert_eq!(OrderingKey::parse("a\nb"), Err(OrderingKeyError::Control));
    }

    #[test]
    fn only_open_or_unskipped_failed_deliveries_block() {
        for &status in DeliveryStatus::ALL {
            for skipped in [false, true] {
                let expected = !matches!(
                    (status, skipped),
                    (DeliveryStatus::Succeeded, _) | (DeliveryStatus::Failed, true)
                );
                assert_eq!(blocks(status, skipped), expected, "{status:?} {skipped}");
            }
        }
    }

    #[test]
    fn acceptance_stops_at_the_first_gap() {
        assert_eq!(accepted_through(0, &[]), 0);
        assert_eq!(accepted_through(0, &[2, 1, 4]), 2);
        assert_eq!(accepted_through(3, &[1, 2, 4, 5, 7]), 5);
    }

    fn standing() -> impl Strategy<Value = Standing> {
        (1i64..20, 0usize..4, any::<bool>()).prop_map(|(sequence, s, skipped)| Standing {
            sequence,
            status: DeliveryStatus::ALL[s],
            skipped,
        })
    }

    proptest! {
        /// Of a key's deliveries, those that may start are exactly the ones
        /// with no blocking delivery before them: at most the first open
        /// one's sequence, so two different sequences never start together
        /// unless every one before the later is settled.
        #[test]
        fn what_may_start_never_jumps_a_blocker(
            others in proptest::collection::vec(standing(), 0..12),
            sequence in 1i64..20,
            through in 0i64..25,
        ) {
            let start = may_start(sequence, through, &others);
            let first_blocker = others.iter().filter(|o| o.blocks()).map(|o| o.sequence).min();
            let model = sequence <= through && first_blocker.is_none_or(|b| b >= sequence);
            prop_assert_eq!(start, model);
        }
    }
}
