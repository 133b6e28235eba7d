//! Writes attempt results in batches: one transaction for up to
//! `MAX_BATCH` results, so a busy dispatcher does not pay one commit per
//! attempt. In a fleet it then clears the batch's Redis leases and puts
//! its retries into the Redis schedule, due at their time. A result is
//! never dropped for an outage: while the store is unavailable the batch
//! waits for it (and the dispatcher, its results channel full, waits too).
//! Other failures are retried a few times; then the deliveries' leases
//! expire and their attempts are made again (at-least-once).

use crate::redis_schedule::RedisSchedule;
use std::sync::Arc;
use std::time::Duration;
use store::dispatch::operational::Announce;
use store::{AttemptResult, Store};
use tokio::sync::{mpsc, Notify};

pub const MAX_BATCH: usize = 256;

/// How long a batch waits for more results before it is written. Under a
/// light load this decides how many results share a commit (at 100
/// attempts/s, two or three instead of one each); nothing waits for the
/// record but the lease, which outlives it by far.
const WINDOW: Duration = Duration::from_millis(20);

/// A retry due this soon after its record wakes the claim loop at once;
/// later ones are found by its next claim.
const DUE_SOON: i64 = 50;

pub async fn run(
    store: Store,
    owner: String,
    mut results: mpsc::Receiver<AttemptResult>,
    recorded: Arc<Notify>,
    redis: Option<Arc<RedisSchedule>>,
    announce: Arc<dyn Announce>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = results.recv().await {
        batch.push(first);
        // Results trickle in under a steady load: gather them for a moment
        // so that recording takes one transaction per window, not one per
        // attempt, leaving the writer to intake and fan-out. The attempt's
        // receiver already has the request; only the record waits.
        let window = tokio::time::sleep(WINDOW);
        tokio::pin!(window);
        while batch.len() < MAX_BATCH {
            tokio::select! {
                r = results.recv() => match r {
                    Some(r) => batch.push(r),
                    None => break,
                },
                _ = &mut window => break,
            }
        }
        let released = record(&store, &owner, &batch, &announce).await;
        // A result the store dropped (its lease was lost) schedules a stale
        // member at worst, which a claim skips. An ordered key's next
        // delivery, released by its predecessor's success, is due now.
        let now = domain::Timestamp::now().millis();
        let retries: Vec<(String, i64)> = batch
            .iter()
            .filter(|a| a.delivery_status == domain::webhook::DeliveryStatus::Pending)
            .filter_map(|a| Some((a.delivery_ref.to_string(), a.next_attempt_at?.millis())))
            .chain(released.iter().map(|r| (r.to_string(), now)))
            .collect();
        if let Some(r) = &redis {
            let refs: Vec<String> = batch.iter().map(|a| a.delivery_ref.to_string()).collect();
            if let Err(e) = r.finish(&refs, &retries).await {
                tracing::warn!(error = %e, "clearing Redis leases failed; they expire by themselves");
            }
        }
        let soon = domain::Timestamp::now().millis() + DUE_SOON;
        if retries.iter().any(|(_, due)| *due <= soon) {
            recorded.notify_one();
        }
        batch.clear();
    }
}

/// Writes `batch`, waiting out an unavailable store however long it
/// lasts, and giving up on any other failure after `OTHER_FAILURES` tries;
/// returns the ordered deliveries its successes released.
async fn record(
    store: &Store,
    owner: &str,
    batch: &[AttemptResult],
    announce: &Arc<dyn Announce>,
) -> Vec<domain::Ref> {
    const OTHER_FAILURES: u32 = 8;
    let mut backoff = Duration::from_millis(50);
    let mut failures = 0;
    loop {
        match store
            .dispatch()
            .record_attempts(owner, batch, announce.clone())
            .await
        {
            Ok(recorded) => return recorded.released,
            Err(e) if e.is_unavailable() => {
                tracing::warn!(error = %e, "recording attempts: the store is unavailable; waiting");
            }
            Err(e) if failures + 1 < OTHER_FAILURES => {
                failures += 1;
                tracing::warn!(error = %e, "recording attempts failed; retrying");
            }
            Err(e) => {
                tracing::error!(error = %e, count = batch.len(), "attempt results not recorded; their leases will expire and they will be retried");
                return Vec::new();
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}
