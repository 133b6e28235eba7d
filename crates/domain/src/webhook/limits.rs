//! Receiver protection (contract 13.2): an endpoint's limits
//! (`rate_limit`, `max_in_flight`) and its back-pressure (`Pressure`: the
//! rate a `429` or `503` halved and that climbs back, and the time a
//! `Retry-After` holds every attempt off).
//!
//! Rates are exact integers in thousandths of an attempt a second
//! (`milli`), so halving and a tenth's steps never round through floats.
//! Pure: the time is always an argument.

use crate::Timestamp;
use std::time::Duration;

/// Thousandths in one attempt a second.
pub const MILLI: u64 = 1000;

/// The least effective rate back-pressure leaves: one attempt a second.
pub const FLOOR_MILLI: u64 = MILLI;

/// How often the effective rate climbs back by a tenth of its base.
pub const STEP: Duration = Duration::from_secs(10);

/// The longest a `Retry-After` holds an endpoint's attempts off.
pub const MAX_HOLD_OFF: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("must be an integer from 1 to 10000")]
    RateLimit,
    #[error("must be an integer from 1 to 1000")]
    MaxInFlight,
}

/// Attempts a second an endpoint accepts: 1 to 10,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RateLimit(u32);

impl RateLimit {
    pub const MAX: u32 = 10_000;

    pub fn parse(n: i64) -> Result<RateLimit, LimitError> {
        match u32::try_from(n) {
            Ok(n @ 1..=Self::MAX) => Ok(RateLimit(n)),
            _ => Err(LimitError::RateLimit),
        }
    }

    pub fn per_second(self) -> u32 {
        self.0
    }

    pub fn milli(self) -> u64 {
        u64::from(self.0) * MILLI
    }
}

/// Attempts to one endpoint open at once: 1 to 1,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MaxInFlight(u32);

impl MaxInFlight {
    pub const MAX: u32 = 1_000;

    pub fn parse(n: i64) -> Result<MaxInFlight, LimitError> {
        match u32::try_from(n) {
            Ok(n @ 1..=Self::MAX) => Ok(MaxInFlight(n)),
            _ => Err(LimitError::MaxInFlight),
        }
    }

    pub fn get(self) -> u32 {
        self.0
    }
}

/// An endpoint's own limits. `max_in_flight: None` is the deployment's
/// default (`delivery.endpoint_max_in_flight`); `rate_limit: None` is no
/// rate limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndpointLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_in_flight: Option<MaxInFlight>,
}

impl EndpointLimits {
    /// Whether the endpoint set a limit of its own.
    pub fn is_set(&self) -> bool {
        self.rate_limit.is_some() || self.max_in_flight.is_some()
    }
}

/// All that protects an endpoint at a moment: its own limits, its
/// back-pressure and the `Retry-After` hold-off in force.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Protection {
    pub limits: EndpointLimits,
    pub pressure: Option<Pressure>,
    pub throttled_until: Option<Timestamp>,
}

impl Protection {
    /// Whether anything but the deployment's defaults limits the
    /// endpoint's attempts at `now`: its own limits, a pressure not yet
    /// recovered, or a hold-off. Such an endpoint's attempts start only
    /// where the limits are kept (the dispatcher's claim loop), never on
    /// the hand-over path that skips it.
    pub fn governs(&self, now: Timestamp) -> bool {
        self.limits.is_set()
            || self.pressure.is_some_and(|p| !p.recovered(now))
            || self.throttled(now).is_some()
    }

    /// The hold-off in force at `now`, if any.
    pub fn throttled(&self, now: Timestamp) -> Option<Timestamp> {
        self.throttled_until.filter(|t| *t > now)
    }

    /// The rate attempts may start at, at `now` (thousandths a second);
    /// `None` when nothing limits it.
    pub fn effective_rate_milli(&self, now: Timestamp) -> Option<u64> {
        effective_rate_milli(self.limits.rate_limit, self.pressure.as_ref(), now)
    }
}

/// Back-pressure after a `429` or `503`: the effective rate was halved to
/// `rate_milli` at `at`, and climbs back by a tenth of `base_milli` every
/// [`STEP`] until it is `base_milli` again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pressure {
    base_milli: u64,
    rate_milli: u64,
    at: Timestamp,
}

impl Pressure {
    /// Rebuilds a stored pressure; `None` when the values cannot be one
    /// (a rate of 0, or a halved rate above its base).
    pub fn from_parts(base_milli: u64, rate_milli: u64, at: Timestamp) -> Option<Pressure> {
        (base_milli >= FLOOR_MILLI && (FLOOR_MILLI..=base_milli).contains(&rate_milli)).then_some(
            Pressure {
                base_milli,
                rate_milli,
                at,
            },
        )
    }

    pub fn base_milli(&self) -> u64 {
        self.base_milli
    }

    pub fn rate_milli(&self) -> u64 {
        self.rate_milli
    }

    pub fn at(&self) -> Timestamp {
        self.at
    }

    /// The effective rate at `now`: the halved rate plus a tenth of the
    /// base for each whole [`STEP`] since, at most the base.
    pub fn effective_milli(&self, now: Timestamp) -> u64 {
        let since = now.millis().saturating_sub(self.at.millis()).max(0) as u64;
        let steps = since / STEP.as_millis() as u64;
        let climbed = (self.base_milli / 10).max(1).saturating_mul(steps);
        self.rate_milli.saturating_add(climbed).min(self.base_milli)
    }

    /// Whether the rate has climbed all the way back by `now`.
    pub fn recovered(&self, now: Timestamp) -> bool {
        self.effective_milli(now) >= self.base_milli
    }

    /// When it will have climbed all the way back.
    pub fn recovers_at(&self) -> Timestamp {
        let tenth = (self.base_milli / 10).max(1);
        let missing = self.base_milli - self.rate_milli;
        let steps = missing.div_ceil(tenth);
        self.at
            .plus_millis((steps * STEP.as_millis() as u64).min(i64::MAX as u64) as i64)
    }
}

/// What a `429` or `503` tells of its endpoint: the rate to halve from
/// when there is no pressure yet (`rate_limit`, or the rate the endpoint
/// was recently attempted at), the attempt's start and its `Retry-After`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushback {
    pub base_milli: u64,
    pub started_at: Timestamp,
    pub retry_after: Option<Duration>,
}

impl Pushback {
    /// The pressure after this answer, given the endpoint's pressure
    /// before it and `now`.
    ///
    /// An answer to an attempt that started before the last halving
    /// halves nothing more: attempts open together when an endpoint starts
    /// refusing were all started at the old rate, and one burst of refusals
    /// halves the rate once. A pressure that has fully recovered starts
    /// again from this answer's base.
    pub fn press(&self, before: Option<Pressure>, now: Timestamp) -> Pressure {
        match before {
            Some(p) if self.started_at < p.at => p,
            Some(p) if !p.recovered(now) => Pressure {
                base_milli: p.base_milli,
                rate_milli: (p.effective_milli(now) / 2).max(FLOOR_MILLI),
                at: now,
            },
            _ => {
                let base = self.base_milli.max(FLOOR_MILLI);
                Pressure {
                    base_milli: base,
                    rate_milli: (base / 2).max(FLOOR_MILLI),
                    at: now,
                }
            }
        }
    }

    /// Until when no attempt to the endpoint starts: `Retry-After` from
    /// `now`, capped at [`MAX_HOLD_OFF`], never earlier than a hold-off
    /// already in force.
    pub fn hold_off(&self, before: Option<Timestamp>, now: Timestamp) -> Option<Timestamp> {
        let asked = self
            .retry_after
            .map(|d| now.plus_millis(d.min(MAX_HOLD_OFF).as_millis() as i64));
        match (before.filter(|b| *b > now), asked) {
            (Some(b), Some(a)) => Some(b.max(a)),
            (b, a) => a.or(b),
        }
    }
}

/// Whether an answer status pushes back on its endpoint.
pub fn pushes_back(status: Option<u16>) -> bool {
    matches!(status, Some(429 | 503))
}

/// The rate an endpoint's attempts may start at, at `now`, in thousandths
/// a second: the lower of its rate limit and its pressure's effective
/// rate; `None` when neither limits it.
pub fn effective_rate_milli(
    rate_limit: Option<RateLimit>,
    pressure: Option<&Pressure>,
    now: Timestamp,
) -> Option<u64> {
    let pressed = pressure
        .filter(|p| !p.recovered(now))
        .map(|p| p.effective_milli(now));
    match (rate_limit.map(RateLimit::milli), pressed) {
        (Some(r), Some(p)) => Some(r.min(p)),
        (r, p) => r.or(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    fn push(base: u64, started: i64, retry: Option<u64>) -> Pushback {
        Pushback {
            base_milli: base,
            started_at: at(started),
            retry_after: retry.map(Duration::from_secs),
        }
    }

    #[test]
    fn limits_take_the_contracts_ranges() {
        assert!(RateLimit::parse(0).is_err());
        assert_eq!(RateLimit::parse(1).unwrap().per_second(), 1);
        assert_eq!(RateLimit::parse(10_000).unwrap().milli(), 10_000_000);
        assert!(RateLimit::parse(10_001).is_err());
        assert!(RateLimit::parse(-5).is_err());
        assert!(MaxInFlight::parse(0).is_err());
        assert_eq!(MaxInFlight::parse(1000).unwrap().get(), 1000);
        assert!(MaxInFlight::parse(1001).is_err());
    }

    #[test]
    fn a_refusal_halves_and_the_rate_climbs_back_a_tenth_every_ten_seconds() {
        let p = push(200_000, 0, None).press(None, at(1_000));
        assert_eq!(p.effective_milli(at(1_000)), 100_000);
        assert_eq!(p.effective_milli(at(10_999)), 100_000);
        assert_eq!(p.effective_milli(at(11_000)), 120_000);
        assert_eq!(p.effective_milli(at(51_000)), 200_000);
        assert!(p.recovered(at(51_000)));
        assert_eq!(p.recovers_at(), at(51_000));
        assert_eq!(
            p.effective_milli(at(500_000)),
            200_000,
            "never above its base"
        );
    }

    #[test]
    fn a_second_refusal_halves_the_current_rate_once_per_burst() {
        let first = push(200_000, 0, None).press(None, at(1_000));
        // Started before the halving: part of the same burst.
        assert_eq!(
            push(200_000, 500, None).press(Some(first), at(1_200)),
            first
        );
        // Started after it, 11 s on: 120/s halves to 60/s.
        let second = push(200_000, 2_000, None).press(Some(first), at(12_000));
        assert_eq!(second.effective_milli(at(12_000)), 60_000);
        assert_eq!(second.base_milli(), 200_000);
    }

    #[test]
    fn the_rate_never_falls_below_one_a_second() {
        let mut p = push(1_500, 0, None).press(None, at(0));
        for i in 1..20 {
            p = push(1_500, i * 100, None).press(Some(p), at(i * 100 + 1));
        }
        assert_eq!(p.effective_milli(p.at()), FLOOR_MILLI);
    }

    #[test]
    fn retry_after_holds_off_at_most_an_hour_and_never_shortens_a_hold() {
        let now = at(0);
        assert_eq!(push(1, 0, Some(30)).hold_off(None, now), Some(at(30_000)));
        assert_eq!(
            push(1, 0, Some(86_400)).hold_off(None, now),
            Some(at(3_600_000))
        );
        assert_eq!(
            push(1, 0, Some(5)).hold_off(Some(at(20_000)), now),
            Some(at(20_000))
        );
        assert_eq!(
            push(1, 0, None).hold_off(Some(at(20_000)), now),
            Some(at(20_000))
        );
        assert_eq!(
            push(1, 0, None).hold_off(Some(at(-1)), now),
            None,
            "a past hold"
        );
    }

    #[test]
    fn the_effective_rate_is_the_lower_of_limit_and_pressure() {
        let limit = RateLimit::parse(100).ok();
        assert_eq!(effective_rate_milli(None, None, at(0)), None);
        assert_eq!(effective_rate_milli(limit, None, at(0)), Some(100_000));
        let p = push(100_000, 0, None).press(None, at(0));
        assert_eq!(effective_rate_milli(limit, Some(&p), at(0)), Some(50_000));
        assert_eq!(effective_rate_milli(None, Some(&p), at(0)), Some(50_000));
        assert_eq!(
            effective_rate_milli(None, Some(&p), at(60_000)),
            None,
            "recovered"
        );
    }

    proptest! {
        #[test]
        fn pressure_stays_between_the_floor_and_its_base(
            base in 0u64..20_000_000,
            steps in proptest::collection::vec((0i64..30_000, any::<bool>()), 0..40),
        ) {
            let mut now = 0i64;
            let mut p: Option<Pressure> = None;
            for (gap, early) in steps {
                now += gap;
                let started = if early { now - gap - 1 } else { now };
                let next = push(base, started, None).press(p, at(now));
                prop_assert!(next.effective_milli(at(now)) >= FLOOR_MILLI);
                prop_assert!(next.effective_milli(at(now)) <= next.base_milli());
                if let Some(before) = p {
                    // A refusal never raises the rate.
                    prop_assert!(next.effective_milli(at(now)) <= before.effective_milli(at(now)).max(FLOOR_MILLI)
                        || before.recovered(at(now)));
                }
                prop_assert_eq!(
                    Pressure::from_parts(next.base_milli(), next.rate_milli(), next.at()),
                    Some(next)
                );
                // Monotone recovery, reaching the base at `recovers_at`.
                let later = next.effective_milli(at(now + 25_000));
                prop_assert!(later >= next.effective_milli(at(now)));
                prop_assert!(next.recovered(next.recovers_at()));
                p = Some(next);
            }
        }
    }
}
