//! A test clock's advance (contract 12.4), as timed work run by
//! `crate::jobs`: every job of the clock due up to its target runs in time
//! order, each at the clock's time then, and the clock is `ready` at the
//! target.

use crate::jobs::{Rules, BATCH, LEASE_SECONDS};
use crate::CommerceError;
use domain::Timestamp;
use std::time::Duration;
use store::billing::jobs::{self, Job};
use store::billing::test_clocks::{self, TestClockRecord};
use store::Store;

/// A test clock's accepted advance.
pub const ADVANCE: &str = "test_clock.advance";

/// How long an advance waits for a job of its clock that another runner
/// holds before looking again.
const HELD_ELSEWHERE: Duration = Duration::from_millis(50);

/// Runs a test clock's advance (`ADVANCE`, leased to `owner`): every job of
/// the clock due up to its target, in time order, each at its own due time
/// (the clock's time then), then the clock is `ready` at the target. Jobs a
/// run makes that fall due before the target run too. The advance's lease
/// is renewed as it goes; a runner that loses it stops, and the one that
/// took it over finishes.
pub async fn advance(
    store: &Store,
    rules: &Rules,
    job: &Job,
    owner: &str,
) -> Result<(), CommerceError> {
    let clock_ref = &job.subject_ref;
    let clock: TestClockRecord = store.get(&job.environment_ref, clock_ref).await?;
    if let Some(to) = clock.advance_to {
        loop {
            let wall = Timestamp::now();
            if !store
                .extend_lease(job, owner, wall.plus_seconds(LEASE_SECONDS))
                .await?
            {
                return Ok(());
            }
            let due = store.due_on_clock(clock_ref, to, wall, BATCH).await?;
            let Some(first) = due.first() else {
                if store.clock_has_due(clock_ref, to).await? {
                    tokio::time::sleep(HELD_ELSEWHERE).await;
                    continue;
                }
                break;
            };
            // Work a job makes falls due after the job's own time, so the
            // jobs that share the earliest time can all run before looking
            // again, in time order, as one unit of work.
            let at = first.due_at;
            let group: Vec<Job> = due.into_iter().take_while(|j| j.due_at == at).collect();
            crate::jobs::run_group(store, rules, &group, owner, wall, at).await;
        }
    }
    let mut tx = store.begin().await?;
    jobs::complete(&mut tx, job, owner).await?;
    test_clocks::finish_advance(&mut tx, clock_ref, Timestamp::now()).await?;
    tx.commit().await?;
    Ok(())
}
