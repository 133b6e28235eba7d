//! The transactional outbox: the events a write emits are rows inserted in
//! that write's own transaction (`Emit::emit`, called as `tx.emit(…)` with
//! `Emit` in scope), so they exist if and only if the write committed, and
//! its commit wakes this process's relay. A relay (`dispatcher::outbox`) reads them oldest first
//! (`outbox_batch`), hands them to the queue and only then deletes them
//! (`outbox_relayed`). A crash between handing over and deleting relays an
//! event twice, which the intake drops by its `event_ref`: at least once,
//! never lost.
//!
//! This module never talks to a queue; it only keeps the rows.

use crate::db::codec::to_json;
use crate::db::marks::Marks;
use crate::db::read;
use crate::db::tx::Arg;
use crate::dispatch::signals::Wakeups;
use crate::dispatch::{event_from_row, EventRecord};
use crate::{Store, StoreError, WriteTx};
use domain::{Ref, Timestamp};
use std::future::Future;

/// Emitting events into the outbox in a write transaction: each exists if
/// and only if the transaction commits, and the commit wakes this
/// process's relay.
pub trait Emit {
    /// Inserts `event` into the outbox.
    fn emit(&mut self, event: &EventRecord) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Emits several events with one statement.
    fn emit_all(
        &mut self,
        events: &[EventRecord],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

impl Emit for WriteTx {
    async fn emit(&mut self, event: &EventRecord) -> Result<(), StoreError> {
        self.emit_all(std::slice::from_ref(event)).await
    }

    async fn emit_all(&mut self, events: &[EventRecord]) -> Result<(), StoreError> {
        insert(self.inner(), events).await
    }
}

/// The outbox's columns, in the order every insert binds them.
pub(crate) const COLUMNS: &str = "event_ref, environment_ref, public_event_type, occurred_at, \
     scope, data, created_at, ordering_key, sequence";

/// The values of an event's columns up to `data` (`COLUMNS`), its scope
/// given as JSON text.
pub(crate) fn leading_args<'a>(event: &'a EventRecord, scope: &'a str) -> [Arg<'a>; 5] {
    [
        event.event_ref.as_str().into(),
        event.environment_ref.as_str().into(),
        event.public_event_type.as_str().into(),
        event.occurred_at.millis().into(),
        scope.into(),
    ]
}

/// The values of an event's key and sequence (the last of `COLUMNS`).
pub(crate) fn order_args(event: &EventRecord) -> [Arg<'_>; 2] {
    let order = event.order.as_ref();
    [
        order.map(|o| o.key.as_str()).into(),
        order.and_then(|o| o.sequence).into(),
    ]
}

/// Inserts `events` into the outbox with one statement, on the inner
/// transaction, numbering those with a key first (`ordering::number`):
/// also what a function run at the commit uses (`invoice_numbers`).
pub(crate) async fn insert(
    tx: &mut store_db::WriteTx,
    events: &[EventRecord],
) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let mut numbered;
    let events = if events
        .iter()
        .any(|e| e.order.as_ref().is_some_and(|o| o.sequence.is_none()))
    {
        numbered = events.to_vec();
        crate::dispatch::ordering::number(tx, &mut numbered).await?;
        &numbered[..]
    } else {
        events
    };
    const PER_ROW: usize = 9;
    let now = Timestamp::now().millis();
    let scopes: Vec<String> = events.iter().map(|e| to_json(&e.scope)).collect();
    let mut marks = Marks::new(tx.backend());
    let rows: Vec<String> = (0..events.len())
        .map(|_| format!("({})", marks.list(PER_ROW)))
        .collect();
    let mut args: Vec<Arg<'_>> = Vec::with_capacity(events.len() * PER_ROW);
    for (event, scope) in events.iter().zip(&scopes) {
        args.extend(leading_args(event, scope));
        args.extend::<[Arg<'_>; 2]>([event.data.as_str().into(), now.into()]);
        args.extend(order_args(event));
    }
    tx.execute(
        &format!("INSERT INTO outbox ({COLUMNS}) VALUES {}", rows.join(", ")),
        &args,
    )
    .await?;
    wake_relay_on_commit(tx);
    Ok(())
}

/// Wakes this process's relay when `tx` commits: it wrote into the outbox.
pub(crate) fn wake_relay_on_commit(tx: &mut store_db::WriteTx) {
    if let Some(outbox) = tx.signals::<Wakeups>().map(|wake| wake.outbox.clone()) {
        tx.wake_on_commit(&outbox);
    }
}

impl Store {
    /// Signalled after this process emitted events, so its relay starts at
    /// once instead of at its next poll (never, for a store without
    /// `Wakeups`).
    pub fn outbox_written(&self) -> std::sync::Arc<tokio::sync::Notify> {
        self.wake
            .as_ref()
            .map_or_else(Default::default, |wake| wake.outbox.clone())
    }

    /// Up to `limit` emitted events not relayed yet, oldest first.
    pub async fn outbox_batch(&self, limit: u32) -> Result<Vec<EventRecord>, StoreError> {
        read::all(
            self.pool(),
            &format!("SELECT * FROM outbox ORDER BY created_at, event_ref LIMIT {limit}"),
            &[],
            |row| event_from_row(row),
        )
        .await
    }

    /// Deletes events the queue has confirmed.
    pub async fn outbox_relayed(&self, refs: &[&Ref]) -> Result<(), StoreError> {
        if refs.is_empty() {
            return Ok(());
        }
        let mut tx = self.begin().await?;
        delete(&mut tx, refs).await?;
        tx.commit().await
    }
}

async fn delete(tx: &mut WriteTx, refs: &[&Ref]) -> Result<(), StoreError> {
    let sql = format!(
        "DELETE FROM outbox WHERE event_ref IN ({})",
        Marks::new(tx.backend()).list(refs.len())
    );
    let args: Vec<Arg> = refs.iter().map(|r| Arg::from(r.as_str())).collect();
    tx.execute(&sql, &args).await?;
    Ok(())
}
