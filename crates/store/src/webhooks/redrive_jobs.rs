//! Redrive jobs (contract 12.2): the job rows, their selection of
//! deliveries (`count_step`) and their redrive (`redrive_step`), each step
//! one unit of work done under the job's lease, so that a job resumes where
//! it was after a restart and redrives each selected delivery once.
//!
//! The rules of a job's states are the domain's
//! (`domain::webhook::redrive_job`); the pace is the runner's
//! (`dispatcher::redrive_jobs`).

use super::deliveries::{delivery_from_row, start_generation, DeliveryFilter};
use super::endpoints::endpoint_versions_in;
use super::Webhooks;
use crate::db::codec::{opt_ts, state};
use crate::db::marks::Marks;
use crate::db::page::{Page, PageRequest};
use crate::db::read;
use crate::db::tx::{int, text, Arg, Columns, WriteTx};
use crate::lease;
use crate::resource::{Resource, Scope};
use crate::{Store, StoreError};
use domain::webhook::redrive_job::RedriveJobStatus;
use domain::webhook::{DeliveryStatus, ResponseClass};
use domain::{Prefix, Ref, Timestamp};
use serde::{Deserialize, Serialize};

/// What a job selects: a delivery filter whose `status` is `succeeded` or
/// `failed`, within one endpoint or the whole environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobFilter {
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_event_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_after: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_response_class: Option<String>,
}

impl JobFilter {
    /// Its delivery filter (values the API checked; others select nothing
    /// more than they name).
    pub fn deliveries(&self) -> DeliveryFilter {
        DeliveryFilter {
            status: DeliveryStatus::parse(&self.status),
            public_event_type: self.public_event_type.clone(),
            created_after: self.created_after.map(Timestamp::from_millis),
            created_before: self.created_before.map(Timestamp::from_millis),
            last_response_class: self
                .last_response_class
                .as_deref()
                .and_then(ResponseClass::parse),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RedriveJobRecord {
    pub redrive_job_ref: Ref,
    pub environment_ref: Ref,
    pub status: RedriveJobStatus,
    pub filter: JobFilter,
    pub reason: String,
    pub dry_run: bool,
    pub matched: i64,
    pub redriven: i64,
    pub skipped: i64,
    /// Where counting goes on from: the last delivery selected.
    pub cursor: Option<(i64, String)>,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    pub version: i64,
}

impl Resource for RedriveJobRecord {
    const TABLE: &'static str = "webhook_redrive_jobs";
    const REF_COLUMN: &'static str = "redrive_job_ref";

    fn decode(row: &dyn Columns) -> Result<Self, StoreError> {
        from_row(row)
    }
}

fn from_row(row: &dyn Columns) -> Result<RedriveJobRecord, StoreError> {
    let filter = text(row, "filter")?;
    let cursor = match (row.int("cursor_at")?, row.text("cursor_ref")?) {
        (Some(at), Some(r)) => Some((at, r)),
        _ => None,
    };
    Ok(RedriveJobRecord {
        redrive_job_ref: Ref::from_trusted(text(row, "redrive_job_ref")?),
        environment_ref: Ref::from_trusted(text(row, "environment_ref")?),
        status: state(row, "status", RedriveJobStatus::parse)?,
        filter: serde_json::from_str(&filter)
            .map_err(|e| StoreError::Corrupt(format!("redrive job filter: {e}")))?,
        reason: text(row, "reason")?,
        dry_run: int(row, "dry_run")? != 0,
        matched: int(row, "matched")?,
        redriven: int(row, "redriven")?,
        skipped: int(row, "skipped")?,
        cursor,
        created_at: Timestamp::from_millis(int(row, "created_at")?),
        finished_at: opt_ts(row, "finished_at")?,
        version: int(row, "version")?,
    })
}

/// Creates a job, `counting`, in `tx`.
pub async fn create(
    tx: &mut WriteTx,
    environment_ref: &Ref,
    filter: &JobFilter,
    reason: &str,
    dry_run: bool,
    now: Timestamp,
) -> Result<RedriveJobRecord, StoreError> {
    let filter_json = crate::db::codec::to_json(filter);
    let rows = tx
        .fetch(
            "INSERT INTO webhook_redrive_jobs (redrive_job_ref, environment_ref, status, filter, \
             reason, dry_run, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
             RETURNING *",
            &[
                Ref::generate(Prefix::RedriveJob).as_str().into(),
                environment_ref.as_str().into(),
                RedriveJobStatus::Counting.as_str().into(),
                filter_json.as_str().into(),
                reason.into(),
                i64::from(dry_run).into(),
                now.millis().into(),
            ],
        )
        .await?;
    from_row(rows.first().ok_or(StoreError::NotFound)?)
}

/// Cancels `job` if it is still open, and drops the deliveries it had yet
/// to redrive; `Conflict` if it ended meanwhile. Conditional on its state,
/// not its version: a runner's steps move the version on all the time.
pub async fn cancel(
    tx: &mut WriteTx,
    job: &RedriveJobRecord,
    next: RedriveJobStatus,
    now: Timestamp,
) -> Result<RedriveJobRecord, StoreError> {
    let rows = tx
        .fetch(
            &format!(
                "UPDATE webhook_redrive_jobs SET status = $1, finished_at = $2, updated_at = $2, \
                 {}, version = version + 1 \
                 WHERE redrive_job_ref = $3 AND status IN ('counting', 'running') RETURNING *",
                lease::RELEASE
            ),
            &[
                next.as_str().into(),
                now.millis().into(),
                job.redrive_job_ref.as_str().into(),
            ],
        )
        .await?;
    let record = from_row(rows.first().ok_or(StoreError::Conflict)?)?;
    tx.execute(
        "DELETE FROM webhook_redrive_job_items WHERE redrive_job_ref = $1",
        &[job.redrive_job_ref.as_str().into()],
    )
    .await?;
    Ok(record)
}

impl Webhooks<'_> {
    pub async fn redrive_job(
        &self,
        environment_ref: &Ref,
        redrive_job_ref: &Ref,
    ) -> Result<RedriveJobRecord, StoreError> {
        read::one(
            self.pool(),
            "SELECT * FROM webhook_redrive_jobs WHERE environment_ref = $1 AND redrive_job_ref = $2",
            &[
                environment_ref.as_str().into(),
                redrive_job_ref.as_str().into(),
            ],
            from_row,
        )
        .await
    }

    /// A page of the environment's redrive jobs, newest first.
    pub async fn list_redrive_jobs(
        &self,
        environment_ref: &Ref,
        page: &PageRequest,
    ) -> Result<Page<RedriveJobRecord>, StoreError> {
        self.0
            .list(Scope::environment(environment_ref), &[], page)
            .await
    }
}

/// What one step of a job did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    /// Deliveries selected, redriven or skipped by this step.
    pub taken: u32,
    /// The job left the state it was in (counted, or finished).
    pub moved_on: bool,
}

impl Store {
    /// Open jobs `owner` holds or may take at `now` (no other runner's
    /// lease lasts), oldest first.
    pub async fn open_redrive_jobs(
        &self,
        owner: &str,
        now: Timestamp,
        limit: u32,
    ) -> Result<Vec<RedriveJobRecord>, StoreError> {
        read::all(
            self.pool(),
            &format!(
                "SELECT * FROM webhook_redrive_jobs WHERE status IN ('counting', 'running') \
                 AND {} ORDER BY created_at LIMIT {limit}",
                lease::free_or_held_by("$1", "$2")
            ),
            &[now.millis().into(), owner.into()],
            from_row,
        )
        .await
    }

    /// Leases `job` to `owner` until `until`, if no other runner holds it
    /// at `now`; the job as leased.
    pub async fn lease_redrive_job(
        &self,
        job: &Ref,
        owner: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<Option<RedriveJobRecord>, StoreError> {
        let mut tx = self.begin().await?;
        let rows = tx
            .fetch(
                &format!(
                    "{} RETURNING *",
                    lease::take(
                        "webhook_redrive_jobs",
                        "$1",
                        "$2",
                        &format!(
                            "redrive_job_ref = $3 AND status IN ('counting', 'running') AND {}",
                            lease::free_or_held_by("$4", "$1")
                        )
                    )
                ),
                &[
                    owner.into(),
                    until.millis().into(),
                    job.as_str().into(),
                    now.millis().into(),
                ],
            )
            .await?;
        tx.commit().await?;
        rows.first().map(|row| from_row(row)).transpose()
    }

    /// Selects up to `limit` more of `job`'s deliveries, created no later
    /// than the job, after its cursor, in (created_at, delivery_ref) order;
    /// keeps them as the job's items (a dry run only counts them), and ends
    /// counting once none are left. Only under `owner`'s lease.
    pub async fn count_step(
        &self,
        job: &Ref,
        owner: &str,
        limit: u32,
        now: Timestamp,
    ) -> Result<Step, StoreError> {
        let mut tx = self.begin().await?;
        let Some(job) = current(&mut tx, job, owner, RedriveJobStatus::Counting).await? else {
            tx.rollback().await?;
            return Ok(Step::default());
        };
        let filter = job.filter.deliveries();
        let (sql, args) = step_statement(&job, &filter, limit);
        let rows = tx.fetch(&sql, &args).await?;
        let mut selected = Vec::with_capacity(rows.len());
        let mut cursor = job.cursor.clone();
        for row in &rows {
            let r = text(row, "delivery_ref")?;
            cursor = Some((int(row, "created_at")?, r.clone()));
            selected.push(r);
        }
        if !job.dry_run && !selected.is_empty() {
            let mut marks = Marks::new(tx.backend());
            let values: Vec<String> = selected
                .iter()
                .map(|_| format!("({}, {})", marks.next(), marks.next()))
                .collect();
            let mut args: Vec<Arg> = Vec::with_capacity(selected.len() * 2);
            for r in &selected {
                args.extend([
                    Arg::from(job.redrive_job_ref.as_str()),
                    Arg::from(r.as_str()),
                ]);
            }
            tx.execute(
                &format!(
                    "INSERT INTO webhook_redrive_job_items (redrive_job_ref, delivery_ref) \
                     VALUES {} ON CONFLICT DO NOTHING",
                    values.join(", ")
                ),
                &args,
            )
            .await?;
        }
        let done = selected.len() < limit as usize;
        let status = match done {
            true => job
                .status
                .counted(job.dry_run)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            false => job.status,
        };
        let counts = [
            ("matched", selected.len() as i64),
            ("redriven", 0),
            ("skipped", 0),
        ];
        record_step(&mut tx, &job, counts, status, cursor, now).await?;
        tx.commit().await?;
        Ok(Step {
            taken: selected.len() as u32,
            moved_on: done,
        })
    }

    /// Redrives up to `limit` of `job`'s items, each as
    /// `redriveWebhookDelivery` would: a `succeeded` or `failed` delivery
    /// starts a new generation (held if its endpoint is paused), any other
    /// (or one deleted since) is skipped. Each item is deleted with its
    /// redrive, in one transaction; the job succeeds once none is left.
    /// Only under `owner`'s lease.
    pub async fn redrive_step(
        &self,
        job: &Ref,
        owner: &str,
        limit: u32,
        now: Timestamp,
    ) -> Result<Step, StoreError> {
        let mut tx = self.begin().await?;
        let Some(job) = current(&mut tx, job, owner, RedriveJobStatus::Running).await? else {
            tx.rollback().await?;
            return Ok(Step::default());
        };
        let items = tx
            .fetch_texts(
                &format!(
                    "SELECT delivery_ref FROM webhook_redrive_job_items WHERE redrive_job_ref = $1 \
                     ORDER BY delivery_ref LIMIT {limit}"
                ),
                &[job.redrive_job_ref.as_str().into()],
                "delivery_ref",
            )
            .await?;
        let mut deliveries = Vec::with_capacity(items.len());
        if !items.is_empty() {
            let mut marks = Marks::new(tx.backend());
            let sql = format!(
                "SELECT * FROM webhook_deliveries WHERE environment_ref = {} AND delivery_ref IN ({})",
                marks.next(),
                marks.list(items.len())
            );
            let mut args: Vec<Arg> = vec![job.environment_ref.as_str().into()];
            args.extend(items.iter().map(|r| Arg::from(r.as_str())));
            for row in tx.fetch(&sql, &args).await? {
                deliveries.push(delivery_from_row(&row)?);
            }
        }
        let endpoint_refs: Vec<&Ref> = deliveries.iter().map(|d| &d.endpoint_ref).collect();
        let (endpoints, _) = endpoint_versions_in(&mut tx, &endpoint_refs).await?;
        // An item whose delivery is gone (retention) is skipped.
        let (mut redriven, mut skipped) = (0i64, items.len() as i64 - deliveries.len() as i64);
        for delivery in &deliveries {
            let Some(&(_, endpoint_status)) = endpoints.get(delivery.endpoint_ref.as_str()) else {
                skipped += 1;
                continue;
            };
            let Some(next) = delivery.status.redrive(endpoint_status).next_status() else {
                skipped += 1;
                continue;
            };
            start_generation(&mut tx, delivery, next).await?;
            redriven += 1;
        }
        if !items.is_empty() {
            let mut marks = Marks::new(tx.backend());
            let sql = format!(
                "DELETE FROM webhook_redrive_job_items WHERE redrive_job_ref = {} \
                 AND delivery_ref IN ({})",
                marks.next(),
                marks.list(items.len())
            );
            let mut args: Vec<Arg> = vec![job.redrive_job_ref.as_str().into()];
            args.extend(items.iter().map(|r| Arg::from(r.as_str())));
            tx.execute(&sql, &args).await?;
        }
        let done = items.len() < limit as usize;
        let status = match done {
            true => job
                .status
                .finished()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            false => job.status,
        };
        let counts = [("matched", 0), ("redriven", redriven), ("skipped", skipped)];
        let cursor = job.cursor.clone();
        record_step(&mut tx, &job, counts, status, cursor, now).await?;
        tx.commit().await?;
        Ok(Step {
            taken: items.len() as u32,
            moved_on: done,
        })
    }
}

/// The job as it is now, read and locked in `tx`, if `owner` still holds
/// it in state `status` (a cancel, or another runner's lease since, makes
/// the step a no-op).
async fn current(
    tx: &mut WriteTx,
    job: &Ref,
    owner: &str,
    status: RedriveJobStatus,
) -> Result<Option<RedriveJobRecord>, StoreError> {
    let rows = tx
        .fetch(
            &format!(
                "SELECT * FROM webhook_redrive_jobs WHERE redrive_job_ref = $1{}",
                lease::for_update(tx.backend())
            ),
            &[job.as_str().into()],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    let held = lease::is_held_by(row.text("lease_owner")?.as_deref(), owner);
    let record = from_row(row)?;
    Ok((held && record.status == status).then_some(record))
}

/// Ends a step: its counts and the job's next state, with `finished_at`
/// when that state is final.
async fn record_step(
    tx: &mut WriteTx,
    job: &RedriveJobRecord,
    counts: [(&str, i64); 3],
    status: RedriveJobStatus,
    cursor: Option<(i64, String)>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let finished = (!status.is_open()).then_some(now.millis());
    let (at, last) = cursor.unzip();
    let [(a, x), (b, y), (c, z)] = counts;
    tx.execute(
        &format!(
            "UPDATE webhook_redrive_jobs SET {a} = {a} + $1, {b} = {b} + $2, {c} = {c} + $3, \
             status = $4, cursor_at = $5, cursor_ref = $6, updated_at = $7, \
             finished_at = COALESCE($8, finished_at), version = version + 1 \
             WHERE redrive_job_ref = $9"
        ),
        &[
            x.into(),
            y.into(),
            z.into(),
            status.as_str().into(),
            at.into(),
            last.as_deref().into(),
            now.millis().into(),
            finished.into(),
            job.redrive_job_ref.as_str().into(),
        ],
    )
    .await?;
    Ok(())
}

/// The statement of a counting step of `job`: up to `limit` of its
/// deliveries (`filter`, its `JobFilter`'s), created no later than the
/// job, after its cursor, in (created_at, delivery_ref) order; and the
/// values its marks bind.
fn step_statement<'a>(
    job: &'a RedriveJobRecord,
    filter: &'a DeliveryFilter,
    limit: u32,
) -> (String, Vec<Arg<'a>>) {
    let mut args: Vec<Arg> = vec![
        job.environment_ref.as_str().into(),
        job.created_at.millis().into(),
    ];
    let mut sql = String::from(
        "SELECT delivery_ref, created_at FROM webhook_deliveries \
         WHERE environment_ref = $1 AND created_at <= $2",
    );
    if let Some(endpoint) = &job.filter.endpoint_ref {
        args.push(endpoint.as_str().into());
        sql.push_str(&format!(" AND endpoint_ref = ${}", args.len()));
    }
    sql.push_str(&filter.conditions(&mut args));
    if let Some((at, last)) = &job.cursor {
        // The `>=` bound, which the `OR` implies, is where an index that
        // orders by `created_at` starts the step's range.
        let (a, b) = (args.len() + 1, args.len() + 2);
        sql.push_str(&format!(
            " AND created_at >= ${a} AND (created_at > ${a} OR (created_at = ${a} AND delivery_ref > ${b}))"
        ));
        args.extend([Arg::from(*at), Arg::from(last.as_str())]);
    }
    sql.push_str(&format!(" ORDER BY created_at, delivery_ref LIMIT {limit}"));
    (sql, args)
}

/// The statement a counting step of `job` runs, selecting up to `limit`,
/// with the values its marks bind as text: for a check of its plan.
pub fn step_sql(job: &RedriveJobRecord, limit: u32) -> (String, Vec<String>) {
    let filter = job.filter.deliveries();
    let (sql, args) = step_statement(job, &filter, limit);
    (sql, args.iter().map(Arg::literal).collect())
}
