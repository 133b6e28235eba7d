//! Per-endpoint circuit breakers: after a run of consecutive failures an
//! endpoint is skipped for a cool-down, then tried with one attempt
//! (half-open) before it is trusted again. Skipped deliveries wait in the
//! store; healthy endpoints never queue behind a failing one.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Consecutive failures that open the circuit.
pub const TRIP_AFTER: u32 = 5;
/// How long an open circuit skips its endpoint.
pub const COOL_DOWN: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    consecutive_failures: u32,
    open_until: Option<Instant>,
    probing: bool,
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

    pub fn record(&mut self, endpoint: &str, success: bool, now: Instant) {
        if success {
            self.states.remove(endpoint);
            return;
        }
        let s = self.states.entry(endpoint.to_owned()).or_default();
        s.consecutive_failures += 1;
        s.probing = false;
        if s.consecutive_failures >= TRIP_AFTER {
            s.open_until = Some(now + COOL_DOWN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_a_run_of_failures_and_probes_once() {
        let mut b = Breakers::default();
        let t0 = Instant::now();
        for _ in 0..TRIP_AFTER - 1 {
            b.record("e", false, t0);
            assert_eq!(b.gate("e", t0), Gate::Closed);
        }
        b.record("e", false, t0);
        assert!(matches!(b.gate("e", t0), Gate::Open(_)));
        let later = t0 + COOL_DOWN;
        assert_eq!(
            b.gate("e", later),
            Gate::Closed,
            "half-open lets one through"
        );
        assert!(matches!(b.gate("e", later), Gate::Open(_)), "only one");
        b.record("e", true, later);
        assert_eq!(b.gate("e", later), Gate::Closed);
        assert_eq!(b.gate("other", t0), Gate::Closed);
    }
}
