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
//! `insert` answers `None` and the transaction writes the batch.
//!
//! Room is asked before the write, for the deliveries of every event of
//! the batch; a room whose delivery was not inserted (its event was a
//! duplicate) is dropped, which gives it back.

use super::{candidates, event_values, events_insert, lease_rows, written, EventsWritten, Leasing};
use crate::db::marks::Marks;
use crate::db::tx::Arg;
use crate::dispatch::deliveries::{DELIVERY_COLUMNS, DELIVERY_VALUES};
use crate::dispatch::fanout::{plan_fan_out_apart, EventRow};
use crate::{Backend, Store, StoreError};
use domain::webhook::BodyStatus;
use domain::Timestamp;
use std::collections::HashSet;

/// The most events a batch written this way holds.
const EVENTS: usize = 8;
/// The most deliveries it makes.
const DELIVERIES: usize = 64;

/// The names and types of `DeliveryRow::values`, in order (PostgreSQL
/// types a `VALUES` column by its casts).
const VALUES: [(&str, &str); DELIVERY_VALUES] = [
    ("delivery_ref", "TEXT"),
    ("environment_ref", "TEXT"),
    ("endpoint_ref", "TEXT"),
    ("event_ref", "TEXT"),
    ("public_event_type", "TEXT"),
    ("dto_version", "BIGINT"),
    ("status", "TEXT"),
    ("diagnostic", "BIGINT"),
    ("next_attempt_at", "BIGINT"),
    ("occurred_at", "BIGINT"),
    ("event_data", "TEXT"),
    ("match_reasons", "TEXT"),
    ("created_at", "BIGINT"),
    ("updated_at", "BIGINT"),
    ("lease_owner", "TEXT"),
    ("lease_until", "BIGINT"),
];

/// Writes `events` and their deliveries with one statement, leasing what
/// `leasing` has room for; `None` when the batch is not one this way
/// writes (module docs), having written nothing.
pub(super) async fn insert<T>(
    store: &Store,
    events: &[EventRow],
    leasing: &mut Leasing<T>,
) -> Result<Option<EventsWritten<T>>, StoreError> {
    if store.backend() != Backend::Postgres || events.is_empty() || events.len() > EVENTS {
        return Ok(None);
    }
    let (plan, versions, url_fixed) = plan_fan_out_apart(store, events).await?;
    let mut rows = candidates(&plan);
    let fits = rows.len() <= DELIVERIES
        && rows
            .iter()
            .all(|r| url_fixed.contains(r.new.endpoint_ref.as_str()));
    if !fits {
        return Ok(None);
    }
    let now = Timestamp::now();
    let until = leasing.until(now);
    let rooms = lease_rows(&mut leasing.room, &leasing.owner, until, &mut rows);
    let mut args: Vec<Arg> = events.iter().flat_map(|e| event_values(e, now)).collect();
    for row in &rows {
        args.extend(row.values(now.millis()));
    }
    let returned = store
        .write_alone_returning(&statement(events.len(), rows.len()), &args, "written")
        .await?;
    // An event's reference is never a delivery's: their prefixes differ.
    let (new, created): (HashSet<String>, HashSet<String>) = returned
        .into_iter()
        .partition(|r| events.iter().any(|e| e.event_ref.as_str() == r));
    Ok(Some(written(&rows, rooms, &created, new, &versions, now)))
}

/// The statement for `events` events (`event_values` each) and then
/// `deliveries` deliveries (`DeliveryRow::values` each): the events not
/// accepted before, and the deliveries of those alone; it returns the
/// references written, events' and deliveries', as `written`.
pub(crate) fn statement(events: usize, deliveries: usize) -> String {
    let mut marks = Marks::new(Backend::Postgres);
    let accept = events_insert(&mut marks, events);
    if deliveries == 0 {
        return format!("WITH ev AS ({accept}) SELECT event_ref AS written FROM ev");
    }
    let rows: Vec<String> = (0..deliveries)
        .map(|_| {
            let casts: Vec<String> = VALUES
                .iter()
                .map(|(_, t)| format!("CAST({} AS {t})", marks.next()))
                .collect();
            format!("({})", casts.join(", "))
        })
        .collect();
    let names: Vec<&str> = VALUES.iter().map(|(n, _)| *n).collect();
    format!(
        "WITH ev AS ({accept}), v ({names}) AS (VALUES {rows}), \
         d AS (INSERT INTO webhook_deliveries ({DELIVERY_COLUMNS}) \
         SELECT v.delivery_ref, v.environment_ref, v.endpoint_ref, v.event_ref, \
         v.public_event_type, v.dto_version, v.status, v.diagnostic, v.next_attempt_at, \
         v.occurred_at, 1, 0, v.event_data, v.match_reasons, '{available}', NULL, \
         v.created_at, v.updated_at, v.lease_owner, v.lease_until \
         FROM v WHERE v.event_ref IN (SELECT event_ref FROM ev) \
         ON CONFLICT (event_ref, endpoint_ref, dto_version) DO NOTHING RETURNING delivery_ref) \
         SELECT event_ref AS written FROM ev UNION ALL SELECT delivery_ref FROM d",
        names = names.join(", "),
        rows = rows.join(", "),
        available = BodyStatus::Available.as_str(),
    )
}
