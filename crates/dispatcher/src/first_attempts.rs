//! Fresh deliveries attempted before they are written: the event queue's
//! group write (`crate::queue`) with this process's dispatcher.
//!
//! The store prepares the group (`store::Prepared`: the plan read, the
//! deliveries with room leased); the leased ones to quick endpoints
//! (`Intake::is_quick`) start at once, and those to quick endpoints that
//! got no room start as their endpoint's slots free, until shortly before
//! `FIRST_ATTEMPTS`. The write waits up to `FIRST_ATTEMPTS` for their
//! results: each first success is born settled, one row inserted once,
//! instead of a row inserted leased and rewritten by its record. Those
//! still in flight then, or that failed, are written leased and recorded
//! as any attempt; the rest are handed over after the commit, or left due.
//!
//! Nothing is acknowledged before the write, so a write that fails, or a
//! crash before it, brings the events back, and their deliveries keep
//! their references (`store::Leasing::reference_key`): a receiver may see a
//! `webhook-id` twice, never two for one delivery. Within a process not
//! even that: a success whose write failed is kept (`Unwritten`) and
//! written settled when its event comes back, not sent again.
//!
//! It owns no SQL, and never records a result itself: every result goes to
//! the store with the write, or to the recorder once the write committed
//! (`handoff::Ticket::written_leased`).

use crate::handoff::{BeforeWrite, HandedOver, Intake, Ticket, Written};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::fanout::EventRow;
use store::{AttemptResult, EventsWritten, Store, StoreError};
use tokio::sync::oneshot;

/// How long a group write waits for the attempts made before it: a quick
/// endpoint answers well within it; one that does not is written leased
/// and recorded when it answers.
const FIRST_ATTEMPTS: Duration = Duration::from_millis(200);

/// How long a success whose write failed is kept for its event's return,
/// and how many are kept at most.
const KEPT_FOR: Duration = Duration::from_secs(600);
const KEPT_AT_MOST: usize = 10_000;

/// Successes of attempts made before a write that failed, by delivery
/// reference (module docs).
#[derive(Default)]
pub struct Unwritten(Mutex<HashMap<String, (Instant, AttemptResult)>>);

impl Unwritten {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, AttemptResult)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The kept successes of any of `refs`, taken out.
    fn take(&self, refs: &[domain::Ref]) -> Vec<AttemptResult> {
        let mut kept = self.lock();
        if kept.is_empty() {
            return Vec::new();
        }
        refs.iter()
            .filter_map(|r| kept.remove(r.as_str()))
            .map(|(_, result)| result)
            .collect()
    }

    /// Keeps `results`, successes whose write failed.
    fn keep(&self, results: Vec<AttemptResult>) {
        let mut kept = self.lock();
        let now = Instant::now();
        kept.retain(|_, (at, _)| now.duration_since(*at) < KEPT_FOR);
        for r in results {
            if kept.len() >= KEPT_AT_MOST {
                break;
            }
            kept.insert(r.delivery_ref.to_string(), (now, r));
        }
    }
}

/// Writes a group of events with this process's dispatcher (module docs).
pub(crate) async fn write(
    store: &Store,
    intake: &Arc<Intake>,
    unwritten: &Unwritten,
    events: Vec<EventRow>,
) -> Result<EventsWritten<Ticket>, StoreError> {
    let dispatch = store.dispatch();
    let mut prepared = dispatch.prepare_events(events, intake.leasing()).await?;
    let mut attempted = unwritten.take(prepared.delivery_refs());
    let done: HashSet<String> = attempted
        .iter()
        .map(|r| r.delivery_ref.to_string())
        .collect();
    let quick = |endpoint: &domain::Ref| intake.is_quick(endpoint);
    // A delivery attempted before: its room goes back, its row is born
    // settled by the kept result.
    let first: Vec<HandedOver> = prepared
        .take_leased(quick)
        .into_iter()
        .filter(|h| !done.contains(h.delivery.delivery_ref.as_str()))
        .collect();
    let mut roomless = prepared.roomless(quick);
    roomless.retain(|r| !done.contains(r.delivery_ref.as_str()));
    if first.is_empty() && roomless.is_empty() {
        return written(store, prepared, attempted, unwritten).await;
    }
    let deadline = tokio::time::Instant::now() + FIRST_ATTEMPTS;
    let (mut reports, mut verdicts) = (Vec::new(), Vec::new());
    let mut before_write = |mut h: HandedOver| {
        let (report, reported) = oneshot::channel();
        let (verdict, heard) = oneshot::channel();
        h.room.before_write = Some(BeforeWrite {
            report,
            verdict: heard,
        });
        reports.push(reported);
        verdicts.push((h.delivery.delivery_ref.clone(), verdict));
        h
    };
    intake.take(first.into_iter().map(&mut before_write).collect());
    // The others start as their endpoint's slots free, while a result can
    // still come back in time.
    let mut waiting = tokio::task::JoinSet::new();
    for r in roomless {
        let (intake, until) = (intake.clone(), deadline - FIRST_ATTEMPTS / 4);
        waiting.spawn(async move {
            let room = intake.reserve_by(&r.endpoint_ref, until).await;
            (r, room)
        });
    }
    while let Some(joined) = waiting.join_next().await {
        if let Ok((r, Some(room))) = joined {
            let h = before_write(prepared.lease(r, room));
            intake.take(vec![h]);
        }
    }
    for reported in reports {
        // A report dropped unsent: the attempt never started.
        if let Ok(Ok(result)) = tokio::time::timeout_at(deadline, reported).await {
            attempted.push(result);
        }
    }
    let written = written(store, prepared, attempted, unwritten).await;
    if let Ok(w) = &written {
        for (delivery_ref, verdict) in verdicts {
            let r = delivery_ref.as_str();
            if w.settled.contains(r) {
                let _ = verdict.send(Written::Settled);
            } else if w.created.contains(r) {
                let _ = verdict.send(Written::Leased);
            }
        }
    }
    written
}

/// Writes the prepared group with the results `attempted`; keeps its
/// successes if the write failed.
async fn written(
    store: &Store,
    prepared: store::Prepared<Ticket>,
    attempted: Vec<AttemptResult>,
    unwritten: &Unwritten,
) -> Result<EventsWritten<Ticket>, StoreError> {
    let kept: Vec<AttemptResult> = attempted
        .iter()
        .filter(|r| r.settles_at_birth())
        .cloned()
        .collect();
    let written = store.dispatch().write_prepared(prepared, attempted).await;
    if written.is_err() {
        unwritten.keep(kept);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::webhook::{AttemptStatus, DeliveryStatus};
    use domain::{Prefix, Ref, Timestamp};

    fn success() -> AttemptResult {
        AttemptResult {
            delivery_ref: Ref::generate(Prefix::WebhookDelivery),
            environment_ref: Ref::generate(Prefix::Environment),
            endpoint_ref: Ref::generate(Prefix::WebhookEndpoint),
            generation: 1,
            attempt_number: 1,
            status: AttemptStatus::Succeeded,
            response_status: Some(204),
            error: None,
            response_body_excerpt: None,
            duration_ms: 3,
            started_at: Timestamp::now(),
            next_attempt_at: None,
            delivery_status: DeliveryStatus::Succeeded,
            payload: store::Payload::Rebuilt,
            disable_endpoint: false,
            ordered_key: None,
            pushback: None,
        }
    }

    #[test]
    fn a_kept_success_is_taken_once_by_its_delivery() {
        let unwritten = Unwritten::default();
        let (a, b) = (success(), success());
        unwritten.keep(vec![a.clone(), b.clone()]);
        let other = Ref::generate(Prefix::WebhookDelivery);
        assert!(unwritten.take(std::slice::from_ref(&other)).is_empty());
        let taken = unwritten.take(&[a.delivery_ref.clone(), other]);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].delivery_ref, a.delivery_ref);
        assert!(unwritten.take(&[a.delivery_ref]).is_empty(), "taken once");
        assert_eq!(unwritten.take(&[b.delivery_ref]).len(), 1);
    }

    #[test]
    fn at_most_so_many_are_kept() {
        let unwritten = Unwritten::default();
        unwritten.keep((0..KEPT_AT_MOST + 5).map(|_| success()).collect());
        assert_eq!(unwritten.lock().len(), KEPT_AT_MOST);
    }
}
