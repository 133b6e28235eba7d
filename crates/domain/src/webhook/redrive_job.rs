//! Redrive jobs (contract 12.2): a filter's deliveries, selected when the
//! job starts, redriven once each in the background. The job's states and
//! their transitions, the rule of what a job may select, and its pace.

use crate::principal::wire_enum;
use std::time::Duration;

wire_enum!(
    /// `counting`: selecting the deliveries; `running`: redriving them;
    /// `succeeded` and `canceled` are final.
    RedriveJobStatus {
        Counting => "counting",
        Running => "running",
        Succeeded => "succeeded",
        Canceled => "canceled",
    }
);

/// A transition a job's state does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {action} a redrive job that is {from}")]
pub struct RedriveJobTransitionError {
    pub action: &'static str,
    pub from: &'static str,
}

impl RedriveJobStatus {
    /// Whether the job still has work (a runner takes it).
    pub fn is_open(self) -> bool {
        matches!(self, RedriveJobStatus::Counting | RedriveJobStatus::Running)
    }

    /// Cancel: stops an open job; what it redrove stays redriven.
    pub fn cancel(self) -> Result<RedriveJobStatus, RedriveJobTransitionError> {
        match self {
            RedriveJobStatus::Counting | RedriveJobStatus::Running => {
                Ok(RedriveJobStatus::Canceled)
            }
            from => Err(RedriveJobTransitionError {
                action: "cancel",
                from: from.as_str(),
            }),
        }
    }

    /// The state after counting ends: a dry run is done once counted.
    pub fn counted(self, dry_run: bool) -> Result<RedriveJobStatus, RedriveJobTransitionError> {
        match (self, dry_run) {
            (RedriveJobStatus::Counting, true) => Ok(RedriveJobStatus::Succeeded),
            (RedriveJobStatus::Counting, false) => Ok(RedriveJobStatus::Running),
            (from, _) => Err(RedriveJobTransitionError {
                action: "finish counting",
                from: from.as_str(),
            }),
        }
    }

    /// The state once every selected delivery was taken.
    pub fn finished(self) -> Result<RedriveJobStatus, RedriveJobTransitionError> {
        match self {
            RedriveJobStatus::Running => Ok(RedriveJobStatus::Succeeded),
            from => Err(RedriveJobTransitionError {
                action: "finish",
                from: from.as_str(),
            }),
        }
    }
}

/// How many deliveries a job may take in a step of `step` at `rate` per
/// second (at least one, so a job always moves on).
pub fn batch_for(rate: u32, step: Duration) -> u32 {
    let n = (u128::from(rate) * step.as_millis() / 1000) as u32;
    n.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn only_an_open_job_can_be_canceled() {
        use RedriveJobStatus::*;
        assert_eq!(Counting.cancel(), Ok(Canceled));
        assert_eq!(Running.cancel(), Ok(Canceled));
        for done in [Succeeded, Canceled] {
            assert!(done.cancel().is_err());
            assert!(!done.is_open());
        }
    }

    #[test]
    fn a_dry_run_ends_when_counted() {
        use RedriveJobStatus::*;
        assert_eq!(Counting.counted(true), Ok(Succeeded));
        assert_eq!(Counting.counted(false), Ok(Running));
        assert!(Running.counted(false).is_err());
        assert_eq!(Running.finished(), Ok(Succeeded));
        assert!(Counting.finished().is_err());
    }

    proptest! {
        #[test]
        fn a_step_takes_the_rate_over_its_length_and_never_none(
            rate in 1u32..100_000,
            step_ms in 1u64..10_000,
        ) {
            let n = batch_for(rate, Duration::from_millis(step_ms));
            prop_assert!(n >= 1);
            prop_assert!(u64::from(n) <= (u64::from(rate) * step_ms / 1000).max(1));
        }

        #[test]
        fn every_state_reaches_a_final_one_or_refuses(i in 0usize..4) {
            let s = RedriveJobStatus::ALL[i];
            match s.cancel() {
                Ok(next) => prop_assert!(!next.is_open()),
                Err(_) => prop_assert!(!s.is_open()),
            }
        }
    }
}
