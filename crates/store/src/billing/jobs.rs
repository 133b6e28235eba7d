//! Timed work: a row per thing to do later, keyed by its kind and subject
//! (`refund.start` of a refund, …). A runner takes due jobs under a lease
//! (`claim`, on the store's one lease primitive, `crate::lease`), does
//! each in a unit of work that also deletes it (`complete`), so a job's effects commit exactly once: a crash before the
//! commit leaves the job to run again once its lease ends; another runner
//! whose lease was lost finds nothing to delete and rolls back.
//!
//! A job of a subscription on a test clock carries the clock
//! (`test_clock_ref`): its `due_at` is in the clock's time, and it runs when
//! the clock advances past it (`due_on_clock`), never by the wall clock
//! (`due_jobs`).
//!
//! A job that fails stays leased until its lease ends, then runs again;
//! a test clock's advance may give it back at once (`release_job`) or,
//! once it failed for good, drop it with `complete` in the unit of work
//! that counts it on its clock.
//!
//! It never decides what a job does; the runner does.

use crate::db::read;
use crate::db::tx::{int, text, Columns, WriteTx};
use crate::lease;
use crate::{Store, StoreError};
use domain::{Ref, Timestamp};

/// A due job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub kind: String,
    pub subject_ref: Ref,
    pub environment_ref: Ref,
    pub due_at: Timestamp,
    pub test_clock_ref: Option<Ref>,
}

fn decode(row: &dyn Columns) -> Result<Job, StoreError> {
    Ok(Job {
        kind: text(row, "kind")?,
        subject_ref: Ref::from_trusted(text(row, "subject_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        due_at: Timestamp::from_millis(int(row, "due_at")?),
        test_clock_ref: row.text("test_clock_ref")?.map(Ref::from_trusted),
    })
}

/// Schedules `kind` for `subject` at `due_at` by the wall clock (once: a
/// job already there keeps its time).
pub async fn schedule(
    tx: &mut WriteTx,
    kind: &str,
    subject_ref: &Ref,
    environment_ref: &Ref,
    due_at: Timestamp,
) -> Result<(), StoreError> {
    schedule_on(tx, kind, subject_ref, environment_ref, due_at, None).await
}

/// Schedules `kind` for `subject` at `due_at` on `clock` (the wall clock
/// when `None`), once: a job already there keeps its time.
pub async fn schedule_on(
    tx: &mut WriteTx,
    kind: &str,
    subject_ref: &Ref,
    environment_ref: &Ref,
    due_at: Timestamp,
    clock: Option<&Ref>,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO jobs (kind, subject_ref, environment_ref, due_at, created_at, \
         test_clock_ref) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (kind, subject_ref) DO NOTHING",
        &[
            kind.into(),
            subject_ref.as_str().into(),
            environment_ref.as_str().into(),
            due_at.millis().into(),
            Timestamp::now().millis().into(),
            clock.map(Ref::as_str).into(),
        ],
    )
    .await?;
    Ok(())
}

/// Drops a job that is no longer wanted (a refund canceled before it ran).
pub async fn cancel(tx: &mut WriteTx, kind: &str, subject_ref: &Ref) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM jobs WHERE kind = $1 AND subject_ref = $2",
        &[kind.into(), subject_ref.as_str().into()],
    )
    .await?;
    Ok(())
}

/// Completes a leased job in the unit of work that made its effects;
/// `Conflict` when the lease was lost (another runner has it).
pub async fn complete(tx: &mut WriteTx, job: &Job, owner: &str) -> Result<(), StoreError> {
    let gone = tx
        .execute(
            &format!(
                "DELETE FROM jobs WHERE kind = $1 AND subject_ref = $2 AND {}",
                lease::held_by("$3")
            ),
            &[
                job.kind.as_str().into(),
                job.subject_ref.as_str().into(),
                owner.into(),
            ],
        )
        .await?;
    if gone == 1 {
        Ok(())
    } else {
        Err(StoreError::Conflict)
    }
}

impl Store {
    /// Up to `limit` wall-clock jobs due at `now` whose lease is free,
    /// soonest first, then by kind and subject: runners that read the same
    /// jobs claim them in the same order (`claim`), so two units of work
    /// never wait on each other's claims in a cycle.
    pub async fn due_jobs(&self, now: Timestamp, limit: u32) -> Result<Vec<Job>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT * FROM jobs WHERE due_at <= $1 AND test_clock_ref IS NULL \
                 AND {} ORDER BY due_at, kind, subject_ref LIMIT {limit}",
                lease::free("$1")
            ),
            &[now.millis().into()],
            |row| decode(row),
        )
        .await
    }

    /// Up to `limit` jobs of `clock` due by its time `until` whose lease is
    /// free at the wall time `now`, in time order.
    pub async fn due_on_clock(
        &self,
        clock: &Ref,
        until: Timestamp,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<Job>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT * FROM jobs WHERE test_clock_ref = $1 AND due_at <= $2 \
                 AND {} ORDER BY due_at, subject_ref LIMIT {limit}",
                lease::free("$3")
            ),
            &[
                clock.as_str().into(),
                until.millis().into(),
                now.millis().into(),
            ],
            |row| decode(row),
        )
        .await
    }

    /// Whether `clock` still has a job due by `until` (leased or not).
    pub async fn clock_has_due(&self, clock: &Ref, until: Timestamp) -> Result<bool, StoreError> {
        let found = read::all(
            self.pool(),
            "SELECT kind FROM jobs WHERE test_clock_ref = $1 AND due_at <= $2 LIMIT 1",
            &[clock.as_str().into(), until.millis().into()],
            |row| text(row, "kind"),
        )
        .await?;
        Ok(!found.is_empty())
    }

    /// Extends `owner`'s lease of a job to `until`; false when it lost it.
    pub async fn extend_lease(
        &self,
        job: &Job,
        owner: &str,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let changed = tx
            .execute(
                &lease::renew("jobs", "$1", "kind = $2 AND subject_ref = $3", "$4"),
                &[
                    until.millis().into(),
                    job.kind.as_str().into(),
                    job.subject_ref.as_str().into(),
                    owner.into(),
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(changed == 1)
    }

    /// Gives back `owner`'s lease of a job that failed, in a unit of its
    /// own, so that it may run again at once rather than after its lease
    /// (a test clock's advance tries a failed job again before it drops
    /// it); false when the lease was lost or the job is gone.
    pub async fn release_job(&self, job: &Job, owner: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let changed = tx
            .execute(
                &format!(
                    "UPDATE jobs SET {} WHERE kind = $1 AND subject_ref = $2 AND {}",
                    lease::RELEASE,
                    lease::held_by("$3")
                ),
                &[
                    job.kind.as_str().into(),
                    job.subject_ref.as_str().into(),
                    owner.into(),
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(changed == 1)
    }

    /// Leases a due job to `owner` until `until`, in a unit of its own;
    /// false when another runner holds it or it is gone.
    pub async fn lease_job(
        &self,
        job: &Job,
        owner: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let leased = claim(&mut tx, job, owner, now, until).await?;
        tx.commit().await?;
        Ok(leased)
    }
}

/// Leases a due job to `owner` until `until` inside `tx`, the unit of work
/// that runs it; false when another runner holds it or it is gone. On
/// PostgreSQL a runner whose open unit holds the job makes this wait for
/// that unit's end, and then find the job deleted or leased: a job runs
/// once however many runners claim it.
pub async fn claim(
    tx: &mut WriteTx,
    job: &Job,
    owner: &str,
    now: Timestamp,
    until: Timestamp,
) -> Result<bool, StoreError> {
    let changed = tx
        .execute(
            &lease::take(
                "jobs",
                "$1",
                "$2",
                &format!("kind = $3 AND subject_ref = $4 AND {}", lease::free("$5")),
            ),
            &[
                owner.into(),
                until.millis().into(),
                job.kind.as_str().into(),
                job.subject_ref.as_str().into(),
                now.millis().into(),
            ],
        )
        .await?;
    Ok(changed == 1)
}
