//! Reads for the operator console (contract 12.3) that no API operation
//! answers: an endpoint's attempts summed per time bucket (its success
//! rate and latency charts), the deliveries of one event (its search by
//! `event_ref`) and the newest deliveries of every endpoint at once (its
//! deliveries page before an endpoint is chosen). Each is scoped by
//! environment like every other read, and each is served by indexes:
//! attempts by `webhook_attempts_by_endpoint_status` (endpoint, status,
//! started_at) and the successes deliveries keep on their rows by
//! `webhook_deliveries_successes_by_endpoint` (endpoint, last attempt
//! time; migration 0036), an event's deliveries by the unique key that starts with
//! `event_ref`, the environment's by `webhook_deliveries_by_env`
//! (environment, created_at; migrations 0024, 0035) or, under the
//! failed status, `webhook_deliveries_failed_by_env` (migration 0034;
//! `tests/tests/console_plans.rs` checks their plans).

use super::deliveries::{delivery_from_row, DeliveryFilter};
use super::Webhooks;
use crate::db::page::{Page, PageRequest};
use crate::db::read;
use crate::db::tx::{int, Arg, Columns};
use crate::{DeliveryRecord, StoreError};
use domain::webhook::AttemptStatus;
use domain::{Ref, Timestamp};

/// The statement of `Webhooks::deliveries_of_event`: the event (`$1`), the
/// environment (`$2`), at most `$3`.
pub const DELIVERIES_OF_EVENT: &str =
    "SELECT * FROM webhook_deliveries WHERE event_ref = $1 AND environment_ref = $2 \
     ORDER BY created_at DESC, delivery_ref DESC LIMIT $3";

/// `attempt_activity`'s statement for the successes deliveries keep on
/// their rows (`webhooks::attempts`): the endpoint (`$1`), from `$2` on,
/// in buckets of `$3` milliseconds, in the environment `$4`; by
/// `webhook_deliveries_successes_by_endpoint`, whose predicate is in the
/// text word for word.
pub const KEPT_ACTIVITY: &str =
    "SELECT (last_attempt_at - $2) / $3 AS bucket, COUNT(*) AS attempts, \
     CAST(SUM(success_duration_ms) AS BIGINT) AS total_ms, MAX(success_duration_ms) AS max_ms \
     FROM webhook_deliveries WHERE endpoint_ref = $1 AND success_duration_ms IS NOT NULL \
     AND last_attempt_at >= $2 AND environment_ref = $4 GROUP BY 1";

/// One row of `attempt_activity`'s statements: a bucket's index, its
/// attempts, the sum and the longest of their durations.
type BucketSums = (i64, i64, i64, i64);

fn bucket_sums(row: &dyn Columns) -> Result<BucketSums, StoreError> {
    Ok((
        int(row, "bucket")?,
        int(row, "attempts")?,
        int(row, "total_ms")?,
        int(row, "max_ms")?,
    ))
}

/// Adds attempts that ended in `status` into their buckets; those past the
/// last bucket are left out.
fn add_sums(out: &mut [ActivityBucket], rows: Vec<BucketSums>, status: AttemptStatus) {
    for (bucket, attempts, total_ms, max_ms) in rows {
        let Some(b) = usize::try_from(bucket).ok().and_then(|i| out.get_mut(i)) else {
            continue;
        };
        match status {
            AttemptStatus::Succeeded => b.succeeded += attempts,
            AttemptStatus::Failed => b.failed += attempts,
        }
        b.total_ms += total_ms;
        b.max_ms = b.max_ms.max(max_ms);
    }
}

/// The attempts of one endpoint that started in one time bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivityBucket {
    /// Attempts that ended in a 2xx answer.
    pub succeeded: i64,
    /// Attempts that did not.
    pub failed: i64,
    /// The sum of every attempt's duration.
    pub total_ms: i64,
    /// The longest attempt.
    pub max_ms: i64,
}

impl ActivityBucket {
    pub fn attempts(&self) -> i64 {
        self.succeeded + self.failed
    }
}

impl Webhooks<'_> {
    /// The endpoint's attempts that started from `since` on, summed in
    /// `buckets` consecutive buckets of `bucket_ms` each (the first starts
    /// at `since`); attempts past the last bucket are left out.
    pub async fn attempt_activity(
        &self,
        environment_ref: &Ref,
        endpoint_ref: &Ref,
        since: Timestamp,
        bucket_ms: i64,
        buckets: usize,
    ) -> Result<Vec<ActivityBucket>, StoreError> {
        let mut out = vec![ActivityBucket::default(); buckets];
        let bucket_ms = bucket_ms.max(1);
        for status in [AttemptStatus::Succeeded, AttemptStatus::Failed] {
            let args: Vec<Arg> = vec![
                endpoint_ref.as_str().into(),
                status.as_str().into(),
                since.millis().into(),
                bucket_ms.into(),
                environment_ref.as_str().into(),
            ];
            let rows = read::all(
                self.pool(),
                "SELECT (started_at - $3) / $4 AS bucket, COUNT(*) AS attempts, \
                 CAST(SUM(duration_ms) AS BIGINT) AS total_ms, MAX(duration_ms) AS max_ms \
                 FROM webhook_attempts \
                 WHERE endpoint_ref = $1 AND status = $2 AND started_at >= $3 \
                 AND environment_ref = $5 GROUP BY 1",
                &args,
                bucket_sums,
            )
            .await?;
            add_sums(&mut out, rows, status);
        }
        let args: Vec<Arg> = vec![
            endpoint_ref.as_str().into(),
            since.millis().into(),
            bucket_ms.into(),
            environment_ref.as_str().into(),
        ];
        let kept = read::all(self.pool(), KEPT_ACTIVITY, &args, bucket_sums).await?;
        add_sums(&mut out, kept, AttemptStatus::Succeeded);
        Ok(out)
    }

    /// The deliveries of the event `event_ref` (one per endpoint and dto
    /// version), newest first, at most `limit`.
    pub async fn deliveries_of_event(
        &self,
        environment_ref: &Ref,
        event_ref: &Ref,
        limit: u32,
    ) -> Result<Vec<DeliveryRecord>, StoreError> {
        read::all(
            self.pool(),
            DELIVERIES_OF_EVENT,
            &[
                event_ref.as_str().into(),
                environment_ref.as_str().into(),
                i64::from(limit).into(),
            ],
            delivery_from_row,
        )
        .await
    }

    /// A page of the deliveries of every endpoint of the environment that
    /// meet `filter`, newest first (`environment_deliveries_sql` is its
    /// statement): the console's deliveries page before an endpoint is
    /// chosen. The same filters and order as an endpoint's list
    /// (`Webhooks::list_deliveries`), its status written into the text
    /// so that a planner may use the partial index of failed deliveries;
    /// a page is one range of an index however many deliveries and
    /// endpoints the environment has (under `pending` a planner may
    /// rather sort the live backlog, from `webhook_deliveries_due_at`,
    /// when it is small).
    pub async fn environment_deliveries(
        &self,
        environment_ref: &Ref,
        filter: &DeliveryFilter,
        page: &PageRequest,
    ) -> Result<Page<DeliveryRecord>, StoreError> {
        let (sql, args) = environment_statement(environment_ref.as_str(), filter, page);
        let mut items = read::all(self.pool(), &sql, &args, delivery_from_row).await?;
        let has_more = items.len() > page.limit as usize;
        items.truncate(page.limit as usize);
        Ok(Page { items, has_more })
    }
}

/// The statement of `Webhooks::environment_deliveries` and its values: the
/// environment (`$1`), the filter's values, then the cursor's `(at, key)`.
///
/// `db::page::page_sql`'s keyset, with one more condition that changes no
/// result: `created_at <= at`, a bound of the index's range. Its
/// `created_at < at OR (…)` alone is no range a planner seeks to, so a
/// later page would read through every delivery newer than it first.
fn environment_statement<'a>(
    environment_ref: &'a str,
    filter: &'a DeliveryFilter,
    page: &'a PageRequest,
) -> (String, Vec<Arg<'a>>) {
    let mut args: Vec<Arg> = vec![environment_ref.into()];
    let conditions = filter.conditions(&mut args);
    let mut sql =
        format!("SELECT * FROM webhook_deliveries WHERE environment_ref = $1{conditions}");
    if let Some((at, key)) = &page.after {
        let (a, b) = (args.len() + 1, args.len() + 2);
        sql.push_str(&format!(
            " AND created_at <= ${a} AND (created_at < ${a} OR (created_at = ${a} AND delivery_ref < ${b}))"
        ));
        args.extend([Arg::from(*at), Arg::from(key.as_str())]);
    }
    sql.push_str(&format!(
        " ORDER BY created_at DESC, delivery_ref DESC LIMIT {}",
        u64::from(page.limit) + 1
    ));
    (sql, args)
}

/// The statement `Webhooks::environment_deliveries` runs for `filter` and
/// `page`, with the values its marks bind, as text (`'…'` for text, in
/// mark order): for a check of its plan.
pub fn environment_deliveries_sql(
    environment_ref: &str,
    filter: &DeliveryFilter,
    page: &PageRequest,
) -> (String, Vec<String>) {
    let (sql, args) = environment_statement(environment_ref, filter, page);
    let values = args.iter().map(Arg::literal).collect();
    (sql, values)
}
