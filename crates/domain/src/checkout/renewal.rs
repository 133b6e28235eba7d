//! Subscriptions over time (contract 12.4): what a subscription does at its
//! period's end, when a declined renewal is tried again (dunning), which
//! subscriptions may be canceled, and how far a test clock may advance.
//!
//! It only decides. Charging, writing the invoice and scheduling the next
//! piece of timed work belong to the caller (`commerce::renewals`, `commerce::test_clocks`), which
//! passes the time it runs at: the wall clock, or a test clock's time.

use super::period::add_periods;
use super::states::SubscriptionStatus;
use crate::catalogue::{Interval, StateError};
use crate::principal::wire_enum;
use crate::time::Timestamp;
use std::time::Duration;

/// The end of the period that follows the one ending at `current_end`, for
/// a subscription whose first period started at `anchor`. Periods are
/// counted from the anchor, never chained, so a Jan 31 start renews on
/// Feb 28 (29) and then on Mar 31.
pub fn next_period_end(anchor: Timestamp, interval: Interval, current_end: Timestamp) -> Timestamp {
    // Every period is at least 28 days (a month) long and at most 31 days
    // per month, so the count of whole periods since the anchor is at least
    // the span over the longest period: start the search there.
    let per_months: i64 = match interval {
        Interval::Month => 1,
        Interval::Year => 12,
    };
    let longest = 31 * 86_400_000 * per_months;
    let span = current_end.millis().saturating_sub(anchor.millis()).max(0);
    let mut n = u32::try_from(span / longest).unwrap_or(u32::MAX).max(1);
    loop {
        let end = add_periods(anchor, interval, n);
        if end > current_end || end.millis() == i64::MAX {
            return end;
        }
        n = n.saturating_add(1);
    }
}

/// What an `active` subscription does when its period ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtPeriodEnd {
    /// Charge the stored method for the next period.
    Renew,
    /// It was set to cancel at the period's end (`cancel_at_period_end`).
    Cancel,
}

impl SubscriptionStatus {
    /// What happens at the end of the current period (a trial's included);
    /// `None` when nothing does: a `past_due` subscription renews once its open invoice is paid
    /// (dunning decides), and an incomplete or canceled one never renews.
    pub fn at_period_end(self, cancel_at_period_end: bool) -> Option<AtPeriodEnd> {
        match self {
            SubscriptionStatus::Active | SubscriptionStatus::Trialing if cancel_at_period_end => {
                Some(AtPeriodEnd::Cancel)
            }
            // A trial's period ends at `trial_end`: the first period is
            // charged as a renewal (contract 14.3).
            SubscriptionStatus::Active | SubscriptionStatus::Trialing => Some(AtPeriodEnd::Renew),
            SubscriptionStatus::PastDue if cancel_at_period_end => Some(AtPeriodEnd::Cancel),
            SubscriptionStatus::Incomplete
            | SubscriptionStatus::PastDue
            | SubscriptionStatus::Canceled => None,
        }
    }

    /// Whether `cancelSubscription` may proceed: anything not yet canceled.
    pub fn check_cancel(self) -> Result<(), StateError> {
        match self {
            SubscriptionStatus::Canceled => Err(StateError {
                resource: "subscription",
                action: "cancel",
                from: self.as_str(),
            }),
            _ => Ok(()),
        }
    }
}

/// The default of `billing.dunning_schedule`.
pub const DEFAULT_DUNNING_SCHEDULE: &str = "1d,3d,5d";

/// When a declined renewal is charged again: each entry is a delay counted
/// from the declined renewal (its invoice's `issued_at`), so `1d,3d,5d`
/// retries on the first, third and fifth day after it. The schedule runs
/// out after its last entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DunningSchedule {
    delays: Vec<Duration>,
}

/// Why a dunning schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DunningScheduleError {
    #[error("must be a comma-separated list of durations such as 1d,3d,5d")]
    Malformed,
    #[error("each delay must be longer than the one before it, and longer than zero")]
    NotIncreasing,
}

impl DunningSchedule {
    /// Parses `1d,3d,5d`; an empty string is a schedule with no retry (a
    /// declined renewal cancels at once).
    pub fn parse(s: &str) -> Result<DunningSchedule, DunningScheduleError> {
        if s.trim().is_empty() {
            return Ok(DunningSchedule { delays: Vec::new() });
        }
        let delays = crate::duration::parse_list(s).ok_or(DunningScheduleError::Malformed)?;
        let increasing = delays
            .iter()
            .try_fold(Duration::ZERO, |prev, d| (*d > prev).then_some(*d))
            .is_some();
        if !increasing {
            return Err(DunningScheduleError::NotIncreasing);
        }
        Ok(DunningSchedule { delays })
    }

    /// When the invoice issued at `issued_at`, charged `attempts` times so
    /// far (the renewal itself is the first), is charged next; `None` when
    /// the schedule has run out.
    pub fn retry_at(&self, issued_at: Timestamp, attempts: u32) -> Option<Timestamp> {
        let index = usize::try_from(attempts.checked_sub(1)?).ok()?;
        let delay = self.delays.get(index)?;
        let ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        Some(Timestamp::from_millis(
            issued_at.millis().saturating_add(ms),
        ))
    }

    pub fn len(&self) -> usize {
        self.delays.len()
    }

    pub fn is_empty(&self) -> bool {
        self.delays.is_empty()
    }
}

impl Default for DunningSchedule {
    fn default() -> Self {
        DunningSchedule::parse(DEFAULT_DUNNING_SCHEDULE).expect("the default schedule parses")
    }
}

wire_enum!(
    /// A test clock is `Advancing` from an accepted advance until every
    /// piece of its timed work up to the new time has run.
    TestClockStatus { Ready => "ready", Advancing => "advancing" }
);

/// How far one advance may move a test clock: two years.
pub const MAX_ADVANCE_YEARS: u32 = 2;

/// The times a test clock may show: from the Unix epoch to the start of
/// the year 9000, so that every record made on it (an invoice numbered by
/// its year, a period years later) stays within what the service writes.
pub const CLOCK_TIMES: std::ops::Range<i64> = 0..221_845_392_000_000;

/// Why a clock's time or an advance was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdvanceError {
    #[error("must be between 1970-01-01 and 9000-01-01")]
    OutOfRange,
    #[error("must be later than the clock's frozen_time")]
    NotLater,
    #[error("must be at most two years after the clock's frozen_time")]
    TooFar,
}

/// Whether a clock may show `t` (`CLOCK_TIMES`).
pub fn check_clock_time(t: Timestamp) -> Result<(), AdvanceError> {
    if CLOCK_TIMES.contains(&t.millis()) {
        Ok(())
    } else {
        Err(AdvanceError::OutOfRange)
    }
}

/// Whether a clock at `current` may advance to `target`.
pub fn check_advance(current: Timestamp, target: Timestamp) -> Result<(), AdvanceError> {
    check_clock_time(target)?;
    if target <= current {
        return Err(AdvanceError::NotLater);
    }
    if target > add_periods(current, Interval::Year, MAX_ADVANCE_YEARS) {
        return Err(AdvanceError::TooFar);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    #[test]
    fn month_end_start_keeps_its_day() {
        let anchor = at("2026-01-31T09:00:00.000Z");
        let feb = next_period_end(anchor, Interval::Month, at("2026-01-31T09:00:00.000Z"));
        assert_eq!(feb.to_rfc3339(), "2026-02-28T09:00:00.000Z");
        let mar = next_period_end(anchor, Interval::Month, feb);
        assert_eq!(mar.to_rfc3339(), "2026-03-31T09:00:00.000Z");
        let apr = next_period_end(anchor, Interval::Month, mar);
        assert_eq!(apr.to_rfc3339(), "2026-04-30T09:00:00.000Z");
        let leap = at("2028-01-31T00:00:00.000Z");
        assert_eq!(
            next_period_end(leap, Interval::Month, leap).to_rfc3339(),
            "2028-02-29T00:00:00.000Z"
        );
        let yearly = at("2028-02-29T00:00:00.000Z");
        let y1 = next_period_end(yearly, Interval::Year, yearly);
        assert_eq!(y1.to_rfc3339(), "2029-02-28T00:00:00.000Z");
        assert_eq!(
            next_period_end(yearly, Interval::Year, y1).to_rfc3339(),
            "2030-02-28T00:00:00.000Z"
        );
    }

    proptest! {
        /// Renewing n times from the anchor lands where counting n periods
        /// from the anchor does, whatever the start.
        #[test]
        fn renewals_count_from_the_anchor(
            start in 0i64..4_102_444_800_000,
            n in 1u32..40,
            yearly: bool,
        ) {
            let interval = if yearly { Interval::Year } else { Interval::Month };
            let anchor = Timestamp::from_millis(start);
            let mut end = add_periods(anchor, interval, 1);
            for _ in 1..n {
                let next = next_period_end(anchor, interval, end);
                prop_assert!(next > end);
                end = next;
            }
            prop_assert_eq!(end, add_periods(anchor, interval, n));
        }
    }

    #[test]
    fn what_a_period_end_does() {
        use SubscriptionStatus::*;
        assert_eq!(Active.at_period_end(false), Some(AtPeriodEnd::Renew));
        assert_eq!(Active.at_period_end(true), Some(AtPeriodEnd::Cancel));
        assert_eq!(Trialing.at_period_end(false), Some(AtPeriodEnd::Renew));
        assert_eq!(Trialing.at_period_end(true), Some(AtPeriodEnd::Cancel));
        assert_eq!(PastDue.at_period_end(true), Some(AtPeriodEnd::Cancel));
        for s in [Incomplete, PastDue, Canceled] {
            assert_eq!(s.at_period_end(false), None);
        }
        assert_eq!(Canceled.at_period_end(true), None);
        assert!(Canceled.check_cancel().is_err());
        for s in [Incomplete, Active, PastDue, Trialing] {
            assert!(s.check_cancel().is_ok());
        }
    }

    #[test]
    fn dunning_counts_each_delay_from_the_declined_renewal() {
        let s = DunningSchedule::default();
        let issued = at("2026-03-01T00:00:00.000Z");
        assert_eq!(s.retry_at(issued, 0), None);
        let days = |n: u32| {
            s.retry_at(issued, n)
                .map(|t| (t.millis() - issued.millis()) / 86_400_000)
        };
        assert_eq!(days(1), Some(1));
        assert_eq!(days(2), Some(3));
        assert_eq!(days(3), Some(5));
        assert_eq!(days(4), None);
        assert_eq!(DunningSchedule::parse("").map(|s| s.len()), Ok(0));
        assert_eq!(
            DunningSchedule::parse("1d,1d"),
            Err(DunningScheduleError::NotIncreasing)
        );
        assert_eq!(
            DunningSchedule::parse("0s"),
            Err(DunningScheduleError::NotIncreasing)
        );
        assert_eq!(
            DunningSchedule::parse("1d,x"),
            Err(DunningScheduleError::Malformed)
        );
    }

    #[test]
    fn clock_times_stay_within_what_records_hold() {
        assert!(check_clock_time(at("1970-01-01T00:00:00.000Z")).is_ok());
        assert!(check_clock_time(at("8999-12-31T23:59:59.999Z")).is_ok());
        assert_eq!(
            check_clock_time(at("9000-01-01T00:00:00.000Z")),
            Err(AdvanceError::OutOfRange)
        );
        assert_eq!(
            check_clock_time(Timestamp::from_millis(-1)),
            Err(AdvanceError::OutOfRange)
        );
    }

    #[test]
    fn advances_are_later_and_within_two_years() {
        let now = at("2026-01-31T00:00:00.000Z");
        assert_eq!(check_advance(now, now), Err(AdvanceError::NotLater));
        assert_eq!(
            check_advance(now, now.plus_millis(-1)),
            Err(AdvanceError::NotLater)
        );
        assert!(check_advance(now, at("2028-01-31T00:00:00.000Z")).is_ok());
        assert_eq!(
            check_advance(now, at("2028-01-31T00:00:00.001Z")),
            Err(AdvanceError::TooFar)
        );
    }
}
