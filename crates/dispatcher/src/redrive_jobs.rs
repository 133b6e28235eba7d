//! The redrive job runner (contract 12.2): takes open jobs under a lease,
//! counts a job's deliveries in batches, then redrives them at most `rate`
//! per second per job, one step every `STEP`. Each step is one unit of
//! work of the store (`Store::count_step`, `Store::redrive_step`), so a
//! job resumes where it was after a restart or a lost lease, and each of
//! its deliveries is redriven once whatever the number of runners.
//!
//! `run_once` is the seam a test drives: one round at a `now` it chooses.

use domain::webhook::redrive_job::{batch_for, RedriveJobStatus};
use domain::{Prefix, Ref, Timestamp};
use std::time::Duration;
use store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

/// How often a runner takes a step of each job it holds.
pub const STEP: Duration = Duration::from_millis(200);
/// How long a runner holds a job: a crashed runner's jobs wait this long.
const LEASE: Duration = Duration::from_secs(10);
/// Deliveries selected per counting step (counting is not paced: it only
/// reads and keeps references).
const COUNT_BATCH: u32 = 1_000;
/// Counting steps per round, so that a large selection does not hold the
/// runner from its other jobs.
const COUNT_STEPS: u32 = 5;
/// Open jobs looked at per round.
const JOBS: u32 = 16;

/// Runs jobs until `shutdown` is cancelled, at `rate` redrives per second
/// per job.
pub async fn run(store: Store, rate: u32, shutdown: CancellationToken) {
    let owner = format!("redrive-{}", Ref::generate(Prefix::Event));
    let mut tick = tokio::time::interval(STEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = run_once(&store, &owner, rate, Timestamp::now()).await {
            tracing::warn!(error = %e, "redrive jobs round failed; retrying");
        }
    }
}

/// One round at `now`: each open job `owner` can hold gets one step
/// (up to `COUNT_STEPS` while counting). Returns the deliveries taken.
pub async fn run_once(
    store: &Store,
    owner: &str,
    rate: u32,
    now: Timestamp,
) -> Result<u32, StoreError> {
    let until = now.plus_millis(LEASE.as_millis() as i64);
    let mut taken = 0;
    for job in store.open_redrive_jobs(owner, now, JOBS).await? {
        let Some(job) = store
            .lease_redrive_job(&job.redrive_job_ref, owner, now, until)
            .await?
        else {
            continue;
        };
        let r = &job.redrive_job_ref;
        match job.status {
            RedriveJobStatus::Counting => {
                for _ in 0..COUNT_STEPS {
                    let step = store.count_step(r, owner, COUNT_BATCH, now).await?;
                    taken += step.taken;
                    if step.moved_on || step.taken == 0 {
                        break;
                    }
                }
            }
            RedriveJobStatus::Running => {
                let step = store
                    .redrive_step(r, owner, batch_for(rate, STEP), now)
                    .await?;
                taken += step.taken;
            }
            RedriveJobStatus::Succeeded | RedriveJobStatus::Canceled => {}
        }
    }
    Ok(taken)
}
