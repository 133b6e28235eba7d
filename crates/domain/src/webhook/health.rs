//! Endpoint health, derived from its status and its recent attempts
//! (contract section 9, "Health").

use super::kinds::{AttemptStatus, EndpointStatus};
use crate::principal::wire_enum;

wire_enum!(Health {
    Healthy => "healthy",
    Degraded => "degraded",
    Failing => "failing",
    Unknown => "unknown",
    Paused => "paused",
    Disabled => "disabled",
});

/// How many of the newest attempts must all have failed for `failing`.
pub const FAILING_STREAK: usize = 5;
/// How many of the newest attempts the success rate looks at.
pub const WINDOW: usize = 100;

/// `recent` is the newest-first outcomes of (up to) the last 100 attempts;
/// more are ignored. The first that applies: `paused` or `disabled` (the
/// endpoint's status); `unknown` (no attempt yet); `failing` (at least five
/// attempts, and the newest five all failed; fewer attempts that all failed
/// read as `degraded`); `degraded` (under 95 % of the attempts in the window
/// succeeded); otherwise `healthy`.
pub fn health(status: EndpointStatus, recent: &[AttemptStatus]) -> Health {
    match status {
        EndpointStatus::Paused => return Health::Paused,
        EndpointStatus::Disabled => return Health::Disabled,
        EndpointStatus::Active => {}
    }
    let window = &recent[..recent.len().min(WINDOW)];
    if window.is_empty() {
        return Health::Unknown;
    }
    if window.len() >= FAILING_STREAK
        && window[..FAILING_STREAK]
            .iter()
            .all(|a| *a == AttemptStatus::Failed)
    {
        return Health::Failing;
    }
    let succeeded = window
        .iter()
        .filter(|a| **a == AttemptStatus::Succeeded)
        .count();
    if succeeded * 100 < window.len() * 95 {
        Health::Degraded
    } else {
        Health::Healthy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptStatus::{Failed as F, Succeeded as S};

    fn active(recent: &[AttemptStatus]) -> Health {
        health(EndpointStatus::Active, recent)
    }

    #[test]
    fn status_comes_first() {
        assert_eq!(health(EndpointStatus::Paused, &[F; 10]), Health::Paused);
        assert_eq!(health(EndpointStatus::Disabled, &[]), Health::Disabled);
        assert_eq!(active(&[]), Health::Unknown);
    }

    #[test]
    fn failing_needs_five_failures_in_a_row() {
        assert_eq!(active(&[F; 5]), Health::Failing);
        assert_eq!(active(&[F, F, F, F, F, S, S]), Health::Failing);
        assert_eq!(active(&[F; 4]), Health::Degraded);
        assert_eq!(active(&[S, F, F, F, F, F]), Health::Degraded);
    }

    #[test]
    fn ninety_five_percent_of_the_window() {
        let mut r = vec![S; 100];
        r[10..15].fill(F);
        assert_eq!(active(&r), Health::Healthy);
        r[20] = F;
        assert_eq!(active(&r), Health::Degraded);
        // Only the newest 100 count.
        r.extend([F; 50]);
        r[20] = S;
        assert_eq!(active(&r), Health::Healthy);
        assert_eq!(active(&[S]), Health::Healthy);
        assert_eq!(active(&[S, F]), Health::Degraded);
    }
}
