//! The embedded event queue's intake, with group commit: callers that
//! arrive while an insert is running wait for it, then the next of them
//! writes everyone's events in one transaction. Each caller still returns
//! only once its own event is committed (or refused), so acknowledging a
//! message after `enqueue_event` stays safe.
//!
//! One transaction per event made concurrent publishers queue behind each
//! other and behind the dispatcher's writes on SQLite's single writer (the
//! dispatch benchmark's live phase topped out near 1,000 events/s).

use crate::dispatch::EventRecord;
use crate::marks::Marks;
use crate::webhooks::to_json;
use crate::{Store, StoreError};
use domain::Timestamp;
use sqlx::Row;
use std::collections::HashSet;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Event rows per INSERT statement (7 values each).
const EVENT_ROWS: usize = 100;

type Reply = oneshot::Sender<Result<bool, String>>;

/// Events waiting for the next group write, and the turn to write one.
#[derive(Default)]
pub(crate) struct GroupCommit {
    waiting: Mutex<Vec<(EventRecord, Reply)>>,
    turn: tokio::sync::Mutex<()>,
}

impl Store {
    /// Accepts an event into the embedded queue. Returns false when an event
    /// with this reference was accepted before (it is processed once).
    pub async fn enqueue_event(&self, event: &EventRecord) -> Result<bool, StoreError> {
        let (reply, mut answer) = oneshot::channel();
        self.intake
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((event.clone(), reply));
        let turn = self.intake.turn.lock().await;
        match answer.try_recv() {
            // Written by the caller that held the turn before.
            Ok(result) => return result.map_err(StoreError::Shared),
            // That caller was cancelled after taking our event: whether it
            // was committed is unknown, so the caller must try again.
            Err(oneshot::error::TryRecvError::Closed) => {
                return Err(StoreError::Shared(
                    "the shared intake write was abandoned".into(),
                ))
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
        let events: Vec<&EventRecord> = batch.iter().map(|(e, _)| e).collect();
        let outcome = self.insert_events(&events).await;
        let mut answered = HashSet::new();
        for (e, reply) in batch {
            let _ = reply.send(match &outcome {
                // A reference repeated within the batch is new only once.
                Ok(new) => Ok(new.contains(e.event_ref.as_str())
                    && answered.insert(e.event_ref.as_str().to_owned())),
                Err(err) => Err(err.to_string()),
            });
        }
        drop(turn);
        if outcome.as_ref().is_ok_and(|new| !new.is_empty()) {
            self.enqueued.notify_one();
        }
        match answer.await {
            Ok(result) => result.map_err(StoreError::Shared),
            Err(_) => Err(StoreError::Shared(
                "the intake write lost its answer".into(),
            )),
        }
    }

    /// Inserts events not accepted before, in one transaction; returns the
    /// references inserted.
    async fn insert_events(&self, events: &[&EventRecord]) -> Result<HashSet<String>, StoreError> {
        let now = Timestamp::now().millis();
        let mut new = HashSet::new();
        let mut tx = self.write_tx().await?;
        for chunk in events.chunks(EVENT_ROWS) {
            let mut marks = Marks::new(self.backend());
            let rows: Vec<String> = (0..chunk.len())
                .map(|_| format!("({}, 'pending', {})", marks.list(6), marks.next()))
                .collect();
            let sql = format!(
                "INSERT INTO events (event_ref, environment_ref, public_event_type, occurred_at, scope, \
                 data, status, received_at) VALUES {} \
                 ON CONFLICT (event_ref) DO NOTHING RETURNING event_ref",
                rows.join(", ")
            );
            let mut q = sqlx::query(&sql);
            for e in chunk {
                q = q
                    .bind(e.event_ref.as_str())
                    .bind(e.environment_ref.as_str())
                    .bind(&e.public_event_type)
                    .bind(e.occurred_at.millis())
                    .bind(to_json(&e.scope))
                    .bind(to_json(&e.data))
                    .bind(now);
            }
            for row in q.fetch_all(&mut *tx).await? {
                new.insert(row.try_get::<String, _>("event_ref")?);
            }
        }
        tx.commit().await?;
        Ok(new)
    }
}
