//! Timed work of the billing surface, run by the dispatcher role: start a
//! scheduled refund, settle a pending one (the sandbox processor answers
//! within `SETTLE_AFTER_MS`), open the dispute of a `pm_card_dispute`
//! payment, and a subscription's life over time (`crate::renewals`:
//! renewals, dunning retries, cancels at period end; `crate::test_clocks`:
//! test clock advances). Each job runs in one unit of work that makes its
//! effects, emits its events and deletes the job (`store::billing::jobs`),
//! under a lease, so it survives a restart and runs once with any number
//! of runners. A job that fails runs again after its lease, except in a
//! test clock's advance, which tries it a few times and then drops it
//! and counts it on the clock (`crate::test_clocks`).
//!
//! The dispatcher role runs it (`run`); its events carry resources as the
//! API shows them (`crate::shapes`).

use crate::events::{checkout_key, Batch};
/// How long after a refund starts the sandbox settles it.
pub use crate::refunds::SETTLE_AFTER_MS;
use crate::refunds::{SETTLE, START};
use crate::shapes::outside::dispute_body;
use crate::shapes::refunds::payment_scope;
use crate::shapes::Served;
pub use crate::timed::Rules;
use crate::timed::{BATCH, LEASE_SECONDS, OPEN_DISPUTE};
use crate::CommerceError;
use domain::checkout::sandbox::TestCard;
use domain::outside::states::DisputeStatus;
use domain::refunds::amounts::order_status_after;
use domain::refunds::states::{AccessEffect, RefundStatus};
use domain::{Prefix, Ref, Timestamp};
use std::time::Duration;
use store::billing::checkout::payments::PaymentRecord;
use store::billing::jobs::{self, Job};
use store::billing::outside::{self, DisputeRecord, Projection};
use store::billing::refunds;
use store::{Backend, Store, WriteTx};
use tokio_util::sync::CancellationToken;

/// How often due jobs are looked for.
const POLL: Duration = Duration::from_millis(250);

/// Runs due jobs until `shutdown` is cancelled: every [`POLL`], the jobs
/// due by the wall clock (`run_due`).
pub async fn run(store: Store, rules: Rules, shutdown: CancellationToken) {
    let owner = format!("jobs-{}", Ref::generate(Prefix::Event));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        run_due(&store, &rules, &owner, Timestamp::now()).await;
    }
}

/// How many units of work of `BATCH` jobs due together run at once. A
/// unit spends its time on statement round trips rather than on locks, and
/// PostgreSQL takes many writers at a time; SQLite has one writer, so its
/// units run one after another. Units that meet on one row (two renewals
/// of one buyer's credit balance) stay correct: the one that loses runs
/// its jobs alone again (`run_group`).
pub(crate) fn units_at_once(store: &Store) -> u32 {
    match store.backend() {
        Backend::Postgres => 4,
        Backend::Sqlite => 1,
    }
}

/// Runs every job due at `now` once, each under a lease to `owner`, and
/// returns how many ran. The times a job decides (when a refund settles,
/// when a dispute opened) are counted from `now`, so a caller that owns
/// the clock (a test) runs timed work at the time it names, whether the
/// system is idle or busy. A job that fails stays leased past `now` and
/// runs again after its lease.
pub async fn run_due(store: &Store, rules: &Rules, owner: &str, now: Timestamp) -> usize {
    let mut ran = 0;
    loop {
        let most = BATCH * units_at_once(store);
        let due = match store.due_jobs(now, most).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read due jobs");
                return ran;
            }
        };
        let full = due.len() >= most as usize;
        let (advances, group): (Vec<Job>, Vec<Job>) = due
            .into_iter()
            .partition(|job| job.kind == crate::timed::ADVANCE);
        let grouped = run_groups(store, rules, &group, owner, now, now).await.ran;
        ran += grouped;
        let mut taken = grouped;
        for job in advances {
            let until = now.plus_seconds(LEASE_SECONDS);
            match store.lease_job(&job, owner, now, until).await {
                Ok(true) => taken += 1,
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot lease a job");
                    continue;
                }
            }
            match crate::test_clocks::advance(store, rules, &job, owner).await {
                Ok(()) => ran += 1,
                Err(e) => {
                    tracing::warn!(clock = %job.subject_ref, error = %e, "test clock advance failed")
                }
            }
        }
        // A full batch may hide more due jobs; one whose every job was
        // taken by another runner has nothing left for this one.
        if !full || taken == 0 {
            return ran;
        }
    }
}

/// What `run_group` did.
#[derive(Debug, Default)]
pub(crate) struct GroupRun {
    /// How many jobs ran.
    pub ran: usize,
    /// The jobs that failed when run alone, with their errors: each is
    /// still leased to the runner, until its lease ends.
    pub failed: Vec<(Job, CommerceError)>,
}

/// Runs `jobs`, due by `now`, in units of work of `BATCH` jobs each, all at
/// once (`run_group` each); what they did together.
pub(crate) async fn run_groups(
    store: &Store,
    rules: &Rules,
    jobs: &[Job],
    owner: &str,
    lease_now: Timestamp,
    now: Timestamp,
) -> GroupRun {
    let units = jobs
        .chunks(BATCH as usize)
        .map(|group| run_group(store, rules, group, owner, lease_now, now));
    let mut all = GroupRun::default();
    for run in futures::future::join_all(units).await {
        all.ran += run.ran;
        all.failed.extend(run.failed);
    }
    all
}

/// Runs `group`, jobs due by `now`, as one unit of work: each job leased
/// to `owner` (its lease free at `lease_now`) inside the unit, with its
/// effects, events and deletion, and one commit for all; how many ran,
/// and which failed. Jobs that fall due together (a month's renewals) so
/// pay for one commit, not two each, and a crash leaves all of them or
/// none. When any job of the group fails, the unit is rolled back and
/// each job runs alone (`run_leased`), so one job's failure never holds
/// back another's.
pub(crate) async fn run_group(
    store: &Store,
    rules: &Rules,
    group: &[Job],
    owner: &str,
    lease_now: Timestamp,
    now: Timestamp,
) -> GroupRun {
    if group.is_empty() {
        return GroupRun::default();
    }
    match try_group(store, rules, group, owner, lease_now, now).await {
        Ok(ran) => {
            return GroupRun {
                ran,
                failed: Vec::new(),
            }
        }
        Err(e) => {
            tracing::debug!(jobs = group.len(), error = %e, "a group of jobs failed; running each alone");
        }
    }
    let mut run = GroupRun::default();
    for job in group {
        let until = lease_now.plus_seconds(LEASE_SECONDS);
        match store.lease_job(job, owner, lease_now, until).await {
            Ok(true) => match run_leased(store, rules, job, owner, now).await {
                Ok(()) => run.ran += 1,
                Err(e) => run.failed.push((job.clone(), e)),
            },
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "cannot lease a job"),
        }
    }
    run
}

async fn try_group(
    store: &Store,
    rules: &Rules,
    group: &[Job],
    owner: &str,
    lease_now: Timestamp,
    now: Timestamp,
) -> Result<usize, CommerceError> {
    let until = lease_now.plus_seconds(LEASE_SECONDS);
    let mut tx = store.begin().await?;
    let mut ran = 0;
    for job in group {
        if jobs::claim(&mut tx, job, owner, lease_now, until).await? {
            run_in(store, rules, &mut tx, job, owner, now).await?;
            ran += 1;
        }
    }
    tx.commit().await?;
    Ok(ran)
}

/// Runs a job leased to `owner` at `now`. One that failed stays leased
/// until its lease ends, then runs again.
pub(crate) async fn run_leased(
    store: &Store,
    rules: &Rules,
    job: &Job,
    owner: &str,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let run = async {
        let mut tx = store.begin().await?;
        run_in(store, rules, &mut tx, job, owner, now).await?;
        tx.commit().await?;
        Ok::<(), CommerceError>(())
    };
    run.await.inspect_err(|e| {
        tracing::warn!(kind = %job.kind, subject = %job.subject_ref, error = %e, "job failed");
    })
}

/// A job's effects, events and deletion in `tx`, at `now`.
async fn run_in(
    store: &Store,
    rules: &Rules,
    tx: &mut WriteTx,
    job: &Job,
    owner: &str,
    now: Timestamp,
) -> Result<(), CommerceError> {
    // The job goes first, so that one that schedules its own kind again for
    // the same subject (a renewal's next period end) is not kept from it.
    jobs::complete(tx, job, owner).await?;
    match job.kind.as_str() {
        START => start_refund(tx, job, now).await?,
        SETTLE => settle_refund(store, tx, job, now).await?,
        OPEN_DISPUTE => open_dispute(store, tx, job, now).await?,
        crate::timed::RENEW => crate::renewals::period_end(store, rules, tx, job, now).await?,
        crate::timed::RETRY => crate::renewals::retry(store, rules, tx, job, now).await?,
        crate::timed::WILL_END => crate::trials::will_end(tx, job, now).await?,
        other => tracing::warn!(kind = other, "unknown job dropped"),
    }
    Ok(())
}

async fn start_refund(tx: &mut WriteTx, job: &Job, now: Timestamp) -> Result<(), CommerceError> {
    let refund = refunds::lock(tx, &job.subject_ref).await?;
    let Ok(next) = refund.status.start() else {
        return Ok(()); // canceled meanwhile
    };
    refunds::set_status(tx, &refund, next, now).await?;
    let due = now.plus_millis(SETTLE_AFTER_MS);
    jobs::schedule(tx, SETTLE, &refund.refund_ref, &job.environment_ref, due).await?;
    Ok(())
}

async fn settle_refund(
    store: &Store,
    tx: &mut WriteTx,
    job: &Job,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let refund = refunds::lock(tx, &job.subject_ref).await?;
    if refund.status != RefundStatus::Pending {
        return Ok(());
    }
    let payment: PaymentRecord = store
        .get(&job.environment_ref, &refund.payment_intent_ref)
        .await?;
    let ok = !TestCard::parse(&payment.method).is_some_and(TestCard::refunds_fail);
    let next = refund
        .status
        .settle(ok)
        .map_err(|e| CommerceError::broken(format!("a pending refund: {e}")))?;
    let settled = refunds::set_status(tx, &refund, next, now).await?;
    let key = checkout_key(tx, &payment.checkout_session_ref).await?;
    let mut events = Batch::new(&job.environment_ref, payment_scope(&payment), now).keyed(&key);
    if ok {
        let order = refunds::apply_success(tx, &settled, order_status_after, now).await?;
        events.add("refund.succeeded", &settled.dto(now))?;
        if let (AccessEffect::Revoke, Some(order_ref)) = (settled.access_effect, order) {
            for entitlement in refunds::revoke_entitlements(tx, &order_ref, now).await? {
                events.add("entitlement.revoked", &entitlement.dto(now))?;
            }
        }
    } else {
        refunds::release(tx, &settled).await?;
        events.add("refund.failed", &settled.dto(now))?;
    }
    events.flush(tx).await?;
    Ok(())
}

/// Cancels the payment's scheduled refunds at `now`: a dispute opened on
/// it.
pub async fn cancel_scheduled_refunds(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    payment: &PaymentRecord,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let key = checkout_key(tx, &payment.checkout_session_ref).await?;
    let mut events = Batch::new(environment_ref, payment_scope(payment), now).keyed(&key);
    for refund in refunds::scheduled_of_payment(tx, &payment.payment_intent_ref).await? {
        let Ok(next) = refund.status.cancel() else {
            continue;
        };
        let canceled = refunds::set_status(tx, &refund, next, now).await?;
        refunds::release(tx, &canceled).await?;
        jobs::cancel(tx, START, &canceled.refund_ref).await?;
        events.add("refund.canceled", &canceled.dto(now))?;
    }
    events.flush(tx).await?;
    Ok(())
}

/// The sandbox's dispute of a `pm_card_dispute` payment.
async fn open_dispute(
    store: &Store,
    tx: &mut WriteTx,
    job: &Job,
    now: Timestamp,
) -> Result<(), CommerceError> {
    let payment: PaymentRecord = store.get(&job.environment_ref, &job.subject_ref).await?;
    let dispute_ref = Ref::generate(Prefix::Dispute);
    let body = dispute_body(
        &dispute_ref,
        &payment.payment_intent_ref,
        payment.amount,
        "chargeback",
        DisputeStatus::NeedsResponse,
        Some("fraudulent"),
        now,
        None,
    );
    let projection = Projection {
        environment_ref: &job.environment_ref,
        reference: &dispute_ref,
        status: DisputeStatus::NeedsResponse.as_str(),
        body: &body,
        occurred_at: now,
        payment_intent_ref: Some(&payment.payment_intent_ref),
    };
    let (dispute, _) = outside::project::<DisputeStatus>(tx, projection).await?;
    cancel_scheduled_refunds(tx, &job.environment_ref, &payment, now).await?;
    let record: &DisputeRecord = &dispute;
    let key = checkout_key(tx, &payment.checkout_session_ref).await?;
    let mut events = Batch::new(&job.environment_ref, payment_scope(&payment), now).keyed(&key);
    events.add("dispute.opened", &record.dto(now))?;
    events.flush(tx).await
}
