//! Subscription periods: a period is one `interval` of the price, and ends
//! at the same instant one calendar month (or year) later in UTC; when that
//! day does not exist in the target month, it ends on the target month's
//! last day at the same time of day (contract 10.1, `docs/checkout.md`).
//!
//! Calendar arithmetic is done in UTC only, so a period never depends on a
//! time zone or daylight saving: every period is a whole number of days.
//! Callers that compute later periods should count from the subscription's
//! anchor with [`add_periods`], never chain [`period_end`]: chaining clamps
//! for good (Jan 31 → Feb 28 → Mar 28), counting does not (Jan 31 → Feb 28
//! → Mar 31).

use crate::catalogue::Interval;
use crate::time::Timestamp;
use chrono::{DateTime, Months, Utc};

/// The end of the period that starts at `start`.
pub fn period_end(start: Timestamp, interval: Interval) -> Timestamp {
    add_periods(start, interval, 1)
}

/// `start` moved `n` whole intervals forward, clamping the day to the
/// target month's last day when it does not exist there.
///
/// Beyond chrono's calendar (about year 262 000) a period never ends: the
/// answer saturates at the largest timestamp, so it is never before `start`.
pub fn add_periods(start: Timestamp, interval: Interval, n: u32) -> Timestamp {
    let per = match interval {
        Interval::Month => 1,
        Interval::Year => 12,
    };
    n.checked_mul(per)
        .and_then(|months| {
            DateTime::<Utc>::from_timestamp_millis(start.millis())?
                // chrono keeps the time of day and clamps the day of month
                // to the target month's last day: exactly the contract's rule.
                .checked_add_months(Months::new(months))
        })
        .map_or(Timestamp::from_millis(i64::MAX), |end| {
            Timestamp::from_millis(end.timestamp_millis())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, NaiveDate, Timelike};
    use proptest::prelude::*;

    const DAY_MS: i64 = 86_400_000;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn end(s: &str, i: Interval) -> String {
        period_end(at(s), i).to_rfc3339()
    }

    #[test]
    fn month_examples() {
        use Interval::Month;
        assert_eq!(
            end("2026-01-15T10:20:30.456Z", Month),
            "2026-02-15T10:20:30.456Z"
        );
        assert_eq!(
            end("2026-01-31T10:00:00.000Z", Month),
            "2026-02-28T10:00:00.000Z"
        );
        assert_eq!(
            end("2028-01-31T10:00:00.000Z", Month),
            "2028-02-29T10:00:00.000Z"
        );
        assert_eq!(
            end("2026-03-31T23:59:59.999Z", Month),
            "2026-04-30T23:59:59.999Z"
        );
        assert_eq!(
            end("2026-12-31T00:00:00.000Z", Month),
            "2027-01-31T00:00:00.000Z"
        );
        assert_eq!(
            end("2028-02-29T12:00:00.000Z", Month),
            "2028-03-29T12:00:00.000Z"
        );
        // Another time zone's date does not matter: 2026-01-31T23:30-01:00
        // is 1 February in UTC.
        assert_eq!(
            end("2026-01-31T23:30:00-01:00", Month),
            "2026-03-01T00:30:00.000Z"
        );
    }

    #[test]
    fn year_examples() {
        use Interval::Year;
        assert_eq!(
            end("2028-02-29T08:00:00.000Z", Year),
            "2029-02-28T08:00:00.000Z"
        );
        assert_eq!(
            end("2027-02-28T08:00:00.000Z", Year),
            "2028-02-28T08:00:00.000Z"
        );
        assert_eq!(
            end("2026-01-31T00:00:00.000Z", Year),
            "2027-01-31T00:00:00.000Z"
        );
    }

    #[test]
    fn counting_from_the_anchor_does_not_drift() {
        let anchor = at("2026-01-31T09:00:00Z");
        let ends: Vec<String> = (1..=3)
            .map(|n| add_periods(anchor, Interval::Month, n).to_rfc3339())
            .collect();
        assert_eq!(
            ends,
            [
                "2026-02-28T09:00:00.000Z",
                "2026-03-31T09:00:00.000Z",
                "2026-04-30T09:00:00.000Z"
            ]
        );
        assert_eq!(add_periods(anchor, Interval::Year, 0), anchor);
    }

    #[test]
    fn saturates_beyond_the_calendar() {
        let far = Timestamp::from_millis(i64::MAX - 1);
        assert_eq!(
            period_end(far, Interval::Year),
            Timestamp::from_millis(i64::MAX)
        );
        let t = at("2026-01-01T00:00:00Z");
        assert_eq!(
            add_periods(t, Interval::Year, u32::MAX),
            Timestamp::from_millis(i64::MAX)
        );
    }

    /// Any instant from 1970 to the end of 9000.
    fn start() -> impl Strategy<Value = Timestamp> {
        let last = NaiveDate::from_ymd_opt(9000, 12, 31)
            .unwrap()
            .and_hms_milli_opt(23, 59, 59, 999)
            .unwrap()
            .and_utc()
            .timestamp_millis();
        (0..=last).prop_map(Timestamp::from_millis)
    }

    fn utc(t: Timestamp) -> DateTime<Utc> {
        DateTime::<Utc>::from_timestamp_millis(t.millis()).unwrap()
    }

    fn last_day(year: i32, month: u32) -> u32 {
        let (y, m) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        NaiveDate::from_ymd_opt(y, m, 1)
            .unwrap()
            .pred_opt()
            .unwrap()
            .day()
    }

    proptest! {
        #[test]
        fn month_end_is_28_to_31_days_later(s in start()) {
            let e = period_end(s, Interval::Month);
            prop_assert!(e > s);
            let d = e.millis() - s.millis();
            prop_assert_eq!(d % DAY_MS, 0);
            prop_assert!((28 * DAY_MS..=31 * DAY_MS).contains(&d), "{} days", d / DAY_MS);
        }

        #[test]
        fn year_end_is_365_or_366_days_later(s in start()) {
            let e = period_end(s, Interval::Year);
            prop_assert!(e > s);
            let d = e.millis() - s.millis();
            prop_assert!(d == 365 * DAY_MS || d == 366 * DAY_MS, "{} days", d / DAY_MS);
        }

        /// The end is the next month's same day (or its last day), at the
        /// same time of day to the millisecond.
        #[test]
        fn month_end_is_the_calendar_rule(s in start()) {
            let (a, b) = (utc(s), utc(period_end(s, Interval::Month)));
            let (y, m) = if a.month() == 12 { (a.year() + 1, 1) } else { (a.year(), a.month() + 1) };
            prop_assert_eq!((b.year(), b.month()), (y, m));
            prop_assert_eq!(b.day(), a.day().min(last_day(y, m)));
            prop_assert_eq!(b.time(), a.time());
            prop_assert_eq!(b.nanosecond(), a.nanosecond());
        }

        #[test]
        fn a_year_is_twelve_months(s in start(), n in 0u32..50) {
            prop_assert_eq!(add_periods(s, Interval::Year, n), add_periods(s, Interval::Month, n * 12));
        }

        #[test]
        fn counted_periods_increase(s in start(), n in 0u32..200) {
            for i in [Interval::Month, Interval::Year] {
                prop_assert!(add_periods(s, i, n + 1) > add_periods(s, i, n));
            }
        }
    }
}
