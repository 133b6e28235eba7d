//! The dispatcher's background loops: the fan-out of events left pending
//! and the gauges, each on a task of its own.

use crate::metrics as m;
use domain::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a busy fan-out gathers new events before its next batch.
const FAN_OUT_WINDOW: Duration = Duration::from_millis(5);

/// How often the fan-out looks for pending events unasked. Only the
/// embedded outbox relay leaves events pending, and it signals each batch
/// (`Store::events_enqueued`): this poll is a safety net, not the way in.
const FAN_OUT_POLL: Duration = Duration::from_secs(1);

/// How often the due-backlog and endpoint health gauges are refreshed.
const GAUGE_EVERY: Duration = Duration::from_secs(15);

/// Fans out events left pending (the outbox relay's); wakes the claim
/// loop (`wake`) when the store signals work left for it
/// (`Store::events_enqueued`).
pub(super) async fn fan_out_loop(store: Store, wake: Arc<Notify>, shutdown: CancellationToken) {
    let enqueued = store.events_enqueued();
    loop {
        match store.dispatch().fan_out_pending(500).await {
            Ok(0) => {}
            Ok(_) => {
                wake.notify_one();
                // While events keep coming, gather them for a moment: one
                // fan-out transaction per few events instead of one each,
                // which would crowd out the attempts' writes.
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(FAN_OUT_WINDOW) => {}
                }
                continue;
            }
            Err(e) => tracing::warn!(error = %e, "fan-out failed"),
        }
        // The intake fans events out as it accepts them and signals the
        // deliveries it did not hand over (due now), as the outbox relay
        // signals events left pending: wake the claim loop for them.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = enqueued.notified() => wake.notify_one(),
            _ = tokio::time::sleep(FAN_OUT_POLL) => {}
        }
    }
}

/// Keeps the due-backlog and endpoint health gauges current, every
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
