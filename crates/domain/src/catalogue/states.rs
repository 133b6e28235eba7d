//! States of catalogue resources, the transitions allowed between them, and
//! a price's recurrence (its `type` and `interval` taken together).
//!
//! `archived` products and `retired` offers are reserved by the contract: no
//! transition here reaches them, but they parse so that stored rows and list
//! filters naming them stay valid.

use crate::principal::wire_enum;

/// A refused transition; its message names the state it was refused from,
/// e.g. "cannot publish a superseded price".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} a {from} {resource}")]
pub struct StateError {
    pub resource: &'static str,
    pub action: &'static str,
    pub from: &'static str,
}

wire_enum!(
    /// `Archived` is reserved: nothing reaches it in this version.
    ProductStatus { Draft => "draft", Published => "published", Archived => "archived" }
);

wire_enum!(
    /// A product has at most one `Published` price; publishing another
    /// supersedes it.
    PriceStatus { Draft => "draft", Published => "published", Superseded => "superseded" }
);

wire_enum!(
    /// `Retired` is reserved: an offer is always active in this version.
    OfferStatus { Active => "active", Retired => "retired" }
);

wire_enum!(ConfigStatus { Draft => "draft", Published => "published" });

wire_enum!(PriceType { OneTime => "one_time", Recurring => "recurring" });

wire_enum!(Interval { Month => "month", Year => "year" });

impl ProductStatus {
    pub fn publish(self) -> Result<ProductStatus, StateError> {
        match self {
            ProductStatus::Draft => Ok(ProductStatus::Published),
            from => Err(StateError {
                resource: "product",
                action: "publish",
                from: from.as_str(),
            }),
        }
    }
}

impl PriceStatus {
    pub fn publish(self) -> Result<PriceStatus, StateError> {
        match self {
            PriceStatus::Draft => Ok(PriceStatus::Published),
            from => Err(StateError {
                resource: "price",
                action: "publish",
                from: from.as_str(),
            }),
        }
    }

    /// Only the product's current price can be superseded; a draft was
    /// never sold, so it has nothing to hand over.
    pub fn supersede(self) -> Result<PriceStatus, StateError> {
        match self {
            PriceStatus::Published => Ok(PriceStatus::Superseded),
            from => Err(StateError {
                resource: "price",
                action: "supersede",
                from: from.as_str(),
            }),
        }
    }
}

impl ConfigStatus {
    /// Always allowed: publishing another version of a published config is
    /// how a rollback is done, so there is no refused cell.
    pub fn publish(self) -> ConfigStatus {
        ConfigStatus::Published
    }
}

/// A price's `type` and `interval` as one value, so that a recurring price
/// without an interval (or a one-time price with one) cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recurrence {
    OneTime,
    Recurring(Interval),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecurrenceError {
    #[error("must be one_time or recurring")]
    UnknownType,
    #[error("must be month or year")]
    UnknownInterval,
    #[error("is required for a recurring price")]
    IntervalRequired,
    #[error("must be absent or null for a one_time price")]
    IntervalNotAllowed,
}

impl RecurrenceError {
    /// The body field the error is about (`validation_failed` names it).
    pub fn field(&self) -> &'static str {
        match self {
            RecurrenceError::UnknownType => "type",
            _ => "interval",
        }
    }
}

impl Recurrence {
    /// Parses a price body's `type` and `interval`; `interval` is `None`
    /// when absent or `null` (the caller folds both into `None`).
    pub fn parse(price_type: &str, interval: Option<&str>) -> Result<Recurrence, RecurrenceError> {
        match PriceType::parse(price_type).ok_or(RecurrenceError::UnknownType)? {
            PriceType::OneTime => match interval {
                None => Ok(Recurrence::OneTime),
                Some(_) => Err(RecurrenceError::IntervalNotAllowed),
            },
            PriceType::Recurring => {
                let s = interval.ok_or(RecurrenceError::IntervalRequired)?;
                Interval::parse(s)
                    .map(Recurrence::Recurring)
                    .ok_or(RecurrenceError::UnknownInterval)
            }
        }
    }

    pub fn price_type(self) -> PriceType {
        match self {
            Recurrence::OneTime => PriceType::OneTime,
            Recurrence::Recurring(_) => PriceType::Recurring,
        }
    }

    pub fn interval(self) -> Option<Interval> {
        match self {
            Recurrence::OneTime => None,
            Recurrence::Recurring(i) => Some(i),
        }
    }

    pub fn is_recurring(self) -> bool {
        matches!(self, Recurrence::Recurring(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn product_publish_table() {
        assert_eq!(ProductStatus::Draft.publish(), Ok(ProductStatus::Published));
        for from in [ProductStatus::Published, ProductStatus::Archived] {
            let e = from.publish().unwrap_err();
            assert_eq!(
                e.to_string(),
                format!("cannot publish a {} product", from.as_str())
            );
        }
        assert_eq!(
            ProductStatus::Published.publish().unwrap_err().to_string(),
            "cannot publish a published product"
        );
    }

    #[test]
    fn price_publish_table() {
        assert_eq!(PriceStatus::Draft.publish(), Ok(PriceStatus::Published));
        assert_eq!(
            PriceStatus::Published.publish().unwrap_err().to_string(),
            "cannot publish a published price"
        );
        assert_eq!(
            PriceStatus::Superseded.publish().unwrap_err().to_string(),
            "cannot publish a superseded price"
        );
    }

    #[test]
    fn price_supersede_table() {
        assert_eq!(
            PriceStatus::Published.supersede(),
            Ok(PriceStatus::Superseded)
        );
        assert_eq!(
            PriceStatus::Draft.supersede().unwrap_err().to_string(),
            "cannot supersede a draft price"
        );
        assert_eq!(
            PriceStatus::Superseded.supersede().unwrap_err().to_string(),
            "cannot supersede a superseded price"
        );
    }

    #[test]
    fn config_publish_always_lands_published() {
        for s in ConfigStatus::ALL {
            assert_eq!(s.publish(), ConfigStatus::Published);
        }
    }

    #[test]
    fn wire_names_round_trip() {
        for s in ProductStatus::ALL {
            assert_eq!(ProductStatus::parse(s.as_str()), Some(*s));
        }
        for s in PriceStatus::ALL {
            assert_eq!(PriceStatus::parse(s.as_str()), Some(*s));
        }
        for s in OfferStatus::ALL {
            assert_eq!(OfferStatus::parse(s.as_str()), Some(*s));
        }
        for s in ConfigStatus::ALL {
            assert_eq!(ConfigStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(PriceType::parse("one_time"), Some(PriceType::OneTime));
        assert_eq!(Interval::parse("year"), Some(Interval::Year));
        assert_eq!(ProductStatus::parse("Draft"), None);
    }

    #[test]
    fn recurrence_parse_table() {
        use RecurrenceError::*;
        assert_eq!(Recurrence::parse("one_time", None), Ok(Recurrence::OneTime));
        assert_eq!(
            Recurrence::parse("recurring", Some("month")),
            Ok(Recurrence::Recurring(Interval::Month))
        );
        assert_eq!(
            Recurrence::parse("recurring", Some("year")),
            Ok(Recurrence::Recurring(Interval::Year))
        );
        assert_eq!(
            Recurrence::parse("one_time", Some("month")),
            Err(IntervalNotAllowed)
        );
        assert_eq!(
            Recurrence::parse("one_time", Some("week")),
            Err(IntervalNotAllowed)
        );
        assert_eq!(Recurrence::parse("recurring", None), Err(IntervalRequired));
        assert_eq!(
            Recurrence::parse("recurring", Some("week")),
            Err(UnknownInterval)
        );
        assert_eq!(Recurrence::parse("weekly", Some("month")), Err(UnknownType));
        assert_eq!(Recurrence::parse("", None), Err(UnknownType));
        assert_eq!(UnknownType.field(), "type");
        for e in [UnknownInterval, IntervalRequired, IntervalNotAllowed] {
            assert_eq!(e.field(), "interval");
        }
        assert_eq!(
            IntervalNotAllowed.to_string(),
            "must be absent or null for a one_time price"
        );
    }

    #[test]
    fn recurrence_accessors() {
        assert_eq!(Recurrence::OneTime.price_type(), PriceType::OneTime);
        assert_eq!(Recurrence::OneTime.interval(), None);
        assert!(!Recurrence::OneTime.is_recurring());
        let r = Recurrence::Recurring(Interval::Year);
        assert_eq!(r.price_type(), PriceType::Recurring);
        assert_eq!(r.interval(), Some(Interval::Year));
        assert!(r.is_recurring());
    }

    fn price_status() -> impl Strategy<Value = PriceStatus> {
        prop::sample::select(PriceStatus::ALL)
    }

    proptest! {
        /// Every cell of the price table: a refusal names its state, and an
        /// allowed move goes exactly one step along draft → published →
        /// superseded.
        #[test]
        fn price_cells(s in price_status(), supersede in any::<bool>()) {
            let (r, action) = if supersede { (s.supersede(), "supersede") } else { (s.publish(), "publish") };
            let allowed = matches!(
                (s, supersede),
                (PriceStatus::Draft, false) | (PriceStatus::Published, true)
            );
            match r {
                Ok(n) => {
                    prop_assert!(allowed);
                    let rank = |p: PriceStatus| PriceStatus::ALL.iter().position(|x| *x == p);
                    prop_assert_eq!(rank(n), rank(s).map(|i| i + 1));
                }
                Err(e) => {
                    prop_assert!(!allowed);
                    prop_assert_eq!(e, StateError { resource: "price", action, from: s.as_str() });
                    prop_assert_eq!(e.to_string(), format!("cannot {action} a {} price", s.as_str()));
                }
            }
        }

        /// Any walk of price actions ends superseded at most once, and
        /// nothing moves a superseded price again.
        #[test]
        fn price_walk(actions in proptest::collection::vec(any::<bool>(), 0..20)) {
            let mut s = PriceStatus::Draft;
            for supersede in actions {
                let next = if supersede { s.supersede() } else { s.publish() };
                if let Ok(n) = next {
                    prop_assert!(s != PriceStatus::Superseded);
                    s = n;
                }
            }
        }

        #[test]
        fn recurrence_round_trips(
            ty in prop::sample::select(vec!["one_time", "recurring", "weekly", ""]),
            iv in proptest::option::of(prop::sample::select(vec!["month", "year", "week", ""])),
        ) {
            if let Ok(r) = Recurrence::parse(ty, iv) {
                prop_assert_eq!(r.price_type().as_str(), ty);
                prop_assert_eq!(r.interval().map(Interval::as_str), iv);
                prop_assert_eq!(r.is_recurring(), r.interval().is_some());
            }
        }
    }
}
