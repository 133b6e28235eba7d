//! A test clock's advance (contract 12.4), as timed work run by
//! `crate::jobs`: every job of the clock due up to its target runs in time
//! order, each at the clock's time then, and the clock is `ready` at the
//! target.
//!
//! A clock never stays `advancing`: a job of the clock that fails is run
//! again at once, up to `ATTEMPTS` times in all; one that fails every time
//! has failed for good, and is dropped in the unit of work that counts it
//! in the clock's `failed_jobs`. What it would have done is not done: its
//! subscription is left as it shows. The advance goes on with the next
//! job, and ends `ready` at its target as any other.

use crate::jobs::units_at_once;
pub use crate::timed::ADVANCE;
use crate::timed::{Rules, BATCH, LEASE_SECONDS};
use crate::CommerceError;
use domain::{Ref, Timestamp};
use std::collections::HashMap;
use std::time::Duration;
use store::billing::jobs::{self, Job};
use store::billing::test_clocks::{self, TestClockRecord};
use store::{Store, StoreError};

/// How many times an advance runs a job of its clock that fails before it
/// drops the job as failed for good.
pub const ATTEMPTS: u32 = 3;

/// How long an advance waits for a job of its clock that another runner
/// holds before looking again.
const HELD_ELSEWHERE: Duration = Duration::from_millis(50);

/// How long an advance waits before it runs a failed job again, times the
/// failures so far: a lost race (a write to the subscription meanwhile)
/// is over by then.
const RETRY_AFTER: Duration = Duration::from_millis(20);

/// Runs a test clock's advance (`ADVANCE`, leased to `owner`): every job of
/// the clock due up to its target, in time order, each at its own due time
/// (the clock's time then), then the clock is `ready` at the target. Jobs a
/// run makes that fall due before the target run too. A job that fails
/// `ATTEMPTS` times is dropped and counted in the clock's `failed_jobs`.
/// The advance's lease is renewed as it goes; a runner that loses it stops,
/// and the one that took it over finishes. A store that does not answer
/// stops it too: the advance runs again after its lease.
pub async fn advance(
    store: &Store,
    rules: &Rules,
    job: &Job,
    owner: &str,
) -> Result<(), CommerceError> {
    let clock_ref = &job.subject_ref;
    let clock: TestClockRecord = store.get(&job.environment_ref, clock_ref).await?;
    if let Some(to) = clock.advance_to {
        // Failures so far of each job (kind, subject, due time) this run
        // of the advance met; a runner that takes an advance over starts
        // counting again.
        let mut failures: HashMap<(String, Ref, Timestamp), u32> = HashMap::new();
        loop {
            let wall = Timestamp::now();
            if !store
                .extend_lease(job, owner, wall.plus_seconds(LEASE_SECONDS))
                .await?
            {
                return Ok(());
            }
            let most = BATCH * units_at_once(store);
            let due = store.due_on_clock(clock_ref, to, wall, most).await?;
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
            let run = crate::jobs::run_groups(store, rules, &group, owner, wall, at).await;
            for (failed, error) in run.failed {
                if matches!(&error, CommerceError::Store(e) if e.is_unavailable()) {
                    return Err(error);
                }
                let key = (
                    failed.kind.clone(),
                    failed.subject_ref.clone(),
                    failed.due_at,
                );
                let tries = failures.entry(key).or_default();
                *tries += 1;
                if *tries < ATTEMPTS {
                    tokio::time::sleep(RETRY_AFTER * *tries).await;
                    store.release_job(&failed, owner).await?;
                } else {
                    fail_for_good(store, clock_ref, &failed, owner, &error).await?;
                }
            }
        }
    }
    let mut tx = store.begin().await?;
    jobs::complete(&mut tx, job, owner).await?;
    test_clocks::finish_advance(&mut tx, clock_ref, Timestamp::now()).await?;
    tx.commit().await?;
    Ok(())
}

/// Drops `job` of `clock_ref`, leased to `owner`, which failed for good
/// (last with `error`), and counts it in the clock's `failed_jobs`: both
/// in one unit of work. A job whose lease another runner took is that
/// runner's to finish.
async fn fail_for_good(
    store: &Store,
    clock_ref: &Ref,
    job: &Job,
    owner: &str,
    error: &CommerceError,
) -> Result<(), CommerceError> {
    let mut tx = store.begin().await?;
    match jobs::complete(&mut tx, job, owner).await {
        Ok(()) => {}
        Err(StoreError::Conflict) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    test_clocks::count_failed_job(&mut tx, clock_ref, Timestamp::now()).await?;
    tx.commit().await?;
    tracing::error!(
        clock = %clock_ref,
        kind = %job.kind,
        subject = %job.subject_ref,
        attempts = ATTEMPTS,
        error = %error,
        "a test clock's job failed for good; dropped and counted in the clock's failed_jobs"
    );
    Ok(())
}
