//! Test clocks (contract 12.4): create, list, retrieve and advance, in
//! sandbox environments only (a live one answers `not_found`, as if clocks
//! did not exist there). An advance is accepted (202, `advancing`) and run
//! as timed work (`commerce::test_clocks::advance`); the clock is `ready` again
//! when every piece of its work up to the new time has run.
//!
//! `time_of` is the one place a record's time is read: the clock's
//! `frozen_time` for a record on a clock, else the wall clock.

use crate::error::ApiError;
use crate::handlers::reads::{self, load};
use crate::handlers::Ctx;
use crate::input::Input;
use crate::reply::Reply;
use crate::wire::found;
use domain::checkout::renewal::{check_advance, check_clock_time, TestClockStatus};
use domain::principal::Mode;
use domain::{Ref, Timestamp};
use serde::Deserialize;
use store::billing::jobs;
use store::billing::test_clocks::{self, TestClockRecord};
use utoipa::ToSchema;

/// Longest clock name.
const MAX_NAME: usize = 200;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTestClock {
    /// The clock's starting time (RFC 3339).
    pub frozen_time: String,
    /// 1 to 200 characters.
    pub name: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdvanceTestClock {
    /// The new time: later than the clock's, at most two years ahead.
    pub frozen_time: String,
}

/// Clocks exist in sandboxes only: elsewhere every operation on them
/// answers as if there were none.
fn sandbox_only(ctx: &Ctx) -> Result<(), ApiError> {
    match ctx.caller.mode {
        Mode::Sandbox => Ok(()),
        Mode::Live => Err(ApiError::not_found("test clock")),
    }
}

fn time_field(field: &str, value: &str) -> Result<Timestamp, ApiError> {
    Timestamp::parse(value)
        .ok_or_else(|| ApiError::validation(field, "must be an RFC 3339 timestamp"))
}

/// The time of a record on `clock` (its `frozen_time`), or the wall clock's
/// when it is on none; a clock the caller's environment does not have is
/// `not_found`.
pub(crate) async fn time_of(ctx: &Ctx, clock: Option<&Ref>) -> Result<Timestamp, ApiError> {
    let Some(clock) = clock else {
        return Ok(ctx.now());
    };
    sandbox_only(ctx)?;
    let record = found(
        ctx.store().get::<TestClockRecord>(ctx.env(), clock).await,
        "test clock",
    )?;
    Ok(record.frozen_time)
}

pub async fn create(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    sandbox_only(ctx)?;
    let body: CreateTestClock = input.body()?;
    let frozen_time = time_field("frozen_time", &body.frozen_time)?;
    check_clock_time(frozen_time)
        .map_err(|e| ApiError::validation("frozen_time", e.to_string()))?;
    let name = body.name.as_deref().map(str::trim);
    if let Some(n) = name {
        if n.is_empty() || n.chars().count() > MAX_NAME {
            return Err(ApiError::validation(
                "name",
                format!("must be 1 to {MAX_NAME} characters"),
            ));
        }
    }
    let env = ctx.env().clone();
    let now = ctx.now();
    let tx = ctx.tx().await?;
    let clock = test_clocks::create(tx, &env, name, frozen_time, now).await?;
    Ok(reads::one(ctx, &clock))
}

pub async fn list(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    sandbox_only(ctx)?;
    reads::list::<TestClockRecord>(ctx, input).await
}

pub async fn retrieve(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    sandbox_only(ctx)?;
    reads::retrieve::<TestClockRecord>(ctx, input).await
}

/// Accepts an advance: the clock is `advancing` and the advance is timed
/// work due now, which any runner takes (`commerce::test_clocks::advance`).
pub async fn advance(ctx: &mut Ctx, input: Input) -> Result<Reply, ApiError> {
    sandbox_only(ctx)?;
    let body: AdvanceTestClock = input.body()?;
    let clock = load::<TestClockRecord>(ctx, &input).await?;
    let to = time_field("frozen_time", &body.frozen_time)?;
    if clock.status == TestClockStatus::Advancing {
        return Err(ApiError::VersionConflict(
            "the test clock is advancing; wait until it is ready",
        ));
    }
    check_advance(clock.frozen_time, to)
        .map_err(|e| ApiError::validation("frozen_time", e.to_string()))?;
    let env = ctx.env().clone();
    let now = ctx.now();
    let tx = ctx.tx().await?;
    let advancing = test_clocks::start_advance(tx, &clock, to, now)
        .await
        .map_err(|e| match e {
            store::StoreError::Conflict => {
                ApiError::VersionConflict("the test clock is advancing; wait until it is ready")
            }
            e => e.into(),
        })?;
    jobs::schedule(
        tx,
        commerce::test_clocks::ADVANCE,
        &advancing.test_clock_ref,
        &env,
        now,
    )
    .await?;
    Ok(reads::one(ctx, &advancing))
}
