//! Retention (contract 12.1): how long the store keeps what it does not
//! keep forever, and the cut-off each kind of row is swept against.
//!
//! The rules: settled deliveries (with their attempts) go `deliveries`
//! after they settled, their events once no delivery of them remains (and
//! never before the same cut-off), bodies `bodies` after they settled but
//! never later than their delivery, dead letters, request logs and
//! idempotency records after their own settings, finished redrive jobs
//! (`succeeded`, `canceled`) the request logs' time after they finished.
//! Live deliveries (`pending`, `held`), open redrive jobs and billing
//! records are never swept: no kind here names them.
//!
//! Pure rules only: the store runs the statements, a sweeper the clock.

use crate::Timestamp;
use std::time::Duration;

/// The least retention a setting may have (short values exist for tests).
pub const MIN_RETENTION: Duration = Duration::from_secs(1);

/// How long idempotency records are kept unless a policy says otherwise
/// (`RetentionPolicy::keeping_idempotency_keys`): the default of the
/// `idempotency.retention` setting.
pub const IDEMPOTENCY_RETENTION: Duration = Duration::from_secs(86_400);

/// What the sweep deletes, as the metrics label it (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RetentionKind {
    /// A settled delivery with its attempts.
    Deliveries,
    /// An event no delivery remains of, with its projection marker.
    Events,
    /// The body (payload as last delivered) of a settled delivery.
    Bodies,
    /// A dead-lettered event.
    DeadLetters,
    /// A request log line.
    RequestLogs,
    /// An idempotency record (a request's key and its kept result), past
    /// the time it may be replayed.
    IdempotencyKeys,
    /// A finished redrive job (`succeeded` or `canceled`), kept as long as
    /// request logs, counted from when it finished.
    RedriveJobs,
}

impl RetentionKind {
    /// Every kind, in the order a sweep takes them: deliveries before the
    /// events they keep alive, and before bodies, so that a body whose
    /// delivery goes in the same pass is deleted with it rather than
    /// emptied first (with the default settings, the two cut-offs are the
    /// same and every body would be rewritten just before its row goes).
    pub const ALL: [RetentionKind; 7] = [
        RetentionKind::Deliveries,
        RetentionKind::Events,
        RetentionKind::Bodies,
        RetentionKind::DeadLetters,
        RetentionKind::RequestLogs,
        RetentionKind::IdempotencyKeys,
        RetentionKind::RedriveJobs,
    ];

    /// The metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            RetentionKind::Deliveries => "deliveries",
            RetentionKind::Events => "events",
            RetentionKind::Bodies => "bodies",
            RetentionKind::DeadLetters => "dead_letters",
            RetentionKind::RequestLogs => "request_logs",
            RetentionKind::IdempotencyKeys => "idempotency_keys",
            RetentionKind::RedriveJobs => "redrive_jobs",
        }
    }
}

/// A retention setting below `MIN_RETENTION`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} must be at least 1s")]
pub struct RetentionError {
    pub setting: &'static str,
}

/// How long each kind is kept; built only through `new` (and
/// `keeping_idempotency_keys`), so every value is at least
/// `MIN_RETENTION` and bodies never outlive their deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    deliveries: Duration,
    bodies: Duration,
    dead_letters: Duration,
    request_logs: Duration,
    idempotency_keys: Duration,
}

impl RetentionPolicy {
    /// The policy of these settings; `bodies` is capped by `deliveries`.
    /// Idempotency records are kept `IDEMPOTENCY_RETENTION`.
    pub fn new(
        deliveries: Duration,
        bodies: Duration,
        dead_letters: Duration,
        request_logs: Duration,
    ) -> Result<RetentionPolicy, RetentionError> {
        for (setting, value) in [
            ("retention.deliveries", deliveries),
            ("delivery.body_retention", bodies),
            ("retention.dead_letters", dead_letters),
            ("retention.request_logs", request_logs),
        ] {
            at_least_min(setting, value)?;
        }
        Ok(RetentionPolicy {
            deliveries,
            bodies: bodies.min(deliveries),
            dead_letters,
            request_logs,
            idempotency_keys: IDEMPOTENCY_RETENTION,
        })
    }

    /// This policy with idempotency records kept `keep` (the
    /// `idempotency.retention` setting, also how long a result is
    /// replayed).
    pub fn keeping_idempotency_keys(
        self,
        keep: Duration,
    ) -> Result<RetentionPolicy, RetentionError> {
        at_least_min("idempotency.retention", keep)?;
        Ok(RetentionPolicy {
            idempotency_keys: keep,
            ..self
        })
    }

    /// How long `kind` is kept.
    pub fn keep(&self, kind: RetentionKind) -> Duration {
        match kind {
            RetentionKind::Deliveries | RetentionKind::Events => self.deliveries,
            RetentionKind::Bodies => self.bodies,
            RetentionKind::DeadLetters => self.dead_letters,
            RetentionKind::RequestLogs | RetentionKind::RedriveJobs => self.request_logs,
            RetentionKind::IdempotencyKeys => self.idempotency_keys,
        }
    }

    /// Rows of `kind` whose time (settled, received, logged, finished) is
    /// before this are swept at `now`.
    pub fn cutoff(&self, kind: RetentionKind, now: Timestamp) -> Timestamp {
        let keep = i64::try_from(self.keep(kind).as_millis()).unwrap_or(i64::MAX);
        Timestamp::from_millis(now.millis().saturating_sub(keep))
    }
}

/// `setting` is at least `MIN_RETENTION`.
fn at_least_min(setting: &'static str, value: Duration) -> Result<(), RetentionError> {
    match value < MIN_RETENTION {
        true => Err(RetentionError { setting }),
        false => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_setting_under_a_second_is_refused_by_name() {
        let ok = Duration::from_secs(1);
        let short = Duration::from_millis(999);
        assert_eq!(
            RetentionPolicy::new(ok, ok, short, ok),
            Err(RetentionError {
                setting: "retention.dead_letters"
            })
        );
        assert!(RetentionPolicy::new(ok, ok, ok, ok).is_ok());
        assert_eq!(
            RetentionPolicy::new(ok, ok, ok, ok)
                .unwrap()
                .keeping_idempotency_keys(short),
            Err(RetentionError {
                setting: "idempotency.retention"
            })
        );
    }

    #[test]
    fn idempotency_records_keep_their_own_setting() {
        let p = RetentionPolicy::new(30 * DAY, 7 * DAY, DAY, 2 * DAY).unwrap();
        assert_eq!(
            p.keep(RetentionKind::IdempotencyKeys),
            IDEMPOTENCY_RETENTION
        );
        let p = p.keeping_idempotency_keys(3 * DAY).unwrap();
        assert_eq!(p.keep(RetentionKind::IdempotencyKeys), 3 * DAY);
        assert_eq!(p.keep(RetentionKind::RequestLogs), 2 * DAY);
    }

    #[test]
    fn finished_redrive_jobs_go_with_the_request_logs() {
        let p = RetentionPolicy::new(30 * DAY, 7 * DAY, DAY, 2 * DAY).unwrap();
        assert_eq!(p.keep(RetentionKind::RedriveJobs), 2 * DAY);
        let now = Timestamp::from_millis(100 * DAY.as_millis() as i64);
        assert_eq!(
            p.cutoff(RetentionKind::RedriveJobs, now),
            p.cutoff(RetentionKind::RequestLogs, now)
        );
        assert_eq!(RetentionKind::RedriveJobs.as_str(), "redrive_jobs");
    }

    #[test]
    fn events_go_with_their_deliveries() {
        let p = RetentionPolicy::new(30 * DAY, 7 * DAY, DAY, 2 * DAY).unwrap();
        let now = Timestamp::from_millis(100 * DAY.as_millis() as i64);
        assert_eq!(
            p.cutoff(RetentionKind::Events, now),
            p.cutoff(RetentionKind::Deliveries, now)
        );
        assert_eq!(
            p.cutoff(RetentionKind::Bodies, now).millis(),
            93 * DAY.as_millis() as i64
        );
    }

    proptest! {
        #[test]
        fn a_body_never_outlives_its_delivery(
            deliveries in 1u64..10_000_000,
            bodies in 1u64..10_000_000,
            now in 0i64..i64::MAX / 2,
        ) {
            let p = RetentionPolicy::new(
                Duration::from_secs(deliveries),
                Duration::from_secs(bodies),
                DAY,
                DAY,
            ).unwrap();
            let now = Timestamp::from_millis(now);
            prop_assert!(p.keep(RetentionKind::Bodies) <= p.keep(RetentionKind::Deliveries));
            prop_assert!(
                p.cutoff(RetentionKind::Bodies, now) >= p.cutoff(RetentionKind::Deliveries, now)
            );
            for kind in RetentionKind::ALL {
                prop_assert!(p.cutoff(kind, now) <= now);
            }
        }
    }
}
