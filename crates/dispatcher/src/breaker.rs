//! Per-endpoint circuit breakers: when an endpoint looks down, it is
//! skipped for a cool-down, then tried with one attempt (half-open) before
//! it is trusted again. Skipped deliveries wait in the store; healthy
//! endpoints never queue behind a failing one.
//!
//! The rule: the circuit opens only on silence, never on answers. An
//! attempt that gets no answer at all (connection refused or reset,
//! time-out, TLS or DNS failure) may hold a slot for the whole time-out and
//! tells the receiver nothing; [`TRIP_AFTER_UNANSWERED`] of them in a row
//! mean the endpoint is down. An endpoint that answers, even 500 to every
//! request, is up: its attempts are quick, the receiver sees them, and its
//! deliveries follow their retry schedule to `succeeded` or `failed` as
//! the contract says, each attempt recorded (a slow answer is the slot
//! reserve's business, `handoff::Slots`, not the breaker's). So any answer
//! ends a run of silence, and an answered probe closes the circuit.
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
    /// Attempts without an answer since the last answer.
    unanswered: u32,
    open_until: Option<Instant>,
    probing: bool,
    /// When the circuit first opened in this run of silence.
    down_since: Option<Instant>,
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
        if outcome != Outcome::Unanswered {
            // An answer: the endpoint is up.
            self.states.remove(endpoint);
            return;
        }
        let s = self.states.entry(endpoint.to_owned()).or_default();
        s.unanswered += 1;
        let was_probing = std::mem::take(&mut s.probing);
        // A probe without an answer opens the circuit again at once.
        if s.unanswered >= TRIP_AFTER_UNANSWERED || was_probing {
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
    fn a_silent_probe_opens_it_again_and_an_answered_one_closes_it() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER_UNANSWERED {
            b.record("e", Outcome::Unanswered, t0);
        }
        let later = t0 + COOL_DOWN;
        assert_eq!(b.gate("e", later), Gate::Closed);
        b.record("e", Outcome::Unanswered, later);
        assert!(matches!(b.gate("e", later), Gate::Open(_)));
        let later = later + COOL_DOWN;
        assert_eq!(b.gate("e", later), Gate::Closed, "the next probe");
        b.record("e", Outcome::Refused, later);
        assert_eq!(b.gate("e", later), Gate::Closed, "a 500 is an answer");
        assert!(b.is_closed("e"));
    }

    #[test]
    fn error_answers_never_open_it() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..10_000 {
            b.record("e", Outcome::Refused, t0);
            assert_eq!(b.gate("e", t0), Gate::Closed);
        }
        assert!(b.is_closed("e"));
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
        /// Only a run of silence opens the circuit: attempts of any
        /// outcomes open it exactly when the last ones are
        /// `TRIP_AFTER_UNANSWERED` unanswered in a row.
        #[test]
        fn only_a_run_of_silence_opens_it(
            outcomes in proptest::collection::vec(0..3u8, 1..200),
        ) {
            let mut b = Breakers::default();
            let t0 = Instant::now();
            let mut silent = 0;
            for o in outcomes {
                let outcome = match o {
                    0 => Outcome::Succeeded,
                    1 => Outcome::Refused,
                    _ => Outcome::Unanswered,
                };
                b.record("e", outcome, t0);
                silent = if outcome == Outcome::Unanswered { silent + 1 } else { 0 };
                prop_assert_eq!(
                    b.is_closed("e"),
                    silent < TRIP_AFTER_UNANSWERED,
                    "after {} silent attempts in a row", silent
                );
                if silent >= TRIP_AFTER_UNANSWERED {
                    // Once open it stays open until an answer; start over.
                    b.record("e", Outcome::Succeeded, t0);
                    silent = 0;
                }
            }
        }
    }
}
