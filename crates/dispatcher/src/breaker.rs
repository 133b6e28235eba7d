//! Per-endpoint circuit breakers: when an endpoint looks down, it is
//! skipped for a cool-down, then tried with one attempt (half-open) before
//! it is trusted again. Skipped deliveries wait in the store; healthy
//! endpoints never queue behind a failing one.
//!
//! The rule: the circuit opens only on what means "down", never on errors
//! mixed with successes. An endpoint that answers 500 to a fifth of its
//! requests at random is up, and its other four fifths must go at full
//! speed (a run of five such errors in a row happens about once in 3,000
//! attempts, so "five failures in a row" would open it every few seconds
//! under load). Down is:
//!
//! - [`TRIP_AFTER_UNANSWERED`] attempts in a row that got no answer at all
//!   (connection refused or reset, time-out, TLS or DNS failure), or
//! - [`TRIP_AFTER_FAILURES`] failed attempts in a row of any kind (an
//!   endpoint that answers every request with an error), a run that a
//!   random failure rate of 20 % produces once in about 10^14 attempts.
//!
//! Any success ends the run.
//!
//! A delivery turned away by an open circuit is parked ([`Breakers::park_for`]):
//! it waits at least as long as the endpoint has been down so far (up to
//! [`PARK_AT_MOST`]), spread so that the deliveries turned away together
//! come back one by one. Each delivery is then looked at again only a few
//! times (its wait doubles each time), so turning deliveries away costs in
//! proportion to the rate they arrive, however long the outage lasts,
//! never in proportion to the pile waiting behind it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Attempts in a row without an answer that open the circuit.
pub const TRIP_AFTER_UNANSWERED: u32 = 5;
/// Failed attempts in a row, answered or not, that open the circuit.
pub const TRIP_AFTER_FAILURES: u32 = 20;
/// How long an open circuit skips its endpoint.
pub const COOL_DOWN: Duration = Duration::from_secs(10);
/// The longest a delivery turned away by an open circuit is parked: once
/// the endpoint answers again, a parked delivery waits at most this long
/// (shorter than the default retry schedule's gaps from the fourth attempt
/// on).
pub const PARK_AT_MOST: Duration = Duration::from_secs(3600);

/// How an attempt ended, as far as the breaker cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Succeeded,
    /// An answer that is not 2xx: the receiver is up and said no.
    Refused,
    /// No answer: no connection, a time-out, a broken exchange.
    Unanswered,
}

impl Outcome {
    /// The outcome of an attempt that got `status` (`None`: no answer).
    pub fn of(status: Option<u16>) -> Outcome {
        match status {
            Some(200..=299) => Outcome::Succeeded,
            Some(_) => Outcome::Refused,
            None => Outcome::Unanswered,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Failures since the last success, of any kind.
    failures: u32,
    /// Failures without an answer since the last answer or success.
    unanswered: u32,
    open_until: Option<Instant>,
    probing: bool,
    /// When the circuit first opened in this run of failures.
    down_since: Option<Instant>,
}

impl State {
    fn is_down(&self) -> bool {
        self.unanswered >= TRIP_AFTER_UNANSWERED || self.failures >= TRIP_AFTER_FAILURES
    }
}

#[derive(Debug, Default)]
pub struct Breakers {
    states: HashMap<String, State>,
}

/// Whether an attempt to an endpoint may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Closed,
    /// Skip until this instant.
    Open(Instant),
}

impl Breakers {
    pub fn gate(&mut self, endpoint: &str, now: Instant) -> Gate {
        let Some(s) = self.states.get_mut(endpoint) else {
            return Gate::Closed;
        };
        match s.open_until {
            Some(until) if now < until => Gate::Open(until),
            Some(_) if s.probing => Gate::Open(now + Duration::from_millis(500)),
            Some(_) => {
                // Half-open: let one attempt through.
                s.probing = true;
                Gate::Closed
            }
            None => Gate::Closed,
        }
    }

    /// True when nothing is known against the endpoint's circuit: neither
    /// open nor probing (the gate would let an attempt through without
    /// changing any state).
    pub fn is_closed(&self, endpoint: &str) -> bool {
        self.states
            .get(endpoint)
            .is_none_or(|s| s.open_until.is_none())
    }

    pub fn record(&mut self, endpoint: &str, outcome: Outcome, now: Instant) {
        if outcome == Outcome::Succeeded {
            self.states.remove(endpoint);
            return;
        }
        let s = self.states.entry(endpoint.to_owned()).or_default();
        s.failures += 1;
        s.unanswered = match outcome {
            Outcome::Unanswered => s.unanswered + 1,
            _ => 0,
        };
        let was_probing = std::mem::take(&mut s.probing);
        // A failed probe opens the circuit again, whatever its kind: the
        // endpoint was down a cool-down ago and still is not up.
        if s.is_down() || was_probing {
            s.open_until = Some(now + COOL_DOWN);
            s.down_since.get_or_insert(now);
        }
    }

    /// How long a delivery to `endpoint` that the gate turned away
    /// (`Gate::Open(until)`) waits before it is looked at again: the rest
    /// of the cool-down, or as long as the endpoint has been down so far
    /// if that is longer (at most [`PARK_AT_MOST`]), times `spread`
    /// (clamped to 1..=2; callers pass a random one).
    pub fn park_for(&self, endpoint: &str, until: Instant, now: Instant, spread: f64) -> Duration {
        let rest = until.saturating_duration_since(now);
        let down_for = self
            .states
            .get(endpoint)
            .and_then(|s| s.down_since)
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        rest.max(down_for.min(PARK_AT_MOST))
            .mul_f64(spread.clamp(1.0, 2.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unanswered_attempts_open_it_and_one_probe_goes_through() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER_UNANSWERED - 1 {
            b.record("e", Outcome::Unanswered, t0);
            assert_eq!(b.gate("e", t0), Gate::Closed);
        }
        b.record("e", Outcome::Unanswered, t0);
        assert!(matches!(b.gate("e", t0), Gate::Open(_)));
        let later = t0 + COOL_DOWN;
        assert_eq!(
            b.gate("e", later),
            Gate::Closed,
            "half-open lets one through"
        );
        assert!(matches!(b.gate("e", later), Gate::Open(_)), "only one");
        b.record("e", Outcome::Succeeded, later);
        assert_eq!(b.gate("e", later), Gate::Closed);
        assert_eq!(b.gate("other", t0), Gate::Closed);
    }

    #[test]
    fn a_failed_probe_opens_it_again() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER_UNANSWERED {
            b.record("e", Outcome::Unanswered, t0);
        }
        let later = t0 + COOL_DOWN;
        assert_eq!(b.gate("e", later), Gate::Closed);
        b.record("e", Outcome::Refused, later);
        assert!(matches!(b.gate("e", later), Gate::Open(_)));
    }

    #[test]
    fn error_answers_open_it_only_after_a_long_run() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER_FAILURES - 1 {
            b.record("e", Outcome::Refused, t0);
            assert_eq!(b.gate("e", t0), Gate::Closed);
        }
        b.record("e", Outcome::Refused, t0);
        assert!(matches!(b.gate("e", t0), Gate::Open(_)));
    }

    #[test]
    fn an_answer_breaks_a_run_of_unanswered_attempts() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for i in 0..12 {
            let outcome = if i % 4 == 3 {
                Outcome::Refused
            } else {
                Outcome::Unanswered
            };
            b.record("e", outcome, t0);
        }
        assert_eq!(b.gate("e", t0), Gate::Closed);
    }

    #[test]
    fn turned_away_deliveries_wait_as_long_as_the_outage_so_far() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER_UNANSWERED {
            b.record("e", Outcome::Unanswered, t0);
        }
        let Gate::Open(until) = b.gate("e", t0) else {
            panic!("open");
        };
        assert_eq!(b.park_for("e", until, t0, 1.0), COOL_DOWN, "the cool-down");
        assert_eq!(b.park_for("e", until, t0, 1.5), COOL_DOWN.mul_f64(1.5));
        // Failed probes keep it open; the outage grows, and so do the waits.
        let mut now = t0;
        for _ in 0..100 {
            now += COOL_DOWN;
            assert_eq!(b.gate("e", now), Gate::Closed, "a probe");
            b.record("e", Outcome::Unanswered, now);
        }
        let Gate::Open(until) = b.gate("e", now) else {
            panic!("open");
        };
        assert_eq!(b.park_for("e", until, now, 1.0), COOL_DOWN * 100);
        now += PARK_AT_MOST;
        assert_eq!(b.park_for("e", until, now, 2.0), PARK_AT_MOST * 2, "capped");
        // An answer ends the outage: nothing is parked any more.
        b.record("e", Outcome::Succeeded, now);
        assert_eq!(b.park_for("e", now, now, 1.0), Duration::ZERO);
        for _ in 0..TRIP_AFTER_UNANSWERED {
            b.record("e", Outcome::Unanswered, now);
        }
        let Gate::Open(until) = b.gate("e", now) else {
            panic!("open");
        };
        assert_eq!(b.park_for("e", until, now, 1.0), COOL_DOWN, "a new outage");
    }

    proptest! {
        /// Errors mixed with successes never open the circuit: between two
        /// successes there are fewer failures than a run that trips.
        #[test]
        fn errors_mixed_with_successes_never_open_it(
            runs in proptest::collection::vec(0..TRIP_AFTER_FAILURES, 1..50),
        ) {
            let mut b = Breakers::default();
            let t0 = Instant::now();
            for run in runs {
                for _ in 0..run {
                    b.record("e", Outcome::Refused, t0);
                    prop_assert_eq!(b.gate("e", t0), Gate::Closed);
                }
                b.record("e", Outcome::Succeeded, t0);
            }
        }
    }
}
