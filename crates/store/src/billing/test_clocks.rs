//! Test clocks (contract 12.4): a sandbox's own time, which the subscriptions
//! paid through it live on. A clock moves only forward and only through an
//! advance: `start_advance` takes it from `ready` to `advancing` (one
//! advance at a time, by a conditional write), `finish_advance` sets its
//! new `frozen_time` once every piece of its timed work up to it has run
//! or failed for good; `count_failed_job` counts the latter, in the unit
//! of work that drops the job (`failed_jobs`).
//!
//! It never decides what an advance may do (`domain::checkout::renewal`) or
//! runs the work (`commerce::renewals`, `commerce::test_clocks`).

use super::checkout::{at, reference, state};
use crate::db::codec::opt_ts;
use crate::db::tx::{int, single, Columns, WriteTx};
use crate::resource::Resource;
use crate::StoreError;
use domain::checkout::renewal::TestClockStatus;
use domain::{Prefix, Ref, Timestamp};

#[derive(Debug, Clone)]
pub struct TestClockRecord {
    pub test_clock_ref: Ref,
    pub environment_ref: Ref,
    pub name: Option<String>,
    pub frozen_time: Timestamp,
    pub status: TestClockStatus,
    /// Where the running advance goes; `None` when ready.
    pub advance_to: Option<Timestamp>,
    /// Jobs of the clock that failed for good during its advances.
    pub failed_jobs: i64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub version: i64,
}

impl Resource for TestClockRecord {
    const TABLE: &'static str = "test_clocks";
    const REF_COLUMN: &'static str = "test_clock_ref";
    const FILTERS: &'static [(&'static str, &'static str)] = &[("status", "status")];

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        Ok(TestClockRecord {
            test_clock_ref: reference(row, "test_clock_ref")?,
            environment_ref: reference(row, "environment_ref")?,
            name: row.text("name")?,
            frozen_time: at(row, "frozen_time")?,
            status: state(row, "status", TestClockStatus::parse)?,
            advance_to: opt_ts(row, "advance_to")?,
            failed_jobs: int(row, "failed_jobs")?,
            created_at: at(row, "created_at")?,
            updated_at: at(row, "updated_at")?,
            version: int(row, "version")?,
        })
    }
}

pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    name: Option<&str>,
    frozen_time: Timestamp,
    now: Timestamp,
) -> Result<TestClockRecord, StoreError> {
    let rows = tx
        .fetch(
            "INSERT INTO test_clocks (test_clock_ref, environment_ref, name, frozen_time, status, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING *",
            &[
                Ref::generate(Prefix::TestClock).as_str().into(),
                environment_ref.as_str().into(),
                name.into(),
                frozen_time.millis().into(),
                TestClockStatus::Ready.as_str().into(),
                now.millis().into(),
            ],
        )
        .await?;
    TestClockRecord::decode(single(&rows)?)
}

/// Starts an advance to `to` of a clock that is `ready`; `Conflict` when an
/// advance is already running (or another one won the race).
pub async fn start_advance(
    tx: &mut WriteTx,
    clock: &TestClockRecord,
    to: Timestamp,
    now: Timestamp,
) -> Result<TestClockRecord, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE test_clocks SET status = $1, advance_to = $2, updated_at = $3, \
             version = version + 1 WHERE test_clock_ref = $4 AND status = $5 RETURNING *",
            &[
                TestClockStatus::Advancing.as_str().into(),
                to.millis().into(),
                now.millis().into(),
                clock.test_clock_ref.as_str().into(),
                TestClockStatus::Ready.as_str().into(),
            ],
        )
        .await?;
    TestClockRecord::decode(rows.first().ok_or(StoreError::Conflict)?)
}

/// Ends the running advance: the clock is `ready` at its target.
pub async fn finish_advance(
    tx: &mut WriteTx,
    test_clock_ref: &Ref,
    now: Timestamp,
) -> Result<Option<TestClockRecord>, StoreError> {
    let rows = tx
        .fetch(
            "UPDATE test_clocks SET status = $1, frozen_time = advance_to, advance_to = NULL, \
             updated_at = $2, version = version + 1 \
             WHERE test_clock_ref = $3 AND status = $4 RETURNING *",
            &[
                TestClockStatus::Ready.as_str().into(),
                now.millis().into(),
                test_clock_ref.as_str().into(),
                TestClockStatus::Advancing.as_str().into(),
            ],
        )
        .await?;
    rows.first().map(|r| TestClockRecord::decode(r)).transpose()
}

/// Counts a job of the clock that failed for good, in the unit of work
/// that drops it (`billing::jobs::complete`): the drop and its count
/// commit together, or neither does.
pub async fn count_failed_job(
    tx: &mut WriteTx,
    test_clock_ref: &Ref,
    now: Timestamp,
) -> Result<(), StoreError> {
    let changed = tx
        .execute(
            "UPDATE test_clocks SET failed_jobs = failed_jobs + 1, updated_at = $1, \
             version = version + 1 WHERE test_clock_ref = $2",
            &[now.millis().into(), test_clock_ref.as_str().into()],
        )
        .await?;
    match changed {
        1 => Ok(()),
        _ => Err(StoreError::NotFound),
    }
}

/// A clock read inside a unit of work.
pub async fn read(
    tx: &mut WriteTx,
    test_clock_ref: &Ref,
) -> Result<Option<TestClockRecord>, StoreError> {
    let rows = tx
        .fetch(
            "SELECT * FROM test_clocks WHERE test_clock_ref = $1",
            &[test_clock_ref.as_str().into()],
        )
        .await?;
    rows.first().map(|r| TestClockRecord::decode(r)).transpose()
}
