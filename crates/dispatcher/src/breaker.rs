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

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Attempts in a row without an answer that open the circuit.
pub const TRIP_AFTER_UNANSWERED: u32 = 5;
/// Failed attempts in a row, answered or not, that open the circuit.
pub const TRIP_AFTER_FAILURES: u32 = 20;
/// How long an open circuit skips its endpoint.
pub const COOL_DOWN: Duration = Duration::from_secs(10);

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
        }
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
