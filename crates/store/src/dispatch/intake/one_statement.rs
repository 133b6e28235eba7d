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
//! It applies to at most `EVENTS` events and `DELIVERIES` deliveries, for
//! a dispatcher that leases here (without one, deliveries left due are
//! signalled in the transaction), when every endpoint's url is fixed
//! already (a first delivery fixes it, in the transaction). Otherwise
//! `insert` declines and the transaction writes the batch, from the plan
//! read here if there is one (PostgreSQL's transaction reads at read
//! committed, so a plan read just before is the one it would read).
//!
//! Room is asked before the write, for the deliveries of every event of
//! the batch; a room whose delivery was not inserted (its event was a
//! duplicate) is dropped, which gives it back.

use super::{
    candidates, event_values, events_insert, in_ref_order, lease_rows, written, EventsWritten,
    Leasing,
};
use crate::db::marks::Marks;
use crate::db::tx::Arg;
use crate::dispatch::deliveries::{
    delivery_columns, event_data_values, EventCopies, Source, EVENT_DATA_CONFLICT, NEW_DELIVERY,
};
use crate::dispatch::fanout::{plan_fan_out_apart, EventRow, Planned};
use crate::{Backend, Store, StoreError};
use domain::Timestamp;
use std::collections::HashSet;

/// The most events a batch written this way holds.
const EVENTS: usize = 8;
/// The most deliveries it makes.
const DELIVERIES: usize = 64;

/// What `insert` did.
pub(super) enum Tried<T> {
    Written(EventsWritten<T>),
    /// The batch is not one this way writes (module docs); nothing was
    /// written. The plan, when it was read already: the transaction
    /// writes from it rather than read it again.
    Declined(Option<Planned>),
}

/// Writes `events` and their deliveries with one statement, leasing what
/// `leasing` has room for, when the batch is one this way writes.
pub(super) async fn insert<T>(
    store: &Store,
    events: &[EventRow],
    leasing: &mut Leasing<T>,
) -> Result<Tried<T>, StoreError> {
    // An event with a key is numbered in the transaction (`ordering`).
    if store.backend() != Backend::Postgres
        || events.is_empty()
        || events.len() > EVENTS
        || events.iter().any(|e| e.order.is_some())
    {
        return Ok(Tried::Declined(None));
    }
    let (plan, versions, url_fixed) = plan_fan_out_apart(store, events).await?;
    let mut rows = candidates(&plan);
    let fits = rows.len() <= DELIVERIES
        && rows
            .iter()
            .all(|r| url_fixed.contains(r.new.endpoint_ref.as_str()));
    if !fits {
        drop(rows);
        return Ok(Tried::Declined(Some((plan, versions, url_fixed))));
    }
    let now = Timestamp::now();
    let until = leasing.until(now);
    let rooms = lease_rows(&mut leasing.room, &leasing.owner, until, &mut rows);
    let copies = EventCopies::with_events(&rows);
    let mut args: Vec<Arg> = in_ref_order(events)
        .into_iter()
        .flat_map(|e| event_values(e, now, copies.of_event(e.event_ref.as_str())))
        .collect();
    for row in &rows {
        args.extend(row.values(now.millis()));
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
    Ok(Tried::Written(written(
        &rows, rooms, &created, new, &versions, now,
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
