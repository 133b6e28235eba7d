//! What follows an attempt: success, the next attempt on the retry schedule
//! (with jitter, at least a `Retry-After`), or failure.

use domain::webhook::retry::{RetrySchedule, MAX_RETRY_AFTER};
use domain::webhook::DeliveryStatus;
use domain::Timestamp;
use std::time::Duration;

/// What the receiver (or the network) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub status: Option<u16>,
    pub retry_after: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Next {
    pub status: DeliveryStatus,
    pub next_attempt_at: Option<Timestamp>,
    /// 410 Gone: the receiver asks never to be called again.
    pub disable_endpoint: bool,
}

/// The delivery's state after attempt `attempt_number` (1-based) answered
/// `answer`. `jitter_unit` in [0, 1) comes from the caller's RNG.
pub fn after_attempt(
    schedule: &RetrySchedule,
    attempt_number: u32,
    answer: &Answer,
    now: Timestamp,
    jitter_unit: f64,
) -> Next {
    match answer.status {
        Some(s) if (200..300).contains(&s) => Next {
            status: DeliveryStatus::Succeeded,
            next_attempt_at: None,
            disable_endpoint: false,
        },
        Some(410) => Next {
            status: DeliveryStatus::Failed,
            next_attempt_at: None,
            disable_endpoint: true,
        },
        status => match schedule.delay_before(attempt_number + 1) {
            None => Next {
                status: DeliveryStatus::Failed,
                next_attempt_at: None,
                disable_endpoint: false,
            },
            Some(delay) => {
                let mut delay = RetrySchedule::jittered(delay, jitter_unit);
                if matches!(status, Some(429 | 503)) {
                    if let Some(ra) = answer.retry_after {
                        delay = delay.max(ra.min(MAX_RETRY_AFTER));
                    }
                }
                Next {
                    status: DeliveryStatus::Pending,
                    next_attempt_at: Some(now.plus_millis(delay.as_millis() as i64)),
                    disable_endpoint: false,
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> RetrySchedule {
        RetrySchedule::parse("0s,5s,5m").unwrap()
    }

    fn answer(status: u16) -> Answer {
        Answer {
            status: Some(status),
            retry_after: None,
        }
    }

    #[test]
    fn success_and_gone() {
        let now = Timestamp::from_millis(0);
        assert_eq!(
            after_attempt(&schedule(), 1, &answer(204), now, 0.5).status,
            DeliveryStatus::Succeeded
        );
        let gone = after_attempt(&schedule(), 1, &answer(410), now, 0.5);
        assert_eq!(
            (gone.status, gone.disable_endpoint),
            (DeliveryStatus::Failed, true)
        );
    }

    #[test]
    fn retries_follow_the_schedule_then_fail() {
        let now = Timestamp::from_millis(0);
        let n = after_attempt(&schedule(), 1, &answer(500), now, 0.5);
        assert_eq!(n.next_attempt_at, Some(Timestamp::from_millis(5_000)));
        let n = after_attempt(
            &schedule(),
            2,
            &Answer {
                status: None,
                retry_after: None,
            },
            now,
            0.5,
        );
        assert_eq!(n.next_attempt_at, Some(Timestamp::from_millis(300_000)));
        assert_eq!(
            after_attempt(&schedule(), 3, &answer(500), now, 0.5).status,
            DeliveryStatus::Failed
        );
    }

    #[test]
    fn retry_after_delays_429_and_503_only() {
        let now = Timestamp::from_millis(0);
        let ra = |s| Answer {
            status: Some(s),
            retry_after: Some(Duration::from_secs(60)),
        };
        assert_eq!(
            after_attempt(&schedule(), 1, &ra(429), now, 0.5).next_attempt_at,
            Some(Timestamp::from_millis(60_000))
        );
        assert_eq!(
            after_attempt(&schedule(), 1, &ra(503), now, 0.5).next_attempt_at,
            Some(Timestamp::from_millis(60_000))
        );
        assert_eq!(
            after_attempt(&schedule(), 1, &ra(500), now, 0.5).next_attempt_at,
            Some(Timestamp::from_millis(5_000))
        );
        let huge = Answer {
            status: Some(429),
            retry_after: Some(Duration::from_secs(10 * 86_400)),
        };
        assert_eq!(
            after_attempt(&schedule(), 1, &huge, now, 0.5).next_attempt_at,
            Some(Timestamp::from_millis(86_400_000))
        );
    }
}
