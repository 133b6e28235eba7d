//! Timestamps: milliseconds since the Unix epoch, written as RFC 3339 UTC
//! with millisecond precision and a trailing `Z`; and the `Clock` the
//! service reads "now" from.

use chrono::{DateTime, SecondsFormat, Utc};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

impl Timestamp {
    pub fn now() -> Timestamp {
        Timestamp(Utc::now().timestamp_millis())
    }

    pub fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    pub fn plus_seconds(self, seconds: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(seconds.saturating_mul(1000)))
    }

    pub fn plus_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Parses an RFC 3339 timestamp with any offset.
    pub fn parse(s: &str) -> Option<Timestamp> {
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| Timestamp(t.timestamp_millis()))
    }

    pub fn to_rfc3339(self) -> String {
        DateTime::<Utc>::from_timestamp_millis(self.0)
            .unwrap_or_default()
            .to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// Where the service reads "now" for its rules (expiries, grace periods,
/// retention, signing): the wall clock, or the wall clock moved forward by
/// a [`ClockHand`] (a test's way to let hours pass at once). It never runs
/// backwards: a hand only adds.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    ahead: Option<Arc<AtomicI64>>,
}

/// Moves one `Clock` (and its clones) forward.
#[derive(Debug, Clone)]
pub struct ClockHand {
    ahead: Arc<AtomicI64>,
}

impl Clock {
    /// The wall clock.
    pub fn wall() -> Clock {
        Clock::default()
    }

    /// The wall clock, and the hand that moves it forward.
    pub fn with_hand() -> (Clock, ClockHand) {
        let ahead = Arc::new(AtomicI64::new(0));
        let hand = ClockHand {
            ahead: ahead.clone(),
        };
        (Clock { ahead: Some(ahead) }, hand)
    }

    pub fn now(&self) -> Timestamp {
        let wall = Timestamp::now();
        match &self.ahead {
            None => wall,
            Some(ahead) => wall.plus_millis(ahead.load(Ordering::Acquire)),
        }
    }
}

impl ClockHand {
    /// Every clone of its clock reads `by` later from now on.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.ahead
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                Some(a.saturating_add(ms))
            })
            .ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_with_millis_and_z() {
        let t = Timestamp::parse("2026-11-22T10:04:05.123+00:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-22T10:04:05.123Z");
        let t = Timestamp::parse("2026-11-22T11:04:05+01:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-22T10:04:05.000Z");
    }

    #[test]
    fn a_hand_moves_its_clock_and_its_clones_forward_only() {
        let (clock, hand) = Clock::with_hand();
        let other = clock.clone();
        let before = Clock::wall().now();
        hand.advance(Duration::from_secs(3600));
        let moved = other.now().millis() - before.millis();
        assert!((3_600_000..3_660_000).contains(&moved), "{moved}");
        assert!(Clock::wall().now() < clock.now());
    }
}
