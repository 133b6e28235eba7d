//! The dispatcher's background work beside its claim loop: the gauges,
//! and the one-off fan-out of events an older version left pending, each
//! on a task of its own.

use crate::metrics as m;
use domain::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often the due-backlog and endpoint health gauges are refreshed.
const GAUGE_EVERY: Duration = Duration::from_secs(15);

/// Fans out the events an older version left pending (its embedded relay
/// queued events before fanning them out), then ends: every event now
/// reaches the store through the event queue, which fans it out in the
/// transaction that accepts it. Wakes the claim loop (`wake`) for the
/// deliveries it made.
pub(super) async fn drain_pending(store: Store, wake: Arc<Notify>, shutdown: CancellationToken) {
    while !shutdown.is_cancelled() {
        match store.dispatch().fan_out_pending(500).await {
            Ok(0) => return,
            Ok(_) => wake.notify_one(),
            Err(e) => {
                tracing::warn!(error = %e, "fanning out pending events failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Keeps the due-backlog, blocked-key and endpoint health gauges current, every
/// `GAUGE_EVERY`, on a task of its own: however long their reads take,
/// they never delay a fan-out or a wake-up of the claim loop.
pub(super) async fn gauge_loop(store: Store, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(GAUGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let refresh = async {
            match store.dispatch().due_backlog(Timestamp::now()).await {
                Ok(n) => metrics::gauge!(m::DUE_BACKLOG).set(n as f64),
                Err(e) => tracing::warn!(error = %e, "due backlog gauge not updated"),
            }
            match store.webhooks().blocked_keys(None).await {
                Ok(n) => metrics::gauge!(m::BLOCKED_KEYS).set(n as f64),
                Err(e) => tracing::warn!(error = %e, "blocked keys gauge not updated"),
            }
            if let Err(e) = m::record_endpoint_health(&store).await {
                tracing::warn!(error = %e, "endpoint health gauge not updated");
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            () = refresh => {}
        }
    }
}
