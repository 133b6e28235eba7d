//! Reads for the operator console (contract 12.3) that no API operation
//! answers: an endpoint's attempts summed per time bucket (its success
//! rate and latency charts) and the deliveries of one event (its search
//! by `event_ref`). Both are scoped by environment like every other read,
//! and both are served by indexes: attempts by
//! `webhook_attempts_by_endpoint_status` (endpoint, status, started_at),
//! deliveries by the unique key that starts with `event_ref`.

use super::deliveries::delivery_from_row;
use super::Webhooks;
use crate::db::read;
use crate::db::tx::{int, Arg};
use crate::{DeliveryRecord, StoreError};
use domain::webhook::AttemptStatus;
use domain::{Ref, Timestamp};

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
                |row| {
                    Ok((
                        int(row, "bucket")?,
                        int(row, "attempts")?,
                        int(row, "total_ms")?,
                        int(row, "max_ms")?,
                    ))
                },
            )
            .await?;
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
            "SELECT * FROM webhook_deliveries WHERE event_ref = $1 AND environment_ref = $2 \
             ORDER BY created_at DESC, delivery_ref DESC LIMIT $3",
            &[
                event_ref.as_str().into(),
                environment_ref.as_str().into(),
                i64::from(limit).into(),
            ],
            delivery_from_row,
        )
        .await
    }
}
