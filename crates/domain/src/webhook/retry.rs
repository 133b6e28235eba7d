//! The retry schedule of deliveries: the delay before each attempt, its
//! jitter, and the `Retry-After` a receiver may ask for (contract section 9,
//! "Deliveries and attempts").

use std::time::Duration;

/// The contract's default `delivery.retry_schedule`.
pub const DEFAULT_SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

/// The longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// Delays before each attempt of a generation; never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

impl RetrySchedule {
    /// Parses `"0s,5s,5m,..."` (see [`crate::duration::parse_list`]); `None`
    /// when malformed or empty.
    pub fn parse(s: &str) -> Option<Self> {
        let delays = crate::duration::parse_list(s)?;
        (!delays.is_empty()).then_some(RetrySchedule(delays))
    }

    /// How many attempts a generation gets.
    pub fn attempts(&self) -> usize {
        self.0.len()
    }

    /// Delay before attempt `attempt_number` (1-based): for the first, from
    /// the delivery's creation; for later ones, from the previous attempt.
    /// `None` when the schedule is exhausted (or for 0).
    pub fn delay_before(&self, attempt_number: u32) -> Option<Duration> {
        let i = usize::try_from(attempt_number).ok()?.checked_sub(1)?;
        self.0.get(i).copied()
    }

    /// `delay` with ±20 % jitter: `unit` in [0, 1), supplied by the caller,
    /// maps linearly to [-20 %, +20 %]. Out-of-range units are clamped; NaN
    /// means no jitter.
    pub fn jittered(delay: Duration, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.5
        } else {
            unit.clamp(0.0, 1.0)
        };
        let nanos = delay.as_nanos();
        let lo = nanos * 8 / 10;
        let hi = nanos * 12 / 10;
        let scaled = (nanos as f64 * (0.8 + 0.4 * unit)).round();
        let jittered = if scaled.is_finite() && scaled >= 0.0 {
            (scaled as u128).clamp(lo, hi)
        } else {
            nanos
        };
        from_nanos(jittered)
    }
}

fn from_nanos(n: u128) -> Duration {
    let secs = u64::try_from(n / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(secs, (n % 1_000_000_000) as u32)
}

/// The delay a `Retry-After` header asks for, capped at 24 h. Only the
/// delay-seconds form is understood (an HTTP date gives `None`).
pub fn retry_after(header: &str) -> Option<Duration> {
    let s = header.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = s.parse::<u64>().unwrap_or(u64::MAX);
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn default_schedule() {
        let s = RetrySchedule::parse(DEFAULT_SCHEDULE).unwrap();
        assert_eq!(s.attempts(), 8);
        assert_eq!(s.delay_before(1), Some(Duration::ZERO));
        assert_eq!(s.delay_before(3), Some(Duration::from_secs(300)));
        assert_eq!(s.delay_before(8), Some(Duration::from_secs(36_000)));
        assert_eq!(s.delay_before(9), None);
        assert_eq!(s.delay_before(0), None);
        for bad in ["", ",", "5s,", "5x", "5s;10s"] {
            assert_eq!(RetrySchedule::parse(bad), None, "{bad}");
        }
        assert_eq!(
            RetrySchedule::parse(" 1s , 2s ").map(|s| s.attempts()),
            Some(2)
        );
    }

    #[test]
    fn jitter_bounds() {
        let d = Duration::from_secs(100);
        assert_eq!(RetrySchedule::jittered(d, 0.0), Duration::from_secs(80));
        assert_eq!(RetrySchedule::jittered(d, 0.5), d);
        assert_eq!(RetrySchedule::jittered(d, 1.0), Duration::from_secs(120));
        assert_eq!(RetrySchedule::jittered(d, f64::NAN), d);
        assert_eq!(RetrySchedule::jittered(d, -3.0), Duration::from_secs(80));
        assert_eq!(RetrySchedule::jittered(Duration::ZERO, 0.9), Duration::ZERO);
        let max = RetrySchedule::jittered(Duration::MAX, 0.99);
        assert!(max >= Duration::MAX.mul_f64(0.79));
    }

    #[test]
    fn retry_after_values() {
        assert_eq!(retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(retry_after("999999"), Some(MAX_RETRY_AFTER));
        assert_eq!(
            retry_after("99999999999999999999999"),
            Some(MAX_RETRY_AFTER)
        );
        for bad in ["", "-1", "1.5", "+3", "Wed, 21 Oct 2015 07:28:00 GMT"] {
            assert_eq!(retry_after(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn jitter_stays_within_twenty_percent(ms in 0u64..10_000_000_000, unit in 0.0f64..1.0) {
            let d = Duration::from_millis(ms);
            let j = RetrySchedule::jittered(d, unit);
            prop_assert!(j.as_nanos() * 10 >= d.as_nanos() * 8);
            prop_assert!(j.as_nanos() * 10 <= d.as_nanos() * 12);
        }

        #[test]
        fn jitter_is_monotonic_in_unit(ms in 1u64..1_000_000, a in 0.0f64..1.0, b in 0.0f64..1.0) {
            let d = Duration::from_millis(ms);
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(RetrySchedule::jittered(d, lo) <= RetrySchedule::jittered(d, hi));
        }
    }
}
