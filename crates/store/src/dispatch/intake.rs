//! The event queue's intake, with group commit: callers that arrive while
//! the group writes in flight run (`TURNS`) wait for one to end, then the
//! next of them writes everyone's events in one transaction, together with
//! their deliveries (the fan-out, `crate::fanout`), so an accepted event is
//! never left waiting for a second transaction to fan it out. Each caller
//! still returns only once its own event is committed (or refused), so
//! acknowledging a message after `enqueue_event` stays safe.
//!
//! The rule: concurrent callers share a transaction; the intake never
//! spends a transaction (and, on SQLite, a turn of the single writer) per
//! event, which would make publishers queue behind each other and behind
//! the dispatcher's writes. A failed group write fails every caller of the
//! group with the group's own error (`StoreError::Shared`).

use crate::db::marks::Marks;
use crate::db::tx::Arg;
use crate::dispatch::fanout::{plan_fan_out, EventRow};
use crate::dispatch::handoff::HandedOver;
use crate::dispatch::{insert_deliveries, DeliveryRow, EventRecord};
use crate::error::LaneError;
use crate::DeliveryRecord;
use crate::{Store, StoreError};
use domain::webhook::{BodyStatus, DeliveryStatus};
use domain::Timestamp;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Event rows per INSERT statement (7 values each).
const EVENT_ROWS: usize = 100;

/// A caller's answer: whether its event was new, or the group write's error.
type Reply = oneshot::Sender<Result<bool, Arc<StoreError>>>;

/// Group writes in flight at once: while one writes, the next has taken its
/// batch and waits for the writer, and the events that arrive meanwhile
/// gather for the one after.
const TURNS: usize = 2;

/// Events waiting for the next group write, and the turns to write one.
pub(crate) struct GroupCommit {
    waiting: Mutex<Vec<(EventRow, Reply)>>,
    turns: Arc<tokio::sync::Semaphore>,
}

impl Default for GroupCommit {
    fn default() -> GroupCommit {
        GroupCommit {
            waiting: Mutex::default(),
            turns: Arc::new(tokio::sync::Semaphore::new(TURNS)),
        }
    }
}

impl Store {
    /// Accepts an event into the embedded queue. Returns false when an event
    /// with this reference was accepted before (it is processed once).
    pub async fn enqueue_event(&self, event: &EventRecord) -> Result<bool, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        // Serialised here, on the caller's task: the lane has only to write.
        let row = EventRow::from(event);
        self.intake
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((row, reply));
        let turn = self
            .intake
            .turns
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LaneError::IntakeClosed)?;
        match answer.try_recv() {
            // Written by a caller that held a turn before.
            Ok(result) => return result.map_err(StoreError::Shared),
            // That caller was cancelled after taking our event (PostgreSQL
            // only: on SQLite the write and its answers run on the lane,
            // whoever waits): whether it was committed is unknown, so the
            // caller must try again.
            Err(oneshot::error::TryRecvError::Closed) => {
                return Err(LaneError::Unanswered.into());
            }
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        let batch = std::mem::take(
            &mut *self
                .intake
                .waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        if batch.is_empty() {
            // Our event is in the other turn's write.
            drop(turn);
            return match answer.await {
                Ok(result) => result.map_err(StoreError::Shared),
                Err(_) => Err(LaneError::Unanswered.into()),
            };
        }
        // The write, its answers and the turn go to the lane together, so
        // that the batch is answered even if this caller stops waiting.
        let store = self.clone();
        let written = self.on_lane(async move {
            let (events, replies): (Vec<EventRow>, Vec<Reply>) = batch.into_iter().unzip();
            let outcome = store.insert_events(&events).await;
            let left_due = matches!(outcome, Ok((_, true)));
            // One error for the whole group, shared by its callers.
            let outcome = outcome.map(|(new, _)| new).map_err(Arc::new);
            let mut answered = HashSet::new();
            for (e, reply) in events.iter().zip(replies) {
                let _ =
                    reply.send(match &outcome {
                        // A reference repeated within the batch is new only once.
                        Ok(new) => Ok(new.contains(e.event_ref.as_str())
                            && answered.insert(e.event_ref.as_str())),
                        Err(cause) => Err(cause.clone()),
                    });
            }
            drop(turn);
            // Deliveries handed over need no claim: the dispatcher is woken
            // (and claims) only for those left due in the store.
            if left_due {
                store.enqueued.notify_one();
            }
            Ok(())
        });
        written.await?;
        match answer.await {
            Ok(result) => result.map_err(StoreError::Shared),
            Err(_) => Err(LaneError::Unanswered.into()),
        }
    }

    /// Inserts events not accepted before and their deliveries, in one
    /// transaction; returns the references inserted. Subscriptions are read
    /// for the whole batch inside that transaction (on SQLite,
    /// synchronously on the lane's connection), never through the pool
    /// before it: the group write waits on no other thread for what it
    /// plans with, and plans from the snapshot it writes in. Deliveries due
    /// now that this process's dispatcher has room for are born leased to
    /// it and handed over after the commit (`crate::handoff`).
    ///
    /// Also returns whether any delivery was left due in the store (not
    /// handed over) for a claim to find.
    async fn insert_events(
        &self,
        events: &[EventRow],
    ) -> Result<(HashSet<String>, bool), StoreError> {
        let mut tx = self.begin_write().await?;
        let (plan, versions, url_fixed) = plan_fan_out(&mut tx, self.backend(), events).await?;
        let handoff = self.handoff.get();
        let now = Timestamp::now();
        let mut new = HashSet::new();
        let mut candidates: Vec<(&str, DeliveryRow)> = Vec::new();
        let mut planned = HashSet::new();
        for (event_ref, deliveries) in &plan {
            // Each event once even if the batch repeats it.
            if planned.insert(event_ref.as_str()) {
                candidates.extend(
                    deliveries
                        .iter()
                        .map(|d| (event_ref.as_str(), DeliveryRow::unleased(d))),
                );
            }
        }
        for chunk in events.chunks(EVENT_ROWS) {
            let mut marks = Marks::new(self.backend());
            let rows: Vec<String> = (0..chunk.len())
                .map(|_| {
                    let columns = marks.list(5);
                    let (received, processed) = (marks.next(), marks.next());
                    format!("({columns}, 'processed', {received}, {processed})")
                })
                .collect();
            // Processed at once, so without its data: the deliveries
            // written below carry it (migration 0010).
            let sql = format!(
                "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
                 status, received_at, processed_at) VALUES {} \
                 ON CONFLICT (event_ref) DO NOTHING RETURNING event_ref",
                rows.join(", ")
            );
            let mut args: Vec<Arg> = Vec::with_capacity(chunk.len() * 7);
            for e in chunk {
                args.extend::<[Arg; _]>([
                    e.event_ref.as_str().into(),
                    e.environment_ref.as_str().into(),
                    e.public_event_type.as_str().into(),
                    e.occurred_at.millis().into(),
                    e.scope_json.as_str().into(),
                    now.millis().into(),
                    now.millis().into(),
                ]);
            }
            new.extend(tx.fetch_texts(&sql, &args, "event_ref").await?);
        }
        // Only new events fan out: a duplicate's deliveries were made when
        // it was first accepted.
        let lease = handoff.as_ref().map(|h| {
            let until = now.plus_millis(h.lease().as_millis() as i64);
            (h.owner(), until.millis())
        });
        let mut rows = Vec::new();
        let mut tickets = Vec::new();
        for (event_ref, mut row) in candidates {
            if !new.contains(event_ref) {
                continue;
            }
            if let Some(h) = handoff
                .as_ref()
                .filter(|_| row.new.status == DeliveryStatus::Pending)
            {
                if let Some(ticket) = h.reserve(&row.new.endpoint_ref) {
                    row.lease = lease;
                    tickets.push((rows.len(), ticket));
                }
            }
            rows.push(row);
        }
        let created =
            insert_deliveries(&mut tx, self.backend(), &rows, now.millis(), &url_fixed).await?;
        let left: Vec<(domain::Ref, Timestamp)> = rows
            .iter()
            .filter(|r| {
                r.lease.is_none()
                    && r.new.status == DeliveryStatus::Pending
                    && created.contains(r.delivery_ref.as_str())
            })
            .map(|r| (r.delivery_ref.clone(), now))
            .collect();
        let left_due = !left.is_empty();
        // With no dispatcher here to index them, other processes' are told.
        if left_due && handoff.is_none() {
            tx.signal_due().await?;
        }
        tx.commit().await?;
        if let Some(h) = &handoff {
            if left_due {
                h.left_due(left);
            }
            let handed: Vec<HandedOver> = tickets
                .into_iter()
                .filter(|(i, _)| created.contains(rows[*i].delivery_ref.as_str()))
                .map(|(i, ticket)| {
                    let row = &rows[i];
                    HandedOver {
                        delivery: leased_record(row, now),
                        endpoint_version: versions
                            .get(row.new.endpoint_ref.as_str())
                            .map_or(0, |(v, _)| *v),
                        ticket,
                    }
                })
                .collect();
            if !handed.is_empty() {
                h.take(handed);
            }
        }
        Ok((new, left_due))
    }
}

/// The record of a delivery just inserted from `row` at `now`, as a claim
/// would have read it back.
fn leased_record(row: &DeliveryRow, now: Timestamp) -> DeliveryRecord {
    let d = row.new;
    DeliveryRecord {
        delivery_ref: row.delivery_ref.clone(),
        environment_ref: d.environment_ref.clone(),
        endpoint_ref: d.endpoint_ref.clone(),
        event_ref: d.event_ref.clone(),
        public_event_type: d.public_event_type.clone(),
        dto_version: d.dto_version,
        status: d.status,
        diagnostic: d.diagnostic,
        generation: 1,
        attempt_count: 0,
        next_attempt_at: Some(now),
        last_attempt_at: None,
        occurred_at: d.occurred_at,
        event_data: d.event_data.clone(),
        match_reasons: row.match_reasons.clone(),
        body_status: BodyStatus::Available,
        payload: None,
        created_at: now,
        updated_at: now,
        version: 1,
    }
}
