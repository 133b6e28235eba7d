//! PostgreSQL: a small batch of events accepted, with its deliveries, by
//! one statement committed on its own.
//!
//! Below saturation the intake's batches hold one event or a few, and the
//! transaction of `Dispatch::write_events` costs six round trips for each
//! (`BEGIN`, the read of the subscriptions, the two inserts, `COMMIT`).
//! Here it is two: the subscriptions with their endpoints are read
//! through the pool, then one statement (a data-modifying `WITH`) inserts
//! the events not accepted before and, for those alone, their
//! deliveries. A statement is atomic: an accepted event never waits for a
//! second write to fan it out, as in the transaction.
//!
//! Reading first plans what the transaction would: it reads at read
//! committed, each statement at a snapshot of its own, and locks nothing
//! it reads, so its plan is as old as this one by the time it writes.
//!
//! It applies to a prepared batch (`Dispatch::prepare_events`, which
//! read the plan) of at most `EVENTS` events and `DELIVERIES` deliveries,
//! none ordered, when every endpoint's url is fixed already (a first
//! delivery fixes it, in the transaction). Otherwise `insert` declines and
//! the transaction writes the batch, from the same plan (PostgreSQL's
//! transaction reads at read committed, so a plan read just before is the
//! one it would read).

use super::{
    decided_rows, event_values, events_insert, in_ref_order, take_rooms, written, EventsWritten,
    Parts,
};
use crate::db::marks::Marks;
use crate::db::tx::Arg;
use crate::dispatch::deliveries::{
    delivery_columns, event_data_values, EventCopies, Source, EVENT_DATA_CONFLICT, NEW_DELIVERY,
};
use crate::dispatch::fanout::EventRow;
use crate::{Backend, Store, StoreError};
use domain::Timestamp;
use std::collections::HashSet;

/// The most events a batch written this way holds.
const EVENTS: usize = 8;
/// The most deliveries it makes.
const DELIVERIES: usize = 64;

/// Writes `events` and their deliveries as `decided` (those `settled`
/// born settled) with one statement, when the batch is one this way
/// writes; `None` when it is not, and nothing was written.
pub(super) async fn insert<T>(
    store: &Store,
    events: &[EventRow],
    ((plan, versions, url_fixed), decided, rooms, settled): Parts<'_, T>,
) -> Result<Option<EventsWritten<T>>, StoreError> {
    // An event with a key is numbered in the transaction (`ordering`).
    if store.backend() != Backend::Postgres
        || events.is_empty()
        || events.len() > EVENTS
        || events.iter().any(|e| e.order.is_some())
    {
        return Ok(None);
    }
    let rows = decided_rows(plan, decided, settled);
    let fits = rows.len() <= DELIVERIES
        && rows
            .iter()
            .all(|r| url_fixed.contains(r.new.endpoint_ref.as_str()));
    if !fits {
        return Ok(None);
    }
    let now = Timestamp::now();
    let copies = EventCopies::with_events(&rows);
    let mut args: Vec<Arg> = in_ref_order(events)
        .into_iter()
        .flat_map(|e| event_values(e, now, copies.of_event(e.event_ref.as_str())))
        .collect();
    for row in &rows {
        args.extend(row.values((decided.at.millis(), now.millis())));
    }
    for (event_ref, version, data) in &copies.apart {
        args.extend([
            Arg::from(*event_ref),
            Arg::from(*version),
            Arg::from(data.as_ref()),
        ]);
    }
    let sql = statement(events.len(), rows.len(), copies.apart.len());
    let returned = store.write_alone_returning(&sql, &args, "written").await?;
    // An event's reference is never a delivery's: their prefixes differ.
    let (new, created): (HashSet<String>, HashSet<String>) = returned
        .into_iter()
        .partition(|r| events.iter().any(|e| e.event_ref.as_str() == r));
    let rooms = take_rooms(rooms);
    Ok(Some(written(
        &rows, rooms, created, new, versions, decided.at,
    )))
}

/// The statement for `events` events (`event_values` each, with the copy
/// of its data an event's row keeps), then `deliveries` deliveries
/// (`DeliveryRow::values` each), then `copies` copies of event data kept
/// apart (`EventCopies`' `apart`, three values each): the events not
/// accepted before, and the deliveries and copies of those alone; it
/// returns the references written, events' and deliveries', as `written`.
pub(crate) fn statement(events: usize, deliveries: usize, copies: usize) -> String {
    let mut marks = Marks::new(Backend::Postgres);
    let accept = events_insert(&mut marks, events);
    if deliveries == 0 {
        return format!("WITH ev AS ({accept}) SELECT event_ref AS written FROM ev");
    }
    let rows: Vec<String> = (0..deliveries)
        .map(|_| {
            let casts: Vec<String> = bound()
                .map(|(_, t)| format!("CAST({} AS {t})", marks.next()))
                .collect();
            format!("({})", casts.join(", "))
        })
        .collect();
    let names: Vec<&str> = bound().map(|(name, _)| name).collect();
    let selected: Vec<String> = NEW_DELIVERY
        .iter()
        .map(|(name, source)| match source {
            Source::Bound(_) => format!("v.{name}"),
            Source::Fixed(literal) => (*literal).to_owned(),
        })
        .collect();
    // A data-modifying `WITH` runs whether or not the query reads it.
    let apart = match copies {
        0 => String::new(),
        n => format!(
            ", c (event_ref, dto_version, data) AS (VALUES {}), \
             x AS (INSERT INTO webhook_event_data (event_ref, dto_version, data) \
             SELECT c.event_ref, c.dto_version, c.data FROM c \
             WHERE c.event_ref IN (SELECT event_ref FROM ev) {EVENT_DATA_CONFLICT})",
            event_data_values(&mut marks, n)
        ),
    };
    format!(
        "WITH ev AS ({accept}), v ({names}) AS (VALUES {rows}), \
         d AS (INSERT INTO webhook_deliveries ({columns}) SELECT {selected} \
         FROM v WHERE v.event_ref IN (SELECT event_ref FROM ev) \
         ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING RETURNING delivery_ref)\
         {apart} SELECT event_ref AS written FROM ev UNION ALL SELECT delivery_ref FROM d",
        names = names.join(", "),
        rows = rows.join(", "),
        columns = delivery_columns(),
        selected = selected.join(", "),
    )
}

/// The bound columns of a new delivery, with their types, in the order
/// of `DeliveryRow::values`.
fn bound() -> impl Iterator<Item = (&'static str, &'static str)> {
    NEW_DELIVERY
        .iter()
        .filter_map(|(name, source)| match source {
            Source::Bound(t) => Some((*name, *t)),
            Source::Fixed(_) => None,
        })
}
