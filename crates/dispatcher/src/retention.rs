//! The retention sweep (contract 12.1): every `every`, each kind is swept
//! in batches against its cut-off at that moment (`domain::retention`),
//! until a batch comes back short or the pass has spent `PASS_BUDGET`;
//! then the oldest-age gauges are refreshed.
//!
//! The rule: a sweep never competes with live traffic for long. Each batch
//! is one short transaction of its own, of a size the store's engine
//! chooses (`store::retention`), and the sweeper yields between batches;
//! a backlog larger than a pass's budget is taken over the next passes.
//! Any number of processes may sweep one store: each row goes once.
//!
//! `sweep` is the seam tests drive: one pass at a `now` they choose.

use crate::metrics as m;
use domain::retention::{RetentionKind, RetentionPolicy};
use domain::Timestamp;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use store::{Store, StoreError};
use tokio_util::sync::CancellationToken;

/// How long one pass may sweep before it leaves the rest to the next.
const PASS_BUDGET: Duration = Duration::from_secs(20);

/// What one pass deleted, per kind (bodies: emptied).
pub type Report = BTreeMap<RetentionKind, u64>;

/// One pass at `now`: sweeps every kind (deliveries before the events they
/// keep), counts what went, and refreshes the oldest-age gauges.
pub async fn sweep(
    store: &Store,
    policy: &RetentionPolicy,
    now: Timestamp,
) -> Result<Report, StoreError> {
    let started = Instant::now();
    let mut report = Report::new();
    let batch = store.retention().batch();
    for kind in RetentionKind::ALL {
        let cutoff = policy.cutoff(kind, now);
        // Each pass starts at the oldest row; its batches go on from the
        // last one's end (`Swept::reached`).
        let mut from = 0;
        loop {
            let swept = store.retention().sweep(kind, from, cutoff, batch).await?;
            from = swept.reached.unwrap_or(from);
            for (kind, n) in swept.deleted {
                *report.entry(kind).or_default() += n;
                metrics::counter!(m::RETENTION_DELETED, "kind" => kind.as_str()).increment(n);
            }
            if !swept.full || started.elapsed() > PASS_BUDGET {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
    for kind in RetentionKind::ALL {
        let age = match store.retention().oldest(kind).await? {
            Some(oldest) => (now.millis() - oldest.millis()).max(0) as f64 / 1000.0,
            None => 0.0,
        };
        metrics::gauge!(m::RETENTION_OLDEST_AGE, "kind" => kind.as_str()).set(age);
    }
    Ok(report)
}

/// Sweeps every `every` until `shutdown` is cancelled; a failed pass is
/// logged and the next one tries again.
pub async fn run(
    store: Store,
    policy: RetentionPolicy,
    every: Duration,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match sweep(&store, &policy, Timestamp::now()).await {
            Ok(report) => {
                let total: u64 = report.values().sum();
                if total > 0 {
                    tracing::info!(deleted = ?report, "retention sweep");
                }
            }
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; retrying next pass"),
        }
    }
}
