//! What timed work is, below both the use cases that schedule it and the
//! runner that runs it (`crate::jobs`): the kinds of job, the rules that
//! configuration sets, a lease's and a unit's size, and the schedule of a
//! subscription's period end. Pay, trials and changes schedule work
//! through this module, so none of them imports the runner, which imports
//! them all to run their jobs. It must never run a job.

use domain::checkout::renewal::DunningSchedule;
use store::billing::checkout::subscriptions::SubscriptionRecord;
use store::billing::jobs;
use store::{StoreError, WriteTx};

/// The end of a subscription's current period (`crate::renewals`).
pub const RENEW: &str = "subscription.renew";
/// The next try of a declined renewal's charge (`crate::renewals`).
pub const RETRY: &str = "subscription.retry";
/// The warning before a trial ends (`crate::trials`).
pub const WILL_END: &str = "subscription.trial_will_end";
/// A test clock's accepted advance (`crate::test_clocks`).
pub const ADVANCE: &str = "test_clock.advance";
/// The dispute a `pm_card_dispute` payment gets (`crate::jobs`).
pub const OPEN_DISPUTE: &str = "dispute.open";
/// How long after its payment that dispute opens.
pub const DISPUTE_AFTER_SECONDS: i64 = 10;

/// How long a runner holds a job before another may take it: after a
/// crash, its jobs wait this long. A job takes milliseconds, and a runner
/// whose lease ended finds its job gone at completion and rolls back, so a
/// short lease never runs a job twice.
pub(crate) const LEASE_SECONDS: i64 = 5;

/// Most jobs run in one unit of work.
pub(crate) const BATCH: u32 = 32;

/// The rules of timed work that configuration sets.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// When a declined renewal is charged again (`billing.dunning_schedule`).
    pub dunning: DunningSchedule,
}

/// Schedules what happens at the end of `s`'s current period, on its clock.
pub async fn schedule_period_end(
    tx: &mut WriteTx,
    s: &SubscriptionRecord,
) -> Result<(), StoreError> {
    let Some(end) = s.current_period_end else {
        return Ok(());
    };
    let clock = s.test_clock_ref.as_ref();
    jobs::schedule_on(
        tx,
        RENEW,
        &s.subscription_ref,
        &s.environment_ref,
        end,
        clock,
    )
    .await
}
